/* FluxTransformer2DModel internals shared with FluxPipeline (flux_pipeline.c): the rotary tables
 * computed once per run from the ids, and the forward over given tables (so a compiled step
 * keeps them as constants). */
#ifndef EMBER_DIFFUSION_FLUX_IMPL_H
#define EMBER_DIFFUSION_FLUX_IMPL_H

#include "ember/flux.h"

/* FluxPosEmbed of the ids [txt_ids; img_ids] (host f32, L and T rows of n_axes columns): cos
 * and sin [1, L + T, attention_head_dim] f32 on the model's device in the caller's scope, in the
 * rotate-half layout of de-interleaved heads (each pair's frequency at j and j + hd / 2), each
 * value cos(pos * freq) computed in f64 and rounded to f32 as diffusers does. False with the
 * error in c. */
bool flux_rope_tables(em_ctx *c, const em_flux *m, const float *txt_ids, int64_t L,
                      const float *img_ids, int64_t T, em_tensor **cos_out, em_tensor **sin_out);
/* em_flux_forward with the tables of flux_rope_tables instead of in->img_ids / in->txt_ids
 * (ignored). */
em_tensor *flux_forward_tables(em_ctx *c, em_flux *m, const em_flux_inputs *in, em_tensor *cos,
                               em_tensor *sin);

#endif

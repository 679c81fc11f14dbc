/* model_index.json from bytes in memory: for the fuzz target (fuzz/fuzz_model_index.c). */
#ifndef EMBER_DIFFUSION_PIPELINE_IMPL_H
#define EMBER_DIFFUSION_PIPELINE_IMPL_H

#include "ember/compile.h"
#include "ember/diffusion.h"
#include "ember/dit.h"
#include "ember/torch_rng.h"

/* em_pipeline_index_load on the text[0..len) of a model_index.json: `file` names it in errors,
 * `dir` is the folder whose component sub-folders are checked. out is zeroed on failure. */
em_status em_pipeline_index_parse(em_ctx *c, const char *text, size_t len, const char *file,
                                  const char *dir, em_pipeline_index *out);

/* DiTPipeline.__call__'s denoising loop from the initial latents x ([1, C, H, W] on the
 * transformer's device, a reference this takes over): classifier-free guidance on a doubled
 * batch when guidance > 1, as diffusers runs it. Returns the final latents [1, C, H, W] (a
 * reference) or NULL with the error in c. */
em_tensor *dit_pipeline_denoise(em_ctx *c, em_dit *dit, em_scheduler *s,
                                const em_pipeline_run_params *rp, em_torch_generator *g,
                                em_tensor *x);

#endif

/* AutoencoderKL internals shared by vae.c and vae_tiling.c. */
#ifndef EMBER_DIFFUSION_VAE_IMPL_H
#define EMBER_DIFFUSION_VAE_IMPL_H

#include "ember/vae.h"

/* The decoder or the encoder on one input, unchecked, in the current scope. */
typedef em_tensor *(*vae_tile_fn)(em_ctx *c, const em_vae *v, em_tensor *x);

/* diffusers' tiled_decode / _tiled_encode over x [N, C, H, W]: tiles of side in_tile every
 * int(in_tile * (1 - overlap)) pixels, each through fn, blended with the (already blended) tile
 * above and to the left over int(out_tile * overlap) output pixels, cropped to out_tile minus
 * that, concatenated. The result is in the current scope; NULL with the context's error. */
em_tensor *vae_tiled(em_ctx *c, const em_vae *v, em_tensor *x, int64_t in_tile, int64_t out_tile,
                     double overlap, vae_tile_fn fn);

#endif

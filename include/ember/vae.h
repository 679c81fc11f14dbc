/*
 * ember/vae.h — diffusers' AutoencoderKL, the VAE of Stable Diffusion pipelines (diffusers
 * 0.42: models/autoencoders/autoencoder_kl.py and vae.py's Encoder / Decoder).
 *
 * A pipeline folder holds it as `vae/` (config.json + diffusion_pytorch_model.safetensors):
 *
 *     em_vae *vae = em_vae_load(c, "sd15/vae", NULL, EM_F32);   // NULL: the context's device
 *     const em_vae_config *cfg = em_vae_get_config(vae);
 *     // decoding: the pipelines' vae.decode(latents / scaling_factor)
 *     em_tensor *z = em_div_scalar(c, latents, cfg->scaling_factor);
 *     em_tensor *image = em_vae_decode(c, vae, z);            // [N, out_channels, 8h, 8w]
 *     // encoding: vae.encode(image).latent_dist
 *     em_vae_latent_dist d;
 *     if (em_vae_encode(c, vae, image, &d) == EM_OK)
 *         latents = em_vae_latent_sample(c, &d, noise);        // mean + exp(logvar / 2) * noise
 *     em_vae_free(vae);
 *
 * Errors: every function that can fail records the error in the caller's context (naming the
 * file, the field or tensor, the shapes) and returns NULL or a status; a call made while the
 * context holds an error fails at once (ember/core.h). Tensors returned are in the caller's
 * current scope. A loaded VAE is immutable and may be used from several threads, each with its
 * own em_ctx.
 */
#ifndef EMBER_VAE_H
#define EMBER_VAE_H

#include "ember/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Most down (and up) blocks an AutoencoderKL may have. */
#define EM_VAE_MAX_BLOCKS 8
/** Most resnets per encoder block (layers_per_block; decoder blocks have one more). */
#define EM_VAE_MAX_LAYERS 32

/** The config.json of an AutoencoderKL, defaults filled as diffusers fills them. Plain data. */
typedef struct em_vae_config {
    int64_t in_channels, out_channels; /* image channels into encode / out of decode */
    int64_t latent_channels;
    int n_blocks;                      /* len(block_out_channels) = len(down/up_block_types) */
    int64_t block_out_channels[EM_VAE_MAX_BLOCKS];
    int64_t layers_per_block;
    char act_fn[16];                   /* the resnets' "silu", "swish", "gelu", "relu" */
    int64_t norm_num_groups;
    int64_t sample_size[2];            /* (height, width), metadata (tiling) */
    double scaling_factor;             /* pipelines: latents * scaling_factor into the UNet */
    bool has_shift_factor;             /* shift_factor given (false: null) */
    double shift_factor;               /* SD3 / Flux: (latents - shift) * scale */
    bool use_quant_conv, use_post_quant_conv;
    bool mid_block_add_attention;
    bool force_upcast;                 /* the pipelines run the VAE in f32 for f16 models */
    /* latents_mean / latents_std given (false: absent or null); when set, each was checked to be
     * latent_channels numbers. Only whether they are set is kept: diffusers' SDXL pipelines then
     * decode latents * std / scaling_factor + mean, which Ember refuses rather than applies. */
    bool has_latents_mean, has_latents_std;
} em_vae_config;

/**
 * Reads an AutoencoderKL config.json (`path` is the file or the folder holding it) into `out`.
 * Errors (nothing allocated): EM_ERR_NOT_FOUND / EM_ERR_IO (the file), EM_ERR_FORMAT (not JSON,
 * a field of the wrong type, sizes that do not agree: each naming the field and the file),
 * EM_ERR_UNSUPPORTED (named: a `_class_name` other than AutoencoderKL, a block type other than
 * DownEncoderBlock2D / UpDecoderBlock2D, an activation).
 */
EM_API em_status em_vae_config_load(em_ctx *c, const char *path, em_vae_config *out);
/** The same from json[0..n) in memory; `name` (NULL: "config.json") names it in errors. */
EM_API em_status em_vae_config_parse(em_ctx *c, const char *json, size_t n, const char *name,
                                     em_vae_config *out);

typedef struct em_vae em_vae;

/**
 * Loads an AutoencoderKL from a diffusers component folder (config.json and
 * diffusion_pytorch_model.safetensors, or its sharded index) onto `device` ("cpu", "xla:0",
 * ...; NULL: the context's default device) with weights and activations of `dtype` (f32, bf16
 * or f16; Ember does not upcast by itself: force_upcast is the caller's to honour). NULL with
 * an error naming the file and the field or tensor: the errors of em_vae_config_load,
 * EM_ERR_NOT_FOUND (no weights file, a weight missing), EM_ERR_SHAPE (a weight whose shape
 * disagrees with the config, both shapes named), EM_ERR_DTYPE, EM_ERR_DEVICE. Free with
 * em_vae_free.
 */
EM_API em_vae *em_vae_load(em_ctx *c, const char *dir, const char *device, em_dtype dtype);
/** Releases the VAE's weights. NULL is a no-op. */
EM_API void em_vae_free(em_vae *v);
/** The VAE's config (owned by the VAE). */
EM_API const em_vae_config *em_vae_get_config(const em_vae *v);
/** The device holding the VAE's weights. */
EM_API em_device *em_vae_device(const em_vae *v);

/**
 * vae.decode(z).sample: post_quant_conv (when use_post_quant_conv), then the Decoder (conv_in,
 * the mid block, the UpDecoderBlock2D blocks, group norm, SiLU, conv_out). `z` is
 * [N, latent_channels, h, w] in the VAE's dtype on its device and is taken as it is: the
 * pipelines' latents must first be divided by scaling_factor (and shifted back by
 * shift_factor when the config has one), as diffusers' pipelines call
 * vae.decode(latents / scaling_factor). Returns [N, out_channels, h * 2^(n_blocks-1),
 * w * 2^(n_blocks-1)] in the current scope (values roughly in [-1, 1], not clamped). NULL with
 * an error naming the shape at fault (EM_ERR_SHAPE, EM_ERR_DTYPE, EM_ERR_DEVICE).
 */
EM_API em_tensor *em_vae_decode(em_ctx *c, em_vae *v, em_tensor *z);

/** DiagonalGaussianDistribution's parameters: mean and logvar [N, latent_channels, h, w]. */
typedef struct em_vae_latent_dist {
    em_tensor *mean;
    em_tensor *logvar; /* clamped to [-30, 20], as diffusers clamps it */
} em_vae_latent_dist;

/**
 * vae.encode(image).latent_dist: the Encoder (conv_in, the DownEncoderBlock2D blocks, the mid
 * block, group norm, SiLU, conv_out to 2 * latent_channels), quant_conv (when use_quant_conv),
 * split into mean and logvar. `image` is [N, in_channels, H, W] in the VAE's dtype on its
 * device (pipelines pass images in [-1, 1]). Fills `out` with tensors in the current scope;
 * latents for a UNet are (sample - shift_factor) * scaling_factor, which the caller applies.
 * Errors as em_vae_decode; `out` is zeroed on failure.
 */
EM_API em_status em_vae_encode(em_ctx *c, em_vae *v, em_tensor *image, em_vae_latent_dist *out);

/**
 * DiagonalGaussianDistribution.sample(generator): mean + exp(0.5 * logvar) * noise, where
 * `noise` is the standard normal draw of the mean's shape (diffusers draws it with
 * randn_tensor from the generator; em_torch_randn draws the same numbers). noise must have the
 * mean's shape, dtype and device (EM_ERR_SHAPE / EM_ERR_DTYPE / EM_ERR_DEVICE otherwise).
 * Returns a tensor in the current scope.
 */
EM_API em_tensor *em_vae_latent_sample(em_ctx *c, const em_vae_latent_dist *d, em_tensor *noise);

/**
 * diffusers' `vae.enable_slicing()` (slicing true) / `vae.disable_slicing()`: from now on
 * em_vae_decode, em_vae_decode_tiled, em_vae_encode and em_vae_encode_tiled code a batch of N > 1
 * one image at a time and concatenate the results, so the decoder's activations are those of
 * one image; the result equals the batch's (the same computation per image). Off after load.
 * The VAE's mode, as in diffusers: do not change it while another thread codes with the VAE.
 * NULL is a no-op.
 */
EM_API void em_vae_enable_slicing(em_vae *v, bool slicing);

/** Tiled decoding and encoding, diffusers' `vae.enable_tiling()`: the input is cut into
 *  overlapping tiles, each tile goes through the decoder (encoder) alone, and neighbouring
 *  outputs are blended linearly over their overlap, so memory follows the tile, not the image.
 *  The result differs from the untiled one near the seams, exactly as diffusers' does. */
typedef struct em_vae_tiling {
    int64_t tile_sample_min_size; /* a tile's side in image pixels (diffusers: sample_size) */
    int64_t tile_latent_min_size; /* in latent pixels (sample_size / 2^(n_blocks - 1)) */
    double tile_overlap_factor;   /* the share of a tile overlapping the next (0.25) */
} em_vae_tiling;

/** diffusers' tiling defaults for this VAE: sample_size[0] (height; diffusers reads an int),
 *  sample_size[0] / 2^(n_blocks - 1), 0.25. Zeroed for a NULL VAE. */
EM_API em_vae_tiling em_vae_default_tiling(const em_vae *v);

/**
 * vae.enable_tiling(); vae.decode(z).sample with the tile sizes of `t` (NULL: the defaults):
 * a latent larger than tile_latent_min_size in height or width is decoded in tiles of that side
 * starting every tile_latent_min_size * (1 - overlap) latent pixels, each tile's output blended
 * with the tile above and the tile to its left (already blended) over tile_sample_min_size *
 * overlap pixels and cropped to tile_sample_min_size minus that; a smaller latent is decoded as
 * em_vae_decode does. Same input, output and errors as em_vae_decode, plus EM_ERR_INVALID_ARG
 * for tile sizes < 1 or an overlap outside [0, 1) that leaves no stride.
 */
EM_API em_tensor *em_vae_decode_tiled(em_ctx *c, em_vae *v, em_tensor *z, const em_vae_tiling *t);
/**
 * vae.enable_tiling(); vae.encode(image).latent_dist: the image (when larger than
 * tile_sample_min_size in height or width) encoded in tiles of that side every
 * tile_sample_min_size * (1 - overlap) pixels, the moments blended over tile_latent_min_size *
 * overlap latent pixels, then split into mean and logvar as em_vae_encode does. Errors as
 * em_vae_encode and em_vae_decode_tiled.
 */
EM_API em_status em_vae_encode_tiled(em_ctx *c, em_vae *v, em_tensor *image,
                                     const em_vae_tiling *t, em_vae_latent_dist *out);

#ifdef __cplusplus
}
#endif
#endif

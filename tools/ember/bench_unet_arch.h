/* `ember bench diffusion`'s model: the config.json of its presets, and a walk over a
 * UNet2DConditionModel's layers (diffusers 0.42's order and names) that lists every weight with
 * its shape and counts the FLOPs of one forward per kind of op (bench_unet_arch.c). */
#ifndef EMBER_BENCH_UNET_ARCH_H
#define EMBER_BENCH_UNET_ARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "ember/diffusion.h"

/* The config.json text of a preset: "sd15" (Stable Diffusion 1.5's UNet) or "tiny" (the same
 * block types at 32/64 channels, for tests). NULL for an unknown preset. */
const char *bench_unet_preset_config(const char *preset);

/* FLOPs of one forward by kind (2 per multiply-add). */
typedef struct bench_unet_flops {
    double conv3x3, conv1x1, linear, attention; /* attention: QK^T and PV of self and cross */
} bench_unet_flops;

/* Called once per weight (name, ndim, shape) in the walk. */
typedef bool (*bench_unet_param_fn)(void *user, const char *name, int ndim, const int64_t *shape);

/* Walks cfg (a conditional UNet with 3x3 convs in its resnets) on a batch of `batch` latents of
 * h x w and encoder_hidden_states of `ctx_len` tokens: param (may be NULL) for every weight, the
 * FLOPs into *flops (may be NULL). Returns false when param does, or on a config the walk does
 * not know (a block type other than plain and cross-attention). */
bool bench_unet_walk(const em_unet2d_config *cfg, int64_t batch, int64_t h, int64_t w,
                     int64_t ctx_len, bench_unet_param_fn param, void *user,
                     bench_unet_flops *flops);

#endif

/* Pieces shared by the MMDiT transformers (SD3Transformer2DModel in sd3.c,
 * FluxTransformer2DModel in flux.c): diffusers' Timesteps(256, flip_sin_to_cos=True) projection,
 * the two-layer silu MLPs (TimestepEmbedding, PixArtAlphaTextProjection), AdaLayerNorm's
 * modulation and gate, the gelu-approximate FeedForward and the per-head projection with its
 * optional qk RMSNorm. All in the caller's scope; NULL in, NULL out. */
#ifndef EMBER_DIFFUSION_MMDIT_IMPL_H
#define EMBER_DIFFUSION_MMDIT_IMPL_H

#include "diffusion/tp_impl.h"
#include "diffusion/unet_impl.h"

#define MMDIT_TIME_CHANNELS 256 /* Timesteps(num_channels=256) */

/* get_timestep_embedding's frequencies for 256 channels, downscale_freq_shift 0, rounded to f32
 * as torch computes them: [1, 128] f32 on dev, detached (release it). NULL with the error. */
em_tensor *mmdit_time_freqs(em_ctx *c, em_device *dev);
/* Timesteps(256, flip_sin_to_cos=True, shift 0) of t (0-d, [1] or [n], any numeric dtype, used
 * as f32) for n rows: cos then sin of t * freqs, [n, 256] cast to dt. */
em_tensor *mmdit_time_proj(em_ctx *c, em_tensor *freqs, em_tensor *t, int64_t n, em_dtype dt);
/* l2(silu(l1(x))): TimestepEmbedding and PixArtAlphaTextProjection(act_fn="silu") */
em_tensor *mmdit_mlp(em_ctx *c, const unet_param *l1, const unet_param *l2, em_tensor *x);
/* nn.Linear */
static inline em_tensor *mmdit_lin(em_ctx *c, const unet_param *p, em_tensor *x) {
    return em_linear(c, x, p->w, p->b);
}
/* x * (1 + scale[:, None]) + shift[:, None] for [N, D] modulations */
em_tensor *mmdit_modulate(em_ctx *c, em_tensor *x, em_tensor *shift, em_tensor *scale);
/* x + gate[:, None] * y */
em_tensor *mmdit_gated(em_ctx *c, em_tensor *x, em_tensor *gate, em_tensor *y);
/* FeedForward(activation_fn="gelu-approximate"): out(gelu_tanh(in(h))), `out` row-parallel
 * under tensor parallelism tp (diff_tp_lin_rows; in and out this rank's slices) */
em_tensor *mmdit_feed_forward(em_ctx *c, const diff_tp *tp, const unet_param *in,
                              const unet_param *out, em_tensor *h);
/* [N, T, D] -> [N, heads, T, hd] through projection w, then the head RMSNorm (eps) when norm->w
 * is set. */
em_tensor *mmdit_heads(em_ctx *c, const unet_param *w, const unet_param *norm, em_tensor *x,
                       int64_t heads, int64_t hd, double eps);
/* [N, H, T, hd] attention output -> [N, T, H * hd] */
em_tensor *mmdit_merge_heads(em_ctx *c, em_tensor *a);

/* The fields every MMDiT transformer sets up alike at load, as pointers into the model's struct
 * (cfg_heads and cfg_head_dim into its config, read once load_config has filled it). */
typedef struct mmdit_fields {
    char **dir;
    em_device **dev;
    em_dtype *dtype;
    int64_t *inner;     /* num_attention_heads * attention_head_dim */
    diff_tp *tp;
    int64_t *heads;     /* this rank's heads: num_attention_heads / tp.size */
    diff_cp *cp;        /* size 1: no context parallelism until set */
    void *cfg;          /* the model's config, filled by load_config */
    const int64_t *cfg_heads, *cfg_head_dim;
} mmdit_fields;

/* em_sd3_load_tp's and em_flux_load_tp's common setup of a freshly calloc'd model's fields f
 * (NULL when that calloc failed): diff_check_load_args, then *f->dir = strdup(dir) (EM_ERR_OOM
 * when that or the calloc failed), load_config(c, dir, f->cfg), the dtype, inner dim, tensor
 * parallelism over tp (diff_tp_init on device; num_attention_heads and 4 * inner divisible by
 * its degree), the device, the rank's heads and cp->size = 1. False with the error in c; the
 * caller then frees the model with its own free (every field is still zero or set). */
bool mmdit_load_setup(em_ctx *c, const char *op, const mmdit_fields *f, const char *dir,
                      const char *device, em_dtype dtype, em_dist *tp,
                      em_status (*load_config)(em_ctx *c, const char *dir, void *cfg));

#endif

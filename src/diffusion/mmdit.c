/* The MMDiT transformers' shared pieces (mmdit_impl.h): diffusers 0.42's Timesteps,
 * TimestepEmbedding, AdaLayerNorm modulation, FeedForward and attention head projections, and the
 * loaders' common setup. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/mmdit_impl.h"
#include "diffusion/weights.h"

em_tensor *mmdit_time_freqs(em_ctx *c, em_device *dev) {
    float f[MMDIT_TIME_CHANNELS / 2];
    float scale = (float)-log(10000.0), den = (float)(MMDIT_TIME_CHANNELS / 2);
    for (int i = 0; i < MMDIT_TIME_CHANNELS / 2; i++) f[i] = expf(scale * (float)i / den);
    em_tensor *t = em_from_host_on(c, dev, EM_F32, 2, (int64_t[]){1, MMDIT_TIME_CHANNELS / 2}, f);
    return t ? em_detach(c, t) : NULL;
}

em_tensor *mmdit_time_proj(em_ctx *c, em_tensor *freqs, em_tensor *t, int64_t n, em_dtype dt) {
    em_tensor *tf = em_expand(c, em_reshape(c, em_cast(c, t, EM_F32), 1, (int64_t[]){-1}), 1,
                              (int64_t[]){n});
    em_tensor *arg = em_mul(c, em_reshape(c, tf, 2, (int64_t[]){n, 1}), freqs);
    em_tensor *tp[2] = {em_cos(c, arg), em_sin(c, arg)};
    return em_cast(c, em_cat(c, tp, 2, 1), dt);
}

em_tensor *mmdit_mlp(em_ctx *c, const unet_param *l1, const unet_param *l2, em_tensor *x) {
    return mmdit_lin(c, l2, em_silu(c, mmdit_lin(c, l1, x)));
}

em_tensor *mmdit_modulate(em_ctx *c, em_tensor *x, em_tensor *shift, em_tensor *scale) {
    return em_add(c, em_mul(c, x, em_add_scalar(c, em_unsqueeze(c, scale, 1), 1.0)),
                  em_unsqueeze(c, shift, 1));
}

em_tensor *mmdit_gated(em_ctx *c, em_tensor *x, em_tensor *gate, em_tensor *y) {
    return em_add(c, x, em_mul(c, em_unsqueeze(c, gate, 1), y));
}

em_tensor *mmdit_feed_forward(em_ctx *c, const diff_tp *tp, const unet_param *in,
                              const unet_param *out, em_tensor *h) {
    return diff_tp_lin_rows(c, tp, out, em_gelu(c, mmdit_lin(c, in, h), true)); /* gelu-tanh */
}

em_tensor *mmdit_heads(em_ctx *c, const unet_param *w, const unet_param *norm, em_tensor *x,
                       int64_t heads, int64_t hd, double eps) {
    int64_t n = em_tensor_dim(x, 0), T = em_tensor_dim(x, 1);
    em_tensor *h = em_transpose(c, em_reshape(c, mmdit_lin(c, w, x), 4,
                                              (int64_t[]){n, T, heads, hd}), 1, 2);
    return norm && norm->w ? em_rms_norm(c, h, norm->w, eps, false) : h;
}

em_tensor *mmdit_merge_heads(em_ctx *c, em_tensor *a) {
    int64_t n = em_tensor_dim(a, 0), H = em_tensor_dim(a, 1), T = em_tensor_dim(a, 2);
    int64_t hd = em_tensor_dim(a, 3);
    return em_reshape(c, em_contiguous(c, em_transpose(c, a, 1, 2)), 3,
                      (int64_t[]){n, T, H * hd});
}

bool mmdit_load_setup(em_ctx *c, const char *op, const mmdit_fields *f, const char *dir,
                      const char *device, em_dtype dtype, em_dist *tp,
                      em_status (*load_config)(em_ctx *c, const char *dir, void *cfg)) {
    if (!diff_check_load_args(c, op, dir, dtype)) return false;
    if (!f || !(*f->dir = strdup(dir))) {
        em_ctx_fail(c, EM_ERR_OOM, op, "out of memory");
        return false;
    }
    if (load_config(c, dir, f->cfg) != EM_OK) return false;
    *f->dtype = dtype;
    *f->inner = *f->cfg_heads * *f->cfg_head_dim;
    if (!diff_tp_init(c, f->tp, tp, device, op) ||
        !diff_tp_check(c, f->tp, op, dir, "num_attention_heads", *f->cfg_heads) ||
        !diff_tp_check(c, f->tp, op, dir, "the feed-forward width (4 * inner dim)", 4 * *f->inner))
        return false;
    *f->dev = f->tp->dev;
    *f->heads = *f->cfg_heads / f->tp->size;
    f->cp->size = 1;
    return true;
}

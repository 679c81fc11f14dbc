/* UNet2DModel's building blocks (AutoencoderKL's too) as diffusers 0.42 computes them:
 * ResnetBlock2D, the attention block (Attention with _from_deprecated_attn_block and
 * AttnProcessor2_0), Downsample2D and Upsample2D — their weights loaded and checked, and their
 * forwards over Ember's eager ops. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/unet_impl.h"
#include "diffusion/weights.h"

/* ---------------------------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------------------------- */

static em_tensor *load_checked(unet_loader *l, const char *name, int ndim, const int64_t *shape) {
    diff_weights w = {l->c, l->st, l->file, l->dir, l->op, l->dtype, l->dev};
    return diff_load_checked(&w, name, ndim, shape);
}

void unet_param_free(unet_param *p) {
    em_tensor_release(p->w);
    em_tensor_release(p->b);
    p->w = p->b = NULL;
}

bool unet_load_param(unet_loader *l, unet_param *p, const char *prefix, const char *name,
                     bool has_bias, int ndim, const int64_t *shape) {
    char key[256];
    snprintf(key, sizeof key, "%s%s%s.weight", prefix, *prefix ? "." : "", name);
    p->w = l->init ? unet_init_weight(l, key, ndim, shape, false, has_bias)
                   : load_checked(l, key, ndim, shape);
    if (!p->w || !unet_record_param(l, key, p->w)) return false;
    if (!has_bias) return true;
    snprintf(key, sizeof key, "%s%s%s.bias", prefix, *prefix ? "." : "", name);
    p->b = l->init ? unet_init_weight(l, key, ndim, shape, true, true)
                   : load_checked(l, key, 1, shape);
    return p->b != NULL && unet_record_param(l, key, p->b);
}

bool unet_load_resnet(unet_loader *l, unet_resnet *r, const char *prefix, int64_t in,
                      int64_t out) {
    r->in = in;
    r->out = out;
    r->out_scale = 1.0;
    int64_t temb_out = l->scale_shift ? 2 * out : out;
    return unet_load_param(l, &r->norm1, prefix, "norm1", true, 1, (int64_t[]){in}) &&
           unet_load_param(l, &r->conv1, prefix, "conv1", true, 4, (int64_t[]){out, in, 3, 3}) &&
           (!l->temb_dim || unet_load_param(l, &r->temb_proj, prefix, "time_emb_proj", true, 2,
                                            (int64_t[]){temb_out, l->temb_dim})) &&
           unet_load_param(l, &r->norm2, prefix, "norm2", true, 1, (int64_t[]){out}) &&
           unet_load_param(l, &r->conv2, prefix, "conv2", true, 4, (int64_t[]){out, out, 3, 3}) &&
           (in == out || unet_load_param(l, &r->shortcut, prefix, "conv_shortcut", true, 4,
                                         (int64_t[]){out, in, 1, 1}));
}

bool unet_load_attn(unet_loader *l, unet_attn *a, const char *prefix, int64_t channels,
                    int64_t groups, double rescale) {
    int64_t hd = l->head_dim ? l->head_dim : channels;
    a->channels = channels;
    a->heads = channels / hd;
    a->head_dim = hd;
    a->rescale = rescale;
    a->groups = groups;
    if (a->heads < 1) {
        em_ctx_fail(l->c, EM_ERR_FORMAT, l->op,
                    "%s/config.json: attention_head_dim %lld is larger than the %lld channels of "
                    "%s", l->dir, (long long)hd, (long long)channels, prefix);
        return false;
    }
    int64_t inner = a->heads * hd;
    if (groups && !unet_load_param(l, &a->norm, prefix, "group_norm", true, 1,
                                   (int64_t[]){channels}))
        return false;
    /* checkpoints saved before diffusers 0.14 name the projections query/key/value/proj_attn */
    char q_new[256], q_old[256];
    snprintf(q_new, sizeof q_new, "%s.to_q.weight", prefix);
    snprintf(q_old, sizeof q_old, "%s.query.weight", prefix);
    bool old = l->st && !em_safetensors_has(l->st, q_new) && em_safetensors_has(l->st, q_old);
    return unet_load_param(l, &a->q, prefix, old ? "query" : "to_q", true, 2,
                           (int64_t[]){inner, channels}) &&
           unet_load_param(l, &a->k, prefix, old ? "key" : "to_k", true, 2,
                           (int64_t[]){inner, channels}) &&
           unet_load_param(l, &a->v, prefix, old ? "value" : "to_v", true, 2,
                           (int64_t[]){inner, channels}) &&
           unet_load_param(l, &a->out, prefix, old ? "proj_attn" : "to_out.0", true, 2,
                           (int64_t[]){channels, inner});
}

bool unet_alloc_block(unet_loader *l, unet_block *b, int n, bool attn) {
    b->n = n;
    b->res = calloc((size_t)n, sizeof *b->res);
    b->attn = attn ? calloc((size_t)n, sizeof *b->attn) : NULL;
    if (!b->res || (attn && !b->attn))
        return em_ctx_fail(l->c, EM_ERR_OOM, l->op, "out of memory"), false;
    return true;
}

bool unet_alloc_xformers(unet_loader *l, unet_block *b, int n) {
    b->xf = calloc((size_t)n, sizeof *b->xf);
    if (!b->xf) return em_ctx_fail(l->c, EM_ERR_OOM, l->op, "out of memory"), false;
    return true;
}

bool unet_load_folder(unet_loader *l, bool (*load)(unet_loader *l, void *user), void *user) {
    char *file = diff_weights_file(l->c, l->op, l->dir);
    l->st = file ? em_safetensors_open(l->c, file) : NULL;
    l->file = file;
    if (l->st) {
        em_scope_push(l->c);
        load(l, user);
        em_scope_pop(l->c);
        em_safetensors_free(l->st);
    }
    l->st = NULL;
    l->file = NULL;
    free(file);
    return !em_ctx_status(l->c);
}

static void resnet_free(unet_resnet *r) {
    unet_param *ps[] = {&r->norm1, &r->conv1, &r->temb_proj, &r->norm2, &r->conv2, &r->shortcut};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) unet_param_free(ps[i]);
}

void unet_block_free(unet_block *b) {
    for (int i = 0; b->res && i < b->n; i++) resnet_free(&b->res[i]);
    for (int i = 0; b->attn && i < b->n; i++) {
        unet_attn *a = &b->attn[i];
        unet_param_free(&a->norm);
        unet_param_free(&a->q);
        unet_param_free(&a->k);
        unet_param_free(&a->v);
        unet_param_free(&a->out);
    }
    for (int i = 0; b->xf && i < b->n; i++) unet_xformer_free(&b->xf[i]);
    free(b->xf);
    unet_param_free(&b->conv);
    if (b->resampler) resnet_free(b->resampler);
    free(b->res);
    free(b->attn);
    free(b->resampler);
    memset(b, 0, sizeof *b);
}

/* ---------------------------------------------------------------------------------------------
 * Forward
 * ------------------------------------------------------------------------------------------- */

unet_act unet_act_from_name(const char *name) {
    return !strcmp(name, "gelu")   ? UNET_ACT_GELU
           : !strcmp(name, "relu") ? UNET_ACT_RELU
                                   : UNET_ACT_SILU;
}

em_tensor *unet_act_apply(em_ctx *c, unet_act a, em_tensor *x) {
    switch (a) {
    case UNET_ACT_GELU: return em_gelu(c, x, false);
    case UNET_ACT_RELU: return em_relu(c, x);
    case UNET_ACT_SILU: break;
    }
    return em_silu(c, x);
}

em_tensor *unet_conv(em_ctx *c, const unet_param *p, em_tensor *x) {
    em_conv2d_params cp = em_conv2d_default_params();
    int64_t k = em_tensor_dim(p->w, 2);
    cp.padding[0] = cp.padding[1] = k / 2;
    return em_conv2d(c, x, p->w, p->b, &cp);
}

static em_tensor *group_norm(em_ctx *c, const unet_settings *s, const unet_param *p,
                             int64_t groups, em_tensor *x) {
    return em_group_norm(c, x, groups, p->w, p->b, s->eps);
}

em_tensor *unet_resnet_forward(em_ctx *c, const unet_settings *s, const unet_resnet *r,
                               em_tensor *x, em_tensor *temb) {
    em_tensor *h = unet_act_apply(c, s->act, group_norm(c, s, &r->norm1, s->groups, x));
    if (r->up) {
        int64_t H = em_tensor_dim(x, 2), W = em_tensor_dim(x, 3);
        x = em_upsample_nearest(c, x, 2 * H, 2 * W);
        h = em_upsample_nearest(c, h, 2 * H, 2 * W);
    } else if (r->down) {
        em_pool2d_params pp = em_pool2d_default_params(2);
        x = em_avg_pool2d(c, x, &pp);
        h = em_avg_pool2d(c, h, &pp);
    }
    h = unet_conv(c, &r->conv1, h);
    if (!r->temb_proj.w || !temb) { /* temb_channels=None: no time embedding at all */
        h = group_norm(c, s, &r->norm2, s->groups, h);
    } else {
        /* time_emb_proj(act(temb))[:, :, None, None] */
        em_tensor *t = em_linear(c, unet_act_apply(c, s->act, temb), r->temb_proj.w,
                                 r->temb_proj.b);
        t = em_unsqueeze(c, em_unsqueeze(c, t, -1), -1);
        if (s->scale_shift) {
            em_tensor *parts[2] = {NULL, NULL};
            if (em_split(c, t, r->out, 1, parts, 2) != 2) return NULL;
            h = group_norm(c, s, &r->norm2, s->groups, h);
            h = em_add(c, em_mul(c, h, em_add_scalar(c, parts[0], 1.0)), parts[1]);
        } else {
            h = group_norm(c, s, &r->norm2, s->groups, em_add(c, h, t));
        }
    }
    h = unet_conv(c, &r->conv2, unet_act_apply(c, s->act, h));
    if (r->shortcut.w) x = unet_conv(c, &r->shortcut, x);
    em_tensor *out = em_add(c, x, h);
    return r->out_scale == 1.0 ? out : em_div_scalar(c, out, r->out_scale);
}

em_tensor *unet_attn_forward(em_ctx *c, const unet_settings *s, const unet_attn *a,
                             em_tensor *x) {
    int64_t N = em_tensor_dim(x, 0), C = em_tensor_dim(x, 1), H = em_tensor_dim(x, 2),
            W = em_tensor_dim(x, 3), L = H * W, inner = a->heads * a->head_dim;
    em_tensor *h = x;
    if (a->norm.w) h = group_norm(c, s, &a->norm, a->groups, h);
    /* [N, C, H, W] -> [N, HW, C] */
    h = em_transpose(c, em_reshape(c, h, 3, (int64_t[]){N, C, L}), 1, 2);
    em_tensor *qkv[3];
    const unet_param *w[3] = {&a->q, &a->k, &a->v};
    for (int i = 0; i < 3; i++) {
        em_tensor *p = em_linear(c, h, w[i]->w, w[i]->b);
        qkv[i] = em_transpose(c, em_reshape(c, p, 4, (int64_t[]){N, L, a->heads, a->head_dim}),
                              1, 2);
    }
    em_sdpa_params sp = em_sdpa_default_params();
    em_tensor *o = em_sdpa(c, qkv[0], qkv[1], qkv[2], NULL, &sp); /* [N, heads, HW, hd] */
    o = em_reshape(c, em_transpose(c, o, 1, 2), 3, (int64_t[]){N, L, inner});
    o = em_linear(c, o, a->out.w, a->out.b); /* [N, HW, C] */
    o = em_reshape(c, em_transpose(c, o, 1, 2), 4, (int64_t[]){N, C, H, W});
    o = em_add(c, o, x);
    return a->rescale == 1.0 ? o : em_div_scalar(c, o, a->rescale);
}

/* zeros on the device of `like` (creation ops use the context's default device) */
static em_tensor *zeros_like_dev(em_ctx *c, em_tensor *like, int ndim, const int64_t *shape) {
    em_device *prev = em_ctx_device(c);
    em_ctx_set_device(c, em_tensor_device(like));
    em_tensor *z = em_zeros(c, em_tensor_dtype(like), ndim, shape);
    em_ctx_set_device(c, prev);
    return z;
}

em_tensor *unet_downsample(em_ctx *c, const unet_settings *s, const unet_param *conv,
                           em_tensor *x) {
    em_conv2d_params cp = em_conv2d_default_params();
    cp.stride[0] = cp.stride[1] = 2;
    int64_t pad = s->downsample_padding;
    if (pad == 0) {
        /* F.pad(x, (0, 1, 0, 1)): a zero column on the right, then a zero row at the bottom */
        int64_t N = em_tensor_dim(x, 0), C = em_tensor_dim(x, 1), H = em_tensor_dim(x, 2),
                W = em_tensor_dim(x, 3);
        em_tensor *col[2] = {x, zeros_like_dev(c, x, 4, (int64_t[]){N, C, H, 1})};
        x = em_cat(c, col, 2, 3);
        em_tensor *row[2] = {x, zeros_like_dev(c, x, 4, (int64_t[]){N, C, 1, W + 1})};
        x = em_cat(c, row, 2, 2);
    }
    cp.padding[0] = cp.padding[1] = pad;
    return em_conv2d(c, x, conv->w, conv->b, &cp);
}

em_tensor *unet_upsample(em_ctx *c, const unet_param *conv, em_tensor *x) {
    int64_t H = em_tensor_dim(x, 2), W = em_tensor_dim(x, 3);
    return unet_conv(c, conv, em_upsample_nearest(c, x, 2 * H, 2 * W));
}

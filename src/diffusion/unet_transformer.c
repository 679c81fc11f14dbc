/* UNet2DConditionModel's cross-attention blocks as diffusers 0.42 computes them:
 * Transformer2DModel (models/transformers/transformer_2d.py, continuous input, norm_type
 * layer_norm) and its BasicTransformerBlocks (models/attention.py: Attention with
 * AttnProcessor2_0, FeedForward with GEGLU), loaded and checked, and their forwards over Ember's
 * eager ops. */
#include <stdio.h>
#include <stdlib.h>

#include "diffusion/unet_impl.h"

static void tblock_free(unet_tblock *b) {
    unet_param *ps[] = {&b->norm1, &b->norm2, &b->norm3, &b->q1, &b->k1, &b->v1, &b->o1,
                        &b->q2, &b->k2, &b->v2, &b->o2, &b->ff_in, &b->ff_out};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) unet_param_free(ps[i]);
}

void unet_xformer_free(unet_xformer *x) {
    for (int i = 0; x->blocks && i < x->n; i++) tblock_free(&x->blocks[i]);
    free(x->blocks);
    unet_param_free(&x->norm);
    unet_param_free(&x->proj_in);
    unet_param_free(&x->proj_out);
    x->blocks = NULL;
    x->n = 0;
}

/* attn1 / attn2 of a block: to_q, to_k, to_v without bias (attention_bias is false in every
 * UNet2DConditionModel), to_out.0 with. */
static bool load_attention(unet_loader *l, unet_param *q, unet_param *k, unet_param *v,
                           unet_param *o, const char *prefix, int64_t dim, int64_t inner,
                           int64_t kv_dim) {
    return unet_load_param(l, q, prefix, "to_q", false, 2, (int64_t[]){inner, dim}) &&
           unet_load_param(l, k, prefix, "to_k", false, 2, (int64_t[]){inner, kv_dim}) &&
           unet_load_param(l, v, prefix, "to_v", false, 2, (int64_t[]){inner, kv_dim}) &&
           unet_load_param(l, o, prefix, "to_out.0", true, 2, (int64_t[]){dim, inner});
}

static bool load_tblock(unet_loader *l, unet_tblock *b, const char *prefix, int64_t dim,
                        int64_t cross_dim) {
    char pre[256];
    int64_t ff = 4 * dim; /* FeedForward's mult 4 */
    bool ok = unet_load_param(l, &b->norm1, prefix, "norm1", true, 1, (int64_t[]){dim}) &&
              unet_load_param(l, &b->norm2, prefix, "norm2", true, 1, (int64_t[]){dim}) &&
              unet_load_param(l, &b->norm3, prefix, "norm3", true, 1, (int64_t[]){dim});
    snprintf(pre, sizeof pre, "%.200s.attn1", prefix);
    ok = ok && load_attention(l, &b->q1, &b->k1, &b->v1, &b->o1, pre, dim, dim, dim);
    snprintf(pre, sizeof pre, "%.200s.attn2", prefix);
    ok = ok && load_attention(l, &b->q2, &b->k2, &b->v2, &b->o2, pre, dim, dim, cross_dim);
    snprintf(pre, sizeof pre, "%.200s.ff.net", prefix);
    return ok &&
           unet_load_param(l, &b->ff_in, pre, "0.proj", true, 2, (int64_t[]){2 * ff, dim}) &&
           unet_load_param(l, &b->ff_out, pre, "2", true, 2, (int64_t[]){dim, ff});
}

bool unet_load_xformer(unet_loader *l, unet_xformer *x, const char *prefix, int64_t channels,
                       int64_t heads, int64_t layers, int64_t cross_dim, int64_t groups,
                       bool linear) {
    x->channels = channels;
    x->heads = heads;
    x->head_dim = channels / heads;
    x->groups = groups;
    x->linear = linear;
    int64_t inner = x->heads * x->head_dim;
    x->blocks = calloc((size_t)layers, sizeof *x->blocks);
    if (!x->blocks) return em_ctx_fail(l->c, EM_ERR_OOM, l->op, "out of memory"), false;
    x->n = (int)layers;
    if (!unet_load_param(l, &x->norm, prefix, "norm", true, 1, (int64_t[]){channels}))
        return false;
    bool ok = linear ? unet_load_param(l, &x->proj_in, prefix, "proj_in", true, 2,
                                       (int64_t[]){inner, channels}) &&
                           unet_load_param(l, &x->proj_out, prefix, "proj_out", true, 2,
                                           (int64_t[]){channels, inner})
                     : unet_load_param(l, &x->proj_in, prefix, "proj_in", true, 4,
                                       (int64_t[]){inner, channels, 1, 1}) &&
                           unet_load_param(l, &x->proj_out, prefix, "proj_out", true, 4,
                                           (int64_t[]){channels, inner, 1, 1});
    for (int i = 0; ok && i < x->n; i++) {
        char pre[256];
        snprintf(pre, sizeof pre, "%.200s.transformer_blocks.%d", prefix, i);
        ok = load_tblock(l, &x->blocks[i], pre, inner, cross_dim);
    }
    return ok;
}

/* Attention over tokens: x [N, L, D] queries, ctx [N, S, Dc] keys and values. */
static em_tensor *attention(em_ctx *c, const unet_xformer *x, em_tensor *h, em_tensor *ctx,
                            const unet_param *q, const unet_param *k, const unet_param *v,
                            const unet_param *o) {
    int64_t N = em_tensor_dim(h, 0), L = em_tensor_dim(h, 1), S = em_tensor_dim(ctx, 1);
    int64_t inner = x->heads * x->head_dim;
    em_tensor *qh = em_reshape(c, em_linear(c, h, q->w, NULL), 4,
                               (int64_t[]){N, L, x->heads, x->head_dim});
    em_tensor *kh = em_reshape(c, em_linear(c, ctx, k->w, NULL), 4,
                               (int64_t[]){N, S, x->heads, x->head_dim});
    em_tensor *vh = em_reshape(c, em_linear(c, ctx, v->w, NULL), 4,
                               (int64_t[]){N, S, x->heads, x->head_dim});
    em_sdpa_params sp = em_sdpa_default_params(); /* scale 1/sqrt(head_dim), as diffusers */
    em_tensor *a = em_sdpa(c, em_transpose(c, qh, 1, 2), em_transpose(c, kh, 1, 2),
                           em_transpose(c, vh, 1, 2), NULL, &sp); /* [N, heads, L, hd] */
    a = em_reshape(c, em_transpose(c, a, 1, 2), 3, (int64_t[]){N, L, inner});
    return em_linear(c, a, o->w, o->b);
}

static em_tensor *tblock_forward(em_ctx *c, const unet_xformer *x, const unet_tblock *b,
                                 em_tensor *h, em_tensor *ctx) {
    const double eps = 1e-5; /* BasicTransformerBlock's norm_eps */
    em_tensor *n = em_layer_norm(c, h, b->norm1.w, b->norm1.b, eps);
    h = em_add(c, attention(c, x, n, n, &b->q1, &b->k1, &b->v1, &b->o1), h);
    n = em_layer_norm(c, h, b->norm2.w, b->norm2.b, eps);
    h = em_add(c, attention(c, x, n, ctx, &b->q2, &b->k2, &b->v2, &b->o2), h);
    n = em_layer_norm(c, h, b->norm3.w, b->norm3.b, eps);
    /* GEGLU: hidden, gate = proj(x).chunk(2, -1); hidden * gelu(gate) (erf gelu) */
    em_tensor *p = em_linear(c, n, b->ff_in.w, b->ff_in.b);
    em_tensor *parts[2] = {NULL, NULL};
    if (em_split(c, p, em_tensor_dim(p, 2) / 2, 2, parts, 2) != 2) return NULL;
    em_tensor *g = em_mul(c, parts[0], em_gelu(c, parts[1], false));
    return em_add(c, em_linear(c, g, b->ff_out.w, b->ff_out.b), h);
}

em_tensor *unet_xformer_forward(em_ctx *c, const unet_xformer *x, em_tensor *in, em_tensor *ctx) {
    if (!in) return NULL;
    int64_t N = em_tensor_dim(in, 0), C = em_tensor_dim(in, 1), H = em_tensor_dim(in, 2),
            W = em_tensor_dim(in, 3), L = H * W, inner = x->heads * x->head_dim;
    em_tensor *h = em_group_norm(c, in, x->groups, x->norm.w, x->norm.b, 1e-6);
    if (!x->linear) h = unet_conv(c, &x->proj_in, h);
    int64_t ch = x->linear ? C : inner;
    /* [N, ch, H, W] -> [N, HW, ch] */
    h = em_transpose(c, em_reshape(c, h, 3, (int64_t[]){N, ch, L}), 1, 2);
    if (x->linear) h = em_linear(c, h, x->proj_in.w, x->proj_in.b);
    for (int i = 0; i < x->n; i++) h = tblock_forward(c, x, &x->blocks[i], h, ctx);
    if (x->linear) h = em_linear(c, h, x->proj_out.w, x->proj_out.b);
    int64_t oc = x->linear ? C : inner;
    h = em_reshape(c, em_transpose(c, h, 1, 2), 4, (int64_t[]){N, oc, H, W});
    if (!x->linear) h = unet_conv(c, &x->proj_out, h);
    return em_add(c, h, in);
}

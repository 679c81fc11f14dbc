/* SD3Transformer2DModel (diffusers 0.42, models/transformers/transformer_sd3.py): PatchEmbed with
 * the stored sin-cos table centre-cropped to the input, CombinedTimestepTextProjEmbeddings, the
 * context embedder, JointTransformerBlocks (joint attention over [image; context] tokens with a
 * projection set per stream, AdaLayerNormZero on both streams, AdaLayerNormContinuous on the
 * last block's context, which is pre-only), norm_out and unpatchify, over Ember's eager ops. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/mmdit_impl.h"
#include "diffusion/tp_impl.h"
#include "diffusion/weights.h"
#include "ember/sd3.h"

#define OP "SD3Transformer2DModel"
#define TIME_CHANNELS MMDIT_TIME_CHANNELS
#define EPS 1e-6          /* every LayerNorm and the qk RMSNorms */

/* One JointTransformerBlock; `pre` (context_pre_only, the last block) has neither the
 * context's output projection nor its feed-forward, and norm1_context gives scale and shift. */
typedef struct sd3_block {
    bool pre;
    unet_param ada, ada_ctx; /* norm1.linear [6D, D]; norm1_context.linear [6D, D] (pre: [2D, D]) */
    unet_param q, k, v, out;             /* attn.to_q / to_k / to_v / to_out.0 */
    unet_param aq, ak, av, aout;         /* attn.add_{q,k,v}_proj / to_add_out */
    unet_param nq, nk, naq, nak;         /* attn.norm_q / norm_k / norm_added_q / norm_added_k */
    unet_param ff_in, ff_out, cff_in, cff_out; /* ff.net.0.proj, ff.net.2; ff_context.* */
} sd3_block;

struct em_sd3 {
    em_sd3_config cfg;
    char *dir;
    em_device *dev;
    em_dtype dtype;
    int64_t inner;
    diff_tp tp;          /* tensor parallelism (tp.g NULL: none) */
    int64_t heads;       /* this rank's attention heads (num_attention_heads / tp.size) */
    diff_cp cp;          /* context parallelism: the image tokens split (cp.g NULL: none) */
    em_tensor *freqs;    /* [1, 128] f32: Timesteps' frequencies */
    em_tensor *pos;      /* pos_embed.pos_embed [1, M * M, D] */
    unet_param patch;    /* pos_embed.proj */
    unet_param t1, t2, p1, p2; /* time_text_embed.timestep_embedder / text_embedder */
    unet_param ctx;      /* context_embedder */
    sd3_block *blocks;   /* [num_layers] */
    unet_param norm_out, proj_out;
};

const em_sd3_config *em_sd3_get_config(const em_sd3 *m) { return m ? &m->cfg : NULL; }
em_device *em_sd3_device(const em_sd3 *m) { return m ? m->dev : NULL; }
int em_sd3_tp_degree(const em_sd3 *m) { return m ? m->tp.size : 1; }
int em_sd3_cp_degree(const em_sd3 *m) { return m ? m->cp.size : 1; }

em_status em_sd3_set_context_parallel(em_ctx *c, em_sd3 *m, em_dist *cp) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!m) return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "the transformer is NULL");
    return diff_cp_set(c, &m->cp, cp, m->tp.g, m->dev, OP, m->dir);
}

em_status em_sd3_set_cp_degrees(em_ctx *c, em_sd3 *m, int ring_degree, int ulysses_degree) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!m) return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "the transformer is NULL");
    return diff_cp_set_degrees(c, &m->cp, ring_degree, ulysses_degree, OP, m->dir);
}

em_status em_sd3_set_cp_schedule(em_ctx *c, em_sd3 *m, em_cp_schedule s) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!m) return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "the transformer is NULL");
    return diff_cp_set_schedule(c, &m->cp, s, OP, m->dir);
}

void em_sd3_free(em_sd3 *m) {
    if (!m) return;
    diff_cp_free(&m->cp);
    for (int64_t i = 0; m->blocks && i < m->cfg.num_layers; i++) {
        sd3_block *b = &m->blocks[i];
        unet_param *ps[] = {&b->ada, &b->ada_ctx, &b->q, &b->k, &b->v, &b->out, &b->aq,
                            &b->ak, &b->av, &b->aout, &b->nq, &b->nk, &b->naq, &b->nak,
                            &b->ff_in, &b->ff_out, &b->cff_in, &b->cff_out};
        for (size_t j = 0; j < sizeof ps / sizeof ps[0]; j++) unet_param_free(ps[j]);
    }
    free(m->blocks);
    unet_param *ps[] = {&m->patch, &m->t1, &m->t2, &m->p1, &m->p2, &m->ctx, &m->norm_out,
                        &m->proj_out};
    for (size_t j = 0; j < sizeof ps / sizeof ps[0]; j++) unet_param_free(ps[j]);
    em_tensor_release(m->pos);
    em_tensor_release(m->freqs);
    free(m->dir);
    free(m);
}

/* ---------------------------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------------------------- */

static bool make_freqs(em_ctx *c, em_sd3 *m) {
    return (m->freqs = mmdit_time_freqs(c, m->dev)) != NULL;
}

/* Tensor parallelism: each stream's q/k/v and feed-forward up projection by rows, its output
 * projection and feed-forward down projection by columns (a pre-only block has no context
 * output nor context feed-forward). */
static bool shard_block(em_ctx *c, const em_sd3 *m, sd3_block *b) {
    const diff_tp *t = &m->tp;
    unet_param *cols[] = {&b->q, &b->k, &b->v, &b->aq, &b->ak, &b->av, &b->ff_in, &b->cff_in};
    unet_param *rows[] = {&b->out, &b->aout, &b->ff_out, &b->cff_out};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        if (cols[i]->w && !diff_tp_shard(c, t, cols[i], false, NULL, 0)) return false;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rows[i]->w && !diff_tp_shard(c, t, rows[i], true, NULL, 0)) return false;
    return true;
}

static bool load_block(unet_loader *l, em_sd3 *m, int64_t i) {
    sd3_block *b = &m->blocks[i];
    int64_t D = m->inner, hd = m->cfg.attention_head_dim, ff = 4 * D; /* FeedForward(mult=4) */
    const int64_t *DD = (int64_t[]){D, D};
    b->pre = i == m->cfg.num_layers - 1;
    char pre[64];
    snprintf(pre, sizeof pre, "transformer_blocks.%lld", (long long)i);
    unet_loader hl = diff_tp_loader(l, &m->tp), *h = &hl; /* the split weights */
    if (!unet_load_param(l, &b->ada, pre, "norm1.linear", true, 2, (int64_t[]){6 * D, D}) ||
        !unet_load_param(l, &b->ada_ctx, pre, "norm1_context.linear", true, 2,
                         (int64_t[]){(b->pre ? 2 : 6) * D, D}) ||
        !unet_load_param(h, &b->q, pre, "attn.to_q", true, 2, DD) ||
        !unet_load_param(h, &b->k, pre, "attn.to_k", true, 2, DD) ||
        !unet_load_param(h, &b->v, pre, "attn.to_v", true, 2, DD) ||
        !unet_load_param(h, &b->out, pre, "attn.to_out.0", true, 2, DD) ||
        !unet_load_param(h, &b->aq, pre, "attn.add_q_proj", true, 2, DD) ||
        !unet_load_param(h, &b->ak, pre, "attn.add_k_proj", true, 2, DD) ||
        !unet_load_param(h, &b->av, pre, "attn.add_v_proj", true, 2, DD) ||
        !unet_load_param(h, &b->ff_in, pre, "ff.net.0.proj", true, 2, (int64_t[]){ff, D}) ||
        !unet_load_param(h, &b->ff_out, pre, "ff.net.2", true, 2, (int64_t[]){D, ff}))
        return false;
    if (m->cfg.qk_norm_rms &&
        (!unet_load_param(l, &b->nq, pre, "attn.norm_q", false, 1, &hd) ||
         !unet_load_param(l, &b->nk, pre, "attn.norm_k", false, 1, &hd) ||
         !unet_load_param(l, &b->naq, pre, "attn.norm_added_q", false, 1, &hd) ||
         !unet_load_param(l, &b->nak, pre, "attn.norm_added_k", false, 1, &hd)))
        return false;
    if (!b->pre &&
        (!unet_load_param(h, &b->aout, pre, "attn.to_add_out", true, 2, DD) ||
         !unet_load_param(h, &b->cff_in, pre, "ff_context.net.0.proj", true, 2,
                          (int64_t[]){ff, D}) ||
         !unet_load_param(h, &b->cff_out, pre, "ff_context.net.2", true, 2,
                          (int64_t[]){D, ff})))
        return false;
    return shard_block(l->c, m, b);
}

static bool load_weights(unet_loader *l, void *user) {
    em_sd3 *m = user;
    const em_sd3_config *cfg = &m->cfg;
    int64_t D = m->inner, p = cfg->patch_size, M = cfg->pos_embed_max_size;
    if (!unet_load_param(l, &m->patch, "pos_embed", "proj", true, 4,
                         (int64_t[]){D, cfg->in_channels, p, p}))
        return false;
    /* the table is a buffer stored with the weights (persistent when pos_embed_max_size) */
    diff_weights w = {l->c, l->st, l->file, l->dir, l->op, l->dtype, l->dev};
    if (!(m->pos = diff_load_checked(&w, "pos_embed.pos_embed", 3, (int64_t[]){1, M * M, D})))
        return false;
    if (!unet_load_param(l, &m->t1, "time_text_embed.timestep_embedder", "linear_1", true, 2,
                         (int64_t[]){D, TIME_CHANNELS}) ||
        !unet_load_param(l, &m->t2, "time_text_embed.timestep_embedder", "linear_2", true, 2,
                         (int64_t[]){D, D}) ||
        !unet_load_param(l, &m->p1, "time_text_embed.text_embedder", "linear_1", true, 2,
                         (int64_t[]){D, cfg->pooled_projection_dim}) ||
        !unet_load_param(l, &m->p2, "time_text_embed.text_embedder", "linear_2", true, 2,
                         (int64_t[]){D, D}) ||
        !unet_load_param(l, &m->ctx, "", "context_embedder", true, 2,
                         (int64_t[]){D, cfg->joint_attention_dim}))
        return false;
    for (int64_t i = 0; i < cfg->num_layers; i++)
        if (!load_block(l, m, i)) return false;
    return unet_load_param(l, &m->norm_out, "norm_out", "linear", true, 2,
                           (int64_t[]){2 * D, D}) &&
           unet_load_param(l, &m->proj_out, "", "proj_out", true, 2,
                           (int64_t[]){p * p * cfg->out_channels, D});
}

/* em_sd3_config_load for mmdit_load_setup */
static em_status load_config(em_ctx *c, const char *dir, void *cfg) {
    return em_sd3_config_load(c, dir, cfg);
}

em_sd3 *em_sd3_load(em_ctx *c, const char *dir, const char *device, em_dtype dtype) {
    return em_sd3_load_tp(c, dir, device, dtype, NULL);
}

em_sd3 *em_sd3_load_tp(em_ctx *c, const char *dir, const char *device, em_dtype dtype,
                       em_dist *tp) {
    if (!c || em_ctx_status(c)) return NULL;
    em_sd3 *m = calloc(1, sizeof *m);
    const mmdit_fields *f = m ? &(mmdit_fields){&m->dir, &m->dev, &m->dtype, &m->inner, &m->tp,
                                                &m->heads, &m->cp, &m->cfg,
                                                &m->cfg.num_attention_heads,
                                                &m->cfg.attention_head_dim} : NULL;
    if (!mmdit_load_setup(c, OP, f, dir, device, dtype, tp, load_config)) {
        em_sd3_free(m);
        return NULL;
    }
    m->blocks = calloc((size_t)m->cfg.num_layers, sizeof *m->blocks);
    if (!m->blocks) em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    unet_loader l = {.c = c, .dir = dir, .op = OP, .dtype = dtype, .dev = m->dev};
    if (m->dev && m->blocks && make_freqs(c, m)) unet_load_folder(&l, load_weights, m);
    if (em_ctx_status(c)) {
        em_sd3_free(m);
        return NULL;
    }
    return m;
}

/* ---------------------------------------------------------------------------------------------
 * Forward
 * ------------------------------------------------------------------------------------------- */

static bool check_inputs(em_ctx *c, const em_sd3 *m, em_tensor *x, em_tensor *ctx,
                         em_tensor *pooled, em_tensor *t) {
    const em_sd3_config *cfg = &m->cfg;
    char sig[160], sig2[160];
    int64_t p = cfg->patch_size, M = cfg->pos_embed_max_size;
    if (em_tensor_ndim(x) != 4 || em_tensor_dim(x, 1) != cfg->in_channels ||
        !em_tensor_dim(x, 0) || !em_tensor_dim(x, 2) || !em_tensor_dim(x, 3) ||
        em_tensor_dim(x, 2) % p || em_tensor_dim(x, 3) % p || em_tensor_dim(x, 2) / p > M ||
        em_tensor_dim(x, 3) / p > M) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP,
                    "sample %s must be [N, %lld, H, W] with H and W positive multiples of the "
                    "patch size %lld, at most %lld patches each (pos_embed_max_size; model %s)",
                    em_tensor_sig(x, sig, sizeof sig), (long long)cfg->in_channels,
                    (long long)p, (long long)M, m->dir);
        return false;
    }
    int64_t n = em_tensor_dim(x, 0);
    if (em_tensor_ndim(ctx) != 3 || em_tensor_dim(ctx, 0) != n || !em_tensor_dim(ctx, 1) ||
        em_tensor_dim(ctx, 2) != cfg->joint_attention_dim || em_tensor_ndim(pooled) != 2 ||
        em_tensor_dim(pooled, 0) != n || em_tensor_dim(pooled, 1) != cfg->pooled_projection_dim) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP,
                    "encoder_hidden_states %s and pooled_projections %s must be [%lld, L, %lld] "
                    "and [%lld, %lld] (the sample's batch; joint_attention_dim and "
                    "pooled_projection_dim of %s)", em_tensor_sig(ctx, sig, sizeof sig),
                    em_tensor_sig(pooled, sig2, sizeof sig2), (long long)n,
                    (long long)cfg->joint_attention_dim, (long long)n,
                    (long long)cfg->pooled_projection_dim, m->dir);
        return false;
    }
    int64_t tn = em_tensor_numel(t);
    if (em_tensor_ndim(t) > 1 || (tn != 1 && tn != n)) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP,
                    "timestep %s must be 0-d, [1] or [N] with N = %lld (the batch of the sample)",
                    em_tensor_sig(t, sig, sizeof sig), (long long)n);
        return false;
    }
    em_tensor *on[4] = {x, ctx, pooled, t};
    const char *names[4] = {"sample", "encoder_hidden_states", "pooled_projections", "timestep"};
    for (int i = 0; i < 4; i++) {
        if (i < 3 && em_tensor_dtype(on[i]) != m->dtype) {
            em_ctx_fail(c, EM_ERR_DTYPE, OP, "%s %s: the model (%s) is %s", names[i],
                        em_tensor_sig(on[i], sig, sizeof sig), m->dir, em_dtype_name(m->dtype));
            return false;
        }
        if (em_tensor_device(on[i]) != m->dev) {
            em_ctx_fail(c, EM_ERR_DEVICE, OP, "%s is on %s, the model (%s) on %s", names[i],
                        em_device_name(em_tensor_device(on[i])), m->dir, em_device_name(m->dev));
            return false;
        }
    }
    return true;
}

#define lin mmdit_lin
#define modulate mmdit_modulate
#define gated mmdit_gated

/* [N, T, D] -> [N, H, T, hd] through projection w, then the head RMSNorm when present */
static em_tensor *heads(em_ctx *c, const em_sd3 *m, const unet_param *w, const unet_param *norm,
                        em_tensor *x) {
    return mmdit_heads(c, w, norm, x, m->heads, m->cfg.attention_head_dim, EPS);
}

/* JointAttnProcessor2_0: attention over the image tokens then the context's; returns the image
 * stream's output and in *ctx_out the context's (NULL in a pre-only block). Under context
 * parallelism x holds this rank's image tokens, the image keys and values are every rank's
 * (by the ring or gathered: diff_cp_attention) and the context is whole on every rank. */
static em_tensor *joint_attention(em_ctx *c, const em_sd3 *m, const sd3_block *b, em_tensor *x,
                                  em_tensor *ctx, em_tensor **ctx_out) {
    int64_t T = em_tensor_dim(x, 1), L = em_tensor_dim(ctx, 1);
    em_tensor *q[2] = {heads(c, m, &b->q, &b->nq, x), heads(c, m, &b->aq, &b->naq, ctx)};
    em_tensor *k[2] = {heads(c, m, &b->k, &b->nk, x), heads(c, m, &b->ak, &b->nak, ctx)};
    em_tensor *v[2] = {heads(c, m, &b->v, &(unet_param){0}, x),
                       heads(c, m, &b->av, &(unet_param){0}, ctx)};
    /* keys [every rank's image tokens; context]: [N, H, T + L, hd] */
    em_tensor *a = diff_cp_attention(c, &m->cp, em_cat(c, q, 2, 2), k[0], v[0], k[1], v[1],
                                     false);
    a = mmdit_merge_heads(c, a);
    *ctx_out = b->pre ? NULL : diff_tp_lin_rows(c, &m->tp, &b->aout, em_narrow(c, a, 1, T, L));
    return diff_tp_lin_rows(c, &m->tp, &b->out, em_narrow(c, a, 1, 0, T));
}

/* JointTransformerBlock.forward: x [N, T, D] and ctx [N, L, D] updated in place of the
 * pointers (*ctx NULL after a pre-only block). */
static bool block_forward(em_ctx *c, const em_sd3 *m, const sd3_block *b, em_tensor **x,
                          em_tensor **ctx, em_tensor *temb_act) {
    int64_t D = m->inner;
    /* AdaLayerNormZero: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp */
    em_tensor *mx[6] = {0}, *mc[6] = {0};
    if (em_split(c, lin(c, &b->ada, temb_act), D, 1, mx, 6) != 6) return false;
    em_tensor *nx = modulate(c, em_layer_norm(c, *x, NULL, NULL, EPS), mx[0], mx[1]), *nc;
    if (b->pre) { /* AdaLayerNormContinuous: scale, then shift */
        if (em_split(c, lin(c, &b->ada_ctx, temb_act), D, 1, mc, 2) != 2) return false;
        nc = modulate(c, em_layer_norm(c, *ctx, NULL, NULL, EPS), mc[1], mc[0]);
    } else {
        if (em_split(c, lin(c, &b->ada_ctx, temb_act), D, 1, mc, 6) != 6) return false;
        nc = modulate(c, em_layer_norm(c, *ctx, NULL, NULL, EPS), mc[0], mc[1]);
    }
    em_tensor *ca = NULL;
    em_tensor *xa = joint_attention(c, m, b, nx, nc, &ca);
    em_tensor *h = gated(c, *x, mx[2], xa);
    em_tensor *f = mmdit_feed_forward(
        c, &m->tp, &b->ff_in, &b->ff_out,
        modulate(c, em_layer_norm(c, h, NULL, NULL, EPS), mx[3], mx[4]));
    *x = gated(c, h, mx[5], f);
    if (b->pre) {
        *ctx = NULL;
    } else {
        em_tensor *hc = gated(c, *ctx, mc[2], ca);
        f = mmdit_feed_forward(c, &m->tp, &b->cff_in, &b->cff_out,
                               modulate(c, em_layer_norm(c, hc, NULL, NULL, EPS), mc[3], mc[4]));
        *ctx = gated(c, hc, mc[5], f);
    }
    return *x != NULL;
}

/* PatchEmbed: conv with stride p, [N, D, h, w] -> [N, h * w, D], plus the table's centre crop */
static em_tensor *patch_embed(em_ctx *c, const em_sd3 *m, em_tensor *sample) {
    int64_t n = em_tensor_dim(sample, 0), p = m->cfg.patch_size, D = m->inner;
    int64_t h = em_tensor_dim(sample, 2) / p, w = em_tensor_dim(sample, 3) / p;
    int64_t M = m->cfg.pos_embed_max_size, top = (M - h) / 2, left = (M - w) / 2;
    em_conv2d_params cp = em_conv2d_default_params();
    cp.stride[0] = cp.stride[1] = p;
    em_tensor *x = em_conv2d(c, sample, m->patch.w, m->patch.b, &cp);
    x = em_transpose(c, em_reshape(c, x, 3, (int64_t[]){n, D, h * w}), 1, 2);
    em_tensor *pos = em_reshape(c, m->pos, 4, (int64_t[]){1, M, M, D});
    pos = em_narrow(c, em_narrow(c, pos, 1, top, h), 2, left, w);
    pos = em_reshape(c, em_contiguous(c, pos), 3, (int64_t[]){1, h * w, D});
    return em_add(c, x, pos);
}

/* CombinedTimestepTextProjEmbeddings: [N, D] */
static em_tensor *conditioning(em_ctx *c, const em_sd3 *m, em_tensor *t, em_tensor *pooled) {
    int64_t n = em_tensor_dim(pooled, 0);
    em_tensor *temb = mmdit_mlp(c, &m->t1, &m->t2, mmdit_time_proj(c, m->freqs, t, n, m->dtype));
    return em_add(c, temb, mmdit_mlp(c, &m->p1, &m->p2, pooled));
}

em_tensor *em_sd3_forward(em_ctx *c, em_sd3 *m, em_tensor *sample,
                          em_tensor *encoder_hidden_states, em_tensor *pooled_projections,
                          em_tensor *timestep) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!m || !sample || !encoder_hidden_states || !pooled_projections || !timestep) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "%s is NULL",
                    !m ? "model" : !sample ? "sample"
                    : !encoder_hidden_states ? "encoder_hidden_states"
                    : !pooled_projections ? "pooled_projections" : "timestep");
        return NULL;
    }
    if (!check_inputs(c, m, sample, encoder_hidden_states, pooled_projections, timestep))
        return NULL;
    const em_sd3_config *cfg = &m->cfg;
    int64_t n = em_tensor_dim(sample, 0), p = cfg->patch_size, D = m->inner;
    int64_t h = em_tensor_dim(sample, 2) / p, w = em_tensor_dim(sample, 3) / p;
    int64_t oc = cfg->out_channels;
    em_scope_push(c);
    char what[96];
    snprintf(what, sizeof what, "%lld patches (%lld x %lld)", (long long)(h * w), (long long)h,
             (long long)w);
    em_tensor *x = diff_cp_local(c, &m->cp, patch_embed(c, m, sample), OP, what);
    em_tensor *temb = conditioning(c, m, timestep, pooled_projections);
    em_tensor *temb_act = em_silu(c, temb); /* every AdaLayerNorm's silu(emb) */
    em_tensor *ctx = lin(c, &m->ctx, encoder_hidden_states);
    for (int64_t i = 0; i < cfg->num_layers && x; i++)
        if (!block_forward(c, m, &m->blocks[i], &x, &ctx, temb_act)) x = NULL;
    em_tensor *ss[2] = {0}; /* norm_out: AdaLayerNormContinuous, scale then shift */
    if (x && em_split(c, lin(c, &m->norm_out, temb_act), D, 1, ss, 2) == 2) {
        x = modulate(c, em_layer_norm(c, x, NULL, NULL, EPS), ss[1], ss[0]);
        x = lin(c, &m->proj_out, x); /* [N, h * w, p * p * oc] */
        x = diff_cp_gather(c, &m->cp, x, 1); /* every rank's patches */
        /* unpatchify: "nhwpqc->nchpwq" */
        x = em_reshape(c, x, 6, (int64_t[]){n, h, w, p, p, oc});
        x = em_permute(c, x, 6, (const int[]){0, 5, 1, 3, 2, 4});
        x = em_reshape(c, em_contiguous(c, x), 4, (int64_t[]){n, oc, h * p, w * p});
    }
    x = em_ctx_status(c) ? NULL : em_keep(c, x);
    em_scope_pop(c);
    return x;
}

/* FluxTransformer2DModel (diffusers 0.42, models/transformers/transformer_flux.py): x_embedder and
 * context_embedder, CombinedTimestep(Guidance)TextProjEmbeddings, FluxTransformerBlocks (joint
 * attention over [text; image] tokens with a projection set and AdaLayerNormZero per stream, qk
 * RMSNorm, 3-axis interleaved RoPE), FluxSingleTransformerBlocks (attention and MLP in parallel
 * on the concatenated sequence, AdaLayerNormZeroSingle), norm_out (AdaLayerNormContinuous) and
 * proj_out, over Ember's eager ops.
 *
 * RoPE: diffusers rotates interleaved pairs (2i, 2i + 1) of each head. Attention scores are
 * unchanged when q and k permute their head dims alike, so the heads are de-interleaved (even
 * dims, then odd) after the RMSNorm and rotated with em_rope's rotate-half convention; v keeps
 * its order, so the output is diffusers'. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/flux_impl.h"
#include "diffusion/mmdit_impl.h"
#include "diffusion/weights.h"

#define OP "FluxTransformer2DModel"
#define EPS 1e-6       /* every LayerNorm and the qk RMSNorms */
#define THETA 10000.0  /* FluxPosEmbed(theta=10000) */

typedef struct flux_block { /* FluxTransformerBlock */
    unet_param ada, ada_ctx;     /* norm1.linear, norm1_context.linear [6D, D] */
    unet_param q, k, v, out;     /* attn.to_q / to_k / to_v / to_out.0 */
    unet_param aq, ak, av, aout; /* attn.add_{q,k,v}_proj / to_add_out */
    unet_param nq, nk, naq, nak; /* attn.norm_q / norm_k / norm_added_q / norm_added_k */
    unet_param ff_in, ff_out, cff_in, cff_out; /* ff.net.0.proj, ff.net.2; ff_context.* */
} flux_block;

typedef struct flux_single { /* FluxSingleTransformerBlock */
    unet_param ada;              /* norm.linear [3D, D] */
    unet_param q, k, v, nq, nk;  /* attn.to_q / to_k / to_v, attn.norm_q / norm_k */
    unet_param mlp, out;         /* proj_mlp [4D, D], proj_out [D, 5D] */
} flux_single;

struct em_flux {
    em_flux_config cfg;
    char *dir;
    em_device *dev;
    em_dtype dtype;
    int64_t inner;
    diff_tp tp;                   /* tensor parallelism (tp.g NULL: none) */
    int64_t heads;                /* this rank's attention heads (num_attention_heads / tp.size) */
    diff_cp cp;                   /* context parallelism: the image tokens split (g NULL: none) */
    em_tensor *freqs;             /* [1, 128] f32: Timesteps' frequencies */
    unet_param x_emb, ctx_emb;    /* x_embedder, context_embedder */
    unet_param t1, t2, g1, g2, p1, p2; /* time_text_embed: timestep_ / guidance_ / text_embedder */
    flux_block *blocks;           /* [num_layers] */
    flux_single *singles;         /* [num_single_layers] */
    unet_param norm_out, proj_out;
};

const em_flux_config *em_flux_get_config(const em_flux *m) { return m ? &m->cfg : NULL; }
em_device *em_flux_device(const em_flux *m) { return m ? m->dev : NULL; }
int em_flux_tp_degree(const em_flux *m) { return m ? m->tp.size : 1; }
int em_flux_cp_degree(const em_flux *m) { return m ? m->cp.size : 1; }

em_status em_flux_set_context_parallel(em_ctx *c, em_flux *m, em_dist *cp) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!m) return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "the transformer is NULL");
    return diff_cp_set(c, &m->cp, cp, m->tp.g, m->dev, OP, m->dir);
}

em_status em_flux_set_cp_degrees(em_ctx *c, em_flux *m, int ring_degree, int ulysses_degree) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!m) return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "the transformer is NULL");
    return diff_cp_set_degrees(c, &m->cp, ring_degree, ulysses_degree, OP, m->dir);
}

em_status em_flux_set_cp_schedule(em_ctx *c, em_flux *m, em_cp_schedule s) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!m) return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "the transformer is NULL");
    return diff_cp_set_schedule(c, &m->cp, s, OP, m->dir);
}

void em_flux_free(em_flux *m) {
    if (!m) return;
    diff_cp_free(&m->cp);
    for (int64_t i = 0; m->blocks && i < m->cfg.num_layers; i++) {
        flux_block *b = &m->blocks[i];
        unet_param *ps[] = {&b->ada, &b->ada_ctx, &b->q, &b->k, &b->v, &b->out, &b->aq,
                            &b->ak, &b->av, &b->aout, &b->nq, &b->nk, &b->naq, &b->nak,
                            &b->ff_in, &b->ff_out, &b->cff_in, &b->cff_out};
        for (size_t j = 0; j < sizeof ps / sizeof ps[0]; j++) unet_param_free(ps[j]);
    }
    for (int64_t i = 0; m->singles && i < m->cfg.num_single_layers; i++) {
        flux_single *b = &m->singles[i];
        unet_param *ps[] = {&b->ada, &b->q, &b->k, &b->v, &b->nq, &b->nk, &b->mlp, &b->out};
        for (size_t j = 0; j < sizeof ps / sizeof ps[0]; j++) unet_param_free(ps[j]);
    }
    free(m->blocks);
    free(m->singles);
    unet_param *ps[] = {&m->x_emb, &m->ctx_emb, &m->t1, &m->t2, &m->g1, &m->g2, &m->p1,
                        &m->p2, &m->norm_out, &m->proj_out};
    for (size_t j = 0; j < sizeof ps / sizeof ps[0]; j++) unet_param_free(ps[j]);
    em_tensor_release(m->freqs);
    free(m->dir);
    free(m);
}

/* ---------------------------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------------------------- */

static bool load_block(unet_loader *l, em_flux *m, int64_t i) {
    flux_block *b = &m->blocks[i];
    int64_t D = m->inner, hd = m->cfg.attention_head_dim, ff = 4 * D; /* FeedForward(mult=4) */
    const int64_t *DD = (int64_t[]){D, D};
    char pre[64];
    snprintf(pre, sizeof pre, "transformer_blocks.%lld", (long long)i);
    unet_loader hl = diff_tp_loader(l, &m->tp), *h = &hl; /* the split weights */
    const diff_tp *t = &m->tp;
    if (!(unet_load_param(l, &b->ada, pre, "norm1.linear", true, 2, (int64_t[]){6 * D, D}) &&
           unet_load_param(l, &b->ada_ctx, pre, "norm1_context.linear", true, 2,
                           (int64_t[]){6 * D, D}) &&
           unet_load_param(h, &b->q, pre, "attn.to_q", true, 2, DD) &&
           unet_load_param(h, &b->k, pre, "attn.to_k", true, 2, DD) &&
           unet_load_param(h, &b->v, pre, "attn.to_v", true, 2, DD) &&
           unet_load_param(h, &b->out, pre, "attn.to_out.0", true, 2, DD) &&
           unet_load_param(h, &b->aq, pre, "attn.add_q_proj", true, 2, DD) &&
           unet_load_param(h, &b->ak, pre, "attn.add_k_proj", true, 2, DD) &&
           unet_load_param(h, &b->av, pre, "attn.add_v_proj", true, 2, DD) &&
           unet_load_param(h, &b->aout, pre, "attn.to_add_out", true, 2, DD) &&
           unet_load_param(l, &b->nq, pre, "attn.norm_q", false, 1, &hd) &&
           unet_load_param(l, &b->nk, pre, "attn.norm_k", false, 1, &hd) &&
           unet_load_param(l, &b->naq, pre, "attn.norm_added_q", false, 1, &hd) &&
           unet_load_param(l, &b->nak, pre, "attn.norm_added_k", false, 1, &hd) &&
           unet_load_param(h, &b->ff_in, pre, "ff.net.0.proj", true, 2, (int64_t[]){ff, D}) &&
           unet_load_param(h, &b->ff_out, pre, "ff.net.2", true, 2, (int64_t[]){D, ff}) &&
           unet_load_param(h, &b->cff_in, pre, "ff_context.net.0.proj", true, 2,
                           (int64_t[]){ff, D}) &&
           unet_load_param(h, &b->cff_out, pre, "ff_context.net.2", true, 2, (int64_t[]){D, ff})))
        return false;
    /* tensor parallelism: q/k/v and the up projections by rows, the outputs by columns */
    unet_param *cols[] = {&b->q, &b->k, &b->v, &b->aq, &b->ak, &b->av, &b->ff_in, &b->cff_in};
    unet_param *rows[] = {&b->out, &b->aout, &b->ff_out, &b->cff_out};
    for (size_t j = 0; j < sizeof cols / sizeof cols[0]; j++)
        if (!diff_tp_shard(l->c, t, cols[j], false, NULL, 0)) return false;
    for (size_t j = 0; j < sizeof rows / sizeof rows[0]; j++)
        if (!diff_tp_shard(l->c, t, rows[j], true, NULL, 0)) return false;
    return true;
}

static bool load_single(unet_loader *l, em_flux *m, int64_t i) {
    flux_single *b = &m->singles[i];
    int64_t D = m->inner, hd = m->cfg.attention_head_dim, mlp = 4 * D; /* mlp_ratio 4.0 */
    const int64_t *DD = (int64_t[]){D, D};
    char pre[64];
    snprintf(pre, sizeof pre, "single_transformer_blocks.%lld", (long long)i);
    unet_loader hl = diff_tp_loader(l, &m->tp), *h = &hl; /* the split weights */
    const diff_tp *t = &m->tp;
    if (!(unet_load_param(l, &b->ada, pre, "norm.linear", true, 2, (int64_t[]){3 * D, D}) &&
           unet_load_param(h, &b->q, pre, "attn.to_q", true, 2, DD) &&
           unet_load_param(h, &b->k, pre, "attn.to_k", true, 2, DD) &&
           unet_load_param(h, &b->v, pre, "attn.to_v", true, 2, DD) &&
           unet_load_param(l, &b->nq, pre, "attn.norm_q", false, 1, &hd) &&
           unet_load_param(l, &b->nk, pre, "attn.norm_k", false, 1, &hd) &&
           unet_load_param(h, &b->mlp, pre, "proj_mlp", true, 2, (int64_t[]){mlp, D}) &&
           unet_load_param(h, &b->out, pre, "proj_out", true, 2, (int64_t[]){D, D + mlp})))
        return false;
    /* tensor parallelism: the heads' q/k/v and proj_mlp by rows; proj_out, over [attention;
     * mlp], by columns, this rank's part of each */
    return diff_tp_shard(l->c, t, &b->q, false, NULL, 0) &&
           diff_tp_shard(l->c, t, &b->k, false, NULL, 0) &&
           diff_tp_shard(l->c, t, &b->v, false, NULL, 0) &&
           diff_tp_shard(l->c, t, &b->mlp, false, NULL, 0) &&
           diff_tp_shard(l->c, t, &b->out, true, (int64_t[]){D, mlp}, 2);
}

static bool load_weights(unet_loader *l, void *user) {
    em_flux *m = user;
    const em_flux_config *cfg = &m->cfg;
    int64_t D = m->inner, T = MMDIT_TIME_CHANNELS;
    const char *tte = "time_text_embed";
    if (!unet_load_param(l, &m->x_emb, "", "x_embedder", true, 2,
                         (int64_t[]){D, cfg->in_channels}) ||
        !unet_load_param(l, &m->ctx_emb, "", "context_embedder", true, 2,
                         (int64_t[]){D, cfg->joint_attention_dim}) ||
        !unet_load_param(l, &m->t1, tte, "timestep_embedder.linear_1", true, 2,
                         (int64_t[]){D, T}) ||
        !unet_load_param(l, &m->t2, tte, "timestep_embedder.linear_2", true, 2,
                         (int64_t[]){D, D}) ||
        !unet_load_param(l, &m->p1, tte, "text_embedder.linear_1", true, 2,
                         (int64_t[]){D, cfg->pooled_projection_dim}) ||
        !unet_load_param(l, &m->p2, tte, "text_embedder.linear_2", true, 2, (int64_t[]){D, D}))
        return false;
    if (cfg->guidance_embeds &&
        (!unet_load_param(l, &m->g1, tte, "guidance_embedder.linear_1", true, 2,
                          (int64_t[]){D, T}) ||
         !unet_load_param(l, &m->g2, tte, "guidance_embedder.linear_2", true, 2,
                          (int64_t[]){D, D})))
        return false;
    for (int64_t i = 0; i < cfg->num_layers; i++)
        if (!load_block(l, m, i)) return false;
    for (int64_t i = 0; i < cfg->num_single_layers; i++)
        if (!load_single(l, m, i)) return false;
    return unet_load_param(l, &m->norm_out, "norm_out", "linear", true, 2,
                           (int64_t[]){2 * D, D}) &&
           unet_load_param(l, &m->proj_out, "", "proj_out", true, 2,
                           (int64_t[]){cfg->patch_size * cfg->patch_size * cfg->out_channels,
                                       D});
}

/* em_flux_config_load for mmdit_load_setup */
static em_status load_config(em_ctx *c, const char *dir, void *cfg) {
    return em_flux_config_load(c, dir, cfg);
}

em_flux *em_flux_load(em_ctx *c, const char *dir, const char *device, em_dtype dtype) {
    return em_flux_load_tp(c, dir, device, dtype, NULL);
}

em_flux *em_flux_load_tp(em_ctx *c, const char *dir, const char *device, em_dtype dtype,
                         em_dist *tp) {
    if (!c || em_ctx_status(c)) return NULL;
    em_flux *m = calloc(1, sizeof *m);
    const mmdit_fields *f = m ? &(mmdit_fields){&m->dir, &m->dev, &m->dtype, &m->inner, &m->tp,
                                                &m->heads, &m->cp, &m->cfg,
                                                &m->cfg.num_attention_heads,
                                                &m->cfg.attention_head_dim} : NULL;
    if (!mmdit_load_setup(c, OP, f, dir, device, dtype, tp, load_config)) {
        em_flux_free(m);
        return NULL;
    }
    m->blocks = calloc((size_t)m->cfg.num_layers + 1, sizeof *m->blocks);
    m->singles = calloc((size_t)m->cfg.num_single_layers + 1, sizeof *m->singles);
    if (!m->blocks || !m->singles) em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    unet_loader l = {.c = c, .dir = dir, .op = OP, .dtype = dtype, .dev = m->dev};
    if (m->dev && m->blocks && m->singles && (m->freqs = mmdit_time_freqs(c, m->dev)))
        unet_load_folder(&l, load_weights, m);
    if (em_ctx_status(c)) {
        em_flux_free(m);
        return NULL;
    }
    return m;
}

/* ---------------------------------------------------------------------------------------------
 * Rotary tables
 * ------------------------------------------------------------------------------------------- */

bool flux_rope_tables(em_ctx *c, const em_flux *m, const float *txt_ids, int64_t L,
                      const float *img_ids, int64_t T, em_tensor **cos_out, em_tensor **sin_out) {
    const em_flux_config *cfg = &m->cfg;
    int64_t S = L + T, hd = cfg->attention_head_dim, half = hd / 2;
    float *cs = malloc(2 * (size_t)(S * hd) * sizeof *cs);
    double *freq = malloc((size_t)half * sizeof *freq);
    int *axis = malloc((size_t)half * sizeof *axis);
    if (!cs || !freq || !axis) {
        free(cs), free(freq), free(axis);
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return false;
    }
    /* get_1d_rotary_pos_embed per axis: 1 / theta^(arange(0, d, 2) / d) in f64 */
    for (int a = 0, j = 0; a < cfg->n_axes; a++) {
        int64_t d = cfg->axes_dims_rope[a];
        for (int64_t k = 0; k < d / 2; k++, j++) {
            freq[j] = 1.0 / pow(THETA, (double)(2 * k) / (double)d);
            axis[j] = a;
        }
    }
    float *sn = cs + S * hd;
    for (int64_t s = 0; s < S; s++) {
        const float *id = s < L ? txt_ids + s * cfg->n_axes : img_ids + (s - L) * cfg->n_axes;
        for (int64_t j = 0; j < half; j++) {
            double arg = (double)id[axis[j]] * freq[j];
            cs[s * hd + j] = cs[s * hd + half + j] = (float)cos(arg);
            sn[s * hd + j] = sn[s * hd + half + j] = (float)sin(arg);
        }
    }
    int64_t shape[3] = {1, S, hd};
    *cos_out = em_from_host_on(c, m->dev, EM_F32, 3, shape, cs);
    *sin_out = em_from_host_on(c, m->dev, EM_F32, 3, shape, sn);
    free(cs), free(freq), free(axis);
    return *cos_out && *sin_out;
}

/* ---------------------------------------------------------------------------------------------
 * Forward
 * ------------------------------------------------------------------------------------------- */

static bool check_inputs(em_ctx *c, const em_flux *m, const em_flux_inputs *in, bool ids) {
    const em_flux_config *cfg = &m->cfg;
    char s1[160], s2[160], s3[160];
    em_tensor *x = in->hidden_states, *ctx = in->encoder_hidden_states;
    em_tensor *pooled = in->pooled_projections;
    if (em_tensor_ndim(x) != 3 || em_tensor_dim(x, 2) != cfg->in_channels ||
        !em_tensor_dim(x, 0) || !em_tensor_dim(x, 1)) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP, "hidden_states %s must be [N, T, %lld] (in_channels of "
                    "%s)", em_tensor_sig(x, s1, sizeof s1), (long long)cfg->in_channels, m->dir);
        return false;
    }
    int64_t n = em_tensor_dim(x, 0), T = em_tensor_dim(x, 1);
    if (em_tensor_ndim(ctx) != 3 || em_tensor_dim(ctx, 0) != n || !em_tensor_dim(ctx, 1) ||
        em_tensor_dim(ctx, 2) != cfg->joint_attention_dim || em_tensor_ndim(pooled) != 2 ||
        em_tensor_dim(pooled, 0) != n || em_tensor_dim(pooled, 1) != cfg->pooled_projection_dim) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP,
                    "encoder_hidden_states %s and pooled_projections %s must be [%lld, L, %lld] "
                    "and [%lld, %lld] (the batch of hidden_states; joint_attention_dim and "
                    "pooled_projection_dim of %s)", em_tensor_sig(ctx, s1, sizeof s1),
                    em_tensor_sig(pooled, s2, sizeof s2), (long long)n,
                    (long long)cfg->joint_attention_dim, (long long)n,
                    (long long)cfg->pooled_projection_dim, m->dir);
        return false;
    }
    if (!in->guidance != !cfg->guidance_embeds) {
        em_ctx_fail(c, cfg->guidance_embeds ? EM_ERR_INVALID_ARG : EM_ERR_UNSUPPORTED, OP,
                    "%s: guidance_embeds is %s, so a guidance is %s", m->dir,
                    cfg->guidance_embeds ? "true" : "false",
                    cfg->guidance_embeds ? "required" : "not taken");
        return false;
    }
    em_tensor *ts[2] = {in->timestep, in->guidance};
    for (int i = 0; i < 2; i++) {
        if (!ts[i]) continue;
        int64_t tn = em_tensor_numel(ts[i]);
        if (em_tensor_ndim(ts[i]) > 1 || (tn != 1 && tn != n)) {
            em_ctx_fail(c, EM_ERR_SHAPE, OP, "%s %s must be 0-d, [1] or [N] with N = %lld (the "
                        "batch of hidden_states)", i ? "guidance" : "timestep",
                        em_tensor_sig(ts[i], s1, sizeof s1), (long long)n);
            return false;
        }
    }
    if (ids) {
        em_tensor *it = in->img_ids, *tt = in->txt_ids;
        if (!it || !tt || em_tensor_ndim(it) != 2 || em_tensor_ndim(tt) != 2 ||
            em_tensor_dim(it, 0) != T || em_tensor_dim(tt, 0) != em_tensor_dim(ctx, 1) ||
            em_tensor_dim(it, 1) != cfg->n_axes || em_tensor_dim(tt, 1) != cfg->n_axes) {
            em_ctx_fail(c, it && tt ? EM_ERR_SHAPE : EM_ERR_INVALID_ARG, OP,
                        "img_ids %s and txt_ids %s must be [%lld, %d] and [%lld, %d] (the "
                        "tokens of hidden_states and encoder_hidden_states, one column per "
                        "axes_dims_rope entry of %s)", it ? em_tensor_sig(it, s1, sizeof s1)
                        : "NULL", tt ? em_tensor_sig(tt, s2, sizeof s2) : "NULL", (long long)T,
                        cfg->n_axes, (long long)em_tensor_dim(ctx, 1), cfg->n_axes, m->dir);
            return false;
        }
    }
    em_tensor *on[3] = {x, ctx, pooled};
    const char *names[3] = {"hidden_states", "encoder_hidden_states", "pooled_projections"};
    for (int i = 0; i < 3; i++) {
        if (em_tensor_dtype(on[i]) != m->dtype) {
            em_ctx_fail(c, EM_ERR_DTYPE, OP, "%s %s: the model (%s) is %s", names[i],
                        em_tensor_sig(on[i], s3, sizeof s3), m->dir, em_dtype_name(m->dtype));
            return false;
        }
    }
    em_tensor *dv[5] = {x, ctx, pooled, in->timestep, in->guidance};
    for (int i = 0; i < 5; i++) {
        if (dv[i] && em_tensor_device(dv[i]) != m->dev) {
            em_ctx_fail(c, EM_ERR_DEVICE, OP, "%s is on %s, the model (%s) on %s",
                        i < 3 ? names[i] : i == 3 ? "timestep" : "guidance",
                        em_device_name(em_tensor_device(dv[i])), m->dir, em_device_name(m->dev));
            return false;
        }
    }
    return true;
}

/* [N, T, D] -> [N, H, T, hd] heads through w and the RMSNorm (norm NULL: none) */
static em_tensor *heads(em_ctx *c, const em_flux *m, const unet_param *w, const unet_param *norm,
                        em_tensor *x) {
    return mmdit_heads(c, w, norm, x, m->heads, m->cfg.attention_head_dim, EPS);
}

/* apply_rotary_emb(use_real, interleaved pairs) on de-interleaved heads, see the file comment */
static em_tensor *rope(em_ctx *c, const em_flux *m, em_tensor *h, em_tensor *cos,
                       em_tensor *sin) {
    int64_t n = em_tensor_dim(h, 0), H = em_tensor_dim(h, 1), S = em_tensor_dim(h, 2);
    int64_t hd = m->cfg.attention_head_dim;
    h = em_reshape(c, h, 5, (int64_t[]){n, H, S, hd / 2, 2});
    h = em_reshape(c, em_contiguous(c, em_transpose(c, h, 3, 4)), 4, (int64_t[]){n, H, S, hd});
    return em_rope(c, h, cos, sin);
}

/* scaled dot-product attention of [N, H, S, hd] q, k (rotated by the tables of their tokens)
 * and v over [text (L tokens); image]: [N, S, D]. Under context parallelism S = L + T/R (the
 * text and this rank's image tokens) and the keys and values are the text's and every rank's
 * image tokens (diff_cp_attention). */
static em_tensor *attend(em_ctx *c, const em_flux *m, em_tensor *q, em_tensor *k, em_tensor *v,
                         em_tensor *cos, em_tensor *sin, int64_t L) {
    k = rope(c, m, k, cos, sin);
    if (!m->cp.g) {
        em_sdpa_params sp = em_sdpa_default_params();
        return mmdit_merge_heads(c, em_sdpa(c, rope(c, m, q, cos, sin), k, v, NULL, &sp));
    }
    if (!k || !v) return NULL;
    int64_t S = em_tensor_dim(k, 2);
    return mmdit_merge_heads(
        c, diff_cp_attention(c, &m->cp, rope(c, m, q, cos, sin), em_narrow(c, k, 2, L, S - L),
                             em_narrow(c, v, 2, L, S - L), em_narrow(c, k, 2, 0, L),
                             em_narrow(c, v, 2, 0, L), true));
}

/* FluxTransformerBlock.forward: x [N, T, D] and ctx [N, L, D] updated in place */
static bool block_forward(em_ctx *c, const em_flux *m, const flux_block *b, em_tensor **x,
                          em_tensor **ctx, em_tensor *temb_act, em_tensor *cos, em_tensor *sin) {
    int64_t D = m->inner, T = em_tensor_dim(*x, 1), L = em_tensor_dim(*ctx, 1);
    /* AdaLayerNormZero: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp */
    em_tensor *mx[6] = {0}, *mc[6] = {0};
    if (em_split(c, mmdit_lin(c, &b->ada, temb_act), D, 1, mx, 6) != 6 ||
        em_split(c, mmdit_lin(c, &b->ada_ctx, temb_act), D, 1, mc, 6) != 6)
        return false;
    em_tensor *nx = mmdit_modulate(c, em_layer_norm(c, *x, NULL, NULL, EPS), mx[0], mx[1]);
    em_tensor *nc = mmdit_modulate(c, em_layer_norm(c, *ctx, NULL, NULL, EPS), mc[0], mc[1]);
    /* FluxAttnProcessor: [context; image] */
    em_tensor *q[2] = {heads(c, m, &b->aq, &b->naq, nc), heads(c, m, &b->q, &b->nq, nx)};
    em_tensor *k[2] = {heads(c, m, &b->ak, &b->nak, nc), heads(c, m, &b->k, &b->nk, nx)};
    em_tensor *v[2] = {heads(c, m, &b->av, NULL, nc), heads(c, m, &b->v, NULL, nx)};
    em_tensor *a = attend(c, m, em_cat(c, q, 2, 2), em_cat(c, k, 2, 2), em_cat(c, v, 2, 2), cos,
                          sin, L);
    em_tensor *ca = diff_tp_lin_rows(c, &m->tp, &b->aout, em_narrow(c, a, 1, 0, L));
    em_tensor *xa = diff_tp_lin_rows(c, &m->tp, &b->out, em_narrow(c, a, 1, L, T));
    em_tensor *h = mmdit_gated(c, *x, mx[2], xa);
    em_tensor *f = mmdit_feed_forward(
        c, &m->tp, &b->ff_in, &b->ff_out,
        mmdit_modulate(c, em_layer_norm(c, h, NULL, NULL, EPS), mx[3], mx[4]));
    *x = mmdit_gated(c, h, mx[5], f);
    em_tensor *hc = mmdit_gated(c, *ctx, mc[2], ca);
    f = mmdit_feed_forward(c, &m->tp, &b->cff_in, &b->cff_out,
                           mmdit_modulate(c, em_layer_norm(c, hc, NULL, NULL, EPS), mc[3], mc[4]));
    *ctx = mmdit_gated(c, hc, mc[5], f);
    return *x && *ctx;
}

/* FluxSingleTransformerBlock.forward on the concatenated sequence s [N, L + T, D] */
static em_tensor *single_forward(em_ctx *c, const em_flux *m, const flux_single *b,
                                 em_tensor *s, em_tensor *temb_act, em_tensor *cos,
                                 em_tensor *sin, int64_t L) {
    em_tensor *ms[3] = {0}; /* AdaLayerNormZeroSingle: shift, scale, gate */
    if (em_split(c, mmdit_lin(c, &b->ada, temb_act), m->inner, 1, ms, 3) != 3) return NULL;
    em_tensor *ns = mmdit_modulate(c, em_layer_norm(c, s, NULL, NULL, EPS), ms[0], ms[1]);
    em_tensor *mlp = em_gelu(c, mmdit_lin(c, &b->mlp, ns), true);
    em_tensor *a = attend(c, m, heads(c, m, &b->q, &b->nq, ns), heads(c, m, &b->k, &b->nk, ns),
                          heads(c, m, &b->v, NULL, ns), cos, sin, L);
    em_tensor *cat[2] = {a, mlp};
    return mmdit_gated(c, s, ms[2], diff_tp_lin_rows(c, &m->tp, &b->out, em_cat(c, cat, 2, 2)));
}

/* CombinedTimestep(Guidance)TextProjEmbeddings of t * 1000 (and guidance * 1000): [N, D] */
static em_tensor *conditioning(em_ctx *c, const em_flux *m, const em_flux_inputs *in) {
    int64_t n = em_tensor_dim(in->pooled_projections, 0);
    em_tensor *t = em_mul_scalar(c, em_cast(c, in->timestep, m->dtype), 1000.0);
    em_tensor *emb = mmdit_mlp(c, &m->t1, &m->t2, mmdit_time_proj(c, m->freqs, t, n, m->dtype));
    if (in->guidance) {
        em_tensor *g = em_mul_scalar(c, em_cast(c, in->guidance, m->dtype), 1000.0);
        emb = em_add(c, emb, mmdit_mlp(c, &m->g1, &m->g2,
                                       mmdit_time_proj(c, m->freqs, g, n, m->dtype)));
    }
    return em_add(c, emb, mmdit_mlp(c, &m->p1, &m->p2, in->pooled_projections));
}

static em_tensor *forward(em_ctx *c, em_flux *m, const em_flux_inputs *in, em_tensor *cos,
                          em_tensor *sin) {
    int64_t L = em_tensor_dim(in->encoder_hidden_states, 1);
    int64_t T = em_tensor_dim(in->hidden_states, 1);
    char what[64];
    snprintf(what, sizeof what, "%lld image tokens", (long long)T);
    em_tensor *x = diff_cp_local(c, &m->cp, mmdit_lin(c, &m->x_emb, in->hidden_states), OP, what);
    if (m->cp.g && x) { /* this rank's tokens and their rows of the tables */
        em_tensor *cs[2] = {em_narrow(c, cos, 1, 0, L),
                            diff_cp_share(c, &m->cp, em_narrow(c, cos, 1, L, T), 1, OP, what)};
        em_tensor *sn[2] = {em_narrow(c, sin, 1, 0, L),
                            diff_cp_share(c, &m->cp, em_narrow(c, sin, 1, L, T), 1, OP, what)};
        cos = em_cat(c, cs, 2, 1);
        sin = em_cat(c, sn, 2, 1);
        T /= m->cp.size;
    }
    em_tensor *temb_act = em_silu(c, conditioning(c, m, in)); /* every AdaLayerNorm's silu */
    em_tensor *ctx = mmdit_lin(c, &m->ctx_emb, in->encoder_hidden_states);
    for (int64_t i = 0; i < m->cfg.num_layers && x; i++)
        if (!block_forward(c, m, &m->blocks[i], &x, &ctx, temb_act, cos, sin)) x = NULL;
    em_tensor *cat[2] = {ctx, x};
    em_tensor *s = x ? em_cat(c, cat, 2, 1) : NULL;
    for (int64_t i = 0; i < m->cfg.num_single_layers && s; i++)
        s = single_forward(c, m, &m->singles[i], s, temb_act, cos, sin, L);
    x = s ? em_narrow(c, s, 1, L, T) : NULL;
    em_tensor *ss[2] = {0}; /* norm_out: AdaLayerNormContinuous, scale then shift */
    if (!x || em_split(c, mmdit_lin(c, &m->norm_out, temb_act), m->inner, 1, ss, 2) != 2)
        return NULL;
    x = mmdit_modulate(c, em_layer_norm(c, x, NULL, NULL, EPS), ss[1], ss[0]);
    return diff_cp_gather(c, &m->cp, mmdit_lin(c, &m->proj_out, x), 1); /* every rank's tokens */
}

static bool check_args(em_ctx *c, em_flux *m, const em_flux_inputs *in) {
    if (!c || em_ctx_status(c)) return false;
    if (!m || !in || !in->hidden_states || !in->encoder_hidden_states ||
        !in->pooled_projections || !in->timestep) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "%s is NULL",
                    !m ? "model" : !in ? "inputs" : !in->hidden_states ? "hidden_states"
                    : !in->encoder_hidden_states ? "encoder_hidden_states"
                    : !in->pooled_projections ? "pooled_projections" : "timestep");
        return false;
    }
    return true;
}

em_tensor *flux_forward_tables(em_ctx *c, em_flux *m, const em_flux_inputs *in, em_tensor *cos,
                               em_tensor *sin) {
    if (!check_args(c, m, in) || !check_inputs(c, m, in, false)) return NULL;
    em_scope_push(c);
    em_tensor *x = forward(c, m, in, cos, sin);
    x = em_ctx_status(c) ? NULL : em_keep(c, x);
    em_scope_pop(c);
    return x;
}

/* ids [R, n_axes] of any dtype and device as host f32 (malloc'd), NULL with the error */
static float *host_ids(em_ctx *c, em_tensor *ids) {
    int64_t n = em_tensor_numel(ids);
    float *h = malloc((size_t)(n ? n : 1) * sizeof *h);
    if (!h) em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    else if (em_to_host_f32(c, ids, h, n) != EM_OK) {
        free(h);
        return NULL;
    }
    return h;
}

em_tensor *em_flux_forward(em_ctx *c, em_flux *m, const em_flux_inputs *in) {
    if (!check_args(c, m, in) || !check_inputs(c, m, in, true)) return NULL;
    float *ti = host_ids(c, in->txt_ids), *ii = ti ? host_ids(c, in->img_ids) : NULL;
    em_scope_push(c);
    em_tensor *cos = NULL, *sin = NULL, *x = NULL;
    if (ii && flux_rope_tables(c, m, ti, em_tensor_dim(in->txt_ids, 0), ii,
                               em_tensor_dim(in->img_ids, 0), &cos, &sin))
        x = forward(c, m, in, cos, sin);
    free(ti);
    free(ii);
    x = em_ctx_status(c) ? NULL : em_keep(c, x);
    em_scope_pop(c);
    return x;
}

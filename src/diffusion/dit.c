/* DiTTransformer2DModel (diffusers 0.42, models/transformers/dit_transformer_2d.py): patch
 * embedding with the 2D sin-cos positional table, BasicTransformerBlocks with adaLN-Zero
 * conditioned on CombinedTimestepLabelEmbeddings, the final adaLN modulation and unpatchify,
 * over Ember's eager ops. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/tp_impl.h"
#include "diffusion/unet_impl.h"
#include "diffusion/weights.h"
#include "ember/dist.h"
#include "ember/dit.h"

#define OP "DiTTransformer2DModel"
#define TIME_CHANNELS 256 /* CombinedTimestepLabelEmbeddings' Timesteps(num_channels=256) */

/* One BasicTransformerBlock(norm_type="ada_norm_zero"); norm1 has its own embedding. */
typedef struct dit_block {
    unet_param t1, t2;   /* norm1.emb.timestep_embedder.linear_1 / linear_2 */
    em_tensor *classes;  /* norm1.emb.class_embedder.embedding_table [classes + 1, D] */
    unet_param ada;      /* norm1.linear: [6 D, D] */
    unet_param q, k, v, out, norm3, ff_in, ff_out;
} dit_block;

struct em_dit {
    em_dit_config cfg;
    char *dir;
    em_device *dev;
    em_dtype dtype;
    int64_t inner;
    diff_tp tp;          /* tensor parallelism (tp.g NULL: none) */
    diff_cp cp;          /* context parallelism: the tokens split (cp.g NULL: none) */
    int64_t heads;       /* this rank's attention heads (num_attention_heads / tp_size) */
    em_tensor *freqs;    /* [1, 128] f32: Timesteps' frequencies */
    unet_param patch;    /* pos_embed.proj */
    dit_block *blocks;   /* [num_layers] */
    unet_param out1, out2;
};

const em_dit_config *em_dit_get_config(const em_dit *d) { return d ? &d->cfg : NULL; }
em_device *em_dit_device(const em_dit *d) { return d ? d->dev : NULL; }
int em_dit_tp_degree(const em_dit *d) { return d ? d->tp.size : 1; }
int em_dit_cp_degree(const em_dit *d) { return d ? d->cp.size : 1; }

em_status em_dit_set_context_parallel(em_ctx *c, em_dit *d, em_dist *cp) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!d) return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "the transformer is NULL");
    return diff_cp_set(c, &d->cp, cp, d->tp.g, d->dev, OP, d->dir);
}

em_status em_dit_set_cp_degrees(em_ctx *c, em_dit *d, int ring_degree, int ulysses_degree) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!d) return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "the transformer is NULL");
    return diff_cp_set_degrees(c, &d->cp, ring_degree, ulysses_degree, OP, d->dir);
}

em_status em_dit_set_cp_schedule(em_ctx *c, em_dit *d, em_cp_schedule s) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!d) return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "the transformer is NULL");
    return diff_cp_set_schedule(c, &d->cp, s, OP, d->dir);
}

void em_dit_free(em_dit *d) {
    if (!d) return;
    diff_cp_free(&d->cp);
    for (int64_t i = 0; d->blocks && i < d->cfg.num_layers; i++) {
        dit_block *b = &d->blocks[i];
        unet_param *ps[] = {&b->t1, &b->t2, &b->ada, &b->q, &b->k, &b->v,
                            &b->out, &b->norm3, &b->ff_in, &b->ff_out};
        for (size_t j = 0; j < sizeof ps / sizeof ps[0]; j++) unet_param_free(ps[j]);
        em_tensor_release(b->classes);
    }
    free(d->blocks);
    unet_param_free(&d->patch);
    unet_param_free(&d->out1);
    unet_param_free(&d->out2);
    em_tensor_release(d->freqs);
    free(d->dir);
    free(d);
}

/* ---------------------------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------------------------- */

/* get_timestep_embedding's frequencies for 256 channels, downscale_freq_shift 1, each step
 * rounded to f32 as torch computes them. */
static bool make_freqs(em_ctx *c, em_dit *d) {
    float f[TIME_CHANNELS / 2];
    float scale = (float)-log(10000.0), den = (float)(TIME_CHANNELS / 2 - 1);
    for (int i = 0; i < TIME_CHANNELS / 2; i++) f[i] = expf(scale * (float)i / den);
    em_tensor *t = em_from_host_on(c, d->dev, EM_F32, 2, (int64_t[]){1, TIME_CHANNELS / 2}, f);
    d->freqs = t ? em_detach(c, t) : NULL;
    return d->freqs != NULL;
}

static bool shard_block(em_ctx *c, const em_dit *d, dit_block *b) {
    const diff_tp *t = &d->tp;
    int64_t ff = 4 * d->inner, halves[2] = {ff, ff}; /* geglu's fused [hidden; gate] */
    bool geglu = d->cfg.activation == EM_DIT_ACT_GEGLU;
    return diff_tp_shard(c, t, &b->q, false, NULL, 0) &&
           diff_tp_shard(c, t, &b->k, false, NULL, 0) &&
           diff_tp_shard(c, t, &b->v, false, NULL, 0) &&
           diff_tp_shard(c, t, &b->out, true, NULL, 0) &&
           diff_tp_shard(c, t, &b->ff_in, false, geglu ? halves : NULL, geglu ? 2 : 0) &&
           diff_tp_shard(c, t, &b->ff_out, true, NULL, 0);
}

static bool load_block(unet_loader *l, em_dit *d, int64_t i) {
    const em_dit_config *cfg = &d->cfg;
    dit_block *b = &d->blocks[i];
    int64_t D = d->inner, ff = 4 * D; /* FeedForward(mult=4) */
    int64_t ff_rows = cfg->activation == EM_DIT_ACT_GEGLU ? 2 * ff : ff;
    char pre[96];
    snprintf(pre, sizeof pre, "transformer_blocks.%lld.norm1.emb.timestep_embedder",
             (long long)i);
    if (!unet_load_param(l, &b->t1, pre, "linear_1", true, 2, (int64_t[]){D, TIME_CHANNELS}) ||
        !unet_load_param(l, &b->t2, pre, "linear_2", true, 2, (int64_t[]){D, D}))
        return false;
    unet_param tab = {0};
    snprintf(pre, sizeof pre, "transformer_blocks.%lld.norm1.emb.class_embedder", (long long)i);
    if (!unet_load_param(l, &tab, pre, "embedding_table", false, 2,
                         (int64_t[]){cfg->num_embeds_ada_norm + 1, D}))
        return false;
    b->classes = tab.w;
    snprintf(pre, sizeof pre, "transformer_blocks.%lld", (long long)i);
    /* the weights tensor parallelism splits: read on the CPU, their slices moved by shard */
    unet_loader h = diff_tp_loader(l, &d->tp);
    if (!unet_load_param(l, &b->ada, pre, "norm1.linear", true, 2, (int64_t[]){6 * D, D}) ||
        !unet_load_param(&h, &b->q, pre, "attn1.to_q", cfg->attention_bias, 2,
                         (int64_t[]){D, D}) ||
        !unet_load_param(&h, &b->k, pre, "attn1.to_k", cfg->attention_bias, 2,
                         (int64_t[]){D, D}) ||
        !unet_load_param(&h, &b->v, pre, "attn1.to_v", cfg->attention_bias, 2,
                         (int64_t[]){D, D}) ||
        !unet_load_param(&h, &b->out, pre, "attn1.to_out.0", true, 2, (int64_t[]){D, D}) ||
        !unet_load_param(&h, &b->ff_in, pre, "ff.net.0.proj", true, 2,
                         (int64_t[]){ff_rows, D}) ||
        !unet_load_param(&h, &b->ff_out, pre, "ff.net.2", true, 2, (int64_t[]){D, ff}))
        return false;
    if (cfg->norm_elementwise_affine &&
        !unet_load_param(l, &b->norm3, pre, "norm3", true, 1, (int64_t[]){D}))
        return false;
    return shard_block(l->c, d, b);
}

static bool load_weights(unet_loader *l, void *user) {
    em_dit *d = user;
    const em_dit_config *cfg = &d->cfg;
    int64_t D = d->inner, p = cfg->patch_size;
    if (!unet_load_param(l, &d->patch, "pos_embed", "proj", true, 4,
                         (int64_t[]){D, cfg->in_channels, p, p}))
        return false;
    for (int64_t i = 0; i < cfg->num_layers; i++)
        if (!load_block(l, d, i)) return false;
    return unet_load_param(l, &d->out1, "", "proj_out_1", true, 2, (int64_t[]){2 * D, D}) &&
           unet_load_param(l, &d->out2, "", "proj_out_2", true, 2,
                           (int64_t[]){p * p * cfg->out_channels, D});
}

/* The split sizes divide by the tensor-parallel degree. */
static bool check_tp(em_ctx *c, em_dit *d) {
    if (!diff_tp_check(c, &d->tp, OP, d->dir, "num_attention_heads",
                       d->cfg.num_attention_heads) ||
        !diff_tp_check(c, &d->tp, OP, d->dir, "the feed-forward width (4 * inner dim)",
                       4 * d->inner))
        return false;
    d->heads = d->cfg.num_attention_heads / d->tp.size;
    return true;
}

em_dit *em_dit_load(em_ctx *c, const char *dir, const char *device, em_dtype dtype) {
    return em_dit_load_tp(c, dir, device, dtype, NULL);
}

em_dit *em_dit_load_tp(em_ctx *c, const char *dir, const char *device, em_dtype dtype,
                       em_dist *tp) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!diff_check_load_args(c, OP, dir, dtype)) return NULL;
    em_dit *d = calloc(1, sizeof *d);
    if (!d || !(d->dir = strdup(dir))) {
        free(d);
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    if (em_dit_config_load(c, dir, &d->cfg) != EM_OK) {
        em_dit_free(d);
        return NULL;
    }
    d->dtype = dtype;
    d->inner = d->cfg.num_attention_heads * d->cfg.attention_head_dim;
    d->heads = d->cfg.num_attention_heads;
    d->cp.size = 1;
    if (!diff_tp_init(c, &d->tp, tp, device, OP) || !check_tp(c, d)) {
        em_dit_free(d);
        return NULL;
    }
    d->dev = d->tp.dev;
    d->blocks = calloc((size_t)d->cfg.num_layers, sizeof *d->blocks);
    if (!d->blocks) em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    unet_loader l = {.c = c, .dir = dir, .op = OP, .dtype = dtype, .dev = d->dev};
    if (d->dev && d->blocks && make_freqs(c, d)) unet_load_folder(&l, load_weights, d);
    if (em_ctx_status(c)) {
        em_dit_free(d);
        return NULL;
    }
    return d;
}

/* ---------------------------------------------------------------------------------------------
 * Forward
 * ------------------------------------------------------------------------------------------- */

/* get_2d_sincos_pos_embed(D, (g, g), base_size = sample_size / patch_size) as [1, g*g, D] in
 * the model's dtype: the grid in f32 as torch builds it, the sines in double (torch.outer of the
 * f32 grid and the f64 omega promotes), rounded to f32. Token h * g + w holds sin/cos of its w
 * coordinate in the first half, of h in the second (meshgrid "xy" puts w first). */
static em_tensor *pos_embed(em_ctx *c, const em_dit *d, int64_t g) {
    int64_t D = d->inner, q = D / 4;
    float *buf = malloc((size_t)(g * g * D) * sizeof *buf);
    if (!buf) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    float base = (float)(d->cfg.sample_size / d->cfg.patch_size);
    for (int64_t h = 0; h < g; h++)
        for (int64_t w = 0; w < g; w++) {
            float *row = buf + (h * g + w) * D;
            /* arange(g) / (g / base_size) / interpolation_scale(1), in f32 */
            double coord[2] = {(double)((float)w / ((float)g / base)),
                               (double)((float)h / ((float)g / base))};
            for (int half = 0; half < 2; half++)
                for (int64_t k = 0; k < q; k++) {
                    double omega = 1.0 / pow(10000.0, (double)k / ((double)D / 4.0));
                    double a = coord[half] * omega;
                    row[half * 2 * q + k] = (float)sin(a);
                    row[half * 2 * q + q + k] = (float)cos(a);
                }
        }
    em_tensor *t = em_from_host_on(c, d->dev, EM_F32, 3, (int64_t[]){1, g * g, D}, buf);
    free(buf);
    return em_cast(c, t, d->dtype);
}

static bool check_inputs(em_ctx *c, const em_dit *d, em_tensor *x, em_tensor *t,
                         em_tensor *labels) {
    const em_dit_config *cfg = &d->cfg;
    char sig[160];
    int64_t p = cfg->patch_size;
    if (em_tensor_ndim(x) != 4 || em_tensor_dim(x, 1) != cfg->in_channels ||
        em_tensor_dim(x, 2) != em_tensor_dim(x, 3) || em_tensor_dim(x, 2) % p ||
        !em_tensor_dim(x, 2) || !em_tensor_dim(x, 0)) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP,
                    "sample %s must be [N, %lld, H, H] with H a positive multiple of the patch "
                    "size %lld (model %s)", em_tensor_sig(x, sig, sizeof sig),
                    (long long)cfg->in_channels, (long long)p, d->dir);
        return false;
    }
    if (em_tensor_dtype(x) != d->dtype) {
        em_ctx_fail(c, EM_ERR_DTYPE, OP, "sample %s: the model (%s) is %s",
                    em_tensor_sig(x, sig, sizeof sig), d->dir, em_dtype_name(d->dtype));
        return false;
    }
    int64_t n = em_tensor_dim(x, 0), tn = em_tensor_numel(t);
    if (em_tensor_ndim(t) > 1 || (tn != 1 && tn != n)) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP,
                    "timestep %s must be 0-d, [1] or [N] with N = %lld (the batch of the sample)",
                    em_tensor_sig(t, sig, sizeof sig), (long long)n);
        return false;
    }
    if (em_tensor_ndim(labels) != 1 || em_tensor_dim(labels, 0) != n ||
        em_dtype_is_float(em_tensor_dtype(labels))) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP, "class_labels %s: expected integer labels [%lld]",
                    em_tensor_sig(labels, sig, sizeof sig), (long long)n);
        return false;
    }
    em_tensor *on[3] = {x, t, labels};
    for (int i = 0; i < 3; i++)
        if (em_tensor_device(on[i]) != d->dev) {
            em_ctx_fail(c, EM_ERR_DEVICE, OP, "%s is on %s, the model (%s) on %s",
                        i == 0 ? "sample" : i == 1 ? "timestep" : "class_labels",
                        em_device_name(em_tensor_device(on[i])), d->dir,
                        em_device_name(d->dev));
            return false;
        }
    return true;
}

static em_tensor *lin(em_ctx *c, const unet_param *p, em_tensor *x) {
    return em_linear(c, x, p->w, p->b);
}

/* norm(x) * (1 + scale[:, None]) + shift[:, None] for [N, D] modulations */
static em_tensor *modulate(em_ctx *c, em_tensor *x, em_tensor *shift, em_tensor *scale) {
    return em_add(c, em_mul(c, x, em_add_scalar(c, em_unsqueeze(c, scale, 1), 1.0)),
                  em_unsqueeze(c, shift, 1));
}

/* CombinedTimestepLabelEmbeddings of block b: [N, D] */
static em_tensor *conditioning(em_ctx *c, const dit_block *b, em_tensor *tproj,
                               em_tensor *labels) {
    em_tensor *temb = lin(c, &b->t2, em_silu(c, lin(c, &b->t1, tproj)));
    return em_add(c, temb, em_embedding(c, b->classes, labels));
}

static em_tensor *lin_rows(em_ctx *c, const em_dit *d, const unet_param *p, em_tensor *x) {
    return diff_tp_lin_rows(c, &d->tp, p, x);
}

static em_tensor *feed_forward(em_ctx *c, const em_dit *d, const dit_block *b, em_tensor *h) {
    h = lin(c, &b->ff_in, h);
    switch (d->cfg.activation) {
    case EM_DIT_ACT_GELU_TANH: h = em_gelu(c, h, true); break;
    case EM_DIT_ACT_GELU: h = em_gelu(c, h, false); break;
    case EM_DIT_ACT_GEGLU: {
        em_tensor *parts[2] = {NULL, NULL};
        if (em_split(c, h, em_tensor_dim(h, 2) / 2, 2, parts, 2) != 2) return NULL;
        h = em_mul(c, parts[0], em_gelu(c, parts[1], false));
        break;
    }
    }
    return lin_rows(c, d, &b->ff_out, h);
}

static em_tensor *block_forward(em_ctx *c, const em_dit *d, const dit_block *b, em_tensor *x,
                                em_tensor *cond) {
    int64_t n = em_tensor_dim(x, 0), T = em_tensor_dim(x, 1), D = d->inner;
    int64_t H = d->heads, hd = d->cfg.attention_head_dim; /* this rank's heads */
    em_tensor *m[6] = {0}; /* shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp */
    if (em_split(c, lin(c, &b->ada, em_silu(c, cond)), D, 1, m, 6) != 6) return NULL;
    em_tensor *h = modulate(c, em_layer_norm(c, x, NULL, NULL, 1e-6), m[0], m[1]);
    em_tensor *qkv[3];
    const unet_param *w[3] = {&b->q, &b->k, &b->v};
    for (int i = 0; i < 3; i++)
        qkv[i] = em_transpose(c, em_reshape(c, lin(c, w[i], h), 4, (int64_t[]){n, T, H, hd}), 1, 2);
    /* over every rank's keys and values under context parallelism: [N, H, T, hd] */
    em_tensor *a = diff_cp_attention(c, &d->cp, qkv[0], qkv[1], qkv[2], NULL, NULL, false);
    a = lin_rows(c, d, &b->out,
                 em_reshape(c, em_transpose(c, a, 1, 2), 3, (int64_t[]){n, T, H * hd}));
    x = em_add(c, em_mul(c, em_unsqueeze(c, m[2], 1), a), x);
    h = em_layer_norm(c, x, b->norm3.w, b->norm3.b, d->cfg.norm_eps);
    h = feed_forward(c, d, b, modulate(c, h, m[3], m[4]));
    return em_add(c, em_mul(c, em_unsqueeze(c, m[5], 1), h), x);
}

em_tensor *em_dit_forward(em_ctx *c, em_dit *d, em_tensor *sample, em_tensor *timestep,
                          em_tensor *class_labels) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!d || !sample || !timestep || !class_labels) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "%s is NULL",
                    !d ? "model" : !sample ? "sample" : !timestep ? "timestep" : "class_labels");
        return NULL;
    }
    if (!check_inputs(c, d, sample, timestep, class_labels)) return NULL;
    const em_dit_config *cfg = &d->cfg;
    int64_t n = em_tensor_dim(sample, 0), p = cfg->patch_size, g = em_tensor_dim(sample, 2) / p;
    int64_t D = d->inner, T = g * g, oc = cfg->out_channels;
    em_scope_push(c);
    /* PatchEmbed: conv with stride p, [N, D, g, g] -> [N, T, D], plus the positional table */
    em_conv2d_params cp = em_conv2d_default_params();
    cp.stride[0] = cp.stride[1] = p;
    em_tensor *x = em_conv2d(c, sample, d->patch.w, d->patch.b, &cp);
    x = em_transpose(c, em_reshape(c, x, 3, (int64_t[]){n, D, T}), 1, 2);
    x = em_add(c, x, pos_embed(c, d, g));
    char what[96];
    snprintf(what, sizeof what, "%lld patches (%lld x %lld)", (long long)T, (long long)g,
             (long long)g);
    x = diff_cp_local(c, &d->cp, x, OP, what); /* this rank's tokens */
    if (!x) {
        em_scope_pop(c);
        return NULL;
    }
    /* Timesteps(256, flip_sin_to_cos=True, shift 1): cos then sin of t * freqs, per sample */
    em_tensor *tf = em_expand(c, em_reshape(c, em_cast(c, timestep, EM_F32), 1, (int64_t[]){-1}),
                              1, (int64_t[]){n});
    em_tensor *arg = em_mul(c, em_reshape(c, tf, 2, (int64_t[]){n, 1}), d->freqs);
    em_tensor *tp[2] = {em_cos(c, arg), em_sin(c, arg)};
    em_tensor *tproj = em_cast(c, em_cat(c, tp, 2, 1), d->dtype);
    em_tensor *cond0 = NULL;
    for (int64_t i = 0; i < cfg->num_layers && x; i++) {
        em_tensor *cond = conditioning(c, &d->blocks[i], tproj, class_labels);
        if (i == 0) cond0 = cond;
        x = block_forward(c, d, &d->blocks[i], x, cond);
    }
    /* the output's adaLN uses transformer_blocks[0]'s embedding; proj_out_1 gives shift, scale */
    em_tensor *ss[2] = {0};
    if (x && em_split(c, lin(c, &d->out1, em_silu(c, cond0)), D, 1, ss, 2) == 2) {
        x = modulate(c, em_layer_norm(c, x, NULL, NULL, 1e-6), ss[0], ss[1]);
        x = lin(c, &d->out2, x); /* [N, T, p*p*oc] */
        x = diff_cp_gather(c, &d->cp, x, 1); /* every rank's patches */
        /* unpatchify: "nhwpqc->nchpwq" */
        x = em_reshape(c, x, 6, (int64_t[]){n, g, g, p, p, oc});
        x = em_permute(c, x, 6, (const int[]){0, 5, 1, 3, 2, 4});
        x = em_reshape(c, em_contiguous(c, x), 4, (int64_t[]){n, oc, g * p, g * p});
    }
    x = em_ctx_status(c) ? NULL : em_keep(c, x);
    em_scope_pop(c);
    return x;
}

/* T5EncoderModel (transformers 5.24's modeling_t5.py), the T5 text encoder of Stable Diffusion 3
 * (text_encoder_3): the shared embedding, blocks of T5 self-attention (RMS layer norm without
 * mean or bias, no 1/sqrt(d) scale, a bidirectional relative position bias computed in block 0
 * and shared by every block) and the feed-forward (plain or gated), each added to its input,
 * then the final layer norm. config.json is read field by field with transformers' defaults;
 * values Ember does not implement are refused by name. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/weights.h"
#include "ember/ops.h"
#include "ember/t5.h"
#include "io/config/config_impl.h"

#define OP "T5EncoderModel"
#define MAX_SIZE ((int64_t)1 << 24)

typedef enum t5_act { ACT_RELU, ACT_GELU, ACT_GELU_TANH, ACT_SILU } t5_act;

/* One T5Block's tensors (WI_1 is NULL without a gated feed-forward; WI_0 is then `wi`). */
enum { LN0, Q, K, V, O, LN1, WI_0, WI_1, WO, N_BLOCK_T };

typedef struct t5_block {
    em_tensor *t[N_BLOCK_T];
} t5_block;

struct em_t5_encoder {
    em_t5_config cfg;
    char *dir;
    em_device *dev;
    t5_act act;
    em_tensor *embed, *rel_bias, *final_ln;
    t5_block *blocks; /* [num_layers] */
};

/* ---------------------------------------------------------------------------------------------
 * config.json
 * ------------------------------------------------------------------------------------------- */

static bool fail_format(em_cfg_src *s, const char *msg, const char *key) {
    em_ctx_fail(s->c, EM_ERR_FORMAT, OP, "%s: %s%s", s->file, key, msg);
    return false;
}

/* T5Config.__post_init__: dense_act_fn is the part after the last '-', is_gated_act whether the
 * first is "gated" ("gated-gelu": gelu_new); validate_architecture refuses other forms. */
static bool derive_act(em_cfg_src *s, em_t5_config *cfg) {
    const char *f = cfg->feed_forward_proj, *dash = strchr(f, '-');
    if (dash && (strncmp(f, "gated-", 6) || strchr(dash + 1, '-')))
        return fail_format(s, "' is not of the form '{act}' or 'gated-{act}' (transformers "
                              "refuses it)", "feed_forward_proj '"), false;
    snprintf(cfg->dense_act_fn, sizeof cfg->dense_act_fn, "%.23s", dash ? dash + 1 : f);
    cfg->is_gated_act = dash != NULL;
    if (!strcmp(f, "gated-gelu")) snprintf(cfg->dense_act_fn, sizeof cfg->dense_act_fn, "gelu_new");
    return true;
}

static bool parse(em_cfg_src *s, void *out) {
    em_t5_config *cfg = out;
    /* T5Config's defaults (transformers 5.24) */
    *cfg = (em_t5_config){.vocab_size = 32128, .d_model = 512, .d_kv = 64, .d_ff = 2048,
                          .num_layers = 6, .num_heads = 8, .relative_attention_num_buckets = 32,
                          .relative_attention_max_distance = 128, .feed_forward_proj = "relu",
                          .layer_norm_epsilon = 1e-6};
    char model_type[32] = "", act[24] = "";
    bool is_decoder = false, has_act = false, has_gated = false, gated = false;
    if (em_cfg_str(s, "model_type", true, model_type, sizeof model_type, NULL) ||
        em_cfg_bool(s, "is_decoder", true, &is_decoder, NULL) ||
        !diff_cfg_size(s, "vocab_size", &cfg->vocab_size, 1, MAX_SIZE) ||
        !diff_cfg_size(s, "d_model", &cfg->d_model, 1, MAX_SIZE) ||
        !diff_cfg_size(s, "d_kv", &cfg->d_kv, 1, MAX_SIZE) ||
        !diff_cfg_size(s, "d_ff", &cfg->d_ff, 1, MAX_SIZE) ||
        !diff_cfg_size(s, "num_layers", &cfg->num_layers, 1, 4096) ||
        !diff_cfg_size(s, "num_heads", &cfg->num_heads, 1, 4096) ||
        !diff_cfg_size(s, "relative_attention_num_buckets", &cfg->relative_attention_num_buckets,
                       2, 1 << 20) ||
        !diff_cfg_size(s, "relative_attention_max_distance",
                       &cfg->relative_attention_max_distance, 1, 1 << 30) ||
        em_cfg_str(s, "feed_forward_proj", false, cfg->feed_forward_proj,
                   sizeof cfg->feed_forward_proj, NULL) ||
        em_cfg_str(s, "dense_act_fn", true, act, sizeof act, &has_act) ||
        em_cfg_bool(s, "is_gated_act", true, &gated, &has_gated) ||
        em_cfg_num(s, "layer_norm_epsilon", false, &cfg->layer_norm_epsilon, NULL))
        return false;
    if (model_type[0] && strcmp(model_type, "t5"))
        return diff_cfg_unsupported(s, "model_type", model_type,
                                    "t5 is (umt5's per-layer position biases and other "
                                    "variants are not implemented)");
    if (is_decoder)
        return diff_cfg_unsupported(s, "is_decoder", "true", "the encoder (false) is");
    if (!derive_act(s, cfg)) return false;
    /* a saved config's dense_act_fn / is_gated_act win over the derived ones, as in
     * transformers (they are set again from the file after __post_init__) */
    if (has_act) snprintf(cfg->dense_act_fn, sizeof cfg->dense_act_fn, "%s", act);
    if (has_gated) cfg->is_gated_act = gated;
    if (!(cfg->layer_norm_epsilon > 0))
        return fail_format(s, " must be > 0", "layer_norm_epsilon");
    /* the bucketing divides by max_exact = num_buckets / 4 and by log(max_distance / max_exact) */
    if (cfg->relative_attention_num_buckets < 4)
        return fail_format(s, " must be at least 4 (bidirectional buckets need an exact bucket "
                              "per side)", "relative_attention_num_buckets");
    if (cfg->relative_attention_max_distance <= cfg->relative_attention_num_buckets / 4)
        return fail_format(s, " must exceed relative_attention_num_buckets / 4 (the exact "
                              "buckets)", "relative_attention_max_distance");
    if (cfg->num_heads * cfg->d_kv > MAX_SIZE)
        return fail_format(s, " * d_kv is too large", "num_heads");
    const char *a = cfg->dense_act_fn;
    if (strcmp(a, "relu") && strcmp(a, "gelu") && strcmp(a, "gelu_new") &&
        strcmp(a, "gelu_pytorch_tanh") && strcmp(a, "silu") && strcmp(a, "swish"))
        return diff_cfg_unsupported(s, "dense_act_fn", a,
                                    "relu, gelu, gelu_new, gelu_pytorch_tanh, silu and swish "
                                    "are");
    return true;
}

static t5_act act_of(const char *a) {
    return !strcmp(a, "relu")                                       ? ACT_RELU
           : !strcmp(a, "gelu")                                     ? ACT_GELU
           : !strcmp(a, "silu") || !strcmp(a, "swish")             ? ACT_SILU
                                                                    : ACT_GELU_TANH;
}

/* ---------------------------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------------------------- */

static em_tensor *get2(diff_weights *w, const char *name, int64_t rows, int64_t cols) {
    return diff_load_checked(w, name, 2, (int64_t[]){rows, cols});
}

static bool load_weights(diff_weights *w, em_t5_encoder *m) {
    const em_t5_config *g = &m->cfg;
    int64_t d = g->d_model, inner = g->num_heads * g->d_kv, f = g->d_ff;
    /* T5EncoderModel ties encoder.embed_tokens to shared; transformers 5 saves shared.weight,
     * older checkpoints may hold either */
    const char *emb = em_safetensors_find(w->st, "shared.weight") ? "shared.weight"
                                                                  : "encoder.embed_tokens.weight";
    m->embed = get2(w, emb, g->vocab_size, d);
    m->rel_bias = get2(w, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                       g->relative_attention_num_buckets, g->num_heads);
    for (int64_t i = 0; i < g->num_layers && !em_ctx_status(w->c); i++) {
        char n[160];
        em_tensor **t = m->blocks[i].t;
#define NAME(fmt) (snprintf(n, sizeof n, "encoder.block.%lld." fmt, (long long)i), n)
        t[LN0] = diff_load_checked(w, NAME("layer.0.layer_norm.weight"), 1, (int64_t[]){d});
        t[Q] = get2(w, NAME("layer.0.SelfAttention.q.weight"), inner, d);
        t[K] = get2(w, NAME("layer.0.SelfAttention.k.weight"), inner, d);
        t[V] = get2(w, NAME("layer.0.SelfAttention.v.weight"), inner, d);
        t[O] = get2(w, NAME("layer.0.SelfAttention.o.weight"), d, inner);
        t[LN1] = diff_load_checked(w, NAME("layer.1.layer_norm.weight"), 1, (int64_t[]){d});
        if (g->is_gated_act) {
            t[WI_0] = get2(w, NAME("layer.1.DenseReluDense.wi_0.weight"), f, d);
            t[WI_1] = get2(w, NAME("layer.1.DenseReluDense.wi_1.weight"), f, d);
        } else {
            t[WI_0] = get2(w, NAME("layer.1.DenseReluDense.wi.weight"), f, d);
        }
        t[WO] = get2(w, NAME("layer.1.DenseReluDense.wo.weight"), d, f);
#undef NAME
    }
    m->final_ln = diff_load_checked(w, "encoder.final_layer_norm.weight", 1, (int64_t[]){d});
    return !em_ctx_status(w->c);
}

em_t5_encoder *em_t5_encoder_load(em_ctx *c, const char *dir, const char *device) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!dir || !*dir) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "the folder is NULL or empty");
        return NULL;
    }
    em_t5_encoder *m = calloc(1, sizeof *m);
    char *file = NULL;
    if (!m || !(m->dir = strdup(dir))) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        goto fail;
    }
    if (diff_config_load(c, OP, dir, parse, &m->cfg, sizeof m->cfg)) goto fail;
    m->act = act_of(m->cfg.dense_act_fn);
    m->dev = device ? em_device_get(c, device) : em_ctx_device(c);
    m->blocks = calloc((size_t)m->cfg.num_layers, sizeof *m->blocks);
    if (!m->blocks) em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    if (!m->dev || em_ctx_status(c)) goto fail;
    if (!(file = diff_text_weights_file(c, OP, dir))) goto fail;
    em_safetensors *st = em_safetensors_open(c, file);
    if (!st) goto fail;
    diff_weights w = {c, st, file, dir, OP, EM_F32, m->dev};
    em_scope_push(c);
    load_weights(&w, m);
    em_scope_pop(c);
    em_safetensors_free(st);
    if (em_ctx_status(c)) goto fail;
    free(file);
    return m;
fail:
    free(file);
    em_t5_encoder_free(m);
    return NULL;
}

void em_t5_encoder_free(em_t5_encoder *m) {
    if (!m) return;
    em_tensor_release(m->embed);
    em_tensor_release(m->rel_bias);
    em_tensor_release(m->final_ln);
    for (int64_t i = 0; m->blocks && i < m->cfg.num_layers; i++)
        for (int k = 0; k < N_BLOCK_T; k++) em_tensor_release(m->blocks[i].t[k]);
    free(m->blocks);
    free(m->dir);
    free(m);
}

const em_t5_config *em_t5_encoder_get_config(const em_t5_encoder *m) {
    return m ? &m->cfg : NULL;
}

em_device *em_t5_encoder_device(const em_t5_encoder *m) { return m ? m->dev : NULL; }

/* ---------------------------------------------------------------------------------------------
 * Forward
 * ------------------------------------------------------------------------------------------- */

/* T5Attention._relative_position_bucket, bidirectional, for relative position rp = key - query:
 * half the buckets for rp > 0; of each half, exact buckets below max_exact, then logarithmic
 * ones up to max_distance (computed in f32 and truncated, as torch does). */
static int64_t bucket(int64_t rp, int64_t num_buckets, int64_t max_distance) {
    int64_t nb = num_buckets / 2, r = rp > 0 ? nb : 0, a = rp < 0 ? -rp : rp;
    int64_t max_exact = nb / 2;
    if (a < max_exact) return r + a;
    float l = logf((float)a / (float)max_exact) /
              (float)log((double)max_distance / (double)max_exact) * (float)(nb - max_exact);
    int64_t large = max_exact + (int64_t)l;
    return r + (large < nb - 1 ? large : nb - 1);
}

/* compute_bias: [1, heads, T, T] from block 0's relative_attention_bias. */
static em_tensor *position_bias(em_ctx *c, const em_t5_encoder *m, int64_t t) {
    const em_t5_config *g = &m->cfg;
    int64_t *b = malloc((size_t)(t * t) * sizeof *b);
    if (!b) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    for (int64_t q = 0; q < t; q++)
        for (int64_t k = 0; k < t; k++)
            b[q * t + k] = bucket(k - q, g->relative_attention_num_buckets,
                                  g->relative_attention_max_distance);
    em_tensor *ids = em_from_host_on(c, m->dev, EM_I64, 2, (int64_t[]){t, t}, b);
    free(b);
    em_tensor *v = em_embedding(c, m->rel_bias, ids); /* [T, T, heads] */
    return em_reshape(c, em_permute(c, v, 3, (int[]){2, 0, 1}), 4,
                      (int64_t[]){1, g->num_heads, t, t});
}

static em_tensor *activation(em_ctx *c, t5_act a, em_tensor *x) {
    switch (a) {
    case ACT_RELU: return em_relu(c, x);
    case ACT_GELU: return em_gelu(c, x, false);
    case ACT_GELU_TANH: return em_gelu(c, x, true);
    case ACT_SILU: return em_silu(c, x);
    }
    return NULL;
}

static em_tensor *heads(em_ctx *c, em_tensor *x, int64_t b, int64_t t, int64_t h, int64_t d) {
    return em_transpose(c, em_reshape(c, x, 4, (int64_t[]){b, t, h, d}), 1, 2);
}

/* T5Block: T5LayerSelfAttention then T5LayerFF, each pre-normed and added to its input. */
static em_tensor *block(em_ctx *c, const em_t5_encoder *m, const t5_block *B, em_tensor *h,
                        em_tensor *bias, int64_t b, int64_t t) {
    const em_t5_config *g = &m->cfg;
    em_tensor *const *w = B->t;
    em_tensor *x = em_rms_norm(c, h, w[LN0], g->layer_norm_epsilon, false);
    em_tensor *q = heads(c, em_linear(c, x, w[Q], NULL), b, t, g->num_heads, g->d_kv);
    em_tensor *k = heads(c, em_linear(c, x, w[K], NULL), b, t, g->num_heads, g->d_kv);
    em_tensor *v = heads(c, em_linear(c, x, w[V], NULL), b, t, g->num_heads, g->d_kv);
    em_sdpa_params sp = em_sdpa_default_params();
    sp.scale = 1.0; /* T5 folds the scale into its initialisation */
    em_tensor *a = em_sdpa(c, q, k, v, bias, &sp);
    a = em_reshape(c, em_transpose(c, a, 1, 2), 3, (int64_t[]){b, t, g->num_heads * g->d_kv});
    h = em_add(c, h, em_linear(c, a, w[O], NULL));
    x = em_rms_norm(c, h, w[LN1], g->layer_norm_epsilon, false);
    em_tensor *f = activation(c, m->act, em_linear(c, x, w[WI_0], NULL));
    if (w[WI_1]) f = em_mul(c, f, em_linear(c, x, w[WI_1], NULL));
    return em_add(c, h, em_linear(c, f, w[WO], NULL));
}

static bool check_inputs(em_ctx *c, const em_t5_encoder *m, em_tensor *ids, em_tensor *mask) {
    char s1[96], s2[96];
    if (!m || !ids) return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "model or ids is NULL"), false;
    em_dtype dt = em_tensor_dtype(ids);
    if (dt != EM_I64 && dt != EM_I32)
        return em_ctx_fail(c, EM_ERR_DTYPE, OP, "ids must be i64 or i32, got %s",
                           em_tensor_sig(ids, s1, sizeof s1)), false;
    if (em_tensor_ndim(ids) != 2 || em_tensor_dim(ids, 0) < 1 || em_tensor_dim(ids, 1) < 1 ||
        em_tensor_dim(ids, 1) > 65536)
        return em_ctx_fail(c, EM_ERR_SHAPE, OP, "ids must be [B, T] with 1 <= T <= 65536, got "
                           "%s", em_tensor_sig(ids, s1, sizeof s1)), false;
    if (mask && (em_tensor_ndim(mask) != 2 || em_tensor_dim(mask, 0) != em_tensor_dim(ids, 0) ||
                 em_tensor_dim(mask, 1) != em_tensor_dim(ids, 1)))
        return em_ctx_fail(c, EM_ERR_SHAPE, OP, "attention_mask %s does not match ids %s",
                           em_tensor_sig(mask, s2, sizeof s2), em_tensor_sig(ids, s1, sizeof s1)),
               false;
    return true;
}

em_tensor *em_t5_encoder_forward(em_ctx *c, const em_t5_encoder *m, em_tensor *ids,
                                 em_tensor *attention_mask) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!check_inputs(c, m, ids, attention_mask)) return NULL;
    int64_t b = em_tensor_dim(ids, 0), t = em_tensor_dim(ids, 1);
    em_scope_push(c);
    em_tensor *id = em_cast(c, em_to(c, ids, m->dev), EM_I64);
    em_tensor *h = em_embedding(c, m->embed, id);
    em_tensor *bias = position_bias(c, m, t);
    if (attention_mask) {
        /* keys the mask hides get the dtype's minimum added, as transformers' mask does */
        em_tensor *mf = em_cast(c, em_to(c, attention_mask, m->dev), EM_BOOL);
        mf = em_cast(c, em_reshape(c, mf, 4, (int64_t[]){b, 1, 1, t}), EM_F32);
        bias = em_add(c, bias, em_mul_scalar(c, em_add_scalar(c, mf, -1.0), FLT_MAX));
    }
    for (int64_t i = 0; i < m->cfg.num_layers && !em_ctx_status(c); i++)
        h = block(c, m, &m->blocks[i], h, bias, b, t);
    em_tensor *out = em_rms_norm(c, h, m->final_ln, m->cfg.layer_norm_epsilon, false);
    if (out && !em_ctx_status(c)) out = em_keep(c, out);
    em_scope_pop(c);
    return em_ctx_status(c) ? NULL : out;
}

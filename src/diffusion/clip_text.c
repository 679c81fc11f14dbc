/* CLIPTextModel and CLIPTextModelWithProjection (transformers 5.24's modeling_clip.py), the text
 * encoder of Stable Diffusion pipelines: token + position embeddings, pre-LayerNorm encoder
 * layers under a causal mask (and the attention mask), a final LayerNorm, the eos row pooled.
 * Its config.json is read field by field with transformers' defaults; values Ember does not
 * implement are refused by name. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/weights.h"
#include "ember/clip.h"
#include "ember/ops.h"
#include "io/config/config_impl.h"

#define OP "CLIPTextModel"
#define MAX_SIZE ((int64_t)1 << 30)

typedef enum clip_act { ACT_QUICK_GELU, ACT_GELU, ACT_GELU_TANH, ACT_RELU } clip_act;

/* One CLIPEncoderLayer's tensors, in the order LAYER_NAMES names them. */
enum { LN1_W, LN1_B, Q_W, Q_B, K_W, K_B, V_W, V_B, O_W, O_B, LN2_W, LN2_B, FC1_W, FC1_B, FC2_W,
       FC2_B, N_LAYER_T };
static const char *const LAYER_NAMES[N_LAYER_T] = {
    "layer_norm1.weight", "layer_norm1.bias", "self_attn.q_proj.weight", "self_attn.q_proj.bias",
    "self_attn.k_proj.weight", "self_attn.k_proj.bias", "self_attn.v_proj.weight",
    "self_attn.v_proj.bias", "self_attn.out_proj.weight", "self_attn.out_proj.bias",
    "layer_norm2.weight", "layer_norm2.bias", "mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight",
    "mlp.fc2.bias"};

typedef struct clip_layer {
    em_tensor *t[N_LAYER_T];
} clip_layer;

struct em_clip_text {
    em_clip_text_config cfg;
    char *dir;
    em_device *dev;
    clip_act act;
    em_tensor *tok_emb, *pos_emb, *final_w, *final_b, *proj;
    clip_layer *layers; /* [num_hidden_layers] */
};

/* ---------------------------------------------------------------------------------------------
 * config.json
 * ------------------------------------------------------------------------------------------- */

static bool read_size(em_cfg_src *s, const char *key, int64_t *v, bool zero_ok) {
    if (em_cfg_int(s, key, false, v, NULL) || em_cfg_positive(s, key, *v, zero_ok)) return false;
    if (*v > MAX_SIZE) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, OP, "%s: %s%s is %lld, more than %lld", s->file,
                    s->prefix, key, (long long)*v, (long long)MAX_SIZE);
        return false;
    }
    return true;
}

static bool parse_config(em_cfg_src *s, em_clip_text_config *cfg, clip_act *act) {
    /* CLIPTextConfig's defaults (transformers 5.24) */
    *cfg = (em_clip_text_config){.vocab_size = 49408, .hidden_size = 512,
                                 .intermediate_size = 2048, .num_hidden_layers = 12,
                                 .num_attention_heads = 8, .max_position_embeddings = 77,
                                 .projection_dim = 512, .bos_token_id = 49406,
                                 .eos_token_id = 49407, .pad_token_id = 1,
                                 .hidden_act = "quick_gelu", .layer_norm_eps = 1e-5};
    int64_t eos[8];
    int n_eos = 0;
    bool has_eos = false;
    if (!read_size(s, "vocab_size", &cfg->vocab_size, false) ||
        !read_size(s, "hidden_size", &cfg->hidden_size, false) ||
        !read_size(s, "intermediate_size", &cfg->intermediate_size, false) ||
        !read_size(s, "num_hidden_layers", &cfg->num_hidden_layers, false) ||
        !read_size(s, "num_attention_heads", &cfg->num_attention_heads, false) ||
        !read_size(s, "max_position_embeddings", &cfg->max_position_embeddings, false) ||
        em_cfg_int(s, "projection_dim", true, &cfg->projection_dim, NULL) ||
        em_cfg_int(s, "bos_token_id", true, &cfg->bos_token_id, NULL) ||
        em_cfg_int(s, "pad_token_id", true, &cfg->pad_token_id, NULL) ||
        em_cfg_ids(s, "eos_token_id", eos, &n_eos, &has_eos) ||
        em_cfg_str(s, "hidden_act", false, cfg->hidden_act, sizeof cfg->hidden_act, NULL) ||
        em_cfg_num(s, "layer_norm_eps", true, &cfg->layer_norm_eps, NULL))
        return false;
    if (has_eos && n_eos != 1) {
        em_ctx_fail(s->c, EM_ERR_UNSUPPORTED, OP,
                    "%s: %seos_token_id must be one id for the pooled output, got %d", s->file,
                    s->prefix, n_eos);
        return false;
    }
    if (has_eos) cfg->eos_token_id = eos[0];
    const char *a = cfg->hidden_act;
    if (!strcmp(a, "quick_gelu"))
        *act = ACT_QUICK_GELU;
    else if (!strcmp(a, "gelu"))
        *act = ACT_GELU;
    else if (!strcmp(a, "gelu_new") || !strcmp(a, "gelu_pytorch_tanh"))
        *act = ACT_GELU_TANH;
    else if (!strcmp(a, "relu"))
        *act = ACT_RELU;
    else {
        em_ctx_fail(s->c, EM_ERR_UNSUPPORTED, OP,
                    "%shidden_act '%s' is not supported (quick_gelu, gelu, gelu_new, "
                    "gelu_pytorch_tanh and relu are; in %s)",
                    s->prefix, a, s->file);
        return false;
    }
    if (cfg->hidden_size % cfg->num_attention_heads) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, OP,
                    "%s: hidden_size %lld is not a multiple of num_attention_heads %lld", s->file,
                    (long long)cfg->hidden_size, (long long)cfg->num_attention_heads);
        return false;
    }
    if (!(cfg->layer_norm_eps > 0)) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, OP, "%s: %slayer_norm_eps must be > 0", s->file,
                    s->prefix);
        return false;
    }
    return true;
}

/* config.json of a CLIPTextModel, or a CLIPModel's text_config. */
static bool load_config(em_ctx *c, const char *dir, em_clip_text_config *cfg, clip_act *act) {
    json_t *root = NULL;
    char *file = NULL;
    if (em_cfg_load_file(c, OP, dir, "config.json", &root, &file)) return false;
    em_cfg_src s = {c, file, "", root, OP, NULL};
    char model_type[64] = "";
    bool ok = !em_cfg_str(&s, "model_type", true, model_type, sizeof model_type, NULL);
    json_t *text = json_object_get(root, "text_config");
    if (ok && model_type[0] && strcmp(model_type, "clip_text_model") && strcmp(model_type, "clip")) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP,
                    "model_type '%s' is not a CLIP text encoder (clip_text_model and clip are; "
                    "in %s)", model_type, file);
        ok = false;
    }
    if (ok && text && !json_is_null(text)) {
        if (!json_is_object(text)) {
            em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s: text_config is %s, expected an object", file,
                        em_cfg_kind(text));
            ok = false;
        }
        s.obj = text;
        s.prefix = "text_config.";
    }
    ok = ok && parse_config(&s, cfg, act);
    json_decref(root);
    free(file);
    return ok;
}

/* ---------------------------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------------------------- */

/* transformers 5 saves CLIPTextModel's weights without the "text_model." prefix that
 * CLIPTextModelWithProjection, CLIPModel and every checkpoint written before it use (Stable
 * Diffusion's text_encoder/); both load, as in transformers. */
static const char *weight_prefix(const em_safetensors *st) {
    return em_safetensors_find(st, "embeddings.token_embedding.weight") &&
                   !em_safetensors_find(st, "text_model.embeddings.token_embedding.weight")
               ? ""
               : "text_model.";
}

static em_tensor *get(diff_weights *w, const char *prefix, const char *name, int ndim,
                      const int64_t *shape) {
    char key[192];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    return diff_load_checked(w, key, ndim, shape);
}

static bool load_weights(diff_weights *w, em_clip_text *m) {
    const em_clip_text_config *g = &m->cfg;
    const char *p = weight_prefix(w->st);
    int64_t h = g->hidden_size, f = g->intermediate_size;
    m->tok_emb = get(w, p, "embeddings.token_embedding.weight", 2, (int64_t[]){g->vocab_size, h});
    m->pos_emb = get(w, p, "embeddings.position_embedding.weight", 2,
                     (int64_t[]){g->max_position_embeddings, h});
    for (int64_t i = 0; i < g->num_hidden_layers && !em_ctx_status(w->c); i++)
        for (int k = 0; k < N_LAYER_T && !em_ctx_status(w->c); k++) {
            char name[160];
            snprintf(name, sizeof name, "encoder.layers.%lld.%s", (long long)i, LAYER_NAMES[k]);
            int64_t rows = k == FC1_W || k == FC1_B ? f : h;
            int64_t cols = k == FC2_W ? f : h;
            bool vec = k % 2 == 1 || k == LN1_W || k == LN2_W; /* biases are the odd names */
            m->layers[i].t[k] = get(w, p, name, vec ? 1 : 2, (int64_t[]){rows, cols});
        }
    m->final_w = get(w, p, "final_layer_norm.weight", 1, (int64_t[]){h});
    m->final_b = get(w, p, "final_layer_norm.bias", 1, (int64_t[]){h});
    if (!em_ctx_status(w->c) && em_safetensors_find(w->st, "text_projection.weight")) {
        if (!g->projection_dim) {
            em_ctx_fail(w->c, EM_ERR_FORMAT, OP,
                        "%s has text_projection.weight but %s/config.json has no projection_dim",
                        w->file, w->dir);
            return false;
        }
        m->proj = diff_load_checked(w, "text_projection.weight", 2,
                                    (int64_t[]){g->projection_dim, h});
        m->cfg.has_projection = m->proj != NULL;
    }
    return !em_ctx_status(w->c);
}

em_clip_text *em_clip_text_load(em_ctx *c, const char *dir, const char *device) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!dir || !*dir) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "the folder is NULL or empty");
        return NULL;
    }
    em_clip_text *m = calloc(1, sizeof *m);
    char *file = NULL;
    if (!m || !(m->dir = strdup(dir))) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        goto fail;
    }
    if (!load_config(c, dir, &m->cfg, &m->act)) goto fail;
    m->dev = device ? em_device_get(c, device) : em_ctx_device(c);
    m->layers = calloc((size_t)m->cfg.num_hidden_layers, sizeof *m->layers);
    if (!m->layers) em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
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
    em_clip_text_free(m);
    return NULL;
}

void em_clip_text_free(em_clip_text *m) {
    if (!m) return;
    em_tensor *const top[] = {m->tok_emb, m->pos_emb, m->final_w, m->final_b, m->proj};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) em_tensor_release(top[i]);
    for (int64_t i = 0; m->layers && i < m->cfg.num_hidden_layers; i++)
        for (int k = 0; k < N_LAYER_T; k++) em_tensor_release(m->layers[i].t[k]);
    free(m->layers);
    free(m->dir);
    free(m);
}

const em_clip_text_config *em_clip_text_get_config(const em_clip_text *m) {
    return m ? &m->cfg : NULL;
}

em_device *em_clip_text_device(const em_clip_text *m) { return m ? m->dev : NULL; }

/* ---------------------------------------------------------------------------------------------
 * Forward
 * ------------------------------------------------------------------------------------------- */

static em_tensor *activation(em_ctx *c, clip_act a, em_tensor *x) {
    switch (a) {
    case ACT_QUICK_GELU: /* x * sigmoid(1.702 * x), as transformers' QuickGELUActivation */
        return em_mul(c, x, em_sigmoid(c, em_mul_scalar(c, x, 1.702)));
    case ACT_GELU: return em_gelu(c, x, false);
    case ACT_GELU_TANH: return em_gelu(c, x, true);
    case ACT_RELU: return em_relu(c, x);
    }
    return NULL;
}

static em_tensor *heads(em_ctx *c, em_tensor *x, int64_t b, int64_t t, int64_t h, int64_t d) {
    return em_transpose(c, em_reshape(c, x, 4, (int64_t[]){b, t, h, d}), 1, 2);
}

/* CLIPEncoderLayer: pre-norm attention and MLP, each added to its input. */
static em_tensor *layer(em_ctx *c, const em_clip_text *m, const clip_layer *L, em_tensor *h,
                        em_tensor *mask, int64_t b, int64_t t) {
    const em_clip_text_config *g = &m->cfg;
    int64_t nh = g->num_attention_heads, hd = g->hidden_size / nh;
    em_tensor *const *w = L->t;
    em_tensor *x = em_layer_norm(c, h, w[LN1_W], w[LN1_B], g->layer_norm_eps);
    em_tensor *q = heads(c, em_linear(c, x, w[Q_W], w[Q_B]), b, t, nh, hd);
    em_tensor *k = heads(c, em_linear(c, x, w[K_W], w[K_B]), b, t, nh, hd);
    em_tensor *v = heads(c, em_linear(c, x, w[V_W], w[V_B]), b, t, nh, hd);
    em_sdpa_params sp = em_sdpa_default_params();
    sp.causal = true;
    em_tensor *a = em_sdpa(c, q, k, v, mask, &sp);
    a = em_reshape(c, em_transpose(c, a, 1, 2), 3, (int64_t[]){b, t, g->hidden_size});
    h = em_add(c, h, em_linear(c, a, w[O_W], w[O_B]));
    x = em_layer_norm(c, h, w[LN2_W], w[LN2_B], g->layer_norm_eps);
    x = em_linear(c, activation(c, m->act, em_linear(c, x, w[FC1_W], w[FC1_B])), w[FC2_W],
                  w[FC2_B]);
    return em_add(c, h, x);
}

static bool check_inputs(em_ctx *c, const em_clip_text *m, em_tensor *ids, em_tensor *mask,
                         int hidden_index) {
    char s1[96], s2[96];
    if (!m || !ids)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "model or ids is NULL"), false;
    em_dtype dt = em_tensor_dtype(ids);
    if (dt != EM_I64 && dt != EM_I32)
        return em_ctx_fail(c, EM_ERR_DTYPE, OP, "ids must be i64 or i32, got %s",
                           em_tensor_sig(ids, s1, sizeof s1)), false;
    if (em_tensor_ndim(ids) != 2 || em_tensor_dim(ids, 1) < 1 || em_tensor_dim(ids, 0) < 1 ||
        em_tensor_dim(ids, 1) > m->cfg.max_position_embeddings)
        return em_ctx_fail(c, EM_ERR_SHAPE, OP,
                           "ids must be [B, T] with 1 <= T <= %lld (max_position_embeddings of "
                           "%s), got %s", (long long)m->cfg.max_position_embeddings, m->dir,
                           em_tensor_sig(ids, s1, sizeof s1)), false;
    if (mask && (em_tensor_ndim(mask) != 2 || em_tensor_dim(mask, 0) != em_tensor_dim(ids, 0) ||
                 em_tensor_dim(mask, 1) != em_tensor_dim(ids, 1)))
        return em_ctx_fail(c, EM_ERR_SHAPE, OP, "attention_mask %s does not match ids %s",
                           em_tensor_sig(mask, s2, sizeof s2), em_tensor_sig(ids, s1, sizeof s1)),
               false;
    int64_t n = m->cfg.num_hidden_layers + 1;
    if (hidden_index != EM_CLIP_TEXT_NO_HIDDEN && (hidden_index < -n || hidden_index >= n))
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP,
                           "hidden_index %d: the model has %lld hidden states (%d to %lld)",
                           hidden_index, (long long)n, (int)-n, (long long)n - 1), false;
    return true;
}

/* The row of each sequence's eos token, as transformers picks it. */
static em_tensor *pool(em_ctx *c, const em_clip_text *m, em_tensor *last, em_tensor *ids) {
    int64_t b = em_tensor_dim(last, 0), h = em_tensor_dim(last, 2);
    em_tensor *key = ids;
    if (m->cfg.eos_token_id != 2) /* the first eos; 2: the largest id (configs before #24773) */
        key = em_cast(c, em_eq(c, ids, em_to(c, em_scalar(c, (double)m->cfg.eos_token_id, EM_I64),
                                             m->dev)),
                      EM_I32);
    em_tensor *pos = em_reshape(c, em_argmax(c, key, 1, false), 3, (int64_t[]){b, 1, 1});
    return em_reshape(c, em_take_along_dim(c, last, pos, 1), 2, (int64_t[]){b, h});
}

em_status em_clip_text_forward(em_ctx *c, const em_clip_text *m, em_tensor *ids,
                               em_tensor *attention_mask, int hidden_index,
                               em_clip_text_output *out) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (out) memset(out, 0, sizeof *out);
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!out) return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "out is NULL");
    if (!check_inputs(c, m, ids, attention_mask, hidden_index)) return em_ctx_status(c);
    int64_t b = em_tensor_dim(ids, 0), t = em_tensor_dim(ids, 1);
    int64_t n_layers = m->cfg.num_hidden_layers;
    int64_t want = hidden_index == EM_CLIP_TEXT_NO_HIDDEN ? -1
                   : hidden_index < 0                     ? hidden_index + n_layers + 1
                                                          : hidden_index;
    em_scope_push(c);
    em_tensor *id = em_cast(c, em_to(c, ids, m->dev), EM_I64);
    em_tensor *pos = em_to(c, em_arange(c, 0, (double)t, 1, EM_I64), m->dev);
    em_tensor *h = em_add(c, em_embedding(c, m->tok_emb, id), em_embedding(c, m->pos_emb, pos));
    /* keys the attention mask hides, on top of the causal mask */
    em_tensor *mask = attention_mask
                          ? em_reshape(c, em_cast(c, em_to(c, attention_mask, m->dev), EM_BOOL), 4,
                                       (int64_t[]){b, 1, 1, t})
                          : NULL;
    em_tensor *hidden = want == 0 ? h : NULL;
    for (int64_t i = 0; i < n_layers && !em_ctx_status(c); i++) {
        h = layer(c, m, &m->layers[i], h, mask, b, t);
        if (want == i + 1) hidden = h;
    }
    em_tensor *last = em_layer_norm(c, h, m->final_w, m->final_b, m->cfg.layer_norm_eps);
    em_tensor *pooled = pool(c, m, last, id);
    em_tensor *embeds = m->proj ? em_linear(c, pooled, m->proj, NULL) : NULL;
    if (!em_ctx_status(c)) {
        out->last_hidden_state = em_keep(c, last);
        out->pooler_output = em_keep(c, pooled);
        out->text_embeds = embeds ? em_keep(c, embeds) : NULL;
        out->hidden_state = hidden ? em_keep(c, hidden) : NULL;
    }
    em_scope_pop(c);
    if (em_ctx_status(c)) memset(out, 0, sizeof *out);
    return em_ctx_status(c);
}

em_tensor *em_clip_text_prompt_embeds(em_ctx *c, const em_clip_text *m, em_tensor *ids,
                                      em_tensor *attention_mask, int clip_skip) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!m || clip_skip < 0 || clip_skip > m->cfg.num_hidden_layers) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "clip_skip %d: expected 0 to num_hidden_layers (%lld)",
                    clip_skip, m ? (long long)m->cfg.num_hidden_layers : 0LL);
        return NULL;
    }
    em_clip_text_output o;
    if (em_clip_text_forward(c, m, ids, attention_mask,
                             clip_skip ? -(clip_skip + 1) : EM_CLIP_TEXT_NO_HIDDEN, &o))
        return NULL;
    if (!clip_skip) return o.last_hidden_state;
    /* diffusers: final_layer_norm(hidden_states[-(clip_skip + 1)]) */
    return em_layer_norm(c, o.hidden_state, m->final_w, m->final_b, m->cfg.layer_norm_eps);
}

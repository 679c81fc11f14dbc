/*
 * Gemma 4 text (transformers' Gemma4TextModel / Gemma4ForCausalLM, and the language model of
 * gemma4 checkpoints, read under model.language_model.). What sets it apart from Gemma 3:
 *
 *  - RMSNorm times w (not 1 + w), in f32 and rounded once; a scale-free RMSNorm on the values;
 *    q/k norms and an attention scale of 1;
 *  - sliding and full-attention layers of different sizes: full layers take global_head_dim
 *    (per_layer_config[i].head_dim in files transformers writes) and, with attention_k_eq_v,
 *    num_global_key_value_heads and values equal to the keys' projection; sliding layers use
 *    the default rope, full layers the proportional one (only a fraction of the frequencies
 *    rotate, over the whole head);
 *  - per-layer inputs (hidden_size_per_layer_input = P > 0): a second embedding [V, L*P] and a
 *    projection of the embeddings, mixed per layer into the residual through a gated branch;
 *  - KV sharing: the last num_kv_shared_layers layers reuse the keys/values of the last earlier
 *    layer of their type (and have no cache of their own); their MLP is twice as wide with
 *    use_double_wide_mlp (read off the weights' shapes);
 *  - enable_moe_block: a dense MLP and a routed expert block in parallel, each with its own
 *    norms, summed; a learned layer_scalar multiplies each layer's output;
 *  - final_logit_softcapping computed in the model dtype, as transformers does.
 *
 * The per-layer-input modules (embed_tokens_per_layer, per_layer_model_projection,
 * per_layer_projection_norm) live with the embeddings on device_map's embed_tokens device.
 * Not supported: use_bidirectional_attention "all" (an encoder), image/audio/video tokens (the
 * vision and audio towers are not loaded), and per_layer_config overrides other than head_dim,
 * num_key_value_heads and intermediate_size.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model_impl.h"

#define OP "model_load"

/* ---- configuration ---- */

/* A value of config.json, from text_config first when the config is nested. */
static json_t *raw(const em_model_config *cfg, const char *key) {
    json_t *root = cfg->json_, *v = NULL;
    json_t *tc = json_object_get(root, "text_config");
    if (cfg->nested_text_config && json_is_object(tc)) v = json_object_get(tc, key);
    if (!v || json_is_null(v)) v = json_object_get(root, key);
    return v && !json_is_null(v) ? v : NULL;
}

static int64_t get_int(const em_model_config *cfg, const char *key, int64_t dflt) {
    int64_t v;
    return em_model_config_get_int(cfg, key, &v) ? v : dflt;
}

static bool get_bool(const em_model_config *cfg, const char *key, bool dflt) {
    bool v;
    return em_model_config_get_bool(cfg, key, &v) ? v : dflt;
}

/* Head size and kv heads of every layer, as Gemma4TextConfig.__post_init__ and the
 * heterogeneous per_layer_config resolve them. */
static em_status layer_sizes(em_ctx *c, em_model *m) {
    const em_model_config *cfg = &m->cfg;
    json_t *plc = raw(cfg, "per_layer_config");
    for (int64_t i = 0; i < m->n_layers; i++) {
        em_dec_layer *l = &m->layers[i];
        em_layer_type t = cfg->layer_types[i];
        if (t != EM_LAYER_FULL_ATTENTION && t != EM_LAYER_SLIDING_ATTENTION)
            return em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP,
                               "%s/config.json: layer %lld is neither sliding_attention nor "
                               "full_attention, which Gemma 4 does not have", m->dir,
                               (long long)i);
        l->sliding = t == EM_LAYER_SLIDING_ATTENTION;
        l->head_dim = cfg->head_dim;
        l->kv_heads = cfg->num_key_value_heads;
        l->k_eq_v = !l->sliding && get_bool(cfg, "attention_k_eq_v", false);
    }
    if (plc) { /* files transformers writes: {"<layer>": {"head_dim": 512, ...}} */
        if (!json_is_object(plc))
            return em_ctx_fail(c, EM_ERR_FORMAT, OP,
                               "%s/config.json: per_layer_config is not an object", m->dir);
        const char *key;
        json_t *over;
        json_object_foreach(plc, key, over) {
            char *end;
            long long i = strtoll(key, &end, 10);
            if (!*key || *end || i < 0 || i >= m->n_layers || !json_is_object(over))
                return em_ctx_fail(c, EM_ERR_FORMAT, OP,
                                   "%s/config.json: per_layer_config key '%s' is not a layer "
                                   "index below %lld with an object", m->dir, key,
                                   (long long)m->n_layers);
            const char *k;
            json_t *v;
            json_object_foreach(over, k, v) {
                bool hd = !strcmp(k, "head_dim"), kvh = !strcmp(k, "num_key_value_heads");
                if (!strcmp(k, "intermediate_size")) continue; /* read off the weights */
                if (!hd && !kvh)
                    return em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP,
                                       "%s/config.json: per_layer_config[%s].%s is not "
                                       "supported (head_dim, num_key_value_heads and "
                                       "intermediate_size are)", m->dir, key, k);
                if (!json_is_integer(v) || json_integer_value(v) <= 0)
                    return em_ctx_fail(c, EM_ERR_FORMAT, OP,
                                       "%s/config.json: per_layer_config[%s].%s is not a "
                                       "positive integer", m->dir, key, k);
                *(hd ? &m->layers[i].head_dim : &m->layers[i].kv_heads) =
                    (int64_t)json_integer_value(v);
            }
        }
    } else { /* Hub files: global_head_dim, num_global_key_value_heads */
        int64_t g = get_int(cfg, "global_head_dim", 512);
        int64_t gkv = get_int(cfg, "num_global_key_value_heads", -1);
        for (int64_t i = 0; i < m->n_layers; i++) {
            em_dec_layer *l = &m->layers[i];
            if (l->sliding) continue;
            l->head_dim = g;
            if (gkv > 0 && get_bool(cfg, "attention_k_eq_v", false)) l->kv_heads = gkv;
        }
    }
    for (int64_t i = 0; i < m->n_layers; i++) {
        const em_dec_layer *l = &m->layers[i];
        if (l->head_dim <= 0 || l->kv_heads <= 0 || cfg->num_attention_heads % l->kv_heads)
            return em_ctx_fail(c, EM_ERR_FORMAT, OP,
                               "%s/config.json: layer %lld has head_dim %lld and %lld kv heads "
                               "for %lld attention heads", m->dir, (long long)i,
                               (long long)l->head_dim, (long long)l->kv_heads,
                               (long long)cfg->num_attention_heads);
        /* one rope table per layer type: its layers share a head size */
        for (int64_t j = 0; j < i; j++)
            if (m->layers[j].sliding == l->sliding && m->layers[j].head_dim != l->head_dim)
                return em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP,
                                   "%s/config.json: %s layers %lld and %lld have head sizes %lld "
                                   "and %lld", m->dir, l->sliding ? "sliding" : "full",
                                   (long long)j, (long long)i, (long long)m->layers[j].head_dim,
                                   (long long)l->head_dim);
    }
    return EM_OK;
}

/* kv_sharing_modes of Gemma4TextConfig: from the first shared layer on, each layer reads the
 * keys/values of the last layer of its type before it. */
static em_status kv_sharing(em_ctx *c, em_model *m) {
    int64_t n = m->n_layers, shared = get_int(&m->cfg, "num_kv_shared_layers", 0);
    if (shared < 0 || (n > 0 && shared >= n))
        return em_ctx_fail(c, EM_ERR_FORMAT, OP,
                           "%s/config.json: num_kv_shared_layers %lld leaves no layer computing "
                           "keys and values (of %lld)", m->dir, (long long)shared, (long long)n);
    m->first_kv_shared = n - shared;
    for (int64_t i = m->first_kv_shared; i < n; i++) {
        em_dec_layer *l = &m->layers[i];
        int64_t src = -1;
        for (int64_t j = m->first_kv_shared - 1; j >= 0 && src < 0; j--)
            if (m->layers[j].sliding == l->sliding) src = j;
        if (src < 0)
            return em_ctx_fail(c, EM_ERR_FORMAT, OP,
                               "%s/config.json: layer %lld (%s) shares keys and values, but no "
                               "earlier layer of its type computes them", m->dir, (long long)i,
                               l->sliding ? "sliding_attention" : "full_attention");
        if (m->layers[src].head_dim != l->head_dim || m->layers[src].kv_heads != l->kv_heads)
            return em_ctx_fail(c, EM_ERR_FORMAT, OP,
                               "%s/config.json: layer %lld reads the keys of layer %lld, whose "
                               "sizes differ", m->dir, (long long)i, (long long)src);
        l->kv_shared = true;
        l->kv_src = src;
    }
    return EM_OK;
}

/* One rope table per layer type, for its head size. */
static em_status ropes(em_ctx *c, em_model *m) {
    const em_model_config *cfg = &m->cfg;
    for (int pass = 0; pass < 2; pass++) {
        bool sliding = pass == 1;
        int64_t hd = 0;
        for (int64_t i = 0; i < m->n_layers && !hd; i++)
            if (m->layers[i].sliding == sliding) hd = m->layers[i].head_dim;
        if (!hd) continue;
        em_rope_config r = sliding ? cfg->rope_local : cfg->rope;
        bool known = sliding ? cfg->rope_local_known : cfg->rope_known;
        if (!known)
            return em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP,
                               "%s/config.json: rope_type '%s' of the %s layers is not supported",
                               m->dir, sliding ? cfg->rope_local_type : cfg->rope_type,
                               sliding ? "sliding_attention" : "full_attention");
        r.head_dim = hd;
        int n = em_rope_inv_freq(c, &r, cfg->max_position_embeddings,
                                 sliding ? m->inv_freq_local : m->inv_freq, EM_MAX_ROPE_FREQS,
                                 sliding ? &m->rope_scaling_local : &m->rope_scaling);
        if (n < 0) return em_ctx_status(c);
        *(sliding ? &m->n_freq_local : &m->n_freq) = n;
    }
    return EM_OK;
}

/* ---- loading ---- */

/* A linear weight's output size must be what the config says. */
static void expect_dim(em_wload *w, em_tensor *t, int d, int64_t n, const char *lp,
                       const char *name) {
    if (!t || em_ctx_status(w->c) || em_tensor_dim(t, d) == n) return;
    char s[96];
    em_ctx_fail(w->c, EM_ERR_FORMAT, OP, "%s%s is %s in %s, but config.json gives %lld for dim %d",
                lp, name, em_tensor_sig(t, s, sizeof s), w->m->dir, (long long)n, d);
}

static void load_layer(em_wload *w, int64_t i) {
    em_model *m = w->m;
    const em_model_config *cfg = &m->cfg;
    em_dec_layer *l = &m->layers[i];
    em_device *d = l->dev;
    char lp[160];
    snprintf(lp, sizeof lp, "%slayers.%lld.", w->prefix, (long long)i);
    int64_t hq = cfg->num_attention_heads;
    l->in_norm = em_wl_get(w, d, "%sinput_layernorm.weight", lp);
    l->post_attn_norm = em_wl_get(w, d, "%spost_attention_layernorm.weight", lp);
    l->pre_ffn_norm = em_wl_get(w, d, "%spre_feedforward_layernorm.weight", lp);
    l->post_ffn_norm = em_wl_get(w, d, "%spost_feedforward_layernorm.weight", lp);
    l->q = em_wl_get(w, d, "%sself_attn.q_proj.weight", lp);
    l->q_norm = em_wl_get(w, d, "%sself_attn.q_norm.weight", lp);
    l->o = em_wl_get(w, d, "%sself_attn.o_proj.weight", lp);
    l->q_bias = em_wl_opt(w, d, "%sself_attn.q_proj.bias", lp);
    l->o_bias = em_wl_opt(w, d, "%sself_attn.o_proj.bias", lp);
    expect_dim(w, l->q, 0, hq * l->head_dim, lp, "self_attn.q_proj.weight");
    expect_dim(w, l->o, 1, hq * l->head_dim, lp, "self_attn.o_proj.weight");
    if (!l->kv_shared) { /* shared layers have no key/value weights (a checkpoint may) */
        l->k = em_wl_get(w, d, "%sself_attn.k_proj.weight", lp);
        l->k_norm = em_wl_get(w, d, "%sself_attn.k_norm.weight", lp);
        l->k_bias = em_wl_opt(w, d, "%sself_attn.k_proj.bias", lp);
        expect_dim(w, l->k, 0, l->kv_heads * l->head_dim, lp, "self_attn.k_proj.weight");
        if (!l->k_eq_v) {
            l->v = em_wl_get(w, d, "%sself_attn.v_proj.weight", lp);
            l->v_bias = em_wl_opt(w, d, "%sself_attn.v_proj.bias", lp);
            expect_dim(w, l->v, 0, l->kv_heads * l->head_dim, lp, "self_attn.v_proj.weight");
        }
    }
    l->gate = em_wl_get(w, d, "%smlp.gate_proj.weight", lp);
    l->up = em_wl_get(w, d, "%smlp.up_proj.weight", lp);
    l->down = em_wl_get(w, d, "%smlp.down_proj.weight", lp);
    l->moe = cfg->num_experts > 0; /* enable_moe_block: every layer */
    if (l->moe) {
        l->router = em_wl_get(w, d, "%srouter.proj.weight", lp);
        l->router_scale = em_wl_get(w, d, "%srouter.scale", lp);
        l->experts.per_expert_scale = em_wl_get(w, d, "%srouter.per_expert_scale", lp);
        em_wl_experts(w, d, lp, cfg->num_experts, "gate_proj", "up_proj", "down_proj",
                      &l->experts.gate_up, &l->experts.down);
        l->post_ffn_norm_1 = em_wl_get(w, d, "%spost_feedforward_layernorm_1.weight", lp);
        l->post_ffn_norm_2 = em_wl_get(w, d, "%spost_feedforward_layernorm_2.weight", lp);
        l->pre_ffn_norm_2 = em_wl_get(w, d, "%spre_feedforward_layernorm_2.weight", lp);
        expect_dim(w, l->router, 0, cfg->num_experts, lp, "router.proj.weight");
    }
    if (m->pl_dim > 0) {
        l->pl_gate = em_wl_get(w, d, "%sper_layer_input_gate.weight", lp);
        l->pl_proj = em_wl_get(w, d, "%sper_layer_projection.weight", lp);
        l->pl_norm = em_wl_get(w, d, "%spost_per_layer_input_norm.weight", lp);
        expect_dim(w, l->pl_gate, 0, m->pl_dim, lp, "per_layer_input_gate.weight");
    }
    l->layer_scalar = em_wl_opt(w, d, "%slayer_scalar", lp); /* absent: ones */
}

static em_status gemma4_load(em_wload *w) {
    em_ctx *c = w->c;
    em_model *m = w->m;
    const em_model_config *cfg = &m->cfg;
    const char *p = w->prefix;
    const char *bidi = em_model_config_get_string(cfg, "use_bidirectional_attention");
    if (bidi && !strcmp(bidi, "all"))
        return em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP,
                           "%s/config.json: use_bidirectional_attention \"all\" (an encoder) is "
                           "not supported", m->dir);
    if (cfg->num_attention_heads <= 0 || !cfg->layer_types)
        return em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s/config.json: no attention heads or layer "
                           "types", m->dir);
    m->act = em_decoder_act(cfg->hidden_act);
    m->embed_scale = sqrt((double)cfg->hidden_size);
    m->pl_dim = get_int(cfg, "hidden_size_per_layer_input", 0);
    if (m->pl_dim < 0)
        return em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s/config.json: hidden_size_per_layer_input "
                           "%lld", m->dir, (long long)m->pl_dim);
    if (layer_sizes(c, m) || kv_sharing(c, m) || ropes(c, m)) return em_ctx_status(c);

    m->embed = em_wl_get(w, m->dev_embed, "%sembed_tokens.weight", p);
    if (m->pl_dim > 0) {
        m->embed_pl = em_wl_get(w, m->dev_embed, "%sembed_tokens_per_layer.weight", p);
        m->pl_model_proj = em_wl_get(w, m->dev_embed, "%sper_layer_model_projection.weight", p);
        m->pl_proj_norm = em_wl_get(w, m->dev_embed, "%sper_layer_projection_norm.weight", p);
        expect_dim(w, m->embed_pl, 1, m->n_layers * m->pl_dim, p,
                   "embed_tokens_per_layer.weight");
        expect_dim(w, m->pl_model_proj, 0, m->n_layers * m->pl_dim, p,
                   "per_layer_model_projection.weight");
    }
    for (int64_t i = 0; i < m->n_layers && !em_ctx_status(c); i++) load_layer(w, i);
    m->final_norm = em_wl_get(w, m->dev_head, "%snorm.weight", p);
    if (em_ctx_status(c)) return em_ctx_status(c);
    m->lm_head = em_wl_opt(w, m->dev_head, "lm_head.weight");
    if (!m->lm_head && !em_ctx_status(c)) {
        if (!cfg->tie_word_embeddings)
            return em_ctx_fail(c, EM_ERR_NOT_FOUND, OP,
                               "lm_head.weight is missing from %s and tie_word_embeddings is "
                               "false", m->dir);
        m->lm_head = m->dev_head == m->dev_embed ? m->embed
                                                 : em_detach(c, em_to(c, m->embed, m->dev_head));
    }
    return em_ctx_status(c);
}

/* ---- forward ---- */

typedef struct fwd {
    em_ctx *c;
    const em_model *m;
    int64_t b, t, pos0, tk;   /* batch, query positions, cached positions, keys */
    em_tensor *positions;     /* [B, T] i64 on the CPU */
    em_tensor *key_mask;      /* [B, Tk] bool on the CPU, or NULL */
    em_tensor *pli;           /* per-layer inputs [B, T, L, P] (embed device), or NULL */
    em_tensor **keys, **vals; /* per layer: the keys/values it attended to (for sharing) */
    /* per device: rope tables for each layer type and the mask */
    em_device *dev;
    em_tensor *cos_s, *sin_s, *cos_f, *sin_f, *mask;
} fwd;

static void enter_device(fwd *f, em_device *d) {
    if (f->dev == d) return;
    em_ctx *c = f->c;
    const em_model *m = f->m;
    f->dev = d;
    em_tensor *pos = em_model_to_dev(c, f->positions, d);
    f->cos_s = f->sin_s = f->cos_f = f->sin_f = NULL;
    if (m->n_freq > 0) {
        em_tensor *inv = em_from_host_on(c, d, EM_F32, 1, (int64_t[]){m->n_freq}, m->inv_freq);
        f->cos_f = em_rope_cos_sin(c, pos, inv, m->rope_scaling, m->dtype, &f->sin_f);
    }
    if (m->n_freq_local > 0) {
        em_tensor *inv = em_from_host_on(c, d, EM_F32, 1, (int64_t[]){m->n_freq_local},
                                         m->inv_freq_local);
        f->cos_s = em_rope_cos_sin(c, pos, inv, m->rope_scaling_local, m->dtype, &f->sin_s);
    }
    f->mask = f->key_mask
                  ? em_reshape(c, em_model_to_dev(c, f->key_mask, d), 4, (int64_t[]){f->b, 1, 1, f->tk})
                  : NULL;
}

/* x times a Python float: torch keeps the number in f32 for bf16 tensors (opmath), where
 * em_mul_scalar would round it to the tensor's dtype first. */
static em_tensor *mul_py(em_ctx *c, em_tensor *x, double v) {
    if (!x) return NULL;
    float fv = (float)v;
    return em_mul(c, x, em_from_host_on(c, em_tensor_device(x), EM_F32, 0, NULL, &fv));
}

static em_tensor *div_py(em_ctx *c, em_tensor *x, double v) {
    if (!x) return NULL;
    float fv = (float)v;
    return em_div(c, x, em_from_host_on(c, em_tensor_device(x), EM_F32, 0, NULL, &fv));
}

/* Gemma4RMSNorm: x.float() normalised, times w.float() (w may be NULL), rounded once. */
static em_tensor *norm(fwd *f, em_tensor *x, em_tensor *w) {
    em_ctx *c = f->c;
    double eps = f->m->cfg.rms_norm_eps;
    if (!x || em_tensor_dtype(x) == EM_F32) return em_rms_norm(c, x, w, eps, false);
    em_tensor *y = em_rms_norm(c, em_cast(c, x, EM_F32), w ? em_cast(c, w, EM_F32) : NULL, eps,
                               false);
    return em_cast(c, y, em_tensor_dtype(x));
}

static em_tensor *act(fwd *f, em_tensor *g) {
    switch (f->m->act) {
    case EM_ACT_GELU_TANH: return em_gelu(f->c, g, true);
    case EM_ACT_GELU: return em_gelu(f->c, g, false);
    default: return em_silu(f->c, g);
    }
}

/* [B, T, H*D] -> [B, T, H, D] */
static em_tensor *split_heads(fwd *f, em_tensor *x, int64_t h, int64_t d) {
    return em_reshape(f->c, x, 4, (int64_t[]){f->b, f->t, h, d});
}

/* Does a shared layer read layer li's keys/values? */
static bool kv_read_later(const em_model *m, int64_t li) {
    for (int64_t j = m->first_kv_shared; j < m->n_layers; j++)
        if (m->layers[j].kv_src == li) return true;
    return false;
}

static em_tensor *attention(fwd *f, const em_dec_layer *l, em_tensor *x, em_kv_cache *kv,
                            int64_t li) {
    em_ctx *c = f->c;
    const em_model *m = f->m;
    int64_t hq = m->cfg.num_attention_heads, hkv = l->kv_heads, d = l->head_dim;
    em_tensor *cos = l->sliding ? f->cos_s : f->cos_f, *sin = l->sliding ? f->sin_s : f->sin_f;
    em_tensor *q = norm(f, split_heads(f, em_linear(c, x, l->q, l->q_bias), hq, d), l->q_norm);
    q = em_rope(c, em_transpose(c, q, 1, 2), cos, sin);
    em_tensor *k, *v;
    if (l->kv_shared) {
        k = em_model_to_dev(c, f->keys[l->kv_src], l->dev);
        v = em_model_to_dev(c, f->vals[l->kv_src], l->dev);
    } else {
        em_tensor *kr = split_heads(f, em_linear(c, x, l->k, l->k_bias), hkv, d);
        em_tensor *vr = l->k_eq_v ? kr : split_heads(f, em_linear(c, x, l->v, l->v_bias), hkv, d);
        k = em_rope(c, em_transpose(c, norm(f, kr, l->k_norm), 1, 2), cos, sin);
        v = em_transpose(c, norm(f, vr, NULL), 1, 2);
        if (kv) {
            em_assign(c, em_slice(c, kv->k[li], 2, f->pos0, f->pos0 + f->t, 1), k);
            em_assign(c, em_slice(c, kv->v[li], 2, f->pos0, f->pos0 + f->t, 1), v);
            k = em_slice(c, kv->k[li], 2, 0, f->tk, 1);
            v = em_slice(c, kv->v[li], 2, 0, f->tk, 1);
        }
        if (kv_read_later(m, li)) { /* outlives this layer's scope */
            f->keys[li] = em_keep(c, k);
            f->vals[li] = em_keep(c, v);
        }
    }
    em_sdpa_params sp = em_sdpa_default_params();
    sp.scale = 1.0; /* q and k are normalised instead */
    sp.causal = true;
    sp.window = l->sliding ? m->cfg.sliding_window : 0;
    em_tensor *a = em_sdpa(c, q, k, v, f->mask, &sp);
    a = em_reshape(c, em_transpose(c, a, 1, 2), 3, (int64_t[]){f->b, f->t, hq * d});
    return em_linear(c, a, l->o, l->o_bias);
}

static em_tensor *mlp(fwd *f, const em_dec_layer *l, em_tensor *x) {
    em_ctx *c = f->c;
    em_tensor *h = em_mul(c, act(f, em_linear(c, x, l->gate, NULL)), em_linear(c, x, l->up, NULL));
    return em_linear(c, h, l->down, NULL);
}

/* Gemma4TextRouter and Gemma4TextExperts on the residual h [B, T, H]. */
static em_tensor *experts(fwd *f, const em_dec_layer *l, em_tensor *h, em_kv_cache *kv) {
    em_ctx *c = f->c;
    const em_model *m = f->m;
    int64_t hidden = m->cfg.hidden_size;
    em_tensor *flat = em_reshape(c, h, 2, (int64_t[]){f->b * f->t, hidden});
    em_tensor *r = mul_py(c, em_mul(c, norm(f, flat, NULL), l->router_scale),
                          pow((double)hidden, -0.5));
    em_moe_params p = em_moe_default_params();
    p.top_k = m->cfg.num_experts_per_tok;
    p.norm_topk_prob = true;
    p.act = m->act == EM_ACT_GELU_TANH ? EM_MOE_ACT_GELU_TANH : EM_MOE_ACT_SILU;
    p.impl = m->moe_impl;
    em_tensor *idx = NULL;
    /* the weights stay f32: the per-expert scale multiplies f32 probabilities */
    em_tensor *w = em_moe_route(c, em_linear(c, r, l->router, NULL), &p,
                                l->experts.per_expert_scale, EM_F32, &idx);
    em_moe_stats st = {0, 0};
    em_tensor *y = em_moe_experts(c, norm(f, flat, l->pre_ffn_norm_2), idx, w, &l->experts, &p,
                                  &st);
    if (kv) kv->experts_hit += st.experts_hit;
    return em_reshape(c, y, 3, (int64_t[]){f->b, f->t, hidden});
}

static em_tensor *layer(fwd *f, const em_dec_layer *l, em_tensor *h, em_kv_cache *kv,
                        int64_t li) {
    em_ctx *c = f->c;
    em_tensor *a = norm(f, attention(f, l, norm(f, h, l->in_norm), kv, li), l->post_attn_norm);
    h = em_add(c, h, a);
    em_tensor *y = mlp(f, l, norm(f, h, l->pre_ffn_norm));
    if (l->moe) /* the dense MLP and the experts side by side, both on the residual */
        y = em_add(c, norm(f, y, l->post_ffn_norm_1),
                   norm(f, experts(f, l, h, kv), l->post_ffn_norm_2));
    h = em_add(c, h, norm(f, y, l->post_ffn_norm));
    if (f->pli) {
        const em_model *m = f->m;
        em_tensor *in = em_reshape(c, em_narrow(c, f->pli, 2, li, 1), 3,
                                   (int64_t[]){f->b, f->t, m->pl_dim});
        em_tensor *g = em_mul(c, act(f, em_linear(c, h, l->pl_gate, NULL)),
                              em_model_to_dev(c, in, l->dev));
        h = em_add(c, h, norm(f, em_linear(c, g, l->pl_proj, NULL), l->pl_norm));
    }
    return l->layer_scalar ? em_mul(c, h, l->layer_scalar) : h;
}

/* get_per_layer_inputs + project_per_layer_inputs: [B, T, L, P] */
static em_tensor *per_layer_inputs(fwd *f, em_tensor *ids, em_tensor *emb) {
    em_ctx *c = f->c;
    const em_model *m = f->m;
    int64_t shape[4] = {f->b, f->t, m->n_layers, m->pl_dim};
    /* the scale is rounded to the model dtype first, as embed_scale.to(weight.dtype) */
    em_tensor *tok = em_mul_scalar(c, em_embedding(c, m->embed_pl, ids),
                                   sqrt((double)m->pl_dim));
    em_tensor *proj = mul_py(c, em_linear(c, emb, m->pl_model_proj, NULL),
                             pow((double)m->cfg.hidden_size, -0.5));
    proj = norm(f, em_reshape(c, proj, 4, shape), m->pl_proj_norm);
    return mul_py(c, em_add(c, proj, em_reshape(c, tok, 4, shape)), pow(2.0, -0.5));
}

/* _maybe_slice_kv_shared_inputs: the shared layers write no cache, so when only the last
 * position's logits are wanted they run on that position alone. */
static em_tensor *keep_last(fwd *f, em_tensor *h) {
    em_ctx *c = f->c;
    h = em_narrow(c, h, 1, f->t - 1, 1);
    if (f->pli) f->pli = em_narrow(c, f->pli, 1, f->t - 1, 1);
    f->positions = em_narrow(c, f->positions, 1, f->t - 1, 1);
    f->t = 1;
    f->dev = NULL; /* rope tables for the new positions */
    return h;
}

static em_tensor *gemma4_forward(em_ctx *c, const em_model *m, em_tensor *ids,
                                 em_tensor *key_mask, em_kv_cache *kv, bool last_only) {
    int64_t b = em_tensor_dim(ids, 0), t = em_tensor_dim(ids, 1);
    int64_t pos0 = kv ? kv->len : 0;
    em_tensor **saved = calloc((size_t)m->n_layers * 2 + 2, sizeof *saved);
    if (!saved) {
        em_ctx_fail(c, EM_ERR_OOM, "model_forward", "out of memory");
        return NULL;
    }
    em_scope_push(c);
    if (kv) kv->experts_hit = 0;
    fwd f;
    memset(&f, 0, sizeof f);
    f.c = c;
    f.m = m;
    f.b = b;
    f.t = t;
    f.pos0 = pos0;
    f.tk = pos0 + t;
    f.keys = saved;
    f.vals = saved + m->n_layers + 1;
    f.positions = em_decoder_positions(c, key_mask, b, t, pos0, f.tk);
    f.key_mask = key_mask ? em_cast(c, key_mask, EM_BOOL) : NULL;
    enter_device(&f, m->dev_embed);
    em_tensor *ids_e = em_model_to_dev(c, ids, m->dev_embed);
    /* the scale is rounded to the model dtype first (Gemma4TextScaledWordEmbedding) */
    em_tensor *h = em_mul_scalar(c, em_embedding(c, m->embed, ids_e), m->embed_scale);
    if (m->pl_dim > 0) f.pli = per_layer_inputs(&f, ids_e, h);
    for (int64_t i = 0; i < m->n_layers && !em_ctx_status(c); i++) {
        const em_dec_layer *l = &m->layers[i];
        if (i == m->first_kv_shared && last_only && f.t > 1) h = keep_last(&f, h);
        enter_device(&f, l->dev);
        h = em_model_to_dev(c, h, l->dev);
        em_scope_push(c);
        em_tensor *next = em_keep(c, layer(&f, l, h, kv, i));
        em_scope_pop(c);
        h = next;
    }
    h = em_model_to_dev(c, h, m->dev_head);
    if (last_only && f.t > 1) h = em_narrow(c, h, 1, f.t - 1, 1);
    h = norm(&f, h, m->final_norm);
    em_tensor *logits = em_linear(c, h, m->lm_head, NULL);
    double cap = m->cfg.final_logit_softcapping;
    if (cap > 0) /* in the model dtype, as Gemma4ForCausalLM */
        logits = mul_py(c, em_tanh(c, div_py(c, logits, cap)), cap);
    logits = em_cast(c, logits, EM_F32);
    if (!em_ctx_status(c) && kv) kv->len = f.tk;
    em_tensor *r = em_keep(c, logits);
    em_scope_pop(c);
    free(saved);
    return r;
}

const em_family em_family_gemma4_text = {"gemma4_text", true,        true, true, 0,
                                         gemma4_load,   gemma4_forward};

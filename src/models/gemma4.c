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
 *
 * Its config keys are read by the config hook (gemma4_config); its layer is composed of the
 * decoder's blocks (decoder_blocks.h) on the shared forward, so compile mode traces it too.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/config/config_impl.h"
#include "models/decoder_blocks.h"

#define OP "model_load"

/* ---- configuration (the family's config hook) ---- */

/* Gemma 4's own keys, read through the config reader's typed readers from the text part (so a
 * value of the wrong type is an error naming the key). */
typedef struct g4cfg {
    em_cfg_src s;
    em_model *m;
    const char *layer; /* per_layer_config: the layer key being read */
    em_status err;     /* the first reading error */
} g4cfg;

static int64_t get_int(g4cfg *g, const char *key, int64_t dflt) {
    int64_t v = dflt;
    if (!g->err) g->err = em_cfg_int(&g->s, key, true, &v, NULL);
    return v;
}

static bool get_bool(g4cfg *g, const char *key, bool dflt) {
    bool v = dflt;
    if (!g->err) g->err = em_cfg_bool(&g->s, key, true, &v, NULL);
    return v;
}

/* per_layer_config[<layer>].<name> */
static em_status layer_key(em_cfg_src *sub, const char *name, void *user) {
    g4cfg *g = user;
    em_model *m = g->m;
    long long i = strtoll(g->layer, NULL, 10);
    bool hd = !strcmp(name, "head_dim"), kvh = !strcmp(name, "num_key_value_heads");
    if (!strcmp(name, "intermediate_size")) return EM_OK; /* read off the weights */
    if (!hd && !kvh)
        return em_ctx_fail(g->s.c, EM_ERR_UNSUPPORTED, OP,
                           "%s/config.json: per_layer_config[%s].%s is not supported (head_dim, "
                           "num_key_value_heads and intermediate_size are)", m->dir, g->layer,
                           name);
    int64_t v = 0;
    em_status e = em_cfg_int(sub, name, false, &v, NULL);
    if (e) return e;
    if (v <= 0)
        return em_ctx_fail(g->s.c, EM_ERR_FORMAT, OP,
                           "%s/config.json: per_layer_config[%s].%s is not a positive integer",
                           m->dir, g->layer, name);
    *(hd ? &m->layers[i].head_dim : &m->layers[i].kv_heads) = v;
    return EM_OK;
}

/* per_layer_config[<name>]: files transformers writes, {"<layer>": {"head_dim": 512, ...}} */
static em_status layer_entry(em_cfg_src *sub, const char *name, void *user) {
    g4cfg *g = user;
    em_model *m = g->m;
    char *end;
    long long i = strtoll(name, &end, 10);
    if (!*name || *end || i < 0 || i >= m->n_layers)
        return em_ctx_fail(g->s.c, EM_ERR_FORMAT, OP,
                           "%s/config.json: per_layer_config key '%s' is not a layer index "
                           "below %lld with an object", m->dir, name, (long long)m->n_layers);
    g->layer = name;
    return em_cfg_each(sub, name, layer_key, g, NULL);
}

/* Head size and kv heads of every layer, as Gemma4TextConfig.__post_init__ and the
 * heterogeneous per_layer_config resolve them. */
static em_status layer_sizes(g4cfg *g) {
    em_model *m = g->m;
    em_ctx *c = g->s.c;
    const em_model_config *cfg = &m->cfg;
    bool k_eq_v = get_bool(g, "attention_k_eq_v", false);
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
        l->k_eq_v = !l->sliding && k_eq_v;
    }
    bool per_layer = false;
    if (g->err || em_cfg_each(&g->s, "per_layer_config", layer_entry, g, &per_layer))
        return em_ctx_status(c);
    if (!per_layer) { /* Hub files: global_head_dim, num_global_key_value_heads */
        int64_t gd = get_int(g, "global_head_dim", 512);
        int64_t gkv = get_int(g, "num_global_key_value_heads", -1);
        for (int64_t i = 0; i < m->n_layers; i++) {
            em_dec_layer *l = &m->layers[i];
            if (l->sliding) continue;
            l->head_dim = gd;
            if (gkv > 0 && k_eq_v) l->kv_heads = gkv;
        }
        if (g->err) return g->err;
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
static em_status kv_sharing(g4cfg *g) {
    em_ctx *c = g->s.c;
    em_model *m = g->m;
    int64_t n = m->n_layers, shared = get_int(g, "num_kv_shared_layers", 0);
    if (g->err) return g->err;
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
    /* this rank's heads (tensor parallelism splits q, k, v by head; em_tp_localize divides the
     * config's counts after loading) */
    int64_t hq = cfg->num_attention_heads / m->tp_size;
    int64_t hkv = l->kv_heads / em_tp_kv_parts(m, l->kv_heads);
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
        expect_dim(w, l->k, 0, hkv * l->head_dim, lp, "self_attn.k_proj.weight");
        if (!l->k_eq_v) {
            l->v = em_wl_get(w, d, "%sself_attn.v_proj.weight", lp);
            l->v_bias = em_wl_opt(w, d, "%sself_attn.v_proj.bias", lp);
            expect_dim(w, l->v, 0, hkv * l->head_dim, lp, "self_attn.v_proj.weight");
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

/* The config hook: Gemma 4's keys, per-layer sizes, KV sharing, ropes, the blocks' options. */
static em_status gemma4_config(em_ctx *c, em_model *m) {
    const em_model_config *cfg = &m->cfg;
    char file[1100];
    snprintf(file, sizeof file, "%s/config.json", m->dir);
    g4cfg g = {em_model_config_src(c, cfg, file, OP), m, NULL, EM_OK};
    char bidi[16] = "";
    if (em_cfg_str(&g.s, "use_bidirectional_attention", true, bidi, sizeof bidi, NULL))
        return em_ctx_status(c);
    if (!strcmp(bidi, "all"))
        return em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP,
                           "%s/config.json: use_bidirectional_attention \"all\" (an encoder) is "
                           "not supported", m->dir);
    if (cfg->num_attention_heads <= 0 || !cfg->layer_types)
        return em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s/config.json: no attention heads or layer "
                           "types", m->dir);
    m->act = em_decoder_act(cfg->hidden_act);
    m->embed_scale = sqrt((double)cfg->hidden_size);
    /* the blocks' options (decoder_blocks.h) */
    m->norm = EM_NORM_RMS_F32;
    m->v_norm = true;
    m->attn_scale = 1.0; /* q and k are normalised instead */
    m->moe_norm_topk = true;
    m->moe_weights_f32 = true; /* the per-expert scale multiplies f32 probabilities */
    m->softcap_model_dtype = true;
    m->pl_dim = get_int(&g, "hidden_size_per_layer_input", 0);
    if (g.err) return g.err;
    if (m->pl_dim < 0)
        return em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s/config.json: hidden_size_per_layer_input "
                           "%lld", m->dir, (long long)m->pl_dim);
    if (layer_sizes(&g) || kv_sharing(&g) || ropes(c, m)) return em_ctx_status(c);
    return EM_OK;
}

static em_status gemma4_load(em_wload *w) {
    em_ctx *c = w->c;
    em_model *m = w->m;
    const em_model_config *cfg = &m->cfg;
    const char *p = w->prefix;
    if (em_tp_check(c, m)) return em_ctx_status(c);
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
        if (m->tp_size > 1 && em_decoder_tie_tp_head(w)) return em_ctx_status(c);
    }
    em_tp_localize(m);
    return em_ctx_status(c);
}

/* ---- forward: the shared decoder with this layer and the per-layer inputs ---- */

/* Gemma4TextDecoderLayer from the blocks: sandwich norms, the dense MLP and (enable_moe_block)
 * the experts side by side on the residual, the gated per-layer input, the layer scalar. */
static em_tensor *gemma4_layer(em_fwd *f, const em_dec_layer *l, em_tensor *h, int64_t li) {
    em_ctx *c = f->c;
    const em_model *m = f->m;
    em_tensor *a = em_blk_norm(f, em_blk_attn(f, l, em_blk_norm(f, h, l->in_norm), li),
                               l->post_attn_norm);
    h = em_add(c, h, a);
    em_tensor *y = em_blk_ffn(f, l, em_blk_norm(f, h, l->pre_ffn_norm));
    if (l->moe) { /* Gemma4TextRouter: a scaled, scale-free norm of the residual */
        em_tensor *r = em_blk_mul_f32(c, em_mul(c, em_blk_norm(f, h, NULL), l->router_scale),
                                      pow((double)m->cfg.hidden_size, -0.5));
        em_tensor *e = em_blk_moe(f, l, r, em_blk_norm(f, h, l->pre_ffn_norm_2));
        y = em_add(c, em_blk_norm(f, y, l->post_ffn_norm_1), em_blk_norm(f, e, l->post_ffn_norm_2));
    }
    h = em_add(c, h, em_blk_norm(f, y, l->post_ffn_norm));
    if (f->pli) {
        em_tensor *in = em_reshape(c, em_narrow(c, f->pli, 2, li - f->pli_first, 1), 3,
                                   (int64_t[]){f->b, f->t, m->pl_dim});
        em_tensor *g = em_mul(c, em_blk_act(f, em_linear(c, h, l->pl_gate, NULL)),
                              em_model_to_dev(c, in, l->dev));
        h = em_add(c, h, em_blk_norm(f, em_linear(c, g, l->pl_proj, NULL), l->pl_norm));
    }
    return l->layer_scalar ? em_mul(c, h, l->layer_scalar) : h;
}

/* get_per_layer_inputs + project_per_layer_inputs: f->pli [B, T, L, P] from the ids and the
 * scaled embeddings h. */
static void gemma4_after_embed(em_fwd *f, em_tensor *ids, em_tensor *h) {
    em_ctx *c = f->c;
    const em_model *m = f->m;
    if (m->pl_dim <= 0) return;
    int64_t shape[4] = {f->b, f->t, m->n_layers, m->pl_dim};
    /* the scale is rounded to the model dtype first, as embed_scale.to(weight.dtype) */
    em_tensor *tok = em_mul_scalar(c, em_embedding(c, m->embed_pl, ids), sqrt((double)m->pl_dim));
    em_tensor *proj = em_blk_mul_f32(c, em_linear(c, h, m->pl_model_proj, NULL),
                                     pow((double)m->cfg.hidden_size, -0.5));
    proj = em_blk_norm(f, em_reshape(c, proj, 4, shape), m->pl_proj_norm);
    f->pli = em_blk_mul_f32(c, em_add(c, proj, em_reshape(c, tok, 4, shape)), pow(2.0, -0.5));
}

/* ---- config.json: Gemma4TextConfig ---- */

static void gemma4_defaults(em_model_config *m) {
    m->vocab_size = 262144, m->hidden_size = 2304, m->intermediate_size = 9216;
    m->num_hidden_layers = 30, m->num_attention_heads = 8, m->num_key_value_heads = 4;
    m->head_dim = 256;
    snprintf(m->hidden_act, sizeof m->hidden_act, "gelu_pytorch_tanh");
    m->max_position_embeddings = 131072;
    m->pad_token_id = 0, m->eos_token_ids[0] = 1, m->n_eos_token_ids = 1, m->bos_token_id = 2;
    m->tie_word_embeddings = true;
    m->sliding_window = 512;
}

/* __post_init__: no experts without enable_moe_block; a bidirectional window halved */
static em_status gemma4_post_init(em_cfg_src *s, em_model_config *m, int64_t *pattern) {
    (void)pattern;
    em_status e;
    bool moe = false;
    if ((e = em_cfg_bool(s, "enable_moe_block", false, &moe, NULL))) return e;
    if (!moe) m->num_experts = 0, m->num_experts_per_tok = 0, m->moe_intermediate_size = 0;
    char bidi[16] = "";
    if ((e = em_cfg_str(s, "use_bidirectional_attention", true, bidi, sizeof bidi, NULL)))
        return e;
    if (!strcmp(bidi, "all")) m->sliding_window = m->sliding_window / 2 + 1;
    return EM_OK;
}

typedef struct global_hd {
    int64_t first_full, head_dim;
} global_hd;

static em_status global_hd_key(em_cfg_src *sub, const char *name, void *user) {
    global_hd *g = user;
    return strcmp(name, "head_dim") ? EM_OK : em_cfg_int(sub, name, true, &g->head_dim, NULL);
}

static em_status global_hd_entry(em_cfg_src *sub, const char *name, void *user) {
    global_hd *g = user;
    char *end;
    long long idx = strtoll(name, &end, 10);
    if (!*name || *end || idx != g->first_full) return EM_OK;
    return em_cfg_each(sub, name, global_hd_key, g, NULL);
}

/* The full-attention layers' rope covers their own head size: global_head_dim in Hub files,
 * per_layer_config[<first full layer>].head_dim in files transformers writes (keys may be
 * zero-padded, "05"). */
static em_status gemma4_post_rope(em_cfg_src *s, em_model_config *m) {
    global_hd g = {-1, 512};
    em_status e;
    if ((e = em_cfg_int(s, "global_head_dim", true, &g.head_dim, NULL))) return e;
    for (int64_t i = 0; i < m->num_hidden_layers && g.first_full < 0; i++)
        if (m->layer_types[i] == EM_LAYER_FULL_ATTENTION) g.first_full = i;
    if (g.first_full >= 0 && (e = em_cfg_each(s, "per_layer_config", global_hd_entry, &g, NULL)))
        return e;
    m->rope.head_dim = g.head_dim;
    return EM_OK;
}

/* transformers' Gemma4TextConfig.base_model_tp_plan and Gemma4ForCausalLM._tp_plan, with the
 * vocab-parallel embedding transformers adds to every base model's plan (init_parallel_plans)
 * and the Hub's per-expert names next to the fused v5 experts. The per-layer inputs
 * (embed_tokens_per_layer, the per-layer projections and gates) and the router are
 * replicated: every rank computes them whole, as transformers' plan leaves them. */
static const em_tp_rule gemma4_tp_plan[] = {
    EM_TP_RULE_EMBED,
    EM_TP_RULES_QKV,
    EM_TP_RULES_QK_NORM,
    EM_TP_RULE_O,
    EM_TP_RULES_MLP,
    {"layers.*.experts.gate_up_proj", "packed_colwise"},
    {"layers.*.experts.down_proj", "rowwise"},
    {"layers.*.experts.*.gate_proj", "colwise"},
    {"layers.*.experts.*.up_proj", "colwise"},
    {"layers.*.experts.*.down_proj", "rowwise"},
    {"layers.*.experts", "moe_tp_experts"},
    EM_TP_RULE_HEAD,
    {NULL, NULL}};

/* transformers' Gemma4TextConfig.base_model_ep_plan's expert rules, with the per-expert names:
 * each rank holds whole experts, its contiguous share (its rules come before the tp plan's;
 * transformers' ep plan also leaves the attention whole, Ember keeps splitting it by head) */
static const em_tp_rule gemma4_ep_plan[] = {
    {"layers.*.experts.gate_up_proj", "grouped_gemm"},
    {"layers.*.experts.down_proj", "grouped_gemm"},
    {"layers.*.experts.*.gate_proj", "grouped_gemm"},
    {"layers.*.experts.*.up_proj", "grouped_gemm"},
    {"layers.*.experts.*.down_proj", "grouped_gemm"},
    {"layers.*.experts", "ep_dispatch_experts"},
    {NULL, NULL}};

const em_family em_family_gemma4_text = {
    .config = {.model_type = "gemma4_text",
               .multimodal = "gemma4",
               .defaults = gemma4_defaults,
               .head_dim_fixed = true,
               .has_layer_types = true,
               .gemma_activation = true,
               .sliding = EM_CFG_SLIDING_PATTERN,
               .sliding_pattern = 6,
               .last_layer_full = true,
               .nested_rope = true,
               .rope_full_theta = 1e6,
               .rope_full_fixed = true,
               .rope_full_type = "proportional",
               .rope_full_partial = 0.25,
               .rope_local_theta = 1e4,
               .rope_no_local_base_freq = true,
               .post_init = gemma4_post_init,
               .post_rope = gemma4_post_rope},
    .causal = true,
    .qk_norm = true,
    .gemma = true,
    .config_hook = gemma4_config,
    .load = gemma4_load,
    .after_embed = gemma4_after_embed,
    .layer = gemma4_layer,
    .tp_plan = gemma4_tp_plan,
    .ep_plan = gemma4_ep_plan,
};

/*
 * The decoder-only transformer shared by the Llama-like families: embeddings, N layers of
 * (norm, attention with a KV cache, norm, MLP or MoE), final norm, LM head. Family files
 * (qwen3.c, llama.c, gemma3.c, ...) choose the variant through their em_family row.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model_impl.h"

/* ---- loading ---- */

em_mlp_act em_decoder_act(const char *name) {
    if (!strcmp(name, "gelu_pytorch_tanh") || !strcmp(name, "gelu_new") ||
        !strcmp(name, "gelu_fast") || !strcmp(name, "gelu_tanh"))
        return EM_ACT_GELU_TANH;
    if (!strcmp(name, "gelu")) return EM_ACT_GELU;
    return EM_ACT_SILU;
}

static bool is_moe_layer(const em_model *m, int64_t i) {
    const em_model_config *cfg = &m->cfg;
    if (!m->fam->moe || cfg->num_experts <= 0) return false;
    for (int k = 0; k < cfg->n_mlp_only_layers; k++)
        if (cfg->mlp_only_layers[k] == i) return false;
    int64_t step = cfg->decoder_sparse_step > 0 ? cfg->decoder_sparse_step : 1;
    return (i + 1) % step == 0;
}

em_status em_decoder_load(em_wload *w) {
    em_ctx *c = w->c;
    em_model *m = w->m;
    const em_model_config *cfg = &m->cfg;
    const em_family *f = m->fam;
    const char *p = w->prefix;
    m->act = em_decoder_act(cfg->hidden_act);
    if (cfg->head_dim <= 0 || cfg->num_attention_heads <= 0 || cfg->num_key_value_heads <= 0)
        return em_ctx_fail(c, EM_ERR_FORMAT, "model_load", "%s/config.json: head sizes %lld x %lld "
                           "(kv %lld) are not usable", m->dir, (long long)cfg->num_attention_heads,
                           (long long)cfg->head_dim, (long long)cfg->num_key_value_heads);
    /* rope: the global parameters, and Gemma 3's local ones for sliding layers */
    m->n_freq = em_rope_inv_freq(c, &cfg->rope, cfg->max_position_embeddings, m->inv_freq,
                                 EM_MAX_ROPE_FREQS, &m->rope_scaling);
    if (m->n_freq < 0) return em_ctx_status(c);
    if (f->gemma && cfg->rope_local_known) {
        m->n_freq_local = em_rope_inv_freq(c, &cfg->rope_local, cfg->max_position_embeddings,
                                           m->inv_freq_local, EM_MAX_ROPE_FREQS,
                                           &m->rope_scaling_local);
        if (m->n_freq_local < 0) return em_ctx_status(c);
    }
    if (cfg->query_pre_attn_scalar > 0) m->attn_scale = 1.0 / sqrt(cfg->query_pre_attn_scalar);
    if (f->gemma) m->embed_scale = sqrt((double)cfg->hidden_size);

    m->embed = em_wl_get(w, m->dev_embed, "%sembed_tokens.weight", p);
    for (int64_t i = 0; i < m->n_layers && !em_ctx_status(c); i++) {
        em_dec_layer *l = &m->layers[i];
        em_device *d = l->dev;
        char lp[160];
        snprintf(lp, sizeof lp, "%slayers.%lld.", p, (long long)i);
        l->sliding = cfg->layer_types && cfg->layer_types[i] == EM_LAYER_SLIDING_ATTENTION &&
                     cfg->sliding_window > 0;
        l->in_norm = em_wl_get(w, d, "%sinput_layernorm.weight", lp);
        l->post_attn_norm = em_wl_get(w, d, "%spost_attention_layernorm.weight", lp);
        if (f->gemma) {
            l->pre_ffn_norm = em_wl_get(w, d, "%spre_feedforward_layernorm.weight", lp);
            l->post_ffn_norm = em_wl_get(w, d, "%spost_feedforward_layernorm.weight", lp);
        }
        l->q = em_wl_get(w, d, "%sself_attn.q_proj.weight", lp);
        l->k = em_wl_get(w, d, "%sself_attn.k_proj.weight", lp);
        l->v = em_wl_get(w, d, "%sself_attn.v_proj.weight", lp);
        l->o = em_wl_get(w, d, "%sself_attn.o_proj.weight", lp);
        l->q_bias = em_wl_opt(w, d, "%sself_attn.q_proj.bias", lp);
        l->k_bias = em_wl_opt(w, d, "%sself_attn.k_proj.bias", lp);
        l->v_bias = em_wl_opt(w, d, "%sself_attn.v_proj.bias", lp);
        l->o_bias = em_wl_opt(w, d, "%sself_attn.o_proj.bias", lp);
        if (f->qk_norm) {
            l->q_norm = em_wl_get(w, d, "%sself_attn.q_norm.weight", lp);
            l->k_norm = em_wl_get(w, d, "%sself_attn.k_norm.weight", lp);
        }
        l->moe = is_moe_layer(m, i);
        if (l->moe) {
            char base[200];
            bool mixtral = f->moe == 2 && em_wl_has(w, "%sblock_sparse_moe.gate.weight", lp);
            snprintf(base, sizeof base, "%s%s", lp, mixtral ? "block_sparse_moe." : "mlp.");
            l->router = em_wl_get(w, d, "%sgate.weight", base);
            if (f->moe == 2)
                em_wl_experts(w, d, base, cfg->num_experts, "w1", "w3", "w2", &l->experts.gate_up,
                              &l->experts.down);
            else
                em_wl_experts(w, d, base, cfg->num_experts, "gate_proj", "up_proj", "down_proj",
                              &l->experts.gate_up, &l->experts.down);
        } else {
            l->gate = em_wl_get(w, d, "%smlp.gate_proj.weight", lp);
            l->up = em_wl_get(w, d, "%smlp.up_proj.weight", lp);
            l->down = em_wl_get(w, d, "%smlp.down_proj.weight", lp);
        }
    }
    m->final_norm = em_wl_get(w, m->dev_head, "%snorm.weight", p);
    if (em_ctx_status(c)) return em_ctx_status(c);
    m->lm_head = em_wl_opt(w, m->dev_head, "lm_head.weight");
    if (!m->lm_head && !em_ctx_status(c)) {
        if (!cfg->tie_word_embeddings)
            return em_ctx_fail(c, EM_ERR_NOT_FOUND, "model_load",
                               "lm_head.weight is missing from %s and tie_word_embeddings is "
                               "false", m->dir);
        m->lm_head = m->dev_head == m->dev_embed ? m->embed
                                                 : em_detach(c, em_to(c, m->embed, m->dev_head));
    }
    return em_ctx_status(c);
}

/* ---- the KV cache ---- */

em_kv_cache *em_kv_cache_create(em_ctx *c, const em_model *m, int64_t batch, int64_t max_len) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!m || !m->fam->causal || batch < 1 || max_len < 1) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "kv_cache_create",
                    "needs a causal LM, batch >= 1 and max_len >= 1 (got %lld, %lld)",
                    (long long)batch, (long long)max_len);
        return NULL;
    }
    em_kv_cache *kv = calloc(1, sizeof *kv);
    if (kv) {
        kv->k = calloc((size_t)m->n_layers + 1, sizeof *kv->k);
        kv->v = calloc((size_t)m->n_layers + 1, sizeof *kv->v);
    }
    if (!kv || !kv->k || !kv->v) {
        if (kv) {
            free(kv->k);
            free(kv->v);
        }
        free(kv);
        em_ctx_fail(c, EM_ERR_OOM, "kv_cache_create", "out of memory");
        return NULL;
    }
    kv->m = m;
    kv->batch = batch;
    kv->max_len = max_len;
    em_device *prev = em_ctx_device(c);
    for (int64_t i = 0; i < m->n_layers; i++) {
        const em_dec_layer *l = &m->layers[i];
        if (l->kv_shared) continue; /* Gemma 4: reads another layer's cache */
        /* layers may have their own sizes (Gemma 4's full-attention layers) */
        int64_t shape[4] = {batch, l->kv_heads ? l->kv_heads : m->cfg.num_key_value_heads,
                            max_len, l->head_dim ? l->head_dim : m->cfg.head_dim};
        em_ctx_set_device(c, l->dev);
        kv->k[i] = em_detach(c, em_zeros(c, m->dtype, 4, shape));
        kv->v[i] = em_detach(c, em_zeros(c, m->dtype, 4, shape));
    }
    em_ctx_set_device(c, prev);
    if (em_ctx_status(c)) {
        em_kv_cache_free(kv);
        return NULL;
    }
    return kv;
}

void em_kv_cache_free(em_kv_cache *kv) {
    if (!kv) return;
    for (int64_t i = 0; kv->m && i < kv->m->n_layers; i++) {
        em_tensor_release(kv->k[i]);
        em_tensor_release(kv->v[i]);
    }
    free(kv->k);
    free(kv->v);
    free(kv);
}

void em_kv_cache_reset(em_kv_cache *kv) {
    if (kv) kv->len = 0;
}

int64_t em_kv_cache_length(const em_kv_cache *kv) { return kv ? kv->len : 0; }

int64_t em_kv_cache_experts_hit(const em_kv_cache *kv) { return kv ? kv->experts_hit : 0; }

/* ---- forward ---- */

typedef struct fwd {
    em_ctx *c;
    const em_model *m;
    int64_t b, t, pos0, tk; /* batch, new tokens, cached positions, keys after this step */
    em_tensor *positions;   /* [B, T] i64 on the CPU (on the model's device when static) */
    em_tensor *key_mask;    /* [B, Tk] bool on the CPU, or NULL */
    /* static (compile mode): the KV write positions [T] and full masks [B, 1, T, Tk] (true =
     * attend; causality, padding and the key bucket's unused tail in them), for global and
     * sliding layers; shapes depend on the bucket only, never on the cache length */
    bool stat;
    em_tensor *cache_pos, *smask, *smask_local;
    /* per device: rope tables and the mask (recomputed when the device changes) */
    em_device *dev;
    em_tensor *cos, *sin, *cos_l, *sin_l, *mask;
} fwd;

static void enter_device(fwd *f, em_device *d) {
    if (f->dev == d) return;
    em_ctx *c = f->c;
    const em_model *m = f->m;
    f->dev = d;
    em_tensor *pos = em_model_to_dev(c, f->positions, d);
    em_tensor *inv = em_from_host_on(c, d, EM_F32, 1, (int64_t[]){m->n_freq}, m->inv_freq);
    f->cos = em_rope_cos_sin(c, pos, inv, m->rope_scaling, m->dtype, &f->sin);
    f->cos_l = f->sin_l = NULL;
    if (m->n_freq_local > 0) {
        em_tensor *invl = em_from_host_on(c, d, EM_F32, 1, (int64_t[]){m->n_freq_local},
                                          m->inv_freq_local);
        f->cos_l = em_rope_cos_sin(c, pos, invl, m->rope_scaling_local, m->dtype, &f->sin_l);
    }
    if (f->stat) return; /* the static masks come with the inputs */
    f->mask = f->key_mask
                  ? em_reshape(c, em_model_to_dev(c, f->key_mask, d), 4, (int64_t[]){f->b, 1, 1, f->tk})
                  : NULL;
}

static em_tensor *norm(fwd *f, em_tensor *x, em_tensor *w) {
    return em_rms_norm(f->c, x, w, f->m->cfg.rms_norm_eps, f->m->fam->gemma);
}

/* [B, T, H*D] -> [B, H, T, D] */
static em_tensor *heads(fwd *f, em_tensor *x, int64_t h) {
    em_ctx *c = f->c;
    int64_t d = f->m->cfg.head_dim;
    return em_transpose(c, em_reshape(c, x, 4, (int64_t[]){f->b, f->t, h, d}), 1, 2);
}

static em_tensor *attention(fwd *f, const em_dec_layer *l, em_tensor *x, em_kv_cache *kv,
                            int64_t li) {
    em_ctx *c = f->c;
    const em_model *m = f->m;
    const em_model_config *cfg = &m->cfg;
    int64_t hq = cfg->num_attention_heads, hkv = cfg->num_key_value_heads, d = cfg->head_dim;
    em_tensor *q = heads(f, em_linear(c, x, l->q, l->q_bias), hq);
    em_tensor *k = heads(f, em_linear(c, x, l->k, l->k_bias), hkv);
    em_tensor *v = heads(f, em_linear(c, x, l->v, l->v_bias), hkv);
    if (l->q_norm) {
        q = norm(f, q, l->q_norm);
        k = norm(f, k, l->k_norm);
    }
    bool local = l->sliding && f->cos_l;
    q = em_rope(c, q, local ? f->cos_l : f->cos, local ? f->sin_l : f->sin);
    k = em_rope(c, k, local ? f->cos_l : f->cos, local ? f->sin_l : f->sin);
    em_tensor *mask = f->mask;
    em_sdpa_params sp = em_sdpa_default_params();
    sp.scale = m->attn_scale;
    sp.causal = true;
    sp.window = l->sliding ? cfg->sliding_window : 0;
    sp.softcap = cfg->attn_logit_softcapping;
    if (kv && f->stat) {
        /* positions are data: HF's StaticCache write, attention over the whole bucket */
        em_index_copy(c, kv->k[li], 2, f->cache_pos, em_contiguous(c, k));
        em_index_copy(c, kv->v[li], 2, f->cache_pos, em_contiguous(c, v));
        mask = l->sliding && f->smask_local ? f->smask_local : f->smask;
        sp.causal = false;
        sp.window = 0;
    } else if (kv) {
        em_assign(c, em_slice(c, kv->k[li], 2, f->pos0, f->pos0 + f->t, 1), k);
        em_assign(c, em_slice(c, kv->v[li], 2, f->pos0, f->pos0 + f->t, 1), v);
    }
    if (kv) {
        k = em_slice(c, kv->k[li], 2, 0, f->tk, 1);
        v = em_slice(c, kv->v[li], 2, 0, f->tk, 1);
    }
    em_tensor *a = em_sdpa(c, q, k, v, mask, &sp);
    a = em_reshape(c, em_transpose(c, a, 1, 2), 3, (int64_t[]){f->b, f->t, hq * d});
    return em_linear(c, a, l->o, l->o_bias);
}

static em_tensor *act(fwd *f, em_tensor *g) {
    switch (f->m->act) {
    case EM_ACT_GELU_TANH: return em_gelu(f->c, g, true);
    case EM_ACT_GELU: return em_gelu(f->c, g, false);
    default: return em_silu(f->c, g);
    }
}

static em_tensor *mlp(fwd *f, const em_dec_layer *l, em_tensor *x, em_kv_cache *kv) {
    em_ctx *c = f->c;
    const em_model *m = f->m;
    if (!l->moe) {
        em_tensor *h = em_mul(c, act(f, em_linear(c, x, l->gate, NULL)),
                              em_linear(c, x, l->up, NULL));
        return em_linear(c, h, l->down, NULL);
    }
    int64_t hidden = m->cfg.hidden_size;
    em_tensor *flat = em_reshape(c, x, 2, (int64_t[]){f->b * f->t, hidden});
    em_moe_params p = em_moe_default_params();
    p.top_k = m->cfg.num_experts_per_tok;
    p.norm_topk_prob = m->fam->moe == 2 ? true : m->cfg.norm_topk_prob;
    p.act = m->act == EM_ACT_GELU_TANH ? EM_MOE_ACT_GELU_TANH : EM_MOE_ACT_SILU;
    p.impl = m->moe_impl;
    p.device_routing = f->stat;
    em_tensor *idx = NULL;
    em_tensor *w = em_moe_route(c, em_linear(c, flat, l->router, NULL), &p, NULL, m->dtype, &idx);
    em_moe_stats st = {0, 0};
    em_tensor *y = em_moe_experts(c, flat, idx, w, &l->experts, &p, &st);
    if (kv && !f->stat) kv->experts_hit += st.experts_hit;
    return em_reshape(c, y, 3, (int64_t[]){f->b, f->t, hidden});
}

void em_decoder_positions_host(const uint8_t *mk, int64_t b, int64_t t, int64_t pos0, int64_t tk,
                               int64_t *pos) {
    for (int64_t i = 0; i < b; i++) {
        int64_t run = 0;
        for (int64_t j = 0; j < tk; j++) {
            int64_t p = pos0 + (j - pos0); /* position of key j without padding */
            if (mk) {
                run += mk[i * tk + j] != 0;
                p = mk[i * tk + j] ? run - 1 : 1;
            }
            if (j >= tk - t) pos[i * t + (j - (tk - t))] = p;
        }
    }
}

/* Positions as transformers computes them: cumsum(mask) - 1, 1 where masked; the last T. */
em_tensor *em_decoder_positions(em_ctx *c, em_tensor *key_mask, int64_t b, int64_t t,
                                int64_t pos0, int64_t tk) {
    int64_t *pos = malloc((size_t)(b * t) * sizeof *pos);
    uint8_t *mk = key_mask ? malloc((size_t)(b * tk)) : NULL;
    em_tensor *r = NULL;
    if (!pos || (key_mask && !mk)) {
        em_ctx_fail(c, EM_ERR_OOM, "model_forward", "out of memory");
        goto done;
    }
    if (key_mask && em_to_host(c, em_cast(c, key_mask, EM_BOOL), mk, (size_t)(b * tk)) != EM_OK)
        goto done;
    em_decoder_positions_host(mk, b, t, pos0, tk, pos);
    r = em_from_host_on(c, em_device_cpu(), EM_I64, 2, (int64_t[]){b, t}, pos);
done:
    free(pos);
    free(mk);
    return r;
}

bool em_decoder_check_step(em_ctx *c, const char *what, const em_model *m,
                           const em_kv_cache *kv, em_tensor *ids, em_tensor *key_mask) {
    char s1[96];
    int64_t b = em_tensor_dim(ids, 0), t = em_tensor_dim(ids, 1);
    int64_t pos0 = kv ? kv->len : 0, tk = pos0 + t;
    if (kv && (kv->m != m || kv->batch != b || tk > kv->max_len)) {
        em_ctx_fail(c, EM_ERR_SHAPE, what,
                    "the cache holds %lld of %lld positions for batch %lld; ids %s do not fit",
                    (long long)pos0, (long long)kv->max_len, (long long)kv->batch,
                    em_tensor_sig(ids, s1, sizeof s1));
        return false;
    }
    if (key_mask && (em_tensor_ndim(key_mask) != 2 || em_tensor_dim(key_mask, 0) != b ||
                     em_tensor_dim(key_mask, 1) != tk)) {
        em_ctx_fail(c, EM_ERR_SHAPE, what, "key_mask %s must be [%lld, %lld]",
                    em_tensor_sig(key_mask, s1, sizeof s1), (long long)b, (long long)tk);
        return false;
    }
    return true;
}

static em_tensor *forward_body(fwd *f, em_tensor *ids, em_kv_cache *kv, bool last_only);

em_tensor *em_model_forward(em_ctx *c, const em_model *m, em_tensor *ids, em_tensor *key_mask,
                            em_kv_cache *kv, bool last_only) {
    if (!c || em_ctx_status(c)) return NULL;
    char s1[96];
    if (!m || !ids || !m->fam->causal || em_tensor_ndim(ids) != 2) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "model_forward",
                    "needs a causal LM and ids [B, T], got %s",
                    ids ? em_tensor_sig(ids, s1, sizeof s1) : "none");
        return NULL;
    }
    int64_t b = em_tensor_dim(ids, 0), t = em_tensor_dim(ids, 1);
    int64_t pos0 = kv ? kv->len : 0, tk = pos0 + t;
    if (!em_decoder_check_step(c, "model_forward", m, kv, ids, key_mask)) return NULL;
    if (m->fam->forward) return m->fam->forward(c, m, ids, key_mask, kv, last_only);
    em_scope_push(c);
    if (kv) kv->experts_hit = 0;
    fwd f;
    memset(&f, 0, sizeof f);
    f.c = c;
    f.m = m;
    f.b = b;
    f.t = t;
    f.pos0 = pos0;
    f.tk = tk;
    f.positions = em_decoder_positions(c, key_mask, b, t, pos0, tk);
    f.key_mask = key_mask ? em_cast(c, key_mask, EM_BOOL) : NULL;
    em_tensor *logits = forward_body(&f, ids, kv, last_only);
    if (!em_ctx_status(c) && kv) kv->len = tk;
    em_tensor *r = em_keep(c, logits);
    em_scope_pop(c);
    return r;
}

em_tensor *em_decoder_forward_static(em_ctx *c, const em_model *m, em_tensor *ids,
                                     em_tensor *positions, em_tensor *cache_pos, em_tensor *mask,
                                     em_tensor *mask_local, em_kv_cache *kv, bool last_only) {
    if (!c || em_ctx_status(c)) return NULL;
    if (m->fam->forward || !kv) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, "model_forward",
                    "the static (compile-mode) forward needs a KV cache and the shared decoder "
                    "(%s has its own forward)", m->cfg.model_type);
        return NULL;
    }
    fwd f;
    memset(&f, 0, sizeof f);
    f.c = c;
    f.m = m;
    f.b = em_tensor_dim(ids, 0);
    f.t = em_tensor_dim(ids, 1);
    f.tk = em_tensor_dim(mask, 3);
    f.stat = true;
    f.positions = positions;
    f.cache_pos = cache_pos;
    f.smask = mask;
    f.smask_local = mask_local;
    return forward_body(&f, ids, kv, last_only);
}

static em_tensor *forward_body(fwd *fp, em_tensor *ids, em_kv_cache *kv, bool last_only) {
    fwd f = *fp;
    em_ctx *c = f.c;
    const em_model *m = f.m;
    int64_t t = f.t;
    enter_device(&f, m->dev_embed);
    em_tensor *h = em_embedding(c, m->embed, em_model_to_dev(c, ids, m->dev_embed));
    if (h && em_tensor_dtype(h) != m->dtype) /* a quantized table gives f32 rows */
        h = em_cast(c, h, m->dtype);
    if (m->embed_scale > 0) /* Gemma: the scale is rounded to the model dtype first */
        h = em_mul_scalar(c, h, m->embed_scale);
    for (int64_t i = 0; i < m->n_layers && !em_ctx_status(c); i++) {
        const em_dec_layer *l = &m->layers[i];
        enter_device(&f, l->dev);
        h = em_model_to_dev(c, h, l->dev);
        em_scope_push(c);
        em_tensor *a = attention(&f, l, norm(&f, h, l->in_norm), kv, i);
        if (m->fam->gemma) a = norm(&f, a, l->post_attn_norm);
        em_tensor *h2 = em_add(c, h, a);
        em_tensor *r = norm(&f, h2, m->fam->gemma ? l->pre_ffn_norm : l->post_attn_norm);
        em_tensor *y = mlp(&f, l, r, kv);
        if (m->fam->gemma) y = norm(&f, y, l->post_ffn_norm);
        em_tensor *next = em_keep(c, em_add(c, h2, y));
        em_scope_pop(c);
        h = next;
    }
    h = em_model_to_dev(c, h, m->dev_head);
    if (last_only && t > 1) h = em_narrow(c, h, 1, t - 1, 1);
    h = norm(&f, h, m->final_norm);
    em_tensor *logits = em_cast(c, em_linear(c, h, m->lm_head, NULL), EM_F32);
    if (m->cfg.final_logit_softcapping > 0) {
        double cap = m->cfg.final_logit_softcapping;
        logits = em_mul_scalar(c, em_tanh(c, em_div_scalar(c, logits, cap)), cap);
    }
    return logits;
}

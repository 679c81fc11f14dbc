/*
 * The decoder-only transformer shared by the Llama-like families: embeddings, N layers of
 * (norm, attention with a KV cache, norm, MLP or MoE), final norm, LM head. The layer is
 * built from the blocks of decoder_blocks.h; family files (qwen3.c, llama.c, gemma3.c, ...)
 * choose the variant through their em_family row and the options their loader sets, and may
 * give their own layer (gemma4.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/autograd.h"
#include "ember/dist.h"
#include "models/decoder_blocks.h"

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
    /* the blocks' options (decoder_blocks.h) */
    m->norm = f->gemma ? EM_NORM_RMS_1P : EM_NORM_RMS;
    m->attn_softcap = cfg->attn_logit_softcapping;
    m->moe_norm_topk = f->moe == 2 ? true : cfg->norm_topk_prob; /* Mixtral always renormalises */
    m->first_kv_shared = m->n_layers;
    if (em_tp_check(c, m)) return em_ctx_status(c);

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
        if (m->tp_size > 1 && em_decoder_tie_tp_head(w)) return em_ctx_status(c);
    }
    em_tp_localize(m);
    return em_ctx_status(c);
}

em_status em_decoder_tie_tp_head(em_wload *w) {
    em_model *m = w->m;
    const char *head = em_tp_style(m, w->prefix, "lm_head.weight");
    bool head_split = head && !strcmp(head, "colwise_gather_output");
    if (m->tp_embed_split && head_split) { /* the embedding's slice is the head's */
        m->tp_head_split = true;
        em_tp_record(m, em_tp_rule_of(m, w->prefix, "lm_head.weight"),
                     "the embedding's slice (tied)", 0);
    } else if (m->tp_embed_split) {
        return em_ctx_fail(w->c, EM_ERR_UNSUPPORTED, "model_load", "tensor parallelism: the "
                           "lm_head tied to the embedding needs the whole vocabulary when "
                           "'lm_head' is replicated; the embedding is split "
                           "(embedding_rowwise): replicate 'embed_tokens' too");
    } else if (head_split) { /* the replicated embedding's rows this rank's head computes */
        m->lm_head = em_tp_shard(w, "lm_head.weight", em_tensor_retain(m->lm_head));
    }
    return em_ctx_status(w->c);
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

/* ---- blocks (decoder_blocks.h) ---- */

void em_blk_enter_device(em_fwd *f, em_device *d) {
    if (f->dev == d) return;
    em_ctx *c = f->c;
    const em_model *m = f->m;
    f->dev = d;
    em_tensor *pos = em_model_to_dev(c, f->positions, d);
    f->cos = f->sin = f->cos_l = f->sin_l = NULL;
    if (m->n_freq > 0) { /* none when every layer is local (Gemma 4 may have no full layer) */
        em_tensor *inv = em_from_host_on(c, d, EM_F32, 1, (int64_t[]){m->n_freq}, m->inv_freq);
        f->cos = em_rope_cos_sin(c, pos, inv, m->rope_scaling, m->dtype, &f->sin);
    }
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

em_tensor *em_blk_norm(em_fwd *f, em_tensor *x, em_tensor *w) {
    em_ctx *c = f->c;
    double eps = f->m->cfg.rms_norm_eps;
    switch (f->m->norm) {
    case EM_NORM_RMS_1P: return em_rms_norm(c, x, w, eps, true);
    case EM_NORM_RMS_F32: /* x.float() normalised, times w.float(), rounded once */
        if (!x || em_tensor_dtype(x) == EM_F32) return em_rms_norm(c, x, w, eps, false);
        return em_cast(c,
                       em_rms_norm(c, em_cast(c, x, EM_F32), w ? em_cast(c, w, EM_F32) : NULL,
                                   eps, false),
                       em_tensor_dtype(x));
    default: return em_rms_norm(c, x, w, eps, false);
    }
}

em_tensor *em_blk_act(em_fwd *f, em_tensor *g) {
    switch (f->m->act) {
    case EM_ACT_GELU_TANH: return em_gelu(f->c, g, true);
    case EM_ACT_GELU: return em_gelu(f->c, g, false);
    default: return em_silu(f->c, g);
    }
}

em_tensor *em_blk_mul_f32(em_ctx *c, em_tensor *x, double v) {
    if (!x) return NULL;
    float fv = (float)v;
    return em_mul(c, x, em_from_host_on(c, em_tensor_device(x), EM_F32, 0, NULL, &fv));
}

em_tensor *em_blk_div_f32(em_ctx *c, em_tensor *x, double v) {
    if (!x) return NULL;
    float fv = (float)v;
    return em_div(c, x, em_from_host_on(c, em_tensor_device(x), EM_F32, 0, NULL, &fv));
}

/* Paged: attention of q over the blocks of layer `src`'s pools (the layer itself, or the earlier
 * layer whose keys and values a KV-sharing layer reads: it wrote this step's positions first),
 * then the output projection. */
static em_tensor *paged_attention_out(em_fwd *f, const em_dec_layer *l, em_tensor *q,
                                      int64_t src, int64_t hq, int64_t d) {
    em_ctx *c = f->c;
    const em_model *m = f->m;
    em_device *dv = em_tensor_device(f->pg_k[src]);
    em_sdpa_params sp = em_sdpa_default_params();
    sp.scale = m->attn_scale;
    sp.window = l->sliding ? m->cfg.sliding_window : 0;
    sp.softcap = m->attn_softcap;
    em_tensor *a = em_paged_attention(c, q, f->pg_k[src], f->pg_v[src],
                                      em_model_to_dev(c, f->pg_table, dv),
                                      em_model_to_dev(c, f->pg_lens, dv), f->pg_block, &sp);
    a = em_reshape(c, em_transpose(c, a, 1, 2), 3, (int64_t[]){f->b, f->t, hq * d});
    return em_tp_reduce(c, m, em_linear(c, a, l->o, l->o_bias));
}

/* [B, T, H*D] -> [B, H, T, D] */
static em_tensor *heads(em_fwd *f, em_tensor *x, int64_t h, int64_t d) {
    em_ctx *c = f->c;
    return em_transpose(c, em_reshape(c, x, 4, (int64_t[]){f->b, f->t, h, d}), 1, 2);
}

/* Does a KV-sharing layer read layer li's keys/values? */
static bool kv_read_later(const em_model *m, int64_t li) {
    for (int64_t j = m->first_kv_shared; j < m->n_layers; j++)
        if (m->layers[j].kv_shared && m->layers[j].kv_src == li) return true;
    return false;
}

em_tensor *em_blk_attn(em_fwd *f, const em_dec_layer *l, em_tensor *x, int64_t li) {
    em_ctx *c = f->c;
    const em_model *m = f->m;
    const em_model_config *cfg = &m->cfg;
    em_kv_cache *kv = f->kv;
    int64_t hq = cfg->num_attention_heads;
    int64_t hkv = l->kv_heads ? l->kv_heads : cfg->num_key_value_heads;
    int64_t d = l->head_dim ? l->head_dim : cfg->head_dim;
    bool local = l->sliding && f->cos_l;
    em_tensor *cos = local ? f->cos_l : f->cos, *sin = local ? f->sin_l : f->sin;
    /* heads to dim 1 first: the per-head norms then write [B, H, T, D] rows contiguously for
     * rope and attention (the rows, and so the values, are the same either way) */
    em_tensor *q = heads(f, em_linear(c, x, l->q, l->q_bias), hq, d);
    if (l->q_norm) q = em_blk_norm(f, q, l->q_norm);
    q = em_rope(c, q, cos, sin);
    em_tensor *k, *v;
    if (l->kv_shared && f->pg_k) /* paged: attention over the source layer's blocks */
        return paged_attention_out(f, l, q, l->kv_src, hq, d);
    if (l->kv_shared) { /* an earlier layer's keys and values (it wrote them this step) */
        k = kv ? em_slice(c, kv->k[l->kv_src], 2, 0, f->tk, 1) : f->keys[l->kv_src];
        v = kv ? em_slice(c, kv->v[l->kv_src], 2, 0, f->tk, 1) : f->vals[l->kv_src];
        k = em_model_to_dev(c, k, l->dev);
        v = em_model_to_dev(c, v, l->dev);
    } else {
        k = heads(f, em_linear(c, x, l->k, l->k_bias), hkv, d);
        v = l->k_eq_v ? k : heads(f, em_linear(c, x, l->v, l->v_bias), hkv, d);
        if (l->k_norm) k = em_blk_norm(f, k, l->k_norm);
        if (m->v_norm) v = em_blk_norm(f, v, NULL);
        k = em_rope(c, k, cos, sin);
        if (f->pg_k) { /* paged: the new positions' slots, then attention over the blocks */
            em_device *dv = em_tensor_device(f->pg_k[li]);
            em_tensor *slots = em_model_to_dev(c, f->pg_slots, dv);
            em_tensor *k2 = em_reshape(c, em_contiguous(c, em_transpose(c, k, 0, 1)), 3,
                                       (int64_t[]){hkv, f->b * f->t, d});
            em_tensor *v2 = em_transpose(c, v, 0, 1);
            v2 = em_reshape(c, em_contiguous(c, v2), 3,
                            (int64_t[]){hkv, f->b * f->t, em_tensor_dim(v, 3)});
            em_index_copy(c, f->pg_k[li], 1, slots, k2);
            em_index_copy(c, f->pg_v[li], 1, slots, v2);
            return paged_attention_out(f, l, q, li, hq, d);
        }
        if (kv && f->stat) {
            /* positions are data: HF's StaticCache write, attention over the whole bucket */
            em_index_copy(c, kv->k[li], 2, f->cache_pos, em_contiguous(c, k));
            em_index_copy(c, kv->v[li], 2, f->cache_pos, em_contiguous(c, v));
        } else if (kv) {
            em_assign(c, em_slice(c, kv->k[li], 2, f->pos0, f->pos0 + f->t, 1), k);
            em_assign(c, em_slice(c, kv->v[li], 2, f->pos0, f->pos0 + f->t, 1), v);
        }
        if (kv) {
            k = em_slice(c, kv->k[li], 2, 0, f->tk, 1);
            v = em_slice(c, kv->v[li], 2, 0, f->tk, 1);
        } else if (f->keys && kv_read_later(m, li)) { /* outlives this layer's scope */
            f->keys[li] = em_keep(c, k);
            f->vals[li] = em_keep(c, v);
        }
    }
    em_sdpa_params sp = em_sdpa_default_params();
    sp.scale = m->attn_scale;
    sp.causal = true;
    sp.window = l->sliding ? cfg->sliding_window : 0;
    sp.softcap = m->attn_softcap;
    em_tensor *mask = f->mask;
    if (f->stat) { /* causality and the window are in the static masks */
        mask = l->sliding && f->smask_local ? f->smask_local : f->smask;
        sp.causal = false;
        sp.window = 0;
    }
    em_tensor *a = em_sdpa(c, q, k, v, mask, &sp);
    a = em_reshape(c, em_transpose(c, a, 1, 2), 3, (int64_t[]){f->b, f->t, hq * d});
    return em_tp_reduce(c, m, em_linear(c, a, l->o, l->o_bias));
}

em_tensor *em_blk_ffn(em_fwd *f, const em_dec_layer *l, em_tensor *x) {
    em_ctx *c = f->c;
    em_tensor *h = em_mul(c, em_blk_act(f, em_linear(c, x, l->gate, NULL)),
                          em_linear(c, x, l->up, NULL));
    return em_tp_reduce(c, f->m, em_linear(c, h, l->down, NULL));
}

/* One MoE layer's share of transformers' load_balancing_loss_func (no attention mask): the
 * routing probabilities summed over the layer's tokens (the loss's differentiable part), and the
 * top-k choices counted per expert (torch.histc: no gradient) by comparing them with 0..E-1 —
 * ops, not a host read, so the loss can be traced into a compiled step. A choice outside
 * [0, E) counts for no expert, as histc's range drops it. */
static void aux_record(em_fwd *f, em_tensor *logits, em_tensor *idx) {
    em_ctx *c = f->c;
    int64_t n = em_tensor_dim(logits, 0), e = em_tensor_dim(logits, 1);
    if (em_ctx_status(c) || !idx) return;
    if (!f->aux_skip_counts) {
        bool grad_on = em_grad_enable(c, false);
        em_tensor *ids = em_arange(c, 0, (double)e, 1, em_tensor_dtype(idx));
        if (ids && em_tensor_device(ids) != em_tensor_device(idx))
            ids = em_to(c, ids, em_tensor_device(idx));
        em_tensor *hit = em_cast(c, em_eq(c, em_unsqueeze(c, idx, -1), ids), EM_F32);
        em_tensor *cnt = em_sum(c, hit, (const int[]){0, 1}, 2, false);
        f->aux_counts = f->aux_counts ? em_add(c, f->aux_counts, cnt) : cnt;
        f->aux_rows += n;
        em_grad_enable(c, grad_on);
    }
    em_tensor *ps = em_sum(c, em_softmax(c, em_cast(c, logits, EM_F32), 1), (const int[]){0}, 1,
                           false);
    f->aux_prob_sum = f->aux_prob_sum ? em_add(c, f->aux_prob_sum, ps) : ps;
}

em_tensor *em_blk_moe(em_fwd *f, const em_dec_layer *l, em_tensor *router_in, em_tensor *x) {
    em_ctx *c = f->c;
    const em_model *m = f->m;
    int64_t hidden = m->cfg.hidden_size, flat[2] = {f->b * f->t, hidden};
    em_moe_params p = em_moe_default_params();
    p.top_k = m->cfg.num_experts_per_tok;
    p.norm_topk_prob = m->moe_norm_topk;
    p.act = m->act == EM_ACT_GELU_TANH ? EM_MOE_ACT_GELU_TANH : EM_MOE_ACT_SILU;
    p.impl = m->moe_impl;
    p.device_routing = f->stat;
    /* expert parallelism: the router (replicated) chooses among all experts, this rank holds
     * its share of them */
    int64_t held;
    em_tp_experts_held(m, m->cfg.num_experts, &p.expert_first, &held);
    p.n_experts = m->cfg.num_experts;
    em_tensor *idx = NULL;
    em_tensor *logits = em_linear(c, em_reshape(c, router_in, 2, flat), l->router, NULL);
    em_tensor *w = em_moe_route(c, logits, &p, l->experts.per_expert_scale,
                                m->moe_weights_f32 ? EM_F32 : m->dtype, &idx);
    if (f->want_aux) aux_record(f, logits, idx);
    em_moe_stats st = {0, 0};
    em_tensor *y = em_moe_experts(c, em_reshape(c, x, 2, flat), idx, w, &l->experts, &p, &st);
    if (f->kv && !f->stat) f->kv->experts_hit += st.experts_hit;
    /* both moe_tp_experts (each rank's slice of every expert) and expert parallelism (each
     * rank's experts) leave partial sums */
    y = em_tp_reduce(c, m, y);
    return em_reshape(c, y, 3, (int64_t[]){f->b, f->t, hidden});
}

em_tensor *em_blk_layer(em_fwd *f, const em_dec_layer *l, em_tensor *h, int64_t li) {
    em_ctx *c = f->c;
    bool sandwich = l->pre_ffn_norm != NULL;
    em_tensor *a = em_blk_attn(f, l, em_blk_norm(f, h, l->in_norm), li);
    if (sandwich) a = em_blk_norm(f, a, l->post_attn_norm);
    em_tensor *h2 = em_add(c, h, a);
    em_tensor *r = em_blk_norm(f, h2, sandwich ? l->pre_ffn_norm : l->post_attn_norm);
    em_tensor *y = l->moe ? em_blk_moe(f, l, r, r) : em_blk_ffn(f, l, r);
    if (l->post_ffn_norm) y = em_blk_norm(f, y, l->post_ffn_norm);
    return em_add(c, h2, y);
}

/* ---- forward ---- */

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


/* E * sum_e (counts_e / rows) (prob_sum_e / rows): the recorded layers' load-balancing loss as a
 * 0-d f32 tensor, NULL (no MoE layer ran) or on error */
static em_tensor *aux_finish(em_fwd *f) {
    em_ctx *c = f->c;
    if (!f->aux_prob_sum || !f->aux_counts || em_ctx_status(c)) return NULL;
    int64_t e = em_tensor_dim(f->aux_prob_sum, 0);
    double rows = (double)f->aux_rows;
    em_tensor *w = em_mul_scalar(c, f->aux_counts, (double)e / (rows * rows));
    return em_sum(c, em_mul(c, f->aux_prob_sum, w), (const int[]){0}, 1, false);
}

static em_tensor *forward(em_ctx *c, const em_model *m, em_tensor *ids, em_tensor *key_mask,
                          em_kv_cache *kv, bool last_only, em_tensor **aux);

em_tensor *em_model_forward(em_ctx *c, const em_model *m, em_tensor *ids, em_tensor *key_mask,
                            em_kv_cache *kv, bool last_only) {
    return forward(c, m, ids, key_mask, kv, last_only, NULL);
}

em_tensor *em_model_forward_router_aux(em_ctx *c, const em_model *m, em_tensor *ids,
                                       em_tensor **aux) {
    if (aux) *aux = NULL;
    if (!aux) {
        if (c) em_ctx_fail(c, EM_ERR_INVALID_ARG, "model_forward", "router_aux: aux is NULL");
        return NULL;
    }
    return forward(c, m, ids, NULL, NULL, false, aux);
}

static em_tensor *forward(em_ctx *c, const em_model *m, em_tensor *ids, em_tensor *key_mask,
                          em_kv_cache *kv, bool last_only, em_tensor **aux) {
    if (!c || em_ctx_status(c)) return NULL;
    char s1[96];
    if (!m || !ids || !m->fam->causal || em_tensor_ndim(ids) != 2) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "model_forward",
                    "needs a causal LM and ids [B, T], got %s",
                    ids ? em_tensor_sig(ids, s1, sizeof s1) : "none");
        return NULL;
    }
    if (kv && !aux && em_model_forward_bucketed_pays(m, kv))
        return em_model_forward_bucketed(c, m, ids, key_mask, kv, last_only);
    int64_t b = em_tensor_dim(ids, 0), t = em_tensor_dim(ids, 1);
    int64_t pos0 = kv ? kv->len : 0, tk = pos0 + t;
    if (!em_decoder_check_step(c, "model_forward", m, kv, ids, key_mask)) return NULL;
    /* without a cache, the keys/values that KV-sharing layers read are held here */
    em_tensor **saved = NULL;
    if (!kv && m->first_kv_shared < m->n_layers) {
        saved = calloc((size_t)m->n_layers * 2 + 2, sizeof *saved);
        if (!saved) {
            em_ctx_fail(c, EM_ERR_OOM, "model_forward", "out of memory");
            return NULL;
        }
    }
    em_scope_push(c);
    if (kv) kv->experts_hit = 0;
    em_fwd f;
    memset(&f, 0, sizeof f);
    f.c = c;
    f.m = m;
    f.kv = kv;
    f.b = b;
    f.t = t;
    f.pos0 = pos0;
    f.tk = tk;
    f.keys = saved;
    f.vals = saved ? saved + m->n_layers + 1 : NULL;
    f.positions = em_decoder_positions(c, key_mask, b, t, pos0, tk);
    f.key_mask = key_mask ? em_cast(c, key_mask, EM_BOOL) : NULL;
    f.want_aux = aux != NULL;
    em_tensor *logits = em_decoder_forward_body(&f, ids, last_only);
    if (!em_ctx_status(c) && kv) kv->len = tk;
    em_tensor *r = em_keep(c, logits);
    if (aux) *aux = em_keep(c, aux_finish(&f));
    em_scope_pop(c);
    free(saved);
    if (em_ctx_status(c)) { /* what was kept stays with the caller's scope */
        if (aux) *aux = NULL;
        return NULL;
    }
    return r;
}

em_tensor *em_decoder_forward_static(em_ctx *c, const em_model *m, em_tensor *ids,
                                     em_tensor *positions, em_tensor *cache_pos, em_tensor *mask,
                                     em_tensor *mask_local, em_kv_cache *kv, bool last_only) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!kv) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, "model_forward",
                    "the static (compile-mode) forward needs a KV cache (%s)", m->cfg.model_type);
        return NULL;
    }
    em_fwd f;
    memset(&f, 0, sizeof f);
    f.c = c;
    f.m = m;
    f.kv = kv;
    f.b = em_tensor_dim(ids, 0);
    f.t = em_tensor_dim(ids, 1);
    f.tk = em_tensor_dim(mask, 3);
    f.stat = true;
    f.positions = positions;
    f.cache_pos = cache_pos;
    f.smask = mask;
    f.smask_local = mask_local;
    return em_decoder_forward_body(&f, ids, last_only);
}

/* From the first KV-sharing layer on nothing is written to the cache, so when only the last
 * position's logits are wanted those layers run on that position alone (transformers'
 * _maybe_slice_kv_shared_inputs). */
static em_tensor *keep_last(em_fwd *f, em_tensor *h) {
    em_ctx *c = f->c;
    int64_t t = f->t;
    h = em_narrow(c, h, 1, t - 1, 1);
    if (f->pli) f->pli = em_narrow(c, f->pli, 1, t - 1, 1);
    f->positions = em_narrow(c, f->positions, 1, t - 1, 1);
    if (f->smask) f->smask = em_narrow(c, f->smask, 2, t - 1, 1);
    if (f->smask_local) f->smask_local = em_narrow(c, f->smask_local, 2, t - 1, 1);
    f->t = 1;
    f->dev = NULL; /* rope tables for the new positions */
    return h;
}

em_tensor *em_decoder_forward_body(em_fwd *f, em_tensor *ids, bool last_only) {
    em_ctx *c = f->c;
    const em_model *m = f->m;
    em_blk_layer_fn layer = m->fam->layer ? m->fam->layer : em_blk_layer;
    /* gradient checkpointing: only while recording, and never with a cache (the recomputation
     * would write it again) */
    bool ckpt = m->grad_ckpt && em_grad_is_enabled(c) && !f->kv && !f->stat;
    em_blk_enter_device(f, m->dev_embed);
    em_tensor *ids_e = em_model_to_dev(c, ids, m->dev_embed);
    em_tensor *h = em_tp_embedding(c, m, ids_e); /* embedding_rowwise: summed over the ranks */
    if (h && em_tensor_dtype(h) != m->dtype) /* a quantized table gives f32 rows */
        h = em_cast(c, h, m->dtype);
    if (m->embed_scale > 0) /* Gemma: the scale is rounded to the model dtype first */
        h = em_mul_scalar(c, h, m->embed_scale);
    if (m->fam->after_embed) m->fam->after_embed(f, ids_e, h);
    for (int64_t i = 0; i < m->n_layers && !em_ctx_status(c); i++) {
        const em_dec_layer *l = &m->layers[i];
        /* (paged: the shared layers' queries stay at every position, which the block
         * attention's positions assume) */
        if (i == m->first_kv_shared && last_only && f->t > 1 && !f->pg_k) h = keep_last(f, h);
        em_blk_enter_device(f, l->dev);
        h = em_model_to_dev(c, h, l->dev);
        em_scope_push(c);
        em_tensor *aux0 = f->aux_prob_sum, *cnt0 = f->aux_counts;
        em_tensor *next = em_keep(c, ckpt ? em_blk_layer_checkpointed(f, layer, l, h, i)
                                          : layer(f, l, h, i));
        /* the router loss's running sums, when this layer added to them, outlive its scope */
        if (f->aux_prob_sum != aux0) f->aux_prob_sum = em_keep(c, f->aux_prob_sum);
        if (f->aux_counts != cnt0) f->aux_counts = em_keep(c, f->aux_counts);
        em_scope_pop(c);
        h = next;
    }
    h = em_model_to_dev(c, h, m->dev_head);
    if (last_only && f->t > 1) h = em_narrow(c, h, 1, f->t - 1, 1);
    h = em_blk_norm(f, h, m->final_norm);
    em_tensor *logits = em_linear(c, h, m->lm_head, NULL);
    if (m->tp_head_split) logits = em_all_gather(c, logits, -1, m->tp); /* colwise_gather_output */
    double cap = m->cfg.final_logit_softcapping;
    if (cap > 0 && m->softcap_model_dtype) /* Gemma 4: before the cast */
        logits = em_blk_mul_f32(c, em_tanh(c, em_blk_div_f32(c, logits, cap)), cap);
    logits = em_cast(c, logits, EM_F32);
    if (cap > 0 && !m->softcap_model_dtype)
        logits = em_mul_scalar(c, em_tanh(c, em_div_scalar(c, logits, cap)), cap);
    return logits;
}

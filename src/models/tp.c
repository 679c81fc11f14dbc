/*
 * Tensor parallelism of the decoder over a process group (ember/dist.h): the family's plan
 * (data in its family file, transformers' rule names) says how each weight is split; each rank
 * keeps its slice; the row-parallel layers (o_proj, down_proj) sum their partial outputs with
 * all_reduce, the vocab-parallel embedding (embedding_rowwise) sums its ranks' rows and the
 * vocab-parallel lm_head gathers its logits. Norms and MoE routers are replicated; KV heads fewer than the degree are replicated too (each rank keeps
 * the one its query heads read). MoE experts are split in each expert (moe_tp_experts) or, with
 * expert parallelism (the family's ep plan), given whole to the ranks, 1/degree each; both
 * leave partial sums that all_reduce adds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/dist.h"
#include "models/model_impl.h"

static em_status not_divisible(em_ctx *c, const char *what, int64_t size, int degree) {
    return em_ctx_fail(c, EM_ERR_SHAPE, "model_load",
                       "tensor parallelism: %s (%lld) is not divisible by the degree %d", what,
                       (long long)size, degree);
}

/* The MoE layers: the experts' intermediate dimension (moe_tp_experts) or their number (expert
 * parallelism) must divide by the degree. */
static em_status check_moe(em_ctx *c, const em_model *m) {
    const em_model_config *cfg = &m->cfg;
    int n = m->tp_size;
    bool moe = cfg->num_experts > 0; /* Gemma 4's (enable_moe_block) too */
    bool mixtral = m->fam->moe == 2; /* its experts' size is intermediate_size */
    if (m->tp_ep && !moe)
        return em_ctx_fail(c, EM_ERR_UNSUPPORTED, "model_load", "expert parallelism (ep_size "
                           "%d): the %s model has no MoE layers", n, cfg->model_type);
    if (!moe) return EM_OK;
    if (m->tp_ep) {
        if (!m->fam->ep_plan)
            return em_ctx_fail(c, EM_ERR_UNSUPPORTED, "model_load", "expert parallelism: the "
                               "%s family has no expert-parallel plan", cfg->model_type);
        if (cfg->num_experts % n)
            return not_divisible(c, mixtral ? "num_local_experts" : "num_experts",
                                 cfg->num_experts, n);
        return EM_OK;
    }
    int64_t inter = mixtral ? cfg->intermediate_size : cfg->moe_intermediate_size;
    if (inter % n)
        return not_divisible(c, mixtral ? "intermediate_size" : "moe_intermediate_size", inter,
                             n);
    return EM_OK;
}

/* KV heads are split in this many parts: the degree, or the KV heads when fewer (each then
 * replicated on n / hkv ranks) */
static int64_t kv_parts(int n, int64_t hkv) { return hkv < n && n % hkv == 0 ? hkv : n; }

int64_t em_tp_kv_parts(const em_model *m, int64_t hkv) {
    return m->tp_size > 1 ? kv_parts(m->tp_size, hkv) : 1;
}

/* The KV heads of the layer weight `name` belongs to ("...layers.<i>...."): the layer's own
 * (Gemma 4's differ per layer) or the config's. */
static int64_t kv_heads_of(const em_model *m, const char *name) {
    const char *at = strstr(name, "layers.");
    if (at) {
        long long i = strtoll(at + 7, NULL, 10);
        if (i >= 0 && i < m->n_layers && m->layers[i].kv_heads > 0) return m->layers[i].kv_heads;
    }
    return m->cfg.num_key_value_heads;
}

em_status em_tp_check(em_ctx *c, em_model *m) {
    int n = m->tp_size;
    const em_model_config *cfg = &m->cfg;
    if (n <= 1) return EM_OK;
    if (!m->fam->tp_plan)
        return em_ctx_fail(c, EM_ERR_UNSUPPORTED, "model_load", "tensor parallelism: the %s "
                           "family has no plan yet (llama, mistral, mixtral, qwen2, qwen3, "
                           "qwen3_moe, gemma3_text and gemma4_text have one)", cfg->model_type);
    if (check_moe(c, m)) return em_ctx_status(c);
    /* a device group of this process (em_dist_local): rank r's whole share on its device;
     * a group of processes: the CPU, whose collectives are MPI calls */
    em_device *dev = em_dist_device(m->tp) ? em_dist_device(m->tp) : em_device_cpu();
    if (m->dev_embed != dev || m->dev_head != dev)
        return em_ctx_fail(c, EM_ERR_UNSUPPORTED, "model_load", "tensor parallelism: rank %d "
                           "runs on %s (%s); the model was placed elsewhere (a device map is "
                           "not combined with --tp)", m->tp_rank, dev->name,
                           em_dist_device(m->tp) ? "its device in the device group"
                                                 : "collectives over MPI");
    if (cfg->num_attention_heads % n)
        return not_divisible(c, "num_attention_heads", cfg->num_attention_heads, n);
    /* fewer KV heads than ranks: each rank keeps the one its query heads read (em_tp_kv_parts) */
    int64_t hkv = cfg->num_key_value_heads;
    m->tp_kv_parts = kv_parts(n, hkv);
    if (hkv % m->tp_kv_parts) return not_divisible(c, "num_key_value_heads", hkv, n);
    for (int64_t i = 0; i < m->n_layers; i++) { /* Gemma 4: per-layer KV heads */
        int64_t h = m->layers[i].kv_heads;
        if (h > 0 && h % kv_parts(n, h)) {
            char what[64];
            snprintf(what, sizeof what, "layer %lld's KV heads", (long long)i);
            return not_divisible(c, what, h, n);
        }
    }
    /* the dense MLP's, where there is one (Mixtral's intermediate_size is its experts', checked
     * by check_moe) */
    bool dense_mlp = !m->fam->moe || cfg->num_experts <= 0 ||
                     (m->fam->moe == 1 &&
                      (cfg->n_mlp_only_layers > 0 || cfg->decoder_sparse_step > 1));
    if (dense_mlp && cfg->intermediate_size % n)
        return not_divisible(c, "intermediate_size", cfg->intermediate_size, n);
    if (cfg->vocab_size % n) return not_divisible(c, "vocab_size", cfg->vocab_size, n);
    return EM_OK;
}

bool em_tp_kv_replicated(const em_model *m) {
    return m->tp_size > 1 && m->tp_kv_parts < m->tp_size;
}

/* The shared loader's key/value projections (em_decoder_load's names): split by KV head, which
 * is replicated over n / hkv ranks when there are fewer KV heads than ranks (as vLLM does). */
static bool is_kv_proj(const char *name) {
    size_t n = strlen(name);
    static const char *ends[] = {"self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                 "self_attn.k_proj.bias", "self_attn.v_proj.bias"};
    for (int i = 0; i < 4; i++) {
        size_t k = strlen(ends[i]);
        if (n >= k && !strcmp(name + n - k, ends[i])) return true;
    }
    return false;
}

/* pattern with "*" for one layer index against name */
static bool matches(const char *pat, const char *s, size_t n) {
    size_t i = 0;
    for (; *pat; pat++) {
        if (*pat == '*') {
            size_t d = i;
            while (i < n && s[i] >= '0' && s[i] <= '9') i++;
            if (i == d) return false;
        } else if (i >= n || s[i++] != *pat) {
            return false;
        }
    }
    return i == n;
}

const em_tp_rule *em_tp_rule_of(const em_model *m, const char *prefix, const char *name) {
    const em_tp_rule *plan = em_tp_plan_of(m);
    if (!plan) return NULL;
    size_t pl = strlen(prefix);
    if (pl && !strncmp(name, prefix, pl)) name += pl;
    size_t n = strlen(name);
    if (n > 7 && !strcmp(name + n - 7, ".weight")) n -= 7;
    else if (n > 5 && !strcmp(name + n - 5, ".bias")) n -= 5;
    /* the expert-parallel plan's rules first, as transformers applies ep_plan over tp_plan */
    for (const em_tp_rule *r = m->tp_ep ? m->fam->ep_plan : NULL; r && r->pattern; r++)
        if (matches(r->pattern, name, n)) return r;
    for (const em_tp_rule *r = plan; r->pattern; r++)
        if (matches(r->pattern, name, n)) return r;
    return NULL;
}

const char *em_tp_style(const em_model *m, const char *prefix, const char *name) {
    const em_tp_rule *r = em_tp_rule_of(m, prefix, name);
    return r ? r->style : NULL;
}

void em_tp_experts_held(const em_model *m, int64_t n_experts, int64_t *first, int64_t *count) {
    *first = 0;
    *count = n_experts;
    if (m->tp_size > 1 && m->tp_ep) {
        *count = n_experts / m->tp_size;
        *first = m->tp_rank * *count;
    }
}

/* grouped_gemm (expert parallelism): a stack of experts [E, N, K] is narrowed to this rank's;
 * one expert's matrix (the Hub's per-expert names) is whole: em_wl_experts loads only the
 * rank's experts. */
static em_tensor *grouped(em_wload *w, em_tensor *t) {
    if (em_tensor_ndim(t) != 3) return t;
    em_ctx *c = w->c;
    int64_t first, count;
    em_tp_experts_held(w->m, em_tensor_dim(t, 0), &first, &count);
    em_scope_push(c);
    em_tensor *s = em_contiguous(c, em_narrow(c, t, 0, first, count));
    s = s ? em_detach(c, s) : NULL;
    em_scope_pop(c);
    em_tensor_release(t);
    return s;
}

/* Rank r's slice of t by `style` (the slice described into d[dn] for the report). */
static em_tensor *place(em_wload *w, const char *name, em_tensor *t, const char *style, char *d,
                        size_t dn) {
    em_model *m = w->m;
    em_ctx *c = w->c;
    if (!strncmp(style, "replicate", 9)) return t; /* replicate, replicated_with_grad_... */
    if (!strcmp(style, "grouped_gemm")) {
        int64_t e = m->cfg.num_experts, per = e / m->tp_size;
        snprintf(d, dn, "%s [%lld*r, +%lld) of %lld", em_tensor_ndim(t) == 3 ? "experts"
                 : "whole; experts", (long long)per, (long long)per, (long long)e);
        return grouped(w, t);
    }
    size_t n = strlen(name);
    bool bias = n > 5 && !strcmp(name + n - 5, ".bias");
    bool col = !strcmp(style, "colwise") || !strcmp(style, "colwise_gather_output") ||
               !strcmp(style, "embedding_rowwise"); /* the vocabulary rows [V, H] */
    bool packed = !strcmp(style, "packed_colwise"), row = !strcmp(style, "rowwise");
    if ((!col && !packed && !row) || (row && bias)) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, "model_load", "tensor parallelism: '%s' of %s is "
                    "not done yet", row ? "a rowwise bias" : style, name);
        em_tensor_release(t);
        return NULL;
    }
    /* a stack of experts [E, N, K] (the fused v5 layout) is split in each expert */
    int nd = em_tensor_ndim(t), dim = row ? nd - 1 : nd == 3 ? 1 : 0;
    int64_t size = em_tensor_dim(t, dim), r = m->tp_rank, k = m->tp_size;
    const char *rank = "r";
    char kvr[48];
    int64_t parts = col && is_kv_proj(name) ? kv_parts(m->tp_size, kv_heads_of(m, name)) : k;
    if (parts < k) {
        /* rank r's query heads all read KV head r / (k / hkv): k / hkv ranks hold each one */
        snprintf(kvr, sizeof kvr, "(r/%lld)", (long long)(k / parts));
        rank = kvr;
        r = r * parts / k;
        k = parts;
    }
    snprintf(d, dn, "dim %d [%lld*%s, +%lld) of %s%lld%s", dim,
             (long long)(size / (packed ? 2 * k : k)), rank,
             (long long)(size / (packed ? 2 * k : k)), packed ? "each half of " : "",
             (long long)size, nd == 3 ? ", each expert" : "");
    if (size % (packed ? 2 * k : k)) {
        char what[300];
        snprintf(what, sizeof what, "dim %d of %s", dim, name);
        not_divisible(c, what, size, (int)k);
        em_tensor_release(t);
        return NULL;
    }
    em_scope_push(c);
    em_tensor *s;
    if (packed) { /* fused [gate; up]: this rank's rows of each half */
        int64_t half = size / 2, part = half / k;
        em_tensor *two[2] = {em_narrow(c, t, dim, r * part, part),
                             em_narrow(c, t, dim, half + r * part, part)};
        s = em_cat(c, two, 2, dim);
    } else {
        s = em_contiguous(c, em_narrow(c, t, dim, r * (size / k), size / k));
    }
    s = s ? em_detach(c, s) : NULL;
    em_scope_pop(c);
    em_tensor_release(t);
    return s;
}

em_tensor *em_tp_shard(em_wload *w, const char *name, em_tensor *t) {
    em_model *m = w->m;
    if (m->tp_size <= 1 || !t) return t;
    const em_tp_rule *rule = em_tp_rule_of(m, w->prefix, name);
    char slice[128] = "whole";
    em_tensor *s = rule ? place(w, name, t, rule->style, slice, sizeof slice) : t;
    if (s) em_tp_record(m, rule, slice, (int64_t)em_tensor_nbytes(s));
    if (s && rule && !strcmp(rule->style, "embedding_rowwise")) m->tp_embed_split = true;
    if (s && rule && !strcmp(rule->style, "colwise_gather_output")) m->tp_head_split = true;
    return s;
}

void em_tp_localize(em_model *m) {
    if (m->tp_size <= 1) return;
    m->cfg.num_attention_heads /= m->tp_size;
    m->cfg.num_key_value_heads /= m->tp_kv_parts;
    for (int64_t i = 0; i < m->n_layers; i++) /* Gemma 4's per-layer KV heads */
        if (m->layers[i].kv_heads > 0)
            m->layers[i].kv_heads /= kv_parts(m->tp_size, m->layers[i].kv_heads);
    if (m->fam->moe != 2 || !m->tp_ep) m->cfg.intermediate_size /= m->tp_size;
    if (!m->tp_ep) m->cfg.moe_intermediate_size /= m->tp_size;
}

em_tensor *em_tp_embedding(em_ctx *c, const em_model *m, em_tensor *ids) {
    if (!m->tp_embed_split) return em_embedding(c, m->embed, ids);
    /* as transformers' EmbeddingParallel(shard_dim=0): rank r holds rows [r*V/N, (r+1)*V/N);
     * an id outside them reads row 0 and is zeroed; every id is inside exactly one rank's rows,
     * so the sum adds one row to zeros and is exact */
    int64_t rows = em_tensor_dim(m->embed, 0);
    em_scope_push(c);
    em_tensor *local = em_add_scalar(c, ids, (double)(-rows * m->tp_rank));
    em_tensor *idx = em_clamp(c, local, 0.0, (double)(rows - 1));
    em_tensor *h = em_embedding(c, m->embed, idx);
    if (h && em_tensor_dtype(h) != m->dtype) h = em_cast(c, h, m->dtype);
    em_tensor *in = em_unsqueeze(c, em_eq(c, idx, local), -1);
    h = em_mul(c, h, em_cast(c, in, m->dtype)); /* on h's device, as every op here */
    h = em_keep(c, em_all_reduce(c, h, EM_REDUCE_SUM, m->tp));
    em_scope_pop(c);
    return h;
}

em_tensor *em_tp_reduce(em_ctx *c, const em_model *m, em_tensor *x) {
    return m->tp_size > 1 ? em_all_reduce(c, x, EM_REDUCE_SUM, m->tp) : x;
}

/*
 * Tensor parallelism of the decoder over a process group (ember/dist.h): the family's plan
 * (data in its family file, transformers' rule names) says how each weight is split; each rank
 * keeps its slice; the row-parallel layers (o_proj, down_proj) sum their partial outputs with
 * all_reduce and the vocab-parallel lm_head gathers its logits. Embeddings and norms are
 * replicated.
 */
#include <stdio.h>
#include <string.h>

#include "ember/dist.h"
#include "models/model_impl.h"

static em_status not_divisible(em_ctx *c, const char *what, int64_t size, int degree) {
    return em_ctx_fail(c, EM_ERR_SHAPE, "model_load",
                       "tensor parallelism: %s (%lld) is not divisible by the degree %d", what,
                       (long long)size, degree);
}

em_status em_tp_check(em_ctx *c, em_model *m) {
    int n = m->tp_size;
    const em_model_config *cfg = &m->cfg;
    if (n <= 1) return EM_OK;
    if (!m->fam->tp_plan)
        return em_ctx_fail(c, EM_ERR_UNSUPPORTED, "model_load", "tensor parallelism: the %s "
                           "family has no plan yet (llama, mistral and qwen3 have one)",
                           cfg->model_type);
    if (m->fam->moe || cfg->num_experts > 0)
        return em_ctx_fail(c, EM_ERR_UNSUPPORTED, "model_load", "tensor parallelism: MoE "
                           "layers (moe_tp_experts, expert parallelism) are not done yet");
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
    m->tp_kv_parts = hkv < n && n % hkv == 0 ? hkv : n;
    if (hkv % m->tp_kv_parts) return not_divisible(c, "num_key_value_heads", hkv, n);
    if (cfg->intermediate_size % n)
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

const char *em_tp_style(const em_model *m, const char *prefix, const char *name) {
    if (!m->fam->tp_plan) return NULL;
    size_t pl = strlen(prefix);
    if (pl && !strncmp(name, prefix, pl)) name += pl;
    size_t n = strlen(name);
    if (n > 7 && !strcmp(name + n - 7, ".weight")) n -= 7;
    else if (n > 5 && !strcmp(name + n - 5, ".bias")) n -= 5;
    for (const em_tp_rule *r = m->fam->tp_plan; r->pattern; r++)
        if (matches(r->pattern, name, n)) return r->style;
    return NULL;
}

em_tensor *em_tp_shard(em_wload *w, const char *name, em_tensor *t) {
    em_model *m = w->m;
    em_ctx *c = w->c;
    const char *style = m->tp_size > 1 && t ? em_tp_style(m, w->prefix, name) : NULL;
    if (!style || !strncmp(style, "replicated", 10)) return t;
    size_t n = strlen(name);
    bool bias = n > 5 && !strcmp(name + n - 5, ".bias");
    bool col = !strcmp(style, "colwise") || !strcmp(style, "colwise_gather_output");
    bool packed = !strcmp(style, "packed_colwise"), row = !strcmp(style, "rowwise");
    if ((!col && !packed && !row) || (row && bias)) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, "model_load", "tensor parallelism: '%s' of %s is "
                    "not done yet", row ? "a rowwise bias" : style, name);
        em_tensor_release(t);
        return NULL;
    }
    int dim = row ? 1 : 0;
    int64_t size = em_tensor_dim(t, dim), r = m->tp_rank, k = m->tp_size;
    if (col && is_kv_proj(name) && em_tp_kv_replicated(m)) {
        /* rank r's query heads all read KV head r / (k / hkv): k / hkv ranks hold each one */
        r = r * m->tp_kv_parts / k;
        k = m->tp_kv_parts;
    }
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
        em_tensor *two[2] = {em_narrow(c, t, 0, r * part, part),
                             em_narrow(c, t, 0, half + r * part, part)};
        s = em_cat(c, two, 2, 0);
    } else {
        s = em_contiguous(c, em_narrow(c, t, dim, r * (size / k), size / k));
    }
    s = s ? em_detach(c, s) : NULL;
    em_scope_pop(c);
    em_tensor_release(t);
    return s;
}

void em_tp_localize(em_model *m) {
    if (m->tp_size <= 1) return;
    m->cfg.num_attention_heads /= m->tp_size;
    m->cfg.num_key_value_heads /= m->tp_kv_parts;
    m->cfg.intermediate_size /= m->tp_size;
}

em_tensor *em_tp_reduce(em_ctx *c, const em_model *m, em_tensor *x) {
    return m->tp_size > 1 ? em_all_reduce(c, x, EM_REDUCE_SUM, m->tp) : x;
}

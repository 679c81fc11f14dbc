/*
 * Compile mode for decoder language models: the forward step as a compiled function whose
 * shapes depend on (batch, new tokens, key bucket) only. The cache length is data (positions,
 * write positions, masks), so a decode loop compiles one program per bucket it reaches.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor_impl.h"
#include "models/model_impl.h"

struct em_model_compiled {
    const em_model *m;
    em_kv_cache *kv;
    int64_t bucket;
    bool local; /* the model has sliding-window layers: a second mask */
    em_compiled *fn;
    /* SPMD (m->spmd_parts): the split dim of each weight's storage, by the plan */
int n_shards;
    const em_storage **shard_st;
    int *shard_dim;
    bool *kv_split; /* per layer: its KV cache split by head (its key projection is) */
};

/* The dim of weight `name` (shape t) a tensor-parallel rule splits: what the rank slices take
 * (tp.c's place), as one tile per device; -1 to replicate (no rule, replicate, a rowwise bias,
 * the packed gate/up of the experts, whose halves a tile would not keep together, key and value
 * projections of fewer KV heads (hkv) than devices, which the rank plan keeps whole too). */
static int plan_dim(const em_model *m, const char *name, const em_tensor *t, int64_t hkv) {
    const em_tp_rule *r = em_tp_rule_of(m, m->prefix, name);
    if (!r) return -1;
    size_t n = strlen(name);
    bool bias = n > 5 && !strcmp(name + n - 5, ".bias");
    int nd = em_tensor_ndim(t);
    if ((strstr(name, "self_attn.k_proj.") || strstr(name, "self_attn.v_proj.")) &&
        (hkv <= 0 || hkv % m->spmd_parts))
        return -1;
    if (!strcmp(r->style, "colwise") || !strcmp(r->style, "colwise_gather_output") ||
        !strcmp(r->style, "embedding_rowwise"))
        return nd == 3 ? 1 : 0;
    if (!strcmp(r->style, "rowwise") && !bias) return nd - 1;
    if (!strcmp(r->style, "grouped_gemm") && nd == 3) return 0;
    /* em_model_options.spmd_split_gate_up: [E, 2I, H] by H, each expert's gate and up together */
    if (!strcmp(r->style, "packed_colwise") && nd == 3 && m->spmd_split_gate_up) return 2;
    return -1;
}

static int shard_of(void *user, const em_tensor *t) {
    const em_model_compiled *mc = user;
    const em_kv_cache *kv = mc->kv;
    int parts = mc->m->spmd_parts, dim = -1;
    for (int64_t l = 0; l < mc->m->n_layers && dim < 0; l++)
        if (mc->kv_split[l] && /* [B, Hkv, L, D]: by KV head */
            ((kv->k[l] && kv->k[l]->storage == t->storage) ||
             (kv->v[l] && kv->v[l]->storage == t->storage)))
            dim = 1;
    for (int i = 0; i < mc->n_shards && dim < 0; i++)
        if (mc->shard_st[i] == t->storage) dim = mc->shard_dim[i];
    if (dim < 0 || dim >= t->ndim || em_dtype_is_quantized(t->dtype)) return -1;
    /* the storage's whole buffer is what is split: a view's dim must be the buffer's */
    return t->offset == 0 && em_is_contiguous(t) && t->shape[dim] % parts == 0 ? dim : -1;
}

/* Records weight t under its Hub name (fmt: prefix, layer, rest) with the plan's split dim. */
static void shard_add(em_model_compiled *mc, const em_tensor *t, int64_t hkv, const char *fmt,
                      long long layer, const char *rest) {
    if (!t) return;
    char name[256];
    snprintf(name, sizeof name, fmt, mc->m->prefix, layer, rest);
    mc->shard_st[mc->n_shards] = t->storage;
    mc->shard_dim[mc->n_shards++] = plan_dim(mc->m, name, t, hkv);
}

/* The plan's split dim of every weight the plan names (SPMD); what is not listed is
 * replicated (norms, Gemma 4's per-layer inputs and router scales). */
static bool spmd_shards(em_ctx *c, em_model_compiled *mc) {
    const em_model *m = mc->m;
    size_t cap = 4 + 16 * (size_t)m->n_layers;
    mc->shard_st = calloc(cap, sizeof *mc->shard_st);
    mc->shard_dim = calloc(cap, sizeof *mc->shard_dim);
    mc->kv_split = calloc((size_t)m->n_layers + 1, sizeof *mc->kv_split);
    if (!mc->shard_st || !mc->shard_dim || !mc->kv_split) {
        em_ctx_fail(c, EM_ERR_OOM, "model_compile", "out of memory");
        return false;
    }
    char emb[160], head[160];
    snprintf(emb, sizeof emb, "%sembed_tokens.weight", m->prefix);
    snprintf(head, sizeof head, "lm_head.weight");
    mc->shard_st[mc->n_shards] = m->embed ? m->embed->storage : NULL;
    mc->shard_dim[mc->n_shards++] = m->embed ? plan_dim(m, emb, m->embed, 0) : -1;
    if (m->lm_head && m->lm_head != m->embed) {
        mc->shard_st[mc->n_shards] = m->lm_head->storage;
        mc->shard_dim[mc->n_shards++] = plan_dim(m, head, m->lm_head, 0);
    }
    /* Gemma 4 names its experts layers.N.experts.*, the others layers.N.mlp.experts.* */
    const char *ex = m->fam->layer ? "experts" : "mlp.experts";
    for (int64_t l = 0; l < m->n_layers; l++) {
        const em_dec_layer *L = &m->layers[l];
        int64_t hkv = L->kv_heads > 0 ? L->kv_heads : m->cfg.num_key_value_heads;
        const char *f = "%slayers.%lld.%s";
        long long i = (long long)l;
        char gu[64], dn[64];
        snprintf(gu, sizeof gu, "%s.gate_up_proj", ex);
        snprintf(dn, sizeof dn, "%s.down_proj", ex);
        int before = mc->n_shards;
        shard_add(mc, L->k, hkv, f, i, "self_attn.k_proj.weight");
        mc->kv_split[l] = L->k && mc->shard_dim[before] >= 0;
        shard_add(mc, L->q, hkv, f, i, "self_attn.q_proj.weight");
        shard_add(mc, L->q_bias, hkv, f, i, "self_attn.q_proj.bias");
        shard_add(mc, L->k_bias, hkv, f, i, "self_attn.k_proj.bias");
        shard_add(mc, L->v, hkv, f, i, "self_attn.v_proj.weight");
        shard_add(mc, L->v_bias, hkv, f, i, "self_attn.v_proj.bias");
        shard_add(mc, L->o, hkv, f, i, "self_attn.o_proj.weight");
        shard_add(mc, L->gate, hkv, f, i, "mlp.gate_proj.weight");
        shard_add(mc, L->up, hkv, f, i, "mlp.up_proj.weight");
        shard_add(mc, L->down, hkv, f, i, "mlp.down_proj.weight");
        shard_add(mc, L->experts.gate_up, hkv, f, i, gu);
        shard_add(mc, L->experts.down, hkv, f, i, dn);
    }
    return true;
}

static int step_fn(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *statics,
                   int n_statics, em_tensor **out, int max_out, void *user) {
    (void)n_statics, (void)max_out;
    em_model_compiled *mc = user;
    out[0] = em_decoder_forward_static(c, mc->m, in[0], in[1], in[2], in[3],
                                       n_in > 4 ? in[4] : NULL, mc->kv, statics[0] != 0);
    return out[0] ? 1 : -1;
}

bool em_model_compile_supported(const em_model *m) {
    if (!m || !m->fam->causal || m->dev_head != m->dev_embed) return false;
    for (int64_t i = 0; i < m->n_layers; i++)
        if (m->layers[i].dev != m->dev_embed) return false;
    return true;
}

em_model_compiled *em_model_compile(em_ctx *c, const em_model *m, em_kv_cache *kv,
                                    int64_t bucket) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!m || !kv || kv->m != m || !m->fam->causal) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, "model_compile",
                    "compile mode needs a decoder language model and its KV cache%s%s",
                    m ? "; model_type " : "", m ? m->cfg.model_type : "");
        return NULL;
    }
    for (int64_t i = 0; i < m->n_layers; i++)
        if (m->layers[i].dev != m->dev_embed || m->dev_head != m->dev_embed) {
            em_ctx_fail(c, EM_ERR_UNSUPPORTED, "model_compile",
                        "a compiled forward runs on one device; this model is split (layer "
                        "%lld on %s, embeddings on %s)", (long long)i,
                        em_device_name(m->layers[i].dev), em_device_name(m->dev_embed));
            return NULL;
        }
    em_model_compiled *mc = calloc(1, sizeof *mc);
    if (!mc) {
        em_ctx_fail(c, EM_ERR_OOM, "model_compile", "out of memory");
        return NULL;
    }
    mc->m = m;
    mc->kv = kv;
    mc->bucket = bucket > 0 ? bucket : 128;
    for (int64_t i = 0; i < m->n_layers; i++) mc->local |= m->layers[i].sliding;
    mc->fn = em_compile(c, m->cfg.model_type, step_fn, mc);
    if (!mc->fn) {
        free(mc);
        return NULL;
    }
    if (m->spmd_parts > 1 &&
        (!spmd_shards(c, mc) || em_compiled_set_spmd(c, mc->fn, m->spmd_parts, shard_of, mc))) {
        em_model_compiled_free(mc);
        return NULL;
    }
    return mc;
}

void em_model_compiled_free(em_model_compiled *mc) {
    if (!mc) return;
    em_compiled_free(mc->fn);
    free(mc->shard_st);
    free(mc->shard_dim);
    free(mc->kv_split);
    free(mc);
}

void em_model_compiled_stats(const em_model_compiled *mc, em_compile_stats *out) {
    em_compiled_stats(mc ? mc->fn : NULL, out);
}

/* mask[b][i][j]: query i (absolute position pos0 + i) may attend key j */
static uint8_t *make_mask(const uint8_t *valid, int64_t b, int64_t t, int64_t pos0, int64_t tk,
                          int64_t l, int64_t window) {
    uint8_t *mk = calloc((size_t)(b * t * l) + 1, 1);
    if (!mk) return NULL;
    for (int64_t s = 0; s < b; s++)
        for (int64_t i = 0; i < t; i++)
            for (int64_t j = 0; j < tk; j++) {
                int64_t q = pos0 + i;
                bool ok = j <= q && (!valid || valid[s * tk + j]);
                if (window > 0) ok = ok && j > q - window;
                mk[(s * t + i) * l + j] = ok;
            }
    return mk;
}

/* One step with static shapes: positions, write positions and masks over the first l cache
 * positions (the step's key length rounded up to the bucket) are data, so every step of a bucket
 * has the same shapes. fn is the compiled step; NULL runs the same static forward eagerly. */
static em_tensor *static_step(em_ctx *c, const em_model *m, em_kv_cache *kv, int64_t bucket,
                              bool local, em_compiled *fn, em_tensor *ids, em_tensor *key_mask,
                              bool last_only, const char *what) {
    int64_t b = em_tensor_dim(ids, 0), t = em_tensor_dim(ids, 1);
    int64_t pos0 = kv->len, tk = pos0 + t;
    if (!em_decoder_check_step(c, what, m, kv, ids, key_mask)) return NULL;
    int64_t l = (tk + bucket - 1) / bucket * bucket;
    if (l > kv->max_len) l = kv->max_len;
    em_scope_push(c);
    em_device *d = m->dev_embed;
    uint8_t *valid = key_mask ? malloc((size_t)(b * tk) + 1) : NULL;
    int64_t *cpos = malloc((size_t)t * sizeof *cpos + 1);
    int64_t *pos = malloc((size_t)(b * t) * sizeof *pos + 1);
    uint8_t *mk = NULL, *mkl = NULL;
    em_tensor *r = NULL;
    if ((key_mask && !valid) || !cpos || !pos) {
        em_ctx_fail(c, EM_ERR_OOM, what, "out of memory");
        goto done;
    }
    if (valid && em_to_host(c, em_cast(c, key_mask, EM_BOOL), valid, (size_t)(b * tk)))
        goto done;
    for (int64_t i = 0; i < t; i++) cpos[i] = pos0 + i;
    em_decoder_positions_host(valid, b, t, pos0, tk, pos);
    mk = make_mask(valid, b, t, pos0, tk, l, 0);
    mkl = local ? make_mask(valid, b, t, pos0, tk, l, m->cfg.sliding_window) : NULL;
    if (!mk || (local && !mkl)) {
        em_ctx_fail(c, EM_ERR_OOM, what, "out of memory");
        goto done;
    }
    int64_t ms[4] = {b, 1, t, l};
    em_tensor *in[5] = {
        em_model_to_dev(c, ids, d),
        em_from_host_on(c, d, EM_I64, 2, (int64_t[]){b, t}, pos),
        em_from_host_on(c, d, EM_I64, 1, &t, cpos),
        em_from_host_on(c, d, EM_BOOL, 4, ms, mk),
        mkl ? em_from_host_on(c, d, EM_BOOL, 4, ms, mkl) : NULL,
    };
    int64_t st[1] = {last_only && t > 1};
    em_tensor *out = NULL;
    if (!em_ctx_status(c)) {
        if (fn) {
            if (em_compiled_call(c, fn, in, mkl ? 5 : 4, st, 1, &out, 1) != 1) out = NULL;
        } else {
            out = em_decoder_forward_static(c, m, in[0], in[1], in[2], in[3], in[4], kv,
                                            st[0] != 0);
        }
    }
    if (out) {
        kv->len = tk;
        kv->experts_hit = -1; /* the routing stayed on the device */
        r = em_keep(c, out);
    }
done:
    free(valid);
    free(cpos);
    free(pos);
    free(mk);
    free(mkl);
    em_scope_pop(c);
    return r;
}

em_tensor *em_model_forward_compiled(em_ctx *c, em_model_compiled *mc, em_tensor *ids,
                                     em_tensor *key_mask, bool last_only) {
    if (!c || em_ctx_status(c)) return NULL;
    char s1[96];
    if (!mc || !ids || em_tensor_ndim(ids) != 2) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "model_forward_compiled", "needs ids [B, T], got %s",
                    ids ? em_tensor_sig(ids, s1, sizeof s1) : "none");
        return NULL;
    }
    return static_step(c, mc->m, mc->kv, mc->bucket, mc->local, mc->fn, ids, key_mask, last_only,
                       "model_forward_compiled");
}

bool em_model_forward_bucketed_pays(const em_model *m, const em_kv_cache *kv) {
    return m && kv && kv->m == m && !m->dev_embed->be->host_accessible &&
           em_model_compile_supported(m) && m->spmd_parts <= 1 && m->tp_size <= 1;
}

em_tensor *em_model_forward_bucketed(em_ctx *c, const em_model *m, em_tensor *ids,
                                     em_tensor *key_mask, em_kv_cache *kv, bool last_only) {
    if (!c || em_ctx_status(c)) return NULL;
    bool local = false;
    for (int64_t i = 0; i < m->n_layers; i++) local |= m->layers[i].sliding;
    return static_step(c, m, kv, 128, local, NULL, ids, key_mask, last_only, "model_forward");
}

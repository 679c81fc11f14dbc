/*
 * Compile mode for decoder language models: the forward step as a compiled function whose
 * shapes depend on (batch, new tokens, key bucket) only. The cache length is data (positions,
 * write positions, masks), so a decode loop compiles one program per bucket it reaches.
 */
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
};

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
    return mc;
}

void em_model_compiled_free(em_model_compiled *mc) {
    if (!mc) return;
    em_compiled_free(mc->fn);
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

em_tensor *em_model_forward_compiled(em_ctx *c, em_model_compiled *mc, em_tensor *ids,
                                     em_tensor *key_mask, bool last_only) {
    if (!c || em_ctx_status(c)) return NULL;
    char s1[96];
    if (!mc || !ids || em_tensor_ndim(ids) != 2) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "model_forward_compiled", "needs ids [B, T], got %s",
                    ids ? em_tensor_sig(ids, s1, sizeof s1) : "none");
        return NULL;
    }
    const em_model *m = mc->m;
    em_kv_cache *kv = mc->kv;
    int64_t b = em_tensor_dim(ids, 0), t = em_tensor_dim(ids, 1);
    int64_t pos0 = kv->len, tk = pos0 + t;
    if (!em_decoder_check_step(c, "model_forward_compiled", m, kv, ids, key_mask)) return NULL;
    int64_t l = (tk + mc->bucket - 1) / mc->bucket * mc->bucket;
    if (l > kv->max_len) l = kv->max_len;
    em_scope_push(c);
    em_device *d = m->dev_embed;
    uint8_t *valid = key_mask ? malloc((size_t)(b * tk) + 1) : NULL;
    int64_t *cpos = malloc((size_t)t * sizeof *cpos + 1);
    int64_t *pos = malloc((size_t)(b * t) * sizeof *pos + 1);
    uint8_t *mk = NULL, *mkl = NULL;
    em_tensor *r = NULL;
    if ((key_mask && !valid) || !cpos || !pos) {
        em_ctx_fail(c, EM_ERR_OOM, "model_forward_compiled", "out of memory");
        goto done;
    }
    if (valid && em_to_host(c, em_cast(c, key_mask, EM_BOOL), valid, (size_t)(b * tk)))
        goto done;
    for (int64_t i = 0; i < t; i++) cpos[i] = pos0 + i;
    em_decoder_positions_host(valid, b, t, pos0, tk, pos);
    mk = make_mask(valid, b, t, pos0, tk, l, 0);
    mkl = mc->local ? make_mask(valid, b, t, pos0, tk, l, m->cfg.sliding_window) : NULL;
    if (!mk || (mc->local && !mkl)) {
        em_ctx_fail(c, EM_ERR_OOM, "model_forward_compiled", "out of memory");
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
    if (!em_ctx_status(c) &&
        em_compiled_call(c, mc->fn, in, mkl ? 5 : 4, st, 1, &out, 1) == 1) {
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

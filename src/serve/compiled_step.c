/*
 * `ember serve --compile`: the decode step over the dense KV cache as compiled programs whose
 * shapes come from buckets, so that requests joining and leaving the running batch do not
 * recompile.
 *
 * Batch buckets are 1, 2, 4, ... up to max_batch (the last one max_batch itself). Each bucket
 * has its own em_model_compiled bound to a cache whose tensors are views of the cache's first B
 * rows (captured tensors must stay the same tensors: the views are made once). A step of n rows
 * runs the smallest bucket B >= n; rows [n, B) are padding: they feed id 0, attend to the one
 * key they write (a finite, ignored result) and their logits are dropped. Their writes land in
 * free rows of the cache, at the current length; a row that later joins there gets its whole
 * prompt copied over them before it is read, and every later position is written before it is
 * read. The key length is bucketed by em_model_forward_compiled (--bucket positions), so the
 * programs are at most one per (batch bucket, key bucket) pair.
 */
#include <stdlib.h>
#include <string.h>

#include "models/model_impl.h"
#include "serve/compiled_step.h"

struct srv_compiled {
    const em_model *m;
    int n_buckets;
    int batch[32];             /* the bucket sizes, ascending */
    em_kv_cache view[32];      /* the cache's first batch[i] rows (views, owned here) */
    em_model_compiled *mc[32]; /* made at the bucket's first use */
    int64_t bucket;
    uint8_t *mask;             /* [max_batch, max_len + 1] */
    int64_t *ids;              /* [max_batch] */
};

void srv_compiled_free(srv_compiled *sc) {
    if (!sc) return;
    for (int i = 0; i < sc->n_buckets; i++) {
        em_model_compiled_free(sc->mc[i]);
        for (int64_t l = 0; sc->view[i].k && l < sc->m->n_layers; l++) {
            em_tensor_release(sc->view[i].k[l]);
            em_tensor_release(sc->view[i].v[l]);
        }
        free(sc->view[i].k);
        free(sc->view[i].v);
    }
    free(sc->mask);
    free(sc->ids);
    free(sc);
}

srv_compiled *srv_compiled_create(em_ctx *c, const em_model *m, em_kv_cache *kv, int64_t bucket) {
    if (em_ctx_status(c)) return NULL;
    if (!em_model_compile_supported(m)) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, "serve",
                    "--compile: model_type %s is not supported by compile mode (it needs a decoder "
                    "with the shared forward, all layers on one device)", m->cfg.model_type);
        return NULL;
    }
    srv_compiled *sc = calloc(1, sizeof *sc);
    if (!sc) {
        em_ctx_fail(c, EM_ERR_OOM, "serve", "out of memory");
        return NULL;
    }
    sc->m = m;
    sc->bucket = bucket > 0 ? bucket : 128;
    for (int64_t b = 1; b < kv->batch && sc->n_buckets < 31; b *= 2) sc->batch[sc->n_buckets++] = (int)b;
    sc->batch[sc->n_buckets++] = (int)kv->batch;
    sc->mask = malloc((size_t)(kv->batch * (kv->max_len + 1)));
    sc->ids = malloc((size_t)kv->batch * sizeof *sc->ids);
    if (!sc->mask || !sc->ids) em_ctx_fail(c, EM_ERR_OOM, "serve", "out of memory");
    for (int i = 0; i < sc->n_buckets && !em_ctx_status(c); i++) {
        em_kv_cache *v = &sc->view[i];
        v->m = m;
        v->batch = sc->batch[i];
        v->max_len = kv->max_len;
        v->k = calloc((size_t)m->n_layers + 1, sizeof *v->k);
        v->v = calloc((size_t)m->n_layers + 1, sizeof *v->v);
        if (!v->k || !v->v) {
            em_ctx_fail(c, EM_ERR_OOM, "serve", "out of memory");
            break;
        }
        em_scope_push(c);
        for (int64_t l = 0; l < m->n_layers; l++) {
            if (kv->k[l]) v->k[l] = em_detach(c, em_narrow(c, kv->k[l], 0, 0, v->batch));
            if (kv->v[l]) v->v[l] = em_detach(c, em_narrow(c, kv->v[l], 0, 0, v->batch));
        }
        em_scope_pop(c);
    }
    if (em_ctx_status(c)) {
        srv_compiled_free(sc);
        return NULL;
    }
    return sc;
}

em_status srv_compiled_step(em_ctx *c, srv_compiled *sc, int n, int64_t len, const int64_t *ids,
                            const uint8_t *mask, float *logits) {
    if (em_ctx_status(c)) return em_ctx_status(c);
    int i = 0;
    while (i < sc->n_buckets - 1 && sc->batch[i] < n) i++;
    int64_t b = sc->batch[i], tk = len + 1;
    if (n < 1 || n > b)
        return em_ctx_fail(c, EM_ERR_INTERNAL, "serve", "--compile: %d rows for at most %lld", n,
                           (long long)b);
    if (!sc->mc[i] && !(sc->mc[i] = em_model_compile(c, sc->m, &sc->view[i], sc->bucket)))
        return em_ctx_status(c);
    memcpy(sc->ids, ids, (size_t)n * sizeof *ids);
    memcpy(sc->mask, mask, (size_t)(n * tk));
    for (int64_t r = n; r < b; r++) { /* padding: id 0, its own key only */
        sc->ids[r] = 0;
        memset(sc->mask + r * tk, 0, (size_t)tk);
        sc->mask[r * tk + tk - 1] = 1;
    }
    sc->view[i].len = len;
    em_scope_push(c);
    em_tensor *it = em_from_host(c, EM_I64, EM_SHAPE(b, 1), sc->ids);
    em_tensor *mk = em_from_host(c, EM_BOOL, EM_SHAPE(b, tk), sc->mask);
    em_tensor *lg = it && mk ? em_model_forward_compiled(c, sc->mc[i], it, mk, true) : NULL;
    if (lg) lg = em_narrow(c, em_reshape(c, lg, EM_SHAPE(b, em_tensor_numel(lg) / b)), 0, 0, n);
    if (lg) em_to_host(c, lg, logits, (size_t)em_tensor_numel(lg) * sizeof *logits);
    em_scope_pop(c);
    return em_ctx_status(c);
}

void srv_compiled_counts(const srv_compiled *sc, int64_t *compiles, int64_t *programs,
                         double *compile_ms) {
    *compiles = *programs = 0;
    *compile_ms = 0;
    for (int i = 0; sc && i < sc->n_buckets; i++) {
        em_compile_stats st;
        em_model_compiled_stats(sc->mc[i], &st);
        *compiles += st.compiles;
        *programs += st.programs;
        *compile_ms += st.compile_ms;
    }
}

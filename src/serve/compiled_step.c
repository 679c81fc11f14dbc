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
 *
 * With the paged cache (srv_compiled_create_paged) the step is em_paged_forward_compiled: the
 * same batch buckets, one em_paged_compiled each; padding rows have length 0 and write only
 * the pool's padding block, and the block tables' width is bucketed (--bucket positions), so
 * the programs are again one per (batch bucket, table bucket) pair.
 *
 * Prefill chunks over the paged cache (srv_compiled_prefill_paged) are bucketed the same way:
 * the group's members rounded up to a batch bucket, the chunk's columns to a power of two
 * (left-padded: a member's padding columns, like the eager forward's, are written to the
 * padding block and attend to nothing; em_paged_forward's n_new), the tables to their bucket.
 * Their programs (one per (rows, columns, table) bucket triple) are held apart from the decode
 * steps' (pf[]), so that prefills never evict a decode program from em_compile's cache.
 */
#include <stdlib.h>
#include <string.h>

#include "models/model_impl.h"
#include "models/paged_kv.h"
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
    /* the paged cache's step instead (view[] and mask unused) */
    em_paged_kv *pkv;
    em_paged_compiled *pc[32];
    em_paged_compiled *pf[32]; /* prefill chunks */
    int64_t ctx;
};

void srv_compiled_free(srv_compiled *sc) {
    if (!sc) return;
    for (int i = 0; i < sc->n_buckets; i++) {
        em_model_compiled_free(sc->mc[i]);
        em_paged_compiled_free(sc->pc[i]);
        em_paged_compiled_free(sc->pf[i]);
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

/* The common part: the model check, the batch buckets 1, 2, 4, ... max_batch. */
static srv_compiled *compiled_new(em_ctx *c, const em_model *m, int64_t max_batch,
                                  int64_t bucket) {
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
    for (int64_t b = 1; b < max_batch && sc->n_buckets < 31; b *= 2) sc->batch[sc->n_buckets++] = (int)b;
    sc->batch[sc->n_buckets++] = (int)max_batch;
    return sc;
}

/* The smallest bucket that holds n rows. */
static int bucket_of(const srv_compiled *sc, int n) {
    int i = 0;
    while (i < sc->n_buckets - 1 && sc->batch[i] < n) i++;
    return i;
}

srv_compiled *srv_compiled_create_paged(em_ctx *c, const em_model *m, em_paged_kv *p,
                                        int max_batch, int64_t ctx, int64_t bucket) {
    srv_compiled *sc = compiled_new(c, m, max_batch, bucket);
    if (!sc) return NULL;
    sc->pkv = p;
    sc->ctx = ctx;
    sc->ids = malloc((size_t)max_batch * sizeof *sc->ids);
    if (!sc->ids) {
        em_ctx_fail(c, EM_ERR_OOM, "serve", "out of memory");
        srv_compiled_free(sc);
        return NULL;
    }
    return sc;
}

em_status srv_compiled_step_paged(em_ctx *c, srv_compiled *sc, int n, const int64_t *ids,
                                  const int *seqs, float *logits) {
    if (em_ctx_status(c)) return em_ctx_status(c);
    int i = bucket_of(sc, n);
    if (n < 1 || n > sc->batch[i] || !sc->pkv)
        return em_ctx_fail(c, EM_ERR_INTERNAL, "serve", "--compile: %d rows for at most %d", n,
                           sc->batch[i]);
    if (!sc->pc[i] && !(sc->pc[i] = em_paged_compile(c, sc->m, sc->pkv, sc->bucket, sc->ctx)))
        return em_ctx_status(c);
    em_scope_push(c);
    em_tensor *it = em_from_host(c, EM_I64, EM_SHAPE(n, 1), ids);
    em_tensor *lg = it ? em_paged_forward_compiled(c, sc->pc[i], it, seqs, NULL, sc->batch[i], true)
                       : NULL;
    if (lg) em_to_host(c, lg, logits, (size_t)em_tensor_numel(lg) * sizeof *logits);
    em_scope_pop(c);
    return em_ctx_status(c);
}

em_status srv_compiled_prefill_paged(em_ctx *c, srv_compiled *sc, int n, int64_t k,
                                     const int64_t *ids, const int *seqs, const int64_t *add,
                                     float *logits) {
    if (em_ctx_status(c)) return em_ctx_status(c);
    int i = bucket_of(sc, n);
    if (n < 1 || n > sc->batch[i] || k < 1 || !sc->pkv)
        return em_ctx_fail(c, EM_ERR_INTERNAL, "serve", "--compile: prefill of %d rows x %lld "
                           "tokens for at most %d rows", n, (long long)k, sc->batch[i]);
    int64_t kb = 1; /* the columns' bucket: the next power of two */
    while (kb < k) kb *= 2;
    if (!sc->pf[i] && !(sc->pf[i] = em_paged_compile(c, sc->m, sc->pkv, sc->bucket, sc->ctx)))
        return em_ctx_status(c);
    int64_t *pid = malloc((size_t)(n * kb) * sizeof *pid);
    if (!pid) return em_ctx_fail(c, EM_ERR_OOM, "serve", "out of memory");
    for (int r = 0; r < n; r++) { /* the chunk right-aligned, padding (id 0) before it */
        for (int64_t t = 0; t < kb - k; t++) pid[r * kb + t] = 0;
        memcpy(pid + r * kb + (kb - k), ids + r * k, (size_t)k * sizeof *ids);
    }
    em_scope_push(c);
    em_tensor *it = em_from_host(c, EM_I64, EM_SHAPE(n, kb), pid);
    em_tensor *lg = it ? em_paged_forward_compiled(c, sc->pf[i], it, seqs, add, sc->batch[i], true)
                       : NULL;
    if (lg) em_to_host(c, lg, logits, (size_t)em_tensor_numel(lg) * sizeof *logits);
    em_scope_pop(c);
    free(pid);
    return em_ctx_status(c);
}

srv_compiled *srv_compiled_create(em_ctx *c, const em_model *m, em_kv_cache *kv, int64_t bucket) {
    srv_compiled *sc = compiled_new(c, m, kv->batch, bucket);
    if (!sc) return NULL;
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
    int i = bucket_of(sc, n);
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
                         int64_t *pf_compiles, int64_t *pf_programs, double *compile_ms) {
    *compiles = *programs = *pf_compiles = *pf_programs = 0;
    *compile_ms = 0;
    for (int i = 0; sc && i < sc->n_buckets; i++) {
        em_compile_stats st[3];
        em_model_compiled_stats(sc->mc[i], &st[0]);
        em_paged_compiled_stats(sc->pc[i], &st[1]);
        em_paged_compiled_stats(sc->pf[i], &st[2]);
        for (int k = 0; k < 3; k++) {
            *(k < 2 ? compiles : pf_compiles) += st[k].compiles;
            *(k < 2 ? programs : pf_programs) += st[k].programs;
            *compile_ms += st[k].compile_ms;
        }
    }
}

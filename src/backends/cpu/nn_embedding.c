/*
 * Embedding lookup: out[*ids, :] = weight[id, :]. Every id is checked before anything is copied,
 * so a bad id leaves no partial result and the error names the first bad id, where it is and V.
 */
#include <stdio.h>
#include <string.h>

#include "backends/cpu/nn.h"

#define PAR_BYTES (64 * 1024)

typedef struct emb_job {
    const em_tensor *w, *ids;
    em_tensor *out;
} emb_job;

static void emb_chunk(void *user, int64_t p0, int64_t p1, int tid) {
    (void)tid;
    emb_job *j = user;
    const em_tensor *w = j->w;
    int64_t d = w->shape[1], sd = w->strides[1];
    size_t es = em_esize(w->dtype);
    const char *wb = (const char *)nn_base(w);
    char *ob = em_tensor_ptr(j->out);
    for (int64_t p = p0; p < p1; p++) {
        int64_t id = em_cpu_get_i64(j->ids, p);
        const char *src = wb + (size_t)(w->offset + id * w->strides[0]) * es;
        char *dst = ob + (size_t)(p * d) * es;
        if (sd == 1) {
            memcpy(dst, src, (size_t)d * es);
        } else if (es == 2) { /* a transposed table: gather the row */
            for (int64_t i = 0; i < d; i++)
                ((uint16_t *)dst)[i] = ((const uint16_t *)src)[i * sd];
        } else {
            for (int64_t i = 0; i < d; i++)
                memcpy(dst + (size_t)i * es, src + (size_t)(i * sd) * es, es);
        }
    }
}

static em_status k_embedding(const em_kernel_args *a) {
    const em_tensor *w = a->in[0], *ids = a->in[1];
    int64_t v = w->shape[0];
    for (int64_t p = 0; p < ids->numel; p++) {
        int64_t id = em_cpu_get_i64(ids, p);
        if (id < 0 || id >= v) {
            char where[160];
            int n = 0;
            where[n++] = '[';
            int64_t rem = p, idx[EM_MAX_DIMS];
            for (int d = ids->ndim - 1; d >= 0; d--) {
                idx[d] = rem % ids->shape[d];
                rem /= ids->shape[d];
            }
            for (int d = 0; d < ids->ndim && n < (int)sizeof where - 24; d++)
                n += snprintf(where + n, sizeof where - (size_t)n, "%s%lld", d ? "," : "",
                              (long long)idx[d]);
            snprintf(where + n, sizeof where - (size_t)n, "]");
            return em_op_fail(a->ctx, EM_ERR_INDEX,
                              "id %lld at position %s is out of range for %lld embeddings",
                              (long long)id, where, (long long)v);
        }
    }
    emb_job j = {w, ids, a->out[0]};
    int64_t row = w->shape[1] * (int64_t)em_esize(w->dtype);
    if (ids->numel > 0 && row > 0) em_parallel_for(ids->numel, PAR_BYTES / row + 1, emb_chunk, &j);
    return EM_OK;
}

void em_cpu_register_nn_embedding(em_kernel_fn *k) { k[EM_OP_EMBEDDING] = k_embedding; }

/*
 * cat, stack and repeat_interleave on the CPU.
 *
 * cat and stack copy each input into its block of the (contiguous) output with one strided block
 * copy: dims that are contiguous on both sides merge, so concatenating contiguous tensors is one
 * memcpy per outer row (cat along the last dim) or per input (cat along dim 0). repeat_interleave
 * gathers slices of x with an index that repeats each position `repeats` times.
 */
#include <stdlib.h>

#include "backends/cpu/index.h"

/* Dense inputs: the output is filled row by row (a row: one position of the dims before d),
 * each row input after input, so it is written once, in order. */
typedef struct cat_job {
    const em_kernel_args *a;
    char *out;
    int64_t row_bytes; /* bytes of one output row */
    int64_t inner;     /* bytes per unit of d (inner elements * element size) */
} cat_job;

static void cat_rows(void *user, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const cat_job *j = user;
    int d = (int)(j->a->attrs[0].i < 0 ? j->a->attrs[0].i + j->a->out[0]->ndim : j->a->attrs[0].i);
    for (int64_t r = begin; r < end; r++) {
        char *dst = j->out + r * j->row_bytes;
        for (int i = 0; i < j->a->n_in; i++) {
            const em_tensor *x = j->a->in[i];
            if (x->numel == 0) continue;
            int64_t n = x->shape[d] * j->inner;
            ix_copy_bytes(dst, ix_at(x, x->offset) + r * n, (size_t)n);
            dst += n;
        }
    }
}

static em_status cat_kernel(const em_kernel_args *a) {
    em_tensor *out = a->out[0];
    if (out->numel == 0) return EM_OK;
    int nd = out->ndim;
    int d = (int)(a->attrs[0].i < 0 ? a->attrs[0].i + nd : a->attrs[0].i);
    bool dense = true;
    for (int i = 0; i < a->n_in && dense; i++)
        dense = a->in[i]->numel == 0 || em_is_contiguous(a->in[i]);
    if (dense) {
        int64_t rows = 1, inner = (int64_t)em_esize(out->dtype);
        for (int i = 0; i < d; i++) rows *= out->shape[i];
        for (int i = d + 1; i < nd; i++) inner *= out->shape[i];
        cat_job j = {a, em_tensor_ptr(out), out->shape[d] * inner, inner};
        int64_t grain = (64 << 10) / j.row_bytes;
        em_parallel_for(rows, grain < 1 ? 1 : grain, cat_rows, &j);
        return EM_OK;
    }
    int64_t ost[EM_MAX_DIMS];
    ix_contiguous_strides(out->shape, nd, ost);
    size_t es = em_esize(out->dtype);
    char *po = em_tensor_ptr(out);
    int64_t at = 0; /* position along d */
    for (int i = 0; i < a->n_in; i++) {
        const em_tensor *x = a->in[i];
        if (x->numel == 0) continue; /* includes the legacy 1-d empty tensors torch skips */
        ix_copy_nd(po + at * ost[d] * (int64_t)es, ost, ix_at(x, x->offset), x->strides, x->shape,
                   nd, es);
        at += x->shape[d];
    }
    return EM_OK;
}

static em_status stack_kernel(const em_kernel_args *a) {
    em_tensor *out = a->out[0];
    if (out->numel == 0) return EM_OK;
    int nd = out->ndim;
    int d = (int)(a->attrs[0].i < 0 ? a->attrs[0].i + nd : a->attrs[0].i);
    int64_t ost[EM_MAX_DIMS], dst[EM_MAX_DIMS];
    ix_contiguous_strides(out->shape, nd, ost);
    for (int i = 0, k = 0; i < nd; i++)
        if (i != d) dst[k++] = ost[i];
    size_t es = em_esize(out->dtype);
    char *po = em_tensor_ptr(out);
    for (int i = 0; i < a->n_in; i++) {
        const em_tensor *x = a->in[i];
        ix_copy_nd(po + i * ost[d] * (int64_t)es, dst, ix_at(x, x->offset), x->strides, x->shape,
                   x->ndim, es);
    }
    return EM_OK;
}

static em_status repeat_interleave_kernel(const em_kernel_args *a) {
    const em_tensor *x = a->in[0];
    em_tensor *out = a->out[0];
    if (out->numel == 0) return EM_OK;
    int d = (int)(a->attrs[1].i < 0 ? a->attrs[1].i + x->ndim : a->attrs[1].i);
    int64_t r = a->attrs[0].i, n = out->shape[d];
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    if (!idx)
        return em_op_fail(a->ctx, EM_ERR_OOM, "cannot allocate %lld indices", (long long)n);
    for (int64_t j = 0; j < n; j++) idx[j] = j / r;
    ix_select_slices(out, x, d, idx, n);
    free(idx);
    return EM_OK;
}

void em_cpu_register_index_concat(em_kernel_fn *k) {
    k[EM_OP_CAT] = cat_kernel;
    k[EM_OP_STACK] = stack_kernel;
    k[EM_OP_REPEAT_INTERLEAVE] = repeat_interleave_kernel;
}

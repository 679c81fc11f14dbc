/*
 * The collectives on the native CPU: MPI calls between processes (Open MPI), one rank per process,
 * over the group's communicator (MPI_COMM_WORLD, or a sub-group's of em_dist_split). Sums and
 * maxima are computed in f32 whatever the dtype: a bf16 input is widened exactly, MPI reduces
 * the f32 values (in an order of its own choosing), and the result is rounded to bf16 once, to
 * nearest even. Gathers, all-to-all and the ring shift
 * (MPI_Sendrecv, point to point) move the elements as stored. Built without MPI, every collective
 * is refused with EM_ERR_UNSUPPORTED, saying how to get one.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "core/group.h"

#ifdef EMBER_HAVE_MPI
#include <mpi.h>

static em_status mpi_fail(const em_kernel_args *a, int rc, const char *call) {
    char msg[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, msg, &n) != MPI_SUCCESS) snprintf(msg, sizeof msg, "code %d", rc);
    return em_op_fail(a->ctx, EM_ERR_BACKEND, "%s failed: %s", call, msg);
}

static em_status count_ok(const em_kernel_args *a, int64_t n) {
    if (n > INT_MAX)
        return em_op_fail(a->ctx, EM_ERR_OVERFLOW, "%lld elements is more than one MPI call "
                          "carries (INT_MAX)", (long long)n);
    return EM_OK;
}

/* x's elements as stored, contiguous: x's own memory, or a packed copy (*owned set). */
static const void *packed(const em_tensor *x, void **owned) {
    *owned = NULL;
    if (em_is_contiguous(x)) return em_tensor_ptr(x);
    float *f = em_cpu_to_f32(x);
    void *b = f ? malloc((size_t)(x->numel ? x->numel : 1) * em_dtype_size(x->dtype)) : NULL;
    if (b) em_convert(f, EM_F32, b, x->dtype, x->numel);
    free(f);
    return *owned = b;
}

/* dst[q][p] = src[p][q] for blocks of `blk` bytes: the layout change between "chunk w of each
 * outer index" (what a gather along a dim needs) and "all of chunk w together" (what MPI sends). */
static void swap_blocks(char *dst, const char *src, int64_t p_n, int64_t q_n, size_t blk) {
    for (int64_t p = 0; p < p_n; p++)
        for (int64_t q = 0; q < q_n; q++)
            memcpy(dst + (size_t)(q * p_n + p) * blk, src + (size_t)(p * q_n + q) * blk, blk);
}

/* Elements before dim d (outer) and from d+1 on (inner) of a shape. */
static void outer_inner(const int64_t *shape, int ndim, int d, int64_t *outer, int64_t *inner) {
    *outer = *inner = 1;
    for (int i = 0; i < d; i++) *outer *= shape[i];
    for (int i = d + 1; i < ndim; i++) *inner *= shape[i];
}

/* The group's communicator (core/group.h: NULL is the world). */
static MPI_Comm comm_of(em_group_info g) {
    return g.comm ? *(MPI_Comm *)g.comm : MPI_COMM_WORLD;
}

static int norm_dim(int64_t d, int ndim) { return (int)(d < 0 ? d + ndim : d); }

static em_status mpi_all_reduce(const em_kernel_args *a, em_group_info g) {
    const em_tensor *x = a->in[0];
    if (count_ok(a, x->numel)) return a->ctx->err.status;
    float *v = em_cpu_to_f32(x);
    if (!v) return em_op_fail(a->ctx, EM_ERR_OOM, "out of memory");
    int rc = MPI_Allreduce(MPI_IN_PLACE, v, (int)x->numel, MPI_FLOAT,
                           a->attrs[0].i ? MPI_MAX : MPI_SUM, comm_of(g));
    if (rc == MPI_SUCCESS) em_cpu_from_f32(a->out[0], v);
    free(v);
    return rc == MPI_SUCCESS ? EM_OK : mpi_fail(a, rc, "MPI_Allreduce");
}

static em_status mpi_reduce_scatter(const em_kernel_args *a, em_group_info g) {
    const em_tensor *x = a->in[0];
    int d = norm_dim(a->attrs[1].i, x->ndim);
    int64_t outer, inner;
    outer_inner(x->shape, x->ndim, d, &outer, &inner);
    int64_t chunk = a->out[0]->numel;
    if (count_ok(a, x->numel)) return a->ctx->err.status;
    float *v = em_cpu_to_f32(x), *send = malloc((size_t)(x->numel ? x->numel : 1) * sizeof *send);
    float *recv = malloc((size_t)(chunk ? chunk : 1) * sizeof *recv);
    int rc = MPI_SUCCESS;
    if (v && send && recv) {
        /* [outer, size, rows, inner] -> [size, outer, rows, inner]: rank w's chunk contiguous */
        swap_blocks((char *)send, (const char *)v, outer, g.size,
                    (size_t)(x->shape[d] / g.size * inner) * sizeof(float));
        rc = MPI_Reduce_scatter_block(send, recv, (int)chunk, MPI_FLOAT,
                                      a->attrs[0].i ? MPI_MAX : MPI_SUM, comm_of(g));
        if (rc == MPI_SUCCESS) em_cpu_from_f32(a->out[0], recv);
    }
    bool oom = !v || !send || !recv;
    free(v), free(send), free(recv);
    if (oom) return em_op_fail(a->ctx, EM_ERR_OOM, "out of memory");
    return rc == MPI_SUCCESS ? EM_OK : mpi_fail(a, rc, "MPI_Reduce_scatter_block");
}

static em_status mpi_all_gather(const em_kernel_args *a, em_group_info g) {
    const em_tensor *x = a->in[0];
    size_t es = em_dtype_size(x->dtype);
    int d = norm_dim(a->attrs[0].i, x->ndim);
    int64_t outer, inner;
    outer_inner(x->shape, x->ndim, d, &outer, &inner);
    if (count_ok(a, x->numel * (int64_t)es)) return a->ctx->err.status;
    void *owned;
    const void *src = packed(x, &owned);
    char *recv = malloc((size_t)(a->out[0]->numel ? a->out[0]->numel : 1) * es);
    int rc = MPI_SUCCESS;
    if (src && recv) {
        rc = MPI_Allgather(src, (int)(x->numel * (int64_t)es), MPI_BYTE, recv,
                           (int)(x->numel * (int64_t)es), MPI_BYTE, comm_of(g));
        /* [size, outer, rows, inner] -> [outer, size, rows, inner] */
        if (rc == MPI_SUCCESS)
            swap_blocks(em_tensor_ptr(a->out[0]), recv, g.size, outer,
                        (size_t)(x->shape[d] * inner) * es);
    }
    bool oom = !src || !recv;
    free(owned), free(recv);
    if (oom) return em_op_fail(a->ctx, EM_ERR_OOM, "out of memory");
    return rc == MPI_SUCCESS ? EM_OK : mpi_fail(a, rc, "MPI_Allgather");
}

static em_status mpi_all_to_all(const em_kernel_args *a, em_group_info g) {
    const em_tensor *x = a->in[0];
    size_t es = em_dtype_size(x->dtype);
    int sd = norm_dim(a->attrs[0].i, x->ndim), cd = norm_dim(a->attrs[1].i, x->ndim);
    if (count_ok(a, x->numel * (int64_t)es)) return a->ctx->err.status;
    /* the chunk each rank sends to each other rank: x with split_dim divided by the size */
    int64_t cshape[EM_MAX_DIMS];
    memcpy(cshape, x->shape, (size_t)x->ndim * sizeof *cshape);
    cshape[sd] /= g.size;
    int64_t chunk = x->numel / g.size, so, si, co, ci;
    outer_inner(x->shape, x->ndim, sd, &so, &si);
    outer_inner(cshape, x->ndim, cd, &co, &ci);
    void *owned;
    const void *src = packed(x, &owned);
    size_t bytes = (size_t)(x->numel ? x->numel : 1) * es;
    char *send = malloc(bytes), *recv = malloc(bytes);
    int rc = MPI_SUCCESS;
    if (src && send && recv) {
        swap_blocks(send, src, so, g.size, (size_t)(cshape[sd] * si) * es);
        rc = MPI_Alltoall(send, (int)(chunk * (int64_t)es), MPI_BYTE, recv,
                          (int)(chunk * (int64_t)es), MPI_BYTE, comm_of(g));
        /* [size, outer, rows, inner] of the received chunks -> concatenated along concat_dim */
        if (rc == MPI_SUCCESS)
            swap_blocks(em_tensor_ptr(a->out[0]), recv, g.size, co,
                        (size_t)(cshape[cd] * ci) * es);
    }
    bool oom = !src || !send || !recv;
    free(owned), free(send), free(recv);
    if (oom) return em_op_fail(a->ctx, EM_ERR_OOM, "out of memory");
    return rc == MPI_SUCCESS ? EM_OK : mpi_fail(a, rc, "MPI_Alltoall");
}

/* Rank r sends x to r + offset and receives r - offset's (mod the size) in one MPI_Sendrecv. */
static em_status mpi_ring_shift(const em_kernel_args *a, em_group_info g) {
    const em_tensor *x = a->in[0];
    size_t es = em_dtype_size(x->dtype);
    int64_t bytes = x->numel * (int64_t)es;
    if (count_ok(a, bytes)) return a->ctx->err.status;
    int off = (int)(((a->attrs[0].i % g.size) + g.size) % g.size);
    int to = (g.rank + off) % g.size, from = (g.rank - off + g.size) % g.size;
    void *owned;
    const void *src = packed(x, &owned);
    if (!src) return em_op_fail(a->ctx, EM_ERR_OOM, "out of memory");
    int rc = MPI_Sendrecv(src, (int)bytes, MPI_BYTE, to, 0x52, em_tensor_ptr(a->out[0]),
                          (int)bytes, MPI_BYTE, from, 0x52, comm_of(g), MPI_STATUS_IGNORE);
    free(owned);
    return rc == MPI_SUCCESS ? EM_OK : mpi_fail(a, rc, "MPI_Sendrecv");
}

#endif

/* The front of every collective: a group of one is a copy; otherwise the group must be an MPI
 * one and this build must have MPI. */
static em_status run(const em_kernel_args *a, int gi,
                     em_status (*mpi)(const em_kernel_args *a, em_group_info g)) {
    em_group_info g;
    if (!em_group_lookup((int)a->attrs[gi].i, &g))
        return em_op_fail(a->ctx, EM_ERR_INVALID_ARG, "group %lld was freed",
                          (long long)a->attrs[gi].i);
    if (g.size == 1) {
        float *v = em_cpu_to_f32(a->in[0]); /* exact for f32 and bf16 */
        if (!v) return em_op_fail(a->ctx, EM_ERR_OOM, "out of memory");
        em_cpu_from_f32(a->out[0], v);
        free(v);
        return EM_OK;
    }
    if (g.transport == EM_GROUP_LOCAL)
        return em_op_fail(a->ctx, EM_ERR_UNSUPPORTED, "a device group (em_dist_local) runs its "
                          "collectives on its ranks' PJRT devices (em_dist_device), not the CPU");
    if (!mpi)
        return em_op_fail(a->ctx, EM_ERR_UNSUPPORTED,
                          "this build of Ember has no MPI: install Open MPI (libopenmpi-dev, "
                          "scripts/deps.sh), configure with -DEMBER_MPI=ON and launch with mpirun");
    if (g.transport != EM_GROUP_MPI)
        return em_op_fail(a->ctx, EM_ERR_UNSUPPORTED,
                          "the group was bootstrapped without MPI (EMBER_COORDINATOR): it has a "
                          "key-value store but no transport for tensors; launch with mpirun");
    return mpi(a, g);
}

#ifdef EMBER_HAVE_MPI
#define MPI_IMPL(f) (f)
#else
#define MPI_IMPL(f) NULL
#endif
static em_status k_all_reduce(const em_kernel_args *a) {
    return run(a, 1, MPI_IMPL(mpi_all_reduce));
}
static em_status k_all_gather(const em_kernel_args *a) {
    return run(a, 1, MPI_IMPL(mpi_all_gather));
}
static em_status k_reduce_scatter(const em_kernel_args *a) {
    return run(a, 2, MPI_IMPL(mpi_reduce_scatter));
}
static em_status k_all_to_all(const em_kernel_args *a) {
    return run(a, 2, MPI_IMPL(mpi_all_to_all));
}

static em_status k_ring_shift(const em_kernel_args *a) {
    return run(a, 1, MPI_IMPL(mpi_ring_shift));
}

void em_cpu_register_collective(em_kernel_fn *k) {
    k[EM_OP_RING_SHIFT] = k_ring_shift;
    k[EM_OP_ALL_REDUCE] = k_all_reduce;
    k[EM_OP_ALL_GATHER] = k_all_gather;
    k[EM_OP_REDUCE_SCATTER] = k_reduce_scatter;
    k[EM_OP_ALL_TO_ALL] = k_all_to_all;
}

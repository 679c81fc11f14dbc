/*
 * The arguments of the shared CPU attention (sdpa_flash.h): views, the caller's conversions,
 * micro-kernels and thread pool. Apart so that a package's per-ISA file can fill an sdpa_env
 * without compiling the attention code itself.
 */
#ifndef EMBER_CPU_SDPA_ARGS_H
#define EMBER_CPU_SDPA_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/cpu/nn.h"

/* A tensor argument: element 0 (its offset applied), the dtype (em_dtype's codes, which are
 * kernel_abi.h's), and shape and strides in elements (a mask may have fewer than 4 dims). */
typedef struct sdpa_view {
    const void *data;
    int dtype, ndim;
    int64_t shape[4], strides[4];
} sdpa_view;

typedef void (*sdpa_load_fn)(void *dst, const void *src, int64_t stride, int64_t n);
typedef void (*sdpa_store_fn)(void *dst, const void *src, int64_t n);
typedef void (*sdpa_task_fn)(void *user, int64_t begin, int64_t end, int thread);

/* What the caller provides: strided dtype -> f32 loads and f32 -> dtype stores indexed by
 * dtype (the element-wise engine's), the micro-kernels, its thread pool and thread count (the
 * split of the keys depends on it, so a package must be given the built-in's). */
typedef struct sdpa_env {
    const sdpa_load_fn *load;
    const sdpa_store_fn *store;
    const em_nn_isa *nn;
    void (*parallel_for)(int64_t n, int64_t grain, sdpa_task_fn fn, void *user);
    int64_t threads;
} sdpa_env;

/* One call: mask.data NULL when absent; out contiguous [B, Hq, Tq, Dv] of out_dtype; scale 0
 * means 1/sqrt(D); lse, when not NULL, contiguous [B, Hq, Tq] f32: each row's log-sum-exp of
 * its logits (-inf for a row without a visible key). */
typedef struct sdpa_args {
    sdpa_view q, k, v, mask;
    void *out;
    int out_dtype;
    double scale, softcap;
    bool causal;
    int64_t window;
    float *lse;
} sdpa_args;

/* Bytes per element of the dtypes a call may hold (em_dtype codes). */
static inline size_t sdpa_esize(int dt) {
    return dt == EM_F64 || dt == EM_I64 ? 8 : dt == EM_F32 || dt == EM_I32 ? 4
         : dt == EM_BF16 || dt == EM_F16 || dt == EM_I16 ? 2 : 1;
}

static inline const void *sdpa_at(const void *base, int dt, int64_t off) {
    return (const char *)base + off * (int64_t)sdpa_esize(dt);
}

#endif

/*
 * The native CPU backend: private interfaces shared by its files (thread pool, feature
 * detection, kernel registration, element-wise engine).
 */
#ifndef EMBER_CPU_H
#define EMBER_CPU_H

#include "core/tensor_impl.h"

/* ---- CPU features (detected once) ---- */
typedef struct em_cpu_features {
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512bf16, avx512vnni;
    bool neon;
    int physical_cores;
} em_cpu_features;
const em_cpu_features *em_cpu_features_get(void);
/* The kernel level in use: 0 generic C, 1 AVX2+FMA, 2 AVX-512 (+BF16 when present).
 * EMBER_CPU_LEVEL=generic|avx2|avx512 lowers it (for tests of the C twins). */
int em_cpu_level(void);
void em_cpu_features_str(char *buf, size_t n);

/* ---- thread pool ---- */
/* fn(user, begin, end) over [0, n) split into chunks of at least `grain`; runs inline when the
 * work is small, a single thread is configured, or the caller is itself a pool worker. */
typedef void (*em_par_fn)(void *user, int64_t begin, int64_t end, int tid);
void em_parallel_for(int64_t n, int64_t grain, em_par_fn fn, void *user);
/* Runs fn(user, tid, nthreads) once on each of the pool's threads (tid 0 is the caller). */
typedef void (*em_par_each_fn)(void *user, int tid, int nthreads);
void em_parallel_each(em_par_each_fn fn, void *user);

/* ---- kernel registration (one function per op family) ---- */
void em_cpu_register_ew(em_kernel_fn *k);
void em_cpu_register_create(em_kernel_fn *k);
void em_cpu_register_reduce(em_kernel_fn *k);
void em_cpu_register_linalg(em_kernel_fn *k);
void em_cpu_register_nn(em_kernel_fn *k);
void em_cpu_register_index(em_kernel_fn *k);
void em_cpu_register_conv(em_kernel_fn *k);
void em_cpu_register_moe(em_kernel_fn *k);

/* Linears computed together (compile mode's CPU plan, linalg.c): whether a LINEAR call can join
 * a group (no bias, a dot-engine product), and a group of up to 8 of them in one parallel pass
 * (same dtype; each output written exactly as linear_kernel writes it). */
bool em_cpu_linear_groupable(const em_kernel_args *ka);
em_status em_cpu_linear_group(const em_kernel_args *const *ka, int n);

/* Fused-mode evaluation of a lazy tensor (ew_engine.c). */
em_status em_cpu_eval_lazy(em_ctx *c, em_tensor *t);

/* ---- strided iteration helper for kernels ---- */
/* Offset (in elements) of linear index `i` of a tensor's logical order. */
static inline int64_t em_offset_of(const em_tensor *t, int64_t i) {
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t s = t->shape[d];
        off += (i % s) * t->strides[d];
        i /= s;
    }
    return off;
}

/* Reads element `i` (logical order) of any CPU tensor as double / int64. */
double em_cpu_get_f64(const em_tensor *t, int64_t i);
int64_t em_cpu_get_i64(const em_tensor *t, int64_t i);

/* A contiguous f32 copy of any tensor (caller frees), NULL on OOM. */
float *em_cpu_to_f32(const em_tensor *t);
/* Writes contiguous f32 values into a contiguous tensor of any floating dtype. */
void em_cpu_from_f32(em_tensor *t, const float *v);

#endif

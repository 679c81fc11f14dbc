/*
 * Private helpers of the CPU kernels of the nn family (normalisation, rope, attention,
 * embedding): strided loads into f32 scratch, and the attention micro-kernels, written once in
 * plain C (nn_kern.inc) and compiled per instruction set like the element-wise functions.
 */
#ifndef EMBER_CPU_NN_H
#define EMBER_CPU_NN_H

#include "backends/cpu/cpu.h"
#include "backends/cpu/ew.h"

/* ---- micro-kernels (nn_kern.inc), one table per kernel level ---- */
typedef struct em_nn_isa {
    /* st[j * ldst + r] = dot(q[r, :d], k[j, :d]) for r < rows, j < bk (q: rows x d, k: bk x d) */
    void (*qk_dot)(int rows, int d, const float *q, int bk, const float *k, float *st, int ldst);
    /* the same from qt = q transposed (d x ldq, rows <= ldq, ldq a multiple of 16); st's ld is
     * ldq and its padding columns receive garbage */
    void (*qk_gemm)(int ldq, int d, const float *qt, int bk, const float *k, float *st);
    /* acc[r, :dv] += sum_j pt[j * ldp + r] * v[j, :dv]  (v: bk x dv, acc: rows x dv) */
    void (*pv)(int rows, int dv, int bk, const float *pt, int ldp, const float *v, float *acc);
    /* Online softmax step over a tile st[bk x ld] (rows columns used): updates the running max
     * m[rows] and sum l[rows], replaces st by exp(st - m), returns the rescale factor of the old
     * accumulator in alpha[rows]. tmp: rows floats. */
    void (*softmax_step)(int rows, int ld, int bk, float *st, float *m, float *l, float *alpha,
                         float *tmp);
    /* x = cap * tanh(x / cap), n values */
    void (*softcap)(float *x, int64_t n, float cap);
    /* sum of squares and sum of n values, accumulated in double */
    void (*moments)(const float *x, int64_t n, double shift, double *sum, double *sumsq);
    /* y = x * s (n values) */
    void (*scale)(float *x, int64_t n, float s);
} em_nn_isa;

void em_nn_fill_generic(em_nn_isa *t);
void em_nn_fill_avx2(em_nn_isa *t);
void em_nn_fill_avx512(em_nn_isa *t);
const em_nn_isa *em_nn_isa_get(void);

/* ---- strided access ---- */

/* Element offset of linear index i (logical order) of an nd-dim strided array. */
static inline int64_t nn_offset(int nd, const int64_t *shape, const int64_t *strides, int64_t i) {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        off += (i % shape[d]) * strides[d];
        i /= shape[d];
    }
    return off;
}

/*
 * Converts `count` elements starting at linear index `begin` (logical order) of a strided array
 * (element 0 at `base`, which already includes the tensor's offset) into contiguous f32 values.
 * Runs along the last dim use the vectorised loads of the element-wise engine.
 */
void nn_load_f32(const em_ew_isa *isa, const void *base, em_dtype dt, int nd, const int64_t *shape,
                 const int64_t *strides, int64_t begin, int64_t count, float *dst);

/* Pointer to element `off` (in elements) of a typed base. */
static inline const void *nn_at(const void *base, em_dtype dt, int64_t off) {
    return (const char *)base + off * (int64_t)em_esize(dt);
}

/* Host pointer to the storage's element 0 (the tensor's offset is added by the caller). */
static inline const void *nn_base(const em_tensor *t) { return t->storage->data; }

/* Registration of each file's kernels. */
void em_cpu_register_nn_norm(em_kernel_fn *k);
void em_cpu_register_nn_rope(em_kernel_fn *k);
void em_cpu_register_nn_attention(em_kernel_fn *k);
void em_cpu_register_nn_embedding(em_kernel_fn *k);

#endif

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
/* Storage types the attention kernels read K and V in directly (others go through f32). */
enum { NN_SRC_F32 = 0, NN_SRC_BF16 = 1, NN_SRC_COUNT = 2 };

typedef struct em_nn_isa {
    /* st[r * ldst + j] = dot(q[r, :d], k[j, :d]) for r < rows, j < bk; q: rows x d f32, k rows
     * ldk elements apart */
    void (*qk_dot[NN_SRC_COUNT])(int rows, int d, const float *q, int bk, const void *k,
                                 int64_t ldk, float *st, int ldst);
    /* st[j * ldq + r] = the same, from qt = q transposed (d x ldq, rows <= ldq, ldq a multiple
     * of 16; the padding columns of qt are zero and give zeros); f32 keys */
    void (*qk_gemm)(int ldq, int d, const float *qt, int bk, const void *k, int64_t ldk,
                    float *st);
    /* acc[r, :dv] += sum_j p[j * pj + r * pr] * v[j, :dv]  (v rows ldv apart, acc: rows x dv) */
    void (*pv[NN_SRC_COUNT])(int rows, int dv, int bk, const float *p, int64_t pj, int64_t pr,
                             const void *v, int64_t ldv, float *acc);
    /* The element order the kernels of a source type expect in the q rows of qk_dot and keep
     * the accumulator rows of pv in (n values; NULL: the natural order). */
    void (*perm_in[NN_SRC_COUNT])(float *x, int n);
    void (*perm_out[NN_SRC_COUNT])(float *x, int n);
    /* Online softmax step over a tile of logits (j, r) at st[j * sj + r * sr]: updates the
     * running max m[rows] and sum l[rows], replaces the logits by exp(st - m), and returns the
     * rescale factor of the old accumulator in alpha[rows]. tmp: rows floats. */
    void (*softmax_step)(int rows, int bk, float *st, int64_t sj, int64_t sr, float *m, float *l,
                         float *alpha, float *tmp);
    /* bf16 q, k, v with the bf16 pair dot product (AVX-512 BF16; NULL where the kernel level
     * or the CPU lacks it). Layouts in nn_kern_dpbf16.inc: a word is two bf16 values, the first
     * in the low half. qk_dp: st[j * ldq + r] = scale * (q[r, :d] . k[j, :d]) from qp (q packed
     * in pairs of elements, (d + 1) / 2 x ldq words), k bf16 rows ldk apart, and each row's
     * maximum over the bk logits in rmax[r] (r < ldq). softmax_dp: the online softmax step of
     * softmax_step over those logits (rows r < rows contiguous; rmax: their row maxima, or NULL
     * to take them from st, as after a mask or softcap changed the logits), the weights
     * written rounded to bf16 in pairs of keys, pw: (bk + 1) / 2 x ldq words. pack_v:
     * n rows of v (ldv apart, dv values) into pairs of rows, (n + 1) / 2 x dvp words (dvp a
     * multiple of 8). pv_dp: acc[r, :dvp] = alpha[r] * acc[r, :dvp] + sum_j p(j, r) v[j, :]
     * for r < rows over bk keys. */
    void (*qk_dp)(int ldq, int d, const uint32_t *qp, int bk, const uint16_t *k, int64_t ldk,
                  float scale, float *st, float *rmax);
    void (*softmax_dp)(int rows, int bk, const float *st, int ldq, const float *rmax, float *m,
                       float *l, float *alpha, uint32_t *pw);
    void (*pack_v)(int n, int dv, int dvp, const uint16_t *v, int64_t ldv, uint32_t *vp);
    void (*pv_dp)(int rows, int dvp, int bk, const uint32_t *pw, int ldq, const uint32_t *vp,
                  const float *alpha, float *acc);
    /* x = cap * tanh(x / cap), n values */
    void (*softcap)(float *x, int64_t n, float cap);
    /* sum and sum of squares of (x - shift) over n values, accumulated in double */
    void (*moments)(const float *x, int64_t n, double shift, double *sum, double *sumsq);
    /* x *= s (n values) */
    void (*scale)(float *x, int64_t n, float s);
    /* x *= w (n values) */
    void (*mul)(float *x, const float *w, int64_t n);
    /* x = (x - mean) * (rstd * w) + b, b may be NULL (n values) */
    void (*norm_apply)(float *x, int64_t n, float mean, float rstd, const float *w,
                       const float *b);
    /* Group norm of a contiguous group in its own storage type (f32 or bf16), converted in
     * registers. gn_moments: sum and sum of squares of (x - shift) over n values, added to *sum
     * and *sumsq (f32 vector sums over blocks, combined in double). gn_apply: y = (x - mean) *
     * scale[c] + shift[c] over cg channels of s values each, x and y contiguous. */
    void (*gn_moments[NN_SRC_COUNT])(const void *x, int64_t n, float shift, double *sum,
                                     double *sumsq);
    void (*gn_apply[NN_SRC_COUNT])(const void *x, void *y, int64_t cg, int64_t s, float mean,
                                   const float *scale, const float *shift);
    /* t1 = x * c, t2 = rotate_half(x) * s over the first r values (r even) */
    void (*rope_products)(const float *x, const float *c, const float *s, int64_t r, float *t1,
                          float *t2);
    /* x = a + b (n values; x may be a or b) */
    void (*add)(float *x, const float *a, const float *b, int64_t n);
} em_nn_isa;

/* Per-ISA fills (t is an em_nn_isa), called only through em_cpu_isa_fill. */
void em_nn_fill_generic(void *t);
void em_nn_fill_avx2(void *t);
void em_nn_fill_avx512(void *t);
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
void em_cpu_register_nn_paged_attention(em_kernel_fn *k);
void em_cpu_register_nn_embedding(em_kernel_fn *k);

#endif

/* Element-wise engine: compute types, per-ISA function tables. */
#ifndef EMBER_EW_H
#define EMBER_EW_H

#include "core/tensor_impl.h"

/* Compute types: the type values of a dtype are held in while an expression runs. */
enum { EW_CT_F32 = 0, EW_CT_F64 = 1, EW_CT_I64 = 2, EW_CT_COUNT = 3 };

static inline int em_ew_ct(em_dtype t) {
    switch (t) {
    case EM_F32:
    case EM_BF16:
    case EM_F16: return EW_CT_F32;
    case EM_F64: return EW_CT_F64;
    default: return EW_CT_I64;
    }
}

typedef void (*em_ew_block_fn)(int64_t n, void *out, const void *a, const void *b, const void *c,
                               const em_attr *attrs);

typedef struct em_ew_isa {
    em_ew_block_fn fn[EM_OP_COUNT][EW_CT_COUNT];
    /* strided dtype data -> contiguous compute-type values */
    void (*load[EM_DTYPE_COUNT])(void *dst, const void *src, int64_t stride, int64_t n);
    /* contiguous compute-type values -> contiguous dtype data */
    void (*store[EM_DTYPE_COUNT])(void *dst, const void *src, int64_t n);
    /* in place: compute-type values rounded as storing to the dtype and loading back would */
    void (*round[EM_DTYPE_COUNT])(void *buf, int64_t n);
    void (*conv[EW_CT_COUNT][EW_CT_COUNT])(void *dst, const void *src, int64_t n);
    /* compute-type values -> 0/1 (int64) */
    void (*truth[EW_CT_COUNT])(void *dst, const void *src, int64_t n);
} em_ew_isa;

/* Per-ISA fills (ew_funcs.inc compiled once per instruction set; on aarch64 ew_neon.c replaces a
 * few entries of the generic table); t is an em_ew_isa. Called only through em_cpu_isa_fill. */
void em_ew_fill_generic(void *t);
void em_ew_fill_avx2(void *t);
void em_ew_fill_avx512(void *t);
void em_ew_fill_neon(void *t);
/* ew_trans_avx2.c: exp, tanh, sigmoid, silu and tanh-gelu (f32) with AVX2 + FMA intrinsics;
 * called at the end of em_ew_fill_avx2 */
void em_ew_fill_trans_avx2(void *t);

/* The table for the CPU's kernel level. */
const em_ew_isa *em_ew_isa_get(void);

#endif

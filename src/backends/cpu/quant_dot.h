/*
 * Quantized dot kernels: one row of activations against rows of a block-quantized weight
 * (EM_Q8_0 ... EM_Q6_K), reading the weight's bytes as they are.
 *
 * As in llama.cpp, the activations are quantized first (once per row of x, not per weight
 * row) to 8-bit blocks with an f32 scale, and each weight block meets its activation block in
 * integer multiply-adds; only one multiplication by the two scales per block is in floating
 * point. Activation formats (all little-endian, packed):
 *   Q8_0 x  {f32 d; int8 q[32]}                 for Q8_0, Q4_0, Q5_0 weights
 *   Q8_1 x  {f32 d; f32 s = d * sum(q); int8 q[32]}  for Q4_1, Q5_1 (s carries the weight's m)
 *   Q8_K x  {f32 d; int8 q[256]; int16 bsums[16] (sums of 16 q)}  for Q4_K, Q5_K, Q6_K
 * The result differs from the f32 product of the dequantized weight by the rounding of x to 8
 * bits (relative error about 2^-8 per block), as llama.cpp's does.
 *
 * Levels: portable C (quant_dot_generic.c) and AVX2 (quant_dot_avx2.c), chosen through
 * em_cpu_isa_get like every kernel family.
 */
#ifndef EMBER_CPU_QUANT_DOT_H
#define EMBER_CPU_QUANT_DOT_H

#include "backends/cpu/cpu.h"

typedef struct em_qdot_kernel {
    /* bytes of one row of k activations in this kernel's format */
    size_t (*x_row_bytes)(int64_t k);
    /* quantizes k f32 values (k a multiple of the weight's block size) into xq */
    void (*quantize_x)(const float *x, void *xq, int64_t k);
    /* y[i * ldy + r] = dot(weight row r, x row i) for r < rows, i < nx: weight rows start ldw
     * bytes apart, quantized x rows ldx bytes apart. Each weight row is read once for all nx
     * rows of x. */
    void (*dot)(int64_t k, const uint8_t *w, size_t ldw, int rows, const void *xq, size_t ldx,
                int nx, float *y, int64_t ldy);
    int64_t grain; /* weight rows per task of the thread pool */
} em_qdot_kernel;

typedef struct em_qdot_isa {
    em_qdot_kernel kern[EM_DTYPE_COUNT]; /* indexed by the weight's dtype; dot NULL: none */
} em_qdot_isa;

/* The kernel for weights of dtype wt on this CPU (NULL when there is none). */
const em_qdot_kernel *em_qdot_kernel_for(em_dtype wt);

/* Per-ISA fills (t is an em_qdot_isa), called only through em_cpu_isa_fill. */
void em_qdot_fill_generic(void *t);
void em_qdot_fill_avx2(void *t);

/* The activation blocks (shared by every level). */
typedef struct em_qx8_0 {
    float d;
    int8_t q[32];
} em_qx8_0;
typedef struct em_qx8_1 {
    float d, s;
    int8_t q[32];
} em_qx8_1;
typedef struct em_qx8_k {
    float d;
    int8_t q[256];
    int16_t bsums[16];
} em_qx8_k;

/* Portable quantizers of x, used by every level (they run once per row of x). */
void em_qx_quantize_8_0(const float *x, void *xq, int64_t k);
void em_qx_quantize_8_1(const float *x, void *xq, int64_t k);
void em_qx_quantize_8_k(const float *x, void *xq, int64_t k);
size_t em_qx_row_bytes_8_0(int64_t k);
size_t em_qx_row_bytes_8_1(int64_t k);
size_t em_qx_row_bytes_8_k(int64_t k);

#endif

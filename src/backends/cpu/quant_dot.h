/*
 * Quantized dot kernels: one row of activations against rows of a block-quantized weight
 * (EM_Q8_0 ... EM_Q6_K), reading the weight's bytes as they are.
 *
 * As in llama.cpp, the activations are quantized first (once per row of x, not per weight
 * row) to integer blocks with an f32 scale, and each weight block meets its activation block in
 * integer multiply-adds; one multiplication by the two scales per block is in floating point.
 * Unlike llama.cpp's 8-bit blocks, the activations here are 16-bit (vpmaddwd instead of
 * vpmaddubsw): the products are then within 2^-16 of those of the dequantized weight with f32
 * activations, where 8 bits moved SmolLM2-135M's logits by 0.8 % RMS and changed its answers.
 * Activation formats (all packed):
 *   X16   {f32 d; f32 s = d * sum(q); int16 q[32]}          for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1
 *   X16_K {f32 d; int32 sums[8] (sums of 32 q); int16 q[256]}  for Q4_K, Q5_K, Q6_K
 * The result differs from the f32 product of the dequantized weight by the rounding of x to 16
 * bits (relative error about 2^-16 per block).
 * Levels: portable C (quant_dot_generic.c), AVX2 (quant_dot_avx2.c) and AVX-512 VNNI
 * (quant_dot_avx512.c), chosen through
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
void em_qdot_fill_avx512(void *t); /* AVX-512 VNNI where present, AVX2 otherwise */

/* The activation blocks (shared by every level). */
typedef struct em_qx16 {
    float d, s;
    int16_t q[32];
} em_qx16;
typedef struct em_qx16_k {
    float d;
    int32_t sums[8];
    int16_t q[256];
} em_qx16_k;

/* Portable quantizers of x, used by every level (they run once per row of x). */
void em_qx_quantize_16(const float *x, void *xq, int64_t k);
void em_qx_quantize_16_k(const float *x, void *xq, int64_t k);
size_t em_qx_row_bytes_16(int64_t k);
size_t em_qx_row_bytes_16_k(int64_t k);

#endif

/*
 * Ragged-dot micro-kernels. A task computes out[r, n] for the R rows of one group and the weight
 * rows n in [0, nn) of that group's matrix: each weight row is read once per task, the group's
 * rows stay in L1. Accumulation is in f32; the caller rounds to the output dtype.
 */
#ifndef EMBER_RAGGED_H
#define EMBER_RAGGED_H

#include <stdint.h>

/* [N, K] layout ("nk", the Hub's expert layout): out[r*ldo + n] = sum_k x[r*ldx + k] * w[n*ldw + k].
 * x and w are bf16 (uint16_t) or f32; out is f32. */
void em_ragged_nk_bf16_avx512(const uint16_t *x, int64_t ldx, int64_t rows, const uint16_t *w,
                              int64_t ldw, int64_t nn, int64_t k, float *out, int64_t ldo);
void em_ragged_nk_f32_avx512(const float *x, int64_t ldx, int64_t rows, const float *w,
                             int64_t ldw, int64_t nn, int64_t k, float *out, int64_t ldo);
/* Portable twins (x and w as f32 rows already converted by the caller for other dtypes). */
void em_ragged_nk_bf16_generic(const uint16_t *x, int64_t ldx, int64_t rows, const uint16_t *w,
                               int64_t ldw, int64_t nn, int64_t k, float *out, int64_t ldo);
void em_ragged_nk_f32_generic(const float *x, int64_t ldx, int64_t rows, const float *w,
                              int64_t ldw, int64_t nn, int64_t k, float *out, int64_t ldo);

#endif

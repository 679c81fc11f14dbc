/*
 * AVX-512 ragged-dot micro-kernels. bf16 uses vdpbf16ps (two multiply-adds per lane per
 * instruction) on 4 weight rows x 4 token rows at a time: 16 accumulators, each weight vector
 * loaded once per k-step and reused by every row of the block. The packed layout's kernel
 * (decode's path for bf16 expert weights) is ragged_packed_avx512.inc, shared with the kernel
 * package kernels/ragged_avx512bf16/.
 */
#include <immintrin.h>
#include <string.h>

#include "backends/cpu/cvt_avx512.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/ragged.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* rows R (1..4) x weight rows C (1..4) block over the whole k. */
ALWAYS_INLINE void block_bf16(const uint16_t *x, int64_t ldx, const uint16_t *w, int64_t ldw,
                              int64_t k, float *out, int64_t ldo, const int R, const int C) {
    __m512 acc[4][4];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) acc[r][c] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= k; i += 32) {
        __m512bh wv[4], xv;
        for (int c = 0; c < C; c++) wv[c] = (__m512bh)_mm512_loadu_si512(w + c * ldw + i);
        for (int r = 0; r < R; r++) {
            xv = (__m512bh)_mm512_loadu_si512(x + r * ldx + i);
            for (int c = 0; c < C; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, wv[c]);
        }
    }
    if (i < k) {
        __mmask32 m = (__mmask32)((1ull << (k - i)) - 1);
        __m512bh wv[4], xv;
        for (int c = 0; c < C; c++) wv[c] = (__m512bh)_mm512_maskz_loadu_epi16(m, w + c * ldw + i);
        for (int r = 0; r < R; r++) {
            xv = (__m512bh)_mm512_maskz_loadu_epi16(m, x + r * ldx + i);
            for (int c = 0; c < C; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, wv[c]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) out[r * ldo + c] = _mm512_reduce_add_ps(acc[r][c]);
}

#define DISPATCH(FN, R, C, ...)                                                                    \
    switch (R * 8 + C) {                                                                           \
    case 9: FN(__VA_ARGS__, 1, 1); break;                                                          \
    case 10: FN(__VA_ARGS__, 1, 2); break;                                                         \
    case 11: FN(__VA_ARGS__, 1, 3); break;                                                         \
    case 12: FN(__VA_ARGS__, 1, 4); break;                                                         \
    case 17: FN(__VA_ARGS__, 2, 1); break;                                                         \
    case 18: FN(__VA_ARGS__, 2, 2); break;                                                         \
    case 19: FN(__VA_ARGS__, 2, 3); break;                                                         \
    case 20: FN(__VA_ARGS__, 2, 4); break;                                                         \
    case 25: FN(__VA_ARGS__, 3, 1); break;                                                         \
    case 26: FN(__VA_ARGS__, 3, 2); break;                                                         \
    case 27: FN(__VA_ARGS__, 3, 3); break;                                                         \
    case 28: FN(__VA_ARGS__, 3, 4); break;                                                         \
    case 33: FN(__VA_ARGS__, 4, 1); break;                                                         \
    case 34: FN(__VA_ARGS__, 4, 2); break;                                                         \
    case 35: FN(__VA_ARGS__, 4, 3); break;                                                         \
    default: FN(__VA_ARGS__, 4, 4); break;                                                         \
    }

static void nk_bf16(const uint16_t *x, int64_t ldx, int64_t rows, const uint16_t *w,
                    int64_t ldw, int64_t nn, int64_t k, float *out, int64_t ldo) {
    for (int64_t n = 0; n < nn; n += 4) {
        int C = nn - n < 4 ? (int)(nn - n) : 4;
        for (int64_t r = 0; r < rows; r += 4) {
            int R = rows - r < 4 ? (int)(rows - r) : 4;
            DISPATCH(block_bf16, R, C, x + r * ldx, ldx, w + n * ldw, ldw, k, out + r * ldo + n,
                     ldo)
        }
    }
}

ALWAYS_INLINE void block_f32(const float *x, int64_t ldx, const float *w, int64_t ldw, int64_t k,
                             float *out, int64_t ldo, const int R, const int C) {
    __m512 acc[4][4];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) acc[r][c] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
        __m512 wv[4], xv;
        for (int c = 0; c < C; c++) wv[c] = _mm512_loadu_ps(w + c * ldw + i);
        for (int r = 0; r < R; r++) {
            xv = _mm512_loadu_ps(x + r * ldx + i);
            for (int c = 0; c < C; c++) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
        }
    }
    if (i < k) {
        __mmask16 m = (__mmask16)((1u << (k - i)) - 1);
        __m512 wv[4], xv;
        for (int c = 0; c < C; c++) wv[c] = _mm512_maskz_loadu_ps(m, w + c * ldw + i);
        for (int r = 0; r < R; r++) {
            xv = _mm512_maskz_loadu_ps(m, x + r * ldx + i);
            for (int c = 0; c < C; c++) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) out[r * ldo + c] = _mm512_reduce_add_ps(acc[r][c]);
}

static void nk_f32(const float *x, int64_t ldx, int64_t rows, const float *w,
                   int64_t ldw, int64_t nn, int64_t k, float *out, int64_t ldo) {
    for (int64_t n = 0; n < nn; n += 4) {
        int C = nn - n < 4 ? (int)(nn - n) : 4;
        for (int64_t r = 0; r < rows; r += 4) {
            int R = rows - r < 4 ? (int)(rows - r) : 4;
            DISPATCH(block_f32, R, C, x + r * ldx, ldx, w + n * ldw, ldw, k, out + r * ldo + n,
                     ldo)
        }
    }
}

/* ---- packed layout ---- */

#include "backends/cpu/ragged_packed_avx512.inc"

void em_ragged_fill_avx512(void *table) {
    em_ragged_isa *t = table;
    /* without vdpbf16ps the bf16 kernels are AVX2's (products on the FMA units) */
    em_ragged_fill_avx2(table);
    t->nk_f32 = nk_f32;
    if (em_cpu_bf16_dot()) { /* both bf16 kernels are built on vdpbf16ps */
        t->nk_bf16 = nk_bf16;
        t->packed_bf16 = packed_bf16;
        t->pack_pays = true;
    }
}

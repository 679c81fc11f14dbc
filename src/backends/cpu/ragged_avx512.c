/*
 * AVX-512 ragged-dot micro-kernels. bf16 uses vdpbf16ps (two multiply-adds per lane per
 * instruction) on 4 weight rows x 4 token rows at a time: 16 accumulators, each weight vector
 * loaded once per k-step and reused by every row of the block. The packed layout's kernel
 * (decode's path for bf16 expert weights) is at the end.
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

/* Bytes ahead of the current step that each panel stream is fetched into L2 (0.25-8 KB: flat
 * within noise on one Zen 4 core; the hardware prefetcher does most of it on one stream). */
#define PACKED_PF_BYTES 1024
/* Rows per block. Blocks of 12-14 rows ran 61-92 % of the vdpbf16ps peak from L2 (k = 2048,
 * one Zen 4 core), blocks of 3-11 rows 94-100 %; so groups are split into equal blocks of at most
 * 10 (16 rows: 8 + 8, not 14 + 2), each reading the panel again from L2. */
#define PACKED_MR 10

/* R rows against one 32-column panel over all ks steps: 2R accumulators, two panel vectors
 * loaded per step and used by every row, each row's (k, k+1) pair broadcast. */
ALWAYS_INLINE void packed_tile(const int R, const uint16_t *x, int64_t ldx, const char *pb,
                               int64_t ks, uint16_t *out, int64_t ldo) {
    __m512 c0[PACKED_MR], c1[PACKED_MR];
#pragma GCC unroll 10
    for (int i = 0; i < R; i++) c0[i] = c1[i] = _mm512_setzero_ps();
    for (int64_t s = 0; s < ks; s++, pb += 128) {
        _mm_prefetch(pb + PACKED_PF_BYTES, _MM_HINT_T1);
        const __m512bh b0 = (__m512bh)_mm512_load_si512(pb);
        const __m512bh b1 = (__m512bh)_mm512_load_si512(pb + 64);
#pragma GCC unroll 10
        for (int i = 0; i < R; i++) {
            int32_t pair;
            memcpy(&pair, x + i * ldx + 2 * s, 4);
            const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
            c0[i] = _mm512_dpbf16_ps(c0[i], a, b0);
            c1[i] = _mm512_dpbf16_ps(c1[i], a, b1);
        }
    }
#pragma GCC unroll 10
    for (int i = 0; i < R; i++) {
        _mm256_storeu_si256((__m256i *)(out + i * ldo), em_cvt_bf16_avx512(c0[i]));
        _mm256_storeu_si256((__m256i *)(out + i * ldo + 16), em_cvt_bf16_avx512(c1[i]));
    }
}

static void packed_bf16(const uint16_t *x, int64_t ldx, int64_t rows, const uint16_t *wp,
                        int64_t np, int64_t ks, uint16_t *out, int64_t ldo) {
    int64_t nblocks = (rows + PACKED_MR - 1) / PACKED_MR;
    for (int64_t p = 0; p < np; p++) {
        const char *pb = (const char *)(wp + p * ks * 64);
        for (int64_t b = 0, r = 0; b < nblocks; b++) {
            int64_t R = (rows - r + (nblocks - b) - 1) / (nblocks - b); /* equal blocks */
            const uint16_t *xr = x + r * ldx;
            uint16_t *o = out + r * ldo + 32 * p;
            switch (R) {
            case 1: packed_tile(1, xr, ldx, pb, ks, o, ldo); break;
            case 2: packed_tile(2, xr, ldx, pb, ks, o, ldo); break;
            case 3: packed_tile(3, xr, ldx, pb, ks, o, ldo); break;
            case 4: packed_tile(4, xr, ldx, pb, ks, o, ldo); break;
            case 5: packed_tile(5, xr, ldx, pb, ks, o, ldo); break;
            case 6: packed_tile(6, xr, ldx, pb, ks, o, ldo); break;
            case 7: packed_tile(7, xr, ldx, pb, ks, o, ldo); break;
            case 8: packed_tile(8, xr, ldx, pb, ks, o, ldo); break;
            case 9: packed_tile(9, xr, ldx, pb, ks, o, ldo); break;
            default: packed_tile(10, xr, ldx, pb, ks, o, ldo); break;
            }
            r += R;
        }
    }
}

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

/*
 * AVX2 + FMA ragged-dot micro-kernels (portable twins: ragged_generic.c). Without a bf16 dot
 * instruction every product runs on the FMA units with bf16 widened by a shift (cvt_avx2.h).
 *
 * The [N, K] layout runs on the AVX2 dot engine (gemm_avx2.c) with f32 results. The packed
 * layout [N/32, K/2, 32, 2] has its kernel here: each 32-bit word of a panel step holds the
 * (k, k+1) pair of one column, split into an even and an odd f32 vector by a shift and a mask,
 * each multiplied by one broadcast x value; see em_ragged_pack_pays for which layout loads use.
 */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/cvt_avx2.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/ragged.h"
#include "core/bf16_inline.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

static em_ragged_isa generic; /* the portable twins, for when memory runs out */
static pthread_once_t generic_once = PTHREAD_ONCE_INIT;
static void generic_init(void) { em_ragged_fill_generic(&generic); }

static void nk_bf16(const uint16_t *x, int64_t ldx, int64_t rows, const uint16_t *w,
                    int64_t ldw, int64_t nn, int64_t k, float *out, int64_t ldo) {
    if (!em_gemm_dot_f32out_avx2(EM_BF16, rows, nn, k, x, ldx, w, ldw, out, ldo)) {
        pthread_once(&generic_once, generic_init);
        generic.nk_bf16(x, ldx, rows, w, ldw, nn, k, out, ldo);
    }
}

static void nk_f32(const float *x, int64_t ldx, int64_t rows, const float *w, int64_t ldw,
                   int64_t nn, int64_t k, float *out, int64_t ldo) {
    if (!em_gemm_dot_f32out_avx2(EM_F32, rows, nn, k, x, ldx, w, ldw, out, ldo)) {
        pthread_once(&generic_once, generic_init);
        generic.nk_f32(x, ldx, rows, w, ldw, nn, k, out, ldo);
    }
}

/* ---- packed layout ---- */

/* Bytes ahead of the current step that each panel stream is fetched into L2. */
#define PACKED_PF_BYTES 1024
/* Rows per block: two rows keep 8 accumulators (32 columns each) and four broadcasts. */
#define PACKED_MR 2

/* R rows against one 32-column panel over all ks steps. x rows are f32 (xs, row stride kx), or
 * bf16 (xb, row stride ldx) when there was no memory to widen them. */
ALWAYS_INLINE void packed_tile(const int R, const float *xs, int64_t kx, const uint16_t *xb,
                               int64_t ldx, const char *pb, int64_t ks, uint16_t *out,
                               int64_t ldo) {
    __m256 acc[PACKED_MR][4];
    for (int i = 0; i < R; i++)
        for (int c = 0; c < 4; c++) acc[i][c] = _mm256_setzero_ps();
    for (int64_t s = 0; s < ks; s++, pb += 128) {
        _mm_prefetch(pb + PACKED_PF_BYTES, _MM_HINT_T1);
        _mm_prefetch(pb + PACKED_PF_BYTES + 64, _MM_HINT_T1);
        __m256 x0[PACKED_MR], x1[PACKED_MR];
        for (int i = 0; i < R; i++) {
            if (xs) {
                x0[i] = _mm256_broadcast_ss(xs + i * kx + 2 * s);
                x1[i] = _mm256_broadcast_ss(xs + i * kx + 2 * s + 1);
            } else {
                x0[i] = _mm256_set1_ps(em_bf16_to_f32_inline(xb[i * ldx + 2 * s]));
                x1[i] = _mm256_set1_ps(em_bf16_to_f32_inline(xb[i * ldx + 2 * s + 1]));
            }
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m256i wv = _mm256_load_si256((const __m256i *)(pb + 32 * c));
            const __m256 we = em_bf16_even_avx2(wv), wo = em_bf16_odd_avx2(wv);
            for (int i = 0; i < R; i++) {
                acc[i][c] = _mm256_fmadd_ps(x0[i], we, acc[i][c]);
                acc[i][c] = _mm256_fmadd_ps(x1[i], wo, acc[i][c]);
            }
        }
    }
    for (int i = 0; i < R; i++)
        for (int c = 0; c < 4; c++)
            _mm_storeu_si128((__m128i *)(out + i * ldo + 8 * c), em_cvt_bf16_avx2(acc[i][c]));
}

static void packed_bf16(const uint16_t *x, int64_t ldx, int64_t rows, const uint16_t *wp,
                        int64_t np, int64_t ks, uint16_t *out, int64_t ldo) {
    /* the rows widened once (K = 2 ks values each), read for every panel */
    const int64_t kx = 2 * ks;
    float stack[4096];
    float *xs = rows * kx <= 4096 ? stack : malloc((size_t)(rows * kx) * sizeof *xs);
    if (xs)
        for (int64_t r = 0; r < rows; r++)
            em_convert(x + r * ldx, EM_BF16, xs + r * kx, EM_F32, kx);
    for (int64_t p = 0; p < np; p++) {
        const char *pb = (const char *)(wp + p * ks * 64);
        for (int64_t r = 0; r < rows; r += PACKED_MR) {
            uint16_t *o = out + r * ldo + 32 * p;
            const float *xr = xs ? xs + r * kx : NULL;
            if (rows - r >= 2) packed_tile(2, xr, kx, x + r * ldx, ldx, pb, ks, o, ldo);
            else packed_tile(1, xr, kx, x + r * ldx, ldx, pb, ks, o, ldo);
        }
    }
    if (xs != stack) free(xs);
}

void em_ragged_fill_avx2(void *table) {
    em_ragged_isa *t = table;
    t->nk_bf16 = nk_bf16;
    t->nk_f32 = nk_f32;
    t->packed_bf16 = packed_bf16;
    /* one Zen 3 core, 32 experts of [1536, 2048] from DRAM: the packed kernel 1.2-1.46x the
     * [N, K] path at 1-2 rows per expert (decode up to batch ~16), 0.9-0.98x at 3-4, 0.73-0.85x
     * at 6-12 (docs/performance-avx2.md) */
    t->pack_pays = true;
}

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

#define RAGGED_WIDEN_BF16(src, dst, n) em_convert((src), EM_BF16, (dst), EM_F32, (n))
#include "backends/cpu/ragged_packed_avx2.inc"

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

/*
 * Helpers the x86 quantized dot kernels (quant_dot_avx2.c, quant_dot_avx512.c) share. Only
 * SSE2 instructions, the x86-64 baseline, so that including this never widens a file's ISA.
 */
#ifndef EMBER_QUANT_DOT_X86_H
#define EMBER_QUANT_DOT_X86_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* Each line of the weights is fetched into L2 this many bytes ahead (once per line). Without
 * it one core read Q4_1 at 36 % of its read bandwidth (stalled on the loads: the hardware
 * prefetcher did not keep up); 1024-4096 bytes ahead in L1 or L2 measured 80-88 %, L2 at
 * 2048 the best of them (docs/notes/2026-12-02-vnni-quant.md). */
#define QPF 2048

/* Prefetches, QPF bytes ahead, the cache lines that start inside [p, p + n): each line of a
 * row is requested once however the blocks straddle lines. */
static inline void qdot_prefetch_ahead(const uint8_t *p, size_t n) {
    const uintptr_t a = (uintptr_t)p + QPF;
    for (uintptr_t l = (a + 63) & ~(uintptr_t)63; l < a + n; l += 64)
        _mm_prefetch((const char *)l, _MM_HINT_T1);
}

/* Q4_K's twelve scale bytes as eight 6-bit scales (bytes 0-7) and eight mins (bytes 8-15). */
static inline __m128i q4k_scales_mins(const uint8_t *s) {
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, top2 = 0x03030303;
    uint32_t sc_lo = u0 & low6, sc_hi = (u2 & low4) | (((u0 >> 6) & top2) << 4);
    uint32_t mn_lo = u1 & low6, mn_hi = ((u2 >> 4) & low4) | (((u1 >> 6) & top2) << 4);
    return _mm_set_epi32((int)mn_hi, (int)mn_lo, (int)sc_hi, (int)sc_lo);
}

#endif

/*
 * f32 -> bf16 / f16 vector conversions for the AVX-512 kernels (included only by *_avx512.c
 * files, which are compiled with the instruction set).
 */
#ifndef EMBER_CVT_AVX512_H
#define EMBER_CVT_AVX512_H

#include <immintrin.h>

/* f32 -> bf16, round to nearest even, NaN kept quiet: the same as em_f32_to_bf16. */
static inline __attribute__((always_inline)) __m256i em_cvt_bf16_avx512(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_and_si512(hi, _mm512_set1_epi32(1)),
                                                     _mm512_set1_epi32(0x7fff)));
    r = _mm512_srli_epi32(r, 16);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}

#endif

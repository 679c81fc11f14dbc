/*
 * bf16 <-> f32 vector conversions for the AVX2 kernels (included only by *_avx2.c files, which
 * are compiled with the instruction set).
 *
 * bf16 -> f32 is a shift: a bf16 is the top half of an f32. Eight 32-bit words hold sixteen
 * bf16 values as (even, odd) pairs: the even element is the word shifted left by 16, the odd one
 * the word with its low half cleared. Kernels that only sum products (dot products) use the two
 * halves as they are, with the other operand split the same way, so no lane shuffle is needed.
 */
#ifndef EMBER_CVT_AVX2_H
#define EMBER_CVT_AVX2_H

#include <immintrin.h>
#include <stdint.h>

/* Elements 0, 2, ..., 14 of sixteen bf16 held in eight 32-bit words w, as f32. */
static inline __attribute__((always_inline)) __m256 em_bf16_even_avx2(__m256i w) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* Elements 1, 3, ..., 15. */
static inline __attribute__((always_inline)) __m256 em_bf16_odd_avx2(__m256i w) {
    return _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(-65536) /* 0xffff0000 */));
}

/* Eight bf16 at p as eight f32, in order. */
static inline __attribute__((always_inline)) __m256 em_load_bf16x8_avx2(const uint16_t *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* f32 -> bf16, round to nearest even, NaN kept quiet: the same as em_f32_to_bf16. */
static inline __attribute__((always_inline)) __m128i em_cvt_bf16_avx2(__m256 v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(1)),
                                                     _mm256_set1_epi32(0x7fff)));
    r = _mm256_srli_epi32(r, 16);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
    /* 32-bit lanes to 16-bit: values fit, so unsigned saturation is exact */
    __m256i p = _mm256_packus_epi32(r, r);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08));
}

/* Horizontal sum of eight f32. */
static inline __attribute__((always_inline)) float em_hsum_avx2(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

#endif

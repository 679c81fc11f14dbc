/*
 * The quantized dot kernels with AVX-512 VNNI (see quant_dot.h): Q8_0 against 32-element blocks
 * of 16-bit activations, Q4_K and Q6_K against 256-element ones. On an AVX-512 CPU without VNNI,
 * and for the other types, the AVX2 kernels run: VNNI versions of Q4_0 and Q4_1 were 10-17 %
 * slower than AVX2's at decode and at most 6 % faster at 16 rows (the nibbles' unpacking and the
 * per-block scale work dominate there, not the multiply-adds; docs/notes/2026-12-02-vnni-quant.md).
 *
 * A 32-element block of weights is one zmm of int16 and vpdpwssd multiplies it by the block of
 * activations, adding pairs into 16 int32 lanes: one instruction per block and row of x, where
 * AVX2 needs two vpmaddwd and an add. The weights are widened once per block for all rows of x
 * in the pass (eight for 32-element blocks, as many as the 32 registers hold), which is what
 * prefill spends its time on; decode (one row) is bound by reading the weights.
 *
 * K types: the sub-block scales (6-bit for Q4_K, 8-bit signed for Q6_K) multiply the widened
 * weights in int16 before vpdpwssd, so a whole block (Q4_K) or half block (Q6_K) accumulates in
 * one int32 vector; the bounds are given where it happens.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/quant_dot.h"
#include "backends/cpu/quant_dot_x86.h"

static inline float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

static inline __m512i load64(const void *p) { return _mm512_loadu_si512(p); }

/*
 * The driver, as in quant_dot_avx2.c: one block step for NX rows of x (NX = 1..XMAX, constants
 * so that the accumulators stay in registers) and a walk over the weight rows that takes the
 * rows of x XMAX at a time.
 *   STEP(wb, xs, b, par, acc, NX): weight block wb against x block b of the rows xs[] into
 *   acc[t][par] (f32 lanes);
 *   COMBINE(acc[t][0], acc[t][1]) gives the row's lanes.
 */
/* NX for a pass of n rows where passes take at most XMAX (the cases above XMAX never run) */
#define NXC(n, XMAX) ((n) < (XMAX) ? (n) : (XMAX))

#define DEFINE_DOT(NAME, WBYTES, XTYPE, BLOCK, XMAX, STEP, COMBINE)                                \
    static inline __attribute__((always_inline)) void NAME##_row(                                  \
        int64_t nb, const uint8_t *wr, const XTYPE *const *xs, float *out, int64_t ldy, int NX) {  \
        __m512 acc[XMAX][2];                                                                       \
        for (int t = 0; t < NX; t++)                                                               \
            acc[t][0] = acc[t][1] = _mm512_setzero_ps();                                           \
        int64_t b = 0;                                                                             \
        for (; b + 2 <= nb; b += 2) {                                                              \
            qdot_prefetch_ahead(wr + (size_t)b * (WBYTES), 2 * (WBYTES));                          \
            STEP(wr + (size_t)b * (WBYTES), xs, b, 0, acc, NX);                                    \
            STEP(wr + (size_t)(b + 1) * (WBYTES), xs, b + 1, 1, acc, NX);                          \
        }                                                                                          \
        if (b < nb)                                                                                \
            STEP(wr + (size_t)b * (WBYTES), xs, b, 0, acc, NX);                                    \
        for (int t = 0; t < NX; t++)                                                               \
            out[t * ldy] = _mm512_reduce_add_ps(COMBINE(acc[t][0], acc[t][1]));                    \
    }                                                                                              \
    static void NAME(int64_t k, const uint8_t *w, size_t ldw, int rows, const void *xq,            \
                     size_t ldx, int nx, float *y, int64_t ldy) {                                  \
        int64_t nb = k / (BLOCK);                                                                  \
        for (int r = 0; r < rows; r++) {                                                           \
            const uint8_t *wr = w + (size_t)r * ldw;                                               \
            for (int x0 = 0; x0 < nx; x0 += (XMAX)) {                                              \
                const XTYPE *xs[XMAX];                                                             \
                int nxx = nx - x0 < (XMAX) ? nx - x0 : (XMAX);                                     \
                for (int t = 0; t < nxx; t++)                                                      \
                    xs[t] = (const XTYPE *)((const uint8_t *)xq + (size_t)(x0 + t) * ldx);         \
                float *out = y + (int64_t)x0 * ldy + r;                                            \
                switch (nxx) {                                                                     \
                case 8:                                                                            \
                    NAME##_row(nb, wr, xs, out, ldy, NXC(8, XMAX));                                \
                    break;                                                                         \
                case 7:                                                                            \
                    NAME##_row(nb, wr, xs, out, ldy, NXC(7, XMAX));                                \
                    break;                                                                         \
                case 6:                                                                            \
                    NAME##_row(nb, wr, xs, out, ldy, NXC(6, XMAX));                                \
                    break;                                                                         \
                case 5:                                                                            \
                    NAME##_row(nb, wr, xs, out, ldy, NXC(5, XMAX));                                \
                    break;                                                                         \
                case 4:                                                                            \
                    NAME##_row(nb, wr, xs, out, ldy, 4);                                           \
                    break;                                                                         \
                case 3:                                                                            \
                    NAME##_row(nb, wr, xs, out, ldy, 3);                                           \
                    break;                                                                         \
                case 2:                                                                            \
                    NAME##_row(nb, wr, xs, out, ldy, 2);                                           \
                    break;                                                                         \
                default:                                                                           \
                    NAME##_row(nb, wr, xs, out, ldy, 1);                                           \
                    break;                                                                         \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

/* ---- 32-element blocks ---- */

/* Q8_0: the int8 weights widened to int16; per row, vpdpwssd into zero (a lane sums two
 * products of at most 128 x 32767), to f32, times d_w d_x. */
#define STEP_Q8_0(wb, xs, b, par, acc, NX)                                                         \
    do {                                                                                           \
        const __m512i v = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)((wb) + 2)));   \
        const float dw = h2f(wb);                                                                  \
        for (int t = 0; t < (NX); t++) {                                                           \
            const em_qx16 *xb = xs[t] + (b);                                                       \
            __m512i s = _mm512_dpwssd_epi32(_mm512_setzero_si512(), v, load64(xb->q));             \
            acc[t][par] =                                                                          \
                _mm512_fmadd_ps(_mm512_set1_ps(dw * xb->d), _mm512_cvtepi32_ps(s), acc[t][par]);   \
        }                                                                                          \
    } while (0)

DEFINE_DOT(dot_q8_0, 34, em_qx16, 32, 8, STEP_Q8_0, _mm512_add_ps)

/* ---- 256-element blocks ---- */

/*
 * Q4_K: d sum_j sc_j (q . x)_j - dmin sum_j m_j (sum x)_j over the 8 sub-blocks of 32. The
 * nibbles times their sub-block's scale (at most 15 x 63 = 945) are int16, and all eight
 * sub-blocks accumulate in one int32 vector: per lane 8 x 2 products of 945 x 32767, below
 * 2^31. The mins term goes to acc[t][1] (eight lanes, the upper ones zero), subtracted at the end.
 */
#define STEP_Q4_K(wb, xs, b, par, acc, NX)                                                         \
    do {                                                                                           \
        (void)(par);                                                                               \
        const __m128i sm = q4k_scales_mins((wb) + 4);                                              \
        const __m512i scw = _mm512_cvtepu8_epi16(_mm256_castsi128_si256(sm));                      \
        const uint8_t *qs = (wb) + 16;                                                             \
        __m512i sumi[XK];                                                                          \
        for (int t = 0; t < (NX); t++)                                                             \
            sumi[t] = _mm512_setzero_si512();                                                      \
        for (int g = 0; g < 4; g++) {                                                              \
            __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(qs + 32 * g)));  \
            __m512i lo = _mm512_and_si512(v, _mm512_set1_epi16(0x0F));                             \
            __m512i hi = _mm512_srli_epi16(v, 4);                                                  \
            lo = _mm512_mullo_epi16(lo, _mm512_permutexvar_epi16(_mm512_set1_epi16(2 * g), scw));  \
            hi = _mm512_mullo_epi16(hi,                                                            \
                                    _mm512_permutexvar_epi16(_mm512_set1_epi16(2 * g + 1), scw));  \
            for (int t = 0; t < (NX); t++) {                                                       \
                const int16_t *x = xs[t][b].q + 64 * g;                                            \
                sumi[t] = _mm512_dpwssd_epi32(sumi[t], lo, load64(x));                             \
                sumi[t] = _mm512_dpwssd_epi32(sumi[t], hi, load64(x + 32));                        \
            }                                                                                      \
        }                                                                                          \
        const __m256i mn = _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(sm, sm));                       \
        const float dw = h2f(wb), dmin = h2f((wb) + 2);                                            \
        for (int t = 0; t < (NX); t++) {                                                           \
            const em_qx16_k *xb = xs[t] + (b);                                                     \
            __m256i msum = _mm256_mullo_epi32(mn, _mm256_loadu_si256((const __m256i *)xb->sums));  \
            acc[t][0] = _mm512_fmadd_ps(_mm512_set1_ps(dw * xb->d), _mm512_cvtepi32_ps(sumi[t]),   \
                                        acc[t][0]);                                                \
            acc[t][1] =                                                                            \
                _mm512_fmadd_ps(_mm512_set1_ps(dmin * xb->d),                                      \
                                _mm512_zextps256_ps512(_mm256_cvtepi32_ps(msum)), acc[t][1]);      \
        }                                                                                          \
    } while (0)

/*
 * Q6_K: d sum_g sc_g ((q - 32) . x)_g over 16 groups of 16. A zmm holds 32 elements, two groups:
 * their scales (lanes 0-15 and 16-31) multiply the weights in int16 (at most 32 x 128). Each
 * half block (four zmm, 8 x 32767 x 4096 per lane at most, below 2^30) is converted on its own.
 */
#define STEP_Q6_K(wb, xs, b, par, acc, NX)                                                         \
    do {                                                                                           \
        const uint8_t *ql = (wb), *qh = (wb) + 128;                                                \
        const __m512i scw = _mm512_cvtepi8_epi16(                                                  \
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)((wb) + 192))));               \
        const __m512i halves =                                                                     \
            _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(1), 1);                   \
        const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);                       \
        const __m256i c32 = _mm256_set1_epi8(32);                                                  \
        const float d = h2f((wb) + 208);                                                           \
        for (int h = 0; h < 2; h++) {                                                              \
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h));                       \
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h + 32));                  \
            __m256i hb = _mm256_loadu_si256((const __m256i *)(qh + 32 * h));                       \
            __m256i q[4];                                                                          \
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),                                       \
                                   _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4));                \
            q[1] = _mm256_or_si256(                                                                \
                _mm256_and_si256(l1, m4),                                                          \
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4));             \
            q[2] = _mm256_or_si256(                                                                \
                _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),                                    \
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4));             \
            q[3] = _mm256_or_si256(                                                                \
                _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),                                    \
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4));             \
            __m512i sumi[XK];                                                                      \
            for (int t = 0; t < (NX); t++)                                                         \
                sumi[t] = _mm512_setzero_si512();                                                  \
            for (int j = 0; j < 4; j++) {                                                          \
                const int g = 8 * h + 2 * j;                                                       \
                __m512i sc = _mm512_permutexvar_epi16(                                             \
                    _mm512_add_epi16(halves, _mm512_set1_epi16((short)g)), scw);                   \
                __m512i v =                                                                        \
                    _mm512_mullo_epi16(_mm512_cvtepi8_epi16(_mm256_sub_epi8(q[j], c32)), sc);      \
                for (int t = 0; t < (NX); t++)                                                     \
                    sumi[t] =                                                                      \
                        _mm512_dpwssd_epi32(sumi[t], v, load64(xs[t][b].q + 128 * h + 32 * j));    \
            }                                                                                      \
            for (int t = 0; t < (NX); t++)                                                         \
                acc[t][par] = _mm512_fmadd_ps(_mm512_set1_ps(d * xs[t][b].d),                      \
                                              _mm512_cvtepi32_ps(sumi[t]), acc[t][par]);           \
        }                                                                                          \
    } while (0)

/* rows of x per pass for the 256-element types: one int32 vector per row next to two f32 */
#define XK 4
DEFINE_DOT(dot_q4_k, 144, em_qx16_k, 256, XK, STEP_Q4_K, _mm512_sub_ps)
DEFINE_DOT(dot_q6_k, 210, em_qx16_k, 256, XK, STEP_Q6_K, _mm512_add_ps)

void em_qdot_fill_avx512(void *t) {
    /* every AVX-512 CPU has AVX2: its kernels serve the types and CPUs these do not */
    em_qdot_fill_avx2(t);
    if (!em_cpu_features_get()->avx512vnni)
        return;
    em_qdot_isa *q = t;
    q->kern[EM_Q8_0] = (em_qdot_kernel){em_qx_row_bytes_16, em_qx_quantize_16, dot_q8_0, 16};
    q->kern[EM_Q4_K] = (em_qdot_kernel){em_qx_row_bytes_16_k, em_qx_quantize_16_k, dot_q4_k, 8};
    q->kern[EM_Q6_K] = (em_qdot_kernel){em_qx_row_bytes_16_k, em_qx_quantize_16_k, dot_q6_k, 8};
}

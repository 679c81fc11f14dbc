/*
 * The quantized dot kernels with AVX2 (see quant_dot.h) for the weight types of common
 * downloads: Q8_0, Q4_0, Q4_1 against 32-element blocks of 16-bit activations, Q4_K and Q6_K
 * against 256-element ones. Q5_0, Q5_1 and Q5_K keep the portable kernels.
 *
 * Weights are widened to int16 (vpmovzxbw / vpmovsxbw) and vpmaddwd multiplies them by the
 * activations, adding pairs into int32; the K types' sub-block scales multiply those sums
 * (vpmulld), and one f32 multiply-add per block applies the two f16/f32 scales.
 *
 * Each weight row is read once for up to four rows of x (the register tile); two accumulators
 * per row of x (even and odd blocks) hide the latency of the multiply-add chain.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/quant_dot.h"
#include "backends/cpu/quant_dot_x86.h"

#define XT 4 /* rows of x per pass over a weight row */

static inline float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

static inline float hsum(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

static inline __m256i load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* w (16 int16) . x (16 int16) + w2 . x2, as 8 int32 */
static inline __m256i madd2(__m256i w, __m256i w2, const int16_t *x) {
    return _mm256_add_epi32(_mm256_madd_epi16(w, load32(x)), _mm256_madd_epi16(w2, load32(x + 16)));
}

/* 16 bytes of packed nibbles -> elements 0-15 (low nibbles) and 16-31 (high) as int16: each
 * byte widened once, then split in its 16-bit lane */
static inline void nibbles16(const uint8_t *q, __m256i *lo, __m256i *hi) {
    __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)q));
    *lo = _mm256_and_si256(v, _mm256_set1_epi16(0x0F));
    *hi = _mm256_srli_epi16(v, 4);
}

/* ---- the driver ---- */

/*
 * One kernel per weight type, written as a block step for NX rows of x and instantiated for NX
 * = 1..4 (constants, so that the compiler keeps the accumulators in registers): the driver
 * walks the weight rows and, per row, the rows of x in groups of four.
 *   STEP(wb, xs, b, par, acc, extra, NX): adds weight block wb against x block b of the NX
 *   rows xs[] into acc[t][par] (f32 lanes; par alternates) and extra[t] (a scalar term);
 *   COMBINE(acc[t][0], acc[t][1]) gives the row's lanes.
 */
#define DEFINE_DOT(NAME, WBYTES, XTYPE, BLOCK, STEP, COMBINE)                                      \
    static inline __attribute__((always_inline)) void NAME##_row(                                 \
        int64_t nb, const uint8_t *wr, const XTYPE *const *xs, float *out, int64_t ldy, int NX) {  \
        __m256 acc[XT][2];                                                                         \
        __m128 mins[XT]; /* lane 1: a per-block scalar term (Q4_1's m_w s_x) */                    \
        float extra[XT];                                                                           \
        for (int t = 0; t < NX; t++) {                                                             \
            acc[t][0] = acc[t][1] = _mm256_setzero_ps();                                           \
            mins[t] = _mm_setzero_ps();                                                            \
            extra[t] = 0;                                                                          \
        }                                                                                          \
        int64_t b = 0;                                                                             \
        for (; b + 2 <= nb; b += 2) {                                                              \
            qdot_prefetch_ahead(wr + (size_t)b * (WBYTES), 2 * (WBYTES));                          \
            STEP(wr + (size_t)b * (WBYTES), xs, b, 0, acc, extra, NX);                             \
            STEP(wr + (size_t)(b + 1) * (WBYTES), xs, b + 1, 1, acc, extra, NX);                   \
        }                                                                                          \
        if (b < nb) STEP(wr + (size_t)b * (WBYTES), xs, b, 0, acc, extra, NX);                     \
        for (int t = 0; t < NX; t++)                                                               \
            out[t * ldy] = hsum(COMBINE(acc[t][0], acc[t][1])) + extra[t] +                        \
                           _mm_cvtss_f32(_mm_shuffle_ps(mins[t], mins[t], 1));                     \
    }                                                                                              \
    static void NAME(int64_t k, const uint8_t *w, size_t ldw, int rows, const void *xq,           \
                     size_t ldx, int nx, float *y, int64_t ldy) {                                  \
        int64_t nb = k / (BLOCK);                                                                  \
        for (int r = 0; r < rows; r++) {                                                           \
            const uint8_t *wr = w + (size_t)r * ldw;                                               \
            for (int x0 = 0; x0 < nx; x0 += XT) {                                                  \
                const XTYPE *xs[XT];                                                               \
                int nxx = nx - x0 < XT ? nx - x0 : XT;                                             \
                for (int t = 0; t < nxx; t++)                                                      \
                    xs[t] = (const XTYPE *)((const uint8_t *)xq + (size_t)(x0 + t) * ldx);         \
                float *out = y + (int64_t)x0 * ldy + r;                                            \
                switch (nxx) {                                                                     \
                case 4: NAME##_row(nb, wr, xs, out, ldy, 4); break;                                \
                case 3: NAME##_row(nb, wr, xs, out, ldy, 3); break;                                \
                case 2: NAME##_row(nb, wr, xs, out, ldy, 2); break;                                \
                default: NAME##_row(nb, wr, xs, out, ldy, 1); break;                               \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

/* ---- 32-element blocks ---- */

/* int16 weights (w0: elements 0-15, w1: 16-31) with one f16 scale at wb. */
#define STEP_SCALED(w0, w1, wb, xs, b, par, acc, NX)                                               \
    do {                                                                                           \
        float dw = h2f(wb);                                                                        \
        (void)mins;                                                                                \
        for (int t = 0; t < (NX); t++) {                                                           \
            const em_qx16 *xb = xs[t] + (b);                                                       \
            __m256 f = _mm256_cvtepi32_ps(madd2(w0, w1, xb->q));                                   \
            acc[t][par] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xb->d), f, acc[t][par]);             \
        }                                                                                          \
    } while (0)

#define STEP_Q8_0(wb, xs, b, par, acc, extra, NX)                                                  \
    do {                                                                                           \
        __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)((wb) + 2)));           \
        __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)((wb) + 18)));          \
        STEP_SCALED(w0, w1, wb, xs, b, par, acc, NX);                                              \
    } while (0)

#define STEP_Q4_0(wb, xs, b, par, acc, extra, NX)                                                  \
    do {                                                                                           \
        __m256i w0, w1;                                                                            \
        nibbles16((wb) + 2, &w0, &w1);                                                             \
        w0 = _mm256_sub_epi16(w0, _mm256_set1_epi16(8));                                           \
        w1 = _mm256_sub_epi16(w1, _mm256_set1_epi16(8));                                           \
        STEP_SCALED(w0, w1, wb, xs, b, par, acc, NX);                                              \
    } while (0)

/* The weight's (d, m) and x's (d, s) as one pair each: d_w d_x scales the products, m_w s_x
 * (lane 1) adds the mins; both in one multiply. */
#define STEP_Q4_1(wb, xs, b, par, acc, extra, NX)                                                  \
    do {                                                                                           \
        __m256i w0, w1;                                                                            \
        nibbles16((wb) + 4, &w0, &w1);                                                             \
        uint32_t dm;                                                                               \
        memcpy(&dm, wb, 4);                                                                        \
        __m128 wdm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dm));                                     \
        for (int t = 0; t < (NX); t++) {                                                           \
            const em_qx16 *xb = xs[t] + (b);                                                       \
            __m256 f = _mm256_cvtepi32_ps(madd2(w0, w1, xb->q));                                   \
            __m128 ds = _mm_mul_ps(wdm, _mm_castpd_ps(_mm_load_sd((const double *)&xb->d)));       \
            acc[t][par] = _mm256_fmadd_ps(_mm256_broadcastss_ps(ds), f, acc[t][par]);              \
            mins[t] = _mm_add_ps(mins[t], ds);                                                     \
        }                                                                                          \
    } while (0)

DEFINE_DOT(dot_q8_0, 34, em_qx16, 32, STEP_Q8_0, _mm256_add_ps)
DEFINE_DOT(dot_q4_0, 18, em_qx16, 32, STEP_Q4_0, _mm256_add_ps)
DEFINE_DOT(dot_q4_1, 20, em_qx16, 32, STEP_Q4_1, _mm256_add_ps)

/* ---- 256-element blocks ---- */

/* Q4_K: d sum_j sc_j (q . x)_j - dmin sum_j m_j (sum x)_j over the 8 sub-blocks of 32; the
 * mins term goes to its own accumulator (macc), subtracted at the end. Worst case per int32
 * lane: 8 sub-blocks x 63 x 4 products of 15 x 32767, below 2^31. */
static inline void q4k_block(const uint8_t *wb, const em_qx16_k *xb, __m256 *acc, __m256 *macc) {
    __m128i sm = q4k_scales_mins(wb + 4);
    uint8_t smb[16]; /* the scales by index (an extract needs a constant lane) */
    _mm_storeu_si128((__m128i *)smb, sm);
    const uint8_t *qs = wb + 16;
    __m256i sumi = _mm256_setzero_si256();
    for (int g = 0; g < 4; g++) {
        /* bytes 0-15 and 16-31 of the pair: low nibbles are sub-block 2g, high 2g + 1 */
        __m256i a0, a1, b0, b1;
        nibbles16(qs + 32 * g, &a0, &b0);
        nibbles16(qs + 32 * g + 16, &a1, &b1);
        __m256i p0 = madd2(a0, a1, xb->q + 64 * g);
        __m256i p1 = madd2(b0, b1, xb->q + 64 * g + 32);
        int s0 = smb[2 * g], s1 = smb[2 * g + 1];
        sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(p0, _mm256_set1_epi32(s0)));
        sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(p1, _mm256_set1_epi32(s1)));
    }
    /* mins . (sums of 32) */
    __m256i mn = _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(sm, sm));
    __m256i msum = _mm256_mullo_epi32(mn, _mm256_loadu_si256((const __m256i *)xb->sums));
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(wb) * xb->d), _mm256_cvtepi32_ps(sumi), *acc);
    *macc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(wb + 2) * xb->d), _mm256_cvtepi32_ps(msum), *macc);
}

/* Q6_K: d sum_g sc_g ((q - 32) . x)_g over 16 groups of 16, converted to f32 per half block
 * (8 groups: at most 16 products of 32 x 32767 x 128 per lane, below 2^31). */
static inline void q6k_block(const uint8_t *wb, const em_qx16_k *xb, __m256 *acc) {
    const uint8_t *ql = wb, *qh = wb + 128;
    const int8_t *sc = (const int8_t *)(wb + 192);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3), c32 = _mm256_set1_epi8(32);
    __m256 f = _mm256_setzero_ps();
    for (int h = 0; h < 2; h++) {
        __m256i l0 = load32(ql + 64 * h), l1 = load32(ql + 64 * h + 32), hb = load32(qh + 32 * h);
        /* the high bits of chunk j are bits 2j, 2j + 1 of qh: moved to bits 4 and 5 */
        __m256i h0 = _mm256_and_si256(hb, m2), h1 = _mm256_and_si256(_mm256_srli_epi16(hb, 2), m2);
        __m256i h2 = _mm256_and_si256(_mm256_srli_epi16(hb, 4), m2);
        __m256i h3 = _mm256_and_si256(_mm256_srli_epi16(hb, 6), m2);
        __m256i q[4];
        q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(h0, 4));
        q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(h1, 4));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                               _mm256_slli_epi16(h2, 4));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                               _mm256_slli_epi16(h3, 4));
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            __m256i v = _mm256_sub_epi8(q[j], c32); /* -32 .. 31 */
            const int16_t *x = xb->q + 128 * h + 32 * j;
            __m256i p0 =
                _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)), load32(x));
            __m256i p1 = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1)),
                                           load32(x + 16));
            int g = 8 * h + 2 * j;
            sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(p0, _mm256_set1_epi32(sc[g])));
            sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(p1, _mm256_set1_epi32(sc[g + 1])));
        }
        f = _mm256_add_ps(f, _mm256_cvtepi32_ps(sumi));
    }
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(wb + 208) * xb->d), f, *acc);
}

/* acc[t][0] sums the products, acc[t][1] the (negated at the end) mins terms: see dot_q4_k */
#define STEP_Q4_K(wb, xs, b, par, acc, extra, NX)                                                  \
    do {                                                                                           \
        (void)(par), (void)mins;                                                                   \
        for (int t = 0; t < (NX); t++) q4k_block(wb, xs[t] + (b), &acc[t][0], &acc[t][1]);        \
    } while (0)

#define STEP_Q6_K(wb, xs, b, par, acc, extra, NX)                                                  \
    do {                                                                                           \
        (void)mins;                                                                                \
        for (int t = 0; t < (NX); t++) q6k_block(wb, xs[t] + (b), &acc[t][par]);                  \
    } while (0)

DEFINE_DOT(dot_q4_k, 144, em_qx16_k, 256, STEP_Q4_K, _mm256_sub_ps)
DEFINE_DOT(dot_q6_k, 210, em_qx16_k, 256, STEP_Q6_K, _mm256_add_ps)

void em_qdot_fill_avx2(void *t) {
    em_qdot_isa *q = t;
    q->kern[EM_Q8_0] = (em_qdot_kernel){em_qx_row_bytes_16, em_qx_quantize_16, dot_q8_0, 16};
    q->kern[EM_Q4_0] = (em_qdot_kernel){em_qx_row_bytes_16, em_qx_quantize_16, dot_q4_0, 16};
    q->kern[EM_Q4_1] = (em_qdot_kernel){em_qx_row_bytes_16, em_qx_quantize_16, dot_q4_1, 16};
    q->kern[EM_Q4_K] = (em_qdot_kernel){em_qx_row_bytes_16_k, em_qx_quantize_16_k, dot_q4_k, 8};
    q->kern[EM_Q6_K] = (em_qdot_kernel){em_qx_row_bytes_16_k, em_qx_quantize_16_k, dot_q6_k, 8};
}

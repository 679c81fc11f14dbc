/*
 * NEON building blocks of the aarch64 kernels (included only by *_neon.c and *_neon_bf16.c):
 * bf16/f16 <-> f32 conversions on vectors, exp, tanh and erf on vectors (ew_neon.c,
 * reduce_neon.c), and the row-dot tile that the dot engine (gemm_neon.c) and ragged_dot
 * (ragged_neon.c) share.
 *
 * exp, tanh and erf are ew_math.h's em_expf / em_tanhf / em_erff lane by lane: the same
 * constants and the same operations in the same order (no fused multiply-adds, as the portable
 * C is compiled), so they give the portable twins' bits. GCC does not vectorise the C versions
 * (their selects stay branches), which is why they are written out here.
 *
 * The dot tile: MB rows of x against NB weight rows, contiguous along k, one f32x4 accumulator
 * per output, so each output is summed in one order whatever the tile shape, the thread count or
 * how the caller splits the weight rows: the k steps in order into the four lanes, then the lanes
 * pairwise (vaddvq), then the k tail one product at a time. Element kinds:
 *   NEON_F32   4 f32 per step
 *   NEON_BF16  8 bf16 per step, widened to f32 by a shift (exact), two FMLAs
 *   NEON_F16   8 f16 per step, widened by FCVTL (exact), two FMLAs
 *   NEON_BFDOT 8 bf16 per step, one BFDOT (FEAT_BF16; only in files built with +bf16)
 */
#ifndef EMBER_NEON_H
#define EMBER_NEON_H

#include <arm_neon.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/bf16_inline.h"
#include "ember/tensor.h"

#define NEON_INLINE static inline __attribute__((always_inline))

enum { NEON_F32 = 0, NEON_BF16 = 1, NEON_F16 = 2, NEON_BFDOT = 3 };

/* 8 bf16 -> f32: the low and the high four (exact: bf16 is the top half of an f32). */
NEON_INLINE float32x4_t em_neon_bf16_lo(uint16x8_t h) {
    return vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
}
NEON_INLINE float32x4_t em_neon_bf16_hi(uint16x8_t h) {
    return vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
}

/* 4 f32 -> 4 bf16, round to nearest even, a NaN stays a quiet NaN: em_f32_to_bf16's result. */
NEON_INLINE uint16x4_t em_neon_to_bf16(float32x4_t v) {
    uint32x4_t u = vreinterpretq_u32_f32(v);
    uint32x4_t odd = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    uint32x4_t r = vaddq_u32(u, vaddq_u32(odd, vdupq_n_u32(0x7fff)));
    uint32x4_t nan = vmvnq_u32(vceqq_f32(v, v));
    r = vbslq_u32(nan, vorrq_u32(u, vdupq_n_u32(0x00400000)), r);
    return vshrn_n_u32(r, 16);
}

/* em_expf on four lanes. */
NEON_INLINE float32x4_t em_neon_expf(float32x4_t x) {
    const float32x4_t lo = vdupq_n_f32(-87.3365f), hi = vdupq_n_f32(88.7228f);
    const float32x4_t magic = vdupq_n_f32(12582912.0f);
    float32x4_t xc = vmaxq_f32(vminq_f32(x, hi), lo); /* NaN lanes are replaced at the end */
    float32x4_t fx = vsubq_f32(vaddq_f32(vmulq_f32(xc, vdupq_n_f32(1.44269504088896341f)), magic),
                               magic);
    float32x4_t r = vaddq_f32(vsubq_f32(xc, vmulq_f32(fx, vdupq_n_f32(0.693359375f))),
                              vmulq_f32(fx, vdupq_n_f32(2.12194440e-4f)));
    float32x4_t z = vmulq_f32(r, r);
    float32x4_t y = vaddq_f32(vmulq_f32(vdupq_n_f32(1.9875691500E-4f), r), vdupq_n_f32(1.3981999507E-3f));
    y = vaddq_f32(vmulq_f32(y, r), vdupq_n_f32(8.3334519073E-3f));
    y = vaddq_f32(vmulq_f32(y, r), vdupq_n_f32(4.1665795894E-2f));
    y = vaddq_f32(vmulq_f32(y, r), vdupq_n_f32(1.6666665459E-1f));
    y = vaddq_f32(vmulq_f32(y, r), vdupq_n_f32(5.0000001201E-1f));
    y = vaddq_f32(vaddq_f32(vmulq_f32(y, z), r), vdupq_n_f32(1.0f));
    /* 2^n as two factors; h = n / 2 rounded toward zero, as C's division */
    int32x4_t n = vcvtq_s32_f32(fx);
    int32x4_t h = vshrq_n_s32(vaddq_s32(n, vreinterpretq_s32_u32(
                                               vshrq_n_u32(vreinterpretq_u32_s32(n), 31))), 1);
    const int32x4_t bias = vdupq_n_s32(127);
    float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(h, bias), 23));
    float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vsubq_s32(n, h), bias), 23));
    float32x4_t res = vmulq_f32(vmulq_f32(y, s1), s2);
    res = vbslq_f32(vcltq_f32(x, lo), vdupq_n_f32(0.0f), res);
    res = vbslq_f32(vcgtq_f32(x, hi), vdupq_n_f32(INFINITY), res);
    return vbslq_f32(vceqq_f32(x, x), res, x);
}

/* em_tanhf on four lanes. */
NEON_INLINE float32x4_t em_neon_tanhf(float32x4_t x) {
    float32x4_t ax = vabsq_f32(x), z = vmulq_f32(x, x);
    float32x4_t p = vaddq_f32(vmulq_f32(vdupq_n_f32(-5.70498872745E-3f), z),
                              vdupq_n_f32(2.06390887954E-2f));
    p = vsubq_f32(vmulq_f32(p, z), vdupq_n_f32(5.37397155531E-2f));
    p = vaddq_f32(vmulq_f32(p, z), vdupq_n_f32(1.33314422036E-1f));
    p = vsubq_f32(vmulq_f32(p, z), vdupq_n_f32(3.33332819422E-1f));
    float32x4_t small = vaddq_f32(vmulq_f32(vmulq_f32(p, z), x), x);
    const float32x4_t one = vdupq_n_f32(1.0f), nine = vdupq_n_f32(9.0f);
    float32x4_t e = em_neon_expf(vmulq_f32(vdupq_n_f32(2.0f), vminq_f32(ax, nine)));
    float32x4_t big = vsubq_f32(one, vdivq_f32(vdupq_n_f32(2.0f), vaddq_f32(e, one)));
    big = vbslq_f32(vcgtq_f32(ax, nine), one, big);
    big = vbslq_f32(vcltq_f32(x, vdupq_n_f32(0.0f)), vnegq_f32(big), big);
    float32x4_t r = vbslq_f32(vcltq_f32(ax, vdupq_n_f32(0.625f)), small, big);
    return vbslq_f32(vceqq_f32(x, x), r, x);
}

/* em_erff on four lanes (NaN lanes: the two fits see NaN, the last select restores x). */
NEON_INLINE float32x4_t em_neon_erff(float32x4_t x) {
    const float32x4_t one = vdupq_n_f32(1.0f), top = vdupq_n_f32(3.921875f);
    float32x4_t a = vabsq_f32(x), z = vmulq_f32(x, x);
    float32x4_t p = vsubq_f32(vmulq_f32(vdupq_n_f32(8.397982310e-05f), z),
                              vdupq_n_f32(8.149854257e-04f));
    p = vaddq_f32(vmulq_f32(p, z), vdupq_n_f32(5.201720633e-03f));
    p = vsubq_f32(vmulq_f32(p, z), vdupq_n_f32(2.685970441e-02f));
    p = vaddq_f32(vmulq_f32(p, z), vdupq_n_f32(1.128370166e-01f));
    p = vsubq_f32(vmulq_f32(p, z), vdupq_n_f32(3.761263490e-01f));
    p = vaddq_f32(vmulq_f32(p, z), vdupq_n_f32(1.283791661e-01f));
    float32x4_t small = vaddq_f32(x, vmulq_f32(x, p));
    float32x4_t ac = vminq_f32(a, top);
    float32x4_t q = vsubq_f32(vmulq_f32(vdupq_n_f32(1.947325800e-04f), ac),
                              vdupq_n_f32(3.031582106e-03f));
    q = vaddq_f32(vmulq_f32(q, ac), vdupq_n_f32(2.218132652e-02f));
    q = vsubq_f32(vmulq_f32(q, ac), vdupq_n_f32(1.038387641e-01f));
    q = vsubq_f32(vmulq_f32(q, ac), vdupq_n_f32(6.372858882e-01f));
    q = vsubq_f32(vmulq_f32(q, ac), vdupq_n_f32(1.127615333e+00f));
    q = vsubq_f32(vmulq_f32(q, ac), vdupq_n_f32(2.099301782e-04f));
    float32x4_t big = vsubq_f32(one, em_neon_expf(q));
    big = vbslq_f32(vcltq_f32(a, top), big, one);
    big = vbslq_f32(vcltq_f32(x, vdupq_n_f32(0.0f)), vnegq_f32(big), big);
    float32x4_t r = vbslq_f32(vcltq_f32(a, vdupq_n_f32(0.921875f)), small, big);
    return vbslq_f32(vceqq_f32(x, x), r, x);
}

/* One element of kind K at p[i] as f32 (for the k tail). */
NEON_INLINE float em_neon_elem(const int K, const void *p, int64_t i) {
    if (K == NEON_F32) return ((const float *)p)[i];
    if (K == NEON_F16) return (float)((const __fp16 *)p)[i];
    return em_bf16_to_f32_inline(((const uint16_t *)p)[i]);
}

/* k values per step of kind K. */
#define NEON_STEP(K) ((K) == NEON_F32 ? 4 : 8)

/*
 * out[i][j] = sum_k x[i*ldx + k] * w[j*ldw + k] for i < MB (<= 4), j < NB (<= 8), MB * NB <= 16;
 * x and w of kind K (element strides).
 */
NEON_INLINE void em_neon_dot_tile(const int K, const int MB, const int NB, int64_t k,
                                  const void *x, int64_t ldx, const void *w, int64_t ldw,
                                  float out[4][8]) {
    const int step = NEON_STEP(K);
    const size_t es = K == NEON_F32 ? 4 : 2;
    const char *xb = x, *wb = w;
    float32x4_t acc[4][8];
    for (int i = 0; i < MB; i++)
        for (int j = 0; j < NB; j++) acc[i][j] = vdupq_n_f32(0.0f);
    int64_t kk = 0;
    for (; kk + step <= k; kk += step) {
        if (K == NEON_F32) {
            float32x4_t wv[8];
            for (int j = 0; j < NB; j++)
                wv[j] = vld1q_f32((const float *)(wb + (size_t)(j * ldw + kk) * es));
            for (int i = 0; i < MB; i++) {
                float32x4_t xv = vld1q_f32((const float *)(xb + (size_t)(i * ldx + kk) * es));
                for (int j = 0; j < NB; j++) acc[i][j] = vfmaq_f32(acc[i][j], xv, wv[j]);
            }
        } else if (K == NEON_BFDOT) {
#if defined(__ARM_FEATURE_BF16_VECTOR_ARITHMETIC)
            bfloat16x8_t wv[8];
            for (int j = 0; j < NB; j++)
                wv[j] = vreinterpretq_bf16_u16(
                    vld1q_u16((const uint16_t *)(wb + (size_t)(j * ldw + kk) * es)));
            for (int i = 0; i < MB; i++) {
                bfloat16x8_t xv = vreinterpretq_bf16_u16(
                    vld1q_u16((const uint16_t *)(xb + (size_t)(i * ldx + kk) * es)));
                for (int j = 0; j < NB; j++) acc[i][j] = vbfdotq_f32(acc[i][j], xv, wv[j]);
            }
#endif
        } else {
            float32x4_t wl[8], wh[8];
            for (int j = 0; j < NB; j++) {
                const void *p = wb + (size_t)(j * ldw + kk) * es;
                if (K == NEON_BF16) {
                    uint16x8_t h = vld1q_u16(p);
                    wl[j] = em_neon_bf16_lo(h), wh[j] = em_neon_bf16_hi(h);
                } else {
                    float16x8_t h = vld1q_f16(p);
                    wl[j] = vcvt_f32_f16(vget_low_f16(h)), wh[j] = vcvt_high_f32_f16(h);
                }
            }
            for (int i = 0; i < MB; i++) {
                const void *p = xb + (size_t)(i * ldx + kk) * es;
                float32x4_t xl, xh;
                if (K == NEON_BF16) {
                    uint16x8_t h = vld1q_u16(p);
                    xl = em_neon_bf16_lo(h), xh = em_neon_bf16_hi(h);
                } else {
                    float16x8_t h = vld1q_f16(p);
                    xl = vcvt_f32_f16(vget_low_f16(h)), xh = vcvt_high_f32_f16(h);
                }
                for (int j = 0; j < NB; j++) {
                    acc[i][j] = vfmaq_f32(acc[i][j], xl, wl[j]);
                    acc[i][j] = vfmaq_f32(acc[i][j], xh, wh[j]);
                }
            }
        }
    }
    for (int i = 0; i < MB; i++)
        for (int j = 0; j < NB; j++) {
            float s = vaddvq_f32(acc[i][j]);
            for (int64_t q = kk; q < k; q++)
                s += em_neon_elem(K, xb + (size_t)(i * ldx) * es, q) *
                     em_neon_elem(K, wb + (size_t)(j * ldw) * es, q);
            out[i][j] = s;
        }
}

/* Weight rows per tile for MB rows of x: 8 chains of FMAs at least, 16 accumulators at most. */
#define NEON_DOT_NB(MB) ((MB) == 1 ? 8 : 4)

/* Stores one output of em_neon_dot_all: row i of x, weight row j. */
typedef void (*em_neon_emit_fn)(void *user, int64_t i, int64_t j, float v);

/* An emit for f32 outputs at out[i * ldo + j] (user: an em_neon_f32_out). */
typedef struct em_neon_f32_out {
    float *out;
    int64_t ldo;
} em_neon_f32_out;

static inline void em_neon_emit_f32(void *user, int64_t i, int64_t j, float v) {
    const em_neon_f32_out *o = user;
    o->out[i * o->ldo + j] = v;
}

/*
 * The products of m rows of x with n weight rows in tiles of up to 4 rows of x by NEON_DOT_NB
 * weight rows (a last, narrower block of weight rows in tiles one weight row wide: the same order
 * per output). emit is a constant at every call, so it is inlined.
 */
NEON_INLINE void em_neon_dot_all(const int K, int64_t m, int64_t n, int64_t k, const void *x,
                                 int64_t ldx, const void *w, int64_t ldw, em_neon_emit_fn emit,
                                 void *user) {
    const size_t es = K == NEON_F32 ? 4 : 2;
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
        const int mb = m - i0 < 4 ? (int)(m - i0) : 4;
        const int nbw = NEON_DOT_NB(mb);
        const char *xr = (const char *)x + (size_t)(i0 * ldx) * es;
        for (int64_t j0 = 0; j0 < n;) {
            const int nb = n - j0 >= nbw ? nbw : 1;
            const char *wr = (const char *)w + (size_t)(j0 * ldw) * es;
            float out[4][8];
            switch (mb * 16 + nb) {
            case 16 + 8: em_neon_dot_tile(K, 1, 8, k, xr, ldx, wr, ldw, out); break;
            case 16 + 1: em_neon_dot_tile(K, 1, 1, k, xr, ldx, wr, ldw, out); break;
            case 32 + 4: em_neon_dot_tile(K, 2, 4, k, xr, ldx, wr, ldw, out); break;
            case 32 + 1: em_neon_dot_tile(K, 2, 1, k, xr, ldx, wr, ldw, out); break;
            case 48 + 4: em_neon_dot_tile(K, 3, 4, k, xr, ldx, wr, ldw, out); break;
            case 48 + 1: em_neon_dot_tile(K, 3, 1, k, xr, ldx, wr, ldw, out); break;
            case 64 + 4: em_neon_dot_tile(K, 4, 4, k, xr, ldx, wr, ldw, out); break;
            default: em_neon_dot_tile(K, 4, 1, k, xr, ldx, wr, ldw, out); break;
            }
            for (int a = 0; a < mb; a++)
                for (int b = 0; b < nb; b++) emit(user, i0 + a, j0 + b, out[a][b]);
            j0 += nb;
        }
    }
}

#endif

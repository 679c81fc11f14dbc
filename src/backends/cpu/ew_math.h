/*
 * Branch-free float math that compilers vectorise: exp (Cephes polynomial, ~1 ulp), tanh,
 * sigmoid, erf and the activations built on them. Included by the ISA variants of ew_funcs.inc.
 */
#ifndef EMBER_EW_MATH_H
#define EMBER_EW_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float em_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float em_expf(float x) {
    float xc = x < -87.3365f ? -87.3365f : (x > 88.7228f ? 88.7228f : x);
    /* round to nearest with the 1.5 * 2^23 trick (floorf does not vectorise without
     * -fno-trapping-math); either rounding keeps |r| <= ln2/2 */
    float fx = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - fx * 0.693359375f + fx * 2.12194440e-4f;
    float z = r * r;
    float y = ((((1.9875691500E-4f * r + 1.3981999507E-3f) * r + 8.3334519073E-3f) * r +
                4.1665795894E-2f) * r + 1.6666665459E-1f) * r + 5.0000001201E-1f;
    y = y * z + r + 1.0f;
    /* 2^n as two factors so that n = -126 and n = 128 stay representable */
    int32_t n = (int32_t)fx, h = n / 2;
    float s1 = em_bits_f32((uint32_t)(h + 127) << 23);
    float s2 = em_bits_f32((uint32_t)(n - h + 127) << 23);
    float res = y * s1 * s2;
    res = x < -87.3365f ? 0.0f : res;
    res = x > 88.7228f ? INFINITY : res;
    return x != x ? x : res;
}

static inline float em_tanhf(float x) {
    float ax = fabsf(x);
    float z = x * x;
    float small = ((((-5.70498872745E-3f * z + 2.06390887954E-2f) * z - 5.37397155531E-2f) * z +
                    1.33314422036E-1f) * z - 3.33332819422E-1f) * z * x + x;
    float e = em_expf(2.0f * (ax > 9.0f ? 9.0f : ax));
    float big = 1.0f - 2.0f / (e + 1.0f);
    big = ax > 9.0f ? 1.0f : big;
    big = x < 0 ? -big : big;
    float r = ax < 0.625f ? small : big;
    return x != x ? x : r;
}

static inline float em_sigmoidf(float x) { return 1.0f / (1.0f + em_expf(-x)); }

static inline float em_siluf(float x) { return x / (1.0f + em_expf(-x)); }

static inline float em_gelu_tanhf(float x) {
    const float beta = 0.7978845608028654f, kappa = 0.044715f;
    float inner = beta * (x + kappa * x * x * x);
    return 0.5f * x * (1.0f + em_tanhf(inner));
}

/*
 * erf: max 1.39 ulp from the exact value over all floats (checked exhaustively by lab_erf, see
 * docs/notes/2026-12-04-gelu-erf.md). Two minimax fits, with their own coefficients:
 *  - |x| < 0.921875: x + x P(x^2), P of degree 6 (relative error of the fit 4e-10);
 *  - 0.921875 <= |x| < 3.921875: 1 - exp(Q(|x|)), Q of degree 6 fitted to log(erfc) with the
 *    weight erfc (error of erfc relative 1.5e-9), exp by em_expf;
 *  - |x| >= 3.921875 (erfc below 2^-25, so erf rounds to 1) and infinities: +-1.
 * NaN stays NaN and -0 gives -0, as libm's erff. Both fits are evaluated and one selected so that
 * the loops vectorise; no FMA (ISO C does not contract), so that every kernel level, NEON
 * included (neon.h's em_neon_erff), gives the same bits.
 */
static inline float em_erff(float x) {
    float a = fabsf(x), z = x * x;
    float p = ((((((8.397982310e-05f * z - 8.149854257e-04f) * z + 5.201720633e-03f) * z -
                  2.685970441e-02f) * z + 1.128370166e-01f) * z - 3.761263490e-01f) * z +
               1.283791661e-01f);
    float small = x + x * p;
    float ac = a < 3.921875f ? a : 3.921875f;
    float q = ((((((1.947325800e-04f * ac - 3.031582106e-03f) * ac + 2.218132652e-02f) * ac -
                  1.038387641e-01f) * ac - 6.372858882e-01f) * ac - 1.127615333e+00f) * ac -
               2.099301782e-04f);
    float big = 1.0f - em_expf(q);
    big = a < 3.921875f ? big : 1.0f;
    big = x < 0 ? -big : big;
    float r = a < 0.921875f ? small : big;
    return x != x ? x : r;
}

static inline float em_gelu_erff(float x) {
    return 0.5f * x * (1.0f + em_erff(x * 0.70710678118654752f));
}

#endif

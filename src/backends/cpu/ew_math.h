/*
 * Branch-free float math that compilers vectorise: exp (Cephes polynomial, ~1 ulp), tanh,
 * sigmoid and the activations built on them. Included by the ISA variants of ew_funcs.inc.
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

static inline float em_gelu_erff(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

#endif

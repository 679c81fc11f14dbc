/*
 * NEON entries of the element-wise table (aarch64). The portable functions (ew_funcs.inc, built
 * as ew_funcs_generic.c) already run on NEON where GCC vectorises them, which it does for the
 * arithmetic, comparisons and bf16 conversions of the aarch64 baseline; em_cpu_isa_fill installs
 * them first and this fill replaces what it does not vectorise:
 *  - exp, tanh, sigmoid, silu and gelu (both forms) in f32 (neon.h's em_neon_expf /
 *    em_neon_tanhf / em_neon_erff: the same bits as the portable C, four lanes at a time);
 *  - f16 loads, stores and rounding, which the portable C does with a call per element
 *    (FCVTL / FCVTN here, round to nearest even as em_f32_to_f16).
 */
#include "backends/cpu/cpu.h"
#include "backends/cpu/ew.h"
#include "backends/cpu/ew_math.h"
#include "backends/cpu/neon.h"

/* A unary f32 block function from a four-lane body V and its scalar twin S (for the tail). */
#define UNARY(NAME, V, S)                                                                          \
    static void NAME(int64_t n, void *o, const void *a_, const void *b_, const void *c_,           \
                     const em_attr *at) {                                                          \
        (void)b_, (void)c_, (void)at;                                                              \
        const float *a = a_;                                                                       \
        float *r = o;                                                                              \
        int64_t i = 0;                                                                             \
        for (; i + 4 <= n; i += 4) {                                                               \
            float32x4_t x = vld1q_f32(a + i);                                                      \
            vst1q_f32(r + i, V);                                                                   \
        }                                                                                          \
        for (; i < n; i++) {                                                                       \
            float x = a[i];                                                                        \
            r[i] = S;                                                                              \
        }                                                                                          \
    }

NEON_INLINE float32x4_t one_plus_exp_neg(float32x4_t x) {
    return vaddq_f32(vdupq_n_f32(1.0f), em_neon_expf(vnegq_f32(x)));
}

NEON_INLINE float32x4_t gelu_tanh4(float32x4_t x) {
    float32x4_t cube = vmulq_f32(vmulq_f32(vmulq_f32(vdupq_n_f32(0.044715f), x), x), x);
    float32x4_t inner = vmulq_f32(vdupq_n_f32(0.7978845608028654f), vaddq_f32(x, cube));
    return vmulq_f32(vmulq_f32(vdupq_n_f32(0.5f), x),
                     vaddq_f32(vdupq_n_f32(1.0f), em_neon_tanhf(inner)));
}

UNARY(exp_f32, em_neon_expf(x), em_expf(x))
UNARY(tanh_f32, em_neon_tanhf(x), em_tanhf(x))
UNARY(sigmoid_f32, vdivq_f32(vdupq_n_f32(1.0f), one_plus_exp_neg(x)), em_sigmoidf(x))
UNARY(silu_f32, vdivq_f32(x, one_plus_exp_neg(x)), em_siluf(x))
UNARY(gelu_tanh_f32, gelu_tanh4(x), em_gelu_tanhf(x))

NEON_INLINE float32x4_t gelu_erf4(float32x4_t x) {
    float32x4_t e = em_neon_erff(vmulq_f32(x, vdupq_n_f32(0.70710678118654752f)));
    return vmulq_f32(vmulq_f32(vdupq_n_f32(0.5f), x), vaddq_f32(vdupq_n_f32(1.0f), e));
}

UNARY(gelu_erf_f32, gelu_erf4(x), em_gelu_erff(x))

/* gelu: attrs[0] chooses the tanh approximation or erf */
static void gelu_f32(int64_t n, void *o, const void *a, const void *b, const void *c,
                     const em_attr *at) {
    if (at[0].i)
        gelu_tanh_f32(n, o, a, b, c, at);
    else
        gelu_erf_f32(n, o, a, b, c, at);
}

/* ---- f16 ---- */

static void load_f16(void *dst, const void *src, int64_t stride, int64_t n) {
    const __fp16 *s = src;
    float *d = dst;
    int64_t i = 0;
    if (stride == 1)
        for (; i + 8 <= n; i += 8) {
            float16x8_t h = vld1q_f16((const float16_t *)(s + i));
            vst1q_f32(d + i, vcvt_f32_f16(vget_low_f16(h)));
            vst1q_f32(d + i + 4, vcvt_high_f32_f16(h));
        }
    for (; i < n; i++) d[i] = (float)s[i * stride];
}

NEON_INLINE float16x8_t to_f16(const float *s) {
    return vcvt_high_f16_f32(vcvt_f16_f32(vld1q_f32(s)), vld1q_f32(s + 4));
}

static void store_f16(void *dst, const void *src, int64_t n) {
    const float *s = src;
    __fp16 *d = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) vst1q_f16((float16_t *)(d + i), to_f16(s + i));
    for (; i < n; i++) d[i] = (__fp16)s[i];
}

static void round_f16(void *buf, int64_t n) {
    float *b = buf;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float16x8_t h = to_f16(b + i);
        vst1q_f32(b + i, vcvt_f32_f16(vget_low_f16(h)));
        vst1q_f32(b + i + 4, vcvt_high_f32_f16(h));
    }
    for (; i < n; i++) b[i] = (float)(__fp16)b[i];
}

void em_ew_fill_neon(void *table) {
    em_ew_isa *t = table;
    t->fn[EM_OP_EXP][EW_CT_F32] = exp_f32;
    t->fn[EM_OP_TANH][EW_CT_F32] = tanh_f32;
    t->fn[EM_OP_SIGMOID][EW_CT_F32] = sigmoid_f32;
    t->fn[EM_OP_SILU][EW_CT_F32] = silu_f32;
    t->fn[EM_OP_GELU][EW_CT_F32] = gelu_f32;
    t->load[EM_F16] = load_f16;
    t->store[EM_F16] = store_f16;
    t->round[EM_F16] = round_f16;
}

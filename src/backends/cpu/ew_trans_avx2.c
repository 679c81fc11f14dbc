/*
 * AVX2 + FMA entries of the element-wise table for the f32 transcendentals: exp, tanh, sigmoid,
 * silu and both gelu forms (ew_funcs_avx2.c's fill installs them over the portable loops); erf
 * (exact gelu) alone is FMA-free, see erf8.
 *
 * The portable loops compiled for AVX2 vectorise but stay compute-bound (silu at 40 % of the
 * triad bandwidth on a Zen 4 at the AVX2 level): ISO C11 mode keeps GCC from contracting
 * a * b + c into an FMA, so em_expf's polynomial costs twice the operations; its 17 constants do
 * not fit the 16 ymm registers and are read from the stack; the constants are broadcast again
 * for every 64-element block; and the 2^n scaling and the edge selects take ~15 operations.
 * Here one vector of exp is ~22 operations: FMAs for the reduction and the polynomial, n taken
 * from the bits of the rounded sum, 2^n applied by adding n to the exponent field (exact: the
 * clamp keeps every result a normal float), the same edge values as em_expf (0 below -87.3365,
 * infinity above 88.7228, NaN kept); silu, sigmoid and tanh add only the edges they can see.
 * The results differ from the portable functions' by 1-4 ulp (FMA rounding; 2^26 inputs over
 * all floats compared, docs/performance-avx2.md), within the element-wise tests' tolerances.
 */
#include <immintrin.h>
#include <math.h>

#include "backends/cpu/ew.h"
#include "backends/cpu/ew_math.h"

#define AVX2_INLINE static inline __attribute__((always_inline))

/*
 * em_expf on eight lanes without its edge values: the input is clamped to [-87.3365, 88.7228],
 * so x below gives exp(-87.3365) (FLT_MIN) instead of 0, x above gives ~FLT_MAX instead of
 * infinity, and NaN gives FLT_MIN. Callers add the edges they can tell apart (see exp8).
 */
AVX2_INLINE __m256 exp8_core(__m256 x) {
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    __m256 xc = _mm256_max_ps(x, _mm256_set1_ps(-87.3365f));
    xc = _mm256_min_ps(xc, _mm256_set1_ps(88.7228f));
    __m256 t = _mm256_fmadd_ps(xc, _mm256_set1_ps(1.44269504088896341f), magic);
    __m256 fx = _mm256_sub_ps(t, magic);
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fmadd_ps(fx, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 z = _mm256_mul_ps(r, r);
    __m256 y = _mm256_fmadd_ps(_mm256_set1_ps(1.9875691500E-4f), r,
                               _mm256_set1_ps(1.3981999507E-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073E-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894E-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459E-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201E-1f));
    y = _mm256_add_ps(_mm256_fmadd_ps(y, z, r), _mm256_set1_ps(1.0f));
    /* t = 1.5 * 2^23 + n: its low mantissa bits hold n + 2^22 */
    __m256i n = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_castps_si256(magic));
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(y), _mm256_slli_epi32(n, 23)));
}

/* exp8_core's value, infinity where x > 88.7228 */
AVX2_INLINE __m256 exp8_inf(__m256 x) {
    __m256 big = _mm256_cmp_ps(x, _mm256_set1_ps(88.7228f), _CMP_GT_OQ);
    return _mm256_blendv_ps(exp8_core(x), _mm256_set1_ps(INFINITY), big);
}

/* em_expf on eight lanes: its edge values (0 below -87.3365, infinity above 88.7228, NaN kept) */
AVX2_INLINE __m256 exp8(__m256 x) {
    __m256 res = exp8_inf(x);
    __m256 small = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3365f), _CMP_LT_OQ);
    res = _mm256_blendv_ps(res, _mm256_setzero_ps(), small);
    return _mm256_blendv_ps(res, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* em_tanhf on eight lanes. */
AVX2_INLINE __m256 tanh8(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    const __m256 nine = _mm256_set1_ps(9.0f);
    __m256 ax = _mm256_andnot_ps(sign, x), z = _mm256_mul_ps(x, x);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(-5.70498872745E-3f), z,
                               _mm256_set1_ps(2.06390887954E-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531E-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036E-1f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422E-1f));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
    /* exp of 2 min(|x|, 9), in [0, 18]: no edge values; NaN lanes are restored below */
    __m256 e = exp8_core(_mm256_add_ps(_mm256_min_ps(ax, nine), _mm256_min_ps(ax, nine)));
    /* 1 - 2 / (e + 1) with the sign of x; |x| > 9 gives 1 (e is exp(18) there) */
    __m256 big = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
    big = _mm256_blendv_ps(big, one, _mm256_cmp_ps(ax, nine, _CMP_GT_OQ));
    big = _mm256_or_ps(big, _mm256_and_ps(x, sign));
    __m256 r = _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
    return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/*
 * 1 + exp(-x) for silu and sigmoid: where -x < -87.3365 exp(-x) is below 2^-24 either way and
 * 1 + it rounds to 1, so only the infinity edge is needed; NaN lanes are the callers' (silu's
 * x / d is NaN by itself).
 */
AVX2_INLINE __m256 one_plus_exp_neg8(__m256 x) {
    return _mm256_add_ps(_mm256_set1_ps(1.0f), exp8_inf(_mm256_xor_ps(x, _mm256_set1_ps(-0.0f))));
}

/* em_sigmoidf on eight lanes */
AVX2_INLINE __m256 sigmoid8(__m256 x) {
    __m256 s = _mm256_div_ps(_mm256_set1_ps(1.0f), one_plus_exp_neg8(x));
    return _mm256_blendv_ps(s, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

AVX2_INLINE __m256 gelu_tanh8(__m256 x) {
    __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    __m256 inner = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f),
                                 _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
    __m256 hx = _mm256_mul_ps(_mm256_set1_ps(0.5f), x);
    return _mm256_mul_ps(hx, _mm256_add_ps(_mm256_set1_ps(1.0f), tanh8(inner)));
}

/*
 * em_erff on eight lanes, without FMA: the same operations in the same order as the portable C
 * (ISO C11 does not contract), so the avx2 level gives the bits of every other level. Faster
 * than GCC's vectorisation of em_erff here: the constants stay in registers or memory operands
 * instead of spills, and exp's 2^n is an add to the exponent field, equal to em_expf's two
 * multiplications by powers of two because exp's argument here lies in [-17.3, 0] (its result
 * is a normal float; em_expf's edges are never reached); a NaN lane's exp sees the clamp
 * 3.921875 and the last select restores x.
 */
AVX2_INLINE __m256 mul_add(__m256 a, __m256 b, float c) {
    return _mm256_add_ps(_mm256_mul_ps(a, b), _mm256_set1_ps(c));
}

AVX2_INLINE __m256 erf8(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f), top = _mm256_set1_ps(3.921875f);
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), z = _mm256_mul_ps(x, x);
    __m256 p = mul_add(_mm256_set1_ps(8.397982310e-05f), z, -8.149854257e-04f);
    p = mul_add(p, z, 5.201720633e-03f);
    p = mul_add(p, z, -2.685970441e-02f);
    p = mul_add(p, z, 1.128370166e-01f);
    p = mul_add(p, z, -3.761263490e-01f);
    p = mul_add(p, z, 1.283791661e-01f);
    __m256 small = _mm256_add_ps(x, _mm256_mul_ps(x, p));
    __m256 ac = _mm256_min_ps(a, top); /* NaN -> 3.921875 */
    __m256 q = mul_add(_mm256_set1_ps(1.947325800e-04f), ac, -3.031582106e-03f);
    q = mul_add(q, ac, 2.218132652e-02f);
    q = mul_add(q, ac, -1.038387641e-01f);
    q = mul_add(q, ac, -6.372858882e-01f);
    q = mul_add(q, ac, -1.127615333e+00f);
    q = mul_add(q, ac, -2.099301782e-04f);
    /* em_expf(q) */
    __m256 t = _mm256_add_ps(_mm256_mul_ps(q, _mm256_set1_ps(1.44269504088896341f)), magic);
    __m256 fx = _mm256_sub_ps(t, magic);
    __m256 r = _mm256_sub_ps(q, _mm256_mul_ps(fx, _mm256_set1_ps(0.693359375f)));
    r = _mm256_add_ps(r, _mm256_mul_ps(fx, _mm256_set1_ps(2.12194440e-4f)));
    __m256 rr = _mm256_mul_ps(r, r);
    __m256 y = mul_add(_mm256_set1_ps(1.9875691500E-4f), r, 1.3981999507E-3f);
    y = mul_add(y, r, 8.3334519073E-3f);
    y = mul_add(y, r, 4.1665795894E-2f);
    y = mul_add(y, r, 1.6666665459E-1f);
    y = mul_add(y, r, 5.0000001201E-1f);
    y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(y, rr), r), one);
    __m256i n = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_castps_si256(magic));
    __m256 e = _mm256_castsi256_ps(
        _mm256_add_epi32(_mm256_castps_si256(y), _mm256_slli_epi32(n, 23)));
    __m256 big = _mm256_sub_ps(one, e);
    big = _mm256_blendv_ps(one, big, _mm256_cmp_ps(a, top, _CMP_LT_OQ));
    big = _mm256_or_ps(big, _mm256_and_ps(x, _mm256_set1_ps(-0.0f))); /* x < 0: -big; -0: +big */
    __m256 lo = _mm256_cmp_ps(a, _mm256_set1_ps(0.921875f), _CMP_LT_OQ);
    __m256 res = _mm256_blendv_ps(big, small, lo);
    return _mm256_blendv_ps(res, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

AVX2_INLINE __m256 gelu_erf8(__m256 x) {
    __m256 e = erf8(_mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f)));
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x),
                         _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

/*
 * A unary f32 block function from an eight-lane body V and its scalar twin S (the tail). The
 * input is fetched EW_PF_AHEAD values ahead, one request per cache line, as in ew_funcs.inc:
 * each vector's long dependency chain leaves too few loads in flight to hide DRAM latency.
 */
#define EW_PF_AHEAD 512
#define UNARY(NAME, V, S)                                                                          \
    static void NAME(int64_t n, void *o, const void *a_, const void *b_, const void *c_,           \
                     const em_attr *at) {                                                          \
        (void)b_, (void)c_, (void)at;                                                              \
        const float *a = a_;                                                                       \
        float *r = o;                                                                              \
        int64_t i = 0;                                                                             \
        for (; i + 32 <= n; i += 32) {                                                             \
            __builtin_prefetch(a + i + EW_PF_AHEAD, 0, 3);                                         \
            __builtin_prefetch(a + i + EW_PF_AHEAD + 16, 0, 3);                                    \
            for (int j = 0; j < 32; j += 8) {                                                      \
                __m256 x = _mm256_loadu_ps(a + i + j);                                             \
                _mm256_storeu_ps(r + i + j, V);                                                    \
            }                                                                                      \
        }                                                                                          \
        for (; i + 8 <= n; i += 8) {                                                               \
            __m256 x = _mm256_loadu_ps(a + i);                                                     \
            _mm256_storeu_ps(r + i, V);                                                            \
        }                                                                                          \
        for (; i < n; i++) {                                                                       \
            float x = a[i];                                                                        \
            r[i] = S;                                                                              \
        }                                                                                          \
    }

UNARY(exp_f32, exp8(x), em_expf(x))
UNARY(tanh_f32, tanh8(x), em_tanhf(x))
UNARY(sigmoid_f32, sigmoid8(x), em_sigmoidf(x))
UNARY(silu_f32, _mm256_div_ps(x, one_plus_exp_neg8(x)), em_siluf(x))
UNARY(gelu_tanh_f32, gelu_tanh8(x), em_gelu_tanhf(x))

UNARY(gelu_erf_f32, gelu_erf8(x), em_gelu_erff(x))

static void gelu_f32(int64_t n, void *o, const void *a_, const void *b_, const void *c_,
                     const em_attr *at) {
    if (at[0].i)
        gelu_tanh_f32(n, o, a_, b_, c_, at);
    else
        gelu_erf_f32(n, o, a_, b_, c_, at);
}

void em_ew_fill_trans_avx2(void *table) {
    em_ew_isa *t = table;
    t->fn[EM_OP_EXP][EW_CT_F32] = exp_f32;
    t->fn[EM_OP_TANH][EW_CT_F32] = tanh_f32;
    t->fn[EM_OP_SIGMOID][EW_CT_F32] = sigmoid_f32;
    t->fn[EM_OP_SILU][EW_CT_F32] = silu_f32;
    t->fn[EM_OP_GELU][EW_CT_F32] = gelu_f32;
}

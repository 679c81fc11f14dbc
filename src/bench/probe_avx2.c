/* Machine-limit probes with AVX2 + FMA (see probe.h): the limits of the AVX2 kernels. */
#include <immintrin.h>

#include "bench/probe.h"

static float read_(const float *p, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
    }
    __m256 v = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float s = _mm_cvtss_f32(h);
    for (; i < n; i++) s += p[i];
    return s;
}

static void triad(float *a, const float *b, const float *c, float s, size_t n) {
    __m256 vs = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(a + i, _mm256_fmadd_ps(vs, _mm256_loadu_ps(c + i), _mm256_loadu_ps(b + i)));
    for (; i < n; i++) a[i] = b[i] + s * c[i];
}

static double fma_(int64_t iters) {
    __m256 x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(0.9999999f);
    /* 12 independent chains cover two FMA pipes of 4-5 cycles' latency (Haswell to Zen 4) and
     * stay in the 16 ymm registers with x and y */
    __m256 a[12];
    for (int k = 0; k < 12; k++) a[k] = _mm256_set1_ps((float)k);
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < 12; k++) a[k] = _mm256_fmadd_ps(a[k], x, y);
    __m256 s = a[0];
    for (int k = 1; k < 12; k++) s = _mm256_add_ps(s, a[k]);
    float out[8];
    _mm256_storeu_ps(out, s);
    volatile float sink = out[0] + out[7];
    (void)sink;
    return (double)iters * 12 * 8 * 2;
}

void em_probe_fill_avx2(void *table) {
    em_probe_isa *t = table;
    t->read = read_;
    t->triad = triad;
    t->fma = fma_;
    t->bf16dot = NULL;
}

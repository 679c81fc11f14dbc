/* Machine-limit probes with AVX-512 (see probe.h). */
#include <immintrin.h>

#include "backends/cpu/cpu.h"
#include "bench/probe.h"

static float read_(const float *p, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
        a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
    }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    for (; i < n; i++) s += p[i];
    return s;
}

static void triad(float *a, const float *b, const float *c, float s, size_t n) {
    __m512 vs = _mm512_set1_ps(s);
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(a + i, _mm512_fmadd_ps(vs, _mm512_loadu_ps(c + i), _mm512_loadu_ps(b + i)));
    for (; i < n; i++) a[i] = b[i] + s * c[i];
}

static double fma_(int64_t iters) {
    __m512 x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(0.9999999f);
    __m512 a[12];
    for (int k = 0; k < 12; k++) a[k] = _mm512_set1_ps((float)k);
    for (int64_t i = 0; i < iters; i++) {
        /* 12 independent chains: FMA is not associative, so nothing folds or spills */
        for (int k = 0; k < 12; k++) a[k] = _mm512_fmadd_ps(a[k], x, y);
    }
    float s = 0;
    for (int k = 0; k < 12; k++) s += _mm512_reduce_add_ps(a[k]);
    volatile float sink = s;
    (void)sink;
    return (double)iters * 12 * 16 * 2;
}

static double bf16dot(int64_t iters) {
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3f80);
    __m512 a[12];
    for (int k = 0; k < 12; k++) a[k] = _mm512_setzero_ps();
    for (int64_t i = 0; i < iters; i++) {
        for (int k = 0; k < 12; k++) a[k] = _mm512_dpbf16_ps(a[k], x, y);
    }
    float s = 0;
    for (int k = 0; k < 12; k++) s += _mm512_reduce_add_ps(a[k]);
    volatile float sink = s;
    (void)sink;
    return (double)iters * 12 * 32 * 2;
}

void em_probe_fill_avx512(void *table) {
    em_probe_isa *t = table;
    t->read = read_;
    t->triad = triad;
    t->fma = fma_;
    t->bf16dot = em_cpu_bf16_dot() ? bf16dot : NULL;
    t->bf16tiles = em_cpu_amx() ? em_probe_amx_bf16 : NULL;
}

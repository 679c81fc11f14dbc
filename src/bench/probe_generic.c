/* Machine-limit probes in portable C (the twins of probe_avx2.c, probe_avx512.c), and the
 * probe table of the chosen instruction set. */
#include "backends/cpu/cpu.h"
#include "bench/probe.h"

static float read_(const float *p, size_t n) {
    float s[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += p[i + k];
    for (; i < n; i++) s[0] += p[i];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

static void triad(float *a, const float *b, const float *c, float s, size_t n) {
    for (size_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}

static double fma_(int64_t iters) {
    float a[8][8];
    for (int k = 0; k < 8; k++)
        for (int l = 0; l < 8; l++) a[k][l] = (float)(k + l);
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < 8; k++)
            for (int l = 0; l < 8; l++) a[k][l] = a[k][l] * 1.0000001f + 0.9999999f;
    volatile float sink = a[0][0] + a[7][7];
    (void)sink;
    return (double)iters * 64 * 2;
}

void em_probe_fill_generic(void *table) {
    em_probe_isa *t = table;
    t->read = read_;
    t->triad = triad;
    t->fma = fma_;
    t->bf16dot = NULL;
}

EM_CPU_ISA_TABLE(em_probe_isa, em_probe_isa_get, [EM_ISA_GENERIC] = em_probe_fill_generic,
                 [EM_ISA_AVX2] = EM_ISA_X86(em_probe_fill_avx2),
                 [EM_ISA_AVX512] = EM_ISA_X86(em_probe_fill_avx512))

/*
 * Machine-limit probes for the benchmarks: what the hardware can do, measured in the same run
 * as the kernels they judge. Each returns its figure for the calling thread's share of the work;
 * the callers run them on every pool thread and add up. One table per instruction set, so the
 * limits are those of the instruction set the kernels use (EMBER_CPU_LEVEL lowers both).
 */
#ifndef EMBER_PROBE_H
#define EMBER_PROBE_H

#include <stddef.h>
#include <stdint.h>

typedef struct em_probe_isa {
    /* Reads n floats (sums them, so the loads cannot be elided). */
    float (*read)(const float *p, size_t n);
    /* a[i] = b[i] + s * c[i]. */
    void (*triad)(float *a, const float *b, const float *c, float s, size_t n);
    /* Independent FMA chains on registers: returns the flops done (2 per lane per FMA). */
    double (*fma)(int64_t iters);
    /* Native bf16 dot chains (vdpbf16ps: 2 multiply-adds per f32 lane): the flops done; NULL
     * where the instruction set has none (bf16 kernels then run on the FMA units). */
    double (*bf16dot)(int64_t iters);
    /* bf16 matrix tiles (AMX tdpbf16ps): the flops done; NULL where the kernels do not use
     * them (em_cpu_amx). */
    double (*bf16tiles)(int64_t iters);
} em_probe_isa;

/* The probes of the chosen instruction set. */
const em_probe_isa *em_probe_isa_get(void);
void em_probe_fill_generic(void *t);
void em_probe_fill_avx2(void *t);
void em_probe_fill_avx512(void *t);
double em_probe_amx_bf16(int64_t iters); /* probe_amx.c */

#endif

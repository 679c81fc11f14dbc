/*
 * Machine-limit probes for the benchmarks: what the hardware can do, measured in the same run
 * as the kernels they judge. Each returns its figure for the calling thread's share of the work;
 * the callers run them on every pool thread and add up.
 */
#ifndef EMBER_PROBE_H
#define EMBER_PROBE_H

#include <stddef.h>
#include <stdint.h>

/* Reads n floats (sums them, so the loads cannot be elided). */
float em_probe_read_avx512(const float *p, size_t n);
float em_probe_read_generic(const float *p, size_t n);
/* a[i] = b[i] + s * c[i]. */
void em_probe_triad_avx512(float *a, const float *b, const float *c, float s, size_t n);
void em_probe_triad_generic(float *a, const float *b, const float *c, float s, size_t n);
/* Independent FMA chains on registers: returns the flops done (2 per lane per FMA). */
double em_probe_fma_avx512(int64_t iters);
double em_probe_fma_generic(int64_t iters);
/* vdpbf16ps chains: 2 multiply-adds per pair, 32 pairs... returns flops done. */
double em_probe_bf16dot_avx512(int64_t iters);

#endif

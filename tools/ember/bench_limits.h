/* The machine's limits, measured in the same run as the benchmark that quotes them. */
#ifndef EMBER_BENCH_LIMITS_H
#define EMBER_BENCH_LIMITS_H

#include <stdbool.h>

/*
 * The bandwidth probes every bench quotes, one definition for all (bench ops, moe, decode, chat):
 * one pass of the kernel level's read (or triad) probe over f32 arrays of BENCH_PROBE_MIB MiB
 * each (eight times a 32 MiB L3, so the caches hold none of it), split in contiguous shares over
 * the pool's threads (or the calling thread alone: "one thread"), each share first-touched by the
 * thread that reads it. A header's figure is the median of BENCH_PROBE_PASSES passes after a
 * warm-up pass; a bound's is the median of the passes run next to the op it judges
 * (bench_interleaved, or one pass before each decode step). Bytes are those of the arrays read
 * and written (triad: three arrays).
 */
#define BENCH_PROBE_MIB 256
#define BENCH_PROBE_PASSES 7

typedef struct bench_limits {
    double read_gbs_1;   /* read bandwidth, one thread */
    double read_gbs;     /* read bandwidth, all threads */
    double read_gbs_min, read_gbs_max; /* the slowest and fastest of read_gbs's passes */
    double triad_gbs;    /* a = b + s*c, bytes of all three arrays, all threads */
    double fp32_gflops;  /* FMA peak, all threads */
    double bf16_gflops;  /* native bf16 dot peak, all threads; the FMA peak where the kernel
                            level has no bf16 dot (bf16 is widened and multiplied on the FMAs) */
    double bf16_tiles_gflops; /* AMX tiles' bf16 peak, all threads, where the kernels use them
                                 (bf16 products of more than 16 rows); else 0 */
} bench_limits;

/* Bandwidth only (read, all threads, the median of BENCH_PROBE_PASSES passes), in GB/s. */
double bench_read_gbs(void);
/* Everything. */
void bench_measure_limits(bench_limits *L);
/* Parts of it, for benchmarks that quote only these: read bandwidth (all threads and one), and
 * the FMA and vdpbf16ps peaks. */
void bench_measure_read(bench_limits *L);
void bench_measure_peaks(bench_limits *L);
/* The triad bandwidth alone (GB/s, the median of BENCH_PROBE_PASSES passes). */
double bench_triad_gbs(void);
/* A probe kept across passes (its arrays allocated and first-touched once): NULL when out of
 * memory. bench_probe_pass runs one pass on all the pool's threads and returns its GB/s. */
typedef struct bench_probe bench_probe;
bench_probe *bench_probe_create(bool triad);
double bench_probe_pass(bench_probe *p);
void bench_probe_free(bench_probe *p);
/*
 * This VM's memory bandwidth drifts with its neighbours from one tenth of a second to the next,
 * so a memory-bound figure is measured interleaved with its limit: `reps` times the probe (read,
 * or triad) then the op, each pair giving a fraction of the bandwidth of that moment. Returns the
 * median fraction; *op_ms gets the median op time and *gbs the median probe bandwidth. Short
 * ops run `inner` times per pair (op_bytes is per call).
 */
double bench_interleaved(void (*op)(void *), void *user, double op_bytes, bool triad, int reps,
                         int inner, double *op_ms, double *gbs);

#endif

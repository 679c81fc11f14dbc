/*
 * Compile-only devices in `ember bench` (tpu-aot:TOPOLOGY): nothing runs there, so a benchmark
 * compiles its programs for the TPU and reports what XLA says of them — flops, bytes accessed,
 * the roofline time at the chip's published peak and bandwidth, peak memory against the chip's
 * HBM — plus a per-program launch and device-to-host sync overhead measured on a device that
 * does run (XLA's CPU plugin, xla:0) in the same run, or given on the command line.
 */
#ifndef EMBER_BENCH_AOT_H
#define EMBER_BENCH_AOT_H

#include <stdbool.h>

#include "ember/ember.h"

typedef struct bench_aot_overhead {
    double launch_us; /* per program launched (Ember's dispatch + PJRT execute of a tiny
                         program) */
    double sync_us;   /* per device -> host read that waits for the device (over a launch) */
    char source[160]; /* where the figures come from */
} bench_aot_overhead;

/* Fills o: the given values where >= 0, else measured on xla:0 (0 with a note when there is
 * no XLA CPU plugin). */
void bench_aot_overhead_get(double launch_us, double sync_us, bench_aot_overhead *o);

/* Prints the device: topology, chip figures and their source, the plugin, the overheads. */
void bench_aot_header(em_device *d, const bench_aot_overhead *o, bool json);

/* What the launches between bench_aot_begin and bench_aot_end would cost. */
typedef struct bench_aot_sample {
    em_pjrt_projection p;
    double projected_s; /* roofline + launches * launch + syncs * sync */
} bench_aot_sample;
void bench_aot_begin(em_device *d);
void bench_aot_end(em_device *d, const bench_aot_overhead *o, int syncs, bench_aot_sample *s);

/* The decode step of m (on compile-only device d) compiled at each batch and projected: XLA's
 * flops and bytes, roofline ms and tokens/s, peak memory, whether the weights fit the chip. */
int bench_aot_decode(em_ctx *c, em_model *m, em_device *d, const int64_t *batches, int n,
                     const bench_aot_overhead *o, bool json);

#endif

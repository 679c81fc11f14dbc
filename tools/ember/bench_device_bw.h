/* An accelerator's own memory bandwidth, measured on it (bench_device_bw.c). */
#ifndef EMBER_BENCH_DEVICE_BW_H
#define EMBER_BENCH_DEVICE_BW_H

/* GB/s (bytes read plus written) of an element-wise op over 512 MiB on the PJRT device `name`
 * (cuda:0, tpu:0), the median of 7 runs. 0 for the CPU, for PJRT devices whose platform is the
 * host's CPU (xla:0: bench_read_gbs is their limit), for compile-only devices and on any error. */
double bench_device_gbs(const char *name);

#endif

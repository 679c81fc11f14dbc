/*
 * Lab benchmark of the quantized linear kernels (not a test; run by hand):
 *
 *   lab_quant [threads T] [type q4_1|q4_0|q8_0|q4_k|q6_k|...] [shape N K] [m 1,16,64,512]
 *
 * For each weight type and shape: x [M, K] f32 @ w [N, K]^T with w quantized, timed per call
 * (best of many; weights rotated over copies of 256 MB in all so that M = 1 reads them from
 * DRAM, as decode does), next to the machine's DRAM read bandwidth measured the same way. M = 1
 * is reported as GB/s of quantized bytes and as a fraction of that bandwidth; larger M as
 * multiply-adds per second (a prefill's compute rate).
 *
 * The machine is shared: every call is timed on its own, by the wall clock and by the thread's
 * CPU time (single-threaded runs), and the best is kept. Memory-bound figures are only reliable
 * in quiet wall time.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu.h"
#include "bench/probe.h"
#include "ember/ember.h"

static double clock_of(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Random blocks with finite, small f16 scales at the type's scale offsets. */
static void fill_blocks(uint8_t *p, size_t nblocks, em_dtype t, unsigned seed) {
    size_t bb = em_dtype_block_bytes(t);
    srand(seed);
    for (size_t i = 0; i < nblocks * bb; i++) p[i] = (uint8_t)rand();
    uint16_t d = em_f32_to_f16(0.01f);
    for (size_t b = 0; b < nblocks; b++) {
        uint8_t *q = p + b * bb;
        if (t == EM_Q6_K) {
            memcpy(q + 208, &d, 2);
        } else {
            memcpy(q, &d, 2);
            if (t == EM_Q4_1 || t == EM_Q5_1 || t == EM_Q4_K || t == EM_Q5_K) memcpy(q + 2, &d, 2);
        }
    }
}

typedef struct best {
    double wall, cpu;
} best;

static void keep(best *b, double w, double c) {
    if (w < b->wall) b->wall = w;
    if (c < b->cpu) b->cpu = c;
}

/* The machine's read bandwidth over `bytes`-sized buffers rotated through `pool` bytes. */
static double read_gbs(size_t bytes, size_t pool, int reps) {
    size_t n = pool / sizeof(float), per = bytes / sizeof(float);
    float *buf = malloc(pool);
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 7);
    best b = {1e9, 1e9};
    volatile float sink = 0;
    size_t at = 0;
    const em_probe_isa *probe = em_probe_isa_get(); /* the kernels' instruction set */
    for (int r = 0; r < reps; r++) {
        if (at + per > n) at = 0;
        double w0 = clock_of(CLOCK_MONOTONIC), c0 = clock_of(CLOCK_THREAD_CPUTIME_ID);
        sink += probe->read(buf + at, per);
        keep(&b, clock_of(CLOCK_MONOTONIC) - w0, clock_of(CLOCK_THREAD_CPUTIME_ID) - c0);
        at += per;
    }
    free(buf);
    return (double)bytes / b.wall / 1e9;
}

static void run(em_ctx *c, em_dtype t, int64_t n, int64_t k, const int64_t *ms, int n_ms,
                double bw) {
    size_t wbytes = em_dtype_nbytes(t, n * k);
    int copies = (int)(((size_t)256 << 20) / wbytes);
    if (copies < 1) copies = 1;
    if (copies > 64) copies = 64;
    em_tensor *w[64];
    for (int i = 0; i < copies; i++) {
        uint8_t *p = malloc(wbytes);
        fill_blocks(p, wbytes / em_dtype_block_bytes(t), t, (unsigned)i + 1);
        w[i] = em_from_host(c, t, EM_SHAPE(n, k), p);
        free(p);
    }
    for (int mi = 0; mi < n_ms; mi++) {
        int64_t m = ms[mi];
        em_tensor *x = em_randn(c, EM_F32, EM_SHAPE(m, k), 7, 0, 1);
        best b = {1e9, 1e9};
        int reps = m <= 16 ? 200 : 20;
        for (int r = 0; r < reps; r++) {
            em_scope_push(c);
            double w0 = clock_of(CLOCK_MONOTONIC), c0 = clock_of(CLOCK_PROCESS_CPUTIME_ID);
            em_tensor *y = em_linear(c, x, w[r % copies], NULL);
            em_tensor_data(c, y);
            keep(&b, clock_of(CLOCK_MONOTONIC) - w0,
                 (clock_of(CLOCK_PROCESS_CPUTIME_ID) - c0) / em_num_threads());
            em_scope_pop(c);
        }
        double macs = (double)m * n * k;
        printf("%-5s N=%-5lld K=%-5lld M=%-4lld %9.1f us (cpu %9.1f us)  %6.1f GB/s",
               em_dtype_name(t), (long long)n, (long long)k, (long long)m, b.wall * 1e6,
               b.cpu * 1e6, (double)wbytes / b.wall / 1e9);
        if (m == 1)
            printf("  %5.0f%% of the read bandwidth", 100.0 * (double)wbytes / b.wall / 1e9 / bw);
        else
            printf("  %6.1f GMAC/s (cpu time %6.1f)", macs / b.wall / 1e9, macs / b.cpu / 1e9);
        printf("\n");
        fflush(stdout);
    }
    if (em_ctx_status(c)) printf("error: %s\n", em_ctx_error(c)->message);
}

int main(int argc, char **argv) {
    em_ctx *c = em_ctx_create();
    em_dtype types[8] = {EM_Q4_1, EM_Q8_0, EM_Q4_0, EM_Q4_K, EM_Q6_K};
    int n_types = 5;
    int64_t shapes[4][2] = {{1536, 576}, {4096, 4096}}, ms[8] = {1, 16, 64, 512};
    int n_shapes = 2, n_ms = 4;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "threads") && i + 1 < argc) em_set_num_threads(atoi(argv[++i]));
        else if (!strcmp(argv[i], "type") && i + 1 < argc && em_dtype_parse(argv[i + 1], &types[0]))
            n_types = 1, i++;
        else if (!strcmp(argv[i], "shape") && i + 2 < argc) {
            shapes[0][0] = atoll(argv[i + 1]);
            shapes[0][1] = atoll(argv[i + 2]);
            n_shapes = 1;
            i += 2;
        } else if (!strcmp(argv[i], "m") && i + 1 < argc) {
            n_ms = 0;
            for (char *q = argv[++i]; *q && n_ms < 8;) {
                char *e;
                ms[n_ms++] = strtoll(q, &e, 10);
                q = *e == ',' ? e + 1 : e;
            }
        }
    }
    double bw = read_gbs((size_t)8 << 20, (size_t)512 << 20, 60);
    printf("read bandwidth %.1f GB/s (one thread, the probe of the kernels' instruction set, best "
           "of 60 reads of 8 MB); %d threads\n", bw,
           em_num_threads());
    for (int ti = 0; ti < n_types; ti++)
        for (int s = 0; s < n_shapes; s++) run(c, types[ti], shapes[s][0], shapes[s][1], ms, n_ms, bw);
    em_ctx_free(c);
    return 0;
}

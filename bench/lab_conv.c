/*
 * Lab timing of conv2d's two CPU engines, the direct kernel and the implicit GEMM (not a test;
 * run by hand):
 *
 *   lab_conv [REPS] [f32|bf16|f16] [nobias] [old] [N,C,H,W[,O[,K[,S]]] ...]
 *
 * `old`: the GEMM engine against itself as it was before the conv-pack change (BF16X2 panels
 * gathered by rows, then packed: EMBER_CONV_GATHER=rows) instead of against the direct kernel.
 *
 * Each shape (default: SD 1.5's 3x3 resnet convs at 512, batch 2, padding K/2, stride S, O
 * output channels, f32, with a bias) is timed REPS times (default 5) with EMBER_CONV_ENGINE=direct and =gemm
 * interleaved, so that both see the same load; the best wall and CPU time of each, their GFLOP/s
 * and the fraction of the FP32 FMA peak measured in the same run (before and after the shapes,
 * by the probes of the kernel level in use).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/probe.h"
#include "core/threadpool.h"
#include "ember/ember.h"

static double clock_of(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct peak_job {
    double flops[64];
} peak_job;

static void peak_each(void *user, int tid, int nthr) {
    (void)nthr;
    peak_job *j = user;
    j->flops[tid < 64 ? tid : 63] = em_probe_isa_get()->fma(5000000L);
}

/* Best of 3: GFLOP/s per wall second and per CPU second of each thread. */
static void peak(double *wall, double *cpu) {
    *wall = *cpu = 0;
    for (int r = 0; r < 3; r++) {
        peak_job j = {{0}};
        double w = clock_of(CLOCK_MONOTONIC), c = clock_of(CLOCK_PROCESS_CPUTIME_ID);
        em_parallel_each(peak_each, &j);
        w = clock_of(CLOCK_MONOTONIC) - w;
        c = (clock_of(CLOCK_PROCESS_CPUTIME_ID) - c) / em_num_threads();
        double f = 0;
        for (int i = 0; i < em_num_threads() && i < 64; i++) f += j.flops[i];
        if (f / w / 1e9 > *wall) *wall = f / w / 1e9;
        if (f / c / 1e9 > *cpu) *cpu = f / c / 1e9;
    }
}

typedef struct shape {
    int64_t n, c, h, w, o, k, s;
} shape;

/* One call: best wall and CPU seconds updated. */
static int run(em_ctx *ctx, em_tensor *x, em_tensor *w, em_tensor *b, const shape *s,
               double *wall, double *cpu) {
    em_scope_push(ctx);
    em_conv2d_params p = em_conv2d_default_params();
    p.padding[0] = p.padding[1] = s->k / 2;
    p.stride[0] = p.stride[1] = s->s;
    double t0 = clock_of(CLOCK_MONOTONIC), c0 = clock_of(CLOCK_PROCESS_CPUTIME_ID);
    em_tensor *y = em_conv2d(ctx, x, w, b, &p);
    int ok = y && em_device_sync(ctx, em_ctx_device(ctx)) == EM_OK;
    double t = clock_of(CLOCK_MONOTONIC) - t0;
    double c = (clock_of(CLOCK_PROCESS_CPUTIME_ID) - c0) / em_num_threads();
    em_scope_pop(ctx);
    if (t < *wall) *wall = t;
    if (c < *cpu) *cpu = c;
    return ok;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    shape shapes[16] = {{2, 320, 64, 64, 320, 3, 1},
                        {2, 640, 32, 32, 640, 3, 1},
                        {2, 1280, 16, 16, 1280, 3, 1},
                        {2, 1280, 8, 8, 1280, 3, 1}};
    int n = 4, nshapes = 0;
    em_dtype dt = EM_F32;
    bool with_bias = true, old = false;
    for (int i = 2; i < argc && nshapes < 16; i++) {
        if (!strcmp(argv[i], "bf16") || !strcmp(argv[i], "f16") || !strcmp(argv[i], "f32")) {
            dt = argv[i][0] == 'b' ? EM_BF16 : argv[i][1] == '1' ? EM_F16 : EM_F32;
            continue;
        }
        if (!strcmp(argv[i], "nobias")) {
            with_bias = false;
            continue;
        }
        if (!strcmp(argv[i], "old")) {
            old = true;
            continue;
        }
        shape s = {0};
        int got = sscanf(argv[i], "%ld,%ld,%ld,%ld,%ld,%ld,%ld", &s.n, &s.c, &s.h, &s.w, &s.o,
                         &s.k, &s.s);
        if (got < 4) {
            fprintf(stderr, "lab_conv: shape '%s' is not N,C,H,W[,O[,K[,S]]]\n", argv[i]);
            return 2;
        }
        if (got < 5) s.o = s.c;
        if (got < 6) s.k = 3;
        if (got < 7) s.s = 1;
        shapes[nshapes++] = s;
    }
    if (nshapes) n = nshapes;
    em_ctx *ctx = em_ctx_create();
    double pw0, pc0, pw1, pc1;
    peak(&pw0, &pc0);
    printf("FP32 FMA peak before: %.1f GFLOP/s wall, %.1f per CPU second; %d threads; %s%s\n",
           pw0, pc0, em_num_threads(), em_dtype_name(dt), with_bias ? "" : ", no bias");
    printf("%-26s %8s %8s %7s %7s %8s %8s %7s %7s %6s\n", "[N,C,H,W] O kxk /s",
           old ? "old ms" : "dir ms", old ? "old cpu" : "dir cpu", "GF/s", "of pk", "gemm ms",
           "gemm cpu", "GF/s", "of pk", "ratio");
    for (int i = 0; i < n; i++) {
        const shape *s = &shapes[i];
        int64_t ho = (s->h + 2 * (s->k / 2) - s->k) / s->s + 1;
        int64_t wo = (s->w + 2 * (s->k / 2) - s->k) / s->s + 1;
        double fl = 2.0 * (double)(s->n * s->o * ho * wo) * (double)(s->c * s->k * s->k);
        em_scope_push(ctx);
        em_tensor *x = em_rand(ctx, dt, EM_SHAPE(s->n, s->c, s->h, s->w), 21, -1, 1);
        em_tensor *w = em_rand(ctx, dt, EM_SHAPE(s->o, s->c, s->k, s->k), 22, -1, 1);
        em_tensor *b = with_bias ? em_rand(ctx, dt, EM_SHAPE(s->o), 23, -1, 1) : NULL;
        double wall[2] = {1e30, 1e30}, cpu[2] = {1e30, 1e30};
        int ok = x && w && (b || !with_bias);
        for (int r = 0; ok && r <= reps; r++)
            for (int e = 0; e < 2 && ok; e++) {
                setenv("EMBER_CONV_ENGINE", e || old ? "gemm" : "direct", 1);
                if (old && !e)
                    setenv("EMBER_CONV_GATHER", "rows", 1);
                else
                    unsetenv("EMBER_CONV_GATHER");
                double dw = 1e30, dc = 1e30;
                ok = run(ctx, x, w, b, s, &dw, &dc);
                if (r == 0) continue; /* warm-up */
                if (dw < wall[e]) wall[e] = dw;
                if (dc < cpu[e]) cpu[e] = dc;
            }
        em_scope_pop(ctx);
        if (!ok) {
            fprintf(stderr, "lab_conv: %s\n", em_ctx_error(ctx)->message);
            return 1;
        }
        char name[64];
        snprintf(name, sizeof name, "[%ld,%ld,%ld,%ld] %ld %ldx%ld /%ld", (long)s->n, (long)s->c,
                 (long)s->h, (long)s->w, (long)s->o, (long)s->k, (long)s->k, (long)s->s);
        printf("%-26s %8.2f %8.2f %7.1f %6.1f%% %8.2f %8.2f %7.1f %6.1f%% %5.2fx\n", name,
               wall[0] * 1e3, cpu[0] * 1e3, fl / wall[0] / 1e9, 100 * fl / wall[0] / 1e9 / pw0,
               wall[1] * 1e3, cpu[1] * 1e3, fl / wall[1] / 1e9, 100 * fl / wall[1] / 1e9 / pw0,
               wall[0] / wall[1]);
        fflush(stdout);
    }
    peak(&pw1, &pc1);
    printf("FP32 FMA peak after: %.1f GFLOP/s wall, %.1f per CPU second\n", pw1, pc1);
    em_ctx_free(ctx);
    return 0;
}

/*
 * Machine-limit probes: STREAM-style read and triad bandwidth over arrays far larger than the
 * caches, and the FP32 FMA and BF16 dot peaks. The arrays come from the CPU device's allocator
 * (the same huge-page-backed memory tensors get), so the limit and the kernels it judges see the
 * same TLB behaviour.
 */
#include "bench_limits.h"

#include <stdlib.h>

#include "backends/cpu/cpu.h"
#include "bench/probe.h"
#include "bench_util.h"
#include "ember/ember.h"

typedef struct probe_job {
    float *a, *b, *c;
    size_t n;
    int kind; /* 0 read, 1 triad, 2 fma, 3 bf16 dot, 4 bf16 tiles */
    int64_t iters;
    double flops[64];
} probe_job;

static void probe_each(void *user, int tid, int nt) {
    probe_job *j = user;
    size_t lo = j->n * (size_t)tid / (size_t)nt, hi = j->n * (size_t)(tid + 1) / (size_t)nt;
    const em_probe_isa *p = em_probe_isa_get();
    switch (j->kind) {
    case 0: {
        volatile float s = p->read(j->a + lo, hi - lo);
        (void)s;
        break;
    }
    case 1: p->triad(j->a + lo, j->b + lo, j->c + lo, 1.5f, hi - lo); break;
    case 2: j->flops[tid < 64 ? tid : 63] = p->fma(j->iters); break;
    case 3: j->flops[tid < 64 ? tid : 63] = p->bf16dot ? p->bf16dot(j->iters) : 0; break;
    default: j->flops[tid < 64 ? tid : 63] = p->bf16tiles ? p->bf16tiles(j->iters) : 0;
    }
}

static void run_all(void *user) { em_parallel_each(probe_each, user); }
static void run_one(void *user) { probe_each(user, 0, 1); }

static double best_s(void (*fn)(void *), void *user, int reps) {
    double best = 1e30;
    fn(user); /* first touch and warm-up */
    for (int i = 0; i < reps; i++) {
        double t0 = bench_now();
        fn(user);
        double t = bench_now() - t0;
        if (t < best) best = t;
    }
    return best;
}

static void bandwidth(bench_limits *L, bool triad, bool single) {
    em_ctx *c = em_ctx_create();
    size_t n = (size_t)128 << 20; /* 512 MiB of floats per array */
    probe_job j = {0};
    em_tensor *ta = em_full(c, EM_F32, EM_SHAPE((int64_t)n), 1.0);
    em_tensor *tb = triad ? em_full(c, EM_F32, EM_SHAPE((int64_t)n), 2.0) : NULL;
    em_tensor *tc = triad ? em_full(c, EM_F32, EM_SHAPE((int64_t)n), 3.0) : NULL;
    j.a = em_tensor_data(c, ta);
    j.b = tb ? em_tensor_data(c, tb) : NULL;
    j.c = tc ? em_tensor_data(c, tc) : NULL;
    j.n = triad ? n / 2 : n;
    if (j.a && (!triad || (j.b && j.c))) {
        if (triad) {
            j.kind = 1;
            L->triad_gbs = 3.0 * (double)j.n * 4 / best_s(run_all, &j, 5) / 1e9;
        } else {
            j.kind = 0;
            L->read_gbs = (double)n * 4 / best_s(run_all, &j, 5) / 1e9;
            if (single) L->read_gbs_1 = (double)n * 4 / best_s(run_one, &j, 3) / 1e9;
        }
    }
    em_ctx_free(c);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_interleaved(void (*op)(void *), void *user, double op_bytes, bool triad, int reps,
                         int inner, double *op_ms, double *gbs) {
    em_ctx *c = em_ctx_create();
    size_t n = (size_t)64 << 20; /* 256 MiB per array */
    probe_job j = {0};
    em_tensor *ta = em_full(c, EM_F32, EM_SHAPE((int64_t)n), 1.0);
    em_tensor *tb = triad ? em_full(c, EM_F32, EM_SHAPE((int64_t)n), 2.0) : NULL;
    em_tensor *tc = triad ? em_full(c, EM_F32, EM_SHAPE((int64_t)n), 3.0) : NULL;
    j.a = em_tensor_data(c, ta);
    j.b = tb ? em_tensor_data(c, tb) : NULL;
    j.c = tc ? em_tensor_data(c, tc) : NULL;
    j.n = n;
    j.kind = triad ? 1 : 0;
    double probe_bytes = (triad ? 3.0 : 1.0) * (double)n * 4;
    if (reps > 64) reps = 64;
    double frac[64], ms[64], bw[64];
    run_all(&j); /* first touch */
    op(user);
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        run_all(&j);
        double t1 = bench_now();
        for (int k = 0; k < (inner > 0 ? inner : 1); k++) op(user);
        double t2 = bench_now(), per = (t2 - t1) / (inner > 0 ? inner : 1);
        bw[r] = probe_bytes / (t1 - t0) / 1e9;
        ms[r] = per * 1e3;
        frac[r] = (op_bytes / per) / (probe_bytes / (t1 - t0));
    }
    qsort(frac, (size_t)reps, sizeof *frac, cmp_d);
    qsort(ms, (size_t)reps, sizeof *ms, cmp_d);
    qsort(bw, (size_t)reps, sizeof *bw, cmp_d);
    *op_ms = ms[reps / 2];
    *gbs = bw[reps / 2];
    em_ctx_free(c);
    return frac[reps / 2];
}

double bench_read_gbs(void) {
    bench_limits L = {0};
    bandwidth(&L, false, false);
    return L.read_gbs;
}

double bench_triad_gbs(void) {
    bench_limits L = {0};
    bandwidth(&L, true, false);
    return L.triad_gbs;
}

void bench_measure_read(bench_limits *L) { bandwidth(L, false, true); }

void bench_measure_peaks(bench_limits *L) {
    int nt = em_num_threads();
    for (int kind = 2; kind <= 3; kind++) {
        probe_job f = {0};
        f.kind = kind;
        f.iters = 2000000;
        double t = best_s(run_all, &f, 3);
        double flops = 0;
        for (int i = 0; i < nt && i < 64; i++) flops += f.flops[i];
        if (kind == 2) L->fp32_gflops = flops / t / 1e9;
        else L->bf16_gflops = flops / t / 1e9;
    }
    /* without a native bf16 dot, bf16 products run on the FMA units (bf16 -> f32 by a shift) */
    if (!em_probe_isa_get()->bf16dot) L->bf16_gflops = L->fp32_gflops;
    /* with AMX, bf16 products of more than 16 rows run on the tiles (gemm.c) */
    if (em_probe_isa_get()->bf16tiles) {
        probe_job f = {0};
        f.kind = 4;
        f.iters = 50000;
        double t = best_s(run_all, &f, 3), flops = 0;
        for (int i = 0; i < nt && i < 64; i++) flops += f.flops[i];
        L->bf16_tiles_gflops = flops / t / 1e9;
    }
}

void bench_measure_limits(bench_limits *L) {
    bench_measure_read(L);
    bandwidth(L, true, false);
    bench_measure_peaks(L);
}

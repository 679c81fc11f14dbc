/*
 * Machine-limit probes: STREAM-style read and triad bandwidth over arrays far larger than the
 * caches (one definition, bench_limits.h), and the FP32 FMA and BF16 dot peaks. The arrays come from the CPU device's allocator
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
    int kind; /* 0 read, 1 triad, 2 fma, 3 bf16 dot, 4 bf16 tiles, 5 first touch */
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
    case 4: j->flops[tid < 64 ? tid : 63] = p->bf16tiles ? p->bf16tiles(j->iters) : 0; break;
    default:
        for (size_t i = lo; i < hi; i++) {
            j->a[i] = 1.0f;
            if (j->b) j->b[i] = 2.0f, j->c[i] = 3.0f;
        }
    }
}

static void run_all(void *user) { em_parallel_each(probe_each, user); }
static void run_one(void *user) { probe_each(user, 0, 1); }

static double best_s(void (*fn)(void *), void *user, int reps) {
    double best = 1e30;
    fn(user); /* warm-up */
    for (int i = 0; i < reps; i++) {
        double t0 = bench_now();
        fn(user);
        double t = bench_now() - t0;
        if (t < best) best = t;
    }
    return best;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct bench_probe {
    em_ctx *c;
    probe_job j;
};

bench_probe *bench_probe_create(bool triad) {
    bench_probe *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->c = em_ctx_create();
    size_t n = (size_t)BENCH_PROBE_MIB << 18;
    em_tensor *t[3] = {0};
    for (int k = 0; k < (triad ? 3 : 1); k++) t[k] = em_empty(p->c, EM_F32, EM_SHAPE((int64_t)n));
    p->j.a = t[0] ? em_tensor_data(p->c, t[0]) : NULL;
    p->j.b = t[1] ? em_tensor_data(p->c, t[1]) : NULL;
    p->j.c = t[2] ? em_tensor_data(p->c, t[2]) : NULL;
    p->j.n = n;
    if (!p->j.a || (triad && (!p->j.b || !p->j.c))) {
        bench_probe_free(p);
        return NULL;
    }
    p->j.kind = 5; /* each share first-touched by the thread that reads it */
    run_all(&p->j);
    p->j.kind = triad ? 1 : 0;
    return p;
}

static double probe_bytes(const bench_probe *p) {
    return (p->j.kind == 1 ? 3.0 : 1.0) * (double)p->j.n * 4;
}

double bench_probe_pass(bench_probe *p) {
    double t0 = bench_now();
    run_all(&p->j);
    return probe_bytes(p) / (bench_now() - t0) / 1e9;
}

void bench_probe_free(bench_probe *p) {
    if (!p) return;
    em_ctx_free(p->c);
    free(p);
}

/* The header figure: the median of BENCH_PROBE_PASSES passes after a warm-up; *lo and *hi get
 * the slowest and fastest. With `single` the calling thread alone (fewer passes: the header's
 * second figure). -1 when out of memory. */
static double median_passes(bool triad, bool single, double *lo, double *hi) {
    bench_probe *p = bench_probe_create(triad);
    if (!p) return -1;
    double g[BENCH_PROBE_PASSES];
    int n = single ? 3 : BENCH_PROBE_PASSES;
    bench_probe_pass(p);
    for (int i = 0; i < n; i++) {
        if (single) {
            double t0 = bench_now();
            run_one(&p->j);
            g[i] = probe_bytes(p) / (bench_now() - t0) / 1e9;
        } else {
            g[i] = bench_probe_pass(p);
        }
    }
    bench_probe_free(p);
    qsort(g, (size_t)n, sizeof *g, cmp_d);
    if (lo) *lo = g[0];
    if (hi) *hi = g[n - 1];
    return g[n / 2];
}

double bench_interleaved(void (*op)(void *), void *user, double op_bytes, bool triad, int reps,
                         int inner, double *op_ms, double *gbs) {
    bench_probe *p = bench_probe_create(triad);
    if (!p) {
        *op_ms = -1;
        *gbs = -1;
        return -1;
    }
    if (reps > 64) reps = 64;
    if (reps < 1) reps = 1;
    double frac[64], ms[64], bw[64];
    bench_probe_pass(p);
    op(user);
    for (int r = 0; r < reps; r++) {
        bw[r] = bench_probe_pass(p);
        double t1 = bench_now();
        for (int k = 0; k < (inner > 0 ? inner : 1); k++) op(user);
        double per = (bench_now() - t1) / (inner > 0 ? inner : 1);
        ms[r] = per * 1e3;
        frac[r] = (op_bytes / per) / (bw[r] * 1e9);
    }
    qsort(frac, (size_t)reps, sizeof *frac, cmp_d);
    qsort(ms, (size_t)reps, sizeof *ms, cmp_d);
    qsort(bw, (size_t)reps, sizeof *bw, cmp_d);
    *op_ms = ms[reps / 2];
    *gbs = bw[reps / 2];
    bench_probe_free(p);
    return frac[reps / 2];
}

double bench_read_gbs(void) { return median_passes(false, false, NULL, NULL); }

double bench_triad_gbs(void) { return median_passes(true, false, NULL, NULL); }

void bench_measure_read(bench_limits *L) {
    L->read_gbs = median_passes(false, false, &L->read_gbs_min, &L->read_gbs_max);
    L->read_gbs_1 = median_passes(false, true, NULL, NULL);
}

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
    L->triad_gbs = bench_triad_gbs();
    bench_measure_peaks(L);
}

/*
 * Lab benchmark of the CPU matmul/linear kernels (not a test; run by hand). It measures, in the
 * same run, the machine's limits (FP32 FMA and BF16 dot peak on all pool threads, DRAM read
 * bandwidth), OpenBLAS sgemm when built with it, and Ember's kernels:
 *
 *   lab_gemm [peak] [mm] [mmsize S] [linear] [shape M N K dtype [packed|dot]] [train [V]] ...
 *
 * "mm": 2048^3 matmul, f32 and bf16. "linear": decode-shaped linear, x [M, 2048] @ w[N, 2048]^T
 * bf16 for M = 1, 4, 16, 64 and N = 768, 2048, with enough weight copies (rotated, 512 MB in
 * all) that every call reads its weights from DRAM (LAB_HOT=1: one copy, kernel speed only).
 * "train": the forward, input-gradient and weight-gradient products of a training step's linear
 * layers at the Qwen3-0.6B shape (512 tokens; the LM head a quarter of the vocabulary, or V
 * columns: 151936 is the whole of it).
 *
 * The machine is shared, so every call is timed on its own and the best is kept, twice: by the
 * wall clock, and by the process's CPU time divided by the thread count (which does not count the
 * slices other processes take from us, but does count our own spinning, so it never flatters).
 * Compute-bound figures are reliable in CPU time; memory-bound ones only in quiet wall time.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/gemm.h"
#include "bench/probe.h"
#include "ember/ember.h"

#ifdef LAB_OPENBLAS
#include <cblas.h>
void openblas_set_num_threads(int);
char *openblas_get_corename(void);
#endif

static double clock_of(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct timing {
    double wall, cpu; /* best seconds per call */
} timing;

/* Times `reps` samples of `inner` calls of fn (after one warm-up call); best per call. Samples
 * of a few ms at least: the CPU time of other threads is accounted at scheduler ticks. */
static timing measure(void (*fn)(void *), void *user, int reps, int inner) {
    timing best = {1e30, 1e30};
    fn(user);
    for (int r = 0; r < reps; r++) {
        double w = clock_of(CLOCK_MONOTONIC), c = clock_of(CLOCK_PROCESS_CPUTIME_ID);
        for (int i = 0; i < inner; i++) fn(user);
        c = (clock_of(CLOCK_PROCESS_CPUTIME_ID) - c) / em_num_threads() / inner;
        w = (clock_of(CLOCK_MONOTONIC) - w) / inner;
        if (w < best.wall) best.wall = w;
        if (c < best.cpu) best.cpu = c;
    }
    return best;
}

static double peak_fma, peak_dot, dram_bw; /* GFLOP/s (CPU time), GB/s (best wall) */
static struct bw_job *probe;                /* the DRAM read probe, kept for re-measuring */

/* ---- machine limits ---- */

#define PEAK_ITERS 10000000L

/* The peaks and the read bandwidth come from the probes of the kernel level in use (probe.h), so
 * that this runs on every CPU and judges each level by its own instruction set. */
typedef struct peak_job {
    double flops[64];
    bool dot;
} peak_job;

static void peak_each(void *user, int tid, int nthr) {
    (void)nthr;
    peak_job *j = user;
    const em_probe_isa *p = em_probe_isa_get();
    double f = j->dot ? (p->bf16dot ? p->bf16dot(PEAK_ITERS / 2) : 0) : p->fma(PEAK_ITERS / 2);
    j->flops[tid < 64 ? tid : 63] = f;
}

static void run_peak(void *user) { em_parallel_each(peak_each, user); }

typedef struct bw_job {
    const float *p;
    int64_t n, chunk, next; /* floats in all, per call, start of the next call */
    double sums[64];
} bw_job;

static void bw_body(void *user, int64_t b, int64_t e, int tid) {
    bw_job *j = user;
    j->sums[tid < 64 ? tid : 63] += em_probe_isa_get()->read(j->p + j->next + b * 64, (size_t)(e - b) * 64);
}

static void run_bw(void *user) {
    bw_job *j = user;
    em_parallel_for(j->chunk / 64, 1024, bw_body, j);
    j->next = (j->next + j->chunk) % j->n;
}

static void measure_peak(void) {
    int nthr = em_num_threads();
    for (int d = 0; d < 2; d++) {
        peak_job j = {{0}, d == 1};
        if (d && !em_probe_isa_get()->bf16dot) break;
        timing t = measure(run_peak, &j, 3, 1);
        double flops = 0;
        for (int i = 0; i < nthr && i < 64; i++) flops += j.flops[i];
        double *peak = d ? &peak_dot : &peak_fma;
        *peak = flops / t.cpu / 1e9;
        printf("%s peak: %.0f GFLOP/s (CPU time), %.0f (wall)\n", d ? "BF16 dot" : "FP32 FMA", *peak,
               flops / t.wall / 1e9);
    }
    /* 64 MB per call (twice the L3) from a 1 GB buffer (Zen's L3 is a victim cache with no
     * strict LRU: a short rotation would find some lines still there) */
    int64_t n = (int64_t)1024 << 20 >> 2;
    float *p = aligned_alloc(64, (size_t)n * 4);
    if (!p) return;
    for (int64_t i = 0; i < n; i++) p[i] = 1.0f;
    static bw_job j;
    j = (bw_job){p, n, n / 16, 0, {0}};
    probe = &j;
    timing t = measure(run_bw, &j, 40, 1);
    dram_bw = (double)j.chunk * 4 / t.wall / 1e9;
    printf("DRAM read: %.1f GB/s (best wall), %d threads\n", dram_bw, nthr);
}

/* The DRAM read bandwidth now: the host's memory is shared and its bandwidth drifts, so each
 * memory-bound figure is compared with a measurement taken just before it. */
static double dram_now(void) {
    if (!probe) return dram_bw;
    timing t = measure(run_bw, probe, 12, 1);
    return (double)probe->chunk * 4 / t.wall / 1e9;
}

/* ---- helpers ---- */

static void fill(void *p, em_dtype dt, int64_t n, unsigned seed) {
    srand(seed);
    for (int64_t i = 0; i < n; i++) {
        float v = (float)rand() / (float)RAND_MAX - 0.5f;
        if (dt == EM_F32)
            ((float *)p)[i] = v;
        else if (dt == EM_BF16)
            ((uint16_t *)p)[i] = em_f32_to_bf16(v);
        else
            ((uint16_t *)p)[i] = em_f32_to_f16(v);
    }
}

typedef struct gemm_job {
    em_gemm_args g;
    const char *b0; /* first weight copy */
    size_t bcopy;   /* bytes between copies */
    int copies, next;
} gemm_job;

static void run_gemm(void *user) {
    gemm_job *j = user;
    j->g.b = j->b0 + (size_t)j->next * j->bcopy;
    j->next = (j->next + 1) % j->copies;
    em_gemm(&j->g);
}

static void report(const char *what, double flops, double bytes, timing t, double peak) {
    printf("%s: %8.1f us wall (%6.1f GFLOP/s, %5.1f GB/s), %8.1f us CPU (%6.1f GFLOP/s, %3.0f%% "
           "of peak)\n",
           what, t.wall * 1e6, flops / t.wall / 1e9, bytes / t.wall / 1e9, t.cpu * 1e6,
           flops / t.cpu / 1e9, peak > 0 ? 100 * flops / t.cpu / 1e9 / peak : 0);
}

/* ---- benchmarks ---- */

#ifdef LAB_OPENBLAS
typedef struct blas_job {
    int s;
    const float *a, *b;
    float *c;
} blas_job;

static void run_blas(void *user) {
    blas_job *j = user;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, j->s, j->s, j->s, 1.0f, j->a, j->s,
                j->b, j->s, 0.0f, j->c, j->s);
}
#endif

static void bench_mm(int64_t s, int reps) {
    double flops = 2.0 * (double)s * (double)s * (double)s;
    for (int d = 0; d < 2; d++) {
        em_dtype dt = d ? EM_BF16 : EM_F32;
        size_t es = em_dtype_size(dt), nb = (size_t)(s * s) * es;
        void *a = aligned_alloc(64, nb), *b = aligned_alloc(64, nb), *c = aligned_alloc(64, nb);
        fill(a, dt, s * s, 1);
        fill(b, dt, s * s, 2);
        gemm_job j = {{0}, b, 0, 1, 0};
        j.g.m = j.g.n = j.g.k = s, j.g.dtype = dt;
        j.g.a = a, j.g.a_rs = s, j.g.a_cs = 1;
        j.g.b_rs = s, j.g.b_cs = 1;
        j.g.c = c, j.g.ldc = s;
        char what[128];
        snprintf(what, sizeof what, "matmul %-4s %lld^3 ember   ", em_dtype_name(dt),
                 (long long)s);
        /* without a bf16 dot instruction bf16 runs on the FMA units: that peak bounds it */
        report(what, flops, 3.0 * (double)nb, measure(run_gemm, &j, reps, 1),
               d && peak_dot > 0 ? peak_dot : peak_fma);
#ifdef LAB_OPENBLAS
        if (dt == EM_F32) {
            openblas_set_num_threads(em_num_threads());
            blas_job bj = {(int)s, a, b, c};
            snprintf(what, sizeof what, "matmul f32  %lld^3 openblas", (long long)s);
            report(what, flops, 3.0 * (double)nb, measure(run_blas, &bj, reps, 1), peak_fma);
            printf("  (OpenBLAS core: %s)\n", openblas_get_corename());
        }
#endif
        free(a), free(b), free(c);
    }
}

/* x [m, k] @ w[n, k]^T, w from DRAM. engine: 0 auto, 1 packed, 2 dot. */
static void bench_linear(int64_t m, int64_t n, int64_t k, em_dtype dt, int engine) {
    size_t es = em_dtype_size(dt);
    size_t wbytes = (size_t)(n * k) * es;
    int copies = (int)((512u << 20) / wbytes) + 1; /* see measure_peak */
    if (getenv("LAB_HOT")) copies = 1;
    char *w = aligned_alloc(64, (wbytes + 63) / 64 * 64 * (size_t)copies);
    void *x = aligned_alloc(64, (size_t)(m * k) * es + 64);
    void *c = aligned_alloc(64, (size_t)(m * n) * 4 + 64);
    size_t stride = (wbytes + 63) / 64 * 64;
    for (int i = 0; i < copies; i++) fill(w + (size_t)i * stride, dt, n * k, 3 + (unsigned)i);
    fill(x, dt, m * k, 4);
    gemm_job j = {{0}, w, stride, copies, 0};
    j.g.m = m, j.g.n = n, j.g.k = k, j.g.dtype = dt;
    j.g.a = x, j.g.a_rs = k, j.g.a_cs = 1;
    j.g.b_rs = 1, j.g.b_cs = k;
    j.g.c = c, j.g.ldc = n;
    j.g.force_engine = engine;
    double flops = 2.0 * (double)m * (double)n * (double)k;
    double peak = dt == EM_BF16 && peak_dot > 0 ? peak_dot : peak_fma;
    int inner = (int)(0.01 / ((double)wbytes / 40e9 + flops / 200e9)) + 1;
    double bw = dram_now();
    timing t = measure(run_gemm, &j, 30, inner);
    char what[128];
    snprintf(what, sizeof what, "linear %-4s M=%-3lld N=%-5lld K=%lld %-6s", em_dtype_name(dt),
             (long long)m, (long long)n, (long long)k,
             engine == 1 ? "packed" : engine == 2 ? "dot" : "auto");
    report(what, flops, (double)wbytes, t, peak);
    double t_mem = bw > 0 ? (double)wbytes / (bw * 1e9) : 0;
    double t_comp = peak > 0 ? flops / (peak * 1e9) : 0;
    printf("    roofline %.1f us (%s-bound; DRAM read just before: %.1f GB/s): %.0f%% of it in wall "
           "time\n",
           fmax(t_mem, t_comp) * 1e6, t_mem > t_comp ? "memory" : "compute", bw,
           100 * fmax(t_mem, t_comp) / t.wall);
    free(w), free(x), free(c);
}

/* The three products of a linear layer's training step, f32 (C is reused between calls):
 * forward y = x w^T (x [t, k], w [n, k]), input gradient gx = gy w, weight gradient
 * gw = gy^T x. */
static void bench_train_shape(int64_t t, int64_t k, int64_t n) {
    float *x = aligned_alloc(64, (size_t)(t * k) * 4), *w = aligned_alloc(64, (size_t)(n * k) * 4);
    float *gy = aligned_alloc(64, (size_t)(t * n) * 4);
    fill(x, EM_F32, t * k, 1), fill(w, EM_F32, n * k, 2), fill(gy, EM_F32, t * n, 3);
    /* C is [t, n], [t, k] or [n, k] */
    int64_t most = t * n > t * k ? t * n : t * k;
    if (n * k > most) most = n * k;
    size_t cbytes = (size_t)most * 4;
    float *c = aligned_alloc(64, cbytes);
    double flops = 2.0 * (double)t * (double)k * (double)n;
    for (int which = 0; which < 3; which++) {
        gemm_job j = {{0}, NULL, 0, 1, 0};
        j.g.dtype = EM_F32;
        j.g.c = c;
        if (which == 0) { /* [t, k] x [k, n] with B = w^T */
            j.g.m = t, j.g.n = n, j.g.k = k, j.g.a = x, j.g.a_rs = k, j.g.a_cs = 1;
            j.b0 = (const char *)w, j.g.b_rs = 1, j.g.b_cs = k, j.g.ldc = n;
        } else if (which == 1) { /* [t, n] x [n, k] */
            j.g.m = t, j.g.n = k, j.g.k = n, j.g.a = gy, j.g.a_rs = n, j.g.a_cs = 1;
            j.b0 = (const char *)w, j.g.b_rs = k, j.g.b_cs = 1, j.g.ldc = k;
        } else { /* [n, t] (gy^T) x [t, k] */
            j.g.m = n, j.g.n = k, j.g.k = t, j.g.a = gy, j.g.a_rs = 1, j.g.a_cs = n;
            j.b0 = (const char *)x, j.g.b_rs = k, j.g.b_cs = 1, j.g.ldc = k;
        }
        char what[128];
        snprintf(what, sizeof what, "train %-7s T=%lld K=%lld N=%lld",
                 which == 0 ? "fwd" : which == 1 ? "grad_x" : "grad_w", (long long)t,
                 (long long)k, (long long)n);
        report(what, flops, 0, measure(run_gemm, &j, 5, 1), peak_fma);
    }
    free(x), free(w), free(gy), free(c);
}

int main(int argc, char **argv) {
    em_ctx *ctx = em_ctx_create();
    char feats[256];
    em_cpu_features_str(feats, sizeof feats);
    printf("cpu: %s; %d threads\n", feats, em_num_threads());
    measure_peak();
    bool all = argc < 2;
    for (int i = 1; i < argc || all; i++) {
        const char *w = all ? "all" : argv[i];
        if (all || !strcmp(w, "mm")) bench_mm(2048, 8);
        if (all || !strcmp(w, "linear")) {
            int64_t ms[] = {1, 4, 16, 64}, ns[] = {768, 2048};
            for (int a = 0; a < 2; a++)
                for (int b = 0; b < 4; b++) bench_linear(ms[b], ns[a], 2048, EM_BF16, 0);
        }
        if (!all && !strcmp(w, "mmsize") && i + 1 < argc) bench_mm(atoll(argv[++i]), 5);
        if (!all && !strcmp(w, "shape") && i + 4 < argc) {
            em_dtype dt;
            if (!em_dtype_parse(argv[i + 4], &dt)) dt = EM_F32;
            int engine = 0;
            if (i + 5 < argc && !strcmp(argv[i + 5], "packed")) engine = 1;
            if (i + 5 < argc && !strcmp(argv[i + 5], "dot")) engine = 2;
            bench_linear(atoll(argv[i + 1]), atoll(argv[i + 2]), atoll(argv[i + 3]), dt, engine);
            i += engine ? 5 : 4;
        }
        if (!all && !strcmp(w, "train")) { /* the Qwen3-0.6B step's shapes, seq 512 */
            int64_t vocab = 37984;
            if (i + 1 < argc && atoll(argv[i + 1]) > 0) vocab = atoll(argv[++i]);
            bench_train_shape(512, 1024, vocab);
            bench_train_shape(512, 1024, 3072);
            bench_train_shape(512, 3072, 1024);
        }
        if (all) break;
    }
    if (probe) free((void *)probe->p);
    em_ctx_free(ctx);
    return 0;
}

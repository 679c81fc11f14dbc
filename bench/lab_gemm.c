/*
 * Lab benchmark of the CPU matmul/linear kernels (not a test; run by hand). It measures, in the
 * same run, the machine's limits (FP32 FMA and BF16 dot peak on all pool threads, DRAM read
 * bandwidth), OpenBLAS sgemm when built with it, and Ember's kernels:
 *
 *   lab_gemm [peak] [mm] [linear] [shape M N K dtype [packed|dot]] ...
 *
 * "mm": 2048^3 matmul, f32 and bf16. "linear": decode-shaped linear, x [M, 2048] @ w[N, 2048]^T
 * bf16 for M = 1, 4, 16, 64 and N = 768, 2048, with enough weight copies (rotated) that every
 * call reads its weights from DRAM. Times are the best of a few repetitions.
 */
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/gemm.h"
#include "ember/ember.h"

#ifdef LAB_OPENBLAS
#include <cblas.h>
void openblas_set_num_threads(int);
char *openblas_get_corename(void);
#endif

/* Wall time, or, with LAB_CPUTIME=1, the process's CPU time divided by the thread count: the
 * machine is shared, and CPU time does not count the slices other processes take from us (it
 * does count our own spinning, so it never flatters). */
static bool use_cputime;

static double now(void) {
    struct timespec t;
    clock_gettime(use_cputime ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
    double v = (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
    return use_cputime ? v / em_num_threads() : v;
}

static double peak_fma, peak_dot, dram_bw;

/* ---- machine limits ---- */

#define PEAK_ITERS 20000000L

__attribute__((target("avx512f"))) static void fma_loop(void *user, int tid, int nthr) {
    (void)tid, (void)nthr;
    __m512 a[16], b = _mm512_set1_ps(1.0f), c = _mm512_set1_ps(1e-9f);
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps((float)i);
    for (long n = 0; n < PEAK_ITERS; n++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(a[i], b, c);
    }
    float s = 0;
    for (int i = 0; i < 16; i++) s += _mm512_reduce_add_ps(a[i]);
    ((float *)user)[tid] = s;
}

__attribute__((target("avx512f,avx512bf16"))) static void dot_loop(void *user, int tid, int nthr) {
    (void)nthr;
    __m512 a[16];
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80);
    for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
    for (long n = 0; n < PEAK_ITERS; n++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) a[i] = _mm512_dpbf16_ps(a[i], x, x);
    }
    float s = 0;
    for (int i = 0; i < 16; i++) s += _mm512_reduce_add_ps(a[i]);
    ((float *)user)[tid] = s;
}

typedef struct bw_job {
    const float *p;
    int64_t n;
    double sums[64];
} bw_job;

__attribute__((target("avx512f"))) static void bw_body(void *user, int64_t b, int64_t e, int tid) {
    bw_job *j = user;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t i = b * 64; i < e * 64; i += 64) {
        s0 = _mm512_add_ps(s0, _mm512_load_ps(j->p + i));
        s1 = _mm512_add_ps(s1, _mm512_load_ps(j->p + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_load_ps(j->p + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_load_ps(j->p + i + 48));
    }
    j->sums[tid] += _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

static void measure_peak(void) {
    int nthr = em_num_threads();
    float sink[64];
    const em_cpu_features *f = em_cpu_features_get();
    if (f->avx512f) {
        em_parallel_each(fma_loop, sink); /* warm up clocks and threads */
        double t = now();
        em_parallel_each(fma_loop, sink);
        t = now() - t;
        peak_fma = (double)nthr * PEAK_ITERS * 16 * 32 / t / 1e9;
    }
    if (f->avx512bf16) {
        double t = now();
        em_parallel_each(dot_loop, sink);
        t = now() - t;
        peak_dot = (double)nthr * PEAK_ITERS * 16 * 64 / t / 1e9;
    }
    int64_t n = (int64_t)256 << 20 >> 2; /* 256 MB of floats */
    float *p = aligned_alloc(64, (size_t)n * 4);
    if (!p) return;
    for (int64_t i = 0; i < n; i++) p[i] = 1.0f;
    bw_job j = {p, n, {0}};
    double best = 1e9;
    for (int r = 0; r < 4; r++) {
        double t = now();
        em_parallel_for(n / 64, 4096, bw_body, &j);
        t = now() - t;
        if (t < best) best = t;
    }
    dram_bw = (double)n * 4 / best / 1e9;
    free(p);
    printf("machine: %d threads, FP32 FMA peak %.0f GFLOP/s, BF16 dot peak %.0f GFLOP/s, "
           "DRAM read %.1f GB/s\n",
           nthr, peak_fma, peak_dot, dram_bw);
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

/* Best time per call of g over `reps` rounds of `inner` calls, rotating through `copies`
 * weight buffers (B operands `bcopy` bytes apart). */
static double time_gemm(em_gemm_args *g, const char *b0, size_t bcopy, int copies, int inner,
                        int reps) {
    double best = 1e9;
    em_gemm(g); /* warm up */
    for (int r = 0; r < reps; r++) {
        double t = now();
        for (int i = 0; i < inner; i++) {
            g->b = b0 + (size_t)(i % copies) * bcopy;
            em_gemm(g);
        }
        t = (now() - t) / inner;
        if (t < best) best = t;
    }
    return best;
}

static em_gemm_args square(int64_t m, int64_t n, int64_t k, em_dtype dt, void *a, void *b,
                           void *c) {
    em_gemm_args g = {0};
    g.m = m, g.n = n, g.k = k, g.dtype = dt;
    g.a = a, g.a_rs = k, g.a_cs = 1;
    g.b = b, g.b_rs = n, g.b_cs = 1;
    g.c = c, g.ldc = n;
    return g;
}

/* ---- benchmarks ---- */

static void bench_mm(int64_t s) {
    for (int d = 0; d < 2; d++) {
        em_dtype dt = d ? EM_BF16 : EM_F32;
        size_t es = em_dtype_size(dt);
        void *a = aligned_alloc(64, (size_t)(s * s) * es), *b = aligned_alloc(64, (size_t)(s * s) * es);
        void *c = aligned_alloc(64, (size_t)(s * s) * es);
        fill(a, dt, s * s, 1);
        fill(b, dt, s * s, 2);
        em_gemm_args g = square(s, s, s, dt, a, b, c);
        double t = time_gemm(&g, b, 0, 1, 1, 5);
        double gf = 2.0 * (double)s * s * s / t / 1e9;
        double peak = d ? peak_dot : peak_fma;
        printf("matmul %s %lldx%lldx%lld: %.2f ms, %.1f GFLOP/s (%.0f%% of peak) [%s]\n",
               em_dtype_name(dt), (long long)s, (long long)s, (long long)s, t * 1e3, gf,
               peak > 0 ? 100 * gf / peak : 0, em_gemm_kernel_for(dt)->name);
#ifdef LAB_OPENBLAS
        if (dt == EM_F32) {
            openblas_set_num_threads(em_num_threads());
            double best = 1e9;
            for (int r = 0; r < 6; r++) {
                double t0 = now();
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)s, (int)s, (int)s, 1.0f,
                            a, (int)s, b, (int)s, 0.0f, c, (int)s);
                t0 = now() - t0;
                if (r > 0 && t0 < best) best = t0;
            }
            gf = 2.0 * (double)s * s * s / best / 1e9;
            printf("  openblas sgemm (%s): %.2f ms, %.1f GFLOP/s (%.0f%% of peak)\n",
                   openblas_get_corename(), best * 1e3, gf, peak > 0 ? 100 * gf / peak : 0);
        }
#endif
        free(a), free(b), free(c);
    }
}

/* x [m, k] @ w[n, k]^T, w from DRAM. engine: 0 auto, 1 packed, 2 dot. */
static void bench_linear(int64_t m, int64_t n, int64_t k, em_dtype dt, int engine) {
    size_t es = em_dtype_size(dt);
    size_t wbytes = (size_t)(n * k) * es;
    int copies = (int)((128u << 20) / wbytes) + 1; /* 128 MB: four times the L3 */
    if (getenv("LAB_HOT")) copies = 1;             /* weights stay in cache: kernel speed */
    char *w = aligned_alloc(64, wbytes * (size_t)copies);
    void *x = aligned_alloc(64, (size_t)(m * k) * es + 64), *c = aligned_alloc(64, (size_t)(m * n) * 4 + 64);
    fill(w, dt, (int64_t)(wbytes / es) * copies, 3);
    fill(x, dt, m * k, 4);
    em_gemm_args g = {0};
    g.m = m, g.n = n, g.k = k, g.dtype = dt;
    g.a = x, g.a_rs = k, g.a_cs = 1;
    g.b = w, g.b_rs = 1, g.b_cs = k;
    g.c = c, g.ldc = n;
    g.force_engine = engine;
    int inner = (int)(0.2 / (wbytes / 40e9 + 2.0 * m * n * k / 200e9)) + 1;
    double t = time_gemm(&g, w, wbytes, copies, inner, 3);
    double gbs = (double)wbytes / t / 1e9, gf = 2.0 * m * n * k / t / 1e9;
    double peak = dt == EM_BF16 && peak_dot > 0 ? peak_dot : peak_fma;
    double roof = fmax(wbytes / (dram_bw * 1e9), 2.0 * m * n * k / (peak * 1e9));
    printf("linear %s M=%-3lld N=%-5lld K=%lld %-6s: %7.1f us, %6.1f GB/s, %6.1f GFLOP/s, "
           "%3.0f%% of roofline (%s-bound)\n",
           em_dtype_name(dt), (long long)m, (long long)n, (long long)k,
           engine == 1 ? "packed" : engine == 2 ? "dot" : "auto", t * 1e6, gbs, gf,
           dram_bw > 0 && peak > 0 ? 100 * roof / t : 0,
           wbytes / (dram_bw * 1e9) > 2.0 * m * n * k / (peak * 1e9) ? "memory" : "compute");
    free(w), free(x), free(c);
}

int main(int argc, char **argv) {
    em_ctx *ctx = em_ctx_create();
    use_cputime = getenv("LAB_CPUTIME") && atoi(getenv("LAB_CPUTIME"));
    char feats[256];
    em_cpu_features_str(feats, sizeof feats);
    printf("cpu: %s; timing: %s\n", feats, use_cputime ? "CPU time / threads" : "wall");
    bool all = argc < 2;
    measure_peak();
    for (int i = 1; i < argc || all; i++) {
        const char *w = all ? "all" : argv[i];
        if (all || !strcmp(w, "mm")) bench_mm(2048);
        if (all || !strcmp(w, "linear")) {
            int64_t ms[] = {1, 4, 16, 64}, ns[] = {768, 2048};
            for (int a = 0; a < 2; a++)
                for (int b = 0; b < 4; b++) bench_linear(ms[b], ns[a], 2048, EM_BF16, 0);
        }
        if (!all && !strcmp(w, "shape") && i + 4 < argc) {
            em_dtype dt;
            if (!em_dtype_parse(argv[i + 4], &dt)) dt = EM_F32;
            int engine = 0;
            if (i + 5 < argc && !strcmp(argv[i + 5], "packed")) engine = 1;
            if (i + 5 < argc && !strcmp(argv[i + 5], "dot")) engine = 2;
            bench_linear(atoll(argv[i + 1]), atoll(argv[i + 2]), atoll(argv[i + 3]), dt, engine);
            i += engine ? 5 : 4;
        }
        if (!all && !strcmp(w, "mmsize") && i + 1 < argc) bench_mm(atoll(argv[++i]));
        if (all) break;
    }
    em_ctx_destroy(ctx);
    return 0;
}

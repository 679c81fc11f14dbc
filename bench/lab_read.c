/*
 * Lab benchmark of the read paths (not a test; run by hand):
 *
 *   lab_read [MiB] [rounds] [threads]
 *
 * Reads one f32 array of MiB (default 256) from the CPU device's allocator with each variant in
 * turn, `rounds` times interleaved (so all see the same moments of this host's drifting
 * bandwidth), on all pool threads (contiguous shares, as the probes and the reductions split
 * it). Prints each variant's median and best GB/s and its median per-round ratio to the first
 * (the shipped AVX2 read probe). Variants: the read probes of both x86 levels, AVX2 candidates
 * (more accumulators, 2x unroll, software prefetch), and the reductions' sum_f32 / max_f32 row
 * kernels of both levels. Where the CPU lacks AVX-512 those rows are skipped.
 *
 *   lab_read dot K N [rounds]
 *
 * The decode-shaped bf16 linear x [1, K] @ w [N, K]^T at the process's kernel level
 * (EMBER_CPU_LEVEL), its weights rotated over copies spanning 256 MiB (each call reads them from
 * DRAM), timed in blocks of calls interleaved with passes of the AVX2 read probe over 256 MiB:
 * the median of the per-round fractions (weight bytes per second over the probe's).
 *
 *   lab_read ew MiB [rounds]
 *
 * The element-wise engine at the process's kernel level: add, mul (two inputs, one output) and
 * neg (one input) on f32 arrays of MiB each, median and best GB/s (bytes of all arrays) over
 * rounds of 8 calls; with a few MiB the arrays stay in L2/L3 and this is the engine's own
 * speed, to compare with what the memory gives a core.
 *
 *   lab_read gelu MiB [rounds]
 *
 * Exact (erf) GELU through the element-wise engine at the process's kernel level, on an f32 and
 * a bf16 array of MiB each (values N(0, 3^2), SD's GEGLU range), against neg on the same arrays
 * (one input, one output: what the memory gives this op) and the tanh form; GB/s of input plus
 * output bytes, median (best) over rounds of 4 calls, and each op's median per-round fraction of
 * neg's GB/s.
 *
 * x86-64 only; needs AVX2 + FMA (the AVX-512 rows also AVX-512 F/BW/VL/DQ).
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/reduce_funcs.h"
#include "bench/probe.h"
#include "core/threadpool.h"
#include "ember/ember.h"

#define AVX2 __attribute__((target("avx2,fma")))

static double bench_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* 8 accumulators, 64 floats (four lines) an iteration */
static AVX2 double rd_8x8(const float *p, size_t n) {
    __m256 a[8];
    for (int k = 0; k < 8; k++) a[k] = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int k = 0; k < 8; k++) a[k] = _mm256_add_ps(a[k], _mm256_loadu_ps(p + i + 8 * k));
    for (int k = 1; k < 8; k++) a[0] = _mm256_add_ps(a[0], a[k]);
    float o[8];
    _mm256_storeu_ps(o, a[0]);
    return o[0] + o[7];
}

/* 4 accumulators + a prefetch of the line `dist` bytes ahead, one per line */
#define RD_PF(NAME, DIST)                                                                          \
    static AVX2 double NAME(const float *p, size_t n) {                                            \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                \
        size_t i = 0;                                                                              \
        for (; i + 32 <= n; i += 32) {                                                             \
            _mm_prefetch((const char *)(p + i) + (DIST), _MM_HINT_T0);                             \
            _mm_prefetch((const char *)(p + i) + (DIST) + 64, _MM_HINT_T0);                        \
            a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));                                        \
            a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));                                    \
            a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));                                   \
            a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));                                   \
        }                                                                                          \
        a0 = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));                          \
        float o[8];                                                                                \
        _mm256_storeu_ps(o, a0);                                                                   \
        return o[0] + o[7];                                                                        \
    }
RD_PF(rd_pf512, 512)
RD_PF(rd_pf1k, 1024)
RD_PF(rd_pf2k, 2048)
RD_PF(rd_pf4k, 4096)

/* sum_f32 candidate: 8 double accumulators (4 doubles each), 32 floats an iteration */
static AVX2 double sum_8d(const float *v, size_t n) {
    __m256d a[8];
    for (int k = 0; k < 8; k++) a[k] = _mm256_setzero_pd();
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 8; k++)
            a[k] = _mm256_add_pd(a[k], _mm256_cvtps_pd(_mm_loadu_ps(v + i + 4 * k)));
    double o[4], t = 0;
    for (int k = 0; k < 8; k++) {
        _mm256_storeu_pd(o, a[k]);
        t += o[0] + o[1] + o[2] + o[3];
    }
    for (; i < n; i++) t += v[i];
    return t;
}

/* the same with a prefetch 1 KiB ahead */
static AVX2 double sum_8d_pf(const float *v, size_t n) {
    __m256d a[8];
    for (int k = 0; k < 8; k++) a[k] = _mm256_setzero_pd();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm_prefetch((const char *)(v + i) + 1024, _MM_HINT_T0);
        _mm_prefetch((const char *)(v + i) + 1024 + 64, _MM_HINT_T0);
        for (int k = 0; k < 8; k++)
            a[k] = _mm256_add_pd(a[k], _mm256_cvtps_pd(_mm_loadu_ps(v + i + 4 * k)));
    }
    double o[4], t = 0;
    for (int k = 0; k < 8; k++) {
        _mm256_storeu_pd(o, a[k]);
        t += o[0] + o[1] + o[2] + o[3];
    }
    for (; i < n; i++) t += v[i];
    return t;
}

/* The 16 double lanes of a0..a3 and the tail v[i..n) summed as the portable loop does (the
 * tail first, then the lanes in order). */
static AVX2 double fold_4d(__m256d a0, __m256d a1, __m256d a2, __m256d a3, const float *v,
                           size_t i, size_t n) {
    double l[16], t = 0;
    _mm256_storeu_pd(l, a0);
    _mm256_storeu_pd(l + 4, a1);
    _mm256_storeu_pd(l + 8, a2);
    _mm256_storeu_pd(l + 12, a3);
    for (; i < n; i++) t += v[i];
    for (int j = 0; j < 16; j++) t += l[j];
    return t;
}

/* sum_f32 with the portable loop's 16 double lanes (the same sums, bit for bit) as 4 ymm of 4,
 * each converted straight from memory (vcvtps2pd ymm, m128): fewer instructions per line */
static AVX2 double sum_4d_mem(const float *v, size_t n) {
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm_loadu_ps(v + i)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm_loadu_ps(v + i + 4)));
        a2 = _mm256_add_pd(a2, _mm256_cvtps_pd(_mm_loadu_ps(v + i + 8)));
        a3 = _mm256_add_pd(a3, _mm256_cvtps_pd(_mm_loadu_ps(v + i + 12)));
    }
    return fold_4d(a0, a1, a2, a3, v, i, n);
}

/* the same unrolled twice (the same chains) */
static AVX2 double sum_4d_mem_x2(const float *v, size_t n) {
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm_loadu_ps(v + i)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm_loadu_ps(v + i + 4)));
        a2 = _mm256_add_pd(a2, _mm256_cvtps_pd(_mm_loadu_ps(v + i + 8)));
        a3 = _mm256_add_pd(a3, _mm256_cvtps_pd(_mm_loadu_ps(v + i + 12)));
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm_loadu_ps(v + i + 16)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm_loadu_ps(v + i + 20)));
        a2 = _mm256_add_pd(a2, _mm256_cvtps_pd(_mm_loadu_ps(v + i + 24)));
        a3 = _mm256_add_pd(a3, _mm256_cvtps_pd(_mm_loadu_ps(v + i + 28)));
    }
    return fold_4d(a0, a1, a2, a3, v, i, n);
}

/* the portable loop of reduce_funcs.inc before the AVX2 one (what GCC made of it for AVX2) */
static AVX2 double sum_portable(const float *v, size_t n) {
    double lane[16] = {0};
    size_t k = 0;
    for (; k + 16 <= n; k += 16)
        for (int j = 0; j < 16; j++) lane[j] += (double)v[k + j];
    double t = 0;
    for (; k < n; k++) t += v[k];
    for (int j = 0; j < 16; j++) t += lane[j];
    return t;
}

static em_probe_isa P2, P5;
static em_red_isa R2, R5;
static double pr_avx2(const float *p, size_t n) { return P2.read(p, n); }
static double pr_avx512(const float *p, size_t n) { return P5.read(p, n); }
static double sum_avx2(const float *p, size_t n) { return R2.sum_f32(p, (int64_t)n); }
static double sum_avx512(const float *p, size_t n) { return R5.sum_f32(p, (int64_t)n); }
static double max_avx2(const float *p, size_t n) {
    bool nan;
    return R2.max_f32(p, (int64_t)n, &nan);
}
static double max_avx512(const float *p, size_t n) {
    bool nan;
    return R5.max_f32(p, (int64_t)n, &nan);
}

typedef struct variant {
    const char *name;
    double (*fn)(const float *, size_t);
    bool avx512;
} variant;

static const variant V[] = {
    {"probe avx2 (4x8)", pr_avx2, false},   {"probe avx512", pr_avx512, true},
    {"read 8x8", rd_8x8, false},            {"read 4x8 pf 512B", rd_pf512, false},
    {"read 4x8 pf 1KiB", rd_pf1k, false},   {"read 4x8 pf 2KiB", rd_pf2k, false},
    {"read 4x8 pf 4KiB", rd_pf4k, false},
    {"sum portable (old)", sum_portable, false}, {"sum_f32 avx2", sum_avx2, false},      {"sum_f32 avx512", sum_avx512, true},
    {"sum 8 dbl acc", sum_8d, false},       {"sum 8 dbl acc pf1K", sum_8d_pf, false},
    {"sum 4 dbl memcvt", sum_4d_mem, false}, {"sum 4 dbl memcvt x2", sum_4d_mem_x2, false},
    {"max_f32 avx2", max_avx2, false},      {"max_f32 avx512", max_avx512, true},
};
#define NV (int)(sizeof V / sizeof V[0])

typedef struct job {
    const float *a;
    size_t n;
    double (*fn)(const float *, size_t);
    double sink[64];
} job;

static void each(void *user, int tid, int nt) {
    job *j = user;
    size_t lo = j->n * (size_t)tid / (size_t)nt, hi = j->n * (size_t)(tid + 1) / (size_t)nt;
    j->sink[tid & 63] = j->fn(j->a + lo, hi - lo);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int dot_mode(int argc, char **argv) {
    int64_t K = argc > 2 ? atoll(argv[2]) : 1024, N = argc > 3 ? atoll(argv[3]) : 3072;
    int rounds = argc > 4 ? atoi(argv[4]) : 21;
    if (K < 1 || N < 1 || rounds < 1 || rounds > 200) return 2;
    em_probe_fill_avx2(&P2);
    em_ctx *c = em_ctx_create();
    size_t n = (size_t)256 << 18;
    em_tensor *t = em_randn(c, EM_F32, EM_SHAPE((int64_t)n), 1, 0, 1);
    double wbytes = (double)N * (double)K * 2;
    int copies = (int)(256.0 * 1048576 / wbytes) + 1;
    if (copies > 256) copies = 256;
    em_tensor *x = em_randn(c, EM_BF16, EM_SHAPE(1, K), 5, 0, 1), *w[256];
    for (int i = 0; i < copies; i++)
        w[i] = em_rand(c, EM_BF16, EM_SHAPE(N, K), 10 + (uint64_t)i, -0.05, 0.05);
    job j = {em_tensor_data(c, t), n, pr_avx2, {0}};
    int calls = copies < 8 ? 8 : copies, next = 0;
    double frac[200], gb[200], pg[200];
    for (int r = -1; r < rounds; r++) {
        double t0 = bench_now();
        em_parallel_each(each, &j);
        double t1 = bench_now();
        for (int k = 0; k < calls; k++) {
            em_scope_push(c);
            em_tensor *y = em_linear(c, x, w[next], NULL);
            next = (next + 1) % copies;
            if (y) em_tensor_data(c, y);
            em_scope_pop(c);
        }
        double t2 = bench_now();
        if (r < 0) continue;
        pg[r] = (double)n * 4 / (t1 - t0) / 1e9;
        gb[r] = wbytes * calls / (t2 - t1) / 1e9;
        frac[r] = gb[r] / pg[r];
    }
    if (em_ctx_status(c)) {
        fprintf(stderr, "lab_read: %s\n", em_ctx_error(c)->message);
        return 1;
    }
    qsort(frac, (size_t)rounds, sizeof *frac, cmp_d);
    qsort(gb, (size_t)rounds, sizeof *gb, cmp_d);
    qsort(pg, (size_t)rounds, sizeof *pg, cmp_d);
    printf("dot M1 K%lld N%lld bf16, %d copies, %d threads: %.1f GB/s (best %.1f), probe %.1f GB/s "
           "(best %.1f), median fraction %.3f (%.3f-%.3f)\n",
           (long long)K, (long long)N, copies, em_num_threads(), gb[rounds / 2], gb[rounds - 1],
           pg[rounds / 2], pg[rounds - 1], frac[rounds / 2], frac[0], frac[rounds - 1]);
    em_ctx_free(c);
    return 0;
}

static int ew_mode(int argc, char **argv) {
    int64_t n = (argc > 2 ? atoll(argv[2]) : 2) << 18;
    int rounds = argc > 3 ? atoi(argv[3]) : 21;
    if (n < 1 || rounds < 1 || rounds > 200) return 2;
    em_ctx *c = em_ctx_create();
    em_tensor *a = em_randn(c, EM_F32, EM_SHAPE(n), 1, 0, 1);
    em_tensor *b = em_randn(c, EM_F32, EM_SHAPE(n), 2, 0, 1);
    const char *names[3] = {"add", "mul", "neg"};
    double g[3][200];
    for (int r = -1; r < rounds; r++)
        for (int o = 0; o < 3; o++) {
            double t0 = bench_now();
            for (int k = 0; k < 8; k++) {
                em_scope_push(c);
                em_tensor *y = o == 0 ? em_add(c, a, b) : o == 1 ? em_mul(c, a, b) : em_neg(c, a);
                if (y) em_tensor_data(c, y);
                em_scope_pop(c);
            }
            double dt = (bench_now() - t0) / 8;
            if (r >= 0) g[o][r] = (o < 2 ? 3.0 : 2.0) * (double)n * 4 / dt / 1e9;
        }
    if (em_ctx_status(c)) {
        fprintf(stderr, "lab_read: %s\n", em_ctx_error(c)->message);
        return 1;
    }
    printf("ew %lld floats, %d threads, GB/s median (best):", (long long)n, em_num_threads());
    for (int o = 0; o < 3; o++) {
        qsort(g[o], (size_t)rounds, sizeof **g, cmp_d);
        printf(" %s %.1f (%.1f)", names[o], g[o][rounds / 2], g[o][rounds - 1]);
    }
    printf("\n");
    em_ctx_free(c);
    return 0;
}

static int gelu_mode(int argc, char **argv) {
    int64_t mib = argc > 2 ? atoll(argv[2]) : 64;
    int rounds = argc > 3 ? atoi(argv[3]) : 11;
    if (mib < 1 || rounds < 1 || rounds > 200) return 2;
    em_ctx *c = em_ctx_create();
    enum { NG = 6 };
    const char *names[NG] = {"neg f32", "gelu_erf f32", "gelu_tanh f32",
                             "neg bf16", "gelu_erf bf16", "gelu_tanh bf16"};
    em_tensor *x[2];
    for (int d = 0; d < 2; d++) {
        em_dtype dt = d ? EM_BF16 : EM_F32;
        x[d] = em_randn(c, dt, EM_SHAPE((mib << 20) / (d ? 2 : 4)), 1 + d, 0, 3);
    }
    static double g[NG][200];
    for (int r = -1; r < rounds; r++) /* round -1 warms up */
        for (int o = 0; o < NG; o++) {
            em_tensor *a = x[o / 3];
            double t0 = bench_now();
            for (int k = 0; k < 4; k++) {
                em_scope_push(c);
                em_tensor *y = o % 3 == 0 ? em_neg(c, a) : em_gelu(c, a, o % 3 == 2);
                if (y) em_tensor_data(c, y);
                em_scope_pop(c);
            }
            double dt = (bench_now() - t0) / 4;
            if (r >= 0) g[o][r] = 2.0 * (double)(mib << 20) / dt / 1e9;
        }
    if (em_ctx_status(c)) {
        fprintf(stderr, "lab_read: %s\n", em_ctx_error(c)->message);
        return 1;
    }
    printf("gelu %lld MiB per array, %d threads, %d rounds: GB/s (in + out) median (best), "
           "median fraction of neg's\n",
           (long long)mib, em_num_threads(), rounds);
    for (int o = 0; o < NG; o++) {
        double s[200], f[200];
        for (int r = 0; r < rounds; r++) {
            s[r] = g[o][r];
            f[r] = g[o][r] / g[o / 3 * 3][r];
        }
        qsort(s, (size_t)rounds, sizeof *s, cmp_d);
        qsort(f, (size_t)rounds, sizeof *f, cmp_d);
        printf("  %-15s %6.2f (%6.2f)  %.3f\n", names[o], s[rounds / 2], s[rounds - 1],
               f[rounds / 2]);
    }
    em_ctx_free(c);
    return 0;
}

int main(int argc, char **argv) {
    const em_cpu_features *f = em_cpu_features_get();
    if (!f->avx2 || !f->fma) {
        fprintf(stderr, "lab_read: needs AVX2 and FMA\n");
        return 77;
    }
    if (argc > 1 && !strcmp(argv[1], "dot")) return dot_mode(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "ew")) return ew_mode(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "gelu")) return gelu_mode(argc, argv);
    size_t mib = argc > 1 ? (size_t)atoll(argv[1]) : 256;
    int rounds = argc > 2 ? atoi(argv[2]) : 15;
    if (argc > 3) em_set_num_threads(atoi(argv[3]));
    if (rounds < 1 || rounds > 200) rounds = 15;
    bool has512 = f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq;
    em_probe_fill_avx2(&P2);
    em_red_fill_avx2(&R2);
    if (has512) {
        em_probe_fill_avx512(&P5);
        em_red_fill_avx512(&R5);
    }
    em_ctx *c = em_ctx_create();
    size_t n = mib << 18;
    em_tensor *t = em_randn(c, EM_F32, EM_SHAPE((int64_t)n), 1, 0, 1);
    const float *a = em_tensor_data(c, t);
    if (!a) {
        fprintf(stderr, "lab_read: no memory for %zu MiB\n", mib);
        return 1;
    }
    for (size_t m = 0; m < 1000003 + 64; m = m == 100 ? 1000003 : m + 1) {
        double x = sum_portable(a, m), y = R2.sum_f32(a, (int64_t)m), z = sum_4d_mem(a, m);
        if (x != y || x != z) printf("sum differs at n = %zu: %.17g %.17g %.17g\n", m, x, y, z);
    }
    static double gbs[NV][200];
    job j = {a, n, NULL, {0}};
    for (int r = -1; r < rounds; r++) /* round -1 warms up */
        for (int v = 0; v < NV; v++) {
            if (V[v].avx512 && !has512) continue;
            j.fn = V[v].fn;
            double t0 = bench_now();
            em_parallel_each(each, &j);
            double dt = bench_now() - t0;
            if (r >= 0) gbs[v][r] = (double)n * 4 / dt / 1e9;
        }
    printf("%zu MiB, %d rounds, %d threads; GB/s median, best; median ratio to the first\n", mib,
           rounds, em_num_threads());
    for (int v = 0; v < NV; v++) {
        if (V[v].avx512 && !has512) continue;
        double ratio[200], s[200];
        for (int r = 0; r < rounds; r++) {
            ratio[r] = gbs[v][r] / gbs[0][r];
            s[r] = gbs[v][r];
        }
        qsort(ratio, (size_t)rounds, sizeof *ratio, cmp_d);
        qsort(s, (size_t)rounds, sizeof *s, cmp_d);
        printf("  %-22s %6.1f %6.1f  %.3f\n", V[v].name, s[rounds / 2], s[rounds - 1],
               ratio[rounds / 2]);
    }
    em_ctx_free(c);
    return 0;
}

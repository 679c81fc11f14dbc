/*
 * Lab timing of the CPU attention (sdpa_flash.h) on bf16 q, k, v (not a test; run by hand):
 *
 *   lab_sdpa [REPS] [THREADS ...]
 *   lab_sdpa f32 [REPS] [THREADS ...]
 *
 * SD 1.5's attention at 512 px, [1, 8, 4096, 40] self-attention, the same queries over 77
 * text keys (cross-attention) and the self-attention of the lower levels, [1, 8, 1024, 80] and
 * [1, 8, 256, 160], on each thread count (default 1 and 2), REPS times (default 3)
 * with the two bf16 routes interleaved so that both see the same load: "f32 tiles" (K tiles
 * converted to f32 and f32 products, the route of CPUs without the bf16 pair dot product) and
 * "pair dot" (vdpbf16ps, nn->qk_dp; only where the CPU has it). Prints the best wall and CPU
 * time of each (CPU time / threads does not count other processes' slices), GFLOP/s (4 Tq Tk D
 * per head), and each route's error against the f32 attention of the same (bf16-valued) inputs.
 *
 * With "f32" first it times the f32 route on f32 inputs instead (what `ember image` runs by
 * default) and prints each shape's error against a double-precision attention of the same
 * inputs (rows sampled); run two binaries alternately to compare kernel versions.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/sdpa_flash.h"
#include "core/threadpool.h"
#include "ember/ember.h"

static double clock_of(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static float bf2f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* n bf16 values of a fixed pseudo-random normal-ish distribution (sum of 4 uniforms), and the
 * same values as f32 */
static void fill(uint16_t *b, float *f, int64_t n, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        float x = 0;
        for (int r = 0; r < 4; r++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x += (float)(s >> 40) / (float)(1 << 24) - 0.5f;
        }
        b[i] = em_f32_to_bf16(x * 1.7f);
        f[i] = bf2f(b[i]);
    }
}

static sdpa_view view(const void *data, int dt, int64_t b, int64_t h, int64_t t, int64_t d) {
    sdpa_view v = {.data = data, .dtype = dt, .ndim = 4, .shape = {b, h, t, d},
                   .strides = {h * t * d, t * d, d, 1}};
    return v;
}

static int run(const em_nn_isa *nn, int dt, const void *q, const void *k, const void *v, int64_t tq,
               int64_t tk, int64_t d, void *out) {
    const em_ew_isa *isa = em_ew_isa_get();
    sdpa_env env = {isa->load, isa->store, nn, em_parallel_for, em_num_threads()};
    sdpa_args a = {view(q, dt, 1, 8, tq, d), view(k, dt, 1, 8, tk, d), view(v, dt, 1, 8, tk, d),
                   {0}, out, dt, 0.0, 0.0, false, 0, NULL};
    const char *what = "";
    if (sdpa_flash_run(&env, &a, &what)) {
        fprintf(stderr, "lab_sdpa: %s\n", what);
        return 1;
    }
    return 0;
}

/* The double-precision attention of every 61st query row of each head (scale 1/sqrt(d), as
 * run's): the max and mean of |out - ref| over those rows. */
static void f64_err(const float *q, const float *k, const float *v, const float *o, int64_t tq,
                    int64_t tk, int64_t d, double *maxe, double *meane) {
    double *w = malloc((size_t)tk * sizeof *w), sc = 1.0 / sqrt((double)d), se = 0;
    int64_t cnt = 0;
    *maxe = 0;
    for (int64_t h = 0; h < 8; h++)
        for (int64_t i = 0; i < tq; i += 61) {
            const float *qi = q + (h * tq + i) * d;
            double mx = -INFINITY, l = 0;
            for (int64_t j = 0; j < tk; j++) {
                const float *kj = k + (h * tk + j) * d;
                double s = 0;
                for (int64_t x = 0; x < d; x++) s += (double)qi[x] * kj[x];
                w[j] = s * sc;
                mx = w[j] > mx ? w[j] : mx;
            }
            for (int64_t j = 0; j < tk; j++) l += (w[j] = exp(w[j] - mx));
            for (int64_t x = 0; x < d; x++) {
                double r = 0;
                for (int64_t j = 0; j < tk; j++) r += w[j] * v[(h * tk + j) * d + x];
                double e = fabs(r / l - (double)o[(h * tq + i) * d + x]);
                *maxe = e > *maxe ? e : *maxe;
                se += e;
                cnt++;
            }
        }
    *meane = se / (double)cnt;
    free(w);
}

static int main_f32(int argc, char **argv) {
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    int threads[8] = {1, 2}, nt = 2;
    if (argc > 3) {
        nt = 0;
        for (int i = 3; i < argc && nt < 8; i++) threads[nt++] = atoi(argv[i]);
    }
    if (reps < 1) reps = 1;
    const em_nn_isa *nn = em_nn_isa_get();
    const int64_t tqs[4] = {4096, 4096, 1024, 256}, tks[4] = {4096, 77, 1024, 256};
    const int64_t ds[4] = {40, 40, 80, 160}, nq = 8 * 4096 * 40;
    printf("kernel level %s, f32 route\n", em_cpu_isa_name(em_cpu_isa_get()));
    uint16_t *tb = malloc((size_t)nq * 2);
    float *qf = malloc((size_t)nq * 4), *kf = malloc((size_t)nq * 4), *vf = malloc((size_t)nq * 4);
    float *of = malloc((size_t)nq * 4);
    if (!tb || !qf || !kf || !vf || !of) return 1;
    fill(tb, qf, nq, 1);
    fill(tb, kf, nq, 2);
    fill(tb, vf, nq, 3);
    for (int s = 0; s < 4; s++) {
        int64_t tq = tqs[s], tk = tks[s], d = ds[s];
        double gflop = 4.0 * 8 * (double)tq * (double)tk * (double)d * 1e-9;
        for (int ti = 0; ti < nt; ti++) {
            em_set_num_threads(threads[ti]);
            double wall = 1e30, cpu = 1e30;
            for (int r = 0; r < reps; r++) {
                double w0 = clock_of(CLOCK_MONOTONIC), c0 = clock_of(CLOCK_PROCESS_CPUTIME_ID);
                if (run(nn, EM_F32, qf, kf, vf, tq, tk, d, of)) return 1;
                double w1 = clock_of(CLOCK_MONOTONIC), c1 = clock_of(CLOCK_PROCESS_CPUTIME_ID);
                if (w1 - w0 < wall) wall = w1 - w0;
                if ((c1 - c0) / threads[ti] < cpu) cpu = (c1 - c0) / threads[ti];
            }
            double maxe, meane;
            f64_err(qf, kf, vf, of, tq, tk, d, &maxe, &meane);
            printf("%-5s [1,8,%lld,%lld] x %4lld keys, %d thr: wall %7.1f ms  cpu %7.1f ms  "
                   "%6.1f GFLOP/s (cpu)  err vs f64: max %.2e mean %.2e\n",
                   s == 1 ? "cross" : "self", (long long)tq, (long long)d, (long long)tk,
                   threads[ti], wall * 1e3, cpu * 1e3, gflop / cpu, maxe, meane);
        }
    }
    free(tb);
    free(qf);
    free(kf);
    free(vf);
    free(of);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "f32")) return main_f32(argc, argv);
    int reps = argc > 1 ? atoi(argv[1]) : 3;
    int threads[8] = {1, 2}, nt = 2;
    if (argc > 2) {
        nt = 0;
        for (int i = 2; i < argc && nt < 8; i++) threads[nt++] = atoi(argv[i]);
    }
    if (reps < 1) reps = 1;
    const em_nn_isa *dp = em_nn_isa_get();
    em_nn_isa tiles = *dp;
    tiles.qk_dp = NULL;
    tiles.pack_v = NULL;
    tiles.pv_dp = NULL;
    /* SD 1.5 at 512 px: the self-attention of the three UNet levels and the 40-wide
     * cross-attention over 77 text keys */
    const int64_t tqs[4] = {4096, 4096, 1024, 256}, tks[4] = {4096, 77, 1024, 256};
    const int64_t ds[4] = {40, 40, 80, 160}, nq = 8 * 4096 * 40;
    printf("kernel level %s, pair dot product %s\n",
           em_cpu_isa_name(em_cpu_isa_get()), dp->qk_dp ? "yes" : "no (both routes are f32 tiles)");
    uint16_t *qb = malloc((size_t)nq * 2), *kb = malloc((size_t)nq * 2);
    uint16_t *vb = malloc((size_t)nq * 2);
    uint16_t *ob[2] = {malloc((size_t)nq * 2), malloc((size_t)nq * 2)};
    float *qf = malloc((size_t)nq * 4), *kf = malloc((size_t)nq * 4), *vf = malloc((size_t)nq * 4);
    float *of = malloc((size_t)nq * 4);
    if (!qb || !kb || !vb || !ob[0] || !ob[1] || !qf || !kf || !vf || !of) return 1;
    fill(qb, qf, nq, 1);
    fill(kb, kf, nq, 2);
    fill(vb, vf, nq, 3);
    const char *names[2] = {"f32 tiles", "pair dot"};
    for (int s = 0; s < 4; s++) {
        int64_t tq = tqs[s], tk = tks[s], d = ds[s], n = 8 * tq * d;
        double gflop = 4.0 * 8 * (double)tq * (double)tk * (double)d * 1e-9;
        if (run(&tiles, EM_F32, qf, kf, vf, tq, tk, d, of)) return 1;
        for (int ti = 0; ti < nt; ti++) {
            em_set_num_threads(threads[ti]);
            double wall[2] = {1e30, 1e30}, cpu[2] = {1e30, 1e30};
            for (int r = 0; r < reps; r++)
                for (int w = 0; w < 2; w++) {
                    double w0 = clock_of(CLOCK_MONOTONIC), c0 = clock_of(CLOCK_PROCESS_CPUTIME_ID);
                    if (run(w ? dp : &tiles, EM_BF16, qb, kb, vb, tq, tk, d, ob[w])) return 1;
                    double w1 = clock_of(CLOCK_MONOTONIC), c1 = clock_of(CLOCK_PROCESS_CPUTIME_ID);
                    if (w1 - w0 < wall[w]) wall[w] = w1 - w0;
                    if ((c1 - c0) / threads[ti] < cpu[w]) cpu[w] = (c1 - c0) / threads[ti];
                }
            for (int w = 0; w < 2; w++) {
                double maxe = 0, sume = 0;
                for (int64_t i = 0; i < n; i++) {
                    double e = fabs((double)bf2f(ob[w][i]) - (double)of[i]);
                    maxe = e > maxe ? e : maxe;
                    sume += e;
                }
                printf("%-5s [1,8,%lld,%lld] x %4lld keys, %d thr, %-9s: wall %7.1f ms"
                       "  cpu %7.1f ms  %6.1f GFLOP/s (cpu)  err vs f32: max %.2e mean %.2e\n",
                       s == 1 ? "cross" : "self", (long long)tq, (long long)d, (long long)tk,
                       threads[ti], names[w], wall[w] * 1e3, cpu[w] * 1e3, gflop / cpu[w], maxe,
                       sume / (double)n);
            }
            printf("      speed-up (cpu time) %.2fx, (wall) %.2fx\n", cpu[0] / cpu[1],
                   wall[0] / wall[1]);
        }
    }
    free(qb);
    free(kb);
    free(vb);
    free(ob[0]);
    free(ob[1]);
    free(qf);
    free(kf);
    free(vf);
    free(of);
    return 0;
}

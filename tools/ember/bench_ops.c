/*
 * `ember bench ops`: the machine's limits, the peers and Ember's op kernels, in one run.
 *
 * Limits: STREAM-style read and triad bandwidth, the FP32 FMA and BF16 dot peaks (all measured
 * here, now). Peers: torch eager (subprocess, when importable) and OpenBLAS sgemm (dlopen, when
 * installed). Every Ember figure is printed as a fraction of its limit and a ratio to the best
 * peer.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "bench/probe.h"
#include "bench_limits.h"
#include "bench_util.h"
#include "cli.h"
#include "ember/ember.h"

typedef bench_limits limits;

/* ---- Ember measurements ---- */

typedef struct op_job {
    em_ctx *c;
    em_tensor *a, *b;
    const char *op;
} op_job;

static void run_op(void *user) {
    op_job *j = user;
    em_ctx *c = j->c;
    em_scope_push(c);
    em_tensor *r = NULL;
    if (!strcmp(j->op, "add")) r = em_add(c, j->a, j->b);
    else if (!strcmp(j->op, "mul")) r = em_mul(c, j->a, j->b);
    else if (!strcmp(j->op, "silu")) r = em_silu(c, j->a);
    else if (!strcmp(j->op, "sum")) r = em_sum(c, j->a, NULL, 0, false);
    else if (!strcmp(j->op, "max")) r = em_max(c, j->a, NULL, 0, false);
    else if (!strcmp(j->op, "matmul")) r = em_matmul(c, j->a, j->b);
    else if (!strcmp(j->op, "linear")) r = em_linear(c, j->a, j->b, NULL);
    if (r) em_tensor_data(c, r); /* a host read: the op has completed */
    em_scope_pop(c);
}

/* A chain of 8 element-wise ops (the fused-mode showcase): y = tanh(silu(x * a + b) - x) ... */
static void run_chain(void *user) {
    op_job *j = user;
    em_ctx *c = j->c;
    em_scope_push(c);
    em_tensor *x = j->a, *y = j->b;
    em_tensor *h = em_add(c, em_mul(c, x, y), y);
    h = em_sub(c, em_silu(c, h), x);
    h = em_mul(c, em_tanh(c, h), em_exp(c, em_neg(c, y)));
    h = em_add(c, h, x);
    if (h) em_tensor_data(c, h);
    em_scope_pop(c);
}

static void run_dispatch(void *user) {
    op_job *j = user;
    for (int i = 0; i < 1000; i++) {
        em_scope_push(j->c);
        em_add(j->c, j->a, j->b);
        em_scope_pop(j->c);
    }
}

/* Rotating weights for decode shapes so that they come from DRAM, not the caches. */
typedef struct lin_job {
    em_ctx *c;
    em_tensor *x;
    em_tensor *w[160];
    int copies, next;
} lin_job;

static void run_linear(void *user) {
    lin_job *j = user;
    em_scope_push(j->c);
    em_tensor *r = em_linear(j->c, j->x, j->w[j->next], NULL);
    j->next = (j->next + 1) % j->copies;
    if (r) em_tensor_data(j->c, r);
    em_scope_pop(j->c);
}

/* ---- OpenBLAS peer ---- */

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *,
                         int, float, float *, int);
typedef struct blas_job {
    sgemm_fn sgemm;
    int n;
    float *a, *b, *c;
} blas_job;

static void run_blas(void *user) {
    blas_job *j = user;
    /* CblasRowMajor = 101, CblasNoTrans = 111 */
    j->sgemm(101, 111, 111, j->n, j->n, j->n, 1.0f, j->a, j->n, j->b, j->n, 0.0f, j->c, j->n);
}

static double openblas_sgemm_ms(int n, char *core, size_t core_n) {
    /* OpenBLAS picks its own kernel for the CPU, or the level bench_match_peers_to_level set */
    void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libopenblas.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) return -1;
    blas_job j = {(sgemm_fn)dlsym(h, "cblas_sgemm"), n, NULL, NULL, NULL};
    void (*set_threads)(int) = (void (*)(int))dlsym(h, "openblas_set_num_threads");
    char *(*corename)(void) = (char *(*)(void))dlsym(h, "openblas_get_corename");
    if (!j.sgemm) return -1;
    if (set_threads) set_threads(em_num_threads());
    if (corename) snprintf(core, core_n, "%s", corename());
    size_t nn = (size_t)n * n;
    j.a = malloc(nn * 4);
    j.b = malloc(nn * 4);
    j.c = malloc(nn * 4);
    for (size_t i = 0; i < nn; i++) j.a[i] = j.b[i] = (float)((i % 13) - 6) * 0.1f;
    double ms = bench_median_ms(run_blas, &j, 1.0);
    free(j.a);
    free(j.b);
    free(j.c);
    return ms; /* the library stays loaded: its threads may still be parked */
}

/* ---- the command ---- */

static void usage(void) {
    printf("usage: ember bench ops [--json] [--quick] [--skip-peers] [--device DEV]\n\n"
           "Measures, in one run: the machine's limits (read and triad bandwidth, FP32 FMA and\n"
           "BF16 dot peaks), the peers (torch eager via $EMBER_PYTHON or python3 when torch is\n"
           "importable; OpenBLAS sgemm when installed) and Ember: dispatch of a tiny op,\n"
           "memory-bound ops on 256 MiB, matmul at 2048^3 (f32, bf16) and decode-shaped bf16\n"
           "linear layers (M = 1, 4, 16, 64; K = 2048; N = 768, 2048).\n"
           "  --json        one JSON object per line\n"
           "  --quick       shorter timings and smaller bandwidth arrays\n"
           "  --skip-peers  do not run torch or OpenBLAS\n"
           "  --device DEV  a PJRT device (xla:0, cuda:0, ...): Ember's overhead per cached\n"
           "                eager op, compile time of a new op, the same ops on cpu, and fused\n"
           "                against async on a chain of 8 element-wise ops\n");
}

int bench_ops_device(const char *device, bool json, bool quick);

int bench_ops(int argc, char **argv) {
    bool json = false, quick = false, peers = true;
    const char *device = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (i + 1 < argc && !strcmp(argv[i], "--device")) device = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = true;
        else if (!strcmp(argv[i], "--skip-peers")) peers = false;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "ember bench ops: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (device) return bench_ops_device(device, json, quick);
    double mt = quick ? 0.2 : 0.6;
    int threads = em_num_threads();
    limits L = {0};
    bench_measure_limits(&L);
    if (json)
        printf("{\"bench\": \"limits\", \"threads\": %d, \"read_gbs_1thread\": %.2f, "
               "\"read_gbs\": %.2f, \"triad_gbs\": %.2f, \"fp32_gflops\": %.1f, "
               "\"bf16_gflops\": %.1f, \"bf16_tiles_gflops\": %.1f}\n",
               threads, L.read_gbs_1, L.read_gbs, L.triad_gbs, L.fp32_gflops, L.bf16_gflops,
               L.bf16_tiles_gflops);
    char tiles[64] = "";
    if (L.bf16_tiles_gflops > 0)
        snprintf(tiles, sizeof tiles, ", BF16 AMX tiles %.0f GFLOP/s", L.bf16_tiles_gflops);
    if (!json)
        printf("machine limits (%d threads): read %.1f GB/s (1 thread %.1f), triad %.1f GB/s, "
               "FP32 FMA %.0f GFLOP/s, BF16 dot %.0f GFLOP/s%s\n"
               "(bandwidths: median of %d passes over %d MiB arrays, read %.1f-%.1f; a "
               "memory-bound row's limit: the passes run between its op's runs, median;\n"
               "fused_chain's: this header's triad)\n\n",
               threads, L.read_gbs, L.read_gbs_1, L.triad_gbs, L.fp32_gflops, L.bf16_gflops,
               tiles, BENCH_PROBE_PASSES, BENCH_PROBE_MIB, L.read_gbs_min, L.read_gbs_max);

    int64_t big = quick ? ((int64_t)16 << 20) : ((int64_t)64 << 20); /* 256 MiB of f32 */
    const int M_[4] = {1, 4, 16, 64}, N_[2] = {768, 2048};
    /* torch tasks */
    char tasks[8192];
    int u = snprintf(tasks, sizeof tasks,
                     "[{\"name\": \"dispatch\", \"kind\": \"dispatch\", \"threads\": %d}", threads);
    const char *ew_ops[5] = {"add", "mul", "silu", "sum", "max"};
    for (int i = 0; i < 5; i++)
        u += snprintf(tasks + u, sizeof tasks - (size_t)u,
                      ", {\"name\": \"%s\", \"kind\": \"ew\", \"op\": \"%s\", \"n\": %lld, "
                      "\"dtype\": \"f32\", \"min_time\": %g}",
                      ew_ops[i], ew_ops[i], (long long)big, mt);
    for (int d = 0; d < 2; d++)
        u += snprintf(tasks + u, sizeof tasks - (size_t)u,
                      ", {\"name\": \"matmul_%s\", \"kind\": \"matmul\", \"m\": 2048, \"k\": 2048, "
                      "\"n\": 2048, \"dtype\": \"%s\", \"min_time\": %g}",
                      d ? "bf16" : "f32", d ? "bf16" : "f32", mt * 2);
    for (int mi = 0; mi < 4; mi++)
        for (int ni = 0; ni < 2; ni++)
            u += snprintf(tasks + u, sizeof tasks - (size_t)u,
                          ", {\"name\": \"linear_%d_%d\", \"kind\": \"linear\", \"m\": %d, "
                          "\"k\": 2048, \"n\": %d, \"dtype\": \"bf16\", \"copies\": %d, "
                          "\"min_time\": %g}",
                          M_[mi], N_[ni], M_[mi], N_[ni],
                          (int)((256.0 * 1048576) / ((double)N_[ni] * 2048 * 2) + 1), mt);
    snprintf(tasks + u, sizeof tasks - (size_t)u, "]");
    bench_peer torch = {0};
    if (peers) bench_peer_run("torch_ops.py", tasks, &torch);
    if (!torch.available && !json)
        printf("peer torch: unavailable (%s)\n", peers ? torch.why : "--skip-peers");
    char core[64] = "";
    double blas_ms = peers ? openblas_sgemm_ms(2048, core, sizeof core) : -1;
    if (!json && peers && blas_ms < 0) printf("peer OpenBLAS: not installed\n");
    char blas_name[96];
    snprintf(blas_name, sizeof blas_name, "openblas(%s)", core[0] ? core : "?");

    em_ctx *c = em_ctx_create();
    bench_print_header(json);
    /* dispatch */
    {
        op_job j = {c, em_ones(c, EM_F32, EM_SHAPE(1)), em_ones(c, EM_F32, EM_SHAPE(1)), "add"};
        double ms = bench_median_ms(run_dispatch, &j, mt) / 1000;
        double p = torch.available ? bench_peer_ms(&torch, "dispatch") : -1;
        bench_row r = {.bench = "dispatch_add", .shape = "[1]", .dtype = "f32", .ms = ms,
                       .peer = p > 0 ? "torch" : NULL, .peer_ms = p};
        bench_print_row(&r, json);
    }
    /* memory-bound ops */
    {
        em_scope_push(c);
        em_tensor *a = em_randn(c, EM_F32, EM_SHAPE(big), 1, 0, 1);
        em_tensor *b = em_randn(c, EM_F32, EM_SHAPE(big), 2, 0, 1);
        for (int i = 0; i < 5; i++) {
            op_job j = {c, a, b, ew_ops[i]};
            double bytes = (double)big * 4 * (i < 2 ? 3 : i == 2 ? 2 : 1), ms, gbs;
            double frac = bench_interleaved(run_op, &j, bytes, i < 3, quick ? 5 : 11, 1, &ms, &gbs);
            double lim = ms * frac;
            double p = torch.available ? bench_peer_ms(&torch, ew_ops[i]) : -1;
            char shape[32];
            snprintf(shape, sizeof shape, "[%lld] %lldMiB", (long long)big, (long long)(big * 4 >> 20));
            bench_row r = {.bench = ew_ops[i], .shape = shape, .dtype = "f32", .ms = ms,
                           .limit_ms = lim, .limit_what = i < 3 ? "triad bw" : "read bw",
                           .peer = p > 0 ? "torch" : NULL, .peer_ms = p, .flops = (double)big,
                           .bytes = bytes};
            bench_print_row(&r, json);
        }
        /* fused mode: the same 8-op chain evaluated in one pass vs op by op */
        op_job j = {c, a, b, "chain"};
        em_ctx_set_eager_mode(c, EM_EAGER_ASYNC);
        double async_ms = bench_median_ms(run_chain, &j, mt);
        em_ctx_set_eager_mode(c, EM_EAGER_FUSED);
        double fused_ms = bench_median_ms(run_chain, &j, mt);
        em_ctx_set_eager_mode(c, EM_EAGER_ASYNC);
        char shape[32];
        snprintf(shape, sizeof shape, "[%lld] 8 ops", (long long)big);
        double lim = (double)big * 4 * 3 / (L.triad_gbs * 1e9) * 1e3; /* 2 inputs, 1 output */
        bench_row r = {.bench = "fused_chain", .shape = shape, .dtype = "f32", .ms = fused_ms,
                       .limit_ms = lim, .limit_what = "triad bw", .peer = "ember async",
                       .peer_ms = async_ms, .flops = 8.0 * (double)big,
                       .bytes = (double)big * 4 * 3};
        bench_print_row(&r, json);
        em_scope_pop(c);
    }
    /* matmul 2048^3 */
    for (int d = 0; d < 2; d++) {
        em_scope_push(c);
        em_dtype dt = d ? EM_BF16 : EM_F32;
        em_tensor *a = em_randn(c, dt, EM_SHAPE(2048, 2048), 3, 0, 1);
        em_tensor *b = em_randn(c, dt, EM_SHAPE(2048, 2048), 4, 0, 1);
        op_job j = {c, a, b, "matmul"};
        run_op(&j);
        if (em_ctx_status(c)) {
            fprintf(stderr, "matmul %s: %s\n", em_dtype_name(dt), em_ctx_error(c)->message);
            em_ctx_clear_error(c);
            em_scope_pop(c);
            continue;
        }
        double ms = bench_median_ms(run_op, &j, mt * 2);
        double flops = 2.0 * 2048 * 2048 * 2048;
        double peak = !d ? L.fp32_gflops : L.bf16_tiles_gflops > 0 ? L.bf16_tiles_gflops : L.bf16_gflops;
        double lim = flops / (peak * 1e9) * 1e3;
        double pt = torch.available ? bench_peer_ms(&torch, d ? "matmul_bf16" : "matmul_f32") : -1;
        const char *peer = pt > 0 ? "torch" : NULL;
        double pms = pt;
        if (!d && blas_ms > 0 && (pms < 0 || blas_ms < pms)) {
            peer = blas_name;
            pms = blas_ms;
        }
        bench_row r = {.bench = "matmul", .shape = "[2048,2048,2048]", .dtype = em_dtype_name(dt),
                       .ms = ms, .limit_ms = lim, .limit_what = d ? "bf16 peak" : "fp32 peak",
                       .peer = peer, .peer_ms = pms, .flops = flops,
                       .bytes = 3.0 * 2048 * 2048 * (double)em_dtype_size(dt)};
        bench_print_row(&r, json);
        /* the other peer on a line of its own (the row shows the faster one) */
        if (!d && !json && blas_ms > 0 && pt > 0)
            printf("%-16s %-22s %-5s %10s %10s %7s  %-18s %10.4g\n", "", "", "", "", "", "",
                   peer == blas_name ? "torch" : blas_name, peer == blas_name ? pt : blas_ms);
        em_scope_pop(c);
    }
    /* decode-shaped bf16 linear: weights rotate through 8 copies (> L3) */
    for (int ni = 0; ni < 2; ni++)
        for (int mi = 0; mi < 4; mi++) {
            em_scope_push(c);
            int m = M_[mi], n = N_[ni], k = 2048;
            /* enough copies to span 256 MiB (8x the L3): each call reads its weights from DRAM */
            int copies = (int)((256.0 * 1048576) / ((double)n * k * 2) + 1);
            if (copies > 160) copies = 160;
            lin_job j = {c, em_randn(c, EM_BF16, EM_SHAPE(m, k), 5, 0, 1), {NULL}, copies, 0};
            for (int w = 0; w < j.copies; w++)
                j.w[w] = em_rand(c, EM_BF16, EM_SHAPE(n, k), 10 + (uint64_t)w, -0.05, 0.05);
            run_linear(&j);
            if (em_ctx_status(c)) {
                fprintf(stderr, "linear: %s\n", em_ctx_error(c)->message);
                em_ctx_clear_error(c);
                em_scope_pop(c);
                continue;
            }
            double bytes = (double)n * k * 2, flops = 2.0 * m * n * k, ms, gbs;
            double frac = bench_interleaved(run_linear, &j, bytes, false, quick ? 9 : 21, 40, &ms, &gbs);
            /* the peak of the units the product runs on: AMX tiles from 17 rows (gemm.c) */
            double peak = m > 16 && L.bf16_tiles_gflops > 0 ? L.bf16_tiles_gflops : L.bf16_gflops;
            double mem = ms * frac, comp = flops / (peak * 1e9) * 1e3;
            char name[32], shape[48];
            snprintf(name, sizeof name, "linear_%d_%d", m, n);
            snprintf(shape, sizeof shape, "M%d K%d N%d", m, k, n);
            double p = torch.available ? bench_peer_ms(&torch, name) : -1;
            bench_row r = {.bench = "decode_linear", .shape = shape, .dtype = "bf16", .ms = ms,
                           .limit_ms = mem > comp ? mem : comp,
                           .limit_what = mem > comp ? "weight read bw" : "bf16 peak",
                           .peer = p > 0 ? "torch" : NULL, .peer_ms = p, .flops = flops,
                           .bytes = bytes};
            bench_print_row(&r, json);
            em_scope_pop(c);
        }
    em_ctx_free(c);
    return 0;
}

/*
 * `ember bench ops --device DEV`: what a PJRT device costs Ember. Measured in one run:
 *  - Ember's overhead per cached eager op: wall time of a tiny op minus the time inside the
 *    plugin's execute call (and any wait for earlier work), against the CPU backend's dispatch;
 *  - compile time of a new op (the disk cache is off for this run);
 *  - the same ops on the device and on the CPU backend (ratio device / cpu);
 *  - fused against async on a chain of 8 element-wise ops.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "ember/ember.h"

typedef struct dev_job {
    em_ctx *c;
    em_tensor *a, *b, *g;
    int kind; /* 0 add, 1 softmax, 2 matmul, 3 chain, 4 ragged_dot */
} dev_job;

static em_tensor *chain8(em_ctx *c, em_tensor *x, em_tensor *y) {
    em_tensor *h = em_add(c, em_mul(c, x, y), y);
    h = em_sub(c, em_silu(c, h), x);
    h = em_mul(c, em_tanh(c, h), em_exp(c, em_neg(c, y)));
    return em_add(c, h, x);
}

static void run_dev(void *user) {
    dev_job *j = user;
    em_ctx *c = j->c;
    em_scope_push(c);
    em_tensor *r = NULL;
    switch (j->kind) {
    case 0: r = em_add(c, j->a, j->b); break;
    case 1: r = em_softmax(c, j->a, -1); break;
    case 2: r = em_matmul(c, j->a, j->b); break;
    case 3: r = chain8(c, j->a, j->b); break;
    case 4: r = em_ragged_dot(c, j->a, j->b, j->g, true); break;
    }
    double v;
    /* one element back to the host: the op has completed */
    if (r) em_item(c, em_reshape(c, em_slice(c, em_reshape(c, r, 1, (int64_t[]){-1}), 0, 0, 1, 1), 0, NULL), &v);
    em_scope_pop(c);
}

typedef struct disp_job {
    em_ctx *c;
    em_tensor *a, *b;
    int n;
} disp_job;

static void run_dispatch(void *user) {
    disp_job *j = user;
    for (int i = 0; i < j->n; i++) {
        em_scope_push(j->c);
        em_add(j->c, j->a, j->b);
        em_scope_pop(j->c);
    }
}

int bench_ops_device(const char *name, bool json, bool quick);
int bench_ops_device(const char *name, bool json, bool quick) {
    /* compile times are measured, not loaded from disk */
    if (!getenv("EMBER_PJRT_CACHE_DIR")) setenv("EMBER_PJRT_CACHE_DIR", "off", 1);
    em_ctx *c = em_ctx_create();
    em_device *d = em_device_get(c, name), *cpu = em_device_cpu();
    if (!d || !em_device_is_pjrt(d)) {
        fprintf(stderr, "ember bench ops: %s\n",
                d ? "not a PJRT device" : em_ctx_error(c)->message);
        em_ctx_free(c);
        return 1;
    }
    double mt = quick ? 0.2 : 0.5;
    em_pjrt_plugin_info pi;
    em_pjrt_plugin_info_get(d, &pi);
    if (!json)
        printf("device %s: %s, PJRT %d.%d, %s\n\n", name, pi.platform, pi.api_major,
               pi.api_minor, pi.path);

    /* ---- Ember's overhead per cached op ---- */
    em_pjrt_cache_stats s0, s1;
    disp_job dj = {c, em_from_host_on(c, d, EM_F32, EM_SHAPE(1), ((float[]){1})),
                   em_from_host_on(c, d, EM_F32, EM_SHAPE(1), ((float[]){2})), 1};
    run_dispatch(&dj); /* compile */
    em_device_sync(c, d);
    int n = quick ? 2000 : 10000;
    dj.n = n;
    em_pjrt_cache_stats_get(d, &s0);
    double t0 = bench_now();
    run_dispatch(&dj);
    double wall = bench_now() - t0;
    em_pjrt_cache_stats_get(d, &s1);
    em_device_sync(c, d);
    double exec_us = (s1.execute_seconds - s0.execute_seconds) / n * 1e6;
    double wait_us = (s1.wait_seconds - s0.wait_seconds) / n * 1e6;
    double over_us = wall / n * 1e6 - exec_us - wait_us;
    disp_job cj = {c, em_ones(c, EM_F32, EM_SHAPE(1)), em_ones(c, EM_F32, EM_SHAPE(1)), 1000};
    double cpu_us = bench_median_ms(run_dispatch, &cj, mt) / 1000 * 1e3;
    if (json)
        printf("{\"bench\": \"pjrt_overhead\", \"device\": \"%s\", \"ember_overhead_us\": %.2f, "
               "\"plugin_execute_us\": %.2f, \"queue_wait_us\": %.2f, \"cpu_dispatch_us\": %.2f, "
               "\"ratio_to_cpu\": %.2f, \"target_us\": 20}\n",
               name, over_us, exec_us, wait_us, cpu_us, over_us / cpu_us);
    else
        printf("cached eager op (add f32[1], %d calls): Ember overhead %.2f us/op (target <= 20), "
               "plugin execute call %.2f us/op, queue waits %.2f us/op; CPU backend dispatch "
               "%.2f us/op (ratio %.1fx)\n",
               n, over_us, exec_us, wait_us, cpu_us, over_us / cpu_us);

    /* ---- compile time of a new op ---- */
    int nc = quick ? 3 : 6;
    em_pjrt_cache_stats_get(d, &s0);
    t0 = bench_now();
    for (int i = 0; i < nc; i++) {
        em_scope_push(c);
        int64_t len = 1000 + i;
        em_tensor *x = em_zeros(c, EM_F32, 1, &len);
        em_tensor *y = em_to(c, x, d);
        double v;
        em_item(c, em_sum(c, em_mul(c, y, y), NULL, 0, false), &v);
        em_scope_pop(c);
    }
    double first_call = (bench_now() - t0) / nc;
    em_pjrt_cache_stats_get(d, &s1);
    int64_t compiles = s1.compiles - s0.compiles;
    double per_compile = compiles ? (s1.compile_seconds - s0.compile_seconds) / compiles : 0;
    if (json)
        printf("{\"bench\": \"pjrt_compile\", \"device\": \"%s\", \"compile_ms\": %.2f, "
               "\"first_call_ms\": %.2f, \"compiles\": %lld}\n",
               name, per_compile * 1e3, first_call * 1e3, (long long)compiles);
    else
        printf("new op: %.1f ms per compile (%lld compiles), %.1f ms for a first call of "
               "mul+sum on a new shape\n\n",
               per_compile * 1e3, (long long)compiles, first_call * 1e3);
    if (em_ctx_status(c)) {
        fprintf(stderr, "%s\n", em_ctx_error(c)->message);
        em_ctx_clear_error(c);
    }

    /* ---- the same ops on the device and on the CPU ---- */
    bench_print_header(json);
    int64_t big = quick ? (1 << 20) : (4 << 20);
    struct {
        const char *name, *shape;
        int kind;
    } ops[5] = {{"add", "[N] f32", 0}, {"softmax", "[256,4096]", 1}, {"matmul", "[512]^3 f32", 2},
                {"ragged_dot", "M8 G64 K512 N256", 4}, {"chain8", "[N] f32", 3}};
    for (int k = 0; k < 5; k++) {
        double ms[2];
        for (int w = 0; w < 2; w++) {
            em_device *dev = w ? cpu : d;
            em_scope_push(c);
            em_ctx_set_device(c, dev);
            dev_job j = {c, NULL, NULL, NULL, ops[k].kind};
            switch (ops[k].kind) {
            case 0:
            case 3:
                j.a = em_randn(c, EM_F32, 1, &big, 1, 0, 1);
                j.b = em_randn(c, EM_F32, 1, &big, 2, 0, 1);
                break;
            case 1: j.a = em_randn(c, EM_F32, EM_SHAPE(256, 4096), 3, 0, 1); break;
            case 2:
                j.a = em_randn(c, EM_F32, EM_SHAPE(512, 512), 4, 0, 1);
                j.b = em_randn(c, EM_F32, EM_SHAPE(512, 512), 5, 0, 1);
                break;
            case 4: {
                j.a = em_randn(c, EM_BF16, EM_SHAPE(8, 512), 6, 0, 1);
                j.b = em_randn(c, EM_BF16, EM_SHAPE(64, 256, 512), 7, 0, 0.05);
                int32_t gs[64] = {0};
                gs[3] = 2, gs[17] = 3, gs[40] = 1, gs[63] = 2;
                j.g = em_from_host(c, EM_I32, EM_SHAPE(64), gs);
                break;
            }
            }
            run_dev(&j);
            if (em_ctx_status(c)) {
                ms[w] = -1;
                if (!json) printf("%s on %s: %s\n", ops[k].name, em_device_name(dev),
                                  em_ctx_error(c)->message);
                em_ctx_clear_error(c);
            } else {
                ms[w] = bench_median_ms(run_dev, &j, mt);
            }
            em_ctx_set_device(c, cpu);
            em_scope_pop(c);
        }
        if (ms[0] < 0) continue;
        bench_row r = {.bench = ops[k].name, .shape = ops[k].shape, .dtype = "", .ms = ms[0],
                       .peer = ms[1] > 0 ? "cpu" : NULL, .peer_ms = ms[1]};
        bench_print_row(&r, json);
    }

    /* ---- fused against async on the device ---- */
    em_scope_push(c);
    em_ctx_set_device(c, d);
    dev_job j = {c, em_randn(c, EM_F32, 1, &big, 1, 0, 1), em_randn(c, EM_F32, 1, &big, 2, 0, 1),
                 NULL, 3};
    em_ctx_set_device(c, cpu);
    em_ctx_set_eager_mode(c, EM_EAGER_ASYNC);
    run_dev(&j);
    double async_ms = bench_median_ms(run_dev, &j, mt);
    em_ctx_set_eager_mode(c, EM_EAGER_FUSED);
    run_dev(&j);
    double fused_ms = bench_median_ms(run_dev, &j, mt);
    em_ctx_set_eager_mode(c, EM_EAGER_ASYNC);
    em_scope_pop(c);
    char shape[48];
    snprintf(shape, sizeof shape, "[%lld] 8 ops", (long long)big);
    bench_row r = {.bench = "fused_chain", .shape = shape, .dtype = "f32", .ms = fused_ms,
                   .peer = "ember async", .peer_ms = async_ms};
    bench_print_row(&r, json);
    if (!json)
        printf("\nfused / async on %s: %.2fx (%s)\n", name, fused_ms / async_ms,
               fused_ms < async_ms ? "fused is faster" : "fused is NOT faster");
    em_ctx_free(c);
    return 0;
}

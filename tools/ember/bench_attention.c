/*
 * `ember bench attention`: the CPU's scaled dot-product attention (em_sdpa) on the attention of
 * Llama 3 8B (32 query heads, 8 KV heads, head dim 128; random bf16 or f32, fixed seed): decode
 * (one query against a long KV cache, the keys split over the threads; a batch of 4) and causal
 * prefill. With --kernels SPEC[,SPEC] the packages are loaded and each shape is timed with them
 * against the built-ins in the same process (bench_ab_rounds: rounds of both, the packages
 * suspended for the built-in's turn, which side goes first alternating; per turn the median of
 * 0.1 s of calls; the medians over the rounds, and hub/built-in as the median of the rounds'
 * ratios), with the implementation the registry picks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "bench_ab.h"
#include "bench_util.h"
#include "cli.h"
#include "core/kernel_registry.h"
#include "ember/ember.h"

typedef struct attn_shape {
    const char *what;
    int64_t b, hq, hkv, tq, tk, d;
    em_dtype dtype;
} attn_shape;

static const attn_shape SHAPES[] = {
    {"decode", 1, 32, 8, 1, 4096, 128, EM_BF16},
    {"decode", 1, 32, 8, 1, 16384, 128, EM_BF16},
    {"decode", 4, 32, 8, 1, 4096, 128, EM_BF16},
    {"decode", 1, 32, 8, 1, 4096, 128, EM_F32},
    {"prefill", 1, 32, 8, 512, 512, 128, EM_BF16},
    {"prefill", 1, 32, 8, 1024, 1024, 128, EM_BF16},
};

typedef struct attn_job {
    em_ctx *c;
    em_tensor *q, *k, *v;
    em_sdpa_params p;
} attn_job;

static void call(void *user) {
    attn_job *j = user;
    em_scope_push(j->c);
    if (!em_sdpa(j->c, j->q, j->k, j->v, NULL, &j->p)) {
        fprintf(stderr, "ember bench attention: %s\n", em_ctx_error(j->c)->message);
        exit(1);
    }
    em_scope_pop(j->c);
}

static double turn(void *user) { return bench_median_ms(call, user, 0.1); }

/* The implementation the registry picks for the job's call (inference). */
static const char *taker(attn_job *j) {
    em_scope_push(j->c);
    const int64_t *qs = em_tensor_shape(j->q);
    em_tensor *out = em_empty(j->c, em_tensor_dtype(j->q), EM_SHAPE(qs[0], qs[1], qs[2], qs[3]));
    em_tensor *ins[] = {j->q, j->k, j->v};
    em_attr at[EM_MAX_ATTRS] = {{.f = 0}, {.i = 1}};
    em_kernel_args a = {j->c, em_op_get(EM_OP_SDPA), ins, 3, &out, 1, at};
    const em_kimpl *k = out ? em_kset_pick(em_kset_get(em_device_cpu()->be, EM_OP_SDPA), &a,
                                           EM_KMODE_INFERENCE)
                            : NULL;
    em_scope_pop(j->c);
    return k ? k->name : "(none)";
}

static void usage(void) {
    printf("usage: ember bench attention [--kernels SPEC[,SPEC] [--rounds N]] [--quick]\n"
           "                             [--shapes I,J,...] [--json]\n\n"
           "Times em_sdpa on Llama 3 8B's attention (32 query heads, 8 KV heads, head dim 128):\n"
           "decode against a 4096 / 16384-token KV cache (batch 1 and 4, bf16; batch 1 f32) and\n"
           "causal prefill of 512 / 1024 tokens (bf16). --kernels loads kernel packages\n"
           "(docs/kernels.md) and times each shape with them against the built-ins in one\n"
           "process: --rounds N rounds (default 15, at most 16) of 0.1 s of calls each, the\n"
           "medians, the median of the rounds' ratios, and the implementation the registry picks.\n"
           "--quick: the first and the prefill-512 shapes only; --shapes: those rows of the\n"
           "table (1-6, in the order above).\n");
}

int bench_attention(int argc, char **argv) {
    bool json = false, quick = false;
    int rounds = 15;
    const char *kernels = NULL;
    bool on[sizeof SHAPES / sizeof *SHAPES];
    for (size_t s = 0; s < sizeof on; s++) on[s] = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--quick")) quick = true;
        else if (!strcmp(argv[i], "--kernels") && i + 1 < argc) kernels = argv[++i];
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            long long v[1];
            if (cli_int_list("bench attention", argv[i], argv[i + 1], 1, 16, v, 1) != 1) return 2;
            rounds = (int)v[0];
            i++;
        } else if (!strcmp(argv[i], "--shapes") && i + 1 < argc) {
            long long v[8];
            int n = cli_int_list("bench attention", argv[i], argv[i + 1], 1, (long long)sizeof on,
                                 v, 8);
            if (n < 0) return 2;
            for (size_t s = 0; s < sizeof on; s++) on[s] = false;
            for (int k = 0; k < n; k++) on[v[k] - 1] = true;
            i++;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "ember bench attention: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (kernels) {
        if (!bench_load_packages("ember bench attention", kernels)) return 1;
        em_kreg_suspend_packages(true); /* the built-ins, except in the package's turns */
    }
    if (!json)
        printf("%-8s %-24s %-5s %12s %12s %9s  %s\n", "attn", "[B,Hq,Hkv,Tq,Tk,D]", "dtype",
               "built-in ms", kernels ? "package ms" : "", kernels ? "hub/bi" : "",
               kernels ? "sdpa implementation" : "");
    em_ctx *c = em_ctx_create();
    for (size_t s = 0; s < sizeof SHAPES / sizeof *SHAPES; s++) {
        const attn_shape *a = &SHAPES[s];
        if (!on[s] || (quick && s != 0 && s != 4)) continue;
        em_scope_push(c);
        attn_job j = {c, em_rand(c, a->dtype, EM_SHAPE(a->b, a->hq, a->tq, a->d), 1, -1, 1),
                      em_rand(c, a->dtype, EM_SHAPE(a->b, a->hkv, a->tk, a->d), 2, -1, 1),
                      em_rand(c, a->dtype, EM_SHAPE(a->b, a->hkv, a->tk, a->d), 3, -1, 1),
                      em_sdpa_default_params()};
        j.p.causal = true;
        if (!j.q || !j.k || !j.v) {
            fprintf(stderr, "ember bench attention: %s\n", em_ctx_error(c)->message);
            em_ctx_free(c);
            return 1;
        }
        char shape[96];
        snprintf(shape, sizeof shape, "[%lld,%lld,%lld,%lld,%lld,%lld]", (long long)a->b,
                 (long long)a->hq, (long long)a->hkv, (long long)a->tq, (long long)a->tk,
                 (long long)a->d);
        double bi = -1, hub = -1, ratio = -1;
        const char *impl = "built-in";
        if (kernels) {
            em_kreg_suspend_packages(false);
            impl = taker(&j);
            em_kreg_suspend_packages(true);
            bench_ab_rounds(turn, &j, rounds, &bi, &hub, &ratio);
        } else {
            bi = turn(&j);
        }
        if (json) {
            printf("{\"bench\": \"attention\", \"what\": \"%s\", \"shape\": \"%s\", \"dtype\": "
                   "\"%s\", \"threads\": %d, \"ms\": %.4f", a->what, shape,
                   em_dtype_name(a->dtype), em_num_threads(), bi);
            if (kernels)
                printf(", \"kernels\": \"%s\", \"sdpa_impl\": \"%s\", \"ab_rounds\": %d, "
                       "\"ab_builtin_ms\": %.4f, \"ab_hub_ms\": %.4f, \"hub_over_builtin\": %.4f",
                       kernels, impl, rounds, bi, hub, ratio);
            printf("}\n");
        } else {
            char hb[32] = "", rb[32] = "";
            if (kernels) {
                snprintf(hb, sizeof hb, "%.3f", hub);
                snprintf(rb, sizeof rb, "%.3f", ratio);
            }
            printf("%-8s %-24s %-5s %12.3f %12s %9s  %s\n", a->what, shape,
                   em_dtype_name(a->dtype), bi, hb, rb, kernels ? impl : "");
        }
        fflush(stdout);
        em_scope_pop(c);
    }
    em_ctx_free(c);
    return 0;
}

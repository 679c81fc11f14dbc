/*
 * `ember bench moe`: one MoE layer with the real dimensions of Qwen3-30B-A3B and Gemma 4 26B-A4B
 * (bf16 weights, random, fixed seed), decode batches 1..64: Ember's loop, dense and ragged
 * implementations against the memory-bandwidth bound for the expert weights each batch must read
 * and against transformers' blocks in torch eager, in one run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "bench/probe.h"
#include "bench_ab.h"
#include "bench_aot.h"
#include "bench_device_bw.h"
#include "bench_limits.h"
#include "bench_util.h"
#include "cli.h"
#include "core/kernel_registry.h"
#include "ember/ember.h"
#include "ember/kernels.h"

typedef struct moe_model {
    const char *name, *peer_name;
    int64_t hidden, experts, top_k, inter;
    em_moe_act act;
    bool norm;
} moe_model;

static const moe_model MODELS[] = {
    {"qwen3-30b-a3b", "qwen3_30b_a3b", 2048, 128, 8, 768, EM_MOE_ACT_SILU, true},
    {"gemma4-26b-a4b", "gemma4_26b_a4b", 2816, 128, 8, 704, EM_MOE_ACT_GELU_TANH, true},
};

typedef struct moe_job {
    em_ctx *c;
    em_tensor *x, *router;
    em_moe_weights w;  /* the Hub's layout: loop and dense */
    em_moe_weights wr; /* what ragged reads: w packed (em_ragged_pack) where that pays, as a
                          model load does, unless --no-pack */
    em_moe_params p;
    em_moe_stats st;
    em_compiled *f; /* --compile: the layer (router, routing, ragged experts) as one program */
} moe_job;

/* The layer as a compiled function: routing stays on the device, shapes depend on the batch. */
static int moe_fn(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *st, int n_st,
                  em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)st, (void)n_st, (void)max_out;
    moe_job *j = user;
    em_moe_params p = j->p;
    p.impl = EM_MOE_RAGGED;
    p.device_routing = true;
    em_tensor *idx = NULL;
    em_tensor *rw = em_moe_route(c, em_linear(c, in[0], j->router, NULL), &p,
                                 j->w.per_expert_scale, em_tensor_dtype(in[0]), &idx);
    out[0] = em_moe_experts(c, in[0], idx, rw, &j->wr, &p, NULL);
    return out[0] ? 1 : -1;
}

static void run_compiled(void *user) {
    moe_job *j = user;
    em_ctx *c = j->c;
    em_scope_push(c);
    em_tensor *y = NULL;
    if (em_compiled_call(c, j->f, &j->x, 1, NULL, 0, &y, 1) == 1) {
        if (em_device_is_pjrt(em_tensor_device(y))) em_device_sync(c, em_tensor_device(y));
        else em_tensor_data(c, y);
    }
    em_scope_pop(c);
}

static void run_moe(void *user) {
    moe_job *j = user;
    em_ctx *c = j->c;
    em_scope_push(c);
    em_tensor *idx = NULL;
    em_tensor *logits = em_linear(c, j->x, j->router, NULL);
    em_tensor *rw = em_moe_route(c, logits, &j->p, j->w.per_expert_scale, em_tensor_dtype(j->x), &idx);
    const em_moe_weights *w = j->p.impl == EM_MOE_RAGGED ? &j->wr : &j->w;
    em_tensor *y = em_moe_experts(c, j->x, idx, rw, w, &j->p, &j->st);
    /* completed: host data on the CPU; every queued execution on a PJRT device */
    if (y && em_device_is_pjrt(em_tensor_device(y))) em_device_sync(c, em_tensor_device(y));
    else if (y) em_tensor_data(c, y);
    em_scope_pop(c);
}

/* ---- compile-only devices: the layer projected from XLA's cost analysis ---- */

typedef struct ragged_flops {
    int64_t m, h, inter; /* rows of the batch's ragged dots (tokens * top_k); the two K's */
    double flops;        /* XLA's count, summed over them */
    int n;
} ragged_flops;

static int ragged_cb(const em_pjrt_program_report *r, void *user) {
    ragged_flops *f = user;
    for (int k = 0; k < 2; k++) { /* gate_up reads [M, H], down [M, I] */
        char pre[64];
        snprintf(pre, sizeof pre, "ragged_dot(bf16[%lld,%lld]", (long long)f->m,
                 (long long)(k ? f->inter : f->h));
        if (!strncmp(r->what, pre, strlen(pre)) && r->flops > 0) {
            f->flops += r->flops;
            f->n++;
        }
    }
    return 0;
}

/* One layer call on compile-only device d, projected: a first call compiles, the second is
 * counted. The routing of loop and ragged (eager) is read on the host, as transformers reads
 * it: here it comes from the same layer on the CPU (same seeds), while the device computes its
 * own router and routing for the cost. */
static void project_call(moe_job *j, em_device *d, em_tensor *idx_cpu, bool compiled,
                         const bench_aot_overhead *ov, bench_aot_sample *s) {
    em_ctx *c = j->c;
    for (int pass = 0; pass < 2; pass++) {
        if (pass) bench_aot_begin(d);
        em_scope_push(c);
        if (compiled) {
            em_tensor *y = NULL;
            em_compiled_call(c, j->f, &j->x, 1, NULL, 0, &y, 1);
        } else {
            em_tensor *idx_dev = NULL;
            em_tensor *rw = em_moe_route(c, em_linear(c, j->x, j->router, NULL), &j->p,
                                         j->w.per_expert_scale, EM_BF16, &idx_dev);
            em_moe_experts(c, j->x, idx_cpu, rw, &j->w, &j->p, &j->st);
        }
        em_scope_pop(c);
    }
    bench_aot_end(d, ov, compiled ? 0 : 1, s);
}

static int moe_project(em_device *d, const char *which, const int *batches, int nb,
                       double launch_us, double sync_us, int shard, bool json) {
    bench_aot_overhead ov;
    bench_aot_overhead_get(launch_us, sync_us, &ov);
    bench_aot_header(d, &ov, json);
    em_pjrt_topology t;
    em_pjrt_topology_get(d, &t);
    for (size_t mi = 0; mi < sizeof MODELS / sizeof MODELS[0]; mi++) {
        const moe_model *md = &MODELS[mi];
        if (strcmp(which, "all") && !strstr(md->name, which)) continue;
        /* --tp-shard N: one chip's slice of every expert (moe_tp_experts), as the tensor-parallel
         * plan splits the layer; router and routing stay whole */
        int64_t h = md->hidden, e = md->experts, in = md->inter / shard;
        if (md->inter % shard) {
            fprintf(stderr, "ember bench moe: --tp-shard %d does not divide %s's intermediate "
                            "size %lld\n", shard, md->name, (long long)md->inter);
            return 2;
        }
        double layer_bytes = 3.0 * (double)in * h * 2 * e + (double)e * h * 2;
        em_ctx *c = em_ctx_create(), *cc = em_ctx_create(); /* the device; the CPU twin */
        em_ctx_set_device(c, d);
        moe_job j = {c, NULL, NULL, {NULL, NULL, NULL}, {NULL, NULL, NULL}, em_moe_default_params(),
                     {0, 0}, NULL};
        j.p.top_k = md->top_k;
        j.p.norm_topk_prob = md->norm;
        j.p.act = md->act;
        /* shape-only weights on the device (zeros: no random program to compile) */
        j.router = em_zeros(c, EM_BF16, EM_SHAPE(e, h));
        j.w.gate_up = em_zeros(c, EM_BF16, EM_SHAPE(e, 2 * in, h));
        j.w.down = em_zeros(c, EM_BF16, EM_SHAPE(e, h, in));
        j.wr = j.w;
        em_tensor *router_cpu = em_rand(cc, EM_BF16, EM_SHAPE(e, h), 100, -0.05, 0.05);
        if (!json)
            printf("\n%s: hidden %lld, %lld experts, top-%lld, intermediate %lld, bf16; one "
                   "layer's weights %.2f GB of the chip's %.1f GB\n"
                   "%6s %-16s %8s %9s %10s %11s %12s %12s %8s %8s\n",
                   md->name, (long long)h, (long long)e, (long long)md->top_k, (long long)in,
                   layer_bytes / 1e9, t.hbm_bytes / 1e9, "batch", "impl", "programs", "GFLOP",
                   "MB access", "roofline us", "overhead us", "projected us", "loop/this",
                   "hit");
        for (int bi = 0; bi < nb && !em_ctx_status(c); bi++) {
            int b = batches[bi];
            em_scope_push(c);
            em_scope_push(cc);
            j.x = em_zeros(c, EM_BF16, EM_SHAPE(b, h));
            em_tensor *idx_cpu = NULL;
            em_tensor *x_cpu = em_rand(cc, EM_BF16, EM_SHAPE(b, h), 200 + (uint64_t)b, -1, 1);
            em_moe_route(cc, em_linear(cc, x_cpu, router_cpu, NULL), &j.p, NULL, EM_BF16,
                         &idx_cpu);
            bench_aot_sample smp[3];
            int64_t hit = 0;
            for (int k = 0; k < 3; k++) {
                j.p.impl = k == 1 ? EM_MOE_LOOP : EM_MOE_RAGGED;
                if (k == 2) j.f = em_compile(c, "moe_layer", moe_fn, &j);
                project_call(&j, d, idx_cpu, k == 2, &ov, &smp[k]);
                if (k == 0) hit = j.st.experts_hit;
                em_compiled_free(j.f);
                j.f = NULL;
            }
            if (em_ctx_status(c) || em_ctx_status(cc)) {
                fprintf(stderr, "ember bench moe: %s\n",
                        em_ctx_status(c) ? em_ctx_error(c)->message : em_ctx_error(cc)->message);
                em_scope_pop(cc);
                em_scope_pop(c);
                break;
            }
            /* what XLA counts for the ragged dots against the multiply-adds they must do */
            ragged_flops rf = {(int64_t)b * md->top_k, h, in, 0, 0};
            em_pjrt_reports(d, ragged_cb, &rf);
            double useful = 2.0 * (double)b * md->top_k * 3.0 * in * h;
            /* XLA's bytes for a ragged dot are its whole rhs: every expert, hit or not (the
             * group sizes are data to it). A grouped kernel that skips empty groups reads the
             * hit ones: the ragged rows again with the unhit experts' bytes taken out
             * (ragged* below; an assumption about the kernel, stated as such) */
            double unhit_s = (double)(e - hit) * 3.0 * in * h * 2 / (t.hbm_gbs * 1e9);
            for (int k = 0; k < 5; k++) {
                bench_aot_sample corr;
                const bench_aot_sample *s = &smp[k == 3 ? 0 : k == 4 ? 2 : k];
                if (k >= 3) {
                    corr = *s;
                    double floor = corr.p.flops / (t.bf16_tflops * 1e12);
                    double r = corr.p.roofline_seconds - unhit_s;
                    corr.p.roofline_seconds = r > floor ? r : floor;
                    corr.projected_s -= s->p.roofline_seconds - corr.p.roofline_seconds;
                    s = &corr;
                }
                static const char *cn[5] = {"ragged", "loop", "ragged_compiled", "",
                                            "ragged_compiled*"};
                const char *nm = k == 3 ? "ragged*" : cn[k];
                double over = s->projected_s - s->p.roofline_seconds;
                if (json)
                    printf("{\"bench\": \"moe\", \"device\": \"%s\", \"model\": \"%s\", "
                           "\"batch\": %d, \"impl\": \"%s\", \"programs\": %lld, \"syncs\": %d, "
                           "\"flops\": %.6g, \"bytes_accessed\": %.6g, \"roofline_us\": %.3f, "
                           "\"overhead_us\": %.3f, \"projected_us\": %.3f, "
                                   "\"loop_over_this\": %.4f, \"experts_hit\": %lld, "
                           "\"tp_shard\": %d, \"intermediate\": %lld}\n",
                           em_device_name(d), md->name, b, nm, (long long)s->p.launches,
                           k == 2 || k == 4 ? 0 : 1, s->p.flops, s->p.bytes_accessed,
                           s->p.roofline_seconds * 1e6, over * 1e6, s->projected_s * 1e6,
                           smp[1].projected_s / s->projected_s, (long long)hit, shard,
                           (long long)in);
                else
                    printf("%6d %-16s %8lld %9.3f %10.1f %11.1f %12.1f %12.1f %7.2fx %8lld\n",
                           b, nm, (long long)s->p.launches, s->p.flops / 1e9,
                           s->p.bytes_accessed / 1e6, s->p.roofline_seconds * 1e6, over * 1e6,
                           s->projected_s * 1e6, smp[1].projected_s / s->projected_s,
                           (long long)hit);
            }
            if (!json)
                printf("%6s (*: without the bytes of the %lld experts no token chose, which XLA "
                       "counts in a ragged dot)\n", "", (long long)(e - hit));
            if (rf.n) {
                if (json)
                    printf("{\"bench\": \"moe_ragged_flops\", \"model\": \"%s\", \"batch\": %d, "
                           "\"xla_flops\": %.6g, \"useful_flops\": %.6g, \"dense_flops\": %.6g}\n",
                           md->name, b, rf.flops, useful, useful * (double)e);
                else
                    printf("%6s ragged_dot: XLA counts %.3g FLOP for %d programs, the rows need "
                           "%.3g (%.2fx); every row against every expert would be %.3g\n",
                           "", rf.flops, rf.n, useful, rf.flops / useful, useful * (double)e);
            }
            fflush(stdout);
            em_scope_pop(cc);
            em_scope_pop(c);
        }
        em_ctx_free(cc);
        em_ctx_free(c);
    }
    return 0;
}

/* ---- --kernels: the layer with kernel packages against the built-ins, in one process ---- */

/* The implementation the registry picks for the layer's ragged_dot (its first gate/up call:
 * every token on expert 0), so the table says whether a package takes the calls at all. */
static const char *ragged_taker(moe_job *j) {
    em_ctx *c = j->c;
    em_scope_push(c);
    int64_t t = em_tensor_shape(j->x)[0], g = em_tensor_shape(j->wr.gate_up)[0];
    int64_t n = em_tensor_ndim(j->wr.gate_up) == 5
                    ? em_tensor_shape(j->wr.gate_up)[1] * 32 : em_tensor_shape(j->wr.gate_up)[1];
    int32_t *sizes = calloc((size_t)g, sizeof *sizes);
    const char *name = "(unknown)";
    if (sizes) {
        sizes[0] = (int32_t)t;
        int64_t gsh[] = {g};
        em_tensor *ins[] = {j->x, j->wr.gate_up, em_from_host(c, EM_I32, 1, gsh, sizes)};
        em_tensor *out = em_empty(c, EM_BF16, EM_SHAPE(t, n));
        em_attr at[EM_MAX_ATTRS] = {{.i = 1}};
        em_kernel_args a = {c, em_op_get(EM_OP_RAGGED_DOT), ins, 3, &out, 1, at};
        const em_kimpl *k = ins[2] && out ? em_kset_pick(em_kset_get(em_device_cpu()->be,
                                                                     EM_OP_RAGGED_DOT),
                                                          &a, EM_KMODE_INFERENCE)
                                          : NULL;
        name = k ? k->name : "(none)";
        free(sizes);
    }
    em_ctx_clear_error(c);
    em_scope_pop(c);
    return name;
}

/* ragged with the packages and without, in bench_ab_rounds' rounds, each turn timed as the
 * table's ragged column is (bench_interleaved: `reps` pairs of a read probe, which also evicts
 * the weights from the caches, and one layer; the median layer). */
typedef struct ab_turn {
    moe_job *j;
    int reps;
    double bytes;
} ab_turn;

static double ragged_turn(void *user) {
    ab_turn *t = user;
    double ms, gbs;
    t->j->p.impl = EM_MOE_RAGGED;
    bench_interleaved(run_moe, t->j, t->bytes, false, t->reps, 1, &ms, &gbs);
    return ms;
}

static void usage(void) {
    printf("usage: ember bench moe [--json] [--model qwen3|gemma4|all] [--batches 1,4,16,32,64]\n"
           "                       [--impls loop,dense,ragged] [--skip-peers] [--quick]\n"
           "                       [--device DEV] [--compile] [--no-pack]\n"
           "                       [--launch-us US] [--sync-us US] [--tp-shard N]\n"
           "                       [--kernels SPEC[,SPEC] [--rounds N]]\n\n"
           "One MoE layer with real dimensions (Qwen3-30B-A3B: hidden 2048, 128 experts, top-8,\n"
           "intermediate 768, SwiGLU; Gemma 4 26B-A4B: hidden 2816, 128 experts, top-8,\n"
           "intermediate 704, GELU-tanh gating), bf16 weights, one token per sequence. Prints per\n"
           "batch: ms for each implementation, ragged's speedup over loop, the distinct experts\n"
           "hit, the bytes of expert weights they must read, the bandwidth bound for those bytes\n"
           "(from a read probe in the same run), the compute floor at the bf16 dot peak (dot ms),\n"
           "ragged's fraction of the larger of the two (of bnd: the roofline, as bench decode)\n"
           "and, when torch and transformers are importable ($EMBER_PYTHON or python3),\n"
           "transformers' block in torch eager.\n"
           "--device runs the layer on a PJRT device (cuda:0, tpu:0, xla:0); the bound is\n"
           "then the device's own bandwidth, measured on it.\n"
           "--no-pack: ragged reads the experts in the Hub's [E, N, K] layout instead of the\n"
           "packed one a model load gives it where that pays (bf16 on AVX-512 BF16 CPUs).\n"
           "On a compile-only device (--device tpu-aot:v6e:2x4) nothing runs: each batch's layer\n"
           "is compiled for the TPU as ragged (eager), loop (eager, one program per expert as\n"
           "transformers runs it) and ragged compiled (one program) and projected from XLA's\n"
           "flops and bytes at the chip's figures, plus a launch overhead per program and a\n"
           "sync per host-read routing, measured on xla:0 unless given (--launch-us, --sync-us).\n"
           "--tp-shard N (compile-only devices): the layer as one chip of N holds it under the\n"
           "tensor-parallel plan (moe_tp_experts: every expert's intermediate size / N).\n"
           "--kernels loads kernel packages (docs/kernels.md) and times ragged with them against\n"
           "the built-ins in the same process: --rounds (7; --quick 3, at most 16) rounds of both,\n"
           "which goes first alternating, each side timed as the ragged column is (three pairs\n"
           "of a read probe and a layer, the median), medians over the rounds (a line under\n"
           "each batch); every column of the table is the built-ins' (the packages\n"
           "suspended). CPU, eager only.\n");
}

int bench_moe(int argc, char **argv) {
    bool json = false, peers = true, quick = false, compile = false, pack = true;
    double launch_us = -1, sync_us = -1;
    int rounds = -1, shard = 1;
    const char *which = "all", *device = NULL, *kernels = NULL;
    int batches[16] = {1, 4, 16, 32, 64}, nb = 5;
    bool impl_on[3] = {true, true, true};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--skip-peers")) peers = false;
        else if (!strcmp(argv[i], "--quick")) quick = true;
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) which = argv[++i];
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--compile")) compile = true;
        else if (!strcmp(argv[i], "--no-pack")) pack = false;
        else if (!strcmp(argv[i], "--kernels") && i + 1 < argc) kernels = argv[++i];
        else if (!strcmp(argv[i], "--tp-shard") && i + 1 < argc) {
            long long v[1];
            if (cli_int_list("bench moe", argv[i], argv[i + 1], 1, 64, v, 1) != 1) return 2;
            shard = (int)v[0];
            i++;
        } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            long long v[1];
            if (cli_int_list("bench moe", argv[i], argv[i + 1], 1, 16, v, 1) != 1) return 2;
            rounds = (int)v[0];
            i++;
        }
        else if ((!strcmp(argv[i], "--launch-us") || !strcmp(argv[i], "--sync-us")) &&
                 i + 1 < argc) {
            if (!cli_real("bench moe", argv[i], argv[i + 1], 0, 1e9,
                          argv[i][2] == 'l' ? &launch_us : &sync_us))
                return 2;
            i++;
        } else if (!strcmp(argv[i], "--batches") && i + 1 < argc) {
            long long v[16];
            nb = cli_int_list("bench moe", argv[i], argv[i + 1], 1, 1 << 20, v, 16);
            if (nb < 0) return 2;
            for (int k = 0; k < nb; k++) batches[k] = (int)v[k];
            i++;
        } else if (!strcmp(argv[i], "--impls") && i + 1 < argc) {
            const char *s = argv[++i];
            for (int k = 0; k < 3; k++) impl_on[k] = strstr(s, em_moe_impl_name((em_moe_impl)k)) != NULL;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "ember bench moe: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (device) {
        em_ctx *c = em_ctx_create();
        em_device *d = em_device_get(c, device);
        if (!d) {
            fprintf(stderr, "ember bench moe: %s\n", em_ctx_error(c)->message);
            em_ctx_free(c);
            return 1;
        }
        em_ctx_free(c);
        if (em_device_is_compile_only(d))
            return moe_project(d, which, batches, nb, launch_us, sync_us, shard, json);
    }
    if (shard != 1) {
        fprintf(stderr, "ember bench moe: --tp-shard projects one chip's slice on a compile-only "
                        "device (--device tpu-aot:...) only\n");
        return 2;
    }
    if (kernels && (device || compile)) {
        fprintf(stderr, "ember bench moe: --kernels compares CPU kernels in eager calls: not with "
                        "--device or --compile\n");
        return 2;
    }
    if (kernels) {
        if (!bench_load_packages("ember bench moe", kernels)) return 1;
        em_kreg_suspend_packages(true); /* the built-ins, except in the --kernels turns */
    }
    double mt = quick ? 0.2 : 0.5;
    if (rounds < 0) rounds = quick ? 3 : 7;
    /* the bf16 dot peak gives each batch's compute floor next to its bandwidth bound: on a few
     * cores the larger batches approach it (see the README) */
    bench_limits L = {0};
    bench_measure_read(&L);
    if (!device) bench_measure_peaks(&L);
    double bw = L.read_gbs, peak = device ? 0 : L.bf16_gflops;
    /* on an accelerator (cuda:0, tpu:0) the weights sit in its own memory: its bandwidth,
     * measured there, is the bound's (it does not drift with the host's neighbours) */
    double dev_gbs = bench_device_gbs(device);
    if (dev_gbs > 0) bw = dev_gbs;
    if (!json && dev_gbs > 0) {
        printf("%s memory bandwidth %.0f GB/s (x + x over 512 MiB, read + written)\n", device,
               dev_gbs);
    } else if (!json) {
        printf("read bandwidth %.1f GB/s on %d threads (median of %d passes over %d MiB, "
               "%.1f-%.1f", bw, em_num_threads(), BENCH_PROBE_PASSES, BENCH_PROBE_MIB,
               L.read_gbs_min, L.read_gbs_max);
        /* one core's own limit: where the threads' figure is about that many times it, the
         * cores' miss handling sets the bound, not the memory (see the README) */
        if (em_num_threads() > 1 && L.read_gbs_1 > 0) printf("; one thread %.1f", L.read_gbs_1);
        printf(")");
        if (peak > 0) printf(", bf16 dot peak %.0f GFLOP/s", peak);
        printf(";\nbound ms: the bytes at the read passes run between the layer's runs (median; "
               "this header's figure where a column is not timed so)\n");
    }
    for (size_t m = 0; m < sizeof MODELS / sizeof MODELS[0]; m++) {
        const moe_model *md = &MODELS[m];
        if (strcmp(which, "all") && !strstr(md->name, which)) continue;
        bench_peer torch = {0};
        if (peers) {
            char task[512];
            int u = snprintf(task, sizeof task,
                             "{\"model\": \"%s\", \"threads\": %d, \"min_time\": %g, \"batches\": [",
                             md->peer_name, em_num_threads(), mt);
            for (int b = 0; b < nb; b++) u += snprintf(task + u, sizeof task - (size_t)u, "%s%d", b ? ", " : "", batches[b]);
            snprintf(task + u, sizeof task - (size_t)u, "]}");
            bench_peer_run("torch_moe.py", task, &torch);
            if (!torch.available && !json) printf("peer torch: unavailable (%s)\n", torch.why);
        }
        em_ctx *c = em_ctx_create();
        if (device) {
            em_device *dev = em_device_get(c, device);
            if (!dev) {
                fprintf(stderr, "ember bench moe: %s\n", em_ctx_error(c)->message);
                em_ctx_free(c);
                return 1;
            }
            em_ctx_set_device(c, dev); /* weights and inputs are made there */
            if (!json) printf("device %s\n", device);
        }
        int64_t h = md->hidden, e = md->experts, in = md->inter;
        moe_job j = {c, NULL, NULL, {NULL, NULL, NULL}, {NULL, NULL, NULL}, em_moe_default_params(),
                     {0, 0}, NULL};
        j.router = em_rand(c, EM_BF16, EM_SHAPE(e, h), 100, -0.05, 0.05);
        j.w.gate_up = em_rand(c, EM_BF16, EM_SHAPE(e, 2 * in, h), 101, -0.05, 0.05);
        j.w.down = em_rand(c, EM_BF16, EM_SHAPE(e, h, in), 102, -0.05, 0.05);
        j.wr = j.w;
        bool packed = pack && em_ragged_pack_pays(em_ctx_device(c), EM_BF16);
        if (packed) {
            j.wr.gate_up = em_ragged_pack(c, j.w.gate_up);
            j.wr.down = em_ragged_pack(c, j.w.down);
        }
        j.p.top_k = md->top_k;
        j.p.norm_topk_prob = md->norm;
        j.p.act = md->act;
        double per_expert = 3.0 * (double)in * (double)h * 2;
        if (!json)
            printf("\n%s: hidden %lld, %lld experts, top-%lld, intermediate %lld, bf16 "
                   "(%.2f GB of expert weights; ragged reads them %s)\n%6s %10s %10s %10s %8s %6s %9s %9s %7s %6s %8s %10s "
                   "%s\n",
                   md->name, (long long)h, (long long)e, (long long)md->top_k, (long long)in,
                   per_expert * (double)e / 1e9, packed ? "packed" : "in the Hub's layout", "batch", "loop ms", "dense ms", "ragged ms",
                   "rag/loop", "hit", "MB read", "bound ms", "of bnd", "GB/s", "dot ms",
                   "torch ms", "(impl)");
        for (int bi = 0; bi < nb; bi++) {
            int b = batches[bi];
            em_scope_push(c);
            j.x = em_rand(c, EM_BF16, EM_SHAPE(b, h), 200 + (uint64_t)b, -1, 1);
            double ms[3] = {-1, -1, -1};
            int64_t hit = 0;
            for (int k = 0; k < 3; k++) {
                if (!impl_on[k]) continue;
                j.p.impl = (em_moe_impl)k;
                run_moe(&j);
                if (em_ctx_status(c)) {
                    fprintf(stderr, "%s: %s\n", em_moe_impl_name(j.p.impl), em_ctx_error(c)->message);
                    em_ctx_clear_error(c);
                    continue;
                }
                hit = j.st.experts_hit;
                ms[k] = bench_median_ms(run_moe, &j, k == EM_MOE_DENSE ? mt / 2 : mt);
            }
            double bytes = (double)hit * per_expert + (double)e * h * 2;
            double bound = bytes / (bw * 1e9) * 1e3;
            /* the ragged layer's multiply-adds (router, gate/up and down for top_k rows per
             * token) at the dot peak: a floor, not part of the bound the fraction quotes */
            double flops = 2.0 * b * ((double)e * h + (double)md->top_k * 3.0 * in * h);
            double dot_ms = peak > 0 ? flops / (peak * 1e9) * 1e3 : -1;
            /* the bandwidth drifts on shared hosts: loop and ragged are timed interleaved with
             * bandwidth probes (same conditions for both; see bench_limits.h) */
            double probe_gbs = -1; /* the read bandwidth next to ragged's runs: which phase */
            for (int k = EM_MOE_LOOP; k >= EM_MOE_RAGGED && dev_gbs <= 0; k--) {
                if (ms[k] <= 0) continue;
                double rms, gbs;
                j.p.impl = (em_moe_impl)k;
                double frac = bench_interleaved(run_moe, &j, bytes, false, quick ? 5 : 9, 1, &rms, &gbs);
                ms[k] = rms;
                if (k == EM_MOE_RAGGED) {
                    bound = rms * frac;
                    probe_gbs = gbs;
                }
            }
            /* --kernels: ragged with the packages against the built-ins, in rounds */
            double ab_bi = -1, ab_hub = -1;
            const char *taker = NULL;
            if (kernels && ms[EM_MOE_RAGGED] > 0) {
                em_kreg_suspend_packages(false);
                taker = ragged_taker(&j);
                em_kreg_suspend_packages(true);
                ab_turn t = {&j, 3, bytes};
                bench_ab_rounds(ragged_turn, &t, rounds, &ab_bi, &ab_hub, NULL);
            }
            /* compile mode: the whole layer (router included) as one program, interleaved with
             * probes like the others; its bound adds the router's weights (read in both) */
            double cms = -1, cfrac = 0;
            if (compile) {
                j.f = em_compile(c, "moe_layer", moe_fn, &j);
                run_compiled(&j); /* traces and compiles */
                if (em_ctx_status(c)) {
                    fprintf(stderr, "compiled: %s\n", em_ctx_error(c)->message);
                    em_ctx_clear_error(c);
                } else if (dev_gbs > 0) {
                    cms = bench_median_ms(run_compiled, &j, mt);
                    cfrac = bound / cms;
                } else {
                    double gbs;
                    cfrac = bench_interleaved(run_compiled, &j, bytes, false, quick ? 5 : 9, 1,
                                              &cms, &gbs);
                }
                em_compiled_free(j.f);
                j.f = NULL;
            }
            /* best torch implementation for this batch */
            double best = -1;
            const char *best_name = "";
            static const char *timpl[3] = {"eager", "batched_mm", "grouped_mm"};
            for (int k = 0; k < 3; k++) {
                char nm[64];
                snprintf(nm, sizeof nm, "%s_%d", timpl[k], b);
                double v = bench_peer_ms(&torch, nm);
                if (v > 0 && (best < 0 || v < best)) {
                    best = v;
                    best_name = timpl[k];
                }
            }
            if (json) {
                for (int k = 0; k < 3; k++) {
                    if (ms[k] <= 0) continue;
                    printf("{\"bench\": \"moe\", \"device\": \"%s\", \"model\": \"%s\", "
                           "\"batch\": %d, \"impl\": \"%s\", \"ms\": %.4f, "
                           "\"bound_ms\": %.4f, \"fraction_of_bound\": %.4f, \"experts_hit\": %lld, "
                           "\"flops\": %.6g, \"bytes\": %.6g",
                           device ? device : "cpu", md->name, b, em_moe_impl_name((em_moe_impl)k),
                           ms[k], bound, bound / ms[k], (long long)hit, flops, bytes);
                    if (k == EM_MOE_RAGGED && dot_ms > 0)
                        printf(", \"dot_peak_ms\": %.4f, \"fraction_of_roofline\": %.4f", dot_ms,
                               (dot_ms > bound ? dot_ms : bound) / ms[k]);
                    if (k == EM_MOE_RAGGED && probe_gbs > 0)
                        printf(", \"probe_gbs\": %.2f", probe_gbs);
                    if (k == EM_MOE_RAGGED) printf(", \"packed\": %s", packed ? "true" : "false");
                    if (k == EM_MOE_RAGGED && ab_hub > 0)
                        printf(", \"kernels\": \"%s\", \"ragged_dot_impl\": \"%s\", "
                               "\"ab_rounds\": %d, \"ab_builtin_ms\": %.4f, \"ab_hub_ms\": %.4f, "
                               "\"hub_over_builtin\": %.4f",
                               kernels, taker, rounds, ab_bi, ab_hub, ab_hub / ab_bi);
                    printf("}\n");
                }
                if (cms > 0)
                    printf("{\"bench\": \"moe\", \"device\": \"%s\", \"model\": \"%s\", "
                           "\"batch\": %d, \"impl\": \"ragged_compiled\", "
                           "\"ms\": %.4f, \"bound_ms\": %.4f, \"fraction_of_bound\": %.4f, "
                           "\"experts_hit\": %lld, \"flops\": %.6g, \"bytes\": %.6g}\n",
                           device ? device : "cpu", md->name, b, cms, cms * cfrac, cfrac,
                           (long long)hit, flops, bytes);
                for (int k = 0; k < 3; k++) {
                    char nm[64];
                    snprintf(nm, sizeof nm, "%s_%d", timpl[k], b);
                    double v = bench_peer_ms(&torch, nm);
                    if (v > 0)
                        printf("{\"model\": \"%s\", \"batch\": %d, \"impl\": \"torch\", "
                               "\"torch_impl\": \"%s\", \"ms\": %.4f, \"bound_ms\": %.4f, "
                               "\"fraction_of_bound\": %.4f, \"experts_hit\": %lld}\n",
                               md->name, b, timpl[k], v, bound, bound / v, (long long)hit);
                }
            } else {
                /* "-" where nothing was measured (an impl left out, no peer) */
                char loop_s[16], dense_s[16], rag_s[16], ratio_s[16], frac_s[16], torch_s[16],
                    dot_s[16], gbs_s[16];
                bench_cell(dot_s, sizeof dot_s, "%.3f", dot_ms);
                bench_cell(gbs_s, sizeof gbs_s, "%.0f", probe_gbs);
                bench_cell(loop_s, sizeof loop_s, "%.3f", ms[EM_MOE_LOOP]);
                bench_cell(dense_s, sizeof dense_s, "%.3f", ms[EM_MOE_DENSE]);
                bench_cell(rag_s, sizeof rag_s, "%.3f", ms[EM_MOE_RAGGED]);
                bench_cell(ratio_s, sizeof ratio_s, "%.2fx",
                         ms[EM_MOE_RAGGED] > 0 && ms[EM_MOE_LOOP] > 0
                             ? ms[EM_MOE_LOOP] / ms[EM_MOE_RAGGED] : -1);
                /* of the roofline, as bench decode quotes it: where the compute floor at the
                 * dot peak exceeds the bandwidth bound (AVX2 at batch 64, or a fast memory
                 * phase), the floor is the limit the ragged layer is held to */
                double roof = dot_ms > bound ? dot_ms : bound;
                bench_cell(frac_s, sizeof frac_s, "%.0f%%",
                         ms[EM_MOE_RAGGED] > 0 ? 100 * roof / ms[EM_MOE_RAGGED] : -1);
                bench_cell(torch_s, sizeof torch_s, "%.3f", best);
                printf("%6d %10s %10s %10s %8s %6lld %9.1f %9.3f %7s %6s %8s %10s %s\n", b, loop_s,
                       dense_s, rag_s, ratio_s, (long long)hit, bytes / 1e6, bound, frac_s, gbs_s,
                       dot_s, torch_s, best_name);
                if (ab_hub > 0)
                    printf("%6s ragged with --kernels (ragged_dot: %s): built-in %.3f ms, with the "
                           "packages %.3f ms, hub/built-in %.3f (medians of %d rounds)\n", "",
                           taker, ab_bi, ab_hub, ab_hub / ab_bi, rounds);
                if (cms > 0)
                    printf("%6s %10s %10s %10.3f %8s %6s %9s %9.3f %6.0f%%          (ragged, compiled: "
                           "the layer with its router as one program)\n",
                           "", "", "", cms, "", "", "", cms * cfrac, 100 * cfrac);
            }
            fflush(stdout);
            em_scope_pop(c);
        }
        em_ctx_free(c);
    }
    return 0;
}

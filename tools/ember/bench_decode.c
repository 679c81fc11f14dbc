/*
 * `ember bench decode`: decode tokens/s at batch 1 and 16 and prefill tokens/s at 512 tokens on
 * checkpoints with the real dimensions of Qwen3-0.6B and Qwen3-30B-A3B (random bf16 weights,
 * made with `ember make-checkpoint` when missing), next to the memory-bandwidth bound of a
 * decode step (the bytes it must read / the bandwidth measured in the same run) and
 * transformers' eager generate on torch CPU when importable.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backends/cpu/cpu.h"
#include "bench/probe.h"
#include "bench_aot.h"
#include "bench_device_bw.h"
#include "bench_limits.h"
#include "bench_util.h"
#include "cli.h"
#include "ember/ember.h"

/* Bytes one decode step must read: every weight as the model holds it (quantized ones at their
 * quantized size) but the embedding table (one row), only the experts that were hit, and the
 * KV cache up to `pos`. */
static int64_t moe_layers(const em_model_config *cfg) {
    int64_t n = 0;
    for (int64_t i = 0; i < cfg->num_hidden_layers; i++) {
        bool dense = false;
        for (int k = 0; k < cfg->n_mlp_only_layers; k++) dense |= cfg->mlp_only_layers[k] == i;
        int64_t step = cfg->decoder_sparse_step > 0 ? cfg->decoder_sparse_step : 1;
        n += !dense && (i + 1) % step == 0;
    }
    return n;
}

/* Experts a step can hit at most (summed over layers): where the routing stays on the device
 * (PJRT) nobody counts them, and the bound then counts this many, an upper bound on its bytes. */
static int64_t experts_hit_at_most(const em_model *m, int64_t batch) {
    const em_model_config *cfg = em_model_config_get(m);
    int64_t per = batch * cfg->num_experts_per_tok;
    return moe_layers(cfg) * (per < cfg->num_experts ? per : cfg->num_experts);
}

static double step_bytes(const em_model *m, int64_t experts_hit, int64_t batch, int64_t pos) {
    const em_model_config *cfg = em_model_config_get(m);
    double es = em_model_dtype(m) == EM_F32 ? 4 : 2; /* activations, KV cache and experts */
    int64_t h = cfg->hidden_size, hd = cfg->head_dim, L = cfg->num_hidden_layers;
    double total = (double)em_model_weight_bytes(m, true);
    if (cfg->num_experts > 0) { /* all experts are counted: keep the ones hit */
        double expert = 3.0 * (double)cfg->moe_intermediate_size * h * es;
        total -= expert * (double)(moe_layers(cfg) * cfg->num_experts - experts_hit);
    }
    double kv = 2.0 * (double)L * cfg->num_key_value_heads * hd * (double)pos * (double)batch;
    return total + kv * es;
}

/* Multiply-adds per token of a decode step (weights touched once per token). */
static double step_params(const em_model *m, int64_t experts_hit, int64_t batch) {
    const em_model_config *cfg = em_model_config_get(m);
    int64_t h = cfg->hidden_size, hd = cfg->head_dim, L = cfg->num_hidden_layers;
    double attn = (double)h * hd * (2.0 * cfg->num_attention_heads + 2.0 * cfg->num_key_value_heads);
    double per = attn * (double)L + (double)cfg->vocab_size * h;
    if (cfg->num_experts > 0) /* each token uses top_k experts per layer */
        per += (double)L * cfg->num_experts_per_tok * 3.0 * cfg->moe_intermediate_size * h;
    else
        per += 3.0 * (double)cfg->intermediate_size * h * (double)L;
    (void)experts_hit, (void)batch;
    return per;
}

typedef struct run {
    int64_t batch, prompt, steps;
    double prefill_ms, step_ms;
    int64_t experts_hit; /* per step, summed over layers, averaged */
    double frac;         /* median over steps of (bytes / step time) / bandwidth of one read
                            probe pass just before that step (the host's bandwidth drifts) */
    int64_t compiles;    /* compiled runs: programs compiled during the decode steps */
    double compile_ms;   /* compiled runs: all tracing + compiling, prefill included */
    double speedup;      /* compiled runs: median over steps of eager / compiled step time */
} run;

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Waits for t by reading it (a few token ids; works on every device). */
static void wait_for(em_ctx *c, em_tensor *t) {
    int64_t buf[256];
    if (t && em_tensor_numel(t) <= 256)
        em_to_host(c, em_cast(c, t, EM_I64), buf, (size_t)em_tensor_numel(t) * sizeof *buf);
    else if (t)
        em_tensor_data(c, t);
}

static em_tensor *forward(em_ctx *c, const em_model *m, em_model_compiled *mc, em_tensor *ids,
                          em_kv_cache *kv) {
    return mc ? em_model_forward_compiled(c, mc, ids, NULL, true)
              : em_model_forward(c, m, ids, NULL, kv, true);
}

/* One decode lane: a cache, optionally its compiled step, the next tokens. */
typedef struct lane {
    run *r;
    bool compiled;
    em_kv_cache *kv;
    em_model_compiled *mc;
    em_tensor *next;
    em_compile_stats cs0;
    double total, fr[256], dt, gbs_step, dts[256];
    int64_t hits, nf;
} lane;

/* Decodes r->steps tokens in every lane. With two lanes (eager and compiled) the steps
 * alternate, in an order that flips every step, so both see the same moments of this host's
 * drifting bandwidth; the compiled lane's speedup is the median of the per-step ratios. */
static em_status decode_lanes(em_ctx *c, const em_model *m, lane *L, int n, double dev_gbs) {
    int64_t vocab = em_model_config_get(m)->vocab_size;
    run *r0 = L[0].r;
    int64_t *ids = malloc((size_t)(r0->batch * r0->prompt) * sizeof *ids);
    for (int64_t i = 0; ids && i < r0->batch * r0->prompt; i++) ids[i] = 10 + (i * 7919) % (vocab - 10);
    double ratio[256];
    int64_t nr = 0;
    bench_probe *probe = dev_gbs > 0 ? NULL : bench_probe_create(false);
    em_scope_push(c);
    for (int k = 0; k < n && !em_ctx_status(c); k++) {
        lane *l = &L[k];
        l->kv = em_kv_cache_create(c, m, l->r->batch, l->r->prompt + l->r->steps + 1);
        l->mc = l->compiled && l->kv ? em_model_compile(c, m, l->kv, 128) : NULL;
        if (em_ctx_status(c)) break;
        double t0 = bench_now();
        em_tensor *lg = forward(c, m, l->mc,
                                em_from_host(c, EM_I64, EM_SHAPE(l->r->batch, l->r->prompt), ids),
                                l->kv);
        l->next = em_argmax(c, lg, -1, false); /* [B, 1] greedy */
        wait_for(c, l->next);
        l->r->prefill_ms = (bench_now() - t0) * 1e3;
        em_model_compiled_stats(l->mc, &l->cs0);
    }
    for (int64_t s = 0; s < r0->steps && !em_ctx_status(c); s++) {
        int64_t hit = r0->experts_hit;
        for (int q = 0; q < n && !em_ctx_status(c); q++) {
            lane *l = &L[(s % 2) ? n - 1 - q : q];
            /* the bandwidth of this moment (one probe pass); an accelerator's own is steady */
            double gbs = dev_gbs > 0 ? dev_gbs : probe ? bench_probe_pass(probe) : -1;
            em_scope_push(c);
            double t1 = bench_now();
            em_tensor *lg = forward(c, m, l->mc, l->next, l->kv);
            em_tensor *nx = em_keep(c, em_argmax(c, lg, -1, false));
            wait_for(c, nx);
            l->dt = bench_now() - t1;
            l->total += l->dt;
            l->dts[s] = l->dt;
            if (!l->compiled) hit = em_kv_cache_experts_hit(l->kv);
            if (hit < 0) hit = experts_hit_at_most(m, l->r->batch);
            em_scope_pop(c);
            l->next = nx;
            l->gbs_step = gbs;
        }
        for (int k = 0; k < n; k++) { /* compiled lanes use the eager lane's experts hit */
            lane *l = &L[k];
            l->hits += hit;
            if (l->nf < 256 && l->gbs_step > 0)
                l->fr[l->nf++] = step_bytes(m, hit, l->r->batch, l->r->prompt + s) / l->dt /
                                 (l->gbs_step * 1e9);
        }
        if (n == 2 && nr < 256 && L[1].dt > 0) ratio[nr++] = L[0].dt / L[1].dt;
    }
    for (int k = 0; k < n; k++) {
        lane *l = &L[k];
        run *r = l->r;
        /* the median step: the first steps' compiles (the compiled step's program, an eager
         * op's new shape on a PJRT device) stay out of the steady state it quotes */
        qsort(l->dts, (size_t)r->steps, sizeof *l->dts, cmp_d);
        r->step_ms = r->steps ? l->dts[r->steps / 2] * 1e3 : 0;
        qsort(l->fr, (size_t)l->nf, sizeof *l->fr, cmp_d);
        r->frac = l->nf ? l->fr[l->nf / 2] : 0;
        r->experts_hit = r->steps ? l->hits / r->steps : 0;
        em_compile_stats cs1 = {0};
        em_model_compiled_stats(l->mc, &cs1);
        r->compiles = cs1.compiles - l->cs0.compiles;
        r->compile_ms = cs1.compile_ms;
        em_model_compiled_free(l->mc);
        em_kv_cache_free(l->kv);
    }
    if (n == 2) {
        qsort(ratio, (size_t)nr, sizeof *ratio, cmp_d);
        L[1].r->speedup = nr ? ratio[nr / 2] : 0;
    }
    em_scope_pop(c);
    bench_probe_free(probe);
    free(ids);
    return em_ctx_status(c);
}

static void usage(void) {
    printf("usage: ember bench decode [--json]\n"
           "                          [--model DIR_OR_GGUF | --preset qwen3-0.6b|qwen3-30b-a3b|all]\n"
           "                          [--layers N] [--steps N] [--skip-peers] [--cache-dir DIR]\n"
           "                          [--device DEV] [--compile] [--batches 1,16] [--dtype f32]\n\n"
           "Decode tokens/s at batch 1 and 16 and prefill tokens/s at 512 tokens, with the\n"
           "memory-bandwidth bound of a decode step and transformers' eager generate (torch CPU)\n"
           "in the same run. Presets are checkpoints with the real layer dimensions and RANDOM\n"
           "bf16 weights, written once into --cache-dir (default build/bench-models);\n"
           "qwen3-30b-a3b keeps 12 of its 48 layers so that it fits in 16 GiB.\n"
           "--compile adds, for every batch, the same decode through compile mode (one program\n"
           "per KV bucket of 128) next to eager, with the speedup and the programs compiled.\n"
           "--model FILE.gguf: the file's weights as stored (quantized ones read by the\n"
           "quantized kernels; --dtype dequantizes them), the bound counting their bytes, and\n"
           "llama.cpp's llama-bench on the same file and thread count as the peer when it is\n"
           "on PATH or in $EMBER_LLAMA_BENCH (prefill 512 and batch-1 decode).\n"
           "On a compile-only device (--device tpu-aot:v6e:2x4) nothing runs: the compiled step\n"
           "of each batch is compiled for the TPU and projected from XLA's cost analysis (flops,\n"
           "bytes accessed, their roofline at the chip's figures, peak memory against its HBM),\n"
           "plus a per-program launch overhead measured on xla:0 (--launch-us to give one).\n"
           "--spmd N there: the step partitioned by XLA over N chips of the slice (the\n"
           "family's tp plan as shardings); the figures are one chip's. --spmd-split-gate-up:\n"
           "the MoE gate/up expert stacks split by their hidden dim (else whole on each chip);\n"
           "--spmd-ep: both expert stacks split by expert (the expert-parallel plan).\n"
           "--tp N: tensor-parallel decode and its collectives (ember bench decode --tp 2 --help).\n");
}

int bench_decode_tp(int argc, char **argv); /* bench_decode_tp.c */

int bench_decode(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--tp")) return bench_decode_tp(argc, argv);
    bool json = false, peers = true, compile = false;
    const char *model = NULL, *preset = "all", *cache = "build/bench-models", *device = NULL;
    int64_t batches[8] = {1, 16};
    const char *dtype_name = NULL;
    em_dtype dtype = EM_BF16;
    int n_batches = 2;
    long long layers = 0, steps = 32, spmd = 0;
    bool spmd_ep = false, split_gate_up = false;
    double launch_us = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--skip-peers")) peers = false;
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--preset") && i + 1 < argc) preset = argv[++i];
        else if (!strcmp(argv[i], "--cache-dir") && i + 1 < argc) cache = argv[++i];
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc) {
            if (!cli_int("bench decode", argv[i], argv[i + 1], 0, INT32_MAX, &layers)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            if (!cli_int("bench decode", argv[i], argv[i + 1], 1, INT32_MAX, &steps)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--spmd") && i + 1 < argc) {
            if (!cli_int("bench decode", argv[i], argv[i + 1], 1, 64, &spmd)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--spmd-ep")) {
            spmd_ep = true;
        } else if (!strcmp(argv[i], "--spmd-split-gate-up")) {
            split_gate_up = true;
        } else if (!strcmp(argv[i], "--launch-us") && i + 1 < argc) {
            if (!cli_real("bench decode", argv[i], argv[i + 1], 0, 1e9, &launch_us)) return 2;
            i++;
        }
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--compile")) compile = true;
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            dtype_name = argv[++i];
            if (!em_dtype_parse(dtype_name, &dtype)) {
                fprintf(stderr, "ember bench decode: unknown dtype '%s'\n", dtype_name);
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc) {
            long long v[8];
            n_batches = cli_int_list("bench decode", argv[i], argv[i + 1], 1, 1 << 20, v, 8);
            if (n_batches < 0) return 2;
            for (int k = 0; k < n_batches; k++) batches[k] = v[k];
            i++;
        }
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "ember bench decode: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    const char *presets[2] = {"qwen3-0.6b", "qwen3-30b-a3b"};
    char dirs[2][1024];
    int n_models = 0;
    if (model) {
        snprintf(dirs[n_models++], sizeof dirs[0], "%s", model);
    } else {
        for (int k = 0; k < 2; k++) {
            if (strcmp(preset, "all") && strcmp(preset, presets[k])) continue;
            int rc = bench_preset_dir("ember bench decode", cache, "", presets[k], layers,
                                      dirs[n_models], sizeof dirs[0]);
            if (rc) return rc;
            n_models++;
        }
    }
    if (device) { /* a compile-only device: projections, not measurements */
        em_ctx *c = em_ctx_create();
        em_device *d = em_device_get(c, device);
        if (!d) {
            fprintf(stderr, "ember bench decode: %s\n", em_ctx_error(c)->message);
            em_ctx_free(c);
            return 1;
        }
        if (em_device_is_compile_only(d)) {
            bench_aot_overhead ov;
            bench_aot_overhead_get(launch_us, -1, &ov);
            bench_aot_header(d, &ov, json);
            int rc = 0;
            for (int k = 0; k < n_models && !rc; k++) {
                em_model_options o = em_model_default_options();
                o.progress = false;
                o.offline = true;
                o.device = device;
                o.spmd = (int)spmd;
                if (spmd_ep) o.ep_size = (int)spmd; /* expert stacks split by expert */
                o.spmd_split_gate_up = split_gate_up;
                /* nothing runs: the weights' shapes are all the compile needs (a checkpoint
                 * of `make-checkpoint --shape-only` holds nothing more); a GGUF file is read */
                size_t ml = strlen(dirs[k]);
                o.shape_only = !(ml > 5 && !strcmp(dirs[k] + ml - 5, ".gguf"));
                if (dtype_name) {
                    o.dtype = dtype;
                }
                em_model *m = em_model_load(c, dirs[k], &o);
                if (!m) {
                    fprintf(stderr, "ember bench decode: %s\n", em_ctx_error(c)->message);
                    rc = 1;
                    break;
                }
                const em_model_config *cfg = em_model_config_get(m);
                if (!json)
                    printf("\n%s (%s, %lld layers, %s, compiled decode step)\n", dirs[k],
                           cfg->model_type, (long long)cfg->num_hidden_layers,
                           em_dtype_name(em_model_dtype(m)));
                rc = bench_aot_decode(c, m, d, batches, n_batches, &ov, json);
                em_model_free(m);
            }
            em_ctx_free(c);
            return rc;
        }
        em_ctx_free(c);
    }
    bench_limits L = {0};
    bench_measure_read(&L);
    bench_measure_peaks(&L);
    double bw = L.read_gbs;
    /* on an accelerator (cuda:0, tpu:0) the weights sit in its own memory: the bound's */
    double dev_gbs = bench_device_gbs(device);
    if (dev_gbs > 0) bw = dev_gbs;
    int threads = em_num_threads();
    if (steps < 1 || steps > 256) {
        fprintf(stderr, "ember bench decode: --steps must be 1..256\n");
        return 2;
    }
    if (!json && dev_gbs > 0)
        printf("%s memory bandwidth %.0f GB/s (x + x over 512 MiB, read + written)\n", device,
               dev_gbs);
    else if (!json)
        printf("read bandwidth %.1f GB/s on %d threads (median of %d passes over %d MiB, %.1f-%.1f;"
               " one thread %.1f), bf16 dot peak %.0f GFLOP/s;\nbound ms: the step's bytes at "
               "the read pass run just before each step (median over steps)\n",
               bw, threads, BENCH_PROBE_PASSES, BENCH_PROBE_MIB, L.read_gbs_min, L.read_gbs_max,
               L.read_gbs_1, L.bf16_gflops);
    for (int k = 0; k < n_models; k++) {
        bench_peer torch = {0};
        size_t dl = strlen(dirs[k]);
        bool gguf = dl > 5 && !strcmp(dirs[k] + dl - 5, ".gguf");
        const char *peer_name = gguf ? "llama.cpp" : "torch";
        if (peers && gguf) { /* the peer of a GGUF file is llama.cpp on the same file */
            bench_llamacpp_run(dirs[k], threads, (int)steps, &torch);
            if (!torch.available && !json) printf("peer llama.cpp: unavailable (%s)\n", torch.why);
        } else if (peers) {
            char task[2400];
            snprintf(task, sizeof task,
                     "{\"model\": \"%s\", \"threads\": %d, \"batches\": [1, 16], \"prompt\": 16, "
                     "\"new\": %lld, \"prefill\": 512}", dirs[k], threads, steps);
            bench_peer_run("torch_decode.py", task, &torch);
            if (!torch.available && !json) printf("peer torch: unavailable (%s)\n", torch.why);
        }
        em_ctx *c = em_ctx_create();
        em_model_options o = em_model_default_options();
        o.progress = false;
        o.offline = true;
        o.device = device;
        if (dtype_name) {
            o.dtype = dtype;
        }
        em_model *m = em_model_load(c, dirs[k], &o);
        if (!m) {
            fprintf(stderr, "ember bench decode: %s\n", em_ctx_error(c)->message);
            em_ctx_free(c);
            return 1;
        }
        const em_model_config *cfg = em_model_config_get(m);
        char wd[160], peer_col[32];
        em_model_weight_dtypes(m, wd, sizeof wd);
        snprintf(peer_col, sizeof peer_col, "%s tok/s", peer_name);
        if (!json)
            printf("\n%s (%s, %lld layers, activations %s, weights %s%s)\n"
                   "%-10s %10s %12s %10s %8s %15s %8s\n",
                   dirs[k], cfg->model_type, (long long)cfg->num_hidden_layers,
                   em_dtype_name(em_model_dtype(m)), wd, gguf ? "" : ", random",
                   "run", "ms/step", "tokens/s", "bound ms", "of bnd", peer_col, "speedup");
        /* prefill of 512 tokens, first and twice: the untimed pass brings every weight (all
         * experts) into memory, so that no timed run pays the first touch of the mapped
         * checkpoint */
        run p = {1, 512, 0, 0, 0, 0, 0, 0, 0, 0};
        em_kv_cache *kv = em_kv_cache_create(c, m, 1, 513);
        int64_t *ids = malloc(512 * sizeof *ids);
        for (int i = 0; ids && i < 512; i++) ids[i] = 10 + (i * 7919) % (cfg->vocab_size - 10);
        for (int pass = 0; pass < 2; pass++) {
            em_kv_cache_reset(kv);
            em_scope_push(c);
            em_tensor *it = em_from_host(c, EM_I64, EM_SHAPE(1, 512), ids);
            double t0 = bench_now();
            em_tensor *lg = em_model_forward(c, m, it, NULL, kv, true);
            wait_for(c, em_argmax(c, lg, -1, false));
            p.prefill_ms = (bench_now() - t0) * 1e3;
            em_scope_pop(c);
        }
        free(ids);
        em_kv_cache_free(kv);
        run pair[2]; /* this batch's eager and compiled runs */
        for (int bi = 0; bi < n_batches * (compile ? 2 : 1); bi++) {
            bool cmode = compile && bi % 2 == 1;
            int64_t batch = batches[compile ? bi / 2 : bi];
            /* eager and compiled decode together (interleaved); the rows print one by one */
            if (!cmode) {
                memset(pair, 0, sizeof pair);
                for (int q = 0; q < 2; q++) {
                    pair[q].batch = batch;
                    pair[q].prompt = 16;
                    pair[q].steps = steps;
                }
                lane lanes[2];
                memset(lanes, 0, sizeof lanes);
                lanes[0].r = &pair[0];
                lanes[1].r = &pair[1];
                lanes[1].compiled = true;
                if (decode_lanes(c, m, lanes, compile ? 2 : 1, dev_gbs) != EM_OK) {
                    fprintf(stderr, "decode: %s\n", em_ctx_error(c)->message);
                    em_ctx_clear_error(c);
                    if (compile) bi++;
                    continue;
                }
            }
            run r = pair[cmode ? 1 : 0];
            run eager = pair[0];
            /* the roofline: bytes a step must read, or the flops of its matmuls at the bf16 peak
             * (batch 16 on the dense model is compute-bound on this CPU) */
            double bound = r.frac > 0 ? r.step_ms * r.frac
                                      : step_bytes(m, r.experts_hit, r.batch, r.prompt + r.steps / 2) /
                                            (bw * 1e9) * 1e3;
            double flops = 2.0 * (double)r.batch * step_params(m, r.experts_hit, r.batch);
            /* (the host's peak: none for an accelerator, where the bandwidth bound stands) */
            double comp = L.bf16_gflops > 0 && dev_gbs <= 0 ? flops / (L.bf16_gflops * 1e9) * 1e3
                                                            : 0;
            if (comp > bound) bound = comp;
            double tps = (double)r.batch * 1e3 / r.step_ms;
            char name[32];
            snprintf(name, sizeof name, "decode_%lld", (long long)r.batch);
            double pms = torch.available ? bench_peer_ms(&torch, name) : -1;
            double ptps = pms > 0 ? (double)r.batch * 1e3 / pms : -1;
            if (json) {
                printf("{\"bench\": \"decode\", \"model\": \"%s\", \"device\": \"%s\", "
                       "\"mode\": \"%s\", \"batch\": %lld, \"ms\": %.4f, "
                       "\"tokens_per_s\": %.3f, \"limit_ms\": %.4f, \"fraction_of_limit\": %.4f, "
                       "\"experts_hit\": %lld, \"flops\": %.6g, \"bytes\": %.6g, "
                       "\"weight_bytes\": %.6g, \"layers\": %lld, ",
                       cfg->model_type, device ? device : "cpu", cmode ? "compiled" : "eager",
                       (long long)r.batch, r.step_ms, tps, bound, bound / r.step_ms,
                       (long long)r.experts_hit, flops,
                       step_bytes(m, r.experts_hit, r.batch, r.prompt + r.steps / 2),
                       (double)em_model_weight_bytes(m, false),
                       (long long)cfg->num_hidden_layers);
                if (cmode)
                    printf("\"eager_ms\": %.4f, \"speedup_over_eager\": %.4f, \"compiles\": %lld, "
                           "\"compile_ms\": %.1f, ", eager.step_ms, r.speedup,
                           (long long)r.compiles, r.compile_ms);
                if (pms > 0)
                    printf("\"peer\": \"%s\", \"peer_ms\": %.4f}\n",
                           gguf ? "llama.cpp" : "transformers", pms);
                else printf("\"peer\": null, \"peer_ms\": null}\n");
            } else {
                char peer_s[24], ratio_s[16];
                bench_cell(peer_s, sizeof peer_s, "%.2f", ptps);
                bench_cell(ratio_s, sizeof ratio_s, "%.2fx", ptps > 0 ? tps / ptps : -1);
                if (cmode)
                    printf("compiled%-3lld %9.2f %12.2f %10.2f %7.0f%% %15s %8s  (%.2fx eager, "
                           "median of interleaved steps; %lld decode compiles, %.0f ms "
                           "compiling)\n",
                           (long long)r.batch, r.step_ms, tps, bound, 100 * bound / r.step_ms,
                           peer_s, ratio_s, r.speedup, (long long)r.compiles, r.compile_ms);
                else
                    printf("decode b%-3lld %10.2f %12.2f %10.2f %7.0f%% %15s %8s\n",
                           (long long)r.batch, r.step_ms, tps, bound, 100 * bound / r.step_ms,
                           peer_s, ratio_s);
            }
            fflush(stdout);
        }
        double pp = torch.available ? bench_peer_ms(&torch, "prefill") : -1;
        if (json) {
            printf("{\"bench\": \"prefill\", \"model\": \"%s\", \"tokens\": 512, \"ms\": %.3f, "
                   "\"tokens_per_s\": %.2f, ", cfg->model_type, p.prefill_ms, 512e3 / p.prefill_ms);
            if (pp > 0)
                printf("\"peer\": \"%s\", \"peer_ms\": %.3f}\n",
                       gguf ? "llama.cpp" : "transformers", pp);
            else printf("\"peer\": null, \"peer_ms\": null}\n");
        } else {
            char peer_s[24], ratio_s[16];
            bench_cell(peer_s, sizeof peer_s, "%.1f", pp > 0 ? 512e3 / pp : -1);
            bench_cell(ratio_s, sizeof ratio_s, "%.2fx", pp > 0 ? pp / p.prefill_ms : -1);
            printf("prefill512 %10.1f %12.1f %10s %8s %15s %8s\n", p.prefill_ms,
                   512e3 / p.prefill_ms, "-", "-", peer_s, ratio_s);
        }
        em_ctx_clear_error(c);
        em_model_free(m);
        em_ctx_free(c);
    }
    return 0;
}

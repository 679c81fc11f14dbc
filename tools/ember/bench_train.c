/*
 * `ember bench train`: one training step (forward, causal-LM loss, backward, gradient clipping,
 * AdamW) of a decoder, in tokens/s and MFU, next to torch eager training the same checkpoint on
 * the same batch shape in the same run (tools/ember/peers/train_torch.py; with --torch-compile
 * also torch.compile'd).
 *
 * Models: the demo model (`make-checkpoint --preset tiny-qwen3`, scripts/train-demo.sh's) and
 * the Qwen3-0.6B shape (random weights, --layers of its 28, default 4: every layer is the same
 * work, so per-layer figures hold for 28), f32 weights and optimizer state. MFU = model FLOPs per
 * step / (step time x the FMA peak measured in this run), with PaLM's count of model FLOPs: 6 x
 * (matmul parameters, the LM head included) + 12 x layers x heads x head_dim x T, per token.
 * Memory per token: the resident peak during the timed steps above the resident set right after
 * the weights were loaded (so gradients, AdamW moments, activations and the allocator's caches),
 * / (B x T) (Linux's VmRSS and VmHWM; the peak reset through /proc/self/clear_refs). Kept per
 * token: what a recorded forward and loss hold for the backward, the activations that
 * --gradient-checkpointing (each layer recomputed in the backward, both sides) trades for time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "bench_limits.h"
#include "bench_util.h"
#include "cli.h"
#include "ember/ember.h"

#define MAX_STEPS 64

/* Resident set now and its peak since the last reset, in MB (Linux /proc/self/status). */
static void rss_mb(double *now, double *peak) {
    *now = *peak = -1;
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        long long kb;
        if (sscanf(line, "VmRSS: %lld kB", &kb) == 1) *now = (double)kb / 1024;
        if (sscanf(line, "VmHWM: %lld kB", &kb) == 1) *peak = (double)kb / 1024;
    }
    if (f) fclose(f);
}

static void rss_peak_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

/* Model FLOPs of one step of B x T tokens (PaLM's count, see above). */
static double step_flops(em_ctx *c, const em_model *m, int64_t batch, int64_t seq) {
    const em_model_config *cfg = em_model_config_get(m);
    em_model_param *ps = calloc(4096, sizeof *ps);
    int n = ps ? em_model_params(c, m, ps, 4096) : 0;
    double matmul = 0;
    for (int i = 0; i < n; i++) {
        em_tensor *t = ps[i].tensor;
        if (em_tensor_ndim(t) < 2) continue;
        /* the embedding table is a lookup, unless it is also the LM head */
        if (strstr(ps[i].name, "embed_tokens") && !cfg->tie_word_embeddings) continue;
        matmul += (double)em_tensor_numel(t);
    }
    free(ps);
    double per_token = 6 * matmul + 12.0 * (double)cfg->num_hidden_layers *
                                        (double)cfg->num_attention_heads *
                                        (double)cfg->head_dim * (double)seq;
    return per_token * (double)(batch * seq);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct train_result {
    double step_ms, tokens_per_s, flops;
    double cpu_ms;       /* median CPU time of the process per step (all threads): steadier than
                            the wall time on a shared machine */
    double peak_mb;      /* the process's resident peak during the timed steps */
    double kb_per_token; /* that peak above the resident set with the weights loaded, per token */
    double saved_kb_per_token; /* what a recorded forward and loss keep for the backward (the
                                  allocator's bytes in use after them, above before), per token */
    char shape[160];
} train_result;

/* KB the forward and the loss on ids x keep for the backward (the trainer marked the
 * parameters): the CPU allocator's bytes in use after them minus before; -1 on error. The
 * activations, which gradient checkpointing trades for a recomputation. */
static double saved_kb(em_ctx *c, em_model *m, em_tensor *x) {
    int64_t before = 0, after = 0, t = em_tensor_dim(x, 1);
    int64_t v = em_model_config_get(m)->vocab_size, b = em_tensor_dim(x, 0);
    em_scope_push(c);
    em_device_memory_stats(em_device_cpu(), &before, NULL);
    bool prev = em_grad_enable(c, true);
    em_tensor *logits = em_model_forward(c, m, x, NULL, NULL, false);
    em_tensor *pred = em_reshape(c, em_slice(c, logits, 1, 0, t - 1, 1), 2,
                                 (int64_t[]){b * (t - 1), v});
    em_tensor *next = em_reshape(c, em_slice(c, x, 1, 1, t, 1), 1, (int64_t[]){b * (t - 1)});
    em_tensor *loss = em_cross_entropy(c, pred, next, -100);
    em_grad_enable(c, prev);
    double lv;
    if (loss) em_item(c, loss, &lv); /* evaluated (fused eager mode defers work) */
    em_device_memory_stats(em_device_cpu(), &after, NULL);
    em_grad_tape_clear(c);
    em_scope_pop(c);
    return loss && !em_ctx_status(c) ? (double)(after - before) / 1024 : -1;
}

static double cpu_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Ember's median step over `steps` timed steps (after one untimed), on random ids. */
static int measure(const char *dir, int64_t batch, int64_t seq, int steps, bool recompute,
                   bool compile, train_result *r) {
    em_ctx *c = em_ctx_create();
    em_model_options mo = em_model_default_options();
    mo.progress = false;
    mo.offline = true;
    mo.dtype = EM_F32;
    em_model *m = em_model_load(c, dir, &mo);
    double loaded = -1, peak = -1, unused;
    rss_mb(&loaded, &unused);
    const em_model_config *cfg = m ? em_model_config_get(m) : NULL;
    int64_t n_ids = batch * seq * (steps + 2);
    int64_t *ids = malloc((size_t)n_ids * sizeof *ids);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; ids && cfg && i < n_ids; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ids[i] = (int64_t)(x % (uint64_t)cfg->vocab_size);
    }
    em_train_data *d = ids && m ? em_train_data_from_ids(c, ids, n_ids, cfg->vocab_size, "random")
                                : NULL;
    em_tensor *batch0 = ids ? em_detach(c, em_from_host(c, EM_I64, 2, (int64_t[]){batch, seq}, ids))
                            : NULL;
    free(ids);
    em_train_options o = em_train_default_options();
    o.seq_len = seq;
    o.batch = batch;
    o.steps = steps + 1;
    o.lr = 1e-4;
    o.grad_clip = 1.0;
    o.shuffle = false;
    o.gradient_checkpointing = recompute;
    o.compile = compile; /* the untimed first step traces and compiles */
    em_trainer *t = d ? em_trainer_create(c, m, d, &o) : NULL;
    double ms[MAX_STEPS], cpu[MAX_STEPS];
    int n = 0;
    em_train_step_info info;
    if (t && em_trainer_step(c, t, &info) == EM_OK) { /* untimed: first touch of every buffer */
        rss_peak_reset();
        for (; n < steps; n++) {
            double c0 = cpu_now_ms();
            if (em_trainer_step(c, t, &info) != EM_OK) break;
            cpu[n] = cpu_now_ms() - c0;
            ms[n] = info.seconds * 1e3;
        }
        rss_mb(&unused, &peak);
    }
    if (n == steps) r->saved_kb_per_token = saved_kb(c, m, batch0) / (double)(batch * seq);
    em_tensor_release(batch0);
    int rc = 0;
    if (n < steps || r->saved_kb_per_token < 0) {
        fprintf(stderr, "ember bench train: %s: %s\n", dir, em_ctx_error(c)->message);
        rc = 1;
    } else {
        qsort(ms, (size_t)n, sizeof *ms, cmp_d);
        qsort(cpu, (size_t)n, sizeof *cpu, cmp_d);
        r->step_ms = ms[n / 2];
        r->cpu_ms = cpu[n / 2];
        r->tokens_per_s = (double)(batch * seq) / (r->step_ms / 1e3);
        r->flops = step_flops(c, m, batch, seq);
        r->peak_mb = peak;
        r->kb_per_token = loaded > 0 && peak > 0 ? (peak - loaded) * 1024 / (double)(batch * seq)
                                                 : -1;
        snprintf(r->shape, sizeof r->shape, "[%s,%lld layers,h%lld,f32,B%lld,T%lld%s%s]",
                 cfg->model_type, (long long)cfg->num_hidden_layers, (long long)cfg->hidden_size,
                 (long long)batch, (long long)seq, recompute ? ",recompute" : "",
                 compile ? ",compiled" : "");
    }
    em_trainer_free(t);
    em_train_data_free(d);
    em_model_free(m);
    em_ctx_free(c);
    return rc;
}

static void usage(void) {
    printf("usage: ember bench train [--preset demo|qwen3-0.6b|all] [--model DIR] [--layers N]\n"
           "                         [--seq-len T] [--batch B] [--steps N] [--torch-compile]\n"
           "                         [--gradient-checkpointing] [--compile] [--skip-peers]\n"
           "                         [--json]\n\n"
           "One training step (forward, loss, backward, clipping, AdamW; f32) of the demo model\n"
           "(tiny-qwen3) and of the Qwen3-0.6B shape (random weights, --layers of 28, default 4)\n"
           "at seq 512: tokens/s and MFU against the FMA peak measured in the same run, memory per\n"
           "token, and torch eager training the same checkpoint ($EMBER_PYTHON with torch and\n"
           "transformers; --torch-compile adds torch.compile). --gradient-checkpointing: both\n"
           "recompute each layer in the backward (transformers' gradient_checkpointing_enable).\n"
           "--compile: also Ember's compiled step (ember train --compile: the whole step traced\n"
           "once, replayed), measured after the eager one in the same run.\n");
}

int bench_train(int argc, char **argv) {
    bool json = false, peers = true, torch_compile = false, recompute = false, compile = false;
    const char *preset = "all", *model = NULL;
    long long layers = 4, seq = 512, batch = 1, steps = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--skip-peers")) peers = false;
        else if (!strcmp(a, "--torch-compile")) torch_compile = true;
        else if (!strcmp(a, "--gradient-checkpointing")) recompute = true;
        else if (!strcmp(a, "--compile")) compile = true;
        else if (!strcmp(a, "--preset") && has) preset = argv[++i];
        else if (!strcmp(a, "--model") && has) model = argv[++i];
        else if (!strcmp(a, "--layers") && has) {
            if (!cli_int("bench train", a, argv[++i], 1, 1000, &layers)) return 2;
        } else if (!strcmp(a, "--seq-len") && has) {
            if (!cli_int("bench train", a, argv[++i], 2, 65536, &seq)) return 2;
        } else if (!strcmp(a, "--batch") && has) {
            if (!cli_int("bench train", a, argv[++i], 1, 4096, &batch)) return 2;
        } else if (!strcmp(a, "--steps") && has) {
            if (!cli_int("bench train", a, argv[++i], 1, MAX_STEPS, &steps)) return 2;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "ember bench train: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (strcmp(preset, "all") && strcmp(preset, "demo") && strcmp(preset, "qwen3-0.6b")) {
        fprintf(stderr, "ember bench train: unknown preset '%s' (demo, qwen3-0.6b, all)\n", preset);
        return 2;
    }
    char dirs[2][1024];
    int n_models = 0;
    if (model) {
        snprintf(dirs[n_models++], sizeof dirs[0], "%s", model);
    } else {
        mkdir("build", 0755);
        mkdir("build/bench-models", 0755);
        if (strcmp(preset, "qwen3-0.6b")) {
            snprintf(dirs[n_models], sizeof dirs[0], "build/bench-models/train-demo");
            if (bench_checkpoint(dirs[n_models++], "tiny-qwen3", 0, "f32")) return 1;
        }
        if (strcmp(preset, "demo")) {
            snprintf(dirs[n_models], sizeof dirs[0], "build/bench-models/train-qwen3-0.6b-%lldl",
                     layers);
            if (bench_checkpoint(dirs[n_models++], "qwen3-0.6b", layers, "f32")) return 1;
        }
    }
    bench_limits L = {0};
    bench_measure_peaks(&L);
    if (!json)
        printf("fp32 FMA peak: %.1f GFLOP/s (%d threads)\n", L.fp32_gflops, em_num_threads());
    bench_print_header(json);
    for (int k = 0; k < n_models; k++) {
        train_result r = {0};
        if (measure(dirs[k], batch, seq, (int)steps, recompute, false, &r)) return 1;
        train_result rcomp = {0};
        if (compile && measure(dirs[k], batch, seq, (int)steps, recompute, true, &rcomp))
            return 1;
        bench_peer torch = {0};
        if (peers) {
            char tasks[2600];
            snprintf(tasks, sizeof tasks,
                     "{\"model\": \"%s\", \"threads\": %d, \"seq_len\": %lld, \"batch\": %lld, "
                     "\"steps\": %lld, \"compile\": %s, \"gradient_checkpointing\": %s}",
                     dirs[k], em_num_threads(), seq, batch, steps, torch_compile ? "true" : "false",
                     recompute ? "true" : "false");
            bench_peer_run("train_torch.py", tasks, &torch);
            if (!torch.available && !json) printf("peer torch: unavailable (%s)\n", torch.why);
        }
        double peak_ms = L.fp32_gflops > 0 ? r.flops / (L.fp32_gflops * 1e9) * 1e3 : -1;
        bench_row row = {.bench = "train_step", .shape = r.shape, .dtype = "f32", .ms = r.step_ms,
                         .limit_ms = peak_ms, .limit_what = "fp32 FMA peak",
                         .peer = "torch eager", .peer_ms = bench_peer_ms(&torch, "torch_step"),
                         .flops = r.flops};
        bench_print_row(&row, json);
        double tc = bench_peer_ms(&torch, "torch_compile_step");
        if (tc > 0) {
            bench_row rc = row;
            rc.peer = "torch.compile";
            rc.peer_ms = tc;
            bench_print_row(&rc, json);
        }
        if (compile) {
            bench_row cr = row;
            cr.shape = rcomp.shape;
            cr.ms = rcomp.step_ms;
            bench_print_row(&cr, json);
            if (json)
                printf("{\"bench\": \"train_compiled\", \"shape\": \"%s\", \"eager_ms\": %.3f, "
                       "\"compiled_ms\": %.3f, \"speedup\": %.3f, \"eager_cpu_ms\": %.3f, "
                       "\"compiled_cpu_ms\": %.3f, \"eager_peak_mb\": %.1f, "
                       "\"compiled_peak_mb\": %.1f}\n",
                       r.shape, r.step_ms, rcomp.step_ms, r.step_ms / rcomp.step_ms, r.cpu_ms,
                       rcomp.cpu_ms, r.peak_mb, rcomp.peak_mb);
            else
                printf("  compiled step: %.0f tokens/s, %.2fx the eager step's wall time (same "
                       "run); CPU time per step %.0f ms, eager %.0f ms (%.2fx); peak %.0f MB "
                       "(eager %.0f MB)\n",
                       rcomp.tokens_per_s, r.step_ms / rcomp.step_ms, rcomp.cpu_ms, r.cpu_ms,
                       r.cpu_ms / rcomp.cpu_ms, rcomp.peak_mb, r.peak_mb);
        }
        double tkb = bench_peer_ms(&torch, "torch_kb_per_token");
        if (json) {
            printf("{\"bench\": \"train_memory\", \"shape\": \"%s\", \"ember_peak_mb\": %.1f, "
                   "\"ember_kb_per_token\": %.1f, \"ember_saved_kb_per_token\": %.1f, "
                   "\"torch_kb_per_token\": %.1f}\n",
                   r.shape, r.peak_mb, r.kb_per_token, r.saved_kb_per_token, tkb);
        } else {
            double tms = bench_peer_ms(&torch, "torch_step");
            printf("  %s: %.0f tokens/s, MFU %.0f %%", r.shape, r.tokens_per_s,
                   peak_ms > 0 ? 100 * peak_ms / r.step_ms : 0.0);
            if (tms > 0) printf(", %.2fx torch eager's tokens/s (target >= 1.5x)", tms / r.step_ms);
            /* CPU time over wall time: how many threads were busy on average (the thread count
             * when every op keeps the pool busy; less where ops run on one thread or the host's
             * other processes take cores) */
            printf("\n  CPU time per step %.0f ms: %.2f of %d threads busy on average", r.cpu_ms,
                   r.cpu_ms / r.step_ms, em_num_threads());
            printf("\n  memory above the weights: %.0f KB per token (peak %.0f MB); kept by the "
                   "forward for the backward: %.0f KB per token",
                   r.kb_per_token, r.peak_mb, r.saved_kb_per_token);
            if (tkb > 0) printf("; torch eager %.0f KB per token", tkb);
            printf("\n");
        }
    }
    return 0;
}

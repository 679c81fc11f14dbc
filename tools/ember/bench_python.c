/*
 * `ember bench python`: what the Python package costs on top of the C API, and where Ember from
 * Python stands against transformers' generate from Python.
 *
 * In one run: greedy decode of the same checkpoint and prompt through em_generate here (the
 * limit: no Python at all), through `ember.AutoModelForCausalLM.generate` and through
 * transformers' `generate` (tools/ember/peers/python_overhead.py under $EMBER_PYTHON, which must
 * be able to `import ember`: `pip install .` into its environment); and one small eager op (an
 * add of two 4-element tensors, the dispatch floor) through em_add and through `ember.ops.add`.
 * Per-token decode time is (time for 1 + N new tokens - time for 1) / N, so prefill and load do
 * not count, the best of three on each side (and the C side measured before and after the
 * Python process's turn). Python's overhead is reported as a fraction of the C time (target: < 5 % at the
 * Qwen3-0.6B decode shape).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench_util.h"
#include "cli.h"
#include "ember/ember.h"

typedef struct gen_job {
    em_ctx *c;
    em_model *m;
    const em_token *prompt;
    int64_t len;
    int64_t new_tokens;
    int failed;
} gen_job;

static double generate_ms(gen_job *g, int64_t new_tokens) {
    em_generate_params p = em_generate_default_params(g->m);
    p.max_new_tokens = new_tokens;
    p.do_sample = false;
    p.repetition_penalty = 1.0f;
    em_token no_eos = 0;
    p.eos_ids = &no_eos; /* non-NULL with none: never stop early */
    p.n_eos_ids = 0;
    const em_token *rows[1] = {g->prompt};
    em_generate_result r;
    double t0 = bench_now();
    if (em_generate(g->c, g->m, NULL, rows, &g->len, 1, &p, &r) != EM_OK) {
        g->failed = 1;
        return -1;
    }
    double ms = (bench_now() - t0) * 1e3;
    em_generate_result_free(&r);
    return ms;
}

/* Per-token decode time: the best of three (time for 1 + N new tokens - time for 1) / N. */
static double per_token_ms(gen_job *g, int64_t tokens) {
    double best = -1;
    for (int r = 0; r < 3 && !g->failed; r++) {
        double t1 = generate_ms(g, 1), tn = generate_ms(g, 1 + tokens);
        double v = (tn - t1) / (double)tokens;
        if (best < 0 || v < best) best = v;
    }
    return best;
}

typedef struct op_job {
    em_ctx *c;
    em_tensor *a, *b;
    int iters;
} op_job;

static void run_ops(void *user) {
    op_job *o = user;
    for (int i = 0; i < o->iters; i++) {
        em_scope_push(o->c);
        em_add(o->c, o->a, o->b);
        em_scope_pop(o->c);
    }
}

static void usage(void) {
    printf("usage: ember bench python [--model DIR | --preset qwen3-0.6b] [--tokens N]\n"
           "                          [--op-iters K] [--skip-peers] [--json]\n\n"
           "Greedy decode per token through the C API, through the ember Python package and\n"
           "through transformers' generate ($EMBER_PYTHON, default python3, must import ember),\n"
           "and one small op through em_add and ember.ops.add: Python's overhead in %%.\n");
}

int bench_python(int argc, char **argv) {
    bool json = false, peers = true;
    const char *model = NULL, *preset = "qwen3-0.6b", *cache = "build/bench-models";
    long long tokens = 16, op_iters = 20000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--skip-peers")) peers = false;
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--preset") && i + 1 < argc) preset = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) {
            if (!cli_int("bench python", argv[i], argv[i + 1], 1, 4096, &tokens)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--op-iters") && i + 1 < argc) {
            if (!cli_int("bench python", argv[i], argv[i + 1], 10, 100000000, &op_iters)) return 2;
            i++;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "ember bench python: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    char dir[1024];
    if (model) {
        snprintf(dir, sizeof dir, "%s", model);
    } else {
        int rc = bench_preset_dir("ember bench python", cache, "", preset, 0, dir, sizeof dir);
        if (rc) return rc;
    }
    em_ctx *c = em_ctx_create();
    em_model_options o = em_model_default_options();
    o.progress = false;
    o.offline = true;
    em_model *m = em_model_load(c, dir, &o);
    if (!m) {
        fprintf(stderr, "ember bench python: %s\n", em_ctx_error(c)->message);
        em_ctx_free(c);
        return 1;
    }
    /* a fixed prompt both sides use: ids 10..25 (inside every vocabulary) */
    em_token prompt[16];
    for (int i = 0; i < 16; i++) prompt[i] = 10 + i;
    gen_job g = {c, m, prompt, 16, tokens, 0};
    generate_ms(&g, 2); /* warm-up: caches, pool, kernel plans */
    double c_token_ms = per_token_ms(&g, tokens);
    float av[4] = {1, 2, 3, 4};
    op_job oj = {c, em_from_host(c, EM_F32, EM_SHAPE(4), av), em_from_host(c, EM_F32, EM_SHAPE(4), av),
                 (int)op_iters};
    double c_op_ms = oj.a && oj.b ? bench_median_ms(run_ops, &oj, 0.3) / (double)op_iters : -1;
    if (g.failed || !oj.a || !oj.b) {
        fprintf(stderr, "ember bench python: %s\n", em_ctx_error(c)->message);
        em_model_free(m);
        em_ctx_free(c);
        return 1;
    }

    bench_peer py = {0};
    if (peers) {
        char tasks[1600];
        snprintf(tasks, sizeof tasks,
                 "{\"model\": \"%s\", \"threads\": %d, \"prompt\": [10,11,12,13,14,15,16,17,18,"
                 "19,20,21,22,23,24,25], \"new\": %lld, \"op_iters\": %lld}",
                 dir, em_num_threads(), tokens, op_iters);
        bench_peer_run("python_overhead.py", tasks, &py);
        if (!py.available && !json) printf("peer python: unavailable (%s)\n", py.why);
        /* the C side again after the peer: the machine's speed drifts between the two
         * processes' turns, and the best of both turns is the C API's time */
        double again = per_token_ms(&g, tokens);
        if (again > 0 && again < c_token_ms) c_token_ms = again;
    }
    const em_model_config *cfg = em_model_config_get(m);
    char shape[160];
    snprintf(shape, sizeof shape, "[%s,%lld layers,%s,b1]", cfg->model_type,
             (long long)cfg->num_hidden_layers, em_dtype_name(em_model_dtype(m)));
    double py_token = bench_peer_ms(&py, "ember_decode"), hf_token = bench_peer_ms(&py, "hf_decode");
    double py_op = bench_peer_ms(&py, "ember_op");
    if (!json)
        printf("\n%s: C API vs the ember Python package (peer column: Python; limit column: C)\n",
               dir);
    bench_print_header(json);
    bench_row rows[] = {
        {.bench = "python_decode_token", .shape = shape, .dtype = "greedy", .ms = py_token,
         .limit_ms = c_token_ms, .limit_what = "the C API", .peer = "transformers",
         .peer_ms = hf_token},
        {.bench = "python_small_op", .shape = "add f32[4]", .dtype = "f32", .ms = py_op,
         .limit_ms = c_op_ms, .limit_what = "the C API", .peer = NULL, .peer_ms = -1},
    };
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) bench_print_row(&rows[k], json);
    if (!json) {
        if (py_token > 0)
            printf("Python overhead per decoded token: %.2f ms on %.2f ms (%+.1f %%; target < 5 %%)\n",
                   py_token - c_token_ms, c_token_ms, 100.0 * (py_token - c_token_ms) / c_token_ms);
        if (py_op > 0)
            printf("Python overhead per small op: %.1f us on %.2f us\n", (py_op - c_op_ms) * 1e3,
                   c_op_ms * 1e3);
        if (hf_token > 0 && py_token > 0)
            printf("ember from Python vs transformers' generate: %.2fx faster per token\n",
                   hf_token / py_token);
    }
    em_model_free(m);
    em_ctx_free(c);
    return 0;
}

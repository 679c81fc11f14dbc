/* `ember generate` and `ember embed`: the command-line faces of model.h and generate.h. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "core/file_read.h"
#include "ember/ember.h"
#include "ember/generate.h"

static void gen_usage(void) {
    printf(
        "usage: ember generate --model ID_OR_DIR_OR_GGUF [--device DEV | --device-map MAP]\n"
        "                      [--dtype f32|bf16]\n"
        "                      (--prompt TEXT | --chat TEXT | --ids 1,2,3) [--max-new-tokens N]\n"
        "                      [--greedy | --temperature T --top-k K --top-p P --min-p M --seed S]\n"
        "                      [--repetition-penalty R] [--stop STRING] [--batch-file FILE]\n"
        "                      [--moe-impl loop|dense|ragged] [--print-ids] [--show-device-map]\n"
        "                      [--compile [--bucket N]] [--tp N [--ep N] [--tp-plan FILE]]\n"
        "                      [--spmd N]\n\n"
        "Loads a Hugging Face model (Hub id, id@revision, or a local folder; downloaded into\n"
        "the Hub cache when missing unless HF_HUB_OFFLINE=1) or a GGUF file, and continues the\n"
        "prompt. A GGUF file's quantized weights are used as stored (quantized kernels, f32\n"
        "activations); --dtype f32|bf16 dequantizes them at load (as on PJRT devices).\n"
        "  --prompt TEXT      plain text, tokenized with the model's tokenizer\n"
        "  --chat TEXT        a user message rendered with the model's chat template\n"
        "  --ids 1,2,3        token ids\n"
        "  --batch-file FILE  one prompt (or chat message with --chat) per line, as a batch\n"
        "  --print-ids        print the new ids as one JSON array per sequence\n"
        "  --tp N             tensor parallelism of degree N: with --device cpu (or none)\n"
        "                     over the N processes of mpirun -np N; with a PJRT kind\n"
        "                     (--device xla, cuda, tpu) over its devices 0..N-1 in this\n"
        "                     process; each rank loads its slices; only rank 0 prints,\n"
        "                     with the placement of the weights (per rule of the\n"
        "                     family's plan: slice and bytes per rank) on stderr\n"
        "  --ep N             MoE: expert parallelism (transformers' ep_size; N must be the\n"
        "                     --tp or --spmd degree): each rank holds whole experts, 1/N;\n"
        "                     without it the experts are split by moe_tp_experts (each\n"
        "                     rank a slice of every expert)\n"
        "  --tp-plan FILE     overrides of the family's plan: a JSON object of module\n"
        "                     patterns to transformers' rule names, e.g.\n"
        "                     {\"embed_tokens\": \"replicate\"} (docs/parallel.md)\n"
        "  --spmd N           SPMD over N devices of a PJRT kind (--device xla:0 and the\n"
        "                     next N-1): the model loads whole on --device, each compiled\n"
        "                     step (--compile implied) is partitioned by XLA over the N\n"
        "                     devices, weights split as the family's plan splits them\n"
        "  --compile          run each step as a compiled program (one per KV-length bucket\n"
        "                     of --bucket positions, default 128); compiles are reported;\n"
        "                     on PJRT devices the batch runs rounded up to a power of two\n"
        "Sampling defaults come from generation_config.json; --greedy forces greedy decoding.\n"
        "Load time, time to first token and tokens/s are reported on stderr.\n");
}

typedef struct stream_state {
    bool on;
} stream_state;

/* with its length: a token's text may hold NUL bytes */
static bool print_piece(void *user, int seq, em_token id, const char *piece, size_t len) {
    (void)seq, (void)id;
    stream_state *s = user;
    if (s->on && piece) {
        fwrite(piece, 1, len, stdout);
        fflush(stdout);
    }
    return true;
}

/* A one-message conversation as the JSON em_generate_chat takes (NULL: not valid UTF-8). */
static char *user_message(const char *text) {
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", text);
    char *mj = msgs ? json_dumps(msgs, JSON_COMPACT) : NULL;
    json_decref(msgs);
    return mj;
}

static em_token *parse_ids(const char *s, int64_t *n) {
    size_t cap = 16;
    em_token *v = malloc(cap * sizeof *v);
    *n = 0;
    while (v && *s) {
        char *end;
        long long x = strtoll(s, &end, 10);
        if (end == s || x < 0 || x > INT32_MAX) {
            free(v);
            return NULL;
        }
        if ((size_t)*n == cap) {
            em_token *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return NULL;
            }
            v = nv;
        }
        v[(*n)++] = (em_token)x;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') {
            free(v);
            return NULL;
        }
    }
    return v;
}

/* What `ember generate` was asked for (shared by the ranks of a device group). */
typedef struct gen_opts {
    const char *model, *prompt, *chat, *ids_s, *batch_file;
    em_model_options mo;
    bool print_ids, show_map, compile;
    cli_sampling samp;
    long long bucket, max_new;
    const char *stops[16];
    int n_stops;
} gen_opts;

/* Loads the model and generates: every rank of a group does it in lockstep; only the speaking
 * rank prints. 0 on success. */
static int run(const gen_opts *o, em_ctx *c, bool speak) {
    em_model *m = em_model_load(c, o->model, &o->mo);
    em_tokenizer *tok = NULL;
    int rc = 1, batch = 0;
    char *lines[64], *convs[64] = {NULL}, *file_text = NULL;
    em_token *ids = NULL;
    em_generate_result r;
    memset(&r, 0, sizeof r);
    if (!m) goto fail;
    char wd[160];
    em_model_weight_dtypes(m, wd, sizeof wd);
    if (speak)
        fprintf(stderr, "loaded %s (%s, %s) in %.2f s; weights %s, %.1f MB\n",
            em_model_config_get(m)->model_type, em_model_dir(m), em_dtype_name(em_model_dtype(m)),
            em_model_load_seconds(m), wd, (double)em_model_weight_bytes(m, false) / 1e6);
    /* (a bf16 file without --dtype runs as stored: nothing was dequantized) */
    if (speak && strstr(em_model_dir(m), ".gguf") && !strstr(wd, "q") &&
        !(o->mo.dtype == EM_DTYPE_AUTO && em_model_dtype(m) == EM_BF16))
        fprintf(stderr, "(the GGUF file's quantized weights were dequantized at load: %s)\n",
                o->mo.dtype != EM_DTYPE_AUTO ? "--dtype was given"
                                          : "quantized weights run on the CPU only");
    if (speak && o->mo.tp && em_dist_rank(o->mo.tp) == 0) { /* where the weights went */
        char *pl = malloc(32768);
        if (pl && em_model_tp_placement(m, pl, 32768) > 0) fputs(pl, stderr);
        free(pl);
    }
    if (speak && o->show_map) {
        char map[16384];
        em_model_device_map(m, map, sizeof map);
        fprintf(stderr, "device map:\n%s", map);
    }
    if (!o->ids_s) {
        tok = em_tokenizer_load(c, em_model_dir(m));
        if (!tok) goto fail;
    }
    /* the prompts: one, or a line each of --batch-file */
    if (o->batch_file) {
        size_t sz;
        file_text = em_file_read(c, "generate", o->batch_file, (size_t)64 << 20, &sz, NULL);
        if (!file_text) goto fail;
        for (char *save = NULL, *l = strtok_r(file_text, "\n", &save); l && batch < 64;
             l = strtok_r(NULL, "\n", &save))
            if (*l) lines[batch++] = l;
    } else {
        lines[batch++] = (char *)(o->chat ? o->chat : o->prompt);
    }
    em_generate_params p = em_generate_default_params(m);
    p.max_new_tokens = o->max_new;
    cli_sampling_apply(&o->samp, &p);
    p.compile = o->compile;
    p.compile_bucket = o->bucket;
    p.stop_strings = o->stops;
    p.n_stop_strings = tok ? o->n_stops : 0;
    stream_state ss = {speak && !o->print_ids && batch == 1 && tok};
    p.on_token_bytes = print_piece;
    p.user_data = &ss;
    em_status s;
    if (o->ids_s) { /* every prompt is the given ids */
        int64_t n = 0, lens[64];
        const em_token *prompts[64];
        ids = parse_ids(o->ids_s, &n);
        if (!ids || !n) {
            fprintf(stderr, "ember generate: --ids must be a comma-separated list of ids\n");
            goto fail;
        }
        for (int b = 0; b < batch; b++) prompts[b] = ids, lens[b] = n;
        s = em_generate(c, m, tok, prompts, lens, batch, &p, &r);
    } else if (o->chat) {
        for (int b = 0; b < batch; b++)
            if (!(convs[b] = user_message(lines[b]))) {
                fprintf(stderr, "ember generate: the message is not valid UTF-8\n");
                goto fail;
            }
        s = em_generate_chat(c, m, tok, (const char *const *)convs, batch, NULL, &p, &r);
    } else {
        s = em_generate_text(c, m, tok, (const char *const *)lines, batch, &p, &r);
    }
    if (s != EM_OK) goto fail;
    if (!speak) { /* a silent rank of a device group: it only takes part */
        rc = 0;
        goto fail;
    }
    if (ss.on) printf("\n");
    for (int b = 0; b < batch; b++) {
        if (o->print_ids) {
            printf("[");
            for (int64_t k = 0; k < r.n_ids[b]; k++)
                printf("%s%lld", k ? ", " : "", (long long)r.ids[b][k]);
            printf("]\n");
        } else if (!ss.on && r.text) {
            fwrite(r.text[b], 1, r.text_len[b], stdout); /* it may hold NUL bytes */
            putchar('\n');
        }
    }
    fflush(stdout); /* the text before the timings, also when both go to one pipe */
    fprintf(stderr,
            "prompt %lld tokens, time to first token %.3f s (%.1f tokens/s prefill); "
            "%lld tokens in %.3f s = %.2f tokens/s (batch %d)\n",
            (long long)r.prompt_tokens, r.prefill_s,
            r.prefill_s > 0 ? (double)r.prompt_tokens / r.prefill_s : 0.0,
            (long long)r.decoded_tokens, r.decode_s,
            r.decode_s > 0 ? (double)r.decoded_tokens / r.decode_s : 0.0, batch);
    if (o->compile)
        fprintf(stderr, "compile mode: %lld programs compiled in %.3f s (KV buckets of %lld)\n",
                (long long)r.compiles, r.compile_s, (long long)(o->bucket > 0 ? o->bucket : 128));
    rc = 0;
fail:
    if (rc && em_ctx_error(c))
        fprintf(stderr, "ember generate: %s%s\n", speak ? "" : "(another rank) ",
                em_ctx_error(c)->message);
    em_generate_result_free(&r);
    for (int b = 0; b < 64; b++) free(convs[b]);
    free(ids);
    free(file_text);
    em_tokenizer_free(tok);
    em_model_free(m);
    return rc;
}

static int generate_in_group(gen_opts *o, em_ctx *c, long long tp);

/* A rank of a --tp N device group (cli_device_group): the run on its device. */
static int group_rank(void *arg, em_ctx *c, em_dist *g, bool speak) {
    gen_opts mine = *(const gen_opts *)arg;
    mine.mo.device = em_device_name(em_dist_device(g));
    mine.mo.tp = g;
    return run(&mine, c, speak);
}

int cmd_generate(int argc, char **argv) {
    gen_opts go;
    memset(&go, 0, sizeof go);
    gen_opts *o = &go;
    o->mo = em_model_default_options();
    o->max_new = 128;
    long long tp = 1;
    const char *plan_file = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool val = i + 1 < argc;
#define ARG(name) (!strcmp(a, name) && val && (++i, 1))
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            gen_usage();
            return 0;
        }
        int sa = cli_sampling_arg("generate", &o->samp, argc, argv, &i);
        if (sa < 0) return 2;
        if (sa) {
        } else if (ARG("--model")) o->model = argv[i];
        else if (ARG("--prompt")) o->prompt = argv[i];
        else if (ARG("--chat")) o->chat = argv[i];
        else if (ARG("--ids")) o->ids_s = argv[i];
        else if (ARG("--batch-file")) o->batch_file = argv[i];
        else if (ARG("--device")) o->mo.device = argv[i];
        else if (ARG("--device-map")) o->mo.device_map = argv[i];
        else if (ARG("--dtype")) {
            if (!em_dtype_parse(argv[i], &o->mo.dtype)) {
                fprintf(stderr, "ember generate: unknown dtype '%s'\n", argv[i]);
                return 2;
            }
        } else if (ARG("--max-new-tokens")) {
            if (!cli_int("generate", a, argv[i], 1, INT64_MAX / 2, &o->max_new)) return 2;
        }
        else if (ARG("--stop")) {
            if (o->n_stops < 16) o->stops[o->n_stops++] = argv[i];
        } else if (ARG("--moe-impl")) {
            if (!em_moe_impl_parse(argv[i], &o->mo.moe_impl)) {
                fprintf(stderr, "ember generate: --moe-impl is loop, dense or ragged\n");
                return 2;
            }
        } else if (ARG("--bucket")) {
            if (!cli_int("generate", a, argv[i], 1, INT32_MAX, &o->bucket)) return 2;
        } else if (ARG("--ep")) {
            long long ep;
            if (!cli_int("generate", a, argv[i], 1, 4096, &ep)) return 2;
            o->mo.ep_size = (int)ep;
        } else if (ARG("--tp-plan")) {
            plan_file = argv[i];
        } else if (ARG("--tp")) {
            if (!cli_int("generate", a, argv[i], 1, 4096, &tp)) return 2;
        } else if (ARG("--spmd")) {
            long long n;
            if (!cli_int("generate", a, argv[i], 1, 64, &n)) return 2;
            o->mo.spmd = (int)n;
            o->compile = true;
        } else if (!strcmp(a, "--compile")) o->compile = true;
        else if (!strcmp(a, "--print-ids")) o->print_ids = true;
        else if (!strcmp(a, "--show-device-map")) o->show_map = true;
        else {
            fprintf(stderr, "ember generate: unknown or incomplete option '%s' (see --help)\n", a);
            return 2;
        }
#undef ARG
    }
    if (!o->model || (!o->prompt && !o->chat && !o->ids_s && !o->batch_file)) {
        fprintf(stderr, "ember generate: --model and one of --prompt, --chat, --ids or "
                        "--batch-file are required (see --help)\n");
        return 2;
    }
    em_ctx *c = em_ctx_create();
    char *plan = NULL;
    if (plan_file) {
        size_t n;
        plan = em_file_read(c, "generate", plan_file, (size_t)1 << 20, &n, NULL);
        if (!plan) {
            fprintf(stderr, "ember generate: --tp-plan: %s\n", em_ctx_error(c)->message);
            em_ctx_free(c);
            return 2;
        }
        o->mo.tp_plan = plan;
    }
    int rc = generate_in_group(o, c, tp);
    free(plan);
    em_ctx_free(c);
    return rc;
}

/* --tp N over a device group or the ranks of mpirun, or no tp */
static int generate_in_group(gen_opts *o, em_ctx *c, long long tp) {
    em_dist *group = NULL;
    char kind[64] = "";
    if (o->mo.device) snprintf(kind, sizeof kind, "%.*s", (int)strcspn(o->mo.device, ":"),
                               o->mo.device);
    if (tp > 1 && kind[0] && strcmp(kind, "cpu")) { /* N devices of this process */
        return cli_device_group(c, "generate --tp", kind, (int)tp, group_rank, o);
    }
    if (tp > 1) { /* the ranks of mpirun: each holds its slices, rank 0 speaks */
        if (em_dist_init(c, NULL, &group) != EM_OK) {
            fprintf(stderr, "ember generate: --tp %lld: %s\n", tp, em_ctx_error(c)->message);
            return 1;
        }
        if (em_dist_world_size(group) != tp) {
            fprintf(stderr, "ember generate: --tp %lld but %d process(es) were started: launch "
                    "with mpirun -np %lld\n", tp, em_dist_world_size(group), tp);
            em_dist_free(group);
            return 2;
        }
        if (em_dist_rank(group) != 0 && !freopen("/dev/null", "w", stdout)) {
            em_dist_free(group);
            return 1;
        }
        o->mo.tp = group;
    }
    int rc = run(o, c, true);
    em_dist_free(group);
    return rc;
}

int cmd_embed(int argc, char **argv) {
    const char *model = NULL, *query = NULL;
    bool sim = false;
    const char *texts[257];
    int n = 0;
    em_model_options mo = em_model_default_options();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: ember embed --model ID_OR_DIR [--device DEV] [--similarity | --search "
                   "QUERY] TEXT...\n\n"
                   "Sentence embeddings as sentence-transformers computes them for\n"
                   "all-MiniLM-L6-v2 (mean pooling over the real tokens, L2 normalisation): one\n"
                   "JSON array per text; with --similarity, the cosine matrix instead; with\n"
                   "--search QUERY, the texts ranked by cosine similarity to the query.\n");
            return 0;
        } else if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) mo.device = argv[++i];
        else if (!strcmp(argv[i], "--similarity")) sim = true;
        else if (!strcmp(argv[i], "--search") && i + 1 < argc) query = argv[++i];
        else if (n < 256) texts[n++] = argv[i];
    }
    if (!model || n == 0) {
        fprintf(stderr, "ember embed: --model and at least one TEXT are required (see --help)\n");
        return 2;
    }
    em_ctx *c = em_ctx_create();
    em_model *m = em_model_load(c, model, &mo);
    em_tokenizer *tok = m ? em_tokenizer_load(c, em_model_dir(m)) : NULL;
    int rc = 1;
    float *e = NULL;
    if (!tok) goto out;
    int64_t h = em_model_config_get(m)->hidden_size;
    if (query) texts[n] = query; /* embedded with the corpus, last */
    int total = n + (query != NULL);
    e = malloc((size_t)(total * h) * sizeof *e);
    if (!e || em_embed_texts(c, m, tok, texts, total, e) != EM_OK) goto out;
    if (query) {
        double score[256];
        int order[256];
        for (int i = 0; i < n; i++) {
            score[i] = 0;
            for (int64_t k = 0; k < h; k++) score[i] += (double)e[i * h + k] * e[n * h + k];
            order[i] = i;
        }
        for (int i = 0; i < n; i++) /* a few texts: insertion sort, best first */
            for (int j = i; j > 0 && score[order[j]] > score[order[j - 1]]; j--) {
                int t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
        printf("query: %s\n", query);
        for (int i = 0; i < n; i++) printf("  %.4f  %s\n", score[order[i]], texts[order[i]]);
    } else if (sim) {
        for (int i = 0; i < n; i++) {
            printf("[");
            for (int j = 0; j < n; j++) {
                double d = 0;
                for (int64_t k = 0; k < h; k++) d += (double)e[i * h + k] * e[j * h + k];
                printf("%s%.6f", j ? ", " : "", d);
            }
            printf("]\n");
        }
    } else {
        for (int i = 0; i < n; i++) {
            printf("[");
            for (int64_t k = 0; k < h; k++) printf("%s%.8g", k ? ", " : "", (double)e[i * h + k]);
            printf("]\n");
        }
    }
    rc = 0;
out:
    if (rc && em_ctx_error(c)) fprintf(stderr, "ember embed: %s\n", em_ctx_error(c)->message);
    free(e);
    em_tokenizer_free(tok);
    em_model_free(m);
    em_ctx_free(c);
    return rc;
}

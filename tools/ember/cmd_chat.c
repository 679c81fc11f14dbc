/*
 * `ember chat`: a conversation with a model, through its chat template. Interactive on a
 * terminal (a prompt, answers streamed as they come, /reset, /exit, Ctrl-C stops the current
 * answer), and scriptable without one: every line of stdin is one user message, every answer
 * is printed followed by an empty line. A line of statistics (tokens, time to first token,
 * tokens/s) follows each answer on stderr.
 *
 * Each turn renders the whole conversation and runs it from the start (no cache is kept between
 * turns), as transformers' apply_chat_template + generate do.
 */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_limits.h"
#include "cli.h"
#include "ember/ember.h"

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

static void chat_usage(void) {
    printf(
        "usage: ember chat --model ID_OR_DIR_OR_GGUF [--system TEXT] [--max-new-tokens N]\n"
        "                  [--greedy | --temperature T --top-k K --top-p P --min-p M --seed S]\n"
        "                  [--repetition-penalty R] [--device DEV] [--dtype f32|bf16]\n"
        "                  [--compile] [--bound]\n\n"
        "A conversation with a model through its chat template (Hub id, folder or GGUF file).\n"
        "On a terminal: type a message, the answer streams as it is generated; /reset forgets\n"
        "the conversation, /exit (or Ctrl-D) leaves, Ctrl-C stops the answer being written.\n"
        "Without a terminal, each line of stdin is one user message, printed after \"> \" and\n"
        "followed by its answer and an empty line. After each answer a line on stderr gives its tokens, the\n"
        "time to the first token and the decode speed in tokens/s. Sampling defaults come from\n"
        "the model's generation config (greedy for GGUF files); --max-new-tokens defaults to\n"
        "512 per answer. --bound measures the machine's read bandwidth after each answer and\n"
        "gives the decode speed as a fraction of the bound it sets: the bytes a step reads\n"
        "(weights as held, quantized ones at their size, and the KV cache) per token.\n");
}

typedef struct reply {
    bool tty;
    size_t printed;
} reply;

/* with its length: a token's text may hold NUL bytes, which fputs would cut */
static bool stream_piece(void *user, int seq, em_token id, const char *piece, size_t len) {
    (void)seq, (void)id;
    reply *r = user;
    if (piece && len) {
        fwrite(piece, 1, len, stdout);
        fflush(stdout);
        r->printed += len;
    }
    return !interrupted; /* Ctrl-C: this answer stops here */
}

/* Removes trailing '\n' / '\r'. */
static void chomp(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = 0;
}

/* Bytes a decode step of one sequence reads at position pos: the weights as held (one row of
 * an untied embedding) and the KV cache so far. */
static double step_bytes(const em_model *m, int64_t pos) {
    const em_model_config *cfg = em_model_config_get(m);
    double kv = 2.0 * (double)cfg->num_hidden_layers * (double)cfg->num_key_value_heads *
                (double)cfg->head_dim * (double)pos * (double)em_dtype_size(em_model_dtype(m));
    return (double)em_model_weight_bytes(m, true) + kv;
}

/* One turn: renders `conv` (a JSON array) with the chat template, generates and streams the
 * answer, appends it to conv. Returns false on an error (printed). */
static bool turn(em_ctx *c, const em_model *m, const em_tokenizer *tok, json_t *conv,
                 const em_generate_params *gp, bool tty, bool bound) {
    reply r = {tty, 0};
    em_generate_params p = *gp;
    p.on_token_bytes = stream_piece;
    p.user_data = &r;
    em_generate_result res;
    char *msgs = json_dumps(conv, JSON_COMPACT);
    const char *convs[1] = {msgs};
    interrupted = 0;
    em_status s = msgs ? em_generate_chat(c, m, tok, convs, 1, NULL, &p, &res) : EM_ERR_OOM;
    free(msgs);
    if (s != EM_OK) {
        fprintf(stderr, "\nember chat: %s\n",
                em_ctx_error(c) ? em_ctx_error(c)->message : "out of memory");
        em_ctx_clear_error(c);
        return false;
    }
    bool stopped = res.stop_reason[0] == EM_STOP_CALLBACK;
    printf(stopped ? " [stopped]\n\n" : "\n\n");
    fflush(stdout);
    double tps = res.decode_s > 0 ? (double)res.decoded_tokens / res.decode_s : 0;
    fprintf(stderr, "[%lld tokens (%s), prompt %lld tokens, first token after %.2f s, "
            "%.1f tokens/s", (long long)res.n_ids[0], em_stop_reason_name(res.stop_reason[0]),
            (long long)res.prompt_tokens, res.prefill_s, tps);
    if (bound && tps > 0) {
        double gbs = bench_read_gbs(), bytes = step_bytes(m, res.prompt_tokens + res.n_ids[0] / 2);
        double max_tps = gbs * 1e9 / bytes;
        fprintf(stderr, " = %.0f%% of the bandwidth bound (%.1f tokens/s: %.1f MB per token at "
                "%.1f GB/s, measured now)", 100.0 * tps / max_tps, max_tps, bytes / 1e6, gbs);
    }
    fprintf(stderr, "]\n");
    /* the conversation keeps the answer up to a NUL byte it may hold: the next turn's prompt
     * is rendered as a C string, and em_chat_template_render refuses a text with a NUL */
    json_array_append_new(conv, json_pack("{s:s, s:s}", "role", "assistant", "content",
                                          res.text[0]));
    em_generate_result_free(&res);
    return true;
}

int cmd_chat(int argc, char **argv) {
    const char *model = NULL, *system = NULL;
    em_model_options mo = em_model_default_options();
    bool compile = false, bound = false;
    cli_sampling samp = {0};
    long long max_new = 512;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool val = i + 1 < argc;
#define ARG(name) (!strcmp(a, name) && val && (++i, 1))
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            chat_usage();
            return 0;
        }
        int sa = cli_sampling_arg("chat", &samp, argc, argv, &i);
        if (sa < 0) return 2;
        if (sa) {
        } else if (ARG("--model")) model = argv[i];
        else if (ARG("--system")) system = argv[i];
        else if (ARG("--device")) mo.device = argv[i];
        else if (ARG("--dtype")) {
            if (!em_dtype_parse(argv[i], &mo.dtype)) {
                fprintf(stderr, "ember chat: unknown dtype '%s'\n", argv[i]);
                return 2;
            }
        } else if (ARG("--max-new-tokens")) {
            if (!cli_int("chat", a, argv[i], 1, INT64_MAX / 2, &max_new)) return 2;
        }
        else if (!strcmp(a, "--compile")) compile = true;
        else if (!strcmp(a, "--bound")) bound = true;
        else {
            fprintf(stderr, "ember chat: unknown or incomplete option '%s' (see --help)\n", a);
            return 2;
        }
#undef ARG
    }
    if (!model) {
        fprintf(stderr, "ember chat: --model is required (see --help)\n");
        return 2;
    }
    bool tty = isatty(0);
    em_ctx *c = em_ctx_create();
    mo.progress = tty;
    em_model *m = em_model_load(c, model, &mo);
    em_tokenizer *tok = m ? em_tokenizer_load(c, em_model_dir(m)) : NULL;
    if (!m || !tok) {
        fprintf(stderr, "ember chat: %s\n", em_ctx_error(c)->message);
        em_tokenizer_free(tok);
        em_model_free(m);
        em_ctx_free(c);
        return 1;
    }
    char wd[160];
    em_model_weight_dtypes(m, wd, sizeof wd);
    fprintf(stderr, "loaded %s (%s) in %.2f s; weights %s, %.1f MB; %d threads\n",
            em_model_config_get(m)->model_type, em_model_dir(m), em_model_load_seconds(m), wd,
            (double)em_model_weight_bytes(m, false) / 1e6, em_num_threads());
    em_generate_params gp = em_generate_default_params(m);
    gp.max_new_tokens = max_new;
    cli_sampling_apply(&samp, &gp);
    gp.compile = compile;
    /* Ctrl-C interrupts the answer (and a read at the prompt), not the program */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    json_t *conv = json_array();
    if (system)
        json_array_append_new(conv, json_pack("{s:s, s:s}", "role", "system", "content", system));
    if (tty)
        fprintf(stderr, "Type a message; /reset forgets the conversation, /exit leaves, Ctrl-C "
                        "stops an answer.\n");
    char line[65536];
    int rc = 0;
    for (;;) {
        if (tty) {
            fputs("\n> ", stdout);
            fflush(stdout);
        }
        interrupted = 0;
        errno = 0;
        if (!fgets(line, sizeof line, stdin)) {
            if (errno == EINTR && tty) { /* Ctrl-C at the prompt: a fresh prompt */
                clearerr(stdin);
                continue;
            }
            break;
        }
        chomp(line);
        if (!line[0]) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            json_array_clear(conv);
            if (system)
                json_array_append_new(conv, json_pack("{s:s, s:s}", "role", "system", "content",
                                                      system));
            fprintf(stderr, "(the conversation is forgotten)\n");
            continue;
        }
        json_t *msg = json_pack("{s:s, s:s}", "role", "user", "content", line);
        if (!msg) {
            fprintf(stderr, "ember chat: the message is not valid UTF-8\n");
            continue;
        }
        json_array_append_new(conv, msg);
        if (!tty) printf("> %s\n", line); /* a transcript: the question, then the answer */
        if (!turn(c, m, tok, conv, &gp, tty, bound)) {
            json_array_remove(conv, json_array_size(conv) - 1);
            rc = 1;
            if (!tty) break;
        }
    }
    if (tty) fputs("\n", stdout);
    json_decref(conv);
    em_tokenizer_free(tok);
    em_model_free(m);
    em_ctx_free(c);
    return rc;
}

/* `ember serve`: the command-line face of ember/server.h. Runs until SIGTERM or SIGINT, then
 * drains (running requests may finish for --drain seconds) and exits 0. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/file_read.h"
#include "ember/ember.h"

static void serve_usage(void) {
    printf(
        "usage: ember serve --model ID_OR_DIR_OR_GGUF [--host 127.0.0.1] [--port 8080]\n"
        "                   [--device D] [--max-batch N] [--parallel N] [--ctx N]\n"
        "                   [--api-key K | --api-key-file F] [--insecure-public]\n"
        "                   [--served-model-name NAME] [--max-body-bytes N] [--drain S]\n"
        "                   [--prefill-chunk N] [--prefix-cache N] [--kv-block N]\n"
        "                   [--kv-blocks N | --kv-memory SIZE]\n"
        "                   [--compile [--bucket N]]\n\n"
        "An OpenAI-compatible HTTP server with continuous batching (docs/serve.md):\n"
        "GET /health, GET /v1/models, POST /v1/chat/completions, POST /v1/completions\n"
        "(\"stream\": true for server-sent events), POST /tokenize, POST /detokenize,\n"
        "GET /metrics (Prometheus text, vLLM's names); an encoder model (all-MiniLM-L6-v2)\n"
        "serves POST /v1/embeddings instead of the generation endpoints.\n"
        "  --host H           address to bind (default 127.0.0.1); a non-loopback address\n"
        "                     needs an API key, or --insecure-public\n"
        "  --port P           TCP port (default 8080; 0: a free one, printed on stderr)\n"
        "  --max-batch N      sequences decoded together per step (default 8)\n"
        "  --parallel N       requests held at once, running and waiting (default 64);\n"
        "                     more get 429\n"
        "  --ctx N            positions per sequence, prompt + answer (default: the model's\n"
        "                     max_position_embeddings, at most 4096)\n"
        "  --api-key K        require \"Authorization: Bearer K\" (--api-key-file: read K,\n"
        "                     first line, from a file; EMBER_API_KEY also works)\n"
        "  --drain S          on SIGTERM, let running requests finish for S seconds (30)\n"
        "  --prefill-chunk N  tokens per prefill forward, one between two decode steps: the\n"
        "                     waiting prompts that fit N (padding included) are prefilled\n"
        "                     as one batch, a longer one alone in chunks of N (default 64;\n"
        "                     0: whole prompts, all waiting prompts in one batch)\n"
        "  --prefix-cache N   keep the keys and values of the N most recent prompts; a prompt\n"
        "                     starting with the same tokens reuses them (default 4; 0: off)\n"
        "  --kv-block N       positions per block of the paged KV cache (default 16): memory\n"
        "                     follows the sequences' lengths; 0: the dense max-batch x ctx\n"
        "                     cache (used anyway for a model split over devices)\n"
        "  --kv-blocks N      a KV memory budget: the paged cache holds N blocks (vLLM's\n"
        "                     --num-gpu-blocks-override); when they run out, kept prompts\n"
        "                     are evicted, then the newest sequence is preempted and later\n"
        "                     recomputed (default: room for --max-batch sequences at --ctx)\n"
        "  --kv-memory SIZE   the same budget in bytes of keys and values (vLLM's\n"
        "                     --kv-cache-memory-bytes): 512MiB, 2GiB, 1G, 300M, or bytes\n"
        "  --compile          decode steps as compiled programs, one per batch bucket (1, 2,\n"
        "                     4, ... --max-batch rows) and key bucket of --bucket positions\n"
        "                     (default 128): requests joining and leaving do not recompile;\n"
        "                     over the paged KV cache (or the dense one with --kv-block 0);\n"
        "                     prefill runs eagerly\n");
}

/* A size in bytes: digits with an optional K/M/G (KiB/MiB/GiB, powers of 1024) or
 * KB/MB/GB (powers of 1000) suffix. false with the error printed. */
static bool parse_bytes(const char *opt, const char *text, int64_t *out) {
    char *end = NULL;
    double v = strtod(text, &end);
    static const struct {
        const char *suffix;
        double scale;
    } units[] = {{"", 1},         {"K", 1024},        {"KiB", 1024},          {"KB", 1e3},
                 {"M", 1 << 20},  {"MiB", 1 << 20},   {"MB", 1e6},            {"G", 1 << 30},
                 {"GiB", 1 << 30}, {"GB", 1e9},       {"B", 1}};
    for (size_t u = 0; end != text && u < sizeof units / sizeof units[0]; u++)
        if (!strcmp(end, units[u].suffix) && v * units[u].scale >= 1 && v * units[u].scale < 9e18) {
            *out = (int64_t)(v * units[u].scale);
            return true;
        }
    fprintf(stderr, "ember serve: %s '%s' is not a size (bytes, or a number with K, M, G, KiB, "
                    "MiB, GiB, KB, MB or GB)\n", opt, text);
    return false;
}

/* The first line of a file, without its newline (NULL with the error printed). */
static char *read_key_file(const char *path) {
    em_ctx *c = em_ctx_create();
    size_t n = 0;
    char *text = em_file_read(c, "serve", path, 4096, &n, NULL);
    if (!text) fprintf(stderr, "ember serve: %s\n", em_ctx_error(c)->message);
    em_ctx_free(c);
    if (text) text[strcspn(text, "\r\n")] = 0;
    if (text && !*text) {
        fprintf(stderr, "ember serve: %s holds no key\n", path);
        free(text);
        return NULL;
    }
    return text;
}

int cmd_serve(int argc, char **argv) {
    em_server_options o = em_server_default_options();
    const char *key_file = NULL;
    char *key_text = NULL;
    double drain = 30;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool val = i + 1 < argc;
        long long v;
#define ARG(name) (!strcmp(a, name) && val && (++i, 1))
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_usage();
            return 0;
        } else if (ARG("--model")) o.model = argv[i];
        else if (ARG("--host")) o.host = argv[i];
        else if (ARG("--device")) o.device = argv[i];
        else if (ARG("--api-key")) o.api_key = argv[i];
        else if (ARG("--api-key-file")) key_file = argv[i];
        else if (ARG("--served-model-name")) o.model_name = argv[i];
        else if (!strcmp(a, "--insecure-public")) o.insecure_public = true;
        else if (!strcmp(a, "--compile")) o.compile = true;
        else if (ARG("--port")) {
            if (!cli_int("serve", a, argv[i], 0, 65535, &v)) return 2;
            o.port = (int)v;
        } else if (ARG("--max-batch")) {
            if (!cli_int("serve", a, argv[i], 1, 4096, &v)) return 2;
            o.max_batch = (int)v;
        } else if (ARG("--parallel")) {
            if (!cli_int("serve", a, argv[i], 1, 100000, &v)) return 2;
            o.parallel = (int)v;
        } else if (ARG("--ctx")) {
            if (!cli_int("serve", a, argv[i], 2, INT32_MAX, &v)) return 2;
            o.ctx = v;
        } else if (ARG("--max-body-bytes")) {
            if (!cli_int("serve", a, argv[i], 1, INT32_MAX, &v)) return 2;
            o.max_body_bytes = (size_t)v;
        } else if (ARG("--prefill-chunk")) {
            if (!cli_int("serve", a, argv[i], 0, INT32_MAX, &v)) return 2;
            o.prefill_chunk = v;
        } else if (ARG("--prefix-cache")) {
            if (!cli_int("serve", a, argv[i], 0, 1024, &v)) return 2;
            o.prefix_cache = (int)v;
        } else if (ARG("--kv-block")) {
            if (!cli_int("serve", a, argv[i], 0, 4096, &v)) return 2;
            o.kv_block = (int)v;
        } else if (ARG("--kv-blocks")) {
            if (!cli_int("serve", a, argv[i], 1, INT32_MAX - 1, &v)) return 2;
            o.kv_blocks = v;
        } else if (ARG("--kv-memory")) {
            if (!parse_bytes(a, argv[i], &o.kv_memory)) return 2;
        } else if (ARG("--bucket")) {
            if (!cli_int("serve", a, argv[i], 1, INT32_MAX, &v)) return 2;
            o.compile_bucket = (int)v;
        } else if (ARG("--drain")) {
            if (!cli_real("serve", a, argv[i], 0, 86400, &drain)) return 2;
        } else {
            fprintf(stderr, "ember serve: unknown or incomplete option '%s' (see --help)\n", a);
            return 2;
        }
#undef ARG
    }
    if (!o.model) {
        fprintf(stderr, "ember serve: --model is required (see --help)\n");
        return 2;
    }
    if (o.kv_blocks && o.kv_memory) {
        fprintf(stderr, "ember serve: give --kv-blocks or --kv-memory, not both\n");
        return 2;
    }
    if (o.api_key && key_file) {
        fprintf(stderr, "ember serve: give --api-key or --api-key-file, not both\n");
        return 2;
    }
    if (key_file && !(o.api_key = key_text = read_key_file(key_file))) return 2;
    if (!o.api_key && getenv("EMBER_API_KEY") && *getenv("EMBER_API_KEY"))
        o.api_key = getenv("EMBER_API_KEY");
    /* the signals go to sigwait below, not to any thread the server starts */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    em_ctx *c = em_ctx_create();
    em_server *s = em_server_create(c, &o);
    int rc = 1;
    if (!s || em_server_start(c, s)) goto out;
    fprintf(stderr, "ember serve: listening on http://%s%s%s:%d (loading %s)\n",
            strchr(o.host, ':') ? "[" : "", o.host, strchr(o.host, ':') ? "]" : "",
            em_server_port(s), o.model);
    if (em_server_wait_ready(c, s)) goto out;
    fprintf(stderr, "ember serve: ready\n");
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "ember serve: %s: draining (up to %.0f s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
            drain);
    int cut = em_server_stop(s, drain);
    fprintf(stderr, "ember serve: stopped%s\n", cut ? " (some requests were cut short)" : "");
    rc = 0;
out:
    if (rc && em_ctx_error(c)) fprintf(stderr, "ember serve: %s\n", em_ctx_error(c)->message);
    em_server_free(s);
    em_ctx_free(c);
    free(key_text);
    return rc;
}

/*
 * `ember bench serve`: continuous batching measured against the batch it could run at best.
 *
 * One process: the model decodes a static batch through em_generate first (all prompts at once,
 * the step time and tokens/s that batch size allows: the limit), then an in-process `ember
 * serve` (em_server_*) on a loopback port takes streaming completion requests from client
 * threads (libcurl): closed loop with S concurrent streams for each S given (each stream sends
 * its next request when the last one ends), and open loop with Poisson arrivals at each rate
 * given (seeded, so every run replays the same trace). Per phase: aggregate generated tokens/s,
 * time to first token and inter-token latency percentiles (from the SSE chunk times; the
 * server sends one chunk per token), failed requests. The targets are printed: at 16
 * streams, aggregate throughput >= 4x one stream; p50 inter-token latency within 1.5x the
 * static batch's step time. On a GGUF file, llama.cpp's llama-server (bench_serve_peer.c) then
 * takes the same phases with the same request bodies, and its figures stand beside Ember's.
 */
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_serve_peer.h"
#include "bench_util.h"
#include "cli.h"
#include "ember/ember.h"

enum { MAX_LIST = 8, MAX_TOKENS_PER_REQ = 4096 };

typedef struct req_times {
    double start, first, end;
    double *chunk; /* arrival time of each token chunk */
    int n_chunk, cap;
    long tokens; /* completion_tokens of the usage chunk */
    long http;
    bool failed;
} req_times;

typedef struct client {
    int port;
    const char *body;
    req_times *out; /* the requests this client made */
    int n_out, max_out;
    double t0, stop_at; /* closed loop: stop sending after stop_at */
    int rounds;         /* closed loop: requests per stream */
    double arrival;     /* open loop: when to send its single request */
} client;

static double now_s(void) { return bench_now(); }

/* The first occurrence of needle (nl bytes) in the n bytes at h, or NULL (memmem without the
 * GNU extension, and without GCC's nonnull false alarm under UBSan's pointer checks). */
static const char *find(const char *h, size_t n, const char *needle, size_t nl) {
    for (size_t i = 0; i + nl <= n; i++)
        if (!memcmp(h + i, needle, nl)) return h + i;
    return NULL;
}

/* Times the SSE events that carry text (the server sends what was generated since its last
 * event: one token each unless the client falls behind) and reads completion_tokens from the
 * usage event. Each event is scanned up to its blank line: llama-server's usage event comes
 * after the model's path and before its own timings, so no fixed window fits both servers
 * (its events have the same "text" and usage members as Ember's otherwise). */
static size_t on_data(char *p, size_t size, size_t n, void *user) {
    req_times *r = user;
    size_t len = size * n;
    double t = now_s();
    for (size_t i = 0; i + 7 < len; i++) {
        if (memcmp(p + i, "data: {", 7)) continue;
        const char *blank = find(p + i, len - i, "\n\n", 2);
        size_t span = blank ? (size_t)(blank - (p + i)) : len - i;
        const char *u = find(p + i, span, "\"completion_tokens\":", 20);
        if (u) r->tokens = strtol(u + 20, NULL, 10);
        if (!find(p + i, span, "\"text\":\"", 8) || find(p + i, span, "\"text\":\"\"", 9))
            continue; /* the usage event, or the finish event with no new text */
        if (r->n_chunk == r->cap) {
            int cap = r->cap ? 2 * r->cap : 64;
            double *c = realloc(r->chunk, (size_t)cap * sizeof *c);
            if (!c) return 0;
            r->chunk = c;
            r->cap = cap;
        }
        r->chunk[r->n_chunk++] = t;
        if (r->n_chunk == 1) r->first = t;
    }
    return len;
}

static void one_request(int port, const char *body, req_times *r) {
    memset(r, 0, sizeof *r);
    CURL *h = curl_easy_init();
    if (!h) {
        r->failed = true;
        return;
    }
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", port);
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 600L);
    r->start = now_s();
    CURLcode rc = curl_easy_perform(h);
    r->end = now_s();
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->http);
    r->failed = rc != CURLE_OK || r->http != 200 || r->n_chunk == 0;
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
}

static void *closed_loop(void *arg) {
    client *cl = arg;
    for (int k = 0; k < cl->rounds && cl->n_out < cl->max_out; k++)
        one_request(cl->port, cl->body, &cl->out[cl->n_out++]);
    return NULL;
}

static void *open_loop(void *arg) {
    client *cl = arg;
    double wait = cl->t0 + cl->arrival - now_s();
    if (wait > 0) usleep((useconds_t)(wait * 1e6));
    one_request(cl->port, cl->body, &cl->out[cl->n_out++]);
    return NULL;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, int n, double p) {
    if (n <= 0) return -1;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    int i = (int)ceil(p / 100.0 * n) - 1;
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

typedef struct phase_stats {
    int done, failed;
    double tokens_per_s, ttft_p50, ttft_p90, itl_p50, itl_p90, wall_s;
} phase_stats;

static void summarise(req_times *r, int n, double wall, phase_stats *st) {
    memset(st, 0, sizeof *st);
    st->wall_s = wall;
    long tokens = 0;
    int n_itl = 0, n_ttft = 0;
    for (int i = 0; i < n; i++) tokens += r[i].failed ? 0 : r[i].tokens, n_itl += r[i].n_chunk;
    double *ttft = malloc((size_t)(n + 1) * sizeof *ttft),
           *itl = malloc((size_t)(n_itl + 1) * sizeof *itl);
    n_itl = 0;
    for (int i = 0; i < n; i++) {
        if (r[i].failed) {
            st->failed++;
            continue;
        }
        st->done++;
        if (ttft) ttft[n_ttft++] = (r[i].first - r[i].start) * 1e3;
        for (int k = 1; itl && k < r[i].n_chunk; k++)
            itl[n_itl++] = (r[i].chunk[k] - r[i].chunk[k - 1]) * 1e3;
    }
    st->tokens_per_s = wall > 0 ? (double)tokens / wall : 0;
    st->ttft_p50 = ttft ? pct(ttft, n_ttft, 50) : -1;
    st->ttft_p90 = ttft ? pct(ttft, n_ttft, 90) : -1;
    st->itl_p50 = itl ? pct(itl, n_itl, 50) : -1;
    st->itl_p90 = itl ? pct(itl, n_itl, 90) : -1;
    free(ttft);
    free(itl);
}

static void print_phase(const char *server, const char *what, double x, const phase_stats *st,
                        bool json) {
    if (json)
        printf("{\"bench\": \"serve\", \"server\": \"%s\", \"phase\": \"%s\", \"x\": %g, "
               "\"done\": %d, \"failed\": %d, \"tokens_per_s\": %.3f, \"ttft_p50_ms\": %.2f, "
               "\"ttft_p90_ms\": %.2f, \"itl_p50_ms\": %.2f, \"itl_p90_ms\": %.2f, "
               "\"seconds\": %.2f}\n",
               server, what, x, st->done, st->failed, st->tokens_per_s, st->ttft_p50,
               st->ttft_p90, st->itl_p50, st->itl_p90, st->wall_s);
    else
        printf("%-9s %8g %6d %6d %12.1f %10.1f %10.1f %10.1f %10.1f\n", what, x, st->done,
               st->failed, st->tokens_per_s, st->ttft_p50, st->ttft_p90, st->itl_p50,
               st->itl_p90);
    fflush(stdout);
}

static void print_table_header(void) {
    printf("%-9s %8s %6s %6s %12s %10s %10s %10s %10s\n", "phase", "x", "done", "failed",
           "tokens/s", "ttft p50", "ttft p90", "itl p50", "itl p90");
}

/* The client phases against the server on port, the same for Ember and its peer: closed loop
 * at each stream count (two requests per stream, back to back), then the seeded Poisson trace at
 * each rate. closed[i] gets streams[i]'s figures. Returns 0, or 1 when out of memory. */
static int run_phases(int port, const char *body, const char *server, const long long *streams,
                      int n_streams, const double *rates, int n_rates, int requests, bool json,
                      phase_stats *closed) {
    int rc = 0;
    for (int i = 0; i < n_streams && !rc; i++) {
        int s = (int)streams[i];
        client *cl = calloc((size_t)s, sizeof *cl);
        req_times *rt = calloc((size_t)s * 2, sizeof *rt);
        pthread_t *th = calloc((size_t)s, sizeof *th);
        if (!cl || !rt || !th) rc = 1;
        double t0 = now_s();
        for (int k = 0; !rc && k < s; k++) {
            cl[k] = (client){.port = port, .body = body, .out = rt + 2 * k, .max_out = 2,
                             .rounds = 2, .t0 = t0};
            pthread_create(&th[k], NULL, closed_loop, &cl[k]);
        }
        for (int k = 0; !rc && k < s; k++) pthread_join(th[k], NULL);
        summarise(rt, rc ? 0 : 2 * s, now_s() - t0, &closed[i]);
        print_phase(server, "streams", s, &closed[i], json);
        for (int k = 0; rt && k < 2 * s; k++) free(rt[k].chunk);
        free(cl);
        free(rt);
        free(th);
    }
    for (int i = 0; i < n_rates && !rc; i++) {
        int n = requests;
        client *cl = calloc((size_t)n, sizeof *cl);
        req_times *rt = calloc((size_t)n, sizeof *rt);
        pthread_t *th = calloc((size_t)n, sizeof *th);
        if (!cl || !rt || !th) rc = 1;
        uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
        double at = 0, t0 = now_s() + 0.05;
        for (int k = 0; !rc && k < n; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            double u = ((double)(seed >> 11) + 0.5) / 9007199254740992.0;
            at += -log(u) / rates[i]; /* exponential gaps: Poisson arrivals */
            cl[k] = (client){.port = port, .body = body, .out = rt + k, .max_out = 1,
                             .arrival = at, .t0 = t0};
            pthread_create(&th[k], NULL, open_loop, &cl[k]);
        }
        for (int k = 0; !rc && k < n; k++) pthread_join(th[k], NULL);
        phase_stats st;
        summarise(rt, rc ? 0 : n, now_s() - t0, &st);
        print_phase(server, "poisson", rates[i], &st, json);
        for (int k = 0; rt && k < n; k++) free(rt[k].chunk);
        free(cl);
        free(rt);
        free(th);
    }
    return rc;
}

/* With json, the peer's row: {"bench": "serve_peer", "peer": "llama.cpp server", "available":
 * ..., then its executable, version and flags, or why it is unavailable}. */
static void print_peer_line(bool json, const serve_peer *sp, int threads, int np, int ctx) {
    if (!json) return;
    json_t *o = json_pack("{s:s, s:s, s:b}", "bench", "serve_peer", "peer", "llama.cpp server",
                          "available", threads > 0);
    if (o && threads > 0) {
        json_object_set_new(o, "exe", json_string(sp->exe));
        json_object_set_new(o, "version", json_string(sp->version));
        json_object_set_new(o, "threads", json_integer(threads));
        json_object_set_new(o, "parallel", json_integer(np));
        json_object_set_new(o, "ctx", json_integer(ctx));
    } else if (o) {
        json_object_set_new(o, "why", json_string(sp->why));
    }
    char *text = o ? json_dumps(o, JSON_PRESERVE_ORDER) : NULL;
    if (text) printf("%s\n", text);
    fflush(stdout);
    free(text);
    json_decref(o);
}

/* Static batching: b copies of the prompt decoded together; ms per step and tokens/s. */
static bool static_batch(em_ctx *c, em_model *m, const em_token *prompt, int64_t len, int b,
                         int64_t tokens, double *step_ms, double *tps) {
    const em_token **rows = malloc((size_t)b * sizeof *rows);
    int64_t *lens = malloc((size_t)b * sizeof *lens);
    if (!rows || !lens) {
        free(rows);
        free(lens);
        return false;
    }
    for (int i = 0; i < b; i++) rows[i] = prompt, lens[i] = len;
    em_generate_params p = em_generate_default_params(m);
    p.do_sample = false;
    em_token no_eos = 0;
    p.eos_ids = &no_eos;
    p.n_eos_ids = 0;
    double t[2] = {INFINITY, INFINITY};
    int64_t n_new[2] = {1, 1 + tokens};
    bool ok = true;
    for (int rep = 0; rep < 3 && ok; rep++) /* the fastest of three: noise only adds time */
        for (int k = 0; k < 2 && ok; k++) {
            p.max_new_tokens = n_new[k];
            em_generate_result r;
            double t0 = now_s();
            ok = em_generate(c, m, NULL, rows, lens, b, &p, &r) == EM_OK;
            double dt = now_s() - t0;
            if (dt < t[k]) t[k] = dt;
            if (ok) em_generate_result_free(&r);
        }
    free(rows);
    free(lens);
    if (!ok) return false;
    *step_ms = t[1] > t[0] ? (t[1] - t[0]) / (double)tokens * 1e3 : -1;
    *tps = (double)b * (double)(1 + tokens) / t[1];
    return true;
}

static void usage(void) {
    printf("usage: ember bench serve [--model DIR | --preset qwen3-0.6b|qwen3-30b-a3b]\n"
           "                         [--tokenizer FILE] [--streams 1,16] [--rates 0.5,2]\n"
           "                         [--requests N] [--tokens N] [--prompt-words N]\n"
           "                         [--layers N] [--prefix-cache N] [--kv-block N] [--compile]\n"
           "                         [--json]\n\n"
           "Continuous batching of an in-process `ember serve` (streaming completions over\n"
           "loopback) against static batching of the same model in the same run: closed loop at\n"
           "each --streams count, Poisson arrivals at each --rates (requests/s, seeded);\n"
           "tokens/s, time to first token and inter-token latency percentiles. The preset\n"
           "checkpoints have no tokenizer: --tokenizer (default: the Qwen3 tokenizer of\n"
           "$EMBER_SHARED_DATA) is copied into the checkpoint folder. Every request has the same\n"
           "prompt: --prefix-cache 0 makes the server compute it each time. --kv-block sets the\n"
           "server's paged KV cache block (0: the dense cache, to compare); --compile runs the\n"
           "server's decode steps as compiled programs (the first phases pay the compiles).\n"
           "With --model FILE.gguf, llama.cpp's llama-server ($EMBER_LLAMA_SERVER, or on PATH)\n"
           "is started on the same file afterwards and takes the same phases (its peer rows and\n"
           "ratios).\n");
}

static bool copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = a ? fopen(to, "wb") : NULL;
    char buf[65536];
    size_t n;
    bool ok = a && b;
    while (ok && (n = fread(buf, 1, sizeof buf, a)) > 0) ok = fwrite(buf, 1, n, b) == n;
    if (a) fclose(a);
    if (b && fclose(b)) ok = false;
    return ok;
}

int bench_serve(int argc, char **argv) {
    bool json = false, compile = false;
    const char *model = NULL, *preset = "qwen3-0.6b", *tokenizer = NULL;
    long long streams[MAX_LIST] = {1, 16}, tokens = 32, requests = 16, words = 48, layers = 0,
              prefix_cache = em_server_default_options().prefix_cache,
              kv_block = em_server_default_options().kv_block;
    double rates[MAX_LIST] = {0.5, 2};
    int n_streams = 2, n_rates = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--compile")) compile = true;
        else if (!strcmp(a, "--model") && has) model = argv[++i];
        else if (!strcmp(a, "--preset") && has) preset = argv[++i];
        else if (!strcmp(a, "--tokenizer") && has) tokenizer = argv[++i];
        else if (!strcmp(a, "--streams") && has) {
            n_streams = cli_int_list("bench serve", a, argv[++i], 1, 256, streams, MAX_LIST);
            if (n_streams < 0) return 2;
        } else if (!strcmp(a, "--rates") && has) {
            char *s = argv[++i], *end;
            n_rates = 0;
            for (char *t = strtok(s, ","); t && n_rates < MAX_LIST; t = strtok(NULL, ",")) {
                double v = strtod(t, &end);
                if (*end || !(v >= 0) || v > 1000) {
                    fprintf(stderr, "ember bench serve: --rates: '%s' is not a rate in "
                                    "requests/s (0 for none)\n", t);
                    return 2;
                }
                if (v > 0) rates[n_rates++] = v;
            }
        } else if (!strcmp(a, "--requests") && has) {
            if (!cli_int("bench serve", a, argv[++i], 1, 10000, &requests)) return 2;
        } else if (!strcmp(a, "--tokens") && has) {
            if (!cli_int("bench serve", a, argv[++i], 2, MAX_TOKENS_PER_REQ, &tokens)) return 2;
        } else if (!strcmp(a, "--prompt-words") && has) {
            if (!cli_int("bench serve", a, argv[++i], 1, 2000, &words)) return 2;
        } else if (!strcmp(a, "--layers") && has) {
            if (!cli_int("bench serve", a, argv[++i], 1, 1000, &layers)) return 2;
        } else if (!strcmp(a, "--prefix-cache") && has) {
            if (!cli_int("bench serve", a, argv[++i], 0, 1024, &prefix_cache)) return 2;
        } else if (!strcmp(a, "--kv-block") && has) {
            if (!cli_int("bench serve", a, argv[++i], 0, 4096, &kv_block)) return 2;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "ember bench serve: unknown option '%s'\n", a);
            return 2;
        }
    }
    char dir[1024], tok_path[1100], shared_tok[1024];
    if (model) {
        snprintf(dir, sizeof dir, "%s", model);
    } else {
        const char *sd = getenv("EMBER_SHARED_DATA");
        if (!tokenizer && sd) {
            snprintf(shared_tok, sizeof shared_tok, "%s/tokenizers/qwen3/tokenizer.json", sd);
            tokenizer = shared_tok;
        }
        if (!tokenizer) {
            fprintf(stderr, "ember bench serve: the %s preset has no tokenizer: give --tokenizer "
                            "(Qwen3's tokenizer.json) or set EMBER_SHARED_DATA\n", preset);
            return 2;
        }
        int rc = bench_preset_dir("ember bench serve", "build/bench-models", "serve-", preset,
                                  layers, dir, sizeof dir);
        if (rc) return rc;
        snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", dir);
        if (!copy_file(tokenizer, tok_path)) {
            fprintf(stderr, "ember bench serve: cannot copy %s to %s\n", tokenizer, tok_path);
            return 1;
        }
    }
    /* the prompt: the same words for every request (a shared prefix the server may reuse) */
    static const char *const vocab[] = {"the", "river", "ran", "past", "old", "stone", "mills",
                                        "and", "quiet", "fields", "under", "a", "grey", "sky"};
    char prompt[16384] = "";
    size_t pl = 0;
    for (long long w = 0; w < words && pl + 16 < sizeof prompt; w++)
        pl += (size_t)snprintf(prompt + pl, sizeof prompt - pl, "%s%s", w ? " " : "",
                               vocab[(w * 7 + 3) % 14]);
    char body[17000];
    snprintf(body, sizeof body,
             "{\"prompt\": \"%s\", \"max_tokens\": %lld, \"temperature\": 0, \"stream\": true, "
             "\"stream_options\": {\"include_usage\": true}}",
             prompt, tokens);

    em_ctx *c = em_ctx_create();
    em_model_options mo = em_model_default_options();
    mo.progress = false;
    mo.offline = true;
    em_model *m = em_model_load(c, dir, &mo);
    em_tokenizer *tok = m ? em_tokenizer_load(c, dir) : NULL;
    em_token *ids = NULL;
    size_t n_ids = 0;
    if (tok) em_tokenizer_encode(c, tok, prompt, strlen(prompt), true, &ids, &n_ids);
    if (em_ctx_status(c)) {
        fprintf(stderr, "ember bench serve: %s\n", em_ctx_error(c)->message);
        em_free(ids);
        em_tokenizer_free(tok);
        em_model_free(m);
        em_ctx_free(c);
        return 1;
    }
    int max_streams = 1;
    for (int i = 0; i < n_streams; i++)
        if (streams[i] > max_streams) max_streams = (int)streams[i];
    double step_ms[MAX_LIST], static_tps[MAX_LIST];
    for (int i = 0; i < n_streams; i++)
        if (!static_batch(c, m, ids, (int64_t)n_ids, (int)streams[i], tokens, &step_ms[i],
                          &static_tps[i])) {
            fprintf(stderr, "ember bench serve: static batch: %s\n", em_ctx_error(c)->message);
            em_free(ids);
            em_tokenizer_free(tok);
            em_model_free(m);
            em_ctx_free(c);
            return 1;
        }
    const em_model_config *cfg = em_model_config_get(m);
    char shape[320], wd[128];
    em_model_weight_dtypes(m, wd, sizeof wd); /* a GGUF file's quantized weights stay so */
    snprintf(shape, sizeof shape, "%s, %lld layers, %s activations, weights %s, prompt %zu tokens, "
             "%lld new", cfg->model_type, (long long)cfg->num_hidden_layers,
             em_dtype_name(em_model_dtype(m)), wd, n_ids, tokens);
    char dtype[16];
    snprintf(dtype, sizeof dtype, "%s", em_dtype_name(em_model_dtype(m)));
    em_free(ids);
    em_tokenizer_free(tok);
    em_model_free(m); /* the server loads its own copy */

    curl_global_init(CURL_GLOBAL_DEFAULT);
    em_server_options so = em_server_default_options();
    so.model = dir;
    so.port = 0;
    so.quiet = true;
    so.prefix_cache = (int)prefix_cache;
    so.kv_block = (int)kv_block;
    so.compile = compile;
    so.max_batch = max_streams;
    so.parallel = max_streams + (int)requests + 8;
    so.ctx = (int64_t)n_ids + tokens + 16;
    em_server *srv = em_server_create(c, &so);
    if (!srv || em_server_start(c, srv) != EM_OK || em_server_wait_ready(c, srv) != EM_OK) {
        fprintf(stderr, "ember bench serve: %s\n", em_ctx_error(c)->message);
        em_server_stop(srv, 0);
        em_server_free(srv);
        em_ctx_free(c);
        curl_global_cleanup();
        return 1;
    }
    int port = em_server_port(srv);
    if (!json) {
        printf("\n%s (%s), server max batch %d%s\n", dir, shape, max_streams,
               compile ? ", --compile" : "");
        print_table_header();
    }
    phase_stats closed[MAX_LIST], peer[MAX_LIST];
    int rc = run_phases(port, body, "ember", streams, n_streams, rates, n_rates, (int)requests,
                        json, closed);
    em_server_stop(srv, 5);
    em_server_free(srv);
    /* llama.cpp's server on the same GGUF file, once Ember's has stopped: one server at a time
     * on the machine's cores, both with Ember's thread count and as many slots as streams */
    bool have_peer = false;
    if (!rc) {
        serve_peer sp;
        int threads = em_num_threads(), ctx = max_streams * ((int)n_ids + (int)tokens + 64);
        if (serve_peer_start(dir, threads, max_streams, ctx, &sp)) {
            if (!json) {
                printf("\npeer llama.cpp server %s (version %s), -t %d -np %d -c %d\n", sp.exe,
                       sp.version[0] ? sp.version : "?", threads, max_streams, ctx);
                print_table_header();
            }
            print_peer_line(json, &sp, threads, max_streams, ctx);
            rc = run_phases(sp.port, body, "llama.cpp", streams, n_streams, rates, n_rates,
                            (int)requests, json, peer);
            serve_peer_stop(&sp);
            have_peer = !rc;
        } else {
            if (!json) printf("\npeer llama.cpp server: unavailable (%s)\n", sp.why);
            print_peer_line(json, &sp, 0, 0, 0);
        }
    }
    curl_global_cleanup();
    if (!rc) {
        if (!json) printf("\nagainst static batching of the same model in this run:\n");
        bench_print_header(json);
        for (int i = 0; i < n_streams; i++) {
            char sh[64];
            snprintf(sh, sizeof sh, "%lld streams", streams[i]);
            /* Ember's ms per generated token of the batch, against the static batch's */
            const char *pn = have_peer ? "llama.cpp server" : NULL;
            bench_row r = {.bench = "serve_itl_p50", .shape = sh, .dtype = dtype,
                           .ms = closed[i].itl_p50, .limit_ms = step_ms[i],
                           .limit_what = "static batch step", .peer = pn,
                           .peer_ms = have_peer ? peer[i].itl_p50 : -1};
            bench_print_row(&r, json);
            bench_row t = {.bench = "serve_ms_per_token", .shape = sh, .dtype = dtype,
                           .ms = closed[i].tokens_per_s > 0 ? 1e3 / closed[i].tokens_per_s : -1,
                           .limit_ms = 1e3 / static_tps[i], .limit_what = "static batch",
                           .peer = pn,
                           .peer_ms = have_peer && peer[i].tokens_per_s > 0
                                          ? 1e3 / peer[i].tokens_per_s
                                          : -1};
            bench_print_row(&t, json);
            bench_row f = {.bench = "serve_ttft_p50", .shape = sh, .dtype = dtype,
                           .ms = closed[i].ttft_p50, .peer = pn,
                           .peer_ms = have_peer ? peer[i].ttft_p50 : -1};
            bench_print_row(&f, json);
        }
        if (!json) {
            int one = -1, sixteen = -1;
            for (int i = 0; i < n_streams; i++) {
                if (streams[i] == 1) one = i;
                if (streams[i] == 16) sixteen = i;
            }
            if (one >= 0 && sixteen >= 0 && closed[one].tokens_per_s > 0)
                printf("16 streams: %.2fx the throughput of one (target >= 4x on the MoE shape)\n",
                       closed[sixteen].tokens_per_s / closed[one].tokens_per_s);
            for (int i = 0; i < n_streams; i++)
                if (closed[i].itl_p50 > 0 && step_ms[i] > 0)
                    printf("%lld streams: p50 inter-token latency %.1f ms = %.2fx the static "
                           "batch's step (target <= 1.5x)\n",
                           streams[i], closed[i].itl_p50, closed[i].itl_p50 / step_ms[i]);
            for (int i = 0; have_peer && i < n_streams; i++)
                if (peer[i].tokens_per_s > 0 && peer[i].ttft_p50 > 0 && peer[i].itl_p50 > 0)
                    printf("%lld streams, Ember / llama.cpp server: aggregate tokens/s %.2fx "
                           "(above 1: Ember faster), TTFT p50 %.2fx, ITL p50 %.2fx (below 1: "
                           "Ember faster)\n",
                           streams[i], closed[i].tokens_per_s / peer[i].tokens_per_s,
                           closed[i].ttft_p50 / peer[i].ttft_p50,
                           closed[i].itl_p50 / peer[i].itl_p50);
        }
    }
    em_ctx_free(c);
    return rc;
}

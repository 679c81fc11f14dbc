/*
 * llama.cpp's llama-bench as the peer of `ember bench decode` on GGUF files: the same file and
 * thread count, run as a subprocess (found through $EMBER_LLAMA_BENCH or on PATH). Its
 * prefill (pp512) and batch-1 generation (tg) figures become the peer's "prefill" and
 * "decode_1" times; llama-bench has no batch-16 decode.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

/* The llama-bench executable, or NULL. */
static const char *find_llama_bench(char *buf, size_t n) {
    const char *e = getenv("EMBER_LLAMA_BENCH");
    if (e && *e) return access(e, X_OK) == 0 ? e : NULL;
    const char *path = getenv("PATH");
    for (const char *p = path; p && *p;) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        snprintf(buf, n, "%.*s/llama-bench", (int)len, p);
        if (len && access(buf, X_OK) == 0) return buf;
        p = colon ? colon + 1 : p + len;
    }
    return NULL;
}

void bench_llamacpp_run(const char *gguf, int threads, int n_gen, bench_peer *out) {
    memset(out, 0, sizeof *out);
    char exe[1024];
    const char *bin = find_llama_bench(exe, sizeof exe);
    if (!bin) {
        snprintf(out->why, sizeof out->why, "llama-bench is neither on PATH nor in "
                 "$EMBER_LLAMA_BENCH");
        return;
    }
    if (strchr(gguf, '\'') || strchr(bin, '\'')) {
        snprintf(out->why, sizeof out->why, "a quote in the path");
        return;
    }
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "'%s' -m '%s' -t %d -p 512 -n %d -r 3 -o json 2>/dev/null", bin,
             gguf, threads, n_gen);
    FILE *f = popen(cmd, "r");
    if (!f) {
        snprintf(out->why, sizeof out->why, "cannot run %s", bin);
        return;
    }
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap);
    for (size_t got; text && (got = fread(text + len, 1, cap - len - 1, f)) > 0;) {
        len += got;
        if (len + 1 == cap) {
            char *nt = realloc(text, cap *= 2);
            if (!nt) break;
            text = nt;
        }
    }
    int rc = pclose(f);
    json_error_t je;
    json_t *doc = text ? json_loadb(text, len, 0, &je) : NULL;
    free(text);
    if (!json_is_array(doc)) {
        snprintf(out->why, sizeof out->why, "%s exited with %d and no JSON results", bin, rc);
        json_decref(doc);
        return;
    }
    size_t i;
    json_t *r;
    json_array_foreach(doc, i, r) {
        json_int_t np = json_integer_value(json_object_get(r, "n_prompt"));
        json_int_t ng = json_integer_value(json_object_get(r, "n_gen"));
        double ts = json_number_value(json_object_get(r, "avg_ts"));
        if (ts <= 0 || out->n >= 128) continue;
        if (np > 0 && ng == 0) {
            snprintf(out->names[out->n], sizeof out->names[0], "prefill");
            out->ms[out->n++] = (double)np * 1e3 / ts;
        } else if (ng > 0 && np == 0) {
            snprintf(out->names[out->n], sizeof out->names[0], "decode_1");
            out->ms[out->n++] = 1e3 / ts;
        }
    }
    json_decref(doc);
    out->available = out->n > 0;
    if (!out->available) snprintf(out->why, sizeof out->why, "%s gave no pp/tg results", bin);
}

/*
 * `ember bench tokenize`: load time and single-threaded encode throughput of a tokenizer, for
 * Ember and, in the same run, for the `tokenizers` library (through a Python snippet) when it
 * can be imported.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "ember/core.h"
#include "ember/tokenizer.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CRC-32 (IEEE, as Python's zlib.crc32) to compare the two id sequences without shipping them. */
static unsigned long crc32_ieee(const unsigned char *p, size_t n) {
    static unsigned long table[256];
    if (!table[1])
        for (unsigned long i = 0; i < 256; i++) {
            unsigned long c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320ul ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    unsigned long c = 0xFFFFFFFFul;
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFul;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        *len = (size_t)n;
    }
    return b;
}

/* Runs the library in a Python child; fills the figures or leaves them NAN. */
static void bench_library(const char *tok_path, const char *text_path, double min_s,
                          double *load_ms, double *mbps, unsigned long *crc, long *n_ids,
                          char *why, size_t whysz) {
    *load_ms = *mbps = NAN;
    *crc = 0;
    *n_ids = -1;
    const char *py = getenv("EMBER_PYTHON");
    if (!py || !*py) py = "python3";
    char script[] =
        "import sys,time,json,os,zlib,array\n"
        "try:\n"
        "  from tokenizers import Tokenizer\n"
        "except Exception as e:\n"
        "  print(json.dumps({'error':'cannot import tokenizers: %s'%e})); sys.exit(0)\n"
        "p,tp,mins=sys.argv[1],sys.argv[2],float(sys.argv[3])\n"
        "f=p if os.path.isfile(p) else os.path.join(p,'tokenizer.json')\n"
        "best_load=1e9\n"
        "for _ in range(3):\n"
        "  t0=time.perf_counter(); tok=Tokenizer.from_file(f); best_load=min(best_load,time.perf_counter()-t0)\n"
        "tok.no_truncation(); tok.no_padding()\n"
        "text=open(tp,encoding='utf-8').read(); nb=len(text.encode('utf-8'))\n"
        "ids=tok.encode(text,add_special_tokens=False).ids\n"
        "best=1e9; t_start=time.perf_counter(); runs=0\n"
        "while runs<3 or time.perf_counter()-t_start<mins:\n"
        "  t0=time.perf_counter(); tok.encode(text,add_special_tokens=False); best=min(best,time.perf_counter()-t0); runs+=1\n"
        "crc=zlib.crc32(array.array('i',ids).tobytes())\n"
        "print(json.dumps({'load_ms':best_load*1e3,'mbps':nb/best/1e6,'crc':crc,'n':len(ids)}))\n";
    char path[] = "/tmp/ember_bench_tok_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        snprintf(why, whysz, "cannot create a temporary file");
        return;
    }
    FILE *f = fdopen(fd, "w");
    fputs(script, f);
    fclose(f);
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false '%s' '%s' '%s' '%s' %.3f 2>&1", py,
             path, tok_path, text_path, min_s);
    FILE *p = popen(cmd, "r");
    char out[4096] = "";
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    if (p) pclose(p);
    remove(path);
    char *o;
    if ((o = strstr(out, "\"load_ms\"")) &&
        sscanf(o, "\"load_ms\": %lf, \"mbps\": %lf, \"crc\": %lu, \"n\": %ld", load_ms, mbps, crc,
               n_ids) == 4)
        return;
    char *e = strstr(out, "\"error\": \"");
    if (e) {
        e += 10;
        char *q = strchr(e, '"');
        snprintf(why, whysz, "%.*s", q ? (int)(q - e) : 200, e);
    } else
        snprintf(why, whysz, "%s failed: %.200s", py, out);
    *load_ms = *mbps = NAN;
}

int bench_tokenize(int argc, char **argv) {
    const char *data = getenv("EMBER_SHARED_DATA");
    char def_tok[4096] = "", def_text[4096] = "";
    if (data && *data) {
        snprintf(def_tok, sizeof def_tok, "%s/tokenizers/qwen3", data);
        snprintf(def_text, sizeof def_text, "%s/text/tinyshakespeare.txt", data);
    }
    const char *tok_path = *def_tok ? def_tok : NULL, *text_path = *def_text ? def_text : NULL;
    bool json = false;
    double min_s = 1.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: ember bench tokenize [--tokenizer DIR_OR_FILE] [--text FILE] "
                   "[--seconds S] [--json]\n\n"
                   "Loads the tokenizer (default $EMBER_SHARED_DATA/tokenizers/qwen3) and encodes\n"
                   "the text (default $EMBER_SHARED_DATA/text/tinyshakespeare.txt) on one thread,\n"
                   "repeating for at least S seconds (default 1), best run reported. The\n"
                   "`tokenizers` library is measured the same way in a Python child\n"
                   "($EMBER_PYTHON or python3); its figures are null when it cannot be\n"
                   "imported. Prints load ms, MB/s (UTF-8 bytes) and whether the ids agree.\n");
            return 0;
        } else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc)
            tok_path = argv[++i];
        else if (!strcmp(argv[i], "--text") && i + 1 < argc)
            text_path = argv[++i];
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            min_s = atof(argv[++i]);
        else if (!strcmp(argv[i], "--json"))
            json = true;
        else {
            fprintf(stderr, "ember bench tokenize: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!tok_path || !text_path) {
        fprintf(stderr, "ember bench tokenize: give --tokenizer and --text, or set "
                        "EMBER_SHARED_DATA\n");
        return 2;
    }
    size_t tlen;
    char *text = slurp(text_path, &tlen);
    if (!text) {
        fprintf(stderr, "ember bench tokenize: cannot read %s\n", text_path);
        return 1;
    }
    em_ctx *c = em_ctx_create();
    double load_best = INFINITY;
    em_tokenizer *tok = NULL;
    for (int r = 0; r < 3; r++) {
        em_tokenizer_free(tok);
        double t0 = now_s();
        tok = em_tokenizer_load(c, tok_path);
        double dt = now_s() - t0;
        if (!tok) break;
        if (dt < load_best) load_best = dt;
    }
    if (!tok) {
        fprintf(stderr, "ember bench tokenize: %s\n", em_ctx_error(c)->message);
        em_ctx_destroy(c);
        free(text);
        return 1;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    double best = INFINITY, start = now_s();
    int runs = 0;
    unsigned long crc = 0;
    while (runs < 3 || now_s() - start < min_s) {
        em_tokenizer_free_ids(ids);
        double t0 = now_s();
        if (em_tokenizer_encode(c, tok, text, tlen, false, &ids, &n) != EM_OK) {
            fprintf(stderr, "ember bench tokenize: %s\n", em_ctx_error(c)->message);
            break;
        }
        double dt = now_s() - t0;
        if (dt < best) best = dt;
        runs++;
    }
    if (ids) crc = crc32_ieee((const unsigned char *)ids, n * sizeof *ids);
    double ours = (double)tlen / best / 1e6;

    double lib_load, lib_mbps;
    unsigned long lib_crc;
    long lib_n;
    char why[512] = "";
    bench_library(tok_path, text_path, min_s, &lib_load, &lib_mbps, &lib_crc, &lib_n, why,
                  sizeof why);
    bool have_lib = !isnan(lib_mbps);
    bool same = have_lib && lib_crc == crc && lib_n == (long)n;
    if (json) {
        printf("{\"bench\": \"tokenize\", \"tokenizer\": \"%s\", \"text_bytes\": %zu, "
               "\"ids\": %zu, \"ember_load_ms\": %.2f, \"ember_mb_s\": %.2f, ",
               tok_path, tlen, n, load_best * 1e3, ours);
        if (have_lib)
            printf("\"tokenizers_load_ms\": %.2f, \"tokenizers_mb_s\": %.2f, \"ratio\": %.3f, "
                   "\"ids_match\": %s}\n",
                   lib_load, lib_mbps, ours / lib_mbps, same ? "true" : "false");
        else
            printf("\"tokenizers_load_ms\": null, \"tokenizers_mb_s\": null, \"ratio\": null, "
                   "\"ids_match\": null}\n");
    } else {
        printf("tokenizer  %s\ntext       %s (%zu bytes, %zu ids)\n", tok_path, text_path, tlen, n);
        printf("%-12s %10s %10s\n", "", "load ms", "MB/s");
        printf("%-12s %10.1f %10.2f\n", "ember", load_best * 1e3, ours);
        if (have_lib) {
            printf("%-12s %10.1f %10.2f\n", "tokenizers", lib_load, lib_mbps);
            printf("ratio (ember / tokenizers): encode %.2fx, load %.2fx faster; ids %s\n",
                   ours / lib_mbps, lib_load / (load_best * 1e3),
                   same ? "identical" : "DIFFER");
        } else
            printf("%-12s %10s %10s   (%s)\n", "tokenizers", "null", "null", why);
    }
    em_tokenizer_free_ids(ids);
    em_tokenizer_free(tok);
    em_ctx_destroy(c);
    free(text);
    return have_lib && !same ? 1 : 0;
}

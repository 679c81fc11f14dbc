/*
 * `ember bench tokenize`: load time and single-threaded encode throughput of a tokenizer, for
 * Ember and, in the same run, for the `tokenizers` library (through a Python child) when it can
 * be imported.
 *
 * Three measures, each the best of several runs: loading tokenizer.json; encoding the whole text
 * in one call; encoding it line by line (one call per line; the library gets encode_batch on one
 * thread, which spares it Python's per-call cost). Wall and CPU time are both reported: on a
 * shared machine the CPU figure is the steadier one.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "core/file_read.h"
#include "ember/core.h"
#include "ember/tokenizer.h"

typedef struct figures {
    double load_wall_ms, load_cpu_ms;
    double whole_wall, whole_cpu; /* MB/s */
    double lines_wall, lines_cpu;
    unsigned long crc;            /* of the whole-text ids */
    long n_ids;
} figures;

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
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

static const char lib_script[] =
    "import sys,time,json,os,zlib,array\n"
    "try:\n"
    "  from tokenizers import Tokenizer\n"
    "except Exception as e:\n"
    "  print(json.dumps({'error':'cannot import tokenizers: %s'%e})); sys.exit(0)\n"
    "p,tp,mins=sys.argv[1],sys.argv[2],float(sys.argv[3])\n"
    "f=p if os.path.isfile(p) else os.path.join(p,'tokenizer.json')\n"
    "def best(fn):\n"
    "  bw=bc=1e9; t0=time.perf_counter(); runs=0\n"
    "  while runs<3 or time.perf_counter()-t0<mins:\n"
    "    w=time.perf_counter(); c=time.process_time(); fn()\n"
    "    bw=min(bw,time.perf_counter()-w); bc=min(bc,time.process_time()-c); runs+=1\n"
    "  return bw,bc\n"
    "lw,lc=1e9,1e9\n"
    "for _ in range(3):\n"
    "  w=time.perf_counter(); c=time.process_time(); tok=Tokenizer.from_file(f)\n"
    "  lw=min(lw,time.perf_counter()-w); lc=min(lc,time.process_time()-c)\n"
    "tok.no_truncation(); tok.no_padding()\n"
    "text=open(tp,encoding='utf-8').read(); nb=len(text.encode('utf-8'))\n"
    "lines=text.split('\\n')\n"
    "ids=tok.encode(text,add_special_tokens=False).ids\n"
    "ww,wc=best(lambda: tok.encode(text,add_special_tokens=False))\n"
    "bw,bc=best(lambda: tok.encode_batch(lines,add_special_tokens=False))\n"
    "crc=zlib.crc32(array.array('i',ids).tobytes())\n"
    "print(json.dumps({'r':[lw*1e3,lc*1e3,nb/ww/1e6,nb/wc/1e6,nb/bw/1e6,nb/bc/1e6],'crc':crc,"
    "'n':len(ids)}))\n";

/* Runs the library in a Python child; returns false (with the reason) when it cannot. */
static bool bench_library(const char *tok_path, const char *text_path, double min_s, figures *f,
                          char *why, size_t whysz) {
    const char *py = getenv("EMBER_PYTHON");
    if (!py || !*py) py = "python3";
    char path[] = "/tmp/ember_bench_tok_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        snprintf(why, whysz, "cannot create a temporary file");
        return false;
    }
    FILE *s = fdopen(fd, "w");
    fputs(lib_script, s);
    fclose(s);
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
    char *o = strstr(out, "{\"r\": [");
    if (o && sscanf(o, "{\"r\": [%lf, %lf, %lf, %lf, %lf, %lf], \"crc\": %lu, \"n\": %ld",
                    &f->load_wall_ms, &f->load_cpu_ms, &f->whole_wall, &f->whole_cpu,
                    &f->lines_wall, &f->lines_cpu, &f->crc, &f->n_ids) == 8)
        return true;
    char *e = strstr(out, "\"error\": \"");
    if (e) {
        e += 10;
        char *q = strchr(e, '"');
        snprintf(why, whysz, "%.*s", q ? (int)(q - e) : 200, e);
    } else
        snprintf(why, whysz, "%s failed: %.200s", py, out);
    return false;
}

static void usage(void) {
    printf("usage: ember bench tokenize [--tokenizer DIR_OR_FILE] [--text FILE] [--seconds S] "
           "[--json]\n\n"
           "Loads the tokenizer (default $EMBER_SHARED_DATA/tokenizers/qwen3) and encodes the\n"
           "text (default $EMBER_SHARED_DATA/text/tinyshakespeare.txt) on one thread: the whole\n"
           "text in one call, then line by line; each measure repeats for at least S seconds\n"
           "(default 1) and the best run counts. The `tokenizers` library is measured the same\n"
           "way in a Python child ($EMBER_PYTHON or python3); its figures are null when it\n"
           "cannot be imported. Prints load ms and MB/s (UTF-8 bytes), wall and CPU time, and\n"
           "whether both produced the same ids. --json: one JSON object per line.\n");
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
            usage();
            return 0;
        } else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc)
            tok_path = argv[++i];
        else if (!strcmp(argv[i], "--text") && i + 1 < argc)
            text_path = argv[++i];
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            if (!cli_real("bench tokenize", argv[i], argv[i + 1], 1e-3, 3600, &min_s)) return 2;
            i++;
        }
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
    em_ctx *c = em_ctx_create();
    char *text = em_file_read(c, "bench tokenize", text_path, SIZE_MAX / 2, &tlen, NULL);
    if (!text) {
        fprintf(stderr, "ember bench tokenize: %s\n", em_ctx_error(c)->message);
        em_ctx_free(c);
        return 1;
    }
    figures ours = {INFINITY, INFINITY, 0, 0, 0, 0, 0, 0};
    em_tokenizer *tok = NULL;
    for (int r = 0; r < 3; r++) {
        em_tokenizer_free(tok);
        double w = wall_s(), u = cpu_s();
        tok = em_tokenizer_load(c, tok_path);
        w = wall_s() - w, u = cpu_s() - u;
        if (!tok) break;
        ours.load_wall_ms = fmin(ours.load_wall_ms, w * 1e3);
        ours.load_cpu_ms = fmin(ours.load_cpu_ms, u * 1e3);
    }
    if (!tok) {
        fprintf(stderr, "ember bench tokenize: %s\n", em_ctx_error(c)->message);
        em_ctx_free(c);
        free(text);
        return 1;
    }
    int rc = 0;
    /* the whole text in one call */
    int32_t *ids = NULL;
    size_t n = 0;
    double bw = INFINITY, bc = INFINITY, start = wall_s();
    for (int runs = 0; runs < 3 || wall_s() - start < min_s; runs++) {
        em_free(ids);
        double w = wall_s(), u = cpu_s();
        if (em_tokenizer_encode(c, tok, text, tlen, false, &ids, &n) != EM_OK) {
            fprintf(stderr, "ember bench tokenize: %s\n", em_ctx_error(c)->message);
            rc = 1;
            goto done;
        }
        bw = fmin(bw, wall_s() - w), bc = fmin(bc, cpu_s() - u);
    }
    ours.whole_wall = (double)tlen / bw / 1e6, ours.whole_cpu = (double)tlen / bc / 1e6;
    ours.crc = crc32_ieee((const unsigned char *)ids, n * sizeof *ids);
    ours.n_ids = (long)n;
    /* line by line (the lines as Python's str.split('\n') gives them, without the '\n') */
    size_t n_lines = 0;
    bw = INFINITY, bc = INFINITY, start = wall_s();
    for (int runs = 0; runs < 3 || wall_s() - start < min_s; runs++) {
        double w = wall_s(), u = cpu_s();
        const char *p = text, *end = text + tlen;
        n_lines = 0;
        for (;;) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            const char *le = nl ? nl : end;
            int32_t *li;
            size_t ln;
            if (em_tokenizer_encode(c, tok, p, (size_t)(le - p), false, &li, &ln) != EM_OK) {
                fprintf(stderr, "ember bench tokenize: %s\n", em_ctx_error(c)->message);
                rc = 1;
                goto done;
            }
            em_free(li);
            n_lines++;
            if (!nl) break;
            p = nl + 1;
        }
        bw = fmin(bw, wall_s() - w), bc = fmin(bc, cpu_s() - u);
    }
    ours.lines_wall = (double)tlen / bw / 1e6, ours.lines_cpu = (double)tlen / bc / 1e6;

    figures lib;
    char why[512] = "";
    bool have_lib = bench_library(tok_path, text_path, min_s, &lib, why, sizeof why);
    bool same = have_lib && lib.crc == ours.crc && lib.n_ids == ours.n_ids;
    if (json) {
        const char *names[3] = {"load", "whole_text", "lines"};
        for (int k = 0; k < 3; k++) {
            double ow = k == 0 ? ours.load_wall_ms : k == 1 ? ours.whole_wall : ours.lines_wall;
            double oc = k == 0 ? ours.load_cpu_ms : k == 1 ? ours.whole_cpu : ours.lines_cpu;
            const char *unit = k == 0 ? "ms" : "mb_s";
            printf("{\"bench\": \"tokenize\", \"case\": \"%s\", \"tokenizer\": \"%s\", "
                   "\"text_bytes\": %zu, \"ember_%s\": %.3f, \"ember_cpu_%s\": %.3f, ",
                   names[k], tok_path, tlen, unit, ow, unit, oc);
            if (have_lib) {
                double lw = k == 0 ? lib.load_wall_ms : k == 1 ? lib.whole_wall : lib.lines_wall;
                double lc = k == 0 ? lib.load_cpu_ms : k == 1 ? lib.whole_cpu : lib.lines_cpu;
                double ratio = k == 0 ? lw / ow : ow / lw;
                printf("\"tokenizers_%s\": %.3f, \"tokenizers_cpu_%s\": %.3f, "
                       "\"speedup\": %.3f", unit, lw, unit, lc, ratio);
            } else
                printf("\"tokenizers_%s\": null, \"tokenizers_cpu_%s\": null, \"speedup\": null",
                       unit, unit);
            if (k == 1)
                printf(", \"ids\": %zu, \"ids_match\": %s", n,
                       have_lib ? (same ? "true" : "false") : "null");
            printf("}\n");
        }
    } else {
        printf("tokenizer  %s\ntext       %s (%zu bytes, %zu lines, %zu ids)\n", tok_path,
               text_path, tlen, n_lines, n);
        printf("%-12s %18s %22s %22s\n", "", "load ms wall/cpu", "whole text MB/s w/cpu",
               "per line MB/s w/cpu");
        printf("%-12s %8.1f /%8.1f %10.2f /%9.2f %10.2f /%9.2f\n", "ember", ours.load_wall_ms,
               ours.load_cpu_ms, ours.whole_wall, ours.whole_cpu, ours.lines_wall,
               ours.lines_cpu);
        if (have_lib) {
            printf("%-12s %8.1f /%8.1f %10.2f /%9.2f %10.2f /%9.2f\n", "tokenizers",
                   lib.load_wall_ms, lib.load_cpu_ms, lib.whole_wall, lib.whole_cpu,
                   lib.lines_wall, lib.lines_cpu);
            printf("ember is %.1fx faster to load, %.1fx (whole text) and %.1fx (per line) "
                   "faster to encode (wall); ids %s\n",
                   lib.load_wall_ms / ours.load_wall_ms, ours.whole_wall / lib.whole_wall,
                   ours.lines_wall / lib.lines_wall, same ? "identical" : "DIFFER");
        } else
            printf("%-12s %18s %22s %22s   (%s)\n", "tokenizers", "null", "null", "null", why);
    }
    if (have_lib && !same) rc = 1;
done:
    em_free(ids);
    em_tokenizer_free(tok);
    em_ctx_free(c);
    free(text);
    return rc;
}

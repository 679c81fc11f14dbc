/* scikit-learn's digits file (sklearn/datasets/data/digits.csv.gz) as a batch of images in
 * [-1, 1]: em_digits_csv_load (ember/ddpm.h). zlib's gzread reads plain files too, so one path
 * reads both; without zlib only plain files are read. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef EMBER_HAVE_ZLIB
#include <zlib.h>
#endif

#include "ember/ddpm.h"
#include "ember/ops.h"

#define OP "digits_csv"

typedef struct rows {
    float *px;
    int64_t *labels;
    int64_t n, cap;
} rows;

/* Parses one line (NUL-terminated, no newline) of side*side pixels and a label into r. */
static bool parse_line(em_ctx *c, const char *path, int64_t lineno, const char *s, int64_t npx,
                       rows *r) {
    if (r->n == r->cap) {
        int64_t cap = r->cap ? 2 * r->cap : 256;
        float *px = realloc(r->px, (size_t)(cap * npx) * sizeof *px);
        if (px) r->px = px;
        int64_t *lb = px ? realloc(r->labels, (size_t)cap * sizeof *lb) : NULL;
        if (lb) r->labels = lb;
        if (!px || !lb) return em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory"), false;
        r->cap = cap;
    }
    float *dst = r->px + r->n * npx;
    for (int64_t k = 0; k <= npx; k++) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        while (*end == ' ' || *end == '\t' || *end == '\r') end++;
        bool last = k == npx;
        if (end == s || errno || (last ? *end != '\0' : *end != ',')) {
            if (end != s && !last && *end == '\0')
                em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s:%lld: %lld values, expected %lld pixels "
                            "and a label", path, (long long)lineno, (long long)k + 1,
                            (long long)npx + 1);
            else if (end != s && last && *end == ',')
                em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s:%lld: more than %lld values (pixels and "
                            "a label)", path, (long long)lineno, (long long)npx + 1);
            else
                em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s:%lld: value %lld is not an integer",
                            path, (long long)lineno, (long long)k + 1);
            return false;
        }
        if (last ? (v < 0 || v > 9) : (v < 0 || v > 16)) {
            em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s:%lld: %s %ld is outside [0, %d]", path,
                        (long long)lineno, last ? "label" : "pixel", v, last ? 9 : 16);
            return false;
        }
        if (last) r->labels[r->n] = v;
        else dst[k] = (float)v / 8.0f - 1.0f;
        s = end + 1;
    }
    r->n++;
    return true;
}

#ifdef EMBER_HAVE_ZLIB
typedef gzFile src_t;
static src_t src_open(const char *p) { return gzopen(p, "rb"); }
static char *src_gets(src_t f, char *buf, int n) { return gzgets(f, buf, n); }
static bool src_failed(src_t f) {
    int err = 0;
    gzerror(f, &err);
    return err != Z_OK && err != Z_STREAM_END;
}
static void src_close(src_t f) { gzclose(f); }
#else
typedef FILE *src_t;
static src_t src_open(const char *p) { return fopen(p, "rb"); }
static char *src_gets(src_t f, char *buf, int n) { return fgets(buf, n, f); }
static bool src_failed(src_t f) { return ferror(f) != 0; }
static void src_close(src_t f) { fclose(f); }
#endif

em_tensor *em_digits_csv_load(em_ctx *c, const char *path, int64_t side, int64_t **labels_out) {
    if (labels_out) *labels_out = NULL;
    if (!c || em_ctx_status(c)) return NULL;
    if (!path || !*path || side < 1 || side > 256) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "NULL or empty path, or side %lld outside "
                    "[1, 256]", (long long)side);
        return NULL;
    }
    FILE *probe = fopen(path, "rb");
    if (!probe) {
        em_ctx_fail(c, errno == ENOENT ? EM_ERR_NOT_FOUND : EM_ERR_IO, OP, "cannot open %s: %s",
                    path, strerror(errno));
        return NULL;
    }
    unsigned char magic[2] = {0};
    size_t got = fread(magic, 1, 2, probe);
    fclose(probe);
#ifndef EMBER_HAVE_ZLIB
    if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP, "%s is gzip-compressed and this build has no "
                    "zlib: gunzip it first", path);
        return NULL;
    }
#else
    (void)got;
#endif
    src_t f = src_open(path);
    if (!f) {
        em_ctx_fail(c, EM_ERR_IO, OP, "cannot open %s", path);
        return NULL;
    }
    int64_t npx = side * side;
    size_t cap = (size_t)(npx + 1) * 8 + 64; /* a line of at most 7 characters per value */
    char *line = malloc(cap);
    rows r = {0};
    int64_t lineno = 0;
    bool ok = line != NULL;
    if (!ok) em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    while (ok && src_gets(f, line, (int)cap)) {
        lineno++;
        size_t len = strlen(line);
        if (len + 1 == cap && line[len - 1] != '\n') {
            em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s:%lld: line longer than %zu characters", path,
                        (long long)lineno, cap - 2);
            ok = false;
            break;
        }
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (!len) continue;
        ok = parse_line(c, path, lineno, line, npx, &r);
    }
    if (ok && src_failed(f)) {
        em_ctx_fail(c, EM_ERR_IO, OP, "%s: read error (a damaged gzip file?)", path);
        ok = false;
    }
    src_close(f);
    free(line);
    if (ok && r.n == 0) {
        em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s holds no rows", path);
        ok = false;
    }
    em_tensor *x = ok ? em_from_host(c, EM_F32, 4, (int64_t[]){r.n, 1, side, side}, r.px) : NULL;
    free(r.px);
    if (x && labels_out) *labels_out = r.labels;
    else free(r.labels);
    return x;
}

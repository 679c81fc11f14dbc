/*
 * A fast path for the two big arrays of a tokenizer.json (model.vocab and model.merges: 11 MB of
 * the 11.4 MB Qwen3 file, 33 MB for Gemma 3).
 *
 * Building a jansson tree for them costs hundreds of milliseconds (a hash table per object and an
 * allocation per string); reading them straight into the tokenizer's own tables costs tens.
 * So the loader first locates the two values with the scanner below, parses them here, and gives
 * jansson the rest of the document with the two values cut out. The parsers are strict (RFC 8259
 * strings, integer ids, exact shapes) and report the byte offset of any deviation. When the
 * document does not have the expected shape the loader uses jansson for everything.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer/tokenizer_impl.h"

#define MAX_DEPTH 256

typedef struct scan {
    const char *d;
    size_t n, i;
} scan;

static inline void ws(scan *s) {
    while (s->i < s->n) {
        char c = s->d[s->i];
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
        s->i++;
    }
}

static inline bool eat(scan *s, char c) {
    ws(s);
    if (s->i < s->n && s->d[s->i] == c) {
        s->i++;
        return true;
    }
    return false;
}

static int hex4(const char *p) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return -1;
    }
    return v;
}

/* Scans a string at s->i (which must be '"'). With `out`, decodes it there (out->len = 0
 * first); *raw / *raw_len give the undecoded bytes when there was no escape. Returns false on
 * malformed input. The document is valid UTF-8 (checked by the loader). */
static bool str(scan *s, tk_buf *out, const char **raw, size_t *raw_len) {
    if (s->i >= s->n || s->d[s->i] != '"') return false;
    size_t start = ++s->i;
    /* fast path: no escapes */
    while (s->i < s->n) {
        unsigned char c = (unsigned char)s->d[s->i];
        if (c == '"') {
            if (raw) {
                *raw = s->d + start;
                *raw_len = s->i - start;
            }
            s->i++;
            if (out) out->len = 0;
            return true;
        }
        if (c == '\\') break;
        if (c < 0x20) return false;
        s->i++;
    }
    if (s->i >= s->n) return false;
    /* slow path: decode with escapes */
    if (raw) *raw = NULL;
    if (out) {
        out->len = 0;
        if (!tk_buf_append(out, s->d + start, s->i - start)) return false;
    }
    while (s->i < s->n) {
        unsigned char c = (unsigned char)s->d[s->i];
        if (c == '"') {
            s->i++;
            return true;
        }
        if (c < 0x20) return false;
        if (c != '\\') {
            if (out && !tk_buf_putc(out, (char)c)) return false;
            s->i++;
            continue;
        }
        if (s->i + 1 >= s->n) return false;
        char e = s->d[s->i + 1];
        s->i += 2;
        char lit = 0;
        switch (e) {
        case '"': lit = '"'; break;
        case '\\': lit = '\\'; break;
        case '/': lit = '/'; break;
        case 'b': lit = '\b'; break;
        case 'f': lit = '\f'; break;
        case 'n': lit = '\n'; break;
        case 'r': lit = '\r'; break;
        case 't': lit = '\t'; break;
        case 'u': {
            if (s->i + 4 > s->n) return false;
            int u = hex4(s->d + s->i);
            if (u < 0) return false;
            s->i += 4;
            uint32_t cp = (uint32_t)u;
            if (u >= 0xD800 && u <= 0xDBFF) {
                if (s->i + 6 > s->n || s->d[s->i] != '\\' || s->d[s->i + 1] != 'u') return false;
                int lo = hex4(s->d + s->i + 2);
                if (lo < 0xDC00 || lo > 0xDFFF) return false;
                s->i += 6;
                cp = 0x10000 + (((uint32_t)u - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
            } else if (u >= 0xDC00 && u <= 0xDFFF)
                return false;
            if (out && !tk_buf_put_cp(out, cp)) return false;
            continue;
        }
        default: return false;
        }
        if (out && !tk_buf_putc(out, lit)) return false;
    }
    return false;
}

static bool number(scan *s) {
    size_t i = s->i;
    if (i < s->n && s->d[i] == '-') i++;
    if (i >= s->n) return false;
    if (s->d[i] == '0') i++;
    else if (s->d[i] >= '1' && s->d[i] <= '9')
        while (i < s->n && s->d[i] >= '0' && s->d[i] <= '9') i++;
    else
        return false;
    if (i < s->n && s->d[i] == '.') {
        i++;
        size_t d0 = i;
        while (i < s->n && s->d[i] >= '0' && s->d[i] <= '9') i++;
        if (i == d0) return false;
    }
    if (i < s->n && (s->d[i] == 'e' || s->d[i] == 'E')) {
        i++;
        if (i < s->n && (s->d[i] == '+' || s->d[i] == '-')) i++;
        size_t d0 = i;
        while (i < s->n && s->d[i] >= '0' && s->d[i] <= '9') i++;
        if (i == d0) return false;
    }
    s->i = i;
    return true;
}

static bool skip(scan *s, int depth) {
    if (depth > MAX_DEPTH) return false;
    ws(s);
    if (s->i >= s->n) return false;
    char c = s->d[s->i];
    if (c == '"') return str(s, NULL, NULL, NULL);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        s->i++;
        if (eat(s, close)) return true;
        for (;;) {
            if (c == '{') {
                ws(s);
                if (!str(s, NULL, NULL, NULL) || !eat(s, ':')) return false;
            }
            if (!skip(s, depth + 1)) return false;
            if (eat(s, ',')) continue;
            return eat(s, close);
        }
    }
    static const char *const lits[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t l = strlen(lits[k]);
        if (s->n - s->i >= l && !memcmp(s->d + s->i, lits[k], l)) {
            s->i += l;
            return true;
        }
    }
    return number(s);
}

static bool key_is(const char *raw, size_t len, const char *k) {
    return raw && len == strlen(k) && !memcmp(raw, k, len);
}

bool tk_json_find_model_arrays(const char *doc, size_t len, tk_json_span *vocab,
                               tk_json_span *merges) {
    scan s = {doc, len, 0};
    *vocab = *merges = (tk_json_span){0, 0};
    if (!eat(&s, '{')) return false;
    if (eat(&s, '}')) return false;
    for (;;) {
        ws(&s);
        const char *k;
        size_t kl;
        if (!str(&s, NULL, &k, &kl) || !eat(&s, ':')) return false;
        ws(&s);
        if (key_is(k, kl, "model")) {
            *vocab = *merges = (tk_json_span){0, 0}; /* the last "model" counts */
            if (!eat(&s, '{')) return false;
            if (!eat(&s, '}')) {
                for (;;) {
                    ws(&s);
                    const char *mk;
                    size_t mkl;
                    if (!str(&s, NULL, &mk, &mkl) || !eat(&s, ':')) return false;
                    ws(&s);
                    size_t start = s.i;
                    if (!skip(&s, 1)) return false;
                    if (key_is(mk, mkl, "vocab")) *vocab = (tk_json_span){start, s.i};
                    else if (key_is(mk, mkl, "merges")) *merges = (tk_json_span){start, s.i};
                    if (eat(&s, ',')) continue;
                    if (!eat(&s, '}')) return false;
                    break;
                }
            }
        } else if (!skip(&s, 1))
            return false;
        if (eat(&s, ',')) continue;
        if (!eat(&s, '}')) return false;
        ws(&s);
        return s.i == s.n && vocab->end > vocab->start;
    }
}

void tk_json_line_col(const char *doc, size_t len, size_t off, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < off && i < len; i++) {
        if (doc[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)doc[i] & 0xC0) != 0x80)
            c++;
    }
    *line = l;
    *col = c;
}

/* Number of commas in the span: sizes the hash tables (a few ms for tens of MB, and a table
 * sized to the real count keeps the lookups in cache). */
static size_t count_commas(const char *doc, tk_json_span sp) {
    size_t n = 0;
    const char *p = doc + sp.start, *end = doc + sp.end;
    while ((p = memchr(p, ',', (size_t)(end - p)))) {
        n++;
        p++;
    }
    return n;
}

static bool fail_at(const char *doc, size_t len, size_t off, char *err, size_t errsz,
                    const char *what) {
    int line, col;
    tk_json_line_col(doc, len, off, &line, &col);
    snprintf(err, errsz, "%s at line %d, column %d", what, line, col);
    return false;
}

/* A non-negative JSON integer that fits in int32. */
static bool read_id(scan *s, int32_t *out) {
    ws(s);
    size_t i = s->i;
    if (i >= s->n || s->d[i] < '0' || s->d[i] > '9') return false;
    int64_t v = 0;
    if (s->d[i] == '0') i++;
    else
        while (i < s->n && s->d[i] >= '0' && s->d[i] <= '9') {
            v = v * 10 + (s->d[i] - '0');
            if (v > INT32_MAX) return false;
            i++;
        }
    if (i < s->n && (s->d[i] == '.' || s->d[i] == 'e' || s->d[i] == 'E')) return false;
    s->i = i;
    *out = (int32_t)v;
    return true;
}

#define BATCH 32

typedef struct pending_key {
    const char *key;
    size_t len;
    int32_t id;
    uint64_t h;
} pending_key;

static bool flush_vocab(tk_vocab *v, pending_key *p, int *n) {
    for (int i = 0; i < *n; i++)
        if (!tk_strmap_put_h(&v->map, p[i].key, p[i].len, p[i].id, p[i].h)) return false;
    *n = 0;
    return true;
}

bool tk_json_parse_vocab(const char *doc, tk_json_span sp, tk_arena *a, tk_vocab *v, char *err,
                         size_t errsz) {
    scan s = {doc, sp.end, sp.start};
    tk_buf tmp = {0};
    bool ok = false;
    pending_key pend[BATCH];
    int npend = 0;
    if (!eat(&s, '{')) {
        fail_at(doc, sp.end, s.i, err, errsz, "model.vocab must be an object {\"token\": id}");
        goto done;
    }
    if (!tk_strmap_init(&v->map, count_commas(doc, sp) + 16)) {
        snprintf(err, errsz, "out of memory");
        goto done;
    }
    if (eat(&s, '}')) {
        ok = true;
        goto done;
    }
    for (;;) {
        ws(&s);
        size_t at = s.i;
        const char *raw;
        size_t rl;
        if (!str(&s, &tmp, &raw, &rl)) {
            fail_at(doc, sp.end, at, err, errsz, "model.vocab: malformed token string");
            goto done;
        }
        const char *src = raw ? raw : tmp.p;
        size_t sl = raw ? rl : tmp.len;
        if (!eat(&s, ':')) {
            fail_at(doc, sp.end, s.i, err, errsz, "model.vocab: ':' expected");
            goto done;
        }
        int32_t id;
        size_t at_id = s.i;
        if (!read_id(&s, &id)) {
            ws(&s);
            char what[200];
            snprintf(what, sizeof what, "model.vocab: the id of \"%.*s\" is not an integer in "
                                        "[0, 2147483647]", (int)(sl > 60 ? 60 : sl), src);
            fail_at(doc, sp.end, at_id + 1, err, errsz, what);
            goto done;
        }
        char *key = tk_arena_strndup(a, src ? src : "", sl);
        if (!key) {
            snprintf(err, errsz, "out of memory");
            goto done;
        }
        /* insert in batches, prefetching each batch's slots first: the inserts are cache
         * misses, and this lets them overlap */
        pend[npend].key = key, pend[npend].len = sl, pend[npend].id = id;
        pend[npend].h = tk_hash(key, sl);
        tk_strmap_prefetch(&v->map, pend[npend].h);
        if (++npend == BATCH && !flush_vocab(v, pend, &npend)) {
            snprintf(err, errsz, "out of memory");
            goto done;
        }
        if (eat(&s, ',')) continue;
        if (eat(&s, '}')) break;
        fail_at(doc, sp.end, s.i, err, errsz, "model.vocab: ',' or '}' expected");
        goto done;
    }
    if (!flush_vocab(v, pend, &npend)) {
        snprintf(err, errsz, "out of memory");
        goto done;
    }
    v->size = v->map.n;
    ok = true;
done:
    tk_buf_free(&tmp);
    return ok;
}

bool tk_json_parse_merges(const char *doc, tk_json_span sp, tk_model *m, char *err,
                          size_t errsz) {
    scan s = {doc, sp.end, sp.start};
    tk_buf a = {0}, b = {0};
    tk_merge_batch *batch = calloc(1, sizeof *batch);
    bool ok = false;
    if (!batch) {
        snprintf(err, errsz, "out of memory");
        goto done;
    }
    if (!eat(&s, '[')) {
        fail_at(doc, sp.end, s.i, err, errsz, "model.merges must be an array");
        goto done;
    }
    ws(&s);
    size_t commas = count_commas(doc, sp);
    /* [["a", "b"], ...] has two commas per merge */
    if (!tk_u64map_init(&m->merges, (s.i < s.n && s.d[s.i] == '[' ? commas / 2 : commas) + 16)) {
        snprintf(err, errsz, "out of memory");
        goto done;
    }
    if (eat(&s, ']')) {
        ok = true;
        goto done;
    }
    int kind = 0; /* 1 = "a b" strings, 2 = ["a", "b"] pairs */
    uint32_t rank = 0;
    for (size_t index = 0;; index++) {
        ws(&s);
        size_t at = s.i;
        char what[256];
        const char *ra, *rb;
        size_t la, lb;
        int this_kind = (s.i < s.n && s.d[s.i] == '[') ? 2 : 1;
        if (kind && this_kind != kind) {
            snprintf(what, sizeof what, "model.merges[%zu] mixes the \"a b\" and [\"a\", \"b\"] "
                                        "forms", index);
            fail_at(doc, sp.end, at, err, errsz, what);
            goto done;
        }
        kind = this_kind;
        if (kind == 2) {
            s.i++;
            ws(&s);
            if (!str(&s, &a, &ra, &la) || !eat(&s, ',') || (ws(&s), !str(&s, &b, &rb, &lb)) ||
                !eat(&s, ']')) {
                snprintf(what, sizeof what, "model.merges[%zu] must be a pair of strings",
                         index);
                fail_at(doc, sp.end, at, err, errsz, what);
                goto done;
            }
            if (!ra) ra = a.p, la = a.len;
            if (!rb) rb = b.p, lb = b.len;
        } else {
            const char *r;
            size_t l;
            if (!str(&s, &a, &r, &l)) {
                snprintf(what, sizeof what, "model.merges[%zu] must be a string \"a b\" or a "
                                            "pair [\"a\", \"b\"]", index);
                fail_at(doc, sp.end, at, err, errsz, what);
                goto done;
            }
            if (!r) r = a.p, l = a.len;
            if (l >= 8 && !memcmp(r, "#version", 8)) goto next; /* skipped, not ranked */
            const char *sp1 = memchr(r, ' ', l);
            if (!sp1 || memchr(sp1 + 1, ' ', l - (size_t)(sp1 - r) - 1)) {
                snprintf(what, sizeof what, "model.merges[%zu] (\"%.*s\") must hold exactly one "
                                            "space", index, (int)(l > 60 ? 60 : l), r);
                fail_at(doc, sp.end, at, err, errsz, what);
                goto done;
            }
            ra = r;
            la = (size_t)(sp1 - r);
            rb = sp1 + 1;
            lb = l - la - 1;
        }
        if (!tk_bpe_merge_add(m, batch, ra, la, rb, lb, rank, index, err, errsz)) goto done;
        rank++;
    next:
        if (eat(&s, ',')) continue;
        if (eat(&s, ']')) break;
        fail_at(doc, sp.end, s.i, err, errsz, "model.merges: ',' or ']' expected");
        goto done;
    }
    ok = tk_bpe_merge_flush(m, batch, err, errsz);
done:
    if (batch) tk_buf_free(&batch->buf);
    free(batch);
    tk_buf_free(&a);
    tk_buf_free(&b);
    return ok;
}

bool tk_json_parse_unigram_vocab(const char *doc, tk_json_span sp, tk_arena *ar, tk_model *m,
                                 char *err, size_t errsz) {
    scan s = {doc, sp.end, sp.start};
    tk_buf tmp = {0};
    bool ok = false;
    size_t cap = 0, n = 0;
    if (!eat(&s, '[')) {
        fail_at(doc, sp.end, s.i, err, errsz,
                "model.vocab of a Unigram model must be an array of [\"piece\", score]");
        goto done;
    }
    if (!tk_strmap_init(&m->vocab.map, count_commas(doc, sp) / 2 + 16)) {
        snprintf(err, errsz, "out of memory");
        goto done;
    }
    if (eat(&s, ']')) {
        ok = true;
        goto done;
    }
    for (;;) {
        ws(&s);
        size_t at = s.i;
        const char *raw;
        size_t rl;
        char what[160];
        if (!eat(&s, '[') || (ws(&s), !str(&s, &tmp, &raw, &rl)) || !eat(&s, ',')) {
            snprintf(what, sizeof what, "model.vocab[%zu] must be [\"piece\", score]", n);
            fail_at(doc, sp.end, at, err, errsz, what);
            goto done;
        }
        ws(&s);
        size_t ns = s.i;
        if (!number(&s)) {
            snprintf(what, sizeof what, "model.vocab[%zu]: the score is not a number", n);
            fail_at(doc, sp.end, ns, err, errsz, what);
            goto done;
        }
        char numbuf[64];
        size_t nl = s.i - ns;
        if (nl >= sizeof numbuf) nl = sizeof numbuf - 1;
        memcpy(numbuf, s.d + ns, nl);
        numbuf[nl] = 0;
        double score = strtod(numbuf, NULL);
        if (!isfinite(score)) {
            snprintf(what, sizeof what, "model.vocab[%zu]: the score is out of range", n);
            fail_at(doc, sp.end, ns, err, errsz, what);
            goto done;
        }
        if (!eat(&s, ']')) {
            snprintf(what, sizeof what, "model.vocab[%zu] must be [\"piece\", score]", n);
            fail_at(doc, sp.end, s.i, err, errsz, what);
            goto done;
        }
        const char *src = raw ? raw : tmp.p;
        size_t sl = raw ? rl : tmp.len;
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            double *sc = realloc(m->scores, cap * sizeof *sc);
            const char **rs = realloc(m->vocab.rev_s, cap * sizeof *rs);
            if (sc) m->scores = sc;
            if (rs) m->vocab.rev_s = rs;
            uint32_t *rln = realloc(m->vocab.rev_len, cap * sizeof *rln);
            if (rln) m->vocab.rev_len = rln;
            if (!sc || !rs || !rln || n >= INT32_MAX) {
                snprintf(err, errsz, "out of memory");
                goto done;
            }
        }
        char *key = tk_arena_strndup(ar, src ? src : "", sl);
        if (!key || sl > UINT32_MAX || !tk_strmap_put(&m->vocab.map, key, sl, (int32_t)n)) {
            snprintf(err, errsz, "out of memory");
            goto done;
        }
        m->scores[n] = score;
        m->vocab.rev_s[n] = key;
        m->vocab.rev_len[n] = (uint32_t)sl;
        n++;
        if (eat(&s, ',')) continue;
        if (eat(&s, ']')) break;
        fail_at(doc, sp.end, s.i, err, errsz, "model.vocab: ',' or ']' expected");
        goto done;
    }
    ok = true;
done:
    m->vocab.size = n;
    m->vocab.rev_n = n;
    tk_buf_free(&tmp);
    return ok;
}

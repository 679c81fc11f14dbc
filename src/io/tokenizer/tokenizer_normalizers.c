/*
 * Normalizers (tokenizers/src/normalizers): each maps a string to a new string.
 *
 * `lead_removed` is set when a normalizer drops the first character(s) of its input: the
 * normalized text then no longer starts at the split's original offset, which is what
 * Metaspace's prepend_scheme "first" looks at (see tokenizer_impl.h).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer/tokenizer_impl.h"

static bool oom(tk_enc *e) { return tk_enc_fail(e, EM_ERR_OOM, "out of memory in a normalizer"); }

/* Strip: removes leading and/or trailing whitespace (char::is_whitespace). */
static bool norm_strip(const char *s, size_t n, bool left, bool right, tk_buf *out,
                       bool *lead_removed) {
    size_t a = 0, z = n;
    if (left)
        while (a < z) {
            size_t k;
            uint32_t c = tk_utf8_next(s + a, &k);
            if (!tk_is_whitespace(c)) break;
            a += k;
        }
    if (right)
        while (z > a) {
            size_t b = z - 1;
            while (b > a && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
            size_t k;
            uint32_t c = tk_utf8_next(s + b, &k);
            if (!tk_is_whitespace(c)) break;
            z = b;
        }
    if (a > 0 && a < n) *lead_removed = true;
    return tk_buf_append(out, s + a, z - a);
}

/* BertNormalizer: clean_text, handle_chinese_chars, strip_accents (NFD then drop Mn),
 * lowercase, in that order. */
static bool bert_clean(const tk_norm *nm, const char *s, size_t n, tk_buf *out,
                       bool *lead_removed) {
    bool kept = false, removed_first = false;
    for (size_t i = 0; i < n;) {
        size_t k;
        uint32_t c = tk_utf8_next(s + i, &k);
        i += k;
        if (nm->clean_text) {
            if (c == 0 || c == 0xFFFD || (c != '\t' && c != '\n' && c != '\r' && tk_is_other(c))) {
                if (!kept) removed_first = true;
                continue;
            }
            if (c == '\t' || c == '\n' || c == '\r' || tk_is_whitespace(c)) c = ' ';
        }
        kept = true;
        if (nm->handle_chinese_chars && tk_is_chinese_char(c)) {
            if (!tk_buf_putc(out, ' ') || !tk_buf_put_cp(out, c) || !tk_buf_putc(out, ' '))
                return false;
        } else if (!tk_buf_put_cp(out, c))
            return false;
    }
    if (kept && removed_first) *lead_removed = true;
    return true;
}

static bool norm_lower(const char *s, size_t n, tk_buf *out);
static bool norm_filter(const char *s, size_t n, bool (*drop)(uint32_t), tk_buf *out,
                        bool *lead_removed);

static bool norm_bert(const tk_norm *nm, const char *s, size_t n, tk_buf *out,
                      bool *lead_removed) {
    tk_buf a = {0}, b = {0};
    bool ok = bert_clean(nm, s, n, &a, lead_removed);
    const char *cur = a.p ? a.p : "";
    size_t cur_n = a.len;
    if (ok && nm->strip_accents) {
        tk_buf d = {0};
        ok = tk_normalize_form(TK_NFD, cur, cur_n, &d) &&
             norm_filter(d.p ? d.p : "", d.len, tk_is_mark_nonspacing, &b, lead_removed);
        tk_buf_free(&d);
        cur = b.p ? b.p : "";
        cur_n = b.len;
    }
    if (ok) ok = nm->lowercase ? norm_lower(cur, cur_n, out) : tk_buf_append(out, cur, cur_n);
    tk_buf_free(&a);
    tk_buf_free(&b);
    return ok;
}

static bool norm_lower(const char *s, size_t n, tk_buf *out) {
    if (!tk_buf_reserve(out, n)) return false;
    for (size_t i = 0; i < n;) {
        unsigned char b = (unsigned char)s[i];
        if (b < 0x80) {
            if (!tk_buf_putc(out, (char)(b >= 'A' && b <= 'Z' ? b + 32 : b))) return false;
            i++;
            continue;
        }
        size_t k;
        uint32_t c = tk_utf8_next(s + i, &k);
        i += k;
        uint32_t lc[3];
        int m = tk_to_lower(c, lc);
        for (int j = 0; j < m; j++)
            if (!tk_buf_put_cp(out, lc[j])) return false;
    }
    return true;
}

/* filter(): drops characters; reports whether the first one(s) went. */
static bool norm_filter(const char *s, size_t n, bool (*drop)(uint32_t), tk_buf *out,
                        bool *lead_removed) {
    bool kept = false, removed_first = false;
    for (size_t i = 0; i < n;) {
        size_t k;
        uint32_t c = tk_utf8_next(s + i, &k);
        if (drop(c)) {
            if (!kept) removed_first = true;
        } else {
            kept = true;
            if (!tk_buf_append(out, s + i, k)) return false;
        }
        i += k;
    }
    if (kept && removed_first) *lead_removed = true;
    return true;
}

static bool nmt_drop(uint32_t c) {
    return (c >= 0x1 && c <= 0x8) || c == 0xB || (c >= 0xE && c <= 0x1F) || c == 0x7F ||
           c == 0x8F || c == 0x9F;
}

static bool norm_nmt(const char *s, size_t n, tk_buf *out, bool *lead_removed) {
    tk_buf f = {0};
    if (!norm_filter(s, n, nmt_drop, &f, lead_removed)) {
        tk_buf_free(&f);
        return false;
    }
    bool ok = true;
    for (size_t i = 0; ok && i < f.len;) {
        size_t k;
        uint32_t c = tk_utf8_next(f.p + i, &k);
        if (c == 0x9 || c == 0xA || c == 0xC || c == 0xD || c == 0x1680 ||
            (c >= 0x200B && c <= 0x200F) || c == 0x2028 || c == 0x2029 || c == 0x2581 ||
            c == 0xFEFF || c == 0xFFFD)
            ok = tk_buf_putc(out, ' ');
        else
            ok = tk_buf_append(out, f.p + i, k);
        i += k;
    }
    tk_buf_free(&f);
    return ok;
}

static bool norm_replace(tk_enc *e, const tk_norm *nm, const char *s, size_t n, tk_buf *out,
                         bool *lead_removed) {
    char err[320];
    tk_spans sp = {0};
    if (!tk_regex_find_matches(&e->rx, &nm->re, s, n, &sp, err, sizeof err)) {
        free(sp.v);
        return tk_enc_fail(e, EM_ERR_INTERNAL, "normalizer Replace: %s", err);
    }
    bool ok = true;
    for (size_t i = 0; ok && i < sp.n; i++) {
        const tk_span *p = &sp.v[i];
        if (p->match) {
            if (p->start == 0 && p->end > 0 && nm->content_len == 0) *lead_removed = true;
            ok = tk_buf_append(out, nm->content, nm->content_len);
        } else
            ok = tk_buf_append(out, s + p->start, p->end - p->start);
    }
    free(sp.v);
    return ok ? true : oom(e);
}

static bool norm_one(tk_enc *e, const tk_norm *nm, const char *s, size_t n, tk_buf *out,
                     bool *lead_removed);

static bool norm_sequence(tk_enc *e, const tk_norm *nm, const char *s, size_t n, tk_buf *out,
                          bool *lead_removed) {
    if (nm->n_children == 0) return tk_buf_append(out, s, n) ? true : oom(e);
    /* ping-pong between two local buffers; the last child writes to out */
    tk_buf a = {0}, b = {0};
    const char *cur = s;
    size_t cur_n = n;
    bool ok = true;
    for (size_t i = 0; ok && i < nm->n_children; i++) {
        bool last = i + 1 == nm->n_children;
        tk_buf *dst = last ? out : (i % 2 ? &b : &a);
        if (!last) dst->len = 0;
        ok = norm_one(e, &nm->children[i], cur, cur_n, dst, lead_removed);
        cur = dst->p ? dst->p : "";
        cur_n = dst->len;
    }
    tk_buf_free(&a);
    tk_buf_free(&b);
    return ok;
}

static bool norm_one(tk_enc *e, const tk_norm *nm, const char *s, size_t n, tk_buf *out,
                     bool *lead_removed) {
    bool ok = true;
    switch (nm->type) {
    case TK_NORM_SEQUENCE: return norm_sequence(e, nm, s, n, out, lead_removed);
    case TK_NORM_NFC: ok = tk_normalize_form(TK_NFC, s, n, out); break;
    case TK_NORM_NFD: ok = tk_normalize_form(TK_NFD, s, n, out); break;
    case TK_NORM_NFKC: ok = tk_normalize_form(TK_NFKC, s, n, out); break;
    case TK_NORM_NFKD: ok = tk_normalize_form(TK_NFKD, s, n, out); break;
    case TK_NORM_LOWERCASE: ok = norm_lower(s, n, out); break;
    case TK_NORM_STRIP_ACCENTS:
        ok = norm_filter(s, n, tk_is_combining_mark, out, lead_removed);
        break;
    case TK_NORM_STRIP:
        ok = norm_strip(s, n, nm->strip_left, nm->strip_right, out, lead_removed);
        break;
    case TK_NORM_REPLACE: return norm_replace(e, nm, s, n, out, lead_removed);
    case TK_NORM_PREPEND:
        if (n) ok = tk_buf_append(out, nm->content, nm->content_len) && tk_buf_append(out, s, n);
        break;
    case TK_NORM_BERT: ok = norm_bert(nm, s, n, out, lead_removed); break;
    case TK_NORM_NMT: ok = norm_nmt(s, n, out, lead_removed); break;
    case TK_NORM_BYTE_LEVEL: ok = tk_byte_level_map(s, n, out); break;
    case TK_NORM_PRECOMPILED: return tk_precompiled_normalize(e, nm->pc, s, n, out, lead_removed);
    }
    return ok ? true : oom(e);
}

bool tk_normalize(tk_enc *e, const tk_norm *n, const char *s, size_t len, tk_buf *out,
                  bool *lead_removed) {
    out->len = 0;
    *lead_removed = false;
    if (!tk_buf_reserve(out, len)) return oom(e);
    return norm_one(e, n, s, len, out, lead_removed);
}

/* ---- loading (tokenizer.json "normalizer") ---- */

bool tk_parse_normalizer(tk_ld *l, json_t *v, const char *where, tk_norm *n) {
    memset(n, 0, sizeof *n);
    const char *type;
    if (!tk_get_type(l, v, where, &type)) return false;
    static const struct {
        const char *name;
        tk_norm_type type;
    } simple[] = {{"NFC", TK_NORM_NFC},           {"NFD", TK_NORM_NFD},
                  {"NFKC", TK_NORM_NFKC},         {"NFKD", TK_NORM_NFKD},
                  {"Lowercase", TK_NORM_LOWERCASE}, {"StripAccents", TK_NORM_STRIP_ACCENTS},
                  {"Nmt", TK_NORM_NMT},           {"ByteLevel", TK_NORM_BYTE_LEVEL}};
    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
        if (!strcmp(type, simple[i].name)) {
            n->type = simple[i].type;
            return true;
        }
    if (!strcmp(type, "Sequence")) {
        n->type = TK_NORM_SEQUENCE;
        json_t *arr;
        if (!tk_get_array(l, v, "normalizers", where, &arr)) return false;
        n->n_children = json_array_size(arr);
        n->children = calloc(n->n_children ? n->n_children : 1, sizeof *n->children);
        if (!n->children) return tk_ld_oom(l);
        for (size_t i = 0; i < n->n_children; i++) {
            char w[200];
            snprintf(w, sizeof w, "%s.normalizers[%zu]", where, i);
            if (!tk_parse_normalizer(l, json_array_get(arr, i), w, &n->children[i])) {
                n->n_children = i + 1; /* free what was built */
                return false;
            }
        }
        return true;
    }
    if (!strcmp(type, "BertNormalizer") || !strcmp(type, "Bert")) {
        n->type = TK_NORM_BERT;
        bool lower = true;
        if (!tk_opt_bool(l, v, "clean_text", true, &n->clean_text, where) ||
            !tk_opt_bool(l, v, "handle_chinese_chars", true, &n->handle_chinese_chars, where) ||
            !tk_opt_bool(l, v, "lowercase", true, &lower, where))
            return false;
        n->lowercase = lower;
        /* strip_accents: None means "same as lowercase" */
        return tk_opt_bool(l, v, "strip_accents", lower, &n->strip_accents, where);
    }
    if (!strcmp(type, "Strip")) {
        n->type = TK_NORM_STRIP;
        return tk_opt_bool(l, v, "strip_left", true, &n->strip_left, where) &&
               tk_opt_bool(l, v, "strip_right", true, &n->strip_right, where);
    }
    if (!strcmp(type, "Replace")) {
        n->type = TK_NORM_REPLACE;
        return tk_get_pattern(l, v, where, &n->re) &&
               tk_opt_str(l, v, "content", true, &n->content, &n->content_len, where);
    }
    if (!strcmp(type, "Prepend")) {
        n->type = TK_NORM_PREPEND;
        return tk_opt_str(l, v, "prepend", true, &n->content, &n->content_len, where);
    }
    if (!strcmp(type, "Precompiled")) {
        n->type = TK_NORM_PRECOMPILED;
        return tk_precompiled_parse(l, v, where, &n->pc);
    }
    return tk_ld_fail(l, EM_ERR_FORMAT, where, "unknown normalizer type \"%s\"", type);
}

void tk_norm_free(tk_norm *n) {
    if (!n) return;
    tk_regex_free(&n->re);
    tk_precompiled_free(n->pc);
    for (size_t i = 0; i < n->n_children; i++) tk_norm_free(&n->children[i]);
    free(n->children);
}

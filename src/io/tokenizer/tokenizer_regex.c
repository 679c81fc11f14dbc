/*
 * Regular expressions for Split / Replace: PCRE2 (UTF + UCP, JIT when available) standing in for
 * the Oniguruma engine `tokenizers` is built with.
 *
 * Two Oniguruma habits are reproduced: `^` and `$` match at line boundaries (Ruby syntax, so
 * PCRE2_MULTILINE), and the iteration over matches: an empty match is reported unless it ends
 * where the previous match ended, in which case the search moves on by one character (the onig
 * crate's FindMatches). PCRE2 10.42 has no pcre2_next_match, so the loop is ours.
 */
#include <stdio.h>
#include <string.h>

#include "io/tokenizer/tokenizer_impl.h"
#define TK_FIXUPS_REGEX
#include "io/tokenizer/tokenizer_unicode_fixups.h"

/* The class content standing for an Oniguruma class escape (\p{L}, \pL, \p{N}, \pN, \w, \s and
 * their negations) inside or outside brackets, or NULL; *len = length of the escape, *neg =
 * negated. */
static const char *class_for(const char *p, size_t n, bool in_class, size_t *len, bool *neg) {
    char e = p[1];
    *neg = e == 'P' || e == 'W' || e == 'S';
    if (e == 'w' || e == 'W') return *len = 2, in_class ? tk_rx_class_w_in : tk_rx_class_w;
    if (e == 's' || e == 'S') return *len = 2, in_class ? tk_rx_class_s_in : tk_rx_class_s;
    if (e != 'p' && e != 'P') return NULL;
    char k = 0;
    if (n >= 3 && (p[2] == 'L' || p[2] == 'N')) k = p[2], *len = 3;
    else if (n >= 5 && p[2] == '{' && (p[3] == 'L' || p[3] == 'N') && p[4] == '}')
        k = p[3], *len = 5;
    if (!k) return NULL;
    if (k == 'L') return in_class ? tk_rx_class_L_in : tk_rx_class_L;
    return in_class ? tk_rx_class_N_in : tk_rx_class_N;
}

/* \b and \B as lookarounds on Oniguruma's word class W (PCRE2's would use its own \w):
 * \b = (?<=W)(?!W) | (?<!W)(?=W), \B = (?<=W)(?=W) | (?<!W)(?!W). */
static bool word_boundary(tk_buf *out, bool negated) {
    const char *w = tk_rx_class_w;
    size_t wl = strlen(w);
    const char *parts[5] = {"(?:(?<=[", negated ? "])(?=[" : "])(?![", "])|(?<![",
                            negated ? "])(?![" : "])(?=[", "]))"};
    for (int i = 0; i < 5; i++) {
        if (!tk_buf_append(out, parts[i], strlen(parts[i]))) return false;
        if (i < 4 && !tk_buf_append(out, w, wl)) return false;
    }
    return true;
}

/* Rewrites an Oniguruma pattern (as `tokenizers` compiles it) for PCRE2:
 *   - \p{L}, \p{N}, \w, \s (and \P{L}, \W, \S, ... outside brackets) become explicit classes
 *     holding what Oniguruma's newer Unicode tables put in them (tokenizer_unicode_fixups.h);
 *   - \b and \B become lookarounds on that word class;
 *   - the inline option (?m) is dot-all in Oniguruma, (?s) in PCRE2;
 *   - \h is a hex digit in Oniguruma, horizontal space in PCRE2. */
static bool translate(const char *p, size_t n, tk_buf *out) {
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        if (ch == '\\' && i + 1 < n) {
            char nx = p[i + 1];
            size_t len;
            bool neg;
            const char *cls = class_for(p + i, n - i, in_class, &len, &neg);
            if (cls && (!in_class || !neg)) {
                bool ok = in_class ? tk_buf_append(out, cls, strlen(cls))
                                   : tk_buf_append(out, neg ? "[^" : "[", neg ? 2 : 1) &&
                                         tk_buf_append(out, cls, strlen(cls)) && tk_buf_putc(out, ']');
                if (!ok) return false;
                i += len - 1;
                continue;
            }
            if (!in_class && (nx == 'b' || nx == 'B')) {
                if (!word_boundary(out, nx == 'B')) return false;
                i++;
                continue;
            }
            if (nx == 'h' || nx == 'H') {
                const char *hex = in_class ? (nx == 'h' ? "0-9a-fA-F" : NULL)
                                           : (nx == 'h' ? "[0-9a-fA-F]" : "[^0-9a-fA-F]");
                if (hex) {
                    if (!tk_buf_append(out, hex, strlen(hex))) return false;
                    i++;
                    continue;
                }
            }
            if (!tk_buf_append(out, p + i, 2)) return false;
            i++;
            continue;
        }
        if (in_class) {
            if (ch == ']') in_class = false;
            if (!tk_buf_putc(out, ch)) return false;
            continue;
        }
        if (ch == '[') {
            in_class = true;
            if (!tk_buf_putc(out, ch)) return false;
            /* a ']' right after '[' or '[^' is a literal */
            if (i + 1 < n && p[i + 1] == '^') {
                if (!tk_buf_putc(out, '^')) return false;
                i++;
            }
            if (i + 1 < n && p[i + 1] == ']') {
                if (!tk_buf_putc(out, ']')) return false;
                i++;
            }
            continue;
        }
        if (ch == '(' && i + 1 < n && p[i + 1] == '?') {
            size_t j = i + 2;
            while (j < n && p[j] && strchr("imx-", p[j])) j++;
            if (j > i + 2 && j < n && (p[j] == ':' || p[j] == ')')) {
                if (!tk_buf_append(out, "(?", 2)) return false;
                for (size_t k = i + 2; k < j; k++)
                    if (!tk_buf_putc(out, p[k] == 'm' ? 's' : p[k])) return false;
                i = j - 1;
                continue;
            }
        }
        if (!tk_buf_putc(out, ch)) return false;
    }
    return true;
}

bool tk_regex_compile(tk_regex *re, const char *pattern, size_t len, bool literal, char *err,
                      size_t errsz) {
    memset(re, 0, sizeof *re);
    tk_buf tr = {0};
    const char *src = pattern;
    size_t srclen = len;
    if (!literal) {
        if (!translate(pattern, len, &tr)) {
            snprintf(err, errsz, "out of memory");
            tk_buf_free(&tr);
            return false;
        }
        src = tr.p ? tr.p : "";
        srclen = tr.len;
    }
    int code;
    PCRE2_SIZE off;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP | PCRE2_MULTILINE);
    re->code = pcre2_compile((PCRE2_SPTR)src, srclen, opts, &code, &off, NULL);
    tk_buf_free(&tr);
    if (!re->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        snprintf(err, errsz, "cannot compile the %s /%.*s/: %s at offset %zu",
                 literal ? "string" : "regex", (int)(len > 200 ? 200 : len), pattern,
                 (const char *)msg, (size_t)off);
        return false;
    }
    re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
    return true;
}

void tk_regex_free(tk_regex *re) {
    if (re->code) pcre2_code_free(re->code);
    re->code = NULL;
}

void tk_rx_state_free(tk_rx_state *st) {
    if (st->md) pcre2_match_data_free(st->md);
    if (st->mctx) pcre2_match_context_free(st->mctx);
    if (st->jit_stack) pcre2_jit_stack_free(st->jit_stack);
    memset(st, 0, sizeof *st);
}

static bool rx_state_init(tk_rx_state *st, char *err, size_t errsz) {
    if (st->md) return true;
    st->md = pcre2_match_data_create(1, NULL);
    if (!st->md) {
        snprintf(err, errsz, "out of memory for regex match data");
        return false;
    }
    return true;
}

/* One search from `start`. Returns 1 with [*s, *e) on a match, 0 when none, -1 on error.
 * The JIT runs on a 32 KiB block of the machine stack; a pattern that needs more (long runs of
 * backtracking) gets an 8 MiB JIT stack, created then and kept for the rest of the call. */
static int rx_search(tk_rx_state *st, const tk_regex *re, const char *subj, size_t n,
                     size_t start, size_t *s, size_t *e, char *err, size_t errsz) {
    int rc = pcre2_match(re->code, (PCRE2_SPTR)subj, n, start, PCRE2_NO_UTF_CHECK, st->md,
                         st->mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !st->jit_stack) {
        st->mctx = pcre2_match_context_create(NULL);
        st->jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
        if (st->mctx && st->jit_stack) {
            pcre2_jit_stack_assign(st->mctx, NULL, st->jit_stack);
            rc = pcre2_match(re->code, (PCRE2_SPTR)subj, n, start, PCRE2_NO_UTF_CHECK, st->md,
                             st->mctx);
        }
    }
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* still too deep: the interpreter's limits are larger */
        rc = pcre2_match(re->code, (PCRE2_SPTR)subj, n, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                         st->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        snprintf(err, errsz, "regex match failed on a %zu-byte piece: %s", n, (const char *)msg);
        return -1;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
    *s = ov[0];
    *e = ov[1];
    if (*e < *s) *e = *s; /* \K tricks; never produced by tokenizer patterns */
    return 1;
}

bool tk_regex_each(tk_rx_state *st, const tk_regex *re, const char *s, size_t n, tk_span_fn fn,
                   void *ctx, bool *stopped, char *err, size_t errsz) {
    *stopped = false;
    if (n == 0) {
        if (!fn(ctx, 0, 0, false)) *stopped = true;
        return true;
    }
    if (!rx_state_init(st, err, errsz)) return false;
    size_t pos = 0, prev = 0;
    bool have_last = false;
    size_t last_end = 0;
    while (pos <= n) {
        size_t ms, me;
        int r = rx_search(st, re, s, n, pos, &ms, &me, err, errsz);
        if (r < 0) return false;
        if (r == 0) break;
        if (ms == me && have_last && last_end == me) {
            /* empty match right after the previous one: step over one character */
            if (pos >= n) break;
            pos += tk_utf8_len((unsigned char)s[pos]);
            continue;
        }
        if ((prev != ms && !fn(ctx, prev, ms, false)) || !fn(ctx, ms, me, true)) {
            *stopped = true;
            return true;
        }
        prev = me;
        pos = me;
        last_end = me;
        have_last = true;
    }
    if (prev != n && !fn(ctx, prev, n, false)) *stopped = true;
    return true;
}

static bool push_span(void *ctx, size_t a, size_t z, bool match) {
    return tk_spans_push(ctx, a, z, match);
}

bool tk_regex_find_matches(tk_rx_state *st, const tk_regex *re, const char *s, size_t n,
                           tk_spans *out, char *err, size_t errsz) {
    out->n = 0;
    bool stopped;
    if (!tk_regex_each(st, re, s, n, push_span, out, &stopped, err, errsz)) return false;
    if (stopped) {
        snprintf(err, errsz, "out of memory while splitting");
        return false;
    }
    return true;
}

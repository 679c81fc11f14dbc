/* Chat templates: Python's str methods (split, strip, startswith, replace, title, ...), on code
 * points and with Python's Unicode rules, as bound methods templates can call. */
#include <stdio.h>
#include <string.h>

#include "io/jinja/jinja.h"

/* ---- helpers ---- */

static jv mkstr(jrt *rt, const char *s, size_t n, bool markup) {
    jv r = jv_str(rt->a, s, n);
    r.markup = markup;
    return r;
}

/* Python's start/end adjustment (ADJUST_INDICES) in code points. */
static void adjust(int64_t len, int64_t *start, int64_t *end) {
    if (*end > len)
        *end = len;
    else if (*end < 0) {
        *end += len;
        if (*end < 0) *end = 0;
    }
    if (*start < 0) {
        *start += len;
        if (*start < 0) *start = 0;
    }
}

static bool in_chars(const jstr *chars, uint32_t cp) {
    for (size_t i = 0; i < chars->len;)
        if (ju_decode(chars->s, chars->len, &i) == cp) return true;
    return false;
}

jv jv_str_upper(jrt *rt, jv s) {
    jbuf b;
    jmem_buf_init(&b, rt->a, 0);
    for (size_t i = 0; i < s.s->len;) ju_put_upper(&b, ju_decode(s.s->s, s.s->len, &i));
    return jv_str_result(rt, &b, s.markup);
}

jv jv_str_lower(jrt *rt, jv s) {
    jbuf b;
    jmem_buf_init(&b, rt->a, 0);
    ju_lower_str(&b, s.s->s, s.s->len);
    return jv_str_result(rt, &b, s.markup);
}

jv jv_str_capitalize(jrt *rt, jv s) {
    jbuf b;
    jmem_buf_init(&b, rt->a, 0);
    for (size_t i = 0; i < s.s->len;) {
        size_t start = i;
        uint32_t cp = ju_decode(s.s->s, s.s->len, &i);
        if (start == 0)
            ju_put_title(&b, cp);
        else
            ju_put_lower_at(&b, s.s->s, s.s->len, start, i, cp);
    }
    return jv_str_result(rt, &b, s.markup);
}

jv jv_str_title(jrt *rt, jv s) {
    jbuf b;
    jmem_buf_init(&b, rt->a, 0);
    bool prev_cased = false;
    for (size_t i = 0; i < s.s->len;) {
        size_t start = i;
        uint32_t cp = ju_decode(s.s->s, s.s->len, &i);
        if (prev_cased)
            ju_put_lower_at(&b, s.s->s, s.s->len, start, i, cp);
        else
            ju_put_title(&b, cp);
        prev_cased = ju_iscased(cp);
    }
    return jv_str_result(rt, &b, s.markup);
}

jv jv_str_strip(jrt *rt, const jnode *at, jv s, jv chars, int which) {
    const jstr *set = NULL;
    if (chars.k == JV_STR)
        set = chars.s;
    else if (chars.k != JV_NONE)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: strip arg must be None or str");
    const char *p = s.s->s;
    size_t n = s.s->len, b = 0, e = n;
    if (which & 1) {
        while (b < n) {
            size_t i = b;
            uint32_t cp = ju_decode(p, n, &i);
            if (set ? !in_chars(set, cp) : !ju_isspace(cp)) break;
            b = i;
        }
    }
    if (which & 2) {
        while (e > b) {
            size_t k = e - 1;
            while (k > b && ((unsigned char)p[k] & 0xC0) == 0x80) k--;
            size_t i = k;
            uint32_t cp = ju_decode(p, n, &i);
            if (set ? !in_chars(set, cp) : !ju_isspace(cp)) break;
            e = k;
        }
    }
    return mkstr(rt, p + b, e - b, s.markup);
}

jv jv_str_replace(jrt *rt, const jnode *at, jv s, jstr *old, jstr *rep, int64_t count) {
    jbuf b;
    jmem_buf_init(&b, rt->a, 0);
    const char *p = s.s->s;
    size_t n = s.s->len;
    if (count < 0) count = INT64_MAX;
    jrt_work(rt, at, n / 16 + 1);
    if (old->len == 0) {
        /* Python inserts `rep` before every character and at the end */
        int64_t done = 0;
        size_t i = 0;
        for (;;) {
            if (done < count) {
                jmem_put(&b, rep->s, rep->len);
                done++;
            }
            if (i >= n) break;
            size_t start = i;
            ju_decode(p, n, &i);
            jmem_put(&b, p + start, i - start);
        }
        return jv_str_result(rt, &b, s.markup);
    }
    size_t i = 0;
    int64_t done = 0;
    while (done < count) {
        const char *hit = memmem(p + i, n - i, old->s, old->len);
        if (!hit) break;
        size_t k = (size_t)(hit - p);
        jmem_put(&b, p + i, k - i);
        jmem_put(&b, rep->s, rep->len);
        i = k + old->len;
        done++;
    }
    jmem_put(&b, p + i, n - i);
    return jv_str_result(rt, &b, s.markup);
}

static jv pad(jrt *rt, jv s, int64_t left, int64_t right, const char *fill, size_t fill_len) {
    jbuf b;
    jmem_buf_init(&b, rt->a, 0);
    for (int64_t k = 0; k < left; k++) jmem_put(&b, fill, fill_len);
    jmem_put(&b, s.s->s, s.s->len);
    for (int64_t k = 0; k < right; k++) jmem_put(&b, fill, fill_len);
    return jv_str_result(rt, &b, s.markup);
}

static void check_width(jrt *rt, const jnode *at, int64_t width) {
    if (width > (int64_t)rt->lim->max_output)
        jrt_fail(rt, at, EM_ERR_OVERFLOW, "a padding width of %lld exceeds the output limit",
                 (long long)width);
}

jv jv_str_center(jrt *rt, const jnode *at, jv s, int64_t width, const char *fill) {
    check_width(rt, at, width);
    int64_t len = (int64_t)s.s->ncp;
    if (width <= len) return s;
    int64_t marg = width - len;
    int64_t left = marg / 2 + (marg & width & 1);
    return pad(rt, s, left, marg - left, fill, strlen(fill));
}

/* Byte offset of the next whitespace / non-whitespace from i. */
static size_t skip_ws(const char *p, size_t n, size_t i, bool want_space) {
    while (i < n) {
        size_t j = i;
        if (ju_isspace(ju_decode(p, n, &j)) != want_space) return i;
        i = j;
    }
    return n;
}

static size_t back_ws(const char *p, size_t n, size_t e, bool want_space) {
    while (e > 0) {
        size_t k = e - 1;
        while (k > 0 && ((unsigned char)p[k] & 0xC0) == 0x80) k--;
        size_t j = k;
        if (ju_isspace(ju_decode(p, n, &j)) != want_space) return e;
        e = k;
    }
    return 0;
}

jlist *jv_str_split(jrt *rt, const jnode *at, jv s, jv sep, int64_t maxsplit, bool right) {
    const char *p = s.s->s;
    size_t n = s.s->len;
    jlist *out = jv_list_new(rt->a, 4).l;
    if (maxsplit < 0) maxsplit = INT64_MAX;
    jrt_work(rt, at, n / 16 + 1);
    if (sep.k == JV_NONE) {
        if (!right) {
            size_t i = skip_ws(p, n, 0, true);
            while (i < n) {
                if (maxsplit-- == 0) {
                    jv_list_push(rt->a, out, mkstr(rt, p + i, n - i, s.markup));
                    break;
                }
                size_t e = skip_ws(p, n, i, false);
                jv_list_push(rt->a, out, mkstr(rt, p + i, e - i, s.markup));
                i = skip_ws(p, n, e, true);
            }
            return out;
        }
        size_t e = back_ws(p, n, n, true);
        jlist *rev = jv_list_new(rt->a, 4).l;
        while (e > 0) {
            if (maxsplit-- == 0) {
                jv_list_push(rt->a, rev, mkstr(rt, p, e, s.markup));
                break;
            }
            size_t b = back_ws(p, n, e, false);
            jv_list_push(rt->a, rev, mkstr(rt, p + b, e - b, s.markup));
            e = back_ws(p, n, b, true);
        }
        for (size_t k = rev->n; k > 0; k--) jv_list_push(rt->a, out, rev->v[k - 1]);
        return out;
    }
    if (sep.k != JV_STR)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: must be str or None, not %s",
                 jv_typename(sep));
    const jstr *d = sep.s;
    if (!d->len) jrt_fail(rt, at, EM_ERR_INVALID_ARG, "ValueError: empty separator");
    if (!right) {
        size_t i = 0;
        while (maxsplit-- > 0) {
            const char *hit = memmem(p + i, n - i, d->s, d->len);
            if (!hit) break;
            size_t k = (size_t)(hit - p);
            jv_list_push(rt->a, out, mkstr(rt, p + i, k - i, s.markup));
            i = k + d->len;
        }
        jv_list_push(rt->a, out, mkstr(rt, p + i, n - i, s.markup));
        return out;
    }
    jlist *rev = jv_list_new(rt->a, 4).l;
    size_t e = n;
    while (maxsplit-- > 0 && e >= d->len) {
        size_t k = e - d->len;
        bool found = false;
        for (;;) {
            if (!memcmp(p + k, d->s, d->len)) {
                found = true;
                break;
            }
            if (k == 0) break;
            k--;
        }
        if (!found) break;
        jv_list_push(rt->a, rev, mkstr(rt, p + k + d->len, e - k - d->len, s.markup));
        e = k;
    }
    jv_list_push(rt->a, rev, mkstr(rt, p, e, s.markup));
    for (size_t k = rev->n; k > 0; k--) jv_list_push(rt->a, out, rev->v[k - 1]);
    return out;
}

static bool is_linebreak(uint32_t c) {
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
           c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
}

jlist *jv_str_splitlines(jrt *rt, jv s, bool keepends) {
    const char *p = s.s->s;
    size_t n = s.s->len, i = 0;
    jlist *out = jv_list_new(rt->a, 4).l;
    while (i < n) {
        size_t start = i, eol = n, next = n;
        while (i < n) {
            size_t j = i;
            uint32_t c = ju_decode(p, n, &j);
            if (is_linebreak(c)) {
                eol = i;
                next = (c == '\r' && j < n && p[j] == '\n') ? j + 1 : j;
                break;
            }
            i = j;
        }
        jv_list_push(rt->a, out, mkstr(rt, p + start, (keepends ? next : eol) - start, s.markup));
        i = next;
    }
    return out;
}

bool jv_str_is(jv s, const char *which) {
    const char *p = s.s->s;
    size_t n = s.s->len;
    if (!strcmp(which, "isascii")) {
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)p[i] >= 0x80) return false;
        return true;
    }
    if (!n) return false;
    if (!strcmp(which, "islower") || !strcmp(which, "isupper")) {
        bool lower = which[2] == 'l', cased = false;
        for (size_t i = 0; i < n;) {
            uint32_t c = ju_decode(p, n, &i);
            if ((lower ? ju_isupper(c) : ju_islower(c)) || ju_class("title", c)) return false;
            if (lower ? ju_islower(c) : ju_isupper(c)) cased = true;
        }
        return cased;
    }
    if (!strcmp(which, "istitle")) {
        bool cased = false, prev_cased = false;
        for (size_t i = 0; i < n;) {
            uint32_t c = ju_decode(p, n, &i);
            if (ju_isupper(c) || ju_class("title", c)) {
                if (prev_cased) return false;
                prev_cased = cased = true;
            } else if (ju_islower(c)) {
                if (!prev_cased) return false;
                prev_cased = cased = true;
            } else {
                prev_cased = false;
            }
        }
        return cased;
    }
    for (size_t i = 0; i < n;) {
        uint32_t c = ju_decode(p, n, &i);
        bool ok;
        if (!strcmp(which, "isspace"))
            ok = ju_isspace(c);
        else if (!strcmp(which, "isalpha"))
            ok = ju_isalpha(c);
        else if (!strcmp(which, "isalnum"))
            ok = ju_isalnum(c);
        else if (!strcmp(which, "isdecimal"))
            ok = ju_class("decimal", c);
        else if (!strcmp(which, "isdigit"))
            ok = ju_class("digit", c);
        else
            ok = ju_class("numeric", c);
        if (!ok) return false;
    }
    return true;
}

/* ---- bound methods ---- */

#define ARGS(fname, ...)                                                                           \
    static const char *const params_[] = {__VA_ARGS__};                                            \
    enum { NP_ = sizeof params_ / sizeof params_[0] };                                             \
    jv v[NP_];                                                                                     \
    bool g[NP_];                                                                                   \
    jrt_args_bind(rt, at, fname, a, params_, NP_, nreq_, v, g)

static void no_args(jrt *rt, const jnode *at, const char *fname, jargs *a) {
    if (a->npos || a->nkw)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: str.%s() takes no arguments", fname);
}

/* Markup methods with string arguments escape them; Ember supports Markup receivers only for
 * the argument-free methods. */
static void plain_receiver(jrt *rt, const jnode *at, jv self, const char *fname) {
    if (self.markup)
        jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: Markup.%s() (from |safe or |escape)",
                 fname);
}

static jv m_upper(jrt *rt, const jnode *at, jv self, jargs *a) {
    no_args(rt, at, "upper", a);
    return jv_str_upper(rt, self);
}
static jv m_lower(jrt *rt, const jnode *at, jv self, jargs *a) {
    no_args(rt, at, "lower", a);
    return jv_str_lower(rt, self);
}
static jv m_title(jrt *rt, const jnode *at, jv self, jargs *a) {
    no_args(rt, at, "title", a);
    return jv_str_title(rt, self);
}
static jv m_capitalize(jrt *rt, const jnode *at, jv self, jargs *a) {
    no_args(rt, at, "capitalize", a);
    return jv_str_capitalize(rt, self);
}

static jv strip_common(jrt *rt, const jnode *at, jv self, jargs *a, const char *fname,
                       int which) {
    enum { nreq_ = 0 };
    ARGS(fname, "chars");
    if (v[0].k == JV_STR) plain_receiver(rt, at, self, fname);
    return jv_str_strip(rt, at, self, g[0] ? v[0] : jv_none(), which);
}
static jv m_strip(jrt *rt, const jnode *at, jv self, jargs *a) {
    return strip_common(rt, at, self, a, "strip", 3);
}
static jv m_lstrip(jrt *rt, const jnode *at, jv self, jargs *a) {
    return strip_common(rt, at, self, a, "lstrip", 1);
}
static jv m_rstrip(jrt *rt, const jnode *at, jv self, jargs *a) {
    return strip_common(rt, at, self, a, "rstrip", 2);
}

static jv split_common(jrt *rt, const jnode *at, jv self, jargs *a, bool right) {
    enum { nreq_ = 0 };
    ARGS(right ? "rsplit" : "split", "sep", "maxsplit");
    int64_t maxsplit = g[1] ? jrt_arg_int(rt, at, "split", v[1]) : -1;
    jv r = {0};
    r.k = JV_LIST;
    r.l = jv_str_split(rt, at, self, g[0] ? v[0] : jv_none(), maxsplit, right);
    return r;
}
static jv m_split(jrt *rt, const jnode *at, jv self, jargs *a) {
    return split_common(rt, at, self, a, false);
}
static jv m_rsplit(jrt *rt, const jnode *at, jv self, jargs *a) {
    return split_common(rt, at, self, a, true);
}
static jv m_splitlines(jrt *rt, const jnode *at, jv self, jargs *a) {
    enum { nreq_ = 0 };
    ARGS("splitlines", "keepends");
    jv r = {0};
    r.k = JV_LIST;
    r.l = jv_str_splitlines(rt, self, g[0] && jv_truthy(rt, at, v[0]));
    return r;
}

/* startswith / endswith with Python's tuple-of-prefixes and start/end arguments. */
static bool tailmatch(jrt *rt, const jnode *at, jv self, jstr *sub, jv start, jv end,
                      bool suffix) {
    int64_t len = (int64_t)self.s->ncp;
    int64_t b = start.k == JV_NONE ? 0 : jrt_arg_int(rt, at, "startswith", start);
    int64_t e = end.k == JV_NONE ? INT64_MAX : jrt_arg_int(rt, at, "startswith", end);
    adjust(len, &b, &e);
    int64_t slen = (int64_t)sub->ncp;
    if (e - slen < b) return false;
    if (slen == 0) return true;
    int64_t from = suffix ? e - slen : b;
    size_t off = ju_offset(self.s->s, self.s->len, (size_t)from);
    return off + sub->len <= self.s->len && !memcmp(self.s->s + off, sub->s, sub->len);
}

static jv with_common(jrt *rt, const jnode *at, jv self, jargs *a, bool suffix) {
    const char *fname = suffix ? "endswith" : "startswith";
    enum { nreq_ = 1 };
    ARGS(fname, "prefix", "start", "end");
    if (!g[1]) v[1] = jv_none();
    if (!g[2]) v[2] = jv_none();
    if (v[0].k == JV_TUPLE) {
        for (size_t k = 0; k < v[0].l->n; k++) {
            jv item = v[0].l->v[k];
            if (item.k != JV_STR)
                jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                         "TypeError: tuple for %s must only contain str, not %s", fname,
                         jv_typename(item));
            if (tailmatch(rt, at, self, item.s, v[1], v[2], suffix)) return jv_bool(true);
        }
        return jv_bool(false);
    }
    if (v[0].k != JV_STR)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                 "TypeError: %s first arg must be str or a tuple of str, not %s", fname,
                 jv_typename(v[0]));
    return jv_bool(tailmatch(rt, at, self, v[0].s, v[1], v[2], suffix));
}
static jv m_startswith(jrt *rt, const jnode *at, jv self, jargs *a) {
    return with_common(rt, at, self, a, false);
}
static jv m_endswith(jrt *rt, const jnode *at, jv self, jargs *a) {
    return with_common(rt, at, self, a, true);
}

static jv m_replace(jrt *rt, const jnode *at, jv self, jargs *a) {
    enum { nreq_ = 2 };
    ARGS("replace", "old", "new", "count");
    plain_receiver(rt, at, self, "replace");
    int64_t count = g[2] ? jrt_arg_int(rt, at, "replace", v[2]) : -1;
    return jv_str_replace(rt, at, self, jrt_arg_str(rt, at, "replace", v[0]),
                        jrt_arg_str(rt, at, "replace", v[1]), count);
}

/* find / rfind / index / rindex / count share the search (CPython's semantics, in code points). */
static jv search(jrt *rt, const jnode *at, jv self, jargs *a, const char *fname) {
    enum { nreq_ = 1 };
    ARGS(fname, "sub", "start", "end");
    jstr *sub = jrt_arg_str(rt, at, fname, v[0]);
    int64_t len = (int64_t)self.s->ncp;
    int64_t b = g[1] && v[1].k != JV_NONE ? jrt_arg_int(rt, at, fname, v[1]) : 0;
    int64_t e = g[2] && v[2].k != JV_NONE ? jrt_arg_int(rt, at, fname, v[2]) : INT64_MAX;
    adjust(len, &b, &e);
    bool rev = fname[0] == 'r', count = !strcmp(fname, "count");
    bool raise = fname[strlen(fname) - 1] == 'x';
    jrt_work(rt, at, self.s->len / 16 + 1);
    int64_t found = -1, hits = 0;
    if (e - b >= (int64_t)sub->ncp) {
        if (sub->ncp == 0) {
            hits = e - b + 1;
            found = rev ? e : b;
        } else {
            const char *p = self.s->s;
            size_t bo = ju_offset(p, self.s->len, (size_t)b);
            size_t eo = ju_offset(p, self.s->len, (size_t)e);
            size_t i = bo;
            while (i + sub->len <= eo) {
                const char *hit = memmem(p + i, eo - i, sub->s, sub->len);
                if (!hit) break;
                size_t k = (size_t)(hit - p);
                hits++;
                found = b + (int64_t)ju_count(p + bo, k - bo);
                if (!rev && !count) break;
                i = count ? k + sub->len : k + 1; /* a UTF-8 match starts on a character */
            }
        }
    }
    if (count) return jv_int(hits);
    if (found < 0 && raise) jrt_fail(rt, at, EM_ERR_INVALID_ARG, "ValueError: substring not found");
    return jv_int(found);
}
static jv m_find(jrt *rt, const jnode *at, jv self, jargs *a) {
    return search(rt, at, self, a, "find");
}
static jv m_rfind(jrt *rt, const jnode *at, jv self, jargs *a) {
    return search(rt, at, self, a, "rfind");
}
static jv m_index(jrt *rt, const jnode *at, jv self, jargs *a) {
    return search(rt, at, self, a, "index");
}
static jv m_rindex(jrt *rt, const jnode *at, jv self, jargs *a) {
    return search(rt, at, self, a, "rindex");
}
static jv m_count(jrt *rt, const jnode *at, jv self, jargs *a) {
    return search(rt, at, self, a, "count");
}

static jv m_join(jrt *rt, const jnode *at, jv self, jargs *a) {
    enum { nreq_ = 1 };
    ARGS("join", "iterable");
    (void)g;
    plain_receiver(rt, at, self, "join");
    jlist *items = jv_iterate(rt, at, v[0]);
    jbuf b;
    jmem_buf_init(&b, rt->a, 0);
    jrt_work(rt, at, items->n);
    for (size_t k = 0; k < items->n; k++) {
        jv it = items->v[k];
        if (it.k != JV_STR)
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "TypeError: sequence item %zu: expected str instance, %s found", k,
                     jv_typename(it));
        if (k) jmem_put(&b, self.s->s, self.s->len);
        jmem_put(&b, it.s->s, it.s->len);
    }
    return jv_str_result(rt, &b, false);
}

static jv m_format(jrt *rt, const jnode *at, jv self, jargs *a) {
    return jrt_fmt_format(rt, at, self, a);
}

static jv justify(jrt *rt, const jnode *at, jv self, jargs *a, const char *fname) {
    enum { nreq_ = 1 };
    ARGS(fname, "width", "fillchar");
    int64_t width = jrt_arg_int(rt, at, fname, v[0]);
    const char *fill = " ";
    if (g[1]) {
        jstr *f = jrt_arg_str(rt, at, fname, v[1]);
        if (f->ncp != 1)
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "TypeError: The fill character must be exactly one character long");
        fill = f->s;
        plain_receiver(rt, at, self, fname);
    }
    if (fname[0] == 'c') return jv_str_center(rt, at, self, width, fill);
    check_width(rt, at, width);
    int64_t marg = width - (int64_t)self.s->ncp;
    if (marg <= 0) return self;
    return fname[0] == 'l' ? pad(rt, self, 0, marg, fill, strlen(fill))
                           : pad(rt, self, marg, 0, fill, strlen(fill));
}
static jv m_center(jrt *rt, const jnode *at, jv self, jargs *a) {
    return justify(rt, at, self, a, "center");
}
static jv m_ljust(jrt *rt, const jnode *at, jv self, jargs *a) {
    return justify(rt, at, self, a, "ljust");
}
static jv m_rjust(jrt *rt, const jnode *at, jv self, jargs *a) {
    return justify(rt, at, self, a, "rjust");
}

static jv m_zfill(jrt *rt, const jnode *at, jv self, jargs *a) {
    enum { nreq_ = 1 };
    ARGS("zfill", "width");
    (void)g;
    int64_t width = jrt_arg_int(rt, at, "zfill", v[0]);
    check_width(rt, at, width);
    int64_t marg = width - (int64_t)self.s->ncp;
    if (marg <= 0) return self;
    jbuf b;
    jmem_buf_init(&b, rt->a, 0);
    size_t sign = self.s->len && (self.s->s[0] == '+' || self.s->s[0] == '-') ? 1 : 0;
    jmem_put(&b, self.s->s, sign);
    for (int64_t k = 0; k < marg; k++) jmem_putc(&b, '0');
    jmem_put(&b, self.s->s + sign, self.s->len - sign);
    return jv_str_result(rt, &b, self.markup);
}

static jv affix(jrt *rt, const jnode *at, jv self, jargs *a, bool suffix) {
    const char *fname = suffix ? "removesuffix" : "removeprefix";
    enum { nreq_ = 1 };
    ARGS(fname, "affix");
    (void)g;
    plain_receiver(rt, at, self, fname);
    jstr *x = jrt_arg_str(rt, at, fname, v[0]);
    const jstr *s = self.s;
    if (x->len > s->len || !x->len) return self;
    if (!suffix && !memcmp(s->s, x->s, x->len))
        return mkstr(rt, s->s + x->len, s->len - x->len, false);
    if (suffix && !memcmp(s->s + s->len - x->len, x->s, x->len))
        return mkstr(rt, s->s, s->len - x->len, false);
    return self;
}
static jv m_removeprefix(jrt *rt, const jnode *at, jv self, jargs *a) {
    return affix(rt, at, self, a, false);
}
static jv m_removesuffix(jrt *rt, const jnode *at, jv self, jargs *a) {
    return affix(rt, at, self, a, true);
}

static jv partition(jrt *rt, const jnode *at, jv self, jargs *a, bool right) {
    const char *fname = right ? "rpartition" : "partition";
    enum { nreq_ = 1 };
    ARGS(fname, "sep");
    (void)g;
    plain_receiver(rt, at, self, fname);
    jstr *sep = jrt_arg_str(rt, at, fname, v[0]);
    if (!sep->len) jrt_fail(rt, at, EM_ERR_INVALID_ARG, "ValueError: empty separator");
    const jstr *s = self.s;
    const char *hit = NULL;
    if (!right) {
        hit = memmem(s->s, s->len, sep->s, sep->len);
    } else if (s->len >= sep->len) {
        for (size_t k = s->len - sep->len + 1; k-- > 0;)
            if (!memcmp(s->s + k, sep->s, sep->len)) {
                hit = s->s + k;
                break;
            }
    }
    jv t = jv_tuple_new(rt->a, 3);
    if (!hit) {
        jv empty = mkstr(rt, "", 0, false);
        if (right) {
            jv_list_push(rt->a, t.l, empty);
            jv_list_push(rt->a, t.l, empty);
            jv_list_push(rt->a, t.l, self);
        } else {
            jv_list_push(rt->a, t.l, self);
            jv_list_push(rt->a, t.l, empty);
            jv_list_push(rt->a, t.l, empty);
        }
        return t;
    }
    size_t k = (size_t)(hit - s->s);
    jv_list_push(rt->a, t.l, mkstr(rt, s->s, k, false));
    jv_list_push(rt->a, t.l, mkstr(rt, sep->s, sep->len, false));
    jv_list_push(rt->a, t.l, mkstr(rt, s->s + k + sep->len, s->len - k - sep->len, false));
    return t;
}
static jv m_partition(jrt *rt, const jnode *at, jv self, jargs *a) {
    return partition(rt, at, self, a, false);
}
static jv m_rpartition(jrt *rt, const jnode *at, jv self, jargs *a) {
    return partition(rt, at, self, a, true);
}

#define IS_METHOD(name)                                                                            \
    static jv m_##name(jrt *rt, const jnode *at, jv self, jargs *a) {                              \
        no_args(rt, at, #name, a);                                                                 \
        return jv_bool(jv_str_is(self, #name));                                                    \
    }
IS_METHOD(isalpha)
IS_METHOD(isalnum)
IS_METHOD(isdigit)
IS_METHOD(isdecimal)
IS_METHOD(isnumeric)
IS_METHOD(isspace)
IS_METHOD(islower)
IS_METHOD(isupper)
IS_METHOD(istitle)
IS_METHOD(isascii)

typedef struct mdef {
    const char *name;
    jfunc_impl impl;
} mdef;

/* Every attribute of Python's str: those Ember implements, and the rest (NULL) so that they
 * exist (defined, truthy) and fail clearly when called. */
static const mdef STR_METHODS[] = {
    {"capitalize", m_capitalize}, {"casefold", NULL},         {"center", m_center},
    {"count", m_count},           {"encode", NULL},           {"endswith", m_endswith},
    {"expandtabs", NULL},         {"find", m_find},           {"format", m_format},
    {"format_map", NULL},         {"index", m_index},         {"isalnum", m_isalnum},
    {"isalpha", m_isalpha},       {"isascii", m_isascii},     {"isdecimal", m_isdecimal},
    {"isdigit", m_isdigit},       {"isidentifier", NULL},     {"islower", m_islower},
    {"isnumeric", m_isnumeric},   {"isprintable", NULL},      {"isspace", m_isspace},
    {"istitle", m_istitle},       {"isupper", m_isupper},     {"join", m_join},
    {"ljust", m_ljust},           {"lower", m_lower},         {"lstrip", m_lstrip},
    {"maketrans", NULL},          {"partition", m_partition}, {"removeprefix", m_removeprefix},
    {"removesuffix", m_removesuffix}, {"replace", m_replace}, {"rfind", m_rfind},
    {"rindex", m_rindex},         {"rjust", m_rjust},         {"rpartition", m_rpartition},
    {"rsplit", m_rsplit},         {"rstrip", m_rstrip},       {"split", m_split},
    {"splitlines", m_splitlines}, {"startswith", m_startswith}, {"strip", m_strip},
    {"swapcase", NULL},           {"title", m_title},         {"translate", NULL},
    {"upper", m_upper},           {"zfill", m_zfill},
};

/* markupsafe.Markup's own methods */
static const char *const MARKUP_METHODS[] = {"escape", "unescape", "striptags", NULL};

bool jv_str_method(jrt *rt, jv self, const char *name, jv *out) {
    const mdef *m = NULL;
    for (size_t k = 0; k < sizeof STR_METHODS / sizeof STR_METHODS[0]; k++)
        if (!strcmp(STR_METHODS[k].name, name)) m = &STR_METHODS[k];
    static const mdef none = {NULL, NULL};
    if (!m && self.markup)
        for (const char *const *p = MARKUP_METHODS; *p; p++)
            if (!strcmp(*p, name)) m = &none;
    if (!m) return false;
    jfunc *f = jmem_zalloc(rt->a, sizeof *f);
    f->name = m->name ? m->name : name;
    f->owner = self.markup ? "Markup" : "str";
    f->impl = m->impl;
    f->self = self;
    out->k = JV_FUNC;
    out->markup = 0;
    out->fn = f;
    return true;
}

/* Chat templates: jinja2's builtin filters, transcribed from jinja2/filters.py (3.1.6), plus
 * transformers' own tojson. Filters that return generators in jinja2 (map, select, items, ...)
 * return one-shot iterators here too: they are truthy even when empty, have no len(), and a
 * second loop over them sees nothing. */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "io/jinja/jinja.h"

static const char *const KNOWN_FILTERS[] = {
    "abs",       "attr",       "batch",    "capitalize", "center",  "count",     "d",
    "default",   "dictsort",   "e",        "escape",     "filesizeformat",       "first",
    "float",     "forceescape", "format",  "groupby",    "indent",  "int",       "join",
    "last",      "length",     "list",     "lower",      "items",   "map",       "min",
    "max",       "pprint",     "random",   "reject",     "rejectattr", "replace", "reverse",
    "round",     "safe",       "select",   "selectattr", "slice",   "sort",      "string",
    "striptags", "sum",        "title",    "trim",       "truncate", "unique",   "upper",
    "urlencode", "urlize",     "wordcount", "wordwrap",  "xmlattr", "tojson",    NULL,
};

bool jinja_has_filter(const char *name) {
    for (const char *const *f = KNOWN_FILTERS; *f; f++)
        if (!strcmp(*f, name)) return true;
    return false;
}

#define BIND(fname, nreq, ...)                                                                     \
    static const char *const params_[] = {__VA_ARGS__};                                            \
    enum { NP_ = sizeof params_ / sizeof params_[0] };                                             \
    jv v[NP_];                                                                                     \
    bool g[NP_];                                                                                   \
    jrt_args_bind(rt, at, fname, a, params_, NP_, nreq, v, g)

static void no_args(jrt *rt, const jnode *at, const char *fname, jargs *a) {
    if (a->npos || a->nkw)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: the %s filter takes no arguments",
                 fname);
}

static jv as_list(jlist *l) {
    jv r = {0};
    r.k = JV_LIST;
    r.l = l;
    return r;
}

/* soft_str(): str() of anything, a str (or Markup) as it is. */
static jv soft_str(jrt *rt, const jnode *at, jv v) { return jv_to_str(rt, at, v); }

static bool truthy(jrt *rt, const jnode *at, jv v) { return jv_truthy(rt, at, v); }

/* ---- attribute getters (make_attrgetter) ---- */

typedef struct attrpath {
    jv *parts;
    int n;
} attrpath;

static attrpath attr_parts(jrt *rt, jv attribute) {
    attrpath p = {0};
    if (attribute.k == JV_NONE || attribute.k == JV_UNDEF) return p;
    if (attribute.k != JV_STR) {
        p.parts = jmem_alloc(rt->a, sizeof(jv));
        p.parts[0] = attribute;
        p.n = 1;
        return p;
    }
    jlist *l = jv_str_split(rt, NULL, attribute, jv_cstr(rt->a, "."), -1, false);
    p.parts = jmem_alloc(rt->a, l->n * sizeof(jv));
    for (size_t k = 0; k < l->n; k++) {
        jv part = l->v[k];
        if (jv_str_is(part, "isdigit")) {
            if (!jv_str_is(part, "isascii"))
                jrt_fail(rt, NULL, EM_ERR_UNSUPPORTED,
                         "unsupported: non-ASCII digits in an attribute path");
            part = jv_int(strtoll(part.s->s, NULL, 10));
        }
        p.parts[p.n++] = part;
    }
    return p;
}

static jv attr_get(jrt *rt, const jnode *at, const attrpath *p, jv item, jv dflt, bool has_dflt) {
    for (int k = 0; k < p->n; k++) {
        item = jrt_op_getitem(rt, at, item, p->parts[k]);
        if (has_dflt && item.k == JV_UNDEF) item = dflt;
    }
    return item;
}

static jv ignore_case(jrt *rt, jv v) { return v.k == JV_STR ? jv_str_lower(rt, v) : v; }

/* ---- sorting: a stable merge sort whose comparison may fail like Python's ---- */

typedef struct sort_item {
    jv key, val;
} sort_item;

static void merge_sort(jrt *rt, const jnode *at, sort_item *v, sort_item *tmp, size_t n,
                       bool reverse) {
    if (n < 2) return;
    size_t h = n / 2;
    merge_sort(rt, at, v, tmp, h, reverse);
    merge_sort(rt, at, v + h, tmp, n - h, reverse);
    size_t i = 0, j = h, o = 0;
    while (i < h && j < n) {
        /* take from the right only when it is strictly smaller (stability; Python's reverse
         * sort also keeps equal items in their original order) */
        int c = reverse ? jv_compare(rt, at, v[i].key, v[j].key, "<")
                        : jv_compare(rt, at, v[j].key, v[i].key, "<");
        if (c == -1)
            tmp[o++] = v[j++];
        else
            tmp[o++] = v[i++];
    }
    while (i < h) tmp[o++] = v[i++];
    while (j < n) tmp[o++] = v[j++];
    memcpy(v, tmp, n * sizeof *v);
}

static void sort_items(jrt *rt, const jnode *at, sort_item *v, size_t n, bool reverse) {
    jrt_work(rt, at, n * 4 + 1);
    sort_item *tmp = jmem_alloc(rt->a, (n + 1) * sizeof *tmp);
    merge_sort(rt, at, v, tmp, n, reverse);
}

/* ---- the filters ---- */

static jv f_abs(jrt *rt, const jnode *at, jv in, jargs *a) {
    no_args(rt, at, "abs", a);
    if (in.k == JV_FLOAT) return jv_float(fabs(in.f));
    if (in.k == JV_INT || in.k == JV_BOOL) {
        int64_t x = in.k == JV_BOOL ? in.b : in.i;
        if (x == INT64_MIN) jrt_fail(rt, at, EM_ERR_OVERFLOW, "integer overflow in abs()");
        return jv_int(x < 0 ? -x : x);
    }
    jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: bad operand type for abs(): '%s'",
             jv_typename(in));
}

static jv f_attr(jrt *rt, const jnode *at, jv in, jargs *a) {
    BIND("attr", 1, "name");
    (void)g;
    jstr *name = jrt_arg_str(rt, at, "attr", v[0]);
    if (in.k == JV_UNDEF) jv_raise_undefined(rt, at, in);
    jv out;
    if (in.k == JV_NS) {
        jv *x = jv_dict_get_str(in.d, name->s, name->len);
        if (x) return *x;
    } else if (in.k == JV_LOOP) {
        out = jinja_loop_attr(rt, at, in, name->s);
        if (out.k != JV_UNDEF || out.u) return out;
    } else if (name->s[0] != '_' && jinja_method(rt, in, name->s, &out)) {
        return out;
    }
    return jv_undef_attr(rt->a, in, name->s);
}

static jv f_capitalize(jrt *rt, const jnode *at, jv in, jargs *a) {
    no_args(rt, at, "capitalize", a);
    return jv_str_capitalize(rt, soft_str(rt, at, in));
}

static jv f_center(jrt *rt, const jnode *at, jv in, jargs *a) {
    BIND("center", 0, "width");
    int64_t width = g[0] ? jrt_arg_int(rt, at, "center", v[0]) : 80;
    return jv_str_center(rt, at, soft_str(rt, at, in), width, " ");
}

static jv f_length(jrt *rt, const jnode *at, jv in, jargs *a) {
    no_args(rt, at, "length", a);
    return jv_int(jv_len(rt, at, in));
}

static jv f_default(jrt *rt, const jnode *at, jv in, jargs *a) {
    BIND("default", 0, "default_value", "boolean");
    jv dflt = g[0] ? v[0] : jv_str(rt->a, "", 0);
    bool boolean = g[1] && truthy(rt, at, v[1]);
    if (in.k == JV_UNDEF || (boolean && !truthy(rt, at, in))) return dflt;
    return in;
}

static jv pair(jrt *rt, jv k, jv val) {
    jv t = jv_tuple_new(rt->a, 2);
    jv_list_push(rt->a, t.l, k);
    jv_list_push(rt->a, t.l, val);
    return t;
}

static jv f_dictsort(jrt *rt, const jnode *at, jv in, jargs *a) {
    BIND("dictsort", 0, "case_sensitive", "by", "reverse");
    bool cs = g[0] && truthy(rt, at, v[0]);
    int pos = 0;
    if (g[1]) {
        if (v[1].k == JV_STR && !strcmp(v[1].s->s, "value"))
            pos = 1;
        else if (!(v[1].k == JV_STR && !strcmp(v[1].s->s, "key")))
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "FilterArgumentError: You can only sort by either \"key\" or \"value\"");
    }
    if (in.k != JV_DICT)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "AttributeError: '%s' object has no attribute 'items'",
                 jv_typename(in));
    size_t n = in.d->n;
    sort_item *items = jmem_alloc(rt->a, (n + 1) * sizeof *items);
    for (size_t k = 0; k < n; k++) {
        jv key = pos ? in.d->vals[k] : in.d->keys[k];
        items[k].key = cs ? key : ignore_case(rt, key);
        items[k].val = pair(rt, in.d->keys[k], in.d->vals[k]);
    }
    sort_items(rt, at, items, n, g[2] && truthy(rt, at, v[2]));
    jv out = jv_list_new(rt->a, n);
    for (size_t k = 0; k < n; k++) jv_list_push(rt->a, out.l, items[k].val);
    return out;
}

static jv f_escape(jrt *rt, const jnode *at, jv in, jargs *a) {
    no_args(rt, at, "escape", a);
    if (in.k == JV_STR && in.markup) return in;
    jv s = jv_to_str(rt, at, in);
    jbuf b;
    jmem_buf_init(&b, rt->a, 0);
    jv_write_escaped(&b, s.s->s, s.s->len);
    return jv_str_result(rt, &b, true);
}

static jv f_forceescape(jrt *rt, const jnode *at, jv in, jargs *a) {
    no_args(rt, at, "forceescape", a);
    jv s = jv_to_str(rt, at, in);
    jbuf b;
    jmem_buf_init(&b, rt->a, 0);
    jv_write_escaped(&b, s.s->s, s.s->len);
    return jv_str_result(rt, &b, true);
}

static jv f_safe(jrt *rt, const jnode *at, jv in, jargs *a) {
    no_args(rt, at, "safe", a);
    jv s = jv_to_str(rt, at, in);
    s.markup = 1;
    return s;
}

static jv f_first(jrt *rt, const jnode *at, jv in, jargs *a) {
    no_args(rt, at, "first", a);
    if (in.k == JV_ITER) {
        jiter *it = in.it;
        jv_iter_force(rt, at, it);
        if (it->pos < it->items->n) return it->items->v[it->pos++];
        return jv_undef_hint(rt->a, "No first item, sequence was empty.");
    }
    jlist *l = jv_iterate(rt, at, in);
    return l->n ? l->v[0] : jv_undef_hint(rt->a, "No first item, sequence was empty.");
}

static jv f_last(jrt *rt, const jnode *at, jv in, jargs *a) {
    no_args(rt, at, "last", a);
    if (in.k == JV_ITER || in.k == JV_NS || in.k == JV_LOOP || !(in.k == JV_STR ||
        in.k == JV_LIST || in.k == JV_TUPLE || in.k == JV_DICT || in.k == JV_VIEW ||
        in.k == JV_RANGE || in.k == JV_UNDEF))
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: '%s' object is not reversible",
                 jv_typename(in));
    jlist *l = jv_iterate(rt, at, in);
    return l->n ? l->v[l->n - 1] : jv_undef_hint(rt->a, "No last item, sequence was empty.");
}

/* Python's float(str): whitespace, sign, digits with single underscores, inf / nan. */
static bool parse_py_float(jrt *rt, const jnode *at, const jstr *s, double *out) {
    const char *p = s->s;
    size_t n = s->len, b = 0, e = n;
    while (b < n) {
        size_t i = b;
        if (!ju_isspace(ju_decode(p, n, &i))) break;
        b = i;
    }
    while (e > b) {
        size_t k = e - 1;
        while (k > b && ((unsigned char)p[k] & 0xC0) == 0x80) k--;
        size_t i = k;
        if (!ju_isspace(ju_decode(p, n, &i))) break;
        e = k;
    }
    char buf[128];
    size_t o = 0;
    for (size_t i = b; i < e; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x80) {
            size_t j = i;
            if (ju_class("decimal", ju_decode(p, n, &j)))
                jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: non-ASCII digits in float()");
            return false;
        }
        if (c == '_') {
            bool ok = i > b && i + 1 < e && p[i - 1] >= '0' && p[i - 1] <= '9' && p[i + 1] >= '0' &&
                      p[i + 1] <= '9';
            if (!ok) return false;
            continue;
        }
        if (o + 1 >= sizeof buf) return false;
        buf[o++] = (char)c;
    }
    buf[o] = 0;
    if (!o) return false;
    const char *q = buf;
    if (*q == '+' || *q == '-') q++;
    /* strtod also takes hex floats and "infinity"/"nan(...)" spellings Python refuses */
    if (!strcasecmp(q, "inf") || !strcasecmp(q, "infinity") || !strcasecmp(q, "nan")) {
        *out = strtod(buf, NULL);
        return true;
    }
    bool digit = false;
    for (const char *r = q; *r; r++) {
        if (*r >= '0' && *r <= '9')
            digit = true;
        else if (!strchr(".eE+-", *r))
            return false;
    }
    if (!digit) return false;
    char *end;
    *out = strtod(buf, &end);
    return *end == 0;
}

static jv f_float(jrt *rt, const jnode *at, jv in, jargs *a) {
    BIND("float", 0, "default");
    jv dflt = g[0] ? v[0] : jv_float(0.0);
    if (in.k == JV_UNDEF) jv_raise_undefined(rt, at, in);
    if (in.k == JV_FLOAT) return in;
    if (in.k == JV_INT || in.k == JV_BOOL) return jv_float(jv_as_double(in));
    double f;
    if (in.k == JV_STR && parse_py_float(rt, at, in.s, &f)) return jv_float(f);
    return dflt;
}

/* Python's int(str, base); false when it raises ValueError. */
static bool parse_py_int(jrt *rt, const jnode *at, const jstr *s, int64_t base, int64_t *out) {
    const char *p = s->s;
    size_t n = s->len, b = 0, e = n;
    while (b < n) {
        size_t i = b;
        if (!ju_isspace(ju_decode(p, n, &i))) break;
        b = i;
    }
    while (e > b) {
        size_t k = e - 1;
        while (k > b && ((unsigned char)p[k] & 0xC0) == 0x80) k--;
        size_t i = k;
        if (!ju_isspace(ju_decode(p, n, &i))) break;
        e = k;
    }
    for (size_t i = b; i < e; i++)
        if ((unsigned char)p[i] >= 0x80) {
            size_t j = i;
            if (ju_class("decimal", ju_decode(p, n, &j)))
                jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: non-ASCII digits in int()");
            return false;
        }
    bool neg = false;
    if (b < e && (p[b] == '+' || p[b] == '-')) neg = p[b++] == '-';
    if (base < 0 || base == 1 || base > 36)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "ValueError: int() base must be >= 2 and <= 36, or 0");
    if (e - b >= 2 && p[b] == '0') {
        char x = (char)(p[b + 1] | 0x20);
        int pb = x == 'x' ? 16 : x == 'o' ? 8 : x == 'b' ? 2 : 0;
        if (pb && (base == 0 || base == pb)) {
            base = pb;
            b += 2;
            if (b < e && p[b] == '_') b++; /* 0x_1f is valid */
        }
    }
    bool zero_lead = false;
    if (base == 0) {
        base = 10;
        zero_lead = b < e && p[b] == '0';
    }
    if (b >= e) return false;
    uint64_t v = 0;
    bool any_nonzero = false;
    for (size_t i = b; i < e; i++) {
        char c = p[i];
        if (c == '_') {
            if (i == b || i + 1 >= e || p[i + 1] == '_') return false;
            continue;
        }
        int d = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'z'
                                                     ? (c | 0x20) - 'a' + 10 : 99;
        if (d >= base) return false;
        if (d) any_nonzero = true;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
            jrt_fail(rt, at, EM_ERR_OVERFLOW,
                     "integer overflow: Python integers are unbounded, Ember's are 64-bit");
        v = v * (uint64_t)base + (uint64_t)d;
    }
    if (zero_lead && any_nonzero) return false; /* int('010', 0) is an error */
    if (v > (uint64_t)INT64_MAX + (neg ? 1 : 0))
        jrt_fail(rt, at, EM_ERR_OVERFLOW,
                 "integer overflow: Python integers are unbounded, Ember's are 64-bit");
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

static jv float_to_int(jrt *rt, const jnode *at, double f, jv dflt) {
    if (isnan(f)) return dflt;
    if (isinf(f))
        jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                 "OverflowError: cannot convert float infinity to integer");
    if (fabs(f) >= 9.2233720368547758e18)
        jrt_fail(rt, at, EM_ERR_OVERFLOW,
                 "integer overflow: Python integers are unbounded, Ember's are 64-bit");
    return jv_int((int64_t)f);
}

static jv f_int(jrt *rt, const jnode *at, jv in, jargs *a) {
    BIND("int", 0, "default", "base");
    jv dflt = g[0] ? v[0] : jv_int(0);
    int64_t base = g[1] ? jrt_arg_int(rt, at, "int", v[1]) : 10;
    if (in.k == JV_UNDEF) jv_raise_undefined(rt, at, in);
    if (in.k == JV_INT) return in;
    if (in.k == JV_BOOL) return jv_int(in.b);
    if (in.k == JV_FLOAT) {
        if (isinf(in.f))
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "OverflowError: cannot convert float infinity to integer");
        return float_to_int(rt, at, in.f, dflt);
    }
    if (in.k == JV_STR) {
        int64_t x;
        if (parse_py_int(rt, at, in.s, base, &x)) return jv_int(x);
        double f;
        if (parse_py_float(rt, at, in.s, &f)) {
            if (isinf(f)) return dflt; /* OverflowError is caught on this path */
            return float_to_int(rt, at, f, dflt);
        }
    }
    return dflt;
}

static jv f_format(jrt *rt, const jnode *at, jv in, jargs *a) {
    if (a->npos && a->nkw)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                 "FilterArgumentError: can't handle positional and keyword arguments at the same "
                 "time");
    jv args;
    if (a->nkw) {
        args = jv_dict_new(rt->a, (size_t)a->nkw);
        for (int k = 0; k < a->nkw; k++)
            jv_dict_set(rt, args.d, jv_cstr(rt->a, a->kwn[k]), a->kwv[k]);
    } else {
        args = jv_tuple_new(rt->a, (size_t)a->npos);
        for (int k = 0; k < a->npos; k++) jv_list_push(rt->a, args.l, a->pos[k]);
    }
    return jrt_fmt_percent(rt, at, soft_str(rt, at, in), args);
}

static jv f_indent(jrt *rt, const jnode *at, jv in, jargs *a) {
    BIND("indent", 0, "width", "first", "blank");
    jbuf ind;
    jmem_buf_init(&ind, rt->a, 0);
    if (g[0] && v[0].k == JV_STR) {
        jmem_put(&ind, v[0].s->s, v[0].s->len);
    } else {
        int64_t w = g[0] ? jrt_arg_int(rt, at, "indent", v[0]) : 4;
        if (w > 100000) jrt_fail(rt, at, EM_ERR_OVERFLOW, "indent width too large");
        for (int64_t k = 0; k < w; k++) jmem_putc(&ind, ' ');
    }
    if (in.k == JV_UNDEF) jv_raise_undefined(rt, at, in);
    if (in.k != JV_STR)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                 "TypeError: unsupported operand type(s) for +=: '%s' and 'str'", jv_typename(in));
    bool first = g[1] && truthy(rt, at, v[1]), blank = g[2] && truthy(rt, at, v[2]);
    const char *is = ind.p ? ind.p : "";
    jbuf withnl;
    jmem_buf_init(&withnl, rt->a, 0);
    jmem_put(&withnl, in.s->s, in.s->len);
    jmem_putc(&withnl, '\n');
    jlist *lines = jv_str_splitlines(rt, jv_str_buf(&withnl), false);
    jbuf b;
    jmem_buf_init(&b, rt->a, 0);
    if (first) jmem_put(&b, is, ind.n);
    for (size_t k = 0; k < lines->n; k++) {
        jv line = lines->v[k];
        if (k) {
            jmem_putc(&b, '\n');
            if (blank || line.s->len) jmem_put(&b, is, ind.n);
        }
        jmem_put(&b, line.s->s, line.s->len);
    }
    return jv_str_result(rt, &b, in.markup);
}

static jv iter_of(jrt *rt, jlist *l) { return jv_iter_new(rt->a, l, "generator"); }

/* A generator filter: nothing runs until something consumes the result (jinja2's filters are
 * Python generators), so its errors only surface then. */
typedef jv (*filter_fn)(jrt *rt, const jnode *at, jv in, jargs *a);
static jv lazy(jrt *rt, const jnode *at, jv in, jargs *a, jlist *(*run)(jrt *, jiter *)) {
    jv it = jv_iter_new(rt->a, NULL, "generator");
    it.it->run = run;
    it.it->src = in;
    jargs *copy = jmem_alloc(rt->a, sizeof *copy);
    *copy = *a;
    it.it->args = copy;
    it.it->at = at;
    return it;
}
#define LAZY(name, impl)                                                                           \
    static jlist *run_##name(jrt *rt, jiter *it) {                                                 \
        jv r = impl(rt, it->at, it->src, it->args);                                                \
        return r.it->items;                                                                        \
    }                                                                                              \
    static jv f_##name(jrt *rt, const jnode *at, jv in, jargs *a) {                                \
        return lazy(rt, at, in, a, run_##name);                                                    \
    }

static jv eager_items(jrt *rt, const jnode *at, jv in, jargs *a) {
    no_args(rt, at, "items", a);
    jlist *l = jv_list_new(rt->a, 0).l;
    if (in.k == JV_UNDEF) return iter_of(rt, l);
    if (in.k != JV_DICT)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                 "TypeError: Can only get item pairs from a mapping.");
    for (size_t k = 0; k < in.d->n; k++)
        jv_list_push(rt->a, l, pair(rt, in.d->keys[k], in.d->vals[k]));
    return iter_of(rt, l);
}

LAZY(items, eager_items)

static jv f_join(jrt *rt, const jnode *at, jv in, jargs *a) {
    BIND("join", 0, "d", "attribute");
    jlist *items = jv_iterate(rt, at, in);
    attrpath p = g[1] ? attr_parts(rt, v[1]) : (attrpath){0};
    jv sep = g[0] ? jv_to_str(rt, at, v[0]) : jv_str(rt->a, "", 0);
    jbuf b;
    jmem_buf_init(&b, rt->a, 0);
    jrt_work(rt, at, items->n);
    for (size_t k = 0; k < items->n; k++) {
        jv item = p.n ? attr_get(rt, at, &p, items->v[k], jv_undef(), false) : items->v[k];
        if (k) jmem_put(&b, sep.s->s, sep.s->len);
        jv_write_str(rt, at, &b, item);
    }
    return jv_str_result(rt, &b, false);
}

static jv f_list(jrt *rt, const jnode *at, jv in, jargs *a) {
    no_args(rt, at, "list", a);
    jlist *l = jv_iterate(rt, at, in);
    jv out = jv_list_new(rt->a, l->n);
    for (size_t k = 0; k < l->n; k++) jv_list_push(rt->a, out.l, l->v[k]);
    return out;
}

static jv f_lower(jrt *rt, const jnode *at, jv in, jargs *a) {
    no_args(rt, at, "lower", a);
    return jv_str_lower(rt, soft_str(rt, at, in));
}

static jv f_upper(jrt *rt, const jnode *at, jv in, jargs *a) {
    no_args(rt, at, "upper", a);
    return jv_str_upper(rt, soft_str(rt, at, in));
}

static jv eager_map(jrt *rt, const jnode *at, jv in, jargs *a) {
    jlist *out = jv_list_new(rt->a, 0).l;
    if (!truthy(rt, at, in)) return iter_of(rt, out);
    jlist *items = jv_iterate(rt, at, in);
    int attr_kw = -1, dflt_kw = -1;
    for (int k = 0; k < a->nkw; k++) {
        if (!strcmp(a->kwn[k], "attribute")) attr_kw = k;
        if (!strcmp(a->kwn[k], "default")) dflt_kw = k;
    }
    if (!a->npos && attr_kw >= 0) {
        for (int k = 0; k < a->nkw; k++)
            if (k != attr_kw && k != dflt_kw)
                jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                         "FilterArgumentError: Unexpected keyword argument '%s'", a->kwn[k]);
        attrpath p = attr_parts(rt, a->kwv[attr_kw]);
        jv dflt = dflt_kw >= 0 ? a->kwv[dflt_kw] : jv_none();
        bool has = dflt_kw >= 0 && dflt.k != JV_NONE;
        for (size_t k = 0; k < items->n; k++)
            jv_list_push(rt->a, out, attr_get(rt, at, &p, items->v[k], dflt, has));
        return iter_of(rt, out);
    }
    if (!a->npos)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "FilterArgumentError: map requires a filter argument");
    jstr *name = jrt_arg_str(rt, at, "map", a->pos[0]);
    jargs rest = *a;
    rest.pos = a->pos + 1;
    rest.npos = a->npos - 1;
    for (size_t k = 0; k < items->n; k++) {
        jrt_work(rt, at, 1);
        jv_list_push(rt->a, out, jinja_filter(rt, at, name->s, items->v[k], &rest));
    }
    return iter_of(rt, out);
}

LAZY(map, eager_map)

static jv min_max(jrt *rt, const jnode *at, jv in, jargs *a, bool max) {
    BIND(max ? "max" : "min", 0, "case_sensitive", "attribute");
    jlist *items = jv_iterate(rt, at, in);
    if (!items->n) return jv_undef_hint(rt->a, "No aggregated item, sequence was empty.");
    bool cs = g[0] && truthy(rt, at, v[0]);
    attrpath p = g[1] ? attr_parts(rt, v[1]) : (attrpath){0};
    jv best = items->v[0];
    jv best_key = attr_get(rt, at, &p, best, jv_undef(), false);
    if (!cs) best_key = ignore_case(rt, best_key);
    for (size_t k = 1; k < items->n; k++) {
        jv key = attr_get(rt, at, &p, items->v[k], jv_undef(), false);
        if (!cs) key = ignore_case(rt, key);
        int c = jv_compare(rt, at, key, best_key, max ? ">" : "<");
        if (max ? c == 1 : c == -1) {
            best = items->v[k];
            best_key = key;
        }
    }
    return best;
}
static jv f_max(jrt *rt, const jnode *at, jv in, jargs *a) { return min_max(rt, at, in, a, true); }
static jv f_min(jrt *rt, const jnode *at, jv in, jargs *a) { return min_max(rt, at, in, a, false); }

/* select / reject / selectattr / rejectattr */
static jv select_common(jrt *rt, const jnode *at, jv in, jargs *a, bool reject, bool attr) {
    jlist *out = jv_list_new(rt->a, 0).l;
    if (!truthy(rt, at, in)) return iter_of(rt, out);
    int off = 0;
    attrpath p = {0};
    if (attr) {
        if (!a->npos)
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "FilterArgumentError: Missing parameter for attribute name");
        p = attr_parts(rt, a->pos[0]);
        off = 1;
    }
    const char *test = NULL;
    jargs rest = *a;
    if (a->npos > off) {
        test = jrt_arg_str(rt, at, "select", a->pos[off])->s;
        rest.pos = a->pos + off + 1;
        rest.npos = a->npos - off - 1;
    }
    jlist *items = jv_iterate(rt, at, in);
    for (size_t k = 0; k < items->n; k++) {
        jrt_work(rt, at, 1);
        jv x = attr ? attr_get(rt, at, &p, items->v[k], jv_undef(), false) : items->v[k];
        bool ok = test ? jinja_test(rt, at, test, x, &rest) : truthy(rt, at, x);
        if (ok != reject) jv_list_push(rt->a, out, items->v[k]);
    }
    return iter_of(rt, out);
}
static jv eager_select(jrt *rt, const jnode *at, jv in, jargs *a) {
    return select_common(rt, at, in, a, false, false);
}
static jv eager_reject(jrt *rt, const jnode *at, jv in, jargs *a) {
    return select_common(rt, at, in, a, true, false);
}
static jv eager_selectattr(jrt *rt, const jnode *at, jv in, jargs *a) {
    return select_common(rt, at, in, a, false, true);
}
static jv eager_rejectattr(jrt *rt, const jnode *at, jv in, jargs *a) {
    return select_common(rt, at, in, a, true, true);
}
LAZY(select, eager_select)
LAZY(reject, eager_reject)
LAZY(selectattr, eager_selectattr)
LAZY(rejectattr, eager_rejectattr)

static jv f_replace(jrt *rt, const jnode *at, jv in, jargs *a) {
    BIND("replace", 2, "old", "new", "count");
    int64_t count = g[2] && v[2].k != JV_NONE ? jrt_arg_int(rt, at, "replace", v[2]) : -1;
    jv s = jv_to_str(rt, at, in);
    s.markup = 0; /* str(s).replace(...) */
    return jv_str_replace(rt, at, s, jv_to_str(rt, at, v[0]).s, jv_to_str(rt, at, v[1]).s, count);
}

static jv f_reverse(jrt *rt, const jnode *at, jv in, jargs *a) {
    no_args(rt, at, "reverse", a);
    if (in.k == JV_STR) return jrt_op_slice(rt, at, in, jv_none(), jv_none(), jv_int(-1));
    bool reversible = in.k == JV_LIST || in.k == JV_TUPLE || in.k == JV_DICT ||
                      in.k == JV_VIEW || in.k == JV_RANGE || in.k == JV_UNDEF;
    if (!reversible && in.k != JV_ITER)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "FilterArgumentError: argument must be iterable");
    jlist *l = jv_iterate(rt, at, in);
    jlist *r = jv_list_new(rt->a, l->n).l;
    for (size_t k = l->n; k > 0; k--) jv_list_push(rt->a, r, l->v[k - 1]);
    if (!reversible) return as_list(r); /* list(value) reversed */
    return jv_iter_new(rt->a, r, in.k == JV_LIST ? "list_reverseiterator" : "reversed");
}

static jv f_round(jrt *rt, const jnode *at, jv in, jargs *a) {
    BIND("round", 0, "precision", "method");
    int64_t prec = g[0] ? jrt_arg_int(rt, at, "round", v[0]) : 0;
    const char *method = "common";
    if (g[1]) {
        if (v[1].k != JV_STR || (strcmp(v[1].s->s, "common") && strcmp(v[1].s->s, "ceil") &&
                                 strcmp(v[1].s->s, "floor")))
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "FilterArgumentError: method must be common, ceil or floor");
        method = v[1].s->s;
    }
    if (!jv_is_number(in))
        jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                 "TypeError: type %s doesn't define __round__ method", jv_typename(in));
    if (!strcmp(method, "common")) {
        if (in.k != JV_FLOAT) {
            int64_t x = in.k == JV_BOOL ? in.b : in.i;
            if (prec >= 0) return jv_int(x);
            jrt_fail(rt, at, EM_ERR_UNSUPPORTED,
                     "unsupported: round() of an int to negative digits");
        }
        if (!isfinite(in.f)) return in;
        if (prec < 0 || prec > 300)
            jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: round() to %lld digits",
                     (long long)prec);
        /* glibc rounds the exact binary value half-to-even, as Python's round() does */
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)prec, in.f);
        return jv_float(strtod(buf, NULL));
    }
    if (prec < 0 || prec > 18)
        jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: round(..., %lld, '%s')", (long long)prec,
                 method);
    int64_t scale = 1;
    for (int64_t k = 0; k < prec; k++) scale *= 10;
    double x = jv_as_double(in) * (double)scale;
    if (in.k != JV_FLOAT) {
        int64_t i = in.k == JV_BOOL ? in.b : in.i, r;
        if (__builtin_mul_overflow(i, scale, &r))
            jrt_fail(rt, at, EM_ERR_OVERFLOW, "integer overflow in round()");
        return jv_float((double)r / (double)scale);
    }
    if (!isfinite(x))
        jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                 "OverflowError: cannot convert float infinity to integer");
    double r = method[0] == 'c' ? ceil(x) : floor(x);
    if (fabs(r) >= 9007199254740992.0)
        jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: round() of a value this large");
    return jv_float(r / (double)scale);
}

static jv f_sort(jrt *rt, const jnode *at, jv in, jargs *a) {
    BIND("sort", 0, "reverse", "case_sensitive", "attribute");
    bool reverse = g[0] && truthy(rt, at, v[0]), cs = g[1] && truthy(rt, at, v[1]);
    /* make_multi_attrgetter: "a,b" sorts by several keys; the key is always a list */
    jlist *paths = jv_list_new(rt->a, 1).l;
    if (g[2] && v[2].k == JV_STR)
        paths = jv_str_split(rt, at, v[2], jv_cstr(rt->a, ","), -1, false);
    else
        jv_list_push(rt->a, paths, g[2] ? v[2] : jv_none());
    jlist *items = jv_iterate(rt, at, in);
    size_t n = items->n;
    sort_item *si = jmem_alloc(rt->a, (n + 1) * sizeof *si);
    for (size_t k = 0; k < n; k++) {
        jv key = jv_list_new(rt->a, paths->n);
        for (size_t q = 0; q < paths->n; q++) {
            attrpath p = attr_parts(rt, paths->v[q]);
            jv x = attr_get(rt, at, &p, items->v[k], jv_undef(), false);
            jv_list_push(rt->a, key.l, cs ? x : ignore_case(rt, x));
        }
        si[k].key = key;
        si[k].val = items->v[k];
    }
    sort_items(rt, at, si, n, reverse);
    jv out = jv_list_new(rt->a, n);
    for (size_t k = 0; k < n; k++) jv_list_push(rt->a, out.l, si[k].val);
    return out;
}

static jv f_string(jrt *rt, const jnode *at, jv in, jargs *a) {
    no_args(rt, at, "string", a);
    return soft_str(rt, at, in);
}

static jv f_sum(jrt *rt, const jnode *at, jv in, jargs *a) {
    BIND("sum", 0, "attribute", "start");
    jv acc = g[1] ? v[1] : jv_int(0);
    if (acc.k == JV_STR)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                 "TypeError: sum() can't sum strings [use ''.join(seq) instead]");
    attrpath p = g[0] ? attr_parts(rt, v[0]) : (attrpath){0};
    jlist *items = jv_iterate(rt, at, in);
    for (size_t k = 0; k < items->n; k++)
        acc = jrt_op_binary(rt, at, JO_ADD, acc,
                            attr_get(rt, at, &p, items->v[k], jv_undef(), false));
    return acc;
}

static bool title_sep(uint32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || ju_isspace(c);
}

static jv f_title(jrt *rt, const jnode *at, jv in, jargs *a) {
    no_args(rt, at, "title", a);
    jv s = soft_str(rt, at, in);
    const char *p = s.s->s;
    size_t n = s.s->len, i = 0;
    jbuf b;
    jmem_buf_init(&b, rt->a, 0);
    while (i < n) {
        size_t start = i;
        uint32_t c = ju_decode(p, n, &i);
        bool sep = title_sep(c);
        size_t end = i;
        while (end < n) {
            size_t j = end;
            if (title_sep(ju_decode(p, n, &j)) != sep) break;
            end = j;
        }
        if (sep) {
            jmem_put(&b, p + start, end - start);
        } else {
            ju_put_upper(&b, c);
            ju_lower_str(&b, p + i, end - i);
        }
        i = end;
    }
    return jv_str_result(rt, &b, false);
}

static jv f_tojson(jrt *rt, const jnode *at, jv in, jargs *a) {
    BIND("tojson", 0, "ensure_ascii", "indent", "separators", "sort_keys");
    jrt_json_opts o = {.indent = -1, .item_sep = ", ", .key_sep = ": "};
    o.ensure_ascii = g[0] && truthy(rt, at, v[0]);
    o.sort_keys = g[3] && truthy(rt, at, v[3]);
    if (g[1] && v[1].k != JV_NONE) {
        if (v[1].k == JV_STR) {
            o.indent_str = v[1].s->s;
        } else if (v[1].k == JV_INT || v[1].k == JV_BOOL) {
            int64_t ind = v[1].k == JV_BOOL ? v[1].b : v[1].i;
            if (ind > 1000) jrt_fail(rt, at, EM_ERR_OVERFLOW, "tojson indent too large");
            o.indent = ind < 0 ? 0 : (int)ind;
        } else {
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "TypeError: can't multiply sequence by non-int of type '%s'",
                     jv_typename(v[1]));
        }
        o.item_sep = ",";
    }
    if (g[2] && v[2].k != JV_NONE) {
        jlist *seps = jv_iterate(rt, at, v[2]);
        if (seps->n != 2 || seps->v[0].k != JV_STR || seps->v[1].k != JV_STR)
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "ValueError: separators must be a pair of strings");
        o.item_sep = seps->v[0].s->s;
        o.key_sep = seps->v[1].s->s;
    }
    jbuf b;
    jmem_buf_init(&b, rt->a, 0);
    jrt_json_dump(rt, at, &b, in, &o);
    return jv_str_result(rt, &b, false);
}

static jv f_trim(jrt *rt, const jnode *at, jv in, jargs *a) {
    BIND("trim", 0, "chars");
    jv s = soft_str(rt, at, in);
    if (g[0] && v[0].k == JV_STR && s.markup)
        jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: trim(chars) on a Markup string");
    return jv_str_strip(rt, at, s, g[0] ? v[0] : jv_none(), 3);
}

static jv f_truncate(jrt *rt, const jnode *at, jv in, jargs *a) {
    BIND("truncate", 0, "length", "killwords", "end", "leeway");
    int64_t length = g[0] ? jrt_arg_int(rt, at, "truncate", v[0]) : 255;
    bool killwords = g[1] && truthy(rt, at, v[1]);
    jstr *end = g[2] ? jrt_arg_str(rt, at, "truncate", v[2]) : jv_cstr(rt->a, "...").s;
    int64_t leeway = g[3] && v[3].k != JV_NONE ? jrt_arg_int(rt, at, "truncate", v[3]) : 5;
    if (length < (int64_t)end->ncp || leeway < 0)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "AssertionError: expected length >= %zu, got %lld",
                 end->ncp, (long long)length);
    if (in.k != JV_STR)
        jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: truncate of a %s", jv_typename(in));
    if ((int64_t)in.s->ncp <= length + leeway) return in;
    jv head = jrt_op_slice(rt, at, in, jv_none(), jv_int(length - (int64_t)end->ncp), jv_none());
    jbuf b;
    jmem_buf_init(&b, rt->a, 0);
    if (killwords) {
        jmem_put(&b, head.s->s, head.s->len);
    } else {
        jlist *parts = jv_str_split(rt, at, head, jv_cstr(rt->a, " "), 1, true);
        jmem_put(&b, parts->v[0].s->s, parts->v[0].s->len);
    }
    jmem_put(&b, end->s, end->len);
    return jv_str_result(rt, &b, in.markup);
}

static jv eager_unique(jrt *rt, const jnode *at, jv in, jargs *a) {
    BIND("unique", 0, "case_sensitive", "attribute");
    bool cs = g[0] && truthy(rt, at, v[0]);
    attrpath p = g[1] ? attr_parts(rt, v[1]) : (attrpath){0};
    jlist *items = jv_iterate(rt, at, in);
    jv seen = jv_dict_new(rt->a, items->n);
    jlist *out = jv_list_new(rt->a, 0).l;
    for (size_t k = 0; k < items->n; k++) {
        jv key = attr_get(rt, at, &p, items->v[k], jv_undef(), false);
        if (!cs) key = ignore_case(rt, key);
        if (!jv_hashable(key) || key.k == JV_UNDEF)
            jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: unhashable type: '%s'",
                     jv_typename(key));
        jrt_work(rt, at, seen.d->n + 1);
        if (!jv_dict_get(seen.d, key)) {
            jv_dict_set(rt, seen.d, key, jv_none());
            jv_list_push(rt->a, out, items->v[k]);
        }
    }
    return iter_of(rt, out);
}

LAZY(unique, eager_unique)

static jv f_wordcount(jrt *rt, const jnode *at, jv in, jargs *a) {
    no_args(rt, at, "wordcount", a);
    jv s = soft_str(rt, at, in);
    int64_t words = 0;
    bool inword = false;
    for (size_t i = 0; i < s.s->len;) {
        uint32_t c = ju_decode(s.s->s, s.s->len, &i);
        bool w = c == '_' || ju_isalnum(c);
        if (w && !inword) words++;
        inword = w;
    }
    return jv_int(words);
}

static const struct {
    const char *name;
    filter_fn fn;
} FILTERS[] = {
    {"abs", f_abs},          {"attr", f_attr},         {"capitalize", f_capitalize},
    {"center", f_center},    {"count", f_length},      {"d", f_default},
    {"default", f_default},  {"dictsort", f_dictsort}, {"e", f_escape},
    {"escape", f_escape},    {"first", f_first},       {"float", f_float},
    {"forceescape", f_forceescape}, {"format", f_format}, {"indent", f_indent},
    {"int", f_int},          {"items", f_items},       {"join", f_join},
    {"last", f_last},        {"length", f_length},     {"list", f_list},
    {"lower", f_lower},      {"map", f_map},           {"max", f_max},
    {"min", f_min},          {"reject", f_reject},     {"rejectattr", f_rejectattr},
    {"replace", f_replace},  {"reverse", f_reverse},   {"round", f_round},
    {"safe", f_safe},        {"select", f_select},     {"selectattr", f_selectattr},
    {"sort", f_sort},        {"string", f_string},     {"sum", f_sum},
    {"title", f_title},      {"tojson", f_tojson},     {"trim", f_trim},
    {"truncate", f_truncate}, {"unique", f_unique},    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

jv jinja_filter(jrt *rt, const jnode *at, const char *name, jv in, jargs *a) {
    jrt_work(rt, at, 1);
    /* map('map', 'map', ...) nests filter calls as deep as the argument list is long */
    if (++rt->depth > rt->lim->max_depth)
        jrt_fail(rt, at, EM_ERR_OVERFLOW,
                 "RecursionError: filters nested more than %d deep (limit)", rt->lim->max_depth);
    for (size_t k = 0; k < sizeof FILTERS / sizeof FILTERS[0]; k++)
        if (!strcmp(FILTERS[k].name, name)) {
            jv r = FILTERS[k].fn(rt, at, in, a);
            rt->depth--;
            return r;
        }
    if (jinja_has_filter(name))
        jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: the '%s' filter", name);
    jrt_fail(rt, at, EM_ERR_FORMAT, "TemplateRuntimeError: No filter named '%s'.", name);
}

/* Chat templates: values with the behaviour of the Python objects jinja2 holds — truthiness,
 * ==, ordering, len(), iteration, str() and repr() — and jinja2's Undefined. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/jinja/jinja.h"

/* ---- constructors ---- */

jv jv_str(jarena *a, const char *s, size_t n) {
    jstr *p = jmem_alloc(a, sizeof *p + n + 1);
    p->len = n;
    if (n) memcpy(p->s, s, n);
    p->s[n] = 0;
    p->ncp = ju_count(s, n);
    jv v = {0};
    v.k = JV_STR;
    v.s = p;
    return v;
}

jv jv_cstr(jarena *a, const char *s) { return jv_str(a, s, strlen(s)); }

jv jv_str_buf(jbuf *b) {
    jv v = jv_str(b->a, b->p ? b->p : "", b->n);
    b->n = 0;
    return v;
}

static jv seq_new(jarena *a, size_t cap, uint8_t kind) {
    jlist *l = jmem_alloc(a, sizeof *l);
    l->n = 0;
    l->cap = cap;
    l->v = cap ? jmem_alloc(a, cap * sizeof(jv)) : NULL;
    jv v = {0};
    v.k = kind;
    v.l = l;
    return v;
}
jv jv_list_new(jarena *a, size_t cap) { return seq_new(a, cap, JV_LIST); }
jv jv_tuple_new(jarena *a, size_t cap) { return seq_new(a, cap, JV_TUPLE); }

void jv_list_push(jarena *a, jlist *l, jv v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        l->v = jmem_grow(a, l->v, l->n * sizeof(jv), cap * sizeof(jv));
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

jv jv_dict_new(jarena *a, size_t cap) {
    jdict *d = jmem_alloc(a, sizeof *d);
    d->n = 0;
    d->cap = cap;
    d->keys = cap ? jmem_alloc(a, cap * sizeof(jv)) : NULL;
    d->vals = cap ? jmem_alloc(a, cap * sizeof(jv)) : NULL;
    jv v = {0};
    v.k = JV_DICT;
    v.d = d;
    return v;
}

jv jv_iter_new(jarena *a, jlist *items, const char *pyname) {
    jiter *it = jmem_zalloc(a, sizeof *it);
    it->items = items;
    it->pyname = pyname;
    jv v = {0};
    v.k = JV_ITER;
    v.it = it;
    return v;
}

static jv undef_make(jarena *a, uint8_t kind, const char *name, const char *obj, jv key) {
    jundef *u = jmem_zalloc(a, sizeof *u);
    u->kind = kind;
    u->name = name;
    u->obj = obj;
    u->key = key;
    jv v = {0};
    v.k = JV_UNDEF;
    v.u = u;
    return v;
}

/* jinja2's object_type_repr(): how an undefined message names the object. */
static const char *object_type_repr(jv v) {
    switch (v.k) {
    case JV_NONE: return "None";
    case JV_STR: return v.markup ? "markupsafe.Markup object" : "str object";
    case JV_NS: return "transformers.utils.chat_template_utils.TemplateNamespace object";
    case JV_LOOP: return "jinja2.runtime.LoopContext object";
    case JV_MACRO: return "jinja2.runtime.Macro object";
    case JV_UNDEF: return "jinja2.runtime.Undefined object";
    default: break;
    }
    static const char *const names[JV_KIND_COUNT] = {
        [JV_BOOL] = "bool object",   [JV_INT] = "int object",     [JV_FLOAT] = "float object",
        [JV_LIST] = "list object",   [JV_TUPLE] = "tuple object", [JV_DICT] = "dict object",
        [JV_FUNC] = "builtin_function_or_method object",           [JV_ITER] = "generator object",
        [JV_VIEW] = "dict_items object",                            [JV_RANGE] = "range object",
    };
    return names[v.k] ? names[v.k] : "object";
}

jv jv_undef_name(jarena *a, const char *name) {
    return undef_make(a, JU_NAME, name, NULL, jv_undef());
}
jv jv_undef_attr(jarena *a, jv obj, const char *name) {
    return undef_make(a, JU_ATTR, name, object_type_repr(obj), jv_undef());
}
jv jv_undef_item(jarena *a, jv obj, jv key) {
    return undef_make(a, JU_ITEM, NULL, object_type_repr(obj), key);
}
jv jv_undef_hint(jarena *a, const char *hint) {
    return undef_make(a, JU_HINT, hint, NULL, jv_undef());
}
jv jv_undef_unsafe(jarena *a, jv obj, const char *attr) {
    return undef_make(a, JU_UNSAFE, attr, jv_typename(obj), jv_undef());
}

/* ---- dicts ---- */

static bool key_equal(jv a, jv b) {
    if (a.k == JV_STR && b.k == JV_STR)
        return a.s->len == b.s->len && !memcmp(a.s->s, b.s->s, a.s->len);
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.k != JV_FLOAT && b.k != JV_FLOAT) {
            int64_t x = a.k == JV_BOOL ? a.b : a.i, y = b.k == JV_BOOL ? b.b : b.i;
            return x == y;
        }
        return jv_as_double(a) == jv_as_double(b);
    }
    if (a.k != b.k) return false;
    if (a.k == JV_NONE) return true;
    if (a.k == JV_TUPLE) {
        if (a.l->n != b.l->n) return false;
        for (size_t k = 0; k < a.l->n; k++)
            if (!key_equal(a.l->v[k], b.l->v[k])) return false;
        return true;
    }
    return false;
}

jv *jv_dict_get(jdict *d, jv key) {
    for (size_t k = 0; k < d->n; k++)
        if (key_equal(d->keys[k], key)) return &d->vals[k];
    return NULL;
}

jv *jv_dict_get_str(jdict *d, const char *key, size_t n) {
    for (size_t k = 0; k < d->n; k++) {
        jv kk = d->keys[k];
        if (kk.k == JV_STR && kk.s->len == n && !memcmp(kk.s->s, key, n)) return &d->vals[k];
    }
    return NULL;
}

void jv_dict_set(jrt *rt, jdict *d, jv key, jv val) {
    jv *slot = jv_dict_get(d, key);
    if (slot) {
        *slot = val;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        d->keys = jmem_grow(rt->a, d->keys, d->n * sizeof(jv), cap * sizeof(jv));
        d->vals = jmem_grow(rt->a, d->vals, d->n * sizeof(jv), cap * sizeof(jv));
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
}

/* ---- classification ---- */

const char *jv_typename(jv v) {
    switch (v.k) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return v.markup ? "Markup" : "str";
    case JV_LIST: return "list";
    case JV_TUPLE: return "tuple";
    case JV_DICT: return "dict";
    case JV_NS: return "TemplateNamespace";
    case JV_FUNC: return v.fn->owner ? "builtin_function_or_method" : "function";
    case JV_MACRO: return "Macro";
    case JV_LOOP: return "LoopContext";
    case JV_ITER: return v.it->pyname;
    case JV_VIEW: return v.vw->which == 0 ? "dict_keys" : v.vw->which == 1 ? "dict_values"
                                                                             : "dict_items";
    case JV_RANGE: return "range";
    }
    return "object";
}

bool jv_is_str(jv v) { return v.k == JV_STR; }
bool jv_is_number(jv v) { return v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL; }
double jv_as_double(jv v) {
    return v.k == JV_FLOAT ? v.f : v.k == JV_BOOL ? (double)v.b : (double)v.i;
}

static int64_t range_len(const jrange *r) {
    if (r->step > 0 && r->start < r->stop)
        return (int64_t)(((uint64_t)r->stop - (uint64_t)r->start - 1) / (uint64_t)r->step + 1);
    if (r->step < 0 && r->start > r->stop)
        return (int64_t)(((uint64_t)r->start - (uint64_t)r->stop - 1) / (uint64_t)(-r->step) + 1);
    return 0;
}

bool jv_truthy(jrt *rt, const jnode *at, jv v) {
    switch (v.k) {
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL: return v.b;
    case JV_INT: return v.i != 0;
    case JV_FLOAT: return v.f != 0.0;
    case JV_STR: return v.s->len > 0;
    case JV_LIST:
    case JV_TUPLE: return v.l->n > 0;
    case JV_DICT: return v.d->n > 0;
    case JV_VIEW: return v.vw->d->n > 0;
    case JV_RANGE: return range_len(v.r) > 0;
    case JV_LOOP: return v.lp->items->n > 0;
    default: return true; /* namespaces, callables, iterators */
    }
    (void)rt;
    (void)at;
}

int64_t jv_len(jrt *rt, const jnode *at, jv v) {
    switch (v.k) {
    case JV_UNDEF: return 0;
    case JV_STR: return (int64_t)v.s->ncp;
    case JV_LIST:
    case JV_TUPLE: return (int64_t)v.l->n;
    case JV_DICT: return (int64_t)v.d->n;
    case JV_VIEW: return (int64_t)v.vw->d->n;
    case JV_RANGE: return range_len(v.r);
    case JV_LOOP: return (int64_t)v.lp->items->n;
    default: break;
    }
    jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: object of type '%s' has no len()",
             jv_typename(v));
}

/* ---- equality and ordering ---- */

static int num_cmp(jv a, jv b) {
    if (a.k != JV_FLOAT && b.k != JV_FLOAT) {
        int64_t x = a.k == JV_BOOL ? a.b : a.i, y = b.k == JV_BOOL ? b.b : b.i;
        return x < y ? -1 : x > y;
    }
    if (a.k == JV_FLOAT && b.k == JV_FLOAT) {
        if (isnan(a.f) || isnan(b.f)) return 2;
        return a.f < b.f ? -1 : a.f > b.f;
    }
    /* int against float, exactly (Python does not round the int) */
    bool swap = a.k == JV_FLOAT;
    int64_t i = swap ? (b.k == JV_BOOL ? b.b : b.i) : (a.k == JV_BOOL ? a.b : a.i);
    double f = swap ? a.f : b.f;
    int r;
    if (isnan(f))
        return 2;
    else if (f >= 9223372036854775808.0)
        r = -1;
    else if (f < -9223372036854775808.0)
        r = 1;
    else {
        double fl = floor(f);
        int64_t fi = (int64_t)fl;
        if (i != fi)
            r = i < fi ? -1 : 1;
        else
            r = f > fl ? -1 : 0;
    }
    return swap ? -r : r;
}

bool jv_equal(jrt *rt, jv a, jv b) {
    jrt_work(rt, NULL, 1);
    if (jv_is_number(a) && jv_is_number(b)) return num_cmp(a, b) == 0;
    if (a.k != b.k) return false; /* [1] != (1,), 'a' != 1 */
    switch (a.k) {
    case JV_UNDEF:
    case JV_NONE: return true;
    case JV_STR: return a.s->len == b.s->len && !memcmp(a.s->s, b.s->s, a.s->len);
    case JV_LIST:
    case JV_TUPLE:
        if (a.l == b.l) return true;
        if (a.l->n != b.l->n) return false;
        rt->depth++;
        if (rt->depth > rt->lim->max_depth)
            jrt_fail(rt, NULL, EM_ERR_OVERFLOW, "RecursionError: values nested too deep");
        for (size_t k = 0; k < a.l->n; k++)
            if (!jv_equal(rt, a.l->v[k], b.l->v[k])) {
                rt->depth--;
                return false;
            }
        rt->depth--;
        return true;
    case JV_DICT:
        if (a.d == b.d) return true;
        if (a.d->n != b.d->n) return false;
        rt->depth++;
        if (rt->depth > rt->lim->max_depth)
            jrt_fail(rt, NULL, EM_ERR_OVERFLOW, "RecursionError: values nested too deep");
        for (size_t k = 0; k < a.d->n; k++) {
            jv *o = jv_dict_get(b.d, a.d->keys[k]);
            if (!o || !jv_equal(rt, a.d->vals[k], *o)) {
                rt->depth--;
                return false;
            }
        }
        rt->depth--;
        return true;
    case JV_RANGE: {
        int64_t la = range_len(a.r), lb = range_len(b.r);
        if (la != lb) return false;
        if (la == 0) return true;
        if (a.r->start != b.r->start) return false;
        return la == 1 || a.r->step == b.r->step;
    }
    case JV_VIEW:
        jrt_fail(rt, NULL, EM_ERR_UNSUPPORTED, "unsupported: comparing dict views with ==");
    case JV_NS: return a.d == b.d;
    case JV_FUNC: return a.fn == b.fn;
    case JV_MACRO: return a.m == b.m;
    case JV_LOOP: return a.lp == b.lp;
    case JV_ITER: return a.it == b.it;
    default: return false;
    }
}

int jv_compare(jrt *rt, const jnode *at, jv a, jv b, const char *opname) {
    jrt_work(rt, at, 1);
    if (a.k == JV_UNDEF) jv_raise_undefined(rt, at, a);
    if (b.k == JV_UNDEF) jv_raise_undefined(rt, at, b);
    if (jv_is_number(a) && jv_is_number(b)) return num_cmp(a, b);
    if (a.k == JV_STR && b.k == JV_STR) {
        size_t n = a.s->len < b.s->len ? a.s->len : b.s->len;
        int c = memcmp(a.s->s, b.s->s, n);
        if (c) return c < 0 ? -1 : 1;
        return a.s->len < b.s->len ? -1 : a.s->len > b.s->len;
    }
    if ((a.k == JV_LIST && b.k == JV_LIST) || (a.k == JV_TUPLE && b.k == JV_TUPLE)) {
        size_t n = a.l->n < b.l->n ? a.l->n : b.l->n;
        for (size_t k = 0; k < n; k++)
            if (!jv_equal(rt, a.l->v[k], b.l->v[k])) {
                rt->depth++;
                if (rt->depth > rt->lim->max_depth)
                    jrt_fail(rt, at, EM_ERR_OVERFLOW, "RecursionError: values nested too deep");
                int c = jv_compare(rt, at, a.l->v[k], b.l->v[k], opname);
                rt->depth--;
                return c;
            }
        return a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
    }
    jrt_fail(rt, at, EM_ERR_INVALID_ARG,
             "TypeError: '%s' not supported between instances of '%s' and '%s'", opname,
             jv_typename(a), jv_typename(b));
}

/* Tuples can nest as deep as a loop makes them; past this depth they count as unhashable (a
 * clear TypeError) so that hashing and key comparison never recurse without bound. */
enum { HASH_MAX_DEPTH = 100 };

static bool hashable(jv v, int depth) {
    switch (v.k) {
    case JV_NONE:
    case JV_BOOL:
    case JV_INT:
    case JV_FLOAT:
    case JV_STR:
    case JV_UNDEF: return true;
    case JV_TUPLE:
        if (depth >= HASH_MAX_DEPTH) return false;
        for (size_t k = 0; k < v.l->n; k++)
            if (!hashable(v.l->v[k], depth + 1)) return false;
        return true;
    default: return false;
    }
}

bool jv_hashable(jv v) { return hashable(v, 0); }

/* ---- iteration ---- */

jlist *jv_iterate(jrt *rt, const jnode *at, jv v) {
    switch (v.k) {
    case JV_UNDEF: return jv_list_new(rt->a, 0).l;
    case JV_LIST:
    case JV_TUPLE: return v.l;
    case JV_STR: {
        jlist *l = jv_list_new(rt->a, v.s->ncp).l;
        jrt_work(rt, at, v.s->ncp);
        for (size_t i = 0; i < v.s->len;) {
            size_t start = i;
            ju_decode(v.s->s, v.s->len, &i);
            jv_list_push(rt->a, l, jv_str(rt->a, v.s->s + start, i - start));
        }
        return l;
    }
    case JV_DICT: {
        jlist *l = jv_list_new(rt->a, v.d->n).l;
        for (size_t k = 0; k < v.d->n; k++) jv_list_push(rt->a, l, v.d->keys[k]);
        return l;
    }
    case JV_VIEW: {
        jdict *d = v.vw->d;
        jlist *l = jv_list_new(rt->a, d->n).l;
        for (size_t k = 0; k < d->n; k++) {
            if (v.vw->which == 0) {
                jv_list_push(rt->a, l, d->keys[k]);
            } else if (v.vw->which == 1) {
                jv_list_push(rt->a, l, d->vals[k]);
            } else {
                jv t = jv_tuple_new(rt->a, 2);
                jv_list_push(rt->a, t.l, d->keys[k]);
                jv_list_push(rt->a, t.l, d->vals[k]);
                jv_list_push(rt->a, l, t);
            }
        }
        return l;
    }
    case JV_RANGE: {
        int64_t n = range_len(v.r);
        jrt_work(rt, at, (uint64_t)n);
        jlist *l = jv_list_new(rt->a, (size_t)n).l;
        for (int64_t k = 0; k < n; k++) jv_list_push(rt->a, l, jv_int(v.r->start + k * v.r->step));
        return l;
    }
    case JV_ITER: {
        jiter *it = v.it;
        jv_iter_force(rt, at, it);
        jlist *l = jv_list_new(rt->a, it->items->n - it->pos).l;
        for (size_t k = it->pos; k < it->items->n; k++) jv_list_push(rt->a, l, it->items->v[k]);
        it->pos = it->items->n;
        return l;
    }
    default: break;
    }
    jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: '%s' object is not iterable",
             jv_typename(v));
}

void jv_iter_force(jrt *rt, const jnode *at, jiter *it) {
    if (it->broken)
        jrt_fail(rt, at, EM_ERR_UNSUPPORTED,
                 "unsupported: reusing a %s that a {%% break %%} left half consumed", it->pyname);
    if (it->items) return;
    jlist *(*run)(jrt *, jiter *) = it->run;
    it->run = NULL;
    it->items = jv_list_new(rt->a, 0).l; /* what a re-entrant use would see */
    if (run) it->items = run(rt, it);
}

/* ---- str() and repr() ---- */

void jv_write_float(jbuf *b, double f) {
    if (isnan(f)) {
        jmem_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        jmem_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    if (f == 0) {
        jmem_puts(b, signbit(f) ? "-0.0" : "0.0");
        return;
    }
    /* shortest digits that read back as f (what repr() prints) */
    char tmp[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    char digits[24];
    int nd = 0;
    const char *q = tmp;
    bool neg = *q == '-';
    if (neg) q++;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    int e = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (neg) jmem_putc(b, '-');
    if (e >= -4 && e < 16) {
        if (e >= 0) {
            for (int k = 0; k <= e; k++) jmem_putc(b, k < nd ? digits[k] : '0');
            jmem_putc(b, '.');
            if (nd > e + 1)
                jmem_put(b, digits + e + 1, (size_t)(nd - e - 1));
            else
                jmem_putc(b, '0');
        } else {
            jmem_puts(b, "0.");
            for (int k = 0; k < -e - 1; k++) jmem_putc(b, '0');
            jmem_put(b, digits, (size_t)nd);
        }
    } else {
        jmem_putc(b, digits[0]);
        if (nd > 1) {
            jmem_putc(b, '.');
            jmem_put(b, digits + 1, (size_t)(nd - 1));
        }
        jmem_printf(b, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
}

void jv_write_escaped(jbuf *b, const char *s, size_t n) {
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        const char *rep = NULL;
        switch (s[i]) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&#34;"; break;
        case '\'': rep = "&#39;"; break;
        default: continue;
        }
        jmem_put(b, s + start, i - start);
        jmem_puts(b, rep);
        start = i + 1;
    }
    jmem_put(b, s + start, n - start);
}

static void repr_str(jbuf *b, const jstr *s) {
    char quote = '\'';
    if (memchr(s->s, '\'', s->len) && !memchr(s->s, '"', s->len)) quote = '"';
    jmem_putc(b, quote);
    for (size_t i = 0; i < s->len;) {
        size_t start = i;
        uint32_t c = ju_decode(s->s, s->len, &i);
        if (c == (uint32_t)quote || c == '\\') {
            jmem_putc(b, '\\');
            jmem_putc(b, (char)c);
        } else if (c == '\t') {
            jmem_puts(b, "\\t");
        } else if (c == '\n') {
            jmem_puts(b, "\\n");
        } else if (c == '\r') {
            jmem_puts(b, "\\r");
        } else if (c < 0x20 || c == 0x7F) {
            jmem_printf(b, "\\x%02x", c);
        } else if (c < 0x7F) {
            jmem_putc(b, (char)c);
        } else if (ju_isprintable(c)) {
            jmem_put(b, s->s + start, i - start);
        } else if (c <= 0xFF) {
            jmem_printf(b, "\\x%02x", c);
        } else if (c <= 0xFFFF) {
            jmem_printf(b, "\\u%04x", c);
        } else {
            jmem_printf(b, "\\U%08x", c);
        }
    }
    jmem_putc(b, quote);
}

/* Containers being printed, for Python's "[...]" / "{...}" on self-reference. */
typedef struct repr_guard {
    const void *stack[64];
    int n;
} repr_guard;

static void write_repr(jrt *rt, const jnode *at, jbuf *b, jv v, repr_guard *g);

static bool guard_enter(jrt *rt, const jnode *at, repr_guard *g, const void *p) {
    for (int k = 0; k < g->n; k++)
        if (g->stack[k] == p) return false;
    if (g->n == 64 || ++rt->depth > rt->lim->max_depth)
        jrt_fail(rt, at, EM_ERR_OVERFLOW,
                 "RecursionError: maximum recursion depth exceeded while getting the repr "
                 "of an object");
    g->stack[g->n++] = p;
    return true;
}
static void guard_leave(jrt *rt, repr_guard *g) {
    g->n--;
    rt->depth--;
}

static void write_dict_body(jrt *rt, const jnode *at, jbuf *b, const jdict *d, repr_guard *g) {
    if (!guard_enter(rt, at, g, d)) {
        jmem_puts(b, "{...}");
        return;
    }
    jmem_putc(b, '{');
    for (size_t k = 0; k < d->n; k++) {
        if (k) jmem_puts(b, ", ");
        write_repr(rt, at, b, d->keys[k], g);
        jmem_puts(b, ": ");
        write_repr(rt, at, b, d->vals[k], g);
    }
    jmem_putc(b, '}');
    guard_leave(rt, g);
}

_Noreturn static void no_repr(jrt *rt, const jnode *at, jv v) {
    jrt_fail(rt, at, EM_ERR_UNSUPPORTED,
             "unsupported: printing a %s object (Python prints its memory address)",
             jv_typename(v));
}

static void write_repr(jrt *rt, const jnode *at, jbuf *b, jv v, repr_guard *g) {
    jrt_work(rt, at, 1);
    switch (v.k) {
    case JV_UNDEF: jmem_puts(b, "Undefined"); return;
    case JV_NONE: jmem_puts(b, "None"); return;
    case JV_BOOL: jmem_puts(b, v.b ? "True" : "False"); return;
    case JV_INT: jmem_printf(b, "%" PRId64, v.i); return;
    case JV_FLOAT: jv_write_float(b, v.f); return;
    case JV_STR:
        if (v.markup) jmem_puts(b, "Markup(");
        repr_str(b, v.s);
        if (v.markup) jmem_putc(b, ')');
        return;
    case JV_LIST:
    case JV_TUPLE: {
        bool list = v.k == JV_LIST;
        if (!guard_enter(rt, at, g, v.l)) {
            jmem_puts(b, list ? "[...]" : "(...)");
            return;
        }
        jmem_putc(b, list ? '[' : '(');
        for (size_t k = 0; k < v.l->n; k++) {
            if (k) jmem_puts(b, ", ");
            write_repr(rt, at, b, v.l->v[k], g);
        }
        if (!list && v.l->n == 1) jmem_putc(b, ',');
        jmem_putc(b, list ? ']' : ')');
        guard_leave(rt, g);
        return;
    }
    case JV_DICT: write_dict_body(rt, at, b, v.d, g); return;
    case JV_NS:
        jmem_puts(b, "<Namespace ");
        write_dict_body(rt, at, b, v.d, g);
        jmem_putc(b, '>');
        return;
    case JV_LOOP:
        jmem_printf(b, "<LoopContext %" PRId64 "/%zu>", v.lp->index0 + 1, v.lp->items->n);
        return;
    case JV_MACRO: jmem_printf(b, "<Macro '%s'>", v.m->name); return;
    case JV_VIEW: {
        jmem_puts(b, jv_typename(v));
        jmem_putc(b, '(');
        jv l = {0};
        l.k = JV_LIST;
        l.l = jv_iterate(rt, at, v);
        write_repr(rt, at, b, l, g);
        jmem_putc(b, ')');
        return;
    }
    case JV_RANGE:
        if (v.r->step == 1)
            jmem_printf(b, "range(%" PRId64 ", %" PRId64 ")", v.r->start, v.r->stop);
        else
            jmem_printf(b, "range(%" PRId64 ", %" PRId64 ", %" PRId64 ")", v.r->start, v.r->stop,
                      v.r->step);
        return;
    default: no_repr(rt, at, v);
    }
}

void jv_write_repr(jrt *rt, const jnode *at, jbuf *b, jv v) {
    repr_guard g;
    g.n = 0;
    write_repr(rt, at, b, v, &g);
}

void jv_write_str(jrt *rt, const jnode *at, jbuf *b, jv v) {
    switch (v.k) {
    case JV_UNDEF: return;
    case JV_STR: jmem_put(b, v.s->s, v.s->len); return;
    default: jv_write_repr(rt, at, b, v);
    }
}

jv jv_to_str(jrt *rt, const jnode *at, jv v) {
    if (v.k == JV_STR) return v;
    jbuf b;
    jmem_buf_init(&b, rt->a, 0);
    jv_write_str(rt, at, &b, v);
    return jv_str_buf(&b);
}

_Noreturn void jv_raise_undefined(jrt *rt, const jnode *at, jv u) {
    jbuf b;
    jmem_buf_init(&b, rt->a, 0);
    const jundef *d = u.u;
    if (!d) {
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "UndefinedError: a value is undefined");
    }
    if (d->kind == JU_UNSAFE)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                 "SecurityError: access to attribute '%s' of '%s' object is unsafe.", d->name,
                 d->obj);
    switch (d->kind) {
    case JU_NAME:
        repr_str(&b, jv_cstr(rt->a, d->name).s);
        jmem_puts(&b, " is undefined");
        break;
    case JU_ATTR:
        repr_str(&b, jv_cstr(rt->a, d->obj).s);
        jmem_puts(&b, " has no attribute ");
        repr_str(&b, jv_cstr(rt->a, d->name).s);
        break;
    case JU_ITEM:
        jmem_puts(&b, d->obj);
        jmem_puts(&b, " has no element ");
        jv_write_repr(rt, at, &b, d->key);
        break;
    default: jmem_puts(&b, d->name); break;
    }
    jrt_fail(rt, at, EM_ERR_INVALID_ARG, "UndefinedError: %s", b.p ? b.p : "");
}

/* Chat templates: the global functions transformers' environment provides (range, dict,
 * namespace, raise_exception, strftime_now), the methods of dict / list / tuple under the
 * immutable sandbox, and the `loop` object. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "io/jinja/jinja.h"

static jv make_func(jrt *rt, const char *name, const char *owner, jfunc_impl impl, jv self) {
    jfunc *f = jmem_zalloc(rt->a, sizeof *f);
    f->name = name;
    f->owner = owner;
    f->impl = impl;
    f->self = self;
    jv v = {0};
    v.k = JV_FUNC;
    v.fn = f;
    return v;
}

/* ---- globals ---- */

static jv g_range(jrt *rt, const jnode *at, jv self, jargs *a) {
    (void)self;
    if (a->nkw)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: range() takes no keyword arguments");
    if (a->npos < 1 || a->npos > 3)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: range expected 1 to 3 arguments, got %d",
                 a->npos);
    int64_t x[3];
    for (int k = 0; k < a->npos; k++) x[k] = jrt_arg_int(rt, at, "range", a->pos[k]);
    jrange *r = jmem_zalloc(rt->a, sizeof *r);
    r->start = a->npos == 1 ? 0 : x[0];
    r->stop = a->npos == 1 ? x[0] : x[1];
    r->step = a->npos == 3 ? x[2] : 1;
    if (r->step == 0)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "ValueError: range() arg 3 must not be zero");
    jv v = {0};
    v.k = JV_RANGE;
    v.r = r;
    if (jv_len(rt, at, v) > 100000)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                 "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE "
                 "(100000).");
    return v;
}

/* dict(*args, **kwargs) as Python builds it. */
static jv build_dict(jrt *rt, const jnode *at, jargs *a, const char *fname) {
    if (a->npos > 1)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: %s expected at most 1 argument, got %d",
                 fname, a->npos);
    jv d = jv_dict_new(rt->a, 4);
    if (a->npos == 1) {
        jv src = a->pos[0];
        if (src.k == JV_DICT || src.k == JV_NS) {
            for (size_t k = 0; k < src.d->n; k++)
                jv_dict_set(rt, d.d, src.d->keys[k], src.d->vals[k]);
        } else {
            jlist *items = jv_iterate(rt, at, src);
            for (size_t k = 0; k < items->n; k++) {
                jlist *pair = jv_iterate(rt, at, items->v[k]);
                if (pair->n != 2)
                    jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                             "ValueError: dictionary update sequence element #%zu has length "
                             "%zu; 2 is required",
                             k, pair->n);
                if (!jv_hashable(pair->v[0]))
                    jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: unhashable type: '%s'",
                             jv_typename(pair->v[0]));
                jv_dict_set(rt, d.d, pair->v[0], pair->v[1]);
            }
        }
    }
    for (int q = 0; q < a->nkw; q++) jv_dict_set(rt, d.d, jv_cstr(rt->a, a->kwn[q]), a->kwv[q]);
    return d;
}

static jv g_dict(jrt *rt, const jnode *at, jv self, jargs *a) {
    (void)self;
    return build_dict(rt, at, a, "dict");
}

static jv g_namespace(jrt *rt, const jnode *at, jv self, jargs *a) {
    (void)self;
    jv d = build_dict(rt, at, a, "namespace");
    for (size_t k = 0; k < d.d->n; k++) {
        jv key = d.d->keys[k];
        if (key.k == JV_STR && key.s->s[0] == '_')
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "SecurityError: Chat templates cannot store underscore-prefixed attributes "
                     "on a namespace, but got '%s'. Please rename the attribute.",
                     key.s->s);
    }
    d.k = JV_NS;
    return d;
}

static jv g_raise_exception(jrt *rt, const jnode *at, jv self, jargs *a) {
    (void)self;
    static const char *const params[] = {"message"};
    jv v[1];
    bool g[1];
    jrt_args_bind(rt, at, "raise_exception", a, params, 1, 1, v, g);
    jv msg = jv_to_str(rt, at, v[0]);
    jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TemplateError raised by the template: %s", msg.s->s);
}

static jv g_strftime_now(jrt *rt, const jnode *at, jv self, jargs *a) {
    (void)self;
    static const char *const params[] = {"format"};
    jv v[1];
    bool g[1];
    jrt_args_bind(rt, at, "strftime_now", a, params, 1, 1, v, g);
    jstr *fmt = jrt_arg_str(rt, at, "strftime_now", v[0]);
    if (memchr(fmt->s, 0, fmt->len))
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "ValueError: embedded null character");
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    for (size_t cap = 256; cap <= 65536; cap *= 4) {
        char *buf = jmem_alloc(rt->a, cap);
        size_t n = strftime(buf, cap, fmt->s, &tm);
        if (n > 0 || fmt->len == 0) return jv_str(rt->a, buf, n);
    }
    return jv_str(rt->a, "", 0); /* Python returns '' for formats that expand to nothing */
}

void jinja_install_globals(jrt *rt, jscope *g) {
    static const struct {
        const char *name;
        jfunc_impl impl;
    } G[] = {
        {"range", g_range},
        {"dict", g_dict},
        {"namespace", g_namespace},
        {"raise_exception", g_raise_exception},
        {"strftime_now", g_strftime_now},
        {"lipsum", NULL},
        {"cycler", NULL},
        {"joiner", NULL},
    };
    for (size_t k = 0; k < sizeof G / sizeof G[0]; k++)
        jrt_set(rt, g, G[k].name, make_func(rt, G[k].name, NULL, G[k].impl, jv_undef()));
}

/* ---- dict, list and tuple methods ---- */

static void no_args(jrt *rt, const jnode *at, const char *fname, jargs *a) {
    if (a->npos || a->nkw)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: %s() takes no arguments", fname);
}

static jv view(jrt *rt, jv self, int which) {
    jview *vw = jmem_zalloc(rt->a, sizeof *vw);
    vw->d = self.d;
    vw->which = (uint8_t)which;
    jv v = {0};
    v.k = JV_VIEW;
    v.vw = vw;
    return v;
}

static jv d_keys(jrt *rt, const jnode *at, jv self, jargs *a) {
    no_args(rt, at, "keys", a);
    return view(rt, self, 0);
}
static jv d_values(jrt *rt, const jnode *at, jv self, jargs *a) {
    no_args(rt, at, "values", a);
    return view(rt, self, 1);
}
static jv d_items(jrt *rt, const jnode *at, jv self, jargs *a) {
    no_args(rt, at, "items", a);
    return view(rt, self, 2);
}

static jv d_get(jrt *rt, const jnode *at, jv self, jargs *a) {
    if (a->nkw) jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: get() takes no keyword arguments");
    if (a->npos < 1 || a->npos > 2)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: get expected 1 or 2 arguments, got %d",
                 a->npos);
    jv key = a->pos[0];
    if (!jv_hashable(key))
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: unhashable type: '%s'",
                 jv_typename(key));
    jv *v = jv_dict_get(self.d, key);
    if (v) return *v;
    return a->npos == 2 ? a->pos[1] : jv_none();
}

static jv d_copy(jrt *rt, const jnode *at, jv self, jargs *a) {
    no_args(rt, at, "copy", a);
    jv d = jv_dict_new(rt->a, self.d->n);
    for (size_t k = 0; k < self.d->n; k++) jv_dict_set(rt, d.d, self.d->keys[k], self.d->vals[k]);
    return d;
}

static jv l_copy(jrt *rt, const jnode *at, jv self, jargs *a) {
    no_args(rt, at, "copy", a);
    jv l = jv_list_new(rt->a, self.l->n);
    for (size_t k = 0; k < self.l->n; k++) jv_list_push(rt->a, l.l, self.l->v[k]);
    return l;
}

static jv l_count(jrt *rt, const jnode *at, jv self, jargs *a) {
    if (a->nkw || a->npos != 1)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: count() takes exactly one argument");
    int64_t n = 0;
    for (size_t k = 0; k < self.l->n; k++)
        if (jv_equal(rt, self.l->v[k], a->pos[0])) n++;
    return jv_int(n);
}

static jv l_index(jrt *rt, const jnode *at, jv self, jargs *a) {
    if (a->nkw || a->npos < 1 || a->npos > 3)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: index expected 1 to 3 arguments");
    int64_t n = (int64_t)self.l->n;
    int64_t b = a->npos > 1 ? jrt_arg_int(rt, at, "index", a->pos[1]) : 0;
    int64_t e = a->npos > 2 ? jrt_arg_int(rt, at, "index", a->pos[2]) : n;
    if (b < 0) b = b + n < 0 ? 0 : b + n;
    if (e < 0) e = e + n < 0 ? 0 : e + n;
    if (e > n) e = n;
    for (int64_t k = b; k < e; k++)
        if (jv_equal(rt, self.l->v[k], a->pos[0])) return jv_int(k);
    jrt_fail(rt, at, EM_ERR_INVALID_ARG, "ValueError: value is not in %s", jv_typename(self));
}

typedef struct mdef {
    const char *name;
    jfunc_impl impl;
    bool unsafe; /* mutates: the immutable sandbox refuses it */
} mdef;

static const mdef DICT_METHODS[] = {
    {"clear", NULL, true},   {"copy", d_copy, false},     {"fromkeys", NULL, false},
    {"get", d_get, false},   {"items", d_items, false},   {"keys", d_keys, false},
    {"pop", NULL, true},     {"popitem", NULL, true},     {"setdefault", NULL, true},
    {"update", NULL, true},  {"values", d_values, false},
};
static const mdef LIST_METHODS[] = {
    {"append", NULL, true}, {"clear", NULL, true},   {"copy", l_copy, false},
    {"count", l_count, false}, {"extend", NULL, true}, {"index", l_index, false},
    {"insert", NULL, true}, {"pop", NULL, true},     {"remove", NULL, true},
    {"reverse", NULL, true}, {"sort", NULL, true},
};
static const mdef TUPLE_METHODS[] = {
    {"count", l_count, false},
    {"index", l_index, false},
};

static bool table_method(jrt *rt, jv self, const char *name, const mdef *t, size_t n, jv *out) {
    for (size_t k = 0; k < n; k++) {
        if (strcmp(t[k].name, name)) continue;
        if (t[k].unsafe)
            *out = jv_undef_unsafe(rt->a, self, name);
        else
            *out = make_func(rt, t[k].name, jv_typename(self), t[k].impl, self);
        return true;
    }
    return false;
}

#define N(t) (sizeof(t) / sizeof((t)[0]))

bool jinja_method(jrt *rt, jv self, const char *name, jv *out) {
    switch (self.k) {
    case JV_STR: return jv_str_method(rt, self, name, out);
    case JV_DICT: return table_method(rt, self, name, DICT_METHODS, N(DICT_METHODS), out);
    case JV_LIST: return table_method(rt, self, name, LIST_METHODS, N(LIST_METHODS), out);
    case JV_TUPLE: return table_method(rt, self, name, TUPLE_METHODS, N(TUPLE_METHODS), out);
    default: return false;
    }
}

/* ---- loop ---- */

static jv loop_cycle(jrt *rt, const jnode *at, jv self, jargs *a) {
    if (a->nkw)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: cycle() takes no keyword arguments");
    if (!a->npos) jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: no items for cycling given");
    return a->pos[self.lp->index0 % a->npos];
}

static jv loop_changed(jrt *rt, const jnode *at, jv self, jargs *a) {
    if (a->nkw)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: changed() takes no keyword arguments");
    jv t = jv_tuple_new(rt->a, (size_t)a->npos);
    for (int k = 0; k < a->npos; k++) jv_list_push(rt->a, t.l, a->pos[k]);
    jloop *lp = self.lp;
    if (lp->changed_called && jv_equal(rt, lp->last_changed, t)) return jv_bool(false);
    lp->changed_called = true;
    lp->last_changed = t;
    return jv_bool(true);
}

jv jinja_loop_attr(jrt *rt, const jnode *at, jv loop, const char *name) {
    (void)at;
    const jloop *lp = loop.lp;
    int64_t n = (int64_t)lp->items->n, i = lp->index0;
    if (!strcmp(name, "index")) return jv_int(i + 1);
    if (!strcmp(name, "index0")) return jv_int(i);
    if (!strcmp(name, "revindex")) return jv_int(n - i);
    if (!strcmp(name, "revindex0")) return jv_int(n - i - 1);
    if (!strcmp(name, "first")) return jv_bool(i == 0);
    if (!strcmp(name, "last")) return jv_bool(i == n - 1);
    if (!strcmp(name, "length")) return jv_int(n);
    if (!strcmp(name, "depth")) return jv_int(lp->depth0 + 1);
    if (!strcmp(name, "depth0")) return jv_int(lp->depth0);
    if (!strcmp(name, "previtem"))
        return i > 0 ? lp->items->v[i - 1] : jv_undef_hint(rt->a, "there is no previous item");
    if (!strcmp(name, "nextitem"))
        return i + 1 < n ? lp->items->v[i + 1] : jv_undef_hint(rt->a, "there is no next item");
    if (!strcmp(name, "cycle")) return make_func(rt, "cycle", "LoopContext", loop_cycle, loop);
    if (!strcmp(name, "changed"))
        return make_func(rt, "changed", "LoopContext", loop_changed, loop);
    return jv_undef(); /* no such attribute (the caller builds the message) */
}

/* Chat templates: jinja2's tests (`x is defined`, `x is string`, `x is divisibleby 3`, ...). */
#include <string.h>

#include "io/jinja/jinja.h"

static const char *const KNOWN_TESTS[] = {
    "odd",     "even",    "divisibleby", "defined", "undefined", "filter",  "test",
    "none",    "boolean", "false",       "true",    "integer",   "float",   "lower",
    "upper",   "string",  "mapping",     "number",  "sequence",  "iterable", "callable",
    "sameas",  "escaped", "in",          "==",      "eq",        "equalto", "!=",
    "ne",      ">",       "gt",          "greaterthan", "ge",    ">=",      "<",
    "lt",      "lessthan", "<=",         "le",      NULL,
};

bool jinja_has_test(const char *name) {
    for (const char *const *t = KNOWN_TESTS; *t; t++)
        if (!strcmp(*t, name)) return true;
    return false;
}

static jv one_arg(jrt *rt, const jnode *at, const char *name, jargs *a) {
    static const char *const params[] = {"other"};
    jv v[1];
    bool g[1];
    jrt_args_bind(rt, at, name, a, params, 1, 1, v, g);
    return v[0];
}

static void no_arg(jrt *rt, const jnode *at, const char *name, jargs *a) {
    if (a->npos || a->nkw)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: test_%s() takes 1 positional argument",
                 name);
}

/* `value is sameas other`: Python identity, for the values where Ember knows it. */
static bool sameas(jrt *rt, const jnode *at, jv a, jv b) {
    if (a.k != b.k) {
        if (jv_is_number(a) && jv_is_number(b)) return false;
        return false;
    }
    switch (a.k) {
    case JV_NONE: return true;
    case JV_BOOL: return a.b == b.b;
    case JV_UNDEF: return false; /* every lookup makes a new Undefined */
    case JV_INT:
        if (a.i >= -5 && a.i <= 256 && b.i >= -5 && b.i <= 256) return a.i == b.i;
        if (a.i != b.i) return false;
        break;
    case JV_FLOAT:
    case JV_STR:
        if (!jv_equal(rt, a, b)) return false;
        break;
    case JV_LIST:
    case JV_TUPLE: return a.l == b.l;
    case JV_DICT:
    case JV_NS: return a.d == b.d;
    case JV_MACRO: return a.m == b.m;
    case JV_FUNC: return a.fn == b.fn;
    case JV_LOOP: return a.lp == b.lp;
    case JV_ITER: return a.it == b.it;
    default: break;
    }
    jrt_fail(rt, at, EM_ERR_UNSUPPORTED,
             "unsupported: 'is sameas' on two equal %s values (Python object identity)",
             jv_typename(a));
}

static bool parity(jrt *rt, const jnode *at, jv v, int64_t want) {
    jv r = jrt_op_binary(rt, at, JO_MOD, v, jv_int(2));
    return jv_equal(rt, r, jv_int(want));
}

bool jinja_test(jrt *rt, const jnode *at, const char *name, jv v, jargs *a) {
    if (!strcmp(name, "defined") || !strcmp(name, "undefined")) {
        no_arg(rt, at, name, a);
        return (v.k != JV_UNDEF) == (name[0] == 'd');
    }
    if (!strcmp(name, "none")) return no_arg(rt, at, name, a), v.k == JV_NONE;
    if (!strcmp(name, "boolean")) return no_arg(rt, at, name, a), v.k == JV_BOOL;
    if (!strcmp(name, "false")) return no_arg(rt, at, name, a), v.k == JV_BOOL && !v.b;
    if (!strcmp(name, "true")) return no_arg(rt, at, name, a), v.k == JV_BOOL && v.b;
    if (!strcmp(name, "integer")) return no_arg(rt, at, name, a), v.k == JV_INT;
    if (!strcmp(name, "float")) return no_arg(rt, at, name, a), v.k == JV_FLOAT;
    if (!strcmp(name, "number")) return no_arg(rt, at, name, a), jv_is_number(v);
    if (!strcmp(name, "string")) return no_arg(rt, at, name, a), v.k == JV_STR;
    if (!strcmp(name, "mapping")) return no_arg(rt, at, name, a), v.k == JV_DICT;
    if (!strcmp(name, "escaped")) return no_arg(rt, at, name, a), v.k == JV_STR && v.markup;
    if (!strcmp(name, "callable")) {
        no_arg(rt, at, name, a);
        return v.k == JV_FUNC || v.k == JV_MACRO || v.k == JV_UNDEF || v.k == JV_LOOP;
    }
    if (!strcmp(name, "sequence")) {
        no_arg(rt, at, name, a);
        return v.k == JV_STR || v.k == JV_LIST || v.k == JV_TUPLE || v.k == JV_DICT ||
               v.k == JV_RANGE || v.k == JV_UNDEF;
    }
    if (!strcmp(name, "iterable")) {
        no_arg(rt, at, name, a);
        return v.k == JV_STR || v.k == JV_LIST || v.k == JV_TUPLE || v.k == JV_DICT ||
               v.k == JV_RANGE || v.k == JV_UNDEF || v.k == JV_ITER || v.k == JV_VIEW ||
               v.k == JV_LOOP;
    }
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        no_arg(rt, at, name, a);
        return jv_str_is(jv_to_str(rt, at, v), name[0] == 'l' ? "islower" : "isupper");
    }
    if (!strcmp(name, "odd")) return no_arg(rt, at, name, a), parity(rt, at, v, 1);
    if (!strcmp(name, "even")) return no_arg(rt, at, name, a), parity(rt, at, v, 0);
    if (!strcmp(name, "divisibleby")) {
        jv n = one_arg(rt, at, name, a);
        return jv_equal(rt, jrt_op_binary(rt, at, JO_MOD, v, n), jv_int(0));
    }
    if (!strcmp(name, "filter") || !strcmp(name, "test")) {
        no_arg(rt, at, name, a);
        if (v.k != JV_STR) return false;
        return name[0] == 'f' ? jinja_has_filter(v.s->s) : jinja_has_test(v.s->s);
    }
    if (!strcmp(name, "sameas")) return sameas(rt, at, v, one_arg(rt, at, name, a));
    if (!strcmp(name, "in")) return jrt_op_contains(rt, at, one_arg(rt, at, name, a), v);
    if (!strcmp(name, "==") || !strcmp(name, "eq") || !strcmp(name, "equalto"))
        return jv_equal(rt, v, one_arg(rt, at, name, a));
    if (!strcmp(name, "!=") || !strcmp(name, "ne"))
        return !jv_equal(rt, v, one_arg(rt, at, name, a));
    static const struct {
        const char *name, *op;
        int lo, hi; /* accepted results of the three-way comparison */
    } ORD[] = {
        {">", ">", 1, 1},   {"gt", ">", 1, 1},   {"greaterthan", ">", 1, 1},
        {">=", ">=", 0, 1}, {"ge", ">=", 0, 1},  {"<", "<", -1, -1},
        {"lt", "<", -1, -1}, {"lessthan", "<", -1, -1}, {"<=", "<=", -1, 0},
        {"le", "<=", -1, 0},
    };
    for (size_t k = 0; k < sizeof ORD / sizeof ORD[0]; k++)
        if (!strcmp(name, ORD[k].name)) {
            int c = jv_compare(rt, at, v, one_arg(rt, at, name, a), ORD[k].op);
            return c >= ORD[k].lo && c <= ORD[k].hi;
        }
    jrt_fail(rt, at, EM_ERR_FORMAT, "TemplateRuntimeError: No test named '%s'.", name);
}

/* Chat templates: operators with Python's semantics (int/float arithmetic, str and list
 * concatenation and repetition, floor division and modulo signs), `in`, and the sandboxed
 * attribute / item / slice access of jinja2's ImmutableSandboxedEnvironment. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "io/jinja/jinja.h"

_Noreturn static void overflow(jrt *rt, const jnode *at) {
    jrt_fail(rt, at, EM_ERR_OVERFLOW,
             "integer overflow: Python integers are unbounded, Ember's are 64-bit");
}

static int64_t as_int(jv v) { return v.k == JV_BOOL ? (int64_t)v.b : v.i; }
static bool is_intlike(jv v) { return v.k == JV_INT || v.k == JV_BOOL; }

_Noreturn static void bad_operands(jrt *rt, const jnode *at, const char *op, jv a, jv b) {
    jrt_fail(rt, at, EM_ERR_INVALID_ARG,
             "TypeError: unsupported operand type(s) for %s: '%s' and '%s'", op, jv_typename(a),
             jv_typename(b));
}

jv jrt_op_str_concat(jrt *rt, jv a, jv b) {
    jbuf buf;
    jmem_buf_init(&buf, rt->a, 0);
    bool markup = a.markup || b.markup;
    /* Markup + str escapes the plain side (markupsafe's __add__ / __radd__) */
    if (markup && !a.markup)
        jv_write_escaped(&buf, a.s->s, a.s->len);
    else
        jmem_put(&buf, a.s->s, a.s->len);
    if (markup && !b.markup)
        jv_write_escaped(&buf, b.s->s, b.s->len);
    else
        jmem_put(&buf, b.s->s, b.s->len);
    jv r = jv_str_buf(&buf);
    r.markup = markup;
    return r;
}

static jv seq_concat(jrt *rt, jv a, jv b) {
    jv r = a.k == JV_LIST ? jv_list_new(rt->a, a.l->n + b.l->n)
                          : jv_tuple_new(rt->a, a.l->n + b.l->n);
    jrt_work(rt, NULL, a.l->n + b.l->n);
    for (size_t k = 0; k < a.l->n; k++) jv_list_push(rt->a, r.l, a.l->v[k]);
    for (size_t k = 0; k < b.l->n; k++) jv_list_push(rt->a, r.l, b.l->v[k]);
    return r;
}

static jv repeat(jrt *rt, const jnode *at, jv seq, int64_t times) {
    if (times < 0) times = 0;
    size_t unit = seq.k == JV_STR ? seq.s->len : seq.l->n;
    if (unit && (uint64_t)times > (uint64_t)(rt->lim->max_output / unit))
        jrt_fail(rt, at, EM_ERR_OVERFLOW,
                 "repeating a %s %lld times exceeds the output limit of %zu bytes",
                 jv_typename(seq), (long long)times, rt->lim->max_output);
    jrt_work(rt, at, (uint64_t)times * (unit / 64 + 1));
    if (seq.k == JV_STR) {
        jbuf b;
        jmem_buf_init(&b, rt->a, 0);
        for (int64_t k = 0; k < times; k++) jmem_put(&b, seq.s->s, seq.s->len);
        jv r = jv_str_buf(&b);
        r.markup = seq.markup;
        return r;
    }
    jv r = seq.k == JV_LIST ? jv_list_new(rt->a, unit * (size_t)times)
                            : jv_tuple_new(rt->a, unit * (size_t)times);
    for (int64_t k = 0; k < times; k++)
        for (size_t i = 0; i < unit; i++) jv_list_push(rt->a, r.l, seq.l->v[i]);
    return r;
}

/* Python's float floor division and modulo (floatobject.c float_divmod). */
static void float_divmod(double vx, double wx, double *floordiv, double *mod) {
    double m = fmod(vx, wx);
    double div = (vx - m) / wx;
    if (m != 0.0) {
        if ((wx < 0) != (m < 0)) {
            m += wx;
            div -= 1.0;
        }
    } else {
        m = copysign(0.0, wx);
    }
    double fd;
    if (div != 0.0) {
        fd = floor(div);
        if (div - fd > 0.5) fd += 1.0;
    } else {
        fd = copysign(0.0, vx / wx);
    }
    *floordiv = fd;
    *mod = m;
}

static jv int_pow(jrt *rt, const jnode *at, int64_t base, int64_t exp) {
    int64_t r = 1;
    while (exp > 0) {
        if (exp & 1) {
            if (__builtin_mul_overflow(r, base, &r)) overflow(rt, at);
        }
        exp >>= 1;
        if (exp && __builtin_mul_overflow(base, base, &base)) overflow(rt, at);
    }
    return jv_int(r);
}

static jv float_pow(jrt *rt, const jnode *at, double x, double y) {
    if (x == 0.0 && y < 0.0)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                 "ZeroDivisionError: 0.0 cannot be raised to a negative power");
    if (x < 0.0 && isfinite(y) && floor(y) != y)
        jrt_fail(rt, at, EM_ERR_UNSUPPORTED,
                 "unsupported: a negative number raised to a fractional power (a complex "
                 "number in Python)");
    double r = pow(x, y);
    if (isinf(r) && isfinite(x) && isfinite(y))
        jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                 "OverflowError: (34, 'Numerical result out of range')");
    return jv_float(r);
}

static double true_div(int64_t a, int64_t b) {
    const int64_t exact = (int64_t)1 << 53;
    if (a > -exact && a < exact && b > -exact && b < exact) return (double)a / (double)b;
    return (double)((long double)a / (long double)b);
}

static jv arith(jrt *rt, const jnode *at, int op, jv a, jv b) {
    const char *sym = jrt_op_text[op];
    if (is_intlike(a) && is_intlike(b)) {
        int64_t x = as_int(a), y = as_int(b), r;
        switch (op) {
        case JO_ADD:
            if (__builtin_add_overflow(x, y, &r)) overflow(rt, at);
            return jv_int(r);
        case JO_SUB:
            if (__builtin_sub_overflow(x, y, &r)) overflow(rt, at);
            return jv_int(r);
        case JO_MUL:
            if (__builtin_mul_overflow(x, y, &r)) overflow(rt, at);
            return jv_int(r);
        case JO_DIV:
            if (y == 0) jrt_fail(rt, at, EM_ERR_INVALID_ARG, "ZeroDivisionError: division by zero");
            return jv_float(true_div(x, y));
        case JO_FLOORDIV:
        case JO_MOD: {
            if (y == 0)
                jrt_fail(rt, at, EM_ERR_INVALID_ARG, "ZeroDivisionError: integer %s by zero",
                         op == JO_MOD ? "modulo" : "division or modulo");
            if (x == INT64_MIN && y == -1) {
                if (op == JO_MOD) return jv_int(0);
                overflow(rt, at);
            }
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q -= 1;
                m += y;
            }
            return jv_int(op == JO_MOD ? m : q);
        }
        case JO_POW:
            if (y >= 0) return int_pow(rt, at, x, y);
            return float_pow(rt, at, (double)x, (double)y);
        }
    }
    double x = jv_as_double(a), y = jv_as_double(b);
    switch (op) {
    case JO_ADD: return jv_float(x + y);
    case JO_SUB: return jv_float(x - y);
    case JO_MUL: return jv_float(x * y);
    case JO_DIV:
        if (y == 0.0)
            jrt_fail(rt, at, EM_ERR_INVALID_ARG, "ZeroDivisionError: float division by zero");
        return jv_float(x / y);
    case JO_FLOORDIV:
    case JO_MOD: {
        if (y == 0.0)
            jrt_fail(rt, at, EM_ERR_INVALID_ARG, "ZeroDivisionError: float %s",
                     op == JO_MOD ? "modulo" : "floor division by zero");
        double fd, m;
        float_divmod(x, y, &fd, &m);
        return jv_float(op == JO_MOD ? m : fd);
    }
    case JO_POW: return float_pow(rt, at, x, y);
    }
    bad_operands(rt, at, sym, a, b);
}

jv jrt_op_binary(jrt *rt, const jnode *at, int op, jv a, jv b) {
    if (a.k == JV_UNDEF) jv_raise_undefined(rt, at, a);
    if (b.k == JV_UNDEF) jv_raise_undefined(rt, at, b);
    if (jv_is_number(a) && jv_is_number(b)) return arith(rt, at, op, a, b);
    const char *sym = jrt_op_text[op];
    switch (op) {
    case JO_ADD:
        if (a.k == JV_STR && b.k == JV_STR) return jrt_op_str_concat(rt, a, b);
        if ((a.k == JV_LIST && b.k == JV_LIST) || (a.k == JV_TUPLE && b.k == JV_TUPLE))
            return seq_concat(rt, a, b);
        if (a.k == JV_STR && !b.markup)
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "TypeError: can only concatenate str (not \"%s\") to str", jv_typename(b));
        if (a.k == JV_LIST || a.k == JV_TUPLE)
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "TypeError: can only concatenate %s (not \"%s\") to %s", jv_typename(a),
                     jv_typename(b), jv_typename(a));
        break;
    case JO_MUL:
        if ((a.k == JV_STR || a.k == JV_LIST || a.k == JV_TUPLE) && is_intlike(b))
            return repeat(rt, at, a, as_int(b));
        if ((b.k == JV_STR || b.k == JV_LIST || b.k == JV_TUPLE) && is_intlike(a))
            return repeat(rt, at, b, as_int(a));
        if (a.k == JV_STR || a.k == JV_LIST || a.k == JV_TUPLE || b.k == JV_STR ||
            b.k == JV_LIST || b.k == JV_TUPLE)
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "TypeError: can't multiply sequence by non-int of type '%s'",
                     jv_typename(a.k == JV_STR || a.k == JV_LIST || a.k == JV_TUPLE ? b : a));
        break;
    case JO_MOD:
        if (a.k == JV_STR) return jrt_fmt_percent(rt, at, a, b);
        break;
    default: break;
    }
    bad_operands(rt, at, sym, a, b);
}

jv jrt_op_neg(jrt *rt, const jnode *at, jv a, bool neg) {
    if (a.k == JV_UNDEF) jv_raise_undefined(rt, at, a);
    if (a.k == JV_FLOAT) return jv_float(neg ? -a.f : a.f);
    if (is_intlike(a)) {
        int64_t x = as_int(a);
        if (!neg) return jv_int(x);
        if (x == INT64_MIN) overflow(rt, at);
        return jv_int(-x);
    }
    jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: bad operand type for unary %s: '%s'",
             neg ? "-" : "+", jv_typename(a));
}

static bool range_contains(jrt *rt, const jrange *r, jv item) {
    if (!jv_is_number(item)) return false;
    if (item.k == JV_FLOAT) {
        if (floor(item.f) != item.f || fabs(item.f) > 9.2e18) return false;
        item = jv_int((int64_t)item.f);
    }
    int64_t x = as_int(item);
    if (r->step > 0 ? (x < r->start || x >= r->stop) : (x > r->start || x <= r->stop))
        return false;
    (void)rt;
    return ((x - r->start) % r->step) == 0;
}

bool jrt_op_contains(jrt *rt, const jnode *at, jv c, jv item) {
    switch (c.k) {
    case JV_STR:
        if (item.k != JV_STR)
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "TypeError: 'in <string>' requires string as left operand, not %s",
                     jv_typename(item));
        if (!item.s->len) return true;
        jrt_work(rt, at, c.s->len / 64 + 1);
        return memmem(c.s->s, c.s->len, item.s->s, item.s->len) != NULL;
    case JV_LIST:
    case JV_TUPLE:
        for (size_t k = 0; k < c.l->n; k++)
            if (jv_equal(rt, c.l->v[k], item)) return true;
        return false;
    case JV_DICT:
    case JV_VIEW: {
        jdict *d = c.k == JV_DICT ? c.d : c.vw->d;
        int which = c.k == JV_DICT ? 0 : c.vw->which;
        if (which == 1) {
            for (size_t k = 0; k < d->n; k++)
                if (jv_equal(rt, d->vals[k], item)) return true;
            return false;
        }
        if (which == 2) {
            if (item.k != JV_TUPLE || item.l->n != 2) return false;
            jv *v = jv_hashable(item.l->v[0]) ? jv_dict_get(d, item.l->v[0]) : NULL;
            return v && jv_equal(rt, *v, item.l->v[1]);
        }
        if (!jv_hashable(item))
            jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: unhashable type: '%s'",
                     jv_typename(item));
        jrt_work(rt, at, d->n);
        return jv_dict_get(d, item) != NULL;
    }
    case JV_RANGE: return range_contains(rt, c.r, item);
    case JV_UNDEF: return false;
    case JV_ITER: {
        jiter *it = c.it;
        jv_iter_force(rt, at, it);
        while (it->pos < it->items->n)
            if (jv_equal(rt, it->items->v[it->pos++], item)) return true;
        return false;
    }
    default: break;
    }
    jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: argument of type '%s' is not iterable",
             jv_typename(c));
}

/* ---- attribute and item access ---- */

static bool is_dunder(const char *name) {
    size_t n = strlen(name);
    return n > 4 && name[0] == '_' && name[1] == '_' && name[n - 1] == '_' && name[n - 2] == '_';
}

/* Python attributes of numbers and of the few objects we model, which Ember does not expose. */
static bool is_other_attr(jv obj, const char *name) {
    static const char *const num[] = {"real", "imag", "numerator", "denominator", "conjugate",
                                      "bit_length", "bit_count", "to_bytes", "from_bytes",
                                      "as_integer_ratio", "is_integer", "hex", "fromhex", NULL};
    static const char *const misc[] = {"start", "stop", "step", "count", "index", "mapping",
                                       "isdisjoint", "send", "throw", "close", "gi_frame",
                                       "gi_running", "gi_code", "name", "arguments",
                                       "catch_kwargs", "catch_varargs", "caller", NULL};
    const char *const *list = jv_is_number(obj) ? num : misc;
    for (; *list; list++)
        if (!strcmp(*list, name)) return true;
    return false;
}

/* Sandboxed getattr(obj, name) without the item fallback; false when Python has no such
 * attribute. */
static bool py_attr(jrt *rt, const jnode *at, jv obj, const char *name, jv *out) {
    if (name[0] == '_') {
        /* every Python object has dunder attributes; the sandbox makes them unsafe */
        if (is_dunder(name) && obj.k != JV_DICT && obj.k != JV_NS) {
            *out = jv_undef_unsafe(rt->a, obj, name);
            return true;
        }
        return false;
    }
    switch (obj.k) {
    case JV_STR:
    case JV_DICT:
    case JV_LIST:
    case JV_TUPLE: return jinja_method(rt, obj, name, out);
    case JV_LOOP: {
        jv v = jinja_loop_attr(rt, at, obj, name);
        if (v.k == JV_UNDEF && !v.u) return false;
        *out = v;
        return true;
    }
    case JV_NONE:
    case JV_UNDEF:
    case JV_NS: return false;
    default:
        if (is_other_attr(obj, name))
            jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: attribute '%s' of a %s", name,
                     jv_typename(obj));
        return false;
    }
}

jv jrt_op_getattr(jrt *rt, const jnode *at, jv obj, const char *name) {
    if (obj.k == JV_UNDEF) jv_raise_undefined(rt, at, obj);
    if (obj.k == JV_NS) {
        jv *v = jv_dict_get_str(obj.d, name, strlen(name));
        return v ? *v : jv_undef_attr(rt->a, obj, name);
    }
    if (obj.k == JV_DICT && is_dunder(name) && jv_dict_get_str(obj.d, name, strlen(name)))
        jrt_fail(rt, at, EM_ERR_UNSUPPORTED,
                 "unsupported: attribute access to the key '%s' (a Python dunder name); use "
                 "['%s']",
                 name, name);
    jv out;
    if (py_attr(rt, at, obj, name, &out)) return out;
    if (obj.k == JV_DICT) {
        jv *v = jv_dict_get_str(obj.d, name, strlen(name));
        if (v) return *v;
    }
    return jv_undef_attr(rt->a, obj, name);
}

/* Python's index normalisation; false when out of range. */
static bool norm_index(int64_t i, int64_t n, int64_t *out) {
    if (i < 0) i += n;
    if (i < 0 || i >= n) return false;
    *out = i;
    return true;
}

jv jrt_op_getitem(jrt *rt, const jnode *at, jv obj, jv key) {
    if (obj.k == JV_UNDEF) jv_raise_undefined(rt, at, obj);
    int64_t idx;
    switch (obj.k) {
    case JV_STR:
        if (is_intlike(key)) {
            if (!norm_index(as_int(key), (int64_t)obj.s->ncp, &idx)) break;
            size_t off = ju_offset(obj.s->s, obj.s->len, (size_t)idx);
            size_t end = off;
            ju_decode(obj.s->s, obj.s->len, &end);
            jv r = jv_str(rt->a, obj.s->s + off, end - off);
            r.markup = obj.markup;
            return r;
        }
        break;
    case JV_LIST:
    case JV_TUPLE:
        if (is_intlike(key) && norm_index(as_int(key), (int64_t)obj.l->n, &idx))
            return obj.l->v[idx];
        break;
    case JV_DICT:
        if (jv_hashable(key)) {
            jv *v = jv_dict_get(obj.d, key);
            if (v) return *v;
        }
        break;
    case JV_RANGE:
        if (is_intlike(key)) {
            jv r = {0};
            r.k = JV_RANGE;
            r.r = obj.r;
            if (norm_index(as_int(key), jv_len(rt, at, r), &idx))
                return jv_int(obj.r->start + idx * obj.r->step);
        }
        break;
    default: break;
    }
    if (key.k == JV_STR) {
        if (obj.k == JV_NS) {
            jv *v = jv_dict_get_str(obj.d, key.s->s, key.s->len);
            if (v) return *v;
        } else {
            jv out;
            if (memchr(key.s->s, 0, key.s->len) == NULL && py_attr(rt, at, obj, key.s->s, &out))
                return out;
        }
        return jv_undef_attr(rt->a, obj, key.s->s);
    }
    return jv_undef_item(rt->a, obj, key);
}

/* jinja2 compiles a slice to a plain Python subscription (no sandbox fallback to undefined), so
 * what Python refuses is an error here too. */
jv jrt_op_slice(jrt *rt, const jnode *at, jv obj, jv start, jv stop, jv step) {
    if (obj.k == JV_UNDEF) jv_raise_undefined(rt, at, obj);
    if (obj.k == JV_RANGE) jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: slicing a range");
    if (obj.k == JV_DICT)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: unhashable type: 'slice'");
    if (obj.k != JV_STR && obj.k != JV_LIST && obj.k != JV_TUPLE)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: '%s' object is not subscriptable",
                 jv_typename(obj));
    jv parts[3] = {start, stop, step};
    for (int k = 0; k < 3; k++) {
        if (parts[k].k == JV_UNDEF) jv_raise_undefined(rt, at, parts[k]);
        if (parts[k].k != JV_NONE && !is_intlike(parts[k]))
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "TypeError: slice indices must be integers or None or have an __index__ "
                     "method");
    }
    int64_t n = obj.k == JV_STR ? (int64_t)obj.s->ncp : (int64_t)obj.l->n;
    int64_t st = step.k == JV_NONE ? 1 : as_int(step);
    if (st == 0) jrt_fail(rt, at, EM_ERR_INVALID_ARG, "ValueError: slice step cannot be zero");
    int64_t lower = st > 0 ? 0 : -1, upper = st > 0 ? n : n - 1;
    int64_t b, e;
    if (start.k == JV_NONE) {
        b = st < 0 ? upper : lower;
    } else {
        b = as_int(start);
        if (b < 0) {
            b += n;
            if (b < lower) b = lower;
        } else if (b > upper) {
            b = upper;
        }
    }
    if (stop.k == JV_NONE) {
        e = st < 0 ? lower : upper;
    } else {
        e = as_int(stop);
        if (e < 0) {
            e += n;
            if (e < lower) e = lower;
        } else if (e > upper) {
            e = upper;
        }
    }
    jrt_work(rt, at, (uint64_t)n / 8 + 1);
    if (obj.k == JV_STR) {
        /* code point offsets, then copy the selected characters */
        size_t *off = jmem_alloc(rt->a, ((size_t)n + 1) * sizeof *off);
        size_t i = 0;
        for (int64_t c = 0; c < n; c++) {
            off[c] = i;
            ju_decode(obj.s->s, obj.s->len, &i);
        }
        off[n] = obj.s->len;
        jbuf out;
        jmem_buf_init(&out, rt->a, 0);
        if (st == 1 && b < e) {
            jmem_put(&out, obj.s->s + off[b], off[e] - off[b]);
        } else {
            for (int64_t c = b; st > 0 ? c < e : c > e; c += st)
                jmem_put(&out, obj.s->s + off[c], off[c + 1] - off[c]);
        }
        jv r = jv_str_buf(&out);
        r.markup = obj.markup;
        return r;
    }
    jv r = obj.k == JV_LIST ? jv_list_new(rt->a, 0) : jv_tuple_new(rt->a, 0);
    for (int64_t c = b; st > 0 ? c < e : c > e; c += st) jv_list_push(rt->a, r.l, obj.l->v[c]);
    return r;
}

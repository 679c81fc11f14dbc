/* Chat templates: JSON in (jansson values -> template values) and out (Python's json.dumps, as
 * transformers' tojson filter calls it: ensure_ascii=False by default, indent, separators,
 * sort_keys). */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "io/jinja/jinja.h"

static void enter(jrt *rt, const jnode *at) {
    if (++rt->depth > rt->lim->max_depth)
        jrt_fail(rt, at, EM_ERR_OVERFLOW,
                 "RecursionError: maximum recursion depth exceeded (values nested more than %d "
                 "deep)",
                 rt->lim->max_depth);
}

jv jrt_json_import(jrt *rt, json_t *j) {
    jrt_work(rt, NULL, 1);
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        enter(rt, NULL);
        jv d = jv_dict_new(rt->a, json_object_size(j));
        const char *key;
        json_t *val;
        json_object_foreach(j, key, val) {
            jv_dict_set(rt, d.d, jv_cstr(rt->a, key), jrt_json_import(rt, val));
        }
        rt->depth--;
        return d;
    }
    case JSON_ARRAY: {
        enter(rt, NULL);
        jv l = jv_list_new(rt->a, json_array_size(j));
        size_t k;
        json_t *val;
        json_array_foreach(j, k, val) { jv_list_push(rt->a, l.l, jrt_json_import(rt, val)); }
        rt->depth--;
        return l;
    }
    case JSON_STRING: return jv_str(rt->a, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return jv_int((int64_t)json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_TRUE: return jv_bool(true);
    case JSON_FALSE: return jv_bool(false);
    case JSON_NULL: return jv_none();
    }
    return jv_none();
}

static void dump_str(jbuf *b, const char *s, size_t n, bool ascii) {
    jmem_putc(b, '"');
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            size_t start = i;
            uint32_t cp = ju_decode(s, n, &i);
            if (!ascii) {
                jmem_put(b, s + start, i - start);
            } else if (cp >= 0x10000) {
                cp -= 0x10000;
                jmem_printf(b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                jmem_printf(b, "\\u%04x", cp);
            }
            continue;
        }
        i++;
        switch (c) {
        case '"': jmem_puts(b, "\\\""); break;
        case '\\': jmem_puts(b, "\\\\"); break;
        case '\n': jmem_puts(b, "\\n"); break;
        case '\r': jmem_puts(b, "\\r"); break;
        case '\t': jmem_puts(b, "\\t"); break;
        case '\b': jmem_puts(b, "\\b"); break;
        case '\f': jmem_puts(b, "\\f"); break;
        default:
            if (c < 0x20 || (ascii && c == 0x7F))
                jmem_printf(b, "\\u%04x", c);
            else
                jmem_putc(b, (char)c);
        }
    }
    jmem_putc(b, '"');
}

static void dump_float(jbuf *b, double f) {
    if (isnan(f))
        jmem_puts(b, "NaN");
    else if (isinf(f))
        jmem_puts(b, f < 0 ? "-Infinity" : "Infinity");
    else
        jv_write_float(b, f);
}

_Noreturn static void not_serializable(jrt *rt, const jnode *at, jv v) {
    jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: Object of type %s is not JSON serializable",
             jv_typename(v));
}

static void newline_indent(jbuf *b, const jrt_json_opts *o, int level) {
    jmem_putc(b, '\n');
    for (int k = 0; k < level; k++) {
        if (o->indent_str)
            jmem_puts(b, o->indent_str);
        else
            for (int s = 0; s < o->indent; s++) jmem_putc(b, ' ');
    }
}

static bool indented(const jrt_json_opts *o) { return o->indent_str || o->indent >= 0; }

/* A dict key as json.dumps writes it (str, or int/float/bool/None converted). */
static void dump_key(jrt *rt, const jnode *at, jbuf *b, jv k, const jrt_json_opts *o) {
    jbuf t;
    switch (k.k) {
    case JV_STR: dump_str(b, k.s->s, k.s->len, o->ensure_ascii); return;
    case JV_BOOL: jmem_puts(b, k.b ? "\"true\"" : "\"false\""); return;
    case JV_NONE: jmem_puts(b, "\"null\""); return;
    case JV_INT: jmem_printf(b, "\"%" PRId64 "\"", k.i); return;
    case JV_FLOAT:
        jmem_buf_init(&t, rt->a, 0);
        dump_float(&t, k.f);
        dump_str(b, t.p, t.n, false);
        return;
    default:
        jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                 "TypeError: keys must be str, int, float, bool or None, not %s", jv_typename(k));
    }
}

static void dump(jrt *rt, const jnode *at, jbuf *b, jv v, const jrt_json_opts *o, int level);

static void dump_dict(jrt *rt, const jnode *at, jbuf *b, const jdict *d, const jrt_json_opts *o,
                      int level) {
    if (!d->n) {
        jmem_puts(b, "{}");
        return;
    }
    size_t *order = jmem_alloc(rt->a, d->n * sizeof *order);
    for (size_t k = 0; k < d->n; k++) order[k] = k;
    if (o->sort_keys) { /* insertion sort: stable, and keys are few */
        for (size_t k = 1; k < d->n; k++) {
            size_t x = order[k], j = k;
            while (j > 0 && jv_compare(rt, at, d->keys[x], d->keys[order[j - 1]], "<") < 0) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = x;
        }
    }
    jmem_putc(b, '{');
    for (size_t k = 0; k < d->n; k++) {
        if (k) jmem_puts(b, o->item_sep);
        if (indented(o)) newline_indent(b, o, level + 1);
        dump_key(rt, at, b, d->keys[order[k]], o);
        jmem_puts(b, o->key_sep);
        dump(rt, at, b, d->vals[order[k]], o, level + 1);
    }
    if (indented(o)) newline_indent(b, o, level);
    jmem_putc(b, '}');
}

static void dump(jrt *rt, const jnode *at, jbuf *b, jv v, const jrt_json_opts *o, int level) {
    jrt_work(rt, at, 1);
    switch (v.k) {
    case JV_NONE: jmem_puts(b, "null"); return;
    case JV_BOOL: jmem_puts(b, v.b ? "true" : "false"); return;
    case JV_INT: jmem_printf(b, "%" PRId64, v.i); return;
    case JV_FLOAT: dump_float(b, v.f); return;
    case JV_STR: dump_str(b, v.s->s, v.s->len, o->ensure_ascii); return;
    case JV_LIST:
    case JV_TUPLE:
        if (!v.l->n) {
            jmem_puts(b, "[]");
            return;
        }
        enter(rt, at);
        jmem_putc(b, '[');
        for (size_t k = 0; k < v.l->n; k++) {
            if (k) jmem_puts(b, o->item_sep);
            if (indented(o)) newline_indent(b, o, level + 1);
            dump(rt, at, b, v.l->v[k], o, level + 1);
        }
        if (indented(o)) newline_indent(b, o, level);
        jmem_putc(b, ']');
        rt->depth--;
        return;
    case JV_DICT:
        enter(rt, at);
        dump_dict(rt, at, b, v.d, o, level);
        rt->depth--;
        return;
    default: not_serializable(rt, at, v);
    }
}

void jrt_json_dump(jrt *rt, const jnode *at, jbuf *b, jv v, const jrt_json_opts *o) {
    dump(rt, at, b, v, o, 0);
}

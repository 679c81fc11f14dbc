/* Chat templates: Python string formatting — `fmt % args` (printf style) and str.format() —
 * for the conversions templates use; anything else is reported as unsupported. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/jinja/jinja.h"

/* Pads `s` (n bytes, ncp code points) to `width` code points. align: '<', '>', '^' or '='
 * ('=' pads after a sign / prefix of `sign_len` bytes). */
static void put_padded(jbuf *b, const char *s, size_t n, size_t ncp, int64_t width, char align,
                       const char *fill, size_t sign_len) {
    int64_t pad = width > (int64_t)ncp ? width - (int64_t)ncp : 0;
    int64_t left = 0, right = 0;
    if (align == '<')
        right = pad;
    else if (align == '^') {
        left = pad / 2;
        right = pad - left;
    } else
        left = pad;
    if (align == '=') jmem_put(b, s, sign_len);
    for (int64_t k = 0; k < left; k++) jmem_puts(b, fill);
    if (align == '=')
        jmem_put(b, s + sign_len, n - sign_len);
    else
        jmem_put(b, s, n);
    for (int64_t k = 0; k < right; k++) jmem_puts(b, fill);
}

static jstr *as_text(jrt *rt, const jnode *at, jv v, bool repr) {
    jbuf t;
    jmem_buf_init(&t, rt->a, 0);
    if (repr)
        jv_write_repr(rt, at, &t, v);
    else
        jv_write_str(rt, at, &t, v);
    return jv_str_buf(&t).s;
}

/* Truncates to `prec` code points (prec < 0: no limit). */
static size_t trunc_bytes(const jstr *s, int64_t prec) {
    if (prec < 0 || (size_t)prec >= s->ncp) return s->len;
    return ju_offset(s->s, s->len, (size_t)prec);
}

/* ---------------------------------------------------------------------------------------------
 * printf style
 * ------------------------------------------------------------------------------------------- */

typedef struct pct_state {
    jv *args;
    size_t nargs, next;
    jdict *map;
} pct_state;

static jv pct_next(jrt *rt, const jnode *at, pct_state *st) {
    if (st->next >= st->nargs)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: not enough arguments for format string");
    return st->args[st->next++];
}

static int64_t pct_star(jrt *rt, const jnode *at, pct_state *st) {
    jv v = pct_next(rt, at, st);
    if (v.k != JV_INT && v.k != JV_BOOL)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: * wants int");
    return v.k == JV_BOOL ? v.b : v.i;
}

static void pct_int(jrt *rt, const jnode *at, jbuf *b, jv v, char type, const char *flags,
                    int64_t width, int64_t prec) {
    int64_t x;
    if (v.k == JV_INT || v.k == JV_BOOL)
        x = v.k == JV_BOOL ? v.b : v.i;
    else if (v.k == JV_FLOAT && (type == 'd' || type == 'i' || type == 'u')) {
        if (!isfinite(v.f) || fabs(v.f) >= 9.2e18)
            jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: %%d of a float this large");
        x = (int64_t)v.f;
    } else {
        jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: %%%c format: %s is required, not %s",
                 type, type == 'd' || type == 'i' || type == 'u' ? "a real number" : "an integer",
                 jv_typename(v));
    }
    char digits[80];
    uint64_t mag = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
    if (type == 'x' || type == 'X')
        snprintf(digits, sizeof digits, type == 'x' ? "%" PRIx64 : "%" PRIX64, mag);
    else if (type == 'o')
        snprintf(digits, sizeof digits, "%" PRIo64, mag);
    else
        snprintf(digits, sizeof digits, "%" PRIu64, mag);
    char body[200];
    size_t n = 0;
    if (x < 0)
        body[n++] = '-';
    else if (strchr(flags, '+'))
        body[n++] = '+';
    else if (strchr(flags, ' '))
        body[n++] = ' ';
    if (strchr(flags, '#') && type != 'd' && type != 'i' && type != 'u') {
        body[n++] = '0';
        body[n++] = type == 'o' ? 'o' : type;
    }
    size_t sign_len = n;
    size_t nd = strlen(digits);
    for (int64_t k = (int64_t)nd; k < prec && n < 120; k++) body[n++] = '0';
    memcpy(body + n, digits, nd);
    n += nd;
    char align = strchr(flags, '-') ? '<' : strchr(flags, '0') ? '=' : '>';
    put_padded(b, body, n, n, width, align, align == '=' ? "0" : " ", sign_len);
}

static void pct_float(jrt *rt, const jnode *at, jbuf *b, jv v, char type, const char *flags,
                      int64_t width, int64_t prec) {
    if (!jv_is_number(v))
        jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                 "TypeError: must be real number, not %s", jv_typename(v));
    double f = jv_as_double(v);
    if (prec < 0) prec = 6;
    if (prec > 200)
        jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: precision %lld", (long long)prec);
    char cfmt[32], out[512];
    snprintf(cfmt, sizeof cfmt, "%%%s%s%s.%d%c", strchr(flags, '+') ? "+" : "",
             strchr(flags, ' ') ? " " : "", strchr(flags, '#') ? "#" : "", (int)prec, type);
    int k = snprintf(out, sizeof out, cfmt, f);
    if (k < 0 || (size_t)k >= sizeof out)
        jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: a float format this long");
    size_t sign_len = (out[0] == '-' || out[0] == '+' || out[0] == ' ') ? 1 : 0;
    char align = strchr(flags, '-') ? '<' : (strchr(flags, '0') && isfinite(f)) ? '=' : '>';
    put_padded(b, out, (size_t)k, (size_t)k, width, align, align == '=' ? "0" : " ", sign_len);
}

jv jrt_fmt_percent(jrt *rt, const jnode *at, jv fmt, jv args) {
    pct_state st = {0};
    if (args.k == JV_TUPLE) {
        st.args = args.l->v;
        st.nargs = args.l->n;
    } else {
        st.args = jmem_alloc(rt->a, sizeof(jv));
        st.args[0] = args;
        st.nargs = 1;
        if (args.k == JV_DICT) st.map = args.d;
    }
    bool markup = fmt.markup;
    const char *s = fmt.s->s;
    size_t n = fmt.s->len;
    jbuf b;
    jmem_buf_init(&b, rt->a, 0);
    bool used_map = false;
    for (size_t i = 0; i < n;) {
        const char *pc = memchr(s + i, '%', n - i);
        if (!pc) {
            jmem_put(&b, s + i, n - i);
            break;
        }
        size_t p = (size_t)(pc - s);
        jmem_put(&b, s + i, p - i);
        size_t start = p++;
        jv val = jv_undef();
        bool have_val = false;
        if (p < n && s[p] == '(') {
            if (!st.map)
                jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: format requires a mapping");
            size_t q = p + 1;
            int depth = 1;
            while (q < n && depth) {
                if (s[q] == '(') depth++;
                if (s[q] == ')') depth--;
                q++;
            }
            if (depth)
                jrt_fail(rt, at, EM_ERR_INVALID_ARG, "ValueError: incomplete format key");
            jv *v = jv_dict_get_str(st.map, s + p + 1, q - p - 2);
            if (!v)
                jrt_fail(rt, at, EM_ERR_INVALID_ARG, "KeyError: '%.*s'", (int)(q - p - 2),
                         s + p + 1);
            val = *v;
            have_val = true;
            used_map = true;
            p = q;
        }
        char flags[8] = "";
        size_t nf = 0;
        while (p < n && strchr("-+ #0", s[p]) && s[p]) {
            if (nf < sizeof flags - 1 && !strchr(flags, s[p])) flags[nf++] = s[p];
            flags[nf] = 0;
            p++;
        }
        int64_t width = -1, prec = -1;
        if (p < n && s[p] == '*') {
            width = pct_star(rt, at, &st);
            if (width < 0) {
                width = -width;
                if (!strchr(flags, '-') && nf < sizeof flags - 1) {
                    flags[nf++] = '-';
                    flags[nf] = 0;
                }
            }
            p++;
        } else {
            while (p < n && s[p] >= '0' && s[p] <= '9') {
                width = (width < 0 ? 0 : width) * 10 + (s[p++] - '0');
                if (width > 100000) jrt_fail(rt, at, EM_ERR_OVERFLOW, "format width too large");
            }
        }
        if (p < n && s[p] == '.') {
            p++;
            prec = 0;
            if (p < n && s[p] == '*') {
                prec = pct_star(rt, at, &st);
                p++;
            } else {
                while (p < n && s[p] >= '0' && s[p] <= '9') {
                    prec = prec * 10 + (s[p++] - '0');
                    if (prec > 100000)
                        jrt_fail(rt, at, EM_ERR_OVERFLOW, "format precision too large");
                }
            }
        }
        while (p < n && (s[p] == 'h' || s[p] == 'l' || s[p] == 'L')) p++;
        if (p >= n)
            jrt_fail(rt, at, EM_ERR_INVALID_ARG, "ValueError: incomplete format");
        char type = s[p++];
        if (type == '%') {
            jmem_putc(&b, '%');
            i = p;
            continue;
        }
        if (!have_val) val = pct_next(rt, at, &st);
        switch (type) {
        case 's':
        case 'r': {
            jstr *t = as_text(rt, at, val, type == 'r');
            size_t len = trunc_bytes(t, prec);
            jbuf e;
            const char *txt = t->s;
            if (markup && !val.markup) {
                jmem_buf_init(&e, rt->a, 0);
                jv_write_escaped(&e, t->s, len);
                txt = e.p ? e.p : "";
                len = e.n;
            }
            put_padded(&b, txt, len, ju_count(txt, len), width, strchr(flags, '-') ? '<' : '>',
                       " ", 0);
            break;
        }
        case 'd':
        case 'i':
        case 'u':
        case 'x':
        case 'X':
        case 'o': pct_int(rt, at, &b, val, type, flags, width, prec); break;
        case 'e':
        case 'E':
        case 'f':
        case 'F':
        case 'g':
        case 'G': pct_float(rt, at, &b, val, type, flags, width, prec); break;
        case 'c': {
            jbuf ch;
            jmem_buf_init(&ch, rt->a, 0);
            if (val.k == JV_INT || val.k == JV_BOOL) {
                int64_t cp = val.k == JV_BOOL ? val.b : val.i;
                if (cp < 0 || cp > 0x10FFFF)
                    jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                             "OverflowError: %%c arg not in range(0x110000)");
                if (cp >= 0xD800 && cp < 0xE000)
                    jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: %%c of a surrogate");
                jmem_put_cp(&ch, (uint32_t)cp);
            } else if (val.k == JV_STR && val.s->ncp == 1) {
                jmem_put(&ch, val.s->s, val.s->len);
            } else {
                jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                         "TypeError: %%c requires an int or a unicode character");
            }
            const char *txt = ch.p ? ch.p : "";
            put_padded(&b, txt, ch.n, 1, width, strchr(flags, '-') ? '<' : '>', " ", 0);
            break;
        }
        default:
            if (type == 'a')
                jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: the %%%c conversion", type);
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "ValueError: unsupported format character '%c' (0x%x) at index %zu", type,
                     (unsigned)(unsigned char)type, start + (p - start) - 1);
        }
        i = p;
    }
    if (!used_map && !st.map && st.next < st.nargs)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                 "TypeError: not all arguments converted during string formatting");
    jv r = jv_str_buf(&b);
    r.markup = markup;
    return r;
}

/* ---------------------------------------------------------------------------------------------
 * str.format
 * ------------------------------------------------------------------------------------------- */

typedef struct fspec {
    char fill[5];
    char align; /* 0, '<', '>', '^', '=' */
    char sign;  /* 0, '+', '-', ' ' */
    bool alt, zero;
    int64_t width, prec; /* -1: none */
    char group;          /* 0, ',', '_' */
    char type;           /* 0 or the presentation type */
} fspec;

static void parse_spec(jrt *rt, const jnode *at, const char *s, size_t n, fspec *f) {
    memset(f, 0, sizeof *f);
    strcpy(f->fill, " ");
    f->width = f->prec = -1;
    size_t i = 0;
    size_t first = 0;
    if (n) {
        size_t j = 0;
        ju_decode(s, n, &j);
        first = j;
    }
    if (n > first && strchr("<>^=", s[first]) && s[first]) {
        memcpy(f->fill, s, first);
        f->fill[first] = 0;
        f->align = s[first];
        i = first + 1;
    } else if (n && strchr("<>^=", s[0]) && s[0]) {
        f->align = s[0];
        i = 1;
    }
    if (i < n && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) f->sign = s[i++];
    if (i < n && s[i] == 'z')
        jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: the 'z' format option");
    if (i < n && s[i] == '#') {
        f->alt = true;
        i++;
    }
    if (i < n && s[i] == '0') {
        f->zero = true;
        i++;
    }
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        f->width = (f->width < 0 ? 0 : f->width) * 10 + (s[i++] - '0');
        if (f->width > 100000) jrt_fail(rt, at, EM_ERR_OVERFLOW, "format width too large");
    }
    if (i < n && (s[i] == ',' || s[i] == '_')) f->group = s[i++];
    if (i < n && s[i] == '.') {
        i++;
        f->prec = 0;
        if (i >= n || s[i] < '0' || s[i] > '9')
            jrt_fail(rt, at, EM_ERR_INVALID_ARG, "ValueError: Format specifier missing precision");
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            f->prec = f->prec * 10 + (s[i++] - '0');
            if (f->prec > 100000) jrt_fail(rt, at, EM_ERR_OVERFLOW, "format precision too large");
        }
    }
    if (i < n) f->type = s[i++];
    if (i < n) jrt_fail(rt, at, EM_ERR_INVALID_ARG, "ValueError: Invalid format specifier");
}

static void format_value(jrt *rt, const jnode *at, jbuf *b, jv v, const char *spec, size_t n) {
    if (n == 0) {
        jv_write_str(rt, at, b, v);
        return;
    }
    fspec f;
    parse_spec(rt, at, spec, n, &f);
    if (f.group) jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: digit grouping in formats");
    if (v.k == JV_STR && (f.type == 0 || f.type == 's')) {
        if (f.sign || f.alt || f.align == '=')
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "ValueError: invalid format specifier for a string");
        size_t len = trunc_bytes(v.s, f.prec);
        put_padded(b, v.s->s, len, ju_count(v.s->s, len), f.width, f.align ? f.align : '<',
                   f.fill, 0);
        return;
    }
    if (jv_is_number(v)) {
        jbuf t;
        jmem_buf_init(&t, rt->a, 0);
        bool isint = v.k != JV_FLOAT;
        char type = f.type;
        if (isint && (type == 0 || type == 'd' || type == 'x' || type == 'X' || type == 'o' ||
                      type == 'b')) {
            if (f.prec >= 0)
                jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                         "ValueError: Precision not allowed in integer format specifier");
            if (type == 'b') jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: binary formats");
            char flags[6] = "";
            size_t nf = 0;
            if (f.sign == '+' || f.sign == ' ') flags[nf++] = f.sign;
            if (f.alt) flags[nf++] = '#';
            flags[nf] = 0;
            int64_t x = v.k == JV_BOOL ? v.b : v.i;
            pct_int(rt, at, &t, jv_int(x), type ? type : 'd', flags, -1, -1);
        } else if (type == 0 && !isint && f.prec < 0) {
            if (f.sign == '+' && !signbit(v.f)) jmem_putc(&t, '+');
            if (f.sign == ' ' && !signbit(v.f)) jmem_putc(&t, ' ');
            jv_write_float(&t, v.f);
        } else if (type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == '%' ||
                   ((type == 'g' || type == 'G') && !f.alt)) {
            char flags[6] = "";
            size_t nf = 0;
            if (f.sign == '+' || f.sign == ' ') flags[nf++] = f.sign;
            if (f.alt) flags[nf++] = '#';
            flags[nf] = 0;
            double x = jv_as_double(v);
            if (type == '%') x *= 100.0;
            pct_float(rt, at, &t, jv_float(x), type == '%' ? 'f' : type, flags, -1,
                      f.prec < 0 ? 6 : f.prec);
            if (type == '%') jmem_putc(&t, '%');
        } else {
            jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: the format spec '%.*s' for a %s",
                     (int)n, spec, jv_typename(v));
        }
        const char *s = t.p ? t.p : "";
        size_t sign_len = (s[0] == '-' || s[0] == '+' || s[0] == ' ') ? 1 : 0;
        if (sign_len && t.n > 2 && s[1] == '0' && (s[2] == 'x' || s[2] == 'X' || s[2] == 'o'))
            sign_len = 3;
        else if (!sign_len && t.n > 1 && s[0] == '0' &&
                 (s[1] == 'x' || s[1] == 'X' || s[1] == 'o'))
            sign_len = 2;
        char align = f.align ? f.align : f.zero ? '=' : '>';
        const char *fill = f.align ? f.fill : f.zero ? "0" : " ";
        put_padded(b, s, t.n, t.n, f.width, align, fill, sign_len);
        return;
    }
    jrt_fail(rt, at, EM_ERR_INVALID_ARG,
             "TypeError: unsupported format string passed to %s.__format__", jv_typename(v));
}

jv jrt_fmt_format(jrt *rt, const jnode *at, jv fmt, jargs *a) {
    const char *s = fmt.s->s;
    size_t n = fmt.s->len;
    jbuf b;
    jmem_buf_init(&b, rt->a, 0);
    int auto_idx = 0;
    int mode = 0; /* 1 automatic numbering, 2 manual */
    for (size_t i = 0; i < n;) {
        char c = s[i];
        if (c == '}') {
            if (i + 1 < n && s[i + 1] == '}') {
                jmem_putc(&b, '}');
                i += 2;
                continue;
            }
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "ValueError: Single '}' encountered in format string");
        }
        if (c != '{') {
            jmem_putc(&b, c);
            i++;
            continue;
        }
        if (i + 1 < n && s[i + 1] == '{') {
            jmem_putc(&b, '{');
            i += 2;
            continue;
        }
        size_t j = i + 1;
        int depth = 1;
        while (j < n && depth) {
            if (s[j] == '{') depth++;
            if (s[j] == '}') depth--;
            if (depth) j++;
        }
        if (j >= n)
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "ValueError: expected '}' before end of string");
        const char *field = s + i + 1;
        size_t flen = j - i - 1;
        if (memchr(field, '{', flen))
            jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: nested fields in format specs");
        const char *colon = memchr(field, ':', flen);
        const char *bang = memchr(field, '!', colon ? (size_t)(colon - field) : flen);
        size_t name_len = bang ? (size_t)(bang - field) : colon ? (size_t)(colon - field) : flen;
        char conv = 0;
        if (bang) {
            size_t clen = (colon ? (size_t)(colon - bang) : flen - (size_t)(bang - field)) - 1;
            if (clen != 1 || (bang[1] != 'r' && bang[1] != 's' && bang[1] != 'a'))
                jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                         "ValueError: expected ':' after conversion specifier");
            conv = bang[1];
            if (conv == 'a') jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: !a conversions");
        }
        /* the first part of the field name: index or keyword */
        size_t k = 0;
        while (k < name_len && field[k] != '.' && field[k] != '[') k++;
        jv val;
        if (k == 0) {
            if (mode == 2)
                jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                         "ValueError: cannot switch from manual field specification to "
                         "automatic field numbering");
            mode = 1;
            if (auto_idx >= a->npos)
                jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                         "IndexError: Replacement index %d out of range for positional args "
                         "tuple",
                         auto_idx);
            val = a->pos[auto_idx++];
        } else if (field[0] >= '0' && field[0] <= '9') {
            if (mode == 1)
                jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                         "ValueError: cannot switch from automatic field numbering to manual "
                         "field specification");
            mode = 2;
            long idx = strtol(field, NULL, 10);
            if (idx >= a->npos)
                jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                         "IndexError: Replacement index %ld out of range for positional args "
                         "tuple",
                         idx);
            val = a->pos[idx];
        } else {
            int found = -1;
            for (int q = 0; q < a->nkw; q++)
                if (strlen(a->kwn[q]) == k && !memcmp(a->kwn[q], field, k)) found = q;
            if (found < 0) jrt_fail(rt, at, EM_ERR_INVALID_ARG, "KeyError: '%.*s'", (int)k, field);
            val = a->kwv[found];
        }
        /* .attr and [key] parts, through the sandbox like jinja2's SandboxedFormatter */
        while (k < name_len) {
            if (field[k] == '.') {
                size_t e = k + 1;
                while (e < name_len && field[e] != '.' && field[e] != '[') e++;
                char *attr = jmem_strndup(rt->a, field + k + 1, e - k - 1);
                val = jrt_op_getattr(rt, at, val, attr);
                k = e;
            } else {
                size_t e = k + 1;
                while (e < name_len && field[e] != ']') e++;
                if (e >= name_len)
                    jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                             "ValueError: Missing ']' in format string");
                const char *key = field + k + 1;
                size_t klen = e - k - 1;
                bool digits = klen > 0;
                for (size_t q = 0; q < klen; q++)
                    if (key[q] < '0' || key[q] > '9') digits = false;
                jv kv = digits ? jv_int(strtoll(key, NULL, 10)) : jv_str(rt->a, key, klen);
                val = jrt_op_getitem(rt, at, val, kv);
                k = e + 1;
            }
        }
        if (conv) {
            jbuf t;
            jmem_buf_init(&t, rt->a, 0);
            if (conv == 'r')
                jv_write_repr(rt, at, &t, val);
            else
                jv_write_str(rt, at, &t, val);
            val = jv_str_buf(&t);
        }
        const char *spec = colon ? colon + 1 : "";
        size_t slen = colon ? (size_t)(field + flen - colon - 1) : 0;
        format_value(rt, at, &b, val, spec, slen);
        i = j + 1;
    }
    jv r = jv_str_buf(&b);
    r.markup = fmt.markup;
    if (fmt.markup)
        jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: str.format() on a Markup string");
    return r;
}

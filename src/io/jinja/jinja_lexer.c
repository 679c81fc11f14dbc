/* Chat templates: the lexer. It follows jinja2/lexer.py rule by rule, configured as transformers
 * configures it (trim_blocks=True, lstrip_blocks=True, default delimiters, no line statements),
 * because whitespace handling decides the exact bytes of a prompt. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/jinja/jinja.h"

const char *const jrt_op_text[JO_COUNT] = {
    [JO_ADD] = "+",      [JO_SUB] = "-",      [JO_DIV] = "/",       [JO_FLOORDIV] = "//",
    [JO_MUL] = "*",      [JO_MOD] = "%",      [JO_POW] = "**",      [JO_TILDE] = "~",
    [JO_LBRACKET] = "[", [JO_RBRACKET] = "]", [JO_LPAREN] = "(",    [JO_RPAREN] = ")",
    [JO_LBRACE] = "{",   [JO_RBRACE] = "}",   [JO_EQ] = "==",       [JO_NE] = "!=",
    [JO_GT] = ">",       [JO_GTEQ] = ">=",    [JO_LT] = "<",        [JO_LTEQ] = "<=",
    [JO_ASSIGN] = "=",   [JO_DOT] = ".",      [JO_COLON] = ":",     [JO_PIPE] = "|",
    [JO_COMMA] = ",",    [JO_SEMICOLON] = ";", [JO_IN] = "in",      [JO_NOTIN] = "not in",
};

typedef struct lexer {
    jarena *a;
    jfail *f;
    const char *s;
    size_t n, pos;
    bool line_starting; /* the previous match ended with a newline (lstrip_blocks) */
    jtok *t;
    size_t nt, cap;
    char *bal; /* brackets opened inside the current tag */
    size_t nbal, capbal;
} lexer;

char *jinja_normalize_source(jarena *a, const char *src, size_t *len) {
    size_t n = *len;
    char *out = jmem_alloc(a, n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            out[o++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else {
            out[o++] = src[i];
        }
    }
    if (o && out[o - 1] == '\n') o--; /* keep_trailing_newline=False */
    out[o] = 0;
    *len = o;
    return out;
}

static jtok *emit(lexer *lx, jtok_kind k, size_t pos) {
    if (lx->nt == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        lx->t = jmem_grow(lx->a, lx->t, lx->nt * sizeof *lx->t, cap * sizeof *lx->t);
        lx->cap = cap;
    }
    jtok *t = &lx->t[lx->nt++];
    memset(t, 0, sizeof *t);
    t->kind = (uint8_t)k;
    t->pos = (uint32_t)pos;
    return t;
}

static void emit_data(lexer *lx, size_t start, size_t end) {
    if (end <= start) return;
    jtok *t = emit(lx, JT_DATA, start);
    t->s = jmem_strndup(lx->a, lx->s + start, end - start);
    t->len = end - start;
}

/* Python's \s (str.isspace) at byte i; its length in bytes, 0 if not a space. */
static size_t space_at(const lexer *lx, size_t i) {
    if (i >= lx->n) return 0;
    unsigned char c = (unsigned char)lx->s[i];
    if (c < 0x80) return ju_isspace(c) ? 1 : 0;
    size_t j = i;
    uint32_t cp = ju_decode(lx->s, lx->n, &j);
    return ju_isspace(cp) ? j - i : 0;
}

static size_t skip_space(const lexer *lx, size_t i) {
    size_t k;
    while ((k = space_at(lx, i)) > 0) i += k;
    return i;
}

static bool at(const lexer *lx, size_t i, const char *lit) {
    size_t k = strlen(lit);
    return i + k <= lx->n && !memcmp(lx->s + i, lit, k);
}

/* Is s[from:to] entirely Python whitespace (and not empty)? */
static bool all_space(const lexer *lx, size_t from, size_t to) {
    if (from >= to) return false;
    size_t i = from;
    while (i < to) {
        size_t k = space_at(lx, i);
        if (!k) return false;
        i += k;
    }
    return true;
}

/* End of s[start:end] after str.rstrip(). */
static size_t rstrip_end(const lexer *lx, size_t start, size_t end) {
    while (end > start) {
        size_t k = end - 1;
        while (k > start && ((unsigned char)lx->s[k] & 0xC0) == 0x80) k--;
        if (space_at(lx, k) != end - k) break;
        end = k;
    }
    return end;
}

/* The text before a tag, after "-" stripping or lstrip_blocks (OptionalLStrip in jinja2). */
static void emit_text_before(lexer *lx, size_t start, size_t end, char sign, bool is_variable) {
    if (sign == '-') {
        end = rstrip_end(lx, start, end);
    } else if (sign != '+' && !is_variable) {
        size_t l = end;
        while (l > start && lx->s[l - 1] != '\n') l--;
        if ((l > start || lx->line_starting) && all_space(lx, l, end)) end = l;
    }
    emit_data(lx, start, end);
}

static void push_bal(lexer *lx, char c) {
    if (lx->nbal == lx->capbal) {
        size_t cap = lx->capbal ? lx->capbal * 2 : 16;
        lx->bal = jmem_grow(lx->a, lx->bal, lx->nbal, cap);
        lx->capbal = cap;
    }
    lx->bal[lx->nbal++] = c;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_alpha_(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* (\d+_)*\d+ at i; returns the end or i when it does not match. */
static size_t digit_group(const lexer *lx, size_t i) {
    if (i >= lx->n || !is_digit(lx->s[i])) return i;
    size_t j = i;
    for (;;) {
        while (j < lx->n && is_digit(lx->s[j])) j++;
        if (j + 1 < lx->n && lx->s[j] == '_' && is_digit(lx->s[j + 1])) {
            j++;
            continue;
        }
        return j;
    }
}

/* [eE][+-]?D at p: the end of the exponent, 0 when there is none. */
static size_t exponent_at(const lexer *lx, size_t p) {
    if (p >= lx->n || (lx->s[p] != 'e' && lx->s[p] != 'E')) return 0;
    size_t x = p + 1;
    if (x < lx->n && (lx->s[x] == '+' || lx->s[x] == '-')) x++;
    size_t d = digit_group(lx, x);
    return d > x ? d : 0;
}

/* jinja2's float_re: D ((\.D)? e[+-]?D | \.D), not right after a dot. */
static size_t match_float(const lexer *lx, size_t i) {
    if (i > 0 && lx->s[i - 1] == '.') return 0;
    size_t j = digit_group(lx, i);
    if (j == i) return 0;
    size_t frac = 0;
    if (j < lx->n && lx->s[j] == '.') {
        size_t f = digit_group(lx, j + 1);
        if (f > j + 1) frac = f;
    }
    size_t e;
    if (frac && (e = exponent_at(lx, frac)) > 0) return e - i;
    if ((e = exponent_at(lx, j)) > 0) return e - i;
    return frac ? frac - i : 0;
}

static bool is_base_digit(char c, int base) {
    if (base == 2) return c == '0' || c == '1';
    if (base == 8) return c >= '0' && c <= '7';
    if (base == 16)
        return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    return is_digit(c);
}

/* (_?[digit])+ after a prefix; returns the end or `i` when nothing matched. */
static size_t prefixed_digits(const lexer *lx, size_t i, int base) {
    size_t j = i;
    for (;;) {
        if (j < lx->n && is_base_digit(lx->s[j], base))
            j++;
        else if (j + 1 < lx->n && lx->s[j] == '_' && is_base_digit(lx->s[j + 1], base))
            j += 2;
        else
            return j;
    }
}

static size_t match_int(const lexer *lx, size_t i, int *base) {
    const char *s = lx->s;
    if (i >= lx->n || !is_digit(s[i])) return 0;
    if (s[i] == '0' && i + 1 < lx->n) {
        char p = s[i + 1];
        int b = (p == 'b' || p == 'B') ? 2 : (p == 'o' || p == 'O') ? 8
                : (p == 'x' || p == 'X') ? 16 : 0;
        if (b) {
            size_t e = prefixed_digits(lx, i + 2, b);
            if (e > i + 2) {
                *base = b;
                return e - i;
            }
        }
    }
    *base = 10;
    if (s[i] == '0') { /* 0(_?0)* */
        size_t j = i + 1;
        for (;;) {
            if (j < lx->n && s[j] == '0')
                j++;
            else if (j + 1 < lx->n && s[j] == '_' && s[j + 1] == '0')
                j += 2;
            else
                return j - i;
        }
    }
    return prefixed_digits(lx, i + 1, 10) - i; /* [1-9](_?\d)* */
}

static int64_t parse_int(lexer *lx, size_t i, size_t len, int base) {
    const char *s = lx->s + i;
    size_t k = base == 10 ? 0 : 2;
    uint64_t v = 0;
    for (; k < len; k++) {
        char c = s[k];
        if (c == '_') continue;
        int d = is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
        if (v > (uint64_t)(INT64_MAX - d) / (uint64_t)base)
            jmem_fail_at(lx->f, EM_ERR_UNSUPPORTED, (uint32_t)i,
                     "unsupported: integer literal %.*s does not fit in 64 bits", (int)len, s);
        v = v * (uint64_t)base + (uint64_t)d;
    }
    return (int64_t)v;
}

static int hexval(char c) {
    if (is_digit(c)) return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* jinja2 decodes a literal with .encode("ascii", "backslashreplace").decode("unicode-escape"):
 * build the ASCII form first, then apply Python's unicode-escape rules to it. */
static void lex_string(lexer *lx, jtok *t, size_t start, size_t end) {
    jbuf ascii, out;
    jmem_buf_init(&ascii, lx->a, 0);
    jmem_buf_init(&out, lx->a, 0);
    size_t i = start;
    while (i < end) {
        unsigned char c = (unsigned char)lx->s[i];
        if (c < 0x80) {
            jmem_putc(&ascii, (char)c);
            i++;
            continue;
        }
        uint32_t cp = ju_decode(lx->s, end, &i);
        if (cp <= 0xFF)
            jmem_printf(&ascii, "\\x%02x", cp);
        else if (cp <= 0xFFFF)
            jmem_printf(&ascii, "\\u%04x", cp);
        else
            jmem_printf(&ascii, "\\U%08x", cp);
    }
    const char *s = ascii.p ? ascii.p : "";
    size_t n = ascii.n;
    uint32_t pos = (uint32_t)(start - 1);
    for (size_t k = 0; k < n;) {
        char c = s[k++];
        if (c != '\\') {
            jmem_putc(&out, c);
            continue;
        }
        if (k >= n) jmem_fail_at(lx->f, EM_ERR_FORMAT, pos, "syntax error: \\ at end of string");
        char e = s[k++];
        uint32_t cp;
        switch (e) {
        case '\n': continue;
        case '\\': cp = '\\'; break;
        case '\'': cp = '\''; break;
        case '"': cp = '"'; break;
        case 'a': cp = 7; break;
        case 'b': cp = 8; break;
        case 'f': cp = 12; break;
        case 't': cp = 9; break;
        case 'n': cp = 10; break;
        case 'r': cp = 13; break;
        case 'v': cp = 11; break;
        case 'x':
        case 'u':
        case 'U': {
            int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            cp = 0;
            for (int d = 0; d < digits; d++) {
                int h = k < n ? hexval(s[k]) : -1;
                if (h < 0)
                    jmem_fail_at(lx->f, EM_ERR_FORMAT, pos, "syntax error: truncated \\%s escape",
                             e == 'x' ? "xXX" : e == 'u' ? "uXXXX" : "UXXXXXXXX");
                cp = cp * 16 + (uint32_t)h;
                k++;
            }
            if (cp > 0x10FFFF)
                jmem_fail_at(lx->f, EM_ERR_FORMAT, pos, "syntax error: illegal Unicode character");
            break;
        }
        case 'N':
            jmem_fail_at(lx->f, EM_ERR_UNSUPPORTED, pos,
                     "unsupported: \\N{...} escapes in string literals");
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int d = 0; d < 2 && k < n && s[k] >= '0' && s[k] <= '7'; d++)
                    cp = cp * 8 + (uint32_t)(s[k++] - '0');
                break;
            }
            jmem_putc(&out, '\\');
            jmem_putc(&out, e);
            continue;
        }
        if (cp >= 0xD800 && cp < 0xE000)
            jmem_fail_at(lx->f, EM_ERR_UNSUPPORTED, pos,
                     "unsupported: a string literal with a lone surrogate (U+%04X)", cp);
        jmem_put_cp(&out, cp);
    }
    t->s = out.p ? out.p : jmem_strndup(lx->a, "", 0);
    t->len = out.n;
}

/* Matches an operator at i; returns its length. */
static size_t match_op(const lexer *lx, size_t i, jop *op) {
    static const char *const two[] = {"//", "**", "==", "!=", ">=", "<="};
    static const jop twoop[] = {JO_FLOORDIV, JO_POW, JO_EQ, JO_NE, JO_GTEQ, JO_LTEQ};
    for (int k = 0; k < 6; k++)
        if (at(lx, i, two[k])) {
            *op = twoop[k];
            return 2;
        }
    static const char one[] = "+-/*%~[](){}><=.:|,;";
    static const jop oneop[] = {JO_ADD, JO_SUB, JO_DIV, JO_MUL, JO_MOD, JO_TILDE, JO_LBRACKET,
                                JO_RBRACKET, JO_LPAREN, JO_RPAREN, JO_LBRACE, JO_RBRACE, JO_GT,
                                JO_LT, JO_ASSIGN, JO_DOT, JO_COLON, JO_PIPE, JO_COMMA,
                                JO_SEMICOLON};
    const char *p = i < lx->n ? strchr(one, lx->s[i]) : NULL;
    if (!p || !*p) return 0;
    *op = oneop[p - one];
    return 1;
}

/* Tokens inside {{ }} or {% %}; returns false at the end of the source (the parser reports). */
static bool lex_tag(lexer *lx, bool variable) {
    lx->nbal = 0;
    for (;;) {
        size_t i = lx->pos;
        if (i >= lx->n) return false;
        if (lx->nbal == 0) {
            if (variable) {
                if (at(lx, i, "-}}")) {
                    size_t e = skip_space(lx, i + 3);
                    lx->line_starting = lx->s[e - 1] == '\n';
                    emit(lx, JT_VAR_END, i);
                    lx->pos = e;
                    return true;
                }
                if (at(lx, i, "}}")) {
                    lx->line_starting = false;
                    emit(lx, JT_VAR_END, i);
                    lx->pos = i + 2;
                    return true;
                }
            } else {
                size_t e = 0;
                if (at(lx, i, "+%}"))
                    e = i + 3;
                else if (at(lx, i, "-%}"))
                    e = skip_space(lx, i + 3);
                else if (at(lx, i, "%}"))
                    e = i + 2 + (i + 2 < lx->n && lx->s[i + 2] == '\n'); /* trim_blocks */
                if (e) {
                    lx->line_starting = lx->s[e - 1] == '\n';
                    emit(lx, JT_BLOCK_END, i);
                    lx->pos = e;
                    return true;
                }
            }
        }
        size_t k = space_at(lx, i);
        if (k) {
            lx->pos = skip_space(lx, i);
            continue;
        }
        if ((k = match_float(lx, i)) > 0) {
            jtok *t = emit(lx, JT_FLOAT, i);
            char tmp[128];
            size_t o = 0;
            for (size_t j = i; j < i + k && o + 1 < sizeof tmp; j++)
                if (lx->s[j] != '_') tmp[o++] = lx->s[j];
            tmp[o] = 0;
            t->f = strtod(tmp, NULL);
            lx->pos = i + k;
            continue;
        }
        int base;
        if ((k = match_int(lx, i, &base)) > 0) {
            jtok *t = emit(lx, JT_INT, i);
            t->i = parse_int(lx, i, k, base);
            lx->pos = i + k;
            continue;
        }
        char c = lx->s[i];
        if (is_alpha_(c)) {
            size_t j = i + 1;
            while (j < lx->n && (is_alpha_(lx->s[j]) || is_digit(lx->s[j]))) j++;
            size_t nx = j;
            if (j < lx->n && ((unsigned char)lx->s[j] & 0x80) &&
                ju_isalnum(ju_decode(lx->s, lx->n, &nx)))
                jmem_fail_at(lx->f, EM_ERR_UNSUPPORTED, (uint32_t)i,
                         "unsupported: a name with non-ASCII characters");
            jtok *t = emit(lx, JT_NAME, i);
            t->s = jmem_strndup(lx->a, lx->s + i, j - i);
            t->len = j - i;
            lx->pos = j;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < lx->n && lx->s[j] != c) j += lx->s[j] == '\\' && j + 1 < lx->n ? 2 : 1;
            if (j < lx->n) {
                jtok *t = emit(lx, JT_STRING, i);
                lex_string(lx, t, i + 1, j);
                lx->pos = j + 1;
                continue;
            }
        }
        jop op;
        if ((k = match_op(lx, i, &op)) > 0) {
            if (op == JO_LPAREN || op == JO_LBRACKET || op == JO_LBRACE) {
                push_bal(lx, op == JO_LPAREN ? ')' : op == JO_LBRACKET ? ']' : '}');
            } else if (op == JO_RPAREN || op == JO_RBRACKET || op == JO_RBRACE) {
                if (!lx->nbal)
                    jmem_fail_at(lx->f, EM_ERR_FORMAT, (uint32_t)i, "syntax error: unexpected '%c'",
                             c);
                char want = lx->bal[--lx->nbal];
                if (want != c)
                    jmem_fail_at(lx->f, EM_ERR_FORMAT, (uint32_t)i,
                             "syntax error: unexpected '%c', expected '%c'", c, want);
            }
            jtok *t = emit(lx, JT_OP, i);
            t->op = (uint8_t)op;
            lx->pos = i + k;
            continue;
        }
        if ((unsigned char)c >= 0x80) {
            size_t j = i;
            uint32_t cp = ju_decode(lx->s, lx->n, &j);
            if (ju_isalpha(cp) || ju_class("digit", cp))
                jmem_fail_at(lx->f, EM_ERR_UNSUPPORTED, (uint32_t)i,
                         "unsupported: non-ASCII names and digits (U+%04X)", cp);
            jmem_fail_at(lx->f, EM_ERR_FORMAT, (uint32_t)i, "syntax error: unexpected char U+%04X",
                     cp);
        }
        jmem_fail_at(lx->f, EM_ERR_FORMAT, (uint32_t)i, "syntax error: unexpected char '%c'", c);
    }
}

/* {%[-+]?\s*raw\s*(-%}\s*|%}) at i: the end of the match, 0 if it is not a raw block. */
static size_t match_raw_begin(const lexer *lx, size_t i) {
    size_t j = i + 2;
    if (j < lx->n && (lx->s[j] == '-' || lx->s[j] == '+')) j++;
    j = skip_space(lx, j);
    if (!at(lx, j, "raw")) return 0;
    j = skip_space(lx, j + 3);
    if (at(lx, j, "-%}")) return skip_space(lx, j + 3);
    if (at(lx, j, "%}")) return j + 2;
    return 0;
}

/* {%(-|+|)\s*endraw\s*(+%}|-%}\s*|%}\n?) from i on; returns true and the bounds when found. */
static bool find_endraw(const lexer *lx, size_t i, size_t *tag, char *sign, size_t *end) {
    for (size_t q = i; q + 1 < lx->n; q++) {
        if (lx->s[q] != '{' || lx->s[q + 1] != '%') continue;
        size_t j = q + 2;
        char sg = 0;
        if (j < lx->n && (lx->s[j] == '-' || lx->s[j] == '+')) sg = lx->s[j++];
        j = skip_space(lx, j);
        if (!at(lx, j, "endraw")) continue;
        j = skip_space(lx, j + 6);
        size_t e = 0;
        if (at(lx, j, "+%}"))
            e = j + 3;
        else if (at(lx, j, "-%}"))
            e = skip_space(lx, j + 3);
        else if (at(lx, j, "%}"))
            e = j + 2 + (j + 2 < lx->n && lx->s[j + 2] == '\n');
        if (!e) continue;
        *tag = q;
        *sign = sg;
        *end = e;
        return true;
    }
    return false;
}

jtok *jinja_lex(jarena *a, jfail *f, const char *src, size_t len, size_t *ntok) {
    lexer lx = {.a = a, .f = f, .s = src, .n = len, .line_starting = true};
    while (lx.pos < lx.n) {
        const char *p = lx.s + lx.pos;
        size_t k = lx.pos;
        for (;;) {
            const char *q = memchr(p, '{', (size_t)(lx.s + lx.n - p));
            if (!q) {
                k = lx.n;
                break;
            }
            k = (size_t)(q - lx.s);
            if (k + 1 < lx.n && (q[1] == '{' || q[1] == '%' || q[1] == '#')) break;
            p = q + 1;
        }
        if (k >= lx.n) {
            emit_data(&lx, lx.pos, lx.n);
            break;
        }
        char kind = lx.s[k + 1];
        size_t body = k + 2;
        char sign = 0;
        if (body < lx.n && (lx.s[body] == '-' || lx.s[body] == '+')) sign = lx.s[body++];
        size_t raw_end = kind == '%' ? match_raw_begin(&lx, k) : 0;
        emit_text_before(&lx, lx.pos, k, sign, kind == '{');
        lx.line_starting = false;
        if (raw_end) {
            lx.line_starting = lx.s[raw_end - 1] == '\n';
            size_t tag, end;
            char rsign;
            if (!find_endraw(&lx, raw_end, &tag, &rsign, &end)) {
                if (raw_end < lx.n)
                    jmem_fail_at(f, EM_ERR_FORMAT, (uint32_t)k,
                             "syntax error: missing end of raw directive");
                lx.pos = lx.n;
                break;
            }
            emit_text_before(&lx, raw_end, tag, rsign, false);
            lx.line_starting = lx.s[end - 1] == '\n';
            lx.pos = end;
            continue;
        }
        if (kind == '#') {
            size_t q = body, end = 0;
            for (; q + 1 < lx.n; q++) {
                if (lx.s[q] == '+' && at(&lx, q + 1, "#}")) {
                    end = q + 3;
                    break;
                }
                if (lx.s[q] == '-' && at(&lx, q + 1, "#}")) {
                    end = skip_space(&lx, q + 3);
                    break;
                }
                if (lx.s[q] == '#' && lx.s[q + 1] == '}') {
                    end = q + 2 + (q + 2 < lx.n && lx.s[q + 2] == '\n');
                    break;
                }
            }
            if (!end) {
                if (body < lx.n)
                    jmem_fail_at(f, EM_ERR_FORMAT, (uint32_t)k,
                             "syntax error: missing end of comment tag");
                lx.pos = lx.n;
                break;
            }
            lx.line_starting = lx.s[end - 1] == '\n';
            lx.pos = end;
            continue;
        }
        emit(&lx, kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, k);
        lx.pos = body;
        if (!lex_tag(&lx, kind == '{')) break;
    }
    emit(&lx, JT_EOF, lx.n);
    *ntok = lx.nt;
    return lx.t;
}

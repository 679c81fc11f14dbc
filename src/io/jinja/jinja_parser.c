/* Chat templates: the parser, a transcription of jinja2/parser.py (same grammar, same
 * precedence, same error wording where it helps) plus the {% generation %} tag of transformers'
 * AssistantTracker and the loopcontrols extension. */
#include <stdio.h>
#include <string.h>

#include "io/jinja/jinja.h"

typedef struct parser {
    jarena *a;
    jfail *f;
    const jtok *t;
    size_t nt, i;
    int depth, max_depth, max_height;
    int loop_depth;          /* enclosing for-loop bodies in the current function */
    const char *tags[64];    /* open block tags, for end-of-template messages */
    const char *const *ends[64]; /* end tags each open block waits for */
    int ntags;
} parser;

static const jtok *cur(parser *p) { return &p->t[p->i]; }
static const jtok *look(parser *p) { return &p->t[p->i + 1 < p->nt ? p->i + 1 : p->i]; }
static const jtok *next(parser *p) {
    const jtok *t = cur(p);
    if (t->kind != JT_EOF) p->i++;
    return t;
}

static bool is_op(const jtok *t, jop op) { return t->kind == JT_OP && t->op == op; }
static bool is_name(const jtok *t, const char *name) {
    return t->kind == JT_NAME && !strcmp(t->s, name);
}

static const char *describe(const jtok *t) {
    switch (t->kind) {
    case JT_EOF: return "end of template";
    case JT_DATA: return "template data / text";
    case JT_VAR_BEGIN: return "begin of print statement";
    case JT_VAR_END: return "end of print statement";
    case JT_BLOCK_BEGIN: return "begin of statement block";
    case JT_BLOCK_END: return "end of statement block";
    case JT_NAME: return t->s;
    case JT_STRING: return "string";
    case JT_INT: return "integer";
    case JT_FLOAT: return "float";
    case JT_OP: return jrt_op_text[t->op];
    }
    return "?";
}

_Noreturn static void fail(parser *p, const jtok *t, const char *fmt, const char *a1,
                           const char *a2) {
    char msg[400];
    snprintf(msg, sizeof msg, fmt, a1 ? a1 : "", a2 ? a2 : "");
    jmem_fail_at(p->f, EM_ERR_FORMAT, t->pos, "syntax error: %s", msg);
}

_Noreturn static void unsupported(parser *p, const jtok *t, const char *what) {
    jmem_fail_at(p->f, EM_ERR_UNSUPPORTED, t->pos, "unsupported: %s", what);
}

static void expect_kind(parser *p, jtok_kind k, const char *what) {
    const jtok *t = cur(p);
    if (t->kind == k) {
        next(p);
        return;
    }
    if (t->kind == JT_EOF) fail(p, t, "unexpected end of template, expected '%s'", what, NULL);
    fail(p, t, "expected token '%s', got '%s'", what, describe(t));
}

static void expect_op(parser *p, jop op) {
    const jtok *t = cur(p);
    if (is_op(t, op)) {
        next(p);
        return;
    }
    if (t->kind == JT_EOF)
        fail(p, t, "unexpected end of template, expected '%s'", jrt_op_text[op], NULL);
    fail(p, t, "expected token '%s', got '%s'", jrt_op_text[op], describe(t));
}

static const jtok *expect_name(parser *p, const char *name) {
    const jtok *t = cur(p);
    if (t->kind == JT_NAME && (!name || !strcmp(t->s, name))) return next(p);
    const char *want = name ? name : "name";
    if (t->kind == JT_EOF) fail(p, t, "unexpected end of template, expected '%s'", want, NULL);
    fail(p, t, "expected token '%s', got '%s'", want, describe(t));
}

static void enter(parser *p) {
    if (++p->depth > p->max_depth)
        jmem_fail_at(p->f, EM_ERR_OVERFLOW, cur(p)->pos,
                 "the template nests expressions or blocks more than %d deep (limit)",
                 p->max_depth);
}
static void leave(parser *p) { p->depth--; }

/* ---- nodes ---- */

static jnode *mk(parser *p, jn_kind k, uint32_t pos) {
    jnode *n = jmem_zalloc(p->a, sizeof *n);
    n->kind = (uint8_t)k;
    n->pos = pos;
    n->h = 1;
    return n;
}

static uint32_t list_height(const jnlist *l) {
    uint32_t h = 0;
    for (int k = 0; k < l->n; k++)
        if (l->v[k]->h > h) h = l->v[k]->h;
    return h;
}

/* Records the height of a finished node; operator chains are built in loops, so this is what
 * keeps every later walk of the tree (checks, evaluation) within a bounded recursion. */
static jnode *fin(parser *p, jnode *n) {
    uint32_t h = 0;
    const jnode *kids[3] = {n->a, n->b, n->c};
    for (int k = 0; k < 3; k++)
        if (kids[k] && kids[k]->h > h) h = kids[k]->h;
    uint32_t lh = list_height(&n->l1);
    if (lh > h) h = lh;
    lh = list_height(&n->l2);
    if (lh > h) h = lh;
    lh = list_height(&n->l3);
    if (lh > h) h = lh;
    n->h = h + 1;
    if (n->h > (uint32_t)p->max_height)
        jmem_fail_at(p->f, EM_ERR_OVERFLOW, n->pos,
                 "the template's expressions or elif chains nest more than %d deep (limit)",
                 p->max_height);
    return n;
}

typedef struct nvec {
    jnode **v;
    int n, cap;
} nvec;

static void nv_push(parser *p, nvec *v, jnode *n) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        v->v = jmem_grow(p->a, v->v, (size_t)v->n * sizeof *v->v, (size_t)cap * sizeof *v->v);
        v->cap = cap;
    }
    v->v[v->n++] = n;
}
static jnlist nv_list(nvec v) { return (jnlist){v.v, v.n}; }

/* ---- expressions ---- */

static jnode *parse_expression(parser *p, bool with_condexpr);
static jnode *parse_tuple(parser *p, bool simplified, bool with_condexpr,
                          const char *const *extra_end, bool explicit_parens, bool with_ns);
static jnode *parse_unary(parser *p, bool with_filter);
static jnode *parse_primary(parser *p, bool with_ns);
static jnode *parse_postfix(parser *p, jnode *node);
static jnode *parse_filter(parser *p, jnode *node, bool start_inline);

static jnode *parse_or(parser *p);

static jnode *parse_condexpr(parser *p) {
    jnode *e1 = parse_or(p);
    while (is_name(cur(p), "if")) {
        uint32_t pos = next(p)->pos;
        jnode *n = mk(p, JN_COND, pos);
        n->a = parse_or(p);
        n->b = e1;
        if (is_name(cur(p), "else")) {
            next(p);
            enter(p);
            n->c = parse_condexpr(p);
            leave(p);
        }
        e1 = fin(p, n);
    }
    return e1;
}

static jnode *parse_not(parser *p);
static jnode *parse_and(parser *p) {
    jnode *left = parse_not(p);
    while (is_name(cur(p), "and")) {
        jnode *n = mk(p, JN_AND, next(p)->pos);
        n->a = left;
        n->b = parse_not(p);
        left = fin(p, n);
    }
    return left;
}

static jnode *parse_or(parser *p) {
    jnode *left = parse_and(p);
    while (is_name(cur(p), "or")) {
        jnode *n = mk(p, JN_OR, next(p)->pos);
        n->a = left;
        n->b = parse_and(p);
        left = fin(p, n);
    }
    return left;
}

static jnode *parse_compare(parser *p);
static jnode *parse_not(parser *p) {
    if (is_name(cur(p), "not")) {
        jnode *n = mk(p, JN_NOT, next(p)->pos);
        enter(p);
        n->a = parse_not(p);
        leave(p);
        return fin(p, n);
    }
    return parse_compare(p);
}

static jnode *parse_math1(parser *p);
static jnode *parse_compare(parser *p) {
    uint32_t pos = cur(p)->pos;
    jnode *expr = parse_math1(p);
    nvec operands = {0};
    uint8_t *ops = NULL;
    int nops = 0, capops = 0;
    for (;;) {
        const jtok *t = cur(p);
        int op = -1;
        if (t->kind == JT_OP && (t->op == JO_EQ || t->op == JO_NE || t->op == JO_LT ||
                                 t->op == JO_LTEQ || t->op == JO_GT || t->op == JO_GTEQ)) {
            op = t->op;
            next(p);
        } else if (is_name(t, "in")) {
            op = JO_IN;
            next(p);
        } else if (is_name(t, "not") && is_name(look(p), "in")) {
            op = JO_NOTIN;
            next(p);
            next(p);
        } else {
            break;
        }
        if (nops == capops) {
            int cap = capops ? capops * 2 : 4;
            ops = jmem_grow(p->a, ops, (size_t)nops, (size_t)cap);
            capops = cap;
        }
        ops[nops++] = (uint8_t)op;
        nv_push(p, &operands, parse_math1(p));
    }
    if (!nops) return expr;
    jnode *n = mk(p, JN_COMPARE, pos);
    n->a = expr;
    n->l1 = nv_list(operands);
    n->ops = ops;
    return fin(p, n);
}

static jnode *binop(parser *p, uint32_t pos, int op, jnode *a, jnode *b) {
    jnode *n = mk(p, JN_BINOP, pos);
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return fin(p, n);
}

static jnode *parse_concat(parser *p);
static jnode *parse_math1(parser *p) {
    jnode *left = parse_concat(p);
    while (is_op(cur(p), JO_ADD) || is_op(cur(p), JO_SUB)) {
        const jtok *t = next(p);
        left = binop(p, t->pos, t->op, left, parse_concat(p));
    }
    return left;
}

static jnode *parse_math2(parser *p);
static jnode *parse_concat(parser *p) {
    uint32_t pos = cur(p)->pos;
    jnode *first = parse_math2(p);
    if (!is_op(cur(p), JO_TILDE)) return first;
    nvec args = {0};
    nv_push(p, &args, first);
    while (is_op(cur(p), JO_TILDE)) {
        next(p);
        nv_push(p, &args, parse_math2(p));
    }
    jnode *n = mk(p, JN_CONCAT, pos);
    n->l1 = nv_list(args);
    return fin(p, n);
}

static jnode *parse_pow(parser *p);
static jnode *parse_math2(parser *p) {
    jnode *left = parse_pow(p);
    for (;;) {
        const jtok *t = cur(p);
        if (!(t->kind == JT_OP && (t->op == JO_MUL || t->op == JO_DIV ||
                                   t->op == JO_FLOORDIV || t->op == JO_MOD)))
            break;
        next(p);
        left = binop(p, t->pos, t->op, left, parse_pow(p));
    }
    return left;
}

static jnode *parse_pow(parser *p) {
    jnode *left = parse_unary(p, true);
    while (is_op(cur(p), JO_POW)) {
        const jtok *t = next(p);
        left = binop(p, t->pos, JO_POW, left, parse_unary(p, true));
    }
    return left;
}

static jnode *parse_filter_expr(parser *p, jnode *node);

static jnode *parse_unary(parser *p, bool with_filter) {
    const jtok *t = cur(p);
    jnode *node;
    enter(p);
    if (is_op(t, JO_SUB) || is_op(t, JO_ADD)) {
        next(p);
        node = mk(p, t->op == JO_SUB ? JN_NEG : JN_POS, t->pos);
        node->a = parse_unary(p, false);
        fin(p, node);
    } else {
        node = parse_primary(p, false);
    }
    node = parse_postfix(p, node);
    if (with_filter) node = parse_filter_expr(p, node);
    leave(p);
    return node;
}

static jnode *parse_list(parser *p) {
    jnode *n = mk(p, JN_LIST, cur(p)->pos);
    expect_op(p, JO_LBRACKET);
    nvec items = {0};
    while (!is_op(cur(p), JO_RBRACKET)) {
        if (items.n) expect_op(p, JO_COMMA);
        if (is_op(cur(p), JO_RBRACKET)) break;
        nv_push(p, &items, parse_expression(p, true));
    }
    expect_op(p, JO_RBRACKET);
    n->l1 = nv_list(items);
    return fin(p, n);
}

static jnode *parse_dict(parser *p) {
    jnode *n = mk(p, JN_DICT, cur(p)->pos);
    expect_op(p, JO_LBRACE);
    nvec keys = {0}, vals = {0};
    while (!is_op(cur(p), JO_RBRACE)) {
        if (keys.n) expect_op(p, JO_COMMA);
        if (is_op(cur(p), JO_RBRACE)) break;
        nv_push(p, &keys, parse_expression(p, true));
        expect_op(p, JO_COLON);
        nv_push(p, &vals, parse_expression(p, true));
    }
    expect_op(p, JO_RBRACE);
    n->l1 = nv_list(keys);
    n->l2 = nv_list(vals);
    return fin(p, n);
}

static jnode *parse_primary(parser *p, bool with_ns) {
    const jtok *t = cur(p);
    jnode *n;
    switch (t->kind) {
    case JT_NAME:
        next(p);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True") || !strcmp(t->s, "false") ||
            !strcmp(t->s, "False")) {
            n = mk(p, JN_CONST, t->pos);
            n->cval = jv_bool(t->s[0] == 't' || t->s[0] == 'T');
        } else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
            n = mk(p, JN_CONST, t->pos);
            n->cval = jv_none();
        } else if (with_ns && is_op(cur(p), JO_DOT)) {
            next(p);
            n = mk(p, JN_NSREF, t->pos);
            n->name = t->s;
            n->attr = expect_name(p, NULL)->s;
        } else {
            n = mk(p, JN_NAME, t->pos);
            n->name = t->s;
        }
        return n;
    case JT_STRING: {
        next(p);
        n = mk(p, JN_CONST, t->pos);
        if (cur(p)->kind != JT_STRING) {
            n->cval = jv_str(p->a, t->s, t->len);
            return n;
        }
        jbuf b;
        jmem_buf_init(&b, p->a, 0);
        jmem_put(&b, t->s, t->len);
        while (cur(p)->kind == JT_STRING) {
            jmem_put(&b, cur(p)->s, cur(p)->len);
            next(p);
        }
        n->cval = jv_str_buf(&b);
        return n;
    }
    case JT_INT:
    case JT_FLOAT:
        next(p);
        n = mk(p, JN_CONST, t->pos);
        n->cval = t->kind == JT_INT ? jv_int(t->i) : jv_float(t->f);
        return n;
    case JT_OP:
        if (t->op == JO_LPAREN) {
            next(p);
            n = parse_tuple(p, false, true, NULL, true, false);
            expect_op(p, JO_RPAREN);
            return n;
        }
        if (t->op == JO_LBRACKET) return parse_list(p);
        if (t->op == JO_LBRACE) return parse_dict(p);
        break;
    default:
        break;
    }
    fail(p, t, "unexpected '%s'", describe(t), NULL);
}

static bool tuple_end(parser *p, const char *const *extra_end) {
    const jtok *t = cur(p);
    if (t->kind == JT_VAR_END || t->kind == JT_BLOCK_END || is_op(t, JO_RPAREN)) return true;
    for (; extra_end && *extra_end; extra_end++)
        if (is_name(t, *extra_end)) return true;
    return false;
}

static jnode *parse_tuple(parser *p, bool simplified, bool with_condexpr,
                          const char *const *extra_end, bool explicit_parens, bool with_ns) {
    uint32_t pos = cur(p)->pos;
    nvec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n) expect_op(p, JO_COMMA);
        if (tuple_end(p, extra_end)) break;
        nv_push(p, &args, simplified ? parse_primary(p, with_ns)
                                     : parse_expression(p, with_condexpr));
        if (is_op(cur(p), JO_COMMA))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_parens)
            fail(p, cur(p), "Expected an expression, got '%s'", describe(cur(p)), NULL);
    }
    jnode *n = mk(p, JN_TUPLE, pos);
    n->l1 = nv_list(args);
    return fin(p, n);
}

static jnode *parse_expression(parser *p, bool with_condexpr) {
    enter(p);
    jnode *n = with_condexpr ? parse_condexpr(p) : parse_or(p);
    leave(p);
    return n;
}

/* Call arguments into n->l1 (positional), n->l2 + n->kwn (keywords), n->b / n->c (*, **). */
static void parse_call_args(parser *p, jnode *n) {
    const jtok *open = cur(p);
    expect_op(p, JO_LPAREN);
    nvec args = {0}, kwv = {0};
    const char **kwn = NULL;
    int capkw = 0;
    bool require_comma = false;
    while (!is_op(cur(p), JO_RPAREN)) {
        if (require_comma) {
            expect_op(p, JO_COMMA);
            if (is_op(cur(p), JO_RPAREN)) break;
        }
        if (is_op(cur(p), JO_MUL)) {
            if (n->b || n->c) fail(p, open, "invalid syntax for function call expression", 0, 0);
            next(p);
            n->b = parse_expression(p, true);
        } else if (is_op(cur(p), JO_POW)) {
            if (n->c) fail(p, open, "invalid syntax for function call expression", 0, 0);
            next(p);
            n->c = parse_expression(p, true);
        } else if (cur(p)->kind == JT_NAME && is_op(look(p), JO_ASSIGN)) {
            if (n->c) fail(p, open, "invalid syntax for function call expression", 0, 0);
            const char *key = next(p)->s;
            next(p);
            if (kwv.n == capkw) {
                int cap = capkw ? capkw * 2 : 4;
                kwn = jmem_grow(p->a, kwn, (size_t)kwv.n * sizeof *kwn, (size_t)cap * sizeof *kwn);
                capkw = cap;
            }
            kwn[kwv.n] = key;
            nv_push(p, &kwv, parse_expression(p, true));
        } else {
            if (n->b || n->c || kwv.n)
                fail(p, open, "invalid syntax for function call expression", 0, 0);
            nv_push(p, &args, parse_expression(p, true));
        }
        require_comma = true;
    }
    expect_op(p, JO_RPAREN);
    n->l1 = nv_list(args);
    n->l2 = nv_list(kwv);
    n->kwn = kwn;
}

static jnode *parse_call(parser *p, jnode *callee) {
    jnode *n = mk(p, JN_CALL, cur(p)->pos);
    n->a = callee;
    parse_call_args(p, n);
    return fin(p, n);
}

static jnode *parse_subscribed(parser *p) {
    uint32_t pos = cur(p)->pos;
    jnode *parts[3] = {NULL, NULL, NULL};
    if (is_op(cur(p), JO_COLON)) {
        next(p);
    } else {
        jnode *node = parse_expression(p, true);
        if (!is_op(cur(p), JO_COLON)) return node;
        next(p);
        parts[0] = node;
    }
    if (!is_op(cur(p), JO_COLON) && !is_op(cur(p), JO_RBRACKET) && !is_op(cur(p), JO_COMMA))
        parts[1] = parse_expression(p, true);
    if (is_op(cur(p), JO_COLON)) {
        next(p);
        if (!is_op(cur(p), JO_RBRACKET) && !is_op(cur(p), JO_COMMA))
            parts[2] = parse_expression(p, true);
    }
    jnode *n = mk(p, JN_SLICE, pos);
    n->a = parts[0];
    n->b = parts[1];
    n->c = parts[2];
    return fin(p, n);
}

static jnode *parse_subscript(parser *p, jnode *node) {
    const jtok *t = next(p);
    if (is_op(t, JO_DOT)) {
        const jtok *attr = next(p);
        if (attr->kind == JT_NAME) {
            jnode *n = mk(p, JN_GETATTR, t->pos);
            n->a = node;
            n->name = attr->s;
            return fin(p, n);
        }
        if (attr->kind != JT_INT) fail(p, attr, "expected name or number", 0, 0);
        jnode *n = mk(p, JN_GETITEM, t->pos);
        n->a = node;
        n->b = mk(p, JN_CONST, attr->pos);
        n->b->cval = jv_int(attr->i);
        return fin(p, n);
    }
    /* '[' */
    nvec args = {0};
    while (!is_op(cur(p), JO_RBRACKET)) {
        if (args.n) expect_op(p, JO_COMMA);
        nv_push(p, &args, parse_subscribed(p));
    }
    expect_op(p, JO_RBRACKET);
    jnode *n = mk(p, JN_GETITEM, t->pos);
    n->a = node;
    if (args.n == 1) {
        n->b = args.v[0];
    } else {
        n->b = fin(p, mk(p, JN_TUPLE, t->pos));
        n->b->l1 = nv_list(args);
        fin(p, n->b);
    }
    return fin(p, n);
}

static jnode *parse_postfix(parser *p, jnode *node) {
    for (;;) {
        const jtok *t = cur(p);
        if (is_op(t, JO_DOT) || is_op(t, JO_LBRACKET))
            node = parse_subscript(p, node);
        else if (is_op(t, JO_LPAREN))
            node = parse_call(p, node);
        else
            return node;
    }
}

static const char *dotted_name(parser *p, const jtok *first) {
    if (!is_op(cur(p), JO_DOT)) return first->s;
    jbuf b;
    jmem_buf_init(&b, p->a, 0);
    jmem_puts(&b, first->s);
    while (is_op(cur(p), JO_DOT)) {
        next(p);
        jmem_putc(&b, '.');
        jmem_puts(&b, expect_name(p, NULL)->s);
    }
    return b.p;
}

static jnode *parse_filter(parser *p, jnode *node, bool start_inline) {
    while (is_op(cur(p), JO_PIPE) || start_inline) {
        if (!start_inline) next(p);
        const jtok *t = expect_name(p, NULL);
        jnode *n = mk(p, JN_FILTER, t->pos);
        n->name = dotted_name(p, t);
        if (is_op(cur(p), JO_LPAREN)) parse_call_args(p, n);
        n->a = node;
        node = fin(p, n);
        start_inline = false;
    }
    return node;
}

static jnode *parse_test(parser *p, jnode *node) {
    const jtok *is = next(p);
    bool negated = false;
    if (is_name(cur(p), "not")) {
        next(p);
        negated = true;
    }
    const jtok *t = expect_name(p, NULL);
    jnode *n = mk(p, JN_TEST, is->pos);
    n->name = dotted_name(p, t);
    n->a = node;
    const jtok *c = cur(p);
    if (is_op(c, JO_LPAREN)) {
        parse_call_args(p, n);
    } else if ((c->kind == JT_NAME || c->kind == JT_STRING || c->kind == JT_INT ||
                c->kind == JT_FLOAT || is_op(c, JO_LPAREN) || is_op(c, JO_LBRACKET) ||
                is_op(c, JO_LBRACE)) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) fail(p, c, "You cannot chain multiple tests with is", 0, 0);
        jnode *arg = parse_postfix(p, parse_primary(p, false));
        jnode **v = jmem_alloc(p->a, sizeof *v);
        v[0] = arg;
        n->l1 = (jnlist){v, 1};
    }
    fin(p, n);
    if (!negated) return n;
    jnode *neg = mk(p, JN_NOT, is->pos);
    neg->a = n;
    return fin(p, neg);
}

static jnode *parse_filter_expr(parser *p, jnode *node) {
    for (;;) {
        const jtok *t = cur(p);
        if (is_op(t, JO_PIPE))
            node = parse_filter(p, node, false);
        else if (is_name(t, "is"))
            node = parse_test(p, node);
        else if (is_op(t, JO_LPAREN))
            node = parse_call(p, node);
        else
            return node;
    }
}

/* ---- statements ---- */

static jnlist subparse(parser *p, const char *const *end_tokens);

static bool is_any_name(const jtok *t, const char *const *names) {
    for (; names && *names; names++)
        if (is_name(t, *names)) return true;
    return false;
}

_Noreturn static void fail_eof(parser *p, const char *const *ends) {
    char msg[400] = "Unexpected end of template.";
    size_t used = strlen(msg);
    if (ends && *ends) {
        used += (size_t)snprintf(msg + used, sizeof msg - used,
                                 " Jinja was looking for the following tags:");
        for (int k = 0; ends[k] && used < sizeof msg; k++)
            used += (size_t)snprintf(msg + used, sizeof msg - used, "%s '%s'",
                                     k ? " or" : "", ends[k]);
        if (used < sizeof msg) used += (size_t)snprintf(msg + used, sizeof msg - used, ".");
    }
    if (p->ntags && used < sizeof msg)
        snprintf(msg + used, sizeof msg - used,
                 " The innermost block that needs to be closed is '%s'.", p->tags[p->ntags - 1]);
    fail(p, cur(p), "%s", msg, NULL);
}

static jnlist parse_statements(parser *p, const char *const *end_tokens, bool drop_needle) {
    if (is_op(cur(p), JO_COLON)) next(p);
    expect_kind(p, JT_BLOCK_END, "end of statement block");
    jnlist body = subparse(p, end_tokens);
    if (cur(p)->kind == JT_EOF) fail_eof(p, end_tokens);
    if (drop_needle) next(p);
    return body;
}

static bool can_assign(const jnode *n) {
    if (n->kind == JN_NAME || n->kind == JN_NSREF) return true;
    if (n->kind != JN_TUPLE) return false;
    for (int k = 0; k < n->l1.n; k++)
        if (!can_assign(n->l1.v[k])) return false;
    return true;
}

static const char *node_word(const jnode *n) {
    switch (n->kind) {
    case JN_CONST: return "const";
    case JN_LIST: return "list";
    case JN_DICT: return "dict";
    case JN_TUPLE: return "tuple";
    default: return "expression";
    }
}

static jnode *parse_assign_target(parser *p, bool name_only, const char *const *extra_end,
                                  bool with_ns) {
    jnode *target;
    if (name_only) {
        const jtok *t = expect_name(p, NULL);
        target = mk(p, JN_NAME, t->pos);
        target->name = t->s;
    } else {
        target = parse_tuple(p, true, true, extra_end, false, with_ns);
    }
    if (!can_assign(target)) {
        const jtok fake = {.pos = target->pos};
        fail(p, &fake, "can't assign to '%s'", node_word(target), NULL);
    }
    return target;
}

static void parse_signature(parser *p, jnode *n) {
    expect_op(p, JO_LPAREN);
    nvec args = {0}, defaults = {0};
    while (!is_op(cur(p), JO_RPAREN)) {
        if (args.n) expect_op(p, JO_COMMA);
        jnode *arg = parse_assign_target(p, true, NULL, false);
        if (is_op(cur(p), JO_ASSIGN)) {
            next(p);
            nv_push(p, &defaults, parse_expression(p, true));
        } else if (defaults.n) {
            fail(p, cur(p), "non-default argument follows default argument", 0, 0);
        }
        nv_push(p, &args, arg);
    }
    expect_op(p, JO_RPAREN);
    n->l1 = nv_list(args);
    n->l2 = nv_list(defaults);
}

/* A body that compiles to a function of its own: loop controls do not reach through it. */
static jnlist function_body(parser *p, const char *const *ends) {
    int saved = p->loop_depth;
    p->loop_depth = 0;
    jnlist body = parse_statements(p, ends, true);
    p->loop_depth = saved;
    return body;
}

static const char *const END_FOR[] = {"endfor", "else", NULL};
static const char *const END_FOR_ONLY[] = {"endfor", NULL};
static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_IF_ONLY[] = {"endif", NULL};
static const char *const END_SET[] = {"endset", NULL};
static const char *const END_MACRO[] = {"endmacro", NULL};
static const char *const END_CALL[] = {"endcall", NULL};
static const char *const END_FILTER[] = {"endfilter", NULL};
static const char *const END_WITH[] = {"endwith", NULL};
static const char *const END_GENERATION[] = {"endgeneration", NULL};
static const char *const IN_END[] = {"in", NULL};
static const char *const RECURSIVE_END[] = {"recursive", NULL};

static jnode *parse_for(parser *p) {
    jnode *n = mk(p, JN_FOR, next(p)->pos);
    n->a = parse_assign_target(p, false, IN_END, false);
    expect_name(p, "in");
    n->b = parse_tuple(p, false, false, RECURSIVE_END, false, false);
    if (is_name(cur(p), "if")) {
        next(p);
        n->c = parse_expression(p, true);
    }
    if (is_name(cur(p), "recursive")) unsupported(p, cur(p), "recursive for loops");
    p->loop_depth++;
    n->l1 = parse_statements(p, END_FOR, false);
    p->loop_depth--;
    if (!strcmp(next(p)->s, "else")) {
        int saved = p->loop_depth;
        p->loop_depth = 0;
        n->l2 = parse_statements(p, END_FOR_ONLY, true);
        p->loop_depth = saved;
    }
    return n;
}

static jnode *parse_if(parser *p) {
    jnode *result = mk(p, JN_IF, next(p)->pos);
    jnode *node = result;
    nvec chain = {0};
    for (;;) {
        nv_push(p, &chain, node);
        node->a = parse_tuple(p, false, false, NULL, false, false);
        node->l1 = parse_statements(p, END_IF, false);
        const jtok *t = next(p);
        if (is_name(t, "elif")) {
            jnode *elif = mk(p, JN_IF, t->pos);
            elif->elif = true;
            jnode **v = jmem_alloc(p->a, sizeof *v);
            v[0] = elif;
            node->l2 = (jnlist){v, 1};
            node = elif;
            continue;
        }
        if (is_name(t, "else")) node->l2 = parse_statements(p, END_IF_ONLY, true);
        break;
    }
    for (int k = chain.n - 1; k >= 0; k--) fin(p, chain.v[k]);
    return result;
}

static jnode *parse_set(parser *p) {
    uint32_t pos = next(p)->pos;
    jnode *target = parse_assign_target(p, false, NULL, true);
    if (is_op(cur(p), JO_ASSIGN)) {
        next(p);
        jnode *n = mk(p, JN_SET, pos);
        n->a = target;
        n->b = parse_tuple(p, false, true, NULL, false, false);
        return n;
    }
    jnode *n = mk(p, JN_SET_BLOCK, pos);
    n->a = target;
    n->b = parse_filter(p, NULL, false);
    n->l1 = parse_statements(p, END_SET, true);
    return n;
}

static jnode *parse_macro(parser *p) {
    jnode *n = mk(p, JN_MACRO, next(p)->pos);
    n->name = parse_assign_target(p, true, NULL, false)->name;
    parse_signature(p, n);
    n->l3 = function_body(p, END_MACRO);
    return n;
}

static jnode *parse_call_block(parser *p) {
    jnode *n = mk(p, JN_CALL_BLOCK, next(p)->pos);
    if (is_op(cur(p), JO_LPAREN)) parse_signature(p, n);
    n->a = parse_expression(p, true);
    if (n->a->kind != JN_CALL) {
        const jtok fake = {.pos = n->pos};
        fail(p, &fake, "expected call", 0, 0);
    }
    n->name = "caller";
    n->l3 = function_body(p, END_CALL);
    return n;
}

static jnode *parse_filter_block(parser *p) {
    jnode *n = mk(p, JN_FILTER_BLOCK, next(p)->pos);
    n->b = parse_filter(p, NULL, true);
    n->l1 = parse_statements(p, END_FILTER, true);
    return n;
}

static jnode *parse_with(parser *p) {
    jnode *n = mk(p, JN_WITH, next(p)->pos);
    nvec targets = {0}, values = {0};
    while (cur(p)->kind != JT_BLOCK_END) {
        if (targets.n) expect_op(p, JO_COMMA);
        nv_push(p, &targets, parse_assign_target(p, false, NULL, false));
        expect_op(p, JO_ASSIGN);
        nv_push(p, &values, parse_expression(p, true));
    }
    n->l1 = nv_list(targets);
    n->l2 = nv_list(values);
    n->l3 = parse_statements(p, END_WITH, true);
    return n;
}

static void push_out(parser *p, nvec *body, jnode *n) { nv_push(p, body, n); }

static void parse_print(parser *p, nvec *body) {
    next(p);
    int count = 0;
    while (cur(p)->kind != JT_BLOCK_END) {
        if (count++) expect_op(p, JO_COMMA);
        jnode *n = mk(p, JN_OUTPUT, cur(p)->pos);
        n->a = parse_expression(p, true);
        push_out(p, body, fin(p, n));
    }
}

static bool end_tag_expected(parser *p, const char *name) {
    for (int k = 0; k < p->ntags; k++)
        for (const char *const *e = p->ends[k]; e && *e; e++)
            if (!strcmp(*e, name)) return true;
    return false;
}

static void parse_statement(parser *p, nvec *body) {
    const jtok *t = cur(p);
    if (t->kind != JT_NAME) fail(p, t, "tag name expected", 0, 0);
    const char *name = t->s;
    static const char *const unsupported_tags[] = {"block", "extends", "include", "import",
                                                   "from", "autoescape", NULL};
    for (const char *const *u = unsupported_tags; *u; u++)
        if (!strcmp(name, *u)) {
            char what[64];
            snprintf(what, sizeof what, "the {%% %s %%} tag", name);
            unsupported(p, t, what);
        }
    if (p->ntags == 64) jmem_fail_at(p->f, EM_ERR_OVERFLOW, t->pos, "blocks nested too deep");
    p->tags[p->ntags++] = name;
    enter(p);
    jnode *n = NULL;
    if (!strcmp(name, "for"))
        n = parse_for(p);
    else if (!strcmp(name, "if"))
        n = parse_if(p);
    else if (!strcmp(name, "set"))
        n = parse_set(p);
    else if (!strcmp(name, "macro"))
        n = parse_macro(p);
    else if (!strcmp(name, "call"))
        n = parse_call_block(p);
    else if (!strcmp(name, "filter"))
        n = parse_filter_block(p);
    else if (!strcmp(name, "with"))
        n = parse_with(p);
    else if (!strcmp(name, "print"))
        parse_print(p, body);
    else if (!strcmp(name, "generation")) {
        n = mk(p, JN_GENERATION, next(p)->pos);
        n->l3 = function_body(p, END_GENERATION);
    } else if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        next(p);
        if (!p->loop_depth) fail(p, t, "'%s' outside loop", name, NULL);
        n = mk(p, name[0] == 'b' ? JN_BREAK : JN_CONTINUE, t->pos);
    } else {
        p->ntags--;
        if (end_tag_expected(p, name))
            fail(p, t,
                 "Encountered unknown tag '%s'. You probably made a nesting mistake. The "
                 "innermost block that needs to be closed is '%s'.",
                 name, p->ntags ? p->tags[p->ntags - 1] : "");
        fail(p, t, "Encountered unknown tag '%s'.", name, NULL);
    }
    leave(p);
    p->ntags--;
    if (n) push_out(p, body, fin(p, n));
}

static jnlist subparse(parser *p, const char *const *end_tokens) {
    nvec body = {0};
    if (p->ntags > 0) p->ends[p->ntags - 1] = end_tokens;
    for (;;) {
        const jtok *t = cur(p);
        if (t->kind == JT_EOF) break;
        if (t->kind == JT_DATA) {
            jnode *n = mk(p, JN_DATA, t->pos);
            n->cval = jv_str(p->a, t->s, t->len);
            push_out(p, &body, n);
            next(p);
        } else if (t->kind == JT_VAR_BEGIN) {
            next(p);
            jnode *n = mk(p, JN_OUTPUT, cur(p)->pos);
            n->a = parse_tuple(p, false, true, NULL, false, false);
            expect_kind(p, JT_VAR_END, "end of print statement");
            push_out(p, &body, fin(p, n));
        } else if (t->kind == JT_BLOCK_BEGIN) {
            next(p);
            if (end_tokens && is_any_name(cur(p), end_tokens)) return nv_list(body);
            parse_statement(p, &body);
            expect_kind(p, JT_BLOCK_END, "end of statement block");
        } else {
            fail(p, t, "unexpected '%s'", describe(t), NULL);
        }
    }
    return nv_list(body);
}

jnode *jinja_parse(jarena *a, jfail *f, const jtok *toks, size_t ntok, int max_depth,
                   int max_height) {
    parser p = {.a = a, .f = f, .t = toks, .nt = ntok, .max_depth = max_depth,
                .max_height = max_height};
    jnode *root = mk(&p, JN_GENERATION, 0); /* the template body: l3 */
    root->l3 = subparse(&p, NULL);
    return fin(&p, root);
}

/* Chat templates: the evaluator. Scoping follows jinja2's compiled code: a for-loop body gets a
 * fresh scope per iteration (assignments do not leak out of the loop or into the next
 * iteration), if-blocks share their scope, macros and call blocks close over the scope that
 * defines them, and namespaces are the only way to carry state out of a loop. */
#include <stdio.h>
#include <string.h>

#include "io/jinja/jinja.h"

_Noreturn void jrt_fail(jrt *rt, const jnode *at, em_status s, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jmem_fail_at(rt->fail, s, at ? at->pos : JPOS_NONE, "%s", msg);
}

void jrt_work(jrt *rt, const jnode *at, uint64_t n) {
    rt->steps += n;
    if (rt->steps > rt->lim->max_steps)
        jrt_fail(rt, at, EM_ERR_OVERFLOW,
                 "the template ran more than %llu evaluation steps (limit): an endless or "
                 "huge loop?",
                 (unsigned long long)rt->lim->max_steps);
}

static void enter(jrt *rt, const jnode *at) {
    if (++rt->depth > rt->lim->max_depth)
        jrt_fail(rt, at, EM_ERR_OVERFLOW,
                 "RecursionError: the template nests evaluation more than %d deep (limit)",
                 rt->lim->max_depth);
}
static void leave(jrt *rt) { rt->depth--; }

/* ---- scopes ---- */

jscope *jrt_scope_new(jrt *rt, jscope *parent) {
    jscope *s = jmem_zalloc(rt->a, sizeof *s);
    s->parent = parent;
    return s;
}

jv jrt_lookup(jrt *rt, jscope *s, const char *name) {
    size_t n = strlen(name);
    for (; s; s = s->parent) {
        jv *v = jv_dict_get_str(&s->vars, name, n);
        if (v) return *v;
    }
    return jv_undef_name(rt->a, name);
}

void jrt_set(jrt *rt, jscope *s, const char *name, jv v) {
    jv_dict_set(rt, &s->vars, jv_cstr(rt->a, name), v);
}

/* ---- output capture ---- */

typedef struct capture {
    jbuf buf;
    jbuf *saved;
} capture;

static void capture_begin(jrt *rt, capture *c) {
    jmem_buf_init(&c->buf, rt->a, rt->lim->max_output);
    c->saved = rt->out;
    rt->out = &c->buf;
}

static jv capture_end(jrt *rt, capture *c) {
    rt->out = c->saved;
    return jv_str_buf(&c->buf);
}

/* ---- calls ---- */

static void assign(jrt *rt, jscope *s, const jnode *target, jv v);

static jv call_macro(jrt *rt, const jnode *at, jmacro *m, jargs *a) {
    const jnode *def = m->def;
    const jnlist *params = &def->l1, *defaults = &def->l2;
    int np = params->n;
    if (++rt->macro_depth > rt->lim->max_macro_depth)
        jrt_fail(rt, at, EM_ERR_OVERFLOW,
                 "RecursionError: more than %d macro calls active at once (limit)",
                 rt->lim->max_macro_depth);
    /* keyword arguments still to be claimed */
    bool *claimed = jmem_zalloc(rt->a, (size_t)(a->nkw + 1));
    jv *vals = jmem_alloc(rt->a, (size_t)(np + 1) * sizeof(jv));
    bool *given = jmem_zalloc(rt->a, (size_t)(np + 1));
    int npos = a->npos < np ? a->npos : np;
    bool found_caller = false, explicit_caller = false;
    for (int k = 0; k < np; k++)
        if (!strcmp(params->v[k]->name, "caller")) explicit_caller = true;
    for (int k = 0; k < npos; k++) {
        vals[k] = a->pos[k];
        given[k] = true;
    }
    if (npos != np) {
        for (int k = npos; k < np; k++) {
            const char *pname = params->v[k]->name;
            for (int q = 0; q < a->nkw; q++)
                if (!claimed[q] && !strcmp(a->kwn[q], pname)) {
                    claimed[q] = true;
                    vals[k] = a->kwv[q];
                    given[k] = true;
                    break;
                }
            if (!strcmp(pname, "caller")) found_caller = true;
        }
    } else {
        found_caller = explicit_caller;
    }
    jscope *s = jrt_scope_new(rt, m->closure);
    if ((def->uses & JM_CALLER) && !found_caller) {
        jv caller = jv_undef_hint(rt->a, "No caller defined");
        for (int q = 0; q < a->nkw; q++)
            if (!claimed[q] && !strcmp(a->kwn[q], "caller")) {
                claimed[q] = true;
                if (a->kwv[q].k != JV_NONE) caller = a->kwv[q];
            }
        jrt_set(rt, s, "caller", caller);
    }
    if (def->uses & JM_KWARGS) {
        jv kw = jv_dict_new(rt->a, 0);
        for (int q = 0; q < a->nkw; q++)
            if (!claimed[q]) jv_dict_set(rt, kw.d, jv_cstr(rt->a, a->kwn[q]), a->kwv[q]);
        jrt_set(rt, s, "kwargs", kw);
    } else {
        for (int q = 0; q < a->nkw; q++)
            if (!claimed[q]) {
                for (int r = q; r < a->nkw; r++)
                    if (!claimed[r] && !strcmp(a->kwn[r], "caller"))
                        jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                                 "TypeError: macro '%s' was invoked with two values for the "
                                 "special caller argument. This is most likely a bug.",
                                 m->name);
                jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                         "TypeError: macro '%s' takes no keyword argument '%s'", m->name,
                         a->kwn[q]);
            }
    }
    if (def->uses & JM_VARARGS) {
        jv va = jv_tuple_new(rt->a, 0);
        for (int k = np; k < a->npos; k++) jv_list_push(rt->a, va.l, a->pos[k]);
        jrt_set(rt, s, "varargs", va);
    } else if (a->npos > np) {
        jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                 "TypeError: macro '%s' takes not more than %d argument(s)", m->name, np);
    }
    int first_default = np - defaults->n;
    for (int k = 0; k < np; k++) {
        jv v;
        if (given[k])
            v = vals[k];
        else if (k >= first_default)
            v = jrt_eval(rt, s, defaults->v[k - first_default]);
        else {
            char hint[160];
            snprintf(hint, sizeof hint, "parameter '%s' was not provided", params->v[k]->name);
            v = jv_undef_hint(rt->a, jmem_strndup(rt->a, hint, strlen(hint)));
        }
        jrt_set(rt, s, params->v[k]->name, v);
    }
    capture c;
    capture_begin(rt, &c);
    jrt_exec_body(rt, s, &def->l3);
    rt->ctl = JC_NONE;
    rt->macro_depth--;
    return capture_end(rt, &c);
}

jv jrt_call(jrt *rt, const jnode *at, jv fn, jargs *a) {
    jrt_work(rt, at, 1);
    switch (fn.k) {
    case JV_MACRO: return call_macro(rt, at, fn.m, a);
    case JV_FUNC:
        if (!fn.fn->impl)
            jrt_fail(rt, at, EM_ERR_UNSUPPORTED, "unsupported: %s%s%s()",
                     fn.fn->owner ? fn.fn->owner : "", fn.fn->owner ? "." : "", fn.fn->name);
        return fn.fn->impl(rt, at, fn.fn->self, a);
    case JV_UNDEF: jv_raise_undefined(rt, at, fn);
    default: break;
    }
    jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: '%s' object is not callable",
             jv_typename(fn));
}

/* Evaluates the arguments of a call, filter or test (positional l1, keywords l2, *b, **c). */
static void eval_args(jrt *rt, jscope *s, const jnode *n, jargs *a, jv first, bool has_first) {
    int npos = n->l1.n + (has_first ? 1 : 0);
    jlist *extra = NULL;
    if (n->b) extra = jv_iterate(rt, n->b, jrt_eval(rt, s, n->b));
    jdict *kwextra = NULL;
    if (n->c) {
        jv d = jrt_eval(rt, s, n->c);
        if (d.k != JV_DICT)
            jrt_fail(rt, n->c, EM_ERR_INVALID_ARG,
                     "TypeError: argument after ** must be a mapping, not %s", jv_typename(d));
        kwextra = d.d;
    }
    if (extra) npos += (int)extra->n;
    a->pos = jmem_alloc(rt->a, (size_t)(npos + 1) * sizeof(jv));
    a->npos = 0;
    if (has_first) a->pos[a->npos++] = first;
    for (int k = 0; k < n->l1.n; k++) a->pos[a->npos++] = jrt_eval(rt, s, n->l1.v[k]);
    for (size_t k = 0; extra && k < extra->n; k++) a->pos[a->npos++] = extra->v[k];
    int nkw = n->l2.n + (kwextra ? (int)kwextra->n : 0);
    a->kwn = jmem_alloc(rt->a, (size_t)(nkw + 1) * sizeof(char *));
    a->kwv = jmem_alloc(rt->a, (size_t)(nkw + 1) * sizeof(jv));
    a->nkw = 0;
    for (int k = 0; k < n->l2.n; k++) {
        for (int q = 0; q < a->nkw; q++)
            if (!strcmp(a->kwn[q], n->kwn[k]))
                jrt_fail(rt, n, EM_ERR_FORMAT, "syntax error: keyword argument repeated: %s",
                         n->kwn[k]);
        a->kwn[a->nkw] = n->kwn[k];
        a->kwv[a->nkw++] = jrt_eval(rt, s, n->l2.v[k]);
    }
    for (size_t k = 0; kwextra && k < kwextra->n; k++) {
        jv key = kwextra->keys[k];
        if (key.k != JV_STR)
            jrt_fail(rt, n, EM_ERR_INVALID_ARG, "TypeError: keywords must be strings");
        for (int q = 0; q < a->nkw; q++)
            if (!strcmp(a->kwn[q], key.s->s))
                jrt_fail(rt, n, EM_ERR_INVALID_ARG,
                         "TypeError: got multiple values for keyword argument '%s'", key.s->s);
        a->kwn[a->nkw] = key.s->s;
        a->kwv[a->nkw++] = kwextra->vals[k];
    }
}

/* Applies a filter chain whose innermost input is NULL (filter blocks, {% set x | f %}). */
static jv apply_filters(jrt *rt, jscope *s, const jnode *f, jv input) {
    if (!f) return input;
    jv in = f->a ? apply_filters(rt, s, f->a, input) : input;
    jargs a;
    eval_args(rt, s, f, &a, jv_undef(), false);
    return jinja_filter(rt, f, f->name, in, &a);
}

/* ---- expressions ---- */

static jv eval_compare(jrt *rt, jscope *s, const jnode *n) {
    jv left = jrt_eval(rt, s, n->a);
    for (int k = 0; k < n->l1.n; k++) {
        jv right = jrt_eval(rt, s, n->l1.v[k]);
        bool ok;
        switch (n->ops[k]) {
        case JO_EQ: ok = jv_equal(rt, left, right); break;
        case JO_NE: ok = !jv_equal(rt, left, right); break;
        case JO_IN: ok = jrt_op_contains(rt, n, right, left); break;
        case JO_NOTIN: ok = !jrt_op_contains(rt, n, right, left); break;
        default: {
            int c = jv_compare(rt, n, left, right, jrt_op_text[n->ops[k]]);
            switch (n->ops[k]) {
            case JO_LT: ok = c == -1; break;
            case JO_LTEQ: ok = c == -1 || c == 0; break;
            case JO_GT: ok = c == 1; break;
            default: ok = c == 1 || c == 0; break;
            }
        }
        }
        if (!ok) return jv_bool(false);
        left = right;
    }
    return jv_bool(true);
}

static jv eval_node(jrt *rt, jscope *s, const jnode *n) {
    switch (n->kind) {
    case JN_CONST: return n->cval;
    case JN_NAME: return jrt_lookup(rt, s, n->name);
    case JN_TUPLE:
    case JN_LIST: {
        jv r = n->kind == JN_LIST ? jv_list_new(rt->a, (size_t)n->l1.n)
                                  : jv_tuple_new(rt->a, (size_t)n->l1.n);
        for (int k = 0; k < n->l1.n; k++) jv_list_push(rt->a, r.l, jrt_eval(rt, s, n->l1.v[k]));
        return r;
    }
    case JN_DICT: {
        jv r = jv_dict_new(rt->a, (size_t)n->l1.n);
        for (int k = 0; k < n->l1.n; k++) {
            jv key = jrt_eval(rt, s, n->l1.v[k]);
            jv val = jrt_eval(rt, s, n->l2.v[k]);
            if (!jv_hashable(key) || key.k == JV_UNDEF) {
                if (key.k == JV_UNDEF) jv_raise_undefined(rt, n->l1.v[k], key);
                jrt_fail(rt, n->l1.v[k], EM_ERR_INVALID_ARG, "TypeError: unhashable type: '%s'",
                         jv_typename(key));
            }
            jv_dict_set(rt, r.d, key, val);
        }
        return r;
    }
    case JN_GETATTR: return jrt_op_getattr(rt, n, jrt_eval(rt, s, n->a), n->name);
    case JN_GETITEM: {
        jv obj = jrt_eval(rt, s, n->a);
        const jnode *k = n->b;
        if (k->kind == JN_SLICE) {
            jv parts[3];
            const jnode *src[3] = {k->a, k->b, k->c};
            for (int q = 0; q < 3; q++) parts[q] = src[q] ? jrt_eval(rt, s, src[q]) : jv_none();
            return jrt_op_slice(rt, n, obj, parts[0], parts[1], parts[2]);
        }
        return jrt_op_getitem(rt, n, obj, jrt_eval(rt, s, k));
    }
    case JN_SLICE:
        jrt_fail(rt, n, EM_ERR_UNSUPPORTED, "unsupported: a slice inside a tuple subscript");
    case JN_CALL: {
        jv fn = jrt_eval(rt, s, n->a);
        jargs a;
        eval_args(rt, s, n, &a, jv_undef(), false);
        return jrt_call(rt, n, fn, &a);
    }
    case JN_FILTER: {
        jv in = jrt_eval(rt, s, n->a);
        jargs a;
        eval_args(rt, s, n, &a, jv_undef(), false);
        return jinja_filter(rt, n, n->name, in, &a);
    }
    case JN_TEST: {
        jv in = jrt_eval(rt, s, n->a);
        jargs a;
        eval_args(rt, s, n, &a, jv_undef(), false);
        return jv_bool(jinja_test(rt, n, n->name, in, &a));
    }
    case JN_NOT: return jv_bool(!jv_truthy(rt, n, jrt_eval(rt, s, n->a)));
    case JN_NEG:
    case JN_POS: return jrt_op_neg(rt, n, jrt_eval(rt, s, n->a), n->kind == JN_NEG);
    case JN_AND: {
        jv l = jrt_eval(rt, s, n->a);
        return jv_truthy(rt, n, l) ? jrt_eval(rt, s, n->b) : l;
    }
    case JN_OR: {
        jv l = jrt_eval(rt, s, n->a);
        return jv_truthy(rt, n, l) ? l : jrt_eval(rt, s, n->b);
    }
    case JN_COND:
        if (jv_truthy(rt, n, jrt_eval(rt, s, n->a))) return jrt_eval(rt, s, n->b);
        if (n->c) return jrt_eval(rt, s, n->c);
        {
            int line, col;
            jmem_linecol(rt->fail->src, rt->fail->src_len, n->pos, &line, &col);
            char hint[160];
            snprintf(hint, sizeof hint,
                     "the inline if-expression on line %d evaluated to false and no else "
                     "section was defined.",
                     line);
            return jv_undef_hint(rt->a, jmem_strndup(rt->a, hint, strlen(hint)));
        }
    case JN_COMPARE: return eval_compare(rt, s, n);
    case JN_BINOP:
        return jrt_op_binary(rt, n, n->op, jrt_eval(rt, s, n->a), jrt_eval(rt, s, n->b));
    case JN_CONCAT: {
        jbuf b;
        jmem_buf_init(&b, rt->a, 0);
        for (int k = 0; k < n->l1.n; k++) jv_write_str(rt, n, &b, jrt_eval(rt, s, n->l1.v[k]));
        return jv_str_buf(&b);
    }
    default: break;
    }
    jrt_fail(rt, n, EM_ERR_INTERNAL, "internal error: node kind %d is not an expression",
             n->kind);
}

jv jrt_eval(jrt *rt, jscope *s, const jnode *n) {
    enter(rt, n);
    jrt_work(rt, n, 1);
    jv v = eval_node(rt, s, n);
    leave(rt);
    return v;
}

/* ---- statements ---- */

static void unpack(jrt *rt, jscope *s, const jnode *target, jv v) {
    jlist *items = jv_iterate(rt, target, v);
    int want = target->l1.n;
    if ((int)items->n < want)
        jrt_fail(rt, target, EM_ERR_INVALID_ARG,
                 "ValueError: not enough values to unpack (expected %d, got %zu)", want,
                 items->n);
    if ((int)items->n > want)
        jrt_fail(rt, target, EM_ERR_INVALID_ARG,
                 "ValueError: too many values to unpack (expected %d)", want);
    for (int k = 0; k < want; k++) assign(rt, s, target->l1.v[k], items->v[k]);
}

static void assign(jrt *rt, jscope *s, const jnode *target, jv v) {
    switch (target->kind) {
    case JN_NAME: jrt_set(rt, s, target->name, v); return;
    case JN_TUPLE: unpack(rt, s, target, v); return;
    case JN_NSREF: {
        jv ns = jrt_lookup(rt, s, target->name);
        if (ns.k != JV_NS)
            jrt_fail(rt, target, EM_ERR_INVALID_ARG,
                     "TemplateRuntimeError: cannot assign attribute on non-namespace object");
        if (target->attr[0] == '_')
            jrt_fail(rt, target, EM_ERR_INVALID_ARG,
                     "SecurityError: Chat templates cannot store underscore-prefixed attributes "
                     "on a namespace, but got '%s'. Please rename the attribute.",
                     target->attr);
        jv_dict_set(rt, ns.d, jv_cstr(rt->a, target->attr), v);
        return;
    }
    default:
        jrt_fail(rt, target, EM_ERR_INTERNAL, "internal error: bad assignment target");
    }
}

static void exec_for(jrt *rt, jscope *s, const jnode *n) {
    jv seq = jrt_eval(rt, s, n->b);
    jlist *items = jv_iterate(rt, n->b, seq);
    if (n->c) { /* {% for x in xs if cond %}: filter first, loop.* counts what is left */
        jlist *kept = jv_list_new(rt->a, items->n).l;
        for (size_t k = 0; k < items->n; k++) {
            jscope *t = jrt_scope_new(rt, s);
            assign(rt, t, n->a, items->v[k]);
            if (jv_truthy(rt, n->c, jrt_eval(rt, t, n->c))) jv_list_push(rt->a, kept, items->v[k]);
        }
        items = kept;
    }
    jloop *lp = jmem_zalloc(rt->a, sizeof *lp);
    lp->items = items;
    jv loopv = {0};
    loopv.k = JV_LOOP;
    loopv.lp = lp;
    /* jinja2 clears its "else" flag at the end of the loop body, so {% else %} also runs when
     * every iteration left through {% break %} or {% continue %} */
    bool broke = false, completed = false;
    for (size_t k = 0; k < items->n; k++) {
        jrt_work(rt, n, 1);
        lp->index0 = (int64_t)k;
        jscope *it = jrt_scope_new(rt, s);
        assign(rt, it, n->a, items->v[k]);
        jrt_set(rt, it, "loop", loopv);
        jrt_exec_body(rt, it, &n->l1);
        int ctl = rt->ctl;
        rt->ctl = JC_NONE;
        if (ctl == JC_NONE) completed = true;
        if (ctl == JC_BREAK) {
            broke = k + 1 < items->n;
            break;
        }
    }
    if (broke && seq.k == JV_ITER) seq.it->broken = true;
    if (!completed && n->l2.n) jrt_exec_body(rt, jrt_scope_new(rt, s), &n->l2);
}

static void exec_stmt(jrt *rt, jscope *s, const jnode *n) {
    switch (n->kind) {
    case JN_DATA: jmem_put(rt->out, n->cval.s->s, n->cval.s->len); return;
    case JN_OUTPUT: jv_write_str(rt, n, rt->out, jrt_eval(rt, s, n->a)); return;
    case JN_IF:
        for (;;) {
            if (jv_truthy(rt, n, jrt_eval(rt, s, n->a))) {
                jrt_exec_body(rt, s, &n->l1);
                return;
            }
            if (n->l2.n == 1 && n->l2.v[0]->elif) {
                n = n->l2.v[0];
                continue;
            }
            jrt_exec_body(rt, s, &n->l2);
            return;
        }
    case JN_FOR: exec_for(rt, s, n); return;
    case JN_SET: assign(rt, s, n->a, jrt_eval(rt, s, n->b)); return;
    case JN_SET_BLOCK: {
        capture c;
        capture_begin(rt, &c);
        jrt_exec_body(rt, jrt_scope_new(rt, s), &n->l1);
        jv text = capture_end(rt, &c);
        if (rt->ctl) return; /* a loop control left the block: jinja2 skips the assignment */
        assign(rt, s, n->a, apply_filters(rt, s, n->b, text));
        return;
    }
    case JN_MACRO: {
        jmacro *m = jmem_zalloc(rt->a, sizeof *m);
        m->def = n;
        m->closure = s;
        m->name = n->name;
        jv v = {0};
        v.k = JV_MACRO;
        v.m = m;
        jrt_set(rt, s, n->name, v);
        return;
    }
    case JN_CALL_BLOCK: {
        jmacro *m = jmem_zalloc(rt->a, sizeof *m);
        m->def = n;
        m->closure = s;
        m->name = "caller";
        jv caller = {0};
        caller.k = JV_MACRO;
        caller.m = m;
        const jnode *call = n->a;
        jv fn = jrt_eval(rt, s, call->a);
        jargs a;
        eval_args(rt, s, call, &a, jv_undef(), false);
        jargs b = a;
        b.kwn = jmem_alloc(rt->a, (size_t)(a.nkw + 1) * sizeof(char *));
        b.kwv = jmem_alloc(rt->a, (size_t)(a.nkw + 1) * sizeof(jv));
        memcpy(b.kwn, a.kwn, (size_t)a.nkw * sizeof(char *));
        memcpy(b.kwv, a.kwv, (size_t)a.nkw * sizeof(jv));
        b.kwn[b.nkw] = "caller";
        b.kwv[b.nkw++] = caller;
        jv_write_str(rt, n, rt->out, jrt_call(rt, n, fn, &b));
        return;
    }
    case JN_FILTER_BLOCK: {
        capture c;
        capture_begin(rt, &c);
        jrt_exec_body(rt, jrt_scope_new(rt, s), &n->l1);
        jv text = capture_end(rt, &c);
        if (rt->ctl) return;
        jv_write_str(rt, n, rt->out, apply_filters(rt, s, n->b, text));
        return;
    }
    case JN_WITH: {
        jscope *w = jrt_scope_new(rt, s);
        for (int k = 0; k < n->l1.n; k++) assign(rt, w, n->l1.v[k], jrt_eval(rt, s, n->l2.v[k]));
        jrt_exec_body(rt, w, &n->l3);
        return;
    }
    case JN_GENERATION: jrt_exec_body(rt, jrt_scope_new(rt, s), &n->l3); return;
    case JN_BREAK: rt->ctl = JC_BREAK; return;
    case JN_CONTINUE: rt->ctl = JC_CONTINUE; return;
    default: break;
    }
    jrt_fail(rt, n, EM_ERR_INTERNAL, "internal error: node kind %d is not a statement", n->kind);
}

void jrt_exec_body(jrt *rt, jscope *s, const jnlist *body) {
    enter(rt, NULL);
    for (int k = 0; k < body->n; k++) {
        jrt_work(rt, body->v[k], 1);
        exec_stmt(rt, s, body->v[k]);
        if (rt->ctl) break;
    }
    leave(rt);
}

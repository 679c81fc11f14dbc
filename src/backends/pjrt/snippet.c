/* StableHLO snippets of kernel-hub packages (snippet.h): expansion, eager calls, the choice. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"
#include "backends/pjrt/snippet.h"

/* ---- expansion ---- */

static void type_text(char *buf, size_t n, em_dtype dt, int nd, const int64_t *d) {
    size_t u = (size_t)snprintf(buf, n, "tensor<");
    for (int i = 0; i < nd && u < n; i++)
        u += (size_t)snprintf(buf + u, n - u, "%lldx", (long long)d[i]);
    if (u < n) snprintf(buf + u, n - u, "%s>", sh_elem_name(sh_elem_of(dt)));
}

/* What a placeholder names; false when it names nothing of this call. */
typedef struct expand_ctx {
    const char *fn;
    const em_op_def *op;
    const em_attr *attrs;
    const em_tensor *const *in;
    int n_in;
    const em_meta *out;
    int n_out;
} expand_ctx;

static bool integer_of(const expand_ctx *x, const char *name, int64_t *v) {
    if (!strncmp(name, "attr.", 5)) {
        for (int i = 0; i < x->op->n_attrs; i++)
            if (!strcmp(x->op->attr_names[i], name + 5) &&
                x->op->attr_types[i] != EM_ATTR_FLOAT && x->op->attr_types[i] != EM_ATTR_INTS) {
                *v = x->attrs[i].i;
                return true;
            }
        return false;
    }
    bool is_in = !strncmp(name, "in", 2), is_out = !strncmp(name, "out", 3);
    const char *p = name + (is_in ? 2 : 3);
    char *end;
    long i = strtol(p, &end, 10);
    if ((!is_in && !is_out) || end == p || strncmp(end, ".d", 2)) return false;
    char *e2;
    long j = strtol(end + 2, &e2, 10);
    if (e2 == end + 2 || *e2) return false;
    if (is_in) {
        if (i < 0 || i >= x->n_in || !x->in[i] || j < 0 || j >= x->in[i]->ndim) return false;
        *v = x->in[i]->shape[j];
    } else {
        if (i < 0 || i >= x->n_out || j < 0 || j >= x->out[i].ndim) return false;
        *v = x->out[i].shape[j];
    }
    return true;
}

/* The text of a placeholder (without braces) into buf; false when unknown. */
static bool placeholder(const expand_ctx *x, const char *ph, char *buf, size_t n) {
    if (!strcmp(ph, "name")) {
        snprintf(buf, n, "%s", x->fn);
        return true;
    }
    bool is_in = !strncmp(ph, "in", 2), is_out = !strncmp(ph, "out", 3);
    if (is_in || is_out) { /* inI, inI.elem, outI, outI.elem */
        char *end;
        long i = strtol(ph + (is_in ? 2 : 3), &end, 10);
        bool ok = end != ph + (is_in ? 2 : 3) && i >= 0 &&
                  (is_in ? i < x->n_in && x->in[i] : i < x->n_out);
        em_dtype dt = !ok ? EM_F32 : is_in ? x->in[i]->dtype : x->out[i].dtype;
        if (ok && !*end) {
            if (is_in)
                type_text(buf, n, dt, x->in[i]->ndim, x->in[i]->shape);
            else
                type_text(buf, n, dt, x->out[i].ndim, x->out[i].shape);
            return true;
        }
        if (ok && !strcmp(end, ".elem")) {
            snprintf(buf, n, "%s", sh_elem_name(sh_elem_of(dt)));
            return true;
        }
    }
    /* an integer, maybe +N / -N */
    char name[64];
    size_t k = strcspn(ph, "+-");
    if (k >= sizeof name) return false;
    memcpy(name, ph, k);
    name[k] = 0;
    int64_t v, off = 0;
    if (ph[k]) {
        char *end;
        off = strtoll(ph + k + 1, &end, 10);
        if (end == ph + k + 1 || *end) return false;
        if (ph[k] == '-') off = -off;
    }
    if (!integer_of(x, name, &v)) return false;
    snprintf(buf, n, "%lld", (long long)(v + off));
    return true;
}

char *pj_snippet_expand(const pj_snippet *s, const char *fn, const em_op_def *op,
                        const em_attr *attrs, const em_tensor *const *in, int n_in,
                        const em_meta *out, int n_out, char *why, size_t why_n) {
    expand_ctx x = {fn, op, attrs, in, n_in, out, n_out};
    char *text = NULL;
    size_t len_out = 0;
    FILE *g = open_memstream(&text, &len_out); /* grows as the text is written */
    if (!g) {
        snprintf(why, why_n, "out of memory expanding %s", s->file);
        return NULL;
    }
    const char *p = s->text;
    for (;;) {
        const char *open = strstr(p, "{{");
        if (!open) {
            fputs(p, g);
            break;
        }
        fwrite(p, 1, (size_t)(open - p), g);
        const char *close = strstr(open + 2, "}}");
        size_t len = close ? (size_t)(close - open - 2) : 0;
        char ph[80], val[512];
        if (close && len < sizeof ph) {
            memcpy(ph, open + 2, len);
            ph[len] = 0;
        }
        if (!close || len >= sizeof ph || !placeholder(&x, ph, val, sizeof val)) {
            snprintf(why, why_n, "%s: unknown placeholder {{%.*s}} for %s (snippet.h lists them)",
                     s->file, (int)(close && len < 60 ? len : 60), open + 2, op->name);
            fclose(g);
            free(text);
            return NULL;
        }
        fputs(val, g);
        p = close + 2;
    }
    bool failed = ferror(g) != 0;
    failed |= fclose(g) != 0;
    if (failed) {
        snprintf(why, why_n, "out of memory expanding %s", s->file);
        free(text);
        return NULL;
    }
    return text;
}

/* ---- emitting ---- */

/* The snippet s as a function of the module, called on the op's inputs. When it does not
 * expand, the builder is left untouched and *why says so (the caller decides). */
static em_status emit_with(pj_emit *e, const pj_snippet *s, char *why, size_t why_n) {
    char fn[96];
    snprintf(fn, sizeof fn, "%s_%d", s->sym, e->b->n_funcs);
    /* the types the function sees: the inputs' logical shapes (their values, e->in) */
    em_tensor ins[EM_MAX_INPUTS];
    const em_tensor *tin[EM_MAX_INPUTS];
    for (int i = 0; i < e->n_in; i++) {
        tin[i] = NULL;
        if (!e->present[i]) continue;
        memset(&ins[i], 0, sizeof ins[i]);
        ins[i].dtype = e->in_dt[i];
        ins[i].ndim = e->in[i].t.nd;
        memcpy(ins[i].shape, e->in[i].t.d, (size_t)ins[i].ndim * sizeof *ins[i].shape);
        tin[i] = &ins[i];
    }
    char *text = pj_snippet_expand(s, fn, e->op, e->attrs, tin, e->n_in, e->out_meta, e->n_out,
                                   why, why_n);
    if (!text) return EM_ERR_FORMAT;
    sh_add_func(e->b, text);
    free(text);
    sh_val ops[EM_MAX_INPUTS];
    int n = 0;
    for (int i = 0; i < e->n_in; i++)
        if (e->present[i]) ops[n++] = e->in[i];
    e->out[0] = sh_call(e->b, fn, ops, n, pj_meta_type(&e->out_meta[0]));
    return sh_ok(e->b) ? EM_OK : EM_ERR_FORMAT;
}

/* Eager programs (pj_alt's emitter): a snippet that does not expand fails the program. */
static em_status emit_snippet(pj_emit *e) {
    char why[512];
    em_status s = emit_with(e, e->user, why, sizeof why);
    if (s != EM_OK && sh_ok(e->b)) sh_fail(e->b, "%s", why);
    return s;
}

em_status pj_snippet_emit(pj_emit *e, const em_kimpl *k, pj_emit_fn builtin) {
    char why[512];
    em_status s = emit_with(e, k->user, why, sizeof why);
    if (s == EM_OK || !sh_ok(e->b)) return s;
    em_kimpl_disable((em_kimpl *)k, why); /* the next program asks the registry again */
    return builtin(e);
}

/* ---- the registry's hooks ---- */

bool pj_snippet_supports(const em_kimpl *k, const em_kernel_args *a, unsigned mode) {
    (void)mode;
    const pj_snippet *s = k->user;
    const pj_snippet_when *w = &s->when;
    if (a->op->n_out != 1 || pj_op_get(a->op->id)->update) return false;
    for (int i = 0; i < a->n_in; i++) {
        const em_tensor *t = a->in[i];
        if (t && t->numel == 0) return false; /* empty calls: the built-in's constants */
        if (i < w->n_ranks && w->ranks[i] >= 0 && (!t || t->ndim != w->ranks[i])) return false;
    }
    for (int i = 0; i < w->n_attrs; i++)
        if (a->attrs[w->attr[i]].i != w->value[i]) return false;
    return true;
}

em_status pj_snippet_run(const em_kimpl *k, const em_kernel_args *a) {
    const pj_snippet *s = k->user;
    pj_alt alt = {emit_snippet, s, s->digest, false};
    em_status st = pj_kernel_alt(a, &alt);
    if (st == EM_OK || !alt.failed) return st;
    /* the snippet does not expand or compile: off from now on; the next implementation (in the
     * snapshot republished without it) takes the call */
    em_ctx *c = a->ctx;
    char why[720];
    snprintf(why, sizeof why, "%s: %.400s", s->file, em_ctx_error(c)->message);
    em_call_info saved = c->cur;
    em_ctx_clear_error(c);
    c->cur = saved;
    em_kimpl_disable((em_kimpl *)k, why);
    const em_kset *ks = em_kset_get(((em_device *)c->cur.dev)->be, a->op->id);
    const em_kimpl *next =
        ks ? em_kset_pick(ks, a, c->grad_on ? EM_KMODE_TRAINING : EM_KMODE_INFERENCE) : NULL;
    return next && next != k ? em_kimpl_run(next, a)
                             : em_op_fail(c, EM_ERR_UNSUPPORTED, "no other kernel takes this call");
}

const em_kimpl *pj_snippet_pick(const em_backend *be, const em_kernel_args *a) {
    const em_kset *ks = em_kset_get(be, a->op->id);
    if (!ks || ks->trivial) return NULL;
    const em_kimpl *k = em_kset_pick(ks, a, EM_KMODE_COMPILE);
    return k && k->run == pj_snippet_run ? k : NULL;
}

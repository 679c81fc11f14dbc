/*
 * Tracing: while a context holds a trace, the dispatcher hands every op call here after its
 * shape rule has checked it. The call becomes a node of the graph and its outputs are symbolic
 * tensors (no storage) that stand for graph values. Concrete tensors the function touches are
 * captured: the graph keeps a reference and reads them when the program runs.
 */
#include <stdlib.h>
#include <string.h>

#include "compile/trace.h"
#include "ops/dispatch.h"

static int new_value(em_ctx *c, em_graph *g, em_gval_kind kind, const em_tensor *like) {
    if (g->n_vals == g->cap_vals) {
        int cap = g->cap_vals ? 2 * g->cap_vals : 256;
        em_gval *v = realloc(g->vals, (size_t)cap * sizeof *v);
        if (!v) {
            EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory recording the trace");
            return -1;
        }
        g->vals = v;
        g->cap_vals = cap;
    }
    em_gval *v = &g->vals[g->n_vals];
    memset(v, 0, sizeof *v);
    v->kind = kind;
    v->node = -1;
    v->dtype = like->dtype;
    v->ndim = like->ndim;
    memcpy(v->shape, like->shape, (size_t)like->ndim * sizeof *like->shape);
    v->dev = like->dev;
    return g->n_vals++;
}

/* ---- captured tensors: pointer -> value ---- */

static size_t ptr_hash(const void *p, size_t cap) {
    uintptr_t x = (uintptr_t)p;
    x ^= x >> 17;
    x *= 0xed5ad4bbU;
    x ^= x >> 11;
    return (size_t)x & (cap - 1);
}

static bool cap_grow(em_trace *tr) {
    size_t cap = tr->cap_cap ? 2 * tr->cap_cap : 256;
    em_tensor **keys = calloc(cap, sizeof *keys);
    int *vals = calloc(cap, sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return false;
    }
    for (size_t i = 0; i < tr->cap_cap; i++) {
        if (!tr->cap_keys[i]) continue;
        size_t h = ptr_hash(tr->cap_keys[i], cap);
        while (keys[h]) h = (h + 1) & (cap - 1);
        keys[h] = tr->cap_keys[i];
        vals[h] = tr->cap_vals[i];
    }
    free(tr->cap_keys);
    free(tr->cap_vals);
    tr->cap_keys = keys;
    tr->cap_vals = vals;
    tr->cap_cap = cap;
    return true;
}

int em_trace_value_of(em_ctx *c, em_tensor *t) {
    em_trace *tr = c->trace;
    if (t->sym) return t->sym - 1;
    if (t->lazy && em_tensor_materialize(c, t)) return -1;
    if (2 * (tr->cap_len + 1) > tr->cap_cap && !cap_grow(tr)) {
        EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory recording the trace");
        return -1;
    }
    size_t h = ptr_hash(t, tr->cap_cap);
    while (tr->cap_keys[h]) {
        if (tr->cap_keys[h] == t) return tr->cap_vals[h];
        h = (h + 1) & (tr->cap_cap - 1);
    }
    int v = new_value(c, &tr->g, EM_GV_CAPTURED, t);
    if (v < 0) return -1;
    tr->g.vals[v].t = em_tensor_retain(t);
    tr->cap_keys[h] = t;
    tr->cap_vals[h] = v;
    tr->cap_len++;
    return v;
}

/* ---- recording ---- */

em_tensor *em_trace_input(em_ctx *c, const em_tensor *like, int index) {
    em_trace *tr = c->trace;
    int v = new_value(c, &tr->g, EM_GV_INPUT, like);
    if (v < 0) return NULL;
    tr->g.vals[v].index = index;
    em_tensor *t = em_tensor_alloc_meta(like->dtype, like->ndim, like->shape);
    if (!t) {
        EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory");
        return NULL;
    }
    t->dev = like->dev;
    /* the caller's layout, so that rules see what eager sees (a view of a transposed input
     * fails in both); the program itself reads a contiguous copy */
    memcpy(t->strides, like->strides, sizeof t->strides);
    t->sym = v + 1;
    return t;
}

static em_gnode *new_node(em_ctx *c, em_graph *g) {
    if (g->n_nodes == g->cap_nodes) {
        int cap = g->cap_nodes ? 2 * g->cap_nodes : 256;
        em_gnode *n = realloc(g->nodes, (size_t)cap * sizeof *n);
        if (!n) {
            EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory recording the trace");
            return NULL;
        }
        g->nodes = n;
        g->cap_nodes = cap;
    }
    em_gnode *n = &g->nodes[g->n_nodes];
    memset(n, 0, offsetof(em_gnode, attrs));
    n->fused_into = -1;
    n->dead = false;
    n->constant = false;
    n->file = c->cur.file;
    n->line = c->cur.line;
    return n;
}

/* Appends the node for `op` with input values vin; its outputs become the values of outs[]
 * (which must already carry their dtype, shape and device). */
static int append(em_ctx *c, const em_op_def *op, const int *vin, int n_in, const em_attr *attrs,
                  em_tensor **outs, int n_out) {
    em_trace *tr = c->trace;
    em_gnode *n = new_node(c, &tr->g);
    if (!n) return -1;
    int idx = tr->g.n_nodes;
    n->op = op->id;
    n->n_in = n_in;
    memcpy(n->in, vin, (size_t)n_in * sizeof *vin);
    if (op->n_attrs && attrs) memcpy(n->attrs, attrs, (size_t)op->n_attrs * sizeof *attrs);
    n->n_out = n_out;
    n->out0 = tr->g.n_vals;
    tr->g.n_nodes++;
    for (int o = 0; o < n_out; o++) {
        int v = new_value(c, &tr->g, EM_GV_NODE, outs[o]);
        if (v < 0) return -1;
        tr->g.vals[v].node = idx;
        tr->g.vals[v].index = o;
        outs[o]->sym = v + 1;
    }
    return n_out;
}

static int record(em_ctx *c, const em_op_def *op, em_tensor *const *in, int n_in,
                  const em_attr *attrs, const em_meta *metas, int n_out, em_tensor **outs) {
    int vin[EM_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) {
        vin[i] = in[i] ? em_trace_value_of(c, in[i]) : -1;
        if (in[i] && vin[i] < 0) return -1;
    }
    em_device *dev = (em_device *)c->cur.dev;
    if (op->kind == EM_OPK_VIEW) {
        /* The view's geometry (strides, offset) is computed as eager computes it, so later
         * rules see the same strides; a reshape that must copy records the copy first. */
        em_trace *tr = c->trace;
        int before = tr->g.n_nodes;
        em_tensor *sym_in = in[0]->sym ? in[0] : NULL;
        em_tensor *x = in[0];
        if (!sym_in) { /* a view of a captured tensor: geometry from a symbolic stand-in */
            x = em_tensor_alloc_meta(in[0]->dtype, in[0]->ndim, in[0]->shape);
            if (!x) return EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory"), -1;
            memcpy(x->strides, in[0]->strides, sizeof x->strides);
            x->offset = in[0]->offset;
            x->dev = in[0]->dev;
            x->sym = vin[0] + 1;
        }
        em_status s = em_view_build(c, op, &x, attrs, metas, n_out, outs);
        if (!sym_in) em_tensor_release(x);
        if (s != EM_OK) return -1;
        if (tr->g.n_nodes > before) /* reshape copied: it views the copy */
            vin[0] = tr->g.nodes[tr->g.n_nodes - 1].out0;
        int r = append(c, op, vin, 1, attrs, outs, n_out);
        if (r < 0)
            for (int o = 0; o < n_out; o++) em_tensor_release(outs[o]);
        return r;
    }
    for (int o = 0; o < n_out; o++) {
        outs[o] = em_tensor_alloc_meta(metas[o].dtype, metas[o].ndim, metas[o].shape);
        if (!outs[o]) {
            for (int j = 0; j < o; j++) em_tensor_release(outs[j]);
            return EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory"), -1;
        }
        outs[o]->dev = dev;
    }
    int r = append(c, op, vin, n_in, attrs, outs, n_out);
    if (r < 0)
        for (int o = 0; o < n_out; o++) em_tensor_release(outs[o]);
    return r;
}

int em_trace_copy(em_ctx *c, int v) {
    em_trace *tr = c->trace;
    const em_gval *gv = &tr->g.vals[v];
    em_tensor *t = em_tensor_alloc_meta(gv->dtype, gv->ndim, gv->shape);
    if (!t) return EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory"), -1;
    t->dev = gv->dev;
    int r = append(c, em_op_get(EM_OP_CONTIGUOUS), &v, 1, NULL, &t, 1);
    int out = r < 0 ? -1 : t->sym - 1;
    em_tensor_release(t);
    return out;
}

/* Only reached while tracing (outside a trace, core reports the escaped value itself). */
static em_status value_needed(em_ctx *c, const em_tensor *t, const char *what) {
    char sig[96];
    /* the position of the last op the function called is the closest we know */
    return em_fail_at(c, EM_ERR_UNSUPPORTED, what, c->cur.file, c->cur.line,
                      "a compiled function cannot read the values of %s (a traced value) on the "
                      "host or move it to another device; keep the data on the device (use ops) "
                      "or pass host values as statics (the last op called was at this position)",
                      em_tensor_sig(t, sig, sizeof sig));
}

static const em_tracer tracer = {.record = record, .value_needed = value_needed};

void em_trace_begin(em_ctx *c, em_trace *tr) {
    c->trace = tr;
    c->tracer = &tracer;
}

void em_trace_end(em_ctx *c) {
    c->trace = NULL;
    c->tracer = NULL;
}

void em_trace_free(em_trace *tr) {
    if (!tr) return;
    free(tr->cap_keys);
    free(tr->cap_vals);
    tr->cap_keys = NULL;
    tr->cap_vals = NULL;
    tr->cap_cap = tr->cap_len = 0;
}

/*
 * The tape and the backward walk (ember/autograd.h). The tape is a list of nodes in call order,
 * which is a topological order: walking it backwards, every consumer of a tensor is done before
 * the op that produced it, so a tensor's gradient is complete when its producer's rule runs.
 * Gradients waiting for their producer live in the tensor's `grad` field (non-leaves) and are
 * dropped once it ran; leaves keep theirs.
 */
#include <stdlib.h>
#include <string.h>

#include "ember/autograd.h"
#include "ember/ops.h"
#include "ops/autodiff.h"

typedef struct em_tape {
    em_grad_node **nodes;
    int n, cap;
} em_tape;

static unsigned version_of(const em_tensor *t) {
    return t && t->storage ? atomic_load(&t->storage->version) : 0;
}

static void node_free(em_grad_node *n) {
    if (!n) return;
    for (int o = 0; o < n->n_out; o++) {
        em_tensor *t = n->out[o];
        if (t->node == n) {
            /* the result becomes a constant: its history is gone (torch's freed graph) */
            t->node = NULL;
            t->requires_grad = false;
            em_tensor_release(t->grad);
            t->grad = NULL;
        }
        em_tensor_release(t);
    }
    for (int i = 0; i < n->n_in; i++) em_tensor_release(n->in[i]);
    if (n->ext_free) n->ext_free(n->ext);
    free(n);
}

static void tape_clear(em_ctx *c) {
    em_tape *tp = c->tape;
    if (!tp) return;
    for (int i = tp->n - 1; i >= 0; i--) node_free(tp->nodes[i]);
    tp->n = 0;
}

static void tape_free(em_ctx *c) {
    tape_clear(c);
    em_tape *tp = c->tape;
    if (tp) free(tp->nodes);
    free(tp);
    c->tape = NULL;
    c->tape_free = NULL;
}

static em_tape *tape_get(em_ctx *c) {
    if (!c->tape) {
        c->tape = calloc(1, sizeof(em_tape));
        if (c->tape) c->tape_free = tape_free;
    }
    return c->tape;
}

em_status em_grad_check_call(em_ctx *c, const em_op_def *op, em_tensor *const *in, int n_in) {
    if (op->n_out != 0) return EM_OK; /* only the in-place ops have no outputs */
    for (int i = 0; i < n_in; i++)
        if (in[i] && in[i]->requires_grad)
            return em_op_fail(c, EM_ERR_UNSUPPORTED,
                              "input %d requires grad: an in-place write %s a tensor that requires "
                              "grad is not differentiable yet (write with grad disabled, "
                              "em_grad_enable(c, false), or build a new tensor instead)",
                              i, i == 0 ? "into" : "from");
    return EM_OK;
}

/* A new node for n_in inputs and n_out outputs appended to the tape (inputs and outputs
 * retained, their versions noted, floating outputs marked as produced by it); NULL on OOM
 * (recorded, nothing retained). */
static em_grad_node *node_push(em_ctx *c, const em_op_def *op, em_tensor *const *in, int n_in,
                               em_tensor *const *outs, int n_out) {
    em_tape *tp = tape_get(c);
    size_t sz = sizeof(em_grad_node) + (size_t)(n_in + n_out) * (sizeof(em_tensor *) +
                                                                  sizeof(unsigned));
    em_grad_node *n = tp ? calloc(1, sz) : NULL;
    if (n && tp->n == tp->cap) {
        int ncap = tp->cap ? tp->cap * 2 : 256;
        em_grad_node **nn = realloc(tp->nodes, (size_t)ncap * sizeof *nn);
        if (nn) {
            tp->nodes = nn;
            tp->cap = ncap;
        }
    }
    if (!n || tp->n == tp->cap) {
        free(n);
        em_op_fail(c, EM_ERR_OOM, "out of memory recording the op for autodiff");
        return NULL;
    }
    n->op = op;
    n->n_in = n_in;
    n->n_out = n_out;
    n->in = (em_tensor **)(n + 1);
    n->out = n->in + n_in;
    n->in_ver = (unsigned *)(n->out + n_out);
    n->out_ver = n->in_ver + n_in;
    for (int i = 0; i < n_in; i++) {
        n->in[i] = in[i] ? em_tensor_retain(in[i]) : NULL;
        n->in_ver[i] = version_of(in[i]);
    }
    for (int o = 0; o < n_out; o++) {
        n->out[o] = em_tensor_retain(outs[o]);
        n->out_ver[o] = version_of(outs[o]);
        if (em_dtype_is_float(outs[o]->dtype)) {
            outs[o]->requires_grad = true;
            outs[o]->node = n;
        }
    }
    tp->nodes[tp->n++] = n;
    return n;
}

int em_grad_record(em_ctx *c, const em_op_def *op, em_tensor *const *in, int n_in,
                   const em_attr *attrs, em_tensor **outs, int n_out) {
    bool wanted = false, floating = false;
    for (int i = 0; i < n_in; i++) wanted |= in[i] && in[i]->requires_grad;
    for (int o = 0; o < n_out; o++) floating |= em_dtype_is_float(outs[o]->dtype);
    if (!wanted || !floating) return n_out;
    em_grad_node *n = node_push(c, op, in, n_in, outs, n_out);
    if (!n) {
        for (int o = 0; o < n_out; o++) em_tensor_release(outs[o]);
        return -1;
    }
    if (op->n_attrs) memcpy(n->attrs, attrs, (size_t)op->n_attrs * sizeof *attrs);
    n->file = c->cur.file;
    n->line = c->cur.line;
    return n_out;
}

em_grad_node *em_grad_record_node(em_ctx *c, const em_op_def *op, const em_grad_rule *rule,
                                  void *ext, void (*ext_free)(void *), em_tensor *const *in,
                                  int n_in, em_tensor *const *outs, int n_out, const char *file,
                                  int line) {
    em_grad_node *n = node_push(c, op, in, n_in, outs, n_out);
    if (!n) return NULL;
    n->rule = rule;
    n->ext = ext;
    n->ext_free = ext_free;
    n->file = file;
    n->line = line;
    return n;
}

void *em_grad_tape_push(em_ctx *c) {
    void *saved = c->tape;
    c->tape = NULL; /* tape_get makes the new one when the first op is recorded */
    c->tape_free = NULL;
    return saved;
}

void em_grad_tape_pop(em_ctx *c, void *saved) {
    if (c->tape) tape_free(c);
    c->tape = saved;
    c->tape_free = saved ? tape_free : NULL;
}

/* ---- public API ---- */

bool em_grad_enable(em_ctx *c, bool on) {
    if (!c) return false;
    bool prev = c->grad_on;
    c->grad_on = on;
    return prev;
}

bool em_grad_is_enabled(const em_ctx *c) { return c && c->grad_on; }

em_status em_tensor_requires_grad(em_ctx *c, em_tensor *t, bool on) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (c->err.status) return c->err.status;
    if (!t) return EM_FAIL(c, EM_ERR_INVALID_ARG, "requires_grad", "the tensor is NULL");
    char sig[96];
    if (t->node)
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "requires_grad",
                       "%s is the result of a recorded op, not a leaf: only leaves are marked "
                       "(its gradient flows to the leaves it was computed from)",
                       em_tensor_sig(t, sig, sizeof sig));
    if (on && !em_dtype_is_float(t->dtype))
        return EM_FAIL(c, EM_ERR_DTYPE, "requires_grad",
                       "%s: only floating tensors (f32, bf16, f16, f64) can require grad",
                       em_tensor_sig(t, sig, sizeof sig));
    t->requires_grad = on;
    return EM_OK;
}

bool em_tensor_get_requires_grad(const em_tensor *t) { return t && t->requires_grad; }

em_tensor *em_tensor_grad(const em_tensor *t) { return t && !t->node ? t->grad : NULL; }

void em_tensor_zero_grad(em_tensor *t) {
    if (!t) return;
    em_tensor_release(t->grad);
    t->grad = NULL;
}

void em_grad_tape_clear(em_ctx *c) {
    if (c) tape_clear(c);
}

int em_grad_tape_size(const em_ctx *c) {
    return c && c->tape ? ((const em_tape *)c->tape)->n : 0;
}

/* Whether nothing but the current scope holds g or its memory. */
static bool exclusive(const em_tensor *g) {
    return atomic_load(&g->refcount) == 1 &&
           (!g->storage || atomic_load(&g->storage->refcount) == 1);
}

/* Adds g (in the current scope) to t's gradient. A leaf's gradient gets its dtype and memory of
 * its own (rules pass gradients through as they are: add gives both inputs the same tensor, and
 * clipping or an optimizer writes leaf gradients in place). */
static em_status accumulate(em_ctx *c, em_tensor *t, em_tensor *g) {
    if (g->dtype != t->dtype) g = em_cast(c, g, t->dtype);
    if (g && !t->node && !t->grad && !(exclusive(g) && em_is_contiguous(g)))
        g = em_contiguous(c, em_mul_scalar(c, g, 1.0)); /* a copy */
    if (g && t->grad) g = em_add(c, t->grad, g);
    /* a leaf's gradient is a value: in fused mode a pending expression would hold the tensors
     * it reads, the leaf among them (mul's x * x), a reference cycle */
    if (g && !t->node && em_tensor_materialize(c, g) != EM_OK) return c->err.status;
    if (!g) return c->err.status;
    em_tensor_release(t->grad);
    t->grad = em_tensor_retain(g);
    return EM_OK;
}

bool em_grad_same_shape(const em_tensor *a, const em_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

/* Runs node n's rule and hands the input gradients on. */
static em_status node_backward(em_ctx *c, em_grad_node *n) {
    em_tensor *gout[EM_MAX_OUTPUTS] = {NULL};
    bool any = false;
    for (int o = 0; o < n->n_out; o++) {
        if (n->out[o]->node == n) gout[o] = n->out[o]->grad;
        any |= gout[o] != NULL;
    }
    const em_grad_rule *r = n->rule ? n->rule : em_grad_rule_get(n->op->id);
    if (!any && !r->collective) return EM_OK; /* not on the path to the loss */
    if (!r->fn)
        return em_fail_at(c, EM_ERR_UNSUPPORTED, "backward", n->file, n->line,
                          "op '%s' has no backward rule yet (the call recorded here)",
                          n->op->name);
    for (int i = 0; i < n->n_in && i < 32; i++)
        if ((r->reads_in >> i & 1) && n->in[i] && version_of(n->in[i]) != n->in_ver[i])
            return em_fail_at(c, EM_ERR_INVALID_ARG, "backward", n->file, n->line,
                              "input %d of '%s', needed for its gradient, was modified by an "
                              "in-place write (assign, index_copy) after the op used it",
                              i, n->op->name);
    for (int o = 0; o < n->n_out && o < 32; o++)
        if ((r->reads_out >> o & 1) && version_of(n->out[o]) != n->out_ver[o])
            return em_fail_at(c, EM_ERR_INVALID_ARG, "backward", n->file, n->line,
                              "output %d of '%s', needed for its gradient, was modified by an "
                              "in-place write (assign, index_copy) after the op made it",
                              o, n->op->name);
    bool need[EM_MAX_INPUTS] = {false};
    em_device *dev = NULL;
    for (int i = 0; i < n->n_in; i++) {
        need[i] = n->in[i] && n->in[i]->requires_grad;
        if (n->in[i] && !dev) dev = n->in[i]->dev;
    }
    em_tensor *gin[EM_MAX_INPUTS] = {NULL};
    em_device *prev_dev = c->device;
    if (dev) c->device = dev; /* the rules create zeros and constants on the node's device */
    if (em_scope_push(c) < 0) return c->err.status;
    em_status s = r->fn(c, n, gout, need, gin);
    if (!s) s = c->err.status;
    for (int i = 0; i < n->n_in && !s; i++) {
        if (!need[i] || !gin[i]) continue;
        if (!em_grad_same_shape(gin[i], n->in[i])) {
            char a[96], b[96];
            s = em_fail_at(c, EM_ERR_INTERNAL, "backward", n->file, n->line,
                           "the rule of '%s' gave a gradient %s for input %d of %s", n->op->name,
                           em_tensor_sig(gin[i], a, sizeof a), i,
                           em_tensor_sig(n->in[i], b, sizeof b));
            break;
        }
        s = accumulate(c, n->in[i], gin[i]);
    }
    em_scope_pop(c);
    c->device = prev_dev;
    /* the outputs' gradients are spent: every consumer came later on the tape and has run, and
     * only leaves keep theirs (torch keeps no .grad on non-leaf tensors either). Dropping them
     * now frees each activation gradient as soon as the walk passes its producer, instead of
     * when the caller's scope ends: a step's peak memory is then one layer's, not the model's. */
    for (int o = 0; o < n->n_out; o++)
        if (n->out[o]->node == n && n->out[o]->grad) {
            em_tensor_release(n->out[o]->grad);
            n->out[o]->grad = NULL;
        }
    if (s && !c->err.status)
        em_fail_at(c, s, "backward", n->file, n->line, "the rule of '%s' failed", n->op->name);
    return s;
}

em_status em_backward_grad(em_ctx *c, em_tensor *out, em_tensor *grad) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (c->err.status) return c->err.status;
    if (!out) return EM_FAIL(c, EM_ERR_INVALID_ARG, "backward", "the output is NULL");
    char sig[96], gsig[96];
    if (!out->requires_grad)
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "backward",
                       "%s does not require grad: no input of its computation required grad "
                       "while grad was enabled, or its graph was released by an earlier "
                       "em_backward or em_grad_tape_clear",
                       em_tensor_sig(out, sig, sizeof sig));
    if (!grad && out->numel != 1)
        return EM_FAIL(c, EM_ERR_SHAPE, "backward",
                       "%s has %lld elements: a gradient is implied only for one element (pass "
                       "one with em_backward_grad)",
                       em_tensor_sig(out, sig, sizeof sig), (long long)out->numel);
    if (grad && (!em_grad_same_shape(grad, out) || !em_dtype_is_float(grad->dtype)))
        return EM_FAIL(c, EM_ERR_SHAPE, "backward",
                       "the gradient %s does not fit the output %s (same shape, floating)",
                       em_tensor_sig(grad, gsig, sizeof gsig),
                       em_tensor_sig(out, sig, sizeof sig));
    em_device *prev_dev = c->device;
    c->device = out->dev;
    if (em_scope_push(c) < 0) {
        c->device = prev_dev;
        return c->err.status;
    }
    em_tensor *g = grad ? grad : em_full(c, out->dtype, out->ndim, out->shape, 1.0);
    c->device = prev_dev;
    em_status s = g ? em_grad_backward_roots(c, 1, &out, &g) : c->err.status;
    em_scope_pop(c);
    if (s) em_grad_tape_clear(c); /* em_full failed: release the graph all the same */
    return s;
}

em_status em_grad_backward_roots(em_ctx *c, int nr, em_tensor *const *roots,
                                 em_tensor *const *grads) {
    bool prev = c->grad_on;
    c->grad_on = false;
    bool pushed = em_scope_push(c) >= 0;
    em_status s = pushed ? EM_OK : c->err.status;
    for (int i = 0; i < nr && !s; i++) {
        em_tensor *g = grads[i];
        if (!g || !roots[i] || !roots[i]->requires_grad) continue;
        /* held twice while it is handed on, so a leaf root copies the caller's tensor */
        em_tensor_retain(g);
        s = accumulate(c, roots[i], g);
        em_tensor_release(g);
    }
    if (pushed) em_scope_pop(c);
    em_tape *tp = c->tape;
    if (tp) {
        /* each node is released once passed: nothing later on the walk reads it */
        while (tp->n > 0) {
            em_grad_node *n = tp->nodes[tp->n - 1];
            if (!s) s = node_backward(c, n);
            tp->n--;
            node_free(n);
        }
    }
    c->grad_on = prev;
    return s;
}

em_status em_backward(em_ctx *c, em_tensor *out) { return em_backward_grad(c, out, NULL); }

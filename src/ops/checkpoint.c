/*
 * Activation recomputation (em_checkpoint, ember/autograd.h): a region runs once with recording
 * off and is put on the tape as one node whose backward rule runs it again, recorded on a tape
 * of its own, and backpropagates through that. torch.utils.checkpoint, the reentrant variant:
 * the node sees only the region's inputs; parameters the function reads are leaves of the
 * region's tape and get their gradients there.
 */
#include <stdlib.h>

#include "ember/autograd.h"
#include "ops/autodiff.h"

typedef struct ckpt {
    em_checkpoint_fn fn;
    void *user;
    void (*user_free)(void *user);
} ckpt;

static void ckpt_free(void *p) {
    ckpt *k = p;
    if (!k) return;
    if (k->user_free) k->user_free(k->user);
    free(k);
}

/* A tensor of its own over t's memory (same storage, so in-place writes and their versions are
 * seen through it; the same traced value in compile mode), outside the tape: no node, not
 * requiring grad. Caller-owned. */
static em_tensor *alias(em_ctx *c, em_tensor *t) {
    if (em_tensor_materialize(c, t) != EM_OK) return NULL;
    em_tensor *a = em_tensor_view_of(t, t->ndim, t->shape, t->strides, t->offset);
    if (!a) EM_FAIL(c, EM_ERR_OOM, "checkpoint", "out of memory");
    /* while em_compile traces, t is a value of the graph with no storage: the alias stands for
     * the same value (it has t's shape, strides and offset), not for a capture with no data */
    else a->sym = t->sym;
    return a;
}

/* Calls the region's function in a scope of its own and moves its outputs to the caller's. */
static em_status run(em_ctx *c, const ckpt *k, em_tensor *const *in, int n_in, em_tensor **out,
                     int n_out, const char *file, int line) {
    for (int o = 0; o < n_out; o++) out[o] = NULL;
    if (em_scope_push(c) < 0) return c->err.status;
    em_status s = k->fn(c, k->user, in, n_in, out, n_out);
    if (!s) s = c->err.status;
    for (int o = 0; o < n_out && !s; o++)
        if (!out[o])
            s = em_fail_at(c, EM_ERR_INVALID_ARG, "checkpoint", file, line,
                           "the region's function left output %d of %d NULL", o, n_out);
    if (s && !c->err.status)
        em_fail_at(c, s, "checkpoint", file, line, "the region's function failed");
    for (int o = 0; o < n_out; o++) out[o] = s ? NULL : em_keep(c, out[o]);
    em_scope_pop(c);
    return s;
}

/* The node's rule: recompute with recording on, into a tape of its own, and backpropagate. */
static em_status ckpt_backward(em_ctx *c, const em_grad_node *n, em_tensor *const *gout,
                               const bool *need, em_tensor **gin) {
    const ckpt *k = n->ext;
    em_tensor *leaf[EM_MAX_INPUTS] = {NULL}, *res[EM_MAX_OUTPUTS] = {NULL};
    em_status s = EM_OK;
    for (int i = 0; i < n->n_in && !s; i++) {
        if (!n->in[i]) continue;
        if (!(leaf[i] = alias(c, n->in[i]))) s = c->err.status;
        else leaf[i]->requires_grad = need[i];
    }
    void *outer = em_grad_tape_push(c);
    if (!s && em_scope_push(c) >= 0) {
        c->grad_on = true;
        s = run(c, k, leaf, n->n_in, res, n->n_out, n->file, n->line);
        c->grad_on = false;
        for (int o = 0; o < n->n_out && !s; o++)
            if (!em_grad_same_shape(res[o], n->out[o])) {
                char a[96], b[96];
                s = em_fail_at(c, EM_ERR_INTERNAL, "checkpoint", n->file, n->line,
                               "recomputing the region gave output %d as %s, the first call %s "
                               "(the function must compute the same thing each time)",
                               o, em_tensor_sig(res[o], a, sizeof a),
                               em_tensor_sig(n->out[o], b, sizeof b));
            }
        if (!s) s = em_grad_backward_roots(c, n->n_out, res, gout);
        em_scope_pop(c);
    } else if (!s) {
        s = c->err.status;
    }
    /* the region's tape goes (released on error too); the outer one is back as it was */
    em_grad_tape_pop(c, outer);
    for (int i = 0; i < n->n_in; i++) {
        if (!s && need[i] && leaf[i] && leaf[i]->grad)
            gin[i] = em_adopt(c, em_tensor_retain(leaf[i]->grad));
        em_tensor_release(leaf[i]);
    }
    return s;
}

static const em_op_def ckpt_op = {.name = "checkpoint"};
/* the recomputation reads every input; the outputs' values are not needed (they are made
 * again) */
static const em_grad_rule ckpt_rule = {ckpt_backward, ~0u, 0u, false};
/* ... for a region that called collectives: its recomputation and backward meet the other
 * ranks, so every rank runs it, also one whose loss misses the region's outputs (as the
 * collectives' own rules, autodiff.h) */
static const em_grad_rule ckpt_rule_collective = {ckpt_backward, ~0u, 0u, true};

em_status em_checkpoint_(em_ctx *c, const char *file, int line, em_checkpoint_fn fn, void *user,
                         void (*user_free)(void *user), em_tensor *const *in, int n_in,
                         em_tensor **out, int n_out) {
    if (out)
        for (int o = 0; o < n_out && o < EM_MAX_OUTPUTS; o++) out[o] = NULL;
    em_status s = !c ? EM_ERR_INVALID_ARG : c->err.status;
    /* at most 32 inputs: the in-place check reads a 32-bit mask of them (ckpt_rule) */
    if (!s && (!fn || !out || n_in < 0 || n_in > 32 || (n_in > 0 && !in) ||
               n_out < 1 || n_out > EM_MAX_OUTPUTS))
        s = em_fail_at(c, EM_ERR_INVALID_ARG, "checkpoint", file, line,
                       "needs a function, outputs, 0..%d inputs and 1..%d outputs (got fn %s, "
                       "%d inputs, %d outputs)",
                       32, EM_MAX_OUTPUTS, fn ? "set" : "NULL", n_in, n_out);
    ckpt *k = s ? NULL : calloc(1, sizeof *k);
    if (!s && !k) s = em_fail_at(c, EM_ERR_OOM, "checkpoint", file, line, "out of memory");
    if (s) {
        if (user_free) user_free(user);
        return s;
    }
    k->fn = fn;
    k->user = user;
    k->user_free = user_free;
    bool rec = c->grad_on;
    /* the inputs' values as the node will see them (pending fused work evaluated), so the
     * versions it notes are their storages' */
    for (int i = 0; i < n_in && rec && !s; i++)
        if (in[i]) s = em_tensor_materialize(c, in[i]);
    c->grad_on = false;
    uint64_t coll0 = c->collectives;
    if (!s) s = run(c, k, in, n_in, out, n_out, file, line);
    c->grad_on = rec;
    bool collective = c->collectives != coll0;
    if (s || !rec) {
        ckpt_free(k);
        return s;
    }
    /* fresh outputs: fn may have returned an input, or a tensor the caller holds */
    for (int o = 0; o < n_out && !s; o++) {
        if (!em_dtype_is_float(out[o]->dtype)) continue; /* carries no gradient, as for ops */
        em_tensor *a = alias(c, out[o]);
        if (!a || !em_adopt(c, a)) s = c->err.status ? c->err.status : EM_ERR_OOM;
        else out[o] = a;
    }
    if (!s && !em_grad_record_node(c, &ckpt_op, collective ? &ckpt_rule_collective : &ckpt_rule,
                                   k, ckpt_free, in, n_in, out, n_out, file, line))
        s = c->err.status;
    if (s) {
        for (int o = 0; o < n_out; o++) out[o] = NULL;
        ckpt_free(k);
    }
    return s;
}

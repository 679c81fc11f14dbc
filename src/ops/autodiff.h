/*
 * Autodiff's internals: the tape the dispatcher records on while grad is enabled
 * (ember/autograd.h), and the backward rules, one per op id (ops/grad_rules.c holds the table;
 * the rules are written with the public eager ops, so they run on every device).
 */
#ifndef EMBER_AUTODIFF_H
#define EMBER_AUTODIFF_H

#include "core/tensor_impl.h"

/* One recorded op call. The node holds a reference to every input and output (the values its
 * rule may read) and the storage versions they had, to detect a later in-place write. */
typedef struct em_grad_node {
    const em_op_def *op;
    int n_in, n_out;
    em_tensor **in;  /* n_in entries, NULL for absent optional inputs */
    em_tensor **out; /* n_out entries */
    unsigned *in_ver, *out_ver;
    em_attr attrs[EM_MAX_ATTRS];
    const char *file; /* the caller's position, for errors */
    int line;
} em_grad_node;

/*
 * A backward rule: given the node and the gradients of its outputs (gout[o] NULL for an output
 * that received none), writes into gin[i] the gradient of input i for every i with need[i]
 * (others may be left NULL). Results may be views, of any dtype that converts to the input's;
 * they are created in the current scope. Runs with grad disabled and the context's default
 * device set to the node's. Returns the status (errors recorded in c).
 */
typedef em_status (*em_grad_fn)(em_ctx *c, const em_grad_node *n, em_tensor *const *gout,
                                const bool *need, em_tensor **gin);

typedef struct em_grad_rule {
    em_grad_fn fn;       /* NULL: not differentiable yet */
    unsigned reads_in;   /* bit i: the rule reads input i's values (checked for in-place writes) */
    unsigned reads_out;  /* bit o: ... output o's values */
} em_grad_rule;

/* The rule of an op (fn NULL when it has none). */
const em_grad_rule *em_grad_rule_get(em_op_id id);

/* Dispatcher hooks, called only while c->grad_on. check_call refuses, before anything runs, an
 * in-place write into or from a tensor that requires grad. record puts the call on the tape when
 * an input requires grad and an output is floating; returns n_out, or -1 after releasing the
 * outputs with an error. */
em_status em_grad_check_call(em_ctx *c, const em_op_def *op, em_tensor *const *in, int n_in);
int em_grad_record(em_ctx *c, const em_op_def *op, em_tensor *const *in, int n_in,
                   const em_attr *attrs, em_tensor **outs, int n_out);

/* ---- helpers for rules (ops/grad_util.c) ---- */
/* g summed over the dims broadcasting added to `like`'s shape, reshaped to it. */
em_tensor *em_grad_reduce_to(em_ctx *c, em_tensor *g, const em_tensor *like);
/* Zeros of t's shape and dtype (on the context's default device). */
em_tensor *em_grad_zeros_like(em_ctx *c, const em_tensor *t);
/* The attribute `name` of the node's op (its schema must have it). */
const em_attr *em_grad_attr(const em_grad_node *n, const char *name);

#endif

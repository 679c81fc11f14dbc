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
    /* a node with a rule of its own (em_checkpoint's region): the rule, used instead of the op
     * table's, and its data, freed with ext_free when the node is; NULL for recorded op calls */
    const struct em_grad_rule *rule;
    void *ext;
    void (*ext_free)(void *ext);
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
    /* the rule runs even when no output got a gradient (gout all NULL: zeros): a collective's
     * backward is a collective too, which every rank of the group must join, also the ranks
     * whose own loss does not reach the forward's output */
    bool collective;
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

/* Puts a node with its own rule on the tape (em_checkpoint): it holds references to the inputs
 * (NULL entries allowed) and outputs and their versions, as a recorded op call; each floating
 * output is marked as requiring grad and produced by it. `ext` becomes the node's (freed with
 * ext_free when the node is) on success only. NULL with an error (OOM) otherwise: the outputs
 * are then left as they were. */
em_grad_node *em_grad_record_node(em_ctx *c, const em_op_def *op, const em_grad_rule *rule,
                                  void *ext, void (*ext_free)(void *), em_tensor *const *in,
                                  int n_in, em_tensor *const *outs, int n_out, const char *file,
                                  int line);
/* Backpropagates from several outputs of the current tape at once: grads[i] (NULL: none; a
 * floating tensor of roots[i]'s shape) is added to roots[i]'s gradient for every root that
 * requires grad, then the whole tape is walked and released as em_backward does. Runs with
 * recording off. Returns the status. */
em_status em_grad_backward_roots(em_ctx *c, int n, em_tensor *const *roots,
                                 em_tensor *const *grads);
/* Gives the context an empty tape of its own and returns the one it had (em_checkpoint's
 * recomputation records into a tape of its own); em_grad_tape_pop releases the temporary tape
 * with whatever is left on it and puts `saved` back. */
void *em_grad_tape_push(em_ctx *c);
void em_grad_tape_pop(em_ctx *c, void *saved);

/* Whether a and b have the same shape. */
bool em_grad_same_shape(const em_tensor *a, const em_tensor *b);

/* ---- helpers for rules (ops/grad_util.c) ---- */
/* g summed over the dims broadcasting added to `like`'s shape, reshaped to it. */
em_tensor *em_grad_reduce_to(em_ctx *c, em_tensor *g, const em_tensor *like);
/* Zeros of t's shape and dtype (on the context's default device). */
em_tensor *em_grad_zeros_like(em_ctx *c, const em_tensor *t);
/* The attribute `name` of the node's op (its schema must have it). */
const em_attr *em_grad_attr(const em_grad_node *n, const char *name);
/* t cast to f32 unless it is f32 or f64 already (norms recompute their statistics in f32, as
 * their forwards do); NULL stays NULL. */
em_tensor *em_grad_f32(em_ctx *c, em_tensor *t);
/* The mean over the last dim, kept. */
em_tensor *em_grad_mean_last(em_ctx *c, em_tensor *t);

#endif

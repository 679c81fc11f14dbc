/*
 * ember/autograd.h — reverse-mode automatic differentiation over the eager ops.
 *
 * While grad is enabled in a context, every op call with an input that requires grad is recorded
 * on the context's tape (the op, its attributes, and references to its inputs and outputs);
 * em_backward walks the tape backwards and runs each op's backward rule (ops/grad_rules_*.c, one
 * entry per op id of the op table), accumulating gradients into the leaves that require grad, as
 * torch.autograd does. With grad disabled (the default) the dispatcher takes one branch on a flag
 * and records nothing. A function traced by em_compile starts with grad disabled; if it enables
 * grad itself, its (symbolic) op calls are recorded and an em_backward inside it is traced too
 * (the rules are ops), so one program holds forward and backward: the compiled training step
 * (em_train_options.compile) works this way. Such a function must consume or clear the tape it
 * made before it returns.
 *
 * Semantics follow torch: a tensor used twice gets the sum of both gradients; views (reshape,
 * permute, transpose, slice, expand, squeeze, split, ...) pass gradients to the tensor they view;
 * integer and bool results (comparisons, argmax, indices) carry no gradient; gradients of a
 * broadcast input are summed back to its shape; leaf gradients accumulate across calls until
 * em_tensor_zero_grad. Backward rules run with grad disabled (no double backward).
 *
 * The collectives (ember/dist.h) are differentiable as torch.distributed.nn.functional's: the
 * loss is the sum of the ranks' losses and each rule is the adjoint collective on the same
 * group (all_gather <-> reduce_scatter(sum), all_reduce(sum) itself, all_to_all with the dims
 * swapped, ring_shift by -offset; a max reduction gives the summed gradient to the ranks holding
 * the maximum, shared equally between ties). Every rank of the group must call em_backward; a
 * collective's rule runs on a rank even when that rank's loss does not reach its output.
 *
 * Errors (recorded in the context, as every op): em_backward through an op that has no backward
 * rule names the op and where it was called (EM_ERR_UNSUPPORTED); a value a rule needs that was
 * overwritten in place after the op used it (em_assign, em_index_copy) names the op and the input
 * (EM_ERR_INVALID_ARG, torch's "modified by an inplace operation"); an in-place write into a
 * tensor that requires grad, or of one, while grad is enabled is refused before it writes
 * (EM_ERR_UNSUPPORTED); so are em_compiled_call with an input that requires grad and em_to of
 * one to another device (neither is recorded yet).
 */
#ifndef EMBER_AUTOGRAD_H
#define EMBER_AUTOGRAD_H

#include "ember/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Turns recording on or off for the context (torch.set_grad_enabled) and returns the previous
 * state. Turning it off keeps the tape recorded so far. A NULL context returns false.
 */
EM_API bool em_grad_enable(em_ctx *c, bool on);
/** Whether recording is on. */
EM_API bool em_grad_is_enabled(const em_ctx *c);

/**
 * Marks a leaf tensor as one whose gradient em_backward computes (torch's requires_grad_). The
 * tensor must be floating (f32, bf16, f16, f64) and must not be the result of a recorded op
 * (EM_ERR_INVALID_ARG otherwise). `on = false` clears the mark. Returns the status.
 */
EM_API em_status em_tensor_requires_grad(em_ctx *c, em_tensor *t, bool on);
/** True for a leaf marked with em_tensor_requires_grad and for results of recorded ops. */
EM_API bool em_tensor_get_requires_grad(const em_tensor *t);

/**
 * Backpropagates from `out`, which must hold one element (a loss): d out / d leaf is added to
 * every leaf that requires grad and took part in computing it. Then the tape is released
 * (torch's retain_graph=False): intermediate values are freed, and a second backward through the
 * same results is an error. Returns the status; an error found part way (an op without a rule,
 * an overwritten value: the message names the op) may leave the leaves the walk had reached
 * updated, and the tape is released all the same.
 */
EM_API em_status em_backward(em_ctx *c, em_tensor *out);
/**
 * Same with an explicit upstream gradient for `out` (torch's out.backward(grad)): `grad` has
 * out's shape and a floating dtype (converted to out's). Neither reference is taken.
 */
EM_API em_status em_backward_grad(em_ctx *c, em_tensor *out, em_tensor *grad);

/**
 * The accumulated gradient of a leaf (a tensor of its shape and dtype), or NULL when none has
 * been computed. Borrowed: valid until em_tensor_zero_grad or the tensor's release; retain it
 * to keep it. It is the leaf's own memory (em_clip_grad_norm scales it in place).
 */
EM_API em_tensor *em_tensor_grad(const em_tensor *t);
/** Drops the accumulated gradient (torch's zero_grad(set_to_none=True)). NULL is a no-op. */
EM_API void em_tensor_zero_grad(em_tensor *t);

/** Forgets the tape recorded so far without a backward, releasing what it kept alive. */
EM_API void em_grad_tape_clear(em_ctx *c);
/** Number of op calls on the tape (for tests and memory reports). */
EM_API int em_grad_tape_size(const em_ctx *c);

/**
 * The function of a checkpointed region (em_checkpoint): computes out[0..n_out) from
 * in[0..n_in) (and from whatever `user` gives it, parameters included) with the public ops,
 * leaving each output in the current scope (or returning an input). It must compute the same
 * thing each time it is called with the same values. Returns the status (errors recorded in c,
 * as every op).
 */
typedef em_status (*em_checkpoint_fn)(em_ctx *c, void *user, em_tensor *const *in, int n_in,
                                      em_tensor **out, int n_out);

/**
 * Activation recomputation (torch.utils.checkpoint): calls fn(c, user, in, n_in, out, n_out)
 * with recording off, so none of the values it computes is kept for the backward. With
 * recording on, its floating outputs are then fresh tensors (sharing the results' memory)
 * marked as requiring grad and produced by ONE tape node, which holds only references to the
 * inputs, and `user`. When em_backward reaches that node, it calls fn again with recording on,
 * on leaves that alias the inputs (the ones that require grad marked so), into a tape of its
 * own, backpropagates the outputs' gradients through it (leaves fn reads through `user`, such
 * as parameters, receive their gradients there, as without recomputation), releases that tape
 * and passes the aliases' gradients on as the inputs'. Peak memory of a backward through N
 * regions is then the inputs of all N plus the values of one region. With recording on the
 * outputs require grad even when nothing the region reads does (which is not known before the
 * recomputation). Regions nest. With recording off it is a plain call of fn. A region that
 * called collectives (ember/dist.h) is recomputed and backpropagated on every rank, also on one
 * whose loss does not reach its outputs (zeros there), as the collectives' own backward: its
 * recomputation meets the other ranks.
 *
 * Ownership: `user` passes to em_checkpoint in every case (success, error, recording off):
 * `user_free(user)` (when not NULL) is called once it is no longer needed — at once with
 * recording off or on error, else when the node is released (after its backward, or by
 * em_grad_tape_clear). Whatever fn reads through `user` must stay valid until then: retain
 * tensors there, never borrow them from a scope that may close before the backward. The outputs
 * belong to the current scope; out[] entries are NULL on error.
 *
 * Errors: NULL fn or out, n_in outside [0, 32], n_out outside [1, 64] (EM_ERR_INVALID_ARG); fn's
 * own error, or an output it left NULL. In the backward: an input written in place after the
 * region read it (EM_ERR_INVALID_ARG, naming the input and where the region was made, as for an
 * op); an error inside the recomputation (fn's, or a rule's) is recorded in the context and ends
 * the backward as an op's would, with the region's tape released and the outer tape intact; a
 * recomputed output whose shape differs from the first call's (EM_ERR_INTERNAL).
 */
#define em_checkpoint(c, ...) em_checkpoint_((c), EM_HERE, __VA_ARGS__)
EM_API em_status em_checkpoint_(em_ctx *c, const char *file, int line, em_checkpoint_fn fn,
                                void *user, void (*user_free)(void *user), em_tensor *const *in,
                                int n_in, em_tensor **out, int n_out);

/**
 * Mean cross-entropy of logits[N, C] against integer labels[N] (i64 or i32), ignoring the rows
 * whose label is `ignore_index` (torch's F.cross_entropy(logits, labels,
 * ignore_index=ignore_index), reduction "mean"): a 0-d tensor of logits' dtype, NaN when every
 * row is ignored (as torch). Built from log_softmax, gather, where and sum, so it is
 * differentiable wherever they are. A label outside [0, C) that is not ignore_index is an
 * EM_ERR_INDEX error.
 */
#define em_cross_entropy(c, ...) em_cross_entropy_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_cross_entropy_(em_ctx *c, const char *file, int line, em_tensor *logits,
                                    em_tensor *labels, int64_t ignore_index);

#ifdef __cplusplus
}
#endif
#endif

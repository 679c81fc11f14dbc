/*
 * ember/autograd.h — reverse-mode automatic differentiation over the eager ops.
 *
 * While grad is enabled in a context, every op call with an input that requires grad is recorded
 * on the context's tape (the op, its attributes, and references to its inputs and outputs);
 * em_backward walks the tape backwards and runs each op's backward rule (ops/grad_rules_*.c, one
 * entry per op id of the op table), accumulating gradients into the leaves that require grad, as
 * torch.autograd does. With grad disabled (the default) the dispatcher takes one branch on a flag
 * and records nothing; functions traced by em_compile are never recorded.
 *
 * Semantics follow torch: a tensor used twice gets the sum of both gradients; views (reshape,
 * permute, transpose, slice, expand, squeeze, split, ...) pass gradients to the tensor they view;
 * integer and bool results (comparisons, argmax, indices) carry no gradient; gradients of a
 * broadcast input are summed back to its shape; leaf gradients accumulate across calls until
 * em_tensor_zero_grad. Backward rules run with grad disabled (no double backward).
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

/*
 * ember/optim.h — optimizers, gradient clipping and learning-rate schedules with torch's
 * semantics (torch.optim.AdamW, torch.optim.SGD, torch.nn.utils.clip_grad_norm_, transformers'
 * get_cosine_schedule_with_warmup), over parameters whose gradients ember/autograd.h computed.
 *
 * Updates are written into the parameters in place (em_assign), with eager ops on the
 * parameters' devices; optimizer state (moments, momentum buffers) lives there too, in the
 * parameters' dtype. Call them with grad disabled (an in-place write into a tensor that requires
 * grad is refused while recording).
 */
#ifndef EMBER_OPTIM_H
#define EMBER_OPTIM_H

#include "ember/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_optimizer em_optimizer;

/** torch.optim.AdamW's hyper-parameters. */
typedef struct em_adamw_options {
    double lr;           /* 1e-3 */
    double beta1, beta2; /* 0.9, 0.999 */
    double eps;          /* 1e-8 */
    double weight_decay; /* 1e-2, decoupled: p -= lr * wd * p before the Adam step */
} em_adamw_options;
/** torch's defaults (above). */
EM_API em_adamw_options em_adamw_default_options(void);

/** torch.optim.SGD's hyper-parameters. */
typedef struct em_sgd_options {
    double lr;           /* 1e-3 */
    double momentum;     /* 0 */
    double dampening;    /* 0 */
    double weight_decay; /* 0 (added to the gradient, L2) */
    bool nesterov;       /* false; needs momentum > 0 and dampening 0, as torch */
} em_sgd_options;
EM_API em_sgd_options em_sgd_default_options(void);

/**
 * An AdamW optimizer over params[0..n) (one group). The optimizer takes a reference to each
 * parameter (released by em_optimizer_free); the parameters must be floating leaves. NULL with
 * an error in c for invalid options (lr < 0, eps < 0, betas outside [0, 1), weight decay < 0),
 * a NULL or non-floating parameter, or no memory. o NULL means the defaults.
 */
EM_API em_optimizer *em_adamw_create(em_ctx *c, em_tensor *const *params, int n,
                                     const em_adamw_options *o);
/** An SGD optimizer (same rules; o NULL means the defaults; nesterov without momentum or with
 *  dampening is an error, as in torch). */
EM_API em_optimizer *em_sgd_create(em_ctx *c, em_tensor *const *params, int n,
                                   const em_sgd_options *o);
/**
 * One step (torch's optimizer.step()): every parameter with a gradient is updated in place with
 * the current learning rate; parameters without one are skipped (their state unchanged, as
 * torch). Returns the status; on error parameters may be partly updated (the message names the
 * parameter index).
 */
EM_API em_status em_optimizer_step(em_ctx *c, em_optimizer *opt);
/** Drops every parameter's gradient (zero_grad(set_to_none=True)). */
EM_API void em_optimizer_zero_grad(em_optimizer *opt);
/** The learning rate the next step uses, and setting it (what a schedule does each step). */
EM_API double em_optimizer_lr(const em_optimizer *opt);
EM_API void em_optimizer_set_lr(em_optimizer *opt, double lr);
/** Steps taken so far. */
EM_API int64_t em_optimizer_steps(const em_optimizer *opt);
/**
 * Parameter i's state for a checkpoint: AdamW's moments (exp_avg, exp_avg_sq) or SGD's momentum
 * buffer (in *m; *v NULL), borrowed and NULL before its first update, and its step count. Any
 * output may be NULL. EM_ERR_INVALID_ARG (returned, nothing recorded) for i out of range.
 */
EM_API em_status em_optimizer_state(const em_optimizer *opt, int i, em_tensor **m, em_tensor **v,
                                    int64_t *step);
/**
 * Restores parameter i's state (resuming from a checkpoint): copies of m and v (each NULL or of
 * the parameter's shape; converted to its dtype, put on its device) and its step count.
 * EM_ERR_INVALID_ARG or EM_ERR_SHAPE naming the parameter index otherwise.
 */
EM_API em_status em_optimizer_set_state(em_ctx *c, em_optimizer *opt, int i, em_tensor *m,
                                        em_tensor *v, int64_t step);
/** Sets the count em_optimizer_steps returns (resuming). */
EM_API void em_optimizer_set_steps(em_optimizer *opt, int64_t steps);
/** Frees the optimizer and its state, releasing its parameter references. NULL is a no-op. */
EM_API void em_optimizer_free(em_optimizer *opt);

/**
 * torch.nn.utils.clip_grad_norm_(params, max_norm) with the 2-norm: the norm of all the
 * gradients together (computed in f64 here; torch's f32 sum of squares is within its rounding)
 * goes to *total_norm (may be NULL) as it was before clipping; when it exceeds max_norm every
 * gradient is scaled in place by max_norm / (total_norm + 1e-6). Parameters without a gradient
 * are skipped. Returns the status (EM_ERR_INVALID_ARG for max_norm <= 0 or NaN).
 */
EM_API em_status em_clip_grad_norm(em_ctx *c, em_tensor *const *params, int n, double max_norm,
                                   double *total_norm);

/**
 * The multiplier of the base learning rate at scheduler step `step` (0 before the first
 * optimizer step) of transformers' get_cosine_schedule_with_warmup(warmup, total, num_cycles):
 * step / warmup during the warmup, then 0.5 (1 + cos(pi * num_cycles * 2 * progress)), clamped
 * at 0, with progress = (step - warmup) / (total - warmup). num_cycles is 0.5 by default.
 */
EM_API double em_lr_cosine_with_warmup(int64_t step, int64_t warmup, int64_t total,
                                       double num_cycles);
/** transformers' get_constant_schedule_with_warmup (1 after the warmup; warmup 0: constant). */
EM_API double em_lr_constant_with_warmup(int64_t step, int64_t warmup);

#ifdef __cplusplus
}
#endif
#endif

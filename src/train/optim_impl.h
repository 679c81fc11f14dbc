/* AdamW inside a compiled training step (train/trainer_compiled.c): the update traced once with
 * its per-step numbers as tensors, replayed every step. */
#ifndef EMBER_OPTIM_IMPL_H
#define EMBER_OPTIM_IMPL_H

#include "ember/optim.h"

/* A new tensor holding t's current value (contiguous, t's dtype), computed now and detached
 * (caller-owned): a snapshot that later in-place writes of t do not reach, in fused mode too,
 * where a lazy copy would read t only after the writes. NULL with the error in c. The
 * optimizer's first momentum, the EMA's shadow parameters and the trainer's f32 master weights
 * are made this way. */
em_tensor *em_train_snapshot(em_ctx *c, em_tensor *t);

/* Makes the moments that do not exist yet (zeros), so the program writes into tensors the
 * optimizer keeps; *step is the parameters' common step count. Fails (EM_ERR_UNSUPPORTED) for
 * SGD and when the parameters' step counts differ (a compiled step updates all of them). */
em_status em_adamw_prepare_traced(em_ctx *c, em_optimizer *o, int64_t *step);
/* The numbers of update `step` (1-based) at rate lr, as the eager step computes them:
 * out[0] = 1 - lr wd, out[1] = sqrt(1 - beta2^step), out[2] = -lr / (1 - beta1^step). */
void em_adamw_step_numbers(const em_optimizer *o, double lr, int64_t step, double out[3]);
/* Records the update of every parameter with gradient grads[i] (none NULL) while tracing; the
 * three numbers are 0-d f32 tensors (the program's inputs). */
em_status em_adamw_update_traced(em_ctx *c, em_optimizer *o, em_tensor *const *grads,
                                 em_tensor *decay, em_tensor *sqrt_bc2, em_tensor *neg_step);
/* After the program ran: the step counts advance as an eager step's do. */
void em_adamw_advance(em_optimizer *o);

#endif

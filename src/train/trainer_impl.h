/* The trainer's state, shared by the loop (trainer.c) and checkpoints (checkpoint.c). */
#ifndef EMBER_TRAINER_IMPL_H
#define EMBER_TRAINER_IMPL_H

#include "ember/autograd.h"
#include "ember/ops.h"
#include "ember/optim.h"
#include "ember/train.h"

struct em_trainer {
    em_model *m;
    const em_train_data *d;
    em_train_options o;
    int64_t k, k_train, k_val; /* windows: all, training (the first), held out (the last) */
    int np;
    em_model_param *params;
    em_tensor **tensors;       /* params[i].tensor */
    int nb;
    em_model_param *buffers;   /* weights transformers keeps as buffers (Gemma 4's
                                  layer_scalar): frozen, written into the checkpoints */
    em_tensor **master;        /* bf16/f16 models: f32 master copies, which the optimizer
                                  updates (NULL for f32 models: the parameters themselves) */
    em_tensor **trained;       /* what the optimizer and clipping see: master or tensors */
    em_optimizer *opt;
    int64_t step;              /* steps taken */
    int64_t *perm, perm_epoch; /* the shuffle's permutation of the current epoch */
    int64_t *batch_ids;        /* [B, T] staging */
    em_compiled *cstep;        /* options.compile: the traced step (made at the first step) */
};

/* Mixed precision: the f32 masters rounded into the model's weights (after an update or a
 * resume). */
void em_trainer_masters_to_model(em_ctx *c, em_trainer *t);
/* The training window at global position g = step * B + b. */
int64_t em_trainer_window(em_trainer *t, int64_t g);

/* The ids of windows w[0..b) as a [b, T] i64 tensor on the CPU. */
em_tensor *em_trainer_batch_ids(em_ctx *c, em_trainer *t, const int64_t *w, int64_t b);
/* The causal-LM loss of the [b, T] ids x (grad as the context has it): transformers' shifted
 * cross-entropy, plus the router's weighted load-balancing loss when the config asks for it. */
em_tensor *em_trainer_loss(em_ctx *c, em_trainer *t, em_tensor *x);
/* Data parallel: grads[i] (the trained parameters' gradients, any float dtype; NULL: zeros) and
 * the loss averaged over options.group with one reduce-scatter and one all-gather of a flat f32
 * buffer; grads[i] become the averages (f32, in c's scope) and the averaged loss (0-d f32) is
 * returned, NULL on error. Ops only, so the compiled step traces it too. */
em_tensor *em_trainer_dp_average(em_ctx *c, em_trainer *t, em_tensor **grads, em_tensor *loss);
/* options.compile: the step on windows w[0..b) with the program (traced at the first call):
 * the loss before the update and the norm before clipping in *loss and *norm. */
em_status em_trainer_step_compiled(em_ctx *c, em_trainer *t, const int64_t *w, int64_t b,
                                   double lr, double *loss, double *norm);

#endif

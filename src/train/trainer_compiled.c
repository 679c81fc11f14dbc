/*
 * The compiled training step (em_train_options.compile): forward, causal-LM loss, backward,
 * clip_grad_norm_ and AdamW traced once with em_compile, then the program replayed every step
 * (a CPU plan; on a PJRT device one program). The tape records the traced forward (the
 * dispatcher records symbolic values while a traced function has grad on), so em_backward's
 * rules are traced as ops too. The parameters and AdamW's moments are captured tensors the
 * program updates in place; the rate and the bias corrections are 0-d inputs, so no step
 * bakes a number into the program and all steps share it. Clipping is written with ops
 * (no host read of the norm): the gradients are scaled by min(1, max_norm / (norm + 1e-6)),
 * which by 1 changes nothing, as torch's clip_grad_norm_ does. bf16/f16 weights train through
 * f32 masters as the eager step does: the masters and their moments are captured, the model's
 * weights are rewritten from the masters inside the program. Data parallel (on the CPU, MPI
 * ranks): the averaging's reduce-scatter and all-gather are ops of the program, so every rank's
 * plan meets the others' at the same two collectives each step.
 */
#include <math.h>
#include <stdlib.h>

#include "train/optim_impl.h"
#include "train/trainer_impl.h"

enum { IN_IDS, IN_DECAY, IN_SQRT_BC2, IN_NEG_STEP, N_IN };

/* The total 2-norm of grads (f64 0-d), summed as em_clip_grad_norm sums it: each gradient's
 * squares in f32 lanes of f64, the per-parameter sums added in f64. */
static em_tensor *total_norm(em_ctx *c, em_tensor *const *grads, int n) {
    em_tensor *sq = NULL;
    for (int i = 0; i < n; i++) {
        em_tensor *g = grads[i];
        if (em_tensor_dtype(g) != EM_F32 && em_tensor_dtype(g) != EM_F64)
            g = em_cast(c, g, EM_F32);
        em_tensor *s = em_cast(c, em_sum(c, em_mul(c, g, g), NULL, 0, false), EM_F64);
        sq = sq ? em_add(c, sq, s) : s;
    }
    return sq ? em_sqrt(c, sq) : em_zeros(c, EM_F64, 0, NULL);
}

static int traced_step(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *statics,
                       int n_statics, em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)statics, (void)n_statics, (void)max_out;
    em_trainer *t = user;
    em_grad_enable(c, true);
    em_tensor *loss = em_trainer_loss(c, t, in[IN_IDS]);
    em_grad_enable(c, false);
    if (!loss || em_backward(c, loss) != EM_OK) return -1;
    em_tensor **g = calloc((size_t)(t->np ? t->np : 1), sizeof *g);
    if (!g) return em_ctx_fail(c, EM_ERR_OOM, "trainer_compiled", "out of memory"), -1;
    for (int i = 0; i < t->np && !em_ctx_status(c); i++) {
        /* mixed precision: the gradient reached the model's bf16/f16 weight; its f32 master's
         * is that gradient through the cast's rule, a cast back to f32 (as the eager step) */
        g[i] = em_tensor_grad(t->master ? t->tensors[i] : t->trained[i]);
        if (g[i] && t->master) g[i] = em_cast(c, g[i], EM_F32);
        if (!g[i])
            em_ctx_fail(c, EM_ERR_UNSUPPORTED, "trainer_compiled",
                        "parameter %s got no gradient from the traced step: a compiled step "
                        "updates every parameter every step (train without compile)",
                        t->params[i].name);
    }
    /* data parallel: the gradients and the loss averaged over the group, as the eager step */
    if (!em_ctx_status(c) && t->o.group && em_dist_world_size(t->o.group) > 1)
        loss = em_trainer_dp_average(c, t, g, loss);
    /* the constants below are made on the program's device */
    em_device *prev = em_ctx_device(c);
    em_ctx_set_device(c, em_tensor_device(in[IN_IDS]));
    em_tensor *norm = em_ctx_status(c) ? NULL : total_norm(c, g, t->np);
    if (norm && t->o.grad_clip > 0) {
        em_tensor *one = em_full(c, EM_F64, 0, NULL, 1.0);
        em_tensor *coef = em_div(c, em_full(c, EM_F64, 0, NULL, t->o.grad_clip),
                                 em_add_scalar(c, norm, 1e-6));
        coef = em_cast(c, em_minimum(c, coef, one), EM_F32);
        for (int i = 0; i < t->np && !em_ctx_status(c); i++)
            g[i] = em_mul(c, g[i], em_cast(c, coef, em_tensor_dtype(g[i])));
    }
    if (!em_ctx_status(c))
        em_adamw_update_traced(c, t->opt, g, in[IN_DECAY], in[IN_SQRT_BC2], in[IN_NEG_STEP]);
    /* the updated masters rounded into the model's weights, in the program too */
    if (!em_ctx_status(c) && t->master) em_trainer_masters_to_model(c, t);
    em_ctx_set_device(c, prev);
    free(g);
    /* the traced gradients are the program's values: none may stay on the leaves */
    for (int i = 0; i < t->np; i++) {
        em_tensor_zero_grad(t->trained[i]);
        em_tensor_zero_grad(t->tensors[i]);
    }
    if (em_ctx_status(c)) return -1;
    out[0] = loss;
    out[1] = norm;
    return 2;
}

static em_tensor *scalar_on(em_ctx *c, double v, em_device *dev) {
    float f = (float)v;
    em_tensor *x = em_from_host(c, EM_F32, 0, NULL, &f);
    return x && em_tensor_device(x) != dev ? em_to(c, x, dev) : x;
}

em_status em_trainer_step_compiled(em_ctx *c, em_trainer *t, const int64_t *w, int64_t b,
                                   double lr, double *loss, double *norm) {
    int64_t step = 0;
    if (em_adamw_prepare_traced(c, t->opt, &step)) return em_ctx_status(c);
    if (!t->cstep && !(t->cstep = em_compile(c, "train_step", traced_step, t)))
        return em_ctx_status(c);
    double k[3];
    em_adamw_step_numbers(t->opt, lr, step + 1, k);
    em_device *dev = em_tensor_device(t->trained[0]);
    bool grad_on = em_grad_enable(c, false);
    em_scope_push(c);
    em_tensor *in[N_IN];
    in[IN_IDS] = em_trainer_batch_ids(c, t, w, b);
    if (in[IN_IDS] && em_tensor_device(in[IN_IDS]) != dev) in[IN_IDS] = em_to(c, in[IN_IDS], dev);
    in[IN_DECAY] = scalar_on(c, k[0], dev);
    in[IN_SQRT_BC2] = scalar_on(c, k[1], dev);
    in[IN_NEG_STEP] = scalar_on(c, k[2], dev);
    em_tensor *out[2] = {NULL, NULL};
    if (!em_ctx_status(c) && em_compiled_call(c, t->cstep, in, N_IN, NULL, 0, out, 2) == 2) {
        em_item(c, out[0], loss);
        em_item(c, out[1], norm);
    }
    /* a failed trace may leave its symbolic values on the tape or the leaves */
    em_grad_tape_clear(c);
    for (int i = 0; i < t->np; i++) {
        em_tensor_zero_grad(t->trained[i]);
        em_tensor_zero_grad(t->tensors[i]);
    }
    em_scope_pop(c);
    em_grad_enable(c, grad_on);
    if (!em_ctx_status(c)) em_adamw_advance(t->opt);
    return em_ctx_status(c);
}

void em_trainer_compile_stats(const em_trainer *t, em_compile_stats *out) {
    em_compiled_stats(t ? t->cstep : NULL, out);
}

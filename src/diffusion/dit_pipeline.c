/* DiTPipeline.__call__'s denoising loop (diffusers 0.42, pipelines/dit/pipeline_dit.py):
 * classifier-free guidance on a doubled batch (the B classes, then B null classes), guidance
 * applied to the first in_channels channels of the output, the learned variance dropped before
 * the scheduler step. pipeline.c draws the latents and decodes the result with the VAE. */
#include <stdio.h>
#include <stdlib.h>

#include "diffusion/pipeline_impl.h"

#define OP "DiTPipeline"

/* The model output the scheduler steps with, from the transformer's noise_pred [2B or B, out,
 * H, W]: with guidance, eps = uncond + g * (cond - uncond) on the first C channels (cond the
 * first B rows, uncond the last B) for both halves
 * (the rest, the learned variance, as predicted); then the first C channels when
 * out_channels // 2 == C (the learned sigma is dropped), else all of them. */
static em_tensor *model_output(em_ctx *c, const em_dit_config *cfg, em_tensor *pred,
                               bool guided, double guidance) {
    int64_t C = cfg->in_channels, oc = cfg->out_channels;
    if (guided) {
        int64_t b = em_tensor_dim(pred, 0) / 2;
        em_tensor *eps = em_narrow(c, pred, 1, 0, C);
        em_tensor *cond = em_narrow(c, eps, 0, 0, b), *uncond = em_narrow(c, eps, 0, b, b);
        em_tensor *half = em_add(c, uncond, em_mul_scalar(c, em_sub(c, cond, uncond), guidance));
        em_tensor *both[2] = {half, half};
        eps = em_cat(c, both, 2, 0);
        if (oc > C) {
            em_tensor *parts[2] = {eps, em_narrow(c, pred, 1, C, oc - C)};
            pred = em_cat(c, parts, 2, 1);
        } else {
            pred = eps;
        }
    }
    return oc / 2 == C ? em_narrow(c, pred, 1, 0, C) : pred;
}

/* class_labels_input: the B labels (rp's list, or [class_label]), then under guidance B null
 * labels (i64 on dev). The null class is the label table's extra row, num_embeds_ada_norm
 * (DiTPipeline writes the literal 1000, which is that row for every DiT checkpoint; for other
 * class counts diffusers would index outside the table). */
static em_tensor *labels_input(em_ctx *c, const em_dit *dit, const em_pipeline_run_params *rp,
                               bool guided) {
    const int64_t *labels = rp->class_labels ? rp->class_labels : &rp->class_label;
    int64_t b = rp->class_labels ? rp->num_class_labels : 1, n = guided ? 2 * b : b;
    int64_t *v = malloc((size_t)n * sizeof *v);
    if (!v) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory for %lld class labels", (long long)n);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        v[i] = i < b ? labels[i] : em_dit_get_config(dit)->num_embeds_ada_norm;
    em_tensor *t = em_from_host_on(c, em_dit_device(dit), EM_I64, 1, &n, v);
    free(v);
    return t;
}

/* The transformer's step as a compiled function: in[0] the scaled latents, in[1] the timestep
 * (a 0-d f32 tensor, an input so that every step runs the same program), in[2] the labels. */
static int dit_step(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *statics,
                    int n_statics, em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)statics, (void)n_statics, (void)max_out;
    out[0] = em_dit_forward(c, user, in[0], in[1], in[2]);
    return out[0] ? 1 : -1;
}

/* The transformer's output for the scaled latents `in` (f32) at t: the input cast to the model's
 * dtype dt, the output back to f32 (the latents and the scheduler stay f32). */
static em_tensor *transformer(em_ctx *c, em_dit *dit, em_dtype dt, em_compiled *f, em_tensor *in,
                              double t, em_tensor *labels) {
    float tf = (float)t;
    em_tensor *tt = em_from_host_on(c, em_dit_device(dit), EM_F32, 0, NULL, &tf);
    in = pipeline_as(c, in, dt);
    if (!f || !tt) return pipeline_as(c, em_dit_forward(c, dit, in, tt, labels), EM_F32);
    em_tensor *out = NULL, *args[3] = {in, tt, labels};
    return em_compiled_call(c, f, args, 3, NULL, 0, &out, 1) == 1 ? pipeline_as(c, out, EM_F32)
                                                                  : NULL;
}

em_tensor *dit_pipeline_denoise(em_ctx *c, em_dit *dit, em_dtype dt, em_scheduler *s,
                                const em_pipeline_run_params *rp, em_torch_generator *g,
                                em_tensor *x) {
    const em_dit_config *cfg = em_dit_get_config(dit);
    double guidance = rp->guidance_scale != 0.0 ? rp->guidance_scale : 4.0;
    bool guided = guidance > 1.0;
    int64_t n = 0;
    const double *ts = em_scheduler_timesteps(s, &n);
    em_scope_push(c);
    em_tensor *labels = labels_input(c, dit, rp, guided);
    int64_t b = em_tensor_dim(x, 0); /* B */
    if (labels) labels = em_tensor_retain(labels);
    if (guided && labels) { /* latent_model_input = torch.cat([latents] * 2) */
        em_tensor *two[2] = {x, x};
        em_tensor *d = em_cat(c, two, 2, 0);
        em_tensor_release(x);
        x = d ? em_tensor_retain(d) : NULL;
    }
    em_scope_pop(c);
    em_compiled *f = rp->compile && labels && x ? em_compile(c, "dit_step", dit_step, dit) : NULL;
    if (!labels || !x || (rp->compile && !f)) {
        em_tensor_release(labels);
        em_tensor_release(x);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        double t0 = pipeline_now_s();
        em_scope_push(c);
        em_tensor *in = x;
        if (guided) { /* half = latent_model_input[:B]; cat([half, half]) */
            em_tensor *half = em_narrow(c, x, 0, 0, b), *two[2] = {half, half};
            in = em_cat(c, two, 2, 0);
        }
        in = em_scheduler_scale_model_input(c, s, in, ts[i]);
        em_tensor *pred = transformer(c, dit, dt, f, in, ts[i], labels);
        em_tensor *next = pred ? em_scheduler_step(c, s, model_output(c, cfg, pred, guided,
                                                                       guidance),
                                                   ts[i], in, g)
                               : NULL;
        if (next) next = em_tensor_retain(next);
        em_scope_pop(c);
        em_tensor_release(x);
        x = next;
        if (!x || !pipeline_step_done(c, rp, em_dit_device(dit), i, n, ts[i], t0, OP)) break;
    }
    em_tensor_release(labels);
    if (f && rp->compile_stats) em_compiled_stats(f, rp->compile_stats);
    em_compiled_free(f);
    if (em_ctx_status(c) || !x) {
        em_tensor_release(x);
        return NULL;
    }
    if (!guided) return x;
    /* latents, _ = latent_model_input.chunk(2) */
    em_scope_push(c);
    em_tensor *first = em_contiguous(c, em_narrow(c, x, 0, 0, b));
    if (first) first = em_tensor_retain(first);
    em_scope_pop(c);
    em_tensor_release(x);
    return first;
}

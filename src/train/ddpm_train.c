/* DDPM training of a UNet2DModel (ember/ddpm.h): diffusers' train_unconditional.py step —
 * noise a clean batch to a random timestep with DDPMScheduler.add_noise, predict the noise,
 * mean squared error, backward, AdamW. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ember/autograd.h"
#include "ember/ddpm.h"
#include "ember/ops.h"
#include "ember/torch_rng.h"

#define OP "ddpm_train"

struct em_ddpm_trainer {
    em_unet2d *u;
    em_optimizer *opt;
    em_torch_generator *gen;
    em_scheduler *noiser; /* a DDPMScheduler from the given one's config: its add_noise */
    int64_t T;
};

em_ddpm_trainer *em_ddpm_trainer_create(em_ctx *c, em_unet2d *u, const em_scheduler *s,
                                        const em_adamw_options *o, uint64_t seed) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!u || !s) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "NULL model or scheduler");
        return NULL;
    }
    const em_unet2d_config *cfg = em_unet2d_get_config(u);
    if (cfg->conditional || cfg->class_embedding != EM_UNET2D_CLASS_NONE) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP,
                    "DDPM training takes an unconditional UNet2DModel (this one needs %s)",
                    cfg->conditional ? "encoder hidden states" : "class labels");
        return NULL;
    }
    int64_t T = 0;
    if (!em_scheduler_alphas_cumprod(s, &T) || T < 1) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "the %s has no alphas_cumprod to noise with",
                    em_scheduler_kind_class(em_scheduler_get_kind(s)));
        return NULL;
    }
    em_ddpm_trainer *t = calloc(1, sizeof *t);
    if (!t) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    t->noiser = em_scheduler_from_config(c, s, EM_SCHED_DDPM);
    t->gen = t->noiser ? em_torch_generator_create(seed) : NULL;
    if (!t->gen) {
        em_ddpm_trainer_free(t);
        if (!em_ctx_status(c)) em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    t->T = T;
    t->u = u;
    int n = em_unet2d_param_count(u);
    em_tensor **ps = malloc((size_t)(n ? n : 1) * sizeof *ps);
    if (!ps) {
        em_ddpm_trainer_free(t);
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        ps[i] = em_unet2d_param(u, i);
        if (em_tensor_requires_grad(c, ps[i], true)) break;
    }
    if (!em_ctx_status(c)) t->opt = em_adamw_create(c, ps, n, o);
    free(ps);
    if (!t->opt) {
        em_ddpm_trainer_free(t);
        return NULL;
    }
    return t;
}

void em_ddpm_trainer_free(em_ddpm_trainer *t) {
    if (!t) return;
    em_optimizer_free(t->opt);
    em_torch_generator_free(t->gen);
    em_scheduler_free(t->noiser);
    free(t);
}

em_optimizer *em_ddpm_trainer_optimizer(const em_ddpm_trainer *t) { return t ? t->opt : NULL; }

/* The timesteps as integers on the host (given, or drawn), each checked against the schedule;
 * ts [n] is filled and, when drawn, *tt becomes the i64 tensor [n] the UNet takes. */
static bool timesteps(em_ctx *c, em_ddpm_trainer *t, em_tensor *given, int64_t n, int64_t *ts,
                      em_tensor **tt) {
    if (!given) {
        for (int64_t i = 0; i < n; i++)
            ts[i] = (int64_t)(em_torch_generator_random(t->gen) % (uint32_t)t->T);
        *tt = em_from_host_on(c, em_unet2d_device(t->u), EM_I64, 1, (int64_t[]){n}, ts);
        return *tt != NULL;
    }
    if (em_tensor_ndim(given) != 1 || em_tensor_shape(given)[0] != n) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP, "timesteps must be [%lld] (one per sample), got %dd",
                    (long long)n, em_tensor_ndim(given));
        return false;
    }
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory"), false;
    bool ok = em_to_host_f32(c, given, v, n) == EM_OK;
    for (int64_t i = 0; ok && i < n; i++) {
        ts[i] = (int64_t)v[i];
        if (v[i] < 0 || ts[i] >= t->T || (float)ts[i] != v[i]) {
            em_ctx_fail(c, EM_ERR_INDEX, OP, "timestep %g (sample %lld) is not an integer in "
                        "[0, %lld)", (double)v[i], (long long)i, (long long)t->T);
            ok = false;
        }
    }
    free(v);
    *tt = given;
    return ok;
}

/* x_t = sqrt(acp[t]) x0 + sqrt(1 - acp[t]) noise: DDPMScheduler.add_noise, a timestep each */
static em_tensor *add_noise(em_ctx *c, em_ddpm_trainer *t, em_tensor *x0, em_tensor *noise,
                            const int64_t *ts, int64_t n) {
    double *td = malloc((size_t)n * sizeof *td);
    if (!td) return em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory"), NULL;
    for (int64_t i = 0; i < n; i++) td[i] = (double)ts[i];
    em_tensor *xt = em_scheduler_add_noise_batch(c, t->noiser, x0, noise, td, n);
    free(td);
    return xt;
}

static em_status step(em_ctx *c, em_ddpm_trainer *t, em_tensor *x0, em_tensor *noise,
                      em_tensor *tsteps, double *loss) {
    if (em_tensor_ndim(x0) != 4)
        return em_ctx_fail(c, EM_ERR_SHAPE, OP, "x0 must be [N, C, H, W], got %dd",
                           em_tensor_ndim(x0));
    const int64_t *shape = em_tensor_shape(x0);
    int64_t n = shape[0];
    if (!noise) {
        noise = em_torch_randn(c, t->gen, 4, shape, em_unet2d_device(t->u));
        if (noise && em_tensor_dtype(x0) != EM_F32) noise = em_cast(c, noise, em_tensor_dtype(x0));
        if (!noise) return em_ctx_status(c);
    } else {
        bool same = em_tensor_ndim(noise) == 4;
        for (int d = 0; same && d < 4; d++) same = em_tensor_shape(noise)[d] == shape[d];
        if (!same)
            return em_ctx_fail(c, EM_ERR_SHAPE, OP,
                               "noise must have x0's shape [%lld, %lld, %lld, %lld]",
                               (long long)shape[0], (long long)shape[1], (long long)shape[2],
                               (long long)shape[3]);
    }
    int64_t *ts = malloc((size_t)(n ? n : 1) * sizeof *ts);
    if (!ts) return em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    em_tensor *tt = NULL;
    bool ok = timesteps(c, t, tsteps, n, ts, &tt);
    em_tensor *xt = ok ? add_noise(c, t, x0, noise, ts, n) : NULL;
    free(ts);
    if (!xt) return em_ctx_status(c);
    em_grad_enable(c, true);
    em_tensor *pred = em_unet2d_forward(c, t->u, xt, tt, NULL);
    em_tensor *d = pred ? em_sub(c, pred, noise) : NULL;
    em_tensor *l = d ? em_mean(c, em_mul(c, d, d), (int[]){0, 1, 2, 3}, 4, false) : NULL;
    em_grad_enable(c, false);
    if (!l) {
        em_grad_tape_clear(c);
        return em_ctx_status(c);
    }
    double v = 0;
    if (em_item(c, l, &v) || em_backward(c, l)) {
        em_grad_tape_clear(c);
        return em_ctx_status(c);
    }
    if (loss) *loss = v;
    em_optimizer_step(c, t->opt);
    em_optimizer_zero_grad(t->opt);
    return em_ctx_status(c);
}

em_status em_ddpm_train_step(em_ctx *c, em_ddpm_trainer *t, em_tensor *x0, em_tensor *noise,
                             em_tensor *timesteps, double *loss) {
    if (!c || em_ctx_status(c)) return c ? em_ctx_status(c) : EM_ERR_INVALID_ARG;
    if (!t || !x0) return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "NULL trainer or batch");
    em_scope_push(c);
    em_status st = step(c, t, x0, noise, timesteps, loss);
    em_scope_pop(c);
    return st;
}

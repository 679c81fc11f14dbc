/*
 * The alphas_cumprod schedulers' steps: DDPM, DDIM, PNDM (PLMS). The scalar coefficients are
 * computed in float32 in diffusers' order (its 0-d float32 tensors), then applied with Ember's
 * eager ops in the order diffusers applies them, so results agree to float32 rounding.
 */
#include <math.h>
#include <string.h>

#include "diffusion/sched_impl.h"

#define MS(x, v) em_mul_scalar(c, (x), (double)(v))
#define DS(x, v) em_div_scalar(c, (x), (double)(v))

static bool is(const char *a, const char *b) { return !strcmp(a, b); }

/* x0 and epsilon from the model output (DDIM's and DDPM's three parameterisations) */
static em_tensor *pred_x0(em_ctx *c, const em_sched_cfg *cfg, em_tensor *mo, em_tensor *x,
                          float a, float bt) {
    if (is(cfg->prediction_type, "epsilon")) return DS(em_sub(c, x, MS(mo, sqrtf(bt))), sqrtf(a));
    if (is(cfg->prediction_type, "sample")) return mo;
    return em_sub(c, MS(x, sqrtf(a)), MS(mo, sqrtf(bt)));
}

/* "Clip or threshold predicted x_0": thresholding first, as diffusers does */
static em_tensor *clip(em_ctx *c, const char *file, int line, const em_sched_cfg *cfg,
                       em_tensor *x0) {
    if (cfg->thresholding) return em_sched_threshold(c, file, line, cfg, x0);
    if (!cfg->clip_sample) return x0;
    return em_clamp(c, x0, -cfg->clip_sample_range, cfg->clip_sample_range);
}

static em_tensor *ddpm(em_ctx *c, const char *file, int line, em_scheduler *s, em_tensor *mo,
                       int64_t t, em_tensor *x, em_torch_generator *g) {
    const em_sched_cfg *cfg = &s->cfg;
    /* previous_timestep: the entry after t's first match in the schedule, or -1 */
    int64_t idx = -1;
    for (int64_t i = 0; i < s->n_timesteps && idx < 0; i++)
        if (s->timesteps[i] == (double)t) idx = i;
    if (idx < 0) {
        em_fail_at(c, EM_ERR_INDEX, "scheduler_step", file, line,
                   "DDPMScheduler: timestep %lld is not in the schedule", (long long)t);
        return NULL;
    }
    int64_t prev = idx == s->n_timesteps - 1 ? -1 : (int64_t)s->timesteps[idx + 1];
    if (prev >= cfg->num_train_timesteps) {
        em_fail_at(c, EM_ERR_INDEX, "scheduler_step", file, line,
                   "DDPMScheduler: the timestep after %lld is %lld, past num_train_timesteps",
                   (long long)t, (long long)prev);
        return NULL;
    }
    const float *ac = s->alphas_cumprod;
    float a = ac[t], ap = prev >= 0 ? ac[prev] : 1.0f;
    float bt = 1.0f - a, btp = 1.0f - ap;
    float cur_a = a / ap, cur_b = 1.0f - cur_a;
    em_tensor *x0 = clip(c, file, line, cfg, pred_x0(c, cfg, mo, x, a, bt));
    float k_x0 = sqrtf(ap) * cur_b / bt;
    float k_x = sqrtf(cur_a) * btp / bt;
    em_tensor *out = em_add(c, MS(x0, k_x0), MS(x, k_x));
    if (t > 0) {
        em_tensor *noise = em_sched_noise(c, file, line, s, mo, g);
        float var = (1.0f - ap) / (1.0f - a) * cur_b;
        if (var < (float)1e-20) var = (float)1e-20;
        float k;
        if (is(cfg->variance_type, "fixed_small_log")) k = expf(0.5f * logf(var));
        else if (is(cfg->variance_type, "fixed_large")) k = sqrtf(cur_b);
        else k = sqrtf(var);
        out = em_add(c, out, MS(noise, k));
    }
    return out;
}

static em_tensor *ddim(em_ctx *c, const char *file, int line, em_scheduler *s, em_tensor *mo,
                       int64_t t, em_tensor *x, em_torch_generator *g) {
    const em_sched_cfg *cfg = &s->cfg;
    int64_t prev = t - cfg->num_train_timesteps / s->num_inference_steps;
    const float *ac = s->alphas_cumprod;
    float a = ac[t], ap = prev >= 0 ? ac[prev] : s->final_alpha_cumprod;
    float bt = 1.0f - a;
    em_tensor *x0, *eps;
    if (is(cfg->prediction_type, "epsilon")) {
        x0 = DS(em_sub(c, x, MS(mo, sqrtf(bt))), sqrtf(a));
        eps = mo;
    } else if (is(cfg->prediction_type, "sample")) {
        x0 = mo;
        eps = DS(em_sub(c, x, MS(x0, sqrtf(a))), sqrtf(bt));
    } else {
        x0 = em_sub(c, MS(x, sqrtf(a)), MS(mo, sqrtf(bt)));
        eps = em_add(c, MS(mo, sqrtf(a)), MS(x, sqrtf(bt)));
    }
    x0 = clip(c, file, line, cfg, x0);
    float btp = 1.0f - ap;
    float var = btp / bt * (1.0f - a / ap);
    float std = (float)s->eta * sqrtf(var);
    float k_dir = sqrtf(1.0f - ap - std * std);
    em_tensor *out = em_add(c, MS(x0, sqrtf(ap)), MS(eps, k_dir));
    if (s->eta > 0) out = em_add(c, out, MS(em_sched_noise(c, file, line, s, mo, g), std));
    return out;
}

/* PNDM's _get_prev_sample: from (x at t) to prev with the combined model output m */
static em_tensor *pndm_prev(em_ctx *c, em_scheduler *s, em_tensor *x, int64_t t, int64_t prev,
                            em_tensor *m) {
    const float *ac = s->alphas_cumprod;
    float a = ac[t], ap = prev >= 0 ? ac[prev] : s->final_alpha_cumprod;
    float bt = 1.0f - a, btp = 1.0f - ap;
    if (is(s->cfg.prediction_type, "v_prediction"))
        m = em_add(c, MS(m, sqrtf(a)), MS(x, sqrtf(bt)));
    float k_x = sqrtf(ap / a);
    float denom = a * sqrtf(btp) + sqrtf(a * bt * ap);
    return em_sub(c, MS(x, k_x), DS(MS(m, ap - a), denom));
}

static void keep(em_tensor **slot, em_tensor *t) {
    em_tensor_retain(t);
    em_tensor_release(*slot);
    *slot = t;
}

/* Runge-Kutta warm-up (skip_prk_steps false): four model outputs per step, 1/6 1/3 1/3 1/6 */
static em_tensor *pndm_prk(em_ctx *c, em_scheduler *s, em_tensor *mo, int64_t t, em_tensor *x) {
    int64_t half = s->cfg.num_train_timesteps / s->num_inference_steps / 2;
    int64_t prev = t - (s->counter % 2 ? 0 : half);
    t = (int64_t)s->timesteps[s->counter / 4 * 4];
    int phase = (int)(s->counter % 4);
    em_tensor *m = mo;
    if (phase == 0) {
        em_tensor *sum = MS(mo, 1.0 / 6.0);
        if (s->cur_model_output) sum = em_add(c, em_adopt(c, em_tensor_retain(s->cur_model_output)), sum);
        keep(&s->cur_model_output, sum);
        em_sched_history_push(s, mo, 4);
        keep(&s->cur_sample, x);
    } else if (phase < 3) {
        keep(&s->cur_model_output,
             em_add(c, em_adopt(c, em_tensor_retain(s->cur_model_output)), MS(mo, 1.0 / 3.0)));
    } else {
        m = em_add(c, em_adopt(c, em_tensor_retain(s->cur_model_output)), MS(mo, 1.0 / 6.0));
        em_tensor_release(s->cur_model_output);
        s->cur_model_output = NULL;
    }
    if (!m || (phase < 3 && !s->cur_model_output)) return NULL;
    em_tensor *cur = s->cur_sample ? em_adopt(c, em_tensor_retain(s->cur_sample)) : x;
    s->counter++;
    return pndm_prev(c, s, cur, t, prev, m);
}

/* PLMS: Adams-Bashforth over the last four model outputs */
static em_tensor *pndm(em_ctx *c, const char *file, int line, em_scheduler *s, em_tensor *mo,
                       int64_t t, em_tensor *x) {
    const em_sched_cfg *cfg = &s->cfg;
    if (s->counter < s->n_prk) return pndm_prk(c, s, mo, t, x);
    if (!cfg->skip_prk_steps && s->n_history < 3) {
        em_fail_at(c, EM_ERR_INVALID_ARG, "scheduler_step", file, line,
                   "PNDMScheduler: the Runge-Kutta warm-up left %d model outputs, PLMS needs 3 "
                   "(too few inference steps)", s->n_history);
        return NULL;
    }
    int64_t ratio = cfg->num_train_timesteps / s->num_inference_steps;
    int64_t prev = t - ratio;
    if (s->counter != 1) {
        em_sched_history_push(s, mo, 4);
    } else {
        prev = t;
        t = t + ratio;
        if (t >= cfg->num_train_timesteps) {
            em_fail_at(c, EM_ERR_INDEX, "scheduler_step", file, line,
                       "PNDMScheduler: timestep %lld + %lld is past num_train_timesteps",
                       (long long)prev, (long long)ratio);
            return NULL;
        }
    }
    em_tensor **e = s->history;
    int n = s->n_history;
    em_tensor *m;
    if (n == 1 && s->counter == 0) {
        m = mo;
        keep(&s->cur_sample, x);
    } else if (n == 1 && s->counter == 1) {
        m = DS(em_add(c, mo, e[0]), 2.0);
        if (s->cur_sample) {
            x = em_adopt(c, s->cur_sample);
            s->cur_sample = NULL;
        }
    } else if (n == 2) {
        m = DS(em_sub(c, MS(e[1], 3.0), e[0]), 2.0);
    } else if (n == 3) {
        m = DS(em_add(c, em_sub(c, MS(e[2], 23.0), MS(e[1], 16.0)), MS(e[0], 5.0)), 12.0);
    } else {
        em_tensor *sum = em_sub(c, MS(e[3], 55.0), MS(e[2], 59.0));
        sum = em_sub(c, em_add(c, sum, MS(e[1], 37.0)), MS(e[0], 9.0));
        m = MS(sum, 1.0 / 24.0);
    }
    s->counter++;
    return pndm_prev(c, s, x, t, prev, m);
}

em_tensor *em_sched_step_alpha(em_ctx *c, const char *file, int line, em_scheduler *s,
                               em_tensor *mo, double t, em_tensor *x, em_torch_generator *g) {
    int64_t N = s->cfg.num_train_timesteps;
    int64_t ti = t >= 0 && t < (double)N ? (int64_t)t : -1; /* no cast of a value out of range */
    if ((double)ti != t) {
        em_fail_at(c, EM_ERR_INDEX, "scheduler_step", file, line,
                   "%s: timestep %g is not an integer in [0, %lld)", em_scheduler_kind_class(s->kind),
                   t, (long long)N);
        return NULL;
    }
    switch (s->kind) {
    case EM_SCHED_DDPM: return ddpm(c, file, line, s, mo, ti, x, g);
    case EM_SCHED_DDIM: return ddim(c, file, line, s, mo, ti, x, g);
    default: return pndm(c, file, line, s, mo, ti, x);
    }
}

/*
 * The sigma schedulers' steps: Euler, Euler ancestral, DPM-Solver(++) multistep, FlowMatch
 * Euler. As in sched_alpha.c, scalars in float32 in diffusers' order, tensors through Ember's ops.
 */
#include <math.h>
#include <string.h>

#include "diffusion/sched_impl.h"

#define MS(x, v) em_mul_scalar(c, (x), (double)(v))
#define DS(x, v) em_div_scalar(c, (x), (double)(v))

static bool is(const char *a, const char *b) { return !strcmp(a, b); }

/* Euler-type x0: epsilon, v or sample parameterisation at sigma */
static em_tensor *euler_x0(em_ctx *c, const em_sched_cfg *cfg, em_tensor *mo, em_tensor *x,
                           float sigma) {
    if (is(cfg->prediction_type, "epsilon")) return em_sub(c, x, MS(mo, sigma));
    if (is(cfg->prediction_type, "v_prediction")) {
        float s2 = sigma * sigma + 1.0f;
        return em_add(c, MS(mo, -sigma / sqrtf(s2)), DS(x, s2));
    }
    return mo;
}

static em_tensor *euler(em_ctx *c, em_scheduler *s, em_tensor *mo, em_tensor *x, int64_t i) {
    float sigma = s->sigmas[i];
    float sigma_hat = sigma * 1.0f; /* s_churn 0: gamma 0, sigma_hat == sigma */
    em_tensor *x0 = euler_x0(c, &s->cfg, mo, x, sigma);
    em_tensor *d = DS(em_sub(c, x, x0), sigma_hat);
    float dt = s->sigmas[i + 1] - sigma_hat;
    return em_add(c, x, MS(d, dt));
}

static em_tensor *euler_ancestral(em_ctx *c, const char *file, int line, em_scheduler *s,
                                  em_tensor *mo, em_tensor *x, int64_t i, em_torch_generator *g) {
    float sigma = s->sigmas[i], to = s->sigmas[i + 1];
    em_tensor *x0 = euler_x0(c, &s->cfg, mo, x, sigma);
    float up = sqrtf(to * to * (sigma * sigma - to * to) / (sigma * sigma));
    float down = sqrtf(to * to - up * up);
    em_tensor *d = DS(em_sub(c, x, x0), sigma);
    em_tensor *out = em_add(c, x, MS(d, down - sigma));
    em_tensor *noise = em_sched_noise(c, file, line, s, mo, g);
    return em_add(c, out, MS(noise, up));
}

/* ---- DPM-Solver ---- */

typedef struct { float alpha, sigma, lambda; } dpm_point;

/* _sigma_to_alpha_sigma_t: with flow sigmas alpha_t = 1 - sigma, sigma_t = sigma */
void em_sched_dpm_alpha_sigma(const em_sched_cfg *cfg, float sig, float *alpha_t, float *sigma_t) {
    if (cfg->use_flow_sigmas) {
        *alpha_t = 1.0f - sig;
        *sigma_t = sig;
    } else {
        *alpha_t = 1.0f / sqrtf(sig * sig + 1.0f);
        *sigma_t = sig * *alpha_t;
    }
}

static dpm_point point(const em_sched_cfg *cfg, float sig) {
    dpm_point p;
    em_sched_dpm_alpha_sigma(cfg, sig, &p.alpha, &p.sigma);
    p.lambda = logf(p.alpha) - logf(p.sigma);
    return p;
}

/* convert_model_output: x0 for DPM-Solver++, epsilon for DPM-Solver; thresholding acts on the
 * x0 (for DPM-Solver the epsilon is then taken from the thresholded x0) */
static em_tensor *dpm_convert(em_ctx *c, const char *file, int line, const em_sched_cfg *cfg,
                              em_tensor *mo, em_tensor *x, float sig) {
    dpm_point p = point(cfg, sig);
    const char *pt = cfg->prediction_type;
    if (is(cfg->algorithm_type, "dpmsolver++")) {
        em_tensor *x0;
        if (is(pt, "epsilon")) x0 = DS(em_sub(c, x, MS(mo, p.sigma)), p.alpha);
        else if (is(pt, "sample")) x0 = mo;
        else if (is(pt, "v_prediction")) x0 = em_sub(c, MS(x, p.alpha), MS(mo, p.sigma));
        else x0 = em_sub(c, x, MS(mo, sig)); /* flow_prediction */
        return cfg->thresholding ? em_sched_threshold(c, file, line, cfg, x0) : x0;
    }
    em_tensor *eps;
    if (is(pt, "epsilon")) eps = mo;
    else if (is(pt, "sample")) eps = DS(em_sub(c, x, MS(mo, p.alpha)), p.sigma);
    else eps = em_add(c, MS(mo, p.alpha), MS(x, p.sigma));
    if (!cfg->thresholding) return eps;
    em_tensor *x0 = em_sched_threshold(c, file, line, cfg,
                                       DS(em_sub(c, x, MS(eps, p.sigma)), p.alpha));
    return DS(em_sub(c, x, MS(x0, p.alpha)), p.sigma);
}

static em_tensor *dpm(em_ctx *c, const char *file, int line, em_scheduler *s, em_tensor *mo,
                      em_tensor *x, int64_t i) {
    const em_sched_cfg *cfg = &s->cfg;
    int64_t n = s->n_timesteps;
    bool lof = i == n - 1 && (cfg->euler_at_final || (cfg->lower_order_final && n < 15) ||
                              is(cfg->final_sigmas_type, "zero"));
    bool los = i == n - 2 && cfg->lower_order_final && n < 15;
    em_tensor *m = dpm_convert(c, file, line, cfg, mo, x, s->sigmas[i]);
    if (!m) return NULL;
    em_sched_history_push(s, m, (int)cfg->solver_order);
    bool pp = is(cfg->algorithm_type, "dpmsolver++");
    bool heun = is(cfg->solver_type, "heun");
    dpm_point t = point(cfg, s->sigmas[i + 1]), s0 = point(cfg, s->sigmas[i]);
    float h = t.lambda - s0.lambda;
    /* ++ works with exp(-h) and alpha_t, the plain solver with exp(h) and sigma_t */
    float E = pp ? expf(-h) - 1.0f : expf(h) - 1.0f;
    float k_out = pp ? t.alpha : t.sigma;
    em_tensor *base = pp ? MS(x, t.sigma / s0.sigma) : MS(x, t.alpha / s0.alpha);
    em_tensor **hist = s->history;
    int nh = s->n_history;
    em_tensor *out;
    int order;
    if (cfg->solver_order == 1 || s->lower_order_nums < 1 || lof) order = 1;
    else if (cfg->solver_order == 2 || s->lower_order_nums < 2 || los) order = 2;
    else order = 3;
    if (order == 1) {
        out = em_sub(c, base, MS(m, k_out * E));
    } else {
        em_tensor *m0 = hist[nh - 1], *m1 = hist[nh - 2];
        dpm_point s1 = point(cfg, s->sigmas[i - 1]);
        float h0 = s0.lambda - s1.lambda;
        float r0 = h0 / h;
        em_tensor *D1_0 = MS(em_sub(c, m0, m1), 1.0f / r0);
        if (order == 2) {
            out = em_sub(c, base, MS(m0, k_out * E));
            if (!heun) out = em_sub(c, out, MS(D1_0, 0.5f * (k_out * E)));
            else if (pp) out = em_add(c, out, MS(D1_0, k_out * (E / h + 1.0f)));
            else out = em_sub(c, out, MS(D1_0, k_out * (E / h - 1.0f)));
        } else {
            em_tensor *m2 = hist[nh - 3];
            dpm_point s2 = point(cfg, s->sigmas[i - 2]);
            float h1 = s1.lambda - s2.lambda;
            float r1 = h1 / h;
            em_tensor *D1_1 = MS(em_sub(c, m1, m2), 1.0f / r1);
            em_tensor *diff = em_sub(c, D1_0, D1_1);
            em_tensor *D1 = em_add(c, D1_0, MS(diff, r0 / (r0 + r1)));
            em_tensor *D2 = MS(diff, 1.0f / (r0 + r1));
            out = em_sub(c, base, MS(m0, k_out * E));
            if (pp) {
                out = em_add(c, out, MS(D1, k_out * (E / h + 1.0f)));
                out = em_sub(c, out, MS(D2, k_out * ((E + h) / (h * h) - 0.5f)));
            } else {
                out = em_sub(c, out, MS(D1, k_out * (E / h - 1.0f)));
                out = em_sub(c, out, MS(D2, k_out * ((E - h) / (h * h) - 0.5f)));
            }
        }
    }
    if (s->lower_order_nums < cfg->solver_order) s->lower_order_nums++;
    return out;
}

static em_tensor *flow(em_ctx *c, const char *file, int line, em_scheduler *s, em_tensor *mo,
                       em_tensor *x, int64_t i, em_torch_generator *g) {
    float sigma = s->sigmas[i], next = s->sigmas[i + 1];
    if (s->cfg.stochastic_sampling) {
        em_tensor *x0 = em_sub(c, x, MS(mo, sigma));
        em_tensor *noise = em_sched_noise(c, file, line, s, x, g);
        return em_add(c, MS(x0, 1.0f - next), MS(noise, next));
    }
    return em_add(c, x, MS(mo, next - sigma));
}

em_tensor *em_sched_step_sigma(em_ctx *c, const char *file, int line, em_scheduler *s,
                               em_tensor *mo, double t, em_tensor *x, em_torch_generator *g) {
    if (s->step_index < 0) {
        s->step_index = em_sched_first_index(c, file, line, s, t);
        if (s->step_index < 0) return NULL;
    }
    int64_t i = s->step_index;
    if (i >= s->n_timesteps) {
        em_fail_at(c, EM_ERR_INDEX, "scheduler_step", file, line,
                   "%s: step %lld is past the last of the %lld timesteps (call set_timesteps "
                   "again)", em_scheduler_kind_class(s->kind), (long long)i,
                   (long long)s->n_timesteps);
        return NULL;
    }
    em_tensor *out;
    switch (s->kind) {
    case EM_SCHED_EULER: out = euler(c, s, mo, x, i); break;
    case EM_SCHED_EULER_ANCESTRAL: out = euler_ancestral(c, file, line, s, mo, x, i, g); break;
    case EM_SCHED_DPM_MULTISTEP: out = dpm(c, file, line, s, mo, x, i); break;
    default: out = flow(c, file, line, s, mo, x, i, g); break;
    }
    if (out) s->step_index++;
    return out;
}

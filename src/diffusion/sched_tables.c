/*
 * The schedulers' tables as diffusers computes them: betas and alphas_cumprod in float32 torch
 * (cumprod accumulating in double, as torch's CPU kernel does), timesteps from numpy (float64,
 * round half to even, numpy's linspace/arange/interp formulas) and sigmas rounded to float32
 * where diffusers rounds them. Written without floating-point contraction (-std=c11): the order
 * of each operation is the reference's.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/sched_impl.h"

/* ---- numpy and torch building blocks ---- */

/* np.linspace(start, stop, n) in float64 */
static void np_linspace(double start, double stop, int64_t n, double *y) {
    if (n == 1) {
        y[0] = start;
        return;
    }
    double step = (stop - start) / (double)(n - 1);
    for (int64_t i = 0; i < n; i++) y[i] = (double)i * step + start;
    y[n - 1] = stop;
}

/* np.arange(start, stop, step) for a float step: its length and numpy's fill (start + i*delta,
 * delta = (start + step) - start). Returns the length (<= cap). */
static int64_t np_arange(double start, double stop, double step, double *y, int64_t cap) {
    double len = ceil((stop - start) / step);
    int64_t n = len > 0 ? (int64_t)len : 0;
    if (n > cap) n = cap;
    double delta = (start + step) - start;
    for (int64_t i = 0; i < n; i++) y[i] = i == 0 ? start : i == 1 ? start + step : start + (double)i * delta;
    return n;
}

/* np.interp(x, arange(len), fp) */
static double np_interp_idx(double x, const double *fp, int64_t len) {
    if (!(x > 0)) return fp[0];
    if (x >= (double)(len - 1)) return fp[len - 1];
    int64_t j = (int64_t)floor(x);
    if ((double)j == x) return fp[j];
    double slope = (fp[j + 1] - fp[j]) / 1.0;
    return slope * (x - (double)j) + fp[j];
}

/* torch.linspace(start, end, n, dtype=float32) */
static void torch_linspace_f32(float start, float end, int64_t n, float *y) {
    if (n == 1) {
        y[0] = start;
        return;
    }
    float step = (end - start) / (float)(n - 1);
    int64_t half = n / 2;
    for (int64_t i = 0; i < n; i++)
        y[i] = i < half ? start + step * (float)i : end - step * (float)(n - i - 1);
}

/* diffusers' betas_for_alpha_bar */
static double alpha_bar(const char *kind, double t) {
    if (!strcmp(kind, "laplace")) {
        double lmb = -0.5 * copysign(1.0, 0.5 - t) * log(1 - 2 * fabs(0.5 - t) + 1e-06);
        double snr = exp(lmb);
        return sqrt(snr / (1 + snr));
    }
    return pow(cos((t + 0.008) / 1.008 * 3.141592653589793 / 2), 2.0);
}

/* diffusers' _sigma_to_t: the fractional timestep of sigma on the log-sigma table */
static double sigma_to_t(double sigma, const float *log_sigmas, int64_t n) {
    double ls = log(sigma > 1e-10 ? sigma : 1e-10);
    int64_t low = 0;
    for (int64_t i = 0; i < n; i++)
        if (ls - (double)log_sigmas[i] >= 0) low = i;
    if (low > n - 2) low = n - 2;
    /* numpy: (low - log_sigma) in float64, (low - high) between two float32 values in float32 */
    float dlh = log_sigmas[low] - log_sigmas[low + 1];
    double w = ((double)log_sigmas[low] - ls) / (double)dlh;
    w = w < 0 ? 0 : w > 1 ? 1 : w;
    return (1 - w) * (double)low + w * (double)(low + 1);
}

/* _convert_to_karras / _convert_to_exponential over n values into out (float64) */
static void karras(double smin, double smax, int64_t n, double *out) {
    double ramp[n > 0 ? n : 1];
    np_linspace(0, 1, n, ramp);
    double min_inv = pow(smin, 1 / 7.0), max_inv = pow(smax, 1 / 7.0);
    for (int64_t i = 0; i < n; i++) out[i] = pow(max_inv + ramp[i] * (min_inv - max_inv), 7.0);
}
/* _convert_to_lu (rho 1: linear in log sigma, from lmax down to lmin) and exp, as DPM-Solver's
 * use_lu_lambdas does, into out (float64) */
static void lu_lambdas(double lmin, double lmax, int64_t n, double *out) {
    double ramp[n > 0 ? n : 1];
    np_linspace(0, 1, n, ramp);
    for (int64_t i = 0; i < n; i++) out[i] = exp(lmax + ramp[i] * (lmin - lmax));
}
static void exponential(double smin, double smax, int64_t n, double *out) {
    np_linspace(log(smax), log(smin), n, out);
    for (int64_t i = 0; i < n; i++) out[i] = exp(out[i]);
}
/* _convert_to_beta: smin + ppf(1 - linspace(0, 1, n)) (smax - smin), the Beta(0.6, 0.6)
 * quantiles diffusers takes from scipy ("Beta Sampling is All You Need") */
static void beta_sigmas(double smin, double smax, int64_t n, double *out) {
    double ramp[n > 0 ? n : 1];
    np_linspace(0, 1, n, ramp);
    for (int64_t i = 0; i < n; i++) out[i] = smin + em_beta_ppf(1 - ramp[i], 0.6, 0.6) * (smax - smin);
}

void em_sched_history_clear(em_scheduler *s) {
    for (int i = 0; i < s->n_history; i++) em_tensor_release(s->history[i]);
    s->n_history = 0;
    em_tensor_release(s->cur_sample);
    s->cur_sample = NULL;
    em_tensor_release(s->cur_model_output);
    s->cur_model_output = NULL;
}

void em_sched_history_push(em_scheduler *s, em_tensor *t, int cap) {
    em_tensor_retain(t);
    if (s->n_history == cap) {
        em_tensor_release(s->history[0]);
        memmove(s->history, s->history + 1, (size_t)(cap - 1) * sizeof *s->history);
        s->n_history--;
    }
    s->history[s->n_history++] = t;
}

/* ---- betas, alphas_cumprod ---- */

static void cumprod(const float *a, int64_t n, float *out) {
    double acc = 1.0; /* torch's CPU cumprod accumulates float in double */
    for (int64_t i = 0; i < n; i++) {
        acc *= a[i];
        out[i] = (float)acc;
    }
}

/* rescale_zero_terminal_snr, in float32 */
static void rescale_zero_snr(float *betas, int64_t n) {
    if (n < 2) return; /* one step has no terminal to rescale to (diffusers divides by zero) */
    float *a = malloc((size_t)n * 2 * sizeof *a);
    if (!a) return;
    float *s = a + n;
    for (int64_t i = 0; i < n; i++) a[i] = 1.0f - betas[i];
    cumprod(a, n, s);
    for (int64_t i = 0; i < n; i++) s[i] = sqrtf(s[i]);
    float s0 = s[0], sT = s[n - 1];
    float f = s0 / (s0 - sT);
    for (int64_t i = 0; i < n; i++) {
        s[i] = s[i] - sT;
        s[i] = s[i] * f;
        s[i] = s[i] * s[i];
    }
    a[0] = s[0];
    for (int64_t i = 1; i < n; i++) a[i] = s[i] / s[i - 1];
    for (int64_t i = 0; i < n; i++) betas[i] = 1.0f - a[i];
    free(a);
}

static em_status flow_tables(em_ctx *c, em_scheduler *s) {
    const em_sched_cfg *cfg = &s->cfg;
    int64_t n = cfg->num_train_timesteps;
    double *t = malloc((size_t)n * sizeof *t);
    if (!t) return EM_FAIL(c, EM_ERR_OOM, "scheduler", "out of memory");
    np_linspace(1, (double)n, n, t);
    float first = 0, last = 0;
    for (int64_t k = 0; k < n; k++) {
        float ts = (float)t[n - 1 - k]; /* reversed, float32 */
        float sg = ts / (float)n;
        if (!cfg->use_dynamic_shifting) {
            float sh = (float)cfg->shift;
            sg = sh * sg / (1.0f + (float)(cfg->shift - 1) * sg);
        }
        if (k == 0) first = sg;
        last = sg;
    }
    free(t);
    s->flow_sigma_max = first;
    s->flow_sigma_min = last;
    return EM_OK;
}

em_status em_sched_init_tables(em_ctx *c, em_scheduler *s) {
    const em_sched_cfg *cfg = &s->cfg;
    s->init_noise_sigma = 1.0;
    if (s->kind == EM_SCHED_FLOW_MATCH_EULER) return flow_tables(c, s);
    int64_t n = cfg->num_train_timesteps;
    s->betas = malloc((size_t)n * sizeof(float));
    s->alphas_cumprod = malloc((size_t)n * sizeof(float));
    float *a = malloc((size_t)n * sizeof(float));
    if (!s->betas || !s->alphas_cumprod || !a) {
        free(a);
        return EM_FAIL(c, EM_ERR_OOM, "scheduler", "out of memory");
    }
    float *b = s->betas;
    const char *bs = cfg->beta_schedule;
    if (cfg->trained_betas) {
        memcpy(b, cfg->trained_betas, (size_t)n * sizeof *b);
    } else if (!strcmp(bs, "linear")) {
        torch_linspace_f32((float)cfg->beta_start, (float)cfg->beta_end, n, b);
    } else if (!strcmp(bs, "scaled_linear")) {
        torch_linspace_f32((float)pow(cfg->beta_start, 0.5), (float)pow(cfg->beta_end, 0.5), n, b);
        for (int64_t i = 0; i < n; i++) b[i] = b[i] * b[i];
    } else if (!strcmp(bs, "sigmoid")) {
        torch_linspace_f32(-6.0f, 6.0f, n, b);
        float scale = (float)(cfg->beta_end - cfg->beta_start), off = (float)cfg->beta_start;
        for (int64_t i = 0; i < n; i++) b[i] = 1.0f / (1.0f + expf(-b[i])) * scale + off;
    } else { /* squaredcos_cap_v2, laplace */
        for (int64_t i = 0; i < n; i++) {
            double t1 = (double)i / (double)n, t2 = (double)(i + 1) / (double)n;
            double v = 1 - alpha_bar(bs, t2) / alpha_bar(bs, t1);
            b[i] = (float)(v < 0.999 ? v : 0.999);
        }
    }
    if (cfg->rescale_betas_zero_snr) rescale_zero_snr(b, n);
    for (int64_t i = 0; i < n; i++) a[i] = 1.0f - b[i];
    cumprod(a, n, s->alphas_cumprod);
    free(a);
    if (cfg->rescale_betas_zero_snr &&
        (s->kind == EM_SCHED_EULER || s->kind == EM_SCHED_EULER_ANCESTRAL ||
         s->kind == EM_SCHED_DPM_MULTISTEP))
        s->alphas_cumprod[n - 1] = 0x1p-24f;
    s->final_alpha_cumprod = cfg->set_alpha_to_one ? 1.0f : s->alphas_cumprod[0];
    return EM_OK;
}

/* ---- set_timesteps ---- */

/* DDPM/DDIM-style integer timesteps, descending (spacing over n steps of N) */
static int64_t int_timesteps(const em_sched_cfg *cfg, int64_t n, double *ts, int64_t cap) {
    int64_t N = cfg->num_train_timesteps;
    const char *sp = cfg->timestep_spacing;
    if (!strcmp(sp, "linspace")) {
        double y[n];
        np_linspace(0, (double)(N - 1), n, y);
        for (int64_t i = 0; i < n; i++) ts[i] = rint(y[n - 1 - i]);
        return n;
    }
    if (!strcmp(sp, "leading")) {
        int64_t ratio = N / n;
        for (int64_t i = 0; i < n; i++) ts[i] = (double)((n - 1 - i) * ratio + cfg->steps_offset);
        return n;
    }
    int64_t m = np_arange((double)N, 0, -((double)N / (double)n), ts, cap);
    for (int64_t i = 0; i < m; i++) ts[i] = rint(ts[i]) - 1;
    return m;
}

/* the float32 base sigmas ((1 - ac) / ac) ** 0.5 and their float32 logs */
static void base_sigmas(const em_scheduler *s, float *sig, float *logs) {
    int64_t N = s->cfg.num_train_timesteps;
    for (int64_t i = 0; i < N; i++) {
        float ac = s->alphas_cumprod[i];
        sig[i] = sqrtf((1.0f - ac) / ac);
        logs[i] = (float)log((double)sig[i]);
    }
}

static float final_sigma(const em_scheduler *s) {
    if (strcmp(s->cfg.final_sigmas_type, "sigma_min")) return 0.0f;
    float ac = s->alphas_cumprod[0];
    return sqrtf((1.0f - ac) / ac);
}

static em_status sigma_schedule(em_ctx *c, em_scheduler *s, int64_t n, double mu) {
    const em_sched_cfg *cfg = &s->cfg;
    int64_t N = cfg->num_train_timesteps;
    em_scheduler_kind k = s->kind;
    int64_t cap = n + 2;
    double *ts = malloc((size_t)cap * sizeof *ts), *sg = malloc((size_t)cap * sizeof *sg);
    float *bs = k == EM_SCHED_FLOW_MATCH_EULER ? NULL : malloc((size_t)N * 2 * sizeof *bs);
    if (!ts || !sg || (k != EM_SCHED_FLOW_MATCH_EULER && !bs)) {
        free(ts);
        free(sg);
        free(bs);
        return EM_FAIL(c, EM_ERR_OOM, "scheduler", "out of memory");
    }
    int64_t m = n;
    float last_sigma = 0.0f;
    if (k == EM_SCHED_FLOW_MATCH_EULER) {
        if (!s->given_sigmas)
            np_linspace((double)s->flow_sigma_max * (double)N,
                        (double)s->flow_sigma_min * (double)N, n, ts);
        for (int64_t i = 0; i < n; i++) {
            double t = s->given_sigmas ? (double)s->given_sigmas[i] : ts[i] / (double)N;
            if (cfg->use_dynamic_shifting) {
                double e = !strcmp(cfg->time_shift_type, "linear") ? mu : exp(mu);
                t = e / (e + (1 / t - 1));
            } else {
                t = cfg->shift * t / (1 + (cfg->shift - 1) * t);
            }
            sg[i] = t;
        }
        if (cfg->has_shift_terminal && cfg->shift_terminal != 0) {
            double scale = (1 - sg[n - 1]) / (1 - cfg->shift_terminal);
            for (int64_t i = 0; i < n; i++) sg[i] = 1 - (1 - sg[i]) / scale;
        }
        if (cfg->use_karras_sigmas) karras(sg[n - 1], sg[0], n, sg);
        else if (cfg->use_exponential_sigmas) exponential(sg[n - 1], sg[0], n, sg);
        else if (cfg->use_beta_sigmas) beta_sigmas(sg[n - 1], sg[0], n, sg);
        s->sigmas = malloc((size_t)(n + 1) * sizeof(float));
        s->timesteps = malloc((size_t)n * sizeof(double));
        if (!s->sigmas || !s->timesteps) goto oom;
        for (int64_t i = 0; i < n; i++) {
            float f = (float)sg[i];
            if (cfg->invert_sigmas) f = 1.0f - f;
            s->sigmas[i] = f;
            s->timesteps[i] = (double)(f * (float)N);
        }
        s->sigmas[n] = cfg->invert_sigmas ? 1.0f : 0.0f;
        s->n_timesteps = n;
        s->n_sigmas = n + 1;
        free(ts);
        free(sg);
        return EM_OK;
    }

    float *logs = bs + N;
    base_sigmas(s, bs, logs);
    double *bsd = malloc((size_t)N * sizeof *bsd);
    if (!bsd) goto oom;
    for (int64_t i = 0; i < N; i++) bsd[i] = bs[i];
    if (k == EM_SCHED_DPM_MULTISTEP) {
        /* lambda_min_clipped cuts the schedule's end (searchsorted on the flipped lambdas) */
        int64_t clipped = 0;
        for (int64_t i = 0; i < N; i++) {
            float ac = s->alphas_cumprod[i];
            float lam = logf(sqrtf(ac)) - logf(sqrtf(1.0f - ac));
            if ((double)lam < cfg->lambda_min_clipped) clipped++;
        }
        int64_t last = N - clipped;
        const char *sp = cfg->timestep_spacing;
        if (!strcmp(sp, "linspace")) {
            double y[n + 1];
            np_linspace(0, (double)(last - 1), n + 1, y);
            for (int64_t i = 0; i < n; i++) ts[i] = rint(y[n - i]);
        } else if (!strcmp(sp, "leading")) {
            int64_t ratio = last / (n + 1);
            for (int64_t i = 0; i < n; i++) ts[i] = (double)((n - i) * ratio + cfg->steps_offset);
        } else {
            m = np_arange((double)last, 0, -((double)N / (double)n), ts, cap);
            for (int64_t i = 0; i < m; i++) ts[i] = rint(ts[i]) - 1;
        }
        if (cfg->use_karras_sigmas || cfg->use_lu_lambdas || cfg->use_exponential_sigmas ||
            cfg->use_beta_sigmas) {
            /* in_sigmas = flip(base): its last is sigma(t=0), its first sigma(t=N-1); diffusers
             * takes Karras first, then Lu's lambdas, then exponential, then beta */
            if (cfg->use_karras_sigmas) karras(bs[0], bs[N - 1], m, sg);
            else if (cfg->use_lu_lambdas) lu_lambdas(logs[0], logs[N - 1], m, sg);
            else if (cfg->use_exponential_sigmas) exponential(bs[0], bs[N - 1], m, sg);
            else beta_sigmas(bs[0], bs[N - 1], m, sg);
            for (int64_t i = 0; i < m; i++) {
                double t = sigma_to_t(sg[i], logs, N);
                if ((cfg->use_karras_sigmas || cfg->use_lu_lambdas) &&
                    strcmp(cfg->beta_schedule, "squaredcos_cap_v2"))
                    t = rint(t);
                ts[i] = isfinite(t) ? trunc(t) : 0; /* .to(int64) truncates */
            }
        } else if (cfg->use_flow_sigmas) {
            /* flow-matching sigmas: 1 - linspace(1, 1/N, n + 1), shifted, flipped, the final 0
             * dropped; timesteps sigma * N (as int64: truncated). A mu (dynamic shifting) makes
             * the shift exp(mu) for this call; diffusers writes it into the config, so that
             * later calls without mu keep it. */
            double shift = isnan(mu) ? cfg->flow_shift : exp(mu);
            double a[n + 1];
            np_linspace(1, 1 / (double)N, n + 1, a);
            m = n;
            for (int64_t i = 0; i < n; i++) {
                double v = 1.0 - a[n - i];
                sg[i] = shift * v / (1 + (shift - 1) * v);
                ts[i] = trunc(sg[i] * (double)N);
            }
        } else {
            for (int64_t i = 0; i < m; i++) sg[i] = np_interp_idx(ts[i], bsd, N);
        }
    } else {
        const char *sp = cfg->timestep_spacing;
        if (!strcmp(sp, "linspace")) {
            double y[n];
            np_linspace(0, (double)(N - 1), n, y);
            for (int64_t i = 0; i < n; i++) ts[i] = (float)y[n - 1 - i];
        } else if (!strcmp(sp, "leading")) {
            int64_t ratio = N / n;
            for (int64_t i = 0; i < n; i++)
                ts[i] = (double)((float)((n - 1 - i) * ratio) + (float)cfg->steps_offset);
        } else {
            m = np_arange((double)N, 0, -((double)N / (double)n), ts, cap);
            for (int64_t i = 0; i < m; i++) ts[i] = (double)((float)rint(ts[i]) - 1.0f);
        }
        for (int64_t i = 0; i < m; i++) sg[i] = np_interp_idx(ts[i], bsd, N);
        if (k == EM_SCHED_EULER &&
            (cfg->use_karras_sigmas || cfg->use_exponential_sigmas || cfg->use_beta_sigmas)) {
            double smin = cfg->has_sigma_min ? cfg->sigma_min : sg[m - 1];
            double smax = cfg->has_sigma_max ? cfg->sigma_max : sg[0];
            if (cfg->use_karras_sigmas) karras(smin, smax, m, sg);
            else if (cfg->use_exponential_sigmas) exponential(smin, smax, m, sg);
            else beta_sigmas(smin, smax, m, sg);
            for (int64_t i = 0; i < m; i++) ts[i] = (double)(float)sigma_to_t(sg[i], logs, N);
        }
        if (k == EM_SCHED_EULER) last_sigma = final_sigma(s);
    }
    if (k == EM_SCHED_DPM_MULTISTEP) last_sigma = final_sigma(s);
    free(bsd);
    s->sigmas = malloc((size_t)(m + 1) * sizeof(float));
    s->timesteps = malloc((size_t)m * sizeof(double));
    if (!s->sigmas || !s->timesteps) goto oom;
    float mx = 0;
    for (int64_t i = 0; i < m; i++) {
        s->sigmas[i] = (float)sg[i];
        s->timesteps[i] = ts[i];
        if (s->sigmas[i] > mx) mx = s->sigmas[i];
    }
    s->sigmas[m] = last_sigma;
    if (last_sigma > mx) mx = last_sigma;
    /* Euler with continuous timesteps and v-prediction: 0.25 log sigma (float32), the model
     * being conditioned on the noise level rather than a training step */
    if (k == EM_SCHED_EULER && !strcmp(cfg->timestep_type, "continuous") &&
        !strcmp(cfg->prediction_type, "v_prediction"))
        for (int64_t i = 0; i < m; i++) s->timesteps[i] = (double)(0.25f * logf(s->sigmas[i]));
    s->n_timesteps = m;
    s->n_sigmas = m + 1;
    if (k == EM_SCHED_EULER || k == EM_SCHED_EULER_ANCESTRAL) {
        const char *sp = cfg->timestep_spacing;
        s->init_noise_sigma = (!strcmp(sp, "linspace") || !strcmp(sp, "trailing"))
                                  ? (double)mx
                                  : (double)sqrtf(mx * mx + 1.0f);
    }
    free(ts);
    free(sg);
    free(bs);
    return EM_OK;
oom:
    free(ts);
    free(sg);
    free(bs);
    return EM_FAIL(c, EM_ERR_OOM, "scheduler", "out of memory");
}

em_status em_sched_timesteps(em_ctx *c, em_scheduler *s, int64_t n, double mu) {
    const em_sched_cfg *cfg = &s->cfg;
    int64_t N = cfg->num_train_timesteps;
    free(s->timesteps);
    free(s->sigmas);
    s->timesteps = NULL;
    s->sigmas = NULL;
    s->n_timesteps = s->n_sigmas = 0;
    s->num_inference_steps = 0;
    s->step_index = -1;
    s->begin_index = -1; /* diffusers' set_timesteps forgets it too */
    s->counter = 0;
    s->lower_order_nums = 0;
    em_sched_history_clear(s);
    if (s->kind <= EM_SCHED_PNDM) {
        int64_t cap = n + 2;
        double *ts = malloc((size_t)cap * sizeof *ts);
        if (!ts) return EM_FAIL(c, EM_ERR_OOM, "scheduler", "out of memory");
        int64_t m = int_timesteps(cfg, n, ts, cap);
        if (s->kind == EM_SCHED_PNDM) {
            /* _timesteps ascending; PLMS runs them descending with the second-last twice */
            double *asc = malloc((size_t)(m + 1) * sizeof *asc);
            if (!asc) {
                free(ts);
                return EM_FAIL(c, EM_ERR_OOM, "scheduler", "out of memory");
            }
            for (int64_t i = 0; i < m; i++) asc[i] = ts[m - 1 - i];
            int64_t k = 0;
            double *out = malloc((size_t)(m + 16) * sizeof *out);
            if (!out) {
                free(ts);
                free(asc);
                return EM_FAIL(c, EM_ERR_OOM, "scheduler", "out of memory");
            }
            double cat[m + 16];
            s->n_prk = 0;
            if (cfg->skip_prk_steps) {
                /* concat(asc[:-1], asc[-2:-1], asc[-1:])[::-1] */
                for (int64_t i = 0; i < m - 1; i++) cat[k++] = asc[i];
                if (m >= 2) cat[k++] = asc[m - 2];
                cat[k++] = asc[m - 1];
                for (int64_t i = 0; i < k; i++) out[i] = cat[k - 1 - i];
            } else {
                /* Runge-Kutta over the last 4: (asc[-4:].repeat(2) + tile([0, half], 4))[:-1]
                 * .repeat(2)[1:-1][::-1], then PLMS over asc[:-3][::-1] */
                int64_t half = cfg->num_train_timesteps / n / 2, q = m < 4 ? m : 4, r = 0;
                double pairs[8];
                for (int64_t i = 0; i < q; i++) {
                    pairs[r++] = asc[m - q + i];
                    pairs[r++] = asc[m - q + i] + (double)half;
                }
                r--; /* [:-1] */
                for (int64_t i = 0; i < r; i++) cat[k++] = pairs[i], cat[k++] = pairs[i];
                /* [1:-1] reversed */
                int64_t np = 0;
                for (int64_t i = k - 2; i >= 1; i--) out[np++] = cat[i];
                s->n_prk = np;
                for (int64_t i = m - 4; i >= 0; i--) out[np++] = asc[i];
                k = np;
            }
            free(asc);
            free(ts);
            if (k == 0) {
                free(out);
                return EM_FAIL(c, EM_ERR_INVALID_ARG, "scheduler_set_timesteps",
                               "%s: PNDMScheduler's Runge-Kutta warm-up (skip_prk_steps false) "
                               "leaves no timesteps for %lld step (diffusers' schedule is empty): "
                               "use 2 or more", s->origin, (long long)n);
            }
            ts = out;
            m = k;
        }
        s->timesteps = ts;
        s->n_timesteps = m;
        s->num_inference_steps = n;
        return EM_OK;
    }
    em_status e = sigma_schedule(c, s, n, mu);
    if (e) return e;
    s->num_inference_steps = s->kind == EM_SCHED_DPM_MULTISTEP ? s->n_timesteps : n;
    (void)N;
    return EM_OK;
}

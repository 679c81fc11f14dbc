/* The public scheduler calls (ember/scheduler.h): argument checks, the tables, and dispatch to
 * the step of each family. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/sched_impl.h"

void em_scheduler_free(em_scheduler *s) {
    if (!s) return;
    em_sched_history_clear(s);
    em_sched_cfg_clear(&s->cfg);
    json_decref(s->json);
    free(s->betas);
    free(s->alphas_cumprod);
    free(s->timesteps);
    free(s->sigmas);
    free(s);
}

em_scheduler_kind em_scheduler_get_kind(const em_scheduler *s) {
    return s ? s->kind : EM_SCHED_KIND_COUNT;
}
int64_t em_scheduler_num_train_timesteps(const em_scheduler *s) {
    return s ? s->cfg.num_train_timesteps : 0;
}

em_status em_scheduler_set_timesteps_mu(em_ctx *c, em_scheduler *s, int64_t n, double mu) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (c->err.status) return c->err.status;
    if (!s) return EM_FAIL(c, EM_ERR_INVALID_ARG, "scheduler_set_timesteps", "scheduler is NULL");
    int64_t N = s->cfg.num_train_timesteps;
    if (n < 1 || n > N)
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "scheduler_set_timesteps",
                       "%s: %lld inference steps: need 1..num_train_timesteps (%lld)",
                       em_scheduler_kind_class(s->kind), (long long)n, (long long)N);
    if (s->kind == EM_SCHED_FLOW_MATCH_EULER && s->cfg.use_dynamic_shifting && isnan(mu))
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "scheduler_set_timesteps",
                       "%s: use_dynamic_shifting needs mu (em_scheduler_set_timesteps_mu)",
                       s->origin);
    /* DPM-Solver takes a mu only as diffusers asserts it: flow shift exp(mu) */
    if (s->kind == EM_SCHED_DPM_MULTISTEP && !isnan(mu) &&
        (!s->cfg.use_dynamic_shifting || strcmp(s->cfg.time_shift_type, "exponential")))
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "scheduler_set_timesteps",
                       "%s: a mu needs use_dynamic_shifting with time_shift_type exponential",
                       s->origin);
    return em_sched_timesteps(c, s, n, mu);
}

em_status em_scheduler_set_sigmas_mu(em_ctx *c, em_scheduler *s, const float *sigmas,
                                     int64_t n, double mu) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (c->err.status) return c->err.status;
    if (!s || !sigmas || n < 1)
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "scheduler_set_sigmas",
                       "scheduler or sigmas NULL, or %lld sigmas", (long long)n);
    if (s->kind != EM_SCHED_FLOW_MATCH_EULER)
        return EM_FAIL(c, EM_ERR_UNSUPPORTED, "scheduler_set_sigmas",
                       "%s: custom sigmas are FlowMatchEulerDiscreteScheduler's here, not %s's",
                       s->origin, em_scheduler_kind_class(s->kind));
    for (int64_t i = 0; i < n; i++)
        if (!(sigmas[i] > 0.0f && sigmas[i] <= 1.0f))
            return EM_FAIL(c, EM_ERR_INVALID_ARG, "scheduler_set_sigmas",
                           "sigma %lld is %g: FlowMatch sigmas lie in (0, 1]", (long long)i,
                           (double)sigmas[i]);
    if (s->cfg.use_dynamic_shifting && isnan(mu))
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "scheduler_set_sigmas",
                       "%s: use_dynamic_shifting needs mu", s->origin);
    s->given_sigmas = sigmas;
    em_status st = em_sched_timesteps(c, s, n, mu);
    s->given_sigmas = NULL;
    return st;
}

em_status em_scheduler_set_timesteps(em_ctx *c, em_scheduler *s, int64_t n) {
    return em_scheduler_set_timesteps_mu(c, s, n, NAN);
}

const double *em_scheduler_timesteps(const em_scheduler *s, int64_t *n) {
    if (n) *n = s && s->timesteps ? s->n_timesteps : 0;
    return s ? s->timesteps : NULL;
}
const float *em_scheduler_sigmas(const em_scheduler *s, int64_t *n) {
    if (n) *n = s && s->sigmas ? s->n_sigmas : 0;
    return s ? s->sigmas : NULL;
}
const float *em_scheduler_alphas_cumprod(const em_scheduler *s, int64_t *n) {
    if (n) *n = s && s->alphas_cumprod ? s->cfg.num_train_timesteps : 0;
    return s ? s->alphas_cumprod : NULL;
}
const float *em_scheduler_betas(const em_scheduler *s, int64_t *n) {
    if (n) *n = s && s->betas ? s->cfg.num_train_timesteps : 0;
    return s ? s->betas : NULL;
}
double em_scheduler_init_noise_sigma(const em_scheduler *s) { return s ? s->init_noise_sigma : 1.0; }
void em_scheduler_set_eta(em_scheduler *s, double eta) {
    if (s) s->eta = eta;
}

int64_t em_sched_index_for(em_ctx *c, const char *file, int line, em_scheduler *s, double t) {
    int64_t first = -1, second = -1;
    for (int64_t i = 0; i < s->n_timesteps; i++)
        if (s->timesteps[i] == t) {
            if (first < 0) first = i;
            else if (second < 0) second = i;
        }
    if (second >= 0) return second; /* img2img starts mid-schedule: diffusers takes the second */
    if (first >= 0) return first;
    if (s->kind == EM_SCHED_DPM_MULTISTEP) return s->n_timesteps - 1;
    em_fail_at(c, EM_ERR_INDEX, "scheduler_step", file, line,
               "%s: timestep %g is not in the schedule of %lld timesteps",
               em_scheduler_kind_class(s->kind), t, (long long)s->n_timesteps);
    return -1;
}

int64_t em_sched_first_index(em_ctx *c, const char *file, int line, em_scheduler *s, double t) {
    return s->begin_index >= 0 ? s->begin_index : em_sched_index_for(c, file, line, s, t);
}

em_tensor *em_sched_noise(em_ctx *c, const char *file, int line, em_scheduler *s, em_tensor *x,
                          em_torch_generator *g) {
    if (!x || c->err.status) return NULL;
    if (!g) {
        em_fail_at(c, EM_ERR_INVALID_ARG, "scheduler_step", file, line,
                   "%s draws noise in this step: pass a generator (em_torch_generator_create)",
                   em_scheduler_kind_class(s->kind));
        return NULL;
    }
    return em_torch_randn_(c, file, line, g, em_tensor_ndim(x), em_tensor_shape(x),
                           em_tensor_device(x));
}

static bool ready(em_ctx *c, const char *file, int line, em_scheduler *s, const char *op) {
    if (!c || c->err.status) return false;
    if (!s) {
        em_fail_at(c, EM_ERR_INVALID_ARG, op, file, line, "scheduler is NULL");
        return false;
    }
    if (!s->timesteps) {
        em_fail_at(c, EM_ERR_INVALID_ARG, op, file, line,
                   "%s: call em_scheduler_set_timesteps first", em_scheduler_kind_class(s->kind));
        return false;
    }
    return true;
}

static bool check_f32(em_ctx *c, const char *file, int line, const char *op, const char *what,
                      em_tensor *t) {
    if (!t) {
        em_fail_at(c, EM_ERR_INVALID_ARG, op, file, line, "%s is NULL", what);
        return false;
    }
    if (em_tensor_dtype(t) != EM_F32) {
        char b[96];
        em_fail_at(c, EM_ERR_DTYPE, op, file, line, "%s is %s: the schedulers "
                   "compute in f32 (cast it first)", what, em_tensor_sig(t, b, sizeof b));
        return false;
    }
    return true;
}

em_tensor *em_scheduler_scale_model_input_(em_ctx *c, const char *file, int line, em_scheduler *s,
                                           em_tensor *sample, double t) {
    if (!ready(c, file, line, s, "scheduler_scale_model_input") ||
        !check_f32(c, file, line, "scheduler_scale_model_input", "sample", sample))
        return NULL;
    if (s->kind != EM_SCHED_EULER && s->kind != EM_SCHED_EULER_ANCESTRAL) return sample;
    if (s->step_index < 0) {
        s->step_index = em_sched_first_index(c, file, line, s, t);
        if (s->step_index < 0) return NULL;
    }
    if (s->step_index >= s->n_timesteps) {
        em_fail_at(c, EM_ERR_INDEX, "scheduler_scale_model_input", file, line,
                   "%s: past the last timestep", em_scheduler_kind_class(s->kind));
        return NULL;
    }
    float sigma = s->sigmas[s->step_index];
    return em_div_scalar_(c, file, line, sample, (double)sqrtf(sigma * sigma + 1.0f));
}

em_tensor *em_scheduler_step_(em_ctx *c, const char *file, int line, em_scheduler *s,
                              em_tensor *model_output, double t, em_tensor *sample,
                              em_torch_generator *g) {
    if (!ready(c, file, line, s, "scheduler_step") ||
        !check_f32(c, file, line, "scheduler_step", "model_output", model_output) ||
        !check_f32(c, file, line, "scheduler_step", "sample", sample))
        return NULL;
    /* a learned-variance model's output is [mean, variance] along channels: DPM-Solver takes
     * the first 3 channels for epsilon, as diffusers does (it hard-codes 3, pixel models) */
    if (s->kind == EM_SCHED_DPM_MULTISTEP && !strcmp(s->cfg.prediction_type, "epsilon") &&
        (!strcmp(s->cfg.variance_type, "learned") || !strcmp(s->cfg.variance_type, "learned_range"))) {
        if (em_tensor_ndim(model_output) < 2 || em_tensor_dim(model_output, 1) < 3) {
            char a[96];
            em_fail_at(c, EM_ERR_SHAPE, "scheduler_step", file, line,
                       "variance_type %s takes channels 0-2 of model_output, which is %s",
                       s->cfg.variance_type, em_tensor_sig(model_output, a, sizeof a));
            return NULL;
        }
        model_output = em_narrow_(c, file, line, model_output, 1, 0, 3);
        if (!model_output) return NULL;
    }
    int nd = em_tensor_ndim(sample);
    if (em_tensor_ndim(model_output) != nd ||
        memcmp(em_tensor_shape(model_output), em_tensor_shape(sample), (size_t)nd * sizeof(int64_t))) {
        char a[96], b[96];
        em_fail_at(c, EM_ERR_SHAPE, "scheduler_step", file, line,
                   "model_output %s and sample %s differ in shape",
                   em_tensor_sig(model_output, a, sizeof a), em_tensor_sig(sample, b, sizeof b));
        return NULL;
    }
    if (em_tensor_device(model_output) != em_tensor_device(sample)) {
        em_fail_at(c, EM_ERR_DEVICE, "scheduler_step", file, line,
                   "model_output is on %s, sample on %s", em_device_name(em_tensor_device(model_output)),
                   em_device_name(em_tensor_device(sample)));
        return NULL;
    }
    if (s->kind <= EM_SCHED_PNDM) return em_sched_step_alpha(c, file, line, s, model_output, t, sample, g);
    return em_sched_step_sigma(c, file, line, s, model_output, t, sample, g);
}

static bool has_begin_index(em_scheduler_kind k) {
    return k == EM_SCHED_EULER || k == EM_SCHED_EULER_ANCESTRAL || k == EM_SCHED_DPM_MULTISTEP;
}

em_status em_scheduler_set_begin_index(em_ctx *c, em_scheduler *s, int64_t i) {
    if (!ready(c, EM_HERE, s, "scheduler_set_begin_index")) return c ? em_ctx_status(c) : EM_ERR_INVALID_ARG;
    if (!has_begin_index(s->kind))
        return em_ctx_fail(c, EM_ERR_UNSUPPORTED, "scheduler_set_begin_index",
                           "%s has no begin index (diffusers' set_begin_index is Euler's, Euler "
                           "ancestral's and DPM-Solver's)", em_scheduler_kind_class(s->kind));
    if (i < 0 || i >= s->n_timesteps)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, "scheduler_set_begin_index",
                           "%s: begin index %lld is outside the schedule's %lld timesteps",
                           em_scheduler_kind_class(s->kind), (long long)i,
                           (long long)s->n_timesteps);
    s->begin_index = i;
    return EM_OK;
}

/* v as torch's .to(dtype) leaves it */
static float round_to(float v, em_dtype dt) {
    if (dt == EM_BF16) return em_bf16_to_f32(em_f32_to_bf16(v));
    if (dt == EM_F16) return em_f16_to_f32(em_f32_to_f16(v));
    return v;
}

/* The factors on x and on the noise at timestep t, as diffusers' add_noise computes them: the
 * alpha family from alphas_cumprod cast to the sample's dtype (f32 tables for f32 samples), the
 * sigma family from the begin index, the current step index or the timestep looked up. */
static bool noise_factors(em_ctx *c, const char *file, int line, em_scheduler *s, double t,
                          em_dtype dt, float *a, float *b) {
    const char *op = "scheduler_add_noise", *cls = em_scheduler_kind_class(s->kind);
    if (s->kind <= EM_SCHED_PNDM) {
        int64_t ti = (int64_t)t, n = s->cfg.num_train_timesteps;
        if (!(t >= 0) || (double)ti != t || ti >= n) {
            em_fail_at(c, EM_ERR_INDEX, op, file, line, "%s: timestep %g is not an integer in "
                       "[0, %lld)", cls, t, (long long)n);
            return false;
        }
        float acp = round_to(s->alphas_cumprod[ti], dt);
        *a = round_to(sqrtf(acp), dt);
        *b = round_to(sqrtf(round_to(1.0f - acp, dt)), dt);
        return true;
    }
    int64_t i = s->begin_index < 0   ? em_sched_index_for(c, file, line, s, t)
                : s->step_index >= 0 ? s->step_index
                                     : s->begin_index;
    if (i < 0) return false;
    float sigma = s->sigmas[i];
    *a = 1.0f;
    *b = sigma;
    if (s->kind == EM_SCHED_DPM_MULTISTEP) em_sched_dpm_alpha_sigma(&s->cfg, sigma, a, b);
    return true;
}

em_tensor *em_scheduler_add_noise_batch_(em_ctx *c, const char *file, int line, em_scheduler *s,
                                         em_tensor *x, em_tensor *noise, const double *t,
                                         int64_t n) {
    const char *op = "scheduler_add_noise";
    if (!c || c->err.status) return NULL;
    if (!s) {
        em_fail_at(c, EM_ERR_INVALID_ARG, op, file, line, "scheduler is NULL");
        return NULL;
    }
    bool alpha = s->kind <= EM_SCHED_PNDM; /* noises from alphas_cumprod, no schedule needed */
    if ((!alpha && !ready(c, file, line, s, op)) || !x || !noise) {
        if (!c->err.status)
            em_fail_at(c, EM_ERR_INVALID_ARG, op, file, line, "%s is NULL", x ? "noise" : "x");
        return NULL;
    }
    const char *cls = em_scheduler_kind_class(s->kind);
    if (s->kind == EM_SCHED_FLOW_MATCH_EULER) {
        em_fail_at(c, EM_ERR_UNSUPPORTED, op, file, line,
                   "%s has no add_noise (diffusers gives it scale_noise)", cls);
        return NULL;
    }
    em_dtype dt = em_tensor_dtype(x);
    bool half = dt == EM_BF16 || dt == EM_F16;
    if (!(dt == EM_F32 || (alpha && half))) {
        char b[96];
        em_fail_at(c, EM_ERR_DTYPE, op, file, line, "x is %s: %s noises %s", em_tensor_sig(x, b, sizeof b),
                   cls, alpha ? "f32, bf16 or f16 samples" : "f32 samples (cast it first)");
        return NULL;
    }
    int nd = em_tensor_ndim(x);
    if (em_tensor_ndim(noise) != nd || em_tensor_dtype(noise) != dt ||
        memcmp(em_tensor_shape(noise), em_tensor_shape(x), (size_t)nd * sizeof(int64_t)) ||
        em_tensor_device(noise) != em_tensor_device(x)) {
        char a[96], b[96];
        em_fail_at(c, EM_ERR_SHAPE, op, file, line, "x %s on %s and noise %s on %s: one shape "
                   "on one device, one dtype", em_tensor_sig(x, a, sizeof a),
                   em_device_name(em_tensor_device(x)), em_tensor_sig(noise, b, sizeof b),
                   em_device_name(em_tensor_device(noise)));
        return NULL;
    }
    if (!t || n < 1 || (n > 1 && (nd < 1 || em_tensor_shape(x)[0] != n))) {
        char a[96];
        em_fail_at(c, EM_ERR_SHAPE, op, file, line, "%lld timesteps for x %s: one, or one per "
                   "sample of dim 0", (long long)n, em_tensor_sig(x, a, sizeof a));
        return NULL;
    }
    if (n == 1) { /* one timestep: scalar factors */
        float a, b;
        if (!noise_factors(c, file, line, s, t[0], dt, &a, &b)) return NULL;
        /* Euler's x + noise * sigma has no factor on x */
        em_tensor *ax = a == 1.0f && s->kind != EM_SCHED_DPM_MULTISTEP
                            ? x : em_mul_scalar_(c, file, line, x, a);
        return em_add_(c, file, line, ax, em_mul_scalar_(c, file, line, noise, b));
    }
    /* one timestep per sample: the factors as [n, 1, ...] tensors, broadcast as diffusers' */
    float *f = malloc((size_t)(2 * n) * sizeof *f);
    int64_t *shape = malloc((size_t)nd * sizeof *shape);
    if (!f || !shape) {
        free(f);
        free(shape);
        em_fail_at(c, EM_ERR_OOM, op, file, line, "out of memory");
        return NULL;
    }
    bool ok = true;
    for (int64_t i = 0; ok && i < n; i++) ok = noise_factors(c, file, line, s, t[i], dt, &f[i], &f[n + i]);
    shape[0] = n;
    for (int d = 1; d < nd; d++) shape[d] = 1;
    em_device *dev = em_tensor_device(x);
    em_tensor *fa = ok ? em_from_host_on_(c, file, line, dev, EM_F32, nd, shape, f) : NULL;
    em_tensor *fb = ok ? em_from_host_on_(c, file, line, dev, EM_F32, nd, shape, f + n) : NULL;
    free(f);
    free(shape);
    if (!fa || !fb) return NULL;
    if (half) { /* exact: the factors are already values of dt */
        fa = em_cast_(c, file, line, fa, dt);
        fb = em_cast_(c, file, line, fb, dt);
    }
    return em_add_(c, file, line, em_mul_(c, file, line, fa, x), em_mul_(c, file, line, fb, noise));
}

em_tensor *em_scheduler_add_noise_(em_ctx *c, const char *file, int line, em_scheduler *s,
                                   em_tensor *x, em_tensor *noise, double t) {
    return em_scheduler_add_noise_batch_(c, file, line, s, x, noise, &t, 1);
}

/*
 * Scheduler configurations: which fields each diffusers class has, its defaults, reading them
 * from scheduler_config.json, the values supported, and from_config between classes.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "core/file_read.h"
#include "diffusion/sched_impl.h"
#include "io/config/config_impl.h"

#define B(k) (1u << (k))
#define ALL_BETA (B(EM_SCHED_DDPM) | B(EM_SCHED_DDIM) | B(EM_SCHED_PNDM) | B(EM_SCHED_EULER) |  \
                  B(EM_SCHED_EULER_ANCESTRAL) | B(EM_SCHED_DPM_MULTISTEP))
#define ALL (ALL_BETA | B(EM_SCHED_FLOW_MATCH_EULER))
#define DD (B(EM_SCHED_DDPM) | B(EM_SCHED_DDIM))
#define SIGMA_KS (B(EM_SCHED_EULER) | B(EM_SCHED_DPM_MULTISTEP) | B(EM_SCHED_FLOW_MATCH_EULER))

typedef enum { F_INT, F_NUM, F_BOOL, F_STR, F_NUM_OR_NULL, F_STR_OR_NULL, F_BETAS } field_type;

typedef struct field {
    const char *key;
    field_type type;
    size_t off;      /* in em_sched_cfg */
    size_t size;     /* strings: buffer size */
    size_t has_off;  /* F_NUM_OR_NULL: the bool that says it is set */
    unsigned classes;
} field;

#define O(f) offsetof(em_sched_cfg, f)
#define S(f) sizeof(((em_sched_cfg *)0)->f)
static const field FIELDS[] = {
    {"num_train_timesteps", F_INT, O(num_train_timesteps), 0, 0, ALL},
    {"beta_start", F_NUM, O(beta_start), 0, 0, ALL_BETA},
    {"beta_end", F_NUM, O(beta_end), 0, 0, ALL_BETA},
    {"beta_schedule", F_STR, O(beta_schedule), S(beta_schedule), 0, ALL_BETA},
    {"trained_betas", F_BETAS, 0, 0, 0, ALL_BETA},
    {"prediction_type", F_STR, O(prediction_type), S(prediction_type), 0,
     ALL_BETA},
    {"timestep_spacing", F_STR, O(timestep_spacing), S(timestep_spacing), 0, ALL_BETA},
    {"steps_offset", F_INT, O(steps_offset), 0, 0, ALL_BETA},
    {"clip_sample", F_BOOL, O(clip_sample), 0, 0, DD},
    {"clip_sample_range", F_NUM, O(clip_sample_range), 0, 0, DD},
    {"set_alpha_to_one", F_BOOL, O(set_alpha_to_one), 0, 0, B(EM_SCHED_DDIM) | B(EM_SCHED_PNDM)},
    {"thresholding", F_BOOL, O(thresholding), 0, 0, DD | B(EM_SCHED_DPM_MULTISTEP)},
    {"dynamic_thresholding_ratio", F_NUM, O(dynamic_thresholding_ratio), 0, 0,
     DD | B(EM_SCHED_DPM_MULTISTEP)},
    {"sample_max_value", F_NUM, O(sample_max_value), 0, 0, DD | B(EM_SCHED_DPM_MULTISTEP)},
    {"variance_type", F_STR_OR_NULL, O(variance_type), S(variance_type), 0,
     B(EM_SCHED_DDPM) | B(EM_SCHED_DPM_MULTISTEP)},
    {"skip_prk_steps", F_BOOL, O(skip_prk_steps), 0, 0, B(EM_SCHED_PNDM)},
    {"rescale_betas_zero_snr", F_BOOL, O(rescale_betas_zero_snr), 0, 0,
     DD | B(EM_SCHED_EULER) | B(EM_SCHED_EULER_ANCESTRAL) | B(EM_SCHED_DPM_MULTISTEP)},
    {"interpolation_type", F_STR, O(interpolation_type), S(interpolation_type), 0,
     B(EM_SCHED_EULER)},
    {"use_karras_sigmas", F_BOOL, O(use_karras_sigmas), 0, 0, SIGMA_KS},
    {"use_exponential_sigmas", F_BOOL, O(use_exponential_sigmas), 0, 0, SIGMA_KS},
    {"use_beta_sigmas", F_BOOL, O(use_beta_sigmas), 0, 0, SIGMA_KS},
    {"sigma_min", F_NUM_OR_NULL, O(sigma_min), 0, O(has_sigma_min), B(EM_SCHED_EULER)},
    {"sigma_max", F_NUM_OR_NULL, O(sigma_max), 0, O(has_sigma_max), B(EM_SCHED_EULER)},
    {"timestep_type", F_STR, O(timestep_type), S(timestep_type), 0, B(EM_SCHED_EULER)},
    {"final_sigmas_type", F_STR, O(final_sigmas_type), S(final_sigmas_type), 0,
     B(EM_SCHED_EULER) | B(EM_SCHED_DPM_MULTISTEP)},
    {"solver_order", F_INT, O(solver_order), 0, 0, B(EM_SCHED_DPM_MULTISTEP)},
    {"algorithm_type", F_STR, O(algorithm_type), S(algorithm_type), 0, B(EM_SCHED_DPM_MULTISTEP)},
    {"solver_type", F_STR, O(solver_type), S(solver_type), 0, B(EM_SCHED_DPM_MULTISTEP)},
    {"lower_order_final", F_BOOL, O(lower_order_final), 0, 0, B(EM_SCHED_DPM_MULTISTEP)},
    {"euler_at_final", F_BOOL, O(euler_at_final), 0, 0, B(EM_SCHED_DPM_MULTISTEP)},
    {"use_lu_lambdas", F_BOOL, O(use_lu_lambdas), 0, 0, B(EM_SCHED_DPM_MULTISTEP)},
    {"use_flow_sigmas", F_BOOL, O(use_flow_sigmas), 0, 0, B(EM_SCHED_DPM_MULTISTEP)},
    {"flow_shift", F_NUM, O(flow_shift), 0, 0, B(EM_SCHED_DPM_MULTISTEP)},
    {"lambda_min_clipped", F_NUM, O(lambda_min_clipped), 0, 0, B(EM_SCHED_DPM_MULTISTEP)},
    {"use_dynamic_shifting", F_BOOL, O(use_dynamic_shifting), 0, 0,
     B(EM_SCHED_DPM_MULTISTEP) | B(EM_SCHED_FLOW_MATCH_EULER)},
    {"time_shift_type", F_STR, O(time_shift_type), S(time_shift_type), 0,
     B(EM_SCHED_DPM_MULTISTEP) | B(EM_SCHED_FLOW_MATCH_EULER)},
    {"shift", F_NUM, O(shift), 0, 0, B(EM_SCHED_FLOW_MATCH_EULER)},
    {"base_shift", F_NUM, O(base_shift), 0, 0, B(EM_SCHED_FLOW_MATCH_EULER)},
    {"max_shift", F_NUM, O(max_shift), 0, 0, B(EM_SCHED_FLOW_MATCH_EULER)},
    {"base_image_seq_len", F_INT, O(base_image_seq_len), 0, 0, B(EM_SCHED_FLOW_MATCH_EULER)},
    {"max_image_seq_len", F_INT, O(max_image_seq_len), 0, 0, B(EM_SCHED_FLOW_MATCH_EULER)},
    {"invert_sigmas", F_BOOL, O(invert_sigmas), 0, 0, B(EM_SCHED_FLOW_MATCH_EULER)},
    {"shift_terminal", F_NUM_OR_NULL, O(shift_terminal), 0, O(has_shift_terminal),
     B(EM_SCHED_FLOW_MATCH_EULER)},
    {"stochastic_sampling", F_BOOL, O(stochastic_sampling), 0, 0, B(EM_SCHED_FLOW_MATCH_EULER)},
};
#undef O
#undef S

static const char *const CLASS[EM_SCHED_KIND_COUNT] = {
    "DDPMScheduler", "DDIMScheduler", "PNDMScheduler", "EulerDiscreteScheduler",
    "EulerAncestralDiscreteScheduler", "DPMSolverMultistepScheduler",
    "FlowMatchEulerDiscreteScheduler"};
static const char *const SHORT[EM_SCHED_KIND_COUNT] = {"ddpm",    "ddim",    "pndm",      "euler",
                                                       "euler-a", "dpm++2m", "flow-euler"};

const char *em_scheduler_kind_class(em_scheduler_kind k) {
    return (unsigned)k < EM_SCHED_KIND_COUNT ? CLASS[k] : "?";
}
const char *em_scheduler_kind_name(em_scheduler_kind k) {
    return (unsigned)k < EM_SCHED_KIND_COUNT ? SHORT[k] : "?";
}
bool em_scheduler_kind_parse(const char *s, em_scheduler_kind *out) {
    if (!s || !out) return false;
    for (int k = 0; k < EM_SCHED_KIND_COUNT; k++)
        if (!strcmp(s, CLASS[k]) || !strcmp(s, SHORT[k])) {
            *out = (em_scheduler_kind)k;
            return true;
        }
    return false;
}

/* The defaults of each class's __init__ (diffusers 0.42). */
static void defaults(em_scheduler_kind k, em_sched_cfg *d) {
    memset(d, 0, sizeof *d);
    d->num_train_timesteps = 1000;
    d->beta_start = 0.0001;
    d->beta_end = 0.02;
    strcpy(d->beta_schedule, "linear");
    strcpy(d->prediction_type, "epsilon");
    strcpy(d->timestep_spacing, k <= EM_SCHED_PNDM ? "leading" : "linspace");
    d->clip_sample = true;
    d->clip_sample_range = 1.0;
    d->set_alpha_to_one = k == EM_SCHED_DDIM;
    d->dynamic_thresholding_ratio = 0.995;
    d->sample_max_value = 1.0;
    strcpy(d->variance_type, k == EM_SCHED_DDPM ? "fixed_small" : "");
    strcpy(d->interpolation_type, "linear");
    strcpy(d->timestep_type, "discrete");
    strcpy(d->final_sigmas_type, "zero");
    d->solver_order = 2;
    strcpy(d->algorithm_type, "dpmsolver++");
    strcpy(d->solver_type, "midpoint");
    d->lower_order_final = true;
    d->flow_shift = 1.0;
    d->lambda_min_clipped = -INFINITY;
    strcpy(d->time_shift_type, "exponential");
    d->shift = 1.0;
    d->base_shift = 0.5;
    d->max_shift = 1.15;
    d->base_image_seq_len = 256;
    d->max_image_seq_len = 4096;
}

void em_sched_cfg_clear(em_sched_cfg *cfg) {
    free(cfg->trained_betas);
    cfg->trained_betas = NULL;
    cfg->n_trained_betas = 0;
}

static em_status read_betas(em_cfg_src *src, em_sched_cfg *cfg) {
    json_t *v = json_object_get(src->obj, "trained_betas");
    if (!v || json_is_null(v)) return EM_OK;
    if (!json_is_array(v) || json_array_size(v) == 0)
        return EM_FAIL(src->c, EM_ERR_FORMAT, src->op,
                       "%s: \"trained_betas\" is %s, expected a non-empty list of numbers or null",
                       src->file, em_cfg_kind(v));
    size_t n = json_array_size(v);
    cfg->trained_betas = malloc(n * sizeof(float));
    if (!cfg->trained_betas) return EM_FAIL(src->c, EM_ERR_OOM, src->op, "out of memory");
    cfg->n_trained_betas = (int64_t)n;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(v, i);
        if (!json_is_number(x))
            return EM_FAIL(src->c, EM_ERR_FORMAT, src->op,
                           "%s: \"trained_betas\"[%zu] is %s, expected a number", src->file, i,
                           em_cfg_kind(x));
        /* torch.tensor(trained_betas, dtype=float32) */
        cfg->trained_betas[i] = (float)json_number_value(x);
    }
    return EM_OK;
}

/* A number, or one of the non-finite values Python's json writes bare (quoted by
 * quote_nonfinite before parsing): diffusers saves lambda_min_clipped as -Infinity. */
static em_status read_num(em_cfg_src *src, const char *key, bool nullable, double *out,
                          bool *present) {
    json_t *v = json_object_get(src->obj, key);
    const char *t = json_string_value(v);
    if (t && (!strcmp(t, "-Infinity") || !strcmp(t, "Infinity") || !strcmp(t, "NaN"))) {
        *out = !strcmp(t, "NaN") ? NAN : t[0] == '-' ? -INFINITY : INFINITY;
        if (present) *present = true;
        return EM_OK;
    }
    return em_cfg_num(src, key, nullable, out, present);
}

static em_status read_fields(em_ctx *c, em_scheduler *s) {
    em_cfg_src src = {c, s->origin, "", s->json, "scheduler_config", NULL};
    em_sched_cfg *cfg = &s->cfg;
    char *base = (char *)cfg;
    em_status e = EM_OK;
    for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0] && !e; i++) {
        const field *f = &FIELDS[i];
        if (!(f->classes & B(s->kind))) continue;
        switch (f->type) {
        case F_INT: e = em_cfg_int(&src, f->key, false, (int64_t *)(base + f->off), NULL); break;
        case F_NUM: e = read_num(&src, f->key, false, (double *)(base + f->off), NULL); break;
        case F_BOOL: e = em_cfg_bool(&src, f->key, false, (bool *)(base + f->off), NULL); break;
        case F_STR: e = em_cfg_str(&src, f->key, false, base + f->off, f->size, NULL); break;
        case F_STR_OR_NULL: {
            json_t *v = json_object_get(s->json, f->key);
            if (v && json_is_null(v)) base[f->off] = 0;
            else e = em_cfg_str(&src, f->key, true, base + f->off, f->size, NULL);
            break;
        }
        case F_NUM_OR_NULL: {
            bool present = false;
            e = read_num(&src, f->key, true, (double *)(base + f->off), &present);
            if (present) *(bool *)(base + f->has_off) = true;
            break;
        }
        case F_BETAS: e = read_betas(&src, cfg); break;
        }
    }
    return e;
}

/* ---- values ---- */

static bool one_of(const char *v, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(v, *list)) return true;
    return false;
}

static em_status bad(em_ctx *c, em_scheduler *s, em_status st, const char *key, const char *val,
                     const char *why) {
    return EM_FAIL(c, st, "scheduler_config", "%s: %s: \"%s\" = %s %s", s->origin,
                   CLASS[s->kind], key, val, why);
}

#define CHECK_STR(key, field, ...)                                                                 \
    do {                                                                                           \
        static const char *const ok_[] = {__VA_ARGS__, NULL};                                      \
        if (!one_of(cfg->field, ok_))                                                              \
            return bad(c, s, EM_ERR_UNSUPPORTED, key, cfg->field, "is not supported (one of: " #__VA_ARGS__ ")"); \
    } while (0)
#define REFUSE_TRUE(key, field, why)                                                               \
    do {                                                                                           \
        if (cfg->field) return bad(c, s, EM_ERR_UNSUPPORTED, key, "true", why);                    \
    } while (0)

static em_status check_values(em_ctx *c, em_scheduler *s) {
    em_sched_cfg *cfg = &s->cfg;
    em_scheduler_kind k = s->kind;
    char num[64];
    if (cfg->num_train_timesteps < 1 || cfg->num_train_timesteps > 100000) {
        snprintf(num, sizeof num, "%lld", (long long)cfg->num_train_timesteps);
        return bad(c, s, EM_ERR_FORMAT, "num_train_timesteps", num, "is out of range (1..100000)");
    }
    if (k == EM_SCHED_FLOW_MATCH_EULER) {
        if (!(cfg->shift > 0)) {
            snprintf(num, sizeof num, "%g", cfg->shift);
            return bad(c, s, EM_ERR_FORMAT, "shift", num, "must be positive");
        }
        CHECK_STR("time_shift_type", time_shift_type, "exponential", "linear");
        if (cfg->use_karras_sigmas + cfg->use_exponential_sigmas + cfg->use_beta_sigmas > 1)
            return bad(c, s, EM_ERR_FORMAT, "use_karras_sigmas", "true",
                       "together with use_exponential_sigmas or use_beta_sigmas: diffusers "
                       "allows only one");
        return EM_OK;
    }
    if (k == EM_SCHED_DDPM)
        CHECK_STR("beta_schedule", beta_schedule, "linear", "scaled_linear", "squaredcos_cap_v2",
                  "sigmoid", "laplace");
    else
        CHECK_STR("beta_schedule", beta_schedule, "linear", "scaled_linear", "squaredcos_cap_v2");
    if (cfg->trained_betas && cfg->n_trained_betas != cfg->num_train_timesteps) {
        snprintf(num, sizeof num, "a list of %lld", (long long)cfg->n_trained_betas);
        return bad(c, s, EM_ERR_FORMAT, "trained_betas", num,
                   "values where num_train_timesteps asks for as many as there are timesteps");
    }
    CHECK_STR("timestep_spacing", timestep_spacing, "linspace", "leading", "trailing");
    if (cfg->steps_offset < 0 || cfg->steps_offset >= cfg->num_train_timesteps) {
        snprintf(num, sizeof num, "%lld", (long long)cfg->steps_offset);
        return bad(c, s, EM_ERR_FORMAT, "steps_offset", num,
                   "is outside 0..num_train_timesteps - 1");
    }
    switch (k) {
    case EM_SCHED_DDPM:
    case EM_SCHED_DDIM: CHECK_STR("prediction_type", prediction_type, "epsilon", "sample", "v_prediction"); break;
    case EM_SCHED_PNDM: CHECK_STR("prediction_type", prediction_type, "epsilon", "v_prediction"); break;
    case EM_SCHED_EULER:
        CHECK_STR("prediction_type", prediction_type, "epsilon", "v_prediction", "sample", "original_sample");
        break;
    case EM_SCHED_EULER_ANCESTRAL: CHECK_STR("prediction_type", prediction_type, "epsilon", "v_prediction"); break;
    default: CHECK_STR("prediction_type", prediction_type, "epsilon", "sample", "v_prediction", "flow_prediction"); break;
    }
    double ratio = cfg->dynamic_thresholding_ratio;
    if (cfg->thresholding && !(ratio > 0 && ratio <= 1)) {
        snprintf(num, sizeof num, "%g", cfg->dynamic_thresholding_ratio);
        return bad(c, s, EM_ERR_FORMAT, "dynamic_thresholding_ratio", num, "is not in (0, 1]");
    }
    if (k == EM_SCHED_DDPM && !cfg->variance_type[0]) /* None: diffusers' step is fixed_small's */
        strcpy(cfg->variance_type, "fixed_small");
    if (k == EM_SCHED_DDPM)
        CHECK_STR("variance_type", variance_type, "fixed_small", "fixed_small_log", "fixed_large");
    if (k == EM_SCHED_EULER || k == EM_SCHED_DPM_MULTISTEP) {
        if (cfg->use_karras_sigmas + cfg->use_exponential_sigmas + cfg->use_beta_sigmas > 1)
            return bad(c, s, EM_ERR_FORMAT, "use_karras_sigmas", "true",
                       "together with use_exponential_sigmas or use_beta_sigmas: diffusers "
                       "allows only one");
        CHECK_STR("final_sigmas_type", final_sigmas_type, "zero", "sigma_min");
    }
    if (k == EM_SCHED_EULER) {
        CHECK_STR("interpolation_type", interpolation_type, "linear");
        CHECK_STR("timestep_type", timestep_type, "discrete", "continuous");
    }
    if (k == EM_SCHED_DPM_MULTISTEP) {
        CHECK_STR("algorithm_type", algorithm_type, "dpmsolver++", "dpmsolver");
        CHECK_STR("solver_type", solver_type, "midpoint", "heun");
        if (cfg->solver_order < 1 || cfg->solver_order > 3) {
            snprintf(num, sizeof num, "%lld", (long long)cfg->solver_order);
            return bad(c, s, EM_ERR_FORMAT, "solver_order", num, "is not 1, 2 or 3");
        }
        if (!strcmp(cfg->algorithm_type, "dpmsolver") && !strcmp(cfg->final_sigmas_type, "zero"))
            return bad(c, s, EM_ERR_FORMAT, "final_sigmas_type", "zero",
                       "is not supported by algorithm_type dpmsolver (diffusers refuses it too)");
        if (!strcmp(cfg->algorithm_type, "dpmsolver") && !strcmp(cfg->prediction_type, "flow_prediction"))
            return bad(c, s, EM_ERR_UNSUPPORTED, "prediction_type", "flow_prediction",
                       "needs algorithm_type dpmsolver++");
        if (!(cfg->flow_shift > 0)) {
            snprintf(num, sizeof num, "%g", cfg->flow_shift);
            return bad(c, s, EM_ERR_FORMAT, "flow_shift", num, "must be positive");
        }
        CHECK_STR("time_shift_type", time_shift_type, "exponential", "linear");
    }
    return EM_OK;
}

em_status em_sched_cfg_resolve(em_ctx *c, em_scheduler *s) {
    em_sched_cfg_clear(&s->cfg);
    defaults(s->kind, &s->cfg);
    em_status e = read_fields(c, s);
    return e ? e : check_values(c, s);
}

/* ---- creation ---- */

static em_scheduler *create(em_ctx *c, json_t *json, em_scheduler_kind kind, const char *origin) {
    em_scheduler *s = calloc(1, sizeof *s);
    if (!s) {
        json_decref(json);
        EM_FAIL(c, EM_ERR_OOM, "scheduler_config", "out of memory");
        return NULL;
    }
    s->json = json;
    s->kind = kind;
    s->step_index = -1;
    s->begin_index = -1;
    snprintf(s->origin, sizeof s->origin, "%s", origin ? origin : "scheduler_config.json");
    if (em_sched_cfg_resolve(c, s) || em_sched_init_tables(c, s)) {
        em_scheduler_free(s);
        return NULL;
    }
    return s;
}

static em_scheduler *from_root(em_ctx *c, json_t *root, const char *origin) {
    json_t *cls = json_object_get(root, "_class_name");
    em_scheduler_kind kind;
    if (!json_is_string(cls)) {
        EM_FAIL(c, EM_ERR_FORMAT, "scheduler_config", "%s: \"_class_name\" is %s, expected a "
                "scheduler class name", origin, cls ? em_cfg_kind(cls) : "missing");
        json_decref(root);
        return NULL;
    }
    if (!em_scheduler_kind_parse(json_string_value(cls), &kind) ||
        !strcmp(json_string_value(cls), SHORT[kind])) {
        EM_FAIL(c, EM_ERR_UNSUPPORTED, "scheduler_config",
                "%s: \"_class_name\" = %s is not a supported scheduler (DDPMScheduler, "
                "DDIMScheduler, PNDMScheduler, EulerDiscreteScheduler, "
                "EulerAncestralDiscreteScheduler, DPMSolverMultistepScheduler, "
                "FlowMatchEulerDiscreteScheduler)", origin, json_string_value(cls));
        json_decref(root);
        return NULL;
    }
    return create(c, root, kind, origin);
}

/* Python's json writes -Infinity, Infinity and NaN bare, which JSON (and jansson) refuses: a
 * copy of the text with those tokens, outside strings, quoted. NULL when out of memory. */
static char *quote_nonfinite(const char *text, size_t n, size_t *out_len) {
    static const char *const TOK[] = {"-Infinity", "Infinity", "NaN"};
    char *out = malloc(2 * n + 1), *o = out;
    if (!out) return NULL;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char ch = text[i];
        if (in_str) {
            if (ch == '\\' && i + 1 < n) *o++ = text[i++];
            else if (ch == '"') in_str = false;
            *o++ = text[i];
            continue;
        }
        if (ch == '"') in_str = true;
        size_t k = 0;
        for (; k < 3; k++) {
            size_t l = strlen(TOK[k]);
            if (n - i >= l && !memcmp(text + i, TOK[k], l)) break;
        }
        if (k < 3) {
            size_t l = strlen(TOK[k]);
            *o++ = '"';
            memcpy(o, TOK[k], l);
            o += l;
            *o++ = '"';
            i += l - 1;
            continue;
        }
        *o++ = ch;
    }
    *o = 0;
    *out_len = (size_t)(o - out);
    return out;
}

static em_scheduler *from_text(em_ctx *c, const char *text, size_t n, const char *origin) {
    size_t len;
    char *q = quote_nonfinite(text, n, &len);
    if (!q) {
        EM_FAIL(c, EM_ERR_OOM, "scheduler_config", "out of memory");
        return NULL;
    }
    json_t *root;
    em_status st = em_cfg_parse_text(c, "scheduler_config", q, len, origin, &root);
    free(q);
    return st ? NULL : from_root(c, root, origin);
}

em_scheduler *em_scheduler_from_json(em_ctx *c, const char *text, const char *origin) {
    if (!c || c->err.status) return NULL;
    if (!text) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, "scheduler_config", "the JSON text is NULL");
        return NULL;
    }
    return from_text(c, text, strlen(text), origin ? origin : "scheduler_config.json");
}

em_scheduler *em_scheduler_from_file(em_ctx *c, const char *path) {
    if (!c || c->err.status) return NULL;
    if (!path || !*path) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, "scheduler_config", "path is NULL or empty");
        return NULL;
    }
    struct stat sb;
    size_t pn = strlen(path) + sizeof "/scheduler_config.json";
    char *p = malloc(pn);
    if (!p) {
        EM_FAIL(c, EM_ERR_OOM, "scheduler_config", "out of memory");
        return NULL;
    }
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(p, pn, "%s/scheduler_config.json", path);
    else snprintf(p, pn, "%s", path);
    size_t len = 0;
    char *text = em_file_read(c, "scheduler_config", p, (size_t)16 << 20, &len, NULL);
    em_scheduler *s = text ? from_text(c, text, len, p) : NULL;
    free(text);
    free(p);
    return s;
}

em_scheduler *em_scheduler_from_config(em_ctx *c, const em_scheduler *src, em_scheduler_kind kind) {
    if (!c || c->err.status) return NULL;
    if (!src || (unsigned)kind >= EM_SCHED_KIND_COUNT) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, "scheduler_from_config", "%s",
                src ? "unknown scheduler kind" : "the source scheduler is NULL");
        return NULL;
    }
    /* diffusers' from_config drops the fields src took from its own defaults (the config's
     * _use_default_values) and those only src's class has: what carries over is the file's
     * keys, so kind reads the same JSON with its own defaults */
    json_t *j = json_deep_copy(src->json);
    if (!j) {
        EM_FAIL(c, EM_ERR_OOM, "scheduler_from_config", "out of memory");
        return NULL;
    }
    json_object_set_new(j, "_class_name", json_string(CLASS[kind]));
    char origin[300];
    snprintf(origin, sizeof origin, "%s (as %s)", src->origin, CLASS[kind]);
    return create(c, j, kind, origin);
}

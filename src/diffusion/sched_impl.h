/*
 * The schedulers' private state (ember/scheduler.h): the resolved configuration (sched_config.c),
 * the tables (sched_tables.c) and the step of each family (sched_alpha.c: DDPM, DDIM, PNDM;
 * sched_sigma.c: Euler, Euler ancestral, DPM-Solver, FlowMatch).
 */
#ifndef EMBER_SCHED_IMPL_H
#define EMBER_SCHED_IMPL_H

#include <jansson.h>

#include "core/tensor_impl.h"
#include "ember/ops.h"
#include "ember/scheduler.h"

/* Every field any supported class has; a class reads the ones it has (sched_config.c's table)
 * and the others keep values that nothing reads. Strings are the JSON values. */
typedef struct em_sched_cfg {
    int64_t num_train_timesteps;
    double beta_start, beta_end;
    char beta_schedule[32];
    float *trained_betas; /* owned, n_trained_betas values, or NULL */
    int64_t n_trained_betas;
    char prediction_type[32];
    char timestep_spacing[16];
    int64_t steps_offset;
    bool clip_sample;
    double clip_sample_range;
    bool set_alpha_to_one;
    bool thresholding;
    double dynamic_thresholding_ratio, sample_max_value;
    char variance_type[32]; /* "" for null (DPM) */
    bool skip_prk_steps;
    bool rescale_betas_zero_snr;
    char interpolation_type[16];
    bool use_karras_sigmas, use_exponential_sigmas, use_beta_sigmas;
    bool has_sigma_min, has_sigma_max;
    double sigma_min, sigma_max;
    char timestep_type[16];
    char final_sigmas_type[16];
    int64_t solver_order;
    char algorithm_type[32];
    char solver_type[16];
    bool lower_order_final, euler_at_final, use_lu_lambdas, use_flow_sigmas;
    double flow_shift;
    double lambda_min_clipped;
    bool use_dynamic_shifting;
    char time_shift_type[16];
    double shift, base_shift, max_shift;
    int64_t base_image_seq_len, max_image_seq_len;
    bool invert_sigmas;
    bool has_shift_terminal;
    double shift_terminal;
    bool stochastic_sampling;
} em_sched_cfg;

#define EM_SCHED_HISTORY 4 /* PNDM keeps 4 model outputs, DPM-Solver up to 3 */

struct em_scheduler {
    em_scheduler_kind kind;
    json_t *json; /* the configuration as given (other classes' keys included), owned */
    em_sched_cfg cfg;
    char origin[256];

    /* tables */
    float *betas, *alphas_cumprod; /* num_train_timesteps values (NULL for FlowMatch) */
    float final_alpha_cumprod;     /* DDIM, PNDM */
    double *timesteps;             /* n_timesteps */
    int64_t n_timesteps;
    float *sigmas; /* n_timesteps + 1 (sigma schedulers) */
    int64_t n_sigmas;
    double init_noise_sigma;
    int64_t num_inference_steps; /* 0 before set_timesteps */
    float flow_sigma_min, flow_sigma_max;
    const float *given_sigmas; /* FlowMatch: set_timesteps(sigmas=...)'s, during the call only */

    /* step state */
    double eta;
    int64_t step_index; /* -1 until the first step or scale_model_input */
    int64_t begin_index; /* set_begin_index (img2img's first step), -1: none; sigma schedulers
                            start there instead of looking the first timestep up */
    int64_t counter;    /* PNDM */
    em_tensor *cur_sample;                    /* PNDM, retained */
    em_tensor *cur_model_output;              /* PNDM's Runge-Kutta sum, retained (or NULL: 0) */
    int64_t n_prk;                            /* PNDM: the first n_prk timesteps are Runge-Kutta */
    em_tensor *history[EM_SCHED_HISTORY];     /* PNDM ets / DPM model outputs, newest last */
    int n_history;
    int lower_order_nums; /* DPM */
};

/* sched_config.c */
/* Reads the fields of s->kind from s->json into s->cfg (defaults first) and checks them. */
em_status em_sched_cfg_resolve(em_ctx *c, em_scheduler *s);
void em_sched_cfg_clear(em_sched_cfg *cfg);

/* sched_tables.c */
em_status em_sched_init_tables(em_ctx *c, em_scheduler *s);
em_status em_sched_timesteps(em_ctx *c, em_scheduler *s, int64_t n, double mu);
void em_sched_history_clear(em_scheduler *s);
/* Retains t as the newest, dropping the oldest beyond `cap` entries. */
void em_sched_history_push(em_scheduler *s, em_tensor *t, int cap);

/* sched_alpha.c / sched_sigma.c: model_output and sample are checked f32 of one shape */
em_tensor *em_sched_step_alpha(em_ctx *c, const char *file, int line, em_scheduler *s,
                               em_tensor *mo, double t, em_tensor *x, em_torch_generator *g);
em_tensor *em_sched_step_sigma(em_ctx *c, const char *file, int line, em_scheduler *s,
                               em_tensor *mo, double t, em_tensor *x, em_torch_generator *g);
/* The step index for timestep t as diffusers finds it (the second match when t repeats); -1
 * with the error in c when t is not in the schedule. */
int64_t em_sched_index_for(em_ctx *c, const char *file, int line, em_scheduler *s, double t);
/* The step index a sigma scheduler starts from at timestep t: its begin index when set, else
 * em_sched_index_for(t). */
int64_t em_sched_first_index(em_ctx *c, const char *file, int line, em_scheduler *s, double t);
/* DPM-Solver's _sigma_to_alpha_sigma_t (sched_sigma.c) */
void em_sched_dpm_alpha_sigma(const em_sched_cfg *cfg, float sigma, float *alpha_t, float *sigma_t);
/* sched_threshold.c: diffusers' _threshold_sample of a predicted x0 (thresholding: true) */
em_tensor *em_sched_threshold(em_ctx *c, const char *file, int line, const em_sched_cfg *cfg,
                              em_tensor *x0);
/* torch.randn(like x's shape) from g, on x's device; refuses g == NULL naming the class. */
em_tensor *em_sched_noise(em_ctx *c, const char *file, int line, em_scheduler *s, em_tensor *x,
                          em_torch_generator *g);
/* beta_ppf.c: the quantile of the Beta(a, b) distribution at p (scipy.stats.beta.ppf), to
 * double precision; NaN for p outside [0, 1] or a, b not positive. */
double em_beta_ppf(double p, double a, double b);

#endif

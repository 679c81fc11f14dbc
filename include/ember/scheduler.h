/*
 * ember/scheduler.h — diffusers' noise schedulers, with diffusers' numbers.
 *
 * A scheduler is made from a diffusers `scheduler_config.json` (the `_class_name` picks the
 * class; every field the class has is honoured, with the class's own defaults for the absent
 * ones; keys the class does not have are ignored, as diffusers ignores them). Its tables
 * (alphas_cumprod, sigmas, timesteps) equal diffusers' in float32; `step` computes the previous
 * sample with Ember's eager ops on the sample's device, drawing any noise (DDPM, DDIM with
 * eta > 0, Euler ancestral) from a torch-compatible generator (ember/torch_rng.h) on the host:
 *
 *     em_scheduler *s = em_scheduler_from_file(c, "sd15/scheduler/scheduler_config.json");
 *     em_scheduler_set_timesteps(c, s, 30);
 *     em_tensor *x = em_mul_scalar(c, em_torch_randn(c, g, EM_SHAPE(1, 4, 64, 64), dev),
 *                                  em_scheduler_init_noise_sigma(s));
 *     int64_t n; const double *ts = em_scheduler_timesteps(s, &n);
 *     for (int64_t i = 0; i < n; i++) {
 *         em_tensor *in = em_scheduler_scale_model_input(c, s, x, ts[i]);
 *         em_tensor *eps = my_unet(c, in, ts[i]);
 *         x = em_scheduler_step(c, s, eps, ts[i], x, g);
 *     }
 *
 * Classes: DDPMScheduler, DDIMScheduler, PNDMScheduler (Runge-Kutta warm-up, PLMS), EulerDiscrete-
 * Scheduler, EulerAncestralDiscreteScheduler, DPMSolverMultistepScheduler (DPM-Solver++ and
 * DPM-Solver, orders 1-3, midpoint or heun, Karras or exponential sigmas) and FlowMatchEuler-
 * DiscreteScheduler. What is refused, by field and value: thresholding, learned variances,
 * Beta sigmas (scipy's), the SDE variants of DPM-Solver, and a value diffusers itself rejects.
 * A scheduler is not thread-safe (step keeps state: the step index, the multistep history).
 */
#ifndef EMBER_SCHEDULER_H
#define EMBER_SCHEDULER_H

#include "ember/torch_rng.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_scheduler em_scheduler;

/** The scheduler classes. Append-only. */
typedef enum em_scheduler_kind {
    EM_SCHED_DDPM = 0,
    EM_SCHED_DDIM = 1,
    EM_SCHED_PNDM = 2,
    EM_SCHED_EULER = 3,
    EM_SCHED_EULER_ANCESTRAL = 4,
    EM_SCHED_DPM_MULTISTEP = 5,
    EM_SCHED_FLOW_MATCH_EULER = 6,
    EM_SCHED_KIND_COUNT = 7
} em_scheduler_kind;

/** diffusers' class name ("EulerDiscreteScheduler"); "?" for an invalid value. */
EM_API const char *em_scheduler_kind_class(em_scheduler_kind k);
/** The short name `ember image --scheduler` takes: ddpm ddim pndm euler euler-a dpm++2m
 *  flow-euler. */
EM_API const char *em_scheduler_kind_name(em_scheduler_kind k);
/** Parses a class name or a short name. False if unknown. */
EM_API bool em_scheduler_kind_parse(const char *s, em_scheduler_kind *out);

/**
 * A scheduler from the text of a scheduler_config.json (`origin` names it in errors; may be
 * NULL). Invalid JSON, an unknown or missing `_class_name`, a field of the wrong type and an
 * unsupported value are refused with EM_ERR_FORMAT / EM_ERR_UNSUPPORTED naming the field and
 * value. NULL with the error in c. Free with em_scheduler_free.
 */
EM_API em_scheduler *em_scheduler_from_json(em_ctx *c, const char *json_text,
                                            const char *origin);
/** Same, from a file (or from `path`/scheduler_config.json when `path` is a folder). */
EM_API em_scheduler *em_scheduler_from_file(em_ctx *c, const char *path);
/**
 * A scheduler of class `kind` from another's configuration, as diffusers'
 * `Kind.from_config(src.config)`: the keys of src's file carry over, and kind's own defaults
 * fill the rest (diffusers drops the fields src took from its defaults: an Euler scheduler made
 * from Stable Diffusion 1.5's PNDM config gets Euler's "linspace" spacing, not PNDM's
 * "leading"). src is not changed. NULL with the error in c.
 */
EM_API em_scheduler *em_scheduler_from_config(em_ctx *c, const em_scheduler *src,
                                              em_scheduler_kind kind);
/** NULL is a no-op. Releases the tensors the scheduler keeps (multistep history). */
EM_API void em_scheduler_free(em_scheduler *s);

EM_API em_scheduler_kind em_scheduler_get_kind(const em_scheduler *s);
EM_API int64_t em_scheduler_num_train_timesteps(const em_scheduler *s);

/**
 * Sets the inference schedule of `n` steps (diffusers' set_timesteps) and resets the step
 * state. FlowMatch with use_dynamic_shifting needs a mu: use em_scheduler_set_timesteps_mu.
 * Returns the status (EM_ERR_INVALID_ARG for n < 1 or n above num_train_timesteps where
 * diffusers refuses it).
 */
EM_API em_status em_scheduler_set_timesteps(em_ctx *c, em_scheduler *s, int64_t n);
/** Same with the resolution-dependent shift `mu` (FlowMatch's use_dynamic_shifting, DPM's
 *  flow shift); other schedulers ignore mu. */
EM_API em_status em_scheduler_set_timesteps_mu(em_ctx *c, em_scheduler *s, int64_t n, double mu);
/** FlowMatchEulerDiscreteScheduler.set_timesteps(sigmas=sigmas[0..n), mu=mu): the given
 *  sigmas (in (0, 1], f32 as diffusers casts them) shifted by the config (mu with
 *  use_dynamic_shifting, else shift), then Karras / exponential / beta as configured, timesteps
 *  sigmas * num_train_timesteps; FluxPipeline passes linspace(1, 1 / n, n). Other schedulers:
 *  EM_ERR_UNSUPPORTED. */
EM_API em_status em_scheduler_set_sigmas_mu(em_ctx *c, em_scheduler *s, const float *sigmas,
                                            int64_t n, double mu);

/** The timesteps of the schedule (integers for DDPM, DDIM, PNDM and DPM; float32 values for
 *  Euler, Euler ancestral and FlowMatch), *n set; NULL before set_timesteps. Owned by s. */
EM_API const double *em_scheduler_timesteps(const em_scheduler *s, int64_t *n);
/** The sigmas (timesteps + 1 values, the last the final sigma) of the sigma-based schedulers
 *  (Euler, Euler ancestral, DPM, FlowMatch), *n set; NULL for the others or before
 *  set_timesteps. Owned by s. */
EM_API const float *em_scheduler_sigmas(const em_scheduler *s, int64_t *n);
/** alphas_cumprod (num_train_timesteps values), *n set; NULL for FlowMatch. Owned by s. */
EM_API const float *em_scheduler_alphas_cumprod(const em_scheduler *s, int64_t *n);
/** The betas, likewise. */
EM_API const float *em_scheduler_betas(const em_scheduler *s, int64_t *n);
/** The factor initial noise is scaled by (1, or the largest sigma for Euler-type schedules). */
EM_API double em_scheduler_init_noise_sigma(const em_scheduler *s);
/** DDIM's eta (default 0: deterministic; > 0 draws noise in step). Ignored by other classes. */
EM_API void em_scheduler_set_eta(em_scheduler *s, double eta);

/**
 * The denoiser's input at timestep t (Euler-type: sample / sqrt(sigma^2 + 1); the others the
 * sample itself). A new tensor in c's scope (or `sample` itself), NULL with the error in c.
 */
#define em_scheduler_scale_model_input(c, ...) em_scheduler_scale_model_input_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_scheduler_scale_model_input_(em_ctx *c, const char *file, int line,
                                                  em_scheduler *s, em_tensor *sample, double t);
/**
 * One denoising step from timestep t (one of em_scheduler_timesteps, in order): the previous
 * sample, f32, on the sample's device, in c's scope. model_output and sample are f32 tensors
 * of one shape on one device. `g` supplies the noise of the steps that draw it (DDPM at t > 0,
 * DDIM with eta > 0, Euler ancestral, FlowMatch's stochastic_sampling); NULL is fine for the
 * others and refused, naming the class, by those. NULL with the error in c (a timestep not in
 * the schedule, set_timesteps not called, mismatched shapes or devices, a dtype other than f32).
 */
#define em_scheduler_step(c, ...) em_scheduler_step_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_scheduler_step_(em_ctx *c, const char *file, int line, em_scheduler *s,
                                     em_tensor *model_output, double t, em_tensor *sample,
                                     em_torch_generator *g);

/**
 * diffusers' set_begin_index(i): the Euler, Euler ancestral and DPM-Solver schedulers take their
 * first step at step index i of the schedule (instead of looking the first timestep up), and
 * add_noise mixes at sigmas[i]. StableDiffusionImg2ImgPipeline calls it with its first kept
 * step. DDPM, DDIM, PNDM and FlowMatch have no begin index in diffusers: EM_ERR_UNSUPPORTED,
 * naming the class. EM_ERR_INVALID_ARG before set_timesteps or for i outside [0, timesteps).
 * set_timesteps clears it.
 */
EM_API em_status em_scheduler_set_begin_index(em_ctx *c, em_scheduler *s, int64_t i);

/**
 * diffusers' add_noise(x, noise, timesteps=[t]) (the forward diffusion to timestep t, a
 * timestep of the schedule): DDPM, DDIM, PNDM: sqrt(alphas_cumprod[t]) * x +
 * sqrt(1 - alphas_cumprod[t]) * noise; Euler and Euler ancestral: x + sigma * noise; DPM-Solver:
 * alpha_t * x + sigma_t * noise; the sigma from the begin index (or the current step index, or
 * the timestep looked up, in diffusers' order). FlowMatch has scale_noise instead:
 * EM_ERR_UNSUPPORTED. x and noise: one shape and dtype on one device; f32, and for DDPM, DDIM and
 * PNDM also bf16 or f16 (the factors rounded to it as diffusers' alphas_cumprod.to(dtype)).
 * DDPM, DDIM and PNDM noise without set_timesteps (as in training); the others need it. A new
 * tensor in c's scope, NULL with the error in c.
 */
#define em_scheduler_add_noise(c, ...) em_scheduler_add_noise_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_scheduler_add_noise_(em_ctx *c, const char *file, int line, em_scheduler *s,
                                          em_tensor *x, em_tensor *noise, double t);

/**
 * em_scheduler_add_noise with a timestep per sample: t[i] noises x[i] (dim 0), as diffusers'
 * add_noise with a timesteps tensor of n (the training step of DDPM). n == 1 is
 * em_scheduler_add_noise; any other n must equal x's dim 0 (EM_ERR_SHAPE). t is read, not kept.
 */
#define em_scheduler_add_noise_batch(c, ...)                                                       \
    em_scheduler_add_noise_batch_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_scheduler_add_noise_batch_(em_ctx *c, const char *file, int line,
                                                em_scheduler *s, em_tensor *x, em_tensor *noise,
                                                const double *t, int64_t n);

#ifdef __cplusplus
}
#endif
#endif

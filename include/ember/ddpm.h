/*
 * ember/ddpm.h — training a UNet2DModel as a DDPM denoiser and saving it as a diffusers
 * DDPMPipeline folder (which DDPMPipeline.from_pretrained and em_pipeline_load both load).
 *
 *     em_unet2d *u = em_unet2d_create(c, cfg_json, strlen(cfg_json), seed, NULL);
 *     em_scheduler *s = em_scheduler_from_json(c, sched_json, NULL);     // DDPMScheduler
 *     em_ddpm_trainer *t = em_ddpm_trainer_create(c, u, s, &adamw, seed);
 *     for (...) em_ddpm_train_step(c, t, x0, NULL, NULL, &loss);   // x0 [N, C, H, W] in [-1, 1]
 *     em_ddpm_pipeline_save(c, u, sched_json, "out/");
 *
 * The step is diffusers' train_unconditional.py step: t ~ U{0..T-1}, noise ~ N(0, 1),
 * x_t = sqrt(alphas_cumprod[t]) x0 + sqrt(1 - alphas_cumprod[t]) noise (DDPMScheduler.add_noise,
 * in f32), loss = F.mse_loss(unet(x_t, t), noise), backward, AdamW step.
 */
#ifndef EMBER_DDPM_H
#define EMBER_DDPM_H

#include "ember/diffusion.h"
#include "ember/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * A UNet2DModel's parameters, fresh models, saving
 * ------------------------------------------------------------------------------------------- */

/** Number of parameters (weight and bias tensors) of the model, UNet2DModel or
 *  UNet2DConditionModel; 0 for NULL. */
EM_API int em_unet2d_param_count(const em_unet2d *u);
/** Parameter i's name as diffusers' state_dict names it ("down_blocks.0.resnets.0.conv1.weight";
 *  an old checkpoint's attention names as the file has them). Owned by the model; NULL when i
 *  is out of range. Parameters come in load order. */
EM_API const char *em_unet2d_param_name(const em_unet2d *u, int i);
/** Parameter i itself: the model's own tensor (borrowed; writing into it, as an optimizer does,
 *  changes the model). NULL when i is out of range. */
EM_API em_tensor *em_unet2d_param(const em_unet2d *u, int i);
/** The parameter named `name`, or NULL. */
EM_API em_tensor *em_unet2d_find_param(const em_unet2d *u, const char *name);

/**
 * A UNet2DModel of the config.json text config_json (n bytes; parsed as em_unet2d_config_parse
 * does, so every supported field works and unsupported ones are refused by name) with freshly
 * initialised weights, drawn from torch.Generator().manual_seed(seed)'s Mersenne Twister with
 * torch's default initialisation of each layer type: convolutions and linears
 * kaiming_uniform_(a=sqrt(5)) weights and U(-1/sqrt(fan_in), 1/sqrt(fan_in)) biases, group
 * norms weight 1 and bias 0, embeddings N(0, 1), a Fourier projection N(0, 1) * 16. The
 * distributions are torch's; the values differ from what torch draws for the same seed (the
 * draw order and uniform sampling are not torch's). o may be NULL (cpu, f32). NULL with the
 * error in c: EM_ERR_INVALID_ARG (NULL config), the errors of em_unet2d_config_parse,
 * EM_ERR_UNSUPPORTED for a UNet2DConditionModel config, EM_ERR_DEVICE, EM_ERR_OOM. The text is
 * kept and written back by em_unet2d_save. Free with em_unet2d_free.
 */
EM_API em_unet2d *em_unet2d_create(em_ctx *c, const char *config_json, size_t n, uint64_t seed,
                                   const em_unet2d_options *o);

/**
 * Writes the model as a diffusers component folder: `dir` (created when missing; its parent
 * must exist) receives config.json (the model's config text, or its folder's config.json, with
 * _class_name "UNet2DModel" and _diffusers_version added when missing) and
 * diffusion_pytorch_model.safetensors (every parameter under its diffusers name, in the model's
 * dtype, metadata format "pt"). EM_ERR_INVALID_ARG (NULL model or folder), EM_ERR_UNSUPPORTED
 * (a UNet2DConditionModel), EM_ERR_IO naming the path that could not be written.
 */
EM_API em_status em_unet2d_save(em_ctx *c, const em_unet2d *u, const char *dir);

/**
 * Writes a DDPMPipeline folder: dir/model_index.json, dir/unet (em_unet2d_save) and
 * dir/scheduler/scheduler_config.json = scheduler_json (a JSON object; _class_name
 * "DDPMScheduler" and _diffusers_version added when missing; NULL: "{}", DDPMScheduler's
 * defaults). The errors of em_unet2d_save, EM_ERR_FORMAT for scheduler JSON that is not an
 * object, EM_ERR_IO naming the path.
 */
EM_API em_status em_ddpm_pipeline_save(em_ctx *c, const em_unet2d *u, const char *scheduler_json,
                                       const char *dir);

/* ---------------------------------------------------------------------------------------------
 * Training (src/train/ddpm_train.c)
 * ------------------------------------------------------------------------------------------- */

typedef struct em_ddpm_trainer em_ddpm_trainer;

/**
 * A DDPM trainer of u (borrowed; must outlive the trainer) with the noise schedule of s (its
 * alphas_cumprod are copied; s may be freed afterwards) and AdamW (o NULL: torch's defaults)
 * over every parameter of u, which are marked as requiring grad. seed seeds the generator that
 * draws noise and timesteps when a step is not given them. NULL with the error in c:
 * EM_ERR_INVALID_ARG (NULL model or scheduler, a UNet2DConditionModel, a class-conditional
 * model, a scheduler without alphas_cumprod such as FlowMatch), the errors of em_adamw_create.
 */
EM_API em_ddpm_trainer *em_ddpm_trainer_create(em_ctx *c, em_unet2d *u, const em_scheduler *s,
                                               const em_adamw_options *o, uint64_t seed);
/** Frees the optimizer and its state (the model stays, its parameters still requiring grad).
 *  NULL is a no-op. */
EM_API void em_ddpm_trainer_free(em_ddpm_trainer *t);
/** The trainer's optimizer (to change the learning rate, read its state). */
EM_API em_optimizer *em_ddpm_trainer_optimizer(const em_ddpm_trainer *t);

/**
 * One training step on the batch x0 [N, in_channels, H, W] (the model's dtype and device,
 * values in [-1, 1]): noise [x0's shape] and timesteps [N] (integer or floating, values in
 * [0, num_train_timesteps)) as given, or drawn when NULL — noise as torch.randn(x0.shape) from
 * the trainer's generator, timesteps uniformly (generator output mod T; not torch.randint's
 * values). *loss (may be NULL) receives the MSE before the update. Returns the status:
 * EM_ERR_SHAPE naming the shapes (x0 not 4-d, noise or timesteps of another shape),
 * EM_ERR_INDEX (a timestep outside the schedule), the errors of the forward, backward and
 * optimizer. On error the parameters may be partly updated.
 */
EM_API em_status em_ddpm_train_step(em_ctx *c, em_ddpm_trainer *t, em_tensor *x0,
                                    em_tensor *noise, em_tensor *timesteps, double *loss);

/**
 * Reads scikit-learn's digits file (sklearn/datasets/data/digits.csv.gz, gzip or plain): one
 * image per line, side*side comma-separated integer pixels 0..16 then the label 0..9 (lines
 * that are empty are skipped). Returns f32 [N, 1, side, side] scaled to [-1, 1] (p / 8 - 1) on
 * the context's device, in the current scope; *labels_out (may be NULL) receives N labels
 * (malloc'd, the caller frees). NULL with the error in c naming the file and line:
 * EM_ERR_NOT_FOUND / EM_ERR_IO (the file), EM_ERR_FORMAT (a row with too few or too many
 * values, a value that is not an integer in range, no rows), EM_ERR_UNSUPPORTED (a gzip file in
 * a build without zlib).
 */
EM_API em_tensor *em_digits_csv_load(em_ctx *c, const char *path, int64_t side,
                                     int64_t **labels_out);

#ifdef __cplusplus
}
#endif
#endif

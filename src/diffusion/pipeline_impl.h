/* Pipeline internals: model_index.json from bytes in memory (for the fuzz target,
 * fuzz/fuzz_model_index.c), the pipeline object, and Stable Diffusion's pieces of the run
 * (pipeline_sd.c) that the loop of pipeline.c calls. */
#ifndef EMBER_DIFFUSION_PIPELINE_IMPL_H
#define EMBER_DIFFUSION_PIPELINE_IMPL_H

#include "ember/clip.h"
#include "ember/compile.h"
#include "ember/diffusion.h"
#include "ember/dit.h"
#include "ember/flux.h"
#include "ember/sd3.h"
#include "ember/t5.h"
#include "ember/torch_rng.h"
#include "ember/vae.h"

struct em_pipeline {
    em_pipeline_index idx;
    em_unet2d *unet; /* NULL for DiTPipeline */
    em_dit *dit;     /* DiTPipeline: the transformer instead of the UNet */
    em_sd3 *sd3;     /* StableDiffusion3Pipeline: the transformer (with tok, te, tok2, te2, vae) */
    em_flux *flux;   /* FluxPipeline: the transformer (with tok, te, tok3, te3, vae) */
    struct em_dist *tp; /* DiTPipeline's tensor-parallel group (em_pipeline_options.tp) */
    struct em_dist *cp; /* DiTPipeline's context-parallel group (em_pipeline_options.cp) */
    em_cp_schedule cp_schedule; /* its attention's schedule (em_pipeline_options.cp_schedule) */
    int cp_ring, cp_ulysses;    /* its degrees (em_pipeline_options.cp_ring_degree, ...) */
    em_scheduler *sched;
    /* StableDiffusionPipeline (NULL otherwise, and in an SDXL refiner, which has only the second
     * encoder) */
    em_clip_tokenizer *tok;
    em_clip_text *te;
    em_vae *vae;     /* Stable Diffusion and DiT */
    /* StableDiffusionXLPipeline's second tokenizer and text encoder (NULL otherwise) */
    em_clip_tokenizer *tok2;
    em_clip_text *te2;
    /* StableDiffusion3Pipeline's T5 (NULL without text_encoder_3: zero T5 embeddings);
     * FluxPipeline's (its tokenizer_2 / text_encoder_2) */
    em_t5_tokenizer *tok3;
    em_t5_encoder *te3;
    em_dtype dtype;     /* the denoiser's (em_pipeline_options.dtype) */
    em_dtype vae_dtype; /* the VAE's: dtype, or f32 for an upcast f16 SDXL VAE */
};

/* x as dtype dt (x itself when it is already; NULL stays NULL), in the current scope: the casts
 * around the half-precision denoiser and VAE. */
static inline em_tensor *pipeline_as(em_ctx *c, em_tensor *x, em_dtype dt) {
    return !x || em_tensor_dtype(x) == dt ? x : em_cast(c, x, dt);
}

/* A text-conditioned UNet pipeline (Stable Diffusion, SDXL and its refiner). */
static inline bool sd_text(const em_pipeline *p) {
    return !p->sd3 && !p->flux && (p->tok || p->tok2);
}

/* CLOCK_MONOTONIC in seconds: the denoising steps' timing. */
double pipeline_now_s(void);
/* After denoising step i of n at timestep t, begun at t0 (pipeline_now_s): rp's progress
 * callback, if any, with the step's seconds (dev synchronised first). False with the error in
 * c, naming op, when the sync fails or the callback stops the run. */
bool pipeline_step_done(em_ctx *c, const em_pipeline_run_params *rp, em_device *dev, int64_t i,
                        int64_t n, double t, double t0, const char *op);

/* em_pipeline_index_load on the text[0..len) of a model_index.json: `file` names it in errors,
 * `dir` is the folder whose component sub-folders are checked. out is zeroed on failure. */
em_status em_pipeline_index_parse(em_ctx *c, const char *text, size_t len, const char *file,
                                  const char *dir, em_pipeline_index *out);

/* The schedule's first step `first` of an image-to-image run (get_timesteps: strength's or
 * denoising_start's), given to the schedulers that take a begin index (Euler, Euler ancestral,
 * DPM-Solver: set_begin_index) (pipeline.c). Returns first, or -1 with the error in c. */
int64_t set_begin(em_ctx *c, em_pipeline *p, int64_t first);

/* Stable Diffusion (pipeline_sd.c). Loads the tokenizer, text encoder and VAE of p->idx onto
 * `device` (NULL: c's). False with the error in c. */
bool sd_load(em_ctx *c, em_pipeline *p, const char *device);
/* Moves the text encoder and VAE to `device` (reloaded from the folder); false with the error. */
bool sd_to(em_ctx *c, em_pipeline *p, const char *device);
void sd_free(em_pipeline *p);
/* The run's checks and shape: the latent shape [1, C, H / f, W / f] (rp's height/width or the
 * UNet's sample_size times the VAE's scale factor f). False with the error in c. */
bool sd_latent_shape(em_ctx *c, const em_pipeline *p, const em_pipeline_run_params *rp,
                     int64_t shape[4]);
/* The prompts' count: the list's, the rows of prompt_embeds, or 1. */
int64_t sd_prompts(const em_pipeline_run_params *rp);
/* The run's batch B: (prompts ? num_prompts : prompt_embeds' rows or 1) *
 * num_images_per_prompt (checked before). */
int64_t sd_batch(const em_pipeline_run_params *rp);
/* rp's prompt_embeds / negative_prompt_embeds: only Stable Diffusion's, without a prompt,
 * shaped [n, L, cross_attention_dim] f32 (the negatives' alike), negative prompts counted as
 * the rows. False with the error in c. */
bool sd_check_prompt_embeds(em_ctx *c, const em_pipeline *p, const em_pipeline_run_params *rp);
/* The run's texts, malloc'd (free it; NULL with the error): n negative prompts (NULL ones "")
 * then the n prompts, n = num_prompts or 1. */
const char **sd_prompt_texts(em_ctx *c, const em_pipeline_run_params *rp);
/* encode_prompt: [negatives; prompts] embeddings (guidance > 1) or the prompts', each row
 * repeated num_images_per_prompt times ([2B or B, L, D]), on the UNet's device, in the current
 * scope. */
em_tensor *sd_prompt_embeds(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp);
/* vae.decode(latents / scaling_factor): the images [B, 3, H, W] in [-1, 1], current scope; in
 * tiles (the VAE's default tiling) when `tiled`, one image at a time when `sliced`. */
em_tensor *sd_decode(em_ctx *c, em_pipeline *p, em_tensor *latents, bool tiled, bool sliced);
/* StableDiffusionImg2ImgPipeline.prepare_latents: the init image (f32 [1, H, W, 3] in [0, 1];
 * height / width, when not 0, must equal H / W) normalised to [-1, 1], encoded by the VAE (in
 * its default tiles when `tiled`, as diffusers' vae.enable_tiling() encodes), a
 * posterior sample drawn from g, times scaling_factor, repeated `batch` times, then add_noise
 * with noise of the batch's shape drawn from g at timestep t. The latents
 * [batch, C, H / f, W / f] on the UNet's device in the current scope, or NULL with the error. */
em_tensor *sd_image_latents(em_ctx *c, em_pipeline *p, em_tensor *image, int64_t height,
                            int64_t width, int64_t batch, em_torch_generator *g, double t,
                            bool tiled);
/* prepare_latents' tail, shared by the encoded init image (sd_image_latents) and SDXL's given
 * image_latents: z ([1 or batch, C, h, w], a row per generator when there are several) repeated
 * to `batch` rows, moved to the UNet's device and noised at timestep t with one draw from g of
 * the batch's shape (add_noise); g NULL: not noised (denoising_start's hand-over). The latents in
 * the current scope, or NULL with the error in c. */
em_tensor *noised_latents(em_ctx *c, em_pipeline *p, em_tensor *z, int64_t batch,
                          em_torch_generator *g, double t);
/* VaeImageProcessor.preprocess of an init image (f32 [1, H, W, 3] in [0, 1], checked as
 * sd_image_latents does): [1, 3, H, W] in [-1, 1] on the VAE's device, current scope; NULL with
 * the error. */
em_tensor *sd_image_input(em_ctx *c, em_pipeline *p, em_tensor *image, int64_t height,
                          int64_t width);
/* _encode_vae_image: vae.encode(x) (in tiles when `tiled`), the posterior's sample drawn from g
 * (rows > 1: x's one image sampled `rows` times, row i from a list's generator i), times
 * scaling_factor; on the VAE's device, current scope. */
em_tensor *sd_encode_sample(em_ctx *c, em_pipeline *p, em_tensor *x, em_torch_generator *g,
                            bool tiled, int64_t rows);
/* StableDiffusionInpaintPipeline's tensors (pipeline_inpaint.c), on the UNet's device: with a
 * 9-channel UNet, mask and masked (the masked image's latents) are concatenated to the scaled
 * model input (rows as the model input's: doubled under guidance); with a 4-channel one, after
 * every step the latents outside mask1 are put back from image_latents, noised to the next
 * timestep with noise. References, released by sd_inpaint_free. */
typedef struct sd_inpaint {
    bool nine;
    em_tensor *mask, *masked;
    em_tensor *mask1, *image_latents, *noise;
} sd_inpaint;
/* prepare_latents and prepare_mask_latents for rp->image and rp->mask_image at the schedule's
 * step `first` (t its timestep; strength 1: pure noise): the initial latents [B, C, h, w] (a
 * reference) and *ip filled, drawing from g in diffusers' order. NULL with the error. */
em_tensor *sd_inpaint_prepare(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp,
                              em_torch_generator *g, double t, double strength, bool cfg,
                              sd_inpaint *ip);
/* The 4-channel blend after the step at schedule position i of n (ts the run's timesteps from
 * its first): x (a reference this takes over) -> the blended latents (a reference). */
em_tensor *sd_inpaint_blend(em_ctx *c, em_pipeline *p, const sd_inpaint *ip, em_tensor *x,
                            const double *ts, int64_t i, int64_t n);
void sd_inpaint_free(sd_inpaint *ip);
/* StableDiffusionXLPipeline (pipeline_sdxl.c). Loads tokenizer_2 and text_encoder_2 onto
 * `device` and checks them against the first encoder and the UNet (text_time, whose
 * text_embeds width is text_encoder_2's projection_dim; cross_attention_dim the two hidden sizes
 * together); false with the error in c naming the folder and both numbers. */
bool sdxl_load(em_ctx *c, em_pipeline *p, const char *device);
/* text_encoder_2 reloaded onto `device` (swapped in only on success); false with the error. */
bool sdxl_to(em_ctx *c, em_pipeline *p, const char *device);
/* StableDiffusionXLPipeline.encode_prompt and _get_add_time_ids: the prompt embeddings
 * ([negatives; prompts] under guidance, else the prompts'; each row repeated
 * num_images_per_prompt times) on the UNet's device, and in *added the pooled text_embeds and
 * the time ids (height, width, 0, 0, height, width) of every row, all in the current scope.
 * NULL with the error in c. */
em_tensor *sdxl_prompt_embeds(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp,
                              em_unet2d_added_cond *added);
/* The second prompts (prompt_2, negative_prompt_2 and their lists): only for SDXL, strings
 * without prompts, lists (without NULL entries) with them. False with the error in c. */
bool sdxl_check_prompts_2(em_ctx *c, const em_pipeline *p, const em_pipeline_run_params *rp);
/* The texts of the second tokenizer / text encoder (SDXL's and SD3's), malloc'd like `text`
 * (sd_prompt_texts' n negatives then n prompts): encode_prompt's `prompt_2 = prompt_2 or
 * prompt` and `negative_prompt_2 = negative_prompt_2 or negative_prompt` (a string "" falls
 * back, a list is taken whole). NULL with the error. */
const char **sdxl_second_texts(em_ctx *c, const em_pipeline_run_params *rp,
                               const char *const *text, int64_t n);
/* SDXL's hand-over (pipeline_sdxl.c): get_timesteps with denoising_start — the first step of the
 * timesteps below the cutoff (begin index set), or -1 with the error when none is; the count of
 * steps from `first` at or above denoising_end's cutoff; and prepare_latents for
 * rp->image_latents (checked, repeated over the batch, noised at t when add_noise), NULL with
 * the error. */
int64_t sdxl_start_step(em_ctx *c, em_pipeline *p, double denoising_start);
int64_t sdxl_end_count(const em_pipeline *p, int64_t first, double denoising_end);
em_tensor *sdxl_given_latents(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp,
                              em_torch_generator *g, double t, bool add_noise);
/* StableDiffusion3Pipeline (sd3_pipeline.c): its transformer, VAE, tokenizers and text
 * encoders loaded onto `device` and checked against each other; false with the error (moving
 * the pipeline: flow_reload with sd3_load). sd3_pipeline_run is the run of
 * em_pipeline_run (its own checks: the options of other pipelines refused by name). */
bool sd3_load(em_ctx *c, em_pipeline *p, const char *device);
em_tensor *sd3_pipeline_run(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp);
/* The flow-matching transformer pipelines' shared pieces (pipeline_flow.c), in the current scope,
 * NULL / false with the error in c. flow_clip_encode: em_clip_text_forward of texts[0..n)
 * tokenized (padded to model_max_length) on the encoder's device, hidden_states[hidden_index]
 * kept (0: none). flow_t5_embeds: text_encoder(ids)[0] of the ids padded and truncated to msl
 * (no attention mask, as diffusers passes none), moved to dev. flow_calculate_shift: diffusers'
 * calculate_shift over the scheduler config's base/max image_seq_len and shifts.
 * flow_given_latents: rp's initial latents checked against shape (f32) and moved to dev.
 * flow_decode: vae.decode(x / scaling_factor + shift_factor) postprocessed to [B, H, W, 3] in
 * [0, 1] on the CPU (one image at a time when sliced). */
em_status flow_clip_encode(em_ctx *c, const em_clip_tokenizer *tok, const em_clip_text *te,
                           const char *const *texts, int n, int hidden_index,
                           em_clip_text_output *o);
em_tensor *flow_t5_embeds(em_ctx *c, const em_t5_tokenizer *tok, const em_t5_encoder *te,
                          const char *const *texts, int n, int64_t msl, em_device *dev);
bool flow_calculate_shift(em_ctx *c, const em_pipeline *p, double image_seq_len, double *mu);
em_tensor *flow_given_latents(em_ctx *c, const em_pipeline *p, em_tensor *l, int ndim,
                              const int64_t *shape, em_device *dev);
em_tensor *flow_decode(em_ctx *c, em_pipeline *p, em_tensor *x, bool sliced);
/* The run's common checks: `bad` (an option the caller refuses, named) or the options of the
 * other pipelines refused by name (EM_ERR_UNSUPPORTED); the second prompts; a prompt; a seed
 * per image; sizes and max_sequence_length (0 to 512) in range. False with the error in c. */
bool flow_check_run(em_ctx *c, const em_pipeline *p, const em_pipeline_run_params *rp,
                    const char *bad);
/* The run's prologue: its generator (rp->seeds' list, else rp->seed) in *g and its texts,
 * sd_prompt_texts' n negatives then the n prompts in *texts and sdxl_second_texts' ones for the
 * second encoder (`prompt_2 or prompt`, `negative_prompt_2 or negative_prompt`) in *texts2 (the
 * caller frees both arrays and g). False with the error in c, nothing to free. */
bool flow_run_begin(em_ctx *c, const em_pipeline_run_params *rp, int64_t n,
                    em_torch_generator **g, const char ***texts, const char ***texts2);
/* .repeat(1, num_images_per_prompt, ...).view(...) of the prompt embeddings: each row of *ctx
 * and *pooled per times, when per > 1 and *ctx is set. */
void flow_repeat_embeds(em_ctx *c, int64_t per, em_tensor **ctx, em_tensor **pooled);
/* The model's prediction (f32, x's shape) for the f32 latents x at timestep t, through the
 * compiled step f when not NULL, in the current scope; NULL with the error. */
typedef em_tensor *(*flow_pred_fn)(em_ctx *c, void *user, em_compiled *f, em_tensor *x,
                                   double t);
/* The denoising loop of the transformer pipelines over the scheduler's timesteps from x (a
 * reference this takes over): pred, then the scheduler's step (noise from g), the progress
 * callback with dev synchronised. f (rp->compile's step; NULL with rp->compile means its
 * creation failed: the error is in c) is freed after, its stats in rp->compile_stats. The final
 * latents (a reference) or NULL with the error. */
em_tensor *flow_denoise(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp,
                        em_torch_generator *g, em_tensor *x, em_device *dev, flow_pred_fn pred,
                        void *user, em_compiled *f);
/* full([rows], value) f32 on dev: the timesteps expanded over the rows */
em_tensor *flow_full(em_ctx *c, em_device *dev, int64_t rows, float value);
/* pipe.to(device) of a transformer pipeline: its components reloaded by `load` (sd3_load,
 * flux_load) onto device and swapped in only on success; false with the error. */
bool flow_reload(em_ctx *c, em_pipeline *p, const char *device,
                 bool (*load)(em_ctx *, em_pipeline *, const char *));
/* FluxPipeline (flux_pipeline.c), as sd3_load / sd3_pipeline_run. */
bool flux_load(em_ctx *c, em_pipeline *p, const char *device);
em_tensor *flux_pipeline_run(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp);
/* DiTPipeline.__call__'s denoising loop from the initial latents x ([B, C, H, W] on the
 * transformer's device, B the number of rp's class labels; a reference this takes over):
 * classifier-free guidance on a doubled batch when guidance > 1, as diffusers runs it. Returns
 * the final latents [B, C, H, W] (a reference) or NULL with the error in c. The transformer runs
 * in dt (its weights' dtype), the latents and the scheduler in f32. */
em_tensor *dit_pipeline_denoise(em_ctx *c, em_dit *dit, em_dtype dt, em_scheduler *s,
                                const em_pipeline_run_params *rp, em_torch_generator *g,
                                em_tensor *x);

#endif

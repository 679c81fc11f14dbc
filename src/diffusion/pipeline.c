/* The pipeline object of DDPMPipeline / DDIMPipeline / StableDiffusionPipeline / DiTPipeline: a
 * folder's denoiser and scheduler (and SD's text encoder and VAE, pipeline_sd.c; DiT's loop is
 * in dit_pipeline.c), moved and swapped as diffusers' pipe.to / Scheduler.from_config, and the
 * denoising loop of the pipelines' __call__ with the generator draws in diffusers' order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "diffusion/pipeline_impl.h"
#include "ember/dist.h"

#define OP "pipeline"

void em_pipeline_free(em_pipeline *p) {
    if (!p) return;
    em_unet2d_free(p->unet);
    em_dit_free(p->dit);
    em_sd3_free(p->sd3);
    em_flux_free(p->flux);
    em_scheduler_free(p->sched);
    sd_free(p); /* the text encoder, tokenizer and the VAE (SD's or DiT's) */
    em_pipeline_index_free(&p->idx);
    free(p);
}

em_pipeline_options em_pipeline_default_options(void) {
    em_pipeline_options o = {.device = NULL, .dtype = EM_F32, .tp = NULL, .cp = NULL,
                             .cp_schedule = EM_CP_RING};
    return o;
}

/* The VAE's dtype: the pipeline's, except an f16 VAE with force_upcast in the SDXL pipelines,
 * which diffusers decodes in f32 (StableDiffusionXLPipeline's needs_upcasting / upcast_vae). */
static bool pick_vae_dtype(em_ctx *c, em_pipeline *p) {
    p->vae_dtype = p->dtype;
    if (p->dtype != EM_F16 || p->idx.pipeline != EM_PIPELINE_STABLE_DIFFUSION_XL) return true;
    em_vae_config cfg;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", p->idx.vae_dir);
    if (em_vae_config_load(c, path, &cfg) != EM_OK) return false;
    if (cfg.force_upcast) p->vae_dtype = EM_F32;
    return true;
}

em_pipeline *em_pipeline_load(em_ctx *c, const char *dir, const em_pipeline_options *o) {
    if (!c || em_ctx_status(c)) return NULL;
    em_pipeline *p = calloc(1, sizeof *p);
    if (!p) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    p->dtype = o ? o->dtype : EM_F32;
    if (p->dtype != EM_F32 && p->dtype != EM_BF16 && p->dtype != EM_F16) {
        em_ctx_fail(c, EM_ERR_DTYPE, OP, "%s: a pipeline runs in f32, bf16 or f16, not %s", dir,
                    em_dtype_name(p->dtype));
        goto fail;
    }
    if (em_pipeline_index_load(c, dir, &p->idx) != EM_OK || !pick_vae_dtype(c, p)) goto fail;
    const char *dev = o ? o->device : NULL;
    p->tp = o && o->tp && em_dist_world_size(o->tp) > 1 ? o->tp : NULL;
    p->cp = o && o->cp && em_dist_world_size(o->cp) > 1 ? o->cp : NULL;
    p->cp_schedule = o ? o->cp_schedule : EM_CP_RING;
    p->cp_ring = p->cp && o ? o->cp_ring_degree : 0;
    p->cp_ulysses = p->cp && o ? o->cp_ulysses_degree : 0;
    bool mmdit = p->idx.pipeline == EM_PIPELINE_STABLE_DIFFUSION_3 ||
                 p->idx.pipeline == EM_PIPELINE_FLUX;
    if ((p->tp || p->cp) && p->idx.pipeline != EM_PIPELINE_DIT && !mmdit) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP, "%s parallelism (degree %d): done for the "
                    "transformers of DiTPipeline, StableDiffusion3Pipeline and FluxPipeline "
                    "only, not for %s (%s)", p->tp ? "tensor" : "context",
                    em_dist_world_size(p->tp ? p->tp : p->cp), p->idx.class_name, dir);
        goto fail;
    }
    if (p->idx.pipeline == EM_PIPELINE_DIT) {
        if (!(p->dit = em_dit_load_tp(c, p->idx.transformer_dir, dev, p->dtype, p->tp)) ||
            em_dit_set_context_parallel(c, p->dit, p->cp) != EM_OK ||
            em_dit_set_cp_schedule(c, p->dit, p->cp_schedule) != EM_OK ||
            em_dit_set_cp_degrees(c, p->dit, p->cp_ring, p->cp_ulysses) != EM_OK ||
            !(p->vae = em_vae_load(c, p->idx.vae_dir, em_device_name(em_dit_device(p->dit)),
                                   p->vae_dtype)))
            goto fail;
    } else if (p->idx.pipeline == EM_PIPELINE_STABLE_DIFFUSION_3) {
        if (!sd3_load(c, p, dev)) goto fail;
    } else if (p->idx.pipeline == EM_PIPELINE_FLUX) {
        if (!flux_load(c, p, dev)) goto fail;
    } else {
        em_unet2d_options uo = em_unet2d_default_options();
        uo.device = dev;
        uo.dtype = p->dtype;
        if (!(p->unet = em_pipeline_load_unet(c, &p->idx, &uo))) goto fail;
    }
    if (!(p->sched = em_scheduler_from_file(c, p->idx.scheduler_config))) goto fail;
    /* diffusers' DDIMPipeline.__init__: "make sure scheduler can always be converted to DDIM" */
    if (p->idx.pipeline == EM_PIPELINE_DDIM && em_scheduler_get_kind(p->sched) != EM_SCHED_DDIM &&
        em_pipeline_set_scheduler(c, p, EM_SCHED_DDIM) != EM_OK)
        goto fail;
    if ((p->idx.pipeline == EM_PIPELINE_STABLE_DIFFUSION ||
         p->idx.pipeline == EM_PIPELINE_STABLE_DIFFUSION_XL) && !sd_load(c, p, dev))
        goto fail;
    return p;
fail:
    em_pipeline_free(p);
    return NULL;
}

em_status em_pipeline_to(em_ctx *c, em_pipeline *p, const char *device) {
    if (!c || em_ctx_status(c)) return c ? em_ctx_status(c) : EM_ERR_INVALID_ARG;
    if (!p || !device) return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "pipeline or device is NULL");
    em_device *dev = em_device_get(c, device);
    if (!dev) return em_ctx_status(c);
    if (dev == em_pipeline_device(p)) return EM_OK;
    if (p->sd3 || p->flux)
        return flow_reload(c, p, device, p->sd3 ? sd3_load : flux_load) ? EM_OK
                                                                        : em_ctx_status(c);
    if (p->dit) {
        em_dit *d = em_dit_load_tp(c, p->idx.transformer_dir, device, p->dtype, p->tp);
        if (d && (em_dit_set_context_parallel(c, d, p->cp) != EM_OK ||
                  em_dit_set_cp_schedule(c, d, p->cp_schedule) != EM_OK ||
                  em_dit_set_cp_degrees(c, d, p->cp_ring, p->cp_ulysses) != EM_OK)) {
            em_dit_free(d);
            return em_ctx_status(c);
        }
        em_vae *v = d ? em_vae_load(c, p->idx.vae_dir, device, p->vae_dtype) : NULL;
        if (!v) {
            em_dit_free(d);
            return em_ctx_status(c);
        }
        em_dit_free(p->dit);
        em_vae_free(p->vae);
        p->dit = d;
        p->vae = v;
        return EM_OK;
    }
    em_unet2d_options uo = em_unet2d_default_options();
    uo.device = device;
    uo.dtype = p->dtype;
    em_unet2d *u = em_pipeline_load_unet(c, &p->idx, &uo);
    if (!u) return em_ctx_status(c);
    if (sd_text(p) && !sd_to(c, p, device)) { /* the text encoder and the VAE go along */
        em_unet2d_free(u);
        return em_ctx_status(c);
    }
    em_unet2d_free(p->unet);
    p->unet = u;
    return EM_OK;
}

em_status em_pipeline_set_scheduler(em_ctx *c, em_pipeline *p, em_scheduler_kind kind) {
    if (!c || em_ctx_status(c)) return c ? em_ctx_status(c) : EM_ERR_INVALID_ARG;
    if (!p) return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "pipeline is NULL");
    em_scheduler *s = em_scheduler_from_config(c, p->sched, kind);
    if (!s) return em_ctx_status(c);
    em_scheduler_free(p->sched);
    p->sched = s;
    return EM_OK;
}

const em_pipeline_index *em_pipeline_get_index(const em_pipeline *p) { return p ? &p->idx : NULL; }
em_unet2d *em_pipeline_unet(const em_pipeline *p) { return p ? p->unet : NULL; }
em_dit *em_pipeline_dit(const em_pipeline *p) { return p ? p->dit : NULL; }
em_sd3 *em_pipeline_sd3(const em_pipeline *p) { return p ? p->sd3 : NULL; }
em_flux *em_pipeline_flux(const em_pipeline *p) { return p ? p->flux : NULL; }
em_scheduler *em_pipeline_scheduler(const em_pipeline *p) { return p ? p->sched : NULL; }
em_device *em_pipeline_device(const em_pipeline *p) {
    return !p        ? NULL
           : p->dit ? em_dit_device(p->dit)
           : p->sd3 ? em_sd3_device(p->sd3)
           : p->flux ? em_flux_device(p->flux)
                    : em_unet2d_device(p->unet);
}

bool em_pipeline_latent_shape(const em_pipeline *p, int64_t shape[4]) {
    if (!p || !shape) return false;
    if (p->dit) { /* DiTPipeline: (1, in_channels, sample_size, sample_size) */
        const em_dit_config *d = em_dit_get_config(p->dit);
        shape[0] = 1;
        shape[1] = d->in_channels;
        shape[2] = shape[3] = d->sample_size;
        return true;
    }
    if (p->sd3) { /* StableDiffusion3Pipeline's default: sample_size latents square */
        const em_sd3_config *t = em_sd3_get_config(p->sd3);
        shape[0] = 1;
        shape[1] = t->in_channels;
        shape[2] = shape[3] = t->sample_size;
        return true;
    }
    if (p->flux) { /* FluxPipeline's default: default_sample_size 128 latents, unpacked */
        shape[0] = 1;
        shape[1] = em_flux_get_config(p->flux)->in_channels / 4;
        shape[2] = shape[3] = 128;
        return true;
    }
    const em_unet2d_config *cfg = em_unet2d_get_config(p->unet);
    if (cfg->sample_size[0] <= 0 || cfg->sample_size[1] <= 0) return false;
    shape[0] = 1;
    shape[1] = cfg->in_channels;
    shape[2] = cfg->sample_size[0];
    shape[3] = cfg->sample_size[1];
    return true;
}

em_pipeline_run_params em_pipeline_default_params(void) {
    em_pipeline_run_params rp;
    memset(&rp, 0, sizeof rp);
    rp.class_label = -1;
    rp.num_images_per_prompt = 1;
    rp.aesthetic_score = 6.0; /* StableDiffusionXLImg2ImgPipeline.__call__'s */
    rp.negative_aesthetic_score = 2.5;
    return rp;
}

double pipeline_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

bool pipeline_step_done(em_ctx *c, const em_pipeline_run_params *rp, em_device *dev, int64_t i,
                        int64_t n, double t, double t0, const char *op) {
    if (!rp->progress) return true;
    if (em_device_sync(c, dev) != EM_OK) return false;
    if (rp->progress(rp->user, i, n, t, pipeline_now_s() - t0)) return true;
    em_ctx_fail(c, EM_ERR_INVALID_ARG, op, "stopped by the progress callback after step %lld of "
                "%lld", (long long)i + 1, (long long)n);
    return false;
}

/* The run's batch B (checked before): DiT's number of class labels, else num_images_per_prompt
 * (times Stable Diffusion's number of prompts). */
static int64_t run_batch(const em_pipeline *p, const em_pipeline_run_params *rp) {
    if (p->dit) return rp->class_labels ? rp->num_class_labels : 1;
    return sd_batch(rp); /* without prompts: num_images_per_prompt, diffusers' batch_size */
}

/* The initial latents on the UNet's device, f32 [B, C, H, W] (B: run_batch), drawn from g as
 * one randn of that shape or checked and moved from the caller's; a reference the caller
 * releases. NULL with the error in c. */
static em_tensor *initial_latents(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp,
                                  em_torch_generator *g) {
    int64_t shape[4];
    bool have =
        sd_text(p) ? sd_latent_shape(c, p, rp, shape) : em_pipeline_latent_shape(p, shape);
    if (em_ctx_status(c)) return NULL;
    int64_t batch = run_batch(p, rp);
    shape[0] = batch;
    em_device *dev = em_pipeline_device(p);
    em_tensor *x;
    if (!rp->latents) {
        if (!have) {
            em_ctx_fail(c, EM_ERR_INVALID_ARG, OP,
                        "%s: the unet's config.json has no sample_size: give the initial "
                        "latents", p->idx.unet_dir);
            return NULL;
        }
        x = em_torch_randn(c, g, 4, shape, dev);
    } else {
        em_tensor *l = rp->latents;
        const int64_t *s = em_tensor_shape(l);
        int nd = em_tensor_ndim(l);
        int64_t channels = p->dit ? shape[1] : em_unet2d_get_config(p->unet)->in_channels;
        bool ok = nd == 4 && s[0] == batch && s[1] == channels &&
                  (!have || (s[2] == shape[2] && s[3] == shape[3]));
        if (!ok) {
            char got[96] = "", want[64];
            for (int i = 0, o = 0; i < nd && o < (int)sizeof got - 24; i++)
                o += snprintf(got + o, sizeof got - (size_t)o, "%s%lld", i ? ", " : "",
                              (long long)s[i]);
            if (have)
                snprintf(want, sizeof want, "[%lld, %lld, %lld, %lld]", (long long)batch,
                         (long long)shape[1], (long long)shape[2], (long long)shape[3]);
            else
                snprintf(want, sizeof want, "[%lld, %lld, H, W]", (long long)batch,
                         (long long)channels);
            em_ctx_fail(c, EM_ERR_SHAPE, OP,
                        "initial latents of shape [%s] do not fit %s (%s): the latent shape is %s",
                        got, p->idx.class_name, p->idx.dir, want);
            return NULL;
        }
        if (em_tensor_dtype(l) != EM_F32) {
            em_ctx_fail(c, EM_ERR_DTYPE, OP, "initial latents must be f32, not %s",
                        em_dtype_name(em_tensor_dtype(l)));
            return NULL;
        }
        x = em_tensor_device(l) == dev ? l : em_to(c, l, dev);
    }
    /* DiTPipeline does not scale its latents by init_noise_sigma (1 for DDPM, DDIM, DPM) */
    double sigma = p->dit ? 1.0 : em_scheduler_init_noise_sigma(p->sched);
    if (x && sigma != 1.0) x = em_mul_scalar(c, x, sigma);
    return x ? em_tensor_retain(x) : NULL;
}

/* The denoiser step as a compiled function: in[0] the scaled sample, in[1] the timestep (a 0-d
 * f32 tensor on the model's device, an input so that every step runs the same program), in[2]
 * the prompt embeddings of a conditional UNet, in[3] and in[4] SDXL's text_embeds and
 * time_ids. */
static int unet_step(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *statics,
                     int n_statics, em_tensor **out, int max_out, void *user) {
    (void)statics, (void)n_statics, (void)max_out;
    em_unet2d_added_cond a = {.text_embeds = n_in == 5 ? in[3] : NULL,
                              .time_ids = n_in == 5 ? in[4] : NULL};
    out[0] = n_in >= 3 ? em_unet2d_forward_added(c, user, in[0], in[1], in[2], &a)
                       : em_unet2d_forward(c, user, in[0], in[1], NULL);
    return out[0] ? 1 : -1;
}

/* The model's output for the scaled sample `in` at timestep t (conditioned on ctx when not
 * NULL, and on SDXL's added conditioning when its tensors are set): eager, or through f. */
static em_tensor *denoiser_in_dtype(em_ctx *c, em_pipeline *p, em_compiled *f, em_tensor *in,
                                    double t, em_tensor *ctx, const em_unet2d_added_cond *added) {
    if (!f && !ctx) return em_unet2d_forward_at(c, p->unet, in, t, NULL);
    float tf = (float)t; /* forward_at's 0-d f32 timestep, as an input */
    em_tensor *tt = em_from_host_on(c, em_unet2d_device(p->unet), EM_F32, 0, NULL, &tf);
    if (!f) return tt ? em_unet2d_forward_added(c, p->unet, in, tt, ctx, added) : NULL;
    em_tensor *out = NULL;
    em_tensor *args[5] = {in, tt, ctx, added->text_embeds, added->time_ids};
    int n = !ctx ? 2 : added->text_embeds ? 5 : 3;
    return tt && em_compiled_call(c, f, args, n, NULL, 0, &out, 1) == 1 ? out : NULL;
}

/* The denoiser in the pipeline's dtype: its inputs cast to it, its output back to f32 (the
 * latents and the scheduler stay f32). */
static em_tensor *denoiser(em_ctx *c, em_pipeline *p, em_compiled *f, em_tensor *in, double t,
                           em_tensor *ctx, const em_unet2d_added_cond *added) {
    if (p->dtype == EM_F32) return denoiser_in_dtype(c, p, f, in, t, ctx, added);
    em_unet2d_added_cond a = {NULL, NULL};
    if (added) {
        a.text_embeds = pipeline_as(c, added->text_embeds, p->dtype);
        a.time_ids = pipeline_as(c, added->time_ids, p->dtype);
    }
    em_tensor *out = denoiser_in_dtype(c, p, f, pipeline_as(c, in, p->dtype), t,
                                       pipeline_as(c, ctx, p->dtype), added ? &a : NULL);
    return pipeline_as(c, out, EM_F32);
}

/* One step's model output: with guidance (ctx holds [negatives; prompts], twice the latents'
 * rows) the UNet runs on the latents twice over and noise_pred = uncond + scale * (text -
 * uncond), as diffusers does. */
static em_tensor *model_output(em_ctx *c, em_pipeline *p, em_compiled *f, em_tensor *x,
                               double t, em_tensor *ctx, const em_unet2d_added_cond *added,
                               double guidance, const sd_inpaint *ip) {
    int64_t rows = em_tensor_dim(x, 0);
    bool cfg = ctx && em_tensor_dim(ctx, 0) == 2 * rows;
    em_tensor *pair[2] = {x, x};
    em_tensor *in = cfg ? em_cat(c, pair, 2, 0) : x;
    in = em_scheduler_scale_model_input(c, p->sched, in, t);
    if (ip && ip->nine && in) { /* an inpainting UNet: [latents, mask, masked image latents] */
        em_tensor *parts[3] = {in, ip->mask, ip->masked};
        in = em_cat(c, parts, 3, 1);
    }
    em_tensor *eps = denoiser(c, p, f, in, t, ctx, added);
    if (!cfg || !eps) return eps;
    em_tensor *parts[2] = {NULL, NULL};
    if (em_split(c, eps, rows, 0, parts, 2) != 2) return NULL;
    return em_add(c, parts[0], em_mul_scalar(c, em_sub(c, parts[1], parts[0]), guidance));
}

/* The steps from x (a reference that this takes over), from the schedule's step `first` (with
 * inpainting's tensors when ip is not NULL), `count` of them (-1: to the end); the final x, a
 * reference, or NULL. */
static em_tensor *denoise(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp,
                          em_torch_generator *g, em_tensor *x, em_tensor *ctx,
                          const em_unet2d_added_cond *added, int64_t first,
                          const sd_inpaint *ip, int64_t count) {
    int64_t n = 0;
    const double *ts = em_scheduler_timesteps(p->sched, &n);
    ts += first; /* img2img starts mid-schedule */
    n -= first;
    if (count >= 0 && count < n) n = count; /* denoising_end stops early */
    em_compiled *f = rp->compile ? em_compile(c, "unet_step", unet_step, p->unet) : NULL;
    if (rp->compile && !f) {
        em_tensor_release(x);
        return NULL;
    }
    for (int64_t i = 0; i < n && x; i++) {
        double t0 = pipeline_now_s();
        em_scope_push(c);
        em_tensor *eps = model_output(c, p, f, x, ts[i], ctx, added, rp->guidance_scale, ip);
        em_tensor *next = em_scheduler_step(c, p->sched, eps, ts[i], x, g);
        if (next) next = em_tensor_retain(next);
        em_scope_pop(c);
        em_tensor_release(x);
        x = ip ? sd_inpaint_blend(c, p, ip, next, ts, i, n) : next;
        if (!x) break; /* the error of the forward or the step, naming the op and shapes */
        if (!pipeline_step_done(c, rp, em_pipeline_device(p), i, n, ts[i], t0, OP)) break;
    }
    if (f && rp->compile_stats) em_compiled_stats(f, rp->compile_stats);
    em_compiled_free(f);
    if (em_ctx_status(c) && x) {
        em_tensor_release(x);
        x = NULL;
    }
    return x;
}

/* A batch of 1 to EM_PIPELINE_MAX_BATCH images: num_images_per_prompt (Stable Diffusion's, and
 * DDPM/DDIM's batch_size), a list of prompts (Stable Diffusion's, given one way) or of class
 * labels (DiT's, checked with the labels in check_conditioning). */
static bool check_batch(em_ctx *c, const em_pipeline *p, const em_pipeline_run_params *rp) {
    int64_t n = rp->num_images_per_prompt;
    const char *why = NULL;
    if (n < 0)
        why = "num_images_per_prompt must be 1 or more";
    else if ((rp->prompts || rp->negative_prompts) && !sd_text(p) && !p->sd3 && !p->flux)
        why = "a list of prompts is StableDiffusionPipeline's";
    else if (n > 1 && p->dit)
        why = "DiTPipeline takes no num_images_per_prompt: give a list of class_labels (one "
              "image per label; repeat a label for more of it)";
    else if (rp->negative_prompts && !rp->prompts && !rp->prompt_embeds)
        why = "negative_prompts need prompts (a list of the same length)";
    else if (rp->prompts && (rp->prompt || rp->negative_prompt))
        why = "prompts (a list) with prompt or negative_prompt (a string): give a list of "
              "negative_prompts with a list of prompts, as diffusers requires";
    else if (rp->prompts && rp->num_prompts < 1)
        why = "num_prompts must be 1 or more with prompts";
    if (why) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "%s (%s, %s): num_images_per_prompt %lld, "
                    "num_prompts %lld", why, p->idx.class_name, p->idx.dir, (long long)n,
                    rp->prompts ? (long long)rp->num_prompts : 1LL);
        return false;
    }
    for (int64_t i = 0; rp->prompts && i < rp->num_prompts && i < EM_PIPELINE_MAX_BATCH; i++)
        if (!rp->prompts[i] || (rp->negative_prompts && !rp->negative_prompts[i])) {
            em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "%s %lld of %lld is NULL (\"\" is a prompt)",
                        rp->prompts[i] ? "negative prompt" : "prompt", (long long)i,
                        (long long)rp->num_prompts);
            return false;
        }
    int64_t per = n > 1 ? n : 1, prompts = sd_prompts(rp);
    if (prompts > EM_PIPELINE_MAX_BATCH || per > EM_PIPELINE_MAX_BATCH / prompts) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "a batch of %lld prompt(s) x %lld image(s) per "
                    "prompt is more than the %d images a run makes (EM_PIPELINE_MAX_BATCH)",
                    (long long)prompts, (long long)per, EM_PIPELINE_MAX_BATCH);
        return false;
    }
    return true;
}

/* DiT's list of class labels: 1 to EM_PIPELINE_MAX_BATCH of them, each in range, and not with
 * class_label too. */
static bool check_class_labels(em_ctx *c, const em_pipeline *p, const em_pipeline_run_params *rp) {
    int64_t n = rp->num_class_labels, classes = em_dit_get_config(p->dit)->num_embeds_ada_norm;
    if (rp->class_label >= 0) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "class_label %lld and a list of class_labels: "
                    "give one of them", (long long)rp->class_label);
        return false;
    }
    if (n < 1 || n > EM_PIPELINE_MAX_BATCH) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "num_class_labels %lld: a list of 1 to %d class "
                    "labels (EM_PIPELINE_MAX_BATCH)", (long long)n, EM_PIPELINE_MAX_BATCH);
        return false;
    }
    for (int64_t i = 0; i < n; i++)
        if (rp->class_labels[i] < 0 || rp->class_labels[i] >= classes) {
            em_ctx_fail(c, EM_ERR_INVALID_ARG, OP,
                        "class label %lld (index %lld of %lld) is out of range: the transformer "
                        "(%s) has %lld classes (num_embeds_ada_norm), labels 0 to %lld",
                        (long long)rp->class_labels[i], (long long)i, (long long)n,
                        p->idx.transformer_dir, (long long)classes, (long long)classes - 1);
            return false;
        }
    return true;
}

/* The conditioning options belong to one kind of pipeline each: a prompt, negative prompt and
 * size to Stable Diffusion (which needs a prompt), a class label to DiT (which needs one in
 * range), a guidance scale to either; the unconditional pipelines take none. */
static bool check_conditioning(em_ctx *c, const em_pipeline *p, const em_pipeline_run_params *rp) {
    const char *cls = p->idx.class_name;
    const char *text = rp->prompt            ? "a prompt"
                       : rp->negative_prompt ? "a negative prompt"
                       : rp->height || rp->width ? "a height or width"
                                                 : NULL;
    if (!sd_text(p) && text) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP,
                    "%s given to %s (%s), which is %s (StableDiffusionPipeline takes one)", text,
                    cls, p->idx.dir, p->dit ? "class-conditional" : "unconditional");
        return false;
    }
    if (!p->dit && (rp->class_label >= 0 || rp->class_labels)) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "%s takes no class label%s (DiTPipeline does)",
                    cls, rp->class_labels ? "s" : "");
        return false;
    }
    if (!sd_text(p) && !p->dit && rp->guidance_scale != 0.0) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP,
                    "%s takes no guidance scale (an unconditional pipeline)", cls);
        return false;
    }
    if ((rp->vae_tiling || rp->vae_slicing) && !p->vae) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "%s: %s (%s) has no VAE",
                    rp->vae_tiling ? "vae_tiling" : "vae_slicing", cls, p->idx.dir);
        return false;
    }
    if (!sd_check_prompt_embeds(c, p, rp) || !check_batch(c, p, rp)) return false;
    if (rp->guidance_scale != rp->guidance_scale) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "guidance scale is NaN");
        return false;
    }
    if (!sdxl_check_prompts_2(c, p, rp)) return false;
    if (rp->image && !sd_text(p)) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "an init image given to %s (%s): image to image "
                    "is Stable Diffusion's (StableDiffusionImg2ImgPipeline)", cls, p->idx.dir);
        return false;
    }
    const char *xl_only = rp->denoising_end     ? "denoising_end"
                          : rp->denoising_start ? "denoising_start"
                          : rp->image_latents   ? "image_latents"
                                                : NULL;
    if (xl_only && !p->te2) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "%s given to %s (%s): the hand-over between "
                    "SDXL's base and refiner is StableDiffusionXL(Img2Img)Pipeline's", xl_only, cls,
                    p->idx.dir);
        return false;
    }
    if (!(rp->denoising_end >= 0.0 && rp->denoising_end < 1.0) ||
        !(rp->denoising_start >= 0.0 && rp->denoising_start < 1.0) ||
        (rp->denoising_end && rp->denoising_start >= rp->denoising_end)) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "denoising_start %g, denoising_end %g: each in "
                    "(0, 1) (0: none), the start before the end", rp->denoising_start,
                    rp->denoising_end);
        return false;
    }
    if (rp->denoising_start && !rp->image && !rp->image_latents) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "denoising_start without an init image or "
                    "image_latents: it is image to image's (the refiner's)");
        return false;
    }
    if (rp->image_latents && (rp->image || rp->latents)) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "image_latents with %s: give one of them",
                    rp->image ? "an init image" : "initial latents");
        return false;
    }
    if (rp->output_latents && !p->vae) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "output_latents: %s (%s) has no VAE (its "
                    "samples are its images)", cls, p->idx.dir);
        return false;
    }
    if (rp->mask_image && !rp->image) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "a mask image without an init image: inpainting "
                    "repaints the mask's white part of the image (give both)");
        return false;
    }
    if (rp->mask_image && !sd_text(p)) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "a mask image given to %s (%s): inpainting is "
                    "StableDiffusion(XL)InpaintPipeline's (Stable Diffusion and SDXL folders)",
                    cls, p->idx.dir);
        return false;
    }
    if (p->unet && sd_text(p) && !rp->mask_image &&
        em_unet2d_get_config(p->unet)->in_channels != em_vae_get_config(p->vae)->latent_channels) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "%s (%s) has an inpainting UNet (%lld input "
                    "channels): it needs an init image and a mask image", cls, p->idx.dir,
                    (long long)em_unet2d_get_config(p->unet)->in_channels);
        return false;
    }
    if (p->idx.requires_aesthetics_score && !rp->image && !rp->image_latents) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "%s (%s) has requires_aesthetics_score (a refiner): "
                    "it needs an init image (its UNet takes the aesthetic-score time ids of "
                    "image to image)", cls, p->idx.dir);
        return false;
    }
    if (!(rp->aesthetic_score == rp->aesthetic_score &&
          rp->negative_aesthetic_score == rp->negative_aesthetic_score)) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "aesthetic_score %g, negative_aesthetic_score %g: "
                    "NaN is not a score", rp->aesthetic_score, rp->negative_aesthetic_score);
        return false;
    }
    if (rp->image && rp->latents) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "an init image and initial latents: image to "
                    "image makes its latents from the image (give one of them)");
        return false;
    }
    if (!rp->image && !rp->image_latents && rp->strength != 0.0) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "strength %g without an init image", rp->strength);
        return false;
    }
    if (rp->image && !(rp->strength >= 0.0 && rp->strength <= 1.0)) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "strength %g: it must be in (0, 1]", rp->strength);
        return false;
    }
    if (sd_text(p) && !rp->prompt && !rp->prompts && !rp->prompt_embeds) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "%s (%s) needs a prompt (\"\" is one)", cls,
                    p->idx.dir);
        return false;
    }
    if (sd_text(p) && (rp->height < 0 || rp->width < 0)) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "height %lld, width %lld: sizes must be positive",
                    (long long)rp->height, (long long)rp->width);
        return false;
    }
    if (p->dit && rp->class_labels) return check_class_labels(c, p, rp);
    if (p->dit) {
        int64_t classes = em_dit_get_config(p->dit)->num_embeds_ada_norm;
        if (rp->class_label < 0) {
            em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "%s (%s) needs a class label (0 to %lld)",
                        cls, p->idx.dir, (long long)classes - 1);
            return false;
        }
        if (rp->class_label >= classes) {
            em_ctx_fail(c, EM_ERR_INVALID_ARG, OP,
                        "class label %lld is out of range: the transformer (%s) has %lld "
                        "classes (num_embeds_ada_norm), labels 0 to %lld",
                        (long long)rp->class_label, p->idx.transformer_dir, (long long)classes,
                        (long long)classes - 1);
            return false;
        }
    }
    return true;
}

int64_t set_begin(em_ctx *c, em_pipeline *p, int64_t first) {
    /* the schedulers with a begin index: diffusers' get_timesteps calls set_begin_index when the
     * scheduler has one (Euler, Euler ancestral, DPM-Solver) */
    em_scheduler_kind k = em_scheduler_get_kind(p->sched);
    bool begin = k == EM_SCHED_EULER || k == EM_SCHED_EULER_ANCESTRAL || k == EM_SCHED_DPM_MULTISTEP;
    if (begin && em_scheduler_set_begin_index(c, p->sched, first) != EM_OK) return -1;
    return first;
}

/* StableDiffusionImg2ImgPipeline.get_timesteps: the first kept step of the schedule, t_start =
 * steps - int(steps * strength) (every scheduler here has order 1), given to the schedulers
 * that take a begin index (set_begin); -1 with the error in c when no step is left. */
static int64_t img2img_first_step(em_ctx *c, em_pipeline *p, int64_t steps, double strength) {
    int64_t init = (int64_t)((double)steps * strength);
    if (init > steps) init = steps;
    if (init < 1) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "strength %g of %lld steps leaves no step to run "
                    "(int(steps * strength) is 0): raise either", strength, (long long)steps);
        return -1;
    }
    return set_begin(c, p, steps - init);
}

em_tensor *em_pipeline_run(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!p) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "pipeline is NULL");
        return NULL;
    }
    em_pipeline_run_params def = em_pipeline_default_params();
    if (!rp) rp = &def;
    if (p->sd3) return check_batch(c, p, rp) ? sd3_pipeline_run(c, p, rp) : NULL;
    if (p->flux) return check_batch(c, p, rp) ? flux_pipeline_run(c, p, rp) : NULL;
    if (!check_conditioning(c, p, rp)) return NULL;
    /* guidance_scale 0: the pipeline's __call__ default */
    em_pipeline_run_params resolved = *rp;
    if (resolved.guidance_scale == 0.0 && (sd_text(p) || p->dit))
        resolved.guidance_scale = p->te2 ? 5.0 : p->tok ? 7.5 : 4.0;
    rp = &resolved;
    int64_t steps = rp->steps ? rp->steps : p->idx.pipeline == EM_PIPELINE_DDPM ? 1000 : 50;
    em_scheduler_kind kind = em_scheduler_get_kind(p->sched);
    if (rp->eta != 0.0 && kind != EM_SCHED_DDIM) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "eta %g is DDIMScheduler's; the scheduler is %s",
                    rp->eta, em_scheduler_kind_class(kind));
        return NULL;
    }
    if (kind == EM_SCHED_DDIM) em_scheduler_set_eta(p->sched, rp->eta);
    if (rp->seeds && rp->num_seeds != run_batch(p, rp)) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "%lld seeds (a generator per image) for a batch of "
                    "%lld images: give one per image, as diffusers requires",
                    (long long)rp->num_seeds, (long long)run_batch(p, rp));
        return NULL;
    }
    em_torch_generator *g = rp->seeds ? em_torch_generator_create_list(rp->seeds,
                                                                      (int)rp->num_seeds)
                                      : em_torch_generator_create(rp->seed);
    if (!g) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    em_scope_push(c); /* holds the prompt embeddings through the loop */
    /* Stable Diffusion encodes the prompt first (it draws nothing from the generator) */
    em_unet2d_added_cond added = {NULL, NULL};
    em_tensor *ctx = p->te2   ? sdxl_prompt_embeds(c, p, rp, &added)
                     : p->tok ? sd_prompt_embeds(c, p, rp)
                              : NULL;
    /* set_timesteps draws nothing, and init_noise_sigma is the schedule's (Euler-type: the
     * largest sigma of the inference steps), so the schedule comes first */
    em_tensor *x = NULL;
    int64_t first = 0;
    sd_inpaint inpaint = {0}, *ip = NULL;
    if ((!sd_text(p) || ctx) && em_scheduler_set_timesteps(c, p->sched, steps) == EM_OK) {
        em_scope_push(c);
        if (rp->image || rp->image_latents) {
            /* __call__'s default strength: StableDiffusionImg2ImgPipeline 0.8,
             * StableDiffusionXLImg2ImgPipeline 0.3, StableDiffusionInpaintPipeline 1.0,
             * StableDiffusionXLInpaintPipeline 0.9999 */
            double strength = rp->strength                ? rp->strength
                              : rp->mask_image && p->te2 ? 0.9999
                              : rp->mask_image          ? 1.0
                              : p->te2                  ? 0.3
                                                        : 0.8;
            first = rp->denoising_start ? sdxl_start_step(c, p, rp->denoising_start)
                                        : img2img_first_step(c, p, steps, strength);
            if (first >= 0 && rp->image_latents) {
                int64_t nts = 0;
                const double *ts = em_scheduler_timesteps(p->sched, &nts);
                x = sdxl_given_latents(c, p, rp, g, ts[first], !rp->denoising_start);
                if (x) x = em_tensor_retain(x);
            } else if (first >= 0 && rp->mask_image) {
                int64_t nts = 0;
                const double *ts = em_scheduler_timesteps(p->sched, &nts);
                bool cfg = ctx && em_tensor_dim(ctx, 0) == 2 * sd_batch(rp);
                x = sd_inpaint_prepare(c, p, rp, g, ts[first], strength, cfg, &inpaint);
                if (x) ip = &inpaint;
            } else if (first >= 0) {
                int64_t nts = 0;
                const double *ts = em_scheduler_timesteps(p->sched, &nts);
                x = sd_image_latents(c, p, rp->image, rp->height, rp->width, sd_batch(rp), g,
                                     ts[first], rp->vae_tiling);
                if (x) x = em_tensor_retain(x);
            }
        } else {
            x = initial_latents(c, p, rp, g);
        }
        em_scope_pop(c);
    }
    if (x && p->dit)
        x = dit_pipeline_denoise(c, p->dit, p->dtype, p->sched, rp, g, x);
    else if (x)
        x = denoise(c, p, rp, g, x, ctx, &added, first, ip,
                    rp->denoising_end ? sdxl_end_count(p, first, rp->denoising_end) : -1);
    em_torch_generator_free(g);
    sd_inpaint_free(&inpaint);
    if (!x) {
        em_scope_pop(c);
        return NULL;
    }
    /* SD: vae.decode(latents / scaling_factor); DiT: vae.decode(1 / scaling_factor * latents);
     * then, as the unconditional pipelines, (image / 2 + 0.5).clamp(0, 1).cpu().permute(0, 2,
     * 3, 1) */
    em_tensor *img = x;
    if (rp->output_latents) { /* output_type="latent": the latents as they are */
        em_device *cpu = em_device_get(c, "cpu");
        if (cpu && em_tensor_device(img) != cpu) img = em_to(c, img, cpu);
        em_keep(c, img);
        em_scope_pop(c);
        em_tensor_release(x);
        return img;
    }
    if (sd_text(p))
        img = sd_decode(c, p, x, rp->vae_tiling, rp->vae_slicing);
    else if (p->dit) {
        em_vae_enable_slicing(p->vae, rp->vae_slicing); /* one image at a time: the same images */
        em_tensor *z = em_mul_scalar(c, x, 1.0 / em_vae_get_config(p->vae)->scaling_factor);
        z = pipeline_as(c, z, p->vae_dtype);
        img = rp->vae_tiling ? em_vae_decode_tiled(c, p->vae, z, NULL)
                             : em_vae_decode(c, p->vae, z);
        img = pipeline_as(c, img, EM_F32);
    }
    img = em_clamp(c, em_add_scalar(c, em_mul_scalar(c, img, 0.5), 0.5), 0.0, 1.0);
    img = em_contiguous(c, em_permute(c, img, 4, (const int[]){0, 2, 3, 1}));
    em_device *cpu = img ? em_device_get(c, "cpu") : NULL;
    if (cpu && em_tensor_device(img) != cpu) img = em_to(c, img, cpu);
    em_keep(c, img);
    em_scope_pop(c);
    em_tensor_release(x);
    return img;
}

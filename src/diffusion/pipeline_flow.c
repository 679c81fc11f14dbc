/* Pieces the flow-matching transformer pipelines share (StableDiffusion3Pipeline in
 * sd3_pipeline.c, FluxPipeline in flux_pipeline.c): running a CLIP or T5 encoder on texts,
 * calculate_shift, the run's prologue (generator, texts, repeated embeddings), the initial
 * latents' checks, and the decode of latents / scaling_factor +
 * shift_factor to images. */
#include <stdio.h>
#include <stdlib.h>

#include "diffusion/pipeline_impl.h"
#include "diffusion/sched_impl.h"

#define RUN_OP "pipeline"

em_status flow_clip_encode(em_ctx *c, const em_clip_tokenizer *tok, const em_clip_text *te,
                           const char *const *texts, int n, int hidden_index,
                           em_clip_text_output *o) {
    em_device *prev = em_ctx_device(c);
    em_ctx_set_device(c, em_clip_text_device(te));
    em_tensor *ids = em_clip_tokenize_batch(c, tok, texts, n, 0, NULL);
    em_ctx_set_device(c, prev);
    return ids ? em_clip_text_forward(c, te, ids, NULL, hidden_index, o) : em_ctx_status(c);
}

em_tensor *flow_t5_embeds(em_ctx *c, const em_t5_tokenizer *tok, const em_t5_encoder *te,
                          const char *const *texts, int n, int64_t msl, em_device *dev) {
    em_device *prev = em_ctx_device(c);
    em_ctx_set_device(c, em_t5_encoder_device(te));
    em_tensor *ids = em_t5_tokenize_batch(c, tok, texts, n, msl, NULL);
    em_ctx_set_device(c, prev);
    em_tensor *h = ids ? em_t5_encoder_forward(c, te, ids, NULL) : NULL;
    return h && em_tensor_device(h) != dev ? em_to(c, h, dev) : h;
}

bool flow_calculate_shift(em_ctx *c, const em_pipeline *p, double image_seq_len, double *mu) {
    const em_sched_cfg *cfg = &p->sched->cfg;
    if (cfg->max_image_seq_len == cfg->base_image_seq_len) { /* Python: ZeroDivisionError */
        em_ctx_fail(c, EM_ERR_FORMAT, RUN_OP, "%s: max_image_seq_len = base_image_seq_len "
                    "(%lld): calculate_shift divides by their difference",
                    p->idx.scheduler_config, (long long)cfg->base_image_seq_len);
        return false;
    }
    double m = (cfg->max_shift - cfg->base_shift) /
               (double)(cfg->max_image_seq_len - cfg->base_image_seq_len);
    double b = cfg->base_shift - m * (double)cfg->base_image_seq_len;
    *mu = image_seq_len * m + b;
    return true;
}

em_tensor *flow_given_latents(em_ctx *c, const em_pipeline *p, em_tensor *l, int ndim,
                              const int64_t *shape, em_device *dev) {
    char sig[96], want[96];
    bool ok = em_tensor_ndim(l) == ndim && em_tensor_dtype(l) == EM_F32;
    for (int i = 0; ok && i < ndim; i++) ok = em_tensor_dim(l, i) == shape[i];
    if (!ok) {
        int k = snprintf(want, sizeof want, "[");
        for (int i = 0; i < ndim && k < (int)sizeof want; i++)
            k += snprintf(want + k, sizeof want - (size_t)k, "%s%lld", i ? ", " : "",
                          (long long)shape[i]);
        em_ctx_fail(c, EM_ERR_SHAPE, RUN_OP, "initial latents %s do not fit %s (%s): the latent "
                    "shape is %s] f32", em_tensor_sig(l, sig, sizeof sig), p->idx.class_name,
                    p->idx.dir, want);
        return NULL;
    }
    return em_tensor_device(l) == dev ? l : em_to(c, l, dev);
}

em_tensor *flow_decode(em_ctx *c, em_pipeline *p, em_tensor *x, bool sliced) {
    const em_vae_config *v = em_vae_get_config(p->vae);
    em_tensor *z = em_div_scalar(c, x, v->scaling_factor);
    if (v->has_shift_factor) z = em_add_scalar(c, z, v->shift_factor);
    em_vae_enable_slicing(p->vae, sliced); /* one image at a time: the same */
    em_tensor *img =
        pipeline_as(c, em_vae_decode(c, p->vae, pipeline_as(c, z, p->vae_dtype)), EM_F32);
    img = em_clamp(c, em_add_scalar(c, em_mul_scalar(c, img, 0.5), 0.5), 0.0, 1.0);
    img = em_contiguous(c, em_permute(c, img, 4, (const int[]){0, 2, 3, 1}));
    em_device *cpu = img ? em_device_get(c, "cpu") : NULL;
    if (cpu && em_tensor_device(img) != cpu) img = em_to(c, img, cpu);
    return em_ctx_status(c) ? NULL : img;
}

bool flow_run_begin(em_ctx *c, const em_pipeline_run_params *rp, int64_t n,
                    em_torch_generator **g, const char ***texts, const char ***texts2) {
    *g = rp->seeds ? em_torch_generator_create_list(rp->seeds, (int)rp->num_seeds)
                   : em_torch_generator_create(rp->seed);
    *texts = *g ? sd_prompt_texts(c, rp) : NULL;
    *texts2 = *texts ? sdxl_second_texts(c, rp, *texts, n) : NULL;
    if (*texts2) return true;
    if (!*g) em_ctx_fail(c, EM_ERR_OOM, RUN_OP, "out of memory");
    em_torch_generator_free(*g);
    free((void *)*texts);
    *g = NULL;
    *texts = NULL;
    return false;
}

void flow_repeat_embeds(em_ctx *c, int64_t per, em_tensor **ctx, em_tensor **pooled) {
    if (!*ctx || per <= 1) return;
    *ctx = em_repeat_interleave(c, *ctx, per, 0);
    *pooled = em_repeat_interleave(c, *pooled, per, 0);
}

bool flow_check_run(em_ctx *c, const em_pipeline *p, const em_pipeline_run_params *rp,
                    const char *bad) {
    if (!bad)
        bad = rp->prompt_embeds || rp->negative_prompt_embeds ? "prompt_embeds"
              : rp->pooled_prompt_embeds || rp->negative_pooled_prompt_embeds
                  ? "pooled_prompt_embeds"
              : rp->class_label >= 0 || rp->class_labels ? "a class label"
              : rp->image || rp->image_latents ? "an init image (image to image)"
              : rp->mask_image ? "a mask image (inpainting)"
              : rp->strength != 0.0 ? "strength"
              : rp->denoising_start || rp->denoising_end ? "denoising_start / _end"
              : rp->eta != 0.0 ? "eta"
              : rp->vae_tiling ? "vae_tiling"
              : rp->output_latents ? "output_latents"
                                   : NULL;
    if (bad) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, RUN_OP, "%s is not supported for %s (%s) yet: it "
                    "runs prompts from seeds or given latents", bad, p->idx.class_name,
                    p->idx.dir);
        return false;
    }
    if (!sdxl_check_prompts_2(c, p, rp)) return false;
    if (!rp->prompt && !rp->prompts) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, RUN_OP, "%s (%s) needs a prompt (\"\" is one)",
                    p->idx.class_name, p->idx.dir);
        return false;
    }
    if (rp->seeds && rp->num_seeds != sd_batch(rp)) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, RUN_OP, "%lld seeds (a generator per image) for a "
                    "batch of %lld images: give one per image, as diffusers requires",
                    (long long)rp->num_seeds, (long long)sd_batch(rp));
        return false;
    }
    if (rp->num_images_per_prompt < 0 || rp->height < 0 || rp->width < 0 ||
        rp->max_sequence_length < 0 || rp->max_sequence_length > 512 ||
        rp->guidance_scale != rp->guidance_scale) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, RUN_OP, "num_images_per_prompt %lld, height %lld, "
                    "width %lld, max_sequence_length %lld (at most 512), guidance_scale %g: "
                    "out of range", (long long)rp->num_images_per_prompt, (long long)rp->height,
                    (long long)rp->width, (long long)rp->max_sequence_length, rp->guidance_scale);
        return false;
    }
    return true;
}

bool flow_reload(em_ctx *c, em_pipeline *p, const char *device,
                 bool (*load)(em_ctx *, em_pipeline *, const char *)) {
    em_pipeline q = {.idx = p->idx, .dtype = p->dtype, .vae_dtype = p->vae_dtype, .tp = p->tp,
                     .cp = p->cp, .cp_schedule = p->cp_schedule, .cp_ring = p->cp_ring,
                     .cp_ulysses = p->cp_ulysses};
    if (!load(c, &q, device)) {
        em_sd3_free(q.sd3);
        em_flux_free(q.flux);
        sd_free(&q);
        return false;
    }
    em_sd3_free(p->sd3);
    em_flux_free(p->flux);
    sd_free(p);
    p->sd3 = q.sd3;
    p->flux = q.flux;
    p->vae = q.vae;
    p->tok = q.tok;
    p->te = q.te;
    p->tok2 = q.tok2;
    p->te2 = q.te2;
    p->tok3 = q.tok3;
    p->te3 = q.te3;
    return true;
}

em_tensor *flow_full(em_ctx *c, em_device *dev, int64_t rows, float value) {
    em_device *prev = em_ctx_device(c);
    em_ctx_set_device(c, dev);
    em_tensor *t = em_full(c, EM_F32, 1, &rows, (double)value);
    em_ctx_set_device(c, prev);
    return t;
}

em_tensor *flow_denoise(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp,
                        em_torch_generator *g, em_tensor *x, em_device *dev, flow_pred_fn pred,
                        void *user, em_compiled *f) {
    int64_t n = 0;
    const double *ts = em_scheduler_timesteps(p->sched, &n);
    if (rp->compile && !f) {
        em_tensor_release(x);
        return NULL;
    }
    for (int64_t i = 0; i < n && x; i++) {
        double t0 = pipeline_now_s();
        em_scope_push(c);
        em_tensor *y = pred(c, user, f, x, ts[i]);
        em_tensor *next = y ? em_scheduler_step(c, p->sched, y, ts[i], x, g) : NULL;
        if (next) next = em_tensor_retain(next);
        em_scope_pop(c);
        em_tensor_release(x);
        x = next;
        if (!x || !pipeline_step_done(c, rp, dev, i, n, ts[i], t0, RUN_OP)) break;
    }
    if (f && rp->compile_stats) em_compiled_stats(f, rp->compile_stats);
    em_compiled_free(f);
    if (em_ctx_status(c) && x) {
        em_tensor_release(x);
        x = NULL;
    }
    return x;
}

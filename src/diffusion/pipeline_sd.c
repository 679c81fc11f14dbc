/* StableDiffusionPipeline's own pieces (diffusers 0.42, pipelines/stable_diffusion/
 * pipeline_stable_diffusion.py): its text encoder, tokenizer and VAE, encode_prompt with
 * classifier-free guidance's unconditional embeddings, the latent shape from height and width,
 * and the VAE decode at the end. The denoising loop is pipeline.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/pipeline_impl.h"

#define OP "StableDiffusionPipeline"

/* The folder's pipeline class for errors of the parts Stable Diffusion XL shares
 * (StableDiffusionPipeline or StableDiffusionXLPipeline). */
static const char *class_of(const em_pipeline *p) { return p->idx.class_name; }

void sd_free(em_pipeline *p) {
    em_clip_tokenizer_free(p->tok);
    em_clip_text_free(p->te);
    em_vae_free(p->vae);
    em_clip_tokenizer_free(p->tok2);
    em_clip_text_free(p->te2);
    em_t5_tokenizer_free(p->tok3);
    em_t5_encoder_free(p->te3);
    p->tok3 = NULL;
    p->te3 = NULL;
    p->tok = p->tok2 = NULL;
    p->te = p->te2 = NULL;
    p->vae = NULL;
}

bool sd_load(em_ctx *c, em_pipeline *p, const char *device) {
    if (p->idx.tokenizer_dir) { /* an SDXL refiner has only the second encoder */
        p->tok = em_clip_tokenizer_load(c, p->idx.tokenizer_dir);
        if (p->tok) p->te = em_clip_text_load(c, p->idx.text_encoder_dir, device);
        if (!p->te) return false;
    }
    p->vae = em_vae_load(c, p->idx.vae_dir, device, p->vae_dtype);
    if (!p->vae) return false;
    bool xl = p->idx.pipeline == EM_PIPELINE_STABLE_DIFFUSION_XL;
    if (xl && !sdxl_load(c, p, device)) return false;
    const em_unet2d_config *u = em_unet2d_get_config(p->unet);
    const em_vae_config *v = em_vae_get_config(p->vae);
    /* SDXL's prompt embeddings are both encoders' hidden states side by side */
    int64_t width = (p->te ? em_clip_text_get_config(p->te)->hidden_size : 0) +
                    (xl ? em_clip_text_get_config(p->te2)->hidden_size : 0);
    const char *encoders = !xl ? "text_encoder" : p->te ? "text_encoder + text_encoder_2"
                                                        : "text_encoder_2";
    /* an inpainting UNet (StableDiffusionInpaintPipeline) takes the mask and the masked image's
     * latents beside the latents */
    bool inpaint = u->in_channels == 2 * v->latent_channels + 1;
    if (width != u->cross_attention_dim || (v->latent_channels != u->in_channels && !inpaint) ||
        u->out_channels != v->latent_channels) {
        em_ctx_fail(c, EM_ERR_SHAPE, class_of(p),
                    "%s: the components disagree: %s hidden_size %lld, unet "
                    "cross_attention_dim %lld; vae latent_channels %lld, unet in_channels %lld "
                    "(or 2 * %lld + 1 for inpainting) and out_channels %lld",
                    p->idx.dir, encoders, (long long)width, (long long)u->cross_attention_dim,
                    (long long)v->latent_channels, (long long)u->in_channels,
                    (long long)v->latent_channels, (long long)u->out_channels);
        return false;
    }
    if (!xl && u->text_time) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP, "%s: the unet has addition_embed_type "
                    "'text_time' (SDXL's), which StableDiffusionPipeline does not feed",
                    p->idx.unet_dir);
        return false;
    }
    return true;
}

bool sd_to(em_ctx *c, em_pipeline *p, const char *device) {
    em_clip_text *te = NULL;
    if (p->te && !(te = em_clip_text_load(c, p->idx.text_encoder_dir, device))) return false;
    em_vae *vae = em_vae_load(c, p->idx.vae_dir, device, p->vae_dtype);
    if (!vae || (p->te2 && !sdxl_to(c, p, device))) {
        em_vae_free(vae);
        em_clip_text_free(te);
        return false;
    }
    em_clip_text_free(p->te);
    em_vae_free(p->vae);
    p->te = te;
    p->vae = vae;
    return true;
}

/* 2 ** (len(vae.config.block_out_channels) - 1) */
static int64_t vae_scale(const em_pipeline *p) {
    return (int64_t)1 << (em_vae_get_config(p->vae)->n_blocks - 1);
}

bool sd_latent_shape(em_ctx *c, const em_pipeline *p, const em_pipeline_run_params *rp,
                     int64_t shape[4]) {
    const em_unet2d_config *u = em_unet2d_get_config(p->unet);
    int64_t f = vae_scale(p);
    int64_t h = rp->height ? rp->height : u->sample_size[0] * f;
    int64_t w = rp->width ? rp->width : u->sample_size[1] * f;
    if (h <= 0 || w <= 0) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, class_of(p), "%s: the unet's config.json has no "
                    "sample_size: give the height and width", p->idx.dir);
        return false;
    }
    if (h % f || w % f) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, class_of(p),
                    "height %lld and width %lld must be multiples of %lld (the VAE's scale "
                    "factor, %s)", (long long)h, (long long)w, (long long)f, p->idx.vae_dir);
        return false;
    }
    shape[0] = 1;
    shape[1] = u->in_channels;
    shape[2] = h / f;
    shape[3] = w / f;
    return true;
}

int64_t sd_prompts(const em_pipeline_run_params *rp) {
    if (rp->prompt_embeds) return em_tensor_ndim(rp->prompt_embeds) == 3
                                      ? em_tensor_dim(rp->prompt_embeds, 0) : 1;
    return rp->prompts ? rp->num_prompts : 1;
}

int64_t sd_batch(const em_pipeline_run_params *rp) {
    int64_t per = rp->num_images_per_prompt > 1 ? rp->num_images_per_prompt : 1;
    return sd_prompts(rp) * per;
}

bool sd_check_prompt_embeds(em_ctx *c, const em_pipeline *p, const em_pipeline_run_params *rp) {
    em_tensor *e = rp->prompt_embeds, *ne = rp->negative_prompt_embeds;
    em_tensor *pe = rp->pooled_prompt_embeds, *npe = rp->negative_pooled_prompt_embeds;
    if (!e && !ne && !pe && !npe) return true;
    const char *cls = p->idx.class_name, *why = NULL;
    bool xl = p->te2 != NULL;
    if (!sd_text(p))
        why = "prompt embeddings are given to StableDiffusionPipeline and "
              "StableDiffusionXLPipeline";
    else if (!e)
        why = "negative or pooled prompt embeddings need prompt_embeds";
    else if (rp->prompt || rp->prompts || rp->prompt_2 || rp->prompts_2)
        why = "prompt_embeds with a prompt: give one of them, as diffusers requires";
    else if (ne && (rp->negative_prompt || rp->negative_prompts || rp->negative_prompt_2 ||
                    rp->negative_prompts_2))
        why = "negative_prompt_embeds with a negative prompt: give one of them";
    else if (!xl && (pe || npe))
        why = "pooled prompt embeddings are StableDiffusionXLPipeline's";
    else if (xl && (!pe || (ne && !npe) || (npe && !ne)))
        why = "SDXL's prompt_embeds need pooled_prompt_embeds, and negative_prompt_embeds "
              "negative_pooled_prompt_embeds, as diffusers requires";
    if (why) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "%s (%s, %s)", why, cls, p->idx.dir);
        return false;
    }
    char s1[96], s2[96];
    int64_t d = em_unet2d_get_config(p->unet)->cross_attention_dim;
    bool ok = em_tensor_ndim(e) == 3 && em_tensor_dim(e, 0) >= 1 && em_tensor_dim(e, 1) >= 1 &&
              em_tensor_dim(e, 2) == d && em_tensor_dtype(e) == EM_F32;
    if (ok && ne)
        ok = em_tensor_ndim(ne) == 3 && em_tensor_dtype(ne) == EM_F32 &&
             !memcmp(em_tensor_shape(ne), em_tensor_shape(e), 3 * sizeof(int64_t));
    if (!ok) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP, "prompt_embeds %s%s%s: f32 [n, L, %lld] (the unet's "
                    "cross_attention_dim), the negatives' the same shape",
                    em_tensor_sig(e, s1, sizeof s1), ne ? ", negative_prompt_embeds " : "",
                    ne ? em_tensor_sig(ne, s2, sizeof s2) : "", (long long)d);
        return false;
    }
    int64_t n = em_tensor_dim(e, 0);
    for (int i = 0; xl && i < 2; i++) { /* the pooled ones: [n, projection_dim] */
        em_tensor *t = i ? npe : pe;
        int64_t w = em_clip_text_get_config(p->te2)->projection_dim;
        if (t && (em_tensor_ndim(t) != 2 || em_tensor_dim(t, 0) != n ||
                  em_tensor_dim(t, 1) != w || em_tensor_dtype(t) != EM_F32)) {
            em_ctx_fail(c, EM_ERR_SHAPE, "StableDiffusionXLPipeline", "%s %s: f32 [%lld, %lld] "
                        "(prompt_embeds' rows, text_encoder_2's projection_dim)",
                        i ? "negative_pooled_prompt_embeds" : "pooled_prompt_embeds",
                        em_tensor_sig(t, s1, sizeof s1), (long long)n, (long long)w);
            return false;
        }
    }
    if (rp->negative_prompt && n != 1) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "negative_prompt (a string) with %lld rows of "
                    "prompt_embeds: give %lld negative_prompts", (long long)n, (long long)n);
        return false;
    }
    if (rp->negative_prompts && rp->num_prompts != n) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "%lld negative_prompts (num_prompts) for %lld rows "
                    "of prompt_embeds", (long long)rp->num_prompts, (long long)n);
        return false;
    }
    for (int64_t i = 0; rp->negative_prompts && i < n; i++)
        if (!rp->negative_prompts[i]) {
            em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "negative prompt %lld of %lld is NULL",
                        (long long)i, (long long)n);
            return false;
        }
    return true;
}

const char **sd_prompt_texts(em_ctx *c, const em_pipeline_run_params *rp) {
    int64_t n = sd_prompts(rp);
    const char **text = malloc(2 * (size_t)n * sizeof *text);
    if (!text) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        /* negative_prompts come with prompts or prompt_embeds, negative_prompt without a list */
        const char *neg = rp->negative_prompts ? rp->negative_prompts[i] : rp->negative_prompt;
        text[i] = neg ? neg : "";
        text[n + i] = rp->prompts ? rp->prompts[i] : rp->prompt ? rp->prompt : "";
    }
    return text;
}

/* encode_prompt with prompt_embeds given: the negatives' embeddings given, or their texts
 * encoded at the prompt embeddings' length, before them under guidance. */
static em_tensor *given_embeds(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp,
                               bool cfg) {
    em_tensor *e = rp->prompt_embeds, *neg = rp->negative_prompt_embeds;
    int64_t n = em_tensor_dim(e, 0), len = em_tensor_dim(e, 1);
    em_device *tdev = em_clip_text_device(p->te);
    if (cfg && !neg) {
        const char **text = malloc((size_t)n * sizeof *text);
        if (!text) {
            em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
            return NULL;
        }
        for (int64_t i = 0; i < n; i++) {
            const char *t = rp->negative_prompts ? rp->negative_prompts[i] : rp->negative_prompt;
            text[i] = t ? t : "";
        }
        em_device *prev = em_ctx_device(c);
        em_ctx_set_device(c, tdev);
        em_tensor *ids = em_clip_tokenize_batch(c, p->tok, text, (int)n, len, NULL);
        em_ctx_set_device(c, prev);
        free(text);
        neg = ids ? em_clip_text_prompt_embeds(c, p->te, ids, NULL, 0) : NULL;
        if (!neg) return NULL;
    }
    em_device *dev = em_unet2d_device(p->unet);
    if (em_tensor_device(e) != dev) e = em_to(c, e, dev);
    if (cfg && neg && em_tensor_device(neg) != dev) neg = em_to(c, neg, dev);
    em_tensor *pair[2] = {neg, e};
    return cfg ? (e && neg ? em_cat(c, pair, 2, 0) : NULL) : e;
}

em_tensor *sd_prompt_embeds(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp) {
    if (rp->prompt_embeds) {
        bool cfg = rp->guidance_scale > 1.0;
        int64_t per = sd_batch(rp) / em_tensor_dim(rp->prompt_embeds, 0);
        em_tensor *e = given_embeds(c, p, rp, cfg);
        return e && per > 1 ? em_repeat_interleave(c, e, per, 0) : e;
    }
    /* the negative prompts' embeddings first, as diffusers concatenates [negative, prompt];
     * None is the empty string. Tokenized to the same max_length (model_max_length), every row
     * is what encode_prompt makes (the text encoder sees no padding mask unless its config sets
     * use_attention_mask, which CLIPTextConfig does not), so one batch serves both halves */
    bool cfg = rp->guidance_scale > 1.0;
    int64_t n = rp->prompts ? rp->num_prompts : 1;
    const char **text = sd_prompt_texts(c, rp);
    if (!text) return NULL;
    em_device *prev = em_ctx_device(c);
    em_ctx_set_device(c, em_clip_text_device(p->te));
    em_tensor *ids = em_clip_tokenize_batch(c, p->tok, cfg ? text : text + n,
                                            (int)(cfg ? 2 * n : n), 0, NULL);
    em_ctx_set_device(c, prev);
    free(text);
    em_tensor *e = ids ? em_clip_text_prompt_embeds(c, p->te, ids, NULL, 0) : NULL;
    /* prompt_embeds.repeat(1, num_images_per_prompt, 1).view(...): each row n times */
    int64_t per = sd_batch(rp) / n;
    if (e && per > 1) e = em_repeat_interleave(c, e, per, 0);
    em_device *dev = em_unet2d_device(p->unet);
    if (e && em_tensor_device(e) != dev) e = em_to(c, e, dev);
    return e;
}

em_tensor *sd_decode(em_ctx *c, em_pipeline *p, em_tensor *latents, bool tiled, bool sliced) {
    em_vae_enable_slicing(p->vae, sliced);
    em_device *dev = em_vae_device(p->vae);
    if (em_tensor_device(latents) != dev) latents = em_to(c, latents, dev);
    double sf = em_vae_get_config(p->vae)->scaling_factor;
    em_tensor *z = latents ? pipeline_as(c, em_div_scalar(c, latents, sf), p->vae_dtype) : NULL;
    if (!z) return NULL;
    return pipeline_as(c, tiled ? em_vae_decode_tiled(c, p->vae, z, NULL)
                                : em_vae_decode(c, p->vae, z), EM_F32);
}

em_tensor *sd_image_input(em_ctx *c, em_pipeline *p, em_tensor *image, int64_t height,
                          int64_t width) {
    const int64_t *s = em_tensor_shape(image);
    int64_t f = vae_scale(p);
    char sig[96];
    if (em_tensor_ndim(image) != 4 || s[0] != 1 || s[3] != 3 || s[1] < 1 || s[2] < 1) {
        em_ctx_fail(c, EM_ERR_SHAPE, class_of(p), "the init image is %s: it must be [1, H, W, 3] "
                    "(RGB in [0, 1], the layout the pipeline returns)",
                    em_tensor_sig(image, sig, sizeof sig));
        return NULL;
    }
    if (em_tensor_dtype(image) != EM_F32) {
        em_ctx_fail(c, EM_ERR_DTYPE, class_of(p), "the init image is %s: it must be f32",
                    em_tensor_sig(image, sig, sizeof sig));
        return NULL;
    }
    if (s[1] % f || s[2] % f || (height && height != s[1]) || (width && width != s[2])) {
        em_ctx_fail(c, EM_ERR_SHAPE, class_of(p), "the init image is %lld x %lld: its sides "
                    "must be multiples of %lld (the VAE's scale factor, %s)%s", (long long)s[1],
                    (long long)s[2], (long long)f, p->idx.vae_dir,
                    height || width ? " and equal to the height and width given (Ember does "
                                      "not resize)" : "");
        return NULL;
    }
    /* VaeImageProcessor.preprocess: NHWC -> NCHW, 2 * x - 1 */
    em_device *dev = em_vae_device(p->vae);
    em_tensor *x = em_tensor_device(image) == dev ? image : em_to(c, image, dev);
    x = em_contiguous(c, em_permute(c, x, 4, (const int[]){0, 3, 1, 2}));
    return em_add_scalar(c, em_mul_scalar(c, x, 2.0), -1.0);
}

em_tensor *sd_encode_sample(em_ctx *c, em_pipeline *p, em_tensor *x, em_torch_generator *g,
                            bool tiled, int64_t rows) {
    em_vae_latent_dist d;
    x = pipeline_as(c, x, p->vae_dtype);
    if (!x || (tiled ? em_vae_encode_tiled(c, p->vae, x, NULL, &d) : em_vae_encode(c, p->vae, x, &d)))
        return NULL;
    /* the posterior in f32, as the latents (a half-precision VAE's moments cast) */
    d.mean = pipeline_as(c, d.mean, EM_F32);
    d.logvar = pipeline_as(c, d.logvar, EM_F32);
    if (!d.mean || !d.logvar) return NULL;
    if (rows > 1) { /* one image encoded per row (the same, so once) and sampled per row */
        d.mean = em_repeat_interleave(c, d.mean, rows, 0);
        d.logvar = em_repeat_interleave(c, d.logvar, rows, 0);
        if (!d.mean || !d.logvar) return NULL;
    }
    /* retrieve_latents(..., sample_mode="sample"): the posterior's draw */
    em_tensor *eps = em_torch_randn(c, g, 4, em_tensor_shape(d.mean), em_vae_device(p->vae));
    em_tensor *z = eps ? em_vae_latent_sample(c, &d, eps) : NULL;
    return em_mul_scalar(c, z, em_vae_get_config(p->vae)->scaling_factor);
}

em_tensor *sd_image_latents(em_ctx *c, em_pipeline *p, em_tensor *image, int64_t height,
                            int64_t width, int64_t batch, em_torch_generator *g, double t,
                            bool tiled) {
    em_tensor *x = sd_image_input(c, p, image, height, width);
    /* the posterior's draw comes first. prepare_latents: one image for a batch of B is encoded
     * once and repeated (torch.cat([z] * B)); with a list of generators the image is repeated
     * first and row i sampled from generator i. The noise below is one draw of the batch's
     * shape */
    int64_t rows = em_torch_generator_count(g) > 1 ? batch : 1;
    em_tensor *z = x ? sd_encode_sample(c, p, x, g, tiled, rows) : NULL;
    return z ? noised_latents(c, p, z, batch, g, t) : NULL;
}

em_tensor *noised_latents(em_ctx *c, em_pipeline *p, em_tensor *z, int64_t batch,
                          em_torch_generator *g, double t) {
    /* torch.cat([init_latents] * (batch // rows)) */
    if (em_tensor_dim(z, 0) < batch) z = em_repeat_interleave(c, z, batch, 0);
    em_device *udev = em_unet2d_device(p->unet);
    if (z && em_tensor_device(z) != udev) z = em_to(c, z, udev);
    if (!z || !g) return z;
    em_tensor *noise = em_torch_randn(c, g, 4, em_tensor_shape(z), udev);
    return noise ? em_scheduler_add_noise(c, p->sched, z, noise, t) : NULL;
}

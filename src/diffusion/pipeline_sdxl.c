/* StableDiffusionXLPipeline's own pieces (diffusers 0.42, pipelines/stable_diffusion_xl/
 * pipeline_stable_diffusion_xl.py): the second tokenizer and text encoder, encode_prompt over
 * both encoders (hidden_states[-2] side by side, the pooled text_embeds of text_encoder_2,
 * force_zeros_for_empty_prompt) and _get_add_time_ids. The rest of the run is Stable
 * Diffusion's (pipeline_sd.c) and the loop of pipeline.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/pipeline_impl.h"

#define OP "StableDiffusionXLPipeline"

/* diffusers decodes latents * latents_std / scaling_factor + latents_mean when the VAE's config
 * has both; Ember decodes latents / scaling_factor only, so such a VAE is refused by name. */
static bool check_vae_stats(em_ctx *c, const em_pipeline *p) {
    const em_vae_config *v = em_vae_get_config(p->vae);
    if (!v->has_latents_mean || !v->has_latents_std) return true;
    em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP, "%s/config.json: latents_mean / latents_std set is not "
                "supported (only null is: the decode is latents / scaling_factor)", p->idx.vae_dir);
    return false;
}

/* _get_add_time_ids' width: (original size, crop corner, target size), or with
 * requires_aesthetics_score (original size, crop corner, aesthetic score) */
static int64_t time_ids_count(const em_pipeline *p) {
    return p->idx.requires_aesthetics_score ? 5 : 6;
}

bool sdxl_load(em_ctx *c, em_pipeline *p, const char *device) {
    if (!check_vae_stats(c, p)) return false;
    p->tok2 = em_clip_tokenizer_load(c, p->idx.tokenizer_2_dir);
    if (p->tok2) p->te2 = em_clip_text_load(c, p->idx.text_encoder_2_dir, device);
    if (!p->te2) return false;
    const em_unet2d_config *u = em_unet2d_get_config(p->unet);
    const em_clip_text_config *t2 = em_clip_text_get_config(p->te2);
    if (!u->text_time) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP, "%s: the unet has no addition_embed_type "
                    "'text_time', which %s feeds", p->idx.unet_dir, OP);
        return false;
    }
    /* the pooled text_embeds and the time ids' embeddings side by side: SDXL base's 6 ids, a
     * refiner's 5 (its aesthetic score in place of the target size) */
    int64_t ids = time_ids_count(p);
    if (!t2->has_projection ||
        t2->projection_dim + ids * u->addition_time_embed_dim !=
            u->projection_class_embeddings_input_dim) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP,
                    "%s: text_encoder_2's pooled text_embeds are %lld wide%s, the unet takes "
                    "%lld (projection_class_embeddings_input_dim %lld - %lld time ids * "
                    "addition_time_embed_dim %lld%s)", p->idx.dir, (long long)t2->projection_dim,
                    t2->has_projection ? "" : " but it has no text_projection",
                    (long long)(u->projection_class_embeddings_input_dim -
                                ids * u->addition_time_embed_dim),
                    (long long)u->projection_class_embeddings_input_dim, (long long)ids,
                    (long long)u->addition_time_embed_dim,
                    ids == 5 ? "; requires_aesthetics_score: 5 ids" : "");
        return false;
    }
    if (!p->tok) return true; /* a refiner: text_encoder_2 alone */
    int64_t l1 = em_clip_tokenizer_max_length(p->tok), l2 = em_clip_tokenizer_max_length(p->tok2);
    if (l1 != l2) { /* the two encoders' states are concatenated position by position */
        em_ctx_fail(c, EM_ERR_SHAPE, OP, "%s: tokenizer model_max_length %lld but tokenizer_2's "
                    "%lld: the prompt embeddings need one length", p->idx.dir, (long long)l1,
                    (long long)l2);
        return false;
    }
    return true;
}

bool sdxl_to(em_ctx *c, em_pipeline *p, const char *device) {
    em_clip_text *te2 = em_clip_text_load(c, p->idx.text_encoder_2_dir, device);
    if (!te2) return false;
    em_clip_text_free(p->te2);
    p->te2 = te2;
    return true;
}

/* text_encoder(tokenizer(texts, padding="max_length", truncation=True), output_hidden_states=
 * True): hidden_states[-2] [n, L, H] and, from a projecting encoder, text_embeds [n, P]. */
static em_tensor *encode(em_ctx *c, const em_clip_tokenizer *tok, const em_clip_text *te,
                         const char *const *texts, int n, int64_t max_length,
                         em_tensor **pooled) {
    em_device *prev = em_ctx_device(c);
    em_ctx_set_device(c, em_clip_text_device(te));
    em_tensor *ids = em_clip_tokenize_batch(c, tok, texts, n, max_length, NULL);
    em_ctx_set_device(c, prev);
    em_clip_text_output o;
    if (!ids || em_clip_text_forward(c, te, ids, NULL, -2, &o) != EM_OK) return NULL;
    if (pooled) *pooled = o.text_embeds;
    return o.hidden_state;
}

/* em_pipeline_run's checks name the run, as pipeline.c's do */
#define RUN_OP "pipeline"

bool sdxl_check_prompts_2(em_ctx *c, const em_pipeline *p, const em_pipeline_run_params *rp) {
    const char *one = rp->prompt_2            ? "prompt_2"
                      : rp->negative_prompt_2 ? "negative_prompt_2"
                                              : NULL;
    const char *list = rp->prompts_2 ? "prompts_2" : rp->negative_prompts_2 ? "negative_prompts_2"
                                                                            : NULL;
    if (!one && !list) return true;
    if (!p->te2 && !p->flux) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, RUN_OP, "%s given to %s (%s): second prompts are "
                    "text_encoder_2's (SDXL, SD3; Flux's T5)", one ? one : list,
                    em_pipeline_class_name(p->idx.pipeline), p->idx.dir);
        return false;
    }
    if (one && rp->prompts) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, RUN_OP, "%s with a list of prompts: give prompts_2 / "
                    "negative_prompts_2 (one per prompt)", one);
        return false;
    }
    if (list && !rp->prompts) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, RUN_OP, "%s without a list of prompts: give prompt_2 / "
                    "negative_prompt_2", list);
        return false;
    }
    for (int64_t i = 0; list && i < rp->num_prompts; i++) {
        const char *bad = rp->prompts_2 && !rp->prompts_2[i] ? "prompts_2"
                          : rp->negative_prompts_2 && !rp->negative_prompts_2[i]
                              ? "negative_prompts_2"
                              : NULL;
        if (bad) {
            em_ctx_fail(c, EM_ERR_INVALID_ARG, RUN_OP, "%s[%lld] is NULL", bad, (long long)i);
            return false;
        }
    }
    return true;
}

/* The texts of tokenizer_2 / text_encoder_2, malloc'd like `text` (n negatives then n
 * prompts): encode_prompt's `prompt_2 = prompt_2 or prompt` and `negative_prompt_2 =
 * negative_prompt_2 or negative_prompt` — a string "" falls back, a list is taken whole. */
const char **sdxl_second_texts(em_ctx *c, const em_pipeline_run_params *rp,
                               const char *const *text, int64_t n) {
    const char **t2 = malloc(2 * (size_t)n * sizeof *t2);
    if (!t2) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    const char *neg2 = rp->negative_prompt_2 && *rp->negative_prompt_2 ? rp->negative_prompt_2
                                                                        : NULL;
    const char *p2 = rp->prompt_2 && *rp->prompt_2 ? rp->prompt_2 : NULL;
    for (int64_t i = 0; i < n; i++) {
        const char *a = rp->negative_prompts_2 ? rp->negative_prompts_2[i] : neg2;
        const char *b = rp->prompts_2 ? rp->prompts_2[i] : p2;
        t2[i] = a ? a : text[i];
        t2[n + i] = b ? b : text[n + i];
    }
    return t2;
}

/* zeros shaped as t on t's device (torch.zeros_like) */
static em_tensor *zeros_like(em_ctx *c, em_tensor *t) {
    em_device *prev = em_ctx_device(c);
    em_ctx_set_device(c, em_tensor_device(t));
    em_tensor *z = em_zeros(c, em_tensor_dtype(t), em_tensor_ndim(t), em_tensor_shape(t));
    em_ctx_set_device(c, prev);
    return z;
}

/* [a; b] along dimension 0 */
static em_tensor *rows(em_ctx *c, em_tensor *a, em_tensor *b) {
    em_tensor *pair[2] = {a, b};
    return a && b ? em_cat(c, pair, 2, 0) : NULL;
}

em_tensor *sdxl_prompt_embeds(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp,
                              em_unet2d_added_cond *added) {
    int64_t shape[4];
    if (!sd_latent_shape(c, p, rp, shape)) return NULL;
    bool cfg = rp->guidance_scale > 1.0;
    int64_t n = sd_prompts(rp);
    /* zero_out_negative_prompt = negative_prompt is None and force_zeros_for_empty_prompt; a
     * given "" is encoded like any prompt */
    bool none = rp->negative_prompts ? false : !rp->negative_prompt;
    bool zero = cfg && none && p->idx.force_zeros_for_empty_prompt;
    bool encode_neg = cfg && !zero;
    /* prompt embeddings given: only the negatives are encoded (at their length L), when
     * neither given nor zeroed */
    em_tensor *given = rp->prompt_embeds;
    if (given && rp->negative_prompt_embeds) encode_neg = zero = false;
    int64_t max_len = given ? em_tensor_dim(given, 1) : 0;
    const char **text = sd_prompt_texts(c, rp); /* negative_prompt or "" */
    const char **text2 = text ? sdxl_second_texts(c, rp, text, n) : NULL;
    if (!text2) {
        free(text);
        return NULL;
    }
    /* the first texts through the first encoder, the second through the second; the
     * negatives are tokenized to the prompts' length, model_max_length, which the two
     * tokenizers share (sdxl_load) */
    int64_t skip = encode_neg ? 0 : n;
    int rows_in = (int)(encode_neg ? 2 * n : n);
    if (given) rows_in = encode_neg ? (int)n : 0; /* the negatives alone */
    em_tensor *pooled = NULL, *h1 = NULL, *h2 = NULL, *e = NULL;
    if (rows_in && p->te) {
        h1 = encode(c, p->tok, p->te, text + skip, rows_in, max_len, NULL);
        if (h1) h2 = encode(c, p->tok2, p->te2, text2 + skip, rows_in, max_len, &pooled);
    } else if (rows_in) { /* a refiner: encode_prompt zips [prompt, prompt_2] with
                             [tokenizer_2], so the second encoder takes the first prompts and
                             prompt_2 goes unused */
        h2 = encode(c, p->tok2, p->te2, text + skip, rows_in, max_len, &pooled);
    }
    free(text);
    free(text2);
    em_device *dev = em_unet2d_device(p->unet);
    if (h1 && em_tensor_device(h1) != dev) h1 = em_to(c, h1, dev);
    if (h2 && em_tensor_device(h2) != dev) h2 = em_to(c, h2, dev);
    if (h2 && pooled && em_tensor_device(pooled) != dev) pooled = em_to(c, pooled, dev);
    em_tensor *pair[2] = {h1, h2};
    if (h2 && pooled) e = h1 ? em_cat(c, pair, 2, 2) : h2;
    if (given) { /* [negatives (encoded above, given, or zeros below); the given prompts'] */
        em_tensor *pos = em_to(c, given, dev), *pos_pool = em_to(c, rp->pooled_prompt_embeds, dev);
        if (!cfg) {
            e = pos;
            pooled = pos_pool;
        } else if (rp->negative_prompt_embeds) {
            e = rows(c, em_to(c, rp->negative_prompt_embeds, dev), pos);
            pooled = rows(c, em_to(c, rp->negative_pooled_prompt_embeds, dev), pos_pool);
        } else if (!zero) {
            e = rows(c, e, pos);
            pooled = rows(c, pooled, pos_pool);
        } else {
            e = pos;
            pooled = pos_pool;
        }
    }
    if (!e || !pooled) return NULL;
    if (zero) { /* torch.zeros_like of both, before the prompts' */
        e = rows(c, zeros_like(c, e), e);
        pooled = rows(c, zeros_like(c, pooled), pooled);
    }
    /* .repeat(1, num_images_per_prompt, 1).view(...): each row num_images_per_prompt times */
    int64_t per = sd_batch(rp) / n;
    if (e && per > 1) {
        e = em_repeat_interleave(c, e, per, 0);
        pooled = em_repeat_interleave(c, pooled, per, 0);
    }
    if (!e || !pooled) return NULL;
    /* add_time_ids: original_size (height, width) + crops_coords_top_left (0, 0) + target_size
     * (height, width), the same for every row (negative_add_time_ids = add_time_ids); with
     * requires_aesthetics_score original_size + crops_coords_top_left + (aesthetic_score,), the
     * negatives' rows negative_aesthetic_score.
     * StableDiffusionXLImg2ImgPipeline takes height and width from the init image's latents,
     * i.e. the image's size (sd_image_latents checks it against the VAE's scale factor) */
    int64_t f = (int64_t)1 << (em_vae_get_config(p->vae)->n_blocks - 1);
    float h = (float)(shape[2] * f), w = (float)(shape[3] * f);
    if (rp->image && em_tensor_ndim(rp->image) == 4) {
        h = (float)em_tensor_dim(rp->image, 1);
        w = (float)em_tensor_dim(rp->image, 2);
    } else if (rp->image_latents && em_tensor_ndim(rp->image_latents) == 4) {
        h = (float)(em_tensor_dim(rp->image_latents, 2) * f);
        w = (float)(em_tensor_dim(rp->image_latents, 3) * f);
    }
    int64_t m = em_tensor_dim(e, 0), k = time_ids_count(p);
    float *ids = malloc((size_t)(m * k) * sizeof *ids);
    if (!ids) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < m; i++) {
        float *r = ids + k * i;
        r[0] = h;
        r[1] = w;
        r[2] = r[3] = 0.0f;
        if (k == 6) {
            r[4] = h;
            r[5] = w;
        } else { /* under guidance the first half of the rows are the negatives */
            r[4] = (float)(cfg && i < m / 2 ? rp->negative_aesthetic_score : rp->aesthetic_score);
        }
    }
    added->time_ids = em_from_host_on(c, dev, EM_F32, 2, (int64_t[]){m, k}, ids);
    free(ids);
    added->text_embeds = pooled;
    return added->time_ids ? e : NULL;
}

/* denoising_end / denoising_start's discrete_timestep_cutoff: int(round(T - frac * T)), Python's
 * round (half to even, which nearbyint gives in the default rounding mode) */
static double cutoff(const em_pipeline *p, double frac) {
    double t = (double)em_scheduler_num_train_timesteps(p->sched);
    return nearbyint(t - frac * t);
}

int64_t sdxl_start_step(em_ctx *c, em_pipeline *p, double denoising_start) {
    int64_t n = 0, keep = 0;
    const double *ts = em_scheduler_timesteps(p->sched, &n);
    double cut = cutoff(p, denoising_start);
    for (int64_t i = 0; i < n; i++) keep += ts[i] < cut;
    /* (Ember's schedulers are all first order: no second-order adjustment of the count) */
    if (keep < 1) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "denoising_start %g keeps no timestep of %lld "
                    "(none below %g): lower it or take more steps", denoising_start, (long long)n,
                    cut);
        return -1;
    }
    return set_begin(c, p, n - keep);
}

int64_t sdxl_end_count(const em_pipeline *p, int64_t first, double denoising_end) {
    int64_t n = 0, count = 0;
    const double *ts = em_scheduler_timesteps(p->sched, &n);
    double cut = cutoff(p, denoising_end);
    for (int64_t i = first; i < n; i++) count += ts[i] >= cut;
    return count;
}

em_tensor *sdxl_given_latents(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp,
                              em_torch_generator *g, double t, bool add_noise) {
    em_tensor *z = rp->image_latents;
    int64_t batch = sd_batch(rp), ch = em_vae_get_config(p->vae)->latent_channels;
    char sig[96];
    if (em_tensor_ndim(z) != 4 || (em_tensor_dim(z, 0) != 1 && em_tensor_dim(z, 0) != batch) ||
        em_tensor_dim(z, 1) != ch || em_tensor_dtype(z) != EM_F32) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP, "image_latents %s: f32 [1 or %lld, %lld, h, w] (the "
                    "batch, the VAE's latent_channels)", em_tensor_sig(z, sig, sizeof sig),
                    (long long)batch, (long long)ch);
        return NULL;
    }
    return noised_latents(c, p, z, batch, add_noise ? g : NULL, t);
}

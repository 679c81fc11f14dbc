/* StableDiffusion3Pipeline (diffusers 0.42, pipelines/stable_diffusion_3/
 * pipeline_stable_diffusion_3.py): encode_prompt over the two CLIP encoders (hidden_states[-2]
 * side by side, zero-padded to joint_attention_dim) followed along the sequence by the T5's
 * last_hidden_state for max_sequence_length tokens (_get_t5_prompt_embeds), or as many zero
 * tokens without text_encoder_3; pooled = both text_embeds side by side), the
 * FlowMatch loop with classifier-free guidance on [negatives; prompts], and the decode of
 * latents / scaling_factor + shift_factor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/pipeline_impl.h"
#include "diffusion/sched_impl.h"

#define OP "StableDiffusion3Pipeline"
#define RUN_OP "pipeline" /* em_pipeline_run's checks name the run, as pipeline.c's do */

static int64_t vae_factor(const em_pipeline *p) {
    return (int64_t)1 << (em_vae_get_config(p->vae)->n_blocks - 1);
}

/* The components agree: the CLIP states fit joint_attention_dim, the two text_embeds make
 * pooled_projection_dim, the VAE's latents are the transformer's channels. */
static bool check_components(em_ctx *c, const em_pipeline *p) {
    const em_sd3_config *t = em_sd3_get_config(p->sd3);
    const em_clip_text_config *a = em_clip_text_get_config(p->te);
    const em_clip_text_config *b = em_clip_text_get_config(p->te2);
    const em_vae_config *v = em_vae_get_config(p->vae);
    if (!a->has_projection || !b->has_projection) {
        em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s: %s has no text_projection (the pooled prompt "
                    "embeddings are both encoders' text_embeds)", p->idx.dir,
                    a->has_projection ? "text_encoder_2" : "text_encoder");
        return false;
    }
    if (a->hidden_size + b->hidden_size > t->joint_attention_dim ||
        a->projection_dim + b->projection_dim != t->pooled_projection_dim ||
        v->latent_channels != t->in_channels || v->latent_channels != t->out_channels) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP,
                    "%s: the components disagree: text encoders' hidden sizes %lld + %lld (at "
                    "most joint_attention_dim %lld) and projection dims %lld + %lld "
                    "(pooled_projection_dim %lld); vae latent_channels %lld, transformer "
                    "in_channels %lld and out_channels %lld", p->idx.dir,
                    (long long)a->hidden_size, (long long)b->hidden_size,
                    (long long)t->joint_attention_dim, (long long)a->projection_dim,
                    (long long)b->projection_dim, (long long)t->pooled_projection_dim,
                    (long long)v->latent_channels, (long long)t->in_channels,
                    (long long)t->out_channels);
        return false;
    }
    if (v->has_latents_mean && v->has_latents_std) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP, "%s/config.json: latents_mean / latents_std set "
                    "is not supported (StableDiffusion3Pipeline decodes latents / "
                    "scaling_factor + shift_factor)", p->idx.vae_dir);
        return false;
    }
    if (p->te3 && em_t5_encoder_get_config(p->te3)->d_model != t->joint_attention_dim) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP, "%s: text_encoder_3's d_model %lld is not the "
                    "transformer's joint_attention_dim %lld", p->idx.dir,
                    (long long)em_t5_encoder_get_config(p->te3)->d_model,
                    (long long)t->joint_attention_dim);
        return false;
    }
    int64_t l1 = em_clip_tokenizer_max_length(p->tok), l2 = em_clip_tokenizer_max_length(p->tok2);
    if (l1 != l2) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP, "%s: tokenizer model_max_length %lld but tokenizer_2's "
                    "%lld: the prompt embeddings need one length", p->idx.dir, (long long)l1,
                    (long long)l2);
        return false;
    }
    return true;
}

bool sd3_load(em_ctx *c, em_pipeline *p, const char *device) {
    if (!(p->sd3 = em_sd3_load_tp(c, p->idx.transformer_dir, device, p->dtype, p->tp)) ||
        em_sd3_set_context_parallel(c, p->sd3, p->cp) != EM_OK ||
        em_sd3_set_cp_schedule(c, p->sd3, p->cp_schedule) != EM_OK ||
        em_sd3_set_cp_degrees(c, p->sd3, p->cp_ring, p->cp_ulysses) != EM_OK)
        return false;
    device = em_device_name(em_sd3_device(p->sd3)); /* a tensor-parallel rank's */
    if (!(p->vae = em_vae_load(c, p->idx.vae_dir, device, p->vae_dtype)) ||
        !(p->tok = em_clip_tokenizer_load(c, p->idx.tokenizer_dir)) ||
        !(p->te = em_clip_text_load(c, p->idx.text_encoder_dir, device)) ||
        !(p->tok2 = em_clip_tokenizer_load(c, p->idx.tokenizer_2_dir)) ||
        !(p->te2 = em_clip_text_load(c, p->idx.text_encoder_2_dir, device)))
        return false;
    if (p->idx.text_encoder_3_dir &&
        (!(p->tok3 = em_t5_tokenizer_load(c, p->idx.tokenizer_3_dir)) ||
         !(p->te3 = em_t5_encoder_load(c, p->idx.text_encoder_3_dir, device))))
        return false;
    return check_components(c, p);
}

/* What the run takes: prompts (one or a list; pipeline.c's check_batch has checked the batch),
 * negative prompts, their second-encoder texts, a size in multiples of the VAE factor times the
 * patch, max_sequence_length in [0, 512], seeds (one per image); the options of the other
 * pipelines are refused by name. */
static bool check_run(em_ctx *c, const em_pipeline *p, const em_pipeline_run_params *rp) {
    return flow_check_run(c, p, rp, NULL);
}

/* _get_clip_prompt_embeds of encoder te for texts[0..n): hidden_states[-2] [n, L, H] and the
 * text_embeds [n, P] in *pooled. */
static em_tensor *clip_embeds(em_ctx *c, const em_clip_tokenizer *tok, const em_clip_text *te,
                              const char *const *texts, int n, em_tensor **pooled) {
    em_clip_text_output o;
    if (flow_clip_encode(c, tok, te, texts, n, -2, &o) != EM_OK) return NULL;
    *pooled = o.text_embeds;
    return o.hidden_state;
}

/* zeros f32 of shape[3] on dev */
static em_tensor *zeros_on(em_ctx *c, em_device *dev, const int64_t *shape) {
    em_device *prev = em_ctx_device(c);
    em_ctx_set_device(c, dev);
    em_tensor *z = em_zeros(c, EM_F32, 3, shape);
    em_ctx_set_device(c, prev);
    return z;
}

/* _get_t5_prompt_embeds for texts[0..n) on dev; zeros [n, msl, J] without a T5. */
static em_tensor *t5_embeds(em_ctx *c, em_pipeline *p, const char *const *texts, int n,
                            int64_t msl, int64_t J, em_device *dev) {
    if (!p->te3) return zeros_on(c, dev, (int64_t[]){n, msl, J});
    return flow_t5_embeds(c, p->tok3, p->te3, texts, n, msl, dev);
}

/* encode_prompt for texts[0..n) of the first encoder and the T5 (prompt_3 is prompt, as
 * diffusers' `prompt_3 or prompt`) and texts2 of the second (n 2 under guidance: the negative
 * prompt, then the prompt): the prompt embeddings [n, L + msl, J] and in *pooled [n, P1 + P2],
 * on the transformer's device, in the current scope. */
static em_tensor *prompt_embeds(em_ctx *c, em_pipeline *p, const char *const *texts,
                                const char *const *texts2, int n, int64_t msl,
                                em_tensor **pooled) {
    int64_t J = em_sd3_get_config(p->sd3)->joint_attention_dim;
    em_device *dev = em_sd3_device(p->sd3);
    em_tensor *p1 = NULL, *p2 = NULL;
    em_tensor *h1 = clip_embeds(c, p->tok, p->te, texts, n, &p1);
    em_tensor *h2 = h1 ? clip_embeds(c, p->tok2, p->te2, texts2, n, &p2) : NULL;
    if (!h2) return NULL;
    if (em_tensor_device(h1) != dev) h1 = em_to(c, h1, dev), p1 = em_to(c, p1, dev);
    if (em_tensor_device(h2) != dev) h2 = em_to(c, h2, dev), p2 = em_to(c, p2, dev);
    int64_t L = em_tensor_dim(h1, 1);
    int64_t H = em_tensor_dim(h1, 2) + em_tensor_dim(h2, 2);
    em_tensor *pp[2] = {p1, p2};
    *pooled = em_cat(c, pp, 2, 1);
    /* torch.cat on features, F.pad to J with zeros, then the T5 zeros [n, msl, J] */
    em_tensor *feat[3] = {h1, h2, J > H ? zeros_on(c, dev, (int64_t[]){n, L, J - H}) : NULL};
    em_tensor *clip = em_cat(c, feat, J > H ? 3 : 2, 2);
    em_tensor *t5 = t5_embeds(c, p, texts, n, msl, J, dev);
    em_tensor *seq[2] = {clip, t5};
    return em_cat(c, seq, 2, 1);
}

/* prepare_latents: [B, C, H / f, W / f] drawn from g, or rp's checked and moved. */
static em_tensor *initial_latents(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp,
                                  em_torch_generator *g) {
    const em_sd3_config *t = em_sd3_get_config(p->sd3);
    int64_t f = vae_factor(p), unit = f * t->patch_size;
    int64_t h = rp->height ? rp->height : t->sample_size * f;
    int64_t w = rp->width ? rp->width : t->sample_size * f;
    if (h % unit || w % unit) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, RUN_OP, "height %lld and width %lld must be multiples "
                    "of %lld (the VAE's scale factor %lld times the patch size %lld; %s)",
                    (long long)h, (long long)w, (long long)unit, (long long)f,
                    (long long)t->patch_size, p->idx.dir);
        return NULL;
    }
    int64_t shape[4] = {sd_batch(rp), t->in_channels, h / f, w / f};
    em_device *dev = em_sd3_device(p->sd3);
    if (!rp->latents) return em_torch_randn(c, g, 4, shape, dev);
    return flow_given_latents(c, p, rp->latents, 4, shape, dev);
}

/* retrieve_timesteps: with use_dynamic_shifting, mu = calculate_shift(image_seq_len, the
 * config's base_image_seq_len, max_image_seq_len, base_shift, max_shift), image_seq_len the
 * latents' patches (h / p) * (w / p), as StableDiffusion3Pipeline.__call__ computes it. */
static em_status set_timesteps(em_ctx *c, em_pipeline *p, int64_t steps, em_tensor *x) {
    if (!p->sched->cfg.use_dynamic_shifting) return em_scheduler_set_timesteps(c, p->sched, steps);
    int64_t patch = em_sd3_get_config(p->sd3)->patch_size;
    double seq = (double)((em_tensor_dim(x, 2) / patch) * (em_tensor_dim(x, 3) / patch)), mu;
    if (!flow_calculate_shift(c, p, seq, &mu)) return em_ctx_status(c);
    return em_scheduler_set_timesteps_mu(c, p->sched, steps, mu);
}

/* The transformer's step as a compiled function: in[0] the latent model input, in[1] the
 * prompt embeddings, in[2] the pooled ones, in[3] the timesteps (an input, so that every step
 * runs the same program). */
static int sd3_step(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *statics,
                    int n_statics, em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)statics, (void)n_statics, (void)max_out;
    out[0] = em_sd3_forward(c, user, in[0], in[1], in[2], in[3]);
    return out[0] ? 1 : -1;
}

typedef struct sd3_run {
    em_pipeline *p;
    em_tensor *ctx, *pooled; /* [2B or B, ...]: [negatives; prompts] under guidance */
    double guidance;
} sd3_run;

/* The transformer's noise prediction for the f32 latents x at t: the latent model input (doubled
 * under guidance) and the embeddings cast to the pipeline's dtype (the timesteps f32), the
 * output back to f32, uncond + g * (text - uncond). */
static em_tensor *predict(em_ctx *c, void *user, em_compiled *f, em_tensor *x, double t) {
    const sd3_run *r = user;
    em_pipeline *p = r->p;
    int64_t b = em_tensor_dim(x, 0);
    bool cfg = em_tensor_dim(r->ctx, 0) == 2 * b;
    em_tensor *pair[2] = {x, x};
    em_tensor *in = pipeline_as(c, cfg ? em_cat(c, pair, 2, 0) : x, p->dtype);
    em_tensor *tt = flow_full(c, em_sd3_device(p->sd3), cfg ? 2 * b : b, (float)t);
    em_tensor *ctx = pipeline_as(c, r->ctx, p->dtype), *pooled = pipeline_as(c, r->pooled, p->dtype);
    em_tensor *pred = NULL, *args[4] = {in, ctx, pooled, tt};
    if (!f) pred = em_sd3_forward(c, p->sd3, in, ctx, pooled, tt);
    else if (em_compiled_call(c, f, args, 4, NULL, 0, &pred, 1) != 1) pred = NULL;
    pred = pipeline_as(c, pred, EM_F32);
    em_tensor *parts[2] = {NULL, NULL};
    if (cfg && pred && em_split(c, pred, b, 0, parts, 2) == 2) /* uncond, text */
        pred = em_add(c, parts[0], em_mul_scalar(c, em_sub(c, parts[1], parts[0]), r->guidance));
    return pred;
}

em_tensor *sd3_pipeline_run(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp) {
    if (!check_run(c, p, rp)) return NULL;
    double guidance = rp->guidance_scale != 0.0 ? rp->guidance_scale : 7.0;
    int64_t steps = rp->steps ? rp->steps : 28;
    int64_t msl = rp->max_sequence_length ? rp->max_sequence_length : 256;
    bool cfg = guidance > 1.0;
    int64_t n = sd_prompts(rp), per = sd_batch(rp) / n;
    /* encode_prompt: n negative prompts (None: "") then the n prompts; text_encoder_2's are
     * `prompt_2 or prompt` and `negative_prompt_2 or negative_prompt` */
    em_torch_generator *g;
    const char **texts, **texts2;
    if (!flow_run_begin(c, rp, n, &g, &texts, &texts2)) return NULL;
    em_scope_push(c);
    em_tensor *pooled = NULL;
    em_tensor *ctx = prompt_embeds(c, p, cfg ? texts : texts + n, cfg ? texts2 : texts2 + n,
                                   (int)(cfg ? 2 * n : n), msl, &pooled);
    free((void *)texts);
    free((void *)texts2);
    flow_repeat_embeds(c, per, &ctx, &pooled);
    em_tensor *x = ctx && pooled ? initial_latents(c, p, rp, g) : NULL;
    if (x) x = em_tensor_retain(x);
    sd3_run r = {p, ctx, pooled, guidance};
    if (x && set_timesteps(c, p, steps, x) == EM_OK)
        x = flow_denoise(c, p, rp, g, x, em_sd3_device(p->sd3), predict, &r,
                         rp->compile ? em_compile(c, "sd3_step", sd3_step, p->sd3) : NULL);
    em_torch_generator_free(g);
    em_tensor *img = NULL;
    if (x && !em_ctx_status(c)) img = flow_decode(c, p, x, rp->vae_slicing);
    if (em_ctx_status(c)) img = NULL;
    em_keep(c, img);
    em_scope_pop(c);
    em_tensor_release(x);
    return img;
}

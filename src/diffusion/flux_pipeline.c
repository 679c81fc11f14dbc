/* FluxPipeline (diffusers 0.42, pipelines/flux/pipeline_flux.py): encode_prompt (CLIP's
 * pooler_output of `prompt`, the T5's last_hidden_state of `prompt_2 or prompt` for
 * max_sequence_length tokens, text ids all zero), the latents drawn [B, C, H / f, W / f] and
 * packed 2x2 into [B, (H / 2f) (W / 2f), 4C] tokens with their image ids (0, row, col), the
 * FlowMatch schedule of sigmas linspace(1, 1 / steps, steps) with mu = calculate_shift(the
 * token count), guidance_scale given to a guidance_embeds transformer as its embedded guidance
 * (no classifier-free guidance: true_cfg_scale is not run), and the unpacked latents decoded
 * as latents / scaling_factor + shift_factor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/flux_impl.h"
#include "diffusion/pipeline_impl.h"

#define OP "FluxPipeline"
#define RUN_OP "pipeline" /* em_pipeline_run's checks name the run, as pipeline.c's do */
#define DEFAULT_SAMPLE_SIZE 128 /* FluxPipeline.default_sample_size */

static int64_t vae_factor(const em_pipeline *p) {
    return (int64_t)1 << (em_vae_get_config(p->vae)->n_blocks - 1);
}

/* The components agree: CLIP's hidden size is pooled_projection_dim, the T5's d_model
 * joint_attention_dim, the VAE's latent channels packed 2x2 the transformer's in_channels. */
static bool check_components(em_ctx *c, const em_pipeline *p) {
    const em_flux_config *t = em_flux_get_config(p->flux);
    const em_clip_text_config *a = em_clip_text_get_config(p->te);
    const em_vae_config *v = em_vae_get_config(p->vae);
    int64_t d = em_t5_encoder_get_config(p->te3)->d_model;
    if (a->hidden_size != t->pooled_projection_dim || d != t->joint_attention_dim ||
        4 * v->latent_channels != t->in_channels) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP,
                    "%s: the components disagree: text_encoder's hidden size %lld "
                    "(pooled_projection_dim %lld), text_encoder_2's d_model %lld "
                    "(joint_attention_dim %lld), 4 x vae latent_channels %lld (transformer "
                    "in_channels %lld)", p->idx.dir, (long long)a->hidden_size,
                    (long long)t->pooled_projection_dim, (long long)d,
                    (long long)t->joint_attention_dim, (long long)(4 * v->latent_channels),
                    (long long)t->in_channels);
        return false;
    }
    if (t->patch_size != 1 || t->out_channels != t->in_channels) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP, "%s/config.json: patch_size %lld, out_channels "
                    "%lld: FluxPipeline unpacks in_channels (%lld) features per token, patch_size "
                    "1", p->idx.transformer_dir, (long long)t->patch_size,
                    (long long)t->out_channels, (long long)t->in_channels);
        return false;
    }
    if (v->has_latents_mean && v->has_latents_std) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP, "%s/config.json: latents_mean / latents_std set "
                    "is not supported (FluxPipeline decodes latents / scaling_factor + "
                    "shift_factor)", p->idx.vae_dir);
        return false;
    }
    return true;
}

bool flux_load(em_ctx *c, em_pipeline *p, const char *device) {
    if (!(p->flux = em_flux_load_tp(c, p->idx.transformer_dir, device, p->dtype, p->tp)) ||
        em_flux_set_context_parallel(c, p->flux, p->cp) != EM_OK ||
        em_flux_set_cp_schedule(c, p->flux, p->cp_schedule) != EM_OK ||
        em_flux_set_cp_degrees(c, p->flux, p->cp_ring, p->cp_ulysses) != EM_OK)
        return false;
    device = em_device_name(em_flux_device(p->flux)); /* a tensor-parallel rank's */
    return (p->vae = em_vae_load(c, p->idx.vae_dir, device, p->vae_dtype)) &&
           (p->tok = em_clip_tokenizer_load(c, p->idx.tokenizer_dir)) &&
           (p->te = em_clip_text_load(c, p->idx.text_encoder_dir, device)) &&
           (p->tok3 = em_t5_tokenizer_load(c, p->idx.tokenizer_2_dir)) &&
           (p->te3 = em_t5_encoder_load(c, p->idx.text_encoder_2_dir, device)) &&
           check_components(c, p);
}

/* What the run takes: prompts (one or a list), prompt_2, a size in multiples of twice the VAE
 * factor, max_sequence_length in [1, 512], seeds (one per image); negative prompts
 * (true_cfg_scale) and the options of the other pipelines are refused by name. */
static bool check_run(em_ctx *c, const em_pipeline *p, const em_pipeline_run_params *rp) {
    bool neg = rp->negative_prompt || rp->negative_prompts || rp->negative_prompt_2 ||
               rp->negative_prompts_2;
    return flow_check_run(c, p, rp, neg ? "a negative prompt (FluxPipeline's true_cfg_scale)"
                                        : NULL);
}

/* encode_prompt for texts[0..n) (CLIP) and texts2 (T5): the T5 states [n, msl, J] and in
 * *pooled CLIP's pooler_output [n, H], on the transformer's device, in the current scope. */
static em_tensor *prompt_embeds(em_ctx *c, em_pipeline *p, const char *const *texts,
                                const char *const *texts2, int n, int64_t msl,
                                em_tensor **pooled) {
    em_device *dev = em_flux_device(p->flux);
    em_clip_text_output o;
    if (flow_clip_encode(c, p->tok, p->te, texts, n, 0, &o) != EM_OK) return NULL;
    *pooled = em_tensor_device(o.pooler_output) == dev ? o.pooler_output
                                                      : em_to(c, o.pooler_output, dev);
    return *pooled ? flow_t5_embeds(c, p->tok3, p->te3, texts2, n, msl, dev) : NULL;
}

/* _pack_latents: [B, C, h, w] -> [B, (h / 2) (w / 2), 4C]; _unpack_latents the inverse */
static em_tensor *pack(em_ctx *c, em_tensor *x) {
    int64_t b = em_tensor_dim(x, 0), C = em_tensor_dim(x, 1);
    int64_t h = em_tensor_dim(x, 2) / 2, w = em_tensor_dim(x, 3) / 2;
    x = em_reshape(c, x, 6, (int64_t[]){b, C, h, 2, w, 2});
    x = em_permute(c, x, 6, (const int[]){0, 2, 4, 1, 3, 5});
    return em_reshape(c, em_contiguous(c, x), 3, (int64_t[]){b, h * w, 4 * C});
}

static em_tensor *unpack(em_ctx *c, em_tensor *x, int64_t h, int64_t w) {
    int64_t b = em_tensor_dim(x, 0), C = em_tensor_dim(x, 2) / 4;
    x = em_reshape(c, x, 6, (int64_t[]){b, h / 2, w / 2, C, 2, 2});
    x = em_permute(c, x, 6, (const int[]){0, 3, 1, 4, 2, 5});
    return em_reshape(c, em_contiguous(c, x), 4, (int64_t[]){b, C, h, w});
}

/* prepare_latents: the latent size (h, w) and the packed latents [B, T, 4C], drawn from g as
 * [B, C, h, w] or rp's (packed [B, T, 4C] as diffusers takes them, or [B, C, h, w]). */
static em_tensor *initial_latents(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp,
                                  em_torch_generator *g, int64_t *lh, int64_t *lw) {
    const em_flux_config *t = em_flux_get_config(p->flux);
    int64_t f = vae_factor(p), unit = 2 * f;
    int64_t h = rp->height ? rp->height : DEFAULT_SAMPLE_SIZE * f;
    int64_t w = rp->width ? rp->width : DEFAULT_SAMPLE_SIZE * f;
    if (h % unit || w % unit) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, RUN_OP, "height %lld and width %lld must be multiples "
                    "of %lld (twice the VAE's scale factor %lld: the latents pack 2x2; %s)",
                    (long long)h, (long long)w, (long long)unit, (long long)f, p->idx.dir);
        return NULL;
    }
    *lh = h / f;
    *lw = w / f;
    int64_t B = sd_batch(rp), C = t->in_channels / 4;
    int64_t shape[4] = {B, C, *lh, *lw};
    em_device *dev = em_flux_device(p->flux);
    if (!rp->latents) return pack(c, em_torch_randn(c, g, 4, shape, dev));
    if (em_tensor_ndim(rp->latents) == 4)
        return pack(c, flow_given_latents(c, p, rp->latents, 4, shape, dev));
    int64_t packed[3] = {B, (*lh / 2) * (*lw / 2), t->in_channels};
    return flow_given_latents(c, p, rp->latents, 3, packed, dev);
}

/* The transformer's step as a compiled function: in = hidden, ctx, pooled, timestep, cos, sin
 * and the guidance when the model takes one (inputs, so that every step runs one program). */
static int flux_step(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *statics,
                     int n_statics, em_tensor **out, int max_out, void *user) {
    (void)statics, (void)n_statics, (void)max_out;
    em_flux_inputs fi = {.hidden_states = in[0], .encoder_hidden_states = in[1],
                         .pooled_projections = in[2], .timestep = in[3],
                         .guidance = n_in > 6 ? in[6] : NULL};
    out[0] = flux_forward_tables(c, user, &fi, in[4], in[5]);
    return out[0] ? 1 : -1;
}

typedef struct flux_run {
    em_pipeline *p;
    em_tensor *ctx, *pooled, *guidance, *cos, *sin; /* the pipeline's dtype; guidance f32 */
} flux_run;

/* The transformer's output (f32) for the f32 latents x at timestep t: t.expand(B) / 1000 in
 * f32, the latents cast to the pipeline's dtype and the output back. */
static em_tensor *predict(em_ctx *c, void *user, em_compiled *f, em_tensor *x, double t) {
    const flux_run *r = user;
    em_pipeline *p = r->p;
    em_tensor *in = pipeline_as(c, x, p->dtype);
    em_tensor *tt = flow_full(c, em_flux_device(p->flux), em_tensor_dim(x, 0),
                              (float)t / 1000.0f);
    if (!f) {
        em_flux_inputs fi = {.hidden_states = in, .encoder_hidden_states = r->ctx,
                             .pooled_projections = r->pooled, .timestep = tt,
                             .guidance = r->guidance};
        return pipeline_as(c, flux_forward_tables(c, p->flux, &fi, r->cos, r->sin), EM_F32);
    }
    em_tensor *out = NULL, *args[7] = {in, r->ctx, r->pooled, tt, r->cos, r->sin, r->guidance};
    return em_compiled_call(c, f, args, r->guidance ? 7 : 6, NULL, 0, &out, 1) == 1
               ? pipeline_as(c, out, EM_F32)
               : NULL;
}

/* The text ids (zeros [L, 3]) and image ids ((0, row, col) per packed token) as rotary tables */
static bool rope_tables(em_ctx *c, em_pipeline *p, int64_t L, int64_t lh, int64_t lw,
                        flux_run *r) {
    const em_flux_config *t = em_flux_get_config(p->flux);
    int64_t T = (lh / 2) * (lw / 2), k = t->n_axes;
    float *ids = calloc((size_t)((L + T) * k), sizeof *ids);
    if (!ids) {
        em_ctx_fail(c, EM_ERR_OOM, RUN_OP, "out of memory");
        return false;
    }
    if (k < 3) {
        free(ids);
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP, "%s/config.json: %lld axes_dims_rope: "
                    "FluxPipeline's image ids have 3 columns", p->idx.transformer_dir,
                    (long long)k);
        return false;
    }
    float *img = ids + L * k; /* _prepare_latent_image_ids: columns 1 and 2 row and col */
    for (int64_t i = 0; i < T; i++) {
        img[i * k + 1] = (float)(i / (lw / 2));
        img[i * k + 2] = (float)(i % (lw / 2));
    }
    bool ok = flux_rope_tables(c, p->flux, ids, L, img, T, &r->cos, &r->sin);
    free(ids);
    return ok;
}

/* retrieve_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=calculate_shift(T)) */
static em_status set_timesteps(em_ctx *c, em_pipeline *p, int64_t steps, int64_t T) {
    double mu;
    if (!flow_calculate_shift(c, p, (double)T, &mu)) return em_ctx_status(c);
    float *s = malloc((size_t)steps * sizeof *s);
    if (!s) return em_ctx_fail(c, EM_ERR_OOM, RUN_OP, "out of memory");
    double stop = 1.0 / (double)steps, step = steps > 1 ? (stop - 1.0) / (double)(steps - 1) : 0;
    for (int64_t i = 0; i < steps; i++) s[i] = (float)((double)i * step + 1.0);
    s[steps - 1] = (float)stop; /* numpy's linspace ends exactly at stop */
    em_status st = em_scheduler_set_sigmas_mu(c, p->sched, s, steps, mu);
    free(s);
    return st;
}

em_tensor *flux_pipeline_run(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp) {
    if (!check_run(c, p, rp)) return NULL;
    double guidance = rp->guidance_scale != 0.0 ? rp->guidance_scale : 3.5;
    int64_t steps = rp->steps ? rp->steps : 28;
    int64_t msl = rp->max_sequence_length ? rp->max_sequence_length : 512;
    int64_t n = sd_prompts(rp), per = sd_batch(rp) / n, B = sd_batch(rp);
    if (steps < 1 || steps > 1000) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, RUN_OP, "%lld inference steps: 1 to 1000",
                    (long long)steps);
        return NULL;
    }
    /* n (empty) negatives then the n prompts; the T5's `prompt_2 or prompt` */
    em_torch_generator *g;
    const char **texts, **texts2;
    if (!flow_run_begin(c, rp, n, &g, &texts, &texts2)) return NULL;
    em_scope_push(c);
    flux_run r = {.p = p};
    r.ctx = prompt_embeds(c, p, texts + n, texts2 + n, (int)n, msl, &r.pooled);
    free((void *)texts);
    free((void *)texts2);
    flow_repeat_embeds(c, per, &r.ctx, &r.pooled);
    r.ctx = pipeline_as(c, r.ctx, p->dtype);
    r.pooled = pipeline_as(c, r.pooled, p->dtype);
    int64_t lh = 0, lw = 0;
    em_tensor *x = r.ctx && r.pooled ? initial_latents(c, p, rp, g, &lh, &lw) : NULL;
    if (x && em_flux_get_config(p->flux)->guidance_embeds) /* full([B], guidance_scale) */
        r.guidance = flow_full(c, em_flux_device(p->flux), B, (float)guidance);
    if (x) x = em_tensor_retain(x);
    if (x && !em_ctx_status(c) && rope_tables(c, p, msl, lh, lw, &r) &&
        set_timesteps(c, p, steps, em_tensor_dim(x, 1)) == EM_OK)
        x = flow_denoise(c, p, rp, g, x, em_flux_device(p->flux), predict, &r,
                         rp->compile ? em_compile(c, "flux_step", flux_step, p->flux) : NULL);
    em_torch_generator_free(g);
    em_tensor *img = NULL;
    if (x && !em_ctx_status(c)) img = flow_decode(c, p, unpack(c, x, lh, lw), rp->vae_slicing);
    if (em_ctx_status(c)) img = NULL;
    em_keep(c, img);
    em_scope_pop(c);
    em_tensor_release(x);
    return img;
}

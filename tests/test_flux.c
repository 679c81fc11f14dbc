/* Flux against diffusers 0.42.1 (tests/fixtures/diffusion/flux_*, made by
 * scripts/gen_flux_fixtures.py): FluxTransformer2DModel's output for three timesteps within 1e-4
 * (f32), with guidance embeddings (FLUX.1-dev's layout) and without (schnell's, with patch_size
 * 2 and out_channels 32); the transformer in bf16 against diffusers' bf16 output (flux_tiny_bf16,
 * tolerance from torch's own bf16-vs-f32 error); config fields refused by name; bad inputs.
 * FluxPipeline's images from seeds and from the committed (packed) initial latents, eager and
 * compiled, within 1e-3 of diffusers'; bad runs and folders with clear errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ember/ember.h"
#include "harness.h"
#include "sd_pipeline_test.h"


/* The forward's inputs <prefix>hidden, ehs, pooled, img_ids, txt_ids (and guidance with the
 * model's guidance_embeds) of bundle b, in c's current scope; the timestep left to the caller. */
static em_flux_inputs bundle_inputs(em_ctx *c, em_test_bundle *b, const char *prefix,
                                    const em_flux *m) {
    char key[64];
#define GET(name) (snprintf(key, sizeof key, "%s%s", prefix, name), em_test_bundle_get(b, c, key))
    em_flux_inputs in = {.hidden_states = GET("hidden"), .encoder_hidden_states = GET("ehs"),
                         .pooled_projections = GET("pooled"), .img_ids = GET("img_ids"),
                         .txt_ids = GET("txt_ids")};
    if (em_flux_get_config(m)->guidance_embeds) in.guidance = GET("guidance");
#undef GET
    return in;
}

static void check_transformer(em_ctx *c, em_test_bundle *b, const char *prefix,
                              const char *rel) {
    char what[160], key[64];
    em_flux *m = em_flux_load(c, em_test_fixture_path("diffusion", rel), NULL, EM_F32);
    CHECK_MSG(m != NULL, "%s: %s", rel, msg(c));
    if (!m) {
        em_ctx_clear_error(c);
        return;
    }
    em_scope_push(c);
#define GET(name) (snprintf(key, sizeof key, "%s%s", prefix, name), em_test_bundle_get(b, c, key))
    em_flux_inputs in = bundle_inputs(c, b, prefix, m);
    for (int k = 0; k < 3; k++) {
        char on[16], tn[16];
        snprintf(on, sizeof on, "out%d", k);
        snprintf(tn, sizeof tn, "t%d", k);
        in.timestep = GET(tn);
        snprintf(what, sizeof what, "%s, timestep %d", rel, k);
        em_tensor *got = em_flux_forward(c, m, &in);
        CHECK_MSG(got != NULL, "%s: %s", what, msg(c));
        em_test_allclose(c, got, GET(on), 1e-4, 1e-4, what);
    }
#undef GET
    CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
    em_ctx_clear_error(c);
    em_scope_pop(c);
    em_flux_free(m);
}

static void test_flux_transformer_matches_diffusers(void) {
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/flux_tiny_ref");
    CHECK(b != NULL);
    if (b) {
        check_transformer(c, b, "tf_", "flux_tiny/transformer");
        check_transformer(c, b, "sc_", "flux_schnell");
    }
    em_flux_config cfg;
    CHECK(em_flux_config_load(c, em_test_fixture_path("diffusion", "flux_schnell"), &cfg) ==
          EM_OK);
    CHECK(!cfg.guidance_embeds && cfg.patch_size == 2 && cfg.out_channels == 32 &&
          cfg.num_layers == 1 && cfg.num_single_layers == 3 && cfg.n_axes == 3 &&
          cfg.axes_dims_rope[0] == 4);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

/* bf16: flux_tiny's transformer loaded as bf16 against diffusers' same model in bfloat16 on the
 * same (bf16) inputs (flux_tiny_bf16, one timestep). The tolerance is derived from torch's own
 * bf16 error, measured by the generator: atol = max |torch bf16 - torch f32| (meta
 * bf16_vs_f32; the random tiny model's outputs reach ~18, its bf16 error ~2.9; Ember's bf16
 * stays within a quarter of it), rtol 0: Ember's bf16 as close to diffusers' bf16 as that is to
 * diffusers' f32. */
static void test_flux_transformer_bf16(void) {
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/flux_tiny_bf16");
    CHECK(b != NULL);
    em_flux *m = b ? em_flux_load(c, em_test_fixture_path("diffusion", "flux_tiny/transformer"),
                                  NULL, EM_BF16)
                   : NULL;
    CHECK_MSG(!b || m != NULL, "flux_tiny bf16: %s", msg(c));
    if (m) {
        double tol = em_test_bundle_meta_num(b, "bf16_vs_f32", -1.0);
        CHECK(tol > 0.0);
        em_scope_push(c);
        em_flux_inputs in = bundle_inputs(c, b, "", m);
        in.timestep = em_test_bundle_get(b, c, "t");
        em_tensor *got = em_flux_forward(c, m, &in);
        CHECK_MSG(got != NULL && em_tensor_dtype(got) == EM_BF16, "bf16 forward: %s", msg(c));
        em_tensor *want = em_test_bundle_get(b, c, "out");
        if (got && want)
            em_test_allclose(c, em_cast(c, got, EM_F32), em_cast(c, want, EM_F32), tol, 0.0,
                             "flux_tiny bf16 vs diffusers bf16");
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
        em_scope_pop(c);
    }
    em_ctx_clear_error(c);
    em_flux_free(m);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

static void expect_config_error(em_ctx *c, const char *json, em_status want,
                                const char *needle) {
    em_flux_config cfg;
    CHECK(em_flux_config_parse(c, json, strlen(json), "t.json", &cfg) == want);
    CHECK_MSG(em_ctx_status(c) == want && strstr(msg(c), needle), "%s (want '%s')", msg(c),
              needle);
    em_ctx_clear_error(c);
}

static void test_flux_config(void) {
    em_ctx *c = em_ctx_create();
    em_flux_config cfg;
    /* diffusers' defaults (FLUX.1-dev's config, but for guidance_embeds) */
    const char *ok = "{\"out_channels\": null}";
    CHECK_MSG(em_flux_config_parse(c, ok, strlen(ok), NULL, &cfg) == EM_OK, "%s", msg(c));
    CHECK(cfg.patch_size == 1 && cfg.in_channels == 64 && cfg.out_channels == 64 &&
          cfg.num_layers == 19 && cfg.num_single_layers == 38 && cfg.attention_head_dim == 128 &&
          cfg.num_attention_heads == 24 && cfg.joint_attention_dim == 4096 &&
          cfg.pooled_projection_dim == 768 && !cfg.guidance_embeds && cfg.n_axes == 3 &&
          cfg.axes_dims_rope[0] == 16 && cfg.axes_dims_rope[1] == 56 &&
          cfg.axes_dims_rope[2] == 56);
    em_ctx_clear_error(c);
    expect_config_error(c, "{\"_class_name\": \"SD3Transformer2DModel\"}", EM_ERR_UNSUPPORTED,
                        "_class_name 'SD3Transformer2DModel'");
    expect_config_error(c, "{\"axes_dims_rope\": [16, 56, 40]}", EM_ERR_FORMAT,
                        "axes_dims_rope sum to 112, not attention_head_dim 128");
    /* the default axes (16, 56, 56) do not fit another head size: refused, not run */
    expect_config_error(c, "{\"attention_head_dim\": 64}", EM_ERR_FORMAT,
                        "axes_dims_rope sum to 128, not attention_head_dim 64");
    expect_config_error(c, "{\"axes_dims_rope\": [15, 57, 56]}", EM_ERR_FORMAT,
                        "axes_dims_rope[0] must be an even");
    expect_config_error(c, "{\"axes_dims_rope\": 128}", EM_ERR_FORMAT, "axes_dims_rope");
    expect_config_error(c, "{\"guidance_embeds\": \"yes\"}", EM_ERR_FORMAT, "guidance_embeds");
    expect_config_error(c, "{\"num_attention_heads\": 0}", EM_ERR_FORMAT, "num_attention_heads");
    em_ctx_free(c);
}

static void test_flux_bad_inputs(void) {
    em_ctx *c = em_ctx_create();
    em_flux *m = em_flux_load(c, em_test_fixture_path("diffusion", "flux_tiny/transformer"),
                              NULL, EM_F32);
    CHECK_MSG(m != NULL, "%s", msg(c));
    if (m) {
        em_scope_push(c);
        float t = 0.5f;
        em_flux_inputs in = {
            .hidden_states = em_zeros(c, EM_F32, 3, (int64_t[]){1, 4, 64}),
            .encoder_hidden_states = em_zeros(c, EM_F32, 3, (int64_t[]){1, 3, 48}),
            .pooled_projections = em_zeros(c, EM_F32, 2, (int64_t[]){1, 16}),
            .timestep = em_from_host(c, EM_F32, 0, NULL, &t),
            .guidance = em_from_host(c, EM_F32, 0, NULL, &t),
            .img_ids = em_zeros(c, EM_F32, 2, (int64_t[]){4, 3}),
            .txt_ids = em_zeros(c, EM_F32, 2, (int64_t[]){3, 3})};
        CHECK_MSG(em_flux_forward(c, m, &in) != NULL, "%s", msg(c));
        em_flux_inputs bad = in;
        bad.hidden_states = em_zeros(c, EM_F32, 3, (int64_t[]){1, 4, 16});
        CHECK(em_flux_forward(c, m, &bad) == NULL);
        CHECK_MSG(em_ctx_status(c) == EM_ERR_SHAPE && strstr(msg(c), "in_channels"), "%s",
                  msg(c));
        em_ctx_clear_error(c);
        bad = in;
        bad.guidance = NULL;
        CHECK(em_flux_forward(c, m, &bad) == NULL);
        CHECK_MSG(em_ctx_status(c) == EM_ERR_INVALID_ARG && strstr(msg(c), "guidance"), "%s",
                  msg(c));
        em_ctx_clear_error(c);
        bad = in;
        bad.img_ids = em_zeros(c, EM_F32, 2, (int64_t[]){5, 3});
        CHECK(em_flux_forward(c, m, &bad) == NULL);
        CHECK_MSG(em_ctx_status(c) == EM_ERR_SHAPE && strstr(msg(c), "img_ids"), "%s", msg(c));
        em_ctx_clear_error(c);
        bad = in;
        bad.pooled_projections = NULL;
        CHECK(em_flux_forward(c, m, &bad) == NULL && em_ctx_status(c) == EM_ERR_INVALID_ARG &&
              strstr(msg(c), "pooled_projections"));
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    em_flux_free(m);
    /* a config its weights contradict: the tensor and both shapes named */
    if (em_test_scratch_make("flux_cfg")) {
        em_test_scratch_link("diffusion_pytorch_model.safetensors", "diffusion",
                             "flux_schnell/diffusion_pytorch_model.safetensors");
        em_test_scratch_write("config.json",
                              "{\"patch_size\": 2, \"in_channels\": 64, \"out_channels\": 32, "
                              "\"num_layers\": 1, \"num_single_layers\": 3, "
                              "\"attention_head_dim\": 8, \"num_attention_heads\": 2, "
                              "\"joint_attention_dim\": 40, \"pooled_projection_dim\": 16, "
                              "\"axes_dims_rope\": [4, 2, 2]}");
        CHECK(em_flux_load(c, em_test_scratch_dir(), NULL, EM_F32) == NULL);
        CHECK_MSG(em_ctx_status(c) == EM_ERR_SHAPE && strstr(msg(c), "context_embedder.weight"),
                  "%s", msg(c));
        em_ctx_clear_error(c);
        /* guidance_embeds true without the guidance embedder's weights */
        em_test_scratch_write("config.json",
                              "{\"patch_size\": 2, \"in_channels\": 64, \"out_channels\": 32, "
                              "\"num_layers\": 1, \"num_single_layers\": 3, "
                              "\"attention_head_dim\": 8, \"num_attention_heads\": 2, "
                              "\"joint_attention_dim\": 48, \"pooled_projection_dim\": 16, "
                              "\"guidance_embeds\": true, \"axes_dims_rope\": [4, 2, 2]}");
        CHECK(em_flux_load(c, em_test_scratch_dir(), NULL, EM_F32) == NULL);
        CHECK_MSG(em_ctx_status(c) != EM_OK && strstr(msg(c), "guidance_embedder"), "%s",
                  msg(c));
        em_ctx_clear_error(c);
        em_test_scratch_remove();
    }
    em_ctx_free(c);
}

/* em_scheduler_set_sigmas_mu as FluxPipeline calls it: sigmas np.linspace(1, 1/7, 7) and
 * diffusers' mu for 16 tokens give diffusers' sigmas and timesteps (f32, within 1e-6) */
static void test_flux_scheduler_sigmas(void) {
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/flux_tiny_ref");
    em_scheduler *s = em_scheduler_from_file(
        c, em_test_fixture_path("diffusion", "flux_tiny/scheduler/scheduler_config.json"));
    CHECK_MSG(b && s, "%s", msg(c));
    if (b && s) {
        float sig[7];
        for (int i = 0; i < 7; i++) sig[i] = (float)(1.0 + i * ((1.0 / 7 - 1.0) / 6));
        sig[6] = (float)(1.0 / 7);
        double mu = em_test_bundle_meta_num(b, "sched_mu", 0);
        CHECK_MSG(em_scheduler_set_sigmas_mu(c, s, sig, 7, mu) == EM_OK, "%s", msg(c));
        int64_t n = 0, ns = 0;
        const double *ts = em_scheduler_timesteps(s, &n);
        const float *sg = em_scheduler_sigmas(s, &ns);
        em_scope_push(c);
        float tsf[7];
        for (int64_t i = 0; i < n && i < 7; i++) tsf[i] = (float)ts[i];
        CHECK(n == 7 && ns == 8);
        em_test_allclose(c, em_from_host(c, EM_F32, 1, (int64_t[]){8}, sg),
                         em_test_bundle_get(b, c, "sched_sigmas"), 1e-6, 1e-6, "sigmas");
        em_test_allclose(c, em_from_host(c, EM_F32, 1, (int64_t[]){7}, tsf),
                         em_test_bundle_get(b, c, "sched_timesteps"), 1e-6, 1e-6, "timesteps");
        em_scope_pop(c);
        sig[2] = 0.0f; /* FlowMatch sigmas lie in (0, 1] */
        CHECK(em_scheduler_set_sigmas_mu(c, s, sig, 7, mu) == EM_ERR_INVALID_ARG &&
              strstr(msg(c), "sigma 2"));
        em_ctx_clear_error(c);
        sig[2] = 0.5f; /* use_dynamic_shifting needs a mu */
        CHECK(em_scheduler_set_sigmas_mu(c, s, sig, 7, NAN) == EM_ERR_INVALID_ARG &&
              strstr(msg(c), "needs mu"));
        em_ctx_clear_error(c);
    }
    em_scheduler_free(s);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

/* scripts/gen_flux_fixtures.py's RUNS */
static const struct {
    const char *name, *prompt, *prompt_2;
    double guidance;
    int64_t steps;
    uint64_t seed;
    int64_t height, width, msl;
} RUNS[] = {
    {"dev", "a photo of a cat", NULL, 3.5, 4, 0, 16, 16, 8},
    {"prompt2", "a red cube on a table", "a blue sphere", 5.0, 3, 5, 16, 16, 8},
    {"size", "a dog in the snow", NULL, 2.0, 2, 21, 16, 24, 6},
};

static em_pipeline_run_params run_params(size_t i) {
    em_pipeline_run_params rp = em_pipeline_default_params();
    rp.prompt = RUNS[i].prompt;
    rp.prompt_2 = RUNS[i].prompt_2;
    rp.guidance_scale = RUNS[i].guidance;
    rp.steps = RUNS[i].steps;
    rp.seed = RUNS[i].seed;
    rp.height = RUNS[i].height;
    rp.width = RUNS[i].width;
    rp.max_sequence_length = RUNS[i].msl;
    return rp;
}

static void test_flux_pipeline_runs(void) {
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/flux_tiny_ref");
    em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", "flux_tiny"), NULL);
    CHECK_MSG(b && p, "%s", msg(c));
    if (p) {
        CHECK(em_pipeline_get_index(p)->pipeline == EM_PIPELINE_FLUX);
        int64_t shape[4];
        CHECK(em_pipeline_latent_shape(p, shape) && shape[1] == 16 && shape[2] == 128);
    }
    for (size_t i = 0; b && p && i < sizeof RUNS / sizeof RUNS[0]; i++) {
        em_scope_push(c);
        em_pipeline_run_params rp = run_params(i);
        rp.progress = count_progress;
        n_progress = 0;
        char name[64], what[96];
        snprintf(name, sizeof name, "%s_image", RUNS[i].name);
        snprintf(what, sizeof what, "FluxPipeline run '%s'", RUNS[i].name);
        em_tensor *img = em_pipeline_run(c, p, &rp);
        CHECK_MSG(img != NULL, "%s: %s", what, msg(c));
        em_test_allclose(c, img, em_test_bundle_get(b, c, name), 1e-3, 0, what);
        CHECK(n_progress == RUNS[i].steps);
        if (i == 0) { /* the same run from the committed initial latents (packed) */
            rp.latents = em_test_bundle_get(b, c, "latents");
            em_test_allclose(c, em_pipeline_run(c, p, &rp),
                             em_test_bundle_get(b, c, "latents_image"), 1e-3, 0,
                             "FluxPipeline run 'dev' from its latents");
            /* the transformer's step compiled once, the same image */
            em_compile_stats cs = {0};
            rp.compile = true;
            rp.compile_stats = &cs;
            em_test_allclose(c, em_pipeline_run(c, p, &rp),
                             em_test_bundle_get(b, c, "latents_image"), 1e-3, 0,
                             "FluxPipeline run 'dev', compiled");
            CHECK_MSG(cs.compiles == 1 && cs.calls == RUNS[i].steps, "%lld compiles, %lld calls",
                      (long long)cs.compiles, (long long)cs.calls);
        }
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    if (b && p) { /* two prompts (their T5 texts a list), two images each: one batch of 4 */
        em_scope_push(c);
        static const char *const prompts[] = {"a photo of a cat", "a red cube"};
        static const char *const prompts_2[] = {"a blue sphere", "a dog"};
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.prompts = prompts;
        rp.prompts_2 = prompts_2;
        rp.num_prompts = 2;
        rp.num_images_per_prompt = 2;
        rp.guidance_scale = 4.0;
        rp.steps = 2;
        rp.seed = 3;
        rp.height = rp.width = 16;
        rp.max_sequence_length = 6;
        em_tensor *img = em_pipeline_run(c, p, &rp);
        CHECK_MSG(img != NULL && em_tensor_dim(img, 0) == 4, "batch: %s", msg(c));
        em_test_allclose(c, img, em_test_bundle_get(b, c, "batch_image"), 1e-3, 0,
                         "FluxPipeline batch");
        rp.vae_slicing = true; /* pipe.vae.enable_slicing(): the same images */
        em_test_allclose(c, em_pipeline_run(c, p, &rp), em_test_bundle_get(b, c, "batch_image"),
                         1e-3, 0, "FluxPipeline batch, VAE sliced");
        static const uint64_t seeds[2] = {7, 8}; /* a generator per image */
        rp = em_pipeline_default_params();
        rp.prompt = "an astronaut";
        rp.num_images_per_prompt = 2;
        rp.seeds = seeds;
        rp.num_seeds = 2;
        rp.guidance_scale = 3.0;
        rp.steps = 2;
        rp.height = rp.width = 16;
        rp.max_sequence_length = 6;
        em_test_allclose(c, em_pipeline_run(c, p, &rp),
                         em_test_bundle_get(b, c, "generators_image"), 1e-3, 0,
                         "FluxPipeline generator list");
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    em_pipeline_free(p);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

static void test_flux_bad_runs(void) {
    em_ctx *c = em_ctx_create();
    em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", "flux_tiny"), NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    if (p) {
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.steps = 1;
        rp.height = rp.width = 16;
        expect_run_error(c, p, &rp, EM_ERR_INVALID_ARG, "needs a prompt");
        rp.prompt = "a cat";
        rp.height = 18; /* not a multiple of 2 * 2 */
        expect_run_error(c, p, &rp, EM_ERR_INVALID_ARG, "multiples of 4");
        rp.height = 16;
        rp.max_sequence_length = 513;
        expect_run_error(c, p, &rp, EM_ERR_INVALID_ARG, "max_sequence_length 513");
        rp.max_sequence_length = 4;
        rp.negative_prompt = "blurry";
        expect_run_error(c, p, &rp, EM_ERR_UNSUPPORTED, "true_cfg_scale");
        rp.negative_prompt = NULL;
        rp.latents = em_zeros(c, EM_F32, 3, (int64_t[]){1, 16, 32});
        expect_run_error(c, p, &rp, EM_ERR_SHAPE, "the latent shape is [1, 16, 64] f32");
        em_ctx_clear_error(c);
    }
    em_pipeline_free(p);
    em_ctx_free(c);
}

#define FLUX_INDEX(te2, tok2)                                                                   \
    "{\"_class_name\": \"FluxPipeline\", "                                                      \
    "\"transformer\": [\"diffusers\", \"FluxTransformer2DModel\"], "                            \
    "\"vae\": [\"diffusers\", \"AutoencoderKL\"], "                                             \
    "\"scheduler\": [\"diffusers\", \"FlowMatchEulerDiscreteScheduler\"], "                     \
    "\"text_encoder\": [\"transformers\", \"CLIPTextModel\"], "                                 \
    "\"tokenizer\": [\"transformers\", \"CLIPTokenizer\"], "                                    \
    "\"text_encoder_2\": " te2 ", \"tokenizer_2\": " tok2 "}"

static void test_flux_bad_folders(void) {
    em_ctx *c = em_ctx_create();
    if (!em_test_scratch_make("flux")) {
        em_ctx_free(c);
        return;
    }
    const char *parts[] = {"transformer", "vae", "scheduler", "text_encoder", "tokenizer",
                           "tokenizer_2"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "flux_tiny/%s", parts[i]);
        em_test_scratch_link(parts[i], "diffusion", rel);
    }
    em_test_scratch_link("text_encoder_2", "diffusion", "t5/gated");
    const char *t5 = "[\"transformers\", \"T5EncoderModel\"]";
    const char *tok = "[\"transformers\", \"T5TokenizerFast\"]";
    /* a missing component */
    em_test_scratch_write("model_index.json", FLUX_INDEX("[null, null]", "[null, null]"));
    expect_load_error(c, EM_ERR_NOT_FOUND, "needs a 'text_encoder_2' component");
    /* a component of a class FluxPipeline does not take */
    char buf[1024];
    snprintf(buf, sizeof buf, FLUX_INDEX("%s", "[\"transformers\", \"CLIPTokenizer\"]"), t5);
    em_test_scratch_write("model_index.json", buf);
    expect_load_error(c, EM_ERR_UNSUPPORTED, "tokenizer_2 class 'CLIPTokenizer'");
    /* a T5 whose width is not the transformer's joint_attention_dim */
    snprintf(buf, sizeof buf, FLUX_INDEX("%s", "%s"), t5, tok);
    em_test_scratch_write("model_index.json", buf);
    expect_load_error(c, EM_ERR_SHAPE, "text_encoder_2's d_model 16 (joint_attention_dim 48)");
    em_test_scratch_remove();
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_flux_transformer_matches_diffusers), T(test_flux_transformer_bf16),
             T(test_flux_config),
             T(test_flux_bad_inputs), T(test_flux_pipeline_runs), T(test_flux_bad_runs),
             T(test_flux_bad_folders), T(test_flux_scheduler_sigmas))

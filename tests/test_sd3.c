/* Stable Diffusion 3 against diffusers 0.42.1 (tests/fixtures/diffusion/sd3_*, made by
 * scripts/gen_sd3_fixtures.py): SD3Transformer2DModel's output for three timesteps and a
 * non-square input within 1e-4 (f32), with and without qk RMSNorm; config fields refused by
 * name; bad inputs and a config its weights contradict. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ember/ember.h"
#include "harness.h"
#include "sd_pipeline_test.h"


static void check_transformer(em_ctx *c, em_test_bundle *b, const char *prefix,
                              const char *rel, const char *device) {
    char what[160], key[64];
    em_sd3 *m = em_sd3_load(c, em_test_fixture_path("diffusion", rel), device, EM_F32);
    CHECK_MSG(m != NULL, "%s: %s", rel, msg(c));
    if (!m) {
        em_ctx_clear_error(c);
        return;
    }
    em_scope_push(c);
    em_device *prev = em_ctx_device(c);
    em_ctx_set_device(c, em_sd3_device(m)); /* the bundle's inputs onto the model's device */
#define GET(name) (snprintf(key, sizeof key, "%s%s", prefix, name), em_test_bundle_get(b, c, key))
    em_tensor *x = GET("sample"), *ehs = GET("ehs"), *pooled = GET("pooled");
    em_tensor *wide = GET("wide_sample"), *ts[3] = {GET("t0"), GET("t1"), GET("t2")};
    float tw = 250.5f;
    em_tensor *t_wide = em_from_host(c, EM_F32, 1, (int64_t[]){1}, &tw);
    em_ctx_set_device(c, prev);
    for (int k = 0; k < 3; k++) {
        char on[16];
        snprintf(on, sizeof on, "out%d", k);
        snprintf(what, sizeof what, "%s on %s, timestep %d", rel, device, k);
        em_tensor *got = em_sd3_forward(c, m, x, ehs, pooled, ts[k]);
        CHECK_MSG(got != NULL, "%s: %s", what, msg(c));
        em_test_allclose(c, got, GET(on), 1e-4, 1e-4, what);
    }
    snprintf(what, sizeof what, "%s on %s, 8x12 latents", rel, device);
    em_tensor *ehs1 = em_narrow(c, ehs, 0, 0, 1), *pooled1 = em_narrow(c, pooled, 0, 0, 1);
    em_test_allclose(c, em_sd3_forward(c, m, wide, ehs1, pooled1, t_wide), GET("wide_out"), 1e-4,
                     1e-4, what);
#undef GET
    CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
    em_ctx_clear_error(c);
    em_scope_pop(c);
    em_sd3_free(m);
}

static void test_sd3_transformer_matches_diffusers(void) {
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/sd3_tiny_ref");
    CHECK(b != NULL);
    if (b) {
        check_transformer(c, b, "tf_", "sd3_tiny/transformer", "cpu");
        check_transformer(c, b, "qk_", "sd3_qk", "cpu");
    }
    em_sd3_config cfg;
    CHECK(em_sd3_config_load(c, em_test_fixture_path("diffusion", "sd3_qk"), &cfg) == EM_OK);
    CHECK(cfg.qk_norm_rms && cfg.num_layers == 3 && cfg.pos_embed_max_size == 8 &&
          cfg.joint_attention_dim == 48 && cfg.pooled_projection_dim == 16);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

static void expect_config_error(em_ctx *c, const char *json, em_status want,
                                const char *needle) {
    em_sd3_config cfg;
    CHECK(em_sd3_config_parse(c, json, strlen(json), "t.json", &cfg) == want);
    CHECK_MSG(em_ctx_status(c) == want && strstr(msg(c), needle), "%s (want '%s')", msg(c),
              needle);
    em_ctx_clear_error(c);
}

static void test_sd3_config(void) {
    em_ctx *c = em_ctx_create();
    em_sd3_config cfg;
    /* diffusers' defaults (caption_projection_dim 1152 is the inner dim, 18 * 64) */
    const char *ok = "{\"caption_projection_dim\": 1152, \"out_channels\": null}";
    CHECK_MSG(em_sd3_config_parse(c, ok, strlen(ok), NULL, &cfg) == EM_OK, "%s", msg(c));
    CHECK(cfg.sample_size == 128 && cfg.patch_size == 2 && cfg.in_channels == 16 &&
          cfg.out_channels == 16 && cfg.num_layers == 18 && cfg.attention_head_dim == 64 &&
          cfg.num_attention_heads == 18 && cfg.joint_attention_dim == 4096 &&
          cfg.pooled_projection_dim == 2048 && cfg.pos_embed_max_size == 96 &&
          !cfg.qk_norm_rms);
    em_ctx_clear_error(c);
    /* indices past the last block are ignored, as diffusers ignores them */
    const char *dual = "{\"caption_projection_dim\": 1152, \"dual_attention_layers\": [18, 40]}";
    CHECK_MSG(em_sd3_config_parse(c, dual, strlen(dual), NULL, &cfg) == EM_OK, "%s", msg(c));
    expect_config_error(c, "{\"caption_projection_dim\": 1152, \"dual_attention_layers\": [0, 1]}",
                        EM_ERR_UNSUPPORTED, "dual_attention_layers");
    expect_config_error(c, "{\"caption_projection_dim\": 1152, \"qk_norm\": \"layer_norm\"}",
                        EM_ERR_UNSUPPORTED, "qk_norm 'layer_norm'");
    expect_config_error(c, "{\"caption_projection_dim\": 1152, \"pos_embed_max_size\": null}",
                        EM_ERR_UNSUPPORTED, "pos_embed_max_size");
    expect_config_error(c, "{\"_class_name\": \"FluxTransformer2DModel\"}", EM_ERR_UNSUPPORTED,
                        "_class_name 'FluxTransformer2DModel'");
    expect_config_error(c, "{\"caption_projection_dim\": 1536}", EM_ERR_FORMAT,
                        "caption_projection_dim must equal");
    expect_config_error(c, "{\"caption_projection_dim\": 1152, \"patch_size\": 0}", EM_ERR_FORMAT,
                        "patch_size");
    expect_config_error(c, "{\"caption_projection_dim\": 1152, \"dual_attention_layers\": 3}",
                        EM_ERR_FORMAT, "list of block indices");
    em_ctx_free(c);
}

static void test_sd3_bad_inputs(void) {
    em_ctx *c = em_ctx_create();
    em_sd3 *m = em_sd3_load(c, em_test_fixture_path("diffusion", "sd3_tiny/transformer"), NULL,
                            EM_F32);
    CHECK_MSG(m != NULL, "%s", msg(c));
    if (m) {
        em_scope_push(c);
        float t = 10.0f;
        em_tensor *tt = em_from_host(c, EM_F32, 0, NULL, &t);
        em_tensor *ehs = em_zeros(c, EM_F32, 3, (int64_t[]){1, 5, 48});
        em_tensor *pooled = em_zeros(c, EM_F32, 2, (int64_t[]){1, 16});
        em_tensor *odd = em_zeros(c, EM_F32, 4, (int64_t[]){1, 16, 7, 8});
        CHECK(em_sd3_forward(c, m, odd, ehs, pooled, tt) == NULL);
        CHECK_MSG(em_ctx_status(c) == EM_ERR_SHAPE && strstr(msg(c), "multiples of the patch"),
                  "%s", msg(c));
        em_ctx_clear_error(c);
        em_tensor *big = em_zeros(c, EM_F32, 4, (int64_t[]){1, 16, 8, 14}); /* 7 > 6 patches */
        CHECK(em_sd3_forward(c, m, big, ehs, pooled, tt) == NULL);
        CHECK_MSG(em_ctx_status(c) == EM_ERR_SHAPE && strstr(msg(c), "pos_embed_max_size"), "%s",
                  msg(c));
        em_ctx_clear_error(c);
        em_tensor *x = em_zeros(c, EM_F32, 4, (int64_t[]){1, 16, 8, 8});
        em_tensor *narrow = em_zeros(c, EM_F32, 3, (int64_t[]){1, 5, 32});
        CHECK(em_sd3_forward(c, m, x, narrow, pooled, tt) == NULL);
        CHECK_MSG(em_ctx_status(c) == EM_ERR_SHAPE && strstr(msg(c), "joint_attention_dim"),
                  "%s", msg(c));
        em_ctx_clear_error(c);
        CHECK(em_sd3_forward(c, m, x, ehs, NULL, tt) == NULL &&
              em_ctx_status(c) == EM_ERR_INVALID_ARG && strstr(msg(c), "pooled_projections"));
        em_ctx_clear_error(c);
        CHECK(em_sd3_forward(c, m, x, ehs, pooled, tt) != NULL);
        em_scope_pop(c);
    }
    em_sd3_free(m);
    /* a config its weights contradict: the tensor and both shapes named */
    if (em_test_scratch_make("sd3_cfg")) {
        em_test_scratch_link("diffusion_pytorch_model.safetensors", "diffusion",
                             "sd3_qk/diffusion_pytorch_model.safetensors");
        em_test_scratch_write("config.json",
                              "{\"sample_size\": 8, \"patch_size\": 2, \"in_channels\": 16, "
                              "\"num_layers\": 3, \"attention_head_dim\": 8, "
                              "\"num_attention_heads\": 2, \"joint_attention_dim\": 40, "
                              "\"caption_projection_dim\": 16, \"pooled_projection_dim\": 16, "
                              "\"pos_embed_max_size\": 8, \"qk_norm\": \"rms_norm\"}");
        CHECK(em_sd3_load(c, em_test_scratch_dir(), NULL, EM_F32) == NULL);
        CHECK_MSG(em_ctx_status(c) == EM_ERR_SHAPE && strstr(msg(c), "context_embedder.weight"),
                  "%s", msg(c));
        em_ctx_clear_error(c);
        /* a table of another size than pos_embed_max_size */
        em_test_scratch_write("config.json",
                              "{\"sample_size\": 8, \"patch_size\": 2, \"in_channels\": 16, "
                              "\"num_layers\": 3, \"attention_head_dim\": 8, "
                              "\"num_attention_heads\": 2, \"joint_attention_dim\": 48, "
                              "\"caption_projection_dim\": 16, \"pooled_projection_dim\": 16, "
                              "\"pos_embed_max_size\": 9}");
        CHECK(em_sd3_load(c, em_test_scratch_dir(), NULL, EM_F32) == NULL);
        CHECK_MSG(em_ctx_status(c) == EM_ERR_SHAPE && strstr(msg(c), "pos_embed.pos_embed"),
                  "%s", msg(c));
        em_ctx_clear_error(c);
        em_test_scratch_remove();
    }
    em_ctx_free(c);
}

/* scripts/gen_sd3_fixtures.py's RUNS */
static const struct {
    const char *name, *prompt, *negative;
    double guidance;
    int64_t steps;
    uint64_t seed;
    int64_t height, width, msl;
} RUNS[] = {
    {"cfg", "a photo of a cat", NULL, 7.0, 4, 0, 0, 0, 8},
    {"negative", "a red cube on a table", "blurry, low quality", 5.0, 3, 5, 0, 0, 8},
    {"nocfg", "an astronaut", NULL, 1.0, 3, 11, 0, 0, 4},
    {"size", "a dog in the snow", "dark", 4.0, 2, 21, 16, 24, 0}, /* 0: the default 256 */
};

static void test_sd3_pipeline_runs(void) {
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/sd3_tiny_ref");
    em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", "sd3_tiny"), NULL);
    CHECK_MSG(b && p, "%s", msg(c));
    if (p) {
        CHECK(em_pipeline_get_index(p)->pipeline == EM_PIPELINE_STABLE_DIFFUSION_3);
        int64_t shape[4];
        CHECK(em_pipeline_latent_shape(p, shape) && shape[1] == 16 && shape[2] == 8);
    }
    for (size_t i = 0; b && p && i < sizeof RUNS / sizeof RUNS[0]; i++) {
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.prompt = RUNS[i].prompt;
        rp.negative_prompt = RUNS[i].negative;
        rp.guidance_scale = RUNS[i].guidance;
        rp.steps = RUNS[i].steps;
        rp.seed = RUNS[i].seed;
        rp.height = RUNS[i].height;
        rp.width = RUNS[i].width;
        rp.max_sequence_length = RUNS[i].msl;
        rp.progress = count_progress;
        n_progress = 0;
        char name[64], what[96];
        snprintf(name, sizeof name, "%s_image", RUNS[i].name);
        snprintf(what, sizeof what, "StableDiffusion3Pipeline run '%s'", RUNS[i].name);
        em_tensor *img = em_pipeline_run(c, p, &rp);
        CHECK_MSG(img != NULL, "%s: %s", what, msg(c));
        em_test_allclose(c, img, em_test_bundle_get(b, c, name), 1e-3, 0, what);
        CHECK(n_progress == RUNS[i].steps);
        if (i == 0) { /* the same run from the committed initial latents */
            rp.latents = em_test_bundle_get(b, c, "latents");
            em_test_allclose(c, em_pipeline_run(c, p, &rp),
                             em_test_bundle_get(b, c, "latents_image"), 1e-3, 0,
                             "StableDiffusion3Pipeline run 'cfg' from its latents");
            /* the transformer's step compiled once, the same image */
            em_compile_stats cs = {0};
            rp.compile = true;
            rp.compile_stats = &cs;
            em_test_allclose(c, em_pipeline_run(c, p, &rp),
                             em_test_bundle_get(b, c, "latents_image"), 1e-3, 0,
                             "StableDiffusion3Pipeline run 'cfg', compiled");
            CHECK_MSG(cs.compiles == 1 && cs.calls == RUNS[i].steps, "%lld compiles, %lld calls",
                      (long long)cs.compiles, (long long)cs.calls);
        }
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    if (b && p) { /* two prompts (their negatives a list), two images each: one batch of 4 */
        em_scope_push(c);
        static const char *const prompts[] = {"a photo of a cat", "a red cube"};
        static const char *const negatives[] = {"blurry", ""};
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.prompts = prompts;
        rp.negative_prompts = negatives;
        rp.num_prompts = 2;
        rp.num_images_per_prompt = 2;
        rp.guidance_scale = 5.0;
        rp.steps = 2;
        rp.seed = 3;
        rp.max_sequence_length = 4;
        em_tensor *img = em_pipeline_run(c, p, &rp);
        CHECK_MSG(img != NULL && em_tensor_dim(img, 0) == 4, "batch: %s", msg(c));
        em_test_allclose(c, img, em_test_bundle_get(b, c, "batch_image"), 1e-3, 0,
                         "StableDiffusion3Pipeline batch");
        rp.vae_slicing = true; /* pipe.vae.enable_slicing(): the same images */
        em_test_allclose(c, em_pipeline_run(c, p, &rp), em_test_bundle_get(b, c, "batch_image"),
                         1e-3, 0, "StableDiffusion3Pipeline batch, VAE sliced");
        /* a generator per image */
        static const uint64_t seeds[2] = {7, 8};
        rp = em_pipeline_default_params();
        rp.prompt = "an astronaut";
        rp.num_images_per_prompt = 2;
        rp.seeds = seeds;
        rp.num_seeds = 2;
        rp.guidance_scale = 4.0;
        rp.steps = 2;
        rp.max_sequence_length = 4;
        em_test_allclose(c, em_pipeline_run(c, p, &rp),
                         em_test_bundle_get(b, c, "generators_image"), 1e-3, 0,
                         "StableDiffusion3Pipeline generator list");
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    if (b && p) { /* second-encoder texts; negative_prompt_2 "" falls back to negative_prompt */
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.prompt = "a photo of a cat";
        rp.prompt_2 = "a red cube";
        rp.negative_prompt = "blurry";
        rp.negative_prompt_2 = "";
        rp.guidance_scale = 5.0;
        rp.steps = 3;
        rp.seed = 41;
        rp.max_sequence_length = 8;
        em_tensor *img = em_pipeline_run(c, p, &rp);
        CHECK_MSG(img != NULL, "prompt2: %s", msg(c));
        em_test_allclose(c, img, em_test_bundle_get(b, c, "prompt2_image"), 1e-3, 0,
                         "StableDiffusion3Pipeline run 'prompt2'");
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    em_pipeline_free(p);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

/* use_dynamic_shifting: mu from the latents' patch count (sd3_dynamic_scheduler's config) */
static void test_sd3_dynamic_shifting(void) {
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/sd3_tiny_ref");
    if (!b || !em_test_scratch_make("sd3_dyn")) {
        CHECK(b != NULL);
        em_test_bundle_free(b);
        em_ctx_free(c);
        return;
    }
    const char *parts[] = {"transformer", "vae", "text_encoder", "tokenizer", "text_encoder_2",
                           "tokenizer_2", "model_index.json"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "sd3_tiny/%s", parts[i]);
        em_test_scratch_link(parts[i], "diffusion", rel);
    }
    em_test_scratch_link("scheduler", "diffusion", "sd3_dynamic_scheduler");
    em_pipeline *p = em_pipeline_load(c, em_test_scratch_dir(), NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    if (p) {
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.prompt = RUNS[1].prompt;
        rp.negative_prompt = RUNS[1].negative;
        rp.guidance_scale = RUNS[1].guidance;
        rp.steps = RUNS[1].steps;
        rp.seed = RUNS[1].seed;
        rp.max_sequence_length = RUNS[1].msl;
        em_tensor *img = em_pipeline_run(c, p, &rp);
        CHECK_MSG(img != NULL, "%s", msg(c));
        em_test_allclose(c, img, em_test_bundle_get(b, c, "dynamic_image"), 1e-3, 0,
                         "StableDiffusion3Pipeline with use_dynamic_shifting");
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    em_pipeline_free(p);
    em_test_scratch_remove();
    /* base_image_seq_len = max_image_seq_len: calculate_shift would divide by zero */
    if (em_test_scratch_make("sd3_dyn0")) {
        for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
            char rel[64];
            snprintf(rel, sizeof rel, "sd3_tiny/%s", parts[i]);
            em_test_scratch_link(parts[i], "diffusion", rel);
        }
        char sched[1024];
        snprintf(sched, sizeof sched, "%s/scheduler", em_test_scratch_dir());
        CHECK(mkdir(sched, 0755) == 0);
        em_test_scratch_write("scheduler/scheduler_config.json",
                              "{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", "
                              "\"shift\": 3.0, \"use_dynamic_shifting\": true, "
                              "\"base_image_seq_len\": 64, \"max_image_seq_len\": 64}");
        p = em_pipeline_load(c, em_test_scratch_dir(), NULL);
        CHECK_MSG(p != NULL, "%s", msg(c));
        if (p) {
            em_pipeline_run_params rp = em_pipeline_default_params();
            rp.prompt = "x";
            rp.steps = 1;
            rp.max_sequence_length = 1;
            expect_run_error(c, p, &rp, EM_ERR_FORMAT, "divides by their difference");
        }
        em_pipeline_free(p);
        em_test_scratch_remove();
    }
    em_test_bundle_free(b);
    em_ctx_free(c);
}

static void test_sd3_bad_runs(void) {
    em_ctx *c = em_ctx_create();
    em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", "sd3_tiny"), NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    if (p) {
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.steps = 1;
        expect_run_error(c, p, &rp, EM_ERR_INVALID_ARG, "needs a prompt");
        rp.prompt = "a cat";
        rp.height = 10; /* not a multiple of 2 * 2 */
        expect_run_error(c, p, &rp, EM_ERR_INVALID_ARG, "multiples of 4");
        rp.height = 0;
        rp.max_sequence_length = 513;
        expect_run_error(c, p, &rp, EM_ERR_INVALID_ARG, "max_sequence_length 513");
        rp.max_sequence_length = 4;
        rp.num_images_per_prompt = 2;
        static const uint64_t seeds[3] = {1, 2, 3};
        rp.seeds = seeds;
        rp.num_seeds = 3;
        expect_run_error(c, p, &rp, EM_ERR_INVALID_ARG, "3 seeds (a generator per image) for a "
                         "batch of 2");
        rp.seeds = NULL;
        rp.num_images_per_prompt = 1;
        rp.vae_tiling = true;
        expect_run_error(c, p, &rp, EM_ERR_UNSUPPORTED, "vae_tiling is not supported");
        rp.vae_tiling = false;
        rp.class_label = 3;
        expect_run_error(c, p, &rp, EM_ERR_UNSUPPORTED, "a class label");
        rp.class_label = -1;
        em_scope_push(c);
        rp.latents = em_zeros(c, EM_F32, 4, (int64_t[]){1, 4, 8, 8});
        expect_run_error(c, p, &rp, EM_ERR_SHAPE, "the latent shape is [1, 16, 8, 8]");
        em_scope_pop(c);
    }
    em_pipeline_free(p);
    em_ctx_free(c);
}

#define SD3_INDEX(te3, te2) SD3_INDEX3(te3, "[null, null]", te2)
#define SD3_INDEX3(te3, tok3, te2)                                                              \
    "{\"_class_name\": \"StableDiffusion3Pipeline\", "                                           \
    "\"transformer\": [\"diffusers\", \"SD3Transformer2DModel\"], "                             \
    "\"vae\": [\"diffusers\", \"AutoencoderKL\"], "                                             \
    "\"scheduler\": [\"diffusers\", \"FlowMatchEulerDiscreteScheduler\"], "                     \
    "\"text_encoder\": [\"transformers\", \"CLIPTextModelWithProjection\"], "                   \
    "\"tokenizer\": [\"transformers\", \"CLIPTokenizer\"], " te2                                 \
    "\"tokenizer_2\": [\"transformers\", \"CLIPTokenizer\"], "                                  \
    "\"text_encoder_3\": " te3 ", \"tokenizer_3\": " tok3 "}"
#define TE2 "\"text_encoder_2\": [\"transformers\", \"CLIPTextModelWithProjection\"], "

static void test_sd3_bad_folders(void) {
    em_ctx *c = em_ctx_create();
    if (!em_test_scratch_make("sd3")) {
        em_ctx_free(c);
        return;
    }
    const char *parts[] = {"transformer", "vae", "scheduler", "text_encoder", "tokenizer",
                           "text_encoder_2", "tokenizer_2"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "sd3_tiny/%s", parts[i]);
        em_test_scratch_link(parts[i], "diffusion", rel);
    }
    em_test_scratch_link("text_encoder_3", "diffusion", "t5/gated");
    em_test_scratch_link("tokenizer_3", "diffusion", "t5/tok");
    /* a T5 without its tokenizer; one of another class */
    em_test_scratch_write("model_index.json",
                          SD3_INDEX("[\"transformers\", \"T5EncoderModel\"]", TE2));
    expect_load_error(c, EM_ERR_FORMAT, "'text_encoder_3' component but no 'tokenizer_3'");
    em_test_scratch_write("model_index.json",
                          SD3_INDEX3("[\"transformers\", \"UMT5EncoderModel\"]",
                                     "[\"transformers\", \"T5TokenizerFast\"]", TE2));
    expect_load_error(c, EM_ERR_UNSUPPORTED, "text_encoder_3 class 'UMT5EncoderModel'");
    /* a T5 whose width is not the transformer's joint_attention_dim */
    em_test_scratch_write("model_index.json",
                          SD3_INDEX3("[\"transformers\", \"T5EncoderModel\"]",
                                     "[\"transformers\", \"T5TokenizerFast\"]", TE2));
    expect_load_error(c, EM_ERR_SHAPE, "text_encoder_3's d_model 16 is not the transformer's "
                      "joint_attention_dim 48");
    /* a missing component */
    em_test_scratch_write("model_index.json", SD3_INDEX("[null, null]", ""));
    expect_load_error(c, EM_ERR_NOT_FOUND, "needs a 'text_encoder_2' component");
    /* the whole folder loads */
    em_test_scratch_write("model_index.json", SD3_INDEX("null", TE2));
    em_pipeline *p = em_pipeline_load(c, em_test_scratch_dir(), NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    em_pipeline_free(p);
    em_test_scratch_remove();
    em_ctx_free(c);
}

/* The folder with its T5 (scripts/gen_sd3_t5_fixtures.py): the T5's prompt embeddings
 * (_get_t5_prompt_embeds) within 1e-4; runs from seeds and from the committed latents, and a
 * prompt truncated to max_sequence_length, within 1e-3 of diffusers' images. */
static void test_sd3_with_t5(void) {
    static const struct {
        const char *name, *prompt, *negative;
        double guidance;
        int64_t steps;
        uint64_t seed;
        int64_t msl;
    } runs[] = {{"cfg", "a photo of a cat", NULL, 7.0, 4, 0, 8},
                {"negative", "a red cube on a table", "blurry, low quality", 5.0, 3, 5, 8},
                {"nocfg", "an astronaut in the snow on a table", NULL, 1.0, 3, 11, 4}};
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/sd3_t5_ref");
    const char *dir = em_test_fixture_path("diffusion", "sd3_t5");
    em_pipeline *p = em_pipeline_load(c, dir, NULL);
    CHECK_MSG(b && p, "%s", msg(c));
    if (p) {
        const em_pipeline_index *idx = em_pipeline_get_index(p);
        CHECK(idx->text_encoder_3_dir && !strcmp(idx->text_encoder_3_class, "T5EncoderModel"));
        CHECK(idx->tokenizer_3_dir && !strcmp(idx->tokenizer_3_class, "T5Tokenizer"));
    }
    if (b) { /* the T5 alone, as the pipeline calls it */
        em_scope_push(c);
        em_t5_tokenizer *tok = em_t5_tokenizer_load(c, em_test_fixture_path("diffusion",
                                                                            "sd3_t5/tokenizer_3"));
        em_t5_encoder *te = em_t5_encoder_load(c, em_test_fixture_path("diffusion",
                                                                       "sd3_t5/text_encoder_3"),
                                               NULL);
        const char *prompt = "a photo of a cat";
        em_tensor *ids = em_t5_tokenize_batch(c, tok, &prompt, 1, 8, NULL);
        em_test_allclose(c, em_t5_encoder_forward(c, te, ids, NULL),
                         em_test_bundle_get(b, c, "t5_embeds"), 1e-4, 0,
                         "SD3's _get_t5_prompt_embeds");
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
        em_t5_encoder_free(te);
        em_t5_tokenizer_free(tok);
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    for (size_t i = 0; b && p && i < sizeof runs / sizeof runs[0]; i++) {
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.prompt = runs[i].prompt;
        rp.negative_prompt = runs[i].negative;
        rp.guidance_scale = runs[i].guidance;
        rp.steps = runs[i].steps;
        rp.seed = runs[i].seed;
        rp.max_sequence_length = runs[i].msl;
        char name[64], what[96];
        snprintf(name, sizeof name, "%s_image", runs[i].name);
        snprintf(what, sizeof what, "StableDiffusion3Pipeline with T5, run '%s'", runs[i].name);
        em_tensor *img = em_pipeline_run(c, p, &rp);
        CHECK_MSG(img != NULL, "%s: %s", what, msg(c));
        em_test_allclose(c, img, em_test_bundle_get(b, c, name), 1e-3, 0, what);
        if (i == 0) {
            rp.latents = em_test_bundle_get(b, c, "latents");
            em_test_allclose(c, em_pipeline_run(c, p, &rp),
                             em_test_bundle_get(b, c, "latents_image"), 1e-3, 0,
                             "StableDiffusion3Pipeline with T5 from its latents");
        }
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    em_pipeline_free(p);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

/* the same on XLA's CPU plugin */
static void test_sd3_on_xla(void) {
    em_ctx *c = em_ctx_create();
    if (!em_test_xla_or_skip(c)) {
        em_ctx_free(c);
        return;
    }
    em_test_bundle *b = em_test_bundle_load("diffusion/sd3_tiny_ref");
    /* the qk-norm model too (its RMSNorms); the pipeline's transformer runs in the runs below */
    if (b) check_transformer(c, b, "qk_", "sd3_qk", "xla:0");
    /* the pipeline moved there (pipe.to("xla:0")): run 'cfg' from its latents, eager and
     * compiled (one XLA executable for every step) */
    em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", "sd3_tiny"), NULL);
    CHECK_MSG(b && p && em_pipeline_to(c, p, "xla:0") == EM_OK, "%s", msg(c));
    if (b && p && em_ctx_status(c) == EM_OK) {
        CHECK(!strcmp(em_device_name(em_pipeline_device(p)), "xla:0"));
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.prompt = RUNS[0].prompt;
        rp.steps = RUNS[0].steps;
        rp.max_sequence_length = RUNS[0].msl;
        rp.latents = em_test_bundle_get(b, c, "latents");
        em_tensor *img = em_pipeline_run(c, p, &rp);
        CHECK_MSG(img != NULL, "%s", msg(c));
        em_test_allclose(c, img, em_test_bundle_get(b, c, "latents_image"), 1e-3, 0,
                         "StableDiffusion3Pipeline on xla:0");
        rp.compile = true;
        em_test_allclose(c, em_pipeline_run(c, p, &rp),
                         em_test_bundle_get(b, c, "latents_image"), 1e-3, 0,
                         "StableDiffusion3Pipeline on xla:0, compiled");
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    em_ctx_clear_error(c);
    em_pipeline_free(p);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_sd3_pipeline_runs), T(test_sd3_dynamic_shifting), T(test_sd3_bad_runs),
             T(test_sd3_bad_folders), T(test_sd3_transformer_matches_diffusers),
             T(test_sd3_config), T(test_sd3_bad_inputs), T(test_sd3_with_t5),
             T(test_sd3_on_xla))

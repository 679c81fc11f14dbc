/* Stable Diffusion XL against diffusers 0.42.1 (tests/fixtures/diffusion/sdxl_tiny, made by
 * scripts/gen_sdxl_fixtures.py): the UNet's addition_embed_type "text_time" alone within 1e-4;
 * its config values refused by name; StableDiffusionXLPipeline end to end (two CLIP text
 * encoders, pooled text embeds and time ids, force_zeros_for_empty_prompt, Euler) within 1e-3
 * of diffusers' output_type="np" images on the CPU and on XLA's CPU plugin, and
 * StableDiffusionXLImg2ImgPipeline on the same (base) folder; prompt_2 / negative_prompt_2
 * (strings and lists). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ember/ember.h"
#include "harness.h"
#include "sd_pipeline_test.h"

/* ---- the UNet alone ---- */

static void unet_run(const char *device) {
    em_ctx *c;
    em_test_bundle *b;
    if (!sd_test_open("sdxl_tiny_ref", device, &c, &b)) return;
    em_device *dev = strcmp(device, "cpu") ? em_device_get(c, device) : em_device_cpu();
    em_unet2d_options o = em_unet2d_default_options();
    o.device = device;
    em_unet2d *u = em_unet2d_load(c, em_test_fixture_path("diffusion", "sdxl_tiny/unet"), &o);
    CHECK_MSG(u != NULL, "%s", msg(c));
    if (u) {
        const em_unet2d_config *cfg = em_unet2d_get_config(u);
        CHECK(cfg->text_time && cfg->addition_time_embed_dim == 4 &&
              cfg->projection_class_embeddings_input_dim == 32 && cfg->text_embeds_dim == 8);
        em_scope_push(c);
        em_tensor *x = em_to(c, em_test_bundle_get(b, c, "unet_sample"), dev);
        em_tensor *ehs = em_to(c, em_test_bundle_get(b, c, "unet_ehs"), dev);
        em_unet2d_added_cond a = {
            .text_embeds = em_to(c, em_test_bundle_get(b, c, "unet_text_embeds"), dev),
            .time_ids = em_to(c, em_test_bundle_get(b, c, "unet_time_ids"), dev)};
        for (int k = 0; k < 3; k++) {
            char tn[32], on[32], what[64];
            snprintf(tn, sizeof tn, "unet_t%d", k);
            snprintf(on, sizeof on, "unet_out%d", k);
            snprintf(what, sizeof what, "text_time UNet at t%d on %s", k, device);
            em_tensor *t = em_to(c, em_test_bundle_get(b, c, tn), dev);
            em_tensor *y = em_unet2d_forward_added(c, u, x, t, ehs, &a);
            CHECK_MSG(y != NULL, "%s: %s", what, msg(c));
            em_test_allclose(c, y, em_test_bundle_get(b, c, on), 1e-4, 0, what);
            em_ctx_clear_error(c);
        }
        /* the added conditioning is required, and shaped */
        em_tensor *t = em_to(c, em_test_bundle_get(b, c, "unet_t0"), dev);
        CHECK(em_unet2d_forward_cond(c, u, x, t, ehs) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "text_time", "text_embeds [N, 8]", "time_ids [N, 6]");
        em_unet2d_added_cond bad = {.text_embeds = a.time_ids, .time_ids = a.time_ids};
        CHECK(em_unet2d_forward_added(c, u, x, t, ehs, &bad) == NULL);
        CHECK_ERR(c, EM_ERR_SHAPE, "text_embeds f32[2,6]", "expected [2, 8] and [2, 6]");
        em_scope_pop(c);
    }
    em_unet2d_free(u);
    /* a UNet without text_time refuses them */
    u = em_unet2d_load(c, em_test_fixture_path("diffusion", "unet_cond"), NULL);
    CHECK_MSG(u != NULL, "%s", msg(c));
    if (u) {
        em_scope_push(c);
        em_tensor *x = em_zeros(c, EM_F32, 4, (int64_t[]){1, 4, 8, 8});
        em_tensor *ehs = em_zeros(c, EM_F32, 3, (int64_t[]){1, 5, 12});
        em_tensor *t = em_zeros(c, EM_F32, 0, NULL);
        em_unet2d_added_cond a = {.text_embeds = em_zeros(c, EM_F32, 2, (int64_t[]){1, 8}),
                                  .time_ids = em_zeros(c, EM_F32, 2, (int64_t[]){1, 6})};
        CHECK(em_unet2d_forward_added(c, u, x, t, ehs, &a) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "no addition_embed_type 'text_time'");
        em_scope_pop(c);
    }
    em_unet2d_free(u);
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void test_sdxl_unet(void) { unet_run("cpu"); }
static void test_sdxl_unet_on_xla(void) { unet_run("xla:0"); }

/* The fixture file sdxl_tiny/<rel> with `from` replaced by `to` (which must occur), malloc'd. */
static char *edited_file(const char *rel, const char *from, const char *to) {
    char path[256];
    snprintf(path, sizeof path, "sdxl_tiny/%s", rel);
    char *text = em_test_read_file(em_test_fixture_path("diffusion", path), NULL);
    char *at = text ? strstr(text, from) : NULL;
    CHECK_MSG(at != NULL, "'%s' not in the config", from);
    if (!at) {
        free(text);
        return NULL;
    }
    size_t n = strlen(text) - strlen(from) + strlen(to) + 1;
    char *out = malloc(n);
    if (out)
        snprintf(out, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    free(text);
    return out;
}

static char *edited_config(const char *from, const char *to) {
    return edited_file("unet/config.json", from, to);
}

static void check_config_refused(em_ctx *c, const char *from, const char *to, em_status st,
                                 const char *want1, const char *want2) {
    char *j = edited_config(from, to);
    if (!j) return;
    em_unet2d_config cfg;
    CHECK_MSG(em_unet2d_config_parse(c, j, strlen(j), "sdxl/unet/config.json", &cfg) != EM_OK,
              "'%s' accepted", to);
    CHECK_ERR(c, st, want1, want2, "sdxl/unet/config.json");
    free(j);
}

static void test_sdxl_unet_config_errors(void) {
    em_ctx *c = em_ctx_create();
    check_config_refused(c, "\"addition_embed_type\": \"text_time\"",
                         "\"addition_embed_type\": \"text_image\"", EM_ERR_UNSUPPORTED,
                         "addition_embed_type 'text_image'", "text_time");
    check_config_refused(c, "\"addition_embed_type\": \"text_time\"",
                         "\"addition_embed_type\": 3", EM_ERR_FORMAT, "addition_embed_type",
                         "string");
    check_config_refused(c, "\"addition_time_embed_dim\": 4", "\"addition_time_embed_dim\": null",
                         EM_ERR_FORMAT, "needs addition_time_embed_dim",
                         "projection_class_embeddings_input_dim");
    check_config_refused(c, "\"projection_class_embeddings_input_dim\": 32",
                         "\"projection_class_embeddings_input_dim\": 24", EM_ERR_FORMAT,
                         "projection_class_embeddings_input_dim 24", "6 * addition_time_embed_dim");
    check_config_refused(c, "\"addition_time_embed_dim\": 4", "\"addition_time_embed_dim\": 0",
                         EM_ERR_FORMAT, "addition_time_embed_dim", "");
    /* a projection_class_embeddings_input_dim the weights disagree with: add_embedding.linear_1
     * is named with both shapes */
    const char *dir = em_test_scratch_make("sdxl_unet");
    char *j = edited_config("\"projection_class_embeddings_input_dim\": 32",
                            "\"projection_class_embeddings_input_dim\": 40");
    if (dir && j) {
        em_test_scratch_write("config.json", j);
        em_test_scratch_link("diffusion_pytorch_model.safetensors", "diffusion",
                             "sdxl_tiny/unet/diffusion_pytorch_model.safetensors");
        CHECK(em_unet2d_load(c, dir, NULL) == NULL);
        CHECK_ERR(c, EM_ERR_SHAPE, "add_embedding.linear_1.weight", "40");
    }
    free(j);
    em_test_scratch_remove();
    em_ctx_free(c);
}

/* ---- the pipeline ---- */

/* scripts/gen_sdxl_fixtures.py's RUNS */
static const struct {
    const char *name, *prompt, *negative;
    double guidance;
    int64_t steps;
    uint64_t seed;
    int64_t height, width;
} RUNS[] = {
    {"cfg", "a photo of a cat", NULL, 5.0, 4, 0, 0, 0},
    {"negative", "a red cube on a table", "blurry, low quality", 5.0, 3, 5, 0, 0},
    {"empty_negative", "an astronaut", "", 5.0, 3, 11, 0, 0},
    {"size", "a dog in the snow", NULL, 3.0, 3, 21, 24, 16},
};

/* scripts/gen_sdxl_fixtures.py's IMG2IMG (StableDiffusionXLImg2ImgPipeline on the base folder);
 * strength 0: the default, 0.3 */
static const struct {
    const char *name, *prompt, *negative;
    double guidance;
    int64_t steps;
    double strength;
    uint64_t seed;
} IMG2IMG[] = {
    {"img2img", "a photo of a cat", NULL, 5.0, 5, 0.6, 31},
    {"img2img_size", "a red cube on a table", "blurry", 3.0, 10, 0.0, 37},
};

/* scripts/gen_sdxl_fixtures.py's PROMPT2 (StableDiffusionXLPipeline's prompt_2 /
 * negative_prompt_2) */
static const struct {
    const char *name, *prompt, *prompt_2, *negative, *negative_2;
    double guidance;
    int64_t steps;
    uint64_t seed;
} PROMPT2[] = {
    {"prompt2", "a photo of a cat", "a red cube", "blurry", "low quality", 5.0, 3, 41},
    {"prompt2_zero", "an astronaut", "a dog in the snow", NULL, "dark", 5.0, 3, 43},
    {"prompt2_empty", "a tree by a lake", "", "blurry", "", 4.0, 3, 45},
};

/* Runs rp and compares the image with the bundle's <run>_image within 1e-3. */
static void check_image(em_ctx *c, em_pipeline *p, em_test_bundle *b,
                        const em_pipeline_run_params *rp, const char *run, const char *device) {
    sd_test_image(c, p, b, rp, "SDXL ", run, device);
}

static void prompt2_run(em_ctx *c, em_pipeline *p, em_test_bundle *b, const char *device,
                        bool compile) {
    for (size_t i = 0; i < sizeof PROMPT2 / sizeof PROMPT2[0]; i++) {
        em_pipeline_run_params rp =
            sd_test_params(PROMPT2[i].prompt, PROMPT2[i].negative, PROMPT2[i].guidance,
                           PROMPT2[i].steps, PROMPT2[i].seed, compile);
        rp.prompt_2 = PROMPT2[i].prompt_2;
        rp.negative_prompt_2 = PROMPT2[i].negative_2;
        check_image(c, p, b, &rp, PROMPT2[i].name, device);
    }
    /* lists: one second prompt per prompt, "" in a list encoded as given */
    const char *prompts[] = {"a photo of a cat", "a red cube"}, *prompts_2[] = {"a dog", "a tree"};
    const char *negs[] = {"blurry", "dark"}, *negs_2[] = {"", "low quality"};
    em_pipeline_run_params rp = em_pipeline_default_params();
    rp.prompts = prompts;
    rp.prompts_2 = prompts_2;
    rp.negative_prompts = negs;
    rp.negative_prompts_2 = negs_2;
    rp.num_prompts = 2;
    rp.steps = 2;
    rp.seed = 47;
    rp.compile = compile;
    check_image(c, p, b, &rp, "batch2", device);
}

static void img2img_run(em_ctx *c, em_pipeline *p, em_test_bundle *b, const char *device,
                        bool compile) {
    for (size_t i = 0; i < sizeof IMG2IMG / sizeof IMG2IMG[0]; i++) {
        char init[64];
        em_scope_push(c);
        em_pipeline_run_params rp =
            sd_test_params(IMG2IMG[i].prompt, IMG2IMG[i].negative, IMG2IMG[i].guidance,
                           IMG2IMG[i].steps, IMG2IMG[i].seed, compile);
        rp.strength = IMG2IMG[i].strength;
        snprintf(init, sizeof init, "%s_init", IMG2IMG[i].name);
        rp.image = em_test_bundle_get(b, c, init);
        check_image(c, p, b, &rp, IMG2IMG[i].name, device);
        em_scope_pop(c);
    }
}

static void pipeline_run(const char *device, bool compile) {
    em_ctx *c;
    em_test_bundle *b;
    if (!sd_test_open("sdxl_tiny_ref", device, &c, &b)) return;
    em_pipeline *p =
        sd_test_load(c, em_test_fixture_path("diffusion", "sdxl_tiny"), device, "sdxl_tiny");
    if (p) {
        const em_pipeline_index *idx = em_pipeline_get_index(p);
        CHECK(idx->pipeline == EM_PIPELINE_STABLE_DIFFUSION_XL);
        CHECK(!strcmp(em_pipeline_class_name(idx->pipeline), "StableDiffusionXLPipeline"));
        CHECK(idx->force_zeros_for_empty_prompt);
        CHECK(em_scheduler_get_kind(em_pipeline_scheduler(p)) == EM_SCHED_EULER);
    }
    for (size_t i = 0; p && i < sizeof RUNS / sizeof RUNS[0]; i++) {
        em_pipeline_run_params rp = sd_test_params(RUNS[i].prompt, RUNS[i].negative,
                                                   RUNS[i].guidance, RUNS[i].steps,
                                                   RUNS[i].seed, compile);
        rp.height = RUNS[i].height;
        rp.width = RUNS[i].width;
        check_image(c, p, b, &rp, RUNS[i].name, device);
    }
    if (p) { /* two prompts, two images each, the zeroed negatives repeated alike */
        const char *prompts[] = {"a photo of a cat", "a red cube"};
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.prompts = prompts;
        rp.num_prompts = 2;
        rp.num_images_per_prompt = 2;
        rp.steps = 2;
        rp.seed = 3;
        rp.compile = compile;
        check_image(c, p, b, &rp, "batch", device);
    }
    if (p) img2img_run(c, p, b, device, compile);
    if (p) prompt2_run(c, p, b, device, compile);
    em_pipeline_free(p);
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void test_sdxl_matches_diffusers(void) { pipeline_run("cpu", false); }
static void test_sdxl_compiled(void) { pipeline_run("cpu", true); }
static void test_sdxl_on_xla(void) { pipeline_run("xla:0", false); }

/* A scratch SDXL folder: links to sdxl_tiny's components, model_index.json from `extra` (more
 * entries) and the text_encoder_2 entry `te2` (NULL: none). */
static void write_index(const char *te2, const char *extra) {
    char text[1024];
    snprintf(text, sizeof text,
             "{\"_class_name\": \"StableDiffusionXLPipeline\", "
             "\"unet\": [\"diffusers\", \"UNet2DConditionModel\"], "
             "\"vae\": [\"diffusers\", \"AutoencoderKL\"], "
             "\"text_encoder\": [\"transformers\", \"CLIPTextModel\"], "
             "\"tokenizer\": [\"transformers\", \"CLIPTokenizer\"], "
             "\"tokenizer_2\": [\"transformers\", \"CLIPTokenizer\"], "
             "\"scheduler\": [\"diffusers\", \"EulerDiscreteScheduler\"]%s%s%s%s}",
             te2 ? ", \"text_encoder_2\": [\"transformers\", \"" : "", te2 ? te2 : "",
             te2 ? "\"]" : "", extra);
    em_test_scratch_write("model_index.json", text);
}

static void test_sdxl_folders(void) {
    const char *dir = em_test_scratch_make("sdxl_bad");
    if (!dir) return;
    em_ctx *c = em_ctx_create();
    const char *comps[] = {"unet", "vae", "text_encoder", "tokenizer", "tokenizer_2", "scheduler",
                           "text_encoder_2"};
    sd_test_link("sdxl_tiny", comps, 7);
    write_index(NULL, "");
    CHECK(em_pipeline_load(c, dir, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "StableDiffusionXLPipeline needs a 'text_encoder_2'");
    write_index("CLIPTextModel", "");
    CHECK(em_pipeline_load(c, dir, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "text_encoder_2 class 'CLIPTextModel'",
              "CLIPTextModelWithProjection");
    /* a refiner's config with base's UNet: 6 time ids' width where 5 are fed */
    write_index("CLIPTextModelWithProjection", ", \"requires_aesthetics_score\": true");
    CHECK(em_pipeline_load(c, dir, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "the unet takes 12", "requires_aesthetics_score: 5 ids");
    write_index("CLIPTextModelWithProjection", ", \"requires_aesthetics_score\": 1");
    CHECK(em_pipeline_load(c, dir, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "requires_aesthetics_score must be true or false");
    write_index("CLIPTextModelWithProjection", ", \"force_zeros_for_empty_prompt\": 1");
    CHECK(em_pipeline_load(c, dir, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "force_zeros_for_empty_prompt");
    /* force_zeros_for_empty_prompt false: no negative prompt is "" encoded, diffusers' image of
     * negative_prompt="" */
    write_index("CLIPTextModelWithProjection", ", \"requires_aesthetics_score\": false, "
                "\"force_zeros_for_empty_prompt\": false");
    em_pipeline *p = em_pipeline_load(c, dir, NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    em_test_bundle *b = em_test_bundle_load("diffusion/sdxl_tiny_ref");
    if (p && b) {
        CHECK(!em_pipeline_get_index(p)->force_zeros_for_empty_prompt);
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.prompt = "an astronaut";
        rp.steps = 3;
        rp.seed = 11; /* guidance: the default, 5 */
        em_tensor *img = em_pipeline_run(c, p, &rp);
        CHECK_MSG(img != NULL, "%s", msg(c));
        em_test_allclose(c, img, em_test_bundle_get(b, c, "empty_negative_image"), 1e-3, 0,
                         "no negative prompt without force_zeros_for_empty_prompt");
        em_ctx_clear_error(c);
        /* image to image: the sizes and strengths Stable Diffusion's refuses */
        rp.image = em_zeros(c, EM_F32, 4, (int64_t[]){1, 15, 16, 3});
        rp.strength = 1.0;
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_SHAPE, "init image is 15 x 16", "multiples of 2");
        rp.image = em_zeros(c, EM_F32, 4, (int64_t[]){1, 16, 16, 3});
        rp.strength = 0.2; /* int(3 * 0.2) = 0 */
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "strength 0.2 of 3 steps leaves no step");
        rp.strength = 0.0; /* the default 0.3 of 3 steps: int(0.9) = 0 */
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "strength 0.3 of 3 steps leaves no step");
        /* second prompts: strings with a single prompt, lists with a list */
        rp.image = NULL;
        const char *two[] = {"a", "b"}, *one_null[] = {"a", NULL};
        rp.prompt = NULL;
        rp.prompts = two;
        rp.num_prompts = 2;
        rp.prompt_2 = "c";
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "prompt_2 with a list of prompts", "prompts_2");
        rp.prompt_2 = NULL;
        rp.negative_prompts_2 = one_null;
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "negative_prompts_2[1] is NULL");
        rp.prompts = NULL;
        rp.prompt = "a";
        rp.negative_prompts_2 = NULL;
        rp.prompts_2 = two;
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "prompts_2 without a list of prompts");
        em_scope_pop(c);
    }
    em_pipeline_free(p);
    em_test_bundle_free(b);
    /* second prompts are SDXL's */
    p = em_pipeline_load(c, em_test_fixture_path("diffusion", "sd_tiny"), NULL);
    CHECK_MSG(p != NULL, "sd_tiny: %s", msg(c));
    if (p) {
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.prompt = "a";
        rp.negative_prompt_2 = "b";
        rp.steps = 1;
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "negative_prompt_2 given to StableDiffusionPipeline",
                  "text_encoder_2");
    }
    em_pipeline_free(p);
    /* a UNet without text_time in an SDXL folder */
    unlink(em_test_scratch_path("unet"));
    em_test_scratch_link("unet", "diffusion", "sd_tiny/unet");
    CHECK(em_pipeline_load(c, dir, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "no addition_embed_type 'text_time'");
    unlink(em_test_scratch_path("unet"));
    em_test_scratch_link("unet", "diffusion", "sdxl_tiny/unet");
    /* a VAE with latents_mean / latents_std (decoded otherwise by diffusers) */
    unlink(em_test_scratch_path("vae"));
    CHECK(mkdir(em_test_scratch_path("vae"), 0755) == 0);
    char *vc = edited_file("vae/config.json", "\"latents_mean\": null,\n  \"latents_std\": null",
                           "\"latents_mean\": [0, 0, 0, 0], \"latents_std\": [1, 1, 1, 1]");
    if (vc) {
        em_test_scratch_write("vae/config.json", vc);
        em_test_scratch_link("vae/diffusion_pytorch_model.safetensors", "diffusion",
                             "sdxl_tiny/vae/diffusion_pytorch_model.safetensors");
        CHECK(em_pipeline_load(c, dir, NULL) == NULL);
        CHECK_ERR(c, EM_ERR_UNSUPPORTED, "latents_mean / latents_std", "vae/config.json");
    }
    free(vc);
    em_ctx_free(c);
    em_test_scratch_remove();
}

EM_TEST_MAIN(T(test_sdxl_unet), T(test_sdxl_unet_on_xla), T(test_sdxl_unet_config_errors),
             T(test_sdxl_matches_diffusers), T(test_sdxl_compiled), T(test_sdxl_on_xla),
             T(test_sdxl_folders))

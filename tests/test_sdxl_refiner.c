/* The SDXL refiner's layout against diffusers 0.42.1 (tests/fixtures/diffusion/
 * sdxl_refiner_tiny, made by scripts/gen_sdxl_refiner_fixtures.py): a
 * StableDiffusionXLImg2ImgPipeline folder without tokenizer and text_encoder and with
 * requires_aesthetics_score, whose UNet takes 5 time ids (the aesthetic scores of the prompts'
 * and the negatives' rows). Images within 1e-3 of diffusers' output_type="np" ones on the CPU
 * and compiled; the folder's refusals; and the hand-over from SDXL base's latents at
 * denoising_end to the refiner at denoising_start (and the latents as a noised init image). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "sd_pipeline_test.h"

/* scripts/gen_sdxl_refiner_fixtures.py's RUNS; strength 0: the default 0.3, scores NAN: the
 * defaults 6.0 / 2.5 */
static const struct {
    const char *name, *prompt, *prompt_2, *negative;
    double guidance;
    int64_t steps;
    double strength;
    uint64_t seed;
    double score, negative_score;
    int64_t per;
} RUNS[] = {
    {"refine", "a photo of a cat", NULL, NULL, 5.0, 10, 0.0, 51, NAN, NAN, 1},
    {"scores", "a red cube on a table", NULL, "blurry", 4.0, 5, 0.6, 53, 8.0, 1.0, 1},
    {"no_cfg", "an astronaut", NULL, NULL, 1.0, 4, 0.5, 55, 7.0, NAN, 1},
    {"prompt2", "a tree by a lake", "a dog in the snow", NULL, 5.0, 4, 0.5, 57, NAN, NAN, 2},
};

static void run_all(bool compile) {
    em_test_bundle *b = em_test_bundle_load("diffusion/sdxl_refiner_tiny_ref");
    CHECK(b != NULL);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    em_pipeline *p =
        em_pipeline_load(c, em_test_fixture_path("diffusion", "sdxl_refiner_tiny"), NULL);
    CHECK_MSG(p != NULL, "sdxl_refiner_tiny: %s", msg(c));
    if (p) {
        const em_pipeline_index *idx = em_pipeline_get_index(p);
        CHECK(idx->pipeline == EM_PIPELINE_STABLE_DIFFUSION_XL);
        CHECK(!strcmp(idx->class_name, "StableDiffusionXLImg2ImgPipeline"));
        CHECK(idx->requires_aesthetics_score && !idx->force_zeros_for_empty_prompt);
        CHECK(!idx->text_encoder_dir && !idx->tokenizer_dir && idx->text_encoder_2_dir);
    }
    for (size_t i = 0; p && i < sizeof RUNS / sizeof RUNS[0]; i++) {
        char name[64];
        em_scope_push(c);
        em_pipeline_run_params rp =
            sd_test_params(RUNS[i].prompt, RUNS[i].negative, RUNS[i].guidance, RUNS[i].steps,
                           RUNS[i].seed, compile);
        rp.prompt_2 = RUNS[i].prompt_2;
        rp.strength = RUNS[i].strength;
        rp.num_images_per_prompt = RUNS[i].per;
        if (RUNS[i].score == RUNS[i].score) rp.aesthetic_score = RUNS[i].score;
        if (RUNS[i].negative_score == RUNS[i].negative_score)
            rp.negative_aesthetic_score = RUNS[i].negative_score;
        snprintf(name, sizeof name, "%s_init", RUNS[i].name);
        rp.image = em_test_bundle_get(b, c, name);
        sd_test_image(c, p, b, &rp, "SDXL refiner ", RUNS[i].name, "cpu");
        em_scope_pop(c);
    }
    if (p && !compile) {
        /* text to image: the refiner's UNet takes image to image's time ids only */
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.prompt = "a";
        rp.steps = 2;
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "requires_aesthetics_score (a refiner)",
                  "needs an init image");
        em_scope_push(c);
        rp.image = em_zeros(c, EM_F32, 4, (int64_t[]){1, 16, 16, 3});
        rp.aesthetic_score = NAN;
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "aesthetic_score nan", "NaN is not a score");
        em_scope_pop(c);
    }
    em_pipeline_free(p);
    em_ctx_free(c);
    em_test_bundle_free(b);
}

/* diffusers' ensemble of expert denoisers: the base to denoising_end as latents, the refiner
 * from them at denoising_start; and the latents as a noised init image */
static void handover(bool compile) {
    em_test_bundle *b = em_test_bundle_load("diffusion/sdxl_refiner_tiny_ref");
    CHECK(b != NULL);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    em_pipeline *base = em_pipeline_load(c, em_test_fixture_path("diffusion", "sdxl_tiny"), NULL);
    em_pipeline *ref =
        em_pipeline_load(c, em_test_fixture_path("diffusion", "sdxl_refiner_tiny"), NULL);
    CHECK_MSG(base && ref, "%s", msg(c));
    if (base && ref) {
        em_scope_push(c);
        em_pipeline_run_params rp =
            sd_test_params("a photo of a cat", NULL, 5.0, 10, 91, compile);
        rp.denoising_end = 0.7;
        rp.output_latents = true;
        em_tensor *lat = em_pipeline_run(c, base, &rp);
        CHECK_MSG(lat != NULL, "base to denoising_end: %s", msg(c));
        em_test_allclose(c, lat, em_test_bundle_get(b, c, "handover_latents"), 1e-3, 0,
                         "base latents at denoising_end 0.7");
        em_ctx_clear_error(c);
        rp.denoising_end = 0.0;
        rp.output_latents = false;
        rp.image_latents = em_test_bundle_get(b, c, "handover_latents");
        rp.denoising_start = 0.7;
        rp.seed = 93;
        em_tensor *img = em_pipeline_run(c, ref, &rp);
        CHECK_MSG(img != NULL, "refiner from denoising_start: %s", msg(c));
        em_test_allclose(c, img, em_test_bundle_get(b, c, "handover_image"), 1e-3, 0,
                         "refiner from the base's latents at denoising_start 0.7");
        em_ctx_clear_error(c);
        rp.denoising_start = 0.0;
        rp.strength = 0.5;
        img = em_pipeline_run(c, ref, &rp);
        CHECK_MSG(img != NULL, "refiner from noised latents: %s", msg(c));
        em_test_allclose(c, img, em_test_bundle_get(b, c, "latents_image"), 1e-3, 0,
                         "refiner from the base's latents, noised at strength 0.5");
        em_ctx_clear_error(c);
        if (!compile) { /* refusals */
            rp.strength = 0.0;
            rp.denoising_start = 0.7;
            rp.denoising_end = 0.5;
            CHECK(em_pipeline_run(c, ref, &rp) == NULL);
            CHECK_ERR(c, EM_ERR_INVALID_ARG, "denoising_start 0.7, denoising_end 0.5");
            rp.denoising_end = 0.0;
            rp.denoising_start = 0.9999;
            CHECK(em_pipeline_run(c, ref, &rp) == NULL);
            CHECK_ERR(c, EM_ERR_INVALID_ARG, "denoising_start 0.9999 keeps no timestep");
            rp.denoising_start = 0.7;
            rp.image_latents = em_zeros(c, EM_F32, 4, (int64_t[]){1, 3, 8, 8});
            CHECK(em_pipeline_run(c, ref, &rp) == NULL);
            CHECK_ERR(c, EM_ERR_SHAPE, "image_latents f32[1,3,8,8]", "latent_channels");
            rp.image_latents = NULL;
            CHECK(em_pipeline_run(c, base, &rp) == NULL);
            CHECK_ERR(c, EM_ERR_INVALID_ARG, "denoising_start without an init image");
        }
        em_scope_pop(c);
    }
    em_pipeline_free(base);
    em_pipeline_free(ref);
    if (!compile) { /* the hand-over is SDXL's; latents out need a VAE */
        em_pipeline *sd = em_pipeline_load(c, em_test_fixture_path("diffusion", "sd_tiny"), NULL);
        em_pipeline *ddpm =
            em_pipeline_load(c, em_test_fixture_path("diffusion", "ddpm_attn"), NULL);
        CHECK_MSG(sd && ddpm, "%s", msg(c));
        if (sd && ddpm) {
            em_pipeline_run_params rp = em_pipeline_default_params();
            rp.prompt = "a";
            rp.steps = 2;
            rp.denoising_end = 0.5;
            CHECK(em_pipeline_run(c, sd, &rp) == NULL);
            CHECK_ERR(c, EM_ERR_INVALID_ARG, "denoising_end given to StableDiffusionPipeline");
            rp = em_pipeline_default_params();
            rp.steps = 2;
            rp.output_latents = true;
            CHECK(em_pipeline_run(c, ddpm, &rp) == NULL);
            CHECK_ERR(c, EM_ERR_INVALID_ARG, "output_latents: DDPMPipeline", "has no VAE");
        }
        em_pipeline_free(sd);
        em_pipeline_free(ddpm);
    }
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void test_refiner_matches_diffusers(void) { run_all(false); }
static void test_handover_matches_diffusers(void) { handover(false); }
static void test_handover_compiled(void) { handover(true); }
static void test_refiner_compiled(void) { run_all(true); }

/* A scratch refiner folder: links to sdxl_refiner_tiny's components under the index `text`. */
static void write_index(const char *entries) {
    char text[1024];
    snprintf(text, sizeof text,
             "{\"_class_name\": \"StableDiffusionXLImg2ImgPipeline\", "
             "\"unet\": [\"diffusers\", \"UNet2DConditionModel\"], "
             "\"vae\": [\"diffusers\", \"AutoencoderKL\"], "
             "\"text_encoder_2\": [\"transformers\", \"CLIPTextModelWithProjection\"], "
             "\"tokenizer_2\": [\"transformers\", \"CLIPTokenizer\"], "
             "\"scheduler\": [\"diffusers\", \"EulerDiscreteScheduler\"]%s}",
             entries);
    em_test_scratch_write("model_index.json", text);
}

static void test_refiner_folders(void) {
    const char *dir = em_test_scratch_make("sdxl_refiner_bad");
    if (!dir) return;
    em_ctx *c = em_ctx_create();
    const char *comps[] = {"unet", "vae", "tokenizer_2", "scheduler", "text_encoder_2"};
    char target[64];
    for (int i = 0; i < 5; i++) {
        snprintf(target, sizeof target, "sdxl_refiner_tiny/%s", comps[i]);
        em_test_scratch_link(comps[i], "diffusion", target);
    }
    /* a tokenizer without its text encoder */
    write_index(", \"requires_aesthetics_score\": true, \"text_encoder\": [null, null], "
                "\"tokenizer\": [\"transformers\", \"CLIPTokenizer\"]");
    CHECK(em_pipeline_load(c, dir, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "has a 'tokenizer' component but no 'text_encoder'");
    /* requires_aesthetics_score false: 6 time ids, 4 more values than this UNet takes */
    write_index("");
    CHECK(em_pipeline_load(c, dir, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "text_encoder_2's pooled text_embeds are 8 wide",
              "the unet takes 4", "- 6 time ids");
    /* the missing entries are what a refiner saves as [null, null] */
    write_index(", \"requires_aesthetics_score\": true");
    em_pipeline *p = em_pipeline_load(c, dir, NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    em_pipeline_free(p);
    /* the UNet alone: 5 time ids and the text embeds' width they leave; 6 are refused */
    em_unet2d *u =
        em_unet2d_load(c, em_test_fixture_path("diffusion", "sdxl_refiner_tiny/unet"), NULL);
    CHECK_MSG(u != NULL, "%s", msg(c));
    if (u) {
        em_scope_push(c);
        em_tensor *x = em_zeros(c, EM_F32, 4, (int64_t[]){1, 4, 8, 8});
        em_tensor *ehs = em_zeros(c, EM_F32, 3, (int64_t[]){1, 5, 16});
        em_tensor *t = em_zeros(c, EM_F32, 0, NULL);
        em_unet2d_added_cond a = {.text_embeds = em_zeros(c, EM_F32, 2, (int64_t[]){1, 8}),
                                  .time_ids = em_zeros(c, EM_F32, 2, (int64_t[]){1, 5})};
        CHECK_MSG(em_unet2d_forward_added(c, u, x, t, ehs, &a) != NULL, "%s", msg(c));
        a.time_ids = em_zeros(c, EM_F32, 2, (int64_t[]){1, 6});
        CHECK(em_unet2d_forward_added(c, u, x, t, ehs, &a) == NULL);
        CHECK_ERR(c, EM_ERR_SHAPE, "expected [1, 4] and [1, 6]", "28 - 6 *");
        em_scope_pop(c);
    }
    em_unet2d_free(u);
    em_ctx_free(c);
    em_test_scratch_remove();
}

EM_TEST_MAIN(T(test_refiner_matches_diffusers), T(test_refiner_compiled), T(test_refiner_folders),
             T(test_handover_matches_diffusers), T(test_handover_compiled))

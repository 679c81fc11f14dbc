/* Inpainting against diffusers 0.42.1's StableDiffusionInpaintPipeline (scripts/
 * gen_sd_inpaint_fixtures.py): tests/fixtures/diffusion/sd_inpaint_tiny (a 9-channel inpainting
 * UNet: the latents, the mask and the masked image's latents) and sd_tiny (a 4-channel UNet:
 * the known region blended back after every step), seeded runs within 1e-3 of diffusers'
 * output_type="np" images, eager and compiled; StableDiffusionXLInpaintPipeline on sdxl_tiny
 * (the blend, its default strength 0.9999); and the refusals. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "sd_pipeline_test.h"

/* scripts/gen_sd_inpaint_fixtures.py's RUNS: StableDiffusionInpaintPipeline on sd_inpaint_tiny
 * and sd_tiny, StableDiffusionXLInpaintPipeline on sdxl_tiny (the 4-channel blend); strength 0:
 * the default (1.0, SDXL 0.9999); scheduler NULL: the folder's */
static const struct {
    const char *name, *folder, *prompt, *negative;
    double guidance;
    int64_t steps;
    double strength;
    uint64_t seed;
    const char *scheduler;
    int64_t per;
} RUNS[] = {
    {"inpaint", "sd_inpaint_tiny", "a photo of a cat", NULL, 7.5, 4, 0.0, 61, NULL, 1},
    {"inpaint_strength", "sd_inpaint_tiny", "a red cube", "blurry", 3.0, 6, 0.6, 63, "euler", 1},
    {"inpaint_batch", "sd_inpaint_tiny", "an astronaut", NULL, 1.0, 3, 0.0, 65, "euler-a", 2},
    {"blend", "sd_tiny", "a photo of a cat", NULL, 7.5, 4, 0.0, 67, NULL, 1},
    {"blend_strength", "sd_tiny", "a boat", "dark", 4.0, 5, 0.6, 69, "euler", 2},
    {"xl_inpaint", "sdxl_tiny", "a photo of a cat", NULL, 5.0, 5, 0.0, 73, NULL, 1},
    {"xl_inpaint_full", "sdxl_tiny", "a red cube", "blurry", 4.0, 4, 1.0, 75, NULL, 2},
};

static void run_all(bool compile) {
    em_test_bundle *b = em_test_bundle_load("diffusion/sd_inpaint_ref");
    CHECK(b != NULL);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    for (size_t i = 0; i < sizeof RUNS / sizeof RUNS[0]; i++) {
        em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", RUNS[i].folder),
                                          NULL);
        CHECK_MSG(p != NULL, "%s: %s", RUNS[i].folder, msg(c));
        if (!p) continue;
        em_scheduler_kind kind;
        if (RUNS[i].scheduler) {
            CHECK(em_scheduler_kind_parse(RUNS[i].scheduler, &kind));
            CHECK_MSG(em_pipeline_set_scheduler(c, p, kind) == EM_OK, "%s", msg(c));
        }
        char name[64], label[64];
        em_scope_push(c);
        em_pipeline_run_params rp =
            sd_test_params(RUNS[i].prompt, RUNS[i].negative, RUNS[i].guidance,
                           RUNS[i].steps, RUNS[i].seed, compile);
        rp.strength = RUNS[i].strength;
        rp.num_images_per_prompt = RUNS[i].per;
        snprintf(name, sizeof name, "%s_init", RUNS[i].name);
        rp.image = em_test_bundle_get(b, c, name);
        snprintf(name, sizeof name, "%s_mask", RUNS[i].name);
        rp.mask_image = em_test_bundle_get(b, c, name);
        snprintf(label, sizeof label, "inpainting %s: ", RUNS[i].folder);
        sd_test_image(c, p, b, &rp, label, RUNS[i].name, "cpu");
        em_scope_pop(c);
        em_pipeline_free(p);
    }
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void test_inpaint_matches_diffusers(void) { run_all(false); }
static void test_inpaint_compiled(void) { run_all(true); }

static void test_inpaint_refusals(void) {
    em_ctx *c = em_ctx_create();
    em_pipeline *p =
        em_pipeline_load(c, em_test_fixture_path("diffusion", "sd_inpaint_tiny"), NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    if (p) {
        const em_pipeline_index *idx = em_pipeline_get_index(p);
        CHECK(idx->pipeline == EM_PIPELINE_STABLE_DIFFUSION);
        CHECK(!strcmp(idx->class_name, "StableDiffusionInpaintPipeline"));
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.prompt = "a";
        rp.steps = 2;
        /* the 9-channel UNet needs the mask (and the image) */
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "an inpainting UNet (9 input channels)",
                  "needs an init image and a mask image");
        rp.mask_image = em_zeros(c, EM_F32, 3, (int64_t[]){1, 16, 16});
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "a mask image without an init image");
        rp.image = em_zeros(c, EM_F32, 4, (int64_t[]){1, 16, 16, 3});
        rp.mask_image = em_zeros(c, EM_F32, 4, (int64_t[]){1, 16, 8, 1});
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_SHAPE, "the mask image is f32[1,16,8,1]", "[1, 16, 16]");
        rp.mask_image = em_zeros(c, EM_I64, 3, (int64_t[]){1, 16, 16});
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_DTYPE, "the mask image is i64[1,16,16]", "f32");
        em_scope_pop(c);
    }
    em_pipeline_free(p);
    /* masks are Stable Diffusion's and SDXL's */
    p = em_pipeline_load(c, em_test_fixture_path("diffusion", "dit_pipe"), NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    if (p) {
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.class_label = 1;
        rp.steps = 2;
        rp.image = em_zeros(c, EM_F32, 4, (int64_t[]){1, 16, 16, 3});
        rp.mask_image = em_zeros(c, EM_F32, 3, (int64_t[]){1, 16, 16});
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "given to DiTPipeline");
        em_scope_pop(c);
    }
    em_pipeline_free(p);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_inpaint_matches_diffusers), T(test_inpaint_compiled),
             T(test_inpaint_refusals))

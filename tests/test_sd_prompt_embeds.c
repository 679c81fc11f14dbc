/* StableDiffusionPipeline and StableDiffusionXLPipeline (its refiner too) given prompt_embeds
 * (scripts/gen_sd_prompt_embeds_fixtures.py and gen_sdxl_prompt_embeds_fixtures.py, on
 * tests/fixtures/diffusion/sd_tiny): negative embeddings given, or the negative prompt encoded at
 * the embeddings' length, with and without guidance, two images per prompt; diffusers' images
 * within 1e-3, eager and compiled; and the refusals. */
#include <stdio.h>
#include <string.h>

#include "ember/ember.h"
#include "sd_pipeline_test.h"

/* scripts/gen_sd_prompt_embeds_fixtures.py's RUNS */
static const struct {
    const char *name, *negative;
    bool neg_embeds;
    double guidance;
    int64_t steps;
    uint64_t seed;
    int64_t per;
} RUNS[] = {
    {"embeds", NULL, false, 7.5, 3, 81, 1},
    {"embeds_neg", NULL, true, 5.0, 3, 83, 2},
    {"embeds_short", "blurry, dark", false, 4.0, 3, 85, 1},
    {"embeds_nocfg", NULL, false, 1.0, 3, 87, 1},
};

static void run_all(bool compile) {
    em_test_bundle *b = em_test_bundle_load("diffusion/sd_prompt_embeds_ref");
    CHECK(b != NULL);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", "sd_tiny"), NULL);
    CHECK_MSG(p != NULL, "sd_tiny: %s", msg(c));
    for (size_t i = 0; p && i < sizeof RUNS / sizeof RUNS[0]; i++) {
        char name[64];
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        snprintf(name, sizeof name, "%s_embeds", RUNS[i].name);
        rp.prompt_embeds = em_test_bundle_get(b, c, name);
        if (RUNS[i].neg_embeds) {
            snprintf(name, sizeof name, "%s_neg_embeds", RUNS[i].name);
            rp.negative_prompt_embeds = em_test_bundle_get(b, c, name);
        }
        rp.negative_prompt = RUNS[i].negative;
        rp.guidance_scale = RUNS[i].guidance;
        rp.steps = RUNS[i].steps;
        rp.seed = RUNS[i].seed;
        rp.num_images_per_prompt = RUNS[i].per;
        rp.compile = compile;
        sd_test_image(c, p, b, &rp, "prompt_embeds ", RUNS[i].name, "cpu");
        em_scope_pop(c);
    }
    em_pipeline_free(p);
    em_ctx_free(c);
    em_test_bundle_free(b);
}

/* scripts/gen_sdxl_prompt_embeds_fixtures.py's RUNS (SDXL: pooled embeddings beside) */
static const struct {
    const char *name, *folder, *negative;
    bool neg_embeds;
    double guidance;
    int64_t steps;
    uint64_t seed;
    int64_t per;
    double strength; /* the refiner's image to image; 0: text to image */
} XL[] = {
    {"xl_zero", "sdxl_tiny", NULL, false, 5.0, 3, 101, 1, 0},
    {"xl_negative", "sdxl_tiny", "blurry", false, 4.0, 3, 103, 2, 0},
    {"xl_given", "sdxl_tiny", NULL, true, 5.0, 3, 105, 1, 0},
    {"refiner", "sdxl_refiner_tiny", NULL, false, 5.0, 6, 107, 1, 0.5},
};

static void run_xl(bool compile) {
    em_test_bundle *b = em_test_bundle_load("diffusion/sdxl_prompt_embeds_ref");
    CHECK(b != NULL);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    for (size_t i = 0; i < sizeof XL / sizeof XL[0]; i++) {
        em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", XL[i].folder), NULL);
        CHECK_MSG(p != NULL, "%s: %s", XL[i].folder, msg(c));
        if (!p) continue;
        char name[64];
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        snprintf(name, sizeof name, "%s_embeds", XL[i].name);
        rp.prompt_embeds = em_test_bundle_get(b, c, name);
        snprintf(name, sizeof name, "%s_pooled", XL[i].name);
        rp.pooled_prompt_embeds = em_test_bundle_get(b, c, name);
        if (XL[i].neg_embeds) {
            snprintf(name, sizeof name, "%s_neg_embeds", XL[i].name);
            rp.negative_prompt_embeds = em_test_bundle_get(b, c, name);
            snprintf(name, sizeof name, "%s_neg_pooled", XL[i].name);
            rp.negative_pooled_prompt_embeds = em_test_bundle_get(b, c, name);
        }
        if (XL[i].strength > 0) {
            snprintf(name, sizeof name, "%s_init", XL[i].name);
            rp.image = em_test_bundle_get(b, c, name);
            rp.strength = XL[i].strength;
        }
        rp.negative_prompt = XL[i].negative;
        rp.guidance_scale = XL[i].guidance;
        rp.steps = XL[i].steps;
        rp.seed = XL[i].seed;
        rp.num_images_per_prompt = XL[i].per;
        rp.compile = compile;
        sd_test_image(c, p, b, &rp, "SDXL prompt_embeds ", XL[i].name, "cpu");
        if (i == 0 && !compile) { /* the pooled embeddings are required, and shaped */
            em_tensor *pooled = rp.pooled_prompt_embeds;
            rp.pooled_prompt_embeds = NULL;
            CHECK(em_pipeline_run(c, p, &rp) == NULL);
            CHECK_ERR(c, EM_ERR_INVALID_ARG, "need pooled_prompt_embeds");
            rp.pooled_prompt_embeds = em_zeros(c, EM_F32, 2, (int64_t[]){1, 7});
            CHECK(em_pipeline_run(c, p, &rp) == NULL);
            CHECK_ERR(c, EM_ERR_SHAPE, "pooled_prompt_embeds f32[1,7]", "projection_dim");
            rp.pooled_prompt_embeds = pooled;
            rp.prompt_2 = "x";
            CHECK(em_pipeline_run(c, p, &rp) == NULL);
            CHECK_ERR(c, EM_ERR_INVALID_ARG, "prompt_embeds with a prompt");
        }
        em_scope_pop(c);
        em_pipeline_free(p);
    }
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void test_prompt_embeds_match_diffusers(void) { run_all(false); }
static void test_sdxl_prompt_embeds_match_diffusers(void) { run_xl(false); }
static void test_sdxl_prompt_embeds_compiled(void) { run_xl(true); }
static void test_prompt_embeds_compiled(void) { run_all(true); }

static void test_prompt_embeds_refusals(void) {
    em_ctx *c = em_ctx_create();
    em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", "sd_tiny"), NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    if (p) {
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.steps = 1;
        rp.prompt_embeds = em_zeros(c, EM_F32, 3, (int64_t[]){2, 77, 16});
        rp.prompt = "a";
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "prompt_embeds with a prompt");
        rp.prompt = NULL;
        rp.negative_prompt = "b";
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "negative_prompt (a string) with 2 rows");
        rp.negative_prompt = NULL;
        rp.negative_prompt_embeds = em_zeros(c, EM_F32, 3, (int64_t[]){2, 76, 16});
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_SHAPE, "negative_prompt_embeds f32[2,76,16]", "[n, L, 16]");
        rp.negative_prompt_embeds = NULL;
        rp.prompt_embeds = em_zeros(c, EM_F32, 3, (int64_t[]){1, 77, 8});
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_SHAPE, "prompt_embeds f32[1,77,8]", "cross_attention_dim");
        rp.prompt_embeds = NULL;
        rp.negative_prompt_embeds = em_zeros(c, EM_F32, 3, (int64_t[]){1, 77, 16});
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "negative or pooled prompt embeddings need prompt_embeds");
        em_scope_pop(c);
    }
    em_pipeline_free(p);
    p = em_pipeline_load(c, em_test_fixture_path("diffusion", "ddim_three"), NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    if (p) {
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.steps = 1;
        rp.prompt_embeds = em_zeros(c, EM_F32, 3, (int64_t[]){1, 77, 32});
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "prompt embeddings are given to StableDiffusionPipeline",
                  "DDIMPipeline");
        em_scope_pop(c);
    }
    em_pipeline_free(p);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_prompt_embeds_match_diffusers), T(test_prompt_embeds_compiled),
             T(test_prompt_embeds_refusals), T(test_sdxl_prompt_embeds_match_diffusers),
             T(test_sdxl_prompt_embeds_compiled))

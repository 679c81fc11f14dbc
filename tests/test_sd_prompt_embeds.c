/* StableDiffusionPipeline and StableDiffusionXLPipeline (its refiner too) given prompt_embeds
 * (scripts/gen_sd_prompt_embeds_fixtures.py and gen_sdxl_prompt_embeds_fixtures.py, on
 * tests/fixtures/diffusion/sd_tiny): negative embeddings given, or the negative prompt encoded at
 * the embeddings' length, with and without guidance, two images per prompt; diffusers' images
 * within 1e-3, eager and compiled; and the refusals. */
#include <stdio.h>
#include <string.h>

#include "ember/ember.h"
#include "sd_pipeline_test.h"

/* scripts/gen_sd_prompt_embeds_fixtures.py's RUNS (bundle sd_prompt_embeds_ref, on sd_tiny)
 * and gen_sdxl_prompt_embeds_fixtures.py's (sdxl_prompt_embeds_ref: SDXL, the pooled embeddings
 * beside, and the refiner's image to image) */
static const struct {
    const char *name, *ref, *folder, *negative;
    bool neg_embeds;
    double guidance;
    int64_t steps;
    uint64_t seed;
    int64_t per;
    double strength; /* image to image; 0: text to image */
} RUNS[] = {
    {"embeds", "sd_prompt_embeds_ref", "sd_tiny", NULL, false, 7.5, 3, 81, 1, 0},
    {"embeds_neg", "sd_prompt_embeds_ref", "sd_tiny", NULL, true, 5.0, 3, 83, 2, 0},
    {"embeds_short", "sd_prompt_embeds_ref", "sd_tiny", "blurry, dark", false, 4.0, 3, 85, 1, 0},
    {"embeds_nocfg", "sd_prompt_embeds_ref", "sd_tiny", NULL, false, 1.0, 3, 87, 1, 0},
    {"xl_zero", "sdxl_prompt_embeds_ref", "sdxl_tiny", NULL, false, 5.0, 3, 101, 1, 0},
    {"xl_negative", "sdxl_prompt_embeds_ref", "sdxl_tiny", "blurry", false, 4.0, 3, 103, 2, 0},
    {"xl_given", "sdxl_prompt_embeds_ref", "sdxl_tiny", NULL, true, 5.0, 3, 105, 1, 0},
    {"refiner", "sdxl_prompt_embeds_ref", "sdxl_refiner_tiny", NULL, false, 5.0, 6, 107, 1, 0.5},
};

/* rp's embeddings (and, for SDXL, the pooled ones) from the bundle's <run>_embeds,
 * <run>_neg_embeds, <run>_pooled and <run>_neg_pooled */
static void get_embeds(em_ctx *c, em_test_bundle *b, const char *run, bool xl, bool neg,
                       em_pipeline_run_params *rp) {
    char name[64];
    snprintf(name, sizeof name, "%s_embeds", run);
    rp->prompt_embeds = em_test_bundle_get(b, c, name);
    snprintf(name, sizeof name, "%s_neg_embeds", run);
    if (neg) rp->negative_prompt_embeds = em_test_bundle_get(b, c, name);
    snprintf(name, sizeof name, "%s_pooled", run);
    if (xl) rp->pooled_prompt_embeds = em_test_bundle_get(b, c, name);
    snprintf(name, sizeof name, "%s_neg_pooled", run);
    if (xl && neg) rp->negative_pooled_prompt_embeds = em_test_bundle_get(b, c, name);
}

static void run_all(bool compile) {
    em_ctx *c = em_ctx_create();
    for (size_t i = 0; i < sizeof RUNS / sizeof RUNS[0]; i++) {
        char name[64], label[64];
        snprintf(name, sizeof name, "diffusion/%s", RUNS[i].ref);
        em_test_bundle *b = em_test_bundle_load(name);
        CHECK(b != NULL);
        em_pipeline *p =
            b ? em_pipeline_load(c, em_test_fixture_path("diffusion", RUNS[i].folder), NULL) : NULL;
        CHECK_MSG(!b || p != NULL, "%s: %s", RUNS[i].folder, msg(c));
        if (p) {
            bool xl = em_pipeline_get_index(p)->pipeline == EM_PIPELINE_STABLE_DIFFUSION_XL;
            em_scope_push(c);
            em_pipeline_run_params rp = sd_test_params(NULL, RUNS[i].negative, RUNS[i].guidance,
                                                       RUNS[i].steps, RUNS[i].seed, compile);
            get_embeds(c, b, RUNS[i].name, xl, RUNS[i].neg_embeds, &rp);
            if (RUNS[i].strength > 0) {
                snprintf(name, sizeof name, "%s_init", RUNS[i].name);
                rp.image = em_test_bundle_get(b, c, name);
                rp.strength = RUNS[i].strength;
            }
            rp.num_images_per_prompt = RUNS[i].per;
            snprintf(label, sizeof label, "prompt_embeds %s: ", RUNS[i].folder);
            sd_test_image(c, p, b, &rp, label, RUNS[i].name, "cpu");
            em_scope_pop(c);
        }
        em_pipeline_free(p);
        em_test_bundle_free(b);
    }
    em_ctx_free(c);
}

static void test_prompt_embeds_match_diffusers(void) { run_all(false); }
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
    /* SDXL: the pooled embeddings are required, and shaped */
    em_test_bundle *b = em_test_bundle_load("diffusion/sdxl_prompt_embeds_ref");
    CHECK(b != NULL);
    p = b ? em_pipeline_load(c, em_test_fixture_path("diffusion", "sdxl_tiny"), NULL) : NULL;
    CHECK_MSG(!b || p != NULL, "%s", msg(c));
    if (p) {
        em_scope_push(c);
        em_pipeline_run_params rp = sd_test_params(NULL, NULL, 5.0, 3, 101, false);
        get_embeds(c, b, "xl_zero", false, false, &rp);
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "need pooled_prompt_embeds");
        rp.pooled_prompt_embeds = em_zeros(c, EM_F32, 2, (int64_t[]){1, 7});
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_SHAPE, "pooled_prompt_embeds f32[1,7]", "projection_dim");
        get_embeds(c, b, "xl_zero", true, false, &rp);
        rp.prompt_2 = "x";
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "prompt_embeds with a prompt");
        em_scope_pop(c);
    }
    em_pipeline_free(p);
    em_test_bundle_free(b);
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
             T(test_prompt_embeds_refusals))

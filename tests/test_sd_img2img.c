/* StableDiffusionImg2ImgPipeline against diffusers 0.42.1 (tests/fixtures/diffusion/
 * sd_img2img_ref, made by scripts/gen_sd_img2img_fixtures.py from the sd_tiny folder): an init
 * image encoded by the VAE (its posterior sample drawn from the seed), noised to the first kept
 * step by each scheduler's add_noise, denoised from there — with PNDM, DDIM, Euler, Euler
 * ancestral (per-step noise), DPM-Solver++ and DDPM at strength 1 — eager, compiled and on XLA's
 * CPU plugin; and the errors: an image for an unconditional pipeline, an image with latents,
 * strengths out of range or leaving no step, a wrong image shape or dtype, FlowMatch (which has
 * no add_noise), and the scheduler calls on their own. */
#include <stdio.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

static const char *msg(em_ctx *c) { return em_ctx_error(c) ? em_ctx_error(c)->message : ""; }

/* scripts/gen_sd_img2img_fixtures.py's RUNS; kind -1: the folder's PNDM */
static const struct {
    const char *name;
    int kind;
    const char *prompt, *negative;
    double guidance;
    int64_t steps;
    double strength;
    uint64_t seed;
} RUNS[] = {
    {"pndm", -1, "a photo of a cat", NULL, 7.5, 5, 0.6, 3},
    {"ddim", EM_SCHED_DDIM, "a red cube", "blurry", 4.0, 4, 0.75, 7},
    {"euler", EM_SCHED_EULER, "an astronaut", NULL, 1.0, 6, 0.5, 13},
    {"euler_a", EM_SCHED_EULER_ANCESTRAL, "a dog", "", 5.0, 4, 0.7, 17},
    {"dpm", EM_SCHED_DPM_MULTISTEP, "a tree by a lake", NULL, 7.5, 5, 0.8, 19},
    {"full", EM_SCHED_DDPM, "a house", NULL, 3.0, 3, 1.0, 23},
    {"png", EM_SCHED_EULER, "a boat", NULL, 7.5, 4, 0.75, 29}, /* the init image a PIL image */
};
#define N_RUNS (sizeof RUNS / sizeof RUNS[0])

static void run_all(const char *device, bool compile) {
    em_test_bundle *b = em_test_bundle_load("diffusion/sd_img2img_ref");
    CHECK(b != NULL);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    if (strcmp(device, "cpu") && !em_test_xla_or_skip(c)) {
        em_ctx_free(c);
        em_test_bundle_free(b);
        return;
    }
    for (size_t i = 0; i < N_RUNS; i++) {
        /* a fresh pipeline per run: the folder's scheduler, or one from its config */
        em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", "sd_tiny"), NULL);
        CHECK_MSG(p != NULL, "sd_tiny: %s", msg(c));
        if (!p) break;
        if (strcmp(device, "cpu")) CHECK_MSG(em_pipeline_to(c, p, device) == EM_OK, "%s", msg(c));
        if (RUNS[i].kind >= 0)
            CHECK_MSG(em_pipeline_set_scheduler(c, p, (em_scheduler_kind)RUNS[i].kind) == EM_OK,
                      "%s", msg(c));
        char name[64], what[128];
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.prompt = RUNS[i].prompt;
        rp.negative_prompt = RUNS[i].negative;
        rp.guidance_scale = RUNS[i].guidance;
        rp.steps = RUNS[i].steps;
        rp.strength = RUNS[i].strength;
        rp.seed = RUNS[i].seed;
        rp.compile = compile;
        snprintf(name, sizeof name, "%s_init", RUNS[i].name);
        rp.image = em_test_bundle_get(b, c, name);
        snprintf(name, sizeof name, "%s_image", RUNS[i].name);
        snprintf(what, sizeof what, "img2img %s%s on %s", RUNS[i].name, compile ? " compiled" : "",
                 device);
        em_tensor *img = em_pipeline_run(c, p, &rp);
        CHECK_MSG(img != NULL, "%s: %s", what, msg(c));
        em_test_allclose(c, img, em_test_bundle_get(b, c, name), 1e-3, 0, what);
        em_ctx_clear_error(c);
        em_scope_pop(c);
        em_pipeline_free(p);
    }
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void test_img2img_matches_diffusers(void) { run_all("cpu", false); }
static void test_img2img_compiled(void) { run_all("cpu", true); }
static void test_img2img_on_xla(void) { run_all("xla:0", false); }

static void test_img2img_errors(void) {
    em_ctx *c = em_ctx_create();
    em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", "sd_tiny"), NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    em_scope_push(c);
    em_tensor *good = em_zeros(c, EM_F32, 4, (int64_t[]){1, 16, 16, 3});
    em_pipeline_run_params rp = em_pipeline_default_params();
    rp.prompt = "a cat";
    rp.steps = 4;
    rp.image = good;
    if (p) {
        rp.strength = 0.2; /* int(4 * 0.2) = 0 */
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "strength 0.2 of 4 steps leaves no step");
        rp.strength = 1.5;
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "strength 1.5", "(0, 1]");
        rp.strength = 0.5;
        rp.latents = em_zeros(c, EM_F32, 4, (int64_t[]){1, 4, 8, 8});
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "an init image and initial latents");
        rp.latents = NULL;
        rp.image = em_zeros(c, EM_F32, 4, (int64_t[]){1, 15, 16, 3});
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_SHAPE, "15 x 16", "multiples of 2");
        rp.image = em_zeros(c, EM_F32, 4, (int64_t[]){1, 3, 16, 16});
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_SHAPE, "[1, H, W, 3]");
        rp.image = em_zeros(c, EM_BF16, 4, (int64_t[]){1, 16, 16, 3});
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_DTYPE, "must be f32");
        rp.image = good;
        rp.height = 32; /* Ember does not resize */
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_SHAPE, "16 x 16", "does not resize");
        rp.height = 0;
        CHECK(em_pipeline_set_scheduler(c, p, EM_SCHED_FLOW_MATCH_EULER) == EM_OK);
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_UNSUPPORTED, "FlowMatchEulerDiscreteScheduler", "add_noise");
        rp.image = NULL;
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "strength 0.5 without an init image");
    }
    em_pipeline_free(p);
    /* an image for an unconditional pipeline */
    p = em_pipeline_load(c, em_test_fixture_path("diffusion", "ddim_three"), NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    rp = em_pipeline_default_params();
    rp.image = good;
    CHECK(p && em_pipeline_run(c, p, &rp) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "an init image given to DDIMPipeline");
    /* the scheduler calls on their own: DDIM has no begin index; add_noise's shapes */
    em_scheduler *s = p ? em_pipeline_scheduler(p) : NULL;
    if (s) {
        CHECK(em_scheduler_set_begin_index(c, s, 0) != EM_OK); /* before set_timesteps */
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "set_timesteps first");
        CHECK(em_scheduler_set_timesteps(c, s, 4) == EM_OK);
        CHECK(em_scheduler_set_begin_index(c, s, 1) != EM_OK);
        CHECK_ERR(c, EM_ERR_UNSUPPORTED, "DDIMScheduler has no begin index");
        em_tensor *x = em_zeros(c, EM_F32, 4, (int64_t[]){1, 3, 4, 4});
        em_tensor *n = em_zeros(c, EM_F32, 4, (int64_t[]){1, 3, 1, 1});
        CHECK(em_scheduler_add_noise(c, s, x, n, 1.0) == NULL);
        CHECK_ERR(c, EM_ERR_SHAPE, "one shape on one device");
        CHECK(em_scheduler_add_noise(c, s, x, x, 1000.0) == NULL);
        CHECK_ERR(c, EM_ERR_INDEX, "timestep 1000", "[0, 1000)");
    }
    em_pipeline_free(p);
    em_scope_pop(c);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_img2img_matches_diffusers), T(test_img2img_compiled), T(test_img2img_on_xla),
             T(test_img2img_errors))

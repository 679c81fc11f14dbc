/* Stable Diffusion batches against diffusers 0.42.1 (tests/fixtures/diffusion/sd_batch_ref, made
 * by scripts/gen_sd_batch_fixtures.py on the sd_tiny folder): num_images_per_prompt 2 and 3 with
 * and without guidance, DDPM's per-step noise over the batch, a list of prompts with their
 * negative prompts, image to image with Euler ancestral — one seeded run each, within 1e-3 of
 * diffusers' output_type="np" images, eager, compiled and on XLA's CPU plugin, each again with
 * the VAE sliced (pipe.vae.enable_slicing()); the VAE's slicing on its own; and the batch
 * parameters' errors. */
#include <stdio.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

static const char *msg(em_ctx *c) { return em_ctx_error(c) ? em_ctx_error(c)->message : ""; }

static const char *const CAT_DOG[] = {"a cat", "a dog in the snow"};
static const char *const CAT_DOG_NEG[] = {"blurry", ""};

/* scripts/gen_sd_batch_fixtures.py's RUNS */
static const struct {
    const char *name;
    int sched; /* -1: the folder's PNDM */
    const char *prompt, *negative;
    const char *const *prompts, *const *negatives;
    double guidance;
    int64_t steps;
    uint64_t seed;
    int64_t per_prompt;
    double strength; /* image to image when > 0 */
} RUNS[] = {
    {"cfg2", -1, "a photo of a cat", NULL, NULL, NULL, 7.5, 3, 3, 2, 0},
    {"ddpm3", EM_SCHED_DDPM, "a red cube", "blurry", NULL, NULL, 3.0, 3, 9, 3, 0},
    {"nocfg2", -1, "an astronaut", NULL, NULL, NULL, 1.0, 2, 4, 2, 0},
    {"prompts", -1, NULL, NULL, CAT_DOG, CAT_DOG_NEG, 4.0, 2, 6, 2, 0},
    {"img2img2", EM_SCHED_EULER_ANCESTRAL, "a dog", NULL, NULL, NULL, 5.0, 4, 17, 2, 0.75},
};
#define N_RUNS (sizeof RUNS / sizeof RUNS[0])

static em_pipeline *load_sd(em_ctx *c, const char *device) {
    em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", "sd_tiny"), NULL);
    CHECK_MSG(p != NULL, "sd_tiny: %s", msg(c));
    if (p && strcmp(device, "cpu") && em_pipeline_to(c, p, device) != EM_OK) {
        CHECK_MSG(false, "to %s: %s", device, msg(c));
        em_pipeline_free(p);
        return NULL;
    }
    return p;
}

/* Run i (sliced or not, from its committed latents or its seed) against diffusers' image; the
 * image is left in the current scope (NULL on failure). */
static em_tensor *check_run(em_ctx *c, em_test_bundle *b, size_t i, const char *device,
                            bool compile, bool sliced, bool latents) {
    char name[64], what[160];
    em_pipeline *p = load_sd(c, device);
    if (!p) return NULL;
    if (RUNS[i].sched >= 0)
        CHECK_MSG(em_pipeline_set_scheduler(c, p, (em_scheduler_kind)RUNS[i].sched) == EM_OK,
                  "%s", msg(c));
    em_pipeline_run_params rp = em_pipeline_default_params();
    rp.prompt = RUNS[i].prompt;
    rp.negative_prompt = RUNS[i].negative;
    rp.prompts = RUNS[i].prompts;
    rp.negative_prompts = RUNS[i].negatives;
    rp.num_prompts = RUNS[i].prompts ? 2 : 0;
    rp.guidance_scale = RUNS[i].guidance;
    rp.steps = RUNS[i].steps;
    rp.seed = RUNS[i].seed;
    rp.num_images_per_prompt = RUNS[i].per_prompt;
    rp.compile = compile;
    rp.vae_slicing = sliced;
    if (RUNS[i].strength > 0) {
        snprintf(name, sizeof name, "%s_init", RUNS[i].name);
        rp.image = em_test_bundle_get(b, c, name);
        rp.strength = RUNS[i].strength;
    } else {
        rp.height = rp.width = 8;
    }
    if (latents) {
        snprintf(name, sizeof name, "%s_latents", RUNS[i].name);
        rp.latents = em_test_bundle_get(b, c, name);
    }
    snprintf(what, sizeof what, "%s%s%s%s on %s", RUNS[i].name, compile ? " compiled" : "",
             sliced ? " sliced" : "", latents ? " from latents" : "", device);
    em_tensor *img = em_pipeline_run(c, p, &rp);
    CHECK_MSG(img != NULL, "%s: %s", what, msg(c));
    snprintf(name, sizeof name, "%s_image", RUNS[i].name);
    if (img) {
        em_tensor *want = em_test_bundle_get(b, c, name);
        CHECK_MSG(em_tensor_dim(img, 0) == em_tensor_dim(want, 0), "%s: %lld images", what,
                  (long long)em_tensor_dim(img, 0));
        em_test_allclose(c, img, want, 1e-3, 0, what);
    }
    em_ctx_clear_error(c);
    em_pipeline_free(p);
    return img;
}

static void run_all(const char *device, bool compile) {
    em_test_bundle *b = em_test_bundle_load("diffusion/sd_batch_ref");
    CHECK(b != NULL);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    if (strcmp(device, "cpu") && !em_test_xla_or_skip(c)) {
        em_ctx_free(c);
        em_test_bundle_free(b);
        return;
    }
    for (size_t i = 0; i < N_RUNS; i++) {
        em_scope_push(c);
        em_tensor *whole = check_run(c, b, i, device, compile, false, false);
        /* on XLA one sliced run (its own decode program) keeps the test short */
        bool slice = !strcmp(device, "cpu") || i == 0;
        em_tensor *sliced = slice ? check_run(c, b, i, device, compile, true, false) : NULL;
        /* slicing changes how the batch is decoded, not the image */
        if (whole && sliced)
            em_test_allclose(c, sliced, whole, 1e-5, 0, "sliced against the batched decode");
        em_scope_pop(c);
    }
    /* latents= of the batch's shape: the same run */
    em_scope_push(c);
    check_run(c, b, 0, device, compile, false, true);
    em_scope_pop(c);
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void test_sd_batch_matches_diffusers(void) { run_all("cpu", false); }
static void test_sd_batch_compiled(void) { run_all("cpu", true); }
static void test_sd_batch_on_xla(void) { run_all("xla:0", false); }

/* em_vae_enable_slicing on the VAE alone: a batch of 3 decoded and encoded (also in tiles) one
 * image at a time, and a batch of 69, equal the batched results; off again, the batch runs
 * whole */
static void test_vae_slicing(void) {
    em_ctx *c = em_ctx_create();
    em_vae *v = em_vae_load(c, em_test_fixture_path("diffusion", "sd_tiny/vae"), NULL, EM_F32);
    CHECK_MSG(v != NULL, "%s", msg(c));
    if (v) {
        em_scope_push(c);
        em_torch_generator *g = em_torch_generator_create(5);
        em_tensor *z = em_torch_randn(c, g, 4, (int64_t[]){3, 4, 12, 12}, em_device_cpu());
        em_tensor *x = em_torch_randn(c, g, 4, (int64_t[]){3, 3, 24, 24}, em_device_cpu());
        em_torch_generator_free(g);
        em_vae_tiling t = em_vae_default_tiling(v); /* tiles of 8 latents: 12 x 12 is tiled */
        em_tensor *dec = em_vae_decode(c, v, z), *dec_t = em_vae_decode_tiled(c, v, z, &t);
        em_vae_latent_dist d, d_t, ds, ds_t;
        CHECK(em_vae_encode(c, v, x, &d) == EM_OK && em_vae_encode_tiled(c, v, x, &t, &d_t) == EM_OK);
        em_vae_enable_slicing(v, true);
        em_tensor *sdec = em_vae_decode(c, v, z), *sdec_t = em_vae_decode_tiled(c, v, z, &t);
        CHECK(em_vae_encode(c, v, x, &ds) == EM_OK &&
              em_vae_encode_tiled(c, v, x, &t, &ds_t) == EM_OK);
        CHECK_MSG(sdec && em_tensor_dim(sdec, 0) == 3, "%s", msg(c));
        em_test_allclose(c, sdec, dec, 1e-5, 0, "sliced decode");
        em_test_allclose(c, sdec_t, dec_t, 1e-5, 0, "sliced tiled decode");
        em_test_allclose(c, ds.mean, d.mean, 1e-5, 0, "sliced encode: mean");
        em_test_allclose(c, ds.logvar, d.logvar, 1e-5, 0, "sliced encode: logvar");
        em_test_allclose(c, ds_t.mean, d_t.mean, 1e-5, 0, "sliced tiled encode: mean");
        /* more images than one em_cat takes (64): concatenated in groups */
        em_tensor *many = em_repeat_interleave(c, em_narrow(c, z, 2, 0, 2), 23, 0); /* 69 */
        em_tensor *many_sliced = em_vae_decode(c, v, many);
        CHECK_MSG(many_sliced && em_tensor_dim(many_sliced, 0) == 69, "%s", msg(c));
        em_vae_enable_slicing(v, false);
        em_test_allclose(c, many_sliced, em_vae_decode(c, v, many), 1e-5, 0, "69 sliced");
        em_test_allclose(c, em_vae_decode(c, v, z), dec, 0, 0, "slicing off again");
        em_vae_enable_slicing(NULL, true); /* a no-op */
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    em_vae_free(v);
    em_ctx_free(c);
}

static void test_sd_batch_errors(void) {
    em_ctx *c = em_ctx_create();
    em_pipeline *p = load_sd(c, "cpu");
    em_pipeline_run_params rp = em_pipeline_default_params();
    CHECK(rp.num_images_per_prompt == 1 && !rp.prompts && !rp.vae_slicing);
    static const char *const ONE_NULL[] = {"a cat", NULL};
    if (p) {
        rp.prompt = "a cat";
        rp.steps = 1;
        rp.num_images_per_prompt = -1;
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "num_images_per_prompt must be 1 or more", "-1");
        rp.num_images_per_prompt = EM_PIPELINE_MAX_BATCH + 1;
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "1025 image(s) per prompt", "EM_PIPELINE_MAX_BATCH");
        rp.num_images_per_prompt = 2;
        em_scope_push(c);
        rp.latents = em_zeros(c, EM_F32, 4, (int64_t[]){1, 4, 8, 8}); /* the scope's */
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_SHAPE, "[1, 4, 8, 8]", "[2, 4, 8, 8]");
        em_scope_pop(c);
        rp.latents = NULL;
        rp.prompts = CAT_DOG;
        rp.num_prompts = 2;
        CHECK(em_pipeline_run(c, p, &rp) == NULL); /* prompt and prompts */
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "prompts (a list) with prompt");
        rp.prompt = NULL;
        rp.negative_prompt = "blurry";
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "negative_prompt (a string)");
        rp.negative_prompt = NULL;
        rp.num_prompts = 0;
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "num_prompts must be 1 or more");
        rp.prompts = ONE_NULL;
        rp.num_prompts = 2;
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "prompt 1 of 2 is NULL");
        rp.prompts = CAT_DOG;
        rp.negative_prompts = ONE_NULL;
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "negative prompt 1 of 2 is NULL");
        rp.negative_prompts = NULL;
        rp.num_images_per_prompt = EM_PIPELINE_MAX_BATCH / 2 + 1; /* 2 prompts: over the limit */
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "2 prompt(s) x 513 image(s)");
        rp.prompts = NULL;
        rp.num_prompts = 0;
        rp.negative_prompts = CAT_DOG_NEG;
        rp.prompt = "a cat";
        rp.num_images_per_prompt = 1;
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "negative_prompts need prompts");
    }
    em_pipeline_free(p);
    /* a list of prompts, or slicing, asked of an unconditional pipeline (its batch_size is
     * num_images_per_prompt: tests/test_dit_batch.c) */
    p = em_pipeline_load(c, em_test_fixture_path("diffusion", "ddim_three"), NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    rp = em_pipeline_default_params();
    rp.prompts = CAT_DOG;
    rp.num_prompts = 2;
    CHECK(p && em_pipeline_run(c, p, &rp) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "is StableDiffusionPipeline's", "DDIMPipeline");
    rp.prompts = NULL;
    rp.num_prompts = 0;
    rp.vae_slicing = true;
    CHECK(p && em_pipeline_run(c, p, &rp) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "vae_slicing", "has no VAE");
    em_pipeline_free(p);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_sd_batch_matches_diffusers), T(test_sd_batch_compiled),
             T(test_sd_batch_on_xla), T(test_vae_slicing), T(test_sd_batch_errors))

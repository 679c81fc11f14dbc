/* Batches of the class-conditional and unconditional pipelines against diffusers 0.42.1
 * (tests/fixtures/diffusion/dit_batch_ref, made by scripts/gen_dit_batch_fixtures.py on the
 * committed dit_pipe, ddpm_scale_shift and ddim_three folders): DiTPipeline with a list of
 * class labels (guided: 2B rows with B null classes; unguided; DDPM's step noise over the
 * doubled batch), eager and compiled, and DDPMPipeline / DDIMPipeline with batch_size (rp's
 * num_images_per_prompt; DDPM's and DDIM eta 0.5's step noise over the batch), each one seeded
 * run within 1e-3 of diffusers' output_type="np" images (a guided DiT batch and the DDIM batch
 * also on XLA's CPU plugin when installed); and the errors of the batch fields. */
#include <stdio.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

static const char *msg(em_ctx *c) { return em_ctx_error(c) ? em_ctx_error(c)->message : ""; }

static const int64_t CFG3[] = {7, 3, 999}, NOCFG2[] = {500, 500}, DDPM2[] = {11, 0};

/* scripts/gen_dit_batch_fixtures.py's DIT_RUNS and UNCOND_RUNS */
static const struct {
    const char *name, *folder;
    const int64_t *labels; /* DiT: the class labels; NULL: an unconditional batch */
    int64_t n;             /* the batch: labels or batch_size */
    double guidance, eta;
    int64_t steps;
    uint64_t seed;
    int sched; /* -1: the folder's */
} RUNS[] = {
    {"dit_cfg3", "dit_pipe", CFG3, 3, 4.0, 0, 3, 5, -1},
    {"dit_nocfg2", "dit_pipe", NOCFG2, 2, 1.0, 0, 3, 6, -1},
    {"dit_ddpm2", "dit_pipe", DDPM2, 2, 2.5, 0, 3, 9, EM_SCHED_DDPM},
    {"ddpm_b3", "ddpm_scale_shift", NULL, 3, 0, 0, 4, 21, -1},
    {"ddim_b2", "ddim_three", NULL, 2, 0, 0.5, 4, 22, -1},
};
#define N_RUNS (sizeof RUNS / sizeof RUNS[0])

static void check_run(em_ctx *c, em_test_bundle *b, size_t i, bool compile, const char *device) {
    char name[64], what[128];
    em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", RUNS[i].folder), NULL);
    CHECK_MSG(p != NULL, "%s: %s", RUNS[i].folder, msg(c));
    if (p && strcmp(device, "cpu"))
        CHECK_MSG(em_pipeline_to(c, p, device) == EM_OK, "to %s: %s", device, msg(c));
    if (!p || em_ctx_status(c)) {
        em_ctx_clear_error(c);
        em_pipeline_free(p);
        return;
    }
    if (RUNS[i].sched >= 0)
        CHECK_MSG(em_pipeline_set_scheduler(c, p, (em_scheduler_kind)RUNS[i].sched) == EM_OK,
                  "%s", msg(c));
    em_pipeline_run_params rp = em_pipeline_default_params();
    if (RUNS[i].labels) {
        rp.class_labels = RUNS[i].labels;
        rp.num_class_labels = RUNS[i].n;
        rp.guidance_scale = RUNS[i].guidance;
    } else {
        rp.num_images_per_prompt = RUNS[i].n; /* diffusers' batch_size */
    }
    rp.eta = RUNS[i].eta;
    rp.steps = RUNS[i].steps;
    rp.seed = RUNS[i].seed;
    rp.compile = compile;
    snprintf(what, sizeof what, "%s%s on %s", RUNS[i].name, compile ? " compiled" : "", device);
    snprintf(name, sizeof name, "%s_image", RUNS[i].name);
    em_scope_push(c);
    em_tensor *img = em_pipeline_run(c, p, &rp);
    CHECK_MSG(img != NULL, "%s: %s", what, msg(c));
    if (img) {
        CHECK_MSG(em_tensor_dim(img, 0) == RUNS[i].n, "%s: %lld images", what,
                  (long long)em_tensor_dim(img, 0));
        em_test_allclose(c, img, em_test_bundle_get(b, c, name), 1e-3, 0, what);
    }
    em_ctx_clear_error(c);
    em_scope_pop(c);
    em_pipeline_free(p);
}

static void test_batches_match_diffusers(void) {
    em_test_bundle *b = em_test_bundle_load("diffusion/dit_batch_ref");
    CHECK(b != NULL);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    for (size_t i = 0; i < N_RUNS; i++) check_run(c, b, i, false, "cpu");
    for (size_t i = 0; i < N_RUNS; i++) /* the DiT runs compiled too */
        if (RUNS[i].labels) check_run(c, b, i, true, "cpu");
    em_ctx_free(c);
    em_test_bundle_free(b);
}

/* pipe.to("xla:0") (XLA's CPU plugin): the guided DiT batch and the DDIM batch (eta 0.5) */
static void test_batches_on_xla(void) {
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_xla_or_skip(c) ? em_test_bundle_load("diffusion/dit_batch_ref")
                                               : NULL;
    if (b) {
        check_run(c, b, 0, false, "xla:0");
        check_run(c, b, N_RUNS - 1, false, "xla:0");
    }
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void expect_error(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp,
                         const char *a, const char *b) {
    CHECK(p && em_pipeline_run(c, p, rp) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, a, b);
}

static void test_batch_errors(void) {
    em_ctx *c = em_ctx_create();
    em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", "dit_pipe"), NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    em_pipeline_run_params rp = em_pipeline_default_params();
    CHECK(!rp.class_labels && rp.num_class_labels == 0);
    const int64_t bad[] = {1, 2, 1000}, neg[] = {-3};
    rp.steps = 1;
    rp.class_labels = CFG3;
    rp.num_class_labels = 0;
    expect_error(c, p, &rp, "num_class_labels 0", "1 to 1024");
    rp.num_class_labels = EM_PIPELINE_MAX_BATCH + 1;
    expect_error(c, p, &rp, "num_class_labels 1025", "EM_PIPELINE_MAX_BATCH");
    rp.class_labels = bad;
    rp.num_class_labels = 3;
    expect_error(c, p, &rp, "class label 1000 (index 2 of 3) is out of range", "0 to 999");
    rp.class_labels = neg;
    rp.num_class_labels = 1;
    expect_error(c, p, &rp, "class label -3 (index 0 of 1)", "out of range");
    rp.class_labels = CFG3;
    rp.num_class_labels = 3;
    rp.class_label = 4;
    expect_error(c, p, &rp, "class_label 4 and a list of class_labels", "one of them");
    rp.class_label = -1;
    rp.num_images_per_prompt = 2;
    expect_error(c, p, &rp, "DiTPipeline takes no num_images_per_prompt", "class_labels");
    rp.num_images_per_prompt = 1;
    em_scope_push(c); /* latents must be the batch's */
    rp.latents = em_zeros(c, EM_F32, 4, (int64_t[]){1, 4, 8, 8});
    CHECK(p && em_pipeline_run(c, p, &rp) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "[1, 4, 8, 8]", "the latent shape is [3, 4, 8, 8]");
    em_scope_pop(c);
    em_pipeline_free(p);
    /* an unconditional pipeline takes batch_size but no labels */
    p = em_pipeline_load(c, em_test_fixture_path("diffusion", "ddim_three"), NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    rp = em_pipeline_default_params();
    rp.steps = 1;
    rp.class_labels = CFG3;
    rp.num_class_labels = 3;
    expect_error(c, p, &rp, "DDIMPipeline takes no class labels", "DiTPipeline");
    rp.class_labels = NULL;
    rp.num_images_per_prompt = EM_PIPELINE_MAX_BATCH + 1;
    expect_error(c, p, &rp, "1025 image(s)", "EM_PIPELINE_MAX_BATCH");
    rp.num_images_per_prompt = 2;
    em_scope_push(c);
    rp.latents = em_zeros(c, EM_F32, 4, (int64_t[]){1, 3, 16, 16});
    CHECK(p && em_pipeline_run(c, p, &rp) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "[1, 3, 16, 16]", "[2, 3, 16, 16]");
    em_scope_pop(c);
    em_pipeline_free(p);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_batches_match_diffusers), T(test_batches_on_xla), T(test_batch_errors))

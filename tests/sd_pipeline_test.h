/* Shared by the pipeline tests (test_sd_pipeline.c, test_sdxl_pipeline.c, test_sd3.c,
 * test_flux.c): the setup of an end-to-end run against diffusers (reference bundle, context, the
 * XLA skip, the fixture pipeline on a device), the run parameters of a fixture script's RUNS row,
 * one image compared with diffusers', scratch folders linking a fixture pipeline's components,
 * and the expected errors of runs and loads. */
#ifndef EMBER_TESTS_SD_PIPELINE_TEST_H
#define EMBER_TESTS_SD_PIPELINE_TEST_H

#include <stdio.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

static inline const char *msg(em_ctx *c) {
    return em_ctx_error(c) ? em_ctx_error(c)->message : "";
}

/* A context and the reference bundle diffusion/<ref> for runs on `device` ("cpu" or "xla:0").
 * false: the bundle is missing (a failed check) or XLA's plugin is not there (the test is
 * skipped, loudly); nothing is left to free then. */
static inline bool sd_test_open(const char *ref, const char *device, em_ctx **c,
                                em_test_bundle **b) {
    char name[64];
    snprintf(name, sizeof name, "diffusion/%s", ref);
    *b = em_test_bundle_load(name);
    *c = NULL;
    CHECK(*b != NULL);
    if (!*b) return false;
    *c = em_ctx_create();
    if (strcmp(device, "cpu") && !em_test_xla_or_skip(*c)) {
        em_ctx_free(*c);
        em_test_bundle_free(*b);
        return false;
    }
    return true;
}

/* The pipeline folder `dir` loaded and moved to `device`; NULL (a failed check naming `what`)
 * when it does not load. */
static inline em_pipeline *sd_test_load(em_ctx *c, const char *dir, const char *device,
                                        const char *what) {
    em_pipeline *p = dir ? em_pipeline_load(c, dir, NULL) : NULL;
    CHECK_MSG(p != NULL, "%s: %s", what, msg(c));
    if (p && strcmp(device, "cpu"))
        CHECK_MSG(em_pipeline_to(c, p, device) == EM_OK, "%s", msg(c));
    return p;
}

/* The default run parameters with a fixture script's prompt, negative prompt (NULL: none),
 * guidance scale, steps and seed. */
static inline em_pipeline_run_params sd_test_params(const char *prompt, const char *negative,
                                                    double guidance, int64_t steps,
                                                    uint64_t seed, bool compile) {
    em_pipeline_run_params rp = em_pipeline_default_params();
    rp.prompt = prompt;
    rp.negative_prompt = negative;
    rp.guidance_scale = guidance;
    rp.steps = steps;
    rp.seed = seed;
    rp.compile = compile;
    return rp;
}

/* Runs rp and compares the image (on the CPU) with the bundle's <run>_image within 1e-3; errors
 * name "<label><run>[ compiled] on <device>". */
static inline void sd_test_image(em_ctx *c, em_pipeline *p, em_test_bundle *b,
                                 const em_pipeline_run_params *rp, const char *label,
                                 const char *run, const char *device) {
    char name[64], what[128];
    snprintf(name, sizeof name, "%s_image", run);
    snprintf(what, sizeof what, "%s%s%s on %s", label, run, rp->compile ? " compiled" : "",
             device);
    em_scope_push(c);
    em_tensor *img = em_pipeline_run(c, p, rp);
    CHECK_MSG(img != NULL, "%s: %s", what, msg(c));
    if (img) CHECK(em_tensor_device(img) == em_device_cpu());
    em_test_allclose(c, img, em_test_bundle_get(b, c, name), 1e-3, 0, what);
    em_ctx_clear_error(c);
    em_scope_pop(c);
}

/* <scratch>/<comp> links to the fixture diffusion/<fixture>/<comp> for each of the n components */
static inline void sd_test_link(const char *fixture, const char *const *comps, int n) {
    char target[64];
    for (int i = 0; i < n; i++) {
        snprintf(target, sizeof target, "%s/%s", fixture, comps[i]);
        em_test_scratch_link(comps[i], "diffusion", target);
    }
}

/* A progress callback that counts the steps it is told of (n_progress). */
static int n_progress;
static inline bool count_progress(void *user, int64_t i, int64_t n, double t, double s) {
    (void)user, (void)i, (void)n, (void)t, (void)s;
    n_progress++;
    return true;
}

/* em_pipeline_run fails with `want` and a message holding `needle`. */
static inline void expect_run_error(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp,
                                    em_status want, const char *needle) {
    em_scope_push(c);
    CHECK(em_pipeline_run(c, p, rp) == NULL);
    CHECK_MSG(em_ctx_status(c) == want && strstr(msg(c), needle), "got %d: %s (want '%s')",
              (int)em_ctx_status(c), msg(c), needle);
    em_ctx_clear_error(c);
    em_scope_pop(c);
}

/* Loading the scratch folder (em_test_scratch_dir) fails with `want` and `needle`. */
static inline void expect_load_error(em_ctx *c, em_status want, const char *needle) {
    em_pipeline *p = em_pipeline_load(c, em_test_scratch_dir(), NULL);
    CHECK(p == NULL);
    CHECK_MSG(em_ctx_status(c) == want && strstr(msg(c), needle), "got %d: %s (want '%s')",
              (int)em_ctx_status(c), msg(c), needle);
    em_ctx_clear_error(c);
    em_pipeline_free(p);
}

#endif

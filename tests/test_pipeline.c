/* DDPMPipeline / DDIMPipeline end to end against diffusers 0.42.1 (tests/fixtures/diffusion,
 * made by scripts/gen_diffusion_fixtures.py): full runs from the committed latents, seeded runs
 * (DDPM's per-step noise, DDIM's eta > 0 noise) and runs with a swapped scheduler within 1e-3 of
 * diffusers' images; and clear errors for a missing component, a broken model_index.json and
 * latents of the wrong shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ember/ember.h"
#include "harness.h"

static const char *msg(em_ctx *c) { return em_ctx_error(c) ? em_ctx_error(c)->message : ""; }

static em_pipeline *load(em_ctx *c, const char *name) {
    em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", name), NULL);
    CHECK_MSG(p != NULL, "%s: %s", name, msg(c));
    return p;
}

/* The pipelines' own images: seed 0, 10 steps (the DDPM ones draw per-step noise), and the
 * DDIM one again from its committed latents (eta 0: a function of them). */
static void test_fixture_images(void) {
    const char *cases[] = {"ddpm_attn", "ddpm_scale_shift", "ddim_three"};
    em_ctx *c = em_ctx_create();
    for (int i = 0; i < 3; i++) {
        char rel[96], what[128];
        snprintf(rel, sizeof rel, "diffusion/%s_ref", cases[i]);
        em_test_bundle *b = em_test_bundle_load(rel);
        em_pipeline *p = load(c, cases[i]);
        if (!b || !p) {
            em_test_bundle_free(b);
            em_pipeline_free(p);
            continue;
        }
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.steps = em_test_bundle_meta_int(b, "inference_steps", 10);
        rp.seed = 0;
        em_tensor *want = em_test_bundle_get(b, c, "image");
        em_tensor *img = em_pipeline_run(c, p, &rp);
        CHECK_MSG(img != NULL, "%s: %s", cases[i], msg(c));
        snprintf(what, sizeof what, "%s, seed 0", cases[i]);
        em_test_allclose(c, img, want, 1e-3, 0, what);
        if (img) CHECK(em_tensor_device(img) == em_device_cpu());
        if (em_pipeline_get_index(p)->pipeline == EM_PIPELINE_DDIM) {
            rp.latents = em_test_bundle_get(b, c, "latents");
            rp.seed = 12345; /* unused: eta 0 draws nothing */
            snprintf(what, sizeof what, "%s, committed latents", cases[i]);
            em_test_allclose(c, em_pipeline_run(c, p, &rp), want, 1e-3, 0, what);
        }
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s: %s", cases[i], msg(c));
        em_ctx_clear_error(c);
        em_scope_pop(c);
        em_pipeline_free(p);
        em_test_bundle_free(b);
    }
    em_ctx_free(c);
}

/* scripts/gen_diffusion_fixtures.py's RUNS */
static const struct {
    const char *name, *folder;
    int64_t steps;
    double eta;
    uint64_t seed;
    const char *swap; /* a scheduler short name, or NULL */
} RUNS[] = {
    {"ddpm_seeded", "ddpm_attn", 12, 0.0, 1234, NULL},
    {"ddpm_seeded_small", "ddpm_scale_shift", 7, 0.0, 99, NULL},
    {"ddim_eta", "ddim_three", 8, 0.5, 5, NULL},
    {"ddim_eta1_seeded", "ddim_three", 5, 1.0, 77, NULL},
    {"ddpm_as_ddim", "ddpm_attn", 10, 0.0, 3, "ddim"},
    {"ddpm_as_euler", "ddpm_attn", 10, 0.0, 3, "euler"},
    {"ddpm_as_euler_a", "ddpm_scale_shift", 6, 0.0, 11, "euler-a"},
};

static void test_seeded_runs(void) {
    em_test_bundle *b = em_test_bundle_load("diffusion/pipeline_runs_ref");
    CHECK(b != NULL);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    for (size_t i = 0; i < sizeof RUNS / sizeof RUNS[0]; i++) {
        em_pipeline *p = load(c, RUNS[i].folder);
        if (!p) continue;
        em_scheduler_kind k;
        if (RUNS[i].swap) {
            CHECK(em_scheduler_kind_parse(RUNS[i].swap, &k));
            CHECK_MSG(em_pipeline_set_scheduler(c, p, k) == EM_OK, "%s", msg(c));
            CHECK(em_scheduler_get_kind(em_pipeline_scheduler(p)) == k);
        }
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.steps = RUNS[i].steps;
        rp.eta = RUNS[i].eta;
        rp.seed = RUNS[i].seed;
        char name[64];
        snprintf(name, sizeof name, "%s_image", RUNS[i].name);
        em_tensor *img = em_pipeline_run(c, p, &rp);
        CHECK_MSG(img != NULL, "%s: %s", RUNS[i].name, msg(c));
        em_test_allclose(c, img, em_test_bundle_get(b, c, name), 1e-3, 0, RUNS[i].name);
        em_ctx_clear_error(c);
        em_scope_pop(c);
        em_pipeline_free(p);
    }
    em_ctx_free(c);
    em_test_bundle_free(b);
}

/* pipe.to("xla:0") (XLA's CPU plugin): the UNet and the scheduler's step run there, the noise
 * is drawn on the host and moved, and the images are diffusers' as on the CPU. */
static void test_pipeline_on_xla(void) {
    em_ctx *c = em_ctx_create();
    if (!em_test_xla_or_skip(c)) {
        em_ctx_free(c);
        return;
    }
    em_test_bundle *b = em_test_bundle_load("diffusion/pipeline_runs_ref");
    CHECK(b != NULL);
    for (size_t i = 0; b && i < 4; i += 2) { /* ddpm_seeded, ddim_eta */
        em_pipeline *p = load(c, RUNS[i].folder);
        if (!p) continue;
        CHECK_MSG(em_pipeline_to(c, p, "xla:0") == EM_OK, "%s", msg(c));
        CHECK(em_pipeline_device(p) == em_device_get(c, "xla:0"));
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.steps = RUNS[i].steps;
        rp.eta = RUNS[i].eta;
        rp.seed = RUNS[i].seed;
        char name[64], what[96];
        snprintf(name, sizeof name, "%s_image", RUNS[i].name);
        snprintf(what, sizeof what, "%s on xla:0", RUNS[i].name);
        em_tensor *img = em_pipeline_run(c, p, &rp);
        CHECK_MSG(img != NULL, "%s: %s", what, msg(c));
        if (img) CHECK(em_tensor_device(img) == em_device_cpu());
        em_test_allclose(c, img, em_test_bundle_get(b, c, name), 1e-3, 0, what);
        em_ctx_clear_error(c);
        em_scope_pop(c);
        em_pipeline_free(p);
    }
    em_test_bundle_free(b);
    em_ctx_free(c);
}

static int progress_calls;
static bool count_steps(void *user, int64_t i, int64_t n, double t, double seconds) {
    (void)t;
    CHECK(i == progress_calls && n == 4 && seconds >= 0);
    progress_calls++;
    return *(int *)user < 0 || progress_calls < *(int *)user;
}

static void test_pipeline_api(void) {
    em_ctx *c = em_ctx_create();
    em_pipeline *p = load(c, "ddim_three");
    if (!p) {
        em_ctx_free(c);
        return;
    }
    int64_t shape[4];
    CHECK(em_pipeline_latent_shape(p, shape));
    CHECK(shape[0] == 1 && shape[1] == 3 && shape[2] == 16 && shape[3] == 16);
    CHECK(em_pipeline_to(c, p, "cpu") == EM_OK);
    CHECK(em_pipeline_device(p) == em_device_cpu());
    CHECK(em_pipeline_to(c, p, "nosuchdevice:3") != EM_OK);
    CHECK(em_ctx_status(c) == EM_ERR_DEVICE);
    em_ctx_clear_error(c);
    CHECK(em_pipeline_unet(p) != NULL); /* still loaded after the failed move */
    em_scope_push(c);
    em_pipeline_run_params rp = em_pipeline_default_params();
    rp.steps = 4;
    int stop_after = -1;
    rp.progress = count_steps;
    rp.user = &stop_after;
    CHECK(em_pipeline_run(c, p, &rp) != NULL);
    CHECK(progress_calls == 4);
    progress_calls = 0;
    stop_after = 2;
    CHECK(em_pipeline_run(c, p, &rp) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "stopped by the progress callback after step 2 of 4");
    /* wrong latents */
    rp.progress = NULL;
    rp.latents = em_zeros(c, EM_F32, EM_SHAPE(1, 3, 8, 8));
    CHECK(em_pipeline_run(c, p, &rp) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "[1, 3, 8, 8]", "[1, 3, 16, 16]", "DDIMPipeline");
    rp.latents = em_zeros(c, EM_F32, EM_SHAPE(3, 16, 16));
    CHECK(em_pipeline_run(c, p, &rp) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "[3, 16, 16]", "[1, 3, 16, 16]");
    rp.latents = em_zeros(c, EM_F16, EM_SHAPE(1, 3, 16, 16));
    CHECK(em_pipeline_run(c, p, &rp) == NULL);
    CHECK_ERR(c, EM_ERR_DTYPE, "f32");
    rp.latents = NULL;
    /* eta is DDIM's */
    CHECK(em_pipeline_set_scheduler(c, p, EM_SCHED_EULER) == EM_OK);
    rp.eta = 0.5;
    CHECK(em_pipeline_run(c, p, &rp) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "eta", "EulerDiscreteScheduler");
    rp.eta = 0;
    rp.steps = 0; /* the class default: 50 */
    CHECK(em_pipeline_run(c, p, &rp) != NULL);
    int64_t n = 0;
    CHECK(em_scheduler_timesteps(em_pipeline_scheduler(p), &n) && n == 50);
    em_scope_pop(c);
    em_pipeline_free(p);
    em_ctx_free(c);
}

static void test_bad_folders(void) {
    const char *scratch = em_test_scratch_make("pipeline");
    if (!scratch) return;
    em_ctx *c = em_ctx_create();
    CHECK(em_pipeline_load(c, scratch, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "model_index.json");
    em_test_scratch_write("model_index.json",
                          "{\"_class_name\": \"DDIMPipeline\", \"unet\": [\"diffusers\"");
    CHECK(em_pipeline_load(c, scratch, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "model_index.json", "not valid JSON");
    em_test_scratch_write("model_index.json", "{\"_class_name\": \"StableDiffusionPipeline\"}");
    CHECK(em_pipeline_load(c, scratch, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "StableDiffusionPipeline needs a 'unet' component");
    em_test_scratch_link("unet", "diffusion", "ddim_three/unet");
    em_test_scratch_write("model_index.json", "{\"_class_name\": \"DDIMPipeline\", "
                                   "\"unet\": [\"diffusers\", \"UNet2DModel\"]}");
    CHECK(em_pipeline_load(c, scratch, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "needs a 'scheduler' component");
    em_test_scratch_write("model_index.json", "{\"_class_name\": \"DDIMPipeline\", "
                                              "\"unet\": [\"diffusers\", \"UNet2DModel\"], "
                                              "\"scheduler\": [\"diffusers\", \"\"]}");
    CHECK(em_pipeline_load(c, scratch, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "component 'scheduler' must be [\"library\", \"ClassName\"]");
    em_test_scratch_write("model_index.json", "{\"_class_name\": \"DDIMPipeline\", "
                                   "\"unet\": [\"diffusers\", \"UNet2DModel\"], "
                                   "\"scheduler\": [\"diffusers\", \"DDIMScheduler\"]}");
    CHECK(em_pipeline_load(c, scratch, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "'scheduler'", "does not exist");
    /* a DDIMPipeline turns its folder's scheduler into DDIM, as diffusers' does */
    CHECK(mkdir(em_test_scratch_path("scheduler"), 0700) == 0);
    em_test_scratch_write("scheduler/scheduler_config.json",
               "{\"_class_name\": \"DDPMScheduler\", \"num_train_timesteps\": 1000}");
    em_pipeline *p = em_pipeline_load(c, scratch, NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    CHECK(p && em_scheduler_get_kind(em_pipeline_scheduler(p)) == EM_SCHED_DDIM);
    em_pipeline_free(p);
    em_test_scratch_write("scheduler/scheduler_config.json",
                          "{\"_class_name\": \"LMSDiscreteScheduler\"}");
    CHECK(em_pipeline_load(c, scratch, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "LMSDiscreteScheduler");
    em_ctx_clear_error(c);
    em_ctx_free(c);
    em_test_scratch_remove();
}

EM_TEST_MAIN(T(test_fixture_images), T(test_seeded_runs), T(test_pipeline_on_xla),
             T(test_pipeline_api),
             T(test_bad_folders))

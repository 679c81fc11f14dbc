/* DiT against diffusers 0.42.1 (tests/fixtures/diffusion/dit_*, made by
 * scripts/gen_dit_fixtures.py): the transformer's output for three timesteps and a timestep per
 * sample within 1e-4 (f32), full DiTPipeline runs (classifier-free guidance, without it, DDPM's
 * per-step noise over the doubled batch, DPM-Solver++) from a seed and from committed latents
 * within 1e-3 of diffusers' output_type="np" image; clear errors for bad labels, folders,
 * configs and inputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

static const char *msg(em_ctx *c) { return em_ctx_error(c) ? em_ctx_error(c)->message : ""; }

static void check_transformer(em_ctx *c, const char *name, const char *device) {
    char rel[128], what[160];
    snprintf(rel, sizeof rel, "diffusion/%s_ref", name);
    em_test_bundle *b = em_test_bundle_load(rel);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", em_test_fixture_path("diffusion", name));
    if (!strcmp(name, "dit_pipe"))
        snprintf(dir, sizeof dir, "%s", em_test_fixture_path("diffusion", "dit_pipe/transformer"));
    em_dit *d = em_dit_load(c, dir, device, EM_F32);
    CHECK_MSG(b && d, "%s: %s", name, msg(c));
    if (b && d) {
        em_scope_push(c);
        em_device *prev = em_ctx_device(c);
        em_ctx_set_device(c, em_dit_device(d)); /* the bundle's inputs onto the model's device */
        em_tensor *x = em_test_bundle_get(b, c, "sample");
        em_tensor *labels = em_test_bundle_get(b, c, "class_labels");
        em_tensor *ts[4] = {em_test_bundle_get(b, c, "t0"), em_test_bundle_get(b, c, "t1"),
                            em_test_bundle_get(b, c, "t2"), em_test_bundle_get(b, c, "tvec")};
        float t = 999.0f;
        em_tensor *t0 = em_from_host(c, EM_F32, 0, NULL, &t);
        em_ctx_set_device(c, prev);
        for (int k = 0; k < 3; k++) {
            char on[16];
            snprintf(on, sizeof on, "out%d", k);
            snprintf(what, sizeof what, "%s on %s, timestep %d", name, device, k);
            em_tensor *got = em_dit_forward(c, d, x, ts[k], labels);
            CHECK_MSG(got != NULL, "%s: %s", what, msg(c));
            em_test_allclose(c, got, em_test_bundle_get(b, c, on), 1e-4, 1e-4, what);
        }
        snprintf(what, sizeof what, "%s on %s, a timestep per sample", name, device);
        em_test_allclose(c, em_dit_forward(c, d, x, ts[3], labels),
                         em_test_bundle_get(b, c, "out_vec"), 1e-4, 1e-4, what);
        /* a 0-d timestep is the same as one value per sample */
        snprintf(what, sizeof what, "%s on %s, 0-d timestep", name, device);
        em_test_allclose(c, em_dit_forward(c, d, x, t0, labels),
                         em_test_bundle_get(b, c, "out0"), 1e-4, 1e-4, what);
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
        em_scope_pop(c);
    }
    em_ctx_clear_error(c);
    em_dit_free(d);
    em_test_bundle_free(b);
}

static void test_dit_matches_diffusers(void) {
    em_ctx *c = em_ctx_create();
    const char *cases[] = {"dit_pipe", "dit_geglu", "dit_legacy"};
    for (int i = 0; i < 3; i++) check_transformer(c, cases[i], "cpu");
    em_dit_config cfg;
    CHECK(em_dit_config_load(c, em_test_fixture_path("diffusion", "dit_geglu"), &cfg) == EM_OK);
    CHECK(cfg.activation == EM_DIT_ACT_GEGLU && !cfg.attention_bias &&
          cfg.norm_elementwise_affine && cfg.out_channels == 3 && cfg.patch_size == 1 &&
          cfg.num_embeds_ada_norm == 10 && cfg.norm_eps == 1e-4);
    em_ctx_free(c);
}

/* the same on XLA's CPU plugin, and a guided pipeline run there (pipe.to("xla:0")) */
static void test_dit_on_xla(void) {
    em_ctx *c = em_ctx_create();
    if (!em_test_xla_or_skip(c)) {
        em_ctx_free(c);
        return;
    }
    const char *cases[] = {"dit_pipe", "dit_geglu", "dit_legacy"};
    for (int i = 0; i < 3; i++) check_transformer(c, cases[i], "xla:0");
    em_test_bundle *b = em_test_bundle_load("diffusion/dit_runs_ref");
    em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", "dit_pipe"), NULL);
    CHECK_MSG(b && p && em_pipeline_to(c, p, "xla:0") == EM_OK, "%s", msg(c));
    if (b && p) {
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.class_label = 7;
        rp.guidance_scale = 4.0;
        rp.steps = 6;
        rp.seed = 0;
        em_tensor *img = em_pipeline_run(c, p, &rp);
        CHECK_MSG(img != NULL, "%s", msg(c));
        em_test_allclose(c, img, em_test_bundle_get(b, c, "cfg_image"), 1e-3, 0,
                         "DiTPipeline run 'cfg' on xla:0");
        rp.compile = true; /* one XLA executable for every step */
        em_test_allclose(c, em_pipeline_run(c, p, &rp), em_test_bundle_get(b, c, "cfg_image"),
                         1e-3, 0, "DiTPipeline run 'cfg' on xla:0, compiled");
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    em_pipeline_free(p);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

/* scripts/gen_dit_fixtures.py's RUNS */
static const struct {
    const char *name;
    int64_t label;
    double guidance;
    int64_t steps;
    uint64_t seed;
    int sched; /* -1: the folder's DDIMScheduler */
} RUNS[] = {
    {"cfg", 7, 4.0, 6, 0, -1},
    {"nocfg", 3, 1.0, 5, 2, -1},
    {"ddpm_cfg", 11, 2.5, 5, 9, EM_SCHED_DDPM},
    {"dpm_cfg", 500, 4.0, 6, 1, EM_SCHED_DPM_MULTISTEP},
};

static int n_progress;
static bool count_progress(void *user, int64_t i, int64_t n, double t, double s) {
    (void)user, (void)i, (void)n, (void)t, (void)s;
    n_progress++;
    return true;
}

static void test_dit_pipeline_runs(void) {
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/dit_runs_ref");
    const char *dir = em_test_fixture_path("diffusion", "dit_pipe");
    for (size_t i = 0; b && i < sizeof RUNS / sizeof RUNS[0]; i++) {
        em_pipeline *p = em_pipeline_load(c, dir, NULL);
        CHECK_MSG(p != NULL, "%s", msg(c));
        if (!p) break;
        CHECK(em_pipeline_get_index(p)->pipeline == EM_PIPELINE_DIT);
        if (RUNS[i].sched >= 0)
            CHECK(em_pipeline_set_scheduler(c, p, (em_scheduler_kind)RUNS[i].sched) == EM_OK);
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.class_label = RUNS[i].label;
        rp.guidance_scale = RUNS[i].guidance;
        rp.steps = RUNS[i].steps;
        rp.seed = RUNS[i].seed;
        rp.progress = count_progress;
        n_progress = 0;
        char name[64], what[96];
        snprintf(name, sizeof name, "%s_image", RUNS[i].name);
        snprintf(what, sizeof what, "DiTPipeline run '%s'", RUNS[i].name);
        em_tensor *img = em_pipeline_run(c, p, &rp);
        CHECK_MSG(img != NULL, "%s: %s", what, msg(c));
        em_test_allclose(c, img, em_test_bundle_get(b, c, name), 1e-3, 0, what);
        CHECK(n_progress == RUNS[i].steps);
        if (i == 0) { /* the same run from the committed initial latents */
            rp.latents = em_test_bundle_get(b, c, "latents");
            em_test_allclose(c, em_pipeline_run(c, p, &rp), em_test_bundle_get(b, c, name), 1e-3,
                             0, "DiTPipeline run 'cfg' from its latents");
            /* the transformer's step compiled once, the same image */
            em_compile_stats cs = {0};
            rp.compile = true;
            rp.compile_stats = &cs;
            em_test_allclose(c, em_pipeline_run(c, p, &rp), em_test_bundle_get(b, c, name), 1e-3,
                             0, "DiTPipeline run 'cfg', compiled");
            CHECK_MSG(cs.compiles == 1 && cs.calls == RUNS[i].steps, "%lld compiles, %lld calls",
                      (long long)cs.compiles, (long long)cs.calls);
            rp.compile = false;
            int64_t shape[4];
            CHECK(em_pipeline_latent_shape(p, shape) && shape[1] == 4 && shape[2] == 8);
        }
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
        em_ctx_clear_error(c);
        em_scope_pop(c);
        em_pipeline_free(p);
    }
    em_test_bundle_free(b);
    em_ctx_free(c);
}

static void expect_run_error(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp,
                             em_status want, const char *needle) {
    em_scope_push(c);
    CHECK(em_pipeline_run(c, p, rp) == NULL);
    CHECK_MSG(em_ctx_status(c) == want && strstr(msg(c), needle), "got %d: %s (want '%s')",
              (int)em_ctx_status(c), msg(c), needle);
    em_ctx_clear_error(c);
    em_scope_pop(c);
}

static void test_dit_bad_runs(void) {
    em_ctx *c = em_ctx_create();
    em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", "dit_pipe"), NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    if (p) {
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.steps = 2;
        expect_run_error(c, p, &rp, EM_ERR_INVALID_ARG, "needs a class label (0 to 999)");
        rp.class_label = 1000;
        expect_run_error(c, p, &rp, EM_ERR_INVALID_ARG, "class label 1000 is out of range");
        rp.class_label = 1;
        em_scope_push(c);
        float z[4 * 4 * 4] = {0};
        rp.latents = em_from_host(c, EM_F32, 4, (int64_t[]){1, 4, 4, 4}, z);
        expect_run_error(c, p, &rp, EM_ERR_SHAPE, "the latent shape is [1, 4, 8, 8]");
        em_scope_pop(c);
    }
    em_pipeline_free(p);
    /* class labels belong to DiTPipeline */
    p = em_pipeline_load(c, em_test_fixture_path("diffusion", "ddim_three"), NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    if (p) {
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.class_label = 3;
        expect_run_error(c, p, &rp, EM_ERR_INVALID_ARG, "DDIMPipeline takes no class label");
    }
    em_pipeline_free(p);
    em_ctx_free(c);
}

static void expect_load_error(em_ctx *c, em_status want, const char *needle) {
    em_pipeline *p = em_pipeline_load(c, em_test_scratch_dir(), NULL);
    CHECK(p == NULL);
    CHECK_MSG(em_ctx_status(c) == want && strstr(msg(c), needle), "got %d: %s (want '%s')",
              (int)em_ctx_status(c), msg(c), needle);
    em_ctx_clear_error(c);
    em_pipeline_free(p);
}

static void test_dit_bad_folders(void) {
    em_ctx *c = em_ctx_create();
    if (!em_test_scratch_make("dit")) {
        em_ctx_free(c);
        return;
    }
    em_test_scratch_link("transformer", "diffusion", "dit_pipe/transformer");
    em_test_scratch_link("scheduler", "diffusion", "dit_pipe/scheduler");
    /* no vae component: DiTPipeline needs one */
    em_test_scratch_write("model_index.json",
                          "{\"_class_name\": \"DiTPipeline\", "
                          "\"transformer\": [\"diffusers\", \"DiTTransformer2DModel\"], "
                          "\"scheduler\": [\"diffusers\", \"DDIMScheduler\"]}");
    expect_load_error(c, EM_ERR_NOT_FOUND, "DiTPipeline needs a 'vae' component");
    /* named, but its folder is missing */
    em_test_scratch_write("model_index.json",
                          "{\"_class_name\": \"DiTPipeline\", "
                          "\"transformer\": [\"diffusers\", \"DiTTransformer2DModel\"], "
                          "\"vae\": [\"diffusers\", \"AutoencoderKL\"], "
                          "\"scheduler\": [\"diffusers\", \"DDIMScheduler\"]}");
    expect_load_error(c, EM_ERR_NOT_FOUND, "its folder");
    em_test_scratch_link("vae", "diffusion", "dit_pipe/vae");
    em_test_scratch_write("model_index.json",
                          "{\"_class_name\": \"DiTPipeline\", "
                          "\"transformer\": [\"diffusers\", \"PixArtTransformer2DModel\"], "
                          "\"vae\": [\"diffusers\", \"AutoencoderKL\"], "
                          "\"scheduler\": [\"diffusers\", \"DDIMScheduler\"]}");
    expect_load_error(c, EM_ERR_UNSUPPORTED, "transformer class 'PixArtTransformer2DModel'");
    em_test_scratch_write("model_index.json",
                          "{\"_class_name\": \"DiTPipeline\", "
                          "\"transformer\": [\"diffusers\", \"DiTTransformer2DModel\"], "
                          "\"vae\": [\"diffusers\", \"AutoencoderTiny\"], "
                          "\"scheduler\": [\"diffusers\", \"DDIMScheduler\"]}");
    expect_load_error(c, EM_ERR_UNSUPPORTED, "vae class 'AutoencoderTiny'");
    /* the whole folder loads */
    em_test_scratch_write("model_index.json",
                          "{\"_class_name\": \"DiTPipeline\", "
                          "\"transformer\": [\"diffusers\", \"Transformer2DModel\"], "
                          "\"vae\": [\"diffusers\", \"AutoencoderKL\"], "
                          "\"scheduler\": [\"diffusers\", \"DDIMScheduler\"]}");
    em_pipeline *p = em_pipeline_load(c, em_test_scratch_dir(), NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    em_pipeline_free(p);
    em_test_scratch_remove();
    em_ctx_free(c);
}

static void expect_config_error(em_ctx *c, const char *json, em_status want,
                                const char *needle) {
    em_dit_config cfg;
    CHECK(em_dit_config_parse(c, json, strlen(json), "t.json", &cfg) == want);
    CHECK_MSG(strstr(msg(c), needle), "%s (want '%s')", msg(c), needle);
    em_ctx_clear_error(c);
}

static void test_dit_config(void) {
    em_ctx *c = em_ctx_create();
    em_dit_config cfg;
    CHECK(em_dit_config_parse(c, "{}", 2, NULL, &cfg) == EM_OK);
    CHECK(cfg.num_attention_heads == 16 && cfg.attention_head_dim == 72 &&
          cfg.in_channels == 4 && cfg.out_channels == 4 && cfg.num_layers == 28 &&
          cfg.sample_size == 32 && cfg.patch_size == 2 && cfg.num_embeds_ada_norm == 1000 &&
          cfg.attention_bias && !cfg.norm_elementwise_affine && cfg.norm_eps == 1e-5 &&
          cfg.activation == EM_DIT_ACT_GELU_TANH);
    expect_config_error(c, "{\"norm_type\": \"ada_norm_single\"}", EM_ERR_UNSUPPORTED,
                        "norm_type 'ada_norm_single'");
    expect_config_error(c, "{\"activation_fn\": \"swiglu\"}", EM_ERR_UNSUPPORTED,
                        "activation_fn 'swiglu'");
    expect_config_error(c, "{\"_class_name\": \"SD3Transformer2DModel\"}", EM_ERR_UNSUPPORTED,
                        "_class_name 'SD3Transformer2DModel'");
    expect_config_error(c, "{\"num_embeds_ada_norm\": null}", EM_ERR_FORMAT,
                        "num_embeds_ada_norm is null");
    expect_config_error(c, "{\"sample_size\": 9}", EM_ERR_FORMAT, "not a multiple of");
    expect_config_error(c, "{\"num_attention_heads\": 1, \"attention_head_dim\": 6}",
                        EM_ERR_FORMAT, "multiple of 4");
    expect_config_error(c, "{\"patch_size\": \"2\"}", EM_ERR_FORMAT, "patch_size");
    em_ctx_free(c);
}

static void test_dit_bad_inputs(void) {
    em_ctx *c = em_ctx_create();
    em_dit *d = em_dit_load(c, em_test_fixture_path("diffusion", "dit_pipe/transformer"), NULL,
                            EM_F32);
    CHECK_MSG(d != NULL, "%s", msg(c));
    if (d) {
        em_scope_push(c);
        float t = 10.0f;
        int64_t lab[2] = {1, 2};
        em_tensor *tt = em_from_host(c, EM_F32, 0, NULL, &t);
        em_tensor *labels = em_from_host(c, EM_I64, 1, (int64_t[]){2}, lab);
        em_tensor *bad = em_zeros(c, EM_F32, 4, (int64_t[]){2, 4, 7, 7});
        CHECK(em_dit_forward(c, d, bad, tt, labels) == NULL);
        CHECK_MSG(em_ctx_status(c) == EM_ERR_SHAPE && strstr(msg(c), "multiple of the patch"),
                  "%s", msg(c));
        em_ctx_clear_error(c);
        em_tensor *x = em_zeros(c, EM_F32, 4, (int64_t[]){2, 4, 8, 8});
        em_tensor *fl = em_zeros(c, EM_F32, 1, (int64_t[]){2});
        CHECK(em_dit_forward(c, d, x, tt, fl) == NULL);
        CHECK_MSG(em_ctx_status(c) == EM_ERR_SHAPE && strstr(msg(c), "integer labels"), "%s",
                  msg(c));
        em_ctx_clear_error(c);
        lab[1] = 1001; /* past the null class */
        labels = em_from_host(c, EM_I64, 1, (int64_t[]){2}, lab);
        CHECK(em_dit_forward(c, d, x, tt, labels) == NULL);
        CHECK_MSG(em_ctx_status(c) != EM_OK && strstr(msg(c), "1001"), "%s", msg(c));
        em_ctx_clear_error(c);
        CHECK(em_dit_forward(c, d, x, tt, NULL) == NULL && em_ctx_status(c) == EM_ERR_INVALID_ARG);
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    em_dit_free(d);
    /* a config its weights contradict: the tensor and both shapes named */
    if (em_test_scratch_make("dit_cfg")) {
        em_test_scratch_link("diffusion_pytorch_model.safetensors", "diffusion",
                             "dit_geglu/diffusion_pytorch_model.safetensors");
        em_test_scratch_write("config.json",
                              "{\"num_attention_heads\": 2, \"attention_head_dim\": 4, "
                              "\"in_channels\": 3, \"num_layers\": 2, \"sample_size\": 4, "
                              "\"patch_size\": 1, \"num_embeds_ada_norm\": 10, "
                              "\"activation_fn\": \"gelu\", \"attention_bias\": false, "
                              "\"norm_elementwise_affine\": true}");
        CHECK(em_dit_load(c, em_test_scratch_dir(), NULL, EM_F32) == NULL);
        CHECK_MSG(em_ctx_status(c) == EM_ERR_SHAPE && strstr(msg(c), "ff.net.0.proj.weight"),
                  "%s", msg(c));
        em_ctx_clear_error(c);
        em_test_scratch_remove();
    }
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_dit_matches_diffusers), T(test_dit_pipeline_runs), T(test_dit_bad_runs),
             T(test_dit_bad_folders), T(test_dit_config), T(test_dit_bad_inputs),
             T(test_dit_on_xla))

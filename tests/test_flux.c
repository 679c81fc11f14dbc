/* Flux against diffusers 0.42.1 (tests/fixtures/diffusion/flux_*, made by
 * scripts/gen_flux_fixtures.py): FluxTransformer2DModel's output for three timesteps within 1e-4
 * (f32), with guidance embeddings (FLUX.1-dev's layout) and without (schnell's, with patch_size
 * 2 and out_channels 32); config fields refused by name; bad inputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ember/ember.h"
#include "harness.h"

static const char *msg(em_ctx *c) { return em_ctx_error(c) ? em_ctx_error(c)->message : ""; }

static void check_transformer(em_ctx *c, em_test_bundle *b, const char *prefix,
                              const char *rel) {
    char what[160], key[64];
    em_flux *m = em_flux_load(c, em_test_fixture_path("diffusion", rel), NULL, EM_F32);
    CHECK_MSG(m != NULL, "%s: %s", rel, msg(c));
    if (!m) {
        em_ctx_clear_error(c);
        return;
    }
    em_scope_push(c);
#define GET(name) (snprintf(key, sizeof key, "%s%s", prefix, name), em_test_bundle_get(b, c, key))
    em_flux_inputs in = {.hidden_states = GET("hidden"), .encoder_hidden_states = GET("ehs"),
                         .pooled_projections = GET("pooled"), .img_ids = GET("img_ids"),
                         .txt_ids = GET("txt_ids")};
    if (em_flux_get_config(m)->guidance_embeds) in.guidance = GET("guidance");
    for (int k = 0; k < 3; k++) {
        char on[16], tn[16];
        snprintf(on, sizeof on, "out%d", k);
        snprintf(tn, sizeof tn, "t%d", k);
        in.timestep = GET(tn);
        snprintf(what, sizeof what, "%s, timestep %d", rel, k);
        em_tensor *got = em_flux_forward(c, m, &in);
        CHECK_MSG(got != NULL, "%s: %s", what, msg(c));
        em_test_allclose(c, got, GET(on), 1e-4, 1e-4, what);
    }
#undef GET
    CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
    em_ctx_clear_error(c);
    em_scope_pop(c);
    em_flux_free(m);
}

static void test_flux_transformer_matches_diffusers(void) {
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/flux_tiny_ref");
    CHECK(b != NULL);
    if (b) {
        check_transformer(c, b, "tf_", "flux_tiny/transformer");
        check_transformer(c, b, "sc_", "flux_schnell");
    }
    em_flux_config cfg;
    CHECK(em_flux_config_load(c, em_test_fixture_path("diffusion", "flux_schnell"), &cfg) ==
          EM_OK);
    CHECK(!cfg.guidance_embeds && cfg.patch_size == 2 && cfg.out_channels == 32 &&
          cfg.num_layers == 1 && cfg.num_single_layers == 3 && cfg.n_axes == 3 &&
          cfg.axes_dims_rope[0] == 4);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

static void expect_config_error(em_ctx *c, const char *json, em_status want,
                                const char *needle) {
    em_flux_config cfg;
    CHECK(em_flux_config_parse(c, json, strlen(json), "t.json", &cfg) == want);
    CHECK_MSG(em_ctx_status(c) == want && strstr(msg(c), needle), "%s (want '%s')", msg(c),
              needle);
    em_ctx_clear_error(c);
}

static void test_flux_config(void) {
    em_ctx *c = em_ctx_create();
    em_flux_config cfg;
    /* diffusers' defaults (FLUX.1-dev's config, but for guidance_embeds) */
    const char *ok = "{\"out_channels\": null}";
    CHECK_MSG(em_flux_config_parse(c, ok, strlen(ok), NULL, &cfg) == EM_OK, "%s", msg(c));
    CHECK(cfg.patch_size == 1 && cfg.in_channels == 64 && cfg.out_channels == 64 &&
          cfg.num_layers == 19 && cfg.num_single_layers == 38 && cfg.attention_head_dim == 128 &&
          cfg.num_attention_heads == 24 && cfg.joint_attention_dim == 4096 &&
          cfg.pooled_projection_dim == 768 && !cfg.guidance_embeds && cfg.n_axes == 3 &&
          cfg.axes_dims_rope[0] == 16 && cfg.axes_dims_rope[1] == 56 &&
          cfg.axes_dims_rope[2] == 56);
    em_ctx_clear_error(c);
    expect_config_error(c, "{\"_class_name\": \"SD3Transformer2DModel\"}", EM_ERR_UNSUPPORTED,
                        "_class_name 'SD3Transformer2DModel'");
    expect_config_error(c, "{\"axes_dims_rope\": [16, 56, 40]}", EM_ERR_FORMAT,
                        "axes_dims_rope sum to 112, not attention_head_dim 128");
    expect_config_error(c, "{\"axes_dims_rope\": [15, 57, 56]}", EM_ERR_FORMAT,
                        "axes_dims_rope[0] must be an even");
    expect_config_error(c, "{\"axes_dims_rope\": 128}", EM_ERR_FORMAT, "axes_dims_rope");
    expect_config_error(c, "{\"guidance_embeds\": \"yes\"}", EM_ERR_FORMAT, "guidance_embeds");
    expect_config_error(c, "{\"num_attention_heads\": 0}", EM_ERR_FORMAT, "num_attention_heads");
    em_ctx_free(c);
}

static void test_flux_bad_inputs(void) {
    em_ctx *c = em_ctx_create();
    em_flux *m = em_flux_load(c, em_test_fixture_path("diffusion", "flux_tiny/transformer"),
                              NULL, EM_F32);
    CHECK_MSG(m != NULL, "%s", msg(c));
    if (m) {
        em_scope_push(c);
        float t = 0.5f;
        em_flux_inputs in = {
            .hidden_states = em_zeros(c, EM_F32, 3, (int64_t[]){1, 4, 64}),
            .encoder_hidden_states = em_zeros(c, EM_F32, 3, (int64_t[]){1, 3, 48}),
            .pooled_projections = em_zeros(c, EM_F32, 2, (int64_t[]){1, 16}),
            .timestep = em_from_host(c, EM_F32, 0, NULL, &t),
            .guidance = em_from_host(c, EM_F32, 0, NULL, &t),
            .img_ids = em_zeros(c, EM_F32, 2, (int64_t[]){4, 3}),
            .txt_ids = em_zeros(c, EM_F32, 2, (int64_t[]){3, 3})};
        CHECK_MSG(em_flux_forward(c, m, &in) != NULL, "%s", msg(c));
        em_flux_inputs bad = in;
        bad.hidden_states = em_zeros(c, EM_F32, 3, (int64_t[]){1, 4, 16});
        CHECK(em_flux_forward(c, m, &bad) == NULL);
        CHECK_MSG(em_ctx_status(c) == EM_ERR_SHAPE && strstr(msg(c), "in_channels"), "%s",
                  msg(c));
        em_ctx_clear_error(c);
        bad = in;
        bad.guidance = NULL;
        CHECK(em_flux_forward(c, m, &bad) == NULL);
        CHECK_MSG(em_ctx_status(c) == EM_ERR_INVALID_ARG && strstr(msg(c), "guidance"), "%s",
                  msg(c));
        em_ctx_clear_error(c);
        bad = in;
        bad.img_ids = em_zeros(c, EM_F32, 2, (int64_t[]){5, 3});
        CHECK(em_flux_forward(c, m, &bad) == NULL);
        CHECK_MSG(em_ctx_status(c) == EM_ERR_SHAPE && strstr(msg(c), "img_ids"), "%s", msg(c));
        em_ctx_clear_error(c);
        bad = in;
        bad.pooled_projections = NULL;
        CHECK(em_flux_forward(c, m, &bad) == NULL && em_ctx_status(c) == EM_ERR_INVALID_ARG &&
              strstr(msg(c), "pooled_projections"));
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    em_flux_free(m);
    /* a config its weights contradict: the tensor and both shapes named */
    if (em_test_scratch_make("flux_cfg")) {
        em_test_scratch_link("diffusion_pytorch_model.safetensors", "diffusion",
                             "flux_schnell/diffusion_pytorch_model.safetensors");
        em_test_scratch_write("config.json",
                              "{\"patch_size\": 2, \"in_channels\": 64, \"out_channels\": 32, "
                              "\"num_layers\": 1, \"num_single_layers\": 3, "
                              "\"attention_head_dim\": 8, \"num_attention_heads\": 2, "
                              "\"joint_attention_dim\": 40, \"pooled_projection_dim\": 16, "
                              "\"axes_dims_rope\": [4, 2, 2]}");
        CHECK(em_flux_load(c, em_test_scratch_dir(), NULL, EM_F32) == NULL);
        CHECK_MSG(em_ctx_status(c) == EM_ERR_SHAPE && strstr(msg(c), "context_embedder.weight"),
                  "%s", msg(c));
        em_ctx_clear_error(c);
        /* guidance_embeds true without the guidance embedder's weights */
        em_test_scratch_write("config.json",
                              "{\"patch_size\": 2, \"in_channels\": 64, \"out_channels\": 32, "
                              "\"num_layers\": 1, \"num_single_layers\": 3, "
                              "\"attention_head_dim\": 8, \"num_attention_heads\": 2, "
                              "\"joint_attention_dim\": 48, \"pooled_projection_dim\": 16, "
                              "\"guidance_embeds\": true, \"axes_dims_rope\": [4, 2, 2]}");
        CHECK(em_flux_load(c, em_test_scratch_dir(), NULL, EM_F32) == NULL);
        CHECK_MSG(em_ctx_status(c) != EM_OK && strstr(msg(c), "guidance_embedder"), "%s",
                  msg(c));
        em_ctx_clear_error(c);
        em_test_scratch_remove();
    }
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_flux_transformer_matches_diffusers), T(test_flux_config),
             T(test_flux_bad_inputs))

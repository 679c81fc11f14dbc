/* AutoencoderKL against diffusers 0.42.1 (tests/fixtures/diffusion/vae_*, made by
 * scripts/gen_vae_fixtures.py): decode of fixed latents, encode's mean and logvar of a fixed
 * image and a sample with given noise, within 1e-4 (f32), on the CPU and on XLA's CPU plugin;
 * tiled decode and encode (scripts/gen_vae_tiling_fixtures.py); clear errors for bad folders,
 * configs, inputs and tilings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ember/ember.h"
#include "harness.h"

static const char *const CASES[] = {"vae_kl", "vae_variant"};
#define N_CASES (int)(sizeof CASES / sizeof CASES[0])

static void check_case(em_ctx *c, int i, const char *device) {
    char rel[128], what[160];
    snprintf(rel, sizeof rel, "diffusion/%s_ref", CASES[i]);
    em_test_bundle *b = em_test_bundle_load(rel);
    CHECK(b != NULL);
    if (!b) return;
    em_vae *v = em_vae_load(c, em_test_fixture_path("diffusion", CASES[i]), device, EM_F32);
    CHECK_MSG(v != NULL, "%s: %s", CASES[i], em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (!v) {
        em_ctx_clear_error(c);
        em_test_bundle_free(b);
        return;
    }
    em_scope_push(c);
    em_device *prev = em_ctx_device(c);
    em_ctx_set_device(c, em_vae_device(v)); /* the bundle's inputs onto the VAE's device */
    em_tensor *image = em_test_bundle_get(b, c, "image");
    em_tensor *latents = em_test_bundle_get(b, c, "latents");
    em_tensor *noise = em_test_bundle_get(b, c, "noise");
    em_ctx_set_device(c, prev);

    snprintf(what, sizeof what, "%s on %s, decode", CASES[i], device);
    em_test_allclose(c, em_vae_decode(c, v, latents), em_test_bundle_get(b, c, "decoded"), 1e-4,
                     1e-4, what);
    em_vae_latent_dist d;
    CHECK_MSG(em_vae_encode(c, v, image, &d) == EM_OK, "%s: %s", CASES[i],
              em_ctx_error(c) ? em_ctx_error(c)->message : "");
    snprintf(what, sizeof what, "%s on %s, encode mean", CASES[i], device);
    em_test_allclose(c, d.mean, em_test_bundle_get(b, c, "mean"), 1e-4, 1e-4, what);
    snprintf(what, sizeof what, "%s on %s, encode logvar", CASES[i], device);
    em_test_allclose(c, d.logvar, em_test_bundle_get(b, c, "logvar"), 1e-4, 1e-4, what);
    snprintf(what, sizeof what, "%s on %s, latent_dist.sample(generator)", CASES[i], device);
    em_test_allclose(c, em_vae_latent_sample(c, &d, noise), em_test_bundle_get(b, c, "sample"),
                     1e-4, 1e-4, what);
    /* odd sizes through the padded stride-2 downsamplers */
    em_ctx_set_device(c, em_vae_device(v));
    em_tensor *odd = em_test_bundle_get(b, c, "image_odd");
    em_ctx_set_device(c, prev);
    CHECK(em_vae_encode(c, v, odd, &d) == EM_OK);
    snprintf(what, sizeof what, "%s on %s, encode mean of an odd-sized image", CASES[i], device);
    em_test_allclose(c, d.mean, em_test_bundle_get(b, c, "mean_odd"), 1e-4, 1e-4, what);
    snprintf(what, sizeof what, "%s on %s, encode logvar of an odd-sized image", CASES[i], device);
    em_test_allclose(c, d.logvar, em_test_bundle_get(b, c, "logvar_odd"), 1e-4, 1e-4, what);
    CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    em_ctx_clear_error(c);
    em_scope_pop(c);
    em_vae_free(v);
    em_test_bundle_free(b);
}

static void test_vae_matches_diffusers(void) {
    em_ctx *c = em_ctx_create();
    for (int i = 0; i < N_CASES; i++) check_case(c, i, "cpu");
    em_ctx_free(c);
}

/* bf16 weights and activations run (diffusers' f16/bf16 VAE), close to the f32 reference */
static void test_vae_bf16(void) {
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/vae_kl_ref");
    em_vae *v = em_vae_load(c, em_test_fixture_path("diffusion", "vae_kl"), NULL, EM_BF16);
    CHECK_MSG(b && v, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (b && v) {
        em_scope_push(c);
        em_tensor *z = em_cast(c, em_test_bundle_get(b, c, "latents"), EM_BF16);
        em_tensor *y = em_cast(c, em_vae_decode(c, v, z), EM_F32);
        em_test_allclose(c, y, em_test_bundle_get(b, c, "decoded"), 0.1, 0.05, "bf16 decode");
        em_vae_latent_dist d;
        em_tensor *img = em_cast(c, em_test_bundle_get(b, c, "image"), EM_BF16);
        CHECK(em_vae_encode(c, v, img, &d) == EM_OK);
        em_test_allclose(c, em_cast(c, d.mean, EM_F32), em_test_bundle_get(b, c, "mean"), 0.1,
                         0.05, "bf16 encode mean");
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s",
                  em_ctx_error(c) ? em_ctx_error(c)->message : "");
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    em_vae_free(v);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

static void test_vae_on_xla(void) {
    em_ctx *c = em_ctx_create();
    if (!em_test_xla_or_skip(c)) {
        em_ctx_free(c);
        return;
    }
    for (int i = 0; i < N_CASES; i++) check_case(c, i, "xla:0");
    em_ctx_free(c);
}

static void test_vae_config(void) {
    em_ctx *c = em_ctx_create();
    em_vae *v = em_vae_load(c, em_test_fixture_path("diffusion", "vae_kl"), NULL, EM_F32);
    CHECK(v != NULL);
    if (v) {
        const em_vae_config *g = em_vae_get_config(v);
        CHECK(g->n_blocks == 2 && g->block_out_channels[1] == 16 && g->latent_channels == 4);
        CHECK(g->scaling_factor == 0.18215 && !g->has_shift_factor && g->force_upcast);
        CHECK(g->use_quant_conv && g->use_post_quant_conv && g->mid_block_add_attention);
        CHECK(g->sample_size[0] == 16 && g->norm_num_groups == 4 && !strcmp(g->act_fn, "silu"));
        CHECK(em_vae_device(v) == em_ctx_device(c));
    }
    em_vae_free(v);
    em_vae_config g;
    CHECK(em_vae_config_load(c, em_test_fixture_path("diffusion", "vae_variant"), &g) == EM_OK);
    CHECK(g.n_blocks == 3 && g.layers_per_block == 2 && g.in_channels == 1 &&
          g.out_channels == 2 && !strcmp(g.act_fn, "gelu"));
    CHECK(g.has_shift_factor && g.shift_factor == 0.0609 && g.scaling_factor == 1.5305);
    CHECK(!g.use_quant_conv && !g.use_post_quant_conv && !g.mid_block_add_attention &&
          !g.force_upcast);
    CHECK(!g.has_latents_mean && !g.has_latents_std); /* both null in the fixture */
    /* from memory: the same fields; bad text named, the struct zeroed */
    const char *txt = "{\"_class_name\": \"AutoencoderKL\", \"block_out_channels\": [8, 16], "
                      "\"down_block_types\": [\"DownEncoderBlock2D\", \"DownEncoderBlock2D\"], "
                      "\"up_block_types\": [\"UpDecoderBlock2D\", \"UpDecoderBlock2D\"], "
                      "\"norm_num_groups\": 4, \"act_fn\": \"relu\"}";
    CHECK(em_vae_config_parse(c, txt, strlen(txt), "mem.json", &g) == EM_OK);
    CHECK(g.n_blocks == 2 && g.block_out_channels[1] == 16 && !strcmp(g.act_fn, "relu") &&
          g.scaling_factor == 0.18215);
    CHECK(!g.has_latents_mean && !g.has_latents_std); /* absent */
    const char *stats = "{\"latents_mean\": [0, 0.5, 1, 2], \"latents_std\": null}";
    CHECK(em_vae_config_parse(c, stats, strlen(stats), "stats.json", &g) == EM_OK);
    CHECK(g.has_latents_mean && !g.has_latents_std);
    CHECK(em_vae_config_parse(c, "{\"in_channels\": ", 16, "cut.json", &g) == EM_ERR_FORMAT);
    CHECK_ERR(c, EM_ERR_FORMAT, "cut.json", "not valid JSON");
    CHECK(g.n_blocks == 0);
    CHECK(em_vae_config_parse(c, "[1]", 3, NULL, &g) == EM_ERR_FORMAT);
    CHECK_ERR(c, EM_ERR_FORMAT, "config.json", "not a JSON object");
    em_ctx_free(c);
}

static em_vae *load_with_config(em_ctx *c, const char *config) {
    unlink(em_test_scratch_path("config.json"));
    em_test_scratch_write("config.json", config);
    if (access(em_test_scratch_path("diffusion_pytorch_model.safetensors"), F_OK) != 0)
        em_test_scratch_link("diffusion_pytorch_model.safetensors", "diffusion",
                             "vae_kl/diffusion_pytorch_model.safetensors");
    return em_vae_load(c, em_test_scratch_dir(), NULL, EM_F32);
}

#define HEAD                                                                                       \
    "{\"_class_name\": \"AutoencoderKL\", \"norm_num_groups\": 4, "                         \
    "\"block_out_channels\": [8, 16], "
#define DOWN "\"down_block_types\": [\"DownEncoderBlock2D\", \"DownEncoderBlock2D\"], "
#define UP "\"up_block_types\": [\"UpDecoderBlock2D\", \"UpDecoderBlock2D\"]"

static void test_vae_bad_folders(void) {
    em_ctx *c = em_ctx_create();
    /* a folder with a config but no weights */
    if (!em_test_scratch_make("vae_noweights")) {
        em_ctx_free(c);
        return;
    }
    em_test_scratch_write("config.json", HEAD DOWN UP "}");
    CHECK(em_vae_load(c, em_test_scratch_dir(), NULL, EM_F32) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "holds no diffusion_pytorch_model.safetensors");
    em_test_scratch_remove();
    CHECK(em_vae_load(c, "/nonexistent/vae", NULL, EM_F32) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "/nonexistent/vae");
    CHECK(em_vae_load(c, em_test_fixture_path("diffusion", "vae_kl"), NULL, EM_I64) == NULL);
    CHECK_ERR(c, EM_ERR_DTYPE, "f32, bf16 and f16");

    if (!em_test_scratch_make("vae")) {
        em_ctx_free(c);
        return;
    }
    em_vae *v = load_with_config(c, HEAD DOWN UP "}"); /* the control: the folder as saved */
    CHECK_MSG(v != NULL, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    em_vae_free(v);
    em_ctx_clear_error(c);
    CHECK(load_with_config(c, HEAD "\"down_block_types\": [\"DownEncoderBlock2D\", "
                                   "\"AttnDownEncoderBlock2D\"], " UP "}") == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "'AttnDownEncoderBlock2D' is not supported",
              "DownEncoderBlock2D is", "config.json");
    CHECK(load_with_config(c, HEAD DOWN "\"up_block_types\": [\"UpDecoderBlock2D\", "
                                        "\"AttnUpDecoderBlock2D\"]}") == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "up_block_types entry 'AttnUpDecoderBlock2D'");
    CHECK(load_with_config(c, HEAD DOWN UP ", \"act_fn\": \"mish\"}") == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "act_fn 'mish'");
    CHECK(load_with_config(c, "{\"_class_name\": \"AutoencoderTiny\"}") == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "_class_name 'AutoencoderTiny'");
    CHECK(load_with_config(c, HEAD "\"down_block_types\": [\"DownEncoderBlock2D\"], " UP "}") ==
          NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "2 block_out_channels but 1 down_block_types");
    CHECK(load_with_config(c, HEAD DOWN UP ", \"use_quant_conv\": 1}") == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "use_quant_conv");
    CHECK(load_with_config(c, HEAD DOWN UP ", \"latents_mean\": [0.1, 0.2]}") == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "latents_mean", "latent_channels is 4");
    /* configs the weights contradict: named tensor, both shapes */
    CHECK(load_with_config(c, HEAD DOWN UP ", \"latent_channels\": 8}") == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "encoder.conv_out.weight", "[8, 16, 3, 3]", "[16, 16, 3, 3]");
    CHECK(load_with_config(c, HEAD DOWN UP ", \"layers_per_block\": 2}") == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "encoder.down_blocks.0.resnets.1.norm1.weight", "is missing");
    /* weights the config does not use (quant_conv here) are ignored, as diffusers ignores
     * unexpected keys */
    v = load_with_config(c, HEAD DOWN UP ", \"use_quant_conv\": false}");
    CHECK_MSG(v != NULL, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    em_vae_free(v);
    em_ctx_clear_error(c);
    CHECK(load_with_config(c, "[1]") == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "not an object");
    em_test_scratch_remove();
    em_ctx_free(c);
}

static void test_vae_bad_inputs(void) {
    em_ctx *c = em_ctx_create();
    em_vae *v = em_vae_load(c, em_test_fixture_path("diffusion", "vae_kl"), NULL, EM_F32);
    CHECK(v != NULL);
    if (!v) {
        em_ctx_free(c);
        return;
    }
    em_tensor *z3 = em_zeros(c, EM_F32, 4, (int64_t[]){1, 3, 4, 4});
    CHECK(em_vae_decode(c, v, z3) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "latents", "[N, 4, H, W]", "latent_channels = 4");
    em_tensor *z2d = em_zeros(c, EM_F32, 2, (int64_t[]){4, 4});
    CHECK(em_vae_decode(c, v, z2d) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "latents");
    em_tensor *zb = em_zeros(c, EM_BF16, 4, (int64_t[]){1, 4, 4, 4});
    CHECK(em_vae_decode(c, v, zb) == NULL);
    CHECK_ERR(c, EM_ERR_DTYPE, "f32");
    em_vae_latent_dist d;
    em_tensor *img4 = em_zeros(c, EM_F32, 4, (int64_t[]){1, 4, 8, 8});
    CHECK(em_vae_encode(c, v, img4, &d) == EM_ERR_SHAPE && !d.mean && !d.logvar);
    CHECK_ERR(c, EM_ERR_SHAPE, "image", "in_channels = 3");
    CHECK(em_vae_decode(c, v, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "latents");
    /* a good encode, then noise of the wrong shape */
    em_tensor *img = em_zeros(c, EM_F32, 4, (int64_t[]){1, 3, 8, 8});
    CHECK(em_vae_encode(c, v, img, &d) == EM_OK);
    CHECK(d.mean && em_tensor_dim(d.mean, 1) == 4 && em_tensor_dim(d.mean, 2) == 4);
    em_tensor *bad = em_zeros(c, EM_F32, 4, (int64_t[]){1, 4, 4, 5});
    CHECK(em_vae_latent_sample(c, &d, bad) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "noise", "must match the mean");
    em_tensor *y = em_vae_decode(c, v, d.mean);
    CHECK(y && em_tensor_dim(y, 1) == 3 && em_tensor_dim(y, 2) == 8 && em_tensor_dim(y, 3) == 8);
    em_vae_free(v);
    em_ctx_free(c);
}

/* vae.enable_tiling(): tiled decode and encode against diffusers (scripts/
 * gen_vae_tiling_fixtures.py), the default tile sizes, an input no larger than a tile decoded
 * untiled, and bad tilings refused */
static void test_vae_tiling(void) {
    static const struct {
        const char *vae, *name;
        int64_t sample, latent; /* 0: the defaults (em_vae_*_tiled with NULL) */
        double overlap;
    } T_[] = {{"vae_kl", "default", 0, 0, 0},       {"vae_kl", "small", 8, 4, 0.25},
              {"vae_kl", "half", 16, 8, 0.5},       {"vae_variant", "default", 0, 0, 0},
              {"vae_variant", "small", 8, 2, 0.5}};
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/vae_tiling_ref");
    CHECK(b != NULL);
    for (size_t i = 0; b && i < sizeof T_ / sizeof T_[0]; i++) {
        em_vae *v = em_vae_load(c, em_test_fixture_path("diffusion", T_[i].vae), NULL, EM_F32);
        CHECK_MSG(v != NULL, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
        if (!v) break;
        em_vae_tiling d = em_vae_default_tiling(v), t = {T_[i].sample, T_[i].latent, T_[i].overlap};
        CHECK(d.tile_sample_min_size == 16 && d.tile_overlap_factor == 0.25 &&
              d.tile_latent_min_size == (strcmp(T_[i].vae, "vae_kl") ? 4 : 8));
        const em_vae_tiling *tp = T_[i].sample ? &t : NULL;
        char key[96], what[160];
        em_scope_push(c);
#define GET(k) (snprintf(key, sizeof key, "%s_%s_%s", T_[i].vae, T_[i].name, k), \
                em_test_bundle_get(b, c, key))
        snprintf(what, sizeof what, "%s, %s tiling: decode", T_[i].vae, T_[i].name);
        em_tensor *z = GET("latents");
        em_test_allclose(c, em_vae_decode_tiled(c, v, z, tp), GET("decoded"), 1e-4, 1e-4, what);
        em_vae_latent_dist ld;
        CHECK_MSG(em_vae_encode_tiled(c, v, GET("image"), tp, &ld) == EM_OK, "%s",
                  em_ctx_error(c) ? em_ctx_error(c)->message : "");
        snprintf(what, sizeof what, "%s, %s tiling: encode mean", T_[i].vae, T_[i].name);
        em_test_allclose(c, ld.mean, GET("mean"), 1e-4, 1e-4, what);
        snprintf(what, sizeof what, "%s, %s tiling: encode logvar", T_[i].vae, T_[i].name);
        em_test_allclose(c, ld.logvar, GET("logvar"), 1e-4, 1e-4, what);
#undef GET
        if (!tp) { /* untiled, the same latents: diffusers' other answer */
            snprintf(key, sizeof key, "%s_untiled_decoded", T_[i].vae);
            snprintf(what, sizeof what, "%s untiled decode of the tiling latents", T_[i].vae);
            em_test_allclose(c, em_vae_decode(c, v, z), em_test_bundle_get(b, c, key), 1e-4,
                             1e-4, what);
        }
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s",
                  em_ctx_error(c) ? em_ctx_error(c)->message : "");
        em_ctx_clear_error(c);
        em_scope_pop(c);
        em_vae_free(v);
    }
    /* no larger than a tile: decoded whole, as diffusers does */
    em_test_bundle *r = em_test_bundle_load("diffusion/vae_kl_ref");
    em_vae *v = em_vae_load(c, em_test_fixture_path("diffusion", "vae_kl"), NULL, EM_F32);
    if (r && v) {
        em_scope_push(c);
        em_test_allclose(c, em_vae_decode_tiled(c, v, em_test_bundle_get(r, c, "latents"), NULL),
                         em_test_bundle_get(r, c, "decoded"), 1e-4, 1e-4,
                         "tiled decode of a latent no larger than a tile");
        em_tensor *z = em_zeros(c, EM_F32, 4, (int64_t[]){1, 4, 12, 12});
        em_vae_tiling bad[] = {{16, 8, 1.0}, {0, 8, 0.25}, {16, 0, 0.25}, {16, 1, 0.25}};
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            CHECK(em_vae_decode_tiled(c, v, z, &bad[k]) == NULL);
            CHECK_ERR(c, EM_ERR_INVALID_ARG, "tiling", "tile_overlap_factor");
        }
        em_vae_latent_dist ld;
        CHECK(em_vae_encode_tiled(c, v, em_zeros(c, EM_F32, 4, (int64_t[]){1, 3, 24, 24}),
                                  &bad[0], &ld) == EM_ERR_INVALID_ARG && !ld.mean);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "tiling");
        em_scope_pop(c);
    }
    CHECK(r && v);
    em_vae_free(v);
    em_test_bundle_free(r);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_vae_matches_diffusers), T(test_vae_config), T(test_vae_bad_folders),
             T(test_vae_bad_inputs), T(test_vae_bf16), T(test_vae_on_xla), T(test_vae_tiling))

/* StableDiffusionPipeline end to end against diffusers 0.42.1 (tests/fixtures/diffusion/sd_tiny,
 * made by scripts/gen_sd_fixtures.py): CLIP tokenizer and text encoder, UNet2DConditionModel
 * with classifier-free guidance, the scheduler, the VAE decode — images within 1e-3 of
 * diffusers' output_type="np" from committed latents and from seeds, with a negative prompt,
 * without guidance, with an SD 2.x-style v-prediction DDIM scheduler; compiled and on XLA's CPU
 * plugin; and clear errors for a missing component, a prompt given to an unconditional pipeline
 * and bad sizes. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ember/ember.h"
#include "harness.h"
#include "sd_pipeline_test.h"

/* scripts/gen_sd_fixtures.py's RUNS */
static const struct {
    const char *name, *prompt, *negative;
    double guidance;
    int64_t steps;
    uint64_t seed;
    bool latents, vpred;
} RUNS[] = {
    {"cfg", "a photo of a cat", NULL, 7.5, 4, 0, true, false},
    {"negative", "a red cube on a table", "blurry, low quality", 3.0, 3, 5, false, false},
    {"no_cfg", "an astronaut", NULL, 1.0, 3, 11, true, false},
    {"vpred", "a dog in the snow", "", 5.0, 3, 21, true, true},
};

/* sd_tiny with the v-prediction DDIM scheduler: a scratch pipeline folder whose components
 * are links to sd_tiny's */
static const char *vpred_folder(void) {
    const char *dir = em_test_scratch_make("sd_vpred");
    if (!dir) return NULL;
    const char *comps[] = {"unet", "vae", "text_encoder", "tokenizer"};
    sd_test_link("sd_tiny", comps, 4);
    em_test_scratch_link("scheduler", "diffusion", "sd_tiny_vpred_scheduler");
    em_test_scratch_write("model_index.json",
                          "{\"_class_name\": \"StableDiffusionPipeline\", "
                          "\"unet\": [\"diffusers\", \"UNet2DConditionModel\"], "
                          "\"vae\": [\"diffusers\", \"AutoencoderKL\"], "
                          "\"text_encoder\": [\"transformers\", \"CLIPTextModel\"], "
                          "\"tokenizer\": [\"transformers\", \"CLIPTokenizer\"], "
                          "\"scheduler\": [\"diffusers\", \"DDIMScheduler\"], "
                          "\"safety_checker\": [null, null]}");
    return dir;
}

/* Run i on pipeline p, compared with diffusers' image. */
static void check_run(em_ctx *c, em_pipeline *p, em_test_bundle *b, size_t i, bool compile,
                      const char *where) {
    char name[64];
    em_scope_push(c);
    em_pipeline_run_params rp = sd_test_params(RUNS[i].prompt, RUNS[i].negative, RUNS[i].guidance,
                                               RUNS[i].steps, RUNS[i].seed, compile);
    snprintf(name, sizeof name, "%s_latents", RUNS[i].name);
    if (RUNS[i].latents) rp.latents = em_test_bundle_get(b, c, name);
    sd_test_image(c, p, b, &rp, "", RUNS[i].name, where);
    em_scope_pop(c);
}

static void run_all(const char *device, bool compile) {
    em_ctx *c;
    em_test_bundle *b;
    if (!sd_test_open("sd_tiny_ref", device, &c, &b)) return;
    em_pipeline *p =
        sd_test_load(c, em_test_fixture_path("diffusion", "sd_tiny"), device, "sd_tiny");
    if (p) {
        CHECK(em_pipeline_get_index(p)->pipeline == EM_PIPELINE_STABLE_DIFFUSION);
        CHECK(em_unet2d_get_config(em_pipeline_unet(p))->conditional);
        int64_t shape[4];
        CHECK(em_pipeline_latent_shape(p, shape) && shape[1] == 4 && shape[2] == 8);
    }
    for (size_t i = 0; p && i < sizeof RUNS / sizeof RUNS[0]; i++)
        if (!RUNS[i].vpred) check_run(c, p, b, i, compile, device);
    em_pipeline_free(p);
    p = sd_test_load(c, vpred_folder(), device, "v-prediction folder");
    for (size_t i = 0; p && i < sizeof RUNS / sizeof RUNS[0]; i++)
        if (RUNS[i].vpred) check_run(c, p, b, i, compile, device);
    em_pipeline_free(p);
    em_test_scratch_remove();
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void test_sd_matches_diffusers(void) { run_all("cpu", false); }
static void test_sd_compiled(void) { run_all("cpu", true); }
static void test_sd_on_xla(void) { run_all("xla:0", false); }

static void test_sd_errors(void) {
    em_ctx *c = em_ctx_create();
    em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", "sd_tiny"), NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    em_pipeline_run_params rp = em_pipeline_default_params();
    rp.steps = 2;
    if (p) {
        CHECK(em_pipeline_run(c, p, &rp) == NULL); /* no prompt */
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "StableDiffusionPipeline", "needs a prompt");
        rp.prompt = "a cat";
        rp.height = 14; /* latents 7 high: not a multiple of the UNet's 2 */
        rp.width = 16;
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_SHAPE, "multiples of 2");
        rp.height = 15;
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "height 15", "multiples of 2", "VAE");
        rp.height = 32; /* a size other than the default: latents [1, 4, 16, 8] */
        em_scope_push(c);
        em_tensor *img = em_pipeline_run(c, p, &rp);
        CHECK_MSG(img && em_tensor_dim(img, 1) == 32 && em_tensor_dim(img, 2) == 16, "%s",
                  msg(c));
        rp.height = rp.width = 0;
        rp.latents = em_zeros(c, EM_F32, 4, (int64_t[]){1, 4, 4, 4});
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_SHAPE, "[1, 4, 4, 4]", "[1, 4, 8, 8]");
        em_scope_pop(c);
        em_pipeline_free(p);
    }
    /* a prompt given to an unconditional pipeline */
    p = em_pipeline_load(c, em_test_fixture_path("diffusion", "ddim_three"), NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    rp = em_pipeline_default_params();
    rp.prompt = "a cat";
    CHECK(p && em_pipeline_run(c, p, &rp) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "a prompt given to DDIMPipeline", "unconditional");
    rp.prompt = NULL;
    rp.width = 64;
    CHECK(p && em_pipeline_run(c, p, &rp) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "a height or width given to DDIMPipeline");
    em_pipeline_free(p);
    em_ctx_free(c);
}

/* Folders a StableDiffusionPipeline cannot load: each names the component */
static void test_sd_bad_folders(void) {
    const char *dir = em_test_scratch_make("sd_bad");
    if (!dir) return;
    em_ctx *c = em_ctx_create();
    const char *comps[] = {"unet", "text_encoder", "tokenizer", "scheduler"};
    sd_test_link("sd_tiny", comps, 4);
#define SD_HEAD                                                                                    \
    "{\"_class_name\": \"StableDiffusionPipeline\", "                                              \
    "\"text_encoder\": [\"transformers\", \"CLIPTextModel\"], "                                    \
    "\"tokenizer\": [\"transformers\", \"CLIPTokenizer\"], "                                       \
    "\"scheduler\": [\"diffusers\", \"PNDMScheduler\"], "
    em_test_scratch_write("model_index.json", SD_HEAD "\"unet\": [\"diffusers\", "
                                                      "\"UNet2DConditionModel\"]}");
    CHECK(em_pipeline_load(c, dir, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "StableDiffusionPipeline needs a 'vae' component");
    em_test_scratch_write("model_index.json", SD_HEAD "\"unet\": [\"diffusers\", "
                          "\"UNet2DConditionModel\"], \"vae\": [\"diffusers\", \"AutoencoderKL\"]}");
    CHECK(em_pipeline_load(c, dir, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "'vae'", "does not exist");
    em_test_scratch_link("vae", "diffusion", "sd_tiny/vae");
    em_test_scratch_write("model_index.json", SD_HEAD "\"unet\": [\"diffusers\", "
                          "\"UNet2DConditionModel\"], \"vae\": [\"diffusers\", \"AutoencoderTiny\"]}");
    CHECK(em_pipeline_load(c, dir, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "vae class 'AutoencoderTiny'", "AutoencoderKL");
    em_test_scratch_write("model_index.json", SD_HEAD "\"unet\": [\"diffusers\", "
                          "\"UNet2DModel\"], \"vae\": [\"diffusers\", \"AutoencoderKL\"]}");
    CHECK(em_pipeline_load(c, dir, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "unet class 'UNet2DModel'", "UNet2DConditionModel");
    /* the folder as it should be loads */
    em_test_scratch_write("model_index.json", SD_HEAD "\"unet\": [\"diffusers\", "
                          "\"UNet2DConditionModel\"], \"vae\": [\"diffusers\", \"AutoencoderKL\"]}");
    em_pipeline *p = em_pipeline_load(c, dir, NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    em_pipeline_free(p);
    /* a UNet2DModel folder named as the conditional UNet: its config says otherwise */
    unlink(em_test_scratch_path("unet"));
    em_test_scratch_link("unet", "diffusion", "ddim_three/unet");
    CHECK(em_pipeline_load(c, dir, NULL) == NULL);
    CHECK_MSG(em_ctx_status(c) != EM_OK, "a UNet2DModel as the unet of an SD pipeline loaded");
    em_ctx_clear_error(c);
    em_ctx_free(c);
    em_test_scratch_remove();
}

/* pipe.vae.enable_tiling() at 32 x 32 (16 x 16 latents, the VAE's latent tile is 8): diffusers'
 * image, text to image and image to image (scripts/gen_vae_tiling_fixtures.py); a pipeline
 * without a VAE refuses the option */
static void test_sd_vae_tiling(void) {
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/vae_tiling_ref");
    em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", "sd_tiny"), NULL);
    CHECK_MSG(b && p, "%s", msg(c));
    if (b && p) {
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.prompt = "a photo of a cat";
        rp.height = rp.width = 32;
        rp.steps = 2;
        rp.seed = 3;
        rp.vae_tiling = true;
        em_tensor *img = em_pipeline_run(c, p, &rp);
        CHECK_MSG(img != NULL, "%s", msg(c));
        em_test_allclose(c, img, em_test_bundle_get(b, c, "sd_tiled_image"), 1e-3, 0,
                         "Stable Diffusion with the VAE tiled");
        em_ctx_clear_error(c);
        /* image to image: the 32 x 32 init image is encoded in tiles too */
        rp = em_pipeline_default_params();
        rp.prompt = "a photo of a cat";
        rp.steps = 4;
        rp.strength = 0.75;
        rp.seed = 31;
        rp.vae_tiling = true;
        rp.image = em_test_bundle_get(b, c, "sd_img2img_tiled_init");
        img = em_pipeline_run(c, p, &rp);
        CHECK_MSG(img != NULL, "%s", msg(c));
        em_test_allclose(c, img, em_test_bundle_get(b, c, "sd_img2img_tiled_image"), 1e-3, 0,
                         "image to image with the VAE tiled (encode and decode)");
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    em_pipeline_free(p);
    p = em_pipeline_load(c, em_test_fixture_path("diffusion", "ddim_three"), NULL);
    if (p) {
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.vae_tiling = true;
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "vae_tiling", "has no VAE");
    }
    em_pipeline_free(p);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_sd_matches_diffusers), T(test_sd_compiled), T(test_sd_on_xla),
             T(test_sd_errors), T(test_sd_bad_folders), T(test_sd_vae_tiling))

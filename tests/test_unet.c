/* UNet2DModel and pipeline folders against diffusers 0.42.1 (tests/fixtures/diffusion, made by
 * scripts/gen_diffusion_fixtures.py): the UNet's output for three timesteps and a timestep per
 * sample within 1e-4, model_index.json routing, and clear errors for bad folders and inputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ember/ember.h"
#include "harness.h"

/* name, a pipeline folder (the unet in <name>/unet) or a bare component folder */
static const struct {
    const char *name;
    bool pipeline;
} CASES[] = {
    {"ddpm_attn", true},     {"ddpm_scale_shift", true}, {"ddim_three", true},
    {"unet_class", false},   {"unet_fourier", false},
    /* UNet2DConditionModel (scripts/gen_unet_cond_fixtures.py): SD 1.x's and 2.x's layouts */
    {"unet_cond", false},    {"unet_cond_linear", false},
};
#define N_CASES (int)(sizeof CASES / sizeof CASES[0])

static em_unet2d *load_case(em_ctx *c, int i, const char *device) {
    em_unet2d_options o = em_unet2d_default_options();
    o.device = device;
    const char *dir = em_test_fixture_path("diffusion", CASES[i].name);
    if (!CASES[i].pipeline) return em_unet2d_load(c, dir, &o);
    em_pipeline_index idx;
    if (em_pipeline_index_load(c, dir, &idx) != EM_OK) return NULL;
    em_unet2d *u = em_pipeline_load_unet(c, &idx, &o);
    em_pipeline_index_free(&idx);
    return u;
}

/* Every recorded forward of case i on `device`. */
static void check_case(em_ctx *c, int i, const char *device) {
    char rel[128], what[160];
    snprintf(rel, sizeof rel, "diffusion/%s_ref", CASES[i].name);
    em_test_bundle *b = em_test_bundle_load(rel);
    CHECK(b != NULL);
    if (!b) return;
    em_unet2d *u = load_case(c, i, device);
    CHECK_MSG(u != NULL, "%s: %s", CASES[i].name,
              em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (!u) {
        em_ctx_clear_error(c);
        em_test_bundle_free(b);
        return;
    }
    em_scope_push(c);
    em_device *prev = em_ctx_device(c);
    em_ctx_set_device(c, em_unet2d_device(u)); /* the bundle's tensors onto the model's device */
    em_tensor *x = em_test_bundle_get(b, c, "sample");
    em_tensor *labels = em_unet2d_get_config(u)->class_embedding != EM_UNET2D_CLASS_NONE
                            ? em_test_bundle_get(b, c, "class_labels")
                            : NULL;
    bool cond = em_unet2d_get_config(u)->conditional;
    em_tensor *ehs = cond ? em_test_bundle_get(b, c, "encoder_hidden_states") : NULL;
    const char *pairs[][2] = {{"t0", "out0"}, {"t1", "out1"}, {"t2", "out2"}, {"tvec", "out_vec"}};
    for (int k = 0; k < 4; k++) {
        em_tensor *t = em_test_bundle_get(b, c, pairs[k][0]);
        em_tensor *want = em_test_bundle_get(b, c, pairs[k][1]);
        em_ctx_set_device(c, prev);
        em_tensor *got = cond ? em_unet2d_forward_cond(c, u, x, t, ehs)
                              : em_unet2d_forward(c, u, x, t, labels);
        snprintf(what, sizeof what, "%s on %s, %s", CASES[i].name, device, pairs[k][1]);
        em_test_allclose(c, got, want, 1e-4, 1e-4, what);
        em_ctx_set_device(c, em_unet2d_device(u));
    }
    if (cond) { /* no host-timestep variant for the conditional model */
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s",
                  em_ctx_error(c) ? em_ctx_error(c)->message : "");
        em_ctx_clear_error(c);
        em_ctx_set_device(c, prev);
        em_scope_pop(c);
        em_unet2d_free(u);
        em_test_bundle_free(b);
        return;
    }
    /* a host timestep: the value the fixture's t1 holds */
    em_tensor *t1 = em_test_bundle_get(b, c, "t1");
    em_ctx_set_device(c, prev);
    double v = 0;
    CHECK(em_item(c, t1, &v) == EM_OK);
    snprintf(what, sizeof what, "%s on %s, host timestep %g", CASES[i].name, device, v);
    em_test_allclose(c, em_unet2d_forward_at(c, u, x, v, labels), em_test_bundle_get(b, c, "out1"),
                     1e-4, 1e-4, what);
    CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    em_ctx_clear_error(c);
    em_scope_pop(c);
    em_unet2d_free(u);
    em_test_bundle_free(b);
}

static void test_unet_matches_diffusers(void) {
    em_ctx *c = em_ctx_create();
    for (int i = 0; i < N_CASES; i++) check_case(c, i, "cpu");
    em_ctx_free(c);
}

static void test_unet_on_xla(void) {
    em_ctx *c = em_ctx_create();
    if (!em_test_xla_or_skip(c)) {
        em_ctx_free(c);
        return;
    }
    for (int i = 0; i < N_CASES; i++) check_case(c, i, "xla:0");
    em_ctx_free(c);
}

static int unet_step(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *statics,
                     int n_statics, em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)statics, (void)n_statics, (void)max_out;
    out[0] = em_unet2d_forward(c, user, in[0], in[1], NULL);
    return out[0] ? 1 : -1;
}

/* A compiled denoising step takes the timestep as an input: one program for every timestep. */
static void test_unet_compiled(void) {
    em_ctx *c = em_ctx_create();
    for (int i = 0; i < 2; i++) { /* ddpm_attn, ddpm_scale_shift */
        char rel[128], what[160];
        snprintf(rel, sizeof rel, "diffusion/%s_ref", CASES[i].name);
        em_test_bundle *b = em_test_bundle_load(rel);
        em_unet2d *u = load_case(c, i, "cpu");
        CHECK(b && u);
        if (!b || !u) {
            em_test_bundle_free(b);
            em_unet2d_free(u);
            continue;
        }
        em_compiled *f = em_compile(c, "unet_step", unet_step, u);
        em_tensor *x = em_test_bundle_get(b, c, "sample");
        const char *pairs[][2] = {{"t0", "out0"}, {"t1", "out1"}, {"t2", "out2"}};
        for (int k = 0; k < 3; k++) {
            em_tensor *in[2] = {x, em_test_bundle_get(b, c, pairs[k][0])}, *y = NULL;
            CHECK(em_compiled_call(c, f, in, 2, NULL, 0, &y, 1) == 1);
            snprintf(what, sizeof what, "%s compiled, %s", CASES[i].name, pairs[k][1]);
            em_test_allclose(c, y, em_test_bundle_get(b, c, pairs[k][1]), 1e-4, 1e-4, what);
        }
        em_compile_stats st;
        em_compiled_stats(f, &st);
        CHECK_MSG(st.compiles == 1, "%s: %lld compiles (%s)", CASES[i].name,
                  (long long)st.compiles, st.last_reason);
        em_compiled_free(f);
        em_unet2d_free(u);
        em_test_bundle_free(b);
    }
    em_ctx_free(c);
}

static void test_pipeline_index(void) {
    em_ctx *c = em_ctx_create();
    em_pipeline_index idx;
    CHECK(em_pipeline_index_load(c, em_test_fixture_path("diffusion", "ddpm_attn"), &idx) == EM_OK);
    CHECK(idx.pipeline == EM_PIPELINE_DDPM);
    CHECK(!strcmp(idx.class_name, "DDPMPipeline"));
    CHECK(!strcmp(idx.unet_class, "UNet2DModel"));
    CHECK(!strcmp(idx.scheduler_class, "DDPMScheduler"));
    CHECK(!strcmp(idx.diffusers_version, "0.42.1"));
    CHECK(idx.scheduler_config && strstr(idx.scheduler_config, "scheduler/scheduler_config.json"));
    CHECK(idx.unet_dir && strstr(idx.unet_dir, "ddpm_attn/unet"));
    em_pipeline_index_free(&idx);
    CHECK(em_pipeline_index_load(c, em_test_fixture_path("diffusion", "ddim_three"), &idx) == EM_OK);
    CHECK(idx.pipeline == EM_PIPELINE_DDIM);
    CHECK(!strcmp(idx.scheduler_class, "DDIMScheduler"));
    CHECK(!strcmp(em_pipeline_class_name(idx.pipeline), "DDIMPipeline"));
    em_pipeline_index_free(&idx);
    /* the config as diffusers fills it */
    em_unet2d_config cfg;
    CHECK(em_unet2d_config_load(c, em_test_fixture_path("diffusion", "ddpm_scale_shift/unet"),
                                &cfg) == EM_OK);
    CHECK(cfg.scale_shift && !cfg.flip_sin_to_cos && cfg.freq_shift == 1.0);
    CHECK(cfg.downsample_padding == 0 && cfg.center_input_sample && cfg.attention_head_dim == 0);
    CHECK(cfg.sample_size[0] == 8 && cfg.sample_size[1] == 8 && cfg.time_embed_dim == 16);
    CHECK(cfg.n_blocks == 2 && cfg.down_blocks[0] == EM_UNET2D_BLOCK_ATTN);
    em_ctx_free(c);
}

/* ---- bad folders: a scratch folder with files written by the test ---- */

static void test_bad_model_index(void) {
    const char *scratch = em_test_scratch_make("unet");
    if (!scratch) return;
    em_ctx *c = em_ctx_create();
    em_pipeline_index idx;
    /* no model_index.json at all */
    CHECK(em_pipeline_index_load(c, scratch, &idx) == EM_ERR_NOT_FOUND);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "model_index.json");
    em_test_scratch_write("model_index.json", "{\"_class_name\": \"DDPMPipeline\", \"unet\": [");
    CHECK(em_pipeline_index_load(c, scratch, &idx) == EM_ERR_FORMAT);
    CHECK_ERR(c, EM_ERR_FORMAT, "model_index.json", "not valid JSON");
    em_test_scratch_write("model_index.json", "{\"_class_name\": \"FancyPipeline\"}");
    CHECK(em_pipeline_index_load(c, scratch, &idx) == EM_ERR_UNSUPPORTED);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "model_index.json", "'FancyPipeline'");
    em_test_scratch_write("model_index.json", "{\"_class_name\": \"DDPMPipeline\", "
                                   "\"unet\": [\"diffusers\", \"UNet2DModel\"], "
                                   "\"scheduler\": [\"diffusers\", \"DDPMScheduler\"]}");
    CHECK(em_pipeline_index_load(c, scratch, &idx) == EM_ERR_NOT_FOUND);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "model_index.json", "'unet'", "does not exist");
    em_test_scratch_write("model_index.json", "{\"_class_name\": \"DDIMPipeline\", "
                                   "\"scheduler\": [\"diffusers\", \"DDIMScheduler\"]}");
    CHECK(em_pipeline_index_load(c, scratch, &idx) == EM_ERR_NOT_FOUND);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "model_index.json", "needs a 'unet' component");
    em_test_scratch_write("model_index.json", "{\"_class_name\": \"DDPMPipeline\", \"unet\": 3}");
    CHECK(em_pipeline_index_load(c, scratch, &idx) == EM_ERR_FORMAT);
    CHECK_ERR(c, EM_ERR_FORMAT, "model_index.json", "component 'unet'");
    CHECK(idx.dir == NULL); /* zeroed on failure */
    em_ctx_free(c);
    em_test_scratch_remove();
}

/* The ddpm_attn UNet's weights with config.json replaced by `config`. */
static em_unet2d *load_with_config(em_ctx *c, const char *config) {
    unlink(em_test_scratch_path("config.json"));
    em_test_scratch_write("config.json", config);
    if (access(em_test_scratch_path("diffusion_pytorch_model.safetensors"), F_OK) != 0)
        em_test_scratch_link("diffusion_pytorch_model.safetensors", "diffusion",
                             "ddpm_attn/unet/diffusion_pytorch_model.safetensors");
    return em_unet2d_load(c, em_test_scratch_dir(), NULL);
}

#define GOOD_CONFIG_HEAD                                                                           \
    "{\"_class_name\": \"UNet2DModel\", \"sample_size\": 16, \"in_channels\": 3, "                 \
    "\"out_channels\": 3, \"layers_per_block\": 1, \"norm_num_groups\": 4, "                       \
    "\"attention_head_dim\": 4, "
#define GOOD_BLOCKS                                                                                \
    "\"block_out_channels\": [8, 16], \"down_block_types\": [\"DownBlock2D\", "                    \
    "\"AttnDownBlock2D\"], \"up_block_types\": [\"AttnUpBlock2D\", \"UpBlock2D\"]"

static void test_bad_config(void) {
    const char *scratch = em_test_scratch_make("unet");
    if (!scratch) return;
    em_ctx *c = em_ctx_create();
    /* the folder as saved loads (the control for the cases below) */
    em_unet2d *u = load_with_config(c, GOOD_CONFIG_HEAD GOOD_BLOCKS "}");
    CHECK_MSG(u != NULL, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    em_unet2d_free(u);
    em_ctx_clear_error(c);
    /* a missing field takes diffusers' default, which the weights then contradict */
    CHECK(load_with_config(c, GOOD_CONFIG_HEAD "\"down_block_types\": [\"DownBlock2D\", "
                              "\"AttnDownBlock2D\"], \"up_block_types\": [\"AttnUpBlock2D\", "
                              "\"UpBlock2D\"]}") == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "config.json", "block_out_channels");
    CHECK(load_with_config(c, GOOD_CONFIG_HEAD "\"block_out_channels\": [8, 16, 32], "
                              "\"down_block_types\": [\"DownBlock2D\", \"AttnDownBlock2D\", "
                              "\"DownBlock2D\"], \"up_block_types\": [\"UpBlock2D\", "
                              "\"AttnUpBlock2D\", \"UpBlock2D\"]}") == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "down_blocks.1.downsamplers.0.conv.weight", "is missing");
    CHECK(load_with_config(c, GOOD_CONFIG_HEAD "\"block_out_channels\": [8, 16], "
                              "\"down_block_types\": [\"DownBlock2D\", \"CrossAttnDownBlock2D\"], "
                              "\"up_block_types\": [\"AttnUpBlock2D\", \"UpBlock2D\"]}") == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "'CrossAttnDownBlock2D' is not supported", "config.json");
    CHECK(load_with_config(c, GOOD_CONFIG_HEAD GOOD_BLOCKS
                           ", \"resnet_time_scale_shift\": \"ada_group\"}") == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "UNet2DModel: resnet_time_scale_shift 'ada_group' is not "
                                     "supported");
    CHECK(load_with_config(c, GOOD_CONFIG_HEAD GOOD_BLOCKS ", \"act_fn\": \"mish\"}") == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "act_fn 'mish'");
    CHECK(load_with_config(c, GOOD_CONFIG_HEAD GOOD_BLOCKS
                           ", \"class_embed_type\": \"projection\"}") == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "class_embed_type 'projection'");
    CHECK(load_with_config(c, GOOD_CONFIG_HEAD GOOD_BLOCKS ", \"layers_per_block\": \"1\"}") ==
          NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "'layers_per_block' is a string, expected an integer");
    CHECK(load_with_config(c, GOOD_CONFIG_HEAD GOOD_BLOCKS ", \"layers_per_block\": 2}") == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "down_blocks.0.resnets.1.norm1.weight", "is missing");
    CHECK(load_with_config(c, GOOD_CONFIG_HEAD GOOD_BLOCKS ", \"in_channels\": 4}") == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "conv_in.weight", "[8, 3, 3, 3]", "[8, 4, 3, 3]");
    /* a UNet2DConditionModel config takes its own defaults (SD 1.x's widths) */
    CHECK(load_with_config(c, "{\"_class_name\": \"UNet2DConditionModel\"}") == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "UNet2DConditionModel", "conv_in.weight", "[320, 4, 3, 3]");
    CHECK(load_with_config(c, "[1, 2]") == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "config.json", "not a JSON object");
    CHECK(em_unet2d_load(c, "/nonexistent/unet", NULL) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "/nonexistent/unet/config.json");
    em_ctx_free(c);
    em_test_scratch_remove();
}

static em_unet2d *load_cond_with_config(em_ctx *c, const char *extra) {
    char config[2048];
    snprintf(config, sizeof config,
             "{\"_class_name\": \"UNet2DConditionModel\", \"sample_size\": 8, "
             "\"block_out_channels\": [8, 16], \"layers_per_block\": 1, \"norm_num_groups\": 4, "
             "\"cross_attention_dim\": 12, \"attention_head_dim\": 2, "
             "\"down_block_types\": [\"CrossAttnDownBlock2D\", \"DownBlock2D\"], "
             "\"up_block_types\": [\"UpBlock2D\", \"CrossAttnUpBlock2D\"]%s}", extra);
    unlink(em_test_scratch_path("config.json"));
    em_test_scratch_write("config.json", config);
    if (access(em_test_scratch_path("diffusion_pytorch_model.safetensors"), F_OK) != 0)
        em_test_scratch_link("diffusion_pytorch_model.safetensors", "diffusion",
                             "unet_cond/diffusion_pytorch_model.safetensors");
    return em_unet2d_load(c, em_test_scratch_dir(), NULL);
}

/* UNet2DConditionModel configs: what Ember does not implement is refused by name */
static void test_bad_cond_config(void) {
    const char *scratch = em_test_scratch_make("unet_cond");
    if (!scratch) return;
    em_ctx *c = em_ctx_create();
    em_unet2d *u = load_cond_with_config(c, "");
    CHECK_MSG(u != NULL, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    CHECK(u && em_unet2d_get_config(u)->conditional && em_unet2d_get_config(u)->mid_cross_attn);
    em_unet2d_free(u);
    em_ctx_clear_error(c);
    static const struct {
        const char *extra;
        em_status st;
        const char *msg;
    } BAD[] = {
        {", \"only_cross_attention\": true", EM_ERR_UNSUPPORTED, "only_cross_attention 'true'"},
        {", \"only_cross_attention\": [false, true]", EM_ERR_UNSUPPORTED, "only_cross_attention"},
        {", \"dual_cross_attention\": true", EM_ERR_UNSUPPORTED, "dual_cross_attention"},
        {", \"addition_embed_type\": \"image\"", EM_ERR_UNSUPPORTED,
         "addition_embed_type 'image'"},
        /* text_time (SDXL, tests/test_sdxl_pipeline.c) needs its two sizes */
        {", \"addition_embed_type\": \"text_time\"", EM_ERR_FORMAT,
         "needs addition_time_embed_dim"},
        {", \"class_embed_type\": \"timestep\"", EM_ERR_UNSUPPORTED, "class_embed_type"},
        {", \"num_attention_heads\": 4", EM_ERR_UNSUPPORTED, "num_attention_heads '4'"},
        {", \"time_cond_proj_dim\": 8", EM_ERR_UNSUPPORTED, "time_cond_proj_dim"},
        {", \"encoder_hid_dim\": 8", EM_ERR_UNSUPPORTED, "encoder_hid_dim"},
        {", \"mid_block_type\": \"UNetMidBlock2DSimpleCrossAttn\"", EM_ERR_UNSUPPORTED,
         "mid_block_type 'UNetMidBlock2DSimpleCrossAttn'"},
        {", \"attention_type\": \"gated\"", EM_ERR_UNSUPPORTED, "attention_type 'gated'"},
        {", \"time_embedding_type\": \"fourier\"", EM_ERR_UNSUPPORTED,
         "time_embedding_type 'fourier'"},
        {", \"resnet_out_scale_factor\": 2.0", EM_ERR_UNSUPPORTED, "resnet_out_scale_factor"},
        {", \"layers_per_block\": [1, 1]", EM_ERR_UNSUPPORTED, "layers_per_block 'a list'"},
        {", \"cross_attention_dim\": [12, 12]", EM_ERR_UNSUPPORTED, "cross_attention_dim"},
        {", \"transformer_layers_per_block\": [[1], [1]]", EM_ERR_UNSUPPORTED, "nested"},
        {", \"attention_head_dim\": [2, 2, 2]", EM_ERR_FORMAT, "'attention_head_dim' has 3"},
        {", \"attention_head_dim\": 32", EM_ERR_FORMAT, "32 attention heads"},
        {", \"conv_in_kernel\": 2", EM_ERR_FORMAT, "odd"},
        /* values the weights contradict: both shapes named */
        {", \"cross_attention_dim\": 16", EM_ERR_SHAPE, "attn2.to_k.weight"},
        {", \"transformer_layers_per_block\": 2", EM_ERR_NOT_FOUND, "transformer_blocks.1"},
        {", \"use_linear_projection\": true", EM_ERR_SHAPE, "proj_in.weight"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        /* the block names go before the extras, so a later key wins as JSON's last one does */
        CHECK_MSG(load_cond_with_config(c, BAD[i].extra) == NULL, "%s", BAD[i].extra);
        CHECK_ERR(c, BAD[i].st, BAD[i].msg);
    }
    CHECK(load_cond_with_config(c, ", \"down_block_types\": [\"AttnDownBlock2D\", "
                                   "\"DownBlock2D\"]") == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "'AttnDownBlock2D' is not supported",
              "CrossAttnDownBlock2D");
    em_unet2d_options o = em_unet2d_default_options();
    o.dtype = EM_BF16;
    u = load_cond_with_config(c, ", \"upcast_attention\": true"); /* f32: loads */
    CHECK_MSG(u != NULL, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    em_unet2d_free(u);
    em_ctx_clear_error(c);
    CHECK(em_unet2d_load(c, em_test_scratch_dir(), &o) == NULL); /* bf16: refused */
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "upcast_attention");
    em_ctx_free(c);
    em_test_scratch_remove();
}

static void test_bad_cond_inputs(void) {
    em_ctx *c = em_ctx_create();
    em_unet2d *u = em_unet2d_load(c, em_test_fixture_path("diffusion", "unet_cond"), NULL);
    CHECK(u != NULL);
    if (!u) {
        em_ctx_free(c);
        return;
    }
    em_tensor *t = em_scalar(c, 10.0, EM_F32);
    em_tensor *x = em_zeros(c, EM_F32, 4, (int64_t[]){2, 4, 8, 8});
    em_tensor *ehs = em_zeros(c, EM_F32, 3, (int64_t[]){2, 7, 12});
    CHECK(em_unet2d_forward(c, u, x, t, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "UNet2DConditionModel", "em_unet2d_forward_cond");
    CHECK(em_unet2d_forward_cond(c, u, x, t, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "encoder_hidden_states [N, L, 12]");
    em_tensor *wide = em_zeros(c, EM_F32, 3, (int64_t[]){2, 7, 16});
    CHECK(em_unet2d_forward_cond(c, u, x, t, wide) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "encoder_hidden_states", "[2, L, 12]");
    em_tensor *one = em_zeros(c, EM_F32, 3, (int64_t[]){1, 7, 12});
    CHECK(em_unet2d_forward_cond(c, u, x, t, one) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "encoder_hidden_states", "[2, L, 12]");
    em_tensor *bf = em_zeros(c, EM_BF16, 3, (int64_t[]){2, 7, 12});
    CHECK(em_unet2d_forward_cond(c, u, x, t, bf) == NULL);
    CHECK_ERR(c, EM_ERR_DTYPE, "encoder_hidden_states");
    em_tensor *y = em_unet2d_forward_cond(c, u, x, t, ehs);
    CHECK(y && em_tensor_dim(y, 0) == 2 && em_tensor_dim(y, 1) == 4 && em_tensor_dim(y, 3) == 8);
    em_unet2d_free(u);
    /* and a UNet2DModel refuses the conditional call */
    u = em_unet2d_load(c, em_test_fixture_path("diffusion", "ddpm_attn/unet"), NULL);
    em_tensor *x3 = em_zeros(c, EM_F32, 4, (int64_t[]){2, 3, 16, 16});
    CHECK(u && em_unet2d_forward_cond(c, u, x3, t, ehs) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "UNet2DModel", "no encoder_hidden_states");
    em_unet2d_free(u);
    em_ctx_free(c);
}

static void test_bad_inputs(void) {
    em_ctx *c = em_ctx_create();
    em_unet2d *u = em_unet2d_load(c, em_test_fixture_path("diffusion", "ddpm_attn/unet"), NULL);
    CHECK(u != NULL);
    if (!u) {
        em_ctx_free(c);
        return;
    }
    em_tensor *t = em_scalar(c, 10.0, EM_F32);
    em_tensor *x4 = em_zeros(c, EM_F32, 4, (int64_t[]){1, 4, 16, 16});
    CHECK(em_unet2d_forward(c, u, x4, t, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "4 channels", "in_channels = 3");
    em_tensor *x3 = em_zeros(c, EM_F32, 3, (int64_t[]){3, 16, 16});
    CHECK(em_unet2d_forward(c, u, x3, t, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "sample must be [N, C, H, W]");
    em_tensor *odd = em_zeros(c, EM_F32, 4, (int64_t[]){1, 3, 15, 16});
    CHECK(em_unet2d_forward(c, u, odd, t, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "multiples of 2");
    em_tensor *x = em_zeros(c, EM_F32, 4, (int64_t[]){2, 3, 16, 16});
    em_tensor *t3 = em_zeros(c, EM_F32, 1, (int64_t[]){3});
    CHECK(em_unet2d_forward(c, u, x, t3, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "timestep", "N = 2");
    em_tensor *labels = em_zeros(c, EM_I64, 1, (int64_t[]){2});
    CHECK(em_unet2d_forward(c, u, x, t, labels) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "no class embedding");
    em_tensor *xb = em_zeros(c, EM_BF16, 4, (int64_t[]){2, 3, 16, 16});
    CHECK(em_unet2d_forward(c, u, xb, t, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_DTYPE, "f32");
    /* and a good call after all that */
    em_tensor *y = em_unet2d_forward(c, u, x, t, NULL);
    CHECK(y && em_tensor_dim(y, 0) == 2 && em_tensor_dim(y, 1) == 3 && em_tensor_dim(y, 3) == 16);
    em_unet2d_free(u);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_unet_matches_diffusers), T(test_bad_cond_config), T(test_bad_cond_inputs), T(test_unet_compiled), T(test_pipeline_index), T(test_bad_model_index),
             T(test_bad_config), T(test_bad_inputs), T(test_unet_on_xla))

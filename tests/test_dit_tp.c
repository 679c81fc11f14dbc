/*
 * Tensor parallelism of the DiT transformer (em_dit_load_tp, em_pipeline_options.tp) over MPI
 * (tests/CMakeLists.txt runs it under `mpirun -np 2`): each rank keeps half the heads and half
 * the feed-forward of every block. The transformer's output must match the one-process model's
 * within 1e-5 and diffusers' (tests/fixtures/diffusion/dit_*_ref, scripts/gen_dit_fixtures.py)
 * within 1e-4; a guided DiTPipeline run the one-process run's image within 1e-5 and diffusers'
 * within 1e-3 (test_dit's tolerance). Sizes that do not divide by the degree and pipelines
 * other than DiT, SD3 and Flux are refused naming them; so are the SD3 and Flux transformers
 * split both ways, or their image tokens not divisible by the ranks. Alone (a world of one) it checks the same without
 * splitting.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

static em_dist *G;

static const char *msg(em_ctx *c) { return em_ctx_error(c) ? em_ctx_error(c)->message : ""; }

/* the transformer fixture `name` (dir under fixtures/diffusion) split over G and whole: its
 * heads and feed-forward (tensor parallelism) or, with cp, its tokens (context parallelism) */
static void check_transformer(const char *name, const char *dir, bool cp) {
    char rel[128], what[160];
    snprintf(rel, sizeof rel, "diffusion/%s_ref", name);
    em_test_bundle *b = em_test_bundle_load(rel);
    em_ctx *c = em_ctx_create();
    const char *path = em_test_fixture_path("diffusion", dir);
    em_dit *split = em_dit_load_tp(c, path, NULL, EM_F32, cp ? NULL : G);
    if (cp && split) CHECK_MSG(em_dit_set_context_parallel(c, split, G) == EM_OK, "%s", msg(c));
    em_dit *whole = em_dit_load(c, path, NULL, EM_F32);
    CHECK_MSG(b && split && whole, "%s: %s", name, msg(c));
    if (b && split && whole) {
        int n = em_dist_world_size(G);
        CHECK(em_dit_tp_degree(split) == (cp ? 1 : n) && em_dit_tp_degree(whole) == 1);
        CHECK(em_dit_cp_degree(split) == (cp ? n : 1) && em_dit_cp_degree(whole) == 1);
        em_scope_push(c);
        em_tensor *x = em_test_bundle_get(b, c, "sample");
        em_tensor *labels = em_test_bundle_get(b, c, "class_labels");
        const char *ts[] = {"t0", "t1", "tvec"}, *outs[] = {"out0", "out1", "out_vec"};
        for (int k = 0; k < 3; k++) {
            em_tensor *t = em_test_bundle_get(b, c, ts[k]);
            em_tensor *got = em_dit_forward(c, split, x, t, labels);
            CHECK_MSG(got != NULL, "%s: %s", name, msg(c));
            snprintf(what, sizeof what, "%s %s at %s degree %d vs one process", name, ts[k],
                     cp ? "context" : "tensor", n);
            em_test_allclose(c, got, em_dit_forward(c, whole, x, t, labels), 1e-5, 1e-5, what);
            snprintf(what, sizeof what, "%s %s at %s degree %d vs diffusers", name, ts[k],
                     cp ? "context" : "tensor", n);
            em_test_allclose(c, got, em_test_bundle_get(b, c, outs[k]), 1e-4, 1e-4, what);
        }
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
        em_scope_pop(c);
    }
    em_dit_free(split);
    em_dit_free(whole);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

static void test_transformer_split(void) {
    check_transformer("dit_pipe", "dit_pipe/transformer", false); /* gelu-approximate, biases */
    check_transformer("dit_geglu", "dit_geglu", false); /* geglu's fused [hidden; gate] */
}

static void test_transformer_context(void) {
    check_transformer("dit_pipe", "dit_pipe/transformer", true);
    check_transformer("dit_geglu", "dit_geglu", true);
}

/* scripts/gen_dit_fixtures.py's run "cfg" (label 7, guidance 4, 6 DDIM steps, seed 0), split
 * and in one process, eager and compiled */
static void check_pipeline(bool cp) {
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/dit_runs_ref");
    const char *dir = em_test_fixture_path("diffusion", "dit_pipe");
    em_pipeline_options po = em_pipeline_default_options();
    *(cp ? &po.cp : &po.tp) = G;
    em_pipeline *split = em_pipeline_load(c, dir, &po);
    em_pipeline *whole = em_pipeline_load(c, dir, NULL);
    CHECK_MSG(b && split && whole, "%s", msg(c));
    if (b && split && whole) {
        int n = em_dist_world_size(G);
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.class_label = 7;
        rp.guidance_scale = 4.0;
        rp.steps = 6;
        rp.seed = 0;
        char what[128];
        em_tensor *one = em_pipeline_run(c, whole, &rp);
        for (int compile = 0; compile < 2; compile++) {
            rp.compile = compile;
            em_tensor *img = em_pipeline_run(c, split, &rp);
            CHECK_MSG(img != NULL, "%s", msg(c));
            snprintf(what, sizeof what, "DiTPipeline 'cfg' at %s degree %d%s vs one process",
                     cp ? "context" : "tensor", n, compile ? ", compiled" : "");
            em_test_allclose(c, img, one, 1e-5, 1e-5, what);
            snprintf(what, sizeof what, "DiTPipeline 'cfg' at %s degree %d%s vs diffusers",
                     cp ? "context" : "tensor", n, compile ? ", compiled" : "");
            em_test_allclose(c, img, em_test_bundle_get(b, c, "cfg_image"), 1e-3, 0, what);
        }
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
        em_scope_pop(c);
    }
    em_pipeline_free(split);
    em_pipeline_free(whole);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

static void test_pipeline_split(void) { check_pipeline(false); }
static void test_pipeline_context(void) { check_pipeline(true); }

/* 3 heads over 2 ranks; a DDIMPipeline (no transformer) with a group of two; both kinds of
 * parallelism at once; 9 patches over 2 ranks */
static void test_refused(void) {
    int n = em_dist_world_size(G);
    em_ctx *c = em_ctx_create();
    if (n != 2) { /* the sizes below are for a degree of 2; alone nothing is split */
        em_pipeline_options po = em_pipeline_default_options();
        po.tp = G;
        em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", "ddim_three"),
                                          &po);
        CHECK_MSG(p != NULL, "a group of one: %s", msg(c));
        em_pipeline_free(p);
        em_ctx_free(c);
        return;
    }
    if (em_test_scratch_make("dit_tp")) {
        em_test_scratch_write("config.json",
                              "{\"_class_name\": \"DiTTransformer2DModel\", "
                              "\"num_attention_heads\": 3, \"attention_head_dim\": 4, "
                              "\"in_channels\": 4, \"num_layers\": 1, \"sample_size\": 4, "
                              "\"patch_size\": 2, \"num_embeds_ada_norm\": 10}");
        CHECK(em_dit_load_tp(c, em_test_scratch_dir(), NULL, EM_F32, G) == NULL);
        CHECK_ERR(c, EM_ERR_SHAPE, "num_attention_heads (3)", "not divisible by the degree 2");
        em_test_scratch_remove();
    }
    CHECK(em_dit_load_tp(c, em_test_fixture_path("diffusion", "dit_geglu"), "xla:0", EM_F32,
                         G) == NULL);
    CHECK(em_ctx_status(c) != EM_OK);
    em_ctx_clear_error(c);
    em_pipeline_options po = em_pipeline_default_options();
    po.tp = G;
    CHECK(em_pipeline_load(c, em_test_fixture_path("diffusion", "ddim_three"), &po) == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "done for the transformers of DiTPipeline, "
              "StableDiffusion3Pipeline and FluxPipeline only", "DDIMPipeline");
    po = em_pipeline_default_options();
    po.cp = G;
    CHECK(em_pipeline_load(c, em_test_fixture_path("diffusion", "ddim_three"), &po) == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "context parallelism", "DDIMPipeline");
    em_dit *d = em_dit_load_tp(c, em_test_fixture_path("diffusion", "dit_geglu"), NULL, EM_F32,
                               G);
    CHECK_MSG(d != NULL, "%s", msg(c));
    if (d) {
        CHECK(em_dit_set_context_parallel(c, d, G) == EM_ERR_INVALID_ARG);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "its group is the one of its tensor parallelism",
                  "em_dist_mesh2d");
    }
    em_dit_free(d);
    /* a 3 x 3 latent in patches of 1 (dit_geglu's): 9 tokens */
    d = em_dit_load(c, em_test_fixture_path("diffusion", "dit_geglu"), NULL, EM_F32);
    if (d && em_dit_set_context_parallel(c, d, G) == EM_OK) {
        const em_dit_config *cfg = em_dit_get_config(d);
        em_scope_push(c);
        em_tensor *x = em_zeros(c, EM_F32, 4, (int64_t[]){1, cfg->in_channels, 3, 3});
        float t = 10;
        em_tensor *ts = em_from_host(c, EM_F32, 0, NULL, &t);
        int64_t label = 1;
        em_tensor *lab = em_from_host(c, EM_I64, 1, (int64_t[]){1}, &label);
        em_tensor *y = em_dit_forward(c, d, x, ts, lab);
        CHECK_MSG(y == NULL, "9 patches over 2 ranks ran");
        CHECK_ERR(c, EM_ERR_SHAPE, "9 patches (3 x 3) do not divide over 2 ranks");
        em_scope_pop(c);
    }
    CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
    em_dit_free(d);
    em_ctx_free(c);
}

/* The MMDiT transformers (sd3_tiny, flux_tiny; their images are check_image_tp.py's): split by
 * tensor parallelism, context parallelism over the same group refused (both at once take two
 * groups: test_diffusion_cp_hybrid.c runs them); split by context
 * parallelism, image tokens that do not divide over the ranks refused naming them. */
static void test_mmdit_refused(void) {
    if (em_dist_world_size(G) != 2) {
        em_test_skip("the MMDiT refusals need 2 ranks (mpirun -np 2: dit_tp_mpi2)");
        return;
    }
    em_ctx *c = em_ctx_create();
    const char *sd3 = em_test_fixture_path("diffusion", "sd3_tiny/transformer");
    const char *flux = em_test_fixture_path("diffusion", "flux_tiny/transformer");
    em_sd3 *s = em_sd3_load_tp(c, sd3, NULL, EM_F32, G);
    CHECK_MSG(s && em_sd3_tp_degree(s) == 2 && em_sd3_cp_degree(s) == 1, "%s", msg(c));
    if (s) {
        CHECK(em_sd3_set_context_parallel(c, s, G) == EM_ERR_INVALID_ARG);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "its group is the one of its tensor parallelism");
    }
    em_sd3_free(s);
    em_flux *f = em_flux_load_tp(c, flux, NULL, EM_F32, G);
    CHECK_MSG(f && em_flux_tp_degree(f) == 2, "%s", msg(c));
    if (f) {
        CHECK(em_flux_set_context_parallel(c, f, G) == EM_ERR_INVALID_ARG);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "its group is the one of its tensor parallelism");
    }
    em_flux_free(f);
    /* context parallelism: 3 x 3 patches of a 6 x 6 SD3 latent, 3 Flux tokens over 2 ranks */
    s = em_sd3_load(c, sd3, NULL, EM_F32);
    if (s && em_sd3_set_context_parallel(c, s, G) == EM_OK) {
        CHECK(em_sd3_cp_degree(s) == 2);
        const em_sd3_config *cfg = em_sd3_get_config(s);
        em_scope_push(c);
        em_tensor *x = em_zeros(c, EM_F32, 4, (int64_t[]){1, cfg->in_channels, 6, 6});
        em_tensor *ctx = em_zeros(c, EM_F32, 3, (int64_t[]){1, 2, cfg->joint_attention_dim});
        em_tensor *pooled = em_zeros(c, EM_F32, 2, (int64_t[]){1, cfg->pooled_projection_dim});
        float t = 10;
        em_tensor *ts = em_from_host(c, EM_F32, 0, NULL, &t);
        CHECK(em_sd3_forward(c, s, x, ctx, pooled, ts) == NULL);
        CHECK_ERR(c, EM_ERR_SHAPE, "9 patches (3 x 3) do not divide over 2 ranks");
        em_scope_pop(c);
    }
    CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
    em_sd3_free(s);
    f = em_flux_load(c, flux, NULL, EM_F32);
    if (f && em_flux_set_context_parallel(c, f, G) == EM_OK) {
        const em_flux_config *cfg = em_flux_get_config(f);
        em_scope_push(c);
        float t = 0.5f;
        em_flux_inputs in = {
            .hidden_states = em_zeros(c, EM_F32, 3, (int64_t[]){1, 3, cfg->in_channels}),
            .encoder_hidden_states =
                em_zeros(c, EM_F32, 3, (int64_t[]){1, 2, cfg->joint_attention_dim}),
            .pooled_projections =
                em_zeros(c, EM_F32, 2, (int64_t[]){1, cfg->pooled_projection_dim}),
            .timestep = em_from_host(c, EM_F32, 0, NULL, &t),
            .guidance = em_from_host(c, EM_F32, 0, NULL, &t),
            .img_ids = em_zeros(c, EM_F32, 2, (int64_t[]){3, cfg->n_axes}),
            .txt_ids = em_zeros(c, EM_F32, 2, (int64_t[]){2, cfg->n_axes}),
        };
        CHECK(em_flux_forward(c, f, &in) == NULL);
        CHECK_ERR(c, EM_ERR_SHAPE, "3 image tokens do not divide over 2 ranks");
        em_scope_pop(c);
    }
    CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
    em_flux_free(f);
    em_ctx_free(c);
}

int main(int argc, char **argv) {
    static const em_test_case tests[] = {T(test_transformer_split), T(test_transformer_context),
                                         T(test_pipeline_split), T(test_pipeline_context),
                                         T(test_refused), T(test_mmdit_refused)};
    return em_test_run_in_group(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv, &G);
}

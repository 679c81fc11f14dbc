/*
 * diffusers' unified context parallelism, ContextParallelConfig(ring_degree=2, ulysses_degree=2)
 * (em_dit_set_cp_degrees, em_sd3_..., em_flux_..., em_pipeline_options.cp_ring_degree): Ulysses'
 * all-to-all inside ranks {0, 1} and {2, 3}, the ring across {0, 2} and {1, 3} on their heads.
 * Run by ctest under `mpirun -np 4` (diffusion_cp_hybrid_mpi4): the DiT, SD3 and Flux
 * transformers (the tiny models of test_diffusion_cp.c: 2 heads, 16, 16 and 24 image tokens)
 * must give the one-process model's output within 1e-5 and diffusers' (the *_ref bundles)
 * within 1e-4, a DiTPipeline run (dit_runs_ref's "cfg") the one-process image within 1e-5 and
 * diffusers' within 1e-3, eager and compiled; the world group carries no all-to-all and no ring
 * shift (they go over the mesh's sub-groups). Then the refusals: degrees whose product is not
 * the world, ring 1 x Ulysses 4 on 2 heads. Alone (a world of one) only the refusals that need
 * no group run.
 */
#include <stdio.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

static em_dist *G;

static const char *msg(em_ctx *c) { return em_ctx_error(c) ? em_ctx_error(c)->message : ""; }

static bool four(void) {
    if (em_dist_world_size(G) == 4) return true;
    em_test_skip("ring 2 x Ulysses 2 needs 4 ranks (mpirun -np 4); this run has %d",
                 em_dist_world_size(G));
    return false;
}

/* Neither an all-to-all nor a ring shift went over the world group since the reset. */
static void world_quiet(const char *what) {
    em_dist_stats st;
    em_dist_stats_get(G, &st);
    CHECK_MSG(st.calls_by_op[3] == 0 && st.calls_by_op[4] == 0,
              "%s: %lld all-to-alls, %lld ring shifts over the world group", what,
              (long long)st.calls_by_op[3], (long long)st.calls_by_op[4]);
}

static void check_dit(const char *name, const char *dir) {
    char rel[128], what[160];
    snprintf(rel, sizeof rel, "diffusion/%s_ref", name);
    em_test_bundle *b = em_test_bundle_load(rel);
    em_ctx *c = em_ctx_create();
    const char *path = em_test_fixture_path("diffusion", dir);
    em_dit *split = em_dit_load(c, path, NULL, EM_F32), *whole = em_dit_load(c, path, NULL, EM_F32);
    /* the degrees before the group, as a caller may */
    CHECK_MSG(split && em_dit_set_cp_degrees(c, split, 2, 2) == EM_OK &&
              em_dit_set_context_parallel(c, split, G) == EM_OK, "%s", msg(c));
    CHECK_MSG(b && split && whole, "%s: %s", name, msg(c));
    if (b && split && whole && !em_ctx_status(c)) {
        em_scope_push(c);
        em_tensor *x = em_test_bundle_get(b, c, "sample");
        em_tensor *labels = em_test_bundle_get(b, c, "class_labels");
        em_tensor *t = em_test_bundle_get(b, c, "t1");
        em_tensor *one = em_dit_forward(c, whole, x, t, labels);
        em_dist_stats_reset(G);
        em_tensor *got = em_dit_forward(c, split, x, t, labels);
        snprintf(what, sizeof what, "%s t1, ring 2 x ulysses 2", name);
        CHECK_MSG(got != NULL, "%s: %s", what, msg(c));
        world_quiet(what);
        em_test_allclose(c, got, one, 1e-5, 1e-5, what);
        em_test_allclose(c, got, em_test_bundle_get(b, c, "out1"), 1e-4, 1e-4, what);
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
        em_scope_pop(c);
    }
    em_dit_free(split);
    em_dit_free(whole);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

static void test_dit(void) {
    if (!four()) return;
    check_dit("dit_pipe", "dit_pipe/transformer");
    check_dit("dit_geglu", "dit_geglu");
}

static void test_sd3(void) {
    if (!four()) return;
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/sd3_tiny_ref");
    const char *path = em_test_fixture_path("diffusion", "sd3_tiny/transformer");
    em_sd3 *split = em_sd3_load(c, path, NULL, EM_F32), *whole = em_sd3_load(c, path, NULL, EM_F32);
    CHECK_MSG(b && split && whole && em_sd3_set_context_parallel(c, split, G) == EM_OK &&
              em_sd3_set_cp_degrees(c, split, 2, 2) == EM_OK, "%s", msg(c));
    if (b && split && whole && !em_ctx_status(c)) {
        em_scope_push(c);
        em_tensor *x = em_test_bundle_get(b, c, "tf_sample");
        em_tensor *ehs = em_test_bundle_get(b, c, "tf_ehs");
        em_tensor *pooled = em_test_bundle_get(b, c, "tf_pooled");
        em_tensor *t = em_test_bundle_get(b, c, "tf_t1");
        em_dist_stats_reset(G);
        em_tensor *got = em_sd3_forward(c, split, x, ehs, pooled, t);
        CHECK_MSG(got != NULL, "sd3: %s", msg(c));
        world_quiet("sd3_tiny");
        em_test_allclose(c, got, em_sd3_forward(c, whole, x, ehs, pooled, t), 1e-5, 1e-5,
                         "sd3_tiny t1, ring 2 x ulysses 2");
        em_test_allclose(c, got, em_test_bundle_get(b, c, "tf_out1"), 1e-4, 1e-4,
                         "sd3_tiny t1 vs diffusers, ring 2 x ulysses 2");
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
        em_scope_pop(c);
    }
    em_sd3_free(split);
    em_sd3_free(whole);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

static void test_flux(void) {
    if (!four()) return;
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/flux_tiny_ref");
    const char *path = em_test_fixture_path("diffusion", "flux_tiny/transformer");
    em_flux *split = em_flux_load(c, path, NULL, EM_F32);
    em_flux *whole = em_flux_load(c, path, NULL, EM_F32);
    CHECK_MSG(b && split && whole && em_flux_set_context_parallel(c, split, G) == EM_OK &&
              em_flux_set_cp_degrees(c, split, 2, 2) == EM_OK, "%s", msg(c));
    if (b && split && whole && !em_ctx_status(c)) {
        em_scope_push(c);
        em_flux_inputs in = {.hidden_states = em_test_bundle_get(b, c, "tf_hidden"),
                             .encoder_hidden_states = em_test_bundle_get(b, c, "tf_ehs"),
                             .pooled_projections = em_test_bundle_get(b, c, "tf_pooled"),
                             .img_ids = em_test_bundle_get(b, c, "tf_img_ids"),
                             .txt_ids = em_test_bundle_get(b, c, "tf_txt_ids"),
                             .timestep = em_test_bundle_get(b, c, "tf_t1")};
        if (em_flux_get_config(split)->guidance_embeds)
            in.guidance = em_test_bundle_get(b, c, "tf_guidance");
        em_dist_stats_reset(G);
        em_tensor *got = em_flux_forward(c, split, &in);
        CHECK_MSG(got != NULL, "flux: %s", msg(c));
        world_quiet("flux_tiny");
        em_test_allclose(c, got, em_flux_forward(c, whole, &in), 1e-5, 1e-5,
                         "flux_tiny t1, ring 2 x ulysses 2");
        em_test_allclose(c, got, em_test_bundle_get(b, c, "tf_out1"), 1e-4, 1e-4,
                         "flux_tiny t1 vs diffusers, ring 2 x ulysses 2");
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
        em_scope_pop(c);
    }
    em_flux_free(split);
    em_flux_free(whole);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

/* scripts/gen_dit_fixtures.py's run "cfg" (label 7, guidance 4, 6 DDIM steps, seed 0) */
static void test_pipeline(void) {
    if (!four()) return;
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/dit_runs_ref");
    const char *dir = em_test_fixture_path("diffusion", "dit_pipe");
    em_pipeline_options po = em_pipeline_default_options();
    CHECK(po.cp_ring_degree == 0 && po.cp_ulysses_degree == 0);
    em_pipeline *whole = em_pipeline_load(c, dir, NULL);
    po.cp = G;
    po.cp_ring_degree = po.cp_ulysses_degree = 2;
    em_pipeline *split = whole ? em_pipeline_load(c, dir, &po) : NULL;
    CHECK_MSG(b && whole && split, "%s", msg(c));
    em_pipeline_run_params rp = em_pipeline_default_params();
    rp.class_label = 7;
    rp.guidance_scale = 4.0;
    rp.steps = 6;
    rp.seed = 0;
    em_scope_push(c);
    em_tensor *one = b && split ? em_pipeline_run(c, whole, &rp) : NULL;
    for (int compile = 0; one && compile < 2; compile++) {
        char what[128];
        rp.compile = compile;
        em_tensor *img = em_pipeline_run(c, split, &rp);
        snprintf(what, sizeof what, "DiTPipeline 'cfg', ring 2 x ulysses 2%s",
                 compile ? ", compiled" : "");
        CHECK_MSG(img != NULL, "%s: %s", what, msg(c));
        em_test_allclose(c, img, one, 1e-5, 1e-5, what);
        em_test_allclose(c, img, em_test_bundle_get(b, c, "cfg_image"), 1e-3, 0, what);
    }
    CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
    em_scope_pop(c);
    em_pipeline_free(split);
    em_pipeline_free(whole);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

/* ---- tensor and context parallelism together: the mesh (cp 2, tp 2), tensor parallelism over
 * consecutive ranks {0, 1} and {2, 3}, context parallelism across them {0, 2} and {1, 3} ---- */

typedef struct tp_cp {
    em_dist *cp, *tp;
} tp_cp;

static bool mesh(em_ctx *c, tp_cp *m) {
    m->cp = m->tp = NULL;
    bool ok = em_dist_mesh2d(c, G, 2, 2, &m->cp, &m->tp) == EM_OK;
    CHECK_MSG(ok, "mesh: %s", msg(c));
    return ok;
}

static void mesh_free(tp_cp *m) {
    em_dist_free(m->cp);
    em_dist_free(m->tp);
}

static void check_dit_tp_cp(em_ctx *c, const tp_cp *m, const char *name, const char *dir,
                            em_cp_schedule s) {
    char rel[128], what[160];
    snprintf(rel, sizeof rel, "diffusion/%s_ref", name);
    snprintf(what, sizeof what, "%s t1, tp 2 x cp 2 (%s)", name,
             s == EM_CP_RING ? "ring" : "all-gather");
    em_test_bundle *b = em_test_bundle_load(rel);
    const char *path = em_test_fixture_path("diffusion", dir);
    em_dit *split = em_dit_load_tp(c, path, NULL, EM_F32, m->tp);
    em_dit *whole = em_dit_load(c, path, NULL, EM_F32);
    CHECK_MSG(b && split && whole && em_dit_set_context_parallel(c, split, m->cp) == EM_OK &&
              em_dit_set_cp_schedule(c, split, s) == EM_OK, "%s: %s", what, msg(c));
    if (b && split && whole && !em_ctx_status(c)) {
        CHECK(em_dit_tp_degree(split) == 2 && em_dit_cp_degree(split) == 2);
        em_scope_push(c);
        em_tensor *x = em_test_bundle_get(b, c, "sample");
        em_tensor *labels = em_test_bundle_get(b, c, "class_labels");
        em_tensor *t = em_test_bundle_get(b, c, "t1");
        em_tensor *got = em_dit_forward(c, split, x, t, labels);
        CHECK_MSG(got != NULL, "%s: %s", what, msg(c));
        em_test_allclose(c, got, em_dit_forward(c, whole, x, t, labels), 1e-5, 1e-5, what);
        em_test_allclose(c, got, em_test_bundle_get(b, c, "out1"), 1e-4, 1e-4, what);
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
        em_scope_pop(c);
    }
    em_ctx_clear_error(c);
    em_dit_free(split);
    em_dit_free(whole);
    em_test_bundle_free(b);
}

static void test_tp_cp_dit(void) {
    if (!four()) return;
    em_ctx *c = em_ctx_create();
    tp_cp m;
    if (mesh(c, &m)) {
        for (int s = EM_CP_RING; s <= EM_CP_ALL_GATHER; s++) {
            check_dit_tp_cp(c, &m, "dit_pipe", "dit_pipe/transformer", (em_cp_schedule)s);
            check_dit_tp_cp(c, &m, "dit_geglu", "dit_geglu", (em_cp_schedule)s);
        }
        /* Ulysses over the context group: the rank's 1 head (of 2, split 2 ways) does not
         * divide over its 2 ranks */
        em_dit *d = em_dit_load_tp(c, em_test_fixture_path("diffusion", "dit_geglu"), NULL,
                                   EM_F32, m.tp);
        em_test_bundle *b = em_test_bundle_load("diffusion/dit_geglu_ref");
        if (d && b && em_dit_set_context_parallel(c, d, m.cp) == EM_OK &&
            em_dit_set_cp_schedule(c, d, EM_CP_ULYSSES) == EM_OK) {
            em_scope_push(c);
            CHECK(em_dit_forward(c, d, em_test_bundle_get(b, c, "sample"),
                                 em_test_bundle_get(b, c, "t1"),
                                 em_test_bundle_get(b, c, "class_labels")) == NULL);
            CHECK_ERR(c, EM_ERR_SHAPE, "1 attention heads do not divide over 2 ranks");
            em_ctx_clear_error(c);
            em_scope_pop(c);
        }
        CHECK_MSG(d && b, "%s", msg(c));
        em_test_bundle_free(b);
        em_dit_free(d);
    }
    mesh_free(&m);
    em_ctx_free(c);
}

/* SD3 and Flux, by the ring */
static void test_tp_cp_mmdit(void) {
    if (!four()) return;
    em_ctx *c = em_ctx_create();
    tp_cp m;
    em_test_bundle *sb = em_test_bundle_load("diffusion/sd3_tiny_ref");
    em_test_bundle *fb = em_test_bundle_load("diffusion/flux_tiny_ref");
    if (mesh(c, &m) && sb && fb) {
        const char *sp = em_test_fixture_path("diffusion", "sd3_tiny/transformer");
        em_sd3 *s = em_sd3_load_tp(c, sp, NULL, EM_F32, m.tp), *sw = em_sd3_load(c, sp, NULL,
                                                                                 EM_F32);
        CHECK_MSG(s && sw && em_sd3_set_context_parallel(c, s, m.cp) == EM_OK, "%s", msg(c));
        if (s && sw && !em_ctx_status(c)) {
            em_scope_push(c);
            em_tensor *x = em_test_bundle_get(sb, c, "tf_sample");
            em_tensor *ehs = em_test_bundle_get(sb, c, "tf_ehs");
            em_tensor *pooled = em_test_bundle_get(sb, c, "tf_pooled");
            em_tensor *t = em_test_bundle_get(sb, c, "tf_t1");
            em_tensor *got = em_sd3_forward(c, s, x, ehs, pooled, t);
            CHECK_MSG(got != NULL, "sd3 tp x cp: %s", msg(c));
            em_test_allclose(c, got, em_sd3_forward(c, sw, x, ehs, pooled, t), 1e-5, 1e-5,
                             "sd3_tiny t1, tp 2 x cp 2");
            em_test_allclose(c, got, em_test_bundle_get(sb, c, "tf_out1"), 1e-4, 1e-4,
                             "sd3_tiny t1 vs diffusers, tp 2 x cp 2");
            em_scope_pop(c);
        }
        em_sd3_free(s);
        em_sd3_free(sw);
        const char *fp = em_test_fixture_path("diffusion", "flux_tiny/transformer");
        em_flux *f = em_flux_load_tp(c, fp, NULL, EM_F32, m.tp), *fw = em_flux_load(c, fp, NULL,
                                                                                    EM_F32);
        CHECK_MSG(f && fw && em_flux_set_context_parallel(c, f, m.cp) == EM_OK, "%s", msg(c));
        if (f && fw && !em_ctx_status(c)) {
            em_scope_push(c);
            em_flux_inputs in = {.hidden_states = em_test_bundle_get(fb, c, "tf_hidden"),
                                 .encoder_hidden_states = em_test_bundle_get(fb, c, "tf_ehs"),
                                 .pooled_projections = em_test_bundle_get(fb, c, "tf_pooled"),
                                 .img_ids = em_test_bundle_get(fb, c, "tf_img_ids"),
                                 .txt_ids = em_test_bundle_get(fb, c, "tf_txt_ids"),
                                 .timestep = em_test_bundle_get(fb, c, "tf_t1")};
            if (em_flux_get_config(f)->guidance_embeds)
                in.guidance = em_test_bundle_get(fb, c, "tf_guidance");
            em_tensor *got = em_flux_forward(c, f, &in);
            CHECK_MSG(got != NULL, "flux tp x cp: %s", msg(c));
            em_test_allclose(c, got, em_flux_forward(c, fw, &in), 1e-5, 1e-5,
                             "flux_tiny t1, tp 2 x cp 2");
            em_test_allclose(c, got, em_test_bundle_get(fb, c, "tf_out1"), 1e-4, 1e-4,
                             "flux_tiny t1 vs diffusers, tp 2 x cp 2");
            em_scope_pop(c);
        }
        em_flux_free(f);
        em_flux_free(fw);
    }
    CHECK_MSG(sb && fb && em_ctx_status(c) == EM_OK, "%s", msg(c));
    em_test_bundle_free(sb);
    em_test_bundle_free(fb);
    mesh_free(&m);
    em_ctx_free(c);
}

/* the DiTPipeline "cfg" run with em_pipeline_options.tp and .cp, eager and compiled */
static void test_tp_cp_pipeline(void) {
    if (!four()) return;
    em_ctx *c = em_ctx_create();
    tp_cp m;
    em_test_bundle *b = em_test_bundle_load("diffusion/dit_runs_ref");
    const char *dir = em_test_fixture_path("diffusion", "dit_pipe");
    em_pipeline *whole = em_pipeline_load(c, dir, NULL), *split = NULL;
    if (mesh(c, &m) && b && whole) {
        em_pipeline_options po = em_pipeline_default_options();
        po.tp = m.tp;
        po.cp = m.cp;
        split = em_pipeline_load(c, dir, &po);
    }
    CHECK_MSG(b && whole && split, "%s", msg(c));
    em_pipeline_run_params rp = em_pipeline_default_params();
    rp.class_label = 7;
    rp.guidance_scale = 4.0;
    rp.steps = 6;
    rp.seed = 0;
    em_scope_push(c);
    em_tensor *one = split ? em_pipeline_run(c, whole, &rp) : NULL;
    for (int compile = 0; one && compile < 2; compile++) {
        char what[128];
        rp.compile = compile;
        em_tensor *img = em_pipeline_run(c, split, &rp);
        snprintf(what, sizeof what, "DiTPipeline 'cfg', tp 2 x cp 2%s", compile ? ", compiled" : "");
        CHECK_MSG(img != NULL, "%s: %s", what, msg(c));
        em_test_allclose(c, img, one, 1e-5, 1e-5, what);
        em_test_allclose(c, img, em_test_bundle_get(b, c, "cfg_image"), 1e-3, 0, what);
    }
    CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
    em_scope_pop(c);
    em_pipeline_free(split);
    em_pipeline_free(whole);
    mesh_free(&m);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

static void test_refused(void) {
    em_ctx *c = em_ctx_create();
    em_dit *d = em_dit_load(c, em_test_fixture_path("diffusion", "dit_geglu"), NULL, EM_F32);
    CHECK_MSG(d != NULL, "%s", msg(c));
    if (d) {
        CHECK(em_dit_set_cp_degrees(c, d, 0, 2) == EM_ERR_INVALID_ARG);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "ring_degree 0 and ulysses_degree 2", "dit_geglu");
        em_ctx_clear_error(c);
        CHECK(em_dit_set_cp_degrees(c, d, 2, -1) == EM_ERR_INVALID_ARG);
        em_ctx_clear_error(c);
    }
    CHECK(em_flux_set_cp_degrees(c, NULL, 2, 2) == EM_ERR_INVALID_ARG);
    em_ctx_clear_error(c);
    if (d && em_dist_world_size(G) == 4) {
        /* 3 x 1 is not 4 ranks: refused when the group comes (and when the degrees come) */
        CHECK(em_dit_set_cp_degrees(c, d, 3, 1) == EM_OK);
        CHECK(em_dit_set_context_parallel(c, d, G) == EM_ERR_INVALID_ARG);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "ring_degree 3 x ulysses_degree 1 is not the group's 4 "
                  "ranks");
        em_ctx_clear_error(c);
        CHECK(em_dit_set_cp_degrees(c, d, 0, 0) == EM_OK &&
              em_dit_set_context_parallel(c, d, G) == EM_OK);
        CHECK(em_dit_set_cp_degrees(c, d, 2, 1) == EM_ERR_INVALID_ARG);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "ring_degree 2 x ulysses_degree 1 is not the group's 4 "
                  "ranks");
        em_ctx_clear_error(c);
        /* ring 1 x Ulysses 4: Ulysses over the world, the 2 heads do not divide */
        CHECK(em_dit_set_cp_degrees(c, d, 1, 4) == EM_OK);
        em_test_bundle *b = em_test_bundle_load("diffusion/dit_geglu_ref");
        CHECK(b != NULL);
        em_scope_push(c);
        em_tensor *x = b ? em_test_bundle_get(b, c, "sample") : NULL;
        em_tensor *t = b ? em_test_bundle_get(b, c, "t1") : NULL;
        em_tensor *l = b ? em_test_bundle_get(b, c, "class_labels") : NULL;
        CHECK(em_dit_forward(c, d, x, t, l) == NULL);
        CHECK_ERR(c, EM_ERR_SHAPE, "2 attention heads do not divide over 4 ranks");
        em_ctx_clear_error(c);
        em_scope_pop(c);
        em_test_bundle_free(b);
    }
    em_dit_free(d);
    em_ctx_free(c);
}

int main(int argc, char **argv) {
    static const em_test_case tests[] = {T(test_dit),           T(test_sd3),
                                         T(test_flux),          T(test_pipeline),
                                         T(test_tp_cp_dit),     T(test_tp_cp_mmdit),
                                         T(test_tp_cp_pipeline), T(test_refused)};
    return em_test_run_in_group(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv, &G);
}

/*
 * Context parallelism of the diffusion transformers by its three schedules (ember/dist.h's
 * em_cp_schedule): the ring (the key and value blocks passed along with em_ring_shift, merged by
 * log-sum-exp), the all-gather and Ulysses (all-to-all from tokens to heads and back; the tiny
 * models' 2 heads do not divide over 4 ranks: refused there, naming both). Run by ctest under
 * `mpirun -np 2` and `-np 4` (diffusion_cp_mpi2, diffusion_cp_mpi4): the DiT, SD3 and Flux
 * transformers (dit_pipe, dit_geglu, sd3_tiny, flux_tiny; 16, 16, 16 and 24, 12 image tokens: they
 * divide over 2 and 4 ranks) split by tokens must give the one-process model's output within 1e-5
 * and diffusers' (the *_ref bundles of scripts/gen_dit_fixtures.py, gen_sd3_fixtures.py,
 * gen_flux_fixtures.py) within 1e-4, and a DiTPipeline run (dit_runs_ref's "cfg") the one-process
 * image within 1e-5 and diffusers' within 1e-3, eager and compiled; dit_geglu in bf16 by the ring
 * (its blocks shifted as bf16: half the f32 ring's bytes) against the one-process bf16 model and
 * the bf16 all-gather within 2e-2. The transfers are counted: the
 * ring's 2 (R - 1) ring shifts per attention, Ulysses' 4 all-to-alls, the all-gather neither. Alone
 * (a world of one) nothing is split and the same outputs are checked.
 */
#include <stdio.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

static em_dist *G;

static const char *msg(em_ctx *c) { return em_ctx_error(c) ? em_ctx_error(c)->message : ""; }

static const char *sched_name(em_cp_schedule s) {
    return s == EM_CP_RING ? "ring" : s == EM_CP_ALL_GATHER ? "all-gather" : "ulysses";
}

/* The ring shifts and all-to-alls counted since the reset: 2 (R - 1) ring shifts per attention
 * with the ring, 4 all-to-alls with Ulysses, neither with the all-gather (or alone). */
static void check_shifts(em_cp_schedule s, int attentions, const char *what) {
    em_dist_stats st;
    em_dist_stats_get(G, &st);
    int n = em_dist_world_size(G);
    int64_t want = n > 1 && s == EM_CP_RING ? (int64_t)2 * (n - 1) * attentions : 0;
    int64_t a2a = n > 1 && s == EM_CP_ULYSSES ? (int64_t)4 * attentions : 0;
    CHECK_MSG(st.calls_by_op[4] == want && st.calls_by_op[3] == a2a,
              "%s: %lld ring shifts, %lld all-to-alls; want %lld, %lld", what,
              (long long)st.calls_by_op[4], (long long)st.calls_by_op[3], (long long)want,
              (long long)a2a);
    em_dist_stats_reset(G);
}

/* Ulysses with heads that do not divide over the ranks: got is NULL with the error naming
 * both (cleared). True when so (the caller checks nothing more). */
static bool ulysses_refused(em_ctx *c, em_cp_schedule s, int64_t heads, em_tensor *got) {
    int n = em_dist_world_size(G);
    if (s != EM_CP_ULYSSES || n == 1 || heads % n == 0) return false;
    char want[64];
    snprintf(want, sizeof want, "%lld attention heads do not divide over %d ranks",
             (long long)heads, n);
    CHECK_MSG(got == NULL, "Ulysses ran %lld heads over %d ranks", (long long)heads, n);
    CHECK_ERR(c, EM_ERR_SHAPE, want);
    em_ctx_clear_error(c);
    return true;
}

static void check_dit(const char *name, const char *dir, em_cp_schedule s) {
    char rel[128], what[160];
    snprintf(rel, sizeof rel, "diffusion/%s_ref", name);
    em_test_bundle *b = em_test_bundle_load(rel);
    em_ctx *c = em_ctx_create();
    const char *path = em_test_fixture_path("diffusion", dir);
    em_dit *split = em_dit_load(c, path, NULL, EM_F32), *whole = em_dit_load(c, path, NULL, EM_F32);
    CHECK_MSG(split && em_dit_set_cp_schedule(c, split, s) == EM_OK &&
              em_dit_set_context_parallel(c, split, G) == EM_OK, "%s", msg(c));
    CHECK_MSG(b && split && whole, "%s: %s", name, msg(c));
    if (b && split && whole && !em_ctx_status(c)) {
        int n = em_dist_world_size(G);
        em_scope_push(c);
        em_tensor *x = em_test_bundle_get(b, c, "sample");
        em_tensor *labels = em_test_bundle_get(b, c, "class_labels");
        em_tensor *one = em_dit_forward(c, whole, x, em_test_bundle_get(b, c, "t1"), labels);
        em_dist_stats_reset(G);
        em_tensor *got = em_dit_forward(c, split, x, em_test_bundle_get(b, c, "t1"), labels);
        snprintf(what, sizeof what, "%s t1, %s at degree %d", name, sched_name(s), n);
        if (ulysses_refused(c, s, em_dit_get_config(split)->num_attention_heads, got)) {
            em_scope_pop(c);
            goto done;
        }
        CHECK_MSG(got != NULL, "%s: %s", what, msg(c));
        check_shifts(s, (int)em_dit_get_config(split)->num_layers, what);
        em_test_allclose(c, got, one, 1e-5, 1e-5, what);
        em_test_allclose(c, got, em_test_bundle_get(b, c, "out1"), 1e-4, 1e-4, what);
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
        em_scope_pop(c);
    }
done:
    em_dit_free(split);
    em_dit_free(whole);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

static void test_dit(void) {
    for (int s = EM_CP_RING; s <= EM_CP_ULYSSES; s++) {
        check_dit("dit_pipe", "dit_pipe/transformer", (em_cp_schedule)s);
        check_dit("dit_geglu", "dit_geglu", (em_cp_schedule)s);
    }
}

/* The ring in bf16: the K/V blocks shift as bf16 (half the f32 ring's bytes), each step's
 * attention and the log-sum-exp merge in f32 with one rounding at the end, so the split model
 * gives the one-process bf16 model's output within a bf16 rounding's reach (and the all-gather
 * schedule's; on an AVX-512 host all three are bit for bit the same at 2 and 4 ranks). */
static void test_dit_bf16_ring(void) {
    em_test_bundle *b = em_test_bundle_load("diffusion/dit_geglu_ref");
    em_ctx *c = em_ctx_create();
    const char *path = em_test_fixture_path("diffusion", "dit_geglu");
    em_dit *m[4] = {em_dit_load(c, path, NULL, EM_BF16), em_dit_load(c, path, NULL, EM_BF16),
                    em_dit_load(c, path, NULL, EM_BF16), em_dit_load(c, path, NULL, EM_F32)};
    em_cp_schedule sc[4] = {EM_CP_RING, EM_CP_RING, EM_CP_ALL_GATHER, EM_CP_RING};
    bool ok = b && m[0] && m[1] && m[2] && m[3];
    for (int i = 1; ok && i < 4; i++)
        ok = em_dit_set_cp_schedule(c, m[i], sc[i]) == EM_OK &&
             em_dit_set_context_parallel(c, m[i], G) == EM_OK;
    CHECK_MSG(ok, "dit_geglu bf16: %s", msg(c));
    if (ok) {
        em_scope_push(c);
        em_tensor *x = em_test_bundle_get(b, c, "sample"), *t = em_test_bundle_get(b, c, "t1");
        em_tensor *labels = em_test_bundle_get(b, c, "class_labels");
        em_tensor *xb = em_cast(c, x, EM_BF16), *out[4];
        int64_t bytes[4];
        for (int i = 0; i < 4; i++) {
            em_dist_stats_reset(G);
            out[i] = em_dit_forward(c, m[i], i == 3 ? x : xb, t, labels);
            em_dist_stats st;
            em_dist_stats_get(G, &st);
            bytes[i] = st.bytes_by_op[4];
        }
        CHECK_MSG(out[0] && out[1] && out[2] && out[3], "%s", msg(c));
        int n = em_dist_world_size(G);
        CHECK_MSG(n == 1 || (bytes[1] > 0 && 2 * bytes[1] == bytes[3]),
                  "bf16 ring shifted %lld bytes, the f32 ring %lld: want half", (long long)bytes[1],
                  (long long)bytes[3]);
        if (out[0] && out[1] && out[2]) {
            em_test_allclose(c, out[1], out[0], 2e-2, 2e-2, "dit_geglu bf16 ring vs one process");
            em_test_allclose(c, out[1], out[2], 2e-2, 2e-2, "dit_geglu bf16 ring vs all-gather");
            CHECK(em_tensor_dtype(out[1]) == EM_BF16);
        }
        em_scope_pop(c);
    }
    for (int i = 0; i < 4; i++) em_dit_free(m[i]);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

static void check_sd3(em_ctx *c, em_test_bundle *b, em_cp_schedule s) {
    const char *path = em_test_fixture_path("diffusion", "sd3_tiny/transformer");
    em_sd3 *split = em_sd3_load(c, path, NULL, EM_F32), *whole = em_sd3_load(c, path, NULL, EM_F32);
    CHECK_MSG(split && whole && em_sd3_set_context_parallel(c, split, G) == EM_OK &&
              em_sd3_set_cp_schedule(c, split, s) == EM_OK, "%s", msg(c));
    if (split && whole && !em_ctx_status(c)) {
        char what[128];
        em_scope_push(c);
        em_tensor *x = em_test_bundle_get(b, c, "tf_sample");
        em_tensor *ehs = em_test_bundle_get(b, c, "tf_ehs");
        em_tensor *pooled = em_test_bundle_get(b, c, "tf_pooled");
        em_tensor *t = em_test_bundle_get(b, c, "tf_t1");
        em_dist_stats_reset(G);
        em_tensor *got = em_sd3_forward(c, split, x, ehs, pooled, t);
        snprintf(what, sizeof what, "sd3_tiny t1, %s at degree %d", sched_name(s),
                 em_dist_world_size(G));
        if (ulysses_refused(c, s, em_sd3_get_config(split)->num_attention_heads, got)) {
            em_scope_pop(c);
            goto done;
        }
        CHECK_MSG(got != NULL, "%s: %s", what, msg(c));
        check_shifts(s, (int)em_sd3_get_config(split)->num_layers, what);
        em_test_allclose(c, got, em_sd3_forward(c, whole, x, ehs, pooled, t), 1e-5, 1e-5, what);
        em_test_allclose(c, got, em_test_bundle_get(b, c, "tf_out1"), 1e-4, 1e-4, what);
        /* 8 x 12 latents: 24 patches */
        float tw = 250.5f;
        em_tensor *wide = em_test_bundle_get(b, c, "tf_wide_sample");
        em_tensor *ehs1 = em_narrow(c, ehs, 0, 0, 1), *pooled1 = em_narrow(c, pooled, 0, 0, 1);
        em_tensor *tws = em_from_host(c, EM_F32, 1, (int64_t[]){1}, &tw);
        snprintf(what, sizeof what, "sd3_tiny 8x12, %s at degree %d", sched_name(s),
                 em_dist_world_size(G));
        em_test_allclose(c, em_sd3_forward(c, split, wide, ehs1, pooled1, tws),
                         em_test_bundle_get(b, c, "tf_wide_out"), 1e-4, 1e-4, what);
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
        em_scope_pop(c);
    }
done:
    em_sd3_free(split);
    em_sd3_free(whole);
}

static void check_flux(em_ctx *c, em_test_bundle *b, em_cp_schedule s) {
    const char *path = em_test_fixture_path("diffusion", "flux_tiny/transformer");
    em_flux *split = em_flux_load(c, path, NULL, EM_F32);
    em_flux *whole = em_flux_load(c, path, NULL, EM_F32);
    CHECK_MSG(split && whole && em_flux_set_context_parallel(c, split, G) == EM_OK &&
              em_flux_set_cp_schedule(c, split, s) == EM_OK, "%s", msg(c));
    if (split && whole && !em_ctx_status(c)) {
        char what[128];
        em_scope_push(c);
        em_flux_inputs in = {.hidden_states = em_test_bundle_get(b, c, "tf_hidden"),
                             .encoder_hidden_states = em_test_bundle_get(b, c, "tf_ehs"),
                             .pooled_projections = em_test_bundle_get(b, c, "tf_pooled"),
                             .img_ids = em_test_bundle_get(b, c, "tf_img_ids"),
                             .txt_ids = em_test_bundle_get(b, c, "tf_txt_ids"),
                             .timestep = em_test_bundle_get(b, c, "tf_t1")};
        const em_flux_config *cfg = em_flux_get_config(split);
        if (cfg->guidance_embeds) in.guidance = em_test_bundle_get(b, c, "tf_guidance");
        em_dist_stats_reset(G);
        em_tensor *got = em_flux_forward(c, split, &in);
        snprintf(what, sizeof what, "flux_tiny t1, %s at degree %d", sched_name(s),
                 em_dist_world_size(G));
        if (ulysses_refused(c, s, cfg->num_attention_heads, got)) {
            em_scope_pop(c);
            goto done;
        }
        CHECK_MSG(got != NULL, "%s: %s", what, msg(c));
        check_shifts(s, (int)(cfg->num_layers + cfg->num_single_layers), what);
        em_test_allclose(c, got, em_flux_forward(c, whole, &in), 1e-5, 1e-5, what);
        em_test_allclose(c, got, em_test_bundle_get(b, c, "tf_out1"), 1e-4, 1e-4, what);
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
        em_scope_pop(c);
    }
done:
    em_flux_free(split);
    em_flux_free(whole);
}

static void test_mmdit(void) {
    em_ctx *c = em_ctx_create();
    em_test_bundle *sd3 = em_test_bundle_load("diffusion/sd3_tiny_ref");
    em_test_bundle *flux = em_test_bundle_load("diffusion/flux_tiny_ref");
    CHECK(sd3 && flux);
    for (int s = EM_CP_RING; sd3 && flux && s <= EM_CP_ULYSSES; s++) {
        check_sd3(c, sd3, (em_cp_schedule)s);
        check_flux(c, flux, (em_cp_schedule)s);
    }
    em_test_bundle_free(sd3);
    em_test_bundle_free(flux);
    em_ctx_free(c);
}

/* scripts/gen_dit_fixtures.py's run "cfg" (label 7, guidance 4, 6 DDIM steps, seed 0) by each
 * schedule, eager and compiled, against the one-process run and diffusers */
static void test_pipeline(void) {
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/dit_runs_ref");
    const char *dir = em_test_fixture_path("diffusion", "dit_pipe");
    em_pipeline *whole = em_pipeline_load(c, dir, NULL);
    CHECK_MSG(b && whole, "%s", msg(c));
    em_pipeline_run_params rp = em_pipeline_default_params();
    rp.class_label = 7;
    rp.guidance_scale = 4.0;
    rp.steps = 6;
    rp.seed = 0;
    em_scope_push(c);
    em_tensor *one = b && whole ? em_pipeline_run(c, whole, &rp) : NULL;
    for (int s = EM_CP_RING; one && s <= EM_CP_ULYSSES; s++) {
        if (s == EM_CP_ULYSSES && 2 % em_dist_world_size(G)) continue; /* dit_pipe's 2 heads */
        em_pipeline_options po = em_pipeline_default_options();
        CHECK(po.cp_schedule == EM_CP_RING);
        po.cp = G;
        po.cp_schedule = (em_cp_schedule)s;
        em_pipeline *split = em_pipeline_load(c, dir, &po);
        CHECK_MSG(split != NULL, "%s", msg(c));
        for (int compile = 0; split && compile < 2; compile++) {
            char what[128];
            rp.compile = compile;
            em_tensor *img = em_pipeline_run(c, split, &rp);
            snprintf(what, sizeof what, "DiTPipeline 'cfg', %s at degree %d%s",
                     sched_name((em_cp_schedule)s), em_dist_world_size(G),
                     compile ? ", compiled" : "");
            CHECK_MSG(img != NULL, "%s: %s", what, msg(c));
            em_test_allclose(c, img, one, 1e-5, 1e-5, what);
            em_test_allclose(c, img, em_test_bundle_get(b, c, "cfg_image"), 1e-3, 0, what);
        }
        em_pipeline_free(split);
    }
    CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", msg(c));
    em_scope_pop(c);
    em_pipeline_free(whole);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

/* a schedule that is not one, refused naming the transformer */
static void test_refused(void) {
    em_ctx *c = em_ctx_create();
    em_dit *d = em_dit_load(c, em_test_fixture_path("diffusion", "dit_geglu"), NULL, EM_F32);
    CHECK_MSG(d != NULL, "%s", msg(c));
    if (d) {
        CHECK(em_dit_set_cp_schedule(c, d, (em_cp_schedule)7) == EM_ERR_INVALID_ARG);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "schedule 7", "dit_geglu");
    }
    em_dit_free(d);
    em_ctx_clear_error(c);
    CHECK(em_sd3_set_cp_schedule(c, NULL, EM_CP_RING) == EM_ERR_INVALID_ARG);
    em_ctx_free(c);
}

int main(int argc, char **argv) {
    static const em_test_case tests[] = {T(test_dit), T(test_dit_bf16_ring), T(test_mmdit),
                                         T(test_pipeline), T(test_refused)};
    return em_test_run_in_group(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv, &G);
}

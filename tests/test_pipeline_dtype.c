/* Pipelines loaded in bf16 and f16 (em_pipeline_options.dtype, diffusers' torch_dtype) against
 * diffusers 0.42.1 loaded with the same torch_dtype (tests/fixtures/diffusion/pipeline_dtype_ref,
 * made by scripts/gen_pipeline_dtype_fixtures.py on the tiny SD, SDXL, SD3, DiT and DDIM folders),
 * from the same initial latents, with schedulers that draw no per-step noise.
 *
 * Half precision rounds every op, and Ember's kernels do not round where torch's do (and Ember
 * keeps the latents and the scheduler in f32 where diffusers keeps them in the dtype), so the
 * images agree to the scale of half precision's own effect, not to f32's 1e-3: each run's image
 * must lie within 2 x gap + 0.005 of diffusers' half-precision image, where gap is how far
 * diffusers' own half-precision image is from its f32 image (recorded by the script); and it
 * must differ from diffusers' f32 image by more than the 1e-3 the f32 pipelines are held to, so a
 * run that silently stayed in f32 fails. Also: the compiled denoiser in bf16, and a dtype a
 * pipeline cannot run in refused. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

static const char *msg(em_ctx *c) { return em_ctx_error(c) ? em_ctx_error(c)->message : ""; }

/* scripts/gen_pipeline_dtype_fixtures.py's RUNS */
static const struct {
    const char *name, *folder;
    em_dtype dtype;
    int sched; /* -1: the folder's */
    const char *prompt;
    int64_t class_label; /* DiT's; -1 otherwise */
    double guidance;
    int64_t steps, size, max_seq; /* max_seq: SD3's max_sequence_length */
} RUNS[] = {
    {"sd_bf16", "sd_tiny", EM_BF16, -1, "a photo of a cat", -1, 7.5, 3, 16, 0},
    {"sd_f16", "sd_tiny", EM_F16, EM_SCHED_EULER, "a red cube", -1, 5.0, 4, 16, 0},
    {"sdxl_bf16", "sdxl_tiny", EM_BF16, -1, "an astronaut", -1, 5.0, 3, 16, 0},
    {"sdxl_f16", "sdxl_tiny", EM_F16, EM_SCHED_DPM_MULTISTEP, "a dog", -1, 5.0, 3, 16, 0},
    {"dit_bf16", "dit_pipe", EM_BF16, -1, NULL, 1, 4.0, 3, 0, 0},
    {"ddim_f16", "ddim_three", EM_F16, -1, NULL, -1, 0.0, 3, 0, 0},
    {"sd3_bf16", "sd3_tiny", EM_BF16, -1, "a photo of a cat", -1, 5.0, 3, 16, 8},
};
#define N_RUNS (sizeof RUNS / sizeof RUNS[0])

/* max |a - b| over two f32 tensors of one shape on the CPU; NAN when they do not compare */
static double max_diff(em_ctx *c, em_tensor *a, em_tensor *b) {
    if (!a || !b || em_tensor_numel(a) != em_tensor_numel(b)) return NAN;
    em_tensor *d = em_max(c, em_abs(c, em_sub(c, a, b)), NULL, 0, false);
    double v = NAN;
    if (!d || em_item(c, d, &v) != EM_OK) return NAN;
    return v;
}

static em_pipeline *load(em_ctx *c, const char *folder, em_dtype dt) {
    em_pipeline_options o = em_pipeline_default_options();
    o.dtype = dt;
    em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", folder), &o);
    CHECK_MSG(p != NULL, "%s as %s: %s", folder, em_dtype_name(dt), msg(c));
    return p;
}

static void check_run(em_ctx *c, em_test_bundle *b, size_t i, bool compile) {
    char name[64], what[96];
    snprintf(what, sizeof what, "%s%s", RUNS[i].name, compile ? " compiled" : "");
    em_pipeline *p = load(c, RUNS[i].folder, RUNS[i].dtype);
    if (!p) return;
    if (RUNS[i].sched >= 0)
        CHECK_MSG(em_pipeline_set_scheduler(c, p, (em_scheduler_kind)RUNS[i].sched) == EM_OK,
                  "%s: %s", what, msg(c));
    em_scope_push(c);
    snprintf(name, sizeof name, "%s_latents", RUNS[i].name);
    em_pipeline_run_params rp = em_pipeline_default_params();
    rp.latents = em_test_bundle_get(b, c, name);
    rp.steps = RUNS[i].steps;
    rp.seed = 0;
    rp.compile = compile;
    rp.prompt = RUNS[i].prompt;
    rp.guidance_scale = RUNS[i].guidance;
    rp.class_label = RUNS[i].class_label;
    rp.height = rp.width = RUNS[i].size;
    rp.max_sequence_length = RUNS[i].max_seq;
    em_tensor *img = em_pipeline_run(c, p, &rp);
    CHECK_MSG(img != NULL, "%s: %s", what, msg(c));
    snprintf(name, sizeof name, "%s_gap", RUNS[i].name);
    double gap = em_test_bundle_meta_num(b, name, NAN);
    CHECK_MSG(gap > 0, "%s: the bundle has no %s", what, name);
    snprintf(name, sizeof name, "%s_image", RUNS[i].name);
    double to_half = max_diff(c, img, em_test_bundle_get(b, c, name));
    snprintf(name, sizeof name, "%s_f32", RUNS[i].name);
    double to_f32 = max_diff(c, img, em_test_bundle_get(b, c, name));
    printf("  %-20s max |ember - diffusers %s| %.4f (bound %.4f), to diffusers f32 %.4f\n", what,
           em_dtype_name(RUNS[i].dtype), to_half, 2 * gap + 0.005, to_f32);
    CHECK_MSG(to_half <= 2 * gap + 0.005, "%s: %.4f from diffusers' %s image, more than 2 x %.4f "
              "+ 0.005", what, to_half, em_dtype_name(RUNS[i].dtype), gap);
    CHECK_MSG(to_f32 > 1e-3, "%s: %.5f from the f32 image: the run did not change precision",
              what, to_f32);
    em_ctx_clear_error(c);
    em_scope_pop(c);
    em_pipeline_free(p);
}

static void test_runs(void) {
    em_test_bundle *b = em_test_bundle_load("diffusion/pipeline_dtype_ref");
    CHECK(b != NULL);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    for (size_t i = 0; i < N_RUNS; i++) check_run(c, b, i, false);
    check_run(c, b, 0, true); /* SD's UNet compiled in bf16 */
    check_run(c, b, 4, true); /* DiT's transformer compiled in bf16 */
    check_run(c, b, 6, true); /* SD3's transformer compiled in bf16 */
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void test_refused(void) {
    em_ctx *c = em_ctx_create();
    em_pipeline_options o = em_pipeline_default_options();
    CHECK(o.dtype == EM_F32);
    o.dtype = EM_I32;
    em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", "sd_tiny"), &o);
    CHECK(p == NULL);
    CHECK_MSG(em_ctx_status(c) == EM_ERR_DTYPE && strstr(msg(c), "f32, bf16 or f16") &&
                  strstr(msg(c), "i32"),
              "%s", msg(c));
    em_ctx_free(c);
}

int main(int argc, char **argv) {
    const em_test_case tests[] = {{"runs", test_runs}, {"refused", test_refused}};
    return em_test_run(tests, 2, argc, argv);
}

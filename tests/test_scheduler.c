/*
 * The schedulers (ember/scheduler.h) against diffusers: tests/fixtures/diffusion/schedulers
 * (scripts/gen_scheduler_fixtures.py) holds, per case (a scheduler_config.json under
 * diffusion/sched/, the class it runs as, the number of steps), diffusers' tables
 * (alphas_cumprod, sigmas, timesteps, init_noise_sigma), the first scale_model_input and every
 * step of a loop over the whole schedule on a fixed sequence of fake model outputs, with the
 * torch generator's noise for the stochastic steps. Then the refusals: broken JSON, unknown
 * classes, bad field values, misuse of step.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "ember/scheduler.h"
#include "harness.h"

static bool bundle_has(json_t *doc, const char *name) {
    return json_object_get(json_object_get(doc, "tensors"), name) != NULL;
}

static void compare_f32(em_ctx *c, em_test_bundle *b, const char *name, const float *got,
                        int64_t n, double atol, double rtol) {
    em_tensor *want = em_test_bundle_get(b, c, name);
    em_tensor *g = em_from_host(c, EM_F32, 1, (const int64_t[]){n}, got);
    em_test_allclose(c, g, want, atol, rtol, name);
}

/* max |a - b| over the elements (NAN when they cannot be read) */
static double max_abs_diff(em_ctx *c, em_tensor *a, em_tensor *b) {
    int64_t n = em_tensor_numel(b);
    if (!a || !b || em_tensor_numel(a) != n) return NAN;
    float *x = malloc((size_t)n * 2 * sizeof *x);
    double m = NAN;
    if (x && em_to_host_f32(c, a, x, n) == EM_OK && em_to_host_f32(c, b, x + n, n) == EM_OK) {
        m = 0;
        for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i] - (double)x[n + i]));
    }
    free(x);
    return m;
}

static void run_case(em_test_bundle *b, json_t *doc, json_t *cs) {
    const char *name = json_string_value(json_object_get(cs, "name"));
    const char *cfg = json_string_value(json_object_get(cs, "config"));
    const char *cls = json_string_value(json_object_get(cs, "class"));
    int64_t steps = json_integer_value(json_object_get(cs, "steps"));
    int64_t seed = json_integer_value(json_object_get(cs, "seed"));
    double eta = json_number_value(json_object_get(cs, "eta"));
    json_t *mu = json_object_get(cs, "mu");
    em_ctx *c = em_ctx_create();
    char path[64], key[128];
    snprintf(path, sizeof path, "%s.json", cfg);
    em_scheduler *s = em_scheduler_from_file(c, em_test_fixture_path("diffusion/sched", path));
    em_scheduler_kind kind;
    CHECK(em_scheduler_kind_parse(cls, &kind));
    if (s && em_scheduler_get_kind(s) != kind) {
        em_scheduler *t = em_scheduler_from_config(c, s, kind);
        em_scheduler_free(s);
        s = t;
    }
    CHECK_MSG(s != NULL, "%s: %s", name, em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (!s) goto out;
    em_status st = json_is_number(mu) ? em_scheduler_set_timesteps_mu(c, s, steps, json_number_value(mu))
                                      : em_scheduler_set_timesteps(c, s, steps);
    CHECK_MSG(st == EM_OK, "%s: %s", name, em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (st) goto out;
    int64_t n;
    const float *ac = em_scheduler_alphas_cumprod(s, &n);
    snprintf(key, sizeof key, "%s/alphas_cumprod", name);
    if (bundle_has(doc, key)) compare_f32(c, b, key, ac, n, 1e-6, 0);
    const float *sig = em_scheduler_sigmas(s, &n);
    snprintf(key, sizeof key, "%s/sigmas", name);
    if (bundle_has(doc, key)) compare_f32(c, b, key, sig, n, 1e-6, 1e-6);
    const double *ts = em_scheduler_timesteps(s, &n);
    snprintf(key, sizeof key, "%s/timesteps", name);
    em_tensor *tw = em_test_bundle_get(b, c, key);
    em_test_allclose(c, em_from_host(c, EM_F64, 1, (const int64_t[]){n}, ts), tw, 1e-6, 1e-6, key);
    snprintf(key, sizeof key, "%s/init_noise_sigma", name);
    double ins = em_scheduler_init_noise_sigma(s), want_ins;
    CHECK(em_item(c, em_test_bundle_get(b, c, key), &want_ins) == EM_OK);
    CHECK_MSG(fabs(ins - want_ins) <= 1e-6 * fabs(want_ins), "%s: init_noise_sigma %.9g, want %.9g",
              name, ins, want_ins);

    /* add_noise at a timestep per sample, before any step (f32; bf16 for the alpha family) */
    snprintf(key, sizeof key, "%s/add_noise_t", name);
    if (bundle_has(doc, key)) {
        /* the schedule's own values at diffusers' positions (the fixture's equal them to 1e-6;
         * a fractional Karras timestep must be looked up exactly) */
        double tn[3] = {ts[0], ts[n / 2], ts[n - 1]};
        em_test_allclose(c, em_from_host(c, EM_F64, 1, (const int64_t[]){3}, tn),
                         em_test_bundle_get(b, c, key), 1e-6, 1e-6, key);
        em_tensor *nx = em_test_bundle_get(b, c, "noise_x"), *nn = em_test_bundle_get(b, c, "noise_n");
        snprintf(key, sizeof key, "%s/add_noise", name);
        em_test_allclose(c, em_scheduler_add_noise_batch(c, s, nx, nn, tn, 3),
                         em_test_bundle_get(b, c, key), 1e-6, 1e-6, key);
        snprintf(key, sizeof key, "%s/add_noise_bf16", name);
        if (bundle_has(doc, key)) /* bf16 results of bf16 factors: bit-identical */
            em_test_allclose(c, em_cast(c, em_scheduler_add_noise_batch(c, s, em_cast(c, nx, EM_BF16),
                                                                        em_cast(c, nn, EM_BF16), tn, 3),
                                        EM_F32),
                             em_test_bundle_get(b, c, key), 0, 0, key);
    }
    em_scheduler_set_eta(s, eta);
    em_torch_generator *g = seed >= 0 ? em_torch_generator_create((uint64_t)seed) : NULL;
    /* a case may bring its own inputs (a learned-variance model's 6 channels for 3) */
    char lkey[128], okey[128];
    snprintf(lkey, sizeof lkey, "%s/latents", name);
    snprintf(okey, sizeof okey, "%s/model_outputs", name);
    em_tensor *outs = em_test_bundle_get(b, c, bundle_has(doc, okey) ? okey : "model_outputs");
    snprintf(key, sizeof key, "%s/steps", name);
    em_tensor *want = em_test_bundle_get(b, c, key);
    em_tensor *x = em_mul_scalar(c, em_test_bundle_get(b, c, bundle_has(doc, lkey) ? lkey : "latents"), ins);
    double worst = 0;
    for (int64_t i = 0; i < n && x; i++) {
        em_tensor *xin = em_scheduler_scale_model_input(c, s, x, ts[i]);
        if (i == 0) {
            snprintf(key, sizeof key, "%s/scaled_input0", name);
            em_test_allclose(c, xin, em_test_bundle_get(b, c, key), 1e-6, 1e-6, key);
        }
        em_tensor *mo = em_squeeze(c, em_narrow(c, outs, 0, i, 1), 0);
        x = em_scheduler_step(c, s, mo, ts[i], x, g);
        snprintf(key, sizeof key, "%s/step%lld", name, (long long)i);
        em_tensor *w = em_squeeze(c, em_narrow(c, want, 0, i, 1), 0);
        /* float32 rounding of values as large as the initial noise (4096 with a zero terminal
         * SNR) cancels down to the small results */
        em_test_allclose(c, x, w, 2e-5 + 1e-6 * ins, 2e-5, key);
        worst = fmax(worst, max_abs_diff(c, x, w));
    }
    CHECK_MSG(x != NULL, "%s: %s", name, em_ctx_error(c) ? em_ctx_error(c)->message : "");
    printf("%-20s %-32s %2lld steps: max |ember - diffusers| %.3g\n", name, cls, (long long)n,
           worst);
    em_torch_generator_free(g);
out:
    em_scheduler_free(s);
    em_ctx_free(c);
}

static void test_against_diffusers(void) {
    em_test_bundle *b = em_test_bundle_load("diffusion/schedulers");
    json_t *doc = em_test_load_json(em_test_fixture_path("diffusion", "schedulers.json"));
    if (!b || !doc) {
        em_test_bundle_free(b);
        json_decref(doc);
        return;
    }
    json_t *cases = json_object_get(json_object_get(doc, "meta"), "cases");
    CHECK(json_array_size(cases) > 0);
    const char *only = getenv("EMBER_TEST_SCHED_CASE");
    size_t i;
    json_t *cs;
    json_array_foreach(cases, i, cs) {
        if (only && strcmp(only, json_string_value(json_object_get(cs, "name")))) continue;
        run_case(b, doc, cs);
    }
    json_decref(doc);
    em_test_bundle_free(b);
}

/* ---- refusals ---- */

static void refused(const char *json, em_status st, const char *needle1, const char *needle2) {
    em_ctx *c = em_ctx_create();
    em_scheduler *s = em_scheduler_from_json(c, json, "test.json");
    CHECK_MSG(s == NULL, "accepted: %s", json);
    em_scheduler_free(s);
    CHECK_ERR(c, st, needle1, needle2);
    em_ctx_free(c);
}

static void test_bad_configs(void) {
    refused("{\"_class_name\": \"DDIMScheduler\", ", EM_ERR_FORMAT, "test.json", "not valid JSON");
    refused("[1, 2]", EM_ERR_FORMAT, "test.json", "not an object");
    refused("{\"beta_start\": 0.1}", EM_ERR_FORMAT, "_class_name", "missing");
    refused("{\"_class_name\": \"LMSDiscreteScheduler\"}", EM_ERR_UNSUPPORTED, "_class_name",
            "LMSDiscreteScheduler");
    refused("{\"_class_name\": \"euler\"}", EM_ERR_UNSUPPORTED, "_class_name", "euler");
    refused("{\"_class_name\": \"DDPMScheduler\", \"beta_schedule\": \"cubic\"}",
            EM_ERR_UNSUPPORTED, "beta_schedule", "cubic");
    refused("{\"_class_name\": \"DDIMScheduler\", \"num_train_timesteps\": \"1000\"}",
            EM_ERR_FORMAT, "num_train_timesteps", "a string");
    refused("{\"_class_name\": \"DDIMScheduler\", \"num_train_timesteps\": 0}", EM_ERR_FORMAT,
            "num_train_timesteps", "out of range");
    refused("{\"_class_name\": \"DDIMScheduler\", \"thresholding\": true, "
            "\"dynamic_thresholding_ratio\": 1.5}", EM_ERR_FORMAT, "dynamic_thresholding_ratio", "1.5");
    refused("{\"_class_name\": \"DDIMScheduler\", \"timestep_spacing\": \"cosine\"}",
            EM_ERR_UNSUPPORTED, "timestep_spacing", "cosine");
    refused("{\"_class_name\": \"EulerAncestralDiscreteScheduler\", \"prediction_type\": \"sample\"}",
            EM_ERR_UNSUPPORTED, "prediction_type", "sample");
    refused("{\"_class_name\": \"DDIMScheduler\", \"steps_offset\": -1}", EM_ERR_FORMAT,
            "steps_offset", "-1");
    refused("{\"_class_name\": \"DPMSolverMultistepScheduler\", \"algorithm_type\": \"sde-dpmsolver++\"}",
            EM_ERR_UNSUPPORTED, "algorithm_type", "sde-dpmsolver++");
    refused("{\"_class_name\": \"DPMSolverMultistepScheduler\", \"solver_order\": 4}",
            EM_ERR_FORMAT, "solver_order", "4");
    refused("{\"_class_name\": \"DDPMScheduler\", \"variance_type\": \"learned_range\"}",
            EM_ERR_UNSUPPORTED, "variance_type", "learned_range");
    refused("{\"_class_name\": \"DDPMScheduler\", \"trained_betas\": [0.1, \"x\"]}",
            EM_ERR_FORMAT, "trained_betas", "[1]");
    refused("{\"_class_name\": \"DDPMScheduler\", \"num_train_timesteps\": 3, \"trained_betas\": [0.1]}",
            EM_ERR_FORMAT, "trained_betas", "num_train_timesteps");
    refused("{\"_class_name\": \"EulerDiscreteScheduler\", \"use_karras_sigmas\": true, "
            "\"use_exponential_sigmas\": true}", EM_ERR_FORMAT, "use_karras_sigmas", "only one");
    refused("{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"use_beta_sigmas\": true, "
            "\"use_karras_sigmas\": true}", EM_ERR_FORMAT, "use_karras_sigmas", "only one");
    refused("{\"_class_name\": \"DPMSolverMultistepScheduler\", \"use_flow_sigmas\": true, "
            "\"flow_shift\": 0}", EM_ERR_FORMAT, "flow_shift", "positive");
    em_ctx *c = em_ctx_create();
    /* DPM-Solver takes a mu only with dynamic shifting (diffusers asserts it) */
    em_scheduler *dpm = em_scheduler_from_json(
        c, "{\"_class_name\": \"DPMSolverMultistepScheduler\", \"use_flow_sigmas\": true}", NULL);
    CHECK(dpm != NULL);
    CHECK(em_scheduler_set_timesteps_mu(c, dpm, 10, 0.5) == EM_ERR_INVALID_ARG);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "mu", "use_dynamic_shifting");
    em_scheduler_free(dpm);
    /* a learned-variance DPM-Solver takes channels 0-2 of the model output: fewer is refused */
    em_scheduler *lv = em_scheduler_from_json(
        c, "{\"_class_name\": \"DPMSolverMultistepScheduler\", \"variance_type\": \"learned\"}",
        NULL);
    CHECK(lv && em_scheduler_set_timesteps(c, lv, 4) == EM_OK);
    em_tensor *two = em_zeros(c, EM_F32, EM_SHAPE(1, 2, 4, 4));
    const double *lts = lv ? em_scheduler_timesteps(lv, NULL) : NULL;
    CHECK(lts && !em_scheduler_step(c, lv, two, lts[0], two, NULL));
    CHECK_ERR(c, EM_ERR_SHAPE, "learned", "channels 0-2");
    em_scheduler_free(lv);
    CHECK(em_scheduler_from_file(c, "/nonexistent/scheduler") == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "/nonexistent/scheduler");
    em_ctx_free(c);
}

static void test_misuse(void) {
    em_ctx *c = em_ctx_create();
    em_scheduler *s = em_scheduler_from_json(
        c, "{\"_class_name\": \"DDPMScheduler\", \"unknown_key\": [1, {}]}", NULL);
    CHECK(s != NULL); /* keys no class has are ignored, as diffusers ignores them */
    /* Python's json writes non-finite floats bare; inside strings they stay text */
    em_scheduler *d = em_scheduler_from_json(
        c, "{\"_class_name\": \"DPMSolverMultistepScheduler\", \"lambda_min_clipped\": "
           "-Infinity, \"_note\": \"NaN \\\"Infinity\\\"\", \"x\": [NaN, Infinity]}", NULL);
    CHECK_MSG(d != NULL, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    em_scheduler_free(d);
    em_ctx_clear_error(c);
    em_tensor *x = em_zeros(c, EM_F32, EM_SHAPE(1, 2, 2, 2));
    CHECK(em_scheduler_step(c, s, x, 999, x, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "set_timesteps");
    CHECK(em_scheduler_set_timesteps(c, s, 0) == EM_ERR_INVALID_ARG);
    em_ctx_clear_error(c);
    CHECK(em_scheduler_set_timesteps(c, s, 1001) == EM_ERR_INVALID_ARG);
    em_ctx_clear_error(c);
    CHECK(em_scheduler_set_timesteps(c, s, 10) == EM_OK);
    CHECK(em_scheduler_step(c, s, x, 555, x, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INDEX, "555", "not in the schedule");
    CHECK(em_scheduler_step(c, s, x, 900, x, NULL) == NULL); /* DDPM draws noise at t > 0 */
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "generator");
    em_tensor *y = em_zeros(c, EM_F32, EM_SHAPE(1, 2, 2, 3));
    CHECK(em_scheduler_step(c, s, y, 900, x, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "differ in shape");
    em_tensor *h = em_zeros(c, EM_BF16, EM_SHAPE(1, 2, 2, 2));
    CHECK(em_scheduler_step(c, s, h, 900, x, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_DTYPE, "f32");
    /* add_noise: a timestep per sample of dim 0, one dtype; the sigma family noises f32 only */
    CHECK(em_scheduler_add_noise_batch(c, s, x, x, (const double[]){1, 2}, 2) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "2 timesteps", "one per sample");
    CHECK(em_scheduler_add_noise_batch(c, s, x, x, NULL, 1) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "timesteps");
    CHECK(em_scheduler_add_noise(c, s, h, x, 1) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "one dtype");
    CHECK(em_scheduler_add_noise(c, s, h, h, -1) == NULL);
    CHECK_ERR(c, EM_ERR_INDEX, "timestep -1");
    /* the FlowMatch dynamic shift needs mu */
    em_scheduler *f = em_scheduler_from_json(
        c, "{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"use_dynamic_shifting\": true}",
        NULL);
    CHECK(f != NULL);
    CHECK(em_scheduler_set_timesteps(c, f, 4) == EM_ERR_INVALID_ARG);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "mu");
    /* Euler steps past the end */
    em_scheduler *e = em_scheduler_from_config(c, s, EM_SCHED_EULER);
    CHECK(e && em_scheduler_set_timesteps(c, e, 2) == EM_OK);
    CHECK(e && em_scheduler_add_noise(c, e, h, h, em_scheduler_timesteps(e, NULL)[0]) == NULL);
    CHECK_ERR(c, EM_ERR_DTYPE, "EulerDiscreteScheduler noises f32");
    int64_t n;
    const double *ts = em_scheduler_timesteps(e, &n);
    CHECK(n == 2);
    for (int i = 0; i < 2 && ts; i++) CHECK(em_scheduler_step(c, e, x, ts[i], x, NULL) != NULL);
    CHECK(ts && em_scheduler_step(c, e, x, ts[1], x, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INDEX, "past the last");
    em_scheduler_kind k;
    CHECK(em_scheduler_kind_parse("dpm++2m", &k) && k == EM_SCHED_DPM_MULTISTEP);
    CHECK(!strcmp(em_scheduler_kind_class(EM_SCHED_EULER_ANCESTRAL), "EulerAncestralDiscreteScheduler"));
    em_scheduler_free(e);
    em_scheduler_free(f);
    em_scheduler_free(s);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_against_diffusers), T(test_bad_configs), T(test_misuse))

/*
 * Optimizers, clipping and schedules (ember/optim.h) against torch: tests/fixtures/optim/train10
 * (scripts/gen_optim_fixtures.py) holds 10 steps of a linear model trained by torch's AdamW and
 * SGD with clip_grad_norm_ and transformers' cosine schedule. Ember trains the same model from
 * the same start (its own forward, autodiff, clipping and updates): the losses before each
 * update, the gradient norms clipping reports, the learning rates and the final parameters must
 * match torch's to 1e-5.
 */
#include <math.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

typedef enum { ADAMW, ADAMW_DEFAULTS, SGD_NESTEROV, SGD_DAMPENING } run_kind;

static double value_at(em_ctx *c, em_tensor *t, int i) {
    double v[16] = {0};
    if (em_to_host(c, t, v, (size_t)em_tensor_numel(t) * sizeof(double)) != EM_OK) return NAN;
    return v[i];
}

static void run(run_kind kind, const char *name) {
    em_test_bundle *b = em_test_bundle_load("optim/train10");
    if (!b) return;
    em_ctx *c = em_ctx_create();
    em_tensor *W = em_test_bundle_get(b, c, "W0"), *bias = em_test_bundle_get(b, c, "b0");
    em_tensor *X = em_test_bundle_get(b, c, "X"), *Y = em_test_bundle_get(b, c, "Y");
    em_tensor *params[2] = {W, bias};
    CHECK(em_tensor_requires_grad(c, W, true) == EM_OK);
    CHECK(em_tensor_requires_grad(c, bias, true) == EM_OK);
    em_optimizer *opt = NULL;
    int64_t warmup = -1, steps = em_test_bundle_meta_int(b, "steps", 10);
    double clip = 0, base_lr = 0.05;
    if (kind == ADAMW) {
        em_adamw_options o = em_adamw_default_options();
        o.lr = base_lr;
        opt = em_adamw_create(c, params, 2, &o);
        warmup = em_test_bundle_meta_int(b, "adamw_warmup", 3);
        clip = 0.5;
    } else if (kind == ADAMW_DEFAULTS) {
        opt = em_adamw_create(c, params, 2, NULL);
        base_lr = 1e-3;
    } else if (kind == SGD_NESTEROV) {
        em_sgd_options o = {.lr = base_lr, .momentum = 0.9, .nesterov = true, .weight_decay = 0.01};
        opt = em_sgd_create(c, params, 2, &o);
        clip = 1.0;
    } else {
        em_sgd_options o = {.lr = base_lr, .momentum = 0.8, .dampening = 0.3};
        opt = em_sgd_create(c, params, 2, &o);
        warmup = em_test_bundle_meta_int(b, "sgd_dampening_warmup", 2);
    }
    CHECK(opt != NULL);
    char key[64];
    snprintf(key, sizeof key, "%s/losses", name);
    em_tensor *losses = em_test_bundle_get(b, c, key);
    snprintf(key, sizeof key, "%s/lrs", name);
    em_tensor *lrs = em_test_bundle_get(b, c, key);
    snprintf(key, sizeof key, "%s/norms", name);
    em_tensor *norms = clip > 0 ? em_test_bundle_get(b, c, key) : NULL;
    for (int s = 0; s < steps && opt; s++) {
        em_scope_push(c);
        em_grad_enable(c, true);
        em_tensor *d = em_sub(c, em_linear(c, X, W, bias), Y);
        em_tensor *loss = em_mean(c, em_mul(c, d, d), NULL, 0, false);
        em_grad_enable(c, false);
        double lv = NAN, norm = NAN;
        CHECK(em_item(c, loss, &lv) == EM_OK);
        CHECK(em_backward(c, loss) == EM_OK);
        if (clip > 0) {
            CHECK(em_clip_grad_norm(c, params, 2, clip, &norm) == EM_OK);
            double want = value_at(c, norms, s);
            CHECK_MSG(fabs(norm - want) <= 1e-5 * fabs(want), "%s step %d: grad norm %.9g, torch %.9g", name, s, norm, want);
        }
        double lr = warmup >= 0 ? base_lr * em_lr_cosine_with_warmup(s, warmup, steps, 0.5) : base_lr;
        em_optimizer_set_lr(opt, lr);
        double want_lr = value_at(c, lrs, s), want_loss = value_at(c, losses, s);
        CHECK_MSG(fabs(lr - want_lr) <= 1e-12, "%s step %d: lr %.12g, torch %.12g", name, s, lr, want_lr);
        CHECK_MSG(fabs(lv - want_loss) <= 1e-5, "%s step %d: loss %.9g, torch %.9g", name, s, lv, want_loss);
        CHECK(em_optimizer_step(c, opt) == EM_OK);
        if (em_ctx_error(c)) fprintf(stderr, "%s\n", em_ctx_error(c)->message);
        em_optimizer_zero_grad(opt);
        CHECK(em_tensor_grad(W) == NULL);
        em_scope_pop(c);
    }
    CHECK(em_optimizer_steps(opt) == steps);
    snprintf(key, sizeof key, "%s/W", name);
    em_test_allclose(c, W, em_test_bundle_get(b, c, key), 1e-5, 1e-5, key);
    snprintf(key, sizeof key, "%s/b", name);
    em_test_allclose(c, bias, em_test_bundle_get(b, c, key), 1e-5, 1e-5, key);
    if (em_ctx_error(c)) fprintf(stderr, "%s\n", em_ctx_error(c)->message);
    CHECK(em_ctx_status(c) == EM_OK);
    em_optimizer_free(opt);
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void test_adamw_cosine_clip(void) { run(ADAMW, "adamw"); }
static void test_adamw_defaults(void) { run(ADAMW_DEFAULTS, "adamw_defaults"); }
static void test_sgd_nesterov_clip(void) { run(SGD_NESTEROV, "sgd_nesterov"); }
static void test_sgd_dampening_cosine(void) { run(SGD_DAMPENING, "sgd_dampening"); }

/* transformers' schedules at their edges */
static void test_schedules(void) {
    CHECK(em_lr_cosine_with_warmup(0, 3, 10, 0.5) == 0);
    CHECK(fabs(em_lr_cosine_with_warmup(2, 4, 10, 0.5) - 0.5) < 1e-15);
    CHECK(em_lr_cosine_with_warmup(4, 4, 10, 0.5) == 1);
    CHECK(fabs(em_lr_cosine_with_warmup(7, 4, 10, 0.5) - 0.5) < 1e-15);
    CHECK(fabs(em_lr_cosine_with_warmup(10, 4, 10, 0.5)) < 1e-15);
    CHECK(em_lr_cosine_with_warmup(0, 0, 10, 0.5) == 1);
    CHECK(em_lr_constant_with_warmup(1, 4) == 0.25 && em_lr_constant_with_warmup(9, 4) == 1);
}

static void test_errors(void) {
    em_ctx *c = em_ctx_create();
    em_tensor *p = em_zeros(c, EM_F32, EM_SHAPE(2));
    em_adamw_options o = em_adamw_default_options();
    o.beta1 = 1.0;
    CHECK(em_adamw_create(c, &p, 1, &o) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "adamw", "betas");
    em_ctx_clear_error(c);
    em_sgd_options s = {.lr = 0.1, .nesterov = true};
    CHECK(em_sgd_create(c, &p, 1, &s) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "sgd", "nesterov");
    em_ctx_clear_error(c);
    em_tensor *ids = em_zeros(c, EM_I64, EM_SHAPE(2));
    CHECK(em_sgd_create(c, &ids, 1, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "parameter 0", "i64");
    em_ctx_clear_error(c);
    CHECK(em_clip_grad_norm(c, &p, 1, 0.0, NULL) == EM_ERR_INVALID_ARG);
    em_ctx_clear_error(c);
    /* a parameter without a gradient is skipped by step and by clipping */
    em_optimizer *opt = em_adamw_create(c, &p, 1, NULL);
    double norm = -1;
    CHECK(em_clip_grad_norm(c, &p, 1, 1.0, &norm) == EM_OK && norm == 0);
    CHECK(em_optimizer_step(c, opt) == EM_OK);
    em_optimizer_free(opt);
    em_ctx_free(c);
}

/* The adamw_step op itself: the CPU's one-pass f32 kernel against the op-by-op composition
 * (which f64 tensors take), both the formula torch's AdamW computes; and its refusals, each
 * before anything is written. */
static void test_adamw_step_op(void) {
    em_ctx *c = em_ctx_create();
    enum { N = 1000 };
    float p[N], g[N], m[N], v[N];
    for (int i = 0; i < N; i++) {
        p[i] = sinf((float)i * 0.37f);
        g[i] = cosf((float)i * 0.11f) * 0.5f;
        m[i] = 0.01f * (float)(i % 7);
        v[i] = 0.001f * (float)(i % 5);
    }
    em_tensor *t32[4], *t64[4];
    const float *src[4] = {p, g, m, v};
    for (int k = 0; k < 4; k++) { /* from the host: no pending work reads what the op writes */
        double d[N];
        for (int i = 0; i < N; i++) d[i] = src[k][i];
        t32[k] = em_from_host(c, EM_F32, EM_SHAPE(N), src[k]);
        t64[k] = em_from_host(c, EM_F64, EM_SHAPE(N), d);
    }
    double lr = 1e-2, wd = 0.1, b1 = 0.9, b2 = 0.999, step = 3;
    em_tensor *k32[3] = {em_scalar(c, 1 - lr * wd, EM_F32),
                         em_scalar(c, sqrt(1 - pow(b2, step)), EM_F32),
                         em_scalar(c, -lr / (1 - pow(b1, step)), EM_F32)};
    em_tensor *k64[3] = {em_scalar(c, (float)(1 - lr * wd), EM_F64),
                         em_scalar(c, (float)sqrt(1 - pow(b2, step)), EM_F64),
                         em_scalar(c, (float)(-lr / (1 - pow(b1, step))), EM_F64)};
    CHECK(em_adamw_step(c, t32[0], t32[1], t32[2], t32[3], k32[0], k32[1], k32[2], b1, b2, 1e-8) ==
          EM_OK);
    CHECK(em_adamw_step(c, t64[0], t64[1], t64[2], t64[3], k64[0], k64[1], k64[2], b1, b2, 1e-8) ==
          EM_OK);
    double worst = 0;
    for (int k = 0; k < 4; k++) {
        if (k == 1) continue;
        double a[N], b[N];
        CHECK(em_to_host(c, em_cast(c, t32[k], EM_F64), a, sizeof a) == EM_OK);
        CHECK(em_to_host(c, t64[k], b, sizeof b) == EM_OK);
        for (int i = 0; i < N; i++) {
            double d = fabs(a[i] - b[i]) / (fabs(b[i]) + 1e-6);
            if (d > worst) worst = d;
        }
    }
    CHECK(worst < 1e-5);
    /* refusals: nothing written */
    float before[N];
    CHECK(em_to_host(c, t32[0], before, sizeof before) == EM_OK);
    em_tensor *wrong_shape = em_zeros(c, EM_F32, EM_SHAPE(2, 500));
    CHECK(em_adamw_step(c, t32[0], wrong_shape, t32[2], t32[3], k32[0], k32[1], k32[2], b1, b2,
                        1e-8) == EM_ERR_SHAPE);
    CHECK_ERR(c, EM_ERR_SHAPE, "adamw_step", "grad");
    em_ctx_clear_error(c);
    CHECK(em_adamw_step(c, t32[0], t64[1], t32[2], t32[3], k32[0], k32[1], k32[2], b1, b2,
                        1e-8) == EM_ERR_DTYPE);
    CHECK_ERR(c, EM_ERR_DTYPE, "adamw_step", "grad");
    em_ctx_clear_error(c);
    em_tensor *strided = em_slice(c, em_zeros(c, EM_F32, EM_SHAPE(2 * N)), 0, 0, 2 * N, 2);
    CHECK(em_adamw_step(c, t32[0], t32[1], strided, t32[3], k32[0], k32[1], k32[2], b1, b2,
                        1e-8) == EM_ERR_INVALID_ARG);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "adamw_step", "exp_avg", "contiguous");
    em_ctx_clear_error(c);
    CHECK(em_adamw_step(c, t32[0], t32[1], t32[2], t32[3], t32[0], k32[1], k32[2], b1, b2,
                        1e-8) == EM_ERR_SHAPE);
    CHECK_ERR(c, EM_ERR_SHAPE, "adamw_step", "decay", "0-d");
    em_ctx_clear_error(c);
    CHECK(em_adamw_step(c, t32[0], t32[1], t32[2], t32[3], k32[0], k32[1], k32[2], 1.0, b2,
                        1e-8) == EM_ERR_INVALID_ARG);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "adamw_step", "beta1");
    em_ctx_clear_error(c);
    /* a parameter that requires grad, with grad on: refused as every in-place write is */
    CHECK(em_tensor_requires_grad(c, t32[0], true) == EM_OK);
    bool was = em_grad_enable(c, true);
    CHECK(em_adamw_step(c, t32[0], t32[1], t32[2], t32[3], k32[0], k32[1], k32[2], b1, b2,
                        1e-8) == EM_ERR_UNSUPPORTED);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "adamw_step", "requires grad");
    em_ctx_clear_error(c);
    em_grad_enable(c, was);
    float after[N];
    CHECK(em_to_host(c, t32[0], after, sizeof after) == EM_OK);
    CHECK(memcmp(before, after, sizeof after) == 0);
    em_ctx_free(c);
}

/* adamw_step's composition (bf16 takes it) on a parameter of more than 2^20 elements: it goes
 * slab by slab of rows (ops/decomp.c), which must give, bit for bit, the values of torch's
 * formula written with the same ops on the whole tensor at once. */
static void test_adamw_step_slabs(void) {
    em_ctx *c = em_ctx_create();
    enum { R = 1500, C = 1024 }; /* 1.5 Mi elements: a slab of 1024 rows and one of 476 */
    double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    em_tensor *k[3] = {em_scalar(c, 0.999, EM_F32), em_scalar(c, 0.05, EM_F32),
                       em_scalar(c, -0.02, EM_F32)};
    static float x[R * C];
    static uint16_t a[R * C], b[R * C];
    em_tensor *t[4], *w[4]; /* p, g, m, v: the op's and the whole-tensor formula's */
    for (int i = 0; i < 4; i++) { /* from the host: no pending work reads what the op writes */
        for (int j = 0; j < R * C; j++) {
            x[j] = sinf((float)j * (0.37f + 0.11f * (float)i));
            if (i == 3) x[j] *= x[j]; /* exp_avg_sq >= 0 */
        }
        CHECK(em_to_host(c, em_cast(c, em_from_host(c, EM_F32, EM_SHAPE(R, C), x), EM_BF16), a,
                         sizeof a) == EM_OK);
        t[i] = em_from_host(c, EM_BF16, EM_SHAPE(R, C), a);
        w[i] = em_from_host(c, EM_BF16, EM_SHAPE(R, C), a);
    }
    CHECK(em_adamw_step(c, t[0], t[1], t[2], t[3], k[0], k[1], k[2], b1, b2, eps) == EM_OK);
    em_tensor *p = w[0], *g = w[1], *m = w[2], *v = w[3];
    em_assign(c, p, em_mul(c, p, k[0]));
    em_assign(c, m, em_add(c, m, em_mul_scalar(c, em_sub(c, g, m), 1.0 - b1)));
    em_assign(c, v, em_add(c, em_mul_scalar(c, v, b2), em_mul_scalar(c, em_mul(c, g, g), 1.0 - b2)));
    em_tensor *denom = em_add_scalar(c, em_div(c, em_sqrt(c, v), k[1]), eps);
    em_assign(c, p, em_add(c, p, em_mul(c, em_div(c, m, denom), k[2])));
    const char *names[] = {"param", "grad", "exp_avg", "exp_avg_sq"};
    for (int i = 0; i < 4; i++) {
        CHECK(em_to_host(c, t[i], a, sizeof a) == EM_OK && em_to_host(c, w[i], b, sizeof b) == EM_OK);
        CHECK_MSG(memcmp(a, b, sizeof a) == 0, "%s differs from the whole-tensor formula's",
                  names[i]);
    }
    CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_adamw_cosine_clip), T(test_adamw_defaults), T(test_sgd_nesterov_clip),
             T(test_sgd_dampening_cosine), T(test_schedules), T(test_errors),
             T(test_adamw_step_op), T(test_adamw_step_slabs))

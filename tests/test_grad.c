/*
 * Autodiff (ember/autograd.h) against torch.autograd: every case of tests/fixtures/grad
 * (scripts/gen_grad_fixtures.py) runs its op with grad enabled, backpropagates torch's upstream
 * gradient and compares each input's gradient with torch's (1e-5 absolute + relative, f32; a
 * case's grad_atol / grad_rtol where its inputs are bf16), then
 * checks the same gradients by central finite differences of Ember's own forward: in f64 where
 * the op runs in f64 (step 1e-6, tolerance 1e-6 + 1e-5 relative), else in f32 (step 1e-2,
 * tolerance 2e-2 + 2e-2 relative: f32 differences are that coarse). Then the tape's semantics:
 * accumulation, no recording when off, the errors.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"
#include "ops/dispatch.h"
#include "testing/op_cases.h"

static em_opcase_set *load(em_ctx *c) {
    em_opcase_set *s = em_opcases_load(c, em_test_fixture_path("grad", "grad.json"));
    if (!s) fprintf(stderr, "%s\n", em_ctx_error(c)->message);
    CHECK(s != NULL);
    return s;
}

typedef struct built {
    int n_in, n_out;
    em_tensor *in[EM_MAX_INPUTS], *base[EM_MAX_INPUTS], *out[EM_MAX_OUTPUTS];
    bool leaf[EM_MAX_INPUTS];
} built;

/* The case's inputs (leaves marked where torch has a gradient) in dtype `as`. */
static bool make_inputs(em_ctx *c, em_opcase_set *s, int i, em_dtype as, bool mark, built *b,
                        char *why, size_t wn) {
    memset(b, 0, sizeof *b);
    b->n_in = em_opcases_len(s, i, "inputs");
    for (int k = 0; k < b->n_in; k++) {
        long long alias = em_opcases_int_at(s, i, "alias", k, -1);
        b->leaf[k] = em_opcases_len(s, i, "grads") > k &&
                     em_opcases_tensor(c, s, i, "grads", k, em_device_cpu(), false, NULL,
                                       EM_DTYPE_AUTO, why, wn) != NULL;
        if (alias >= 0) {
            b->in[k] = b->in[alias];
            b->leaf[k] = false; /* its gradient is the aliased input's */
            continue;
        }
        why[0] = 0;
        b->in[k] = em_opcases_tensor(c, s, i, "inputs", k, em_device_cpu(), mark && b->leaf[k],
                                     &b->base[k], as, why, wn);
        if (!b->in[k] && why[0]) return false;
    }
    return !em_ctx_status(c);
}

/* Runs the case's op on b->in (the loss cases call em_cross_entropy). */
static bool run_case(em_ctx *c, em_opcase_set *s, int i, built *b, char *why, size_t wn) {
    const char *name = em_opcases_op(s, i);
    if (!strcmp(name, "cross_entropy")) {
        /* the fixture's ignore_index is torch's default, -100 */
        b->out[0] = em_cross_entropy(c, b->in[0], b->in[1], -100);
        b->n_out = b->out[0] ? 1 : 0;
    } else {
        const em_op_def *op = em_op_find(name);
        em_attr attrs[EM_MAX_ATTRS];
        if (!op || !em_opcases_attrs(s, i, op, attrs, why, wn)) {
            if (!op) snprintf(why, wn, "unknown op %s", name);
            return false;
        }
        em_op_run(c, __FILE__, __LINE__, op->id, b->in, b->n_in, attrs, b->out, EM_MAX_OUTPUTS,
                  &b->n_out);
    }
    if (em_ctx_status(c)) snprintf(why, wn, "%.900s", em_ctx_error(c)->message);
    return !em_ctx_status(c) && b->n_out > 0;
}

/* Backpropagates the case's upstream gradients (converted to the outputs' dtypes). Outputs
 * without one (topk's and sort's indices) get none. */
static bool backprop(em_ctx *c, em_opcase_set *s, int i, built *b, char *why, size_t wn) {
    int n_g = em_opcases_len(s, i, "grad_out");
    if (n_g == 1) {
        em_tensor *g = em_opcases_tensor(c, s, i, "grad_out", 0, em_device_cpu(), false, NULL,
                                         em_tensor_dtype(b->out[0]) == EM_F64 ? EM_F64 : EM_DTYPE_AUTO,
                                         why, wn);
        em_backward_grad(c, b->out[0], g);
    } else { /* several outputs: one loss sum(out_o * g_o) */
        em_tensor *loss = NULL;
        for (int o = 0; o < n_g && o < b->n_out; o++) {
            em_tensor *g = em_opcases_tensor(c, s, i, "grad_out", o, em_device_cpu(), false,
                                             NULL, em_tensor_dtype(b->out[o]), why, wn);
            em_tensor *t = em_sum(c, em_mul(c, b->out[o], g), NULL, 0, false);
            loss = loss ? em_add(c, loss, t) : t;
        }
        em_backward(c, loss);
    }
    if (em_ctx_status(c)) snprintf(why, wn, "%.900s", em_ctx_error(c)->message);
    return !em_ctx_status(c);
}

static void test_against_torch(void) {
    em_ctx *c = em_ctx_create();
    em_opcase_set *s = load(c);
    if (!s) {
        em_ctx_free(c);
        return;
    }
    int n = em_opcases_count(s), failed = 0;
    for (int i = 0; i < n; i++) {
        const char *name = em_opcases_name(s, i);
        char why[1024] = "";
        built b;
        em_scope_push(c);
        em_grad_enable(c, true);
        bool ok = make_inputs(c, s, i, EM_DTYPE_AUTO, true, &b, why, sizeof why) &&
                  run_case(c, s, i, &b, why, sizeof why);
        em_opcase_result r;
        memset(&r, 0, sizeof r);
        r.pass = true;
        double atol = em_opcases_number(s, i, "atol", 1e-5), rtol = em_opcases_number(s, i, "rtol", 1e-5);
        for (int o = 0; ok && o < b.n_out && o < em_opcases_len(s, i, "outputs") && r.pass; o++)
            em_opcases_check(c, s, i, "outputs", o, b.out[o], atol, rtol, &r);
        ok = ok && r.pass && backprop(c, s, i, &b, why, sizeof why);
        for (int k = 0; ok && k < b.n_in && r.pass; k++) {
            if (!b.leaf[k]) continue;
            em_tensor *g = em_tensor_grad(b.base[k]);
            if (!g) {
                snprintf(why, sizeof why, "input %d got no gradient", k);
                ok = false;
                break;
            }
            em_opcases_check(c, s, i, "grads", k, g, em_opcases_number(s, i, "grad_atol", 1e-5),
                             em_opcases_number(s, i, "grad_rtol", 1e-5), &r);
        }
        if (!r.pass) snprintf(why, sizeof why, "%.900s", r.msg);
        ok = ok && r.pass;
        CHECK_MSG(ok, "%s: %s", name, why);
        failed += !ok;
        CHECK(em_grad_tape_size(c) == 0);
        em_grad_enable(c, false);
        em_grad_tape_clear(c);
        em_scope_pop(c);
        em_ctx_clear_error(c);
    }
    fprintf(stderr, "grad vs torch: %d cases, %d failed\n", n, failed);
    em_opcases_free(s);
    em_ctx_free(c);
}

/* sum(out_o * g_o) over the outputs, in double on the host */
static double objective(em_ctx *c, em_opcase_set *s, int i, built *b) {
    double f = 0;
    char why[256];
    em_scope_push(c);
    built fb = *b;
    if (!run_case(c, s, i, &fb, why, sizeof why)) {
        em_scope_pop(c);
        return NAN;
    }
    for (int o = 0; o < fb.n_out && o < em_opcases_len(s, i, "grad_out"); o++) {
        em_tensor *g = em_opcases_tensor(c, s, i, "grad_out", o, em_device_cpu(), false, NULL,
                                         EM_F64, why, sizeof why);
        int64_t m = em_tensor_numel(fb.out[o]);
        double *y = malloc((size_t)(m ? m : 1) * sizeof *y), *gv = malloc((size_t)(m ? m : 1) * sizeof *gv);
        em_to_host(c, em_cast(c, fb.out[o], EM_F64), y, (size_t)m * sizeof *y);
        em_to_host(c, g, gv, (size_t)m * sizeof *gv);
        for (int64_t e = 0; e < m; e++) /* an infinite output (sdpa_lse's row that sees no key:
                                            * -inf) stays so under a small step: no slope */
            if (isfinite(y[e])) f += y[e] * gv[e];
        free(y);
        free(gv);
    }
    em_scope_pop(c);
    return f;
}

static double get_el(void *p, em_dtype t, int64_t e) {
    return t == EM_F64 ? ((double *)p)[e] : ((float *)p)[e];
}
static void set_el(void *p, em_dtype t, int64_t e, double v) {
    if (t == EM_F64) ((double *)p)[e] = v;
    else ((float *)p)[e] = (float)v;
}

/* Ops whose f64 kernel computes in f32 (the CPU's softmax rows do): differences of a function
 * known to 1e-7 are noise at a 1e-6 step, so these are differenced in f32 like ops without an
 * f64 kernel. */
static bool f32_inside(const char *op) {
    return !strcmp(op, "softmax") || !strcmp(op, "log_softmax") || !strcmp(op, "cross_entropy");
}

static void test_finite_differences(void) {
    em_ctx *c = em_ctx_create();
    em_opcase_set *s = load(c);
    if (!s) {
        em_ctx_free(c);
        return;
    }
    int n = em_opcases_count(s), in_f64 = 0, in_f32 = 0;
    for (int i = 0; i < n; i++) {
        const char *name = em_opcases_name(s, i);
        char why[1024] = "";
        em_dtype dt = f32_inside(em_opcases_op(s, i)) ? EM_F32 : EM_F64;
        built b;
        em_scope_push(c);
        em_grad_enable(c, true);
        bool ok = make_inputs(c, s, i, dt, true, &b, why, sizeof why) &&
                  run_case(c, s, i, &b, why, sizeof why);
        if (!ok && dt == EM_F64) { /* the op has no f64 kernel: f32 */
            em_grad_tape_clear(c);
            em_scope_pop(c);
            em_ctx_clear_error(c);
            em_scope_push(c);
            dt = EM_F32;
            ok = make_inputs(c, s, i, dt, true, &b, why, sizeof why) &&
                 run_case(c, s, i, &b, why, sizeof why);
        }
        ok = ok && backprop(c, s, i, &b, why, sizeof why);
        em_grad_enable(c, false);
        in_f64 += ok && dt == EM_F64;
        in_f32 += ok && dt == EM_F32;
        if (ok && dt == EM_F32 && getenv("EMBER_TEST_VERBOSE")) fprintf(stderr, "f32 differences: %s\n", name);
        double h = dt == EM_F64 ? 1e-6 : 1e-2, atol = dt == EM_F64 ? 1e-6 : 2e-2,
               rtol = dt == EM_F64 ? 1e-5 : 2e-2;
        for (int k = 0; ok && k < b.n_in; k++) {
            if (!b.leaf[k]) continue;
            em_tensor *base = b.base[k];
            em_tensor *g = em_cast(c, em_tensor_grad(base), EM_F64);
            int64_t m = em_tensor_numel(base);
            double *an = malloc((size_t)(m ? m : 1) * sizeof *an);
            em_to_host(c, g, an, (size_t)m * sizeof *an);
            void *p = em_tensor_data(c, base); /* the views read this memory */
            for (int64_t e = 0; e < m && ok; e++) {
                double x0 = get_el(p, dt, e);
                set_el(p, dt, e, x0 + h);
                double fp = objective(c, s, i, &b);
                set_el(p, dt, e, x0 - h);
                double fm = objective(c, s, i, &b);
                set_el(p, dt, e, x0);
                double fd = (fp - fm) / (2 * h);
                if (!(fabs(fd - an[e]) <= atol + rtol * fabs(fd))) {
                    snprintf(why, sizeof why,
                             "%s: input %d element %lld: finite difference %.9g, backward %.9g",
                             em_dtype_name(dt), k, (long long)e, fd, an[e]);
                    ok = false;
                }
            }
            free(an);
        }
        CHECK_MSG(ok, "%s: %s", name, why);
        em_grad_tape_clear(c);
        em_scope_pop(c);
        em_ctx_clear_error(c);
    }
    fprintf(stderr, "finite differences: %d cases in f64, %d in f32\n", in_f64, in_f32);
    em_opcases_free(s);
    em_ctx_free(c);
}

static em_tensor *param(em_ctx *c, int n, const float *v) {
    em_tensor *t = em_from_host(c, EM_F32, 1, (int64_t[]){n}, v);
    em_tensor_requires_grad(c, t, true);
    return t;
}

static void read(em_ctx *c, em_tensor *t, float *v, int n) {
    CHECK(t != NULL);
    if (t) CHECK(em_to_host_f32(c, t, v, n) == EM_OK);
}

/* y = x*w + x (x used twice), twice backpropagated: gradients add up until zero_grad */
static void test_accumulation(void) {
    em_ctx *c = em_ctx_create();
    em_tensor *x = param(c, 2, (float[]){1, 2}), *w = param(c, 2, (float[]){3, 5});
    for (int rep = 0; rep < 2; rep++) {
        em_grad_enable(c, true);
        em_tensor *y = em_sum(c, em_add(c, em_mul(c, x, w), x), NULL, 0, false);
        em_grad_enable(c, false);
        CHECK(em_backward(c, y) == EM_OK);
        CHECK(em_grad_tape_size(c) == 0);
    }
    float gx[2], gw[2];
    read(c, em_tensor_grad(x), gx, 2);
    read(c, em_tensor_grad(w), gw, 2);
    CHECK(gx[0] == 8 && gx[1] == 12); /* 2 * (w + 1) */
    CHECK(gw[0] == 2 && gw[1] == 4);  /* 2 * x */
    em_tensor_zero_grad(x);
    CHECK(em_tensor_grad(x) == NULL);
    em_ctx_free(c);
}

/* Two leaves whose rule hands both the same gradient get a copy each: clipping scales each once */
static void test_leaf_grads_own_memory(void) {
    em_ctx *c = em_ctx_create();
    em_tensor *a = param(c, 2, (float[]){1, 2}), *b = param(c, 2, (float[]){3, 4});
    em_grad_enable(c, true);
    em_tensor *y = em_add(c, a, b);
    em_grad_enable(c, false);
    CHECK(em_backward_grad(c, y, em_from_host(c, EM_F32, 1, (int64_t[]){2}, (float[]){3, 4})) ==
          EM_OK);
    CHECK(em_tensor_grad(a) != em_tensor_grad(b));
    em_tensor *ps[2] = {a, b};
    double norm = 0;
    CHECK(em_clip_grad_norm(c, ps, 2, 1.0, &norm) == EM_OK);
    CHECK(fabs(norm - sqrt(50.0)) < 1e-6);
    float ga[2], gb[2];
    read(c, em_tensor_grad(a), ga, 2);
    read(c, em_tensor_grad(b), gb, 2);
    double s = 1.0 / (sqrt(50.0) + 1e-6);
    CHECK(fabs(ga[0] - 3 * s) < 1e-6 && fabs(gb[1] - 4 * s) < 1e-6);
    em_ctx_free(c);
}

static void test_off_records_nothing(void) {
    em_ctx *c = em_ctx_create();
    em_tensor *x = param(c, 2, (float[]){1, 2});
    CHECK(!em_grad_is_enabled(c));
    em_tensor *y = em_sum(c, em_exp(c, x), NULL, 0, false);
    CHECK(em_grad_tape_size(c) == 0);
    CHECK(!em_tensor_get_requires_grad(y));
    CHECK(em_backward(c, y) == EM_ERR_INVALID_ARG);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "backward", "does not require grad");
    em_ctx_clear_error(c);
    /* on, but nothing requires grad: nothing recorded either */
    em_grad_enable(c, true);
    em_tensor *z = em_from_host(c, EM_F32, 1, (int64_t[]){2}, (float[]){1, 1});
    em_exp(c, z);
    CHECK(em_grad_tape_size(c) == 0);
    /* integer results carry no gradient */
    em_argmax(c, x, 0, false);
    CHECK(em_grad_tape_size(c) == 0);
    em_exp(c, x);
    CHECK(em_grad_tape_size(c) == 1);
    em_ctx_free(c); /* frees the tape */
}

static void test_errors(void) {
    em_ctx *c = em_ctx_create();
    em_tensor *x = param(c, 3, (float[]){1, 2, 3});
    em_grad_enable(c, true);
    /* an op without a backward rule: named, with where it was called */
    em_tensor *y = em_sum(c, em_cumsum(c, x, 0), NULL, 0, false);
    CHECK(em_backward(c, y) == EM_ERR_UNSUPPORTED);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "cumsum", "no backward rule", "test_grad.c");
    em_ctx_clear_error(c);
    /* a value a rule reads, overwritten in place after the op used it (torch's "modified by
     * an inplace operation") */
    em_grad_tape_clear(c);
    em_tensor *m = em_mul(c, x, em_from_host(c, EM_F32, 1, (int64_t[]){3}, (float[]){1, 1, 1}));
    em_tensor *loss = em_sum(c, em_mul(c, m, m), NULL, 0, false); /* mul reads its inputs */
    em_grad_enable(c, false);
    CHECK(em_assign(c, m, em_scalar(c, 7.0, EM_F32)) == EM_OK); /* grad off: allowed */
    CHECK(em_backward(c, loss) == EM_ERR_INVALID_ARG);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "mul", "modified by an in-place write");
    em_ctx_clear_error(c);
    /* in-place writes into a tensor that requires grad are refused while recording */
    em_grad_enable(c, true);
    CHECK(em_assign(c, x, em_scalar(c, 1.0, EM_F32)) == EM_ERR_UNSUPPORTED);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "assign", "requires grad");
    em_ctx_clear_error(c);
    float xv[3];
    read(c, x, xv, 3);
    CHECK(xv[0] == 1 && xv[2] == 3); /* nothing written */
    /* marking: only floating leaves */
    em_tensor *ids = em_from_host(c, EM_I64, 1, (int64_t[]){1}, (int64_t[]){0});
    CHECK(em_tensor_requires_grad(c, ids, true) == EM_ERR_DTYPE);
    em_ctx_clear_error(c);
    em_tensor *e = em_exp(c, x);
    CHECK(em_tensor_requires_grad(c, e, true) == EM_ERR_INVALID_ARG);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "not a leaf");
    em_ctx_clear_error(c);
    /* a non-scalar output needs an explicit gradient; a second backward has no graph */
    CHECK(em_backward(c, e) == EM_ERR_SHAPE);
    em_ctx_clear_error(c);
    em_tensor *s1 = em_sum(c, e, NULL, 0, false);
    CHECK(em_backward(c, s1) == EM_OK);
    CHECK(em_backward(c, s1) == EM_ERR_INVALID_ARG);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "released");
    em_ctx_free(c);
}

static int double_it(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *statics,
                     int n_statics, em_tensor **out, int max_out, void *user) {
    out[0] = em_add(c, in[0], in[0]);
    return out[0] ? 1 : -1;
}

/* Paths that would cut a gradient silently are refused instead: compiled functions. */
static void test_not_differentiable_yet(void) {
    em_ctx *c = em_ctx_create();
    em_tensor *x = param(c, 2, (float[]){1, 2});
    em_compiled *f = em_compile(c, "double_it", double_it, NULL);
    em_tensor *out = NULL;
    em_grad_enable(c, true);
    CHECK(em_compiled_call(c, f, &x, 1, NULL, 0, &out, 1) < 0);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "double_it", "requires grad", "not differentiable");
    em_ctx_clear_error(c);
    em_grad_enable(c, false);
    CHECK(em_compiled_call(c, f, &x, 1, NULL, 0, &out, 1) == 1); /* grad off: a constant (in scope) */
    em_compiled_free(f);
    em_ctx_free(c);
}

/* A two-layer MLP with tied use, views and cross-entropy: the loss decreases under SGD */
static void test_tiny_training(void) {
    em_ctx *c = em_ctx_create();
    em_tensor *w1 = em_randn(c, EM_F32, EM_SHAPE(8, 4), 1, 0.0, 0.5);
    em_tensor *w2 = em_randn(c, EM_F32, EM_SHAPE(3, 8), 2, 0.0, 0.5);
    em_tensor *x = em_randn(c, EM_F32, EM_SHAPE(6, 4), 3, 0.0, 1.0);
    em_tensor *labels = em_from_host(c, EM_I64, 1, (int64_t[]){6},
                                     (int64_t[]){0, 1, 2, -100, 1, 0});
    em_tensor_requires_grad(c, w1, true);
    em_tensor_requires_grad(c, w2, true);
    double first = 0, last = 0;
    for (int step = 0; step < 20; step++) {
        em_scope_push(c);
        em_grad_enable(c, true);
        em_tensor *h = em_silu(c, em_linear(c, x, w1, NULL));
        em_tensor *loss = em_cross_entropy(c, em_linear(c, h, w2, NULL), labels, -100);
        em_grad_enable(c, false);
        double v = 0;
        CHECK(em_item(c, loss, &v) == EM_OK);
        CHECK(em_backward(c, loss) == EM_OK);
        if (step == 0) first = v;
        last = v;
        em_tensor *ws[2] = {w1, w2};
        for (int k = 0; k < 2; k++) {
            em_tensor *upd = em_sub(c, ws[k], em_mul_scalar(c, em_tensor_grad(ws[k]), 0.5));
            em_assign(c, ws[k], upd);
            em_tensor_zero_grad(ws[k]);
        }
        em_scope_pop(c);
    }
    CHECK(em_ctx_status(c) == EM_OK);
    CHECK_MSG(last < first * 0.7, "loss %g -> %g", first, last);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_against_torch), T(test_finite_differences), T(test_accumulation),
             T(test_leaf_grads_own_memory),
             T(test_off_records_nothing), T(test_errors), T(test_not_differentiable_yet),
             T(test_tiny_training))

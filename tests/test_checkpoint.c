/*
 * em_checkpoint (ember/autograd.h), the region alone: its gradients against the same function
 * recorded unwrapped (f64, where both run the same kernels: equal to 1e-12), for the region's
 * input (a recorded, non-leaf tensor) and for a parameter the function reads through its user
 * data; two outputs, one without a gradient; an output that is the input itself; regions nested
 * two deep. Errors: inside the first call (reported at once, user data freed), inside the
 * recomputation (the backward fails with the function's own error; the outer tape is released,
 * nothing leaks: the ASan build runs this test), inside a nested region's recomputation, an
 * in-place write into the region's input before the backward, bad arguments; with recording
 * off it is a plain call. The user data is freed exactly once on every path.
 */
#include <math.h>
#include <stdlib.h>

#include "ember/ember.h"
#include "harness.h"

#define N 3
#define H 4

/* per nesting level: calls of the function and frees of its user data; which call fails */
static int calls[3], frees[3], fail_level = -1, fail_call;

typedef struct region {
    em_tensor *w; /* a parameter the function reads (retained) */
    int level, depth;
    bool identity; /* out[1] is the input itself, not x * x */
    bool plain;    /* nested levels called directly (the unwrapped reference) */
} region;

static void region_free(void *p) {
    region *r = p;
    frees[r->level]++;
    em_tensor_release(r->w);
    free(r);
}

static region *region_new(em_tensor *w, int level, int depth, bool identity, bool plain) {
    region *r = calloc(1, sizeof *r);
    if (!r) abort();
    *r = (region){em_tensor_retain(w), level, depth, identity, plain};
    return r;
}

/* out[0] = g(x) + exp(0.1 w), g = tanh(x w) x, or the next level's out[0]; out[1] = x x or x */
static em_status region_fn(em_ctx *c, void *user, em_tensor *const *in, int n_in,
                           em_tensor **out, int n_out) {
    region *r = user;
    em_tensor *x = in[0];
    CHECK(n_in == 1);
    if (r->level == fail_level && ++calls[r->level] == fail_call)
        x = em_reshape(c, x, 1, (int64_t[]){7}); /* a real op error: [3, 4] into [7] */
    else if (r->level != fail_level)
        calls[r->level]++;
    em_tensor *g;
    if (r->level < r->depth) {
        region *inner = region_new(r->w, r->level + 1, r->depth, false, r->plain);
        em_tensor *o[1] = {NULL};
        if (r->plain) {
            region_fn(c, inner, &x, 1, o, 1);
            region_free(inner);
        } else {
            em_checkpoint(c, region_fn, inner, region_free, &x, 1, o, 1);
        }
        g = o[0];
    } else {
        g = em_mul(c, em_tanh(c, em_mul(c, x, r->w)), x);
    }
    out[0] = em_add(c, g, em_exp(c, em_mul_scalar(c, r->w, 0.1)));
    if (n_out > 1) out[1] = r->identity ? x : em_mul(c, x, x);
    return em_ctx_status(c);
}

typedef struct run_opts {
    bool ckpt, identity, use_out1;
    int depth;
} run_opts;

static const double X[N * H] = {0.3, -1.2, 0.7, 2.0, -0.4, 0.9, 1.1, -2.2, 0.05, 0.6, -0.8, 1.4};
static const double W[H] = {0.8, -0.5, 1.3, 0.2};

/* The leaves x and w (both requiring grad), recording turned on, and the region's input 1.5 x
 * (recorded: a non-leaf) */
static em_tensor *record_input(em_ctx *c, em_tensor **x, em_tensor **w) {
    *x = em_from_host(c, EM_F64, 2, (int64_t[]){N, H}, X);
    *w = em_from_host(c, EM_F64, 1, (int64_t[]){H}, W);
    em_tensor_requires_grad(c, *x, true);
    em_tensor_requires_grad(c, *w, true);
    em_grad_enable(c, true);
    return em_mul_scalar(c, *x, 1.5);
}

/* loss = sum(out0 k0) (+ sum(out1 k1)) of the region on 1.5 x; the gradients of x and w */
static em_status run(em_ctx *c, run_opts o, double *gx, double *gw, int *tape) {
    em_scope_push(c);
    em_tensor *x, *w, *xin = record_input(c, &x, &w);
    em_tensor *out[2] = {NULL, NULL};
    region *r = region_new(w, 0, o.depth, o.identity, !o.ckpt);
    int n_out = 2; /* out[1] unused (no gradient reaches it) unless use_out1 */
    if (o.ckpt) {
        em_checkpoint(c, region_fn, r, region_free, &xin, 1, out, n_out);
    } else {
        region_fn(c, r, &xin, 1, out, n_out);
        region_free(r);
    }
    double k0[N * H], k1[N * H];
    for (int i = 0; i < N * H; i++) {
        k0[i] = 0.25 * (i % 5) - 0.4;
        k1[i] = 0.1 * (i % 3) + 0.3;
    }
    em_tensor *loss = em_sum(c, em_mul(c, out[0], em_from_host(c, EM_F64, 2,
                                                                (int64_t[]){N, H}, k0)),
                             NULL, 0, false);
    if (o.use_out1)
        loss = em_add(c, loss, em_sum(c, em_mul(c, out[1], em_from_host(c, EM_F64, 2,
                                                                        (int64_t[]){N, H}, k1)),
                                      NULL, 0, false));
    em_grad_enable(c, false);
    if (tape) *tape = em_grad_tape_size(c);
    em_status s = em_backward(c, loss);
    if (!s) s = em_to_host(c, em_tensor_grad(x), gx, sizeof(double) * N * H);
    if (!s) s = em_to_host(c, em_tensor_grad(w), gw, sizeof(double) * H);
    em_scope_pop(c);
    return s;
}

static void reset_counts(void) {
    for (int i = 0; i < 3; i++) calls[i] = frees[i] = 0;
    fail_level = -1;
    fail_call = 0;
}

static void check_same(run_opts o, const char *what) {
    double rx[N * H], rw[H], gx[N * H], gw[H];
    em_ctx *c = em_ctx_create();
    run_opts ref = o;
    ref.ckpt = false;
    CHECK(run(c, ref, rx, rw, NULL) == EM_OK);
    reset_counts();
    int tape = -1;
    CHECK_MSG(run(c, o, gx, gw, &tape) == EM_OK, "%s: %s", what,
              em_ctx_error(c) ? em_ctx_error(c)->message : "");
    double err = 0;
    for (int i = 0; i < N * H; i++) err = fmax(err, fabs(gx[i] - rx[i]) / fmax(1, fabs(rx[i])));
    for (int i = 0; i < H; i++) err = fmax(err, fabs(gw[i] - rw[i]) / fmax(1, fabs(rw[i])));
    CHECK_MSG(err <= 1e-12, "%s: gradients differ by %.3g from the unwrapped function", what, err);
    /* the tape: x * 1.5, the region, and the loss's few ops; never the region's own */
    CHECK_MSG(tape > 0 && tape <= 8, "%s: %d nodes on the tape", what, tape);
    /* each level runs once forward and once more per enclosing recomputation, plus its own */
    for (int l = 0; l <= o.depth; l++) {
        CHECK_MSG(calls[l] == l + 2, "%s: level %d ran %d times", what, l, calls[l]);
        CHECK_MSG(frees[l] == (l == 0 ? 1 : l + 1), "%s: level %d freed %d times", what, l,
                  frees[l]);
    }
    CHECK(em_grad_tape_size(c) == 0);
    em_ctx_free(c);
}

static void test_matches_unwrapped(void) {
    check_same((run_opts){.ckpt = true, .use_out1 = true}, "two outputs");
    check_same((run_opts){.ckpt = true, .use_out1 = false}, "second output unused");
    check_same((run_opts){.ckpt = true, .use_out1 = true, .identity = true}, "input as output");
    check_same((run_opts){.ckpt = true, .use_out1 = true, .depth = 2}, "nested two deep");
}

static void test_error_first_call(void) {
    em_ctx *c = em_ctx_create();
    reset_counts();
    fail_level = 0;
    fail_call = 1;
    double gx[N * H], gw[H];
    CHECK(run(c, (run_opts){.ckpt = true, .use_out1 = true}, gx, gw, NULL) == EM_ERR_SHAPE);
    CHECK_ERR(c, EM_ERR_SHAPE, "reshape");
    CHECK(frees[0] == 1);
    em_ctx_clear_error(c);
    em_grad_tape_clear(c);
    CHECK(em_grad_tape_size(c) == 0);
    em_ctx_free(c);
}

/* fails in the recomputation of level `level` (its call number `call`) */
static void check_error_in_backward(int depth, int level, int call) {
    em_ctx *c = em_ctx_create();
    reset_counts();
    fail_level = level;
    fail_call = call;
    double gx[N * H], gw[H];
    em_status s = run(c, (run_opts){.ckpt = true, .use_out1 = true, .depth = depth}, gx, gw, NULL);
    CHECK_MSG(s == EM_ERR_SHAPE, "depth %d level %d: status %d", depth, level, (int)s);
    CHECK_ERR(c, EM_ERR_SHAPE, "reshape");
    CHECK(em_grad_tape_size(c) == 0); /* outer tape released, the region's too */
    CHECK(frees[0] == 1); /* and nothing leaks at any level (the ASan build) */
    /* the context works again once the error is cleared */
    em_ctx_clear_error(c);
    reset_counts();
    CHECK(run(c, (run_opts){.ckpt = true, .use_out1 = true, .depth = depth}, gx, gw, NULL) ==
          EM_OK);
    em_ctx_free(c);
}

static void test_error_in_recompute(void) {
    check_error_in_backward(0, 0, 2);
    /* level 1 runs in level 0's forward (1, a plain call), in level 0's recomputation (2, its
     * node recorded on the region's tape) and in its own backward (3) */
    check_error_in_backward(1, 1, 2);
    check_error_in_backward(1, 1, 3);
}

static void test_inplace_write(void) {
    em_ctx *c = em_ctx_create();
    reset_counts();
    em_tensor *x, *w, *xin = record_input(c, &x, &w);
    em_tensor *out[2];
    CHECK(em_checkpoint(c, region_fn, region_new(w, 0, 0, false, false), region_free, &xin, 1,
                        out, 2) == EM_OK);
    em_tensor *loss = em_sum(c, out[0], NULL, 0, false);
    em_grad_enable(c, false);
    CHECK(em_assign(c, xin, em_zeros(c, EM_F64, 2, (int64_t[]){N, H})) == EM_OK);
    CHECK(em_backward(c, loss) == EM_ERR_INVALID_ARG);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "input 0 of 'checkpoint'", "in-place", "test_checkpoint.c");
    CHECK(calls[0] == 1 && frees[0] == 1);
    CHECK(em_grad_tape_size(c) == 0);
    em_ctx_free(c);
}

static void test_recording_off(void) {
    em_ctx *c = em_ctx_create();
    reset_counts();
    em_tensor *x = em_from_host(c, EM_F64, 2, (int64_t[]){N, H}, X);
    em_tensor *w = em_from_host(c, EM_F64, 1, (int64_t[]){H}, W);
    em_tensor_requires_grad(c, w, true);
    em_tensor *out[2];
    CHECK(em_checkpoint(c, region_fn, region_new(w, 0, 0, false, false), region_free, &x, 1, out,
                        2) == EM_OK);
    CHECK(calls[0] == 1 && frees[0] == 1);
    CHECK(out[0] && !em_tensor_get_requires_grad(out[0]));
    CHECK(em_grad_tape_size(c) == 0);
    /* recorded, then the tape dropped without a backward: the user data goes with it */
    em_grad_enable(c, true);
    CHECK(em_checkpoint(c, region_fn, region_new(w, 0, 0, false, false), region_free, &x, 1, out,
                        2) == EM_OK);
    em_grad_enable(c, false);
    CHECK(out[0] && em_tensor_get_requires_grad(out[0]) && em_grad_tape_size(c) == 1);
    CHECK(frees[0] == 1);
    em_grad_tape_clear(c);
    CHECK(frees[0] == 2 && !em_tensor_get_requires_grad(out[0]));
    em_ctx_free(c);
}

static void test_bad_args(void) {
    em_ctx *c = em_ctx_create();
    reset_counts();
    em_tensor *x = em_from_host(c, EM_F64, 2, (int64_t[]){N, H}, X);
    em_tensor *out[2] = {x, x};
    CHECK(em_checkpoint(c, NULL, region_new(x, 0, 0, false, false), region_free, &x, 1, out, 1) ==
          EM_ERR_INVALID_ARG);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "checkpoint", "fn NULL");
    CHECK(frees[0] == 1 && out[0] == NULL);
    em_ctx_clear_error(c);
    CHECK(em_checkpoint(c, region_fn, region_new(x, 0, 0, false, false), region_free, &x, 1, out,
                        0) == EM_ERR_INVALID_ARG);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "0 outputs");
    CHECK(frees[0] == 2);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_matches_unwrapped), T(test_error_first_call), T(test_error_in_recompute),
             T(test_inplace_write), T(test_recording_off), T(test_bad_args))

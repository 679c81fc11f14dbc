/* Compile mode (ember/compile.h): guards and recompiles with their reasons, the passes, the CPU
 * plan's fusion and buffer reuse, writes into captured tensors, and errors reported at the op.
 * Values are checked against closed forms (libm) or against the same function run eagerly; the
 * op conformance suite (test_ops, mode "compiled") and the model tests check against torch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

static float *host(em_ctx *c, em_tensor *t) {
    int64_t n = em_tensor_numel(t);
    float *v = malloc((size_t)(n + 1) * sizeof *v);
    if (v && em_to_host_f32(c, t, v, n) != EM_OK) {
        free(v);
        return NULL;
    }
    return v;
}

static bool same_bits(em_ctx *c, em_tensor *a, em_tensor *b) {
    if (!a || !b || em_tensor_numel(a) != em_tensor_numel(b)) return false;
    float *x = host(c, a), *y = host(c, b);
    bool ok = x && y && !memcmp(x, y, (size_t)em_tensor_numel(a) * sizeof *x);
    free(x);
    free(y);
    return ok;
}

static em_tensor *ramp(em_ctx *c, int64_t r, int64_t k, float scale) {
    float *v = malloc((size_t)(r * k) * sizeof *v);
    for (int64_t i = 0; i < r * k; i++) v[i] = scale * (float)((i * 37) % 23 - 11) / 11.0f;
    em_tensor *t = em_from_host(c, EM_F32, EM_SHAPE(r, k), v);
    free(v);
    return t;
}

/* ---- a small MLP: guards, recompiles, stats ---- */

static em_tensor *g_w;

static int mlp(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *st, int n_st,
               em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)max_out, (void)user;
    em_tensor *h = em_silu(c, em_linear(c, in[0], g_w, NULL));
    if (n_st && st[0]) h = em_mul_scalar(c, h, 2.0); /* a branch on a static */
    out[0] = em_add_scalar(c, em_mul(c, h, h), 1.0);
    return out[0] ? 1 : -1;
}

static void test_guards_and_stats(void) {
    em_ctx *c = em_ctx_create();
    em_scope_push(c);
    g_w = ramp(c, 8, 16, 0.5f);
    em_compiled *f = em_compile(c, "mlp", mlp, NULL);
    em_tensor *x2 = ramp(c, 2, 16, 1.0f), *x3 = ramp(c, 3, 16, 1.0f), *y = NULL;
    int64_t s0 = 0, s1 = 1;
    CHECK(em_compiled_call(c, f, &x2, 1, &s0, 1, &y, 1) == 1);
    em_tensor *ref = NULL;
    CHECK(mlp(c, &x2, 1, &s0, 1, &ref, 1, NULL) == 1);
    CHECK_MSG(same_bits(c, y, ref), "compiled MLP differs from eager");
    em_compile_stats st;
    em_compiled_stats(f, &st);
    CHECK(st.compiles == 1 && !strcmp(st.last_reason, "first call") && st.calls == 1);
    CHECK(!strcmp(st.backend, "cpu-plan") && st.nodes_traced > 0);
    /* same signature: no compile */
    CHECK(em_compiled_call(c, f, &x2, 1, &s0, 1, &y, 1) == 1);
    em_compiled_stats(f, &st);
    CHECK(st.compiles == 1 && st.calls == 2);
    /* a new shape: retrace, with the guard that failed */
    CHECK(em_compiled_call(c, f, &x3, 1, &s0, 1, &y, 1) == 1);
    em_compiled_stats(f, &st);
    CHECK_MSG(st.compiles == 2 && !strcmp(st.last_reason, "input 0 dim 0: 2 -> 3"), "reason '%s'",
              st.last_reason);
    CHECK(mlp(c, &x3, 1, &s0, 1, &ref, 1, NULL) == 1 && same_bits(c, y, ref));
    /* a new static value */
    CHECK(em_compiled_call(c, f, &x3, 1, &s1, 1, &y, 1) == 1);
    em_compiled_stats(f, &st);
    CHECK_MSG(st.compiles == 3 && !strcmp(st.last_reason, "static 0: 0 -> 1"), "reason '%s'",
              st.last_reason);
    CHECK(mlp(c, &x3, 1, &s1, 1, &ref, 1, NULL) == 1 && same_bits(c, y, ref));
    /* back to the first signature: still cached */
    CHECK(em_compiled_call(c, f, &x2, 1, &s0, 1, &y, 1) == 1);
    em_compiled_stats(f, &st);
    CHECK(st.compiles == 3 && st.programs == 3);
    char g[256];
    em_compiled_guards(f, g, sizeof g);
    CHECK_MSG(strstr(g, "input 0: f32[2,16] on cpu") && strstr(g, "static 0 == 0"), "%s", g);
    /* a dtype change retraces, and the retrace reports the bf16 x f32 linear at its call */
    em_tensor *xh = em_cast(c, x2, EM_BF16);
    CHECK(em_compiled_call(c, f, &xh, 1, &s0, 1, &y, 1) == -1);
    CHECK_ERR(c, EM_ERR_DTYPE, "linear", "test_compile.c");
    em_ctx_clear_error(c);
    em_compiled_stats(f, &st);
    CHECK(st.compiles == 3); /* a failed trace adds no program */
    em_compiled_free(f);
    em_scope_pop(c);
    em_ctx_free(c);
}

/* ---- passes ---- */

static int redundant(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *st, int n_st,
                     em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)st, (void)n_st, (void)max_out, (void)user;
    em_tensor *a = em_exp(c, in[0]), *b = em_exp(c, in[0]);
    em_sin(c, in[0]); /* unused */
    em_tensor *k = em_arange(c, 0, 16, 1, EM_F32); /* constant: folded */
    out[0] = em_add(c, em_add(c, a, b), em_mul_scalar(c, k, 0.5));
    return 1;
}

static void test_passes(void) {
    em_ctx *c = em_ctx_create();
    em_scope_push(c);
    em_tensor *x = ramp(c, 4, 16, 1.0f), *y = NULL;
    em_compiled *f = em_compile(c, "redundant", redundant, NULL);
    CHECK(em_compiled_call(c, f, &x, 1, NULL, 0, &y, 1) == 1);
    em_compile_stats st;
    em_compiled_stats(f, &st);
    CHECK_MSG(st.removed_common >= 1 && st.removed_dead >= 1 && st.folded >= 2,
              "common %d dead %d folded %d", st.removed_common, st.removed_dead, st.folded);
    float *xv = host(c, x), *yv = host(c, y);
    bool ok = xv && yv;
    for (int i = 0; ok && i < 64; i++) {
        float want = 2.0f * expf(xv[i]) + 0.5f * (float)(i % 16);
        ok = fabsf(yv[i] - want) <= 1e-5f * fabsf(want) + 1e-6f;
    }
    CHECK_MSG(ok, "2 exp(x) + arange/2");
    free(xv);
    free(yv);
    em_compiled_free(f);
    em_scope_pop(c);
    em_ctx_free(c);
}

/* element-wise chains fuse; matmul chains reuse buffers */
static int chain(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *st, int n_st,
                 em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)st, (void)n_st, (void)max_out, (void)user;
    em_tensor *h = in[0];
    for (int i = 0; i < 6; i++) {
        h = em_matmul(c, h, in[1]);
        h = em_add_scalar(c, em_mul_scalar(c, em_silu(c, h), 0.5), 0.25);
    }
    out[0] = h;
    return 1;
}

static void test_fusion_and_reuse(void) {
    em_ctx *c = em_ctx_create();
    em_scope_push(c);
    em_tensor *in[2] = {ramp(c, 64, 64, 1.0f), ramp(c, 64, 64, 0.1f)}, *y = NULL, *ref = NULL;
    em_compiled *f = em_compile(c, "chain", chain, NULL);
    CHECK(em_compiled_call(c, f, in, 2, NULL, 0, &y, 1) == 1);
    CHECK(chain(c, in, 2, NULL, 0, &ref, 1, NULL) == 1);
    CHECK_MSG(same_bits(c, y, ref), "fused plan differs from eager");
    em_compile_stats st;
    em_compiled_stats(f, &st);
    CHECK_MSG(st.fused_groups == 6 && st.fused_nodes == 12 && st.kernels == 12,
              "groups %d nodes %d kernels %d", st.fused_groups, st.fused_nodes, st.kernels);
    CHECK_MSG(st.arena_bytes < st.unplanned_bytes / 2, "arena %lld of %lld",
              (long long)st.arena_bytes, (long long)st.unplanned_bytes);
    /* a second run reuses the same buffers: same result */
    CHECK(em_compiled_call(c, f, in, 2, NULL, 0, &y, 1) == 1 && same_bits(c, y, ref));
    em_compiled_free(f);
    em_scope_pop(c);
    em_ctx_free(c);
}

/* ---- writes into captured tensors (a KV cache) ---- */

typedef struct cache_user {
    em_tensor *cache; /* [2, 8, 4] */
} cache_user;

static int cache_step(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *st, int n_st,
                      em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)st, (void)n_st, (void)max_out;
    cache_user *u = user;
    /* in[0]: new rows [2, 1, 4]; in[1]: position [1] (i64) */
    em_index_copy(c, u->cache, 1, in[1], in[0]);
    em_assign(c, em_slice(c, u->cache, 1, 7, 8, 1), em_mul_scalar(c, in[0], -1.0));
    int dims[1] = {2};
    out[0] = em_sum(c, u->cache, dims, 1, false); /* reads the cache after both writes */
    return 1;
}

static void test_captured_writes(void) {
    em_ctx *c = em_ctx_create();
    em_scope_push(c);
    cache_user ua = {em_zeros(c, EM_F32, EM_SHAPE(2, 8, 4))};
    cache_user ub = {em_zeros(c, EM_F32, EM_SHAPE(2, 8, 4))};
    em_compiled *f = em_compile(c, "cache_step", cache_step, &ua);
    for (int64_t pos = 0; pos < 5; pos++) {
        em_tensor *in[2] = {em_add_scalar(c, ramp(c, 2, 4, 1.0f), (double)pos), NULL};
        in[0] = em_reshape(c, in[0], EM_SHAPE(2, 1, 4));
        in[1] = em_from_host(c, EM_I64, EM_SHAPE(1), &pos);
        em_tensor *y = NULL, *ref = NULL;
        CHECK(em_compiled_call(c, f, in, 2, NULL, 0, &y, 1) == 1);
        CHECK(cache_step(c, in, 2, NULL, 0, &ref, 1, &ub) == 1);
        CHECK_MSG(same_bits(c, y, ref), "step %lld: sums differ", (long long)pos);
        CHECK_MSG(same_bits(c, ua.cache, ub.cache), "step %lld: caches differ", (long long)pos);
    }
    em_compile_stats st;
    em_compiled_stats(f, &st);
    CHECK(st.compiles == 1 && st.calls == 5); /* the position is data: one program */
    em_compiled_free(f);
    em_scope_pop(c);
    em_ctx_free(c);
}

/* ---- errors, at the op that causes them ---- */

static em_tensor *g_stash;

static int reads_host(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *st, int n_st,
                      em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)st, (void)n_st, (void)max_out, (void)user;
    em_tensor *h = em_exp(c, in[0]);
    double v;
    if (em_item(c, em_sum(c, h, NULL, 0, false), &v) != EM_OK) return -1;
    out[0] = h;
    return 1;
}

static int bad_shapes(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *st, int n_st,
                      em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)st, (void)n_st, (void)max_out, (void)user;
    out[0] = em_matmul(c, in[0], in[0]); /* [2,16] @ [2,16] */
    return out[0] ? 1 : -1;
}

static int writes_input(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *st, int n_st,
                        em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)st, (void)n_st, (void)max_out, (void)user;
    em_assign(c, in[0], em_exp(c, in[0]));
    out[0] = em_exp(c, in[0]);
    return 1;
}

static int leaks(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *st, int n_st,
                 em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)st, (void)n_st, (void)max_out, (void)user;
    g_stash = em_keep(c, em_exp(c, in[0]));
    out[0] = em_exp(c, in[0]);
    return 1;
}

static void test_errors(void) {
    em_ctx *c = em_ctx_create();
    em_scope_push(c);
    em_tensor *x = ramp(c, 2, 16, 1.0f), *y = NULL;
    em_compiled *f = em_compile(c, "reads_host", reads_host, NULL);
    CHECK(em_compiled_call(c, f, &x, 1, NULL, 0, &y, 1) == -1);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "cannot read the values", "test_compile.c");
    em_ctx_clear_error(c);
    em_compiled_free(f);

    f = em_compile(c, "bad_shapes", bad_shapes, NULL);
    CHECK(em_compiled_call(c, f, &x, 1, NULL, 0, &y, 1) == -1);
    CHECK_ERR(c, EM_ERR_SHAPE, "matmul", "test_compile.c");
    em_ctx_clear_error(c);
    em_compiled_free(f);

    f = em_compile(c, "writes_input", writes_input, NULL);
    CHECK(em_compiled_call(c, f, &x, 1, NULL, 0, &y, 1) == -1);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "cannot write into its input 0", "test_compile.c");
    em_ctx_clear_error(c);
    em_compiled_free(f);

    f = em_compile(c, "leaks", leaks, NULL);
    CHECK(em_compiled_call(c, f, &x, 1, NULL, 0, &y, 1) == 1);
    CHECK(em_exp(c, g_stash) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "traced value", "outside");
    em_ctx_clear_error(c);
    em_compiled_free(f);

    CHECK(em_compile(c, "none", NULL, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "NULL");
    em_ctx_clear_error(c);
    em_scope_pop(c);
    em_ctx_free(c);
}

/* a reshape of a transposed input copies (recorded as a copy, run every call) */
static int reshape_t(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *st, int n_st,
                     em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)st, (void)n_st, (void)max_out, (void)user;
    out[0] = em_reshape(c, em_transpose(c, in[0], 0, 1), EM_SHAPE(-1));
    return 1;
}

static void test_reshape_copy(void) {
    em_ctx *c = em_ctx_create();
    em_scope_push(c);
    em_compiled *f = em_compile(c, "reshape_t", reshape_t, NULL);
    for (int k = 0; k < 2; k++) {
        em_tensor *x = ramp(c, 3, 5, 1.0f + (float)k), *y = NULL, *ref = NULL;
        CHECK(em_compiled_call(c, f, &x, 1, NULL, 0, &y, 1) == 1);
        CHECK(reshape_t(c, &x, 1, NULL, 0, &ref, 1, NULL) == 1);
        CHECK(same_bits(c, y, ref));
    }
    em_compiled_free(f);
    em_scope_pop(c);
    em_ctx_free(c);
}

/* a dtype change is a broken guard with its own reason */
static void test_dtype_guard(void) {
    em_ctx *c = em_ctx_create();
    em_scope_push(c);
    em_compiled *f = em_compile(c, "reshape_t", reshape_t, NULL);
    em_tensor *x = ramp(c, 3, 5, 1.0f), *xh = em_cast(c, x, EM_BF16), *y = NULL, *ref = NULL;
    CHECK(em_compiled_call(c, f, &x, 1, NULL, 0, &y, 1) == 1);
    CHECK(em_compiled_call(c, f, &xh, 1, NULL, 0, &y, 1) == 1);
    em_compile_stats st;
    em_compiled_stats(f, &st);
    CHECK_MSG(st.compiles == 2 && !strcmp(st.last_reason, "input 0 dtype: f32 -> bf16"),
              "reason '%s'", st.last_reason);
    CHECK(reshape_t(c, &xh, 1, NULL, 0, &ref, 1, NULL) == 1 && same_bits(c, y, ref));
    em_compiled_free(f);
    em_scope_pop(c);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_guards_and_stats), T(test_passes), T(test_fusion_and_reuse),
             T(test_captured_writes), T(test_errors), T(test_reshape_copy), T(test_dtype_guard))

/*
 * The kernel hub on PJRT devices: the ember-stablehlo variant of kernels/ragged_stablehlo
 * ($EMBER_TEST_SHLO_PKG). Resolution per target (accepted for PJRT, rejected for the CPU with
 * the reason), a tampered or undigested snippet refused naming the file; on XLA's CPU plugin the
 * package's gather lowering against the built-in emitter (eager and compiled, within the
 * conformance suite's tolerances for ragged_dot), the registry's choice, a broken snippet
 * disabled with the next implementation answering; on tpu-aot:v6e:2x4 the native chlo.ragged_dot
 * compiles. Without the plugin or libtpu those tests print a loud SKIP.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/kernel_registry.h"
#include "ember/ember.h"
#include "ember/kernels.h"
#include "harness.h"
#include "khub_test.h"
#include "kernels_hub/khub.h"

#define VARIANT "build/ember-stablehlo/"

static char tmp[256];

static const char *pkg(void) { return getenv("EMBER_TEST_SHLO_PKG"); }

static bool setup(void) {
    if (!pkg()) {
        em_test_skip("EMBER_TEST_SHLO_PKG is not set (run through ctest)");
        return false;
    }
    return khub_tmp(tmp, sizeof tmp, "ember-khub-shlo");
}

/* A copy of the package as <tmp>/<name>; returns its path (static buffer). */
static const char *copy_pkg(const char *name) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    sh("rm -rf '%s' && cp -r '%s' '%s'", path, pkg(), path);
    return path;
}

static char *explain(em_ctx *c, const char *spec, const char *target, em_status *st) {
    return explain_for(c, spec, NULL, target, st);
}

static void test_resolution(void) {
    if (!setup()) return;
    em_ctx *c = em_ctx_create();
    em_status st;
    char *t = explain(c, pkg(), "cpu", &st);
    CHECK(st == EM_ERR_UNSUPPORTED);
    HAS(t, "Rejected ember-stablehlo: StableHLO variants are for PJRT devices; the target is "
           "the CPU");
    free(t);
    em_ctx_clear_error(c);
    const char *accepting[] = {NULL, "pjrt", "pjrt:cpu", "pjrt:tpu"};
    for (int i = 0; i < 4; i++) {
        t = explain(c, pkg(), accepting[i], &st);
        CHECK_MSG(st == EM_OK, "target %s", accepting[i] ? accepting[i] : "any");
        HAS(t, "Accepted ember-stablehlo: ember-ragged-stablehlo v1 (Apache-2.0), chosen");
        HAS(t, "ragged_dot: ragged_dot_native.mlir for pjrt:tpu, priority 20");
        HAS(t, "ragged_dot: ragged_dot_gather.mlir for pjrt (every plugin), priority 10");
        free(t);
    }
    t = explain(c, pkg(), "gpu", &st);
    HAS(t, "unknown target 'gpu' (cpu, pjrt or pjrt:<platform>)");
    free(t);
    em_ctx_free(c);
}

static void test_tampered(void) {
    if (!setup()) return;
    em_ctx *c = em_ctx_create();
    em_status st;
    /* a flipped byte in a snippet */
    const char *p = copy_pkg("flipped");
    sh("printf 'X' | dd of='%s/" VARIANT "ragged_dot_gather.mlir' bs=1 seek=10 conv=notrunc "
       "2>/dev/null", p);
    char *t = explain(c, p, "pjrt", &st);
    CHECK(st == EM_ERR_UNSUPPORTED);
    HAS(t, "Rejected ember-stablehlo: digest mismatch in " VARIANT "ragged_dot_gather.mlir: "
           "metadata.json says ");
    HAS(t, ", the file has ");
    free(t);
    em_ctx_clear_error(c);
    /* a snippet metadata.json names without a digest */
    p = copy_pkg("undigested");
    sh("sed -i '/\"ragged_dot_native.mlir\": \"/d; "
       "s/\\(\"ragged_dot_gather.mlir\": \"[0-9a-f]*\"\\),/\\1/' '%s/" VARIANT "metadata.json'",
       p);
    t = explain(c, p, "pjrt", &st);
    HAS(t, "Rejected ember-stablehlo: snippet ragged_dot_native.mlir has no digest in "
           "metadata.json");
    free(t);
    em_ctx_clear_error(c);
    /* an attribute the op does not have */
    p = copy_pkg("badattr");
    sh("sed -i 's/\"ranks\": \\[2, 3, 1\\]}/\"ranks\": [2, 3, 1], \"attrs\": {\"nope\": 1}}/' "
       "'%s/" VARIANT "metadata.json'", p);
    t = explain(c, p, "pjrt", &st);
    HAS(t, "a ragged_dot snippet's attrs names 'nope', not an integer or bool attribute");
    free(t);
    em_ctx_free(c);
}

/* ---- on XLA's CPU plugin ---- */

static em_tensor *zeros_on(em_ctx *c, em_device *d, em_dtype dt, int nd, const int64_t *shape) {
    return em_to(c, em_zeros(c, dt, nd, shape), d);
}

static float *host(em_ctx *c, em_tensor *t) {
    int64_t n = t ? em_tensor_numel(t) : 0;
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (v && t && em_to_host_f32(c, t, v, n) != EM_OK) {
        free(v);
        return NULL;
    }
    return v;
}

static int ragged_fn(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *statics,
                     int n_statics, em_tensor **out, int max_out, void *user);

/* ragged_dot on d of random inputs, with the packages suspended (the built-in) or not, eager or
 * as a compiled function (a new one: a compiled function keeps its program per signature). */
static float *ragged(em_ctx *c, em_device *d, em_dtype dt, bool nk, bool packed, bool builtin,
                     bool compiled) {
    int64_t m = 11, k = 64, n = 32, g = 4;
    em_tensor *lhs = em_to(c, em_randn(c, dt, EM_SHAPE(m, k), 1, 0, 1.0), d);
    em_tensor *rhs = nk || packed ? em_randn(c, dt, EM_SHAPE(g, n, k), 2, 0, 0.1)
                                  : em_randn(c, dt, EM_SHAPE(g, k, n), 2, 0, 0.1);
    if (packed) rhs = em_ragged_pack(c, rhs);
    rhs = em_to(c, rhs, d);
    /* an empty group, and rows past the sum (zeros) */
    em_tensor *gs = em_from_host_on(c, d, EM_I32, EM_SHAPE(4), ((int32_t[]){3, 0, 4, 2}));
    em_kreg_suspend_packages(builtin);
    em_tensor *y = NULL;
    if (compiled) {
        em_compiled *f = em_compile(c, "ragged", ragged_fn, NULL);
        em_tensor *in[3] = {lhs, rhs, gs};
        CHECK(em_compiled_call(c, f, in, 3, (int64_t[]){nk || packed}, 1, &y, 1) == 1);
        em_compiled_free(f);
    } else {
        y = em_ragged_dot(c, lhs, rhs, gs, nk || packed);
    }
    em_kreg_suspend_packages(false);
    return host(c, y);
}

/* How far got is past |got - want| <= tol (1 + |want|) (<= 0: within); rows past the group
 * sizes' sum must be zeros. */
static double past_tolerance(const float *got, const float *want, double tol) {
    double worst = 0;
    for (int j = 0; want && got && j < 11 * 32; j++) {
        double e = fabs(got[j] - want[j]) - tol * (1 + fabs(want[j]));
        if (e > worst) worst = e;
        if (j >= 9 * 32 && got[j] != 0) worst = INFINITY;
    }
    return worst;
}

static int ragged_fn(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *statics,
                     int n_statics, em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)n_statics, (void)max_out, (void)user;
    out[0] = em_ragged_dot(c, in[0], in[1], in[2], statics[0] != 0);
    return out[0] ? 1 : -1;
}

/* The implementation the registry picks on d for a ragged_dot of these ranks. */
static const char *picked(em_device *d, em_tensor *const *in, bool nk, unsigned mode) {
    em_attr attr = {.i = nk};
    em_kernel_args a = {NULL, em_op_get(EM_OP_RAGGED_DOT), in, 3, NULL, 0, &attr};
    const em_kimpl *k = em_kset_pick(em_kset_get(d->be, EM_OP_RAGGED_DOT), &a, mode);
    return k ? k->name : "none";
}

static void test_xla_matches_builtin(void) {
    if (!setup()) return;
    em_ctx *c = em_ctx_create();
    em_device *d = em_test_xla_or_skip(c);
    if (!d) goto out;
    CHECK(em_kernels_load(c, pkg(), NULL) == EM_OK);
    em_scope_push(c);
    em_tensor *probe[3] = {zeros_on(c, d, EM_F32, EM_SHAPE(2, 2)),
                           zeros_on(c, d, EM_F32, EM_SHAPE(1, 2, 2)),
                           zeros_on(c, d, EM_I32, EM_SHAPE(1))};
    for (unsigned mode = EM_KMODE_INFERENCE; mode <= EM_KMODE_COMPILE; mode *= 2)
        CHECK_MSG(!strcmp(picked(d, probe, false, mode), "ragged_dot_gather"), "mode %u: %s",
                  mode, picked(d, probe, false, mode));
    /* the packed rank-5 layout is declined: the built-in takes it */
    em_tensor *packed[3] = {probe[0], zeros_on(c, d, EM_F32, EM_SHAPE(1, 1, 16, 32, 2)),
                            probe[2]};
    CHECK(!strcmp(picked(d, packed, true, EM_KMODE_INFERENCE), "built-in"));
    /* the suite's tolerances for ragged_dot (tests/fixtures/ops/moe.json) */
    const struct {
        em_dtype dt;
        double tol;
    } dts[] = {{EM_F32, 1e-5}, {EM_BF16, 1e-2}, {EM_F16, 1e-3}};
    for (int i = 0; i < 3; i++)
        for (int layout = 0; layout < 3; layout++)
            for (int compiled = 0; compiled < 2; compiled++) {
                bool nk = layout == 1, pk = layout == 2;
                float *want = ragged(c, d, dts[i].dt, nk, pk, true, compiled);
                float *got = ragged(c, d, dts[i].dt, nk, pk, false, compiled);
                CHECK_MSG(want && got, "%s", em_ctx_error(c)->message);
                double worst = past_tolerance(got, want, dts[i].tol);
                CHECK_MSG(worst <= 0, "%s layout %d compiled %d: off by %g past the tolerance",
                          em_dtype_name(dts[i].dt), layout, compiled, worst);
                free(want);
                free(got);
            }
    /* bad group sizes are still refused, as the built-in refuses them */
    em_tensor *bad = em_from_host_on(c, d, EM_I32, EM_SHAPE(1), ((int32_t[]){3}));
    CHECK(em_ragged_dot(c, probe[0], probe[1], bad, false) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "group sizes sum to more than the 2 rows");
    em_scope_pop(c);
out:
    em_ctx_free(c);
}

/* A snippet that does not expand is disabled at its first call, eager or compiled, which the
 * next implementation answers (the good package's gather snippet, loaded above, or the
 * built-in). Each round loads a broken copy above everything loaded before. */
static void test_broken_snippet(void) {
    if (!setup()) return;
    em_ctx *c = em_ctx_create();
    em_device *d = em_test_xla_or_skip(c);
    for (int compiled = 0; d && compiled < 2; compiled++) {
        char name[32], f[700], old[65], hex[65];
        snprintf(name, sizeof name, "broken%d", compiled);
        const char *p = copy_pkg(name);
        snprintf(f, sizeof f, "%s/" VARIANT "ragged_dot_gather.mlir", p);
        CHECK(khub_file_sha256(f, old));
        sh("sed -i 's/{{in1.d0-1}}/{{in1.bogus}}/' '%s'", f);
        CHECK(khub_file_sha256(f, hex));
        sh("sed -i 's/%s/%s/; s/ember-ragged-stablehlo/ember-%s/; "
           "s/\"priority\": 10/\"priority\": %d/' '%s/" VARIANT "metadata.json'",
           old, hex, name, 30 + compiled, p);
        CHECK(em_kernels_load(c, p, NULL) == EM_OK);
        em_scope_push(c);
        float *got = ragged(c, d, EM_F32, false, false, false, compiled);
        float *want = ragged(c, d, EM_F32, false, false, true, compiled);
        CHECK_MSG(got && want && past_tolerance(got, want, 1e-5) <= 0,
                  "%s: the call was not answered by the next implementation", name);
        const em_kimpl *v[8];
        int n = em_kreg_list(EM_OP_RAGGED_DOT, "pjrt:cpu", v, 8);
        bool off = false;
        for (int i = 0; i < n; i++)
            if (strstr(v[i]->source, name)) off = atomic_load(&v[i]->disabled);
        CHECK_MSG(off, "%s is still enabled", name);
        free(got);
        free(want);
        em_scope_pop(c);
    }
    em_ctx_free(c);
}

/* ---- compiled for a TPU v6e slice (libtpu, no TPU) ---- */

static void test_tpu_aot_compiles(void) {
    if (!setup()) return;
    em_ctx *c = em_ctx_create();
    em_device *d = em_device_get(c, "tpu-aot:v6e:2x4");
    if (!d) {
        em_test_skip("no libtpu for tpu-aot:v6e:2x4 (pip install libtpu, or set "
                     "EMBER_PJRT_TPU_PLUGIN=/path/libtpu.so): %s", em_ctx_error(c)->message);
        goto out;
    }
    CHECK(em_kernels_load(c, pkg(), NULL) == EM_OK);
    em_scope_push(c);
    em_tensor *in[3] = {zeros_on(c, d, EM_BF16, EM_SHAPE(16, 256)),
                        zeros_on(c, d, EM_BF16, EM_SHAPE(8, 512, 256)),
                        zeros_on(c, d, EM_I32, EM_SHAPE(8))};
    CHECK(!strcmp(picked(d, in, true, EM_KMODE_INFERENCE), "ragged_dot_native"));
    em_tensor *y = em_ragged_dot(c, in[0], in[1], in[2], true);
    CHECK_MSG(y != NULL, "%s", em_ctx_error(c)->message);
    em_compiled *f = em_compile(c, "ragged", ragged_fn, NULL);
    em_tensor *yc = NULL;
    CHECK_MSG(em_compiled_call(c, f, in, 3, (int64_t[]){1}, 1, &yc, 1) == 1, "%s",
              em_ctx_error(c)->message);
    em_compiled_free(f);
    em_scope_pop(c);
out:
    em_ctx_free(c);
}

static void test_cleanup(void) {
    if (tmp[0]) sh("rm -rf '%s'", tmp);
    CHECK(true);
}

EM_TEST_MAIN(T(test_resolution), T(test_tampered), T(test_xla_matches_builtin),
             T(test_broken_snippet), T(test_tpu_aot_compiles), T(test_cleanup))

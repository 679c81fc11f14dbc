/*
 * The attention package ember-sdpa (kernels/sdpa/) loaded from the hub: the registry picks it
 * for sdpa and sdpa_lse calls in every mode, its outputs (sdpa_lse: both, out in q's dtype and in
 * f32) equal the built-in's bit for bit (the same calls with
 * the packages suspended) on decode (one query, a long KV cache split over the threads) and
 * prefill shapes, GQA, causal, sliding-window, softcap, bool and float masks, strided K/V, f32,
 * bf16 and f16; its supports() declines what it does not take (answered directly by each
 * variant's library); a copy without its library does not load and the built-in answers.
 * Packages come from $EMBER_TEST_KERNELS (tests/CMakeLists.txt); ctest kernel_hub_sdpa_avx2 runs
 * this again at EMBER_CPU_LEVEL=avx2 (the AVX2 variant).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "core/kernel_registry.h"
#include "ember/ember.h"
#include "ember/kernels.h"
#include "harness.h"
#include "kernel_pkg_util.h"
#include "kernels_hub/khub.h"

static const char *pkgs(void) { return getenv("EMBER_TEST_KERNELS"); }

/* The variant the hub loads at this process's level, or NULL (the test is then skipped). */
static const char *variant(void) {
#if defined(__x86_64__)
    const char *lv = khub_host_level();
    if (!strcmp(lv, "avx512") || !strcmp(lv, "avx512bf16")) return "avx512";
    if (!strcmp(lv, "avx2")) return "avx2";
#endif
    return NULL;
}

static bool loaded(em_ctx *c) {
    if (!pkgs()) {
        em_test_skip("EMBER_TEST_KERNELS is not set (run through ctest)");
        return false;
    }
    if (!variant()) {
        em_test_skip("ember-sdpa has x86-64 AVX2 and AVX-512 variants; kernels here run %s",
                     khub_host_level());
        return false;
    }
    char spec[512];
    snprintf(spec, sizeof spec, "%s/ember-sdpa", pkgs());
    em_status st = em_kernels_load(c, spec, NULL);
    CHECK_MSG(st == EM_OK, "%s: %s", spec, em_ctx_error(c)->message);
    return st == EM_OK;
}

typedef struct sdpa_case {
    const char *what;
    int64_t b, hq, hkv, tq, tk, d, dv;
    bool causal;
    int64_t window;
    double softcap;
    int mask;       /* 0 none, 1 bool [B, 1, Tq, Tk], 2 float [Tq, Tk] of q's dtype */
    bool strided;   /* k and v as [B, Tk, Hkv, D] transposed to [B, Hkv, Tk, D] */
    em_dtype dtype;
} sdpa_case;

static const sdpa_case CASES[] = {
    {"decode, long KV (split over the threads)", 1, 8, 2, 1, 3000, 64, 64, 1, 0, 0, 0, 0, EM_BF16},
    {"decode, long KV, f32", 1, 8, 2, 1, 2500, 64, 64, 1, 0, 0, 0, 0, EM_F32},
    {"decode, batch 2, short KV", 2, 4, 4, 1, 77, 128, 128, 1, 0, 0, 0, 0, EM_BF16},
    {"prefill, causal GQA", 1, 8, 2, 100, 100, 64, 64, 1, 0, 0, 0, 0, EM_BF16},
    {"prefill, causal, f32", 2, 4, 1, 70, 70, 32, 32, 1, 0, 0, 0, 0, EM_F32},
    {"prefill on a cache, window + softcap", 1, 4, 2, 33, 300, 64, 64, 1, 128, 30.0, 0, 0, EM_BF16},
    {"prefill, bool mask", 2, 4, 2, 20, 20, 64, 64, 0, 0, 0, 1, 0, EM_BF16},
    {"prefill, float mask", 1, 4, 4, 24, 40, 32, 48, 0, 0, 0, 2, 0, EM_F32},
    {"prefill, strided K/V", 1, 8, 2, 40, 40, 64, 64, 1, 0, 0, 0, 1, EM_BF16},
    {"decode, strided K/V, f16", 1, 4, 1, 1, 1500, 64, 64, 1, 0, 0, 0, 1, EM_F16},
};

typedef struct sdpa_call {
    em_tensor *q, *k, *v, *mask;
    em_sdpa_params p;
} sdpa_call;

static em_tensor *kv(em_ctx *c, const sdpa_case *s, int64_t d, uint64_t seed) {
    if (!s->strided) return em_rand(c, s->dtype, EM_SHAPE(s->b, s->hkv, s->tk, d), seed, -1, 1);
    return em_transpose(c, em_rand(c, s->dtype, EM_SHAPE(s->b, s->tk, s->hkv, d), seed, -1, 1), 1,
                        2);
}

static sdpa_call make_call(em_ctx *c, const sdpa_case *s, uint64_t seed) {
    sdpa_call r = {0};
    r.q = em_rand(c, s->dtype, EM_SHAPE(s->b, s->hq, s->tq, s->d), seed, -1, 1);
    r.k = kv(c, s, s->d, seed + 1);
    r.v = kv(c, s, s->dv, seed + 2);
    if (s->mask == 1)
        r.mask = em_gt(c, em_rand(c, EM_F32, EM_SHAPE(s->b, 1, s->tq, s->tk), seed + 3, 0, 1),
                       em_full(c, EM_F32, EM_SHAPE(1), 0.3));
    else if (s->mask == 2)
        r.mask = em_rand(c, s->dtype, EM_SHAPE(s->tq, s->tk), seed + 3, -2, 0);
    r.p = em_sdpa_default_params();
    r.p.causal = s->causal;
    r.p.window = s->window;
    r.p.softcap = s->softcap;
    return r;
}

/* The implementation the registry picks for the call in `mode`: sdpa (lse NULL) or sdpa_lse. */
static const char *pick_op(em_ctx *c, const sdpa_call *r, em_tensor *out, em_tensor *lse,
                           unsigned mode) {
    em_tensor *ins[] = {r->q, r->k, r->v, r->mask}, *outs[] = {out, lse};
    em_op_id op = lse ? EM_OP_SDPA_LSE : EM_OP_SDPA;
    em_attr at[EM_MAX_ATTRS] = {{.f = r->p.scale}, {.i = r->p.causal}, {.i = r->p.window},
                                {.f = r->p.softcap}, {.i = out ? em_tensor_dtype(out) : 0}};
    em_kernel_args a = {c, em_op_get(op), ins, r->mask ? 4 : 3, outs, lse ? 2 : 1, at};
    const em_kimpl *k = em_kset_pick(em_kset_get(em_device_cpu()->be, op), &a, mode);
    return k ? k->name : "(none)";
}

static const char *pick(em_ctx *c, const sdpa_call *r, em_tensor *out, unsigned mode) {
    return pick_op(c, r, out, NULL, mode);
}

static const unsigned modes[] = {EM_KMODE_INFERENCE, EM_KMODE_TRAINING, EM_KMODE_COMPILE};

/* A context with the package loaded and the name of the implementation it should pick in
 * want[0..n), or NULL (skipped or failed) */
static em_ctx *loaded_ctx(char *want, size_t n) {
    em_ctx *c = em_ctx_create();
    if (!loaded(c)) {
        em_ctx_free(c);
        return NULL;
    }
    snprintf(want, n, "sdpa_flash_%s", variant());
    return c;
}

static bool same_bits(em_ctx *c, em_tensor *a, em_tensor *b) {
    size_t n = a && b ? em_tensor_nbytes(a) : 0;
    return a && b && n == em_tensor_nbytes(b) &&
           !memcmp(em_tensor_data(c, a), em_tensor_data(c, b), n);
}

static void test_sdpa_bits(void) {
    char want[64];
    em_ctx *c = loaded_ctx(want, sizeof want);
    if (!c) return;
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        const sdpa_case *s = &CASES[i];
        em_scope_push(c);
        sdpa_call r = make_call(c, s, 100 + 10 * i);
        em_tensor *hub = em_sdpa(c, r.q, r.k, r.v, r.mask, &r.p);
        for (size_t m = 0; hub && m < 3; m++) {
            const char *got = pick(c, &r, hub, modes[m]);
            CHECK_MSG(!strcmp(got, want), "%s (mode %u): %s took the call, expected %s", s->what,
                      modes[m], got, want);
        }
        em_kreg_suspend_packages(true);
        em_tensor *ref = em_sdpa(c, r.q, r.k, r.v, r.mask, &r.p);
        CHECK(hub && !strcmp(pick(c, &r, hub, EM_KMODE_INFERENCE), "built-in"));
        em_kreg_suspend_packages(false);
        CHECK_MSG(hub && ref, "%s: %s", s->what, em_ctx_error(c)->message);
        if (hub && ref) {
            size_t n = em_tensor_nbytes(hub);
            CHECK_MSG(n == em_tensor_nbytes(ref) &&
                          !memcmp(em_tensor_data(c, hub), em_tensor_data(c, ref), n),
                      "%s (%s): the package's output differs from the built-in's bits", s->what,
                      em_dtype_name(s->dtype));
        }
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    char *list = em_kernels_list("cpu", false);
    char star[80];
    snprintf(star, sizeof star, "%s *", want);
    CHECK_MSG(list && strstr(list, star), "the listing does not star %s:\n%s", want,
              list ? list : "(null)");
    free(list);
    em_ctx_free(c);
}

/* sdpa_lse (the ring attention's op): the package takes it in every mode, with out in q's dtype
 * and, for bf16/f16 q, in f32; out and lse are the built-in's bits. */
static void test_sdpa_lse_bits(void) {
    char want[64];
    em_ctx *c = loaded_ctx(want, sizeof want);
    if (!c) return;
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        const sdpa_case *s = &CASES[i];
        for (int f32_out = 0; f32_out < (s->dtype == EM_F32 ? 1 : 2); f32_out++) {
            em_dtype odt = f32_out ? EM_F32 : s->dtype;
            em_scope_push(c);
            sdpa_call r = make_call(c, s, 300 + 10 * i);
            em_tensor *lse = NULL, *lse_ref = NULL;
            em_tensor *hub = em_sdpa_lse(c, r.q, r.k, r.v, r.mask, &r.p, odt, &lse);
            for (size_t m = 0; hub && lse && m < 3; m++) {
                const char *got = pick_op(c, &r, hub, lse, modes[m]);
                CHECK_MSG(!strcmp(got, want), "%s, out %s (mode %u): %s took the call, expected %s",
                          s->what, em_dtype_name(odt), modes[m], got, want);
            }
            em_kreg_suspend_packages(true);
            em_tensor *ref = em_sdpa_lse(c, r.q, r.k, r.v, r.mask, &r.p, odt, &lse_ref);
            CHECK(hub && lse && !strcmp(pick_op(c, &r, hub, lse, EM_KMODE_INFERENCE), "built-in"));
            em_kreg_suspend_packages(false);
            CHECK_MSG(hub && ref && lse && lse_ref, "%s: %s", s->what, em_ctx_error(c)->message);
            CHECK_MSG(same_bits(c, hub, ref), "%s (%s, out %s): the package's out differs from the "
                      "built-in's bits", s->what, em_dtype_name(s->dtype), em_dtype_name(odt));
            CHECK_MSG(same_bits(c, lse, lse_ref), "%s (%s, out %s): the package's lse differs from "
                      "the built-in's bits", s->what, em_dtype_name(s->dtype), em_dtype_name(odt));
            em_ctx_clear_error(c);
            em_scope_pop(c);
        }
    }
    em_ctx_free(c);
}

/* Each variant's supports(), asked directly with plain ABI structs: a decode call (q [1, 8, 1,
 * 64], k/v [1, 2, 512, 64]) at `level`, with the given q/k/v dtype and mask dtype (-1: none);
 * -1 when the library does not load. lse_dtype -1: sdpa; else sdpa_lse with out of out_dtype
 * and lse [1, 8, lse_rows] of lse_dtype. */
static int direct_call(const char *isa, const char *level, int dtype, int mask_dtype,
                       bool strided_out, int out_dtype, int lse_dtype, int64_t lse_rows) {
    char variant[64], lib[64];
    snprintf(variant, sizeof variant, "ember-abi1-cpu-%s-x86_64-linux", isa);
    snprintf(lib, sizeof lib, "libember_sdpa_%s.so", isa);
    const ember_kernel_library *L = test_pkg_library("ember-sdpa", variant, lib);
    if (!L || L->n_impls != 2) return -1;
    ember_kernel_tensor t[6] = {
        {NULL, dtype, 4, {1, 8, 1, 64}, {512, 64, 64, 1}},
        {NULL, dtype, 4, {1, 2, 512, 64}, {65536, 32768, 64, 1}},
        {NULL, dtype, 4, {1, 2, 512, 64}, {65536, 32768, 64, 1}},
        {(void *)1, mask_dtype, 2, {1, 512}, {512, 1}},
        {NULL, out_dtype, 4, {1, 8, 1, 64}, {512, 64, 64, strided_out ? 2 : 1}},
        {NULL, lse_dtype, 3, {1, 8, lse_rows}, {8 * lse_rows, lse_rows, 1}},
    };
    ember_kernel_attr at[4] = {{"scale", EMBER_KATTR_FLOAT, 0, 0, 0, NULL},
                               {"causal", EMBER_KATTR_BOOL, 0, 1, 0, NULL},
                               {"window", EMBER_KATTR_INT, 0, 0, 0, NULL},
                               {"softcap", EMBER_KATTR_FLOAT, 0, 0, 0, NULL}};
    bool lse = lse_dtype >= 0;
    ember_kernel_call k = {sizeof k, lse ? "sdpa_lse" : "sdpa", EMBER_KERNEL_MODE_INFERENCE,
                           mask_dtype < 0 ? 3 : 4, lse ? 2 : 1, 4, t, t + 4, at, 1, NULL, level};
    return L->impls[lse ? 1 : 0].supports(&k) != 0;
}

static int direct_supports(const char *isa, const char *level, int dtype, int mask_dtype,
                           bool strided_out) {
    return direct_call(isa, level, dtype, mask_dtype, strided_out, dtype, -1, 1);
}

/* sdpa_lse at the avx2 level: out of out_dtype, lse [1, 8, rows] of lse_dtype */
static int direct_supports_lse(int dtype, int out_dtype, int lse_dtype, int64_t rows) {
    return direct_call("avx2", "avx2", dtype, -1, false, out_dtype, lse_dtype, rows);
}

static void test_sdpa_supports(void) {
    if (!pkgs() || !variant()) {
        em_test_skip("needs $EMBER_TEST_KERNELS and an x86-64 CPU with AVX2");
        return;
    }
    bool avx512 = !strcmp(variant(), "avx512");
    /* each variant takes the levels whose built-in runs its micro-kernels, and only those */
    if (avx512) {
        CHECK(direct_supports("avx512", "avx512bf16", EMBER_KDT_BF16, -1, false) == 1);
        CHECK(direct_supports("avx512", "avx512", EMBER_KDT_BF16, -1, false) == 1);
        CHECK(direct_supports("avx512", "avx2", EMBER_KDT_BF16, -1, false) == 0);
        CHECK(direct_supports("avx2", "avx512", EMBER_KDT_BF16, -1, false) == 0);
    }
    CHECK(direct_supports("avx2", "avx2", EMBER_KDT_BF16, -1, false) == 1);
    CHECK(direct_supports("avx2", "generic", EMBER_KDT_BF16, -1, false) == 0);
    CHECK(direct_supports("avx2", "", EMBER_KDT_BF16, -1, false) == 0);
    /* masks: bool and float are taken; dtypes it lacks are declined */
    CHECK(direct_supports("avx2", "avx2", EMBER_KDT_F32, EMBER_KDT_BOOL, false) == 1);
    CHECK(direct_supports("avx2", "avx2", EMBER_KDT_F16, EMBER_KDT_BF16, false) == 1);
    CHECK(direct_supports("avx2", "avx2", EMBER_KDT_F32, EMBER_KDT_I32, false) == 0);
    CHECK(direct_supports("avx2", "avx2", EMBER_KDT_F64, -1, false) == 0);
    CHECK(direct_supports("avx2", "avx2", EMBER_KDT_BF16, -1, true) == 0);
    /* sdpa_lse: out in q's dtype or f32, lse f32 of q's [B, Hq, Tq]; anything else declined */
    CHECK(direct_supports_lse(EMBER_KDT_BF16, EMBER_KDT_BF16, EMBER_KDT_F32, 1) == 1);
    CHECK(direct_supports_lse(EMBER_KDT_BF16, EMBER_KDT_F32, EMBER_KDT_F32, 1) == 1);
    CHECK(direct_supports_lse(EMBER_KDT_F32, EMBER_KDT_F32, EMBER_KDT_F32, 1) == 1);
    CHECK(direct_supports_lse(EMBER_KDT_F32, EMBER_KDT_BF16, EMBER_KDT_F32, 1) == 0);
    CHECK(direct_supports_lse(EMBER_KDT_BF16, EMBER_KDT_F16, EMBER_KDT_F32, 1) == 0);
    CHECK(direct_supports_lse(EMBER_KDT_BF16, EMBER_KDT_BF16, EMBER_KDT_BF16, 1) == 0);
    CHECK(direct_supports_lse(EMBER_KDT_BF16, EMBER_KDT_BF16, EMBER_KDT_F32, 2) == 0);
}

/* A copy of the package without its library: loading it fails naming the file, and the
 * built-in takes the calls. */
static void test_sdpa_removed(void) {
    if (!pkgs() || !variant()) {
        em_test_skip("needs $EMBER_TEST_KERNELS and an x86-64 CPU with AVX2");
        return;
    }
    char dir[] = "/tmp/ember-sdpa-XXXXXX", cmd[2048];
    if (!mkdtemp(dir)) return;
    snprintf(cmd, sizeof cmd, "cp -r '%s/ember-sdpa' '%s/' && rm %s/ember-sdpa/build/*/*.so",
             pkgs(), dir, dir);
    CHECK(system(cmd) == 0);
    char spec[600];
    snprintf(spec, sizeof spec, "%s/ember-sdpa", dir);
    em_ctx *c = em_ctx_create();
    CHECK(em_kernels_load(c, spec, NULL) != EM_OK);
    const char *msg = em_ctx_error(c)->message;
    CHECK_MSG(strstr(msg, "libember_sdpa_") && strstr(msg, "missing"), "%s", msg);
    em_ctx_clear_error(c);
    em_scope_push(c);
    sdpa_call r = make_call(c, &CASES[0], 1);
    em_tensor *out = em_sdpa(c, r.q, r.k, r.v, r.mask, &r.p);
    CHECK(out && !strcmp(pick(c, &r, out, EM_KMODE_INFERENCE), "built-in"));
    em_scope_pop(c);
    em_ctx_free(c);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

EM_TEST_MAIN(T(test_sdpa_removed), T(test_sdpa_supports), T(test_sdpa_bits),
             T(test_sdpa_lse_bits))

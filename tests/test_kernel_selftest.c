/*
 * The load-time self-test beyond element-wise ops (src/kernels_hub/selftest.c), on package
 * implementations taken straight from their libraries: the deliberately wrong ragged_dot and
 * sdpa of the test package fail it with a message naming the op, the call and the first
 * differing element (loaded, they are disabled and the built-in answers: test_kernel_hub); the
 * packages of Ember's own kernels pass it, having run at least one call (not declined them all).
 * Packages come from $EMBER_TEST_KERNELS (tests/CMakeLists.txt).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "harness.h"
#include "kernel_pkg_util.h"
#include "kernels_hub/khub.h"

#define HAS(text, s) CHECK_MSG(strstr((text), (s)), "missing: %s\nin: %s", (s), (text))

/* The self-test of implementation `name` of the library at <pkgs>/<pkg>/build/<variant>/<lib>;
 * -1 when it cannot be loaded. The reason goes into why. */
static int self_test(const char *pkg, const char *variant, const char *lib, const char *name,
                     char *why, size_t why_n) {
    const ember_kernel_library *L = test_pkg_library(pkg, variant, lib);
    CHECK_MSG(L != NULL, "cannot load %s/%s/%s", pkg, variant, lib);
    for (int i = 0; L && i < L->n_impls; i++) {
        const ember_kernel_impl *im = &L->impls[i];
        if (strcmp(im->name, name)) continue;
        static em_kimpl k; /* the registry's kind of entry, as load.c fills it */
        memset(&k, 0, sizeof k);
        snprintf(k.name, sizeof k.name, "%s", im->name);
        k.op = em_op_find(im->op)->id;
        k.dtypes = im->dtypes;
        k.modes = im->modes;
        k.priority = im->priority;
        khub_adapter_init(&k, im);
        return khub_self_test(&k, why, why_n);
    }
    CHECK_MSG(0, "%s has no implementation %s", lib, name);
    return -1;
}

#define TEST_PKG "ember-test-kernels", "ember-abi1-cpu-generic-" EM_TEST_ARCH "-linux", \
                 "libember_test_kernels.so"
#if defined(__x86_64__)
#define EM_TEST_ARCH "x86_64"
#else
#define EM_TEST_ARCH "aarch64"
#endif

static bool have_pkgs(void) {
    if (getenv("EMBER_TEST_KERNELS")) return true;
    em_test_skip("EMBER_TEST_KERNELS is not set (run through ctest)");
    return false;
}

static void test_wrong_kernels_fail(void) {
    if (!have_pkgs()) return;
    char why[512];
    CHECK(self_test(TEST_PKG, "ragged_dot_wrong", why, sizeof why) == 0);
    HAS(why, "self-test failed: element [0,0] of ragged_dot of lhs [5,64] f32, experts [3,64,64] "
             "as [G, N, K], group sizes 2,0,2 is 0, the built-in gives ");
    CHECK(self_test(TEST_PKG, "sdpa_wrong", why, sizeof why) == 0);
    HAS(why, "self-test failed: element [0,0,0,0] of sdpa of q [1,2,1,16] f32, k and v "
             "[1,1,1100,16], causal is 0, the built-in gives ");
    CHECK(self_test(TEST_PKG, "neg_wrong", why, sizeof why) == 0);
    HAS(why, "element 0 of a [2,33] f32 input is");
    /* a good element-wise kernel passes */
    CHECK(self_test(TEST_PKG, "silu_test", why, sizeof why) == 1);
}

/* Ember's own packages at the level they take calls: pass, with every call run (why empty). */
static void test_own_packages_pass(void) {
#if defined(__x86_64__)
    if (!have_pkgs()) return;
    const char *lv = khub_host_level();
    char why[512] = "";
    bool avx512 = !strncmp(lv, "avx512", 6), avx2 = !strcmp(lv, "avx2");
    if (!avx512 && !avx2) {
        em_test_skip("the kernels here run %s; Ember's packages take AVX2 and AVX-512 calls", lv);
        return;
    }
    if (avx512)
        CHECK_MSG(self_test("ember-sdpa", "ember-abi1-cpu-avx512-x86_64-linux",
                            "libember_sdpa_avx512.so", "sdpa_flash_avx512", why,
                            sizeof why) == 1 && !why[0], "%s", why);
    else
        CHECK_MSG(self_test("ember-sdpa", "ember-abi1-cpu-avx2-x86_64-linux",
                            "libember_sdpa_avx2.so", "sdpa_flash_avx2", why, sizeof why) == 1 &&
                      !why[0], "%s", why);
    if (!strcmp(lv, "avx512bf16"))
        CHECK_MSG(self_test("ember-ragged-avx512bf16", "ember-abi1-cpu-avx512bf16-x86_64-linux",
                            "libember_ragged_avx512bf16.so", "ragged_packed_avx512bf16", why,
                            sizeof why) == 1 && !why[0], "%s", why);
    if (avx2)
        CHECK_MSG(self_test("ember-ragged-avx2", "ember-abi1-cpu-avx2-x86_64-linux",
                            "libember_ragged_avx2.so", "ragged_packed_avx2", why,
                            sizeof why) == 1 && !why[0], "%s", why);
#else
    em_test_skip("Ember's own packages are x86-64 ones");
#endif
}

EM_TEST_MAIN(T(test_wrong_kernels_fail), T(test_own_packages_pass))

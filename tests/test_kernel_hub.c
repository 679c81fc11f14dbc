/*
 * The kernel hub: resolution (every rejection reason), digests, the lock, ABI and symbol checks,
 * offline loading, the load-time self-test, and per-call fallback to the built-in kernels in
 * eager and compiled code. The packages are built from kernels/test/ (tests/CMakeLists.txt) into
 * $EMBER_TEST_KERNELS; variants with other names, flipped bytes and Hub-cache layouts are made
 * from them here, by copying files.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/cpu/cpu.h"
#include "core/kernel_registry.h"
#include "kernels_hub/khub.h"
#include "ember/ember.h"
#include "ember/kernels.h"
#include "harness.h"
#include "kernel_pkg_util.h"
#include "khub_test.h"

#if defined(__x86_64__)
#define ARCH "x86_64"
#define OTHER_ARCH "aarch64"
#define MISSING_FEATURE "avx512bf16"
#define MISSING_LABEL "AVX-512 BF16"
#else
#define ARCH "aarch64"
#define OTHER_ARCH "x86_64"
#define MISSING_FEATURE "neonbf16"
#define MISSING_LABEL "NEON BF16"
#endif
#define GOOD "ember-abi1-cpu-generic-" ARCH "-linux"
#define LIB "libember_test_kernels.so"

static char tmp[256];

static const char *pkgs(void) { return getenv("EMBER_TEST_KERNELS"); }

static bool setup(void) {
    if (!pkgs()) {
        em_test_skip("EMBER_TEST_KERNELS is not set (run through ctest)");
        return false;
    }
    return khub_tmp(tmp, sizeof tmp, "ember-khub");
}

/* A package folder <tmp>/<name> with copies of the good variant under each of `variants`. */
static void make_pkg(const char *name, const char *const *variants) {
    sh("rm -rf '%s/%s' && mkdir -p '%s/%s/build'", tmp, name, tmp, name);
    for (const char *const *v = variants; *v; v++)
        sh("cp -r '%s/ember-test-kernels/build/" GOOD "' '%s/%s/build/%s'", pkgs(), tmp, name, *v);
}

static char *explain(em_ctx *c, const char *spec, const char *lock, em_status *st) {
    return explain_for(c, spec, lock, NULL, st);
}

static void test_resolution_table(void) {
    if (!setup()) return;
    static const char *const v[] = {GOOD,
                                    "foo-bar",
                                    "ember-abi2-cpu-generic-" ARCH "-linux",
                                    "ember-abi1-cpu-generic-" OTHER_ARCH "-linux",
                                    "ember-abi1-cpu-generic-" ARCH "-windows",
                                    "ember-abi1-cuda13-sm90-" ARCH "-linux",
                                    "ember-stablehlo",
                                    "ember-abi1-cpu-" MISSING_FEATURE "-" ARCH "-linux",
                                    "ember-abi1-cpu-" ARCH "-linux",
                                    NULL};
    make_pkg("table", v);
    /* a variant without metadata, and the lowest-ranked accepted one stays unchosen */
    sh("rm '%s/table/build/ember-abi1-cpu-" ARCH "-linux/metadata.json'", tmp);
    char spec[512];
    snprintf(spec, sizeof spec, "%s/table", tmp);
    em_ctx *c = em_ctx_create();
    em_status st;
    char *t = explain(c, spec, NULL, &st);
    CHECK(st == EM_OK);
    if (em_cpu_bf16_dot()) { /* the MISSING_FEATURE variant is not missing here: it wins */
        HAS(t, "Accepted ember-abi1-cpu-" MISSING_FEATURE "-" ARCH
               "-linux: ember-test-kernels v1 (Apache-2.0), chosen");
        HAS(t, "Accepted " GOOD ": ranks below ember-abi1-cpu-" MISSING_FEATURE);
    } else {
        HAS(t, "Accepted " GOOD ": ember-test-kernels v1 (Apache-2.0), chosen");
    }
    HAS(t, "Rejected foo-bar: not a variant name");
    HAS(t, "Rejected ember-abi2-cpu-generic-" ARCH "-linux: ABI 2, Ember speaks 1");
    HAS(t, "Rejected ember-abi1-cpu-generic-" OTHER_ARCH "-linux: built for " OTHER_ARCH
           "; this machine is " ARCH);
    HAS(t, "Rejected ember-abi1-cpu-generic-" ARCH "-windows: built for windows; this is linux");
    HAS(t, "Rejected ember-abi1-cuda13-sm90-" ARCH "-linux: backend cuda13 needs a device");
    /* a CPU library under the StableHLO name (the StableHLO variants: test_kernel_hub_pjrt) */
    HAS(t, "Rejected ember-stablehlo: metadata.json says backend cpu, the variant name stablehlo");
    HAS(t, "Rejected ember-abi1-cpu-" ARCH "-linux: no metadata.json");
    if (em_cpu_bf16_dot())
        fprintf(stderr, "note: this CPU has %s; the 'needs' row is not checked\n", MISSING_LABEL);
    else
        HAS(t, "Rejected ember-abi1-cpu-" MISSING_FEATURE "-" ARCH "-linux: needs " MISSING_LABEL
               "; this CPU runs ");
    free(t);
    /* nothing acceptable: the error lists every reason */
    static const char *const bad[] = {"ember-abi2-cpu-generic-" ARCH "-linux", NULL};
    make_pkg("none", bad);
    snprintf(spec, sizeof spec, "%s/none", tmp);
    CHECK(em_kernels_load(c, spec, NULL) == EM_ERR_UNSUPPORTED);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "no variant of", "ABI 2, Ember speaks 1");
    em_ctx_free(c);
}

/* The preference order: avx2 over generic where the CPU has AVX2. */
static void test_preference(void) {
    if (!setup()) return;
    char spec[512];
    snprintf(spec, sizeof spec, "%s/ember-test-kernels", pkgs());
    em_ctx *c = em_ctx_create();
    em_status st;
    char *t = explain(c, spec, NULL, &st);
    CHECK(st == EM_OK);
    if (em_cpu_isa_get() == EM_ISA_AVX2 || em_cpu_isa_get() == EM_ISA_AVX512) {
        HAS(t, "Accepted ember-abi1-cpu-avx2-x86_64-linux: ember-test-kernels v1 (Apache-2.0), "
               "chosen");
        HAS(t, "Accepted " GOOD ": ranks below ember-abi1-cpu-avx2-x86_64-linux");
    } else {
        HAS(t, "Accepted " GOOD ": ember-test-kernels v1 (Apache-2.0), chosen");
    }
    free(t);
    em_ctx_free(c);
}

static bool read_digest(const char *meta, char out[65]) {
    char *s = em_test_read_file(meta, NULL);
    char *p = s ? strstr(s, "\"" LIB "\": \"") : NULL;
    if (p) snprintf(out, 65, "%s", p + strlen("\"" LIB "\": \""));
    free(s);
    return p != NULL;
}

static void test_tampered(void) {
    if (!setup()) return;
    static const char *const v[] = {GOOD, NULL};
    make_pkg("flipped", v);
    char lib[512], meta[512], want[65];
    snprintf(lib, sizeof lib, "%s/flipped/build/" GOOD "/" LIB, tmp);
    snprintf(meta, sizeof meta, "%s/flipped/build/" GOOD "/metadata.json", tmp);
    CHECK(read_digest(meta, want));
    /* flip one byte of the library */
    FILE *f = fopen(lib, "r+b");
    CHECK(f != NULL);
    if (f) {
        fseek(f, 200, SEEK_SET);
        int ch = fgetc(f);
        fseek(f, 200, SEEK_SET);
        fputc(ch ^ 0x01, f);
        fclose(f);
    }
    char spec[512], expect[1024];
    snprintf(spec, sizeof spec, "%s/flipped", tmp);
    em_ctx *c = em_ctx_create();
    CHECK(em_kernels_load(c, spec, NULL) == EM_ERR_UNSUPPORTED);
    snprintf(expect, sizeof expect,
             "digest mismatch in build/" GOOD "/" LIB ": metadata.json says %s, the file has ",
             want);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, expect);
    em_ctx_clear_error(c);
    /* a file the metadata does not cover */
    make_pkg("planted", v);
    sh("cp '%s/planted/build/" GOOD "/" LIB "' '%s/planted/build/" GOOD "/extra.so'", tmp, tmp);
    snprintf(spec, sizeof spec, "%s/planted", tmp);
    CHECK(em_kernels_load(c, spec, NULL) == EM_ERR_UNSUPPORTED);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "build/" GOOD "/extra.so has no digest in metadata.json");
    em_ctx_free(c);
}

static void test_abi_and_symbols(void) {
    if (!setup()) return;
    char spec[512];
    em_ctx *c = em_ctx_create();
    snprintf(spec, sizeof spec, "%s/ember-test-badabi", pkgs());
    CHECK(em_kernels_load(c, spec, NULL) == EM_ERR_UNSUPPORTED);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "libember_test_badabi.so: ABI 2, Ember speaks 1");
    em_ctx_clear_error(c);
    snprintf(spec, sizeof spec, "%s/ember-test-nosym", pkgs());
    CHECK(em_kernels_load(c, spec, NULL) == EM_ERR_FORMAT);
    CHECK_ERR(c, EM_ERR_FORMAT, "libember_test_nosym.so does not export ember_kernel_library_get");
    em_ctx_free(c);
}

#define COMMIT_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define COMMIT_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

/* A Hub cache holding two commits of ember-test/kernels; refs/v1 names the newer, B. */
static void make_cache(void) {
    const char *repo = "models--ember-test--kernels";
    sh("rm -rf '%s/cache' && mkdir -p '%s/cache/%s/refs' '%s/cache/%s/snapshots/" COMMIT_A
       "/build' '%s/cache/%s/snapshots/" COMMIT_B "/build'",
       tmp, tmp, repo, tmp, repo, tmp, repo);
    sh("printf %s > '%s/cache/%s/refs/v1'", COMMIT_B, tmp, repo);
    const char *commits[] = {COMMIT_A, COMMIT_B};
    for (int i = 0; i < 2; i++)
        sh("cp -r '%s/ember-test-kernels/build/" GOOD "' '%s/cache/%s/snapshots/%s/build/'",
           pkgs(), tmp, repo, commits[i]);
    /* B's metadata differs (a later revision), so the lock's digests tell the two apart */
    sh("sed -i 's/Apache-2.0/MIT/' '%s/cache/%s/snapshots/" COMMIT_B "/build/" GOOD
       "/metadata.json'", tmp, repo);
}

static void test_lock(void) {
    if (!setup()) return;
    make_cache();
    char cache[512], lock[512];
    snprintf(cache, sizeof cache, "%s/cache", tmp);
    snprintf(lock, sizeof lock, "%s/ember-kernels.lock", tmp);
    setenv("HF_HUB_CACHE", cache, 1);
    /* the network must not be used: an endpoint nobody answers */
    setenv("HF_ENDPOINT", "http://127.0.0.1:9", 1);
    em_ctx *c = em_ctx_create();
    em_status st;
    char *t = explain(c, "ember-test/kernels", NULL, &st);
    CHECK(st == EM_OK);
    HAS(t, "at " COMMIT_B);
    HAS(t, "(MIT), chosen");
    free(t);
    const char *specs[] = {"ember-test/kernels@" COMMIT_A};
    CHECK(em_kernels_lock(c, specs, 1, lock) == EM_OK);
    char *lt = em_test_read_file(lock, NULL);
    HAS(lt, "\"commit\": \"" COMMIT_A "\"");
    HAS(lt, "build/" GOOD "/" LIB);
    free(lt);
    /* the lock names the older commit: it resolves there although refs/v1 says B */
    t = explain(c, "ember-test/kernels", lock, &st);
    CHECK(st == EM_OK);
    HAS(t, "at " COMMIT_A);
    HAS(t, "(Apache-2.0), chosen");
    free(t);
    /* a file that differs from the lock's digest is refused, naming both digests */
    sh("cp '%s/cache/models--ember-test--kernels/snapshots/" COMMIT_B "/build/" GOOD
       "/metadata.json' '%s/cache/models--ember-test--kernels/snapshots/" COMMIT_A "/build/" GOOD
       "/metadata.json'", tmp, tmp);
    t = explain(c, "ember-test/kernels", lock, &st);
    CHECK(st == EM_ERR_UNSUPPORTED);
    HAS(t, "digest mismatch in build/" GOOD "/metadata.json: the lock says ");
    free(t);
    em_ctx_clear_error(c);
    /* offline: a repo the cache lacks fails at once, without asking the endpoint */
    CHECK(em_kernels_load(c, "ember-test/absent", NULL) != EM_OK);
    CHECK_MSG(strstr(em_ctx_error(c)->message, "127.0.0.1:9") == NULL,
              "the network was used: %s", em_ctx_error(c)->message);
    em_ctx_free(c);
    unsetenv("HF_ENDPOINT");
    unsetenv("HF_HUB_CACHE");
}

typedef int (*calls_fn)(const char *);

/* Loads the good package, then: silu and add run in the package for big contiguous f32 calls,
 * in the built-in for small or strided ones (per-call fallback), the results equal the
 * built-in's; add (not declared for training) falls back while autodiff records; the wrong neg
 * was disabled by its self-test; a compiled program calls the package too. */
static void test_load_and_fallback(void) {
    if (!setup()) return;
    char spec[512], lib[700];
    snprintf(spec, sizeof spec, "%s/ember-test-kernels", pkgs());
    em_ctx *c = em_ctx_create();
    CHECK(em_kernels_load(c, spec, NULL) == EM_OK);
    /* the library the registry loaded (the preferred variant's) */
    em_kernels_options o = em_kernels_default_options();
    char *t = NULL;
    em_kernels_explain(c, spec, &o, &t);
    char variant[128] = "";
    for (char *save = NULL, *line = t ? strtok_r(t, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save))
        if (strstr(line, ", chosen")) sscanf(line, " Accepted %127[^:]", variant);
    free(t);
    snprintf(lib, sizeof lib, "%s/build/%s/" LIB, spec, variant);
    void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    calls_fn calls = h ? (calls_fn)(uintptr_t)dlsym(h, "ember_test_calls") : NULL;
    CHECK_MSG(calls != NULL, "%s is not loaded", lib);
    if (!calls) {
        em_ctx_free(c);
        return;
    }
    CHECK(calls("neg") == 1 || calls("neg") == 3); /* the self-test's runs only */
    int neg_after_test = calls("neg");

    em_scope_push(c);
    float xs[64];
    for (int i = 0; i < 64; i++) xs[i] = (float)(i - 32) / 8.0f;
    int64_t big[] = {4, 16}, small[] = {8};
    em_tensor *x = em_from_host(c, EM_F32, 2, big, xs);
    em_tensor *xsm = em_from_host(c, EM_F32, 1, small, xs);
    int s0 = calls("silu"), a0 = calls("add");
    em_tensor *y = em_silu(c, x);
    CHECK(calls("silu") == s0 + 1);
    em_tensor *ysm = em_silu(c, xsm); /* 8 elements: declined, the built-in runs */
    CHECK(calls("silu") == s0 + 1);
    em_tensor *xt = em_transpose(c, x, 0, 1); /* strided: declined */
    em_tensor *yt = em_silu(c, xt);
    CHECK(calls("silu") == s0 + 1);
    em_tensor *z = em_add(c, x, x);
    CHECK(calls("add") == a0 + 1);
    CHECK(y && ysm && yt && z);
    /* the results against the built-in's formula, x * sigmoid(x), and against exact sums */
    const float *py = y ? em_tensor_data(c, y) : NULL, *pz = z ? em_tensor_data(c, z) : NULL;
    for (int i = 0; py && pz && i < 64; i++) {
        double want = xs[i] / (1.0 + exp(-(double)xs[i]));
        CHECK_MSG(fabs(py[i] - want) < 1e-6 * (1 + fabs(want)), "silu[%d] %g vs %g", i, py[i],
                  want);
        CHECK(pz[i] == xs[i] + xs[i]);
    }
    /* the wrong neg is disabled: the built-in answers */
    em_tensor *n = em_neg(c, x);
    const float *pn = n ? em_tensor_data(c, n) : NULL;
    CHECK(pn && pn[1] == -xs[1]);
    CHECK(calls("neg") == neg_after_test);
    /* modes: add is not declared for training */
    em_tensor *w = em_from_host(c, EM_F32, 2, big, xs);
    em_tensor_requires_grad(c, w, true);
    em_grad_enable(c, true);
    int a1 = calls("add");
    CHECK(em_add(c, w, w) != NULL);
    CHECK(calls("add") == a1);
    em_grad_enable(c, false);
    em_scope_pop(c);

    /* the listing names the package and the disabled kernel */
    char *list = em_kernels_list("cpu", false);
    fprintf(stderr, "%s", list ? list : "(null)");
    HAS(list, "silu_test *");
    HAS(list, "neg_wrong (disabled)");
    HAS(list, "ragged_dot_wrong (disabled)");
    HAS(list, "sdpa_wrong (disabled)");
    HAS(list, "ember-test-kernels v1");
    free(list);
    CHECK(em_ctx_status(c) == EM_OK);
    em_ctx_free(c);
}

static int compiled_fn(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *statics,
                       int n_statics, em_tensor **out, int max_out, void *user) {
    (void)n_in;
    (void)statics;
    (void)n_statics;
    (void)max_out;
    (void)user;
    out[0] = em_silu(c, em_mul(c, in[0], in[0]));
    return out[0] ? 1 : -1;
}

static void test_compiled_calls_package(void) {
    if (!setup()) return;
    char spec[512], lib[700];
    snprintf(spec, sizeof spec, "%s/ember-test-kernels", pkgs());
    em_ctx *c = em_ctx_create();
    CHECK(em_kernels_load(c, spec, NULL) == EM_OK); /* already loaded: nothing new */
    void *h = NULL;
    const char *vs[] = {"ember-abi1-cpu-avx2-x86_64-linux", GOOD};
    for (int i = 0; i < 2 && !h; i++) {
        snprintf(lib, sizeof lib, "%s/build/%s/" LIB, spec, vs[i]);
        h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    }
    calls_fn calls = h ? (calls_fn)(uintptr_t)dlsym(h, "ember_test_calls") : NULL;
    CHECK(calls != NULL);
    em_compiled *f = em_compile(c, "silu_sq", compiled_fn, NULL);
    CHECK(f != NULL);
    em_scope_push(c);
    float xs[64];
    for (int i = 0; i < 64; i++) xs[i] = (float)i / 16.0f;
    int64_t shape[] = {64};
    em_tensor *x = em_from_host(c, EM_F32, 1, shape, xs);
    em_tensor *y = NULL;
    int s0 = calls ? calls("silu") : 0;
    CHECK(f && em_compiled_call(c, f, &x, 1, NULL, 0, &y, 1) == 1);
    if (calls) CHECK_MSG(calls("silu") > s0, "the compiled program did not call the package");
    /* the package was told the CPU level Ember's kernels run at */
    typedef const char *(*level_fn)(void);
    level_fn level = h ? (level_fn)(uintptr_t)dlsym(h, "ember_test_cpu_level") : NULL;
    CHECK(level != NULL);
    if (level) CHECK_MSG(level() && !strcmp(level(), khub_host_level()),
                         "the package saw cpu_level '%s', Ember runs '%s'",
                         level() ? level() : "(null)", khub_host_level());
    const float *py = y ? em_tensor_data(c, y) : NULL;
    for (int i = 0; py && i < 64; i++) {
        double v = (double)xs[i] * xs[i], want = v / (1.0 + exp(-v));
        CHECK(fabs(py[i] - want) < 1e-5 * (1 + fabs(want)));
    }
    em_scope_pop(c);
    em_compiled_free(f);
    CHECK(em_ctx_status(c) == EM_OK);
    em_ctx_free(c);
}


/* ember-ragged-avx2 (kernels/ragged_avx2): loaded, it runs packed bf16 ragged_dot calls and
 * gives the built-in's bits; a call it declines (f32) still runs. */
static void test_ragged_package(void) {
    if (!setup()) return;
    if (em_cpu_isa_get() != EM_ISA_AVX2) {
        em_test_skip("the AVX2 ragged_dot package is checked where the kernels run AVX2 (here: %s)",
                     em_cpu_isa_name(em_cpu_isa_get()));
        return;
    }
    char spec[512];
    snprintf(spec, sizeof spec, "%s/ember-ragged-avx2", pkgs());
    em_ctx *c = em_ctx_create();
    CHECK(em_kernels_load(c, spec, NULL) == EM_OK);
    em_scope_push(c);
    enum { M = 7, K = 64, N = 320, G = 3 };
    static uint16_t xs[M * K], ws[G * N * K];
    uint32_t seed = 7;
    for (int i = 0; i < M * K; i++) {
        seed = seed * 1664525u + 1013904223u;
        xs[i] = (uint16_t)(0x3c00 + (seed >> 24)); /* bf16 in [2^-7, 2^-6) */
    }
    for (int i = 0; i < G * N * K; i++) {
        seed = seed * 1664525u + 1013904223u;
        ws[i] = (uint16_t)(0xbc00 + (seed >> 24)); /* negative, same range */
    }
    int32_t sizes[G] = {2, 0, 4}; /* 6 of 7 rows: the last one is zeros */
    int64_t xsh[] = {M, K}, wsh[] = {G, N, K}, gsh[] = {G};
    em_tensor *x = em_from_host(c, EM_BF16, 2, xsh, xs);
    em_tensor *w = em_ragged_pack(c, em_from_host(c, EM_BF16, 3, wsh, ws));
    em_tensor *g = em_from_host(c, EM_I32, 1, gsh, sizes);
    em_tensor *hub = em_ragged_dot(c, x, w, g, true);
    /* the built-in, called directly */
    int64_t osh[] = {M, N};
    em_tensor *ref = em_empty(c, EM_BF16, 2, osh);
    CHECK(hub && ref);
    if (hub && ref) {
        em_tensor *ins[] = {x, w, g};
        em_attr at[EM_MAX_ATTRS] = {{.i = 1}};
        em_kernel_args a = {c, em_op_get(EM_OP_RAGGED_DOT), ins, 3, &ref, 1, at};
        CHECK(em_device_cpu()->be->kernels[EM_OP_RAGGED_DOT](&a) == EM_OK);
        CHECK_MSG(!memcmp(em_tensor_data(c, hub), em_tensor_data(c, ref), sizeof(uint16_t) * M * N),
                  "the package's ragged_dot differs from the built-in's bits");
    }
    char *list = em_kernels_list("cpu", false);
    HAS(list, "ragged_packed_avx2 *");
    free(list);
    /* f32: declined, the built-in answers */
    em_tensor *xf = em_cast(c, x, EM_F32), *wf = em_cast(c, em_ragged_unpack(c, w), EM_F32);
    CHECK(em_ragged_dot(c, xf, wf, g, true) != NULL);
    em_scope_pop(c);
    CHECK(em_ctx_status(c) == EM_OK);
    em_ctx_free(c);
}

/* ---- the packed ragged_dot packages at each CPU level ----------------------------------- */

/* Random packed bf16 ragged_dot inputs: x [m, k], experts [g, n, k] packed (em_ragged_pack),
 * group sizes spreading the m rows (a zero group among them, and a spare zero row when m > 2),
 * the output [m, n]. In c's current scope. */
typedef struct ragged_call {
    em_tensor *x, *w, *g, *out;
} ragged_call;

static ragged_call ragged_inputs(em_ctx *c, int64_t m, int64_t k, int64_t n, int64_t g,
                                 uint64_t seed) {
    ragged_call r = {0};
    int32_t sizes[8] = {0};
    int64_t left = m > 2 ? m - 1 : m;
    for (int64_t i = 0; i < g && i < 8; i++) {
        int64_t s = i == 1 ? 0 : i == g - 1 ? left : (left + 1) / 2;
        sizes[i] = (int32_t)s;
        left -= s;
    }
    r.x = em_rand(c, EM_BF16, EM_SHAPE(m, k), seed, -1, 1);
    r.w = em_ragged_pack(c, em_rand(c, EM_BF16, EM_SHAPE(g, n, k), seed + 1, -0.1, 0.1));
    int64_t gsh[] = {g};
    r.g = em_from_host(c, EM_I32, 1, gsh, sizes);
    r.out = em_empty(c, EM_BF16, EM_SHAPE(m, n));
    return r;
}

/* The name of the implementation the registry picks for the call in `mode`: what eager calls
 * (inference, training) and the compiled plan (compile) would run. */
static const char *ragged_pick(em_ctx *c, const ragged_call *r, unsigned mode) {
    em_tensor *ins[] = {r->x, r->w, r->g}, *outs[] = {r->out};
    em_attr at[EM_MAX_ATTRS] = {{.i = 1}};
    em_kernel_args a = {c, em_op_get(EM_OP_RAGGED_DOT), ins, 3, outs, 1, at};
    const em_kimpl *k =
        em_kset_pick(em_kset_get(em_device_cpu()->be, EM_OP_RAGGED_DOT), &a, mode);
    return k ? k->name : "(none)";
}

/* The built-in ragged_dot on r, called directly (into r->out). */
static void ragged_builtin(em_ctx *c, const ragged_call *r) {
    em_tensor *ins[] = {r->x, r->w, r->g}, *outs[] = {r->out};
    em_attr at[EM_MAX_ATTRS] = {{.i = 1}};
    em_kernel_args a = {c, em_op_get(EM_OP_RAGGED_DOT), ins, 3, outs, 1, at};
    CHECK(em_device_cpu()->be->kernels[EM_OP_RAGGED_DOT](&a) == EM_OK);
}

/* Shapes (m, k, n, g): decode and prefill row counts around the built-in's task split (256
 * weight rows a task) and the AVX-512 kernel's row blocks (at most 10 rows). */
static const int64_t RAGGED_SHAPES[][4] = {
    {1, 64, 32, 1}, {7, 64, 320, 3}, {23, 128, 96, 4}, {40, 32, 544, 5},
};
static const unsigned MODES[] = {EM_KMODE_INFERENCE, EM_KMODE_TRAINING, EM_KMODE_COMPILE};

/* Every packed bf16 shape in every mode picks `want`. */
static void check_picks(em_ctx *c, const char *pkg, const char *want) {
    for (size_t s = 0; s < sizeof RAGGED_SHAPES / sizeof *RAGGED_SHAPES; s++) {
        const int64_t *d = RAGGED_SHAPES[s];
        em_scope_push(c);
        ragged_call r = ragged_inputs(c, d[0], d[1], d[2], d[3], 40 + s);
        for (size_t m = 0; m < sizeof MODES / sizeof *MODES; m++) {
            const char *got = ragged_pick(c, &r, MODES[m]);
            CHECK_MSG(!strcmp(got, want),
                      "%s at level %s, [%lld, %lld] x [%lld, %lld, %lld] mode %u: %s took the "
                      "call, expected %s", pkg, khub_host_level(), (long long)d[0],
                      (long long)d[1], (long long)d[3], (long long)d[2], (long long)d[1],
                      MODES[m], got, want);
        }
        em_scope_pop(c);
    }
}

/* A package library's supports() asked directly, as if Ember ran its kernels at `level` (levels
 * EMBER_CPU_LEVEL cannot give this process, e.g. "avx512" without BF16 on a BF16 CPU): the
 * answer for a contiguous packed bf16 call of 7 rows, K 64, N 320, 3 groups; -1 when the
 * library does not load. Call it only where the CPU runs the library's instruction set. */
static int direct_supports(const char *pkg, const char *variant, const char *lib,
                           const char *level) {
    const ember_kernel_library *L = test_pkg_library(pkg, variant, lib);
    if (!L || L->n_impls != 1) return -1;
    ember_kernel_tensor t[4] = {
        {NULL, EMBER_KDT_BF16, 2, {7, 64}, {64, 1}},
        {NULL, EMBER_KDT_BF16, 5, {3, 10, 32, 32, 2}, {20480, 2048, 64, 2, 1}},
        {NULL, EMBER_KDT_I32, 1, {3}, {1}},
        {NULL, EMBER_KDT_BF16, 2, {7, 320}, {320, 1}},
    };
    ember_kernel_attr at = {"nk", EMBER_KATTR_BOOL, 0, 1, 0, NULL};
    ember_kernel_call k = {sizeof k, "ragged_dot", EMBER_KERNEL_MODE_INFERENCE, 3, 1, 1,
                           t, t + 3, &at, 1, NULL, level};
    return L->impls[0].supports(&k) != 0;
}

#define AVX2_VARIANT "ember-abi1-cpu-avx2-x86_64-linux"
#define BF16_VARIANT "ember-abi1-cpu-avx512bf16-x86_64-linux"

/* ember-ragged-avx2 declines every call where Ember's kernels run AVX-512: the built-in AVX-512
 * ragged_dot is the wider one. Needs a CPU with AVX-512 (and EMBER_CPU_LEVEL not lowering it). */
static void test_ragged_avx2_declines_avx512(void) {
    if (!setup()) return;
#if defined(__x86_64__)
    if (!em_cpu_features_get()->avx512f || em_cpu_isa_get() != EM_ISA_AVX512) {
        em_test_skip("ember-ragged-avx2's decline at the AVX-512 levels needs kernels running "
                     "AVX-512; this process runs %s (CPU: %s AVX-512)", khub_host_level(),
                     em_cpu_features_get()->avx512f ? "has" : "no");
        return;
    }
    char spec[512];
    snprintf(spec, sizeof spec, "%s/ember-ragged-avx2", pkgs());
    em_ctx *c = em_ctx_create();
    CHECK(em_kernels_load(c, spec, NULL) == EM_OK);
    check_picks(c, "ember-ragged-avx2", "built-in");
    /* the level this process cannot be lowered to (AVX-512 without BF16) and the one it runs,
     * asked of the library directly; and the AVX2 level it accepts */
    CHECK(direct_supports("ember-ragged-avx2", AVX2_VARIANT, "libember_ragged_avx2.so",
                          "avx512") == 0);
    CHECK(direct_supports("ember-ragged-avx2", AVX2_VARIANT, "libember_ragged_avx2.so",
                          "avx512bf16") == 0);
    CHECK(direct_supports("ember-ragged-avx2", AVX2_VARIANT, "libember_ragged_avx2.so",
                          "avx2") == 1);
    /* a call still runs, on the built-in */
    em_scope_push(c);
    ragged_call r = ragged_inputs(c, 7, 64, 320, 3, 9);
    CHECK(em_ragged_dot(c, r.x, r.w, r.g, true) != NULL);
    em_scope_pop(c);
    char *list = em_kernels_list("cpu", false);
    HAS(list, "ragged_packed_avx2");
    free(list);
    CHECK(em_ctx_status(c) == EM_OK);
    em_ctx_free(c);
#else
    em_test_skip("ember-ragged-avx2 is an x86-64 package");
#endif
}

/* ... and takes them where Ember's kernels run AVX2: on an AVX2 CPU, or on a wider one under
 * EMBER_CPU_LEVEL=avx2 (ctest kernel_hub_avx2). */
static void test_ragged_avx2_accepts_avx2(void) {
    if (!setup()) return;
    if (em_cpu_isa_get() != EM_ISA_AVX2) {
        em_test_skip("ember-ragged-avx2's calls are taken where the kernels run AVX2 (here: %s; "
                     "ctest kernel_hub_avx2 runs this with EMBER_CPU_LEVEL=avx2)",
                     khub_host_level());
        return;
    }
    char spec[512];
    snprintf(spec, sizeof spec, "%s/ember-ragged-avx2", pkgs());
    em_ctx *c = em_ctx_create();
    CHECK(em_kernels_load(c, spec, NULL) == EM_OK);
    check_picks(c, "ember-ragged-avx2", "ragged_packed_avx2");
    /* suspended (ember bench moe --kernels's built-in turns), the built-in takes them; resumed,
     * the package again */
    em_kreg_suspend_packages(true);
    check_picks(c, "ember-ragged-avx2 (suspended)", "built-in");
    em_kreg_suspend_packages(false);
    check_picks(c, "ember-ragged-avx2", "ragged_packed_avx2");
    CHECK(em_ctx_status(c) == EM_OK);
    em_ctx_free(c);
}

/* A small MoE layer (8 experts of hidden 64, intermediate 96, top-2, SwiGLU, bf16 packed
 * experts) on 5 tokens through the ragged implementation: a malloc'd copy of its output (n
 * elements), NULL on an error. */
static uint16_t *moe_layer(em_ctx *c, int64_t *n) {
    enum { T = 5, H = 64, E = 8, I = 96 };
    em_scope_push(c);
    em_moe_params p = em_moe_default_params();
    p.impl = EM_MOE_RAGGED;
    p.top_k = 2;
    p.norm_topk_prob = true;
    p.act = EM_MOE_ACT_SILU;
    em_moe_weights w = {0};
    w.gate_up = em_ragged_pack(c, em_rand(c, EM_BF16, EM_SHAPE(E, 2 * I, H), 301, -0.1, 0.1));
    w.down = em_ragged_pack(c, em_rand(c, EM_BF16, EM_SHAPE(E, H, I), 302, -0.1, 0.1));
    em_tensor *x = em_rand(c, EM_BF16, EM_SHAPE(T, H), 303, -1, 1);
    em_tensor *router = em_rand(c, EM_BF16, EM_SHAPE(E, H), 304, -0.5, 0.5);
    em_tensor *idx = NULL;
    em_tensor *rw = em_moe_route(c, em_linear(c, x, router, NULL), &p, NULL, EM_BF16, &idx);
    em_tensor *y = em_moe_experts(c, x, idx, rw, &w, &p, NULL);
    const void *d = y ? em_tensor_data(c, y) : NULL;
    uint16_t *copy = d ? malloc(sizeof *copy * T * H) : NULL;
    if (copy) memcpy(copy, d, sizeof *copy * T * H);
    *n = T * H;
    em_scope_pop(c);
    return copy;
}

/* ember-ragged-avx512bf16 (kernels/ragged_avx512bf16): where Ember's kernels run AVX-512 BF16
 * it takes every packed bf16 call, in every mode, and gives the built-in's bits. */
static void test_ragged_avx512bf16_package(void) {
    if (!setup()) return;
    if (em_cpu_isa_get() != EM_ISA_AVX512 || !em_cpu_bf16_dot()) {
        em_test_skip("ember-ragged-avx512bf16 runs where the kernels run AVX-512 BF16 (here: %s; "
                     "CPU: %s AVX-512 BF16)", khub_host_level(),
                     em_cpu_features_get()->avx512bf16 ? "has" : "no");
        return;
    }
    char spec[512];
    snprintf(spec, sizeof spec, "%s/ember-ragged-avx512bf16", pkgs());
    em_ctx *c = em_ctx_create();
    int64_t nm = 0;
    uint16_t *moe_builtin = moe_layer(c, &nm); /* before the package loads */
    CHECK(em_kernels_load(c, spec, NULL) == EM_OK);
    check_picks(c, "ember-ragged-avx512bf16", "ragged_packed_avx512bf16");
    em_kreg_suspend_packages(true);
    check_picks(c, "ember-ragged-avx512bf16 (suspended)", "built-in");
    em_kreg_suspend_packages(false);
    check_picks(c, "ember-ragged-avx512bf16", "ragged_packed_avx512bf16");
    uint16_t *moe_hub = moe_layer(c, &nm);
    CHECK(moe_builtin && moe_hub);
    if (moe_builtin && moe_hub)
        CHECK_MSG(!memcmp(moe_builtin, moe_hub, sizeof *moe_hub * (size_t)nm),
                  "the MoE layer's output with the package differs from the built-in's bits");
    free(moe_builtin);
    free(moe_hub);
    for (size_t s = 0; s < sizeof RAGGED_SHAPES / sizeof *RAGGED_SHAPES; s++) {
        const int64_t *d = RAGGED_SHAPES[s];
        em_scope_push(c);
        ragged_call r = ragged_inputs(c, d[0], d[1], d[2], d[3], 70 + s);
        em_tensor *hub = em_ragged_dot(c, r.x, r.w, r.g, true);
        ragged_builtin(c, &r);
        CHECK(hub != NULL);
        if (hub)
            CHECK_MSG(!memcmp(em_tensor_data(c, hub), em_tensor_data(c, r.out),
                              sizeof(uint16_t) * (size_t)(d[0] * d[2])),
                      "[%lld, %lld] x [%lld, %lld, %lld]: the package's bits differ from the "
                      "built-in's", (long long)d[0], (long long)d[1], (long long)d[3],
                      (long long)d[2], (long long)d[1]);
        em_scope_pop(c);
    }
    char *list = em_kernels_list("cpu", false);
    HAS(list, "ragged_packed_avx512bf16 *");
    free(list);
    /* f32, and the [G, N, K] layout: declined, the built-in answers */
    em_scope_push(c);
    ragged_call r = ragged_inputs(c, 7, 64, 320, 3, 9);
    em_tensor *wu = em_ragged_unpack(c, r.w);
    CHECK(em_ragged_dot(c, r.x, wu, r.g, true) != NULL);
    CHECK(em_ragged_dot(c, em_cast(c, r.x, EM_F32), em_cast(c, wu, EM_F32), r.g, true) != NULL);
    em_scope_pop(c);
    /* levels without BF16, asked directly (EMBER_CPU_LEVEL cannot give "avx512" alone here) */
    static const char *const no[] = {"avx512", "avx2", "generic", "neonbf16", ""};
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        CHECK_MSG(direct_supports("ember-ragged-avx512bf16", BF16_VARIANT,
                                  "libember_ragged_avx512bf16.so", no[i]) == 0,
                  "ember-ragged-avx512bf16 took a call at level '%s'", no[i]);
    CHECK(direct_supports("ember-ragged-avx512bf16", BF16_VARIANT,
                          "libember_ragged_avx512bf16.so", "avx512bf16") == 1);
    CHECK(em_ctx_status(c) == EM_OK);
    em_ctx_free(c);
}

/* Where the kernels do not run AVX-512 BF16 (an AVX2 CPU, or EMBER_CPU_LEVEL=avx2 on a BF16 one)
 * the package's only variant is rejected with the reason, and loading it fails: its kernel takes
 * no call. */
static void test_ragged_avx512bf16_rejected(void) {
    if (!setup()) return;
#if defined(__x86_64__)
    if (em_cpu_isa_get() == EM_ISA_AVX512 && em_cpu_bf16_dot()) {
        em_test_skip("the kernels run AVX-512 BF16 here: ember-ragged-avx512bf16 is accepted "
                     "(ctest kernel_hub_avx2 checks the rejection)");
        return;
    }
    char spec[512];
    snprintf(spec, sizeof spec, "%s/ember-ragged-avx512bf16", pkgs());
    em_ctx *c = em_ctx_create();
    em_status st;
    char *text = explain(c, spec, NULL, &st);
    HAS(text, "Rejected " BF16_VARIANT);
    HAS(text, "needs AVX-512 BF16");
    free(text);
    em_ctx_clear_error(c);
    CHECK(em_kernels_load(c, spec, NULL) == EM_ERR_UNSUPPORTED);
    em_ctx_clear_error(c);
    em_scope_push(c);
    ragged_call r = ragged_inputs(c, 7, 64, 320, 3, 9);
    for (size_t m = 0; m < sizeof MODES / sizeof *MODES; m++) /* the built-in, or ragged_avx2's */
        CHECK(strcmp(ragged_pick(c, &r, MODES[m]), "ragged_packed_avx512bf16"));
    em_scope_pop(c);
    em_ctx_free(c);
#else
    em_test_skip("ember-ragged-avx512bf16 is an x86-64 package");
#endif
}

static void test_cleanup(void) {
    if (!setup()) return;
    CHECK(sh("rm -rf '%s'", tmp) == 0);
}

EM_TEST_MAIN(T(test_resolution_table), T(test_preference), T(test_tampered),
             T(test_abi_and_symbols), T(test_lock), T(test_load_and_fallback),
             T(test_compiled_calls_package), T(test_ragged_package),
             T(test_ragged_avx2_declines_avx512), T(test_ragged_avx2_accepts_avx2),
             T(test_ragged_avx512bf16_package), T(test_ragged_avx512bf16_rejected),
             T(test_cleanup))

/* A tiny test harness: CHECK macros that count failures and a main that runs test functions. */
#ifndef EMBER_TEST_HARNESS_H
#define EMBER_TEST_HARNESS_H

#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ember/core.h"

extern int em_test_failures;
extern int em_test_checks;
extern int em_test_skips;

/* Exit code of a test binary all of whose tests were skipped: ctest reports it as skipped
 * (SKIP_RETURN_CODE in tests/CMakeLists.txt). */
#define EM_TEST_SKIPPED 77

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        em_test_checks++;                                                                          \
        if (!(cond)) {                                                                             \
            em_test_failures++;                                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        em_test_checks++;                                                                          \
        if (!(cond)) {                                                                             \
            em_test_failures++;                                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

/* Checks that the context holds an error of `status` whose message contains every string. */
#define CHECK_ERR(c, status, ...) em_test_check_err((c), (status), __FILE__, __LINE__,             \
                                                    (const char *[]){__VA_ARGS__, NULL})
void em_test_check_err(void *ctx, int status, const char *file, int line, const char **needles);

/* Marks the running test as skipped, loudly, with the reason (printf format): a skipped test may
 * make no checks; a test that is not skipped and makes no checks fails. */
void em_test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The device "xla:0" (XLA's CPU plugin), or NULL after marking the test skipped with the reason
 * and how to install the plugin (c's error is cleared). */
em_device *em_test_xla_or_skip(em_ctx *c);

typedef struct em_test_case {
    const char *name;
    void (*fn)(void);
} em_test_case;

/*
 * The CPU kernels in use, "<level>[+bf16]" (e.g. "avx2", "generic", "neon+bf16": the kernel level
 * and whether it has a native bf16 dot). When EMBER_TEST_EXPECT_KERNELS is set and differs,
 * prints why and returns false: the emulated-CPU suites use it to prove they ran at the level
 * they claim (a CPU model qemu does not provide, or a wrong EMBER_CPU_LEVEL, would not).
 */
bool em_test_check_kernels(void);

/* Runs the tests (those whose name contains argv[1] when given) and returns the exit code: 1 on
 * a failure (or a test that neither checked anything nor skipped, or kernels other than
 * EMBER_TEST_EXPECT_KERNELS: em_test_check_kernels runs first), EM_TEST_SKIPPED when every test
 * that ran was skipped, 0 otherwise. */
int em_test_run(const em_test_case *tests, int n, int argc, char **argv);

#define EM_TEST_MAIN(...)                                                                          \
    int main(int argc, char **argv) {                                                              \
        static const em_test_case tests[] = {__VA_ARGS__};                                         \
        return em_test_run(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);              \
    }
#define T(fn) {#fn, fn}

/* The ids of an integer tensor (a fixture's i64 ids, as transformers has them) as host token
 * ids (i32), malloc'd (*n set); NULL with the error in c. */
struct em_ctx;
struct em_tensor;
int32_t *em_test_host_tokens(struct em_ctx *c, struct em_tensor *t, int64_t *n);

/* Greedy decoding (compile mode when `compile`) of the first prompt of a model bundle (the
 * first half of "ids", no eos stop, as scripts/gen_model_fixtures.py runs transformers) against
 * its "greedy" ids. true when equal; else false with what differed, or the error, in why.
 * Safe on any thread (the bundle is only read). */
struct em_model;
struct em_test_bundle;
bool em_test_greedy_matches(struct em_ctx *c, struct em_model *m, struct em_test_bundle *b,
                            bool compile, char *why, size_t why_n);

/* em_test_run inside a process group made with em_dist_init's defaults (the ranks of mpirun,
 * or this process alone): *group is set while the tests run, freed after. Exit code 1 when
 * the group cannot be made. */
struct em_dist;
int em_test_run_in_group(const em_test_case *tests, int n, int argc, char **argv,
                         struct em_dist **group);

/* Directory of the committed fixtures (EMBER_FIXTURES, set by ctest). */
const char *em_test_fixtures_dir(void);

/* The committed checkpoint fixtures/models/<family> loaded with *o (progress off, offline on;
 * NULL: the defaults); NULL after a failed CHECK naming the family and Ember's message. */
struct em_model;
struct em_model_options;
struct em_model *em_test_load_fixture_model(struct em_ctx *c, const char *family,
                                            const struct em_model_options *o);

/* "<fixtures dir>/<sub>/<rel>" in one of 8 rotating static buffers (valid for a few calls). */
const char *em_test_fixture_path(const char *sub, const char *rel);
/* A scratch folder for tests that write files (one at a time): em_test_scratch_make creates
 * /tmp/ember_<tag>_XXXXXX and returns it (NULL after a failed CHECK); paths in it come in one
 * of 4 rotating static buffers; em_test_scratch_write writes a text file (a failed CHECK when it
 * cannot); em_test_scratch_link makes <scratch>/<rel> a symlink to the fixture <sub>/<target>
 * (absolute); em_test_scratch_remove deletes the folder and everything in it. */
const char *em_test_scratch_make(const char *tag);
const char *em_test_scratch_dir(void);
const char *em_test_scratch_path(const char *rel);
void em_test_scratch_write(const char *rel, const char *text);
void em_test_scratch_link(const char *rel, const char *sub, const char *target);
void em_test_scratch_remove(void);
/* A whole file, NUL-terminated, malloc'd (*len may be NULL); NULL after printing why. */
char *em_test_read_file(const char *path, size_t *len);
/* A JSON document (jansson json_t *, cast by the caller), or NULL after printing why. */
void *em_test_load_json(const char *path);

/* Named reference tensors written by scripts/fixtures/common.py's Bundle. */
typedef struct em_test_bundle em_test_bundle;
/* Loads <path>.json + <path>.bin (path relative to the fixtures dir); NULL with a message. */
em_test_bundle *em_test_bundle_load(const char *rel_path);
void em_test_bundle_free(em_test_bundle *b);
/* The tensor `name` created in c's current scope (NULL if absent: a CHECK fails). */
struct em_tensor *em_test_bundle_get(em_test_bundle *b, void *ctx, const char *name);
/* A metadata value (integer or bool) from the bundle's "meta" object; def when absent. */
long long em_test_bundle_meta_int(em_test_bundle *b, const char *key, long long def);
/* a number of the bundle's meta (integer or real), def when absent */
double em_test_bundle_meta_num(em_test_bundle *b, const char *key, double def);
/* Element i of a tensor's first dimension as a double (NaN with the context's error). */
double em_test_at(void *ctx, struct em_tensor *t, long long i);
/* Checks that every element of got is within atol + rtol*|want| (NaN equal to NaN); prints the
 * first mismatch with `what`. Returns true when close. */
bool em_test_allclose(void *ctx, struct em_tensor *got, struct em_tensor *want, double atol,
                      double rtol, const char *what);

#endif

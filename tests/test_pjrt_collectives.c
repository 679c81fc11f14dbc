/*
 * The collectives on PJRT devices in one process (replica mode, issue 18): a device group of
 * XLA's CPU plugin with 2 and 4 devices (em_dist_local; cpu_device_count=4), one thread per
 * rank, against the numpy references the CPU's MPI collectives are tested with
 * (tests/fixtures/dist, scripts/gen_collective_fixtures.py: bf16 sums exact, compared bit for
 * bit), each case eager and compiled (the op inside a traced program compiled for the group).
 * Then the errors: ranks that disagree, a rank that never comes, tensors on the wrong device.
 * Skipped, loudly, without the plugin.
 */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <time.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

/* One rank's thread: its handle, what it found wrong (the harness's counters are not
 * thread-safe, so the main thread turns these into CHECKs). */
typedef struct job {
    em_dist *g;
    int rank, world;
    void (*fn)(struct job *j);
    int fails, ran, compiled;
    char msg[1024];
    em_status st;       /* error tests: the status of the rank's call */
    char err[1536];     /* and its message */
} job;

static void fail(job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(job *j, const char *fmt, ...) {
    if (!j->fails++) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(j->msg, sizeof j->msg, fmt, ap);
        va_end(ap);
    }
}

static void *thread_main(void *p) {
    job *j = p;
    j->fn(j);
    return NULL;
}

/* Runs fn on every rank of g[0..world), one thread each, and waits for all. */
static void run_ranks(em_dist **g, int world, void (*fn)(job *), job *jobs) {
    pthread_t t[8];
    for (int r = 0; r < world; r++) {
        memset(&jobs[r], 0, sizeof jobs[r]);
        jobs[r] = (job){.g = g[r], .rank = r, .world = world, .fn = fn};
        pthread_create(&t[r], NULL, thread_main, &jobs[r]);
    }
    for (int r = 0; r < world; r++) pthread_join(t[r], NULL);
}

static json_t *doc;
static char *bin;

static em_tensor *load(em_ctx *c, json_t *ref, em_dtype dt, json_t *shp) {
    int64_t shape[8];
    int nd = (int)json_array_size(shp);
    for (int i = 0; i < nd; i++) shape[i] = json_integer_value(json_array_get(shp, i));
    return em_from_host(c, dt, nd, shape, bin + json_integer_value(json_object_get(ref, "offset")));
}

static int attr(json_t *cs, const char *k) { return (int)json_integer_value(json_object_get(cs, k)); }

/* got (on the device) against want within atol + rtol * |want| (0, 0: bit for bit in f32). */
static void compare(job *j, em_ctx *c, em_tensor *got, em_tensor *want, double atol, double rtol,
                    const char *name) {
    if (!got) {
        fail(j, "%s: rank %d: %s", name, j->rank, em_ctx_error(c)->message);
        em_ctx_clear_error(c);
        return;
    }
    int64_t n = em_tensor_numel(want);
    char a[96], b[96];
    if (em_tensor_numel(got) != n || em_tensor_ndim(got) != em_tensor_ndim(want) ||
        em_tensor_dtype(got) != em_tensor_dtype(want) || em_tensor_device(got) != em_dist_device(j->g)) {
        fail(j, "%s: rank %d: got %s, want %s", name, j->rank, em_tensor_sig(got, a, sizeof a),
             em_tensor_sig(want, b, sizeof b));
        return;
    }
    float *g = malloc((size_t)(n + 1) * sizeof *g), *w = malloc((size_t)(n + 1) * sizeof *w);
    if (!g || !w || em_to_host_f32(c, got, g, n) || em_to_host_f32(c, want, w, n)) {
        fail(j, "%s: rank %d: reading back failed", name, j->rank);
    } else {
        for (int64_t i = 0; i < n; i++)
            if (!(fabsf(g[i] - w[i]) <= atol + rtol * fabsf(w[i]))) {
                fail(j, "%s: rank %d: element %lld: got %.9g, want %.9g", name, j->rank,
                     (long long)i, g[i], w[i]);
                break;
            }
    }
    free(g);
    free(w);
}

/* One case's op, by name (NULL for an unknown name). */
static em_tensor *run_op(em_ctx *c, json_t *cs, em_tensor *x, em_dist *g) {
    const char *op = json_string_value(json_object_get(cs, "op"));
    const char *r = json_string_value(json_object_get(cs, "reduce"));
    em_reduce_op red = r && !strcmp(r, "max") ? EM_REDUCE_MAX : EM_REDUCE_SUM;
    if (!strcmp(op, "all_reduce")) return em_all_reduce(c, x, red, g);
    if (!strcmp(op, "reduce_scatter")) return em_reduce_scatter(c, x, red, attr(cs, "dim"), g);
    if (!strcmp(op, "all_gather")) return em_all_gather(c, x, attr(cs, "dim"), g);
    if (!strcmp(op, "all_to_all"))
        return em_all_to_all(c, x, attr(cs, "split_dim"), attr(cs, "concat_dim"), g);
    if (!strcmp(op, "ring_shift")) return em_ring_shift(c, x, attr(cs, "offset"), g);
    return NULL;
}

/* Compile mode: the case's op inside a traced function, so it reaches the device as part of
 * one StableHLO program compiled for the group (the collective's lowering inside a module,
 * not the eager one-op program). A 2x is applied on either side so the collective is not the
 * whole program; doubling is exact, and so is halving what came back. */
typedef struct compiled_case {
    json_t *cs;
    em_dist *g;
} compiled_case;

static int compiled_fn(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *statics,
                       int n_statics, em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)statics, (void)n_statics, (void)max_out;
    compiled_case *k = user;
    em_tensor *y = run_op(c, k->cs, em_mul_scalar(c, in[0], 2.0), k->g);
    out[0] = y ? em_mul_scalar(c, y, 0.5) : NULL;
    return out[0] ? 1 : -1;
}

/* Every case of this world size, in the fixtures' order (the same on every rank). */
static void rank_fixtures(job *j) {
    em_ctx *c = em_ctx_create();
    em_device *dev = em_dist_device(j->g);
    json_t *cases = json_object_get(doc, "cases");
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *cs = json_array_get(cases, i);
        if (attr(cs, "world") != j->world) continue;
        const char *name = json_string_value(json_object_get(cs, "name"));
        const char *op = json_string_value(json_object_get(cs, "op"));
        em_dtype dt = !strcmp(json_string_value(json_object_get(cs, "dtype")), "bf16") ? EM_BF16
                                                                                      : EM_F32;
        em_scope_push(c);
        em_tensor *x = em_to(c, load(c, json_array_get(json_object_get(cs, "inputs"), j->rank),
                                     dt, json_object_get(cs, "shape")), dev);
        em_tensor *want = load(c, json_array_get(json_object_get(cs, "outputs"), j->rank), dt,
                               json_object_get(cs, "out_shape"));
        double atol = json_real_value(json_object_get(cs, "atol"));
        double rtol = json_real_value(json_object_get(cs, "rtol"));
        if (!strcmp(op, "all_reduce")) {
            /* the same values through a strided view on the device (copied whole first) */
            em_tensor *xt = em_transpose(c, em_contiguous(c, em_transpose(c, x, 0, -1)), 0, -1);
            compare(j, c, run_op(c, cs, xt, j->g), want, atol, rtol, name);
        }
        compare(j, c, run_op(c, cs, x, j->g), want, atol, rtol, name);
        compiled_case k = {cs, j->g};
        em_compiled *f = em_compile(c, name, compiled_fn, &k);
        em_tensor *got = NULL;
        if (f && em_compiled_call(c, f, &x, 1, NULL, 0, &got, 1) != 1) got = NULL;
        char cname[160];
        snprintf(cname, sizeof cname, "%s (compiled)", name);
        compare(j, c, got, want, atol, rtol, cname);
        if (f) {
            em_compile_stats st;
            em_compiled_stats(f, &st);
            if (strcmp(st.backend, "pjrt"))
                fail(j, "%s: rank %d: compiled on %s, not as a PJRT program", cname, j->rank,
                     st.backend);
            j->compiled++;
        }
        em_compiled_free(f);
        em_scope_pop(c);
        j->ran++;
    }
    em_ctx_free(c);
}

/* The group over xla:0..world-1, or NULL after a loud skip / a failed check. */
static bool make_group(em_ctx *c, int world, double timeout_s, em_dist **g) {
    if (!em_test_xla_or_skip(c)) return false;
    em_dist_params p = em_dist_default_params();
    if (timeout_s > 0) p.timeout_s = timeout_s;
    em_status s = em_dist_local(c, "xla", world, &p, g);
    CHECK_MSG(s == EM_OK, "%s", s ? em_ctx_error(c)->message : "");
    return s == EM_OK;
}

static void test_fixtures(void) {
    em_ctx *c = em_ctx_create();
    if (!em_test_xla_or_skip(c)) {
        em_ctx_free(c);
        return;
    }
    doc = em_test_load_json(em_test_fixture_path("dist", "collectives.json"));
    bin = em_test_read_file(em_test_fixture_path("dist", "collectives.bin"), NULL);
    CHECK(doc && bin);
    for (int world = 2; doc && bin && world <= 4; world += 2) {
        em_dist *g[4];
        if (!make_group(c, world, 0, g)) break;
        CHECK(em_dist_world_size(g[1]) == world && em_dist_rank(g[1]) == 1);
        job jobs[4];
        run_ranks(g, world, rank_fixtures, jobs);
        for (int r = 0; r < world; r++) {
            CHECK_MSG(jobs[r].fails == 0, "%d failures; first: %s", jobs[r].fails, jobs[r].msg);
            CHECK_MSG(jobs[r].ran >= 20, "rank %d ran %d cases", r, jobs[r].ran);
            CHECK_MSG(jobs[r].compiled == jobs[r].ran, "rank %d compiled %d of %d cases", r,
                      jobs[r].compiled, jobs[r].ran);
        }
        printf("pjrt collectives: %d cases on %d devices of one process, eager and compiled\n",
               jobs[0].ran, world);
        for (int r = 0; r < world; r++) em_dist_free(g[r]);
    }
    em_ctx_free(c);
    json_decref(doc);
    free(bin);
    doc = NULL, bin = NULL;
}

/* Rank 1 passes another shape than rank 0; then both agree again (the group survives). */
static void rank_disagree(job *j) {
    em_ctx *c = em_ctx_create();
    float v[6] = {1, 2, 3, 4, 5, 6};
    int64_t s0[2] = {3, 2}, s1[2] = {2, 3};
    em_tensor *x = em_from_host_on(c, em_dist_device(j->g), EM_F32, 2, j->rank ? s1 : s0, v);
    if (em_all_reduce(c, x, EM_REDUCE_SUM, j->g)) fail(j, "rank %d: no error", j->rank);
    j->st = em_ctx_status(c);
    snprintf(j->err, sizeof j->err, "%s", j->st ? em_ctx_error(c)->message : "");
    em_ctx_clear_error(c);
    em_tensor *y = em_from_host_on(c, em_dist_device(j->g), EM_F32, 2, s0, v);
    em_tensor *s = em_all_reduce(c, y, EM_REDUCE_MAX, j->g);
    float o[6] = {0};
    if (!s || em_to_host_f32(c, s, o, 6) || o[5] != 6)
        fail(j, "rank %d after the mismatch: %s", j->rank, em_ctx_error(c)->message);
    if (em_dist_barrier(c, j->g)) fail(j, "barrier: %s", em_ctx_error(c)->message);
    em_ctx_free(c);
}

/* Only rank 0 calls: it fails at the timeout naming rank 1; rank 1's later call finds the
 * group broken. */
static void rank_absent(job *j) {
    em_ctx *c = em_ctx_create();
    float v[2] = {1, 2};
    em_tensor *x = em_from_host_on(c, em_dist_device(j->g), EM_F32, 1, (int64_t[]){2}, v);
    if (j->rank == 0) {
        if (em_all_reduce(c, x, EM_REDUCE_SUM, j->g)) fail(j, "rank 0: no error");
    } else {
        struct timespec ts = {0, 600 * 1000 * 1000};
        nanosleep(&ts, NULL); /* after rank 0 has given up */
        if (em_all_gather(c, x, 0, j->g)) fail(j, "rank 1: no error");
    }
    j->st = em_ctx_status(c);
    snprintf(j->err, sizeof j->err, "%s", j->st ? em_ctx_error(c)->message : "");
    em_ctx_free(c);
}

static void test_errors(void) {
    em_ctx *c = em_ctx_create();
    em_dist *g[2];
    if (!make_group(c, 2, 0, g)) {
        em_ctx_free(c);
        return;
    }
    CHECK(em_dist_device(g[0]) == em_device_get(c, "xla:0"));
    CHECK(em_dist_device(g[1]) == em_device_get(c, "xla:1"));
    job jobs[2];
    run_ranks(g, 2, rank_disagree, jobs);
    for (int r = 0; r < 2; r++) {
        CHECK_MSG(jobs[r].fails == 0, "%s", jobs[r].msg);
        CHECK_MSG(jobs[r].st == EM_ERR_SHAPE && strstr(jobs[r].err, "same shape") &&
                  strstr(jobs[r].err, "f32[2,3]") && strstr(jobs[r].err, "f32[3,2]"),
                  "%s", jobs[r].err);
    }
    /* refused before any meeting: a CPU tensor, a tensor on another rank's device */
    float v[4] = {1, 2, 3, 4};
    em_tensor *xc = em_from_host(c, EM_F32, 1, (int64_t[]){4}, v);
    CHECK(!em_all_reduce(c, xc, EM_REDUCE_SUM, g[0]));
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "all_reduce", "device group", "not the CPU");
    em_ctx_clear_error(c);
    em_tensor *x1 = em_from_host_on(c, em_dist_device(g[1]), EM_F32, 1, (int64_t[]){4}, v);
    CHECK(!em_all_gather(c, x1, 0, g[0]));
    CHECK_ERR(c, EM_ERR_DEVICE, "all_gather", "rank 0", "xla:0", "xla:1");
    em_ctx_clear_error(c);
    /* the split is checked by the op's rule, as for every group */
    CHECK(!em_reduce_scatter(c, em_from_host_on(c, em_dist_device(g[0]), EM_F32, 1,
                                                (int64_t[]){3}, v), EM_REDUCE_SUM, 0, g[0]));
    CHECK_ERR(c, EM_ERR_SHAPE, "reduce_scatter", "size 3", "group size 2");
    em_ctx_clear_error(c);
    CHECK(em_dist_put(c, g[0], "k", "v", 1) == EM_ERR_UNSUPPORTED);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "dist_put", "no key-value store");
    em_ctx_clear_error(c);
    for (int r = 0; r < 2; r++) em_dist_free(g[r]);

    /* a rank that never comes */
    if (make_group(c, 2, 0.3, g)) {
        run_ranks(g, 2, rank_absent, jobs);
        CHECK_MSG(jobs[0].st == EM_ERR_DEVICE && strstr(jobs[0].err, "rank(s) 1 of 2") &&
                  strstr(jobs[0].err, "0.3 s"), "%s", jobs[0].err);
        CHECK_MSG(jobs[1].st == EM_ERR_DEVICE && strstr(jobs[1].err, "broken"), "%s",
                  jobs[1].err);
        for (int r = 0; r < 2; r++) em_dist_free(g[r]);
    }
    /* groups that cannot be made */
    CHECK(em_dist_local(c, "xla", 0, NULL, g) == EM_ERR_INVALID_ARG);
    em_ctx_clear_error(c);
    em_dist *many[16];
    CHECK(em_dist_local(c, "xla", 16, NULL, many) == EM_ERR_DEVICE);
    CHECK_ERR(c, EM_ERR_DEVICE, "xla:");
    CHECK(many[0] == NULL);
    em_ctx_clear_error(c);
    em_ctx_free(c);
}

int main(int argc, char **argv) {
    /* four devices of XLA's CPU plugin (unless the caller asked for something else) */
    setenv("EMBER_PJRT_OPTIONS", "cpu_device_count=4", 0);
    static const em_test_case tests[] = {T(test_fixtures), T(test_errors)};
    return em_test_run(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
}

/*
 * The collective ops against numpy's references (tests/fixtures/dist, made by
 * scripts/gen_collective_fixtures.py), and the process group's store under MPI. Run by ctest
 * under `mpirun -np 2` and `-np 4` (tests/CMakeLists.txt); run alone it is a world of one and
 * checks what one process can: groups of one, and the errors.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"
#include "core/group.h"
#include "ember/ember.h"
#include "harness.h"

static em_dist *G; /* the group of this run, made in main */

static em_dtype dtype_of(const char *s) { return !strcmp(s, "bf16") ? EM_BF16 : EM_F32; }

static int shape_of(json_t *a, int64_t *shape) {
    int n = (int)json_array_size(a);
    for (int i = 0; i < n; i++) shape[i] = json_integer_value(json_array_get(a, i));
    return n;
}

static em_tensor *load(em_ctx *c, const char *bin, json_t *ref, em_dtype dt, json_t *shp) {
    int64_t shape[8];
    int nd = shape_of(shp, shape);
    return em_from_host(c, dt, nd, shape, bin + json_integer_value(json_object_get(ref, "offset")));
}

static int attr(json_t *cs, const char *k) {
    return (int)json_integer_value(json_object_get(cs, k));
}

static em_reduce_op reduce_of(json_t *cs) {
    const char *r = json_string_value(json_object_get(cs, "reduce"));
    return r && !strcmp(r, "max") ? EM_REDUCE_MAX : EM_REDUCE_SUM;
}

static void test_fixtures(void) {
    int world = em_dist_world_size(G), rank = em_dist_rank(G);
    if (world != 2 && world != 4) {
        em_test_skip("the fixtures are for 2 and 4 ranks; this run has %d (run under mpirun)",
                     world);
        return;
    }
    json_t *doc = em_test_load_json(em_test_fixture_path("dist", "collectives.json"));
    char *bin = em_test_read_file(em_test_fixture_path("dist", "collectives.bin"), NULL);
    CHECK(doc && bin);
    if (!doc || !bin) {
        json_decref(doc);
        free(bin);
        return;
    }
    em_ctx *c = em_ctx_create();
    json_t *cases = json_object_get(doc, "cases");
    int ran = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *cs = json_array_get(cases, i);
        if (attr(cs, "world") != world) continue;
        const char *name = json_string_value(json_object_get(cs, "name"));
        const char *op = json_string_value(json_object_get(cs, "op"));
        em_dtype dt = dtype_of(json_string_value(json_object_get(cs, "dtype")));
        em_scope_push(c);
        em_tensor *x = load(c, bin, json_array_get(json_object_get(cs, "inputs"), rank), dt,
                            json_object_get(cs, "shape"));
        em_tensor *want = load(c, bin, json_array_get(json_object_get(cs, "outputs"), rank), dt,
                               json_object_get(cs, "out_shape"));
        em_tensor *got = NULL, *got_t = NULL;
        if (!strcmp(op, "all_reduce")) {
            got = em_all_reduce(c, x, reduce_of(cs), G);
            /* the same values through a strided (transposed) view */
            em_tensor *xt = em_transpose(c, em_contiguous(c, em_transpose(c, x, 0, -1)), 0, -1);
            got_t = em_all_reduce(c, xt, reduce_of(cs), G);
        } else if (!strcmp(op, "reduce_scatter")) {
            got = em_reduce_scatter(c, x, reduce_of(cs), attr(cs, "dim"), G);
        } else if (!strcmp(op, "all_gather")) {
            got = em_all_gather(c, x, attr(cs, "dim"), G);
        } else if (!strcmp(op, "all_to_all")) {
            got = em_all_to_all(c, x, attr(cs, "split_dim"), attr(cs, "concat_dim"), G);
        } else if (!strcmp(op, "ring_shift")) {
            got = em_ring_shift(c, x, attr(cs, "offset"), G);
        }
        CHECK_MSG(got && em_ctx_status(c) == EM_OK, "%s: %s", name,
                  em_ctx_status(c) ? em_ctx_error(c)->message : "unknown op");
        double atol = json_real_value(json_object_get(cs, "atol"));
        double rtol = json_real_value(json_object_get(cs, "rtol"));
        if (got) CHECK(em_test_allclose(c, got, want, atol, rtol, name));
        if (got_t) CHECK(em_test_allclose(c, got_t, want, atol, rtol, name));
        em_ctx_clear_error(c);
        em_scope_pop(c);
        ran++;
    }
    CHECK_MSG(ran >= 20, "only %d cases for %d ranks", ran, world);
    if (rank == 0) printf("collectives: %d cases on %d ranks\n", ran, world);
    em_ctx_free(c);
    json_decref(doc);
    free(bin);
}

/* Errors any world can see: dtype, a group that is not one, a split that does not divide. */
static void test_errors(void) {
    em_ctx *c = em_ctx_create();
    int world = em_dist_world_size(G);
    int32_t iv[3] = {1, 2, 3};
    float fv[6] = {0};
    em_tensor *xi = em_from_host(c, EM_I32, 1, (int64_t[]){3}, iv);
    CHECK(!em_all_reduce(c, xi, EM_REDUCE_SUM, G));
    CHECK_ERR(c, EM_ERR_DTYPE, "all_reduce", "f32 or bf16", "i32");
    em_ctx_clear_error(c);
    em_tensor *x = em_from_host(c, EM_F32, 2, ((int64_t[]){3, 2}), fv);
    CHECK(!em_all_gather(c, x, 0, NULL));
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "all_gather", "not a live process group");
    em_ctx_clear_error(c);
    CHECK(!em_all_gather(c, x, 2, G));
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "dim 2 is out of range");
    em_ctx_clear_error(c);
    if (world > 1 && 3 % world) {
        CHECK(!em_reduce_scatter(c, x, EM_REDUCE_SUM, 0, G));
        CHECK_ERR(c, EM_ERR_SHAPE, "reduce_scatter", "size 3", "group size");
        em_ctx_clear_error(c);
    }
    if (world == 1) { /* a group of one: every collective is the identity */
        float v[6] = {1, -2, 3.5f, 4, 5, 6};
        em_tensor *y = em_from_host(c, EM_F32, 2, ((int64_t[]){3, 2}), v);
        em_tensor *r = em_all_to_all(c, em_all_gather(c, em_all_reduce(c, y, EM_REDUCE_SUM, G),
                                                      1, G), 0, 1, G);
        CHECK(r && em_test_allclose(c, r, y, 0, 0, "world of one"));
        CHECK(em_test_allclose(c, em_ring_shift(c, y, 3, G), y, 0, 0, "ring shift alone"));
    }
    /* the ring shift is counted in its own slot */
    em_dist_stats st;
    em_dist_stats_reset(G);
    em_tensor *s = em_ring_shift(c, x, 1, G);
    em_dist_stats_get(G, &st);
    CHECK(s && st.calls == 1 && st.calls_by_op[4] == 1 && st.bytes_by_op[4] == 24);
    CHECK(!em_ring_shift(c, xi, 1, G));
    CHECK_ERR(c, EM_ERR_DTYPE, "ring_shift", "f32 or bf16");
    em_ctx_clear_error(c);
    CHECK(em_ctx_status(c) == EM_OK);
    em_ctx_free(c);
}

/* The store under the bootstrap of this run: every rank's key seen by every rank, a missing
 * key failing by its timeout and naming the key. */
static void test_store(void) {
    em_ctx *c = em_ctx_create();
    int world = em_dist_world_size(G), rank = em_dist_rank(G);
    char key[64], val[64];
    snprintf(key, sizeof key, "rank/%d", rank);
    snprintf(val, sizeof val, "hello from %d of %d", rank, world);
    CHECK(em_dist_put(c, G, key, val, strlen(val)) == EM_OK);
    for (int r = 0; r < world; r++) {
        void *got = NULL;
        size_t n = 0;
        snprintf(key, sizeof key, "rank/%d", r);
        snprintf(val, sizeof val, "hello from %d of %d", r, world);
        CHECK(em_dist_get(c, G, key, 30, &got, &n) == EM_OK);
        CHECK_MSG(got && n == strlen(val) && !strcmp(got, val), "%s: got '%s'", key,
                  got ? (char *)got : "(null)");
        free(got);
    }
    void *got = NULL;
    size_t n;
    CHECK(em_dist_get(c, G, "no/such/key", 0.2, &got, &n) == EM_ERR_NOT_FOUND);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "key 'no/such/key' not found", "0.2 s");
    CHECK(!got);
    em_ctx_clear_error(c);
    CHECK(em_dist_barrier(c, G) == EM_OK);
    em_ctx_free(c);
}

/* What a plugin's callback_error was given (the test's stand-in for the plugin). */
static int cb_code;
static char cb_msg[512];
static PJRT_Error *record_error(int code, const char *msg, size_t n) {
    cb_code = code;
    snprintf(cb_msg, sizeof cb_msg, "%.*s", (int)n, msg);
    return (PJRT_Error *)cb_msg; /* any non-NULL error */
}

/* The store as a PJRT plugin sees it: the kv_put / kv_get callbacks PJRT_Client_Create gets in
 * a group of several processes (no plugin spans processes here, so the callbacks are called as
 * a plugin would). */
static void test_pjrt_kv(void) {
    em_ctx *c = em_ctx_create();
    em_group_kv kv;
    CHECK(em_group_kv_current(&kv));
    CHECK(kv.node_id == em_dist_rank(G) && kv.num_nodes == em_dist_world_size(G));
    PJRT_CallbackError cb = record_error;
    char key[32], val[32];
    snprintf(key, sizeof key, "pjrt/%d", kv.node_id);
    snprintf(val, sizeof val, "node %d", kv.node_id);
    PJRT_KeyValuePutCallback_Args pa = {sizeof pa, NULL, key, strlen(key), val, strlen(val), &cb,
                                        &kv};
    CHECK(pj_kv_put(&pa) == NULL);
    for (int r = 0; r < kv.num_nodes; r++) {
        snprintf(key, sizeof key, "pjrt/%d", r);
        snprintf(val, sizeof val, "node %d", r);
        PJRT_KeyValueGetCallback_Args ga = {sizeof ga, NULL, key, strlen(key), 30000, &cb, &kv,
                                            NULL, 0, NULL};
        CHECK(pj_kv_get(&ga) == NULL);
        CHECK(ga.value && ga.value_size == strlen(val) && !memcmp(ga.value, val, ga.value_size));
        if (ga.value_deleter_callback) ga.value_deleter_callback(ga.value);
    }
    PJRT_KeyValueGetCallback_Args miss = {sizeof miss, NULL, "pjrt/none", 9, 200, &cb, &kv, NULL,
                                          0, NULL};
    CHECK(pj_kv_get(&miss) != NULL);
    CHECK_MSG(cb_code == 5 && strstr(cb_msg, "key 'pjrt/none' not found"), "code %d: %s",
              cb_code, cb_msg);
    CHECK(em_dist_barrier(c, G) == EM_OK);
    em_ctx_free(c);
}

/* XLA's CPU plugin opened by every rank of the group: its client is created with the store's
 * callbacks and node_id/num_nodes (this plugin accepts them and does not use them: it cannot
 * span processes) and still runs. */
static void test_pjrt_client_in_group(void) {
    if (!getenv("EMBER_PJRT_XLA_PLUGIN")) {
        em_test_skip("EMBER_PJRT_XLA_PLUGIN is not set (scripts/test.sh sets it)");
        return;
    }
    em_ctx *c = em_ctx_create();
    em_device *d = em_device_get(c, "xla:0");
    CHECK_MSG(d != NULL, "%s", em_ctx_status(c) ? em_ctx_error(c)->message : "");
    if (d) {
        float v[2] = {1, -2.5f}, o[2] = {0};
        em_tensor *x = em_from_host_on(c, d, EM_F32, 1, (int64_t[]){2}, v);
        CHECK(em_to_host_f32(c, em_add(c, x, x), o, 2) == EM_OK && o[0] == 2 && o[1] == -5);
    }
    em_ctx_free(c);
}

int main(int argc, char **argv) {
    static const em_test_case tests[] = {T(test_fixtures), T(test_errors), T(test_store),
                                         T(test_pjrt_kv), T(test_pjrt_client_in_group)};
    return em_test_run_in_group(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv, &G);
}

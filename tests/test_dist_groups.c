/*
 * Sub-groups of a process group (em_dist_split, em_dist_mesh2d). Run by ctest under
 * `mpirun -np 4` (tests/CMakeLists.txt: dist_groups_mpi4): the 2 x 2 mesh's rows and columns
 * and an uneven 3 + 1 split ranked by reversed keys, each collective's result against values
 * worked out by hand from the rank numbers (rank r's input is 10 (r + 1) + i at flat index i),
 * the refusals, and sub-groups freed after the group they came from. Run alone it is a world of
 * one (its split, the errors) plus the refusal of a 2-rank group bootstrapped without MPI (two
 * forked processes on the TCP store).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ember/ember.h"
#include "harness.h"

static em_dist *G;     /* the group of this run, made in main */
static em_dist *LATE;  /* a sub-group main frees after G */

/* Rank r's input: [2, 3], 10 (r + 1) + i at flat index i. */
static em_tensor *input(em_ctx *c, int r) {
    float v[6];
    for (int i = 0; i < 6; i++) v[i] = (float)(10 * (r + 1) + i);
    return em_from_host(c, EM_F32, 2, (int64_t[]){2, 3}, v);
}

/* got (n floats, shape shp of nd dims) equals want exactly (sums of small integers in f32). */
static void same(em_ctx *c, em_tensor *got, const float *want, int nd, const int64_t *shp,
                 const char *what) {
    int rank = em_dist_rank(G);
    CHECK_MSG(got, "rank %d: %s: %s", rank, what, em_ctx_error(c)->message);
    if (!got) {
        em_ctx_clear_error(c);
        return;
    }
    bool shape_ok = em_tensor_ndim(got) == nd;
    for (int d = 0; d < nd && shape_ok; d++) shape_ok = em_tensor_shape(got)[d] == shp[d];
    CHECK_MSG(shape_ok, "rank %d: %s: shape", rank, what);
    int64_t n = em_tensor_numel(got);
    float h[32];
    if (!shape_ok || n > 32 || em_to_host_f32(c, got, h, n)) return;
    for (int64_t i = 0; i < n; i++)
        CHECK_MSG(h[i] == want[i], "rank %d: %s: [%lld] %g, want %g", rank, what, (long long)i,
                  h[i], want[i]);
}

static void test_mesh_mpi4(void) {
    if (em_dist_world_size(G) != 4) {
        em_test_skip("needs 4 ranks (mpirun -np 4); this run has %d", em_dist_world_size(G));
        return;
    }
    em_ctx *c = em_ctx_create();
    int r = em_dist_rank(G), row = r / 2, col = r % 2;
    em_dist *outer = NULL, *inner = NULL;
    CHECK(em_dist_mesh2d(c, G, 2, 2, &outer, &inner) == EM_OK);
    CHECK(em_dist_world_size(inner) == 2 && em_dist_rank(inner) == col);
    CHECK(em_dist_world_size(outer) == 2 && em_dist_rank(outer) == row);
    CHECK(em_dist_has_mpi(inner) && em_dist_device(inner) == NULL);
    em_scope_push(c);
    em_tensor *x = input(c, r);
    float want[24];
    /* all_reduce over the row {2 row, 2 row + 1}: 10 (a + 1) + 10 (a + 2) + 2 i */
    for (int i = 0; i < 6; i++) want[i] = (float)(10 * (2 * row + 1) + 10 * (2 * row + 2) + 2 * i);
    same(c, em_all_reduce(c, x, EM_REDUCE_SUM, inner), want, 2, (int64_t[]){2, 3},
         "all_reduce(row)");
    /* max over the column {col, col + 2}: rank col + 2's values */
    for (int i = 0; i < 6; i++) want[i] = (float)(10 * (col + 3) + i);
    same(c, em_all_reduce(c, x, EM_REDUCE_MAX, outer), want, 2, (int64_t[]){2, 3},
         "all_reduce max(column)");
    /* all_gather over the column along dim 0: rank col's rows, then rank col + 2's */
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 6; i++) want[6 * k + i] = (float)(10 * (col + 2 * k + 1) + i);
    same(c, em_all_gather(c, x, 0, outer), want, 2, (int64_t[]){4, 3}, "all_gather(column)");
    /* all_to_all over the row, split dim 0, concat dim 1: row `col` of each member, in order */
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 3; i++) want[3 * k + i] = (float)(10 * (2 * row + k + 1) + 3 * col + i);
    same(c, em_all_to_all(c, x, 0, 1, inner), want, 2, (int64_t[]){1, 6}, "all_to_all(row)");
    /* reduce_scatter over the column along dim 0: row `row` of the column's sum */
    for (int i = 0; i < 3; i++)
        want[i] = (float)(10 * (col + 1) + 10 * (col + 3) + 2 * (3 * row + i));
    same(c, em_reduce_scatter(c, x, EM_REDUCE_SUM, 0, outer), want, 2, (int64_t[]){1, 3},
         "reduce_scatter(column)");
    /* ring_shift over the row: the other member's x */
    for (int i = 0; i < 6; i++) want[i] = (float)(10 * ((r ^ 1) + 1) + i);
    same(c, em_ring_shift(c, x, 1, inner), want, 2, (int64_t[]){2, 3}, "ring_shift(row)");
    /* each handle counts its own calls; the parent none of them */
    em_dist_stats si, so, sg;
    em_dist_stats_get(inner, &si);
    em_dist_stats_get(outer, &so);
    em_dist_stats_get(G, &sg);
    CHECK_MSG(si.calls == 3 && so.calls == 3 && si.calls_by_op[4] == 1 && so.calls_by_op[2] == 1,
              "stats %lld %lld", (long long)si.calls, (long long)so.calls);
    CHECK(sg.calls == 0);
    CHECK(em_dist_barrier(c, inner) == EM_OK && em_dist_barrier(c, outer) == EM_OK);
    em_scope_pop(c);
    /* a sub-group of a sub-group: the row split again into its members alone */
    em_dist *one = NULL;
    CHECK(em_dist_split(c, inner, em_dist_rank(inner), 0, &one) == EM_OK);
    CHECK(em_dist_world_size(one) == 1 && em_dist_rank(one) == 0);
    em_dist_free(one);
    /* the sub-groups go before G (outer) or after it (inner: freed in main) */
    em_dist_free(outer);
    LATE = inner;
    em_ctx_free(c);
}

static void test_uneven_mpi4(void) {
    if (em_dist_world_size(G) != 4) {
        em_test_skip("needs 4 ranks (mpirun -np 4); this run has %d", em_dist_world_size(G));
        return;
    }
    em_ctx *c = em_ctx_create();
    int r = em_dist_rank(G);
    /* ranks 0, 1, 2 in one group ranked by key -r (so 2, 1, 0), rank 3 alone */
    em_dist *s = NULL;
    CHECK(em_dist_split(c, G, r == 3 ? 7 : 0, -r, &s) == EM_OK);
    int size = r == 3 ? 1 : 3, me = r == 3 ? 0 : 2 - r;
    CHECK_MSG(em_dist_world_size(s) == size && em_dist_rank(s) == me, "rank %d: %d of %d", r,
              em_dist_rank(s), em_dist_world_size(s));
    em_scope_push(c);
    em_tensor *x = input(c, r);
    float want[6];
    /* the ring +1 over sub-ranks: sub-rank m gets m - 1's (parent 2 - m), so parent r gets
     * parent (r + 1) mod 3; rank 3 gets its own */
    int from = r == 3 ? 3 : (r + 1) % 3;
    for (int i = 0; i < 6; i++) want[i] = (float)(10 * (from + 1) + i);
    same(c, em_ring_shift(c, x, 1, s), want, 2, (int64_t[]){2, 3}, "ring_shift(3 + 1)");
    /* the sum over the three: 10 + 20 + 30 + 3 i */
    for (int i = 0; i < 6; i++) want[i] = r == 3 ? (float)(40 + i) : (float)(60 + 3 * i);
    same(c, em_all_reduce(c, x, EM_REDUCE_SUM, s), want, 2, (int64_t[]){2, 3},
         "all_reduce(3 + 1)");
    em_scope_pop(c);
    em_dist_free(s);

    /* rank 1 passes a bad color: every rank fails naming it, and G still works after */
    s = (em_dist *)1;
    CHECK(em_dist_split(c, G, r == 1 ? -1 : 0, 0, &s) == EM_ERR_INVALID_ARG && s == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "rank 1's color is -1");
    em_ctx_clear_error(c);
    em_scope_push(c);
    float want4[6];
    for (int i = 0; i < 6; i++) want4[i] = (float)(100 + 4 * i);
    same(c, em_all_reduce(c, input(c, r), EM_REDUCE_SUM, G), want4, 2, (int64_t[]){2, 3},
         "all_reduce(world) after the refusal");
    em_scope_pop(c);
    /* a mesh that is not the world */
    em_dist *a = (em_dist *)1, *b = (em_dist *)1;
    CHECK(em_dist_mesh2d(c, G, 3, 2, &a, &b) == EM_ERR_INVALID_ARG && !a && !b);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "3 x 2", "4 ranks");
    em_ctx_clear_error(c);
    em_ctx_free(c);
}

/* What a world of one can check, on every run. */
static void test_errors(void) {
    em_ctx *c = em_ctx_create();
    em_dist *s = (em_dist *)1;
    CHECK(em_dist_split(c, NULL, 0, 0, &s) == EM_ERR_INVALID_ARG && s == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "group is NULL");
    em_ctx_clear_error(c);
    CHECK(em_dist_split(c, G, 0, 0, NULL) == EM_ERR_INVALID_ARG);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "out is NULL");
    em_ctx_clear_error(c);
    if (em_dist_world_size(G) == 1) {
        CHECK(em_dist_split(c, G, -2, 0, &s) == EM_ERR_INVALID_ARG && s == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "color is -2");
        em_ctx_clear_error(c);
        /* a group of one splits into a group of one, whose collectives are copies */
        CHECK(em_dist_split(c, G, 5, 3, &s) == EM_OK);
        CHECK(em_dist_world_size(s) == 1 && em_dist_rank(s) == 0);
        em_scope_push(c);
        float want[6] = {10, 11, 12, 13, 14, 15};
        same(c, em_all_reduce(c, input(c, 0), EM_REDUCE_SUM, s), want, 2, (int64_t[]){2, 3},
             "all_reduce(one)");
        em_scope_pop(c);
        CHECK(em_dist_barrier(c, s) == EM_OK);
        em_dist *o, *i;
        CHECK(em_dist_mesh2d(c, G, 1, 1, &o, &i) == EM_OK);
        em_dist_free(o);
        em_dist_free(i);
    } else {
        CHECK(em_dist_split(c, G, 0, 0, &s) == EM_OK);
    }
    /* a sub-group has no store of its own */
    CHECK(em_dist_put(c, s, "k", "v", 1) == EM_ERR_UNSUPPORTED);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "sub-group", "no key-value store");
    em_ctx_clear_error(c);
    em_dist_free(s);
    em_ctx_free(c);
}

/* ---- a group of two bootstrapped on the TCP store (no MPI): refused ---- */

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) ||
        getsockname(fd, (struct sockaddr *)&a, &n)) {
        if (fd >= 0) close(fd);
        return 29500;
    }
    close(fd);
    return ntohs(a.sin_port);
}

/* A child's exit: 42 when it saw the refusal, 1 otherwise (with the reason on stderr). */
static int store_only_child(void) {
    em_ctx *c = em_ctx_create();
    em_dist_params p = em_dist_default_params();
    p.bootstrap = EM_DIST_ENV;
    p.timeout_s = 20;
    em_dist *g = NULL, *s = (em_dist *)1;
    int rc = 1;
    if (em_dist_init(c, &p, &g))
        fprintf(stderr, "init: %s\n", em_ctx_error(c)->message);
    else if (em_dist_split(c, g, 0, 0, &s) == EM_ERR_UNSUPPORTED && !s &&
             strstr(em_ctx_error(c)->message, "without MPI"))
        rc = 42;
    else
        fprintf(stderr, "split: %s\n", em_ctx_status(c) ? em_ctx_error(c)->message : "accepted");
    em_ctx_clear_error(c);
    em_dist_free(g);
    em_ctx_free(c);
    return rc;
}

static void test_store_only_refused(void) {
    if (em_dist_world_size(G) != 1) {
        em_test_skip("forks its own 2-rank group: runs in a world of one");
        return;
    }
    char port[32];
    snprintf(port, sizeof port, "127.0.0.1:%d", free_port());
    pid_t pid[2];
    for (int i = 0; i < 2; i++) {
        fflush(NULL);
        pid[i] = fork();
        if (pid[i] == 0) {
            char rs[8];
            snprintf(rs, sizeof rs, "%d", i);
            setenv("EMBER_RANK", rs, 1);
            setenv("EMBER_WORLD_SIZE", "2", 1);
            setenv("EMBER_COORDINATOR", port, 1);
            alarm(60); /* a hung child dies rather than the test */
            _exit(store_only_child());
        }
    }
    for (int i = 0; i < 2; i++) {
        int st = 0;
        CHECK(pid[i] > 0 && waitpid(pid[i], &st, 0) == pid[i]);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 42, "rank %d: status %d", i, st);
    }
}

int main(int argc, char **argv) {
    static const em_test_case tests[] = {T(test_mesh_mpi4), T(test_uneven_mpi4), T(test_errors),
                                         T(test_store_only_refused)};
    int rc = em_test_run_in_group(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv, &G);
    em_dist_free(LATE); /* after its parent: MPI is finalised here, at the last group */
    return rc;
}

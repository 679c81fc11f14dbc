/*
 * Sub-groups of a device group (em_dist_split, em_dist_mesh2d on em_dist_local): four ranks on
 * XLA's CPU plugin (cpu_device_count=4), one thread each, split into the 2 x 2 mesh's rows and
 * columns and into 3 + 1 by reversed keys; each collective's result against values worked out
 * by hand from the rank numbers (rank r's input is 10 (r + 1) + i at flat index i), the same
 * as the mpirun test (test_dist_groups.c). Then a bad color on one rank fails them all. Then
 * compile mode: one function whose collectives use both groups of the mesh runs as one program
 * over the four devices (each collective's replica_groups its split's partition), against the
 * eager calls and the same hand-made values; a function mixing groups of different parents is
 * refused naming both collectives. Skipped, loudly, without the plugin.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/compile.h"
#include "ember/ember.h"
#include "harness.h"

typedef struct job {
    void (*fn)(struct job *j);
    em_dist *g;
    int rank;
    int fails;
    char msg[2048];
    em_status st;
    char err[1600];
} job;

static void fail(job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(job *j, const char *fmt, ...) {
    if (j->fails++) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->msg, sizeof j->msg, fmt, ap);
    va_end(ap);
}

static em_tensor *input(em_ctx *c, int r, em_device *dev) {
    float v[6];
    for (int i = 0; i < 6; i++) v[i] = (float)(10 * (r + 1) + i);
    return em_to(c, em_from_host(c, EM_F32, 2, (int64_t[]){2, 3}, v), dev);
}

static void same(job *j, em_ctx *c, em_tensor *got, const float *want, int64_t n,
                 const char *what) {
    float h[32];
    if (!got || em_tensor_numel(got) != n || em_to_host_f32(c, got, h, n)) {
        fail(j, "rank %d: %s: %s", j->rank, what, got ? em_ctx_error(c)->message : "failed");
        em_ctx_clear_error(c);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        if (h[i] != want[i]) {
            fail(j, "rank %d: %s: [%lld] %g, want %g", j->rank, what, (long long)i, h[i], want[i]);
            return;
        }
}

static void rank_mesh(job *j) {
    em_ctx *c = em_ctx_create();
    int r = j->rank, row = r / 2, col = r % 2;
    em_dist *outer = NULL, *inner = NULL;
    if (em_dist_mesh2d(c, j->g, 2, 2, &outer, &inner)) {
        fail(j, "rank %d: mesh2d: %s", r, em_ctx_error(c)->message);
        em_ctx_free(c);
        return;
    }
    if (em_dist_rank(inner) != col || em_dist_rank(outer) != row ||
        em_dist_device(inner) != em_dist_device(j->g) ||
        em_dist_device(outer) != em_dist_device(j->g))
        fail(j, "rank %d: ranks %d %d or devices of the sub-groups", r, em_dist_rank(inner),
             em_dist_rank(outer));
    em_scope_push(c);
    em_tensor *x = input(c, r, em_dist_device(j->g));
    float want[12];
    for (int i = 0; i < 6; i++) want[i] = (float)(10 * (2 * row + 1) + 10 * (2 * row + 2) + 2 * i);
    same(j, c, em_all_reduce(c, x, EM_REDUCE_SUM, inner), want, 6, "all_reduce(row)");
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 6; i++) want[6 * k + i] = (float)(10 * (col + 2 * k + 1) + i);
    same(j, c, em_all_gather(c, x, 0, outer), want, 12, "all_gather(column)");
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 3; i++) want[3 * k + i] = (float)(10 * (2 * row + k + 1) + 3 * col + i);
    same(j, c, em_all_to_all(c, x, 0, 1, inner), want, 6, "all_to_all(row)");
    em_scope_pop(c);
    em_dist_free(inner);
    em_dist_free(outer);

    em_dist *s = NULL;
    if (em_dist_split(c, j->g, r == 3 ? 7 : 0, -r, &s)) {
        fail(j, "rank %d: split: %s", r, em_ctx_error(c)->message);
    } else {
        em_scope_push(c);
        int from = r == 3 ? 3 : (r + 1) % 3;
        for (int i = 0; i < 6; i++) want[i] = (float)(10 * (from + 1) + i);
        same(j, c, em_ring_shift(c, input(c, r, em_dist_device(j->g)), 1, s), want, 6,
             "ring_shift(3 + 1)");
        em_scope_pop(c);
    }
    em_dist_free(s);
    em_ctx_free(c);
}

static void rank_bad_color(job *j) {
    em_ctx *c = em_ctx_create();
    em_dist *s = (em_dist *)1;
    j->st = em_dist_split(c, j->g, j->rank == 2 ? -1 : 0, 0, &s);
    snprintf(j->err, sizeof j->err, "%s", j->st ? em_ctx_error(c)->message : "");
    if (s) fail(j, "rank %d: *out not NULL after a failure", j->rank);
    em_ctx_free(c);
}

/* ---- compile mode over the mesh's two groups ---- */

typedef struct mesh_fn {
    em_dist *inner, *outer;
} mesh_fn;

/* all_reduce over the row, all_gather and ring_shift over the column, all_to_all over the row */
static int mesh_body(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *st, int n_st,
                     em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)st, (void)n_st, (void)max_out;
    const mesh_fn *m = user;
    em_tensor *ar = em_all_reduce(c, in[0], EM_REDUCE_SUM, m->inner);
    out[0] = em_all_gather(c, ar, 0, m->outer);
    out[1] = em_ring_shift(c, in[0], 1, m->outer);
    out[2] = em_all_to_all(c, in[0], 0, 1, m->inner);
    return em_ctx_status(c) ? -1 : 3;
}

static void rank_mesh_compiled(job *j) {
    em_ctx *c = em_ctx_create();
    int r = j->rank, row = r / 2, col = r % 2;
    mesh_fn m = {NULL, NULL};
    if (em_dist_mesh2d(c, j->g, 2, 2, &m.outer, &m.inner)) {
        fail(j, "rank %d: mesh2d: %s", r, em_ctx_error(c)->message);
        em_ctx_free(c);
        return;
    }
    float want[3][12];
    for (int k = 0; k < 2; k++) /* the rows' sums (40 k + 30 + 2 i), gathered down the column */
        for (int i = 0; i < 6; i++) want[0][6 * k + i] = (float)(40 * k + 30 + 2 * i);
    for (int i = 0; i < 6; i++) want[1][i] = (float)(10 * (2 * (1 - row) + col + 1) + i);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 3; i++) want[2][3 * k + i] = (float)(10 * (2 * row + k + 1) + 3 * col + i);
    static const char *what[3] = {"all_gather(column) of all_reduce(row)", "ring_shift(column)",
                                  "all_to_all(row)"};
    static const int64_t numel[3] = {12, 6, 6};
    em_scope_push(c);
    em_tensor *x = input(c, r, em_dist_device(j->g)), *eager[3];
    int n = mesh_body(c, &x, 1, NULL, 0, eager, 3, &m);
    for (int o = 0; o < 3; o++) {
        char name[96];
        snprintf(name, sizeof name, "%s (eager)", what[o]);
        same(j, c, n == 3 ? eager[o] : NULL, want[o], numel[o], name);
    }
    em_compiled *f = em_compile(c, "mesh", mesh_body, &m);
    em_tensor *got[3] = {NULL};
    for (int call = 0; call < 2 && f; call++) { /* the second call runs the program again */
        if (em_compiled_call(c, f, &x, 1, NULL, 0, got, 3) != 3) got[0] = got[1] = got[2] = NULL;
        for (int o = 0; o < 3; o++) {
            char name[96];
            snprintf(name, sizeof name, "%s (compiled, call %d)", what[o], call + 1);
            same(j, c, got[o], want[o], numel[o], name);
        }
    }
    if (f) {
        em_compile_stats cs;
        em_compiled_stats(f, &cs);
        if (strcmp(cs.backend, "pjrt") || cs.compiles != 1 || cs.calls != 2)
            fail(j, "rank %d: compiled on %s, %lld compiles, %lld calls (want pjrt, 1, 2)", r,
                 cs.backend, (long long)cs.compiles, (long long)cs.calls);
    } else {
        fail(j, "rank %d: em_compile: %s", r, em_ctx_error(c)->message);
    }
    em_compiled_free(f);
    em_scope_pop(c);
    em_dist_free(m.inner);
    em_dist_free(m.outer);
    em_ctx_free(c);
}

/* A function over the column group and a group split from the row (whose parent is the row,
 * not the column's): refused on every rank, naming both collectives. */
static void rank_mixed_parents(job *j) {
    em_ctx *c = em_ctx_create();
    int r = j->rank;
    em_dist *inner = NULL, *outer = NULL, *sub = NULL;
    if (em_dist_mesh2d(c, j->g, 2, 2, &outer, &inner) || em_dist_split(c, inner, 0, 0, &sub)) {
        fail(j, "rank %d: groups: %s", r, em_ctx_error(c)->message);
    } else {
        mesh_fn m = {sub, outer};
        em_scope_push(c);
        em_tensor *x = input(c, r, em_dist_device(j->g)), *got[3];
        em_compiled *f = em_compile(c, "mixed", mesh_body, &m);
        j->st = f && em_compiled_call(c, f, &x, 1, NULL, 0, got, 3) == 3 ? EM_OK
                                                                         : em_ctx_status(c);
        snprintf(j->err, sizeof j->err, "%s", j->st ? em_ctx_error(c)->message : "");
        em_ctx_clear_error(c);
        em_compiled_free(f);
        em_scope_pop(c);
    }
    em_dist_free(sub);
    em_dist_free(inner);
    em_dist_free(outer);
    em_ctx_free(c);
}

static void *thread_main(void *p) {
    job *j = p;
    j->fn(j);
    return NULL;
}

static void run_ranks(em_dist **g, void (*fn)(job *), job *jobs) {
    pthread_t t[4];
    for (int r = 0; r < 4; r++) {
        jobs[r] = (job){.fn = fn, .g = g[r], .rank = r};
        pthread_create(&t[r], NULL, thread_main, &jobs[r]);
    }
    for (int r = 0; r < 4; r++) pthread_join(t[r], NULL);
}

static void test_device_mesh(void) {
    em_ctx *c = em_ctx_create();
    if (!em_test_xla_or_skip(c)) {
        em_ctx_free(c);
        return;
    }
    em_dist *g[4];
    em_status s = em_dist_local(c, "xla", 4, NULL, g);
    CHECK_MSG(s == EM_OK, "%s", s ? em_ctx_error(c)->message : "");
    if (!s) {
        job jobs[4];
        run_ranks(g, rank_mesh, jobs);
        for (int r = 0; r < 4; r++) CHECK_MSG(!jobs[r].fails, "%s", jobs[r].msg);
        run_ranks(g, rank_bad_color, jobs);
        for (int r = 0; r < 4; r++) {
            CHECK_MSG(!jobs[r].fails, "%s", jobs[r].msg);
            CHECK_MSG(jobs[r].st == EM_ERR_INVALID_ARG &&
                      strstr(jobs[r].err, "rank 2's color is -1"), "rank %d: %s", r,
                      jobs[r].err);
        }
        run_ranks(g, rank_mesh_compiled, jobs);
        for (int r = 0; r < 4; r++) CHECK_MSG(!jobs[r].fails, "%s", jobs[r].msg);
        run_ranks(g, rank_mixed_parents, jobs);
        for (int r = 0; r < 4; r++) {
            CHECK_MSG(!jobs[r].fails, "%s", jobs[r].msg);
            CHECK_MSG(jobs[r].st == EM_ERR_UNSUPPORTED && strstr(jobs[r].err, "all_gather") &&
                      strstr(jobs[r].err, "the all_reduce at") &&
                      strstr(jobs[r].err, "were not split from one device group"),
                      "rank %d: %s", r, jobs[r].err);
        }
        for (int r = 0; r < 4; r++) em_dist_free(g[r]);
    }
    em_ctx_free(c);
}

int main(int argc, char **argv) {
    setenv("EMBER_PJRT_OPTIONS", "cpu_device_count=4", 0);
    static const em_test_case tests[] = {T(test_device_mesh)};
    return em_test_run(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
}

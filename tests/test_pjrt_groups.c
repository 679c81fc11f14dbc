/*
 * Sub-groups of a device group (em_dist_split, em_dist_mesh2d on em_dist_local): four ranks on
 * XLA's CPU plugin (cpu_device_count=4), one thread each, split into the 2 x 2 mesh's rows and
 * columns and into 3 + 1 by reversed keys; each collective's result against values worked out
 * by hand from the rank numbers (rank r's input is 10 (r + 1) + i at flat index i), the same
 * as the mpirun test (test_dist_groups.c). Then a bad color on one rank fails them all. Skipped,
 * loudly, without the plugin.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        for (int r = 0; r < 4; r++) em_dist_free(g[r]);
    }
    em_ctx_free(c);
}

int main(int argc, char **argv) {
    setenv("EMBER_PJRT_OPTIONS", "cpu_device_count=4", 0);
    static const em_test_case tests[] = {T(test_device_mesh)};
    return em_test_run(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
}

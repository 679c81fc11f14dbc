/*
 * Autodiff through the collectives (ops/grad_rules_dist.c) and through context parallelism's
 * attention (the ring of em_sdpa_lse and em_ring_shift, Ulysses' em_all_to_all), with
 * torch.distributed.nn's convention: the loss is the sum over the ranks of each rank's
 * sum(y_r * w_r). Every rank knows every rank's x and w (made from the rank and a seed), so
 * each gradient is checked against its closed form worked out here on the host; the attention's
 * against the one-process em_sdpa gradient (itself checked against torch by test_grad's sdpa
 * cases). Run by ctest under `mpirun -np 2` and `-np 4` (grad_dist_mpi2, _mpi4); alone, a
 * world of one, and then the same checks on a device group of 2 devices of XLA's CPU plugin
 * (em_dist_local, one thread per rank; skipped, loudly, without the plugin).
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>

#include "diffusion/tp_impl.h"
#include "ember/ember.h"
#include "harness.h"

static em_dist *PG; /* the process group of this run, made in main */

/* What a check body sees: its rank's group, and the first failure it found (thread-local: the
 * harness's counters are not thread-safe, so the caller turns these into a CHECK). */
static _Thread_local em_dist *G;
static _Thread_local int t_fails;
static _Thread_local char t_msg[1024];

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
    if (t_fails++) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_msg, sizeof t_msg, fmt, ap);
    va_end(ap);
}
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) fail(__VA_ARGS__);                                                            \
    } while (0)

/* a context whose tensors go to the rank's device (a device group's; the CPU's otherwise) */
static em_ctx *ctx_new(void) {
    em_ctx *c = em_ctx_create();
    if (em_dist_device(G)) em_ctx_set_device(c, em_dist_device(G));
    return c;
}

/* a value in [-1, 1) from (seed, rank, index), the same on every rank */
static float val(unsigned seed, int rank, int64_t i) {
    uint64_t h = (uint64_t)seed * 0x9E3779B97F4A7C15ull ^ (uint64_t)(rank + 1) * 0xC2B2AE3D27D4EB4Full ^
                 (uint64_t)(i + 1) * 0x165667B19E3779F9ull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return (float)((double)(h >> 40) / (double)(1ull << 23)) - 1.0f;
}

/* rank r's x: val(seed, r, i), except every third element, the same on every rank (ties for
 * the maxima) */
static float xval(unsigned seed, int r, int64_t i) { return val(seed, i % 3 ? r : 0, i); }

static em_tensor *host_tensor(em_ctx *c, const float *v, int nd, const int64_t *shape) {
    return em_from_host(c, EM_F32, nd, shape, v);
}

/* rank r's leaf x of the shape, values xval(seed, r, .) */
static em_tensor *leaf(em_ctx *c, unsigned seed, int r, int nd, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = xval(seed, r, i);
    em_tensor *x = host_tensor(c, v, nd, shape);
    free(v);
    em_tensor_requires_grad(c, x, true);
    return x;
}

/* backpropagates sum(y * w_r), w_r[i] = val(seed, r, i) */
static void backprop(em_ctx *c, em_tensor *y, unsigned seed, int r) {
    int64_t n = em_tensor_numel(y);
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = val(seed, r, i);
    int nd = em_tensor_ndim(y);
    int64_t shape[8];
    for (int d = 0; d < nd; d++) shape[d] = em_tensor_dim(y, d);
    em_tensor *w = host_tensor(c, v, nd, shape);
    free(v);
    em_tensor *loss = em_sum(c, em_mul(c, y, w), NULL, 0, false);
    em_grad_enable(c, false);
    EXPECT(em_backward(c, loss) == EM_OK, "backward: %s", em_ctx_error(c)->message);
}

/* x's gradient against want[0..n) within 1e-5 (absolute + relative) */
static void check_grad(em_ctx *c, em_tensor *x, const double *want, int64_t n, const char *what) {
    em_tensor *g = em_tensor_grad(x);
    EXPECT(g != NULL, "%s: no gradient (%s)", what, em_ctx_error(c)->message);
    if (!g) return;
    float *got = malloc((size_t)n * sizeof *got);
    EXPECT(em_to_host_f32(c, g, got, (size_t)n) == EM_OK, "%s: %s", what, em_ctx_error(c)->message);
    double worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]) - 1e-5 * fabs(want[i]);
        if (!(e <= worst)) worst = e, at = i; /* NaN too */
    }
    EXPECT(worst <= 1e-5, "%s (rank %d): element %lld: %.8g, want %.8g", what,
              em_dist_rank(G), (long long)at, got[at], want[at]);
    free(got);
}

enum { SX = 11, SW = 29 }; /* the seeds of x and w */

/* all_reduce(sum): dx_r = sum_s w_s; all_reduce(max): that sum to the ranks holding the
 * maximum, shared equally where they tie */
static void body_all_reduce(void) {
    int N = em_dist_world_size(G), r = em_dist_rank(G);
    for (int op = 0; op < 2; op++) {
        em_ctx *c = ctx_new();
        int64_t shape[2] = {3, 4}, n = 12;
        em_grad_enable(c, true);
        em_tensor *x = leaf(c, SX, r, 2, shape);
        backprop(c, em_all_reduce(c, x, (em_reduce_op)op, G), SW, r);
        double want[12];
        for (int64_t i = 0; i < n; i++) {
            double ws = 0, mx = -INFINITY;
            int cnt = 0;
            for (int s = 0; s < N; s++) {
                ws += val(SW, s, i);
                mx = fmax(mx, xval(SX, s, i));
            }
            for (int s = 0; s < N; s++) cnt += xval(SX, s, i) == mx;
            want[i] = op == EM_REDUCE_SUM ? ws : xval(SX, r, i) == mx ? ws / cnt : 0;
        }
        check_grad(c, x, want, n, op ? "all_reduce(max)" : "all_reduce(sum)");
        em_ctx_free(c);
    }
}

/* all_gather along dim 1 of [2, 3]: dx_r[i, j] = sum_s w_s[i, 3r + j] */
static void body_all_gather(void) {
    int N = em_dist_world_size(G), r = em_dist_rank(G);
    em_ctx *c = ctx_new();
    int64_t shape[2] = {2, 3};
    em_grad_enable(c, true);
    em_tensor *x = leaf(c, SX, r, 2, shape);
    backprop(c, em_all_gather(c, x, 1, G), SW, r);
    double want[6];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            want[i * 3 + j] = 0;
            for (int s = 0; s < N; s++) want[i * 3 + j] += val(SW, s, i * 3 * N + 3 * r + j);
        }
    check_grad(c, x, want, 6, "all_gather");
    em_ctx_free(c);
}

/* reduce_scatter along dim 0 of [2N, 3] (chunk j: rows 2j, 2j+1): sum: dx_r[chunk j] = w_j;
 * max: w_j where x_r holds chunk j's maximum, shared equally where ranks tie */
static void body_reduce_scatter(void) {
    int N = em_dist_world_size(G), r = em_dist_rank(G);
    for (int op = 0; op < 2; op++) {
        em_ctx *c = ctx_new();
        int64_t shape[2] = {2 * N, 3}, n = 6 * N;
        em_grad_enable(c, true);
        em_tensor *x = leaf(c, SX, r, 2, shape);
        backprop(c, em_reduce_scatter(c, x, (em_reduce_op)op, 0, G), SW, r);
        double *want = malloc((size_t)n * sizeof *want);
        for (int64_t e = 0; e < n; e++) {
            int j = (int)(e / 6);
            double wj = val(SW, j, e - 6 * j), mx = -INFINITY;
            int cnt = 0;
            for (int s = 0; s < N; s++) mx = fmax(mx, xval(SX, s, e));
            for (int s = 0; s < N; s++) cnt += xval(SX, s, e) == mx;
            want[e] = op == EM_REDUCE_SUM ? wj : xval(SX, r, e) == mx ? wj / cnt : 0;
        }
        check_grad(c, x, want, n, op ? "reduce_scatter(max)" : "reduce_scatter(sum)");
        free(want);
        em_ctx_free(c);
    }
}

/* all_to_all of [2N, 3], split along 0 and concatenated along 1: y_r[i, 3j + k] =
 * x_j[2r + i, k], so dx_r[2j + i, k] = w_j[i, 3r + k] (w_j is [2, 3N]) */
static void body_all_to_all(void) {
    int N = em_dist_world_size(G), r = em_dist_rank(G);
    em_ctx *c = ctx_new();
    int64_t shape[2] = {2 * N, 3}, n = 6 * N;
    em_grad_enable(c, true);
    em_tensor *x = leaf(c, SX, r, 2, shape);
    backprop(c, em_all_to_all(c, x, 0, 1, G), SW, r);
    double *want = malloc((size_t)n * sizeof *want);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 3; k++)
                want[(2 * j + i) * 3 + k] = val(SW, j, i * 3 * N + 3 * r + k);
    check_grad(c, x, want, n, "all_to_all");
    free(want);
    em_ctx_free(c);
}

/* ring_shift by k: y_r = x_{r-k}, so dx_r = w_{r+k} (indices mod N) */
static void body_ring_shift(void) {
    int N = em_dist_world_size(G), r = em_dist_rank(G);
    int offsets[2] = {1, -3};
    for (int o = 0; o < 2; o++) {
        em_ctx *c = ctx_new();
        int64_t shape[2] = {2, 5};
        em_grad_enable(c, true);
        em_tensor *x = leaf(c, SX, r, 2, shape);
        backprop(c, em_ring_shift(c, x, offsets[o], G), SW, r);
        int to = ((r + offsets[o]) % N + N) % N;
        double want[10];
        for (int i = 0; i < 10; i++) want[i] = val(SW, to, i);
        check_grad(c, x, want, 10, o ? "ring_shift(-3)" : "ring_shift(1)");
        em_ctx_free(c);
    }
}

/* The gradient of rank r's x [2, 3] when rank 0's loss is sum(x * w_0) and the others' sum(y *
 * w_s) of y = all_gather(x, dim 1) */
static void want_unreached(int N, int r, double want[6]) {
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            want[i * 3 + j] = r == 0 ? val(SW, 0, i * 3 + j) : 0;
            for (int s = 1; s < N; s++) want[i * 3 + j] += val(SW, s, i * 3 * N + 3 * r + j);
        }
}

/* em_checkpoint's region for the case below: the all_gather, inside it */
static em_status gather_region(em_ctx *c, void *user, em_tensor *const *in, int n_in,
                               em_tensor **out, int n_out) {
    (void)user, (void)n_in, (void)n_out;
    out[0] = em_all_gather(c, em_mul_scalar(c, in[0], 1.0), 1, G);
    return out[0] ? EM_OK : em_ctx_error(c)->status;
}

/* Rank 0's loss does not reach its all_gather's output (sum(x * w_0) directly), the others'
 * do: rank 0 still joins the backward's reduce_scatter (with zeros), so no rank waits, and
 * dx_r = [r == 0] w_0 + sum_{s > 0} w_s[i, 3r + j] (w_s of [2, 3N] for s > 0, [2, 3] for 0).
 * Checkpointed: the all_gather inside an em_checkpoint region; rank 0 still recomputes the
 * region and joins its backward (the region is marked as calling collectives), same gradients. */
static void unreached(bool checkpointed, const char *what) {
    int N = em_dist_world_size(G), r = em_dist_rank(G);
    em_ctx *c = ctx_new();
    int64_t shape[2] = {2, 3};
    em_grad_enable(c, true);
    em_tensor *x = leaf(c, SX, r, 2, shape), *y = NULL;
    if (!checkpointed) y = em_all_gather(c, x, 1, G);
    else
        EXPECT(em_checkpoint(c, gather_region, NULL, NULL, &x, 1, &y, 1) == EM_OK,
               "checkpoint: %s", em_ctx_error(c)->message);
    backprop(c, r == 0 ? em_mul_scalar(c, x, 1.0) : y, SW, r);
    double want[6];
    want_unreached(N, r, want);
    check_grad(c, x, want, 6, what);
    em_ctx_free(c);
}

static void body_unreached_output(void) { unreached(false, "all_gather not reached on rank 0"); }

static void body_unreached_checkpoint(void) {
    unreached(true, "all_gather in a checkpointed region not reached on rank 0");
}

/* rows [t0, t0 + tb) of dim 2 of a host [1, H, T, D] array, as a tensor */
static em_tensor *block(em_ctx *c, const float *full, int64_t H, int64_t T, int64_t D, int64_t t0,
                        int64_t tb, bool grad) {
    float *v = malloc((size_t)(H * tb * D) * sizeof *v);
    for (int64_t h = 0; h < H; h++)
        for (int64_t t = 0; t < tb; t++)
            memcpy(v + (h * tb + t) * D, full + (h * T + t0 + t) * D, (size_t)D * sizeof *v);
    em_tensor *x = host_tensor(c, v, 4, (int64_t[]){1, H, tb, D});
    free(v);
    if (grad) em_tensor_requires_grad(c, x, true);
    return x;
}

/* The attention of context parallelism (diff_cp_attention: the ring or Ulysses) over the ranks'
 * token blocks: its output and the gradients of each rank's q, k, v blocks against the rows of
 * one process's em_sdpa over the whole sequence and its gradients, within 1e-5. */
static void cp_case(em_cp_schedule sched, const char *what) {
    int N = em_dist_world_size(G), r = em_dist_rank(G);
    const int64_t H = 4, tb = 3, T = tb * N, D = 4, n = H * T * D, nb = H * tb * D;
    float *f[4];
    for (int k = 0; k < 4; k++) { /* q, k, v, w */
        f[k] = malloc((size_t)n * sizeof *f[k]);
        for (int64_t i = 0; i < n; i++) f[k][i] = 1.5f * val(40 + (unsigned)k, 0, i);
    }
    em_ctx *c = ctx_new();
    em_sdpa_params sp = em_sdpa_default_params();
    /* one process: em_sdpa over every token, its gradients' rows of this rank's block */
    em_tensor *full[3], *ref_o, *ref_g[3];
    em_grad_enable(c, true);
    for (int k = 0; k < 3; k++) full[k] = block(c, f[k], H, T, D, 0, T, true);
    em_tensor *o1 = em_sdpa(c, full[0], full[1], full[2], NULL, &sp);
    em_grad_enable(c, false);
    float *host = malloc((size_t)n * sizeof *host);
    EXPECT(em_to_host_f32(c, o1, host, (size_t)n) == EM_OK, "%s: %s", what, em_ctx_error(c)->message);
    ref_o = block(c, host, H, T, D, r * tb, tb, false);
    EXPECT(em_backward_grad(c, o1, host_tensor(c, f[3], 4, (int64_t[]){1, H, T, D})) == EM_OK,
           "%s: one process's backward: %s", what, em_ctx_error(c)->message);
    for (int k = 0; k < 3; k++) {
        EXPECT(em_to_host_f32(c, em_tensor_grad(full[k]), host, (size_t)n) == EM_OK, "%s: %s",
               what, em_ctx_error(c)->message);
        ref_g[k] = block(c, host, H, T, D, r * tb, tb, false);
    }
    /* the ranks: their blocks through diff_cp_attention, loss sum(o_r * w_r) */
    diff_cp cp = {.g = G, .rank = r, .size = N, .schedule = sched};
    em_tensor *x[3];
    em_grad_enable(c, true);
    for (int k = 0; k < 3; k++) x[k] = block(c, f[k], H, T, D, r * tb, tb, true);
    em_tensor *o = diff_cp_attention(c, &cp, x[0], x[1], x[2], NULL, NULL, false);
    em_grad_enable(c, false);
    EXPECT(o != NULL, "%s: %s", what, em_ctx_error(c)->message);
    if (o) {
        EXPECT(em_backward_grad(c, o, block(c, f[3], H, T, D, r * tb, tb, false)) == EM_OK,
               "%s: backward: %s", what, em_ctx_error(c)->message);
        float *a = malloc((size_t)nb * sizeof *a), *b = malloc((size_t)nb * sizeof *b);
        const char *names[4] = {"out", "dq", "dk", "dv"};
        for (int k = 0; k < 4; k++) {
            em_tensor *got = k ? em_tensor_grad(x[k - 1]) : o, *want = k ? ref_g[k - 1] : ref_o;
            EXPECT(got != NULL, "%s: no %s", what, names[k]);
            if (!got) continue;
            EXPECT(em_to_host_f32(c, got, a, (size_t)nb) == EM_OK &&
                       em_to_host_f32(c, want, b, (size_t)nb) == EM_OK,
                   "%s: %s", what, em_ctx_error(c)->message);
            double worst = 0;
            for (int64_t i = 0; i < nb; i++) worst = fmax(worst, fabs(a[i] - b[i]));
            EXPECT(worst <= 1e-5, "%s (rank %d of %d): %s differs from one process's by %.3g",
                      what, r, N, names[k], worst);
        }
        free(a);
        free(b);
    }
    EXPECT(em_ctx_status(c) == EM_OK, "%s: %s", what, em_ctx_error(c)->message);
    free(host);
    for (int k = 0; k < 4; k++) free(f[k]);
    em_ctx_free(c);
}

static void body_ring_attention(void) { cp_case(EM_CP_RING, "ring attention"); }
static void body_ulysses_attention(void) { cp_case(EM_CP_ULYSSES, "Ulysses attention"); }

typedef struct body {
    const char *name;
    void (*fn)(void);
} body;
#define B(n) {#n, body_##n}
static const body BODIES[] = {B(all_reduce),       B(all_gather),     B(reduce_scatter),
                              B(all_to_all),       B(ring_shift),     B(unreached_output),
                              B(unreached_checkpoint),
                              B(ring_attention),   B(ulysses_attention)};
enum { NB = sizeof BODIES / sizeof BODIES[0] };

/* every body on this process's rank of the process group (mpirun, or a world of one) */
static void test_process_group(void) {
    G = PG;
    for (int i = 0; i < NB; i++) {
        t_fails = 0;
        BODIES[i].fn();
        CHECK_MSG(t_fails == 0, "%s: %s", BODIES[i].name, t_msg);
    }
}

typedef struct job {
    em_dist *g;
    const body *b;
    int fails;
    char msg[1024];
} job;

static void *job_main(void *p) {
    job *j = p;
    G = j->g;
    t_fails = 0;
    j->b->fn();
    j->fails = t_fails;
    memcpy(j->msg, t_msg, sizeof j->msg);
    return NULL;
}

/* every body on a device group of 2 devices of XLA's CPU plugin, one thread per rank: the
 * rules' collectives lowered for the group (skipped under mpirun: one process's job) */
static void test_device_group(void) {
    if (em_dist_world_size(PG) > 1) {
        em_test_skip("the device group runs in the one-process run (ctest test_grad_dist)");
        return;
    }
    em_ctx *c = em_ctx_create();
    em_dist *g[2] = {NULL, NULL};
    if (!em_test_xla_or_skip(c)) {
        em_ctx_free(c);
        return;
    }
    em_status s = em_dist_local(c, "xla", 2, NULL, g);
    CHECK_MSG(s == EM_OK, "%s", s ? em_ctx_error(c)->message : "");
    for (int i = 0; s == EM_OK && i < NB; i++) {
        job jobs[2];
        pthread_t t[2];
        for (int r = 0; r < 2; r++) {
            jobs[r] = (job){.g = g[r], .b = &BODIES[i]};
            pthread_create(&t[r], NULL, job_main, &jobs[r]);
        }
        for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
        for (int r = 0; r < 2; r++)
            CHECK_MSG(jobs[r].fails == 0, "device group, %s: %s", BODIES[i].name, jobs[r].msg);
    }
    for (int r = 0; r < 2; r++) em_dist_free(g[r]);
    em_ctx_free(c);
}

int main(int argc, char **argv) {
    /* two devices of XLA's CPU plugin (unless the caller asked for something else) */
    setenv("EMBER_PJRT_OPTIONS", "cpu_device_count=2", 0);
    static const em_test_case tests[] = {T(test_process_group), T(test_device_group)};
    return em_test_run_in_group(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv, &PG);
}

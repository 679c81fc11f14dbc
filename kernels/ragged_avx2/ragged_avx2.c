/*
 * ragged_dot for bf16 experts in the packed layout [G, N/32, K/2, 32, 2] (em_ragged_pack), on
 * AVX2 + FMA, as a kernel package (ember/kernel_abi.h). The micro-kernel is the built-in's own
 * (src/backends/cpu/ragged_packed_avx2.inc), so the package gives the built-in's bits; the work
 * is split as the built-in splits it, (group, 256 weight rows) tasks on Ember's thread pool.
 * supports() takes contiguous bf16 calls with a packed rhs; everything else goes to the built-in,
 * and so does every call where Ember's kernels run AVX-512 (the built-in is the faster there).
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cvt_avx2.h"
#include "core/bf16_inline.h"
#include "ember/kernel_abi.h"
#include "kernel_util.h"

#define RAGGED_WIDEN_BF16(src, dst, n)                                                             \
    do {                                                                                           \
        for (int64_t i_ = 0; i_ < (n); i_++) (dst)[i_] = em_bf16_to_f32_inline((src)[i_]);       \
    } while (0)
#include "backends/cpu/ragged_packed_avx2.inc"

#define NBLOCK 256 /* weight rows per task, as the built-in */

typedef struct task {
    int64_t g, row0, rows, n0, nn;
} task;

typedef struct job {
    const uint16_t *x, *w;
    uint16_t *out;
    int64_t k, n;
    task *tasks;
} job;

static int supports(const ember_kernel_call *k) {
    /* where Ember's own kernels run AVX-512 (with or without BF16), its built-in ragged_dot is
     * wider than this package: leave the call to it */
    if (!strncmp(kabi_cpu_level(k), "avx512", 6)) return 0;
    const ember_kernel_tensor *x = &k->in[0], *w = &k->in[1], *g = &k->in[2], *o = &k->out[0];
    return k->n_in == 3 && x->dtype == EMBER_KDT_BF16 && w->dtype == EMBER_KDT_BF16 &&
           o->dtype == EMBER_KDT_BF16 && g->dtype == EMBER_KDT_I32 && w->ndim == 5 &&
           w->shape[3] == 32 && w->shape[4] == 2 && kabi_contiguous(x) && kabi_contiguous(w) &&
           kabi_contiguous(o);
}

static void run_tasks(void *user, int64_t b, int64_t e, int thread) {
    (void)thread;
    const job *j = user;
    for (int64_t i = b; i < e; i++) {
        const task *t = &j->tasks[i];
        packed_bf16(j->x + t->row0 * j->k, j->k, t->rows, j->w + (t->g * j->n + t->n0) * j->k,
                    t->nn / 32, j->k / 2, j->out + t->row0 * j->n + t->n0, j->n);
    }
}

static int run(const ember_kernel_call *k, char *err, size_t err_n) {
    const ember_kernel_tensor *x = &k->in[0], *w = &k->in[1], *gs = &k->in[2];
    int64_t m = x->shape[0], kk = x->shape[1], g = w->shape[0], n = k->out[0].shape[1];
    const int32_t *sizes = gs->data;
    int64_t total = 0, ntasks = 0;
    for (int64_t i = 0; i < g; i++) {
        int64_t s = sizes[i * gs->strides[0]];
        if (s < 0) {
            snprintf(err, err_n, "group_sizes[%lld] = %lld is negative", (long long)i,
                     (long long)s);
            return 1;
        }
        total += s;
        if (total > m) {
            snprintf(err, err_n, "group sizes sum to more than the %lld rows of lhs (reached "
                                 "%lld at group %lld)", (long long)m, (long long)total,
                     (long long)i);
            return 1;
        }
        if (s) ntasks += (n + NBLOCK - 1) / NBLOCK;
    }
    uint16_t *out = k->out[0].data;
    if (total < m) memset(out + total * n, 0, (size_t)((m - total) * n) * sizeof *out);
    if (!ntasks || !n) return 0;
    job j = {x->data, w->data, out, kk, n, malloc((size_t)ntasks * sizeof(task))};
    if (!j.tasks) {
        snprintf(err, err_n, "out of memory");
        return 1;
    }
    int64_t t = 0, row = 0;
    for (int64_t i = 0; i < g; i++) {
        int64_t s = sizes[i * gs->strides[0]];
        if (s)
            for (int64_t n0 = 0; n0 < n; n0 += NBLOCK)
                j.tasks[t++] = (task){i, row, s, n0, n - n0 < NBLOCK ? n - n0 : NBLOCK};
        row += s;
    }
    if (k->parallel_for)
        k->parallel_for(ntasks, 1, run_tasks, &j);
    else
        run_tasks(&j, 0, ntasks, 0);
    free(j.tasks);
    return 0;
}

static const ember_kernel_impl impls[] = {
    KABI_IMPL("ragged_dot", "ragged_packed_avx2", EMBER_KDT_BIT(EMBER_KDT_BF16), 10, supports, run),
};

KABI_EXPORT_LIBRARY("ember-ragged-avx2", impls)

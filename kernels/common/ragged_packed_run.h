/*
 * The part of a packed ragged_dot package (kernels/ragged_avx2, kernels/ragged_avx512bf16) that
 * is not its micro-kernel: which calls it takes, and the work split of the built-in
 * (src/backends/cpu/moe_ragged.c) — (group, 256 weight rows) tasks on Ember's thread pool (the
 * ABI's parallel_for), each running the micro-kernel on one group's rows against its panels.
 *
 * The includer defines packed_bf16 (the micro-kernel's .inc) before including this header.
 * Ember's packed layout: rhs [G, N/32, K/2, 32, 2] bf16 (em_ragged_pack), panels 64-byte
 * aligned (Ember's CPU allocations are), out [M, N] bf16, group sizes i32.
 */
#ifndef EMBER_KERNELS_RAGGED_PACKED_RUN_H
#define EMBER_KERNELS_RAGGED_PACKED_RUN_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/kernel_abi.h"
#include "kernel_util.h"

#define RAGGED_NBLOCK 256 /* weight rows per task, as the built-in */

typedef struct ragged_task {
    int64_t g, row0, rows, n0, nn;
} ragged_task;

typedef struct ragged_job {
    const uint16_t *x, *w;
    uint16_t *out;
    int64_t k, n;
    ragged_task *tasks;
} ragged_job;

/* Contiguous bf16 lhs and out, a packed bf16 rhs, i32 group sizes: the calls the micro-kernel
 * takes (f32, the [G, N, K] layout and strided tensors are the built-in's). */
static inline int ragged_packed_takes(const ember_kernel_call *k) {
    if (k->n_in != 3 || k->n_out != 1) return 0;
    const ember_kernel_tensor *x = &k->in[0], *w = &k->in[1], *g = &k->in[2], *o = &k->out[0];
    return x->dtype == EMBER_KDT_BF16 && w->dtype == EMBER_KDT_BF16 &&
           o->dtype == EMBER_KDT_BF16 && g->dtype == EMBER_KDT_I32 && x->ndim == 2 &&
           w->ndim == 5 && w->shape[3] == 32 && w->shape[4] == 2 && kabi_contiguous(x) &&
           kabi_contiguous(w) && kabi_contiguous(o);
}

static void ragged_packed_tasks(void *user, int64_t b, int64_t e, int thread) {
    (void)thread;
    const ragged_job *j = user;
    for (int64_t i = b; i < e; i++) {
        const ragged_task *t = &j->tasks[i];
        packed_bf16(j->x + t->row0 * j->k, j->k, t->rows, j->w + (t->g * j->n + t->n0) * j->k,
                    t->nn / 32, j->k / 2, j->out + t->row0 * j->n + t->n0, j->n);
    }
}

/* The run of a call ragged_packed_takes took: group sizes checked as the built-in checks them
 * (same messages), rows past the groups zeroed, the tasks on the pool. */
static inline int ragged_packed_run(const ember_kernel_call *k, char *err, size_t err_n) {
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
        if (s) ntasks += (n + RAGGED_NBLOCK - 1) / RAGGED_NBLOCK;
    }
    uint16_t *out = k->out[0].data;
    if (total < m) memset(out + total * n, 0, (size_t)((m - total) * n) * sizeof *out);
    if (!ntasks || !n) return 0;
    ragged_job j = {x->data, w->data, out, kk, n, malloc((size_t)ntasks * sizeof(ragged_task))};
    if (!j.tasks) {
        snprintf(err, err_n, "out of memory");
        return 1;
    }
    int64_t t = 0, row = 0;
    for (int64_t i = 0; i < g; i++) {
        int64_t s = sizes[i * gs->strides[0]];
        if (s)
            for (int64_t n0 = 0; n0 < n; n0 += RAGGED_NBLOCK)
                j.tasks[t++] = (ragged_task){i, row, s, n0,
                                             n - n0 < RAGGED_NBLOCK ? n - n0 : RAGGED_NBLOCK};
        row += s;
    }
    if (k->parallel_for)
        k->parallel_for(ntasks, 1, ragged_packed_tasks, &j);
    else
        ragged_packed_tasks(&j, 0, ntasks, 0);
    free(j.tasks);
    return 0;
}

#endif

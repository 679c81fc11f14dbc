/*
 * Lab benchmark of ragged_dot's two weight layouts (not a test; run by hand):
 *
 *   lab_ragged N K rows_per_expert...
 *
 * 32 experts of [N, K] bf16, every group the same number of rows, one thread: em_ragged_dot on
 * the Hub's [G, N, K] layout and on em_ragged_pack of it, timed alternately (CPU time of the
 * thread, best of 12), weights read from memory (200 MB for [1536, 2048] per layout). Decides
 * em_ragged_isa.pack_pays for a kernel level (docs/performance-avx2.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ember/ember.h"

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: lab_ragged N K rows_per_expert...\n");
        return 2;
    }
    const int64_t G = 32, N = atoll(argv[1]), K = atoll(argv[2]);
    em_ctx *c = em_ctx_create();
    em_set_num_threads(1);
    em_tensor *w = em_rand(c, EM_BF16, EM_SHAPE(G, N, K), 1, -0.05, 0.05);
    em_tensor *wp = em_ragged_pack(c, w);
    double bytes = (double)G * (double)N * (double)K * 2;
    for (int a = 3; a < argc; a++) {
        int r = atoi(argv[a]);
        em_scope_push(c);
        em_tensor *x = em_rand(c, EM_BF16, EM_SHAPE(G * r, K), 2, -1, 1);
        int32_t gs[32];
        for (int g = 0; g < G; g++) gs[g] = r;
        em_tensor *g = em_from_host(c, EM_I32, EM_SHAPE(G), gs);
        double best[2] = {1e30, 1e30};
        for (int rep = 0; rep < 12; rep++)
            for (int v = 0; v < 2; v++) {
                em_scope_push(c);
                double t0 = cpu_now();
                em_tensor *y = em_ragged_dot(c, x, v ? wp : w, g, true);
                if (y) em_tensor_data(c, y);
                double t = cpu_now() - t0;
                if (t < best[v]) best[v] = t;
                em_scope_pop(c);
            }
        if (em_ctx_status(c)) {
            fprintf(stderr, "lab_ragged: %s\n", em_ctx_error(c)->message);
            em_ctx_free(c);
            return 1;
        }
        printf("rows/expert %2d [%lld, %lld]: [N,K] %.2f ms (%.1f GB/s), packed %.2f ms (%.1f "
               "GB/s), packed speed %.2fx\n",
               r, (long long)N, (long long)K, best[0] * 1e3, bytes / best[0] / 1e9, best[1] * 1e3,
               bytes / best[1] / 1e9, best[0] / best[1]);
        em_scope_pop(c);
    }
    em_ctx_free(c);
    return 0;
}

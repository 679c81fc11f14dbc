/*
 * The memory bandwidth of an accelerator behind PJRT (a GPU's HBM, a TPU's), for the bounds of
 * `ember bench decode|moe --device`: there the host's read bandwidth says nothing about the
 * weights' bytes, which the device reads from its own memory.
 */
#include "bench_device_bw.h"

#include <ember/ember.h>
#include <ember/pjrt.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_device_gbs(const char *name) {
    if (!name) return 0;
    em_ctx *c = em_ctx_create();
    em_device *d = em_device_get(c, name);
    em_pjrt_plugin_info pi;
    if (!d || !em_device_is_pjrt(d) || em_device_is_compile_only(d) ||
        em_pjrt_plugin_info_get(d, &pi) != EM_OK || !strcmp(pi.platform, "cpu")) {
        em_ctx_free(c); /* the host's memory: bench_read_gbs measures it */
        return 0;
    }
    /* x + x over 512 MiB of f32 (well past any cache): 512 MiB read, 512 MiB written per run;
     * the median of 7 runs after a warm-up that also compiles the program */
    const int64_t n = (int64_t)128 << 20;
    em_ctx_set_device(c, d);
    em_tensor *x = em_ones(c, EM_F32, EM_SHAPE(n));
    double t[7];
    int k = 0;
    for (int r = -1; r < 7 && !em_ctx_status(c); r++) {
        em_scope_push(c);
        double t0 = bench_now();
        em_add(c, x, x);
        em_device_sync(c, d);
        if (r >= 0) t[k++] = bench_now() - t0;
        em_scope_pop(c);
    }
    double gbs = 0;
    if (!em_ctx_status(c) && k == 7) {
        qsort(t, 7, sizeof *t, cmp_d);
        gbs = 2.0 * (double)n * 4.0 / t[3] / 1e9;
    }
    em_ctx_free(c);
    return gbs;
}

/* Kernel packages against the built-ins in one process (bench_ab.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_ab.h"
#include "core/kernel_registry.h"
#include "ember/ember.h"
#include "ember/kernels.h"

bool bench_load_packages(const char *who, const char *specs) {
    em_ctx *c = em_ctx_create();
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", specs);
    bool ok = true;
    for (char *save = NULL, *s = strtok_r(buf, ",", &save); s && ok;
         s = strtok_r(NULL, ",", &save)) {
        if (em_kernels_load(c, s, NULL) != EM_OK) {
            fprintf(stderr, "%s: --kernels %s: %s\n", who, s, em_ctx_error(c)->message);
            ok = false;
        }
    }
    em_ctx_free(c);
    return ok;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void bench_ab_rounds(double (*turn)(void *user), void *user, int rounds, double *builtin,
                     double *hub, double *ratio) {
    double b[16], h[16], q[16];
    if (rounds > 16) rounds = 16;
    if (rounds < 1) rounds = 1;
    for (int r = 0; r < rounds; r++)
        for (int side = 0; side < 2; side++) {
            bool with_hub = (side == 0) == (r % 2 == 0);
            em_kreg_suspend_packages(!with_hub);
            double ms = turn(user);
            if (with_hub)
                h[r] = ms;
            else
                b[r] = ms;
        }
    em_kreg_suspend_packages(true);
    for (int r = 0; r < rounds; r++) q[r] = h[r] / b[r];
    if (ratio) *ratio = median(q, rounds);
    *builtin = median(b, rounds);
    *hub = median(h, rounds);
}

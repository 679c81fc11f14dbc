/*
 * Lab check of the element-wise engine's erf (not a test; run by hand, ~4 min on one core):
 *
 *   lab_erf [step]
 *
 * Every step-th float bit pattern (default 1: all 2^32):
 *  - em_erff (ew_math.h) against libm's erf in double: the largest error in ulp of the f32
 *    result (ulp = 2^(e-24) for |erf| in [2^(e-1), 2^e), the subnormal ulp below), how many
 *    inputs are above 1 ulp, and libm's erff on the same scale;
 *  - NaN, infinities and zeros against erff (NaN stays NaN, the sign of a zero kept);
 *  - the exact GELU through the element-wise engine at the process's kernel level
 *    (EMBER_CPU_LEVEL) against em_gelu_erff, bit for bit.
 * Exits 1 where the engine differs or a special value does.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/ew_math.h"
#include "ember/ember.h"

static double ulp_err(float r, double ref) {
    if (ref == 0) return r == 0 ? 0 : INFINITY;
    int e;
    frexp(ref, &e);
    if (e - 24 < -149) e = -149 + 24;
    return fabs((double)r - ref) / ldexp(1.0, e - 24);
}

enum { CHUNK = 1 << 20 };

int main(int argc, char **argv) {
    uint64_t step = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
    if (step < 1) return 2;
    float *x = malloc(CHUNK * sizeof *x);
    if (!x) return 1;
    em_ctx *c = em_ctx_create();
    double worst = 0, lib_worst = 0;
    float wx = 0;
    uint64_t n = 0, above1 = 0, bad_special = 0, bad_engine = 0;
    uint64_t u = 0;
    while (u < (1ull << 32)) {
        int m = 0;
        for (; m < CHUNK && u < (1ull << 32); m++, u += step) {
            uint32_t b = (uint32_t)u;
            memcpy(&x[m], &b, 4);
        }
        em_scope_push(c);
        em_tensor *t = em_from_host(c, EM_F32, 1, (int64_t[]){m}, x);
        const float *g = em_tensor_data(c, em_gelu(c, t, false));
        if (!g) {
            fprintf(stderr, "lab_erf: %s\n", em_ctx_error(c)->message);
            return 1;
        }
        for (int i = 0; i < m; i++) {
            float v = x[i], r = em_erff(v), want = em_gelu_erff(v);
            if (memcmp(&g[i], &want, 4)) bad_engine++;
            n++;
            if (v != v || isinf(v) || v == 0) {
                float l = erff(v);
                if ((r != r) != (l != l) || (l == l && (r != l || signbit(r) != signbit(l))))
                    bad_special++;
                if (v != v) continue;
            }
            double ref = erf((double)v), e = ulp_err(r, ref), le = ulp_err(erff(v), ref);
            if (e > worst) worst = e, wx = v;
            if (e > 1) above1++;
            if (le > lib_worst) lib_worst = le;
        }
        em_scope_pop(c);
    }
    printf("%llu floats (every %llu-th bit pattern)\n", (unsigned long long)n,
           (unsigned long long)step);
    printf("em_erff: max %.4f ulp at x = %a (%.9g); %llu inputs above 1 ulp; libm erff: max %.4f "
           "ulp\n",
           worst, wx, wx, (unsigned long long)above1, lib_worst);
    printf("special values unlike erff: %llu\n", (unsigned long long)bad_special);
    printf("engine gelu (erf) unlike em_gelu_erff: %llu\n", (unsigned long long)bad_engine);
    em_ctx_free(c);
    free(x);
    return bad_special || bad_engine ? 1 : 0;
}

/* Creation kernels: full, arange, eye and counter-based random numbers. */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu.h"

static em_status full_kernel(const em_kernel_args *a) {
    em_tensor *t = a->out[0];
    size_t es = em_esize(t->dtype);
    unsigned char v[8];
    em_store_f64(v, t->dtype, 0, a->attrs[2].f);
    char *p = em_tensor_ptr(t);
    bool zero = true;
    for (size_t i = 0; i < es; i++) zero &= v[i] == 0;
    if (zero) {
        memset(p, 0, (size_t)t->numel * es);
        return EM_OK;
    }
    for (int64_t i = 0; i < t->numel; i++) memcpy(p + (size_t)i * es, v, es);
    return EM_OK;
}

static em_status arange_kernel(const em_kernel_args *a) {
    em_tensor *t = a->out[0];
    double start = a->attrs[1].f, step = a->attrs[3].f;
    void *p = em_tensor_ptr(t);
    for (int64_t i = 0; i < t->numel; i++) em_store_f64(p, t->dtype, i, start + (double)i * step);
    return EM_OK;
}

static em_status eye_kernel(const em_kernel_args *a) {
    em_tensor *t = a->out[0];
    char *p = em_tensor_ptr(t);
    memset(p, 0, (size_t)t->numel * em_esize(t->dtype));
    int64_t n = t->shape[0], m = t->shape[1];
    for (int64_t i = 0; i < n && i < m; i++) em_store_f64(p, t->dtype, i * m + i, 1.0);
    return EM_OK;
}

/* splitmix64: a strong 64-bit mix of (seed, counter), so element i's value depends only on the
 * seed and i (reproducible whatever the thread count). */
static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static double unit(uint64_t seed, uint64_t i) {
    return (double)(mix(seed * 0x2545f4914f6cdd1dull ^ mix(i)) >> 11) * (1.0 / 9007199254740992.0);
}

typedef struct rand_job {
    em_tensor *t;
    uint64_t seed;
    double p0, p1;
    bool normal;
} rand_job;

static void rand_body(void *user, int64_t b, int64_t e, int tid) {
    (void)tid;
    rand_job *j = user;
    void *p = em_tensor_ptr(j->t);
    for (int64_t i = b; i < e; i++) {
        double v;
        if (j->normal) {
            /* Box-Muller on the pair (2i, 2i+1) */
            double u1 = unit(j->seed, 2 * (uint64_t)i), u2 = unit(j->seed, 2 * (uint64_t)i + 1);
            if (u1 < 1e-300) u1 = 1e-300;
            v = j->p0 + j->p1 * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        } else {
            v = j->p0 + (j->p1 - j->p0) * unit(j->seed, (uint64_t)i);
        }
        em_store_f64(p, j->t->dtype, i, v);
    }
}

static em_status rand_kernel(const em_kernel_args *a) {
    rand_job j = {a->out[0], (uint64_t)a->attrs[2].i, a->attrs[3].f, a->attrs[4].f,
                  a->op->id == EM_OP_RAND_NORMAL};
    em_parallel_for(j.t->numel, 1 << 14, rand_body, &j);
    return EM_OK;
}

void em_cpu_register_create(em_kernel_fn *k) {
    k[EM_OP_FULL] = full_kernel;
    k[EM_OP_ARANGE] = arange_kernel;
    k[EM_OP_EYE] = eye_kernel;
    k[EM_OP_RAND_UNIFORM] = rand_kernel;
    k[EM_OP_RAND_NORMAL] = rand_kernel;
}

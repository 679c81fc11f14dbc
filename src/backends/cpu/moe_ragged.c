/*
 * ragged_dot on the CPU: lhs rows grouped contiguously by group_sizes, each group multiplied by
 * its own matrix. Work is split into (group, block of weight rows) tasks so that every weight
 * row of every hit group is read from memory exactly once and both threads stream weights; the
 * group's activation rows stay in L1. Groups with no rows cost nothing (decode hits few experts).
 */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/ragged.h"
#include "ember/ops.h" /* em_ragged_pack_pays, exported */

#define RD_NBLOCK 256 /* weight rows per task: long streams for the prefetcher */

typedef struct rd_task {
    int64_t g, row0, rows, n0, nn;
} rd_task;

typedef struct rd_job {
    em_dtype dt;
    bool nk, native;
    bool packed; /* rhs [G, N/32, K/2, 32, 2] (em_ragged_pack): nk holds too */
    const char *x, *w; /* contiguous lhs [M, K] and rhs */
    int64_t k, n;
    em_tensor *out;
    rd_task *tasks;
    const em_ragged_isa *isa;
    em_gemm_dot_fn dot; /* the linear layers' weight-streaming dot engine, for few rows */
} rd_job;

static float bfv(uint16_t h) { return em_bf16_to_f32(h); }

/* Weight row n of a group's matrix (nk or packed) as f32. */
static void weight_row(const rd_job *j, const char *wg, int64_t n, float *wr) {
    size_t es = em_esize(j->dt);
    if (!j->packed) {
        em_convert(wg + (size_t)(n * j->k) * es, j->dt, wr, EM_F32, j->k);
        return;
    }
    const char *panel = wg + (size_t)((n / 32) * j->k * 32 + (n % 32) * 2) * es;
    for (int64_t s = 0; s < j->k / 2; s++) /* a (k, k+1) pair per 64-element step */
        em_convert(panel + (size_t)(s * 64) * es, j->dt, wr + 2 * s, EM_F32, 2);
}

/* Any dtype, either layout: converts on the fly (f16 and the [G, K, N] layout). */
static void task_generic(const rd_job *j, const rd_task *t, float *acc) {
    size_t es = em_esize(j->dt);
    memset(acc, 0, (size_t)(t->rows * t->nn) * sizeof *acc);
    const char *wg = j->w + (size_t)(t->g * j->k * j->n) * es;
    float *xr = malloc((size_t)j->k * sizeof *xr);
    float *wr = malloc((size_t)(j->nk ? j->k : t->nn) * sizeof *wr);
    if (!xr || !wr) {
        free(xr);
        free(wr);
        return;
    }
    if (j->nk) {
        for (int64_t n = 0; n < t->nn; n++) {
            weight_row(j, wg, t->n0 + n, wr);
            for (int64_t r = 0; r < t->rows; r++) {
                em_convert(j->x + (size_t)((t->row0 + r) * j->k) * es, j->dt, xr, EM_F32, j->k);
                float s = 0;
                for (int64_t i = 0; i < j->k; i++) s += xr[i] * wr[i];
                acc[r * t->nn + n] = s;
            }
        }
    } else {
        for (int64_t i = 0; i < j->k; i++) {
            em_convert(wg + (size_t)(i * j->n + t->n0) * es, j->dt, wr, EM_F32, t->nn);
            for (int64_t r = 0; r < t->rows; r++) {
                const char *xp = j->x + (size_t)((t->row0 + r) * j->k + i) * es;
                float xv = j->dt == EM_F32 ? *(const float *)xp
                         : j->dt == EM_BF16 ? bfv(*(const uint16_t *)xp)
                                            : em_f16_to_f32(*(const uint16_t *)xp);
                float *a = acc + r * t->nn;
                for (int64_t n = 0; n < t->nn; n++) a[n] += xv * wr[n];
            }
        }
    }
    free(xr);
    free(wr);
}

static void run_tasks(void *user, int64_t b, int64_t e, int tid) {
    (void)tid;
    const rd_job *j = user;
    size_t es = em_esize(j->dt);
    for (int64_t ti = b; ti < e; ti++) {
        const rd_task *t = &j->tasks[ti];
        bool direct = j->out->dtype == EM_F32;
        float stackbuf[4096];
        size_t need = (size_t)(t->rows * t->nn);
        float *acc = direct ? NULL : need <= 4096 ? stackbuf : malloc(need * sizeof *acc);
        if (!direct && !acc) continue;
        float *dst = direct ? (float *)em_tensor_ptr(j->out) + t->row0 * j->n + t->n0 : acc;
        int64_t ldo = direct ? j->n : t->nn;
        const char *x = j->x + (size_t)(t->row0 * j->k) * es;
        /* the task's first weight row, or first panel (32 rows a panel) when packed */
        const char *w = j->w + (size_t)((t->g * j->n + t->n0) * j->k) * es;
        if (j->packed && j->isa->packed_bf16 && j->dt == EM_BF16) {
            uint16_t *o = (uint16_t *)em_tensor_ptr(j->out) + t->row0 * j->n + t->n0;
            j->isa->packed_bf16((const uint16_t *)x, j->k, t->rows, (const uint16_t *)w,
                                t->nn / 32, j->k / 2, o, j->n);
            if (acc != stackbuf) free(acc);
            continue;
        }
        if (j->native && j->dot && t->rows <= 64 && j->out->dtype == j->dt) {
            /* decode sizes: stream this block of weight rows once against the group's rows,
             * rounding once into the output */
            char *o = (char *)em_tensor_ptr(j->out) + (size_t)(t->row0 * j->n + t->n0) * es;
            j->dot(t->rows, t->nn, j->k, x, j->k, w, j->k, o, j->n, j->dt, NULL);
            if (acc != stackbuf) free(acc);
            continue;
        }
        if (j->native && j->dt == EM_BF16) {
            j->isa->nk_bf16((const uint16_t *)x, j->k, t->rows, (const uint16_t *)w, j->k, t->nn,
                            j->k, dst, ldo);
        } else if (j->native && j->dt == EM_F32) {
            j->isa->nk_f32((const float *)x, j->k, t->rows, (const float *)w, j->k, t->nn, j->k,
                           dst, ldo);
        } else {
            float *tmp = direct ? malloc(need * sizeof *tmp) : acc;
            if (!tmp) continue;
            task_generic(j, t, tmp);
            if (direct)
                for (int64_t r = 0; r < t->rows; r++)
                    memcpy(dst + r * ldo, tmp + r * t->nn, (size_t)t->nn * sizeof *tmp);
            if (direct) free(tmp);
        }
        if (!direct) {
            char *o = (char *)em_tensor_ptr(j->out);
            for (int64_t r = 0; r < t->rows; r++)
                em_convert(acc + r * t->nn, EM_F32,
                           o + (size_t)((t->row0 + r) * j->n + t->n0) * es, j->out->dtype, t->nn);
            if (acc != stackbuf) free(acc);
        }
    }
}

/* A contiguous host copy of t when it is not contiguous already (*owned set when copied). */
static const char *contiguous_data(const em_tensor *t, void **owned) {
    *owned = NULL;
    if (em_is_contiguous(t)) return em_tensor_ptr(t);
    *owned = malloc(em_tensor_nbytes(t) ? em_tensor_nbytes(t) : 1);
    if (*owned) em_gather_strided(t, *owned);
    return *owned;
}

static em_status ragged_dot_kernel(const em_kernel_args *a) {
    const em_tensor *lhs = a->in[0], *rhs = a->in[1], *gs = a->in[2];
    em_tensor *out = a->out[0];
    bool nk = a->attrs[0].i != 0, packed = rhs->ndim == 5;
    int64_t m = lhs->shape[0], k = lhs->shape[1], g = rhs->shape[0];
    int64_t n = out->shape[1];
    /* group sizes are data: validate them here */
    int64_t total = 0, ntasks = 0;
    for (int64_t i = 0; i < g; i++) {
        int64_t s = em_cpu_get_i64(gs, i);
        if (s < 0)
            return em_op_fail(a->ctx, EM_ERR_INVALID_ARG, "group_sizes[%lld] = %lld is negative",
                              (long long)i, (long long)s);
        total += s;
        if (total > m)
            return em_op_fail(a->ctx, EM_ERR_INVALID_ARG,
                              "group sizes sum to more than the %lld rows of lhs (reached %lld at "
                              "group %lld)", (long long)m, (long long)total, (long long)i);
        if (s) ntasks += (n + RD_NBLOCK - 1) / RD_NBLOCK;
    }
    size_t es = em_esize(out->dtype);
    /* rows past the groups are zeros */
    if (total < m)
        memset((char *)em_tensor_ptr(out) + (size_t)(total * n) * es, 0,
               (size_t)((m - total) * n) * es);
    if (ntasks == 0 || n == 0) return EM_OK;
    rd_job j;
    memset(&j, 0, sizeof j);
    void *own_x, *own_w;
    j.x = contiguous_data(lhs, &own_x);
    j.w = contiguous_data(rhs, &own_w);
    j.tasks = malloc((size_t)ntasks * sizeof *j.tasks);
    if (!j.x || !j.w || !j.tasks) {
        free(own_x);
        free(own_w);
        free(j.tasks);
        return em_op_fail(a->ctx, EM_ERR_OOM, "no memory for ragged_dot");
    }
    j.dt = lhs->dtype;
    j.nk = nk;
    j.packed = packed;
    j.native = nk && !packed && (j.dt == EM_BF16 || j.dt == EM_F32);
    j.k = k;
    j.n = n;
    j.out = out;
    j.isa = em_ragged_isa_get();
    j.dot = j.native ? em_gemm_dot_for(j.dt) : NULL;
    int64_t t = 0, row = 0;
    for (int64_t i = 0; i < g; i++) {
        int64_t s = em_cpu_get_i64(gs, i);
        if (s)
            for (int64_t n0 = 0; n0 < n; n0 += RD_NBLOCK)
                j.tasks[t++] = (rd_task){i, row, s, n0, n - n0 < RD_NBLOCK ? n - n0 : RD_NBLOCK};
        row += s;
    }
    em_parallel_for(ntasks, 1, run_tasks, &j);
    free(j.tasks);
    free(own_x);
    free(own_w);
    return EM_OK;
}

EM_CPU_ISA_TABLE(em_ragged_isa, em_ragged_isa_get,
                 [EM_ISA_GENERIC] = em_ragged_fill_generic,
                 [EM_ISA_AVX2] = EM_ISA_X86(em_ragged_fill_avx2),
                 [EM_ISA_AVX512] = EM_ISA_X86(em_ragged_fill_avx512),
                 [EM_ISA_NEON] = EM_ISA_ARM(em_ragged_fill_neon))

bool em_ragged_pack_pays(const em_device *dev, em_dtype dtype) {
    /* packing pays where a kernel reads the packed layout directly and beat the [N, K] path
     * (AVX-512 BF16, AVX2, NEON BF16; per instruction set, ragged.h) */
    return (!dev || dev == em_device_cpu()) && dtype == EM_BF16 &&
           em_ragged_isa_get()->packed_bf16 != NULL && em_ragged_isa_get()->pack_pays;
}

void em_cpu_register_moe(em_kernel_fn *k) { k[EM_OP_RAGGED_DOT] = ragged_dot_kernel; }

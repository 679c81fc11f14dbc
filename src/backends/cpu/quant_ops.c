/*
 * Block-quantized weights (EM_Q8_0 ... EM_Q6_K) in the CPU's kernels: linear with a quantized
 * weight, embedding rows of a quantized table, and cast (dequantization). These wrap the
 * backend's kernels for the same ops, which keep every unquantized call.
 *
 * linear: y = x @ w^T (+ bias) for x [..., K] of any float dtype and w [N, K] quantized. The
 *   rows of x are quantized once to 16-bit blocks (quant_dot.h), and the quantized dot
 *   kernels (quant_dot.h) read the weight's bytes as they are. The work is split in tiles of
 *   weight rows x rows of x: the weight rows of a tile stay in L1 while its rows of x (at most
 *   QX_ROWS, in L2) pass over them, so prefill reuses each weight block across many tokens
 *   and decode (one row of x) streams every weight row once.
 *   From QGEMM_ROWS rows of x on (prefill), blocks of weight rows are dequantized to f32 instead
 *   and multiplied by the f32 GEMM: the quantized kernels spend one scale multiply-add per
 *   block of 32 and row of x, which bounded them near a third of the FMA peak, where the
 *   dequantization is paid once per weight for all rows (docs/notes/2026-12-02-vnni-quant.md).
 */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/gemm.h"
#include "backends/cpu/quant_dot.h"

static em_kernel_fn base_linear, base_embedding, base_cast;

/* ---- linear ---- */

/* Rows of x per tile: 32 rows of 16-bit activations of K = 4096 are 295 KB, in L2. */
#define QX_ROWS 32

typedef struct qlin {
    int64_t m, n, k;
    const uint8_t *w; /* [n] rows of row_bytes */
    size_t row_bytes;
    float *y;         /* [m, n] */
    const float *bias;
    const em_qdot_kernel *kern;
    const uint8_t *xq; /* x quantized for kern, m rows of xq_row bytes */
    size_t xq_row;
    int64_t grain, n_tiles; /* weight rows per tile, tiles along n */
} qlin;

/* Tiles t: weight rows (t % n_tiles) * grain, rows of x (t / n_tiles) * QX_ROWS. */
static void qdot_tiles(void *user, int64_t b, int64_t e, int tid) {
    (void)tid;
    const qlin *q = user;
    for (int64_t t = b; t < e; t++) {
        int64_t j0 = (t % q->n_tiles) * q->grain, m0 = (t / q->n_tiles) * QX_ROWS;
        int64_t nj = q->n - j0 < q->grain ? q->n - j0 : q->grain;
        int64_t nm = q->m - m0 < QX_ROWS ? q->m - m0 : QX_ROWS;
        q->kern->dot(q->k, q->w + (size_t)j0 * q->row_bytes, q->row_bytes, (int)nj,
                     q->xq + (size_t)m0 * q->xq_row, q->xq_row, (int)nm, q->y + m0 * q->n + j0,
                     q->n);
        for (int64_t m = m0; q->bias && m < m0 + nm; m++)
            for (int64_t j = j0; j < j0 + nj; j++) q->y[m * q->n + j] += q->bias[j];
    }
}

/* Rows of x from which prefill dequantizes (see the top of the file), and the f32 bytes of one
 * dequantized block of weight rows: the GEMM packs x again for every block, so blocks are
 * large (4096 x 4096 Q4_1 at 512 rows, 2 threads: 1 MB blocks 106 GMAC/s of CPU time, 4 MB
 * 125, 8 MB 133). */
#define QGEMM_ROWS 64
#define QGEMM_BLOCK_BYTES (1 << 23)

typedef struct deq_job {
    em_dtype t;
    const uint8_t *w;
    size_t row_bytes;
    int64_t k;
    float *out;
} deq_job;

static void dequant_rows(void *user, int64_t b, int64_t e, int tid) {
    (void)tid;
    const deq_job *j = user;
    for (int64_t r = b; r < e; r++)
        em_dequantize(j->t, j->w + (size_t)r * j->row_bytes, j->out + r * j->k, j->k);
}

/* y [m, n] = x [m, k] f32 @ w^T (+ bias) by blocks of dequantized weight rows. */
static em_status q_linear_gemm(em_dtype t, const float *x, const qlin *q) {
    int64_t nb = QGEMM_BLOCK_BYTES / (int64_t)sizeof(float) / q->k;
    nb = nb < 16 ? 16 : nb / 16 * 16;
    if (nb > q->n) nb = q->n;
    float *wf = malloc((size_t)(nb * q->k) * sizeof *wf);
    if (!wf) return EM_ERR_OOM;
    em_status s = EM_OK;
    for (int64_t j0 = 0; j0 < q->n && s == EM_OK; j0 += nb) {
        int64_t nj = q->n - j0 < nb ? q->n - j0 : nb;
        deq_job dj = {t, q->w + (size_t)j0 * q->row_bytes, q->row_bytes, q->k, wf};
        em_parallel_for(nj, 4, dequant_rows, &dj);
        em_gemm_args g = {.m = q->m, .n = nj, .k = q->k, .dtype = EM_F32,
                          .a = x, .a_rs = q->k, .a_cs = 1,
                          .b = wf, .b_rs = 1, .b_cs = q->k,
                          .c = q->y + j0, .ldc = q->n,
                          .bias = q->bias ? q->bias + j0 : NULL};
        s = em_gemm(&g);
    }
    free(wf);
    return s;
}

typedef struct qx_job {
    const qlin *q;
    const float *x;
} qx_job;

static void quantize_rows(void *user, int64_t b, int64_t e, int tid) {
    (void)tid;
    const qx_job *j = user;
    for (int64_t m = b; m < e; m++)
        j->q->kern->quantize_x(j->x + m * j->q->k, (uint8_t *)j->q->xq + (size_t)m * j->q->xq_row,
                               j->q->k);
}

static em_status q_linear(const em_kernel_args *a) {
    const em_tensor *x = a->in[0], *w = a->in[1], *bias = a->n_in > 2 ? a->in[2] : NULL;
    if (!em_is_quant(w->dtype)) return base_linear(a);
    em_tensor *o = a->out[0];
    if (o->numel == 0) return EM_OK;
    qlin q = {0};
    q.k = w->shape[1];
    q.n = w->shape[0];
    q.m = x->numel / q.k;
    q.w = em_tensor_ptr(w);
    q.row_bytes = em_dtype_nbytes(w->dtype, q.k);
    q.kern = em_qdot_kernel_for(w->dtype);
    if (!q.kern)
        return em_op_fail(a->ctx, EM_ERR_UNSUPPORTED, "no dot kernel for %s weights",
                          em_dtype_name(w->dtype));
    bool x_direct = x->dtype == EM_F32 && em_is_contiguous(x);
    float *xf = x_direct ? NULL : em_cpu_to_f32(x);
    float *bf = bias ? em_cpu_to_f32(bias) : NULL;
    float *yf = o->dtype == EM_F32 ? NULL : malloc((size_t)o->numel * sizeof *yf);
    const bool gemm = q.m >= QGEMM_ROWS;
    q.xq_row = q.kern->x_row_bytes(q.k);
    uint8_t *xq = gemm ? NULL : malloc(q.xq_row * (size_t)q.m);
    const float *xs = x_direct ? (const float *)em_tensor_ptr(x) : xf;
    em_status s = EM_OK;
    if ((!x_direct && !xf) || (bias && !bf) || (o->dtype != EM_F32 && !yf) || (!gemm && !xq)) {
        s = em_op_fail(a->ctx, EM_ERR_OOM, "out of memory for a quantized linear");
        goto done;
    }
    q.y = yf ? yf : em_tensor_ptr(o);
    q.bias = bf;
    if (gemm) {
        s = q_linear_gemm(w->dtype, xs, &q);
        if (s != EM_OK) {
            s = em_op_fail(a->ctx, s, "out of memory for a quantized linear (dequantized blocks)");
            goto done;
        }
    } else {
        q.xq = xq;
        qx_job qj = {&q, xs};
        em_parallel_for(q.m, 8, quantize_rows, &qj);
        q.grain = q.kern->grain;
        q.n_tiles = (q.n + q.grain - 1) / q.grain;
        em_parallel_for(q.n_tiles * ((q.m + QX_ROWS - 1) / QX_ROWS), 1, qdot_tiles, &q);
    }
    if (yf) em_cpu_from_f32(o, yf);
done:
    free(xf);
    free(bf);
    free(yf);
    free(xq);
    return s;
}

/* ---- embedding ---- */

typedef struct qemb {
    const em_tensor *w, *ids;
    float *out;
} qemb;

static void qemb_rows(void *user, int64_t b, int64_t e, int tid) {
    (void)tid;
    const qemb *j = user;
    int64_t d = j->w->shape[1];
    size_t rb = em_dtype_nbytes(j->w->dtype, d);
    const uint8_t *base = em_tensor_ptr(j->w);
    for (int64_t p = b; p < e; p++)
        em_dequantize(j->w->dtype, base + (size_t)em_cpu_get_i64(j->ids, p) * rb, j->out + p * d,
                      d);
}

static em_status q_embedding(const em_kernel_args *a) {
    const em_tensor *w = a->in[0], *ids = a->in[1];
    if (!em_is_quant(w->dtype)) return base_embedding(a);
    for (int64_t p = 0; p < ids->numel; p++) {
        int64_t id = em_cpu_get_i64(ids, p);
        if (id < 0 || id >= w->shape[0])
            return em_op_fail(a->ctx, EM_ERR_INDEX,
                              "id %lld (position %lld of the ids) is out of range for %lld "
                              "embeddings", (long long)id, (long long)p, (long long)w->shape[0]);
    }
    qemb j = {w, ids, em_tensor_ptr(a->out[0])};
    if (ids->numel) em_parallel_for(ids->numel, 16, qemb_rows, &j);
    return EM_OK;
}

/* ---- cast (dequantization) ---- */

typedef struct qcast {
    const em_tensor *x;
    em_tensor *o;
    int64_t row;
} qcast;

static void qcast_rows(void *user, int64_t b, int64_t e, int tid) {
    (void)tid;
    const qcast *j = user;
    size_t rb = em_dtype_nbytes(j->x->dtype, j->row), eo = em_esize(j->o->dtype);
    const uint8_t *src = em_tensor_ptr(j->x);
    char *dst = em_tensor_ptr(j->o);
    for (int64_t r = b; r < e; r++)
        em_dequantize_to(j->x->dtype, src + (size_t)r * rb, dst + (size_t)(r * j->row) * eo,
                         j->o->dtype, j->row);
}

static em_status q_cast(const em_kernel_args *a) {
    const em_tensor *x = a->in[0];
    if (!em_is_quant(x->dtype)) return base_cast(a);
    qcast j = {x, a->out[0], x->shape[x->ndim - 1]};
    if (x->numel) em_parallel_for(x->numel / j.row, 8, qcast_rows, &j);
    return EM_OK;
}

void em_cpu_register_quant(em_kernel_fn *k) {
    base_linear = k[EM_OP_LINEAR];
    base_embedding = k[EM_OP_EMBEDDING];
    base_cast = k[EM_OP_CAST];
    k[EM_OP_LINEAR] = q_linear;
    k[EM_OP_EMBEDDING] = q_embedding;
    k[EM_OP_CAST] = q_cast;
}

/*
 * Block-quantized weights (EM_Q8_0 ... EM_Q6_K) in the CPU's kernels: linear with a quantized
 * weight, embedding rows of a quantized table, and cast (dequantization). These wrap the
 * backend's kernels for the same ops, which keep every unquantized call.
 *
 * linear: y = x @ w^T (+ bias) for x [..., K] of any float dtype and w [N, K] quantized.
 *   Few rows (decode): x is quantized on the fly to 8-bit blocks as llama.cpp does, and each
 *   weight row is read once, as it is, by the quantized dot kernels (quant_dot.h).
 *   Many rows (prefill): panels of weight rows are dequantized to f32 and multiplied by the
 *   packed GEMM, so the arithmetic runs at the FMA peak and the dequantization is paid once
 *   per panel, not once per row of x.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/gemm.h"
#include "backends/cpu/quant_dot.h"

static em_kernel_fn base_linear, base_embedding, base_cast;

/* ---- linear ---- */

/* Rows of x up to which the quantized dot kernels run; above, dequantized panels and GEMM. */
#define QDOT_MAX_ROWS 16
/* Weight rows per dequantized panel of the GEMM path. */
#define PANEL_ROWS 256

typedef struct qlin {
    int64_t m, n, k;
    const float *x;   /* [m, k] f32 */
    const uint8_t *w; /* [n] rows of row_bytes */
    size_t row_bytes;
    em_dtype wt;
    float *y;         /* [m, n] */
    const float *bias;
    const em_qdot_kernel *kern;
    const void *xq;   /* x quantized for kern, m rows of xq_row bytes */
    size_t xq_row;
} qlin;

static void qdot_chunk(void *user, int64_t b, int64_t e, int tid) {
    (void)tid;
    const qlin *q = user;
    for (int64_t m = 0; m < q->m; m++) {
        const uint8_t *xq = (const uint8_t *)q->xq + (size_t)m * q->xq_row;
        float *y = q->y + m * q->n;
        q->kern->dot(q->k, q->w + (size_t)b * q->row_bytes, q->row_bytes, (int)(e - b), xq,
                     y + b);
        if (q->bias)
            for (int64_t j = b; j < e; j++) y[j] += q->bias[j];
    }
}

typedef struct deq_job {
    const uint8_t *w;
    size_t row_bytes;
    em_dtype wt;
    int64_t k;
    float *out;
} deq_job;

static void deq_rows(void *user, int64_t b, int64_t e, int tid) {
    (void)tid;
    const deq_job *d = user;
    for (int64_t r = b; r < e; r++)
        em_dequantize(d->wt, d->w + (size_t)r * d->row_bytes, d->out + r * d->k, d->k);
}

static em_status qlin_gemm(const qlin *q) {
    int64_t rows = q->n < PANEL_ROWS ? q->n : PANEL_ROWS;
    float *panel = malloc((size_t)(rows * q->k) * sizeof *panel);
    if (!panel) return EM_ERR_OOM;
    em_status s = EM_OK;
    for (int64_t j0 = 0; j0 < q->n && !s; j0 += PANEL_ROWS) {
        int64_t nr = q->n - j0 < PANEL_ROWS ? q->n - j0 : PANEL_ROWS;
        deq_job d = {q->w + (size_t)j0 * q->row_bytes, q->row_bytes, q->wt, q->k, panel};
        em_parallel_for(nr, 4, deq_rows, &d);
        em_gemm_args g = {0};
        g.m = q->m, g.n = nr, g.k = q->k;
        g.dtype = EM_F32;
        g.a = q->x, g.a_rs = q->k, g.a_cs = 1;
        g.b = panel, g.b_rs = 1, g.b_cs = q->k; /* B = panel^T */
        g.c = q->y + j0, g.ldc = q->n;
        g.bias = q->bias ? q->bias + j0 : NULL;
        s = em_gemm(&g);
    }
    free(panel);
    return s;
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
    q.wt = w->dtype;
    q.w = em_tensor_ptr(w);
    q.row_bytes = em_dtype_nbytes(w->dtype, q.k);
    bool x_direct = x->dtype == EM_F32 && em_is_contiguous(x);
    float *xf = x_direct ? NULL : em_cpu_to_f32(x);
    float *bf = bias ? em_cpu_to_f32(bias) : NULL;
    float *yf = o->dtype == EM_F32 ? NULL : malloc((size_t)o->numel * sizeof *yf);
    void *xq = NULL;
    em_status s = EM_OK;
    if ((!x_direct && !xf) || (bias && !bf) || (o->dtype != EM_F32 && !yf)) {
        s = em_op_fail(a->ctx, EM_ERR_OOM, "out of memory for a quantized linear");
        goto done;
    }
    q.x = x_direct ? em_tensor_ptr(x) : xf;
    q.y = yf ? yf : em_tensor_ptr(o);
    q.bias = bf;
    q.kern = em_qdot_kernel_for(w->dtype);
    if (q.m <= QDOT_MAX_ROWS && q.kern) {
        q.xq_row = q.kern->x_row_bytes(q.k);
        xq = malloc(q.xq_row * (size_t)q.m);
        if (!xq) {
            s = em_op_fail(a->ctx, EM_ERR_OOM, "out of memory for a quantized linear");
            goto done;
        }
        for (int64_t m = 0; m < q.m; m++)
            q.kern->quantize_x(q.x + m * q.k, (uint8_t *)xq + (size_t)m * q.xq_row, q.k);
        q.xq = xq;
        em_parallel_for(q.n, q.kern->grain, qdot_chunk, &q);
    } else if ((s = qlin_gemm(&q)) != EM_OK) {
        s = em_op_fail(a->ctx, s, "out of memory for a quantized linear");
        goto done;
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

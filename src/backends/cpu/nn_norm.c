/*
 * Normalisation kernels: rms_norm (Llama/Qwen and Gemma forms), layer_norm, group_norm.
 *
 * Statistics are accumulated in double from f32 values (group norm's contiguous f32 / bf16
 * groups: f32 vector sums of x - x[0] over 1024-value blocks, the blocks added in double), so
 * they are at least as accurate as torch's f32 ones; everything else follows the reference's
 * f32 arithmetic and rounding points:
 *  - rms_norm, unit_offset = false (LlamaRMSNorm): h = x * rsqrt(mean(x^2) + eps) in f32,
 *    rounded to x's dtype, then weight * h rounded to x's dtype (two roundings in bf16/f16).
 *  - rms_norm, unit_offset = true (Gemma3RMSNorm): x * rsqrt(...) * (1 + weight) in f32, one
 *    rounding.
 *  - layer_norm / group_norm (F.layer_norm / F.group_norm): y = (x - mean) * (rstd * weight)
 *    + bias in f32, one rounding. (torch folds the mean into the bias, x * scale + shift, which
 *    cancels badly when |mean| >> std; centring first is more accurate and otherwise agrees.)
 * The output always has x's dtype (torch would promote bf16 x with an f32 weight to f32).
 */
#include <math.h>
#include <stdlib.h>

#include "backends/cpu/nn.h"
#include "core/bf16_inline.h"

#define ROW_PAR_ELEMS 16384 /* elements per parallel chunk, at least */
#define GN_CHUNK 4096       /* group_norm streams a group through buffers of this size */
#define GN_KEEP 65536       /* a group of at most this many values stays widened in f32 between
                               the statistics and the normalisation (256 KB: in L2) */

/* A 1-D parameter as contiguous f32 plus `add` (a NULL parameter gives `fill`). Caller frees. */
static float *param_f32(const em_ew_isa *isa, const em_tensor *p, int64_t n, float fill,
                        float add) {
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) return NULL;
    if (p) {
        nn_load_f32(isa, nn_at(nn_base(p), p->dtype, p->offset), p->dtype, 1, p->shape, p->strides,
                    0, n, v);
        for (int64_t i = 0; i < n; i++) v[i] += add;
    } else {
        for (int64_t i = 0; i < n; i++) v[i] = fill;
    }
    return v;
}

/* ---- row-wise norms (last dim) ---- */

typedef struct row_job {
    const em_ew_isa *isa;
    const em_nn_isa *nn;
    const em_tensor *x;
    em_tensor *out;
    const float *w, *b; /* f32 [n] (w may be 1 + weight), b may be NULL */
    bool has_w;
    int64_t n;
    float eps;
    int kind; /* 0 rms (Llama), 1 rms (Gemma), 2 layer norm */
    atomic_bool oom;
} row_job;

static void row_chunk(void *user, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    row_job *j = user;
    const em_tensor *x = j->x;
    int64_t n = j->n;
    float *buf = malloc((size_t)(n ? n : 1) * sizeof *buf);
    if (!buf) {
        atomic_store(&j->oom, true);
        return;
    }
    em_dtype dt = x->dtype;
    const void *xb = nn_at(nn_base(x), dt, x->offset);
    char *ob = em_tensor_ptr(j->out);
    size_t es = em_esize(dt);
    for (int64_t r = r0; r < r1; r++) {
        nn_load_f32(j->isa, xb, dt, x->ndim, x->shape, x->strides, r * n, n, buf);
        if (j->kind == 2) {
            double s = 0, q = 0;
            j->nn->moments(buf, n, 0.0, &s, &q);
            double mean = n ? s / (double)n : 0;
            s = q = 0;
            j->nn->moments(buf, n, mean, &s, &q);
            double var = n ? (q - s * s / (double)n) / (double)n : 0;
            float rstd = (float)(1.0 / sqrt(var + (double)j->eps));
            j->nn->norm_apply(buf, n, (float)mean, rstd, j->w, j->b);
        } else {
            double s = 0, q = 0;
            j->nn->moments(buf, n, 0.0, &s, &q);
            float var = n ? (float)(q / (double)n) : 0.0f;
            float r_ = 1.0f / sqrtf(var + j->eps);
            j->nn->scale(buf, n, r_);
            if (j->kind == 0) {
                /* hidden_states.to(input_dtype) before the weight */
                if (j->isa->round[dt]) j->isa->round[dt](buf, n);
                if (j->has_w) j->nn->mul(buf, j->w, n);
            } else {
                j->nn->mul(buf, j->w, n);
            }
        }
        j->isa->store[dt](ob + (size_t)(r * n) * es, buf, n);
    }
    free(buf);
}

static em_status row_norm(const em_kernel_args *a, int kind, const em_tensor *w,
                          const em_tensor *b, double eps) {
    const em_tensor *x = a->in[0];
    int64_t n = x->shape[x->ndim - 1];
    int64_t rows = n ? x->numel / n : 0;
    row_job j = {.isa = em_ew_isa_get(), .nn = em_nn_isa_get(), .x = x, .out = a->out[0],
                 .has_w = w != NULL, .n = n, .eps = (float)eps, .kind = kind};
    atomic_init(&j.oom, false);
    /* Gemma multiplies by (1 + weight) in f32 */
    float *wf = param_f32(j.isa, w, n, 1.0f, kind == 1 ? 1.0f : 0.0f);
    float *bf = b ? param_f32(j.isa, b, n, 0.0f, 0.0f) : NULL;
    if (!wf || (b && !bf)) {
        free(wf);
        free(bf);
        return em_op_fail(a->ctx, EM_ERR_OOM, "cannot allocate %lld parameter values",
                          (long long)n);
    }
    j.w = wf;
    j.b = bf;
    if (rows > 0 && n > 0) {
        int64_t grain = ROW_PAR_ELEMS / n + 1;
        em_parallel_for(rows, grain, row_chunk, &j);
    }
    free(wf);
    free(bf);
    if (atomic_load(&j.oom))
        return em_op_fail(a->ctx, EM_ERR_OOM, "cannot allocate a row buffer of %lld values",
                          (long long)n);
    return EM_OK;
}

static em_status k_rms_norm(const em_kernel_args *a) {
    bool unit = a->attrs[1].i != 0;
    return row_norm(a, unit ? 1 : 0, a->n_in > 1 ? a->in[1] : NULL, NULL, a->attrs[0].f);
}

static em_status k_layer_norm(const em_kernel_args *a) {
    return row_norm(a, 2, a->n_in > 1 ? a->in[1] : NULL, a->n_in > 2 ? a->in[2] : NULL,
                    a->attrs[0].f);
}

/* ---- group norm: x[N, C, *] ---- */

typedef struct gn_job {
    const em_ew_isa *isa;
    const em_nn_isa *nn;
    const em_tensor *x;
    em_tensor *out;
    const float *w, *b; /* f32 [C] */
    int64_t c, g, cg, s; /* channels, groups, channels per group, spatial size */
    float eps;
    atomic_bool oom;
} gn_job;

/* the first value of group item it (batch it / g, group it % g) */
static const void *gn_group(const gn_job *j, int64_t it) {
    const em_tensor *x = j->x;
    int64_t off = x->offset + it / j->g * x->strides[0] + it % j->g * j->cg * x->strides[1];
    return nn_at(nn_base(x), x->dtype, off);
}

/* Contiguous f32 / bf16 groups, read in their own dtype: one pass for the statistics, one to
 * normalise (the group, at most a few hundred KB at the UNet's shapes, is then still in L2),
 * no widened copy. sc: 2 * cg floats. */
static void gn_direct(const gn_job *j, int src, int64_t i0, int64_t i1, float *sc) {
    const em_tensor *x = j->x;
    em_dtype dt = x->dtype;
    size_t es = em_esize(dt);
    int64_t total = j->cg * j->s;
    float *sh = sc + j->cg;
    for (int64_t it = i0; it < i1; it++) {
        int64_t n = it / j->g, g = it % j->g;
        const void *gb = gn_group(j, it);
        /* shifted sums keep the variance exact enough when |mean| >> std */
        float shift = dt == EM_F32 ? *(const float *)gb
                                   : em_bf16_to_f32_inline(*(const uint16_t *)gb);
        double s = 0, q = 0;
        j->nn->gn_moments[src](gb, total, shift, &s, &q);
        double mean_s = s / (double)total;
        double var = q / (double)total - mean_s * mean_s;
        if (var < 0) var = 0;
        float mean = (float)(mean_s + shift);
        float rstd = (float)(1.0 / sqrt(var + (double)j->eps));
        for (int64_t cc = 0; cc < j->cg; cc++) {
            sc[cc] = rstd * j->w[g * j->cg + cc];
            sh[cc] = j->b[g * j->cg + cc];
        }
        char *ob = (char *)em_tensor_ptr(j->out) + (size_t)((n * j->c + g * j->cg) * j->s) * es;
        j->nn->gn_apply[src](gb, ob, j->cg, j->s, mean, sc, sh);
    }
}

static void gn_chunk(void *user, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    gn_job *j = user;
    const em_tensor *x = j->x;
    int64_t total = j->cg * j->s;
    bool keep = total <= GN_KEEP; /* the group loaded (and widened) once, not twice */
    em_dtype dt = x->dtype;
    size_t es = em_esize(dt);
    /* a group is the sub-array [cg, *spatial] of x */
    int nd = x->ndim - 1;
    int64_t shape[EM_MAX_DIMS] = {0}, strides[EM_MAX_DIMS] = {0};
    for (int d = 0; d < nd; d++) {
        shape[d] = x->shape[d + 1];
        strides[d] = x->strides[d + 1];
    }
    shape[0] = j->cg;
    /* a contiguous group (the usual case) is one run of cg * s values: loaded in GN_CHUNK
     * pieces, not row by row (rows of 8 to 64 values at the UNet's shapes cost more in calls
     * than in bytes) */
    bool contiguous = strides[nd - 1] == 1;
    for (int d = nd - 2; d >= 0 && contiguous; d--)
        contiguous = strides[d] == strides[d + 1] * shape[d + 1];
    if (contiguous) {
        shape[0] = j->cg * j->s;
        strides[0] = 1;
        nd = 1;
    }
    int src = dt == EM_F32 ? NN_SRC_F32 : dt == EM_BF16 ? NN_SRC_BF16 : -1;
    bool direct = contiguous && src >= 0; /* gn_direct needs only the channels' scale, shift */
    float *buf = malloc((size_t)(direct ? 2 * j->cg : keep && total > GN_CHUNK ? total : GN_CHUNK) *
                        sizeof *buf);
    if (!buf) {
        atomic_store(&j->oom, true);
        return;
    }
    if (direct) {
        gn_direct(j, src, i0, i1, buf);
        free(buf);
        return;
    }
    for (int64_t it = i0; it < i1; it++) {
        int64_t n = it / j->g, g = it % j->g;
        int64_t off = x->offset + n * x->strides[0] + g * j->cg * x->strides[1];
        const void *gb = nn_at(nn_base(x), dt, off);
        double s = 0, q = 0, shift = 0;
        for (int64_t p = 0; p < total; p += GN_CHUNK) {
            int64_t len = total - p < GN_CHUNK ? total - p : GN_CHUNK;
            float *v = keep ? buf + p : buf;
            nn_load_f32(j->isa, gb, dt, nd, shape, strides, p, len, v);
            if (p == 0) shift = v[0]; /* shifted sums keep the variance exact enough */
            j->nn->moments(v, len, shift, &s, &q);
        }
        double mean_s = total ? s / (double)total : 0;
        double var = total ? q / (double)total - mean_s * mean_s : 0;
        if (var < 0) var = 0;
        float mean = (float)(mean_s + shift);
        float rstd = (float)(1.0 / sqrt(var + (double)j->eps));
        char *ob = (char *)em_tensor_ptr(j->out) + (size_t)((n * j->c + g * j->cg) * j->s) * es;
        /* the group's values in GN_CHUNK pieces across its channels (each channel's own scale
         * and shift), the output group contiguous */
        for (int64_t p = 0; p < total; p += GN_CHUNK) {
            int64_t len = total - p < GN_CHUNK ? total - p : GN_CHUNK;
            float *v = keep ? buf + p : buf;
            if (!keep) nn_load_f32(j->isa, gb, dt, nd, shape, strides, p, len, v);
            for (int64_t i = 0; i < len;) {
                int64_t cc = (p + i) / j->s, end = (cc + 1) * j->s - p;
                int64_t ch = g * j->cg + cc;
                float sc = rstd * j->w[ch], sh = j->b[ch];
                if (end > len) end = len;
                for (; i < end; i++) v[i] = (v[i] - mean) * sc + sh;
            }
            j->isa->store[dt](ob + (size_t)p * es, v, len);
        }
    }
    free(buf);
}

static em_status k_group_norm(const em_kernel_args *a) {
    const em_tensor *x = a->in[0];
    gn_job j = {.isa = em_ew_isa_get(), .nn = em_nn_isa_get(), .x = x, .out = a->out[0]};
    atomic_init(&j.oom, false);
    j.c = x->shape[1];
    j.g = a->attrs[0].i;
    j.cg = j.c / j.g;
    j.eps = (float)a->attrs[1].f;
    j.s = 1;
    for (int d = 2; d < x->ndim; d++) j.s *= x->shape[d];
    const em_tensor *w = a->n_in > 1 ? a->in[1] : NULL, *b = a->n_in > 2 ? a->in[2] : NULL;
    float *wf = param_f32(j.isa, w, j.c, 1.0f, 0.0f), *bf = param_f32(j.isa, b, j.c, 0.0f, 0.0f);
    if (!wf || !bf) {
        free(wf);
        free(bf);
        return em_op_fail(a->ctx, EM_ERR_OOM, "cannot allocate %lld parameter values",
                          (long long)j.c);
    }
    j.w = wf;
    j.b = bf;
    int64_t items = x->shape[0] * j.g;
    int64_t per = j.cg * j.s;
    if (items > 0 && per > 0) em_parallel_for(items, ROW_PAR_ELEMS / per + 1, gn_chunk, &j);
    free(wf);
    free(bf);
    if (atomic_load(&j.oom)) return em_op_fail(a->ctx, EM_ERR_OOM, "cannot allocate a buffer");
    return EM_OK;
}

void em_cpu_register_nn_norm(em_kernel_fn *k) {
    k[EM_OP_RMS_NORM] = k_rms_norm;
    k[EM_OP_LAYER_NORM] = k_layer_norm;
    k[EM_OP_GROUP_NORM] = k_group_norm;
}

/*
 * Reductions (sum, mean, prod, max, min, var, argmax, argmin), softmax, log_softmax and cumsum.
 *
 * A reduction is planned as (kept dims) x (reduced dims) over the input's strides; each output
 * element folds a state over its reduced elements, one innermost run at a time. When there are
 * fewer outputs than threads the reduced space itself is split and the partial states combined,
 * so a full reduction of a large tensor runs on every core.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/reduce_funcs.h"
#include "core/rules.h"

EM_CPU_ISA_TABLE(em_red_isa, em_red_isa_get, [EM_ISA_GENERIC] = em_red_fill_generic,
                 [EM_ISA_AVX2] = EM_ISA_X86(em_red_fill_avx2),
                 [EM_ISA_AVX512] = EM_ISA_X86(em_red_fill_avx512),
                 [EM_ISA_NEON] = EM_ISA_ARM(em_red_fill_neon))

typedef struct red_state {
    double s, q;  /* sum (or product, or best value) and sum of squares */
    int64_t i;    /* integer sum / product / best value */
    int64_t idx;  /* arg index of the best value */
    int64_t n;    /* elements folded */
    bool nan;     /* best value is NaN (max/min/arg) */
} red_state;

typedef struct red_plan {
    em_op_id op;
    const em_tensor *x;
    bool is_float;
    int nk, nr;
    int64_t kshape[EM_MAX_DIMS], kstride[EM_MAX_DIMS];
    int64_t rshape[EM_MAX_DIMS], rstride[EM_MAX_DIMS];
    int64_t n_out, n_red;
    int64_t correction;
} red_plan;

static void state_init(const red_plan *p, red_state *s) {
    memset(s, 0, sizeof *s);
    if (p->op == EM_OP_PROD) {
        s->s = 1;
        s->i = 1;
    }
    s->idx = -1;
}

static inline bool better(em_op_id op, double v, double best) {
    return (op == EM_OP_MAX || op == EM_OP_ARGMAX) ? v > best : v < best;
}

/* Folds a strided run of n elements starting at element offset `off`; `pos0` is the reduced
 * linear index of the run's first element (for arg ops; the run is the innermost reduced dim). */
static void fold_run(const red_plan *p, red_state *s, int64_t off, int64_t stride, int64_t n,
                     int64_t pos0) {
    const em_tensor *x = p->x;
    const char *base = x->storage->data;
    em_op_id op = p->op;
    if (!p->is_float) {
        for (int64_t k = 0; k < n; k++) {
            int64_t o = off + k * stride;
            int64_t v = x->dtype == EM_I64 ? ((const int64_t *)base)[o]
                      : x->dtype == EM_I32 ? ((const int32_t *)base)[o]
                                           : (int64_t)em_load_f64(base, x->dtype, o);
            switch (op) {
            case EM_OP_SUM: s->i = (int64_t)((uint64_t)s->i + (uint64_t)v); break;
            case EM_OP_PROD: s->i = (int64_t)((uint64_t)s->i * (uint64_t)v); break;
            default:
                if (s->n == 0 || ((op == EM_OP_MAX || op == EM_OP_ARGMAX) ? v > s->i : v < s->i)) {
                    s->i = v;
                    s->idx = pos0 + k;
                }
            }
            s->n++;
        }
        return;
    }
    if ((op == EM_OP_SUM || op == EM_OP_MEAN) && stride == 1 && x->dtype == EM_F32) {
        s->s += em_red_isa_get()->sum_f32((const float *)base + off, n);
        s->n += n;
        return;
    }
    if ((op == EM_OP_MAX || op == EM_OP_MIN) && stride == 1 && x->dtype == EM_F32 && n > 0) {
        bool nan = false;
        const em_red_isa *ri = em_red_isa_get();
        float best = op == EM_OP_MAX ? ri->max_f32((const float *)base + off, n, &nan)
                                     : ri->min_f32((const float *)base + off, n, &nan);
        if (s->n == 0 || better(op, best, s->s)) s->s = best;
        s->nan |= nan;
        s->n += n;
        return;
    }
    for (int64_t k = 0; k < n; k++) {
        double v = em_load_f64(base, x->dtype, off + k * stride);
        switch (op) {
        case EM_OP_SUM:
        case EM_OP_MEAN: s->s += v; break;
        case EM_OP_VAR:
            s->s += v;
            s->q += v * v;
            break;
        case EM_OP_PROD: s->s *= v; break;
        default: /* max, min, argmax, argmin: NaN wins, first occurrence kept */
            if (s->nan) break;
            if (v != v) {
                s->nan = true;
                s->s = v;
                s->idx = pos0 + k;
            } else if (s->n == 0 || better(op, v, s->s)) {
                s->s = v;
                s->idx = pos0 + k;
            }
        }
        s->n++;
    }
}

/* Combines b into a (b covers reduced positions after a's). */
static void combine(const red_plan *p, red_state *a, const red_state *b) {
    if (b->n == 0) return;
    if (a->n == 0) {
        *a = *b;
        return;
    }
    em_op_id op = p->op;
    if (!p->is_float) {
        if (op == EM_OP_SUM) a->i = (int64_t)((uint64_t)a->i + (uint64_t)b->i);
        else if (op == EM_OP_PROD) a->i = (int64_t)((uint64_t)a->i * (uint64_t)b->i);
        else if ((op == EM_OP_MAX || op == EM_OP_ARGMAX) ? b->i > a->i : b->i < a->i) {
            a->i = b->i;
            a->idx = b->idx;
        }
    } else if (op == EM_OP_SUM || op == EM_OP_MEAN || op == EM_OP_VAR) {
        a->s += b->s;
        a->q += b->q;
    } else if (op == EM_OP_PROD) {
        a->s *= b->s;
    } else if (!a->nan && (b->nan || better(op, b->s, a->s))) {
        a->s = b->s;
        a->idx = b->idx;
        a->nan = b->nan;
    }
    a->n += b->n;
}

/* Folds reduced elements [rb, re) (linear over the reduced dims) of output `o`. */
static void fold_range(const red_plan *p, int64_t o, int64_t rb, int64_t re, red_state *s) {
    int64_t off = p->x->offset;
    int64_t rem = o;
    for (int d = p->nk - 1; d >= 0; d--) {
        off += (rem % p->kshape[d]) * p->kstride[d];
        rem /= p->kshape[d];
    }
    if (p->nr == 0) {
        fold_run(p, s, off, 1, 1, 0);
        return;
    }
    int64_t inner = p->rshape[p->nr - 1], ist = p->rstride[p->nr - 1];
    int64_t pos = rb;
    while (pos < re) {
        int64_t ii = pos % inner, r = pos / inner, roff = off;
        for (int d = p->nr - 2; d >= 0; d--) {
            roff += (r % p->rshape[d]) * p->rstride[d];
            r /= p->rshape[d];
        }
        int64_t len = inner - ii < re - pos ? inner - ii : re - pos;
        fold_run(p, s, roff + ii * ist, ist, len, pos);
        pos += len;
    }
}

static void write_out(const red_plan *p, em_tensor *out, int64_t o, const red_state *s) {
    void *dst = em_tensor_ptr(out);
    em_op_id op = p->op;
    if (op == EM_OP_ARGMAX || op == EM_OP_ARGMIN) {
        ((int64_t *)dst)[o] = s->idx < 0 ? 0 : s->idx;
        return;
    }
    if (!p->is_float) {
        em_dtype t = out->dtype;
        if (t == EM_I64) ((int64_t *)dst)[o] = s->i;
        else em_store_f64(dst, t, o, (double)s->i);
        return;
    }
    double v = s->s;
    if (s->nan) v = NAN;
    if (op == EM_OP_MEAN) v = s->n ? s->s / (double)s->n : NAN;
    if (op == EM_OP_VAR) {
        double n = (double)s->n, dof = n - (double)p->correction;
        double m2 = s->q - s->s * s->s / (n > 0 ? n : 1);
        if (m2 < 0) m2 = 0;
        v = dof > 0 ? m2 / dof : (dof == 0 ? (m2 == 0 ? NAN : INFINITY) : NAN);
        if (s->n == 0) v = NAN;
    }
    em_store_f64(dst, out->dtype, o, v);
}

typedef struct red_job {
    const red_plan *p;
    em_tensor *out;
    red_state *partials; /* split-reduction mode */
    int64_t parts;
} red_job;

static void per_output(void *user, int64_t b, int64_t e, int tid) {
    (void)tid;
    red_job *j = user;
    for (int64_t o = b; o < e; o++) {
        red_state s;
        state_init(j->p, &s);
        fold_range(j->p, o, 0, j->p->n_red, &s);
        write_out(j->p, j->out, o, &s);
    }
}

static void per_part(void *user, int64_t b, int64_t e, int tid) {
    (void)tid;
    red_job *j = user;
    for (int64_t w = b; w < e; w++) {
        int64_t o = w / j->parts, part = w % j->parts;
        int64_t n = j->p->n_red, rb = n * part / j->parts, re = n * (part + 1) / j->parts;
        red_state *s = &j->partials[w];
        state_init(j->p, s);
        fold_range(j->p, o, rb, re, s);
    }
}

/*
 * sum/mean over a block of dims that has contiguous dims after it (x [O, R, I] -> [O, I]): whole
 * rows of I are added into f32 accumulators (vectorised), instead of folding one output at a
 * time with stride I. The MoE combine (sum over the top-k slots) and mean pooling take this path.
 * Returns EM_UNSUPPORTED when the shape is not of that form.
 */
typedef struct mid_job {
    const em_tensor *x;
    em_tensor *out;
    int64_t o, r, i;
    bool mean;
} mid_job;

static void mid_body(void *user, int64_t b, int64_t e, int tid) {
    (void)tid;
    mid_job *j = user;
    float *acc = malloc((size_t)j->i * sizeof *acc), *row = malloc((size_t)j->i * sizeof *row);
    if (!acc || !row) {
        free(acc);
        free(row);
        return;
    }
    const char *xb = em_tensor_ptr(j->x);
    char *ob = em_tensor_ptr(j->out);
    size_t es = em_esize(j->x->dtype);
    for (int64_t o = b; o < e; o++) {
        for (int64_t k = 0; k < j->i; k++) acc[k] = 0;
        for (int64_t r = 0; r < j->r; r++) {
            const char *src = xb + (size_t)((o * j->r + r) * j->i) * es;
            const float *v = (const float *)src;
            if (j->x->dtype != EM_F32) {
                em_convert(src, j->x->dtype, row, EM_F32, j->i);
                v = row;
            }
            for (int64_t k = 0; k < j->i; k++) acc[k] += v[k];
        }
        if (j->mean)
            for (int64_t k = 0; k < j->i; k++) acc[k] /= (float)j->r;
        em_convert(acc, EM_F32, ob + (size_t)(o * j->i) * em_esize(j->out->dtype), j->out->dtype,
                   j->i);
    }
    free(acc);
    free(row);
}

static em_status sum_middle(em_ctx *c, const em_tensor *x, em_tensor *out, em_op_id op,
                            const bool red[EM_MAX_DIMS]) {
    (void)c;
    if ((op != EM_OP_SUM && op != EM_OP_MEAN) || !em_dtype_is_float(x->dtype) ||
        x->dtype == EM_F64 || !em_is_contiguous(x) || x->ndim < 2)
        return EM_ERR_UNSUPPORTED;
    int first = -1, last = -1;
    for (int d = 0; d < x->ndim; d++)
        if (red[d]) {
            if (first < 0) first = d;
            else if (last != d - 1) return EM_ERR_UNSUPPORTED; /* not one block */
            last = d;
        }
    if (first < 0 || last == x->ndim - 1) return EM_ERR_UNSUPPORTED; /* needs inner dims */
    mid_job j = {x, out, 1, 1, 1, op == EM_OP_MEAN};
    for (int d = 0; d < x->ndim; d++) {
        if (d < first) j.o *= x->shape[d];
        else if (d <= last) j.r *= x->shape[d];
        else j.i *= x->shape[d];
    }
    if (j.i < 16 || j.r == 0) return EM_ERR_UNSUPPORTED; /* short rows: the general path */
    int64_t grain = j.r * j.i >= 32768 ? 1 : 32768 / (j.r * j.i);
    em_parallel_for(j.o, grain, mid_body, &j);
    return EM_OK;
}

static em_status reduce_kernel(const em_kernel_args *a) {
    const em_tensor *x = a->in[0];
    em_tensor *out = a->out[0];
    red_plan p;
    memset(&p, 0, sizeof p);
    p.op = a->op->id;
    p.x = x;
    p.is_float = em_dtype_is_float(x->dtype);
    bool red[EM_MAX_DIMS] = {false};
    if (p.op == EM_OP_ARGMAX || p.op == EM_OP_ARGMIN) {
        if (a->attrs[2].i) { /* flattened: reduce all dims, index in row-major order */
            for (int d = 0; d < x->ndim; d++) red[d] = true;
        } else if (x->ndim) {
            int64_t d = a->attrs[0].i;
            red[d < 0 ? d + x->ndim : d] = true;
        }
    } else {
        if (!em_rule_reduce_dims(a->ctx, x, &a->attrs[0], red)) return EM_ERR_INVALID_ARG;
        if (p.op == EM_OP_VAR) p.correction = a->attrs[2].i;
    }
    p.n_out = 1;
    p.n_red = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (red[d]) {
            p.rshape[p.nr] = x->shape[d];
            p.rstride[p.nr++] = x->strides[d];
            p.n_red *= x->shape[d];
        } else {
            p.kshape[p.nk] = x->shape[d];
            p.kstride[p.nk++] = x->strides[d];
            p.n_out *= x->shape[d];
        }
    }
    if (p.n_out == 0) return EM_OK;
    if (sum_middle(a->ctx, x, out, p.op, red) == EM_OK) return EM_OK;
    int threads = em_num_threads();
    if (p.n_out < threads && p.n_red >= (1 << 16)) {
        red_job j = {&p, out, NULL, threads * 4};
        int64_t work = p.n_out * j.parts;
        j.partials = malloc((size_t)work * sizeof *j.partials);
        if (!j.partials) return em_op_fail(a->ctx, EM_ERR_OOM, "no memory for partial sums");
        em_parallel_for(work, 1, per_part, &j);
        for (int64_t o = 0; o < p.n_out; o++) {
            red_state s = j.partials[o * j.parts];
            for (int64_t k = 1; k < j.parts; k++) combine(&p, &s, &j.partials[o * j.parts + k]);
            write_out(&p, out, o, &s);
        }
        free(j.partials);
        return EM_OK;
    }
    red_job j = {&p, out, NULL, 0};
    int64_t grain = p.n_red >= 4096 ? 1 : 4096 / (p.n_red ? p.n_red : 1);
    em_parallel_for(p.n_out, grain, per_output, &j);
    return EM_OK;
}

/* ---- softmax, log_softmax, cumsum: independent rows along one dim ---- */

typedef struct row_plan {
    const em_tensor *x;
    em_tensor *out;
    int dim;
    int64_t len, xstride, ostride, rows;
    em_op_id op;
} row_plan;

/* Element offsets of row r in x and in the (contiguous) output. */
static void row_offsets(const row_plan *p, int64_t r, int64_t *xo, int64_t *oo) {
    const em_tensor *x = p->x;
    int64_t xoff = x->offset, ooff = 0;
    for (int d = x->ndim - 1; d >= 0; d--) {
        if (d == p->dim) continue;
        int64_t i = r % x->shape[d];
        r /= x->shape[d];
        xoff += i * x->strides[d];
        ooff += i * p->out->strides[d];
    }
    *xo = xoff;
    *oo = ooff;
}

static void softmax_rows(void *user, int64_t b, int64_t e, int tid) {
    (void)tid;
    row_plan *p = user;
    int64_t n = p->len;
    float *buf = malloc((size_t)(n ? n : 1) * sizeof *buf);
    if (!buf) return;
    const char *xb = p->x->storage->data;
    char *ob = em_tensor_ptr(p->out);
    for (int64_t r = b; r < e; r++) {
        int64_t xo, oo;
        row_offsets(p, r, &xo, &oo);
        if (p->x->dtype == EM_F32 && p->xstride == 1)
            memcpy(buf, (const float *)xb + xo, (size_t)n * 4);
        else
            for (int64_t k = 0; k < n; k++)
                buf[k] = (float)em_load_f64(xb, p->x->dtype, xo + k * p->xstride);
        if (p->op == EM_OP_SOFTMAX)
            em_red_isa_get()->softmax_f32(buf, n);
        else
            em_red_isa_get()->log_softmax_f32(buf, n);
        if (p->out->dtype == EM_F32 && p->ostride == 1)
            memcpy((float *)ob + oo, buf, (size_t)n * 4);
        else
            for (int64_t k = 0; k < n; k++)
                em_store_f64(ob, p->out->dtype, oo + k * p->ostride, buf[k]);
    }
    free(buf);
}

static void cumsum_rows(void *user, int64_t b, int64_t e, int tid) {
    (void)tid;
    row_plan *p = user;
    const char *xb = p->x->storage->data;
    char *ob = em_tensor_ptr(p->out);
    bool fl = em_dtype_is_float(p->x->dtype);
    for (int64_t r = b; r < e; r++) {
        int64_t xo, oo;
        row_offsets(p, r, &xo, &oo);
        double acc = 0;
        int64_t iacc = 0;
        for (int64_t k = 0; k < p->len; k++) {
            if (fl) {
                acc += em_load_f64(xb, p->x->dtype, xo + k * p->xstride);
                em_store_f64(ob, p->out->dtype, oo + k * p->ostride, acc);
            } else {
                const em_tensor *x = p->x;
                int64_t v = x->dtype == EM_I64 ? ((const int64_t *)xb)[xo + k * p->xstride]
                                               : (int64_t)em_load_f64(xb, x->dtype,
                                                                      xo + k * p->xstride);
                iacc = (int64_t)((uint64_t)iacc + (uint64_t)v);
                ((int64_t *)ob)[oo + k * p->ostride] = iacc;
            }
        }
    }
}

static em_status row_kernel(const em_kernel_args *a) {
    const em_tensor *x = a->in[0];
    row_plan p = {x, a->out[0], 0, 1, 0, 0, 1, a->op->id};
    if (x->ndim) {
        int64_t d = a->attrs[0].i;
        p.dim = (int)(d < 0 ? d + x->ndim : d);
        p.len = x->shape[p.dim];
        p.xstride = x->strides[p.dim];
        p.ostride = p.out->strides[p.dim];
    }
    p.rows = p.len ? x->numel / p.len : 0;
    if (p.rows == 0) return EM_OK;
    int64_t grain = p.len >= 8192 ? 1 : 8192 / p.len;
    em_parallel_for(p.rows, grain, a->op->id == EM_OP_CUMSUM ? cumsum_rows : softmax_rows, &p);
    return EM_OK;
}

void em_cpu_register_reduce(em_kernel_fn *k) {
    k[EM_OP_SUM] = reduce_kernel;
    k[EM_OP_MEAN] = reduce_kernel;
    k[EM_OP_MAX] = reduce_kernel;
    k[EM_OP_MIN] = reduce_kernel;
    k[EM_OP_PROD] = reduce_kernel;
    k[EM_OP_VAR] = reduce_kernel;
    k[EM_OP_ARGMAX] = reduce_kernel;
    k[EM_OP_ARGMIN] = reduce_kernel;
    k[EM_OP_SOFTMAX] = row_kernel;
    k[EM_OP_LOG_SOFTMAX] = row_kernel;
    k[EM_OP_CUMSUM] = row_kernel;
}

/*
 * Reductions, softmax, log_softmax and cumsum in StableHLO. Floating inputs accumulate in f32
 * (bf16, f16, f32) or f64; integers and bool in i64, as the CPU's result dtypes say. max/min
 * propagate NaN; argmax/argmin return the first index of the best value (NaN counts as best).
 */
#include <math.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"

/* Normalised reduction dims of attribute a (empty: all). */
static int red_dims(const em_attr *a, int nd, int *dims) {
    bool red[EM_MAX_DIMS] = {false};
    if (a->n == 0)
        for (int i = 0; i < nd; i++) red[i] = true;
    for (int i = 0; i < a->n; i++) {
        int64_t d = a->v[i] < 0 ? a->v[i] + nd : a->v[i];
        if (d >= 0 && d < nd) red[d] = true;
    }
    int n = 0;
    for (int i = 0; i < nd; i++)
        if (red[i]) dims[n++] = i;
    return n;
}

static int one_dim(int64_t d, int nd) {
    if (nd == 0) return 0;
    return (int)(d < 0 ? d + nd : d);
}

static int64_t count_of(const sh_type *t, const int *dims, int n) {
    int64_t c = 1;
    for (int i = 0; i < n; i++) c *= t->d[dims[i]];
    return c;
}

sh_val pj_reduce_nan(const pj_plugin *pl, sh_b *b, sh_val x, sh_val init, const int *dims, int n,
                     bool mx) {
    if (!pl || strcmp(pl->platform, "tpu"))
        return sh_reduce(b, x, init, dims, n, mx ? "max_nan" : "min_nan");
    /* whatever maximum does with a NaN, a NaN in a row makes that row's sum of NaNs NaN, and
     * the select keeps the reduce's result (-0.0 included) elsewhere */
    sh_val r = sh_reduce(b, x, init, dims, n, mx ? "maximum" : "minimum");
    sh_val nans = sh_select(b, sh_cmp(b, "NE", x, x), x, sh_zeros_like(b, x));
    sh_val ns = sh_reduce(b, nans, sh_const(b, init.t, 0), dims, n, "add");
    return sh_select(b, sh_cmp(b, "NE", ns, ns), ns, r);
}

static em_status emit_reduce(pj_emit *e) {
    sh_b *b = e->b;
    em_op_id op = e->op->id;
    em_dtype xd = e->in_dt[0], od = e->out_meta[0].dtype;
    sh_val x = e->in[0];
    int dims[EM_MAX_DIMS];
    int nd = red_dims(&e->attrs[0], x.t.nd, dims);
    sh_scalar_ty(SH_F32);
    if (op == EM_OP_MAX || op == EM_OP_MIN) {
        bool mx = op == EM_OP_MAX;
        if (xd == EM_BOOL) {
            sh_val init = sh_const(b, sh_scalar_ty(SH_I1), mx ? 0 : 1);
            e->out[0] = sh_reduce(b, x, init, dims, nd, mx ? "or" : "and");
            return EM_OK;
        }
        sh_elem el = x.t.e;
        sh_val init;
        if (sh_elem_is_float(el)) {
            init = sh_const(b, sh_scalar_ty(el), mx ? -INFINITY : INFINITY);
        } else {
            int64_t lo = el == SH_I64 ? INT64_MIN : el == SH_I32 ? INT32_MIN : el == SH_I16 ? INT16_MIN
                       : el == SH_I8 ? INT8_MIN : 0;
            int64_t hi = el == SH_I64 ? INT64_MAX : el == SH_I32 ? INT32_MAX : el == SH_I16 ? INT16_MAX
                       : el == SH_I8 ? INT8_MAX : 255;
            init = sh_const_i(b, sh_scalar_ty(el), mx ? lo : hi);
        }
        e->out[0] = sh_elem_is_float(el) ? pj_reduce_nan(e->pl, b, x, init, dims, nd, mx)
                                         : sh_reduce(b, x, init, dims, nd, mx ? "maximum" : "minimum");
        return EM_OK;
    }
    sh_elem ct = pj_ct(em_dtype_is_float(xd) ? xd : EM_I64);
    sh_val xc = sh_convert(b, x, ct);
    sh_type st = sh_scalar_ty(ct);
    if (op == EM_OP_SUM || op == EM_OP_MEAN) {
        sh_val s = sh_reduce(b, xc, sh_const(b, st, 0), dims, nd, "add");
        if (op == EM_OP_MEAN)
            s = sh_bin(b, "divide", s, sh_const(b, s.t, (double)count_of(&x.t, dims, nd)));
        e->out[0] = sh_convert(b, s, sh_elem_of(od));
    } else if (op == EM_OP_PROD) {
        e->out[0] = sh_convert(b, sh_reduce(b, xc, sh_const(b, st, 1), dims, nd, "multiply"),
                               sh_elem_of(od));
    } else { /* VAR: two passes (mean, then squared deviations) */
        int64_t n = count_of(&x.t, dims, nd);
        double dof = (double)n - (double)e->attrs[2].i;
        sh_val s = sh_reduce(b, xc, sh_const(b, st, 0), dims, nd, "add");
        sh_val mean = sh_bin(b, "divide", s, sh_const(b, s.t, (double)n));
        /* back to x's rank: the kept dims keep their order */
        int map[EM_MAX_DIMS], k = 0;
        bool red[EM_MAX_DIMS] = {false};
        for (int i = 0; i < nd; i++) red[dims[i]] = true;
        for (int i = 0; i < x.t.nd; i++)
            if (!red[i]) map[k++] = i;
        sh_val mb = sh_bcast_in_dim(b, mean, map, x.t.nd, x.t.d);
        sh_val dv = sh_bin(b, "subtract", xc, mb);
        sh_val m2 = sh_reduce(b, sh_bin(b, "multiply", dv, dv), sh_const(b, st, 0), dims, nd, "add");
        sh_val v = dof < 0 ? sh_const(b, m2.t, NAN) : sh_bin(b, "divide", m2, sh_const(b, m2.t, dof));
        e->out[0] = sh_convert(b, v, sh_elem_of(od));
    }
    return EM_OK;
}

static em_status emit_arg(pj_emit *e) {
    sh_b *b = e->b;
    sh_val x = e->in[0];
    em_dtype xd = e->in_dt[0];
    if (xd == EM_BOOL) x = sh_convert(b, x, SH_I32);
    else if (xd == EM_BF16 || xd == EM_F16) x = sh_convert(b, x, SH_F32);
    int dim;
    if (e->attrs[2].i || x.t.nd == 0) { /* flatten */
        int64_t n = sh_numel(&x.t);
        x = sh_reshape(b, x, 1, &n);
        dim = 0;
    } else {
        dim = one_dim(e->attrs[0].i, x.t.nd);
    }
    sh_val v, idx;
    sh_argreduce(b, x, dim, e->op->id == EM_OP_ARGMAX, SH_I64, &v, &idx);
    e->out[0] = idx;
    return EM_OK;
}

static em_status emit_softmax(pj_emit *e) {
    sh_b *b = e->b;
    sh_val x = e->in[0];
    int64_t one = 1;
    bool scalar = x.t.nd == 0;
    if (scalar) x = sh_reshape(b, x, 1, &one);
    int dim = one_dim(e->attrs[0].i, x.t.nd);
    sh_elem ct = x.t.e == SH_F64 ? SH_F64 : SH_F32;
    sh_val xc = sh_convert(b, x, ct);
    sh_type st = sh_scalar_ty(ct);
    int map[EM_MAX_DIMS], k = 0;
    for (int i = 0; i < x.t.nd; i++)
        if (i != dim) map[k++] = i;
    sh_val mx = pj_reduce_nan(e->pl, b, xc, sh_const(b, st, -INFINITY), &dim, 1, true);
    /* rows of -inf only: the CPU (like torch) gives NaN; subtracting -inf does that too */
    sh_val sh = sh_bin(b, "subtract", xc, sh_bcast_in_dim(b, mx, map, x.t.nd, x.t.d));
    sh_val ex = sh_un(b, "exponential", sh);
    sh_val sum = sh_reduce(b, ex, sh_const(b, st, 0), &dim, 1, "add");
    sh_val sb = sh_bcast_in_dim(b, sum, map, x.t.nd, x.t.d);
    sh_val r = e->op->id == EM_OP_SOFTMAX ? sh_bin(b, "divide", ex, sb)
                                          : sh_bin(b, "subtract", sh, sh_un(b, "log", sb));
    r = sh_convert(b, r, x.t.e);
    e->out[0] = scalar ? sh_reshape(b, r, 0, NULL) : r;
    return EM_OK;
}

/* Inclusive prefix sum along dim in log2(n) shifted additions (Hillis-Steele). */
static em_status emit_cumsum(pj_emit *e) {
    sh_b *b = e->b;
    sh_val x = e->in[0];
    em_dtype xd = e->in_dt[0];
    int64_t one = 1;
    bool scalar = x.t.nd == 0;
    if (scalar) x = sh_reshape(b, x, 1, &one);
    int dim = one_dim(e->attrs[0].i, x.t.nd);
    sh_elem ct = pj_ct(em_dtype_is_float(xd) ? xd : EM_I64);
    if (xd == EM_F32 || xd == EM_BF16 || xd == EM_F16) ct = SH_F32;
    sh_val y = sh_convert(b, x, ct);
    int64_t n = x.t.d[dim];
    sh_val zero = sh_const(b, sh_scalar_ty(ct), 0);
    for (int64_t s = 1; s < n; s *= 2) {
        int64_t lo[EM_MAX_DIMS] = {0}, hi[EM_MAX_DIMS] = {0}, in[EM_MAX_DIMS] = {0};
        lo[dim] = s;
        sh_val shifted = sh_pad(b, sh_slice_dim(b, y, dim, 0, n - s, 1), zero, lo, hi, in);
        y = sh_bin(b, "add", y, shifted);
    }
    y = sh_convert(b, y, sh_elem_of(e->out_meta[0].dtype));
    e->out[0] = scalar ? sh_reshape(b, y, 0, NULL) : y;
    return EM_OK;
}

void pj_register_reduce(pj_op *t) {
    t[EM_OP_SUM].emit = emit_reduce;
    t[EM_OP_MEAN].emit = emit_reduce;
    t[EM_OP_MAX].emit = emit_reduce;
    t[EM_OP_MIN].emit = emit_reduce;
    t[EM_OP_PROD].emit = emit_reduce;
    t[EM_OP_VAR].emit = emit_reduce;
    t[EM_OP_ARGMAX].emit = emit_arg;
    t[EM_OP_ARGMIN].emit = emit_arg;
    t[EM_OP_SOFTMAX].emit = emit_softmax;
    t[EM_OP_LOG_SOFTMAX].emit = emit_softmax;
    t[EM_OP_CUMSUM].emit = emit_cumsum;
}

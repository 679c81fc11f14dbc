/*
 * Element-wise ops in StableHLO, computed exactly as the CPU backend does (ew_funcs.inc): values
 * are widened to the compute type of their dtype (f32 for f32/bf16/f16, f64, i64 for integers
 * and bool), the op runs there, and the result is rounded to the output dtype. So bf16 results
 * match the CPU bit for bit wherever the plugin's f32 math does.
 */
#include <math.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"

sh_elem pj_ct(em_dtype t) {
    switch (t) {
    case EM_F32:
    case EM_BF16:
    case EM_F16: return SH_F32;
    case EM_F64: return SH_F64;
    default: return SH_I64;
    }
}

static sh_val truth(sh_b *b, sh_val x) {
    if (x.t.e == SH_I1) return x;
    return sh_cmp(b, "NE", x, sh_zeros_like(b, x));
}

/* float -> i64 as the CPU's f2i: NaN -> 0, saturating at the int64 range. */
static sh_val f2i(sh_b *b, sh_val x) {
    sh_val r = sh_convert(b, x, SH_I64);
    sh_type it = r.t;
    sh_val big = sh_cmp(b, "GE", x, sh_const(b, x.t, 9.2233720368547758e18));
    sh_val small = sh_cmp(b, "LE", x, sh_const(b, x.t, -9.2233720368547758e18));
    r = sh_select(b, big, sh_const_i(b, it, INT64_MAX), r);
    r = sh_select(b, small, sh_const_i(b, it, INT64_MIN), r);
    return sh_select(b, sh_cmp(b, "NE", x, x), sh_const_i(b, it, 0), r);
}

sh_val pj_cast(sh_b *b, sh_val x, em_dtype from, em_dtype to) {
    sh_elem te = sh_elem_of(to);
    if (from == to) return x;
    if (to == EM_BOOL) return truth(b, x);
    if (from == EM_BOOL) return sh_convert(b, x, te);
    bool ff = em_dtype_is_float(from), tf = em_dtype_is_float(to);
    if (ff && !tf) return sh_convert(b, f2i(b, sh_convert(b, x, pj_ct(from))), te);
    /* through the compute type, as the CPU rounds (i64 -> f32 -> bf16, f64 -> f32 -> f16) */
    if (tf) return sh_convert(b, sh_convert(b, x, pj_ct(to)), te);
    return sh_convert(b, x, te);
}

/* Integer power with the CPU's rules for negative exponents. */
static sh_val ipow(sh_b *b, sh_val x, sh_val y) {
    sh_val zero = sh_zeros_like(b, y), one = sh_const(b, x.t, 1), mone = sh_const(b, x.t, -1);
    sh_val neg = sh_cmp(b, "LT", y, zero);
    sh_val p = sh_bin(b, "power", x, sh_select(b, neg, zero, y));
    sh_val odd = sh_cmp(b, "NE", sh_bin(b, "and", y, sh_const(b, y.t, 1)), zero);
    sh_val negv = sh_select(b, sh_cmp(b, "EQ", x, one), one,
                            sh_select(b, sh_cmp(b, "EQ", x, mone),
                                      sh_select(b, odd, mone, one), sh_zeros_like(b, x)));
    return sh_select(b, neg, negv, p);
}

/* erf(x) for f32/f64 values: XLA's rational approximation (clamped to [-4, 4]; accurate to
 * about 1 ulp in f32), written out so that no CHLO op is needed. */
static sh_val erf_approx(sh_b *b, sh_val x) {
    static const double alpha[] = {-2.72614225801306e-10, 2.77068142495902e-08,
                                   -2.10102402082508e-06, -5.69250639462346e-05,
                                   -7.34990630326855e-04, -2.95459980854025e-03,
                                   -1.60960333262415e-02};
    static const double beta[] = {-1.45660718464996e-05, -2.13374055278905e-04,
                                  -1.68282697438203e-03, -7.37332916720468e-03,
                                  -1.42647390514189e-02};
    sh_elem e = x.t.e;
    sh_val xf = sh_convert(b, x, SH_F32);
    sh_val c = sh_bin(b, "minimum", sh_bin(b, "maximum", xf, sh_const(b, xf.t, -4.0)),
                      sh_const(b, xf.t, 4.0));
    sh_val x2 = sh_bin(b, "multiply", c, c);
    sh_val p = sh_const(b, xf.t, alpha[0]);
    for (int i = 1; i < 7; i++) p = sh_bin(b, "add", sh_bin(b, "multiply", p, x2), sh_const(b, xf.t, alpha[i]));
    p = sh_bin(b, "multiply", p, c);
    sh_val q = sh_const(b, xf.t, beta[0]);
    for (int i = 1; i < 5; i++) q = sh_bin(b, "add", sh_bin(b, "multiply", q, x2), sh_const(b, xf.t, beta[i]));
    return sh_convert(b, sh_bin(b, "divide", p, q), e);
}

static sh_val recip_1p_exp_neg(sh_b *b, sh_val x) {
    /* 1 + exp(-x) */
    return sh_bin(b, "add", sh_const(b, x.t, 1), sh_un(b, "exponential", sh_un(b, "negate", x)));
}

sh_val pj_emit_ew(sh_b *b, em_op_id op, const sh_val *in, em_tensor *const *tin, int n_in,
                  const em_attr *attrs, const em_meta *out) {
    em_dtype od = out->dtype;
    if (op == EM_OP_CAST) return sh_bcast_to(b, pj_cast(b, in[0], tin[0]->dtype, od), out->ndim, out->shape);
    /* compute types, as the CPU's node_types */
    sh_elem ct;
    bool cmp = op == EM_OP_EQ || op == EM_OP_NE || op == EM_OP_LT || op == EM_OP_LE ||
               op == EM_OP_GT || op == EM_OP_GE;
    bool logic = op == EM_OP_LOGICAL_AND || op == EM_OP_LOGICAL_OR || op == EM_OP_LOGICAL_NOT;
    if (cmp)
        ct = pj_ct(em_promote_types(tin, 2));
    else if (logic)
        ct = SH_I1;
    else
        ct = pj_ct(od);
    sh_val v[3];
    for (int i = 0; i < n_in; i++) {
        sh_val x = sh_bcast_to(b, in[i], out->ndim, out->shape);
        if (logic || (op == EM_OP_WHERE && i == 0))
            v[i] = truth(b, x);
        else
            v[i] = sh_convert(b, x, ct);
    }
    sh_val x = v[0], y = n_in > 1 ? v[1] : v[0], r;
    bool fl = sh_elem_is_float(ct);
    switch (op) {
    case EM_OP_NEG: r = sh_un(b, "negate", x); break;
    case EM_OP_ABS: r = sh_un(b, "abs", x); break;
    case EM_OP_EXP: r = sh_un(b, "exponential", x); break;
    case EM_OP_LOG: r = sh_un(b, "log", x); break;
    case EM_OP_SQRT: r = sh_un(b, "sqrt", x); break;
    case EM_OP_RSQRT: r = sh_bin(b, "divide", sh_const(b, x.t, 1), sh_un(b, "sqrt", x)); break;
    case EM_OP_SIN: r = sh_un(b, "sine", x); break;
    case EM_OP_COS: r = sh_un(b, "cosine", x); break;
    case EM_OP_TANH: r = sh_un(b, "tanh", x); break;
    case EM_OP_SIGMOID: r = sh_bin(b, "divide", sh_const(b, x.t, 1), recip_1p_exp_neg(b, x)); break;
    case EM_OP_SILU: r = sh_bin(b, "divide", x, recip_1p_exp_neg(b, x)); break;
    case EM_OP_GELU: {
        sh_val half_x = sh_bin(b, "multiply", sh_const(b, x.t, 0.5), x);
        sh_val inner;
        if (attrs[0].i) {
            sh_val x3 = sh_bin(b, "multiply", sh_bin(b, "multiply", x, x), x);
            inner = sh_bin(b, "multiply", sh_const(b, x.t, 0.7978845608028654),
                           sh_bin(b, "add", x, sh_bin(b, "multiply", sh_const(b, x.t, 0.044715), x3)));
            inner = sh_un(b, "tanh", inner);
        } else {
            inner = erf_approx(b, sh_bin(b, "multiply", x, sh_const(b, x.t, 0.70710678118654752)));
        }
        r = sh_bin(b, "multiply", half_x, sh_bin(b, "add", sh_const(b, x.t, 1), inner));
        break;
    }
    case EM_OP_RELU: {
        sh_val z = sh_zeros_like(b, x);
        r = sh_select(b, sh_cmp(b, "LT", x, z), z, x);
        break;
    }
    case EM_OP_CLAMP: {
        r = x;
        double lo = attrs[0].f, hi = attrs[1].f;
        if (!fl) {
            lo = ceil(lo);
            hi = floor(hi);
        }
        if (attrs[2].i) {
            sh_val l = sh_const(b, x.t, lo);
            r = sh_select(b, sh_cmp(b, "LT", r, l), l, r);
        }
        if (attrs[3].i) {
            sh_val h = sh_const(b, x.t, hi);
            r = sh_select(b, sh_cmp(b, "GT", r, h), h, r);
        }
        break;
    }
    case EM_OP_LOGICAL_NOT: r = sh_bin(b, "xor", x, sh_const(b, x.t, 1)); break;
    case EM_OP_ADD: r = sh_bin(b, "add", x, y); break;
    case EM_OP_SUB: r = sh_bin(b, "subtract", x, y); break;
    case EM_OP_MUL: r = sh_bin(b, "multiply", x, y); break;
    case EM_OP_DIV: r = sh_bin(b, "divide", x, y); break;
    case EM_OP_POW: r = fl ? sh_bin(b, "power", x, y) : ipow(b, x, y); break;
    case EM_OP_MAXIMUM: r = fl ? sh_nan_aware(b, "max_nan", x, y) : sh_bin(b, "maximum", x, y); break;
    case EM_OP_MINIMUM: r = fl ? sh_nan_aware(b, "min_nan", x, y) : sh_bin(b, "minimum", x, y); break;
    case EM_OP_EQ: r = sh_cmp(b, "EQ", x, y); break;
    case EM_OP_NE: r = sh_cmp(b, "NE", x, y); break;
    case EM_OP_LT: r = sh_cmp(b, "LT", x, y); break;
    case EM_OP_LE: r = sh_cmp(b, "LE", x, y); break;
    case EM_OP_GT: r = sh_cmp(b, "GT", x, y); break;
    case EM_OP_GE: r = sh_cmp(b, "GE", x, y); break;
    case EM_OP_LOGICAL_AND: r = sh_bin(b, "and", x, y); break;
    case EM_OP_LOGICAL_OR: r = sh_bin(b, "or", x, y); break;
    case EM_OP_WHERE: r = sh_select(b, v[0], v[1], v[2]); break;
    default:
        sh_fail(b, "%s is not element-wise", em_op_get(op)->name);
        return v[0];
    }
    if (od == EM_BOOL) return truth(b, r);
    return sh_convert(b, r, sh_elem_of(od));
}

static em_status emit(pj_emit *e) {
    e->out[0] = pj_emit_ew(e->b, e->op->id, e->in, e->tin, e->n_in, e->attrs, &e->out_meta[0]);
    return EM_OK;
}

void pj_register_ew(pj_op *t) {
    for (int i = 0; i < EM_OP_COUNT; i++)
        if (em_op_get((em_op_id)i)->kind == EM_OPK_EW) t[i].emit = emit;
}

/* Creation ops (full, arange, eye, the CPU's counter-based random numbers) and layout ops
 * (contiguous) in StableHLO. */
#include <math.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"

static sh_val splat(sh_b *b, const em_meta *m, double v) {
    sh_type t = pj_meta_type(m);
    if (m->dtype == EM_I64 || m->dtype == EM_I32 || m->dtype == EM_I16 || m->dtype == EM_I8 ||
        m->dtype == EM_U8) {
        /* the CPU stores (int64_t)v, wrapped to the dtype */
        int64_t iv = v != v ? 0 : v >= 9.2233720368547758e18 ? INT64_MAX
                   : v <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)v;
        sh_val c = sh_const_i(b, sh_ty(SH_I64, m->ndim, m->shape), iv);
        return sh_convert(b, c, t.e);
    }
    return sh_const(b, t, v);
}

static em_status emit_full(pj_emit *e) {
    bool empty = e->op->id == EM_OP_EMPTY; /* the CPU leaves it uninitialised; zeros here */
    e->out[0] = splat(e->b, &e->out_meta[0], empty ? 0 : e->attrs[2].f);
    return EM_OK;
}

/* start + i * step in f64, stored to the dtype */
static em_status emit_arange(pj_emit *e) {
    sh_b *b = e->b;
    const em_meta *m = &e->out_meta[0];
    sh_type ft = sh_ty(SH_F64, m->ndim, m->shape);
    sh_val i = sh_iota(b, ft, 0);
    sh_val v = sh_bin(b, "add", sh_const(b, ft, e->attrs[1].f),
                      sh_bin(b, "multiply", i, sh_const(b, ft, e->attrs[3].f)));
    e->out[0] = pj_cast(b, v, EM_F64, m->dtype);
    return EM_OK;
}

static em_status emit_eye(pj_emit *e) {
    sh_b *b = e->b;
    const em_meta *m = &e->out_meta[0];
    sh_type it = sh_ty(SH_I64, m->ndim, m->shape);
    sh_val eq = sh_cmp(b, "EQ", sh_iota(b, it, 0), sh_iota(b, it, 1));
    e->out[0] = pj_cast(b, eq, EM_BOOL, m->dtype);
    return EM_OK;
}

/* splitmix64 in ui64 arithmetic (backends/cpu/create.c): element i depends on (seed, i) only */
static sh_val mix(sh_b *b, sh_val x) {
    sh_type t = x.t;
    x = sh_bin(b, "add", x, sh_const_u(b, t, 0x9e3779b97f4a7c15ull));
    x = sh_bin(b, "multiply", sh_bin(b, "xor", x, sh_bin(b, "shift_right_logical", x, sh_const_u(b, t, 30))),
               sh_const_u(b, t, 0xbf58476d1ce4e5b9ull));
    x = sh_bin(b, "multiply", sh_bin(b, "xor", x, sh_bin(b, "shift_right_logical", x, sh_const_u(b, t, 27))),
               sh_const_u(b, t, 0x94d049bb133111ebull));
    return sh_bin(b, "xor", x, sh_bin(b, "shift_right_logical", x, sh_const_u(b, t, 31)));
}

/* unit(seed, i) = (mix(seed * K ^ mix(i)) >> 11) * 2^-53, for counters `ctr` (ui64) */
static sh_val unit(sh_b *b, uint64_t seed, sh_val ctr) {
    sh_type t = ctr.t;
    sh_val s = sh_const_u(b, t, seed * 0x2545f4914f6cdd1dull);
    sh_val m = mix(b, sh_bin(b, "xor", s, mix(b, ctr)));
    m = sh_bin(b, "shift_right_logical", m, sh_const_u(b, t, 11));
    sh_val f = sh_convert(b, m, SH_F64);
    return sh_bin(b, "multiply", f, sh_const(b, sh_ty_with(t, SH_F64), 1.0 / 9007199254740992.0));
}

static em_status emit_rand(pj_emit *e) {
    sh_b *b = e->b;
    const em_meta *m = &e->out_meta[0];
    int64_t n = 1;
    for (int i = 0; i < m->ndim; i++) n *= m->shape[i];
    sh_type ut = sh_ty(SH_U64, 1, &n), ft = sh_ty(SH_F64, 1, &n);
    uint64_t seed = (uint64_t)e->attrs[2].i;
    double p0 = e->attrs[3].f, p1 = e->attrs[4].f;
    sh_val i = sh_iota(b, ut, 0), v;
    if (e->op->id == EM_OP_RAND_NORMAL) {
        sh_val two_i = sh_bin(b, "multiply", i, sh_const_u(b, ut, 2));
        sh_val u1 = unit(b, seed, two_i);
        sh_val u2 = unit(b, seed, sh_bin(b, "add", two_i, sh_const_u(b, ut, 1)));
        u1 = sh_bin(b, "maximum", u1, sh_const(b, ft, 1e-300));
        sh_val r = sh_un(b, "sqrt", sh_bin(b, "multiply", sh_const(b, ft, -2.0), sh_un(b, "log", u1)));
        sh_val c = sh_un(b, "cosine", sh_bin(b, "multiply", sh_const(b, ft, 6.283185307179586), u2));
        v = sh_bin(b, "add", sh_const(b, ft, p0),
                   sh_bin(b, "multiply", sh_const(b, ft, p1), sh_bin(b, "multiply", r, c)));
    } else {
        v = sh_bin(b, "add", sh_const(b, ft, p0),
                   sh_bin(b, "multiply", sh_const(b, ft, p1 - p0), unit(b, seed, i)));
    }
    v = sh_reshape(b, v, m->ndim, m->shape);
    e->out[0] = pj_cast(b, v, EM_F64, m->dtype);
    return EM_OK;
}

void pj_register_create(pj_op *t) {
    t[EM_OP_EMPTY].emit = emit_full;
    t[EM_OP_FULL].emit = emit_full;
    t[EM_OP_ARANGE].emit = emit_arange;
    t[EM_OP_EYE].emit = emit_eye;
    t[EM_OP_RAND_UNIFORM].emit = emit_rand;
    t[EM_OP_RAND_NORMAL].emit = emit_rand;
}

/* contiguous: the input's view is already materialised by the kernel */
static em_status emit_contiguous(pj_emit *e) {
    e->out[0] = e->in[0];
    return EM_OK;
}

/* assign: the source, cast and broadcast to the destination as the CPU assigns */
static sh_val update_assign(pj_emit *e, sh_val dst) {
    (void)dst;
    const em_tensor *d = e->tin[0];
    sh_val src = pj_cast(e->b, e->in[1], e->in_dt[1], d->dtype);
    return sh_bcast_to(e->b, src, d->ndim, d->shape);
}

void pj_register_layout(pj_op *t) {
    t[EM_OP_CONTIGUOUS].emit = emit_contiguous;
    t[EM_OP_ASSIGN].update = update_assign;
}

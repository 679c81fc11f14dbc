/*
 * Normalisation and transformer ops in StableHLO, with the CPU backend's (and the Hugging Face
 * references') arithmetic and rounding points: statistics in f32, Llama's RMSNorm rounds before
 * the weight, Gemma's multiplies by (1 + weight) in f32, rope rounds each product and the sum in
 * the promoted dtype, attention runs in f32 with one rounding.
 */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"

static sh_val f32(sh_b *b, sh_val x) { return sh_convert(b, x, SH_F32); }

/* x rounded to element e and back to f32 */
static sh_val round_to(sh_b *b, sh_val x, sh_elem e) {
    if (e == SH_F32) return x;
    return f32(b, sh_convert(b, x, e));
}

/* keep-dims broadcast of a reduction over the last dim back to t's shape */
static sh_val back_last(sh_b *b, sh_val r, const sh_type *t) {
    int map[EM_MAX_DIMS];
    for (int i = 0; i < t->nd - 1; i++) map[i] = i;
    return sh_bcast_in_dim(b, r, map, t->nd, t->d);
}

static sh_val mean_last(sh_b *b, sh_val x) {
    int d = x.t.nd - 1;
    sh_val s = sh_reduce(b, x, sh_const(b, sh_scalar_ty(x.t.e), 0), &d, 1, "add");
    return sh_bin(b, "divide", s, sh_const(b, s.t, (double)x.t.d[d]));
}

/* a [n] parameter broadcast along the last dim of t */
static sh_val param_last(sh_b *b, sh_val p, const sh_type *t) {
    int map[1] = {t->nd - 1};
    return sh_bcast_in_dim(b, f32(b, p), map, t->nd, t->d);
}

static em_status emit_rms_norm(pj_emit *e) {
    sh_b *b = e->b;
    sh_val x = f32(b, e->in[0]);
    sh_elem xe = e->in[0].t.e;
    float eps = (float)e->attrs[0].f;
    bool unit = e->attrs[1].i != 0;
    sh_val ms = mean_last(b, sh_bin(b, "multiply", x, x));
    sh_val r = sh_bin(b, "divide", sh_const(b, ms.t, 1),
                      sh_un(b, "sqrt", sh_bin(b, "add", ms, sh_const(b, ms.t, eps))));
    sh_val h = sh_bin(b, "multiply", x, back_last(b, r, &x.t));
    bool has_w = e->n_in > 1 && e->present[1];
    if (unit) {
        if (has_w) {
            sh_val w = param_last(b, e->in[1], &x.t);
            h = sh_bin(b, "multiply", h, sh_bin(b, "add", sh_const(b, w.t, 1), w));
        }
    } else {
        h = round_to(b, h, xe); /* hidden_states.to(input_dtype) */
        if (has_w) h = sh_bin(b, "multiply", param_last(b, e->in[1], &x.t), h);
    }
    e->out[0] = h;
    return EM_OK;
}

/* (x - mean) * (rstd * w) + bias over the last dim of x [.., n], statistics in f32. The
 * statistics are taken of x less its first value along that dim, as the CPU kernels do: a plain
 * f32 sum of values far from zero loses the mean's low bits (|mean| >> std: a group of values
 * near 1000 was off by 1.5e-3 after normalising on XLA's CPU). */
static sh_val normalise_last(sh_b *b, sh_val x, float eps) {
    int last = x.t.nd - 1;
    sh_val first = sh_reshape(b, sh_slice_dim(b, x, last, 0, 1, 1), last, x.t.d);
    sh_val xs = sh_bin(b, "subtract", x, back_last(b, first, &x.t));
    sh_val mean = mean_last(b, xs);
    sh_val xc = sh_bin(b, "subtract", xs, back_last(b, mean, &x.t));
    sh_val var = mean_last(b, sh_bin(b, "multiply", xc, xc));
    sh_val rstd = sh_bin(b, "divide", sh_const(b, var.t, 1),
                         sh_un(b, "sqrt", sh_bin(b, "add", var, sh_const(b, var.t, eps))));
    return sh_bin(b, "multiply", xc, back_last(b, rstd, &x.t));
}

static em_status emit_layer_norm(pj_emit *e) {
    sh_b *b = e->b;
    sh_val x = f32(b, e->in[0]);
    sh_val y = normalise_last(b, x, (float)e->attrs[0].f);
    if (e->n_in > 1 && e->present[1]) y = sh_bin(b, "multiply", y, param_last(b, e->in[1], &x.t));
    if (e->n_in > 2 && e->present[2]) y = sh_bin(b, "add", y, param_last(b, e->in[2], &x.t));
    e->out[0] = y;
    return EM_OK;
}

static em_status emit_group_norm(pj_emit *e) {
    sh_b *b = e->b;
    sh_val x = f32(b, e->in[0]);
    int64_t n = x.t.d[0], ch = x.t.d[1], g = e->attrs[0].i;
    int64_t rest = 1;
    for (int i = 2; i < x.t.nd; i++) rest *= x.t.d[i];
    int64_t gd[3] = {n, g, ch / g * rest};
    sh_val y = normalise_last(b, sh_reshape(b, x, 3, gd), (float)e->attrs[1].f);
    y = sh_reshape(b, y, x.t.nd, x.t.d);
    int map1[1] = {1};
    if (e->n_in > 1 && e->present[1])
        y = sh_bin(b, "multiply", y, sh_bcast_in_dim(b, f32(b, e->in[1]), map1, x.t.nd, x.t.d));
    if (e->n_in > 2 && e->present[2])
        y = sh_bin(b, "add", y, sh_bcast_in_dim(b, f32(b, e->in[2]), map1, x.t.nd, x.t.d));
    e->out[0] = y;
    return EM_OK;
}

static em_status emit_rope_cos_sin(pj_emit *e) {
    sh_b *b = e->b;
    sh_val pos = f32(b, e->in[0]), inv = e->in[1];
    const em_meta *m = &e->out_meta[0];
    int64_t half = inv.t.d[0];
    int nd = pos.t.nd;
    int64_t fd[EM_MAX_DIMS];
    memcpy(fd, pos.t.d, (size_t)nd * sizeof *fd);
    fd[nd] = half;
    int map[EM_MAX_DIMS];
    for (int i = 0; i < nd; i++) map[i] = i;
    sh_val p = sh_bcast_in_dim(b, pos, map, nd + 1, fd);
    int mi[1] = {nd};
    sh_val f = sh_bin(b, "multiply", p, sh_bcast_in_dim(b, inv, mi, nd + 1, fd));
    sh_val both[2] = {f, f};
    sh_val emb = sh_concat(b, both, 2, nd);
    float sc = (float)e->attrs[0].f;
    sh_val c = sh_un(b, "cosine", emb), s = sh_un(b, "sine", emb);
    if (sc != 1.0f) {
        c = sh_bin(b, "multiply", c, sh_const(b, c.t, sc));
        s = sh_bin(b, "multiply", s, sh_const(b, s.t, sc));
    }
    e->out[0] = sh_convert(b, c, sh_elem_of(m->dtype));
    e->out[1] = sh_convert(b, s, sh_elem_of(e->out_meta[1].dtype));
    return EM_OK;
}

static em_status emit_rope(pj_emit *e) {
    sh_b *b = e->b;
    sh_val x = e->in[0], cs = e->in[1], sn = e->in[2];
    em_tensor *pt[2] = {e->tin[0], e->tin[1]};
    sh_elem pe = sh_elem_of(em_promote_types(pt, 2)); /* torch's promoted dtype of x and cos */
    int64_t B = x.t.d[0], H = x.t.d[1], T = x.t.d[2], D = x.t.d[3], R = cs.t.d[2];
    int64_t rd[4] = {B, H, T, R};
    sh_val xr = f32(b, sh_slice_dim(b, x, 3, 0, R, 1));
    int map[3] = {0, 2, 3};
    sh_val c4 = f32(b, sh_bcast_in_dim(b, cs, map, 4, rd));
    sh_val s4 = f32(b, sh_bcast_in_dim(b, sn, map, 4, rd));
    sh_val lo = sh_slice_dim(b, xr, 3, 0, R / 2, 1), hi = sh_slice_dim(b, xr, 3, R / 2, R, 1);
    sh_val rot_parts[2] = {sh_un(b, "negate", hi), lo};
    sh_val rot = sh_concat(b, rot_parts, 2, 3);
    sh_val p1 = round_to(b, sh_bin(b, "multiply", xr, c4), pe);
    sh_val p2 = round_to(b, sh_bin(b, "multiply", rot, s4), pe);
    sh_val r = round_to(b, sh_bin(b, "add", p1, p2), pe);
    r = sh_convert(b, r, x.t.e);
    if (R < D) {
        sh_val parts[2] = {r, sh_slice_dim(b, x, 3, R, D, 1)};
        r = sh_concat(b, parts, 2, 3);
    }
    e->out[0] = r;
    return EM_OK;
}

static em_status emit_sdpa(pj_emit *e) {
    sh_b *b = e->b;
    /* bf16/f16 q and k go into the dot as they are (their products are exact in the f32
     * accumulator): converting the whole key cache to f32 first cost XLA's CPU plugin a copy of
     * it per call (batch-16 decode of an 8-layer Qwen3-0.6B shape, one program per step: 157 ->
     * 185 tokens/s) */
    bool same = e->in[0].t.e == e->in[1].t.e && e->in[0].t.e != SH_F64 && e->in[0].t.e != SH_F32;
    sh_val q = same ? e->in[0] : f32(b, e->in[0]), k = same ? e->in[1] : f32(b, e->in[1]);
    sh_val v = f32(b, e->in[2]);
    bool has_mask = e->n_in > 3 && e->present[3];
    int64_t B = q.t.d[0], Hq = q.t.d[1], Tq = q.t.d[2], D = q.t.d[3];
    int64_t Hk = k.t.d[1], Tk = k.t.d[2], Dv = v.t.d[3], G = Hq / Hk;
    double scale = e->attrs[0].f != 0 ? e->attrs[0].f : 1.0 / sqrt((double)D);
    bool causal = e->attrs[1].i != 0;
    int64_t win = e->attrs[2].i;
    double cap = e->attrs[3].f;
    int64_t q5[5] = {B, Hk, G, Tq, D};
    q = sh_reshape(b, q, 5, q5);
    int lb[2] = {0, 1}, rb[2] = {0, 1}, lc = 4, rc = 3;
    sh_val l = sh_dot(b, q, k, lb, rb, 2, &lc, &rc, 1, SH_F32); /* [B, Hk, G, Tq, Tk] */
    l = sh_bin(b, "multiply", l, sh_const(b, l.t, (float)scale));
    if (cap > 0) {
        sh_val cc = sh_const(b, l.t, (float)cap);
        l = sh_bin(b, "multiply", cc, sh_un(b, "tanh", sh_bin(b, "divide", l, cc)));
    }
    int64_t l4[4] = {B, Hq, Tq, Tk};
    sh_type lt = l.t;
    sh_val ninf = sh_const(b, lt, -INFINITY);
    if (has_mask) {
        sh_val m = sh_bcast_to(b, e->in[3], 4, l4);
        m = sh_reshape(b, m, 5, lt.d);
        if (e->in_dt[3] == EM_BOOL)
            l = sh_select(b, m, l, ninf);
        else
            l = sh_bin(b, "add", l, f32(b, m));
    }
    if (causal || win > 0) {
        sh_type it = sh_ty_with(lt, SH_I64);
        sh_val qi = sh_iota(b, it, 3), kj = sh_iota(b, it, 4);
        sh_val lim = sh_bin(b, "add", qi, sh_const_i(b, it, Tk - Tq));
        sh_val vis = sh_const(b, sh_ty_with(lt, SH_I1), 1);
        if (causal) vis = sh_cmp(b, "LE", kj, lim);
        if (win > 0)
            vis = sh_bin(b, "and", vis,
                         sh_cmp(b, "GT", kj, sh_bin(b, "subtract", lim, sh_const_i(b, it, win))));
        l = sh_select(b, vis, l, ninf);
    }
    int dk = 4;
    sh_val mx = pj_reduce_nan(e->pl, b, l, sh_const(b, sh_scalar_ty(SH_F32), -INFINITY), &dk, 1,
                              true);
    /* rows with no visible key: exp(-inf - 0) = 0 everywhere, then a zero sum gives zeros */
    sh_val mx_ok = sh_select(b, sh_cmp(b, "EQ", mx, sh_const(b, mx.t, -INFINITY)),
                             sh_zeros_like(b, mx), mx);
    int map4[4] = {0, 1, 2, 3};
    sh_val p = sh_un(b, "exponential", sh_bin(b, "subtract", l, sh_bcast_in_dim(b, mx_ok, map4, 5, lt.d)));
    sh_val sum = sh_reduce(b, p, sh_const(b, sh_scalar_ty(SH_F32), 0), &dk, 1, "add");
    sh_val safe = sh_select(b, sh_cmp(b, "EQ", sum, sh_zeros_like(b, sum)), sh_const(b, sum.t, 1), sum);
    p = sh_bin(b, "divide", p, sh_bcast_in_dim(b, safe, map4, 5, lt.d));
    int lc2 = 4, rc2 = 2;
    sh_val o = sh_dot(b, p, v, lb, rb, 2, &lc2, &rc2, 1, SH_F32); /* [B, Hk, G, Tq, Dv] */
    int64_t o4[4] = {B, Hq, Tq, Dv};
    e->out[0] = sh_reshape(b, o, 4, o4);
    if (e->op->id == EM_OP_SDPA_LSE) { /* the rows' log-sum-exp: m + log(sum), -inf (0 + log 0)
                                          for a row without a visible key */
        int64_t l3[3] = {B, Hq, Tq};
        e->out[1] = sh_reshape(b, sh_bin(b, "add", mx_ok, sh_un(b, "log", sum)), 3, l3);
    }
    return EM_OK;
}

static em_status emit_embedding(pj_emit *e) {
    sh_b *b = e->b;
    e->out[0] = sh_take_along(b, e->in[0], sh_convert(b, e->in[1], SH_I64), 0);
    return EM_OK;
}

static bool embedding_ids(const em_kernel_args *a, pj_index_rule *r) {
    int64_t n = a->in[0]->shape[0];
    return pj_index_rule_set(r, 1, 0, n, "id", "", "%lld embeddings", (long long)n);
}

void pj_register_nn(pj_op *t) {
    t[EM_OP_RMS_NORM].emit = emit_rms_norm;
    t[EM_OP_LAYER_NORM].emit = emit_layer_norm;
    t[EM_OP_GROUP_NORM].emit = emit_group_norm;
    t[EM_OP_ROPE_COS_SIN].emit = emit_rope_cos_sin;
    t[EM_OP_ROPE].emit = emit_rope;
    t[EM_OP_SDPA].emit = emit_sdpa;
    t[EM_OP_SDPA_LSE].emit = emit_sdpa; /* with the rows' log-sum-exp as a second result */
    t[EM_OP_EMBEDDING].emit = emit_embedding;
    t[EM_OP_EMBEDDING].indices = embedding_ids;
}

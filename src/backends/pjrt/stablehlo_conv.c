/*
 * Convolution and resampling in StableHLO (NCHW). Computation in f32 with one rounding, as the
 * CPU backend; resampling indices and weights are computed here on the host with torch's float
 * formulas (they depend only on the shapes) and enter the program as constants.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"

static sh_val f32(sh_b *b, sh_val x) { return sh_convert(b, x, x.t.e == SH_F64 ? SH_F64 : SH_F32); }

static em_status emit_conv2d(pj_emit *e) {
    sh_b *b = e->b;
    sh_val x = f32(b, e->in[0]), w = f32(b, e->in[1]);
    const em_attr *st = &e->attrs[0], *pad = &e->attrs[1], *dil = &e->attrs[2];
    int64_t g = e->attrs[3].i;
    const em_meta *m = &e->out_meta[0];
    sh_type rt = sh_ty(x.t.e, 4, m->shape);
    bool full = x.t.e == SH_F32 || x.t.e == SH_F64;
    char a[900];
    snprintf(a, sizeof a,
             "batch_group_count = 1 : i64, dimension_numbers = #stablehlo.conv<[b, f, 0, 1]x"
             "[o, i, 0, 1]->[b, f, 0, 1]>, feature_group_count = %lld : i64, lhs_dilation = "
             "array<i64: 1, 1>, padding = dense<[[%lld, %lld], [%lld, %lld]]> : tensor<2x2xi64>, "
             "rhs_dilation = array<i64: %lld, %lld>, window_strides = array<i64: %lld, %lld>%s",
             (long long)g, (long long)pad->v[0], (long long)pad->v[0], (long long)pad->v[1],
             (long long)pad->v[1], (long long)dil->v[0], (long long)dil->v[1], (long long)st->v[0],
             (long long)st->v[1],
             full ? ", precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision "
                    "HIGHEST>]"
                  : "");
    sh_val ops[2] = {x, w};
    sh_val y;
    if (sh_numel(&rt) == 0 || sh_numel(&x.t) == 0 || sh_numel(&w.t) == 0)
        y = sh_const(b, rt, 0);
    else
        y = sh_op(b, "stablehlo.convolution", ops, 2, a, rt);
    if (e->n_in > 2 && e->present[2]) {
        int map1[1] = {1};
        y = sh_bin(b, "add", y, sh_bcast_in_dim(b, f32(b, e->in[2]), map1, 4, rt.d));
    }
    e->out[0] = y;
    return EM_OK;
}

/* Gathers rows `idx` (n host values) of dim `dim`. */
static sh_val take(sh_b *b, sh_val x, int dim, const int64_t *idx, int64_t n) {
    return sh_take_along(b, x, sh_const_vec_i64(b, idx, (int)n), dim);
}

static em_status emit_nearest(pj_emit *e) {
    sh_b *b = e->b;
    sh_val x = e->in[0];
    int64_t oh = e->attrs[0].v[0], ow = e->attrs[0].v[1];
    int64_t *ih = malloc((size_t)(oh + ow) * sizeof *ih);
    if (!ih) return EM_ERR_OOM;
    int64_t *iw = ih + oh;
    int64_t in_h = x.t.d[2], in_w = x.t.d[3];
    /* torch: src = min(floor(dst * (float)(in / out)), in - 1) */
    float sh_ = (float)in_h / (float)oh, sw = (float)in_w / (float)ow;
    for (int64_t i = 0; i < oh; i++) {
        int64_t s = (int64_t)floorf((float)i * sh_);
        ih[i] = s < in_h - 1 ? s : in_h - 1;
    }
    for (int64_t i = 0; i < ow; i++) {
        int64_t s = (int64_t)floorf((float)i * sw);
        iw[i] = s < in_w - 1 ? s : in_w - 1;
    }
    sh_val y = take(b, x, 2, ih, oh);
    e->out[0] = take(b, y, 3, iw, ow);
    free(ih);
    return EM_OK;
}

/* torch's area_pixel_compute_source_index + linear weights along one axis */
static void lin_axis(int64_t in, int64_t out, bool align, int64_t *i0, int64_t *i1, float *l1) {
    float scale = align ? (out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.0f)
                        : (float)in / (float)out;
    for (int64_t o = 0; o < out; o++) {
        float src = align ? scale * (float)o : scale * ((float)o + 0.5f) - 0.5f;
        if (src < 0) src = 0;
        int64_t a = (int64_t)src;
        if (a > in - 1) a = in - 1;
        i0[o] = a;
        i1[o] = a < in - 1 ? a + 1 : a;
        l1[o] = src - (float)a;
    }
}

/* a [n] f32 constant of host values, broadcast along dim of t */
static sh_val weights(sh_b *b, const float *w, int64_t n, int dim, const sh_type *t) {
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) {
        sh_fail(b, "out of memory");
        return sh_const(b, sh_scalar_ty(SH_F32), 0);
    }
    for (int64_t i = 0; i < n; i++) v[i] = w[i];
    sh_val c = sh_const_vec(b, SH_F32, v, 1, &n);
    free(v);
    int map[1] = {dim};
    return sh_bcast_in_dim(b, c, map, t->nd, t->d);
}

static em_status emit_bilinear(pj_emit *e) {
    sh_b *b = e->b;
    sh_val x = f32(b, e->in[0]);
    int64_t oh = e->attrs[0].v[0], ow = e->attrs[0].v[1];
    bool align = e->attrs[1].i != 0;
    int64_t in_h = x.t.d[2], in_w = x.t.d[3];
    int64_t *buf = malloc((size_t)(2 * (oh + ow)) * sizeof *buf);
    float *lw = malloc((size_t)(2 * (oh + ow)) * sizeof *lw);
    if (!buf || !lw) {
        free(buf);
        free(lw);
        return EM_ERR_OOM;
    }
    int64_t *h0 = buf, *h1 = buf + oh, *w0 = buf + 2 * oh, *w1 = w0 + ow;
    float *lh = lw, *lhw = lw + oh, *lww = lw + 2 * oh, *lw0 = lww + ow;
    lin_axis(in_h, oh, align, h0, h1, lh);
    lin_axis(in_w, ow, align, w0, w1, lww);
    for (int64_t i = 0; i < oh; i++) lhw[i] = 1.0f - lh[i];
    for (int64_t i = 0; i < ow; i++) lw0[i] = 1.0f - lww[i];
    sh_val r0 = take(b, x, 2, h0, oh), r1 = take(b, x, 2, h1, oh);
    sh_val a00 = take(b, r0, 3, w0, ow), a01 = take(b, r0, 3, w1, ow);
    sh_val a10 = take(b, r1, 3, w0, ow), a11 = take(b, r1, 3, w1, ow);
    sh_type t = a00.t;
    sh_val W0 = sh_convert(b, weights(b, lw0, ow, 3, &t), t.e);
    sh_val W1 = sh_convert(b, weights(b, lww, ow, 3, &t), t.e);
    sh_val H0 = sh_convert(b, weights(b, lhw, oh, 2, &t), t.e);
    sh_val H1 = sh_convert(b, weights(b, lh, oh, 2, &t), t.e);
    sh_val top = sh_bin(b, "add", sh_bin(b, "multiply", W0, a00), sh_bin(b, "multiply", W1, a01));
    sh_val bot = sh_bin(b, "add", sh_bin(b, "multiply", W0, a10), sh_bin(b, "multiply", W1, a11));
    e->out[0] = sh_bin(b, "add", sh_bin(b, "multiply", H0, top), sh_bin(b, "multiply", H1, bot));
    free(buf);
    free(lw);
    return EM_OK;
}

static em_status emit_avg_pool(pj_emit *e) {
    sh_b *b = e->b;
    sh_val x = f32(b, e->in[0]);
    const int64_t *k = e->attrs[0].v, *s = e->attrs[1].v, *p = e->attrs[2].v;
    bool cip = e->attrs[4].i != 0;
    const em_meta *m = &e->out_meta[0];
    int64_t oh = m->shape[2], ow = m->shape[3], ih = x.t.d[2], iw = x.t.d[3];
    if (sh_numel(&x.t) == 0 || oh == 0 || ow == 0) {
        e->out[0] = sh_const(b, sh_ty(x.t.e, 4, m->shape), 0);
        return EM_OK;
    }
    int64_t lo[4] = {0, 0, p[0], p[1]};
    int64_t hi[4] = {0, 0, (oh - 1) * s[0] + k[0] - ih - p[0], (ow - 1) * s[1] + k[1] - iw - p[1]};
    for (int i = 2; i < 4; i++)
        if (hi[i] < 0) hi[i] = 0;
    int64_t in0[4] = {0, 0, 0, 0};
    sh_val zero = sh_const(b, sh_scalar_ty(x.t.e), 0);
    sh_val xp = sh_pad(b, x, zero, lo, hi, in0);
    int64_t win[4] = {1, 1, k[0], k[1]}, str[4] = {1, 1, s[0], s[1]};
    sh_val sum = sh_reduce_window(b, xp, zero, win, str, "add");
    /* trim to the output size (extra high padding may give one more window) */
    int64_t z4[4] = {0, 0, 0, 0}, lim[4] = {m->shape[0], m->shape[1], oh, ow}, one4[4] = {1, 1, 1, 1};
    sum = sh_slice(b, sum, z4, lim, one4);
    /* the divisor of each output position (torch's rules), a host-computed [oh, ow] constant */
    int64_t hw[2] = {oh, ow};
    sh_val div;
    float *dv = malloc((size_t)(oh * ow) * sizeof *dv);
    if (!dv) return EM_ERR_OOM;
    bool uniform = true;
    for (int64_t i = 0; i < oh; i++)
        for (int64_t j = 0; j < ow; j++) {
            int64_t hs = i * s[0] - p[0], ws = j * s[1] - p[1];
            int64_t he = hs + k[0] < ih + p[0] ? hs + k[0] : ih + p[0];
            int64_t we = ws + k[1] < iw + p[1] ? ws + k[1] : iw + p[1];
            int64_t size = (he - hs) * (we - ws);
            if (!cip) {
                int64_t hs2 = hs < 0 ? 0 : hs, ws2 = ws < 0 ? 0 : ws;
                int64_t he2 = he > ih ? ih : he, we2 = we > iw ? iw : we;
                size = (he2 - hs2) * (we2 - ws2);
            }
            dv[i * ow + j] = (float)size;
            uniform &= dv[i * ow + j] == dv[0];
        }
    if (uniform) {
        div = sh_const(b, sh_ty(x.t.e, 2, hw), dv[0]);
    } else {
        double *dd = malloc((size_t)(oh * ow) * sizeof *dd);
        if (!dd) {
            free(dv);
            return EM_ERR_OOM;
        }
        for (int64_t q = 0; q < oh * ow; q++) dd[q] = dv[q];
        div = sh_const_vec(b, x.t.e, dd, 2, hw);
        free(dd);
    }
    free(dv);
    int map[2] = {2, 3};
    e->out[0] = sh_bin(b, "divide", sum, sh_bcast_in_dim(b, div, map, 4, sum.t.d));
    return EM_OK;
}

void pj_register_conv(pj_op *t) {
    t[EM_OP_CONV2D].emit = emit_conv2d;
    t[EM_OP_UPSAMPLE_NEAREST].emit = emit_nearest;
    t[EM_OP_UPSAMPLE_BILINEAR].emit = emit_bilinear;
    t[EM_OP_AVG_POOL2D].emit = emit_avg_pool;
}

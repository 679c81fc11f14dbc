/*
 * Indexing ops in StableHLO: gathers and scatters with explicit dimension numbers, stable sorts
 * for topk/sort/argsort, concatenation, one_hot and repeat_interleave. Index values are checked
 * on the host before the program runs (pjrt_backend.c), as the CPU backend checks them, so a
 * bad index is an error at the op and never a silent clamp.
 */
#include <stdio.h>
#include <string.h>

#include "ember/tensor.h"

#include "backends/pjrt/pjrt.h"

static int norm_dim(int64_t d, int nd) { return (int)(d < 0 ? d + nd : d); }

/* Coordinates [S..., nd] for shape S: iota in every dim but `dim`, where `idx` ([S]) goes. */
static sh_val coords(sh_b *b, sh_val idx, int dim, int nd) {
    sh_type it = sh_ty(SH_I64, idx.t.nd, idx.t.d);
    int64_t d1[EM_MAX_DIMS + 1];
    memcpy(d1, idx.t.d, (size_t)idx.t.nd * sizeof *d1);
    d1[idx.t.nd] = 1;
    sh_val parts[EM_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        sh_val v = d == dim ? sh_convert(b, idx, SH_I64) : sh_iota(b, it, d);
        parts[d] = sh_reshape(b, v, idx.t.nd + 1, d1);
    }
    return sh_concat(b, parts, nd, idx.t.nd);
}

/* x[coords] elementwise: result has the coordinates' leading shape. */
static sh_val gather_points(sh_b *b, sh_val x, sh_val co, int nd) {
    sh_gather_dims g;
    memset(&g, 0, sizeof g);
    for (int d = 0; d < nd; d++) {
        g.collapsed[d] = d;
        g.start_index_map[d] = d;
        g.slice_sizes[d] = 1;
    }
    g.n_collapsed = g.n_start_index_map = nd;
    g.index_vector_dim = co.t.nd - 1;
    return sh_gather(b, x, co, &g, sh_ty(x.t.e, co.t.nd - 1, co.t.d));
}

static sh_val scatter_points(sh_b *b, sh_val x, sh_val co, sh_val upd, int nd, const char *op) {
    sh_scatter_dims s;
    memset(&s, 0, sizeof s);
    for (int d = 0; d < nd; d++) {
        s.inserted_window[d] = d;
        s.to_operand[d] = d;
    }
    s.n_inserted_window = s.n_to_operand = nd;
    s.index_vector_dim = co.t.nd - 1;
    return sh_scatter(b, x, co, upd, &s, op);
}

static em_status emit_index_select(pj_emit *e) {
    sh_b *b = e->b;
    sh_val x = e->in[0], idx = sh_convert(b, e->in[1], SH_I64);
    int nd = x.t.nd, dim = norm_dim(e->attrs[0].i, nd);
    if (nd == 0) { /* a 0-d input: index 0 (checked) selects the value itself */
        e->out[0] = x;
        return EM_OK;
    }
    int64_t n = sh_numel(&idx.t); /* a 0-d index keeps the dim (size 1), as torch */
    e->out[0] = sh_take_along(b, x, sh_reshape(b, idx, 1, &n), dim);
    return EM_OK;
}

static em_status emit_gather(pj_emit *e) {
    sh_b *b = e->b;
    sh_val x = e->in[0], idx = e->in[1];
    int nd = x.t.nd, dim = norm_dim(e->attrs[0].i, nd);
    if (e->op->id == EM_OP_TAKE_ALONG_DIM) {
        /* broadcast both outside dim; negative indices count from the end */
        const em_meta *m = &e->out_meta[0];
        int64_t xs[EM_MAX_DIMS];
        memcpy(xs, m->shape, (size_t)nd * sizeof *xs);
        xs[dim] = x.t.d[dim];
        x = sh_bcast_to(b, x, nd, xs);
        idx = sh_bcast_to(b, sh_convert(b, idx, SH_I64), nd, m->shape);
        sh_val neg = sh_cmp(b, "LT", idx, sh_zeros_like(b, idx));
        idx = sh_select(b, neg, sh_bin(b, "add", idx, sh_const_i(b, idx.t, xs[dim])), idx);
    }
    if (nd == 0) {
        e->out[0] = x;
        return EM_OK;
    }
    e->out[0] = gather_points(b, x, coords(b, idx, dim, nd), nd);
    return EM_OK;
}

static em_status emit_scatter(pj_emit *e) {
    sh_b *b = e->b;
    sh_val x = e->in[0], idx = e->in[1], src = e->in[2];
    int nd = x.t.nd, dim = norm_dim(e->attrs[0].i, nd);
    if (nd == 0 || sh_numel(&idx.t) == 0) {
        e->out[0] = nd == 0 && sh_numel(&idx.t) ? src : x;
        return EM_OK;
    }
    int64_t z[EM_MAX_DIMS] = {0}, one[EM_MAX_DIMS];
    for (int d = 0; d < nd; d++) one[d] = 1;
    sh_val upd = sh_slice(b, src, z, idx.t.d, one);
    bool add = e->op->id == EM_OP_SCATTER_ADD;
    sh_elem xe = x.t.e;
    if (add && (xe == SH_BF16 || xe == SH_F16)) { /* sums in f32, one rounding (as torch) */
        x = sh_convert(b, x, SH_F32);
        upd = sh_convert(b, upd, SH_F32);
    }
    sh_val r = scatter_points(b, x, coords(b, idx, dim, nd), upd, nd, add ? "add" : NULL);
    e->out[0] = sh_convert(b, r, xe);
    return EM_OK;
}

/* torch 2.x's CPU index_add on bf16/f16 adds one index at a time, rounding each time, except
 * for ndim > 1 with dim first or last, alpha 1 and an i64 index, where it sums in f32 (the CPU
 * backend's ia_mode documents the three paths); the sequential paths are a loop here. */
typedef struct ia_loop {
    int dim;
    bool scalar16; /* ndim <= 1: the product is rounded too */
    double alpha;  /* already rounded to the dtype */
} ia_loop;

static void ia_body(sh_b *b, sh_val i, sh_val *v, int nv, void *user) {
    (void)nv;
    const ia_loop *L = user;
    sh_val x = v[0], idx = v[1], src = v[2];
    sh_type it = sh_scalar_ty(SH_I64);
    int64_t one = 1;
    sh_val id = sh_reshape(b, sh_dynamic_slice(b, idx, &i, &one), 0, NULL);
    sh_val s_at[EM_MAX_DIMS], d_at[EM_MAX_DIMS];
    int64_t sizes[EM_MAX_DIMS];
    for (int d = 0; d < x.t.nd; d++) {
        sh_val z = sh_const_i(b, it, 0);
        s_at[d] = d == L->dim ? i : z;
        d_at[d] = d == L->dim ? id : z;
        sizes[d] = d == L->dim ? 1 : x.t.d[d];
    }
    sh_val sv = sh_convert(b, sh_dynamic_slice(b, src, s_at, sizes), SH_F32);
    sh_val dv = sh_convert(b, sh_dynamic_slice(b, x, d_at, sizes), SH_F32);
    if (L->alpha != 1.0) {
        sv = sh_bin(b, "multiply", sv, sh_const(b, sv.t, L->alpha));
        if (L->scalar16) sv = sh_convert(b, sh_convert(b, sv, x.t.e), SH_F32);
    }
    sh_val nv2 = sh_convert(b, sh_bin(b, "add", dv, sv), x.t.e);
    v[0] = sh_dynamic_update_slice(b, x, nv2, d_at);
}

static em_status emit_index_add(pj_emit *e) {
    sh_b *b = e->b;
    sh_val x = e->in[0], idx = sh_convert(b, e->in[1], SH_I64), src = e->in[2];
    int nd = x.t.nd, dim = norm_dim(e->attrs[0].i, nd);
    double alpha = e->attrs[1].f;
    sh_elem xe = x.t.e;
    bool half = xe == SH_BF16 || xe == SH_F16;
    int64_t n = sh_numel(&idx.t);
    bool acc16 = nd > 1 && (dim == 0 || dim == nd - 1) && alpha == 1.0 && e->in_dt[1] == EM_I64;
    if (half && !acc16 && n > 0) {
        if (nd == 0) {
            int64_t one1 = 1;
            x = sh_reshape(b, x, 1, &one1);
            src = sh_reshape(b, src, 1, &one1);
        }
        ia_loop L = {nd ? dim : 0, nd <= 1,
                     xe == SH_BF16 ? (double)em_bf16_to_f32(em_f32_to_bf16((float)alpha))
                                   : (double)em_f16_to_f32(em_f32_to_f16((float)alpha))};
        sh_val vals[3] = {x, sh_reshape(b, idx, 1, &n), src};
        sh_for(b, n, vals, 3, ia_body, &L);
        e->out[0] = nd == 0 ? sh_reshape(b, vals[0], 0, NULL) : vals[0];
        return EM_OK;
    }
    if (alpha != 1.0) {
        sh_elem ct = pj_ct(e->in_dt[2]);
        src = sh_convert(b, sh_bin(b, "multiply", sh_convert(b, src, ct), sh_const(b, sh_ty_with(src.t, ct), alpha)),
                         src.t.e);
    }
    if (nd == 0) {
        e->out[0] = n ? sh_bin(b, "add", x, sh_reshape(b, src, 0, NULL)) : x;
        return EM_OK;
    }
    if (half) { /* sums in f32, one rounding (as torch) */
        x = sh_convert(b, x, SH_F32);
        src = sh_convert(b, src, SH_F32);
    }
    e->out[0] = sh_convert(b, sh_scatter_along(b, x, idx, src, dim, "add"), xe);
    return EM_OK;
}

static em_status emit_sort(pj_emit *e) {
    sh_b *b = e->b;
    sh_val x = e->in[0];
    em_op_id op = e->op->id;
    int64_t one = 1;
    bool scalar = x.t.nd == 0;
    if (scalar) { /* one element: itself, at index 0 */
        e->out[op == EM_OP_ARGSORT ? 1 : 0] = x;
        e->out[op == EM_OP_ARGSORT ? 0 : 1] = sh_const_i(b, sh_scalar_ty(SH_I64), 0);
        return EM_OK;
    }
    (void)one;
    int nd = x.t.nd;
    int dim = norm_dim(op == EM_OP_TOPK ? e->attrs[1].i : e->attrs[0].i, nd);
    bool desc = op == EM_OP_TOPK ? e->attrs[2].i != 0 : e->attrs[1].i != 0;
    sh_val key = x;
    if (x.t.e == SH_BF16 || x.t.e == SH_F16) key = sh_convert(b, x, SH_F32);
    sh_val ops[3] = {key, sh_iota(b, sh_ty_with(x.t, SH_I64), dim), x};
    sh_val out[3];
    sh_sort(b, ops, 3, dim, desc, out);
    sh_val vals = out[2], idx = out[1];
    if (op == EM_OP_TOPK) {
        int64_t k = e->attrs[0].i;
        vals = sh_slice_dim(b, vals, dim, 0, k, 1);
        idx = sh_slice_dim(b, idx, dim, 0, k, 1);
    }
    if (op == EM_OP_ARGSORT) {
        e->out[0] = idx;
    } else {
        e->out[0] = vals;
        e->out[1] = idx;
    }
    return EM_OK;
}

static em_status emit_cat(pj_emit *e) {
    sh_b *b = e->b;
    sh_val xs[EM_MAX_INPUTS];
    int n = 0;
    bool stack = e->op->id == EM_OP_STACK;
    int nd = stack ? e->in[0].t.nd : e->out_meta[0].ndim;
    int dim = stack ? norm_dim(e->attrs[0].i, nd + 1) : norm_dim(e->attrs[0].i, nd);
    for (int i = 0; i < e->n_in; i++) {
        sh_val x = e->in[i];
        /* torch's legacy rule: 1-D empty tensors are skipped by cat */
        if (!stack && x.t.nd == 1 && x.t.d[0] == 0 && e->out_meta[0].ndim != 1) continue;
        if (stack) {
            int64_t d[EM_MAX_DIMS];
            for (int j = 0, k = 0; j <= nd; j++) d[j] = j == dim ? 1 : x.t.d[k++];
            x = sh_reshape(b, x, nd + 1, d);
        }
        xs[n++] = x;
    }
    e->out[0] = n ? sh_concat(b, xs, n, dim) : sh_const(b, pj_meta_type(&e->out_meta[0]), 0);
    return EM_OK;
}

static em_status emit_one_hot(pj_emit *e) {
    sh_b *b = e->b;
    sh_val idx = sh_convert(b, e->in[0], SH_I64);
    const em_meta *m = &e->out_meta[0];
    int map[EM_MAX_DIMS];
    for (int i = 0; i < idx.t.nd; i++) map[i] = i;
    sh_val ib = sh_bcast_in_dim(b, idx, map, m->ndim, m->shape);
    sh_val io = sh_iota(b, sh_ty(SH_I64, m->ndim, m->shape), m->ndim - 1);
    e->out[0] = sh_convert(b, sh_cmp(b, "EQ", ib, io), SH_I64);
    return EM_OK;
}

static em_status emit_repeat_interleave(pj_emit *e) {
    sh_b *b = e->b;
    sh_val x = e->in[0];
    int nd = x.t.nd, dim = norm_dim(e->attrs[1].i, nd);
    int64_t r = e->attrs[0].i;
    int64_t d[EM_MAX_DIMS + 1];
    int map[EM_MAX_DIMS];
    for (int i = 0, k = 0; i <= nd; i++) {
        if (i == dim + 1) {
            d[i] = r;
            continue;
        }
        d[i] = x.t.d[k];
        map[k] = i;
        k++;
    }
    sh_val y = sh_bcast_in_dim(b, x, map, nd + 1, d);
    e->out[0] = sh_reshape(b, y, e->out_meta[0].ndim, e->out_meta[0].shape);
    return EM_OK;
}

/* torch's index_copy_ as a value: dst (a value of the destination's logical shape) with
 * dst[.., index[i], ..] = src[.., i, ..] along dim (0 <= dim < rank; 0 for a 0-d dst). index is
 * an integer value, 0-d or 1-d; src has dst's element type and dst's shape except at dim, where
 * it has the index's length. Out-of-range index values were checked on the host, or their
 * updates are dropped (XLA scatter semantics). With duplicate indices which update wins is
 * unspecified. */
static sh_val index_copy_value(sh_b *b, sh_val dst, sh_val index, sh_val src, int dim) {
    int nd = dst.t.nd;
    int64_t n = sh_numel(&index.t);
    bool ok = src.t.e == dst.t.e && src.t.nd == nd && index.t.nd <= 1 && (nd || n == 1) &&
              (nd == 0 || (dim >= 0 && dim < nd));
    for (int d = 0; ok && d < nd; d++) ok = src.t.d[d] == (d == dim ? n : dst.t.d[d]);
    if (!ok) {
        if (sh_ok(b))
            sh_fail(b, "index_copy: src %s[%d dims] does not fit the destination %s[%d dims] "
                    "at dim %d with %lld indices", sh_elem_name(src.t.e), src.t.nd,
                    sh_elem_name(dst.t.e), nd, dim, (long long)n);
        sh_val bad = dst;
        bad.id = -1;
        return bad;
    }
    if (n == 0) return dst;
    sh_val idx = sh_convert(b, index, SH_I64);
    if (nd == 0) { /* one value; its index must be 0, any other is dropped */
        sh_val i0 = sh_reshape(b, idx, 0, NULL);
        sh_val at0 = sh_cmp(b, "EQ", i0, sh_const_i(b, i0.t, 0));
        return sh_select(b, at0, sh_reshape(b, src, 0, NULL), dst);
    }
    return sh_scatter_along(b, dst, idx, src, dim, NULL);
}

/* The destination may be any (non-expanded) view of its storage: its current value is read out
 * of the buffer, updated here, and written back (pj_write_view). */
static sh_val update_index_copy(pj_emit *e, sh_val dst) {
    int nd = dst.t.nd;
    return index_copy_value(e->b, dst, e->in[1], e->in[2], nd ? norm_dim(e->attrs[0].i, nd) : 0);
}

/* Index values along attribute 0's dim of input 0 (index_select, gather, take_along_dim,
 * scatter, scatter_add, index_add, index_copy): input 1 holds them. */
static bool dim_indices(const em_kernel_args *a, pj_index_rule *r) {
    const em_tensor *x = a->in[0];
    int64_t d = a->attrs[0].i;
    int dim = (int)(d < 0 ? d + (x->ndim ? x->ndim : 1) : d);
    int64_t size = x->ndim ? x->shape[dim] : 1;
    bool wrap = a->op->id == EM_OP_TAKE_ALONG_DIM;
    return pj_index_rule_set(r, 1, wrap ? -size : 0, size, "index", " of the index",
                             "dim %d of size %lld%s", dim, (long long)size,
                             wrap ? " (negative values count from the end)" : "");
}

static bool class_indices(const em_kernel_args *a, pj_index_rule *r) {
    return pj_index_rule_set(r, 0, 0, a->attrs[0].i, "class", "", "num_classes %lld",
                             (long long)a->attrs[0].i);
}

void pj_register_index(pj_op *t) {
    t[EM_OP_INDEX_SELECT].emit = emit_index_select;
    t[EM_OP_GATHER].emit = emit_gather;
    t[EM_OP_TAKE_ALONG_DIM].emit = emit_gather;
    t[EM_OP_SCATTER].emit = emit_scatter;
    t[EM_OP_SCATTER_ADD].emit = emit_scatter;
    t[EM_OP_INDEX_ADD].emit = emit_index_add;
    t[EM_OP_TOPK].emit = emit_sort;
    t[EM_OP_SORT].emit = emit_sort;
    t[EM_OP_ARGSORT].emit = emit_sort;
    t[EM_OP_CAT].emit = emit_cat;
    t[EM_OP_STACK].emit = emit_cat;
    t[EM_OP_ONE_HOT].emit = emit_one_hot;
    t[EM_OP_REPEAT_INTERLEAVE].emit = emit_repeat_interleave;
    t[EM_OP_INDEX_COPY].update = update_index_copy;
    t[EM_OP_INDEX_COPY].update_reads_dst = true;
    const em_op_id dim_ops[] = {EM_OP_INDEX_SELECT, EM_OP_GATHER,      EM_OP_TAKE_ALONG_DIM,
                                EM_OP_SCATTER,      EM_OP_SCATTER_ADD, EM_OP_INDEX_ADD,
                                EM_OP_INDEX_COPY};
    for (size_t i = 0; i < sizeof dim_ops / sizeof *dim_ops; i++) t[dim_ops[i]].indices = dim_indices;
    t[EM_OP_ONE_HOT].indices = class_indices;
}

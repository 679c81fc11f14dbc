/*
 * paged_attention in StableHLO (em_paged_attention on PJRT devices), as the CPU kernel computes
 * it (src/backends/cpu/nn_paged_attention.c): each row's blocks are gathered out of the pools
 * through its block table (one gather of whole blocks per pool), the logits masked by the row's
 * length and each query's causal position (and window), softmax and the weighted sum in f32,
 * one rounding to q's dtype. Without this emitter the dispatcher ran the op as a composition
 * (src/ops/decomp.c: slots computed on the device, index_select, a mask tensor, sdpa); here it is
 * one program per call and one node in compiled programs, with the same results.
 *
 * The values the CPU kernel checks (a length past the table, a block id outside the pools) are
 * checked on the host before an eager call runs (prepare), with the kernel's messages; compiled
 * programs cannot check values: a gather clamps an out-of-range id (XLA's semantics), and
 * positions past a row's length are masked.
 */
#include <math.h>
#include <stdlib.h>

#include "backends/pjrt/pjrt.h"

static int64_t idx_at(const void *buf, em_dtype dt, int64_t i) {
    return dt == EM_I64 ? ((const int64_t *)buf)[i] : ((const int32_t *)buf)[i];
}

/* The kernel's value checks, in its order: per row, its length, then the ids of the blocks
 * it reads. The tables are small (rows x blocks per row), so they are always read. */
static em_status paged_prepare(em_ctx *c, const em_kernel_args *a, em_device *d, pj_extra *x) {
    (void)x;
    if (((pj_dev *)d->impl)->pl->aot) return EM_OK; /* no values on a compile-only device */
    em_tensor *bt = a->in[3], *ln = a->in[4];
    int64_t rows = bt->shape[0], mb = bt->shape[1], bs = a->attrs[0].i;
    int64_t nblk = a->in[1]->shape[1] / bs;
    void *t = NULL, *l = NULL;
    em_status s = pj_read_indices(c, bt, true, &t);
    if (!s) s = pj_read_indices(c, ln, true, &l);
    for (int64_t r = 0; !s && l && r < rows; r++) {
        int64_t len = idx_at(l, ln->dtype, r);
        if (len < 0 || len > mb * bs) {
            s = em_op_fail(c, EM_ERR_INVALID_ARG,
                           "row %lld holds %lld positions; its table has room for %lld",
                           (long long)r, (long long)len, (long long)(mb * bs));
            break;
        }
        for (int64_t m = 0; t && m * bs < len; m++) {
            int64_t id = idx_at(t, bt->dtype, r * mb + m);
            if (id < 0 || id >= nblk) {
                s = em_op_fail(c, EM_ERR_INVALID_ARG,
                               "row %lld, block %lld: id %lld is outside the pools' %lld blocks",
                               (long long)r, (long long)m, (long long)id, (long long)nblk);
                break;
            }
        }
    }
    free(t);
    free(l);
    return s;
}

/* pool [Hkv, S, D] -> the rows' positions [Hkv, B, MB * bs, D]: the pool seen as blocks
 * [Hkv, S / bs, bs, D], whole blocks taken at the table's ids [B, MB] */
static sh_val gather_rows(sh_b *b, sh_val pool, sh_val ids, int64_t bs) {
    int64_t h = pool.t.d[0], s = pool.t.d[1], d = pool.t.d[2];
    int64_t rows = ids.t.d[0], mb = ids.t.d[1];
    sh_val blocks = sh_reshape(b, pool, 4, (int64_t[]){h, s / bs, bs, d});
    sh_val g = sh_take_along(b, blocks, ids, 1); /* [Hkv, B, MB, bs, D] */
    return sh_reshape(b, g, 4, (int64_t[]){h, rows, mb * bs, d});
}

static em_status emit_paged(pj_emit *e) {
    sh_b *b = e->b;
    int64_t bs = e->attrs[0].i, win = e->attrs[2].i;
    double cap = e->attrs[3].f;
    sh_val ids = sh_convert(b, e->in[3], SH_I64), lens = sh_convert(b, e->in[4], SH_I64);
    /* bf16/f16 q and keys go into the dot as they are (their products are exact in the f32
     * accumulator), as the sdpa emitter does */
    sh_elem qe = e->in[0].t.e;
    bool same = qe == e->in[1].t.e && qe != SH_F64 && qe != SH_F32;
    sh_val q = same ? e->in[0] : sh_convert(b, e->in[0], SH_F32);
    sh_val k = gather_rows(b, same ? e->in[1] : sh_convert(b, e->in[1], SH_F32), ids, bs);
    sh_val v = gather_rows(b, sh_convert(b, e->in[2], SH_F32), ids, bs);
    int64_t B = q.t.d[0], Hq = q.t.d[1], T = q.t.d[2], D = q.t.d[3];
    int64_t Hk = k.t.d[0], Dv = v.t.d[3], G = Hq / Hk;
    double scale = e->attrs[1].f != 0 ? e->attrs[1].f : 1.0 / sqrt((double)D);
    q = sh_reshape(b, q, 5, (int64_t[]){B, Hk, G, T, D});
    /* q [B, Hk, G, T, D] . k [Hk, B, L, D] over (B, Hk) -> [B, Hk, G, T, L] */
    int lb[2] = {0, 1}, rb[2] = {1, 0}, lc = 4, rc = 3;
    sh_val l = sh_dot(b, q, k, lb, rb, 2, &lc, &rc, 1, SH_F32);
    l = sh_bin(b, "multiply", l, sh_const(b, l.t, (float)scale));
    if (cap > 0) {
        sh_val cc = sh_const(b, l.t, (float)cap);
        l = sh_bin(b, "multiply", cc, sh_un(b, "tanh", sh_bin(b, "divide", l, cc)));
    }
    /* query i of row r sits at lens[r] - T + i and sees the positions j <= it (and > it -
     * window); positions past the length are never visible, whatever their blocks hold */
    sh_type lt = l.t, it = sh_ty_with(lt, SH_I64);
    int map0[1] = {0};
    sh_val qpos = sh_bin(b, "add", sh_bcast_in_dim(b, lens, map0, 5, lt.d),
                         sh_bin(b, "subtract", sh_iota(b, it, 3), sh_const_i(b, it, T)));
    sh_val kj = sh_iota(b, it, 4);
    sh_val vis = sh_cmp(b, "LE", kj, qpos);
    if (win > 0)
        vis = sh_bin(b, "and", vis,
                     sh_cmp(b, "GT", kj, sh_bin(b, "subtract", qpos, sh_const_i(b, it, win))));
    l = sh_select(b, vis, l, sh_const(b, lt, -INFINITY));
    int dk = 4, map4[4] = {0, 1, 2, 3};
    sh_val mx = pj_reduce_nan(e->pl, b, l, sh_const(b, sh_scalar_ty(SH_F32), -INFINITY), &dk, 1,
                              true);
    /* a query with no visible key: exp(-inf - 0) = 0 everywhere, a zero sum gives zeros */
    sh_val mx_ok = sh_select(b, sh_cmp(b, "EQ", mx, sh_const(b, mx.t, -INFINITY)),
                             sh_zeros_like(b, mx), mx);
    sh_val p = sh_un(b, "exponential",
                     sh_bin(b, "subtract", l, sh_bcast_in_dim(b, mx_ok, map4, 5, lt.d)));
    sh_val sum = sh_reduce(b, p, sh_const(b, sh_scalar_ty(SH_F32), 0), &dk, 1, "add");
    sh_val safe = sh_select(b, sh_cmp(b, "EQ", sum, sh_zeros_like(b, sum)),
                            sh_const(b, sum.t, 1), sum);
    p = sh_bin(b, "divide", p, sh_bcast_in_dim(b, safe, map4, 5, lt.d));
    /* values past a row's length are zeroed: the CPU kernel never reads them, and a weight of 0
     * times a stale NaN there would still be NaN */
    sh_type vt = sh_ty_with(v.t, SH_I64);
    int map1[1] = {1};
    sh_val live = sh_cmp(b, "LT", sh_iota(b, vt, 2), sh_bcast_in_dim(b, lens, map1, 4, vt.d));
    v = sh_select(b, live, v, sh_zeros_like(b, v));
    /* p [B, Hk, G, T, L] . v [Hk, B, L, Dv] -> [B, Hk, G, T, Dv] */
    int lc2 = 4, rc2 = 2;
    sh_val o = sh_dot(b, p, v, lb, rb, 2, &lc2, &rc2, 1, SH_F32);
    o = sh_reshape(b, o, 4, (int64_t[]){B, Hq, T, Dv});
    e->out[0] = sh_convert(b, o, sh_elem_of(e->out_meta[0].dtype));
    return EM_OK;
}

void pj_register_paged(pj_op *t) {
    t[EM_OP_PAGED_ATTENTION].emit = emit_paged;
    t[EM_OP_PAGED_ATTENTION].prepare = paged_prepare;
}

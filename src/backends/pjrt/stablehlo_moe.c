/*
 * ragged_dot in StableHLO. Rows of lhs[M, K] are grouped contiguously by group_sizes[G]; group
 * g's rows multiply rhs[g] ([G, K, N], or [G, N, K] when rhs_nk); rows past the sum give zeros.
 *
 * Lowerings (EMBER_PJRT_RAGGED=native|gather|dense overrides the choice):
 *  - native: chlo.ragged_dot, the plugin's own ragged dot (used on TPU, as JAX does);
 *  - gather: each row gathers its group's matrix and a batched dot follows; M*K*N weights move,
 *    the right cost at decode sizes (M <= G);
 *  - dense: one dot of lhs with every group's matrix ([M, G, N]) and a select of each row's
 *    group; G times the flops, but no data-dependent shapes, for prefill sizes.
 * Products accumulate in f32 for bf16/f16 and are rounded once, as the CPU does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"

/* Group of each row: g(m) = #{j : m >= cumsum_j}; G for rows past the sum. */
static sh_val row_groups(sh_b *b, sh_val gs, int64_t m) {
    int64_t g = gs.t.d[0];
    sh_val cs = sh_convert(b, gs, SH_I64);
    sh_val zero = sh_const(b, sh_scalar_ty(SH_I64), 0);
    for (int64_t s = 1; s < g; s *= 2) {
        int64_t lo = s, hi = 0, in = 0;
        cs = sh_bin(b, "add", cs, sh_pad(b, sh_slice_dim(b, cs, 0, 0, g - s, 1), zero, &lo, &hi, &in));
    }
    int64_t mg[2] = {m, g};
    sh_type t = sh_ty(SH_I64, 2, mg);
    int map1[1] = {1};
    sh_val csb = sh_bcast_in_dim(b, cs, map1, 2, mg);
    sh_val ge = sh_convert(b, sh_cmp(b, "GE", sh_iota(b, t, 0), csb), SH_I64);
    int d1 = 1;
    return sh_reduce(b, ge, zero, &d1, 1, "add");
}

static const char *ragged_mode(const pj_plugin *pl) {
    const char *m = getenv("EMBER_PJRT_RAGGED");
    if (m && (!strcmp(m, "native") || !strcmp(m, "gather") || !strcmp(m, "dense"))) return m;
    return pl && !strcmp(pl->platform, "tpu") ? "native" : NULL;
}

static em_status emit_ragged(pj_emit *e) {
    sh_b *b = e->b;
    sh_val lhs = e->in[0], rhs = e->in[1], gs = e->in[2];
    bool nk = e->attrs[0].i != 0;
    int64_t m = lhs.t.d[0], k = lhs.t.d[1], g = rhs.t.d[0];
    int64_t n = nk ? rhs.t.d[1] : rhs.t.d[2];
    sh_elem acc = lhs.t.e == SH_F64 ? SH_F64 : SH_F32;
    sh_elem oe = sh_elem_of(e->out_meta[0].dtype);
    int64_t mn[2] = {m, n};
    const char *mode = ragged_mode(e->pl);
    if (!mode) mode = m <= g ? "gather" : "dense";
    if (m == 0 || n == 0 || g == 0 || k == 0) {
        e->out[0] = sh_const(b, sh_ty(oe, 2, mn), 0);
        return EM_OK;
    }
    if (!strcmp(mode, "native")) {
        char a[512];
        snprintf(a, sizeof a,
                 "ragged_dot_dimension_numbers = #chlo.ragged_dot<lhs_batching_dimensions = [], "
                 "rhs_batching_dimensions = [], lhs_contracting_dimensions = [1], "
                 "rhs_contracting_dimensions = [%d], lhs_ragged_dimensions = [0], "
                 "rhs_group_dimensions = [0]>, precision_config = [#chlo<precision DEFAULT>, "
                 "#chlo<precision DEFAULT>]",
                 nk ? 2 : 1);
        sh_val ops[3] = {lhs, rhs, gs};
        e->out[0] = sh_convert(b, sh_op(b, "chlo.ragged_dot", ops, 3, a, sh_ty(acc, 2, mn)), oe);
        return EM_OK;
    }
    sh_val grp = row_groups(b, gs, m); /* [M] i64 */
    sh_val valid = sh_cmp(b, "LT", grp, sh_const_i(b, grp.t, g));
    int mapm[1] = {0};
    if (!strcmp(mode, "gather")) {
        sh_val idx = sh_bin(b, "minimum", grp, sh_const_i(b, grp.t, g - 1));
        int64_t m1[2] = {m, 1};
        idx = sh_reshape(b, idx, 2, m1);
        sh_gather_dims gd;
        memset(&gd, 0, sizeof gd);
        gd.offset_dims[0] = 1;
        gd.offset_dims[1] = 2;
        gd.n_offset = 2;
        gd.collapsed[0] = 0;
        gd.n_collapsed = 1;
        gd.start_index_map[0] = 0;
        gd.n_start_index_map = 1;
        gd.index_vector_dim = 1;
        gd.slice_sizes[0] = 1;
        gd.slice_sizes[1] = rhs.t.d[1];
        gd.slice_sizes[2] = rhs.t.d[2];
        int64_t wd[3] = {m, rhs.t.d[1], rhs.t.d[2]};
        sh_val w = sh_gather(b, rhs, idx, &gd, sh_ty(rhs.t.e, 3, wd)); /* [M, K, N] or [M, N, K] */
        int lb = 0, rb = 0, lc = 1, rc = nk ? 2 : 1;
        sh_val r = sh_dot(b, lhs, w, &lb, &rb, 1, &lc, &rc, 1, acc); /* [M, N] */
        sh_val vb = sh_bcast_in_dim(b, valid, mapm, 2, mn);
        r = sh_select(b, vb, r, sh_zeros_like(b, r));
        e->out[0] = sh_convert(b, r, oe);
        return EM_OK;
    }
    /* dense: [M, G, N] products, each row keeps its group's */
    int lc = 1, rc = nk ? 2 : 1;
    sh_val all = sh_dot(b, lhs, rhs, NULL, NULL, 0, &lc, &rc, 1, acc);
    int64_t mgn[3] = {m, g, n};
    int64_t mg[2] = {m, g};
    sh_val gid = sh_iota(b, sh_ty(SH_I64, 2, mg), 1);
    sh_val onehot = sh_cmp(b, "EQ", gid, sh_bcast_in_dim(b, grp, mapm, 2, mg));
    int map2[2] = {0, 1};
    sh_val oh3 = sh_bcast_in_dim(b, onehot, map2, 3, mgn);
    sh_val sel = sh_select(b, oh3, all, sh_zeros_like(b, all));
    int d1 = 1;
    sh_val r = sh_reduce(b, sel, sh_const(b, sh_scalar_ty(acc), 0), &d1, 1, "add");
    e->out[0] = sh_convert(b, r, oe);
    return EM_OK;
}

void pj_register_moe(pj_emit_fn *t) { t[EM_OP_RAGGED_DOT] = emit_ragged; }

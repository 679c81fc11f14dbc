/*
 * ragged_dot in StableHLO. Rows of lhs[M, K] are grouped contiguously by group_sizes[G]; group
 * g's rows multiply rhs[g] ([G, K, N], or [G, N, K] when rhs_nk, or that packed as [G, N/32, K/2,
 * 32, 2], which is transposed back first); rows past the sum give zeros.
 *
 * Lowerings (EMBER_PJRT_RAGGED=native|grouped|gather|dense overrides the choice):
 *  - native: chlo.ragged_dot, the plugin's own ragged dot (used on TPU, as JAX does);
 *  - grouped (the default elsewhere): the tokens are already sorted by group, and the host knows
 *    the group sizes (it checks them), so it makes a plan: the non-empty groups (padded to a
 *    power of two) and, per group, the rows it takes (padded to a power of two). The program
 *    gathers those groups' matrices and rows, runs one batched dot_general and scatters the
 *    rows back: only the hit groups' weights are read, and the program depends only on the two
 *    padded sizes, so a decode loop compiles a handful of programs;
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
    if (m && (!strcmp(m, "native") || !strcmp(m, "gather") || !strcmp(m, "dense") ||
              !strcmp(m, "grouped")))
        return m;
    /* a compile-only device has no group sizes to plan with: XLA's own ragged dot there too */
    return pl && (!strcmp(pl->platform, "tpu") || pl->aot) ? "native" : "grouped";
}

/* ragged_dot's grouping plan, made on the host from the (checked) group sizes: the non-empty
 * groups, padded to a power of two, and for each of their slots the lhs row it takes (or M). */
typedef struct ragged_plan {
    int64_t hb, cb;   /* groups used (padded), rows per group (padded) */
    int32_t *experts; /* [hb] */
    int32_t *rows;    /* [hb * cb], M for an empty slot */
} ragged_plan;

static int64_t pow2_at_least(int64_t n) {
    int64_t p = 1;
    while (p < n) p *= 2;
    return p;
}

static em_status plan_make(em_ctx *c, const int32_t *gs, int64_t g, int64_t m, ragged_plan *p) {
    int64_t h = 0, cmax = 0;
    for (int64_t i = 0; i < g; i++) {
        h += gs[i] > 0;
        if (gs[i] > cmax) cmax = gs[i];
    }
    p->hb = pow2_at_least(h ? h : 1);
    if (p->hb > g && g > 0) p->hb = g;
    p->cb = pow2_at_least(cmax ? cmax : 1);
    if (p->cb > m && m > 0) p->cb = m;
    p->experts = calloc((size_t)p->hb, sizeof *p->experts);
    p->rows = malloc((size_t)(p->hb * p->cb) * sizeof *p->rows);
    if (!p->experts || !p->rows) {
        free(p->experts);
        free(p->rows);
        p->experts = NULL;
        p->rows = NULL;
        return em_op_fail(c, EM_ERR_OOM, "no memory for the ragged_dot plan");
    }
    for (int64_t i = 0; i < p->hb * p->cb; i++) p->rows[i] = (int32_t)m;
    int64_t off = 0, k = 0;
    for (int64_t i = 0; i < g; i++) {
        if (gs[i] > 0) {
            p->experts[k] = (int32_t)i;
            for (int64_t j = 0; j < gs[i]; j++) p->rows[k * p->cb + j] = (int32_t)(off + j);
            k++;
        }
        off += gs[i];
    }
    return EM_OK;
}

static em_status emit_grouped(pj_emit *e, sh_val lhs, sh_val rhs, bool nk, sh_elem acc, sh_elem oe) {
    sh_b *b = e->b;
    int64_t m = lhs.t.d[0], k = lhs.t.d[1], n = nk ? rhs.t.d[1] : rhs.t.d[2];
    int64_t hb = e->variant[0], cb = e->variant[1];
    sh_val experts = e->extra[0], rows = e->extra[1];
    sh_val w = sh_take_along(b, rhs, experts, 0); /* [Hb, K, N] or [Hb, N, K] */
    sh_val valid = sh_cmp(b, "LT", rows, sh_const_i(b, rows.t, m));
    sh_val rc = sh_bin(b, "minimum", rows, sh_const_i(b, rows.t, m - 1));
    sh_val x = sh_take_along(b, lhs, rc, 0); /* [Hb*Cb, K] */
    int64_t x3[3] = {hb, cb, k};
    x = sh_reshape(b, x, 3, x3);
    int lb = 0, rb = 0, lc = 2, rcd = nk ? 2 : 1;
    sh_val y = sh_dot(b, x, w, &lb, &rb, 1, &lc, &rcd, 1, acc); /* [Hb, Cb, N] */
    int64_t y2[2] = {hb * cb, n};
    y = sh_reshape(b, y, 2, y2);
    int map0[1] = {0};
    y = sh_select(b, sh_bcast_in_dim(b, valid, map0, 2, y2), y, sh_zeros_like(b, y));
    /* rows back to their places; empty slots add zeros to row M-1 */
    int64_t mn[2] = {m, n};
    sh_val out = sh_const(b, sh_ty(acc, 2, mn), 0);
    out = sh_scatter_along(b, out, rc, y, 0, "add");
    e->out[0] = sh_convert(b, out, oe);
    return EM_OK;
}

static em_status emit_ragged(pj_emit *e) {
    sh_b *b = e->b;
    sh_val lhs = e->in[0], rhs = e->in[1], gs = e->in[2];
    bool nk = e->attrs[0].i != 0;
    if (rhs.t.nd == 5) { /* packed [G, N/32, K/2, 32, 2] (a CPU layout): back to [G, N, K] */
        const int perm[5] = {0, 1, 3, 2, 4};
        int64_t gnk[3] = {rhs.t.d[0], rhs.t.d[1] * 32, rhs.t.d[2] * 2};
        rhs = sh_reshape(b, sh_transpose(b, rhs, perm), 3, gnk);
    }
    int64_t m = lhs.t.d[0], k = lhs.t.d[1], g = rhs.t.d[0];
    int64_t n = nk ? rhs.t.d[1] : rhs.t.d[2];
    sh_elem acc = lhs.t.e == SH_F64 ? SH_F64 : SH_F32;
    sh_elem oe = sh_elem_of(e->out_meta[0].dtype);
    int64_t mn[2] = {m, n};
    const char *mode = ragged_mode(e->pl);
    if (m == 0 || n == 0 || g == 0 || k == 0) {
        e->out[0] = sh_const(b, sh_ty(oe, 2, mn), 0);
        return EM_OK;
    }
    if (!strcmp(mode, "grouped")) {
        if (e->n_extra == 2) return emit_grouped(e, lhs, rhs, nk, acc, oe);
        mode = m <= g ? "gather" : "dense"; /* no plan (the sizes were not read): no host data */
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
        sh_val w = sh_take_along(b, rhs, idx, 0); /* [M, K, N] or [M, N, K] */
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

/* Group sizes are data: non-negative, at most M rows in all, as the CPU checks them. */
static em_status check_sizes(em_ctx *c, const int32_t *gs, int64_t g, int64_t m) {
    int64_t total = 0;
    for (int64_t i = 0; i < g; i++) {
        if (gs[i] < 0)
            return em_op_fail(c, EM_ERR_INVALID_ARG, "group_sizes[%lld] = %lld is negative",
                              (long long)i, (long long)gs[i]);
        total += gs[i];
        if (total > m)
            return em_op_fail(c, EM_ERR_INVALID_ARG,
                              "group sizes sum to more than the %lld rows of lhs (reached %lld at "
                              "group %lld)",
                              (long long)m, (long long)total, (long long)i);
    }
    return EM_OK;
}

/* The host's part: the group sizes are checked when they are read (pj_read_indices: always for
 * the grouped lowering, which needs them for its plan, else as the index check allows), and
 * the grouped lowering's plan goes to the program as two extra inputs (not for a kernel-hub
 * snippet, x->checks_only: the checks alone). */
static em_status ragged_prepare(em_ctx *c, const em_kernel_args *a, em_device *d, pj_extra *x) {
    const pj_plugin *pl = ((pj_dev *)d->impl)->pl;
    bool grouped = !x->checks_only && !strcmp(ragged_mode(pl), "grouped");
    /* a compile-only device has no group sizes: nothing to check, no plan to make */
    if (pl->aot)
        return grouped ? pj_aot_refuse(c, d,
                                       "ragged_dot's grouped lowering (a plan from the group "
                                       "sizes; EMBER_PJRT_RAGGED=native, gather or dense compile "
                                       "without it)",
                                       true)
                       : EM_OK;
    int64_t g = a->in[2]->numel, m = a->in[0]->shape[0];
    void *buf;
    em_status s = pj_read_indices(c, a->in[2], grouped, &buf);
    if (s || !buf) return s;
    const int32_t *gs = buf;
    s = check_sizes(c, gs, g, m);
    if (!s && grouped) {
        ragged_plan p;
        s = plan_make(c, gs, g, m, &p);
        if (!s) {
            x->variant[0] = p.hb;
            x->variant[1] = p.cb;
            s = pj_extra_add(c, d, x, p.experts, p.hb);
            if (!s) s = pj_extra_add(c, d, x, p.rows, p.hb * p.cb);
            free(p.experts);
            free(p.rows);
        }
    }
    free(buf);
    return s;
}

void pj_register_moe(pj_op *t) {
    t[EM_OP_RAGGED_DOT].emit = emit_ragged;
    t[EM_OP_RAGGED_DOT].prepare = ragged_prepare;
}

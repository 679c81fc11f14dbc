/* matmul and linear in StableHLO: dot_general accumulating in f32 (bf16, f16, f32), one rounding
 * to the output dtype, as the CPU backend computes them. */
#include <string.h>

#include "backends/pjrt/pjrt.h"

static sh_elem acc_of(sh_elem e) { return e == SH_F64 ? SH_F64 : SH_F32; }

static em_status emit_matmul(pj_emit *e) {
    sh_b *b = e->b;
    sh_val a = e->in[0], w = e->in[1];
    sh_elem acc = acc_of(a.t.e);
    if (a.t.nd == 1) {
        int64_t d[2] = {1, a.t.d[0]};
        a = sh_reshape(b, a, 2, d);
    }
    if (w.t.nd == 1) {
        int64_t d[2] = {w.t.d[0], 1};
        w = sh_reshape(b, w, 2, d);
    }
    int64_t m = a.t.d[a.t.nd - 2], k = a.t.d[a.t.nd - 1], n = w.t.d[w.t.nd - 1];
    int ba = a.t.nd - 2, bw = w.t.nd - 2;
    int lc = 1, rc = 0;
    bool w_batched = false;
    for (int i = 0; i < bw; i++) w_batched |= w.t.d[i] != 1;
    if (!w_batched) {
        /* one weight matrix: fold a's batch into its rows */
        int64_t rows = m;
        for (int i = 0; i < ba; i++) rows *= a.t.d[i];
        int64_t ad[2] = {rows, k}, wd[2] = {k, n};
        sh_val a2 = sh_reshape(b, a, 2, ad), w2 = sh_reshape(b, w, 2, wd);
        e->out[0] = sh_dot(b, a2, w2, NULL, NULL, 0, &lc, &rc, 1, acc);
        return EM_OK;
    }
    /* broadcast the batch dims, then one batched dot */
    int nb = ba > bw ? ba : bw;
    int64_t bs[EM_MAX_DIMS], bn = 1;
    for (int i = 0; i < nb; i++) {
        int ia = i - (nb - ba), iw = i - (nb - bw);
        int64_t sa = ia >= 0 ? a.t.d[ia] : 1, sw = iw >= 0 ? w.t.d[iw] : 1;
        bs[i] = sa == 1 ? sw : sa;
        bn *= bs[i];
    }
    int64_t da[EM_MAX_DIMS], dw[EM_MAX_DIMS];
    memcpy(da, bs, (size_t)nb * sizeof *bs);
    memcpy(dw, bs, (size_t)nb * sizeof *bs);
    da[nb] = m;
    da[nb + 1] = k;
    dw[nb] = k;
    dw[nb + 1] = n;
    a = sh_bcast_to(b, a, nb + 2, da);
    w = sh_bcast_to(b, w, nb + 2, dw);
    int64_t a3[3] = {bn, m, k}, w3[3] = {bn, k, n};
    a = sh_reshape(b, a, 3, a3);
    w = sh_reshape(b, w, 3, w3);
    int lb = 0, rb = 0, lc3 = 2, rc3 = 1;
    e->out[0] = sh_dot(b, a, w, &lb, &rb, 1, &lc3, &rc3, 1, acc);
    return EM_OK;
}

static em_status emit_linear(pj_emit *e) {
    sh_b *b = e->b;
    sh_val x = e->in[0], w = e->in[1];
    sh_elem acc = acc_of(x.t.e);
    int64_t k = x.t.d[x.t.nd - 1], n = w.t.d[0];
    int64_t rows = 1;
    for (int i = 0; i < x.t.nd - 1; i++) rows *= x.t.d[i];
    int64_t xd[2] = {rows, k};
    x = sh_reshape(b, x, 2, xd);
    int lc = 1, rc = 1;
    sh_val r = sh_dot(b, x, w, NULL, NULL, 0, &lc, &rc, 1, acc); /* [rows, N] */
    if (e->n_in > 2 && e->present[2]) {
        int64_t rn[2] = {rows, n};
        sh_val bias = sh_bcast_to(b, sh_convert(b, e->in[2], acc), 2, rn);
        r = sh_bin(b, "add", r, bias);
    }
    e->out[0] = r;
    return EM_OK;
}

/* In a whole program on XLA's CPU plugin, the one-row linear is the rank-1 dot whose fused
 * convert-and-dot reads the weight once (as the op-by-op linear does), its row materialized
 * (pj_materialize says why). Measured on the 28-layer bf16 step, batch 1: 1.66x eager (0.96x
 * with rows padded to two, which made Eigen repack the weight every call). The lowering
 * reshapes the [N] result. */
static em_status emit_linear_program(pj_emit *e) {
    const sh_val *x = &e->in[0];
    int64_t rows = 1;
    for (int i = 0; i < x->t.nd - 1; i++) rows *= x->t.d[i];
    if (!pj_xla_cpu(e->pl) || (e->n_in > 2 && e->present[2]) || x->t.nd < 1 || rows != 1)
        return emit_linear(e);
    sh_b *b = e->b;
    int64_t k = x->t.d[x->t.nd - 1];
    sh_val row = pj_materialize(b, sh_reshape(b, *x, 1, &k));
    int lc = 0, rc = 1;
    e->out[0] = sh_dot(b, row, e->in[1], NULL, NULL, 0, &lc, &rc, 1, acc_of(row.t.e));
    return EM_OK;
}

void pj_register_linalg(pj_op *t) {
    t[EM_OP_MATMUL].emit = emit_matmul;
    t[EM_OP_LINEAR].emit = emit_linear;
    t[EM_OP_LINEAR].emit_program = emit_linear_program;
}

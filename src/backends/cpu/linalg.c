/*
 * matmul and linear on the CPU: the op's geometry (1-D promotion, batch broadcasting, strided
 * views) becomes one em_gemm_args; gemm.c does the arithmetic.
 */
#include <stdlib.h>

#include "backends/cpu/gemm.h"

/*
 * Simplifies the batch dims: drops size-1 dims, merges neighbours that are one run in A, B and
 * C, then folds inner batch dims into M where B is shared across them and A's and C's rows
 * continue through them (x[b, s, :] @ W becomes one (b*s) x K product).
 */
static void simplify_batch(em_gemm_args *g) {
    int nd = 0;
    for (int d = 0; d < g->batch_ndim; d++) {
        if (g->batch_shape[d] == 1) continue;
        if (nd > 0) {
            int p = nd - 1;
            int64_t s = g->batch_shape[d];
            if (g->a_bs[p] == g->a_bs[d] * s && g->b_bs[p] == g->b_bs[d] * s &&
                g->c_bs[p] == g->c_bs[d] * s) {
                g->batch_shape[p] *= s;
                g->a_bs[p] = g->a_bs[d];
                g->b_bs[p] = g->b_bs[d];
                g->c_bs[p] = g->c_bs[d];
                continue;
            }
        }
        g->batch_shape[nd] = g->batch_shape[d];
        g->a_bs[nd] = g->a_bs[d];
        g->b_bs[nd] = g->b_bs[d];
        g->c_bs[nd] = g->c_bs[d];
        nd++;
    }
    g->batch_ndim = nd;
    while (g->batch_ndim > 0) {
        int d = g->batch_ndim - 1;
        if (g->b_bs[d] != 0 || g->c_bs[d] != g->m * g->ldc) break;
        if (g->m == 1)
            g->a_rs = g->a_bs[d];
        else if (g->a_bs[d] != g->m * g->a_rs)
            break;
        g->m *= g->batch_shape[d];
        g->batch_ndim--;
    }
}

/* Batch dims of an operand, right-aligned against the output's nb batch dims: its stride, or 0
 * where it is broadcast. */
static void batch_strides(const em_tensor *t, int t_batch, int nb, int64_t *out) {
    for (int d = 0; d < nb; d++) {
        int td = d - (nb - t_batch);
        out[d] = td >= 0 && t->shape[td] != 1 ? t->strides[td] : 0;
    }
}

static em_status run(const em_kernel_args *ka, em_gemm_args *g, const em_tensor *bias) {
    float *b32 = NULL;
    if (bias) {
        b32 = malloc((size_t)(g->n > 0 ? g->n : 1) * sizeof *b32);
        if (!b32) return em_op_fail(ka->ctx, EM_ERR_OOM, "cannot allocate the bias buffer");
        for (int64_t j = 0; j < g->n; j++) b32[j] = (float)em_cpu_get_f64(bias, j);
        g->bias = b32;
    }
    simplify_batch(g);
    em_status s = em_gemm(g);
    free(b32);
    if (s != EM_OK)
        return em_op_fail(ka->ctx, s,
                          "cannot allocate packing buffers for a %lldx%lldx%lld (MxKxN) product",
                          (long long)g->m, (long long)g->k, (long long)g->n);
    return EM_OK;
}

static em_status matmul_kernel(const em_kernel_args *ka) {
    const em_tensor *a = ka->in[0], *b = ka->in[1];
    em_tensor *o = ka->out[0];
    if (o->numel == 0) return EM_OK;
    em_gemm_args g = {0};
    g.dtype = o->dtype;
    g.a = em_tensor_ptr(a);
    g.b = em_tensor_ptr(b);
    g.c = em_tensor_ptr(o);
    int an = a->ndim, bn = b->ndim;
    g.k = a->shape[an - 1];
    g.a_cs = a->strides[an - 1];
    if (an >= 2) {
        g.m = a->shape[an - 2];
        g.a_rs = a->strides[an - 2];
    } else {
        g.m = 1;
    }
    if (bn >= 2) {
        g.n = b->shape[bn - 1];
        g.b_rs = b->strides[bn - 2];
        g.b_cs = b->strides[bn - 1];
    } else {
        g.n = 1;
        g.b_rs = b->strides[0];
    }
    /* C is contiguous: [batch..., M if a is 2-D+, N if b is 2-D+] */
    g.ldc = bn >= 2 ? g.n : 1;
    int nb = o->ndim - (an >= 2) - (bn >= 2);
    g.batch_ndim = nb;
    for (int d = 0; d < nb; d++) {
        g.batch_shape[d] = o->shape[d];
        g.c_bs[d] = o->strides[d];
    }
    batch_strides(a, an > 2 ? an - 2 : 0, nb, g.a_bs);
    batch_strides(b, bn > 2 ? bn - 2 : 0, nb, g.b_bs);
    return run(ka, &g, NULL);
}

static void linear_args(const em_kernel_args *ka, em_gemm_args *out) {
    const em_tensor *x = ka->in[0], *w = ka->in[1];
    em_tensor *o = ka->out[0];
    em_gemm_args g = {0};
    g.dtype = o->dtype;
    g.a = em_tensor_ptr(x);
    g.b = em_tensor_ptr(w);
    g.c = em_tensor_ptr(o);
    int xn = x->ndim;
    g.k = x->shape[xn - 1];
    g.a_cs = x->strides[xn - 1];
    g.n = w->shape[0];
    g.b_rs = w->strides[1]; /* B = w^T */
    g.b_cs = w->strides[0];
    g.ldc = g.n;
    if (xn >= 2) {
        g.m = x->shape[xn - 2];
        g.a_rs = x->strides[xn - 2];
    } else {
        g.m = 1;
    }
    int nb = xn > 2 ? xn - 2 : 0;
    g.batch_ndim = nb;
    for (int d = 0; d < nb; d++) {
        g.batch_shape[d] = x->shape[d];
        g.a_bs[d] = x->strides[d];
        g.b_bs[d] = 0;
        g.c_bs[d] = o->strides[d];
    }
    *out = g;
}

static em_status linear_kernel(const em_kernel_args *ka) {
    if (ka->out[0]->numel == 0) return EM_OK;
    em_gemm_args g;
    linear_args(ka, &g);
    return run(ka, &g, ka->n_in > 2 ? ka->in[2] : NULL);
}

/* A LINEAR call joins a group when it has no bias and its product runs on the dot engine
 * (quantized weights have their own kernels, quant_ops.c). */
static bool linear_joins(const em_kernel_args *ka) {
    if (ka->op->id != EM_OP_LINEAR || (ka->n_in > 2 && ka->in[2]) || ka->out[0]->numel == 0 ||
        em_is_quant(ka->in[1]->dtype))
        return false;
    em_gemm_args g;
    linear_args(ka, &g);
    simplify_batch(&g);
    return em_gemm_group_fits(&g);
}

_Static_assert(EM_CPU_GROUP_MAX <= EM_GEMM_GROUP_MAX, "a plan's group fits the dot engine's");

static em_status linear_group(const em_kernel_args *const *ka, int n) {
    em_gemm_args g[EM_GEMM_GROUP_MAX];
    const em_gemm_args *gp[EM_GEMM_GROUP_MAX];
    if (n > EM_GEMM_GROUP_MAX) return EM_ERR_INVALID_ARG;
    for (int i = 0; i < n; i++) {
        linear_args(ka[i], &g[i]);
        simplify_batch(&g[i]);
        gp[i] = &g[i];
    }
    em_gemm_dot_group(gp, n);
    return EM_OK;
}

void em_cpu_register_linalg(em_kernel_fn *k) {
    k[EM_OP_MATMUL] = matmul_kernel;
    k[EM_OP_LINEAR] = linear_kernel;
}

void em_cpu_register_linalg_groups(em_cpu_group_fns *g) {
    g[EM_OP_LINEAR] = (em_cpu_group_fns){.joins = linear_joins, .run = linear_group};
}

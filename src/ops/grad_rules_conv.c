/*
 * Backward rules of the convolution family (conv2d, group_norm, upsampling): the ops a
 * diffusion UNet adds to the transformer's. Each is written with the forward ops, so it runs
 * wherever they do:
 *   conv2d   the input's gradient is a conv2d of the (stride-spread) output gradient with the
 *            flipped, group-transposed kernel; the weight's is a conv2d of the input with the
 *            output gradient as kernel (batch and channels swapped, stride and dilation
 *            swapped), one kernel-sized corner of it;
 *   group_norm  layer_norm's rule over [N, groups, C/groups * spatial], recomputed in f32 as the
 *            forward computes;
 *   upsample_*  both resizes are linear and separable: y = A_h x A_w^T with A the [out, in]
 *            interpolation matrix of each dim (one-hot for nearest), built on the host with the
 *            forward's own source positions (core/resample_src.h), so dx = A_h^T g A_w;
 *   avg_pool2d  the same: a window's divisor is a product of one count per dim (torch's
 *            clipping, backends/cpu/pool.c), so A_h[o, i] = 1/count_h(o) over o's window.
 */
#include <stdlib.h>

#include "core/resample_src.h"
#include "ember/ops.h"
#include "ops/grad_rules.h"

#define X(i) (n->in[i])
#define G (gout[0])

/* g[.., L, ..] (dim d) with s-1 zeros after each element, cut to len (<= L*s): the output
 * gradient of a stride-s conv put back on the stride-1 grid. */
static em_tensor *spread(em_ctx *c, em_tensor *g, int d, int64_t s, int64_t len) {
    if (!g) return NULL;
    if (s > 1) {
        int64_t zs[5], ms[4];
        for (int i = 0, j = 0; i < 4; i++) {
            zs[j++] = g->shape[i];
            if (i == d) zs[j++] = s - 1;
            ms[i] = i == d ? g->shape[i] * s : g->shape[i];
        }
        em_tensor *parts[2] = {em_unsqueeze(c, g, d + 1), em_zeros(c, g->dtype, 5, zs)};
        g = em_reshape(c, em_cat(c, parts, 2, d + 1), 4, ms);
    }
    return g && g->shape[d] != len ? em_slice(c, g, d, 0, len, 1) : g;
}

/* w reversed along dim d (2 or 3) */
static em_tensor *flip(em_ctx *c, em_tensor *w, int d) {
    int64_t k = w->shape[d];
    if (k == 1) return w;
    int64_t *idx = malloc((size_t)k * sizeof *idx);
    if (!idx) {
        em_ctx_fail(c, EM_ERR_OOM, "backward", "conv2d: out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < k; i++) idx[i] = k - 1 - i;
    em_tensor *it = em_from_host(c, EM_I64, 1, &k, idx);
    free(idx);
    return it ? em_index_select(c, w, d, it) : NULL;
}

/* dx[N, C, H, W]: with kspan = dil*(k-1), the padded input's gradient is the full correlation
 * of the spread gradient with the flipped kernel; conv padding kspan - p crops it to the
 * unpadded input directly (a padding larger than kspan is cropped by a slice instead). The
 * spread gradient's length H + 2p - kspan includes the rows past the last window (zeros). */
static em_tensor *conv_grad_input(em_ctx *c, em_tensor *x, em_tensor *w, em_tensor *g,
                                  const em_conv2d_params *p) {
    int64_t groups = p->groups, O = w->shape[0], Cg = w->shape[1], Og = O / groups;
    em_conv2d_params q = {{1, 1}, {0, 0}, {p->dilation[0], p->dilation[1]}, groups};
    int64_t off[2];
    for (int i = 0; i < 2; i++) {
        int64_t kspan = p->dilation[i] * (w->shape[2 + i] - 1), pad = p->padding[i];
        g = spread(c, g, 2 + i, p->stride[i], x->shape[2 + i] + 2 * pad - kspan);
        q.padding[i] = kspan > pad ? kspan - pad : 0;
        off[i] = pad > kspan ? pad - kspan : 0;
    }
    /* [O, Cg, kh, kw] -> [groups, Og, Cg, ..] -> [groups, Cg, Og, ..] -> [C, Og, kh, kw] */
    int64_t s5[5] = {groups, Og, Cg, w->shape[2], w->shape[3]};
    int64_t s4[4] = {groups * Cg, Og, w->shape[2], w->shape[3]};
    em_tensor *wt = em_reshape(c, em_transpose(c, em_reshape(c, w, 5, s5), 1, 2), 4, s4);
    if (wt) wt = flip(c, flip(c, wt, 2), 3);
    em_tensor *dx = g && wt ? em_conv2d(c, g, wt, NULL, &q) : NULL;
    for (int i = 0; i < 2 && dx; i++)
        if (off[i] || dx->shape[2 + i] != x->shape[2 + i])
            dx = em_slice(c, dx, 2 + i, off[i], off[i] + x->shape[2 + i], 1);
    return dx;
}

/* dw[O, Cg, kh, kw] = sum over n and output positions of g[n, o] x_pad[n, c] at the tap's
 * offset: a conv2d whose batch is the group's input channels, whose channels are the images and
 * whose kernel is g (stride = the dilation, dilation = the stride). It may come out larger than
 * the kernel (rows past the last window): the corner [kh, kw] is the gradient. */
static em_tensor *conv_grad_weight(em_ctx *c, em_tensor *x, em_tensor *w, em_tensor *g,
                                   const em_conv2d_params *p) {
    int64_t groups = p->groups, N = x->shape[0], O = w->shape[0], Cg = w->shape[1];
    int64_t Og = O / groups;
    int64_t xs5[5] = {N, groups, Cg, x->shape[2], x->shape[3]};
    int64_t xs4[4] = {Cg, groups * N, x->shape[2], x->shape[3]};
    int64_t gs5[5] = {N, groups, Og, g->shape[2], g->shape[3]};
    int64_t gs4[4] = {O, N, g->shape[2], g->shape[3]};
    int px[5] = {2, 1, 0, 3, 4}, pg[5] = {1, 2, 0, 3, 4};
    em_tensor *xr = em_reshape(c, em_permute(c, em_reshape(c, x, 5, xs5), 5, px), 4, xs4);
    em_tensor *gr = em_reshape(c, em_permute(c, em_reshape(c, g, 5, gs5), 5, pg), 4, gs4);
    em_conv2d_params q = {{p->dilation[0], p->dilation[1]},
                          {p->padding[0], p->padding[1]},
                          {p->stride[0], p->stride[1]},
                          groups};
    em_tensor *dw = xr && gr ? em_conv2d(c, xr, gr, NULL, &q) : NULL; /* [Cg, O, kh', kw'] */
    for (int i = 0; i < 2 && dw; i++)
        if (dw->shape[2 + i] != w->shape[2 + i]) dw = em_slice(c, dw, 2 + i, 0, w->shape[2 + i], 1);
    return dw ? em_transpose(c, dw, 0, 1) : NULL;
}

static em_status g_conv2d(GRAD_ARGS) {
    em_tensor *x = X(0), *w = X(1), *b = n->n_in > 2 ? X(2) : NULL, *g = G;
    em_conv2d_params p;
    const em_attr *st = em_grad_attr(n, "stride"), *pd = em_grad_attr(n, "padding"),
                  *dl = em_grad_attr(n, "dilation");
    for (int i = 0; i < 2; i++) {
        p.stride[i] = st->v[i];
        p.padding[i] = pd->v[i];
        p.dilation[i] = dl->v[i];
    }
    p.groups = em_grad_attr(n, "groups")->i;
    if (g->dtype != x->dtype) g = em_cast(c, g, x->dtype);
    if (b && need[2]) {
        int dims[3] = {0, 2, 3};
        gin[2] = em_sum(c, g, dims, 3, false);
    }
    if (need[0]) gin[0] = conv_grad_input(c, x, w, g, &p);
    if (need[1]) gin[1] = conv_grad_weight(c, x, w, g, &p);
    return c->err.status;
}

/* short names for ops/grad_util.c's helpers */
#define f32 em_grad_f32
#define mean_last em_grad_mean_last

/* a per-channel parameter [C] as [C, 1, ..] to broadcast against x[N, C, ...] */
static em_tensor *per_channel(em_ctx *c, em_tensor *v, int ndim) {
    int64_t s[EM_MAX_DIMS];
    s[0] = v->shape[0];
    for (int i = 1; i < ndim - 1; i++) s[i] = 1;
    return em_reshape(c, v, ndim - 1, s);
}

/* t[N, C, ...] summed to [C] */
static em_tensor *sum_to_channels(em_ctx *c, em_tensor *t) {
    int dims[EM_MAX_DIMS], nd = 0;
    for (int i = 0; i < t->ndim; i++)
        if (i != 1) dims[nd++] = i;
    return em_sum(c, t, dims, nd, false);
}

/* group_norm: layer_norm's dx = r (gh - mean(gh) - xhat mean(gh xhat)) over each group */
static em_status g_group_norm(GRAD_ARGS) {
    em_tensor *x = X(0), *w = n->n_in > 1 ? X(1) : NULL, *b = n->n_in > 2 ? X(2) : NULL;
    int64_t groups = em_grad_attr(n, "groups")->i;
    double eps = em_grad_attr(n, "eps")->f;
    int64_t gs[3] = {x->shape[0], groups, -1};
    em_tensor *xf = em_reshape(c, f32(c, x), 3, gs), *g = f32(c, G);
    em_tensor *xc = em_sub(c, xf, mean_last(c, xf));
    em_tensor *r = em_rsqrt(c, em_add_scalar(c, mean_last(c, em_mul(c, xc, xc)), eps));
    em_tensor *xhat = em_mul(c, xc, r);
    if (need[0]) {
        em_tensor *gh = w ? em_mul(c, g, per_channel(c, f32(c, w), x->ndim)) : g;
        gh = em_reshape(c, gh, 3, gs);
        em_tensor *inner = em_sub(c, em_sub(c, gh, mean_last(c, gh)),
                                  em_mul(c, xhat, mean_last(c, em_mul(c, gh, xhat))));
        gin[0] = em_reshape(c, em_mul(c, r, inner), x->ndim, x->shape);
    }
    if (w && need[1])
        gin[1] = sum_to_channels(c, em_mul(c, g, em_reshape(c, xhat, x->ndim, x->shape)));
    if (b && need[2]) gin[2] = sum_to_channels(c, g);
    return c->err.status;
}

/* A zeroed host [out, in] matrix (NULL after an OOM error naming the op). */
static float *matrix_alloc(em_ctx *c, int64_t out, int64_t in, const char *op) {
    float *a = calloc((size_t)(in * out), sizeof *a);
    if (!a)
        em_ctx_fail(c, EM_ERR_OOM, "backward", "%s: out of memory for a %lld x %lld matrix", op,
                    (long long)out, (long long)in);
    return a;
}

/* The host matrix as an f32 tensor on the default device; frees a. */
static em_tensor *matrix_tensor(em_ctx *c, float *a, int64_t out, int64_t in) {
    int64_t s[2] = {out, in};
    em_tensor *m = em_from_host(c, EM_F32, 2, s, a);
    free(a);
    return m;
}

/* The [out, in] f32 interpolation matrix of one dim: row o holds output o's source weights. */
static em_tensor *interp_matrix(em_ctx *c, int64_t in, int64_t out, bool bilinear, bool ac) {
    float *a = matrix_alloc(c, out, in, "upsample");
    if (!a) return NULL;
    for (int64_t o = 0; o < out; o++) {
        if (!bilinear) {
            a[o * in + em_nearest_src(o, in, out)] = 1.0f;
            continue;
        }
        em_lin_tap t = em_linear_src(o, in, out, ac);
        a[o * in + t.i0] += t.l0;
        a[o * in + t.i1] += t.l1;
    }
    return matrix_tensor(c, a, out, in);
}

/* The gradient of y = A_h x A_w^T over x[N, C, H, W]: A_h^T g A_w (f32). */
static em_tensor *separable_grad(em_ctx *c, em_tensor *ah, em_tensor *aw, em_tensor *g) {
    if (!ah || !aw) return NULL;
    return em_matmul(c, em_transpose(c, ah, 0, 1), em_matmul(c, f32(c, g), aw));
}

static em_status g_upsample(GRAD_ARGS) {
    if (!need[0]) return c->err.status;
    em_tensor *x = X(0);
    bool bilinear = n->op->id == EM_OP_UPSAMPLE_BILINEAR;
    bool ac = bilinear && em_grad_attr(n, "align_corners")->i;
    int64_t H = x->shape[2], W = x->shape[3], ho = G->shape[2], wo = G->shape[3];
    em_tensor *ah = interp_matrix(c, H, ho, bilinear, ac);
    em_tensor *aw = interp_matrix(c, W, wo, bilinear, ac);
    gin[0] = separable_grad(c, ah, aw, G);
    return c->err.status;
}

/* The [out, in] matrix of one dim of avg_pool2d: window o starts at o*stride - pad, is clipped
 * to the padded input (its span: the divisor with count_include_pad) then to the input. */
static em_tensor *pool_matrix(em_ctx *c, int64_t in, int64_t out, int64_t k, int64_t st,
                              int64_t pad, bool include_pad) {
    float *a = matrix_alloc(c, out, in, "avg_pool2d");
    if (!a) return NULL;
    for (int64_t o = 0; o < out; o++) {
        int64_t i0 = o * st - pad, i1 = i0 + k < in + pad ? i0 + k : in + pad, span = i1 - i0;
        if (i0 < 0) i0 = 0;
        if (i1 > in) i1 = in;
        for (int64_t i = i0; i < i1; i++)
            a[o * in + i] = (float)(1.0 / (double)(include_pad ? span : i1 - i0));
    }
    return matrix_tensor(c, a, out, in);
}

static em_status g_avg_pool2d(GRAD_ARGS) {
    if (!need[0]) return c->err.status;
    em_tensor *x = X(0);
    const em_attr *k = em_grad_attr(n, "kernel"), *st = em_grad_attr(n, "stride"),
                  *pd = em_grad_attr(n, "padding");
    bool inc = em_grad_attr(n, "count_include_pad")->i;
    em_tensor *ah = pool_matrix(c, x->shape[2], G->shape[2], k->v[0], st->v[0], pd->v[0], inc);
    em_tensor *aw = pool_matrix(c, x->shape[3], G->shape[3], k->v[1], st->v[1], pd->v[1], inc);
    gin[0] = separable_grad(c, ah, aw, G);
    return c->err.status;
}

void em_grad_rules_conv(em_grad_rule *t) {
    GRAD_RULE(CONV2D, g_conv2d, 3, 0);
    GRAD_RULE(GROUP_NORM, g_group_norm, 3, 0);
    GRAD_RULE(UPSAMPLE_NEAREST, g_upsample, 0, 0);
    GRAD_RULE(UPSAMPLE_BILINEAR, g_upsample, 0, 0);
    GRAD_RULE(AVG_POOL2D, g_avg_pool2d, 0, 0);
}

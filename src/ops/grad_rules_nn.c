/*
 * Backward rules of the linear algebra and transformer ops. Norms and attention recompute their
 * statistics in f32 from the saved inputs (as their forwards do) rather than keeping them: the
 * tape then holds only what the forward already had.
 */
#include <math.h>
#include <stdlib.h>

#include "ember/ops.h"
#include "ops/grad_rules.h"

#define X(i) (n->in[i])
#define G (gout[0])

static em_tensor *mT(em_ctx *c, em_tensor *t) { return em_transpose(c, t, -1, -2); }

/* torch.matmul: 1-d operands become matrices for the products and lose the dim again */
static em_status g_matmul(GRAD_ARGS) {
    em_tensor *a = X(0), *b = X(1), *g = G;
    if (a->ndim == 1 && b->ndim == 1) {
        int64_t one[2] = {1, 1};
        g = em_reshape(c, g, 2, one);
    } else if (a->ndim == 1) {
        g = em_unsqueeze(c, g, -2);
    } else if (b->ndim == 1) {
        g = em_unsqueeze(c, g, -1);
    }
    em_tensor *a2 = a->ndim == 1 ? em_unsqueeze(c, a, 0) : a;
    em_tensor *b2 = b->ndim == 1 ? em_unsqueeze(c, b, -1) : b;
    if (need[0])
        gin[0] = em_reshape(c, em_grad_reduce_to(c, em_matmul(c, g, mT(c, b2)), a2), a->ndim,
                            a->shape);
    if (need[1])
        gin[1] = em_reshape(c, em_grad_reduce_to(c, em_matmul(c, mT(c, a2), g), b2), b->ndim,
                            b->shape);
    return c->err.status;
}

/* y = x w^T + b over x[..., K], w[N, K] */
static em_status g_linear(GRAD_ARGS) {
    em_tensor *x = X(0), *w = X(1);
    int64_t N = w->shape[0], K = w->shape[1];
    int64_t gs[2] = {-1, N}, xs[2] = {-1, K};
    em_tensor *g2 = em_reshape(c, G, 2, gs);
    if (need[0]) gin[0] = em_matmul(c, G, w);
    if (need[1]) gin[1] = em_matmul(c, mT(c, g2), em_reshape(c, x, 2, xs));
    if (n->n_in > 2 && need[2]) {
        int d0 = 0;
        gin[2] = em_sum(c, g2, &d0, 1, false);
    }
    return c->err.status;
}

/* short names for ops/grad_util.c's helpers */
#define f32 em_grad_f32
#define mean_last em_grad_mean_last

/* gradient of the weight (and bias) of a norm: sum over every dim but the last */
static em_tensor *sum_rows(em_ctx *c, em_tensor *t, const em_tensor *like) {
    return em_grad_reduce_to(c, t, like);
}

/* rms_norm: y = xhat w, xhat = x r, r = rsqrt(mean(x^2) + eps); dx = r (gh - xhat mean(gh xhat)) */
static em_status g_rms_norm(GRAD_ARGS) {
    em_tensor *x = f32(c, X(0)), *w = n->n_in > 1 ? X(1) : NULL, *g = f32(c, G);
    double eps = em_grad_attr(n, "eps")->f;
    bool unit = em_grad_attr(n, "unit_offset")->i;
    em_tensor *r = em_rsqrt(c, em_add_scalar(c, mean_last(c, em_mul(c, x, x)), eps));
    em_tensor *xhat = em_mul(c, x, r);
    em_tensor *gh = g;
    if (w) {
        em_tensor *wf = f32(c, w);
        gh = em_mul(c, g, unit ? em_add_scalar(c, wf, 1.0) : wf);
    }
    if (need[0])
        gin[0] = em_mul(c, r, em_sub(c, gh, em_mul(c, xhat, mean_last(c, em_mul(c, gh, xhat)))));
    if (w && need[1]) gin[1] = sum_rows(c, em_mul(c, g, xhat), w);
    return c->err.status;
}

/* layer_norm: dx = r (gh - mean(gh) - xhat mean(gh xhat)) */
static em_status g_layer_norm(GRAD_ARGS) {
    em_tensor *x = f32(c, X(0)), *g = f32(c, G);
    em_tensor *w = n->n_in > 1 ? X(1) : NULL, *b = n->n_in > 2 ? X(2) : NULL;
    double eps = em_grad_attr(n, "eps")->f;
    em_tensor *xc = em_sub(c, x, mean_last(c, x));
    em_tensor *r = em_rsqrt(c, em_add_scalar(c, mean_last(c, em_mul(c, xc, xc)), eps));
    em_tensor *xhat = em_mul(c, xc, r);
    em_tensor *gh = w ? em_mul(c, g, f32(c, w)) : g;
    if (need[0]) {
        em_tensor *inner = em_sub(c, em_sub(c, gh, mean_last(c, gh)),
                                  em_mul(c, xhat, mean_last(c, em_mul(c, gh, xhat))));
        gin[0] = em_mul(c, r, inner);
    }
    if (w && need[1]) gin[1] = sum_rows(c, em_mul(c, g, xhat), w);
    if (b && need[2]) gin[2] = sum_rows(c, g, b);
    return c->err.status;
}

/* rotate_half(t) = cat(-t2, t1) over the last dim */
static em_tensor *rotate_half(em_ctx *c, em_tensor *t) {
    int64_t h = t->shape[t->ndim - 1] / 2;
    em_tensor *parts[2] = {em_neg(c, em_slice(c, t, -1, h, 2 * h, 1)),
                           em_slice(c, t, -1, 0, h, 1)};
    return em_cat(c, parts, 2, -1);
}

/* y = x cos + rotate_half(x) sin on the first R dims: dx = g cos + cat(u2, -u1), u = g sin */
static em_status g_rope(GRAD_ARGS) {
    em_tensor *x = X(0), *cs = X(1), *sn = X(2);
    int64_t D = x->shape[x->ndim - 1], R = cs->shape[cs->ndim - 1], h = R / 2;
    em_tensor *cs4 = em_unsqueeze(c, cs, 1), *sn4 = em_unsqueeze(c, sn, 1);
    em_tensor *g = R == D ? G : em_slice(c, G, -1, 0, R, 1);
    em_tensor *xr = R == D ? x : em_slice(c, x, -1, 0, R, 1);
    if (need[0]) {
        em_tensor *u = em_mul(c, g, sn4);
        em_tensor *parts[2] = {em_slice(c, u, -1, h, 2 * h, 1),
                               em_neg(c, em_slice(c, u, -1, 0, h, 1))};
        em_tensor *gx = em_add(c, em_mul(c, g, cs4), em_cat(c, parts, 2, -1));
        if (R != D) {
            em_tensor *both[2] = {gx, em_slice(c, G, -1, R, D, 1)};
            gx = em_cat(c, both, 2, -1);
        }
        gin[0] = gx;
    }
    if (need[1]) gin[1] = em_reshape(c, em_grad_reduce_to(c, em_mul(c, g, xr), cs4), cs->ndim,
                                     cs->shape);
    if (need[2])
        gin[2] = em_reshape(c, em_grad_reduce_to(c, em_mul(c, g, rotate_half(c, xr)), sn4),
                            sn->ndim, sn->shape);
    return c->err.status;
}

/* grouped-query attention: kv head h serves query heads h*rep .. h*rep+rep-1 */
static em_tensor *sum_groups(em_ctx *c, em_tensor *t, int64_t hkv, int64_t rep) {
    if (rep == 1) return t;
    int64_t s[5] = {t->shape[0], hkv, rep, t->shape[2], t->shape[3]};
    int d = 2;
    return em_sum(c, em_reshape(c, t, 5, s), &d, 1, false);
}

/* The forward's probabilities p (f32, zeros on rows that see no key), recomputed; *t_cap gets
 * tanh(s / softcap) when softcap is set. */
static em_tensor *sdpa_probs(em_ctx *c, const em_grad_node *n, em_tensor *qf, em_tensor *kf,
                             double scale, em_tensor **t_cap) {
    em_tensor *mask = n->n_in > 3 ? X(3) : NULL;
    double cap = em_grad_attr(n, "softcap")->f;
    bool causal = em_grad_attr(n, "causal")->i;
    int64_t window = em_grad_attr(n, "window")->i;
    em_tensor *s = em_mul_scalar(c, em_matmul(c, qf, mT(c, kf)), scale);
    *t_cap = NULL;
    if (cap > 0) {
        *t_cap = em_tanh(c, em_div_scalar(c, s, cap));
        s = em_mul_scalar(c, *t_cap, cap);
    }
    em_tensor *ninf = em_scalar(c, -INFINITY, EM_F32);
    if (mask && mask->dtype == EM_BOOL) s = em_where(c, mask, s, ninf);
    else if (mask) s = em_add(c, s, f32(c, mask));
    int64_t tq = qf->shape[2], tk = kf->shape[2];
    if (causal || window > 0) {
        int64_t cshape[2] = {tq, 1};
        em_tensor *i = em_reshape(c, em_arange(c, 0, (double)tq, 1, EM_I64), 2, cshape);
        em_tensor *j = em_arange(c, 0, (double)tk, 1, EM_I64);
        em_tensor *rel = em_sub(c, j, em_add_scalar(c, i, (double)(tk - tq))); /* j - (i + off) */
        em_tensor *ok = NULL;
        if (causal) ok = em_le(c, rel, em_scalar(c, 0, EM_I64));
        if (window > 0) {
            em_tensor *w = em_gt(c, rel, em_scalar(c, (double)-window, EM_I64));
            ok = ok ? em_logical_and(c, ok, w) : w;
        }
        s = em_where(c, ok, s, ninf);
    }
    int last = -1;
    em_tensor *p = em_softmax(c, s, last);
    return em_where(c, em_ne(c, p, p), em_scalar(c, 0, EM_F32), p); /* NaN rows: no key seen */
}

/* The gradients of sdpa's inputs from those of its output (go) and of its rows' log-sum-exp
 * (glse [B, Hq, Tq], sdpa_lse's second output); either may be NULL. With s the scaled, capped,
 * masked logits and p = softmax(s): d out / d s gives p (go v^T - rowsum(go out)), and
 * d lse / d s = p gives p glse; a row that sees no key has p = 0, so its gradient is 0 too. */
static em_status sdpa_backward(em_ctx *c, const em_grad_node *n, em_tensor *go, em_tensor *glse,
                               const bool *need, em_tensor **gin) {
    em_tensor *q = X(0), *k = X(1), *v = X(2), *mask = n->n_in > 3 ? X(3) : NULL;
    int64_t hq = q->shape[1], hkv = k->shape[1], rep = hq / hkv;
    double scale = em_grad_attr(n, "scale")->f;
    if (scale == 0) scale = 1.0 / sqrt((double)q->shape[3]);
    em_tensor *qf = f32(c, q), *kf = f32(c, k), *vf = f32(c, v);
    if (rep > 1) {
        kf = em_repeat_interleave(c, kf, rep, 1);
        vf = em_repeat_interleave(c, vf, rep, 1);
    }
    em_tensor *t_cap;
    em_tensor *p = sdpa_probs(c, n, qf, kf, scale, &t_cap);
    int last = -1;
    em_tensor *inner = glse ? em_unsqueeze(c, f32(c, glse), -1) : NULL; /* [B, Hq, Tq, 1] */
    if (go) {
        em_tensor *g = f32(c, go);
        if (need[2]) gin[2] = sum_groups(c, em_matmul(c, mT(c, p), g), hkv, rep);
        em_tensor *gp = em_matmul(c, g, mT(c, vf));
        em_tensor *d = em_sub(c, gp, em_sum(c, em_mul(c, gp, p), &last, 1, true));
        inner = inner ? em_add(c, d, inner) : d;
    }
    em_tensor *gs = em_mul(c, p, inner);
    if (mask && mask->dtype != EM_BOOL && need[3]) gin[3] = em_grad_reduce_to(c, gs, mask);
    if (t_cap) gs = em_mul(c, gs, em_add_scalar(c, em_neg(c, em_mul(c, t_cap, t_cap)), 1.0));
    gs = em_mul_scalar(c, gs, scale);
    if (need[0]) gin[0] = em_matmul(c, gs, kf);
    if (need[1]) gin[1] = sum_groups(c, em_matmul(c, mT(c, gs), qf), hkv, rep);
    return c->err.status;
}

static em_status g_sdpa(GRAD_ARGS) { return sdpa_backward(c, n, G, NULL, need, gin); }

/* sdpa_lse: out and the rows' log-sum-exp, either or both reached by the loss */
static em_status g_sdpa_lse(GRAD_ARGS) { return sdpa_backward(c, n, gout[0], gout[1], need, gin); }

/* d rhs of ragged_dot without reading the group sizes (a traced backward: a compiled training
 * step): row m of lhs belongs to group e when start_e <= m < end_e, a [G, M, 1] mask made on
 * the device from the sizes' running sum; every group's product is then one batched matmul
 * over all M rows with the others' rows zeroed (G times the work of the host path: fine for
 * the routers and small expert counts this serves; rows past the last group count nowhere) */
static em_tensor *ragged_rhs_grad_device(em_ctx *c, em_tensor *lhs, em_tensor *g, em_tensor *gsz,
                                         bool nk) {
    int64_t m = lhs->shape[0], ng = gsz->numel;
    em_tensor *ends = em_cumsum(c, em_cast(c, gsz, EM_I64), 0);
    em_tensor *starts = em_sub(c, ends, em_cast(c, gsz, EM_I64));
    em_tensor *rows = em_reshape(c, em_arange(c, 0, (double)m, 1, EM_I64), 2, (int64_t[]){1, m});
    em_tensor *in = em_logical_and(c, em_ge(c, rows, em_reshape(c, starts, 2, (int64_t[]){ng, 1})),
                                   em_lt(c, rows, em_reshape(c, ends, 2, (int64_t[]){ng, 1})));
    em_tensor *mask = em_unsqueeze(c, em_cast(c, in, lhs->dtype), 2);   /* [G, M, 1] */
    em_tensor *lm = em_mul(c, mask, em_unsqueeze(c, lhs, 0));           /* [G, M, K] */
    em_tensor *gb = em_expand(c, em_unsqueeze(c, g, 0), 3, (int64_t[]){ng, m, g->shape[1]});
    return nk ? em_matmul(c, mT(c, gb), lm) : em_matmul(c, mT(c, lm), gb);
}

/* ragged_dot: d lhs is a ragged_dot of g with rhs in the other layout; d rhs[g] is the
 * product of group g's rows (lhs^T g), one matmul per group (sizes read on the host; on the
 * device while tracing, where they cannot be read) */
static em_status g_ragged_dot(GRAD_ARGS) {
    em_tensor *lhs = X(0), *rhs = X(1), *gsz = X(2);
    bool nk = em_grad_attr(n, "rhs_nk")->i;
    if (rhs->ndim != 3)
        return em_ctx_fail(c, EM_ERR_UNSUPPORTED, "backward",
                           "ragged_dot: no gradient through a packed rhs (em_ragged_pack); "
                           "train with the [G, N, K] or [G, K, N] layout");
    if (need[0]) gin[0] = em_ragged_dot(c, G, rhs, gsz, !nk);
    if (!need[1]) return c->err.status;
    if (gsz->sym) {
        gin[1] = ragged_rhs_grad_device(c, lhs, G, gsz, nk);
        return c->err.status;
    }
    int64_t ng = gsz->numel;
    int32_t *sizes = malloc((size_t)(ng ? ng : 1) * sizeof *sizes);
    if (!sizes) return em_ctx_fail(c, EM_ERR_OOM, "backward", "ragged_dot: out of memory");
    /* written group by group into zeros (a stack takes at most 64 tensors; MoE has more) */
    em_tensor *grhs = em_grad_zeros_like(c, rhs);
    if (grhs && em_to_host(c, gsz, sizes, (size_t)ng * sizeof *sizes) == EM_OK) {
        int64_t at = 0;
        for (int64_t e = 0; e < ng && !c->err.status; e++) {
            em_tensor *l = em_slice(c, lhs, 0, at, at + sizes[e], 1);
            em_tensor *gg = em_slice(c, G, 0, at, at + sizes[e], 1);
            em_tensor *part = nk ? em_matmul(c, mT(c, gg), l) : em_matmul(c, mT(c, l), gg);
            em_tensor *dst = em_slice(c, grhs, 0, e, e + 1, 1);
            if (dst && part) em_assign(c, dst, part);
            at += sizes[e];
        }
        gin[1] = grhs;
    }
    free(sizes);
    return c->err.status;
}

void em_grad_rules_nn(em_grad_rule *t) {
    GRAD_RULE(MATMUL, g_matmul, 3, 0);
    GRAD_RULE(LINEAR, g_linear, 3, 0);
    GRAD_RULE(RMS_NORM, g_rms_norm, 3, 0);
    GRAD_RULE(LAYER_NORM, g_layer_norm, 3, 0);
    GRAD_RULE(ROPE, g_rope, 7, 0);
    GRAD_RULE(SDPA, g_sdpa, 15, 0);
    GRAD_RULE(SDPA_LSE, g_sdpa_lse, 15, 0);
    GRAD_RULE(RAGGED_DOT, g_ragged_dot, 7, 0);
}

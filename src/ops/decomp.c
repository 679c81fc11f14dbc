/*
 * Compositions of table ops for devices without a kernel for them (the dispatcher calls them,
 * ops/dispatch.h em_decomp_get), so every backend runs the op, eagerly and in compiled programs.
 *
 * paged_attention (a device without a kernel for it; PJRT has its own lowering,
 * backends/pjrt/stablehlo_paged.c): each row's slots gathered out of the pools (index_select), a
 * mask of the positions each query sees from the lengths, and sdpa. It materialises every row's
 * keys up to the table's width, a copy of them per call: a correct path, not a fast one.
 *
 * adamw_step (a device without the fused kernel, a dtype other than f32, a trace): torch's
 * update op by op, in slabs of rows of about 2^20 elements so its temporaries stay small.
 */
#include <stdlib.h>

#include "core/tensor_impl.h"
#include "ember/ops.h"
#include "ops/dispatch.h"

/* The values the kernel checks (eagerly; a compiled program cannot, nor a compile-only device,
 * which has no values): every block a row reads lies in the pools, no length passes the table. */
static bool values_ok(em_ctx *c, em_tensor *bt, em_tensor *lens, int64_t bs, int64_t nblk) {
    int64_t b = em_tensor_dim(bt, 0), mb = em_tensor_dim(bt, 1);
    int64_t *t = malloc((size_t)(b * mb + 1) * sizeof *t), *l = malloc((size_t)(b + 1) * sizeof *l);
    bool ok = t && l &&
              em_to_host(c, em_cast(c, bt, EM_I64), t, (size_t)(b * mb) * sizeof *t) == EM_OK &&
              em_to_host(c, em_cast(c, lens, EM_I64), l, (size_t)b * sizeof *l) == EM_OK;
    if (!t || !l) em_ctx_fail(c, EM_ERR_OOM, "paged_attention", "out of memory");
    for (int64_t r = 0; ok && r < b; r++) {
        if (l[r] < 0 || l[r] > mb * bs) {
            em_ctx_fail(c, EM_ERR_INVALID_ARG, "paged_attention",
                        "row %lld holds %lld positions; its table has room for %lld",
                        (long long)r, (long long)l[r], (long long)(mb * bs));
            ok = false;
        }
        for (int64_t m = 0; ok && m * bs < l[r]; m++)
            if (t[r * mb + m] < 0 || t[r * mb + m] >= nblk) {
                em_ctx_fail(c, EM_ERR_INVALID_ARG, "paged_attention",
                            "row %lld, block %lld: id %lld is outside the pools' %lld blocks",
                            (long long)r, (long long)m, (long long)t[r * mb + m], (long long)nblk);
                ok = false;
            }
    }
    free(t);
    free(l);
    return ok;
}

static em_status paged_attention(em_ctx *c, const char *file, int line, em_tensor *const *in,
                                 const em_attr *attrs, em_tensor **out) {
    em_tensor *q = in[0], *kp = in[1], *vp = in[2], *bt = in[3], *lens = in[4];
    int64_t bs = attrs[0].i;
    em_sdpa_params sp = em_sdpa_default_params();
    sp.scale = attrs[1].f;
    sp.window = attrs[2].i;
    sp.softcap = attrs[3].f;
    int64_t b = em_tensor_dim(q, 0), t = em_tensor_dim(q, 2), mb = em_tensor_dim(bt, 1);
    int64_t hkv = em_tensor_dim(kp, 0), l = mb * bs;
    em_device *d = em_tensor_device(q);
    if (!c->tracer && !d->be->no_values && !values_ok(c, bt, lens, bs, em_tensor_dim(kp, 1) / bs))
        return c->err.status;
    em_device *prev = em_ctx_device(c);
    em_ctx_set_device(c, d);
    /* slots[b, j] = table[b, j / bs] * bs + j % bs, for the table's width of positions */
    em_tensor *blk = em_cast_(c, file, line, bt, EM_I64);
    blk = em_mul_scalar_(c, file, line, em_unsqueeze_(c, file, line, blk, 2), (double)bs);
    em_tensor *off = em_reshape_(c, file, line, em_arange_(c, file, line, 0, (double)bs, 1, EM_I64),
                                 3, (int64_t[]){1, 1, bs});
    em_tensor *slots = em_reshape_(c, file, line, em_add_(c, file, line, blk, off), 1,
                                   (int64_t[]){b * l});
    em_tensor *kv[2] = {kp, vp};
    for (int i = 0; i < 2; i++) { /* [Hkv, B*L, D] -> [B, Hkv, L, D] */
        em_tensor *g = em_index_select_(c, file, line, kv[i], 1, slots);
        int64_t dd = em_tensor_dim(kv[i], 2);
        kv[i] = em_transpose_(c, file, line, em_reshape_(c, file, line, g, 4,
                                                         (int64_t[]){hkv, b, l, dd}), 0, 1);
    }
    /* query i of row b sits at lens[b] - T + i and sees keys j <= it (and > it - window) */
    em_tensor *qpos = em_add_(c, file, line,
                              em_reshape_(c, file, line, em_cast_(c, file, line, lens, EM_I64), 3,
                                          (int64_t[]){b, 1, 1}),
                              em_reshape_(c, file, line,
                                          em_arange_(c, file, line, (double)-t, 0, 1, EM_I64), 3,
                                          (int64_t[]){1, t, 1}));
    em_tensor *kpos = em_reshape_(c, file, line, em_arange_(c, file, line, 0, (double)l, 1, EM_I64),
                                  3, (int64_t[]){1, 1, l});
    em_tensor *mask = em_le_(c, file, line, kpos, qpos);
    if (sp.window > 0)
        mask = em_logical_and_(c, file, line, mask,
                               em_gt_(c, file, line, kpos,
                                      em_add_scalar_(c, file, line, qpos, (double)-sp.window)));
    mask = em_unsqueeze_(c, file, line, mask, 1); /* [B, 1, T, L] */
    sp.window = 0; /* in the mask */
    *out = em_sdpa_(c, file, line, q, kv[0], kv[1], mask, &sp);
    em_ctx_set_device(c, prev);
    return c->err.status;
}

/* Rows of p per slab: about 2^20 elements, so that the composition's temporaries (a dozen
 * tensors of a slab's size) stay small: an LM head's (vocab x hidden) would otherwise take a
 * dozen times its memory. */
static int64_t adamw_slab_rows(const em_tensor *p) {
    int64_t rows = p->ndim ? p->shape[0] : 1;
    int64_t per_row = rows ? em_tensor_numel(p) / rows : 1;
    int64_t k = per_row ? ((int64_t)1 << 20) / per_row : rows;
    return k < 1 ? 1 : k;
}

/* torch's _single_tensor_adamw op by op (exp_avg.lerp_(grad, 1 - beta1), exp_avg_sq.mul_(beta2)
 * .addcmul_(grad, grad, 1 - beta2), ...) on p, g, m, v (whole tensors or slabs of them) */
static void adamw_ops(em_ctx *c, const char *file, int line, em_tensor *p, em_tensor *g,
                      em_tensor *m, em_tensor *v, em_tensor *const *in, const em_attr *attrs) {
    double b1 = attrs[0].f, b2 = attrs[1].f, eps = attrs[2].f;
    em_assign_(c, file, line, p, em_mul_(c, file, line, p, in[4]));
    em_assign_(c, file, line, m,
               em_add_(c, file, line, m,
                       em_mul_scalar_(c, file, line, em_sub_(c, file, line, g, m), 1.0 - b1)));
    em_assign_(c, file, line, v,
               em_add_(c, file, line, em_mul_scalar_(c, file, line, v, b2),
                       em_mul_scalar_(c, file, line, em_mul_(c, file, line, g, g), 1.0 - b2)));
    em_tensor *denom = em_add_scalar_(
        c, file, line, em_div_(c, file, line, em_sqrt_(c, file, line, v), in[5]), eps);
    em_assign_(c, file, line, p,
               em_add_(c, file, line, p,
                       em_mul_(c, file, line, em_div_(c, file, line, m, denom), in[6])));
}

/* adamw_step as element-wise ops, for devices without the fused kernel and for traces, whose
 * graphs know only writes into a node's first input. The update is element-wise, so slab by
 * slab of rows (adamw_slab_rows; each slab's temporaries freed before the next) gives the
 * values of the whole tensor at once. */
static em_status adamw_step(em_ctx *c, const char *file, int line, em_tensor *const *in,
                            const em_attr *attrs, em_tensor **out) {
    (void)out;
    em_tensor *p = in[0], *g = in[1], *m = in[2], *v = in[3];
    if (p->ndim == 0) {
        adamw_ops(c, file, line, p, g, m, v, in, attrs);
        return c->err.status;
    }
    int64_t rows = p->shape[0], k = adamw_slab_rows(p);
    for (int64_t r0 = 0; r0 < rows && !c->err.status; r0 += k) {
        int64_t n = r0 + k < rows ? k : rows - r0;
        if (em_scope_push(c) < 0) break;
        adamw_ops(c, file, line, em_narrow_(c, file, line, p, 0, r0, n),
                  em_narrow_(c, file, line, g, 0, r0, n), em_narrow_(c, file, line, m, 0, r0, n),
                  em_narrow_(c, file, line, v, 0, r0, n), in, attrs);
        em_scope_pop(c);
    }
    return c->err.status;
}

em_decomp_fn em_decomp_get(em_op_id op, em_tensor *const *in, bool has_kernel, bool tracing) {
    if (op == EM_OP_PAGED_ATTENTION && !has_kernel) return paged_attention;
    /* the CPU kernel is f32's (master weights and optimizer state); other floating dtypes
     * keep torch's rounding after every operation */
    if (op == EM_OP_ADAMW_STEP && (!has_kernel || tracing || in[0]->dtype != EM_F32))
        return adamw_step;
    return NULL;
}

/* Shape and dtype rules of linear algebra, normalisation, transformer, indexing, convolution
 * and MoE ops. */
#include <stdio.h>
#include <string.h>

#include "core/tensor_impl.h"
#include "core/rules.h"

#define RULE_ARGS                                                                                  \
    em_ctx *c, const em_op_def *op, em_tensor *const *in, int n_in, const em_attr *attrs,          \
        em_meta *out, int *n_out

#define SHAPE(t, buf) em_shape_str((t)->shape, (t)->ndim, buf, sizeof buf)

static void meta_like(em_meta *m, const em_tensor *t, em_dtype dtype) {
    m->dtype = dtype;
    m->ndim = t->ndim;
    memcpy(m->shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
}

static bool is_mm_dtype(em_dtype t) { return t == EM_F32 || t == EM_BF16 || t == EM_F16; }

static bool is_index_dtype(em_dtype t) { return t == EM_I64 || t == EM_I32; }

static em_status need_float(em_ctx *c, const em_tensor *t, const char *what) {
    if (!is_mm_dtype(t->dtype))
        return em_op_fail(c, EM_ERR_DTYPE, "%s must be f32, bf16 or f16, not %s", what,
                          em_dtype_name(t->dtype));
    return EM_OK;
}

static em_status need_index(em_ctx *c, const em_tensor *t, const char *what) {
    if (!is_index_dtype(t->dtype))
        return em_op_fail(c, EM_ERR_DTYPE, "%s must be i64 or i32, not %s", what,
                          em_dtype_name(t->dtype));
    return EM_OK;
}

/* ---- linear algebra ---- */

em_status rule_matmul(RULE_ARGS) {
    (void)op, (void)n_in, (void)attrs, (void)n_out;
    const em_tensor *a = in[0], *b = in[1];
    char s1[128], s2[128];
    if (need_float(c, a, "input 0") || need_float(c, b, "input 1")) return EM_ERR_DTYPE;
    if (a->dtype != b->dtype)
        return em_op_fail(c, EM_ERR_DTYPE, "operands have different dtypes (%s and %s)",
                          em_dtype_name(a->dtype), em_dtype_name(b->dtype));
    if (a->ndim < 1 || b->ndim < 1 || a->ndim > 4 || b->ndim > 4)
        return em_op_fail(c, EM_ERR_SHAPE, "operands must have 1 to 4 dims (got %d and %d)",
                          a->ndim, b->ndim);
    int64_t k_a = a->shape[a->ndim - 1];
    int64_t k_b = b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - 2];
    if (k_a != k_b)
        return em_op_fail(c, EM_ERR_SHAPE, "inner dimensions differ: %s @ %s (%lld vs %lld)",
                          SHAPE(a, s1), SHAPE(b, s2), (long long)k_a, (long long)k_b);
    /* batch dims broadcast */
    int ba = a->ndim > 2 ? a->ndim - 2 : 0, bb = b->ndim > 2 ? b->ndim - 2 : 0;
    int nb = ba > bb ? ba : bb;
    out->dtype = a->dtype;
    out->ndim = 0;
    for (int i = 0; i < nb; i++) {
        int ia = i - (nb - ba), ib = i - (nb - bb);
        int64_t sa = ia >= 0 ? a->shape[ia] : 1, sb = ib >= 0 ? b->shape[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1)
            return em_op_fail(c, EM_ERR_SHAPE, "batch dims of %s and %s cannot be broadcast",
                              SHAPE(a, s1), SHAPE(b, s2));
        out->shape[out->ndim++] = sa == 1 ? sb : sa;
    }
    if (a->ndim >= 2) out->shape[out->ndim++] = a->shape[a->ndim - 2];
    if (b->ndim >= 2) out->shape[out->ndim++] = b->shape[b->ndim - 1];
    return EM_OK;
}

em_status rule_linear(RULE_ARGS) {
    (void)op, (void)attrs, (void)n_out;
    const em_tensor *x = in[0], *w = in[1], *bias = n_in > 2 ? in[2] : NULL;
    char s1[128], s2[128];
    if (need_float(c, x, "input")) return EM_ERR_DTYPE;
    /* a quantized weight takes input of any float dtype; the result has the input's dtype */
    if (!em_is_quant(w->dtype) && need_float(c, w, "weight")) return EM_ERR_DTYPE;
    if (!em_is_quant(w->dtype) && x->dtype != w->dtype)
        return em_op_fail(c, EM_ERR_DTYPE, "input is %s but weight is %s", em_dtype_name(x->dtype),
                          em_dtype_name(w->dtype));
    if (w->ndim != 2)
        return em_op_fail(c, EM_ERR_SHAPE, "weight must be [out, in], got %s", SHAPE(w, s2));
    if (x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1])
        return em_op_fail(c, EM_ERR_SHAPE, "input %s does not end in weight's in-features %lld",
                          SHAPE(x, s1), (long long)w->shape[1]);
    if (bias && (bias->ndim != 1 || bias->shape[0] != w->shape[0] || bias->dtype != x->dtype))
        return em_op_fail(c, EM_ERR_SHAPE, "bias must be %s[%lld], got %s",
                          em_dtype_name(x->dtype), (long long)w->shape[0],
                          em_tensor_sig(bias, s1, sizeof s1));
    meta_like(out, x, x->dtype);
    out->shape[x->ndim - 1] = w->shape[0];
    return EM_OK;
}

/* ---- normalisation ---- */

static em_status check_param(em_ctx *c, const em_tensor *p, int64_t n, const char *what) {
    if (!p) return EM_OK;
    char s[64];
    if (p->ndim != 1 || p->shape[0] != n)
        return em_op_fail(c, EM_ERR_SHAPE, "%s must have shape [%lld], got %s", what,
                          (long long)n, SHAPE(p, s));
    if (!is_mm_dtype(p->dtype))
        return em_op_fail(c, EM_ERR_DTYPE, "%s must be floating, not %s", what,
                          em_dtype_name(p->dtype));
    return EM_OK;
}

em_status rule_rms_norm(RULE_ARGS) {
    (void)op, (void)attrs, (void)n_out;
    const em_tensor *x = in[0];
    if (need_float(c, x, "input")) return EM_ERR_DTYPE;
    if (x->ndim < 1) return em_op_fail(c, EM_ERR_SHAPE, "input must have at least 1 dim");
    if (check_param(c, n_in > 1 ? in[1] : NULL, x->shape[x->ndim - 1], "weight"))
        return EM_ERR_SHAPE;
    meta_like(out, x, x->dtype);
    return EM_OK;
}

em_status rule_layer_norm(RULE_ARGS) {
    (void)op, (void)attrs, (void)n_out;
    const em_tensor *x = in[0];
    if (need_float(c, x, "input")) return EM_ERR_DTYPE;
    if (x->ndim < 1) return em_op_fail(c, EM_ERR_SHAPE, "input must have at least 1 dim");
    int64_t n = x->shape[x->ndim - 1];
    if (check_param(c, n_in > 1 ? in[1] : NULL, n, "weight") ||
        check_param(c, n_in > 2 ? in[2] : NULL, n, "bias"))
        return EM_ERR_SHAPE;
    meta_like(out, x, x->dtype);
    return EM_OK;
}

em_status rule_group_norm(RULE_ARGS) {
    (void)op, (void)n_out;
    const em_tensor *x = in[0];
    char s[128];
    if (need_float(c, x, "input")) return EM_ERR_DTYPE;
    if (x->ndim < 2) return em_op_fail(c, EM_ERR_SHAPE, "input must be [N, C, ...], got %s", SHAPE(x, s));
    int64_t ch = x->shape[1], g = attrs[0].i;
    if (g <= 0 || ch % g)
        return em_op_fail(c, EM_ERR_SHAPE, "%lld channels cannot be split into %lld groups",
                          (long long)ch, (long long)g);
    if (check_param(c, n_in > 1 ? in[1] : NULL, ch, "weight") ||
        check_param(c, n_in > 2 ? in[2] : NULL, ch, "bias"))
        return EM_ERR_SHAPE;
    meta_like(out, x, x->dtype);
    return EM_OK;
}

/* ---- transformer ---- */

em_status rule_rope_cos_sin(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    const em_tensor *pos = in[0], *inv = in[1];
    char s[128];
    if (need_index(c, pos, "positions")) return EM_ERR_DTYPE;
    if (inv->dtype != EM_F32 || inv->ndim != 1)
        return em_op_fail(c, EM_ERR_SHAPE, "inv_freq must be f32[R/2], got %s",
                          em_tensor_sig(inv, s, sizeof s));
    if (pos->ndim >= EM_MAX_DIMS)
        return em_op_fail(c, EM_ERR_SHAPE, "positions have too many dims");
    if (!is_mm_dtype((em_dtype)attrs[1].i))
        return em_op_fail(c, EM_ERR_DTYPE, "output dtype must be f32, bf16 or f16");
    for (int o = 0; o < 2; o++) {
        meta_like(&out[o], pos, (em_dtype)attrs[1].i);
        out[o].shape[out[o].ndim++] = 2 * inv->shape[0];
    }
    return EM_OK;
}

em_status rule_rope(RULE_ARGS) {
    (void)op, (void)n_in, (void)attrs, (void)n_out;
    const em_tensor *x = in[0], *cs = in[1], *sn = in[2];
    char s1[128], s2[128];
    if (need_float(c, x, "input")) return EM_ERR_DTYPE;
    if (x->ndim != 4)
        return em_op_fail(c, EM_ERR_SHAPE, "input must be [B, H, T, D], got %s", SHAPE(x, s1));
    if (cs->ndim != 3 || sn->ndim != 3 || memcmp(cs->shape, sn->shape, 3 * sizeof(int64_t)))
        return em_op_fail(c, EM_ERR_SHAPE, "cos %s and sin %s must both be [B, T, R]",
                          SHAPE(cs, s1), SHAPE(sn, s2));
    int64_t r = cs->shape[2];
    if ((cs->shape[0] != x->shape[0] && cs->shape[0] != 1) || cs->shape[1] != x->shape[2] ||
        r > x->shape[3] || r % 2)
        return em_op_fail(c, EM_ERR_SHAPE,
                          "cos/sin %s do not fit input %s (need [B or 1, T, R] with even R <= D)",
                          SHAPE(cs, s1), SHAPE(x, s2));
    if (!is_mm_dtype(cs->dtype) || cs->dtype != sn->dtype)
        return em_op_fail(c, EM_ERR_DTYPE, "cos and sin must share a floating dtype");
    meta_like(out, x, x->dtype);
    return EM_OK;
}

em_status rule_sdpa(RULE_ARGS) {
    (void)op, (void)n_out;
    const em_tensor *q = in[0], *k = in[1], *v = in[2], *mask = n_in > 3 ? in[3] : NULL;
    char s1[128], s2[128], s3[128];
    if (need_float(c, q, "q")) return EM_ERR_DTYPE;
    if (k->dtype != q->dtype || v->dtype != q->dtype)
        return em_op_fail(c, EM_ERR_DTYPE, "q, k and v must share a dtype");
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
        return em_op_fail(c, EM_ERR_SHAPE, "q %s, k %s, v %s must be 4-D [B, H, T, D]",
                          SHAPE(q, s1), SHAPE(k, s2), SHAPE(v, s3));
    if (k->shape[0] != q->shape[0] || v->shape[0] != q->shape[0] || k->shape[1] != v->shape[1] ||
        k->shape[2] != v->shape[2] || k->shape[3] != q->shape[3])
        return em_op_fail(c, EM_ERR_SHAPE, "q %s, k %s, v %s do not agree", SHAPE(q, s1),
                          SHAPE(k, s2), SHAPE(v, s3));
    if (k->shape[1] == 0 || q->shape[1] % k->shape[1])
        return em_op_fail(c, EM_ERR_SHAPE, "%lld query heads are not a multiple of %lld kv heads",
                          (long long)q->shape[1], (long long)k->shape[1]);
    if (mask) {
        int64_t want[4] = {q->shape[0], q->shape[1], q->shape[2], k->shape[2]};
        bool ok = mask->ndim <= 4;
        for (int i = 0; ok && i < mask->ndim; i++) {
            int64_t m = mask->shape[i], w = want[4 - mask->ndim + i];
            ok = m == 1 || m == w;
        }
        if (!ok)
            return em_op_fail(c, EM_ERR_SHAPE, "mask %s cannot broadcast to [%lld,%lld,%lld,%lld]",
                              SHAPE(mask, s1), (long long)want[0], (long long)want[1],
                              (long long)want[2], (long long)want[3]);
        if (mask->dtype != EM_BOOL && !is_mm_dtype(mask->dtype))
            return em_op_fail(c, EM_ERR_DTYPE, "mask must be bool or floating, not %s",
                              em_dtype_name(mask->dtype));
    }
    if (attrs[2].i < 0) return em_op_fail(c, EM_ERR_INVALID_ARG, "negative window");
    if (attrs[3].f < 0) return em_op_fail(c, EM_ERR_INVALID_ARG, "negative softcap");
    meta_like(out, q, q->dtype);
    out->shape[3] = v->shape[3];
    return EM_OK;
}

/* sdpa's checks, the output in `dtype` (q's or f32) and the rows' log-sum-exp [B, Hq, Tq] f32 */
em_status rule_sdpa_lse(RULE_ARGS) {
    em_status s = rule_sdpa(c, op, in, n_in, attrs, out, n_out);
    if (s) return s;
    em_dtype dt = (em_dtype)attrs[4].i, qd = in[0]->dtype;
    if (dt != qd && dt != EM_F32)
        return em_op_fail(c, EM_ERR_DTYPE, "output dtype %s: must be q's (%s) or f32",
                          em_dtype_name(dt), em_dtype_name(qd));
    out[0].dtype = dt;
    out[1].dtype = EM_F32;
    out[1].ndim = 3;
    memcpy(out[1].shape, out[0].shape, 3 * sizeof(int64_t));
    return EM_OK;
}

/* q [B, Hq, T, D], k/v pools [Hkv, S, D] and [Hkv, S, Dv] (S slots, a multiple of the block
 * size), block table [B, MB] and lengths [B] (index dtypes). Values (slot ranges, lengths within
 * MB blocks) are checked by the kernels, which see them. */
em_status rule_paged_attention(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    const em_tensor *q = in[0], *k = in[1], *v = in[2], *bt = in[3], *lens = in[4];
    char s1[128], s2[128], s3[128];
    if (!q || !k || !v || !bt || !lens)
        return em_op_fail(c, EM_ERR_INVALID_ARG, "q, pools, block table and lengths are all needed");
    if (need_float(c, q, "q")) return EM_ERR_DTYPE;
    if (k->dtype != q->dtype || v->dtype != q->dtype)
        return em_op_fail(c, EM_ERR_DTYPE, "q and the k/v pools must share a dtype");
    if (need_index(c, bt, "block table") || need_index(c, lens, "lengths")) return EM_ERR_DTYPE;
    int64_t bs = attrs[0].i;
    if (q->ndim != 4 || k->ndim != 3 || v->ndim != 3)
        return em_op_fail(c, EM_ERR_SHAPE, "q %s must be [B, Hq, T, D] and pools k %s, v %s [Hkv, S, D]",
                          SHAPE(q, s1), SHAPE(k, s2), SHAPE(v, s3));
    if (k->shape[0] != v->shape[0] || k->shape[1] != v->shape[1] || k->shape[2] != q->shape[3])
        return em_op_fail(c, EM_ERR_SHAPE, "q %s, k pool %s, v pool %s do not agree",
                          SHAPE(q, s1), SHAPE(k, s2), SHAPE(v, s3));
    if (k->shape[0] == 0 || q->shape[1] % k->shape[0])
        return em_op_fail(c, EM_ERR_SHAPE, "%lld query heads are not a multiple of %lld kv heads",
                          (long long)q->shape[1], (long long)k->shape[0]);
    if (bs <= 0 || k->shape[1] % bs)
        return em_op_fail(c, EM_ERR_INVALID_ARG, "block size %lld does not divide the pools' %lld slots",
                          (long long)bs, (long long)k->shape[1]);
    if (bt->ndim != 2 || bt->shape[0] != q->shape[0] || lens->ndim != 1 ||
        lens->shape[0] != q->shape[0])
        return em_op_fail(c, EM_ERR_SHAPE, "block table %s must be [B, MB] and lengths %s [B] for q %s",
                          SHAPE(bt, s1), SHAPE(lens, s2), SHAPE(q, s3));
    if (attrs[2].i < 0) return em_op_fail(c, EM_ERR_INVALID_ARG, "negative window");
    if (attrs[3].f < 0) return em_op_fail(c, EM_ERR_INVALID_ARG, "negative softcap");
    meta_like(out, q, q->dtype);
    out->shape[3] = v->shape[2];
    return EM_OK;
}

em_status rule_embedding(RULE_ARGS) {
    (void)op, (void)n_in, (void)attrs, (void)n_out;
    const em_tensor *w = in[0], *ids = in[1];
    char s[128];
    if (w->ndim != 2) return em_op_fail(c, EM_ERR_SHAPE, "weight must be [V, D], got %s", SHAPE(w, s));
    if (need_index(c, ids, "ids")) return EM_ERR_DTYPE;
    if (ids->ndim + 1 > EM_MAX_DIMS) return em_op_fail(c, EM_ERR_SHAPE, "ids have too many dims");
    /* rows of a quantized table come out dequantized, in f32 */
    meta_like(out, ids, em_is_quant(w->dtype) ? EM_F32 : w->dtype);
    out->shape[out->ndim++] = w->shape[1];
    return EM_OK;
}

/* ---- indexing ---- */

em_status rule_index_select(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    const em_tensor *x = in[0], *idx = in[1];
    int d;
    if (need_index(c, idx, "index")) return EM_ERR_DTYPE;
    if (idx->ndim > 1) return em_op_fail(c, EM_ERR_SHAPE, "index must be 0-d or 1-d");
    if (!em_rule_dim(c, attrs[0].i, x->ndim, "dim", &d)) return EM_ERR_INVALID_ARG;
    meta_like(out, x, x->dtype);
    /* torch: a 0-d input takes exactly one index value (0) and stays 0-d */
    if (x->ndim == 0 && idx->numel != 1)
        return em_op_fail(c, EM_ERR_SHAPE, "a 0-d input takes one index value, got %lld",
                          (long long)idx->numel);
    if (x->ndim) out->shape[d] = idx->numel;
    return EM_OK;
}

/* gather and take_along_dim: an index tensor with as many dims as the input, and a dim. */
static em_status check_along_dim(em_ctx *c, const em_tensor *x, const em_tensor *idx,
                                 int64_t dim, int *d) {
    char s1[128], s2[128];
    if (need_index(c, idx, "index")) return EM_ERR_DTYPE;
    if (idx->ndim != x->ndim)
        return em_op_fail(c, EM_ERR_SHAPE, "index %s and input %s need the same number of dims",
                          SHAPE(idx, s1), SHAPE(x, s2));
    return em_rule_dim(c, dim, x->ndim, "dim", d) ? EM_OK : EM_ERR_INVALID_ARG;
}

em_status rule_gather(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    const em_tensor *x = in[0], *idx = in[1];
    char s1[128], s2[128];
    int d;
    em_status s = check_along_dim(c, x, idx, attrs[0].i, &d);
    if (s) return s;
    for (int i = 0; i < x->ndim; i++)
        if (i != d && idx->shape[i] > x->shape[i])
            return em_op_fail(c, EM_ERR_SHAPE, "index %s is larger than input %s in dim %d",
                              SHAPE(idx, s1), SHAPE(x, s2), i);
    meta_like(out, idx, x->dtype);
    return EM_OK;
}

em_status rule_take_along_dim(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    const em_tensor *x = in[0], *idx = in[1];
    char s1[128], s2[128];
    int d;
    em_status st = check_along_dim(c, x, idx, attrs[0].i, &d);
    if (st) return st;
    out->dtype = x->dtype;
    out->ndim = x->ndim;
    for (int i = 0; i < x->ndim; i++) {
        int64_t a = x->shape[i], b = idx->shape[i];
        if (i == d) {
            out->shape[i] = b;
            continue;
        }
        if (a != b && a != 1 && b != 1)
            return em_op_fail(c, EM_ERR_SHAPE, "input %s and index %s cannot be broadcast in dim %d",
                              SHAPE(x, s2), SHAPE(idx, s1), i);
        out->shape[i] = a == 1 ? b : a;
    }
    return EM_OK;
}

em_status rule_scatter(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    const em_tensor *x = in[0], *idx = in[1], *src = in[2];
    char s1[128], s2[128], s3[128];
    int d;
    if (need_index(c, idx, "index")) return EM_ERR_DTYPE;
    if (src->dtype != x->dtype)
        return em_op_fail(c, EM_ERR_DTYPE, "src is %s but input is %s", em_dtype_name(src->dtype),
                          em_dtype_name(x->dtype));
    if (idx->ndim != x->ndim || src->ndim != x->ndim)
        return em_op_fail(c, EM_ERR_SHAPE, "input %s, index %s and src %s need the same number "
                          "of dims", SHAPE(x, s1), SHAPE(idx, s2), SHAPE(src, s3));
    if (!em_rule_dim(c, attrs[0].i, x->ndim, "dim", &d)) return EM_ERR_INVALID_ARG;
    for (int i = 0; i < x->ndim; i++)
        if (idx->shape[i] > src->shape[i] || (i != d && idx->shape[i] > x->shape[i]))
            return em_op_fail(c, EM_ERR_SHAPE, "index %s is larger than src %s or input %s in "
                              "dim %d", SHAPE(idx, s2), SHAPE(src, s3), SHAPE(x, s1), i);
    meta_like(out, x, x->dtype);
    return EM_OK;
}

/* index_add and index_copy: src matches x except along dim, which has one slice per index */
static em_status index_into_rule(em_ctx *c, em_tensor *const *in, const em_attr *attrs) {
    const em_tensor *x = in[0], *idx = in[1], *src = in[2];
    char s1[128], s2[128], s3[128];
    int d;
    if (need_index(c, idx, "index")) return EM_ERR_DTYPE;
    if (idx->ndim > 1) return em_op_fail(c, EM_ERR_SHAPE, "index must be 0-d or 1-d");
    if (src->dtype != x->dtype)
        return em_op_fail(c, EM_ERR_DTYPE, "src is %s but input is %s", em_dtype_name(src->dtype),
                          em_dtype_name(x->dtype));
    if (!em_rule_dim(c, attrs[0].i, x->ndim, "dim", &d)) return EM_ERR_INVALID_ARG;
    /* torch: a 0-d input takes a 0-d src and one index value */
    bool ok = src->ndim == x->ndim && (x->ndim || idx->numel == 1);
    for (int i = 0; ok && i < x->ndim; i++)
        ok = i == d ? src->shape[i] == idx->numel : src->shape[i] == x->shape[i];
    if (!ok)
        return em_op_fail(c, EM_ERR_SHAPE, "src %s must match input %s except dim %d, which must "
                          "equal the %lld indices of %s", SHAPE(src, s3), SHAPE(x, s1), d,
                          (long long)idx->numel, SHAPE(idx, s2));
    return EM_OK;
}

em_status rule_index_add(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    em_status s = index_into_rule(c, in, attrs);
    if (s == EM_OK) meta_like(out, in[0], in[0]->dtype);
    return s;
}

/* in place: no outputs; the destination must not be an expanded view */
em_status rule_index_copy(RULE_ARGS) {
    (void)op, (void)n_in, (void)out;
    em_status s = index_into_rule(c, in, attrs);
    if (s != EM_OK) return s;
    const em_tensor *x = in[0];
    for (int i = 0; i < x->ndim; i++)
        if (x->strides[i] == 0 && x->shape[i] > 1)
            return em_op_fail(c, EM_ERR_INVALID_ARG,
                              "the destination is an expanded view (dim %d has stride 0): several "
                              "elements share memory", i);
    *n_out = 0;
    return EM_OK;
}

em_status rule_topk(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    const em_tensor *x = in[0];
    int d;
    if (!em_rule_dim(c, attrs[1].i, x->ndim, "dim", &d)) return EM_ERR_INVALID_ARG;
    int64_t size = x->ndim ? x->shape[d] : 1, k = attrs[0].i;
    if (k < 0 || k > size)
        return em_op_fail(c, EM_ERR_INDEX, "k = %lld is out of range for a dim of size %lld",
                          (long long)k, (long long)size);
    if (x->dtype == EM_BOOL) return em_op_fail(c, EM_ERR_DTYPE, "not defined for bool");
    meta_like(&out[0], x, x->dtype);
    if (x->ndim) out[0].shape[d] = k;
    out[1] = out[0];
    out[1].dtype = EM_I64;
    return EM_OK;
}

em_status rule_sort(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    int d;
    if (!em_rule_dim(c, attrs[0].i, in[0]->ndim, "dim", &d)) return EM_ERR_INVALID_ARG;
    meta_like(&out[0], in[0], in[0]->dtype);
    meta_like(&out[1], in[0], EM_I64);
    return EM_OK;
}

em_status rule_argsort(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    int d;
    if (!em_rule_dim(c, attrs[0].i, in[0]->ndim, "dim", &d)) return EM_ERR_INVALID_ARG;
    meta_like(out, in[0], EM_I64);
    return EM_OK;
}

/* torch skips 1-d empty tensors (shape [0]) in cat whatever the other inputs' shapes. */
static bool legacy_empty(const em_tensor *x) { return x->ndim == 1 && x->shape[0] == 0; }

em_status rule_cat(RULE_ARGS) {
    (void)op, (void)n_out;
    char s1[128], s2[128];
    int d, r = 0;
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) return em_op_fail(c, EM_ERR_INVALID_ARG, "input %d is NULL", i);
        if (in[i]->ndim == 0)
            return em_op_fail(c, EM_ERR_SHAPE, "cannot concatenate 0-d tensors (input %d)", i);
        if (in[i]->dtype != in[0]->dtype)
            return em_op_fail(c, EM_ERR_DTYPE, "input %d is %s but input 0 is %s", i,
                              em_dtype_name(in[i]->dtype), em_dtype_name(in[0]->dtype));
    }
    while (r < n_in - 1 && legacy_empty(in[r])) r++; /* the first input that shapes the result */
    const em_tensor *x0 = in[r];
    if (!em_rule_dim(c, attrs[0].i, x0->ndim, "dim", &d)) return EM_ERR_INVALID_ARG;
    meta_like(out, x0, x0->dtype);
    int64_t total = 0;
    for (int i = 0; i < n_in; i++) {
        const em_tensor *x = in[i];
        if (legacy_empty(x) && x0->ndim != 1) continue;
        bool ok = x->ndim == x0->ndim;
        for (int j = 0; ok && j < x->ndim; j++) ok = j == d || x->shape[j] == x0->shape[j];
        if (!ok)
            return em_op_fail(c, EM_ERR_SHAPE, "input %d %s does not match input %d %s outside "
                              "dim %d", i, SHAPE(x, s1), r, SHAPE(x0, s2), d);
        total += x->shape[d];
    }
    out->shape[d] = total;
    return EM_OK;
}

em_status rule_stack(RULE_ARGS) {
    (void)op, (void)n_out;
    const em_tensor *x0 = in[0];
    char s1[128], s2[128];
    if (x0->ndim >= EM_MAX_DIMS) return em_op_fail(c, EM_ERR_SHAPE, "too many dims to stack");
    int64_t dim = attrs[0].i;
    if (dim < -(x0->ndim + 1) || dim > x0->ndim)
        return em_op_fail(c, EM_ERR_INVALID_ARG, "dim %lld is out of range", (long long)dim);
    int d = (int)(dim < 0 ? dim + x0->ndim + 1 : dim);
    for (int i = 0; i < n_in; i++) {
        const em_tensor *x = in[i];
        if (!x) return em_op_fail(c, EM_ERR_INVALID_ARG, "input %d is NULL", i);
        if (x->dtype != x0->dtype)
            return em_op_fail(c, EM_ERR_DTYPE, "input %d is %s but input 0 is %s", i,
                              em_dtype_name(x->dtype), em_dtype_name(x0->dtype));
        if (x->ndim != x0->ndim || memcmp(x->shape, x0->shape, (size_t)x->ndim * sizeof(int64_t)))
            return em_op_fail(c, EM_ERR_SHAPE, "input %d %s differs from input 0 %s", i,
                              SHAPE(x, s1), SHAPE(x0, s2));
    }
    out->dtype = x0->dtype;
    out->ndim = x0->ndim + 1;
    for (int i = 0, k = 0; i < out->ndim; i++) out->shape[i] = i == d ? n_in : x0->shape[k++];
    return EM_OK;
}

em_status rule_one_hot(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    if (need_index(c, in[0], "index")) return EM_ERR_DTYPE;
    if (attrs[0].i <= 0)
        return em_op_fail(c, EM_ERR_INVALID_ARG, "num_classes %lld must be positive",
                          (long long)attrs[0].i);
    if (in[0]->ndim >= EM_MAX_DIMS) return em_op_fail(c, EM_ERR_SHAPE, "too many dims");
    meta_like(out, in[0], EM_I64);
    out->shape[out->ndim++] = attrs[0].i;
    return EM_OK;
}

em_status rule_repeat_interleave(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    const em_tensor *x = in[0];
    int d;
    if (attrs[0].i < 0)
        return em_op_fail(c, EM_ERR_INVALID_ARG, "repeats %lld is negative", (long long)attrs[0].i);
    if (x->ndim == 0) return em_op_fail(c, EM_ERR_SHAPE, "needs at least 1 dim");
    if (!em_rule_dim(c, attrs[1].i, x->ndim, "dim", &d)) return EM_ERR_INVALID_ARG;
    meta_like(out, x, x->dtype);
    if (x->shape[d] && attrs[0].i > INT64_MAX / x->shape[d])
        return em_op_fail(c, EM_ERR_OVERFLOW, "size overflows");
    out->shape[d] = x->shape[d] * attrs[0].i;
    return EM_OK;
}

/* ---- convolution and resampling ---- */

/* Window sizes, strides, paddings and dilations beyond this are refused (they would only
 * overflow the size arithmetic; no real model comes near). */
#define WIN_MAX ((int64_t)1 << 30)

static bool pair_ok(const em_attr *a, int64_t min) {
    return a->n == 2 && a->v[0] >= min && a->v[1] >= min && a->v[0] <= WIN_MAX &&
           a->v[1] <= WIN_MAX;
}

/* floor(a / b) for b > 0 (torch's div_rtn). */
static int64_t div_floor(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

em_status rule_conv2d(RULE_ARGS) {
    (void)op, (void)n_out;
    const em_tensor *x = in[0], *w = in[1], *b = n_in > 2 ? in[2] : NULL;
    char s1[128], s2[128];
    if (need_float(c, x, "input")) return EM_ERR_DTYPE;
    if (w->dtype != x->dtype)
        return em_op_fail(c, EM_ERR_DTYPE, "input is %s but weight is %s",
                          em_dtype_name(x->dtype), em_dtype_name(w->dtype));
    if (x->ndim != 4 || w->ndim != 4)
        return em_op_fail(c, EM_ERR_SHAPE, "input %s and weight %s must be 4-D (NCHW, OIHW)",
                          SHAPE(x, s1), SHAPE(w, s2));
    if (!pair_ok(&attrs[0], 1) || !pair_ok(&attrs[1], 0) || !pair_ok(&attrs[2], 1))
        return em_op_fail(c, EM_ERR_INVALID_ARG,
                          "stride and dilation must be in [1, 2^30] and padding in [0, 2^30], "
                          "two values each");
    int64_t g = attrs[3].i;
    if (g < 1)
        return em_op_fail(c, EM_ERR_INVALID_ARG, "groups=%lld must be >= 1", (long long)g);
    if (x->shape[1] % g || w->shape[1] != x->shape[1] / g)
        return em_op_fail(c, EM_ERR_SHAPE,
                          "weight %s with groups=%lld needs %lld input channels (groups x %lld), "
                          "but input %s has %lld",
                          SHAPE(w, s2), (long long)g,
                          w->shape[1] <= INT64_MAX / g ? (long long)(w->shape[1] * g) : -1LL,
                          (long long)w->shape[1], SHAPE(x, s1), (long long)x->shape[1]);
    if (w->shape[0] % g)
        return em_op_fail(c, EM_ERR_SHAPE,
                          "weight %s: %lld output channels are not divisible by groups=%lld",
                          SHAPE(w, s2), (long long)w->shape[0], (long long)g);
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return em_op_fail(c, EM_ERR_SHAPE, "bias %s must be [%lld] (weight %s)", SHAPE(b, s1),
                          (long long)w->shape[0], SHAPE(w, s2));
    if (b && b->dtype != x->dtype)
        return em_op_fail(c, EM_ERR_DTYPE, "bias is %s but input is %s", em_dtype_name(b->dtype),
                          em_dtype_name(x->dtype));
    if (x->shape[2] == 0 || x->shape[3] == 0)
        return em_op_fail(c, EM_ERR_SHAPE, "input %s has an empty spatial dim", SHAPE(x, s1));
    out->dtype = x->dtype;
    out->ndim = 4;
    out->shape[0] = x->shape[0];
    out->shape[1] = w->shape[0];
    for (int i = 0; i < 2; i++) {
        int64_t k = w->shape[2 + i], d = attrs[2].v[i], p = attrs[1].v[i];
        /* sizes of a real tensor are < 2^62 here except with other dims 0; keep clear of
         * overflow either way */
        if (k > WIN_MAX || x->shape[2 + i] > INT64_MAX / 4)
            return em_op_fail(c, EM_ERR_SHAPE, "input %s or weight %s is too large", SHAPE(x, s1),
                              SHAPE(w, s2));
        if (k == 0)
            return em_op_fail(c, EM_ERR_SHAPE, "weight %s has an empty kernel", SHAPE(w, s2));
        int64_t span = x->shape[2 + i] + 2 * p - (d * (k - 1) + 1);
        if (span < 0)
            return em_op_fail(c, EM_ERR_SHAPE,
                              "kernel %s (dilation %lld,%lld) is larger than the padded input "
                              "%s (padding %lld,%lld)",
                              SHAPE(w, s2), (long long)attrs[2].v[0], (long long)attrs[2].v[1],
                              SHAPE(x, s1), (long long)attrs[1].v[0], (long long)attrs[1].v[1]);
        out->shape[2 + i] = span / attrs[0].v[i] + 1;
    }
    return EM_OK;
}

em_status rule_upsample(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    const em_tensor *x = in[0];
    char s[128];
    if (need_float(c, x, "input")) return EM_ERR_DTYPE;
    if (x->ndim != 4) return em_op_fail(c, EM_ERR_SHAPE, "input must be NCHW, got %s", SHAPE(x, s));
    if (attrs[0].n != 2 || attrs[0].v[0] < 1 || attrs[0].v[1] < 1)
        return em_op_fail(c, EM_ERR_INVALID_ARG, "output size must be two values >= 1");
    if (x->shape[2] == 0 || x->shape[3] == 0)
        return em_op_fail(c, EM_ERR_SHAPE, "input %s has an empty spatial dim", SHAPE(x, s));
    meta_like(out, x, x->dtype);
    out->shape[2] = attrs[0].v[0];
    out->shape[3] = attrs[0].v[1];
    return EM_OK;
}

em_status rule_avg_pool2d(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    const em_tensor *x = in[0];
    char s[128];
    if (need_float(c, x, "input")) return EM_ERR_DTYPE;
    if (x->ndim != 4) return em_op_fail(c, EM_ERR_SHAPE, "input must be NCHW, got %s", SHAPE(x, s));
    if (!pair_ok(&attrs[0], 1) || !pair_ok(&attrs[1], 1) || !pair_ok(&attrs[2], 0))
        return em_op_fail(c, EM_ERR_INVALID_ARG,
                          "kernel and stride must be in [1, 2^30], padding in [0, 2^30]");
    /* as torch: only the batch may be empty */
    if (x->shape[1] == 0 || x->shape[2] == 0 || x->shape[3] == 0)
        return em_op_fail(c, EM_ERR_SHAPE, "input %s may be empty only in its batch dim",
                          SHAPE(x, s));
    if (x->shape[2] > INT64_MAX / 4 || x->shape[3] > INT64_MAX / 4)
        return em_op_fail(c, EM_ERR_SHAPE, "input %s is too large", SHAPE(x, s));
    meta_like(out, x, x->dtype);
    bool ceil_mode = attrs[3].i != 0;
    for (int i = 0; i < 2; i++) {
        int64_t k = attrs[0].v[i], st = attrs[1].v[i], p = attrs[2].v[i], n = x->shape[2 + i];
        if (p * 2 > k)
            return em_op_fail(c, EM_ERR_INVALID_ARG, "padding %lld must be at most half the "
                              "kernel %lld", (long long)p, (long long)k);
        /* torch's pooling_output_shape: in ceil mode a window may hang over the padded input
         * by up to stride - 1, but the last one must start inside the input or left padding */
        int64_t o = div_floor(n + 2 * p - k + (ceil_mode ? st - 1 : 0), st) + 1;
        if (ceil_mode && o > 0 && (o - 1) * st >= n + p) o--;
        if (o < 1)
            return em_op_fail(c, EM_ERR_SHAPE,
                              "kernel %lldx%lld (padding %lld,%lld) is larger than the padded "
                              "input %s",
                              (long long)attrs[0].v[0], (long long)attrs[0].v[1],
                              (long long)attrs[2].v[0], (long long)attrs[2].v[1], SHAPE(x, s));
        out->shape[2 + i] = o;
    }
    return EM_OK;
}

/* ---- mixture of experts ---- */

em_status rule_ragged_dot(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    const em_tensor *l = in[0], *r = in[1], *g = in[2];
    char s1[128], s2[128], s3[128];
    if (need_float(c, l, "lhs")) return EM_ERR_DTYPE;
    if (r->dtype != l->dtype)
        return em_op_fail(c, EM_ERR_DTYPE, "lhs is %s but rhs is %s", em_dtype_name(l->dtype),
                          em_dtype_name(r->dtype));
    if (g->dtype != EM_I32)
        return em_op_fail(c, EM_ERR_DTYPE, "group_sizes must be i32, not %s",
                          em_dtype_name(g->dtype));
    bool nk = attrs[0].i != 0;
    /* rank 5: the packed [G, N/32, K/2, 32, 2] form of a [G, N, K] rhs (em_ragged_pack) */
    bool packed = r->ndim == 5;
    if (l->ndim != 2 || (r->ndim != 3 && !packed) || g->ndim != 1)
        return em_op_fail(c, EM_ERR_SHAPE, "need lhs [M, K], rhs [G, K, N] and group_sizes [G]; "
                          "got %s, %s, %s", SHAPE(l, s1), SHAPE(r, s2), SHAPE(g, s3));
    if (packed && (!nk || r->shape[3] != 32 || r->shape[4] != 2))
        return em_op_fail(c, EM_ERR_SHAPE, "a rank-5 rhs must be a packed [G, N/32, K/2, 32, 2] "
                          "matrix (from ragged_pack) with rhs_nk set; got %s%s", SHAPE(r, s2),
                          nk ? "" : " without rhs_nk");
    int64_t k = packed ? 2 * r->shape[2] : nk ? r->shape[2] : r->shape[1];
    int64_t n = packed ? 32 * r->shape[1] : nk ? r->shape[1] : r->shape[2];
    if (g->shape[0] != r->shape[0] || k != l->shape[1])
        return em_op_fail(c, EM_ERR_SHAPE, "lhs %s, rhs %s (%s layout) and group_sizes %s do "
                          "not agree", SHAPE(l, s1), SHAPE(r, s2),
                          packed ? "packed [G,N/32,K/2,32,2]" : nk ? "[G,N,K]" : "[G,K,N]",
                          SHAPE(g, s3));
    out->dtype = l->dtype;
    out->ndim = 2;
    out->shape[0] = l->shape[0];
    out->shape[1] = n;
    return EM_OK;
}

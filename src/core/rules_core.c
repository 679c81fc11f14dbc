/* Shape and dtype rules of creation, view, element-wise and reduction ops. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/tensor_impl.h"
#include "core/rules.h"

#define RULE_ARGS                                                                                  \
    em_ctx *c, const em_op_def *op, em_tensor *const *in, int n_in, const em_attr *attrs,          \
        em_meta *out, int *n_out

static void meta_like(em_meta *m, const em_tensor *t, em_dtype dtype) {
    m->dtype = dtype;
    m->ndim = t->ndim;
    memcpy(m->shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
}

static bool valid_dtype(em_ctx *c, int64_t d) {
    if (d < 0 || d >= EM_DTYPE_COUNT) {
        em_op_fail(c, EM_ERR_DTYPE, "invalid dtype %lld", (long long)d);
        return false;
    }
    if (em_is_quant((em_dtype)d)) { /* quantized tensors come from files, not from ops */
        em_op_fail(c, EM_ERR_DTYPE, "%s is a block-quantized dtype; no op produces it",
                   em_dtype_name((em_dtype)d));
        return false;
    }
    return true;
}

static bool valid_shape(em_ctx *c, const em_attr *a, em_meta *m) {
    char b[200];
    if (a->n < 0 || a->n > EM_MAX_DIMS) {
        em_op_fail(c, EM_ERR_SHAPE, "shape has %d dimensions (at most %d)", a->n, EM_MAX_DIMS);
        return false;
    }
    int64_t n;
    if (!em_shape_numel(a->v, a->n, &n)) {
        em_op_fail(c, EM_ERR_OVERFLOW, "shape %s is negative or its size overflows",
                   em_shape_str(a->v, a->n, b, sizeof b));
        return false;
    }
    m->ndim = a->n;
    memcpy(m->shape, a->v, (size_t)a->n * sizeof *a->v);
    return true;
}

/* ---- creation ---- */

em_status rule_create(RULE_ARGS) {
    (void)in, (void)n_in, (void)n_out;
    if (!valid_dtype(c, attrs[0].i)) return EM_ERR_DTYPE;
    out->dtype = (em_dtype)attrs[0].i;
    if (op->id == EM_OP_EYE) {
        if (attrs[1].n != 2 || attrs[1].v[0] < 0 || attrs[1].v[1] < 0)
            return em_op_fail(c, EM_ERR_SHAPE, "eye needs two non-negative sizes");
    }
    if ((op->id == EM_OP_RAND_UNIFORM || op->id == EM_OP_RAND_NORMAL) &&
        !em_dtype_is_float(out->dtype))
        return em_op_fail(c, EM_ERR_DTYPE, "random values need a floating dtype, not %s",
                          em_dtype_name(out->dtype));
    return valid_shape(c, &attrs[1], out) ? EM_OK : EM_ERR_SHAPE;
}

em_status rule_arange(RULE_ARGS) {
    (void)op, (void)in, (void)n_in, (void)n_out;
    if (!valid_dtype(c, attrs[0].i)) return EM_ERR_DTYPE;
    double start = attrs[1].f, end = attrs[2].f, step = attrs[3].f;
    if (step == 0 || !isfinite(start) || !isfinite(end) || !isfinite(step))
        return em_op_fail(c, EM_ERR_INVALID_ARG, "start %g, end %g, step %g: step must be "
                          "non-zero and all finite", start, end, step);
    double len = ceil((end - start) / step);
    if (len < 0) len = 0;
    if (len > 9.0e15)
        return em_op_fail(c, EM_ERR_OVERFLOW, "arange of %g elements", len);
    out->dtype = (em_dtype)attrs[0].i;
    out->ndim = 1;
    out->shape[0] = (int64_t)len;
    return EM_OK;
}

/* ---- views ---- */

em_status rule_reshape(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    const em_attr *s = &attrs[0];
    char b[200], b2[200];
    if (s->n < 0 || s->n > EM_MAX_DIMS)
        return em_op_fail(c, EM_ERR_SHAPE, "target shape has too many dimensions (at most %d)",
                          EM_MAX_DIMS);
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < s->n; i++) {
        if (s->v[i] == -1) {
            if (infer >= 0)
                return em_op_fail(c, EM_ERR_SHAPE, "only one dimension can be -1 in %s",
                                  em_shape_str(s->v, s->n, b, sizeof b));
            infer = i;
        } else if (s->v[i] < 0) {
            return em_op_fail(c, EM_ERR_SHAPE, "negative size in %s",
                              em_shape_str(s->v, s->n, b, sizeof b));
        } else {
            if (s->v[i] && known > INT64_MAX / s->v[i])
                return em_op_fail(c, EM_ERR_OVERFLOW, "size of %s overflows",
                                  em_shape_str(s->v, s->n, b, sizeof b));
            known *= s->v[i];
        }
    }
    out->dtype = in[0]->dtype;
    out->ndim = s->n;
    memcpy(out->shape, s->v, (size_t)s->n * sizeof *s->v);
    if (infer >= 0) {
        if (known == 0 || in[0]->numel % known)
            return em_op_fail(c, EM_ERR_SHAPE, "cannot reshape %lld elements into %s",
                              (long long)in[0]->numel, em_shape_str(s->v, s->n, b, sizeof b));
        out->shape[infer] = in[0]->numel / known;
    } else if (known != in[0]->numel) {
        return em_op_fail(c, EM_ERR_SHAPE, "cannot reshape %s (%lld elements) into %s",
                          em_shape_str(in[0]->shape, in[0]->ndim, b2, sizeof b2),
                          (long long)in[0]->numel, em_shape_str(s->v, s->n, b, sizeof b));
    }
    return EM_OK;
}

em_status rule_permute(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    const em_tensor *x = in[0];
    const em_attr *p = &attrs[0];
    if (p->n != x->ndim)
        return em_op_fail(c, EM_ERR_SHAPE, "permutation has %d dims, tensor has %d", p->n,
                          x->ndim);
    bool seen[EM_MAX_DIMS] = {false};
    out->dtype = x->dtype;
    out->ndim = x->ndim;
    for (int i = 0; i < p->n; i++) {
        int d;
        if (!em_rule_dim(c, p->v[i], x->ndim, "permutation dim", &d)) return EM_ERR_INVALID_ARG;
        if (seen[d])
            return em_op_fail(c, EM_ERR_INVALID_ARG, "dim %d appears twice in the permutation", d);
        seen[d] = true;
        out->shape[i] = x->shape[d];
    }
    return EM_OK;
}

em_status rule_transpose(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    const em_tensor *x = in[0];
    int d0, d1;
    if (!em_rule_dim(c, attrs[0].i, x->ndim, "dim0", &d0) ||
        !em_rule_dim(c, attrs[1].i, x->ndim, "dim1", &d1))
        return EM_ERR_INVALID_ARG;
    meta_like(out, x, x->dtype);
    if (x->ndim > 0) {
        out->shape[d0] = x->shape[d1];
        out->shape[d1] = x->shape[d0];
    }
    return EM_OK;
}

/* Python slice semantics; writes the normalised start and count. */
void em_slice_bounds(int64_t size, int64_t start, int64_t end, int64_t step, int64_t *s0,
                         int64_t *count) {
    if (start < 0) start += size;
    if (end < 0) end += size;
    if (start < 0) start = 0;
    if (start > size) start = size;
    if (end < start) end = start;
    if (end > size) end = size;
    *s0 = start;
    *count = (end - start + step - 1) / step;
}

em_status rule_slice(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    const em_tensor *x = in[0];
    int d;
    if (x->ndim == 0) return em_op_fail(c, EM_ERR_SHAPE, "cannot slice a 0-d tensor");
    if (!em_rule_dim(c, attrs[0].i, x->ndim, "dim", &d)) return EM_ERR_INVALID_ARG;
    if (attrs[3].i < 1)
        return em_op_fail(c, EM_ERR_INVALID_ARG, "step %lld must be positive",
                          (long long)attrs[3].i);
    int64_t s0, cnt;
    em_slice_bounds(x->shape[d], attrs[1].i, attrs[2].i, attrs[3].i, &s0, &cnt);
    meta_like(out, x, x->dtype);
    out->shape[d] = cnt;
    return EM_OK;
}

em_status rule_expand(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    const em_tensor *x = in[0];
    const em_attr *s = &attrs[0];
    char b[200], b2[200];
    if (s->n < x->ndim || s->n > EM_MAX_DIMS)
        return em_op_fail(c, EM_ERR_SHAPE, "cannot expand %s to %d dimensions",
                          em_shape_str(x->shape, x->ndim, b, sizeof b), s->n);
    out->dtype = x->dtype;
    out->ndim = s->n;
    for (int i = 0; i < s->n; i++) {
        int k = i - (s->n - x->ndim);
        int64_t want = s->v[i];
        if (k < 0) {
            if (want < 0)
                return em_op_fail(c, EM_ERR_SHAPE, "size -1 is not allowed for new dim %d", i);
            out->shape[i] = want;
            continue;
        }
        int64_t have = x->shape[k];
        if (want == -1) want = have;
        if (want != have && have != 1)
            return em_op_fail(c, EM_ERR_SHAPE, "cannot expand %s to %s (dim %d: %lld vs %lld)",
                              em_shape_str(x->shape, x->ndim, b, sizeof b),
                              em_shape_str(s->v, s->n, b2, sizeof b2), i, (long long)have,
                              (long long)want);
        if (want < 0) return em_op_fail(c, EM_ERR_SHAPE, "negative size in expand");
        out->shape[i] = want;
    }
    return EM_OK;
}

void em_squeeze_drops(const em_tensor *x, const em_attr *attrs, bool drop[EM_MAX_DIMS]) {
    for (int d = 0; d < EM_MAX_DIMS; d++) drop[d] = false;
    for (int d = 0; d < x->ndim; d++) {
        bool named = attrs[1].i != 0;
        for (int i = 0; i < attrs[0].n && !named; i++)
            named = (attrs[0].v[i] < 0 ? attrs[0].v[i] + x->ndim : attrs[0].v[i]) == d;
        drop[d] = named && x->shape[d] == 1;
    }
}

em_status rule_squeeze(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    const em_tensor *x = in[0];
    bool drop[EM_MAX_DIMS];
    bool seen[EM_MAX_DIMS] = {false};
    for (int i = 0; i < attrs[0].n && x->ndim > 0; i++) {
        int d;
        if (!em_rule_dim(c, attrs[0].v[i], x->ndim, "dim", &d)) return EM_ERR_INVALID_ARG;
        if (seen[d]) return em_op_fail(c, EM_ERR_INVALID_ARG, "dim %d appears twice", d);
        seen[d] = true;
    }
    em_squeeze_drops(x, attrs, drop);
    out->dtype = x->dtype;
    out->ndim = 0;
    for (int d = 0; d < x->ndim; d++)
        if (!drop[d]) out->shape[out->ndim++] = x->shape[d];
    return EM_OK;
}

em_status rule_unsqueeze(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    const em_tensor *x = in[0];
    if (x->ndim >= EM_MAX_DIMS)
        return em_op_fail(c, EM_ERR_SHAPE, "already %d dimensions (the most)", x->ndim);
    int64_t dim = attrs[0].i;
    if (dim < -(x->ndim + 1) || dim > x->ndim)
        return em_op_fail(c, EM_ERR_INVALID_ARG, "dim %lld is out of range for %d dimensions",
                          (long long)dim, x->ndim + 1);
    int d = (int)(dim < 0 ? dim + x->ndim + 1 : dim);
    out->dtype = x->dtype;
    out->ndim = x->ndim + 1;
    for (int i = 0, k = 0; i < out->ndim; i++) out->shape[i] = i == d ? 1 : x->shape[k++];
    return EM_OK;
}

em_status rule_split(RULE_ARGS) {
    (void)op, (void)n_in;
    const em_tensor *x = in[0];
    int d;
    if (x->ndim == 0) return em_op_fail(c, EM_ERR_SHAPE, "cannot split a 0-d tensor");
    if (!em_rule_dim(c, attrs[0].i, x->ndim, "dim", &d)) return EM_ERR_INVALID_ARG;
    int64_t size = x->shape[d];
    int n = 0;
    if (attrs[1].n > 0) {
        int64_t total = 0;
        for (int i = 0; i < attrs[1].n; i++) {
            if (attrs[1].v[i] < 0)
                return em_op_fail(c, EM_ERR_INVALID_ARG, "split size %lld is negative",
                                  (long long)attrs[1].v[i]);
            total += attrs[1].v[i];
        }
        if (total != size)
            return em_op_fail(c, EM_ERR_SHAPE, "split sizes sum to %lld but dim %d has %lld",
                              (long long)total, d, (long long)size);
        for (int i = 0; i < attrs[1].n; i++) {
            meta_like(&out[n], x, x->dtype);
            out[n++].shape[d] = attrs[1].v[i];
        }
    } else {
        int64_t s = attrs[2].i;
        if (s <= 0)
            return em_op_fail(c, EM_ERR_INVALID_ARG, "split size %lld must be positive",
                              (long long)s);
        int64_t chunks = size == 0 ? 1 : (size + s - 1) / s;
        if (chunks > EM_MAX_OUTPUTS)
            return em_op_fail(c, EM_ERR_INVALID_ARG,
                              "splitting %lld by %lld makes %lld parts (at most %d)",
                              (long long)size, (long long)s, (long long)chunks, EM_MAX_OUTPUTS);
        for (int64_t off = 0; n < chunks; off += s) {
            meta_like(&out[n], x, x->dtype);
            out[n++].shape[d] = size - off < s ? size - off : s;
        }
    }
    *n_out = n;
    return EM_OK;
}

em_status rule_same(RULE_ARGS) {
    (void)c, (void)op, (void)n_in, (void)attrs, (void)n_out;
    meta_like(out, in[0], in[0]->dtype);
    return EM_OK;
}

/* assign(dst, src): src broadcast to dst's shape and cast to its dtype, written in place. */
em_status rule_assign(RULE_ARGS) {
    (void)op, (void)n_in, (void)attrs, (void)out;
    const em_tensor *dst = in[0], *src = in[1];
    char b1[160], b2[160];
    bool ok = src->ndim <= dst->ndim;
    for (int i = 0; ok && i < src->ndim; i++) {
        int64_t s = src->shape[i], d = dst->shape[dst->ndim - src->ndim + i];
        ok = s == d || s == 1;
    }
    if (!ok)
        return em_op_fail(c, EM_ERR_SHAPE, "source %s cannot be broadcast to destination %s",
                          em_shape_str(src->shape, src->ndim, b2, sizeof b2),
                          em_shape_str(dst->shape, dst->ndim, b1, sizeof b1));
    for (int i = 0; i < dst->ndim; i++)
        if (dst->strides[i] == 0 && dst->shape[i] > 1)
            return em_op_fail(c, EM_ERR_INVALID_ARG,
                              "the destination is an expanded view (dim %d has stride 0): several "
                              "elements share memory", i);
    *n_out = 0;
    return EM_OK;
}

/* ---- element-wise ---- */

static em_status ew_shape(em_ctx *c, em_tensor *const *in, int n_in, em_meta *out) {
    if (n_in == 1) {
        meta_like(out, in[0], in[0]->dtype);
        return EM_OK;
    }
    return em_broadcast_shapes(c, in, n_in, out) ? EM_OK : EM_ERR_SHAPE;
}

em_status rule_ew_keep_num(RULE_ARGS) {
    (void)attrs, (void)n_out;
    if (in[0]->dtype == EM_BOOL && op->id != EM_OP_ABS)
        return em_op_fail(c, EM_ERR_DTYPE, "not defined for bool tensors");
    if (ew_shape(c, in, n_in, out)) return EM_ERR_SHAPE;
    out->dtype = in[0]->dtype;
    return EM_OK;
}

em_status rule_ew_float(RULE_ARGS) {
    (void)op, (void)attrs, (void)n_out;
    if (ew_shape(c, in, n_in, out)) return EM_ERR_SHAPE;
    out->dtype = em_dtype_is_float(in[0]->dtype) ? in[0]->dtype : EM_F32;
    return EM_OK;
}

em_status rule_ew_bool(RULE_ARGS) {
    (void)op, (void)attrs, (void)n_out;
    if (ew_shape(c, in, n_in, out)) return EM_ERR_SHAPE;
    out->dtype = EM_BOOL;
    return EM_OK;
}

em_status rule_ew_cast(RULE_ARGS) {
    (void)op, (void)n_out;
    if (!valid_dtype(c, attrs[0].i)) return EM_ERR_DTYPE;
    if (ew_shape(c, in, n_in, out)) return EM_ERR_SHAPE;
    out->dtype = (em_dtype)attrs[0].i;
    if (em_is_quant(in[0]->dtype) && !em_dtype_table[out->dtype].is_float)
        return em_op_fail(c, EM_ERR_DTYPE, "a %s tensor dequantizes to f32, bf16, f16 or f64, "
                          "not %s", em_dtype_name(in[0]->dtype), em_dtype_name(out->dtype));
    return EM_OK;
}

em_status rule_ew_promote(RULE_ARGS) {
    (void)op, (void)attrs, (void)n_out;
    if (ew_shape(c, in, n_in, out)) return EM_ERR_SHAPE;
    out->dtype = em_promote_types(in, n_in);
    return EM_OK;
}

em_status rule_ew_promote_num(RULE_ARGS) {
    (void)attrs, (void)n_out;
    if (ew_shape(c, in, n_in, out)) return EM_ERR_SHAPE;
    out->dtype = em_promote_types(in, n_in);
    if (out->dtype == EM_BOOL)
        return em_op_fail(c, EM_ERR_DTYPE, "%s is not defined for two bool tensors", op->name);
    return EM_OK;
}

em_status rule_ew_promote_float(RULE_ARGS) {
    (void)op, (void)attrs, (void)n_out;
    if (ew_shape(c, in, n_in, out)) return EM_ERR_SHAPE;
    em_dtype t = em_promote_types(in, n_in);
    out->dtype = em_dtype_is_float(t) ? t : EM_F32;
    return EM_OK;
}

em_status rule_ew_compare(RULE_ARGS) {
    (void)op, (void)attrs, (void)n_out;
    if (ew_shape(c, in, n_in, out)) return EM_ERR_SHAPE;
    out->dtype = EM_BOOL;
    return EM_OK;
}

em_status rule_ew_where(RULE_ARGS) {
    (void)op, (void)attrs, (void)n_out;
    if (in[0]->dtype != EM_BOOL)
        return em_op_fail(c, EM_ERR_DTYPE, "the condition must be bool, not %s",
                          em_dtype_name(in[0]->dtype));
    if (ew_shape(c, in, n_in, out)) return EM_ERR_SHAPE;
    out->dtype = em_promote_types(in + 1, 2);
    return EM_OK;
}

/* ---- reductions ---- */

/* Fills `red` (which dims are reduced) from a dims attribute; all when empty. */
bool em_rule_reduce_dims(em_ctx *c, const em_tensor *x, const em_attr *dims, bool red[EM_MAX_DIMS]) {
    for (int d = 0; d < EM_MAX_DIMS; d++) red[d] = dims->n == 0;
    if (dims->n < 0) {
        em_op_fail(c, EM_ERR_INVALID_ARG, "too many reduction dims");
        return false;
    }
    for (int i = 0; i < dims->n; i++) {
        int d;
        if (!em_rule_dim(c, dims->v[i], x->ndim, "reduction dim", &d)) return false;
        if (x->ndim == 0) continue;
        if (red[d]) {
            em_op_fail(c, EM_ERR_INVALID_ARG, "dim %d appears twice in the reduction dims", d);
            return false;
        }
        red[d] = true;
    }
    return true;
}

static em_status reduce_shape(em_ctx *c, const em_tensor *x, const em_attr *attrs, em_meta *out,
                              bool need_nonempty) {
    bool red[EM_MAX_DIMS];
    if (!em_rule_reduce_dims(c, x, &attrs[0], red)) return EM_ERR_INVALID_ARG;
    bool keep = attrs[1].i != 0;
    out->ndim = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (red[d] && need_nonempty && x->shape[d] == 0)
            return em_op_fail(c, EM_ERR_SHAPE, "cannot reduce over dim %d of size 0", d);
        if (!red[d]) out->shape[out->ndim++] = x->shape[d];
        else if (keep) out->shape[out->ndim++] = 1;
    }
    return EM_OK;
}

em_status rule_reduce(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    if (reduce_shape(c, in[0], attrs, out, false)) return EM_ERR_SHAPE;
    out->dtype = em_dtype_is_float(in[0]->dtype) ? in[0]->dtype : EM_I64;
    return EM_OK;
}

em_status rule_reduce_float(RULE_ARGS) {
    (void)n_in, (void)n_out;
    if (!em_dtype_is_float(in[0]->dtype))
        return em_op_fail(c, EM_ERR_DTYPE, "%s needs a floating input, not %s", op->name,
                          em_dtype_name(in[0]->dtype));
    if (reduce_shape(c, in[0], attrs, out, false)) return EM_ERR_SHAPE;
    out->dtype = in[0]->dtype;
    return EM_OK;
}

em_status rule_reduce_keep(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    if (reduce_shape(c, in[0], attrs, out, true)) return EM_ERR_SHAPE;
    out->dtype = in[0]->dtype;
    return EM_OK;
}

em_status rule_arg_reduce(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    const em_tensor *x = in[0];
    bool keep = attrs[1].i != 0;
    out->dtype = EM_I64;
    if (attrs[2].i) { /* flatten */
        if (x->numel == 0) return em_op_fail(c, EM_ERR_SHAPE, "empty tensor");
        out->ndim = keep ? x->ndim : 0;
        for (int d = 0; d < out->ndim; d++) out->shape[d] = 1;
        return EM_OK;
    }
    int dim;
    if (!em_rule_dim(c, attrs[0].i, x->ndim, "dim", &dim)) return EM_ERR_INVALID_ARG;
    if (x->ndim > 0 && x->shape[dim] == 0)
        return em_op_fail(c, EM_ERR_SHAPE, "cannot reduce over dim %d of size 0", dim);
    out->ndim = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (d != dim) out->shape[out->ndim++] = x->shape[d];
        else if (keep) out->shape[out->ndim++] = 1;
    }
    return EM_OK;
}

em_status rule_softmax(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    int d;
    if (!em_dtype_is_float(in[0]->dtype))
        return em_op_fail(c, EM_ERR_DTYPE, "needs a floating input, not %s",
                          em_dtype_name(in[0]->dtype));
    if (!em_rule_dim(c, attrs[0].i, in[0]->ndim, "dim", &d)) return EM_ERR_INVALID_ARG;
    meta_like(out, in[0], in[0]->dtype);
    return EM_OK;
}

em_status rule_cumsum(RULE_ARGS) {
    (void)op, (void)n_in, (void)n_out;
    int d;
    if (!em_rule_dim(c, attrs[0].i, in[0]->ndim, "dim", &d)) return EM_ERR_INVALID_ARG;
    meta_like(out, in[0], em_dtype_is_float(in[0]->dtype) ? in[0]->dtype : EM_I64);
    return EM_OK;
}

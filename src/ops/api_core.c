/* Public wrappers of creation, view, element-wise and reduction ops (ember/ops.h). */
#include <math.h>

#include "core/tensor_impl.h"
#include "ember/ops.h"
#include "ops/dispatch.h"

/* ---- creation ---- */

static em_tensor *create(EM_OP_ARGS, em_op_id id, em_dtype dtype, int ndim, const int64_t *shape,
                         double value) {
    if (!c) return NULL;
    if (ndim < 0 || ndim > EM_MAX_DIMS || (ndim && !shape)) {
        em_fail_at(c, EM_ERR_SHAPE, em_op_get(id)->name, file, line,
                   "%d dimensions (0 to %d allowed)", ndim, EM_MAX_DIMS);
        return NULL;
    }
    em_attr a[3] = {em_attr_int(dtype), em_attr_ints(shape, ndim), em_attr_float(value)};
    return EM_RUN(id, NULL, 0, a);
}

em_tensor *em_empty_(EM_OP_ARGS, em_dtype dtype, int ndim, const int64_t *shape) {
    return create(c, file, line, EM_OP_EMPTY, dtype, ndim, shape, 0);
}
em_tensor *em_zeros_(EM_OP_ARGS, em_dtype dtype, int ndim, const int64_t *shape) {
    return create(c, file, line, EM_OP_FULL, dtype, ndim, shape, 0);
}
em_tensor *em_ones_(EM_OP_ARGS, em_dtype dtype, int ndim, const int64_t *shape) {
    return create(c, file, line, EM_OP_FULL, dtype, ndim, shape, 1);
}
em_tensor *em_full_(EM_OP_ARGS, em_dtype dtype, int ndim, const int64_t *shape, double value) {
    return create(c, file, line, EM_OP_FULL, dtype, ndim, shape, value);
}
em_tensor *em_eye_(EM_OP_ARGS, int64_t n, int64_t m, em_dtype dtype) {
    int64_t s[2] = {n, m};
    return create(c, file, line, EM_OP_EYE, dtype, 2, s, 0);
}

em_tensor *em_arange_(EM_OP_ARGS, double start, double end, double step, em_dtype dtype) {
    em_attr a[4] = {em_attr_int(dtype), em_attr_float(start), em_attr_float(end),
                    em_attr_float(step)};
    return EM_RUN(EM_OP_ARANGE, NULL, 0, a);
}

static em_tensor *random(EM_OP_ARGS, em_op_id id, em_dtype dtype, int ndim, const int64_t *shape,
                         uint64_t seed, double p0, double p1) {
    if (!c) return NULL;
    if (ndim < 0 || ndim > EM_MAX_DIMS || (ndim && !shape)) {
        em_fail_at(c, EM_ERR_SHAPE, em_op_get(id)->name, file, line,
                   "%d dimensions (0 to %d allowed)", ndim, EM_MAX_DIMS);
        return NULL;
    }
    em_attr a[5] = {em_attr_int(dtype), em_attr_ints(shape, ndim), em_attr_int((int64_t)seed),
                    em_attr_float(p0), em_attr_float(p1)};
    return EM_RUN(id, NULL, 0, a);
}

em_tensor *em_rand_(EM_OP_ARGS, em_dtype dtype, int ndim, const int64_t *shape, uint64_t seed,
                    double low, double high) {
    return random(c, file, line, EM_OP_RAND_UNIFORM, dtype, ndim, shape, seed, low, high);
}
em_tensor *em_randn_(EM_OP_ARGS, em_dtype dtype, int ndim, const int64_t *shape, uint64_t seed,
                     double mean, double std) {
    return random(c, file, line, EM_OP_RAND_NORMAL, dtype, ndim, shape, seed, mean, std);
}

/* ---- views ---- */

static em_tensor *shape_op(EM_OP_ARGS, em_op_id id, em_tensor *x, int ndim, const int64_t *shape) {
    if (!c) return NULL;
    if (ndim < 0 || ndim > EM_MAX_DIMS || (ndim && !shape)) {
        if (!c->err.status)
            em_fail_at(c, EM_ERR_SHAPE, em_op_get(id)->name, file, line,
                       "target has %d dimensions (0 to %d allowed)", ndim, EM_MAX_DIMS);
        return NULL;
    }
    em_attr a[1] = {em_attr_ints(shape, ndim)};
    return EM_RUN(id, &x, 1, a);
}

em_tensor *em_reshape_(EM_OP_ARGS, em_tensor *x, int ndim, const int64_t *shape) {
    return shape_op(c, file, line, EM_OP_RESHAPE, x, ndim, shape);
}
em_tensor *em_view_(EM_OP_ARGS, em_tensor *x, int ndim, const int64_t *shape) {
    return shape_op(c, file, line, EM_OP_VIEW, x, ndim, shape);
}
em_tensor *em_expand_(EM_OP_ARGS, em_tensor *x, int ndim, const int64_t *shape) {
    return shape_op(c, file, line, EM_OP_EXPAND, x, ndim, shape);
}

em_tensor *em_permute_(EM_OP_ARGS, em_tensor *x, int ndim, const int *dims) {
    if (!c) return NULL;
    if (ndim < 0 || ndim > EM_MAX_DIMS || (ndim && !dims)) {
        if (!c->err.status)
            em_fail_at(c, EM_ERR_INVALID_ARG, "permute", file, line, "%d dims given", ndim);
        return NULL;
    }
    em_attr a[1] = {em_attr_dims(dims, ndim)};
    return EM_RUN(EM_OP_PERMUTE, &x, 1, a);
}

em_tensor *em_transpose_(EM_OP_ARGS, em_tensor *x, int dim0, int dim1) {
    em_attr a[2] = {em_attr_int(dim0), em_attr_int(dim1)};
    return EM_RUN(EM_OP_TRANSPOSE, &x, 1, a);
}

em_tensor *em_slice_(EM_OP_ARGS, em_tensor *x, int dim, int64_t start, int64_t end,
                     int64_t step) {
    em_attr a[4] = {em_attr_int(dim), em_attr_int(start), em_attr_int(end), em_attr_int(step)};
    return EM_RUN(EM_OP_SLICE, &x, 1, a);
}

em_tensor *em_narrow_(EM_OP_ARGS, em_tensor *x, int dim, int64_t start, int64_t length) {
    if (!c || c->err.status || !x) return EM_RUN(EM_OP_SLICE, &x, 1, NULL);
    int d = dim < 0 ? dim + x->ndim : dim;
    if (d < 0 || d >= x->ndim) {
        em_fail_at(c, EM_ERR_INVALID_ARG, "narrow", file, line,
                   "dim %d is out of range for %d dimensions", dim, x->ndim);
        return NULL;
    }
    if (start < 0) start += x->shape[d];
    if (start < 0 || length < 0 || start > x->shape[d] || length > x->shape[d] - start) {
        char b[96];
        em_fail_at(c, EM_ERR_INDEX, "narrow", file, line,
                   "start %lld + length %lld exceeds dim %d of %s", (long long)start,
                   (long long)length, d, em_tensor_sig(x, b, sizeof b));
        return NULL;
    }
    return em_slice_(c, file, line, x, d, start, start + length, 1);
}

em_tensor *em_squeeze_(EM_OP_ARGS, em_tensor *x, int dim) {
    int64_t d = dim;
    em_attr a[2] = {em_attr_ints(&d, 1), em_attr_int(0)};
    return EM_RUN(EM_OP_SQUEEZE, &x, 1, a);
}
em_tensor *em_squeeze_all_(EM_OP_ARGS, em_tensor *x) {
    em_attr a[2] = {em_attr_ints(NULL, 0), em_attr_int(1)};
    return EM_RUN(EM_OP_SQUEEZE, &x, 1, a);
}
em_tensor *em_unsqueeze_(EM_OP_ARGS, em_tensor *x, int dim) {
    em_attr a[1] = {em_attr_int(dim)};
    return EM_RUN(EM_OP_UNSQUEEZE, &x, 1, a);
}

int em_split_(EM_OP_ARGS, em_tensor *x, int64_t split_size, int dim, em_tensor **out,
              int max_out) {
    em_attr a[3] = {em_attr_int(dim), em_attr_ints(NULL, 0), em_attr_int(split_size)};
    int n = 0;
    if (!out || max_out < 0) {
        if (c && !c->err.status)
            em_fail_at(c, EM_ERR_INVALID_ARG, "split", file, line, "no output array");
        return -1;
    }
    em_op_run(c, file, line, EM_OP_SPLIT, &x, 1, a, out, max_out, &n);
    return n > 0 ? n : -1;
}

int em_split_sizes_(EM_OP_ARGS, em_tensor *x, const int64_t *sizes, int n, int dim,
                    em_tensor **out) {
    if (!c) return -1;
    if (n <= 0 || n > EM_ATTR_INTS_MAX || !sizes || !out) {
        if (!c->err.status)
            em_fail_at(c, EM_ERR_INVALID_ARG, "split", file, line,
                       "%d sizes given (1 to %d allowed)", n, EM_ATTR_INTS_MAX);
        return -1;
    }
    em_attr a[3] = {em_attr_int(dim), em_attr_ints(sizes, n), em_attr_int(0)};
    int got = 0;
    em_op_run(c, file, line, EM_OP_SPLIT, &x, 1, a, out, n, &got);
    return got > 0 ? got : -1;
}

em_tensor *em_contiguous_(EM_OP_ARGS, em_tensor *x) {
    if (c && !c->err.status && x && !x->lazy && em_is_contiguous(x))
        return em_scope_add(c, em_tensor_retain(x));
    return EM_RUN(EM_OP_CONTIGUOUS, &x, 1, NULL);
}

em_status em_assign_(EM_OP_ARGS, em_tensor *dst, em_tensor *src) {
    em_tensor *in[2] = {dst, src};
    if (!c) return EM_ERR_INVALID_ARG;
    em_op_exec(c, file, line, EM_OP_ASSIGN, in, 2, NULL, NULL, 0);
    return c->err.status;
}

/* ---- element-wise ---- */

em_tensor *em_cast_(EM_OP_ARGS, em_tensor *x, em_dtype dtype) {
    em_attr a[1] = {em_attr_int(dtype)};
    return EM_RUN(EM_OP_CAST, &x, 1, a);
}

#define UNARY(fn, ID)                                                                              \
    em_tensor *em_##fn##_(EM_OP_ARGS, em_tensor *x) { return EM_RUN(EM_OP_##ID, &x, 1, NULL); }
UNARY(neg, NEG)
UNARY(abs, ABS)
UNARY(exp, EXP)
UNARY(log, LOG)
UNARY(sqrt, SQRT)
UNARY(rsqrt, RSQRT)
UNARY(sin, SIN)
UNARY(cos, COS)
UNARY(tanh, TANH)
UNARY(sigmoid, SIGMOID)
UNARY(silu, SILU)
UNARY(relu, RELU)
UNARY(logical_not, LOGICAL_NOT)
#undef UNARY

em_tensor *em_gelu_(EM_OP_ARGS, em_tensor *x, bool approximate_tanh) {
    em_attr a[1] = {em_attr_int(approximate_tanh)};
    return EM_RUN(EM_OP_GELU, &x, 1, a);
}

em_tensor *em_clamp_(EM_OP_ARGS, em_tensor *x, double lo, double hi) {
    em_attr a[4] = {em_attr_float(isnan(lo) ? 0 : lo), em_attr_float(isnan(hi) ? 0 : hi),
                    em_attr_int(!isnan(lo)), em_attr_int(!isnan(hi))};
    return EM_RUN(EM_OP_CLAMP, &x, 1, a);
}

#define BINARY(fn, ID)                                                                             \
    em_tensor *em_##fn##_(EM_OP_ARGS, em_tensor *a, em_tensor *b) {                                \
        em_tensor *in[2] = {a, b};                                                                 \
        return EM_RUN(EM_OP_##ID, in, 2, NULL);                                                    \
    }
BINARY(add, ADD)
BINARY(sub, SUB)
BINARY(mul, MUL)
BINARY(div, DIV)
BINARY(pow, POW)
BINARY(maximum, MAXIMUM)
BINARY(minimum, MINIMUM)
BINARY(eq, EQ)
BINARY(ne, NE)
BINARY(lt, LT)
BINARY(le, LE)
BINARY(gt, GT)
BINARY(ge, GE)
BINARY(logical_and, LOGICAL_AND)
BINARY(logical_or, LOGICAL_OR)
#undef BINARY

em_tensor *em_where_(EM_OP_ARGS, em_tensor *cond, em_tensor *a, em_tensor *b) {
    em_tensor *in[3] = {cond, a, b};
    return EM_RUN(EM_OP_WHERE, in, 3, NULL);
}

/* A Python number as torch wraps it: the tensor's own float dtype, else i64 or f32; made on the
 * tensor's device (an op never mixes devices). */
static em_tensor *wrap_scalar(EM_OP_ARGS, em_tensor *x, double v) {
    if (!c || c->err.status || !x) return NULL;
    em_dtype t;
    if (em_dtype_is_float(x->dtype)) t = x->dtype;
    else t = (v == floor(v) && fabs(v) < 9.0e15) ? EM_I64 : EM_F32;
    unsigned char buf[8];
    em_store_f64(buf, t, 0, v);
    return em_from_host_on_(c, file, line, x->dev, t, 0, NULL, buf);
}

#define SCALAR(fn, ID)                                                                             \
    em_tensor *em_##fn##_scalar_(EM_OP_ARGS, em_tensor *x, double v) {                             \
        em_tensor *in[2] = {x, wrap_scalar(c, file, line, x, v)};                                  \
        return EM_RUN(EM_OP_##ID, in, 2, NULL);                                                    \
    }
SCALAR(add, ADD)
SCALAR(mul, MUL)
SCALAR(div, DIV)
SCALAR(pow, POW)
#undef SCALAR

/* ---- reductions ---- */

static em_tensor *reduce(EM_OP_ARGS, em_op_id id, em_tensor *x, const int *dims, int ndims,
                         bool keepdim, int64_t extra) {
    if (!c) return NULL;
    if (ndims < 0 || ndims > EM_MAX_DIMS || (ndims && !dims)) {
        if (!c->err.status)
            em_fail_at(c, EM_ERR_INVALID_ARG, em_op_get(id)->name, file, line,
                       "%d reduction dims given (0 to %d allowed)", ndims, EM_MAX_DIMS);
        return NULL;
    }
    em_attr a[3] = {em_attr_dims(dims, ndims), em_attr_int(keepdim), em_attr_int(extra)};
    return EM_RUN(id, &x, 1, a);
}

#define REDUCE(fn, ID)                                                                             \
    em_tensor *em_##fn##_(EM_OP_ARGS, em_tensor *x, const int *dims, int ndims, bool keepdim) {   \
        return reduce(c, file, line, EM_OP_##ID, x, dims, ndims, keepdim, 0);                      \
    }
REDUCE(sum, SUM)
REDUCE(mean, MEAN)
REDUCE(max, MAX)
REDUCE(min, MIN)
REDUCE(prod, PROD)
#undef REDUCE

em_tensor *em_var_(EM_OP_ARGS, em_tensor *x, const int *dims, int ndims, int correction,
                   bool keepdim) {
    return reduce(c, file, line, EM_OP_VAR, x, dims, ndims, keepdim, correction);
}

static em_tensor *arg(EM_OP_ARGS, em_op_id id, em_tensor *x, int dim, bool keepdim, bool flat) {
    em_attr a[3] = {em_attr_int(dim), em_attr_int(keepdim), em_attr_int(flat)};
    return EM_RUN(id, &x, 1, a);
}
em_tensor *em_argmax_(EM_OP_ARGS, em_tensor *x, int dim, bool keepdim) {
    return arg(c, file, line, EM_OP_ARGMAX, x, dim, keepdim, false);
}
em_tensor *em_argmin_(EM_OP_ARGS, em_tensor *x, int dim, bool keepdim) {
    return arg(c, file, line, EM_OP_ARGMIN, x, dim, keepdim, false);
}
em_tensor *em_argmax_all_(EM_OP_ARGS, em_tensor *x) {
    return arg(c, file, line, EM_OP_ARGMAX, x, 0, false, true);
}
em_tensor *em_argmin_all_(EM_OP_ARGS, em_tensor *x) {
    return arg(c, file, line, EM_OP_ARGMIN, x, 0, false, true);
}

em_tensor *em_softmax_(EM_OP_ARGS, em_tensor *x, int dim) {
    em_attr a[1] = {em_attr_int(dim)};
    return EM_RUN(EM_OP_SOFTMAX, &x, 1, a);
}
em_tensor *em_log_softmax_(EM_OP_ARGS, em_tensor *x, int dim) {
    em_attr a[1] = {em_attr_int(dim)};
    return EM_RUN(EM_OP_LOG_SOFTMAX, &x, 1, a);
}
em_tensor *em_cumsum_(EM_OP_ARGS, em_tensor *x, int dim) {
    em_attr a[1] = {em_attr_int(dim)};
    return EM_RUN(EM_OP_CUMSUM, &x, 1, a);
}

/* Helpers shared by the shape rules: dims, broadcasting, type promotion. */
#include <stdio.h>

#include "core/tensor_impl.h"

bool em_rule_dim(em_ctx *c, int64_t dim, int ndim, const char *what, int *out) {
    int n = ndim > 0 ? ndim : 1;
    if (dim < -n || dim >= n) {
        em_op_fail(c, EM_ERR_INVALID_ARG, "%s %lld is out of range for %d dimensions", what,
                   (long long)dim, ndim);
        return false;
    }
    *out = (int)(dim < 0 ? dim + n : dim);
    return true;
}

bool em_broadcast_shapes(em_ctx *c, em_tensor *const *in, int n, em_meta *out) {
    int nd = 0;
    for (int i = 0; i < n; i++)
        if (in[i]->ndim > nd) nd = in[i]->ndim;
    out->ndim = nd;
    for (int d = 0; d < nd; d++) {
        int64_t size = 1;
        for (int i = 0; i < n; i++) {
            int k = d - (nd - in[i]->ndim);
            if (k < 0) continue;
            int64_t s = in[i]->shape[k];
            if (s == size || s == 1) continue;
            if (size == 1) {
                size = s;
                continue;
            }
            char b[256] = "";
            size_t u = 0;
            for (int j = 0; j < n && u < sizeof b; j++) {
                char one[96];
                int w = snprintf(b + u, sizeof b - u, "%s%s", j ? " and " : "",
                                 em_shape_str(in[j]->shape, in[j]->ndim, one, sizeof one));
                if (w < 0) break;
                u += (size_t)w;
            }
            em_op_fail(c, EM_ERR_SHAPE, "shapes %s cannot be broadcast (dim %d: %lld vs %lld)", b,
                       d - nd, (long long)size, (long long)s);
            return false;
        }
        out->shape[d] = size;
    }
    return true;
}

/* 0 bool, 1 integer, 2 floating */
static int category(em_dtype t) {
    if (t == EM_BOOL) return 0;
    return em_dtype_table[t].is_float ? 2 : 1;
}

static int int_rank(em_dtype t) {
    switch (t) {
    case EM_I8: return 1;
    case EM_U8: return 1;
    case EM_I16: return 2;
    case EM_I32: return 3;
    case EM_I64: return 4;
    default: return 0;
    }
}

static int float_rank(em_dtype t) {
    switch (t) {
    case EM_F16: return 1;
    case EM_BF16: return 1;
    case EM_F32: return 2;
    case EM_F64: return 3;
    default: return 0;
    }
}

static em_dtype promote2(em_dtype a, em_dtype b) {
    if (a == b) return a;
    int ca = category(a), cb = category(b);
    if (ca != cb) return ca > cb ? a : b;
    if (ca == 2) {
        if (float_rank(a) == float_rank(b)) return EM_F32; /* f16 with bf16 */
        return float_rank(a) > float_rank(b) ? a : b;
    }
    /* integers: u8 with i8 gives i16; otherwise the wider one */
    if ((a == EM_U8 && b == EM_I8) || (a == EM_I8 && b == EM_U8)) return EM_I16;
    return int_rank(a) >= int_rank(b) ? a : b;
}

em_dtype em_promote_types(em_tensor *const *in, int n) {
    bool have_dim = false, have_zd = false;
    em_dtype dim_t = EM_BOOL, zd_t = EM_BOOL;
    for (int i = 0; i < n; i++) {
        if (!in[i]) continue;
        if (in[i]->ndim > 0) {
            dim_t = have_dim ? promote2(dim_t, in[i]->dtype) : in[i]->dtype;
            have_dim = true;
        } else {
            zd_t = have_zd ? promote2(zd_t, in[i]->dtype) : in[i]->dtype;
            have_zd = true;
        }
    }
    if (!have_dim) return zd_t;
    if (!have_zd) return dim_t;
    return category(zd_t) > category(dim_t) ? zd_t : dim_t;
}

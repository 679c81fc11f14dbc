/* View ops: new geometry over the same storage (shapes come from the rules in rules_core.c). */
#include <stdlib.h>
#include <string.h>

#include "core/tensor_impl.h"
#include "ops/dispatch.h"
#include "ops/rules.h"

/* Strides that view a tensor of the given geometry with `shape` without copying (torch's
 * computeStride); false when the memory layout does not allow it. */
bool em_view_strides(int xnd, const int64_t *xshape, const int64_t *xstrides, int64_t xnumel,
                     int ndim, const int64_t *shape, int64_t *st) {
    if (xnumel == 0 || xnd == 0) {
        int64_t s = 1;
        for (int i = ndim - 1; i >= 0; i--) {
            st[i] = s;
            s *= shape[i] ? shape[i] : 1;
        }
        return true;
    }
    int view_d = ndim - 1;
    int64_t chunk_base = xstrides[xnd - 1], tensor_numel = 1, view_numel = 1;
    for (int td = xnd - 1; td >= 0; td--) {
        tensor_numel *= xshape[td];
        if (td == 0 || (xshape[td - 1] != 1 && xstrides[td - 1] != tensor_numel * chunk_base)) {
            while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
                st[view_d] = view_numel * chunk_base;
                view_numel *= shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return false;
            if (td > 0) {
                chunk_base = xstrides[td - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

static bool view_strides(const em_tensor *x, int ndim, const int64_t *shape, int64_t *st) {
    return em_view_strides(x->ndim, x->shape, x->strides, x->numel, ndim, shape, st);
}

static em_status reshape(em_ctx *c, const em_op_def *op, em_tensor *x, const em_meta *m,
                         em_tensor **out) {
    int64_t st[EM_MAX_DIMS];
    if (view_strides(x, m->ndim, m->shape, st)) {
        *out = em_tensor_view_of(x, m->ndim, m->shape, st, x->offset);
        return *out ? EM_OK : em_op_fail(c, EM_ERR_OOM, "out of memory");
    }
    if (op->id == EM_OP_VIEW)
        return em_op_fail(c, EM_ERR_SHAPE,
                          "the strides of the input do not allow this view; use reshape "
                          "(which copies) or contiguous first");
    em_tensor *copy;
    if (em_op_exec(c, c->cur.file, c->cur.line, EM_OP_CONTIGUOUS, &x, 1, NULL, &copy, 1) != 1)
        return c->err.status;
    em_tensor_set_contiguous_strides(copy); /* no-op: a fresh copy is contiguous */
    view_strides(copy, m->ndim, m->shape, st);
    *out = em_tensor_view_of(copy, m->ndim, m->shape, st, copy->offset);
    em_tensor_release(copy);
    return *out ? EM_OK : EM_ERR_OOM;
}

em_status em_view_build(em_ctx *c, const em_op_def *op, em_tensor *const *in,
                        const em_attr *attrs, const em_meta *m, int n_out, em_tensor **out) {
    em_tensor *x = in[0];
    int64_t st[EM_MAX_DIMS];
    int64_t off = x->offset;
    switch (op->id) {
    case EM_OP_RESHAPE:
    case EM_OP_VIEW: return reshape(c, op, x, m, out);
    case EM_OP_PERMUTE:
        for (int i = 0; i < m->ndim; i++) {
            int64_t d = attrs[0].v[i];
            st[i] = x->strides[d < 0 ? d + x->ndim : d];
        }
        break;
    case EM_OP_TRANSPOSE: {
        memcpy(st, x->strides, sizeof st);
        if (x->ndim > 0) {
            int64_t d0 = attrs[0].i < 0 ? attrs[0].i + x->ndim : attrs[0].i;
            int64_t d1 = attrs[1].i < 0 ? attrs[1].i + x->ndim : attrs[1].i;
            st[d0] = x->strides[d1];
            st[d1] = x->strides[d0];
        }
        break;
    }
    case EM_OP_SLICE: {
        int d = (int)(attrs[0].i < 0 ? attrs[0].i + x->ndim : attrs[0].i);
        int64_t s0, cnt;
        em_slice_bounds(x->shape[d], attrs[1].i, attrs[2].i, attrs[3].i, &s0, &cnt);
        memcpy(st, x->strides, sizeof st);
        if (cnt > 0) off += s0 * x->strides[d];
        st[d] = x->strides[d] * attrs[3].i;
        break;
    }
    case EM_OP_EXPAND:
        for (int i = 0; i < m->ndim; i++) {
            int k = i - (m->ndim - x->ndim);
            st[i] = (k < 0 || (x->shape[k] == 1 && m->shape[i] != 1)) ? 0 : x->strides[k];
        }
        break;
    case EM_OP_SQUEEZE: {
        bool drop[EM_MAX_DIMS];
        em_squeeze_drops(x, attrs, drop);
        for (int d = 0, j = 0; d < x->ndim; d++)
            if (!drop[d]) st[j++] = x->strides[d];
        break;
    }
    case EM_OP_UNSQUEEZE: {
        int d = (int)(attrs[0].i < 0 ? attrs[0].i + x->ndim + 1 : attrs[0].i);
        for (int i = 0, k = 0; i < m->ndim; i++) {
            if (i == d)
                st[i] = d < x->ndim ? x->strides[d] * x->shape[d] : 1;
            else
                st[i] = x->strides[k++];
        }
        break;
    }
    case EM_OP_SPLIT: {
        int d = (int)(attrs[0].i < 0 ? attrs[0].i + x->ndim : attrs[0].i);
        int64_t pos = 0;
        for (int o = 0; o < n_out; o++) {
            out[o] = em_tensor_view_of(x, m[o].ndim, m[o].shape, x->strides,
                                       x->offset + (m[o].shape[d] ? pos * x->strides[d] : 0));
            if (!out[o]) {
                for (int j = 0; j < o; j++) em_tensor_release(out[j]);
                return em_op_fail(c, EM_ERR_OOM, "out of memory");
            }
            pos += m[o].shape[d];
        }
        return EM_OK;
    }
    default: return em_op_fail(c, EM_ERR_INTERNAL, "not a view op");
    }
    out[0] = em_tensor_view_of(x, m->ndim, m->shape, st, off);
    return out[0] ? EM_OK : em_op_fail(c, EM_ERR_OOM, "out of memory");
}

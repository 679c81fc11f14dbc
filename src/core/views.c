/* View ops' geometry: strides and offsets over the same storage (shapes come from the rules in
 * rules_core.c). The dispatcher builds eager views with it, compile mode's lowerings their
 * views of planned buffers. */
#include <string.h>

#include "core/rules.h"
#include "core/tensor_impl.h"

/* Strides that view a tensor of the given geometry with `shape` without copying (torch's
 * computeStride); false when the memory layout does not allow it. */
static bool geometry_strides(int xnd, const int64_t *xshape, const int64_t *xstrides,
                             int64_t xnumel, int ndim, const int64_t *shape, int64_t *st) {
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

bool em_view_strides(const em_tensor *x, int ndim, const int64_t *shape, int64_t *st) {
    return geometry_strides(x->ndim, x->shape, x->strides, x->numel, ndim, shape, st);
}

em_status em_view_geometry(em_ctx *c, const em_op_def *op, const em_tensor *x,
                           const em_attr *attrs, const em_meta *m, int n_out,
                           int64_t (*st)[EM_MAX_DIMS], int64_t *off, bool *copy) {
    *copy = false;
    off[0] = x->offset;
    switch (op->id) {
    case EM_OP_RESHAPE:
    case EM_OP_VIEW:
        if (em_view_strides(x, m->ndim, m->shape, st[0])) return EM_OK;
        if (op->id == EM_OP_VIEW)
            return em_op_fail(c, EM_ERR_SHAPE,
                              "the strides of the input do not allow this view; use reshape "
                              "(which copies) or contiguous first");
        *copy = true; /* reshape: a contiguous copy, then a view of it */
        return EM_OK;
    case EM_OP_PERMUTE:
        for (int i = 0; i < m->ndim; i++) {
            int64_t d = attrs[0].v[i];
            st[0][i] = x->strides[d < 0 ? d + x->ndim : d];
        }
        return EM_OK;
    case EM_OP_TRANSPOSE:
        memcpy(st[0], x->strides, sizeof st[0]);
        if (x->ndim > 0) {
            int64_t d0 = attrs[0].i < 0 ? attrs[0].i + x->ndim : attrs[0].i;
            int64_t d1 = attrs[1].i < 0 ? attrs[1].i + x->ndim : attrs[1].i;
            st[0][d0] = x->strides[d1];
            st[0][d1] = x->strides[d0];
        }
        return EM_OK;
    case EM_OP_SLICE: {
        int d = (int)(attrs[0].i < 0 ? attrs[0].i + x->ndim : attrs[0].i);
        int64_t s0, cnt;
        em_slice_bounds(x->shape[d], attrs[1].i, attrs[2].i, attrs[3].i, &s0, &cnt);
        memcpy(st[0], x->strides, sizeof st[0]);
        if (cnt > 0) off[0] += s0 * x->strides[d];
        st[0][d] = x->strides[d] * attrs[3].i;
        return EM_OK;
    }
    case EM_OP_EXPAND:
        for (int i = 0; i < m->ndim; i++) {
            int k = i - (m->ndim - x->ndim);
            st[0][i] = (k < 0 || (x->shape[k] == 1 && m->shape[i] != 1)) ? 0 : x->strides[k];
        }
        return EM_OK;
    case EM_OP_SQUEEZE: {
        bool drop[EM_MAX_DIMS];
        em_squeeze_drops(x, attrs, drop);
        for (int d = 0, j = 0; d < x->ndim; d++)
            if (!drop[d]) st[0][j++] = x->strides[d];
        return EM_OK;
    }
    case EM_OP_UNSQUEEZE: {
        int d = (int)(attrs[0].i < 0 ? attrs[0].i + x->ndim + 1 : attrs[0].i);
        for (int i = 0, k = 0; i < m->ndim; i++) {
            if (i == d)
                st[0][i] = d < x->ndim ? x->strides[d] * x->shape[d] : 1;
            else
                st[0][i] = x->strides[k++];
        }
        return EM_OK;
    }
    case EM_OP_SPLIT: {
        int d = (int)(attrs[0].i < 0 ? attrs[0].i + x->ndim : attrs[0].i);
        int64_t pos = 0;
        for (int o = 0; o < n_out; o++) {
            memcpy(st[o], x->strides, sizeof st[o]);
            off[o] = x->offset + (m[o].shape[d] ? pos * x->strides[d] : 0);
            pos += m[o].shape[d];
        }
        return EM_OK;
    }
    default: return em_op_fail(c, EM_ERR_INTERNAL, "not a view op");
    }
}

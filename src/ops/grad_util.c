/* Helpers shared by the backward rules (ops/autodiff.h). */
#include "ember/ops.h"
#include "ops/autodiff.h"

em_tensor *em_grad_reduce_to(em_ctx *c, em_tensor *g, const em_tensor *like) {
    if (!g) return NULL;
    int lead = g->ndim - like->ndim, dims[EM_MAX_DIMS], nd = 0;
    for (int d = 0; d < g->ndim; d++)
        if (d < lead || (like->shape[d - lead] == 1 && g->shape[d] != 1)) dims[nd++] = d;
    if (nd) g = em_sum(c, g, dims, nd, true);
    if (g && (nd || g->ndim != like->ndim)) g = em_reshape(c, g, like->ndim, like->shape);
    return g;
}

em_tensor *em_grad_zeros_like(em_ctx *c, const em_tensor *t) {
    return em_zeros(c, t->dtype, t->ndim, t->shape);
}

const em_attr *em_grad_attr(const em_grad_node *n, const char *name) {
    int i = em_op_attr_index(n->op, name);
    return i < 0 ? NULL : &n->attrs[i];
}

em_tensor *em_grad_f32(em_ctx *c, em_tensor *t) {
    return t && t->dtype != EM_F32 && t->dtype != EM_F64 ? em_cast(c, t, EM_F32) : t;
}

em_tensor *em_grad_mean_last(em_ctx *c, em_tensor *t) {
    int d = -1;
    return em_mean(c, t, &d, 1, true);
}

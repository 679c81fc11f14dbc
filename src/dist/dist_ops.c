/* The public collective ops (ember/dist.h): the group travels as its id in core's registry,
 * so the op table's rules and every backend's kernels can find it. */
#include "core/tensor_impl.h"
#include "dist/dist_impl.h"
#include "ops/dispatch.h"

static em_attr group_attr(const em_dist *g) { return em_attr_int(g ? g->group_id : 0); }

em_tensor *em_all_reduce_(EM_OP_ARGS, em_tensor *x, em_reduce_op op, em_dist *g) {
    em_attr a[2] = {em_attr_int(op), group_attr(g)};
    return EM_RUN(EM_OP_ALL_REDUCE, &x, 1, a);
}

em_tensor *em_all_gather_(EM_OP_ARGS, em_tensor *x, int dim, em_dist *g) {
    em_attr a[2] = {em_attr_int(dim), group_attr(g)};
    return EM_RUN(EM_OP_ALL_GATHER, &x, 1, a);
}

em_tensor *em_reduce_scatter_(EM_OP_ARGS, em_tensor *x, em_reduce_op op, int dim, em_dist *g) {
    em_attr a[3] = {em_attr_int(op), em_attr_int(dim), group_attr(g)};
    return EM_RUN(EM_OP_REDUCE_SCATTER, &x, 1, a);
}

em_tensor *em_all_to_all_(EM_OP_ARGS, em_tensor *x, int split_dim, int concat_dim, em_dist *g) {
    em_attr a[3] = {em_attr_int(split_dim), em_attr_int(concat_dim), group_attr(g)};
    return EM_RUN(EM_OP_ALL_TO_ALL, &x, 1, a);
}

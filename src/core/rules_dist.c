/* Shape and dtype rules of the collectives (all_reduce, all_gather, reduce_scatter, all_to_all,
 * ring_shift).
 * Each member of the group calls the op with the same shape; the rules check what one member
 * can see: its group exists, the dtype is one the collectives carry, the split dims divide. */
#include <stdio.h>
#include <string.h>

#include "core/group.h"
#include "core/tensor_impl.h"
#include "core/rules.h"

#define RULE_ARGS                                                                                  \
    em_ctx *c, const em_op_def *op, em_tensor *const *in, int n_in, const em_attr *attrs,          \
        em_meta *out, int *n_out

/* Checks the group attribute (at index gi) and the input; fills *g and copies x's meta to out. */
static em_status common(em_ctx *c, const em_op_def *op, em_tensor *const *in, const em_attr *attrs,
                        em_meta *out, em_group_info *g) {
    int gi = em_op_attr_index(op, "group"), ri = em_op_attr_index(op, "reduce");
    const em_tensor *x = in[0];
    if (!em_group_lookup((int)attrs[gi].i, g))
        return em_op_fail(c, EM_ERR_INVALID_ARG,
                          "group %lld is not a live process group (make one with em_dist_init)",
                          (long long)attrs[gi].i);
    if (x->dtype != EM_F32 && x->dtype != EM_BF16)
        return em_op_fail(c, EM_ERR_DTYPE, "collectives carry f32 or bf16 tensors, not %s",
                          em_dtype_name(x->dtype));
    if (ri >= 0 && attrs[ri].i != 0 && attrs[ri].i != 1)
        return em_op_fail(c, EM_ERR_INVALID_ARG, "reduce %lld is not EM_REDUCE_SUM (0) or "
                          "EM_REDUCE_MAX (1)", (long long)attrs[ri].i);
    out->dtype = x->dtype;
    out->ndim = x->ndim;
    memcpy(out->shape, x->shape, (size_t)x->ndim * sizeof *x->shape);
    return EM_OK;
}

/* The dimension attribute `what` of x, normalised (negative counts from the end). */
static bool dim_attr(em_ctx *c, const em_tensor *x, int64_t v, const char *what, int *d) {
    if (x->ndim == 0) {
        em_op_fail(c, EM_ERR_SHAPE, "a 0-d tensor has no %s", what);
        return false;
    }
    return em_rule_dim(c, v, x->ndim, what, d);
}

/* dim must split into g->size equal chunks. */
static em_status divides(em_ctx *c, const em_tensor *x, int d, const char *what,
                         const em_group_info *g) {
    if (x->shape[d] % g->size)
        return em_op_fail(c, EM_ERR_SHAPE, "%s %d has size %lld, not divisible by the group size %d",
                          what, d, (long long)x->shape[d], g->size);
    return EM_OK;
}

em_status rule_all_reduce(RULE_ARGS) {
    (void)n_in, (void)n_out;
    em_group_info g;
    return common(c, op, in, attrs, out, &g);
}

em_status rule_all_gather(RULE_ARGS) {
    (void)n_in, (void)n_out;
    em_group_info g;
    int d;
    if (common(c, op, in, attrs, out, &g)) return c->err.status;
    if (!dim_attr(c, in[0], attrs[0].i, "dim", &d)) return c->err.status;
    out->shape[d] *= g.size;
    return EM_OK;
}

em_status rule_reduce_scatter(RULE_ARGS) {
    (void)n_in, (void)n_out;
    em_group_info g;
    int d;
    if (common(c, op, in, attrs, out, &g)) return c->err.status;
    if (!dim_attr(c, in[0], attrs[1].i, "dim", &d)) return c->err.status;
    if (divides(c, in[0], d, "dim", &g)) return c->err.status;
    out->shape[d] /= g.size;
    return EM_OK;
}

em_status rule_all_to_all(RULE_ARGS) {
    (void)n_in, (void)n_out;
    em_group_info g;
    int sd, cd;
    if (common(c, op, in, attrs, out, &g)) return c->err.status;
    if (!dim_attr(c, in[0], attrs[0].i, "split_dim", &sd) ||
        !dim_attr(c, in[0], attrs[1].i, "concat_dim", &cd))
        return c->err.status;
    if (divides(c, in[0], sd, "split_dim", &g)) return c->err.status;
    out->shape[sd] /= g.size;
    out->shape[cd] *= g.size;
    return EM_OK;
}

em_status rule_ring_shift(RULE_ARGS) {
    (void)n_in, (void)n_out;
    em_group_info g;
    return common(c, op, in, attrs, out, &g);
}

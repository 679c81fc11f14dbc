/* Shape and dtype rules of the training ops (adamw_step). */
#include "core/rules.h"
#include "core/tensor_impl.h"

#define RULE_ARGS                                                                                  \
    em_ctx *c, const em_op_def *op, em_tensor *const *in, int n_in, const em_attr *attrs,          \
        em_meta *out, int *n_out

static bool same_shape(const em_tensor *a, const em_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

/* adamw_step(p, g, m, v, decay, sqrt_bc2, neg_step): four floating tensors of one shape and
 * dtype, p, m and v written in place (so they must be contiguous, which also rules out expanded
 * views), and the step's three numbers as 0-d floating tensors. The betas lie in [0, 1), as
 * torch checks. */
em_status rule_adamw_step(RULE_ARGS) {
    (void)op, (void)n_in, (void)out;
    static const char *names[7] = {"param", "grad", "exp_avg", "exp_avg_sq",
                                   "decay", "sqrt_bc2", "neg_step"};
    char b0[160], b1[160];
    for (int i = 0; i < 7; i++) {
        const em_tensor *t = in[i];
        if (!em_dtype_is_float(t->dtype) || (i < 4 && t->dtype != in[0]->dtype))
            return em_op_fail(c, EM_ERR_DTYPE, "%s is %s; %s expected", names[i],
                              em_tensor_sig(t, b0, sizeof b0),
                              i < 4 && em_dtype_is_float(in[0]->dtype)
                                  ? "param's dtype"
                                  : "a floating dtype");
        if (i < 4 && !same_shape(t, in[0]))
            return em_op_fail(c, EM_ERR_SHAPE, "%s %s and param %s differ in shape", names[i],
                              em_tensor_sig(t, b0, sizeof b0), em_tensor_sig(in[0], b1, sizeof b1));
        if (i < 4 && !em_is_contiguous(t))
            return em_op_fail(c, EM_ERR_INVALID_ARG, "%s %s is not contiguous (it is updated in "
                              "place, element by element)", names[i],
                              em_tensor_sig(t, b0, sizeof b0));
        if (i >= 4 && t->ndim != 0)
            return em_op_fail(c, EM_ERR_SHAPE, "%s %s: a 0-d tensor expected", names[i],
                              em_tensor_sig(t, b0, sizeof b0));
    }
    for (int i = 0; i < 2; i++)
        if (!(attrs[i].f >= 0 && attrs[i].f < 1))
            return em_op_fail(c, EM_ERR_INVALID_ARG, "beta%d = %g is outside [0, 1)", i + 1,
                              attrs[i].f);
    if (!(attrs[2].f >= 0))
        return em_op_fail(c, EM_ERR_INVALID_ARG, "eps = %g is negative", attrs[2].f);
    *n_out = 0;
    return EM_OK;
}

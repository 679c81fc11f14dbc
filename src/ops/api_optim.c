/* Public wrappers of the training ops (ember/ops.h). */
#include "core/tensor_impl.h"
#include "ember/ops.h"
#include "ops/dispatch.h"

em_status em_adamw_step_(EM_OP_ARGS, em_tensor *p, em_tensor *g, em_tensor *m, em_tensor *v,
                         em_tensor *decay, em_tensor *sqrt_bc2, em_tensor *neg_step, double beta1,
                         double beta2, double eps) {
    em_tensor *in[7] = {p, g, m, v, decay, sqrt_bc2, neg_step};
    em_attr a[3] = {em_attr_float(beta1), em_attr_float(beta2), em_attr_float(eps)};
    if (!c) return EM_ERR_INVALID_ARG;
    em_op_exec(c, file, line, EM_OP_ADAMW_STEP, in, 7, a, NULL, 0);
    return c->err.status;
}

/* Declarations of every shape rule named in op_list.h (defined in core/rules_*.c). */
#ifndef EMBER_RULES_H
#define EMBER_RULES_H

#include "core/op_table.h"

#define EM_X_RULE(id, name, kind, min_in, max_in, nout, schema, rule)                              \
    em_status rule(em_ctx *c, const em_op_def *op, em_tensor *const *in, int n_in,                 \
                   const em_attr *attrs, em_meta *out, int *n_out);
EM_OP_LIST(EM_X_RULE)
#undef EM_X_RULE

/* Python slice semantics: the normalised start and the element count. */
void em_slice_bounds(int64_t size, int64_t start, int64_t end, int64_t step, int64_t *s0,
                     int64_t *count);
/* Which dims a reduction covers (all when the attribute is empty); false with an error. */
bool em_rule_reduce_dims(em_ctx *c, const em_tensor *x, const em_attr *dims,
                         bool red[EM_MAX_DIMS]);
/* Which dims squeeze drops (named or all, and of size 1); attrs already validated. */
void em_squeeze_drops(const em_tensor *x, const em_attr *attrs, bool drop[EM_MAX_DIMS]);

#endif

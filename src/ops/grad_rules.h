/* Each family of backward rules fills its ops' entries of the rule table (ops/grad_rules.c). */
#ifndef EMBER_GRAD_RULES_H
#define EMBER_GRAD_RULES_H

#include "ops/autodiff.h"

/* element-wise, reductions, softmax, cast (ops/grad_rules_ew.c) */
void em_grad_rules_ew(em_grad_rule *t);
/* views, concatenation, indexing, embedding (ops/grad_rules_shape.c) */
void em_grad_rules_shape(em_grad_rule *t);
/* matmul, linear, norms, rope, attention, ragged_dot (ops/grad_rules_nn.c) */
void em_grad_rules_nn(em_grad_rule *t);
/* conv2d, group_norm, upsampling, avg_pool2d (ops/grad_rules_conv.c) */
void em_grad_rules_conv(em_grad_rule *t);
/* the collectives: all_reduce, all_gather, reduce_scatter, all_to_all, ring_shift
 * (ops/grad_rules_dist.c) */
void em_grad_rules_dist(em_grad_rule *t);

/* Shorthand for a rule's parameter list and its table entry. */
#define GRAD_ARGS                                                                                  \
    em_ctx *c, const em_grad_node *n, em_tensor *const *gout, const bool *need, em_tensor **gin
#define GRAD_RULE(id, fn, in_mask, out_mask) t[EM_OP_##id] = (em_grad_rule){fn, in_mask, out_mask, false}

#endif

/*
 * The backward rules, one entry per op id of the op table (core/op_list.h): each family's file
 * fills its ops' entries (ops/grad_rules_*.c). An op without an entry is not differentiable
 * yet; em_backward names it when a gradient reaches it.
 */
#include <pthread.h>

#include "ops/autodiff.h"
#include "ops/grad_rules.h"

static em_grad_rule table[EM_OP_COUNT];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void fill(void) {
    em_grad_rules_ew(table);
    em_grad_rules_shape(table);
    em_grad_rules_nn(table);
    em_grad_rules_conv(table);
    em_grad_rules_dist(table);
}

const em_grad_rule *em_grad_rule_get(em_op_id id) {
    pthread_once(&once, fill);
    return &table[id];
}

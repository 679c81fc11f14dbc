/*
 * Backward rules of the collectives (all_reduce, all_gather, reduce_scatter, all_to_all,
 * ring_shift), with torch.distributed.nn.functional's convention: the loss is the sum of every
 * rank's loss, so the gradient of a collective is the adjoint collective of the ranks' output
 * gradients. Each rule runs the adjoint op on the group of the forward call (its `group`
 * attribute, an id of core's group registry), so it works for any group; every rank must
 * therefore run its backward over the same collectives in the same order, as the forwards did.
 * The rules are marked `collective`: the backward walk runs them also on a rank whose loss does
 * not reach the op's output (with a zero gradient: that rank's share of the others' sums), so
 * no rank waits for one that skipped the op.
 *
 * all_reduce(sum)     -> all_reduce(sum) of the gradient
 * all_reduce(max)     -> the summed gradient to the ranks holding the maximum; ties share it
 *                        equally (torch's amax): dx_r = sum_s(dy_s) [x_r == y] / #{s: x_s == y}
 * all_gather(dim)     -> reduce_scatter(sum, dim)
 * reduce_scatter(sum) -> all_gather(dim)
 * reduce_scatter(max) -> all_gather(dim) of the gradient, routed as all_reduce(max)'s
 * all_to_all(s, c)    -> all_to_all(c, s)
 * ring_shift(k)       -> ring_shift(-k)
 *
 * The rules issue the ops through the dispatcher by op id (src/ops may not use src/dist): what
 * they move is not counted in em_dist_stats, which counts the public calls.
 */
#include "ember/dist.h"
#include "ember/ops.h"
#include "ops/dispatch.h"
#include "ops/grad_rules.h"

#define X(i) (n->in[i])
/* the output's gradient, zeros when this rank's loss did not reach it */
#define G (gout[0] ? gout[0] : em_grad_zeros_like(c, n->out[0]))

static int64_t group_of(const em_grad_node *n) { return em_grad_attr(n, "group")->i; }

/* one collective of the node's group: attrs a[0..na) then the group */
static em_tensor *coll(em_ctx *c, const em_grad_node *n, em_op_id id, em_tensor *x,
                       const int64_t *a, int na) {
    em_attr at[4];
    for (int i = 0; i < na; i++) at[i] = em_attr_int(a[i]);
    at[na] = em_attr_int(group_of(n));
    x = em_contiguous(c, x); /* the kernels take packed tensors */
    return em_op_run(c, n->file, n->line, id, &x, 1, at, NULL, 0, NULL);
}

/* The summed gradient gsum (the shape of x) routed to the ranks whose x holds the maximum y
 * (the shape of x too), shared equally between the ranks that tie. */
static em_tensor *route_max(em_ctx *c, const em_grad_node *n, em_tensor *x, em_tensor *y,
                            em_tensor *gsum) {
    if (!gsum || !y) return NULL; /* the error is in c */
    em_tensor *hit = em_cast(c, em_eq(c, x, y), gsum->dtype);
    int64_t sum = EM_REDUCE_SUM;
    em_tensor *count = coll(c, n, EM_OP_ALL_REDUCE, hit, &sum, 1); /* >= 1 where hit */
    if (!count) return NULL;
    return em_div(c, em_mul(c, gsum, hit), em_maximum(c, count, em_scalar(c, 1, count->dtype)));
}

static em_status g_all_reduce(GRAD_ARGS) {
    if (!need[0]) return EM_OK;
    int64_t sum = EM_REDUCE_SUM;
    em_tensor *gsum = coll(c, n, EM_OP_ALL_REDUCE, G, &sum, 1);
    gin[0] = em_grad_attr(n, "reduce")->i == EM_REDUCE_MAX ? route_max(c, n, X(0), n->out[0], gsum)
                                                          : gsum;
    return c->err.status;
}

static em_status g_all_gather(GRAD_ARGS) {
    if (!need[0]) return EM_OK;
    int64_t a[2] = {EM_REDUCE_SUM, em_grad_attr(n, "dim")->i};
    gin[0] = coll(c, n, EM_OP_REDUCE_SCATTER, G, a, 2);
    return c->err.status;
}

static em_status g_reduce_scatter(GRAD_ARGS) {
    if (!need[0]) return EM_OK;
    int64_t dim = em_grad_attr(n, "dim")->i;
    em_tensor *gall = coll(c, n, EM_OP_ALL_GATHER, G, &dim, 1);
    if (em_grad_attr(n, "reduce")->i == EM_REDUCE_MAX)
        gall = route_max(c, n, X(0), coll(c, n, EM_OP_ALL_GATHER, n->out[0], &dim, 1), gall);
    gin[0] = gall;
    return c->err.status;
}

static em_status g_all_to_all(GRAD_ARGS) {
    if (!need[0]) return EM_OK;
    int64_t a[2] = {em_grad_attr(n, "concat_dim")->i, em_grad_attr(n, "split_dim")->i};
    gin[0] = coll(c, n, EM_OP_ALL_TO_ALL, G, a, 2);
    return c->err.status;
}

static em_status g_ring_shift(GRAD_ARGS) {
    if (!need[0]) return EM_OK;
    int64_t back = -em_grad_attr(n, "offset")->i;
    gin[0] = coll(c, n, EM_OP_RING_SHIFT, G, &back, 1);
    return c->err.status;
}

void em_grad_rules_dist(em_grad_rule *t) {
    /* the max rules read x and y; the others only the gradient */
    GRAD_RULE(ALL_REDUCE, g_all_reduce, 1, 1);
    GRAD_RULE(ALL_GATHER, g_all_gather, 0, 0);
    GRAD_RULE(REDUCE_SCATTER, g_reduce_scatter, 1, 1);
    GRAD_RULE(ALL_TO_ALL, g_all_to_all, 0, 0);
    GRAD_RULE(RING_SHIFT, g_ring_shift, 0, 0);
    em_op_id ids[5] = {EM_OP_ALL_REDUCE, EM_OP_ALL_GATHER, EM_OP_REDUCE_SCATTER, EM_OP_ALL_TO_ALL,
                       EM_OP_RING_SHIFT};
    for (int i = 0; i < 5; i++) t[ids[i]].collective = true;
}

/*
 * Backward rules of the views (the gradient of a view goes to the tensor it views, in its
 * shape), of concatenation and of the gathers (whose gradient is the matching scatter-add, so
 * indices used twice accumulate, as torch's embedding and gather backward do).
 */
#include "core/rules.h"
#include "ember/ops.h"
#include "ops/grad_rules.h"

#define X(i) (n->in[i])
#define G (gout[0])

static int norm_dim(em_ctx *c, int64_t dim, int ndim) {
    int d = 0;
    em_rule_dim(c, dim, ndim ? ndim : 1, "dim", &d);
    return d;
}

static em_status g_reshape(GRAD_ARGS) { /* reshape, view, squeeze, unsqueeze */
    (void)need;
    gin[0] = em_reshape(c, G, X(0)->ndim, X(0)->shape);
    return c->err.status;
}

static em_status g_expand(GRAD_ARGS) {
    (void)need;
    gin[0] = em_grad_reduce_to(c, G, X(0));
    return c->err.status;
}

static em_status g_permute(GRAD_ARGS) {
    (void)need;
    const em_attr *a = em_grad_attr(n, "dims");
    int inv[EM_MAX_DIMS];
    for (int i = 0; i < a->n; i++) inv[norm_dim(c, a->v[i], a->n)] = i;
    gin[0] = em_permute(c, G, a->n, inv);
    return c->err.status;
}

static em_status g_transpose(GRAD_ARGS) {
    (void)need;
    gin[0] = em_transpose(c, G, (int)em_grad_attr(n, "dim0")->i,
                          (int)em_grad_attr(n, "dim1")->i);
    return c->err.status;
}

static em_status g_slice(GRAD_ARGS) { /* zeros with the slice's window set to g */
    (void)need;
    em_tensor *z = em_grad_zeros_like(c, X(0));
    em_tensor *win = em_slice(c, z, (int)em_grad_attr(n, "dim")->i, em_grad_attr(n, "start")->i,
                              em_grad_attr(n, "end")->i, em_grad_attr(n, "step")->i);
    if (win) em_assign(c, win, G);
    gin[0] = z;
    return c->err.status;
}

/* the outputs' gradients (zeros for those that got none) concatenated along dim */
static em_status g_split(GRAD_ARGS) {
    (void)need;
    em_tensor *parts[EM_MAX_OUTPUTS];
    for (int o = 0; o < n->n_out; o++)
        parts[o] = gout[o] ? gout[o] : em_grad_zeros_like(c, n->out[o]);
    int dim = norm_dim(c, em_grad_attr(n, "dim")->i, X(0)->ndim);
    gin[0] = em_cat(c, parts, n->n_out, dim);
    return c->err.status;
}

static em_status g_cat(GRAD_ARGS) {
    int dim = norm_dim(c, em_grad_attr(n, "dim")->i, n->out[0]->ndim);
    int64_t at = 0;
    for (int i = 0; i < n->n_in; i++) {
        em_tensor *x = X(i);
        if (x->ndim == 1 && x->numel == 0 && n->out[0]->ndim != 1) continue; /* skipped by cat */
        int64_t len = x->shape[dim];
        if (need[i]) gin[i] = em_slice(c, G, dim, at, at + len, 1);
        at += len;
    }
    return c->err.status;
}

static em_status g_stack(GRAD_ARGS) {
    int dim = norm_dim(c, em_grad_attr(n, "dim")->i, n->out[0]->ndim);
    for (int i = 0; i < n->n_in; i++)
        if (need[i]) gin[i] = em_squeeze(c, em_slice(c, G, dim, i, i + 1, 1), dim);
    return c->err.status;
}

static em_status g_gather(GRAD_ARGS) {
    (void)need;
    int dim = (int)em_grad_attr(n, "dim")->i;
    gin[0] = em_scatter_add(c, em_grad_zeros_like(c, X(0)), dim, X(1), G);
    return c->err.status;
}

static em_status g_index_select(GRAD_ARGS) {
    (void)need;
    int dim = (int)em_grad_attr(n, "dim")->i;
    gin[0] = em_index_add(c, em_grad_zeros_like(c, X(0)), dim, X(1), G, 1.0);
    return c->err.status;
}

static em_status g_scatter_add(GRAD_ARGS) { /* x passes g; src gets g where it was added */
    int dim = (int)em_grad_attr(n, "dim")->i;
    if (need[0]) gin[0] = G;
    if (need[2]) gin[2] = em_gather(c, G, dim, X(1));
    return c->err.status;
}

static em_status g_index_add(GRAD_ARGS) {
    int dim = (int)em_grad_attr(n, "dim")->i;
    if (need[0]) gin[0] = G;
    if (need[2])
        gin[2] = em_mul_scalar(c, em_index_select(c, G, dim, X(1)), em_grad_attr(n, "alpha")->f);
    return c->err.status;
}

/* topk and sort: the values' gradient goes back to where they came from (output 1: indices) */
static em_status g_select_values(GRAD_ARGS) {
    int dim = (int)em_grad_attr(n, "dim")->i;
    gin[0] = G ? em_scatter_add(c, em_grad_zeros_like(c, X(0)), dim, n->out[1], G) : NULL;
    return c->err.status;
}

/* repeat_interleave: the copies of each slice summed back */
static em_status g_repeat_interleave(GRAD_ARGS) {
    const em_tensor *x = X(0);
    int dim = norm_dim(c, em_grad_attr(n, "dim")->i, x->ndim);
    int64_t r = em_grad_attr(n, "repeats")->i, s[EM_MAX_DIMS];
    if (x->ndim + 1 > EM_MAX_DIMS)
        return em_ctx_fail(c, EM_ERR_UNSUPPORTED, "backward", "repeat_interleave: too many dims");
    int k = 0;
    for (int d = 0; d < x->ndim; d++) {
        s[k++] = x->shape[d];
        if (d == dim) s[k++] = r;
    }
    int sd = dim + 1;
    gin[0] = em_sum(c, em_reshape(c, G, k, s), &sd, 1, false);
    return c->err.status;
}

static em_status g_embedding(GRAD_ARGS) { /* rows of g added at their ids */
    (void)need;
    em_tensor *w = X(0);
    int64_t flat = -1, rows[2] = {-1, w->shape[1]};
    em_tensor *ids = em_reshape(c, X(1), 1, &flat);
    /* into an expanded zero, not a zeros tensor: index_add writes its whole result anyway, so
     * a [vocab, hidden] buffer of zeros would only be made to be copied (an LM-sized table:
     * 600 MB written twice per step for nothing) */
    em_tensor *zero = em_expand(c, em_scalar(c, 0, w->dtype), w->ndim, w->shape);
    gin[0] = em_index_add(c, zero, 0, ids, em_reshape(c, G, 2, rows), 1.0);
    return c->err.status;
}

void em_grad_rules_shape(em_grad_rule *t) {
    GRAD_RULE(RESHAPE, g_reshape, 0, 0);
    GRAD_RULE(VIEW, g_reshape, 0, 0);
    GRAD_RULE(SQUEEZE, g_reshape, 0, 0);
    GRAD_RULE(UNSQUEEZE, g_reshape, 0, 0);
    GRAD_RULE(EXPAND, g_expand, 0, 0);
    GRAD_RULE(PERMUTE, g_permute, 0, 0);
    GRAD_RULE(TRANSPOSE, g_transpose, 0, 0);
    GRAD_RULE(SLICE, g_slice, 0, 0);
    GRAD_RULE(SPLIT, g_split, 0, 0);
    GRAD_RULE(CAT, g_cat, 0, 0);
    GRAD_RULE(STACK, g_stack, 0, 0);
    GRAD_RULE(GATHER, g_gather, 2, 0);
    GRAD_RULE(INDEX_SELECT, g_index_select, 2, 0);
    GRAD_RULE(EMBEDDING, g_embedding, 2, 0);
    GRAD_RULE(SCATTER_ADD, g_scatter_add, 2, 0);
    GRAD_RULE(INDEX_ADD, g_index_add, 2, 0);
    GRAD_RULE(TOPK, g_select_values, 0, 2);
    GRAD_RULE(SORT, g_select_values, 0, 2);
    GRAD_RULE(REPEAT_INTERLEAVE, g_repeat_interleave, 0, 0);
}

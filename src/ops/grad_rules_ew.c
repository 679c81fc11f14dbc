/*
 * Backward rules of the element-wise ops, the reductions, softmax and cast. Binary ops broadcast,
 * so each input's gradient is summed back to its shape (em_grad_reduce_to). Formulas are torch's
 * (tools/autograd/derivatives.yaml), written with the eager ops.
 */
#include <math.h>

#include "core/rules.h"
#include "ember/ops.h"
#include "ops/grad_rules.h"

#define X(i) (n->in[i])
#define Y (n->out[0])
#define G (gout[0])

static em_tensor *zero_as(em_ctx *c, const em_tensor *t) { return em_scalar(c, 0.0, t->dtype); }

/* ---- unary ---- */

static em_status g_identity(GRAD_ARGS) {
    (void)need;
    gin[0] = G;
    (void)n;
    return c->err.status;
}

static em_status g_neg(GRAD_ARGS) {
    (void)n, (void)need;
    gin[0] = em_neg(c, G);
    return c->err.status;
}

static em_status g_cast(GRAD_ARGS) {
    (void)need;
    gin[0] = em_cast(c, G, X(0)->dtype);
    return c->err.status;
}

static em_status g_abs(GRAD_ARGS) {
    (void)need;
    em_tensor *z = zero_as(c, X(0));
    em_tensor *pos = em_where(c, em_gt(c, X(0), z), G, em_neg(c, G));
    gin[0] = em_where(c, em_eq(c, X(0), z), zero_as(c, G), pos);
    return c->err.status;
}

static em_status g_exp(GRAD_ARGS) {
    (void)need;
    gin[0] = em_mul(c, G, Y);
    return c->err.status;
}

static em_status g_log(GRAD_ARGS) {
    (void)need;
    gin[0] = em_div(c, G, X(0));
    return c->err.status;
}

static em_status g_sqrt(GRAD_ARGS) { /* g / (2 y) */
    (void)need;
    gin[0] = em_div(c, G, em_mul_scalar(c, Y, 2.0));
    return c->err.status;
}

static em_status g_rsqrt(GRAD_ARGS) { /* -0.5 g y^3 */
    (void)need;
    em_tensor *y3 = em_mul(c, em_mul(c, Y, Y), Y);
    gin[0] = em_mul(c, em_mul_scalar(c, G, -0.5), y3);
    return c->err.status;
}

static em_status g_sin(GRAD_ARGS) {
    (void)need;
    gin[0] = em_mul(c, G, em_cos(c, X(0)));
    return c->err.status;
}

static em_status g_cos(GRAD_ARGS) {
    (void)need;
    gin[0] = em_neg(c, em_mul(c, G, em_sin(c, X(0))));
    return c->err.status;
}

static em_status g_tanh(GRAD_ARGS) { /* g (1 - y^2) */
    (void)need;
    em_tensor *d = em_add_scalar(c, em_neg(c, em_mul(c, Y, Y)), 1.0);
    gin[0] = em_mul(c, G, d);
    return c->err.status;
}

static em_status g_sigmoid(GRAD_ARGS) { /* g y (1 - y) */
    (void)need;
    em_tensor *d = em_mul(c, Y, em_add_scalar(c, em_neg(c, Y), 1.0));
    gin[0] = em_mul(c, G, d);
    return c->err.status;
}

static em_status g_silu(GRAD_ARGS) { /* g s (1 + x (1 - s)), s = sigmoid(x) */
    (void)need;
    em_tensor *s = em_sigmoid(c, X(0));
    em_tensor *d = em_add_scalar(c, em_mul(c, X(0), em_add_scalar(c, em_neg(c, s), 1.0)), 1.0);
    gin[0] = em_mul(c, G, em_mul(c, s, d));
    return c->err.status;
}

static em_status g_gelu(GRAD_ARGS) {
    (void)need;
    em_tensor *x = X(0), *d;
    if (em_grad_attr(n, "approximate")->i) {
        /* y = 0.5 x (1 + t), t = tanh(k (x + a x^3)) */
        const double k = sqrt(2.0 / M_PI), a = 0.044715;
        em_tensor *x2 = em_mul(c, x, x);
        em_tensor *inner = em_mul_scalar(c, em_add(c, x, em_mul_scalar(c, em_mul(c, x2, x), a)), k);
        em_tensor *t = em_tanh(c, inner);
        em_tensor *left = em_mul_scalar(c, em_add_scalar(c, t, 1.0), 0.5);
        em_tensor *sech2 = em_add_scalar(c, em_neg(c, em_mul(c, t, t)), 1.0);
        em_tensor *dinner = em_mul_scalar(c, em_add_scalar(c, em_mul_scalar(c, x2, 3 * a), 1.0), k);
        d = em_add(c, left, em_mul(c, em_mul_scalar(c, x, 0.5), em_mul(c, sech2, dinner)));
    } else {
        /* y = x Phi(x): dy = Phi(x) + x phi(x). Phi is y / x (the forward's own erf; exact to
         * an ulp), 1/2 at 0 */
        em_tensor *z = zero_as(c, x);
        em_tensor *safe = em_where(c, em_eq(c, x, z), em_scalar(c, 1.0, x->dtype), x);
        em_tensor *cdf = em_where(c, em_eq(c, x, z), em_scalar(c, 0.5, x->dtype),
                                  em_div(c, Y, safe));
        em_tensor *pdf = em_mul_scalar(c, em_exp(c, em_mul_scalar(c, em_mul(c, x, x), -0.5)),
                                       1.0 / sqrt(2.0 * M_PI));
        d = em_add(c, cdf, em_mul(c, x, pdf));
    }
    gin[0] = em_mul(c, G, d);
    return c->err.status;
}

static em_status g_relu(GRAD_ARGS) {
    (void)need;
    gin[0] = em_where(c, em_gt(c, X(0), zero_as(c, X(0))), G, zero_as(c, G));
    return c->err.status;
}

static em_status g_clamp(GRAD_ARGS) { /* passes where min <= x <= max, as torch */
    (void)need;
    em_tensor *x = X(0), *g = G;
    if (em_grad_attr(n, "has_min")->i)
        g = em_where(c, em_ge(c, x, em_scalar(c, em_grad_attr(n, "min")->f, x->dtype)), g,
                     zero_as(c, G));
    if (em_grad_attr(n, "has_max")->i)
        g = em_where(c, em_le(c, x, em_scalar(c, em_grad_attr(n, "max")->f, x->dtype)), g,
                     zero_as(c, G));
    gin[0] = g;
    return c->err.status;
}

/* ---- binary ---- */

static em_status g_add(GRAD_ARGS) {
    for (int i = 0; i < 2; i++)
        if (need[i]) gin[i] = em_grad_reduce_to(c, G, X(i));
    return c->err.status;
}

static em_status g_sub(GRAD_ARGS) {
    if (need[0]) gin[0] = em_grad_reduce_to(c, G, X(0));
    if (need[1]) gin[1] = em_grad_reduce_to(c, em_neg(c, G), X(1));
    return c->err.status;
}

static em_status g_mul(GRAD_ARGS) {
    if (need[0]) gin[0] = em_grad_reduce_to(c, em_mul(c, G, X(1)), X(0));
    if (need[1]) gin[1] = em_grad_reduce_to(c, em_mul(c, G, X(0)), X(1));
    return c->err.status;
}

static em_status g_div(GRAD_ARGS) { /* a / b: g / b, -g a / b^2 */
    em_tensor *gb = em_div(c, G, X(1));
    if (need[0]) gin[0] = em_grad_reduce_to(c, gb, X(0));
    if (need[1]) gin[1] = em_grad_reduce_to(c, em_neg(c, em_mul(c, gb, em_div(c, X(0), X(1)))),
                                            X(1));
    return c->err.status;
}

static em_status g_pow(GRAD_ARGS) { /* a^b: g b a^(b-1); g a^b log a (0 where a == 0) */
    em_tensor *a = X(0), *b = X(1);
    if (need[0]) {
        em_tensor *d = em_mul(c, b, em_pow(c, a, em_add_scalar(c, b, -1.0)));
        gin[0] = em_grad_reduce_to(c, em_mul(c, G, d), a);
    }
    if (need[1]) {
        em_tensor *z = zero_as(c, a);
        em_tensor *d = em_mul(c, Y, em_log(c, em_where(c, em_eq(c, a, z),
                                                       em_scalar(c, 1.0, a->dtype), a)));
        gin[1] = em_grad_reduce_to(c, em_mul(c, G, d), b);
    }
    return c->err.status;
}

static em_status g_where(GRAD_ARGS) {
    em_tensor *z = zero_as(c, G);
    if (need[1]) gin[1] = em_grad_reduce_to(c, em_where(c, X(0), G, z), X(1));
    if (need[2]) gin[2] = em_grad_reduce_to(c, em_where(c, X(0), z, G), X(2));
    return c->err.status;
}

/* maximum / minimum: the gradient goes to the larger (smaller) input, half to each on a tie, as
 * torch */
static em_status g_extremum(GRAD_ARGS) {
    bool mx = n->op->id == EM_OP_MAXIMUM;
    em_tensor *a = X(0), *b = X(1), *z = zero_as(c, G);
    em_tensor *half = em_mul_scalar(c, G, 0.5);
    em_tensor *tie = em_eq(c, a, b);
    em_tensor *a_wins = mx ? em_gt(c, a, b) : em_lt(c, a, b);
    em_tensor *b_wins = mx ? em_lt(c, a, b) : em_gt(c, a, b);
    if (need[0]) gin[0] = em_grad_reduce_to(c, em_where(c, a_wins, G, em_where(c, tie, half, z)), a);
    if (need[1]) gin[1] = em_grad_reduce_to(c, em_where(c, b_wins, G, em_where(c, tie, half, z)), b);
    return c->err.status;
}

/* ---- reductions ---- */

/* g of a sum/mean over `dims` broadcast back to x's shape; *count = elements summed per output */
static em_tensor *unreduce(em_ctx *c, const em_grad_node *n, em_tensor *g, int64_t *count) {
    em_tensor *x = X(0);
    bool red[EM_MAX_DIMS];
    if (!em_rule_reduce_dims(c, x, em_grad_attr(n, "dims"), red)) return NULL;
    int64_t keep[EM_MAX_DIMS];
    *count = 1;
    for (int d = 0; d < x->ndim; d++) {
        keep[d] = red[d] ? 1 : x->shape[d];
        if (red[d]) *count *= x->shape[d];
    }
    g = em_reshape(c, g, x->ndim, keep);
    return em_expand(c, g, x->ndim, x->shape);
}

static em_status g_sum(GRAD_ARGS) {
    (void)need;
    int64_t count;
    gin[0] = unreduce(c, n, G, &count);
    return c->err.status;
}

static em_status g_mean(GRAD_ARGS) {
    (void)need;
    int64_t count;
    em_tensor *g = unreduce(c, n, G, &count);
    gin[0] = em_div_scalar(c, g, (double)count);
    return c->err.status;
}

/* max / min over dims: shared evenly among the elements equal to the result (torch's amax) */
static em_status g_max(GRAD_ARGS) {
    int64_t count;
    em_tensor *y = unreduce(c, n, Y, &count), *g = unreduce(c, n, G, &count);
    em_tensor *hit = em_cast(c, em_eq(c, X(0), y), G->dtype);
    const em_attr *dims = em_grad_attr(n, "dims");
    int d[EM_MAX_DIMS], nd = 0;
    for (int i = 0; i < dims->n; i++) d[nd++] = (int)dims->v[i];
    em_tensor *ties = em_sum(c, hit, nd ? d : NULL, nd, true);
    gin[0] = em_div(c, em_mul(c, g, hit), ties);
    return c->err.status;
}

/* var with correction k: 2 (x - mean) / (N - k) */
static em_status g_var(GRAD_ARGS) {
    int64_t count;
    em_tensor *g = unreduce(c, n, G, &count);
    const em_attr *dims = em_grad_attr(n, "dims");
    int d[EM_MAX_DIMS], nd = 0;
    for (int i = 0; i < dims->n; i++) d[nd++] = (int)dims->v[i];
    em_tensor *xc = em_sub(c, X(0), em_mean(c, X(0), nd ? d : NULL, nd, true));
    double dof = (double)count - (double)em_grad_attr(n, "correction")->i;
    gin[0] = em_mul(c, g, em_mul_scalar(c, xc, 2.0 / dof));
    return c->err.status;
}

static em_status g_softmax(GRAD_ARGS) { /* y (g - sum(g y)) */
    (void)need;
    int dim = (int)em_grad_attr(n, "dim")->i;
    em_tensor *s = em_sum(c, em_mul(c, G, Y), &dim, 1, true);
    gin[0] = em_mul(c, Y, em_sub(c, G, s));
    return c->err.status;
}

static em_status g_log_softmax(GRAD_ARGS) { /* g - exp(y) sum(g) */
    (void)need;
    int dim = (int)em_grad_attr(n, "dim")->i;
    em_tensor *s = em_sum(c, G, &dim, 1, true);
    gin[0] = em_sub(c, G, em_mul(c, em_exp(c, Y), s));
    return c->err.status;
}

void em_grad_rules_ew(em_grad_rule *t) {
    GRAD_RULE(CONTIGUOUS, g_identity, 0, 0);
    GRAD_RULE(CAST, g_cast, 0, 0);
    GRAD_RULE(NEG, g_neg, 0, 0);
    GRAD_RULE(ABS, g_abs, 1, 0);
    GRAD_RULE(EXP, g_exp, 0, 1);
    GRAD_RULE(LOG, g_log, 1, 0);
    GRAD_RULE(SQRT, g_sqrt, 0, 1);
    GRAD_RULE(RSQRT, g_rsqrt, 0, 1);
    GRAD_RULE(SIN, g_sin, 1, 0);
    GRAD_RULE(COS, g_cos, 1, 0);
    GRAD_RULE(TANH, g_tanh, 0, 1);
    GRAD_RULE(SIGMOID, g_sigmoid, 0, 1);
    GRAD_RULE(SILU, g_silu, 1, 0);
    GRAD_RULE(GELU, g_gelu, 1, 1);
    GRAD_RULE(RELU, g_relu, 1, 0);
    GRAD_RULE(CLAMP, g_clamp, 1, 0);
    GRAD_RULE(ADD, g_add, 0, 0);
    GRAD_RULE(SUB, g_sub, 0, 0);
    GRAD_RULE(MUL, g_mul, 3, 0);
    GRAD_RULE(DIV, g_div, 3, 0);
    GRAD_RULE(POW, g_pow, 3, 1);
    GRAD_RULE(WHERE, g_where, 1, 0);
    GRAD_RULE(MAXIMUM, g_extremum, 3, 0);
    GRAD_RULE(MINIMUM, g_extremum, 3, 0);
    GRAD_RULE(MAX, g_max, 1, 1);
    GRAD_RULE(MIN, g_max, 1, 1);
    GRAD_RULE(VAR, g_var, 1, 0);
    GRAD_RULE(SUM, g_sum, 0, 0);
    GRAD_RULE(MEAN, g_mean, 0, 0);
    GRAD_RULE(SOFTMAX, g_softmax, 0, 1);
    GRAD_RULE(LOG_SOFTMAX, g_log_softmax, 0, 1);
}

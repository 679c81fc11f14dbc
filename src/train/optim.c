/*
 * AdamW and SGD (ember/optim.h), written with the eager ops so they run on the parameters'
 * devices. The arithmetic follows torch's single-tensor implementations step for step
 * (torch/optim/adamw.py, sgd.py), so f32 results round as torch's do.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor_impl.h" /* em_tensor_materialize */
#include "ember/autograd.h"
#include "ember/ops.h"
#include "ember/optim.h"
#include "train/optim_impl.h"

typedef enum { OPT_ADAMW, OPT_SGD } opt_kind;

struct em_optimizer {
    opt_kind kind;
    em_adamw_options adamw;
    em_sgd_options sgd;
    double lr;
    int64_t steps;
    int n;
    em_tensor **params;
    em_tensor **m, **v; /* AdamW moments / SGD momentum buffer (m), NULL until first used */
    int64_t *param_steps; /* AdamW: per-parameter step counts (skipped parameters lag) */
};

em_adamw_options em_adamw_default_options(void) {
    return (em_adamw_options){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                              .weight_decay = 1e-2};
}

em_sgd_options em_sgd_default_options(void) {
    return (em_sgd_options){.lr = 1e-3};
}

static em_optimizer *create(em_ctx *c, const char *what, em_tensor *const *params, int n,
                            opt_kind kind, double lr) {
    if (!c || em_ctx_status(c)) return NULL;
    if (n < 0 || (n && !params)) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, what, "%d parameters", n);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!params[i] || !em_dtype_is_float(em_tensor_dtype(params[i]))) {
            char sig[96] = "NULL";
            if (params[i]) em_tensor_sig(params[i], sig, sizeof sig);
            em_ctx_fail(c, EM_ERR_INVALID_ARG, what, "parameter %d is %s: floating tensors only",
                        i, sig);
            return NULL;
        }
    em_optimizer *o = calloc(1, sizeof *o);
    size_t k = (size_t)(n ? n : 1);
    if (o) {
        o->params = calloc(k, sizeof *o->params);
        o->m = calloc(k, sizeof *o->m);
        o->v = calloc(k, sizeof *o->v);
        o->param_steps = calloc(k, sizeof *o->param_steps);
    }
    if (!o || !o->params || !o->m || !o->v || !o->param_steps) {
        em_optimizer_free(o);
        em_ctx_fail(c, EM_ERR_OOM, what, "out of memory");
        return NULL;
    }
    o->n = n;
    o->kind = kind;
    o->lr = lr;
    for (int i = 0; i < n; i++) o->params[i] = em_tensor_retain(params[i]);
    return o;
}

em_optimizer *em_adamw_create(em_ctx *c, em_tensor *const *params, int n,
                              const em_adamw_options *opt) {
    em_adamw_options a = opt ? *opt : em_adamw_default_options();
    if (c && !em_ctx_status(c) &&
        (!(a.lr >= 0) || !(a.eps >= 0) || !(a.beta1 >= 0 && a.beta1 < 1) ||
         !(a.beta2 >= 0 && a.beta2 < 1) || !(a.weight_decay >= 0))) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "adamw",
                    "invalid options: lr %g, betas (%g, %g), eps %g, weight_decay %g (lr, eps, "
                    "weight_decay >= 0 and betas in [0, 1) expected)",
                    a.lr, a.beta1, a.beta2, a.eps, a.weight_decay);
        return NULL;
    }
    em_optimizer *o = create(c, "adamw", params, n, OPT_ADAMW, a.lr);
    if (o) o->adamw = a;
    return o;
}

em_optimizer *em_sgd_create(em_ctx *c, em_tensor *const *params, int n, const em_sgd_options *opt) {
    em_sgd_options s = opt ? *opt : em_sgd_default_options();
    if (c && !em_ctx_status(c) &&
        (!(s.lr >= 0) || !(s.momentum >= 0) || !(s.weight_decay >= 0) ||
         (s.nesterov && (s.momentum <= 0 || s.dampening != 0)))) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "sgd",
                    "invalid options: lr %g, momentum %g, dampening %g, weight_decay %g, "
                    "nesterov %d (nesterov needs momentum > 0 and zero dampening)",
                    s.lr, s.momentum, s.dampening, s.weight_decay, (int)s.nesterov);
        return NULL;
    }
    em_optimizer *o = create(c, "sgd", params, n, OPT_SGD, s.lr);
    if (o) o->sgd = s;
    return o;
}

/* A new tensor owned by the optimizer: t's values (a copy), on t's device. */
em_tensor *em_train_snapshot(em_ctx *c, em_tensor *t) {
    em_tensor *cp = em_mul_scalar(c, t, 1.0); /* a new tensor: an element-wise op's result */
    if (cp && em_tensor_materialize(c, cp) != EM_OK) return NULL;
    return cp ? em_detach(c, cp) : NULL;
}

static em_tensor *own_zeros(em_ctx *c, em_tensor *t) {
    em_device *prev = em_ctx_device(c);
    em_ctx_set_device(c, em_tensor_device(t));
    em_tensor *z = em_zeros(c, em_tensor_dtype(t), em_tensor_ndim(t), em_tensor_shape(t));
    em_ctx_set_device(c, prev);
    return z ? em_detach(c, z) : NULL;
}

/* The per-step numbers of an AdamW update as 0-d f32 tensors of the parameters' device: made
 * from host doubles for an eager step, or a compiled step's inputs (so a new step or learning
 * rate never bakes a constant into the program). */
typedef struct adamw_k {
    em_tensor *decay, *sqrt_bc2, *neg_step; /* 1 - lr wd, sqrt(bc2), -lr / bc1 */
} adamw_k;

/* torch's _single_tensor_adamw for one parameter: one adamw_step call (where it runs as
 * element-wise ops, ops/decomp.c bounds their temporaries by going slab by slab of rows) */
static void adamw_apply(em_ctx *c, const em_adamw_options *a, const adamw_k *k, em_tensor *p,
                        em_tensor *g, em_tensor *m, em_tensor *v) {
    em_adamw_step(c, p, em_contiguous(c, g), m, v, k->decay, k->sqrt_bc2, k->neg_step, a->beta1,
                  a->beta2, a->eps);
}

static void adamw_numbers(const em_adamw_options *a, double lr, int64_t step, double out[3]) {
    double bc1 = 1.0 - pow(a->beta1, (double)step), bc2 = 1.0 - pow(a->beta2, (double)step);
    out[0] = 1.0 - lr * a->weight_decay;
    out[1] = sqrt(bc2);
    out[2] = -(lr / bc1);
}

static void adamw_one(em_ctx *c, em_optimizer *o, int i, em_tensor *p, em_tensor *g) {
    if (!o->m[i]) o->m[i] = own_zeros(c, p);
    if (!o->v[i]) o->v[i] = own_zeros(c, p);
    if (!o->m[i] || !o->v[i]) return;
    double x[3];
    adamw_numbers(&o->adamw, o->lr, ++o->param_steps[i], x);
    em_device *prev = em_ctx_device(c);
    em_ctx_set_device(c, em_tensor_device(p));
    adamw_k k = {em_scalar(c, x[0], EM_F32), em_scalar(c, x[1], EM_F32),
                 em_scalar(c, x[2], EM_F32)};
    em_ctx_set_device(c, prev);
    adamw_apply(c, &o->adamw, &k, p, g, o->m[i], o->v[i]);
}

/* torch's _single_tensor_sgd for one parameter */
static void sgd_one(em_ctx *c, em_optimizer *o, int i, em_tensor *p, em_tensor *g) {
    const em_sgd_options *s = &o->sgd;
    em_tensor *d = g;
    if (s->weight_decay != 0) d = em_add(c, d, em_mul_scalar(c, p, s->weight_decay));
    if (s->momentum != 0) {
        if (!o->m[i]) {
            o->m[i] = em_train_snapshot(c, d);
        } else {
            em_tensor *b = o->m[i];
            em_assign(c, b, em_add(c, em_mul_scalar(c, b, s->momentum),
                                   em_mul_scalar(c, d, 1.0 - s->dampening)));
        }
        if (!o->m[i]) return;
        d = s->nesterov ? em_add(c, d, em_mul_scalar(c, o->m[i], s->momentum)) : o->m[i];
    }
    em_assign(c, p, em_add(c, p, em_mul_scalar(c, d, -o->lr)));
}

em_status em_optimizer_step(em_ctx *c, em_optimizer *o) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!o) return em_ctx_fail(c, EM_ERR_INVALID_ARG, "optimizer_step", "the optimizer is NULL");
    bool grad_on = em_grad_enable(c, false); /* the update is not part of any graph */
    for (int i = 0; i < o->n && !em_ctx_status(c); i++) {
        em_tensor *p = o->params[i], *g = em_tensor_grad(p);
        if (!g) continue;
        if (em_scope_push(c) < 0) break;
        if (o->kind == OPT_ADAMW) adamw_one(c, o, i, p, g);
        else sgd_one(c, o, i, p, g);
        em_scope_pop(c);
        if (em_ctx_status(c) && em_ctx_error(c))
            em_ctx_fail(c, em_ctx_status(c), "optimizer_step", "parameter %d", i);
    }
    em_grad_enable(c, grad_on);
    if (!em_ctx_status(c)) o->steps++;
    return em_ctx_status(c);
}

/* ---- compile mode (train/optim_impl.h) ---- */

em_status em_adamw_prepare_traced(em_ctx *c, em_optimizer *o, int64_t *step) {
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!o || o->kind != OPT_ADAMW)
        return em_ctx_fail(c, EM_ERR_UNSUPPORTED, "adamw_compiled",
                           "a compiled step runs AdamW only");
    bool grad_on = em_grad_enable(c, false);
    for (int i = 0; i < o->n && !em_ctx_status(c); i++) {
        if (o->param_steps[i] != o->param_steps[0])
            em_ctx_fail(c, EM_ERR_UNSUPPORTED, "adamw_compiled",
                        "parameter %d has taken %lld steps, parameter 0 %lld: a compiled step "
                        "updates every parameter every step (train eagerly)", i,
                        (long long)o->param_steps[i], (long long)o->param_steps[0]);
        if (!o->m[i]) o->m[i] = own_zeros(c, o->params[i]);
        if (!o->v[i] && o->m[i]) o->v[i] = own_zeros(c, o->params[i]);
    }
    em_grad_enable(c, grad_on);
    if (step) *step = o->n ? o->param_steps[0] : 0;
    return em_ctx_status(c);
}

void em_adamw_step_numbers(const em_optimizer *o, double lr, int64_t step, double out[3]) {
    adamw_numbers(&o->adamw, lr, step, out);
}

em_status em_adamw_update_traced(em_ctx *c, em_optimizer *o, em_tensor *const *grads,
                                 em_tensor *decay, em_tensor *sqrt_bc2, em_tensor *neg_step) {
    if (em_ctx_status(c)) return em_ctx_status(c);
    adamw_k k = {decay, sqrt_bc2, neg_step};
    bool grad_on = em_grad_enable(c, false);
    for (int i = 0; i < o->n && !em_ctx_status(c); i++) {
        if (em_scope_push(c) < 0) break;
        adamw_apply(c, &o->adamw, &k, o->params[i], grads[i], o->m[i], o->v[i]);
        em_scope_pop(c);
        if (em_ctx_status(c) && em_ctx_error(c))
            em_ctx_fail(c, em_ctx_status(c), "adamw_compiled", "parameter %d", i);
    }
    em_grad_enable(c, grad_on);
    return em_ctx_status(c);
}

void em_adamw_advance(em_optimizer *o) {
    if (!o) return;
    for (int i = 0; i < o->n; i++) o->param_steps[i]++;
    o->steps++;
}

void em_optimizer_zero_grad(em_optimizer *o) {
    for (int i = 0; o && i < o->n; i++) em_tensor_zero_grad(o->params[i]);
}

double em_optimizer_lr(const em_optimizer *o) { return o ? o->lr : 0; }
void em_optimizer_set_lr(em_optimizer *o, double lr) {
    if (o) o->lr = lr;
}
int64_t em_optimizer_steps(const em_optimizer *o) { return o ? o->steps : 0; }

em_status em_optimizer_state(const em_optimizer *o, int i, em_tensor **m, em_tensor **v,
                             int64_t *step) {
    if (!o || i < 0 || i >= o->n) return EM_ERR_INVALID_ARG;
    if (m) *m = o->m[i];
    if (v) *v = o->v[i];
    if (step) *step = o->param_steps[i];
    return EM_OK;
}

/* A copy of x owned by the optimizer, in p's dtype on p's device (NULL passes through). */
static em_tensor *state_copy(em_ctx *c, em_tensor *p, em_tensor *x, int i) {
    if (!x) return NULL;
    int nd = em_tensor_ndim(p);
    if (em_tensor_ndim(x) != nd ||
        memcmp(em_tensor_shape(x), em_tensor_shape(p), sizeof(int64_t) * (size_t)nd)) {
        char a[96], b[96];
        em_ctx_fail(c, EM_ERR_SHAPE, "optimizer_set_state", "parameter %d is %s, its state %s", i,
                    em_tensor_sig(p, a, sizeof a), em_tensor_sig(x, b, sizeof b));
        return NULL;
    }
    em_scope_push(c);
    em_device *d = em_tensor_device(p);
    em_tensor *y = em_tensor_device(x) == d ? x : em_to(c, x, d);
    y = em_cast(c, y, em_tensor_dtype(p));
    y = y ? em_train_snapshot(c, y) : NULL;
    em_scope_pop(c);
    return y;
}

em_status em_optimizer_set_state(em_ctx *c, em_optimizer *o, int i, em_tensor *m, em_tensor *v,
                                 int64_t step) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!o || i < 0 || i >= o->n || step < 0)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, "optimizer_set_state",
                           "parameter %d of %d, step %lld", i, o ? o->n : 0, (long long)step);
    bool grad_on = em_grad_enable(c, false);
    em_tensor *mc = state_copy(c, o->params[i], m, i);
    em_tensor *vc = em_ctx_status(c) ? NULL : state_copy(c, o->params[i], v, i);
    em_grad_enable(c, grad_on);
    if (em_ctx_status(c)) {
        em_tensor_release(mc);
        em_tensor_release(vc);
        return em_ctx_status(c);
    }
    em_tensor_release(o->m[i]);
    em_tensor_release(o->v[i]);
    o->m[i] = mc;
    o->v[i] = vc;
    o->param_steps[i] = step;
    return EM_OK;
}

void em_optimizer_set_steps(em_optimizer *o, int64_t steps) {
    if (o && steps >= 0) o->steps = steps;
}

void em_optimizer_free(em_optimizer *o) {
    if (!o) return;
    for (int i = 0; i < o->n; i++) {
        if (o->params) em_tensor_release(o->params[i]);
        if (o->m) em_tensor_release(o->m[i]);
        if (o->v) em_tensor_release(o->v[i]);
    }
    free(o->params);
    free(o->m);
    free(o->v);
    free(o->param_steps);
    free(o);
}

/* diffusers' EMAModel (ember/ema.h): shadows updated in place after each optimizer step. */
#include "ember/ema.h"

#include <math.h>
#include <stdlib.h>

#include "ember/autograd.h"
#include "ember/ops.h"
#include "train/optim_impl.h" /* em_train_snapshot */

#define OP "ema"

struct em_ema {
    em_tensor **params, **shadow;
    int n;
    em_ema_options o;
    int64_t step;
    double cur_decay;
};

em_ema_options em_ema_default_options(void) {
    return (em_ema_options){.decay = 0.9999, .min_decay = 0.0, .update_after_step = 0,
                            .use_ema_warmup = false, .inv_gamma = 1.0, .power = 2.0 / 3.0};
}

void em_ema_free(em_ema *e) {
    if (!e) return;
    for (int i = 0; e->shadow && i < e->n; i++) em_tensor_release(e->shadow[i]);
    free(e->shadow);
    free(e->params);
    free(e);
}

em_ema *em_ema_create(em_ctx *c, em_tensor *const *params, int n, const em_ema_options *o) {
    if (!c || em_ctx_status(c)) return NULL;
    em_ema_options eo = o ? *o : em_ema_default_options();
    if (!params || n < 1) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "no parameters to average");
        return NULL;
    }
    if (!(eo.decay >= 0 && eo.decay <= 1 && eo.min_decay >= 0 && eo.min_decay <= eo.decay) ||
        !(eo.inv_gamma > 0) || !(eo.power > 0) || eo.update_after_step < 0) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP,
                    "decay %g, min_decay %g, inv_gamma %g, power %g, update_after_step %lld: "
                    "need 0 <= min_decay <= decay <= 1, inv_gamma > 0, power > 0, "
                    "update_after_step >= 0", eo.decay, eo.min_decay, eo.inv_gamma, eo.power,
                    (long long)eo.update_after_step);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!params[i] || !em_dtype_is_float(em_tensor_dtype(params[i]))) {
            em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "parameter %d is %s", i,
                        params[i] ? "not a floating tensor" : "NULL");
            return NULL;
        }
    em_ema *e = calloc(1, sizeof *e);
    if (e) {
        e->params = malloc((size_t)n * sizeof *e->params);
        e->shadow = calloc((size_t)n, sizeof *e->shadow);
    }
    if (!e || !e->params || !e->shadow) {
        em_ema_free(e);
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    e->n = n;
    e->o = eo;
    em_scope_push(c);
    for (int i = 0; i < n && !em_ctx_status(c); i++) {
        e->params[i] = params[i];
        e->shadow[i] = em_train_snapshot(c, params[i]);
    }
    em_scope_pop(c);
    if (em_ctx_status(c)) {
        em_ema_free(e);
        return NULL;
    }
    return e;
}

/* EMAModel.get_decay(optimization_step) */
static double get_decay(const em_ema_options *o, int64_t optimization_step) {
    int64_t s = optimization_step - o->update_after_step - 1;
    if (s <= 0) return 0.0;
    double step = (double)s;
    double d = o->use_ema_warmup ? 1.0 - pow(1.0 + step / o->inv_gamma, -o->power)
                                 : (1.0 + step) / (10.0 + step);
    d = fmin(d, o->decay);
    return fmax(d, o->min_decay);
}

em_status em_ema_step(em_ctx *c, em_ema *e) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!e) return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "NULL average");
    double d = get_decay(&e->o, e->step + 1);
    bool grad = em_grad_enable(c, false); /* torch.no_grad */
    em_scope_push(c);
    for (int i = 0; i < e->n && !em_ctx_status(c); i++) {
        em_tensor *s = e->shadow[i];
        em_assign(c, s, em_sub(c, s, em_mul_scalar(c, em_sub(c, s, e->params[i]), 1.0 - d)));
    }
    em_scope_pop(c);
    em_grad_enable(c, grad);
    if (em_ctx_status(c)) return em_ctx_status(c);
    e->step++;
    e->cur_decay = d;
    return EM_OK;
}

double em_ema_decay(const em_ema *e) { return e ? e->cur_decay : 0.0; }
int64_t em_ema_steps(const em_ema *e) { return e ? e->step : 0; }
em_tensor *em_ema_shadow(const em_ema *e, int i) {
    return e && i >= 0 && i < e->n ? e->shadow[i] : NULL;
}

em_status em_ema_copy_to(em_ctx *c, em_ema *e) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!e) return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "NULL average");
    bool grad = em_grad_enable(c, false);
    em_scope_push(c);
    for (int i = 0; i < e->n && !em_ctx_status(c); i++) em_assign(c, e->params[i], e->shadow[i]);
    em_scope_pop(c);
    em_grad_enable(c, grad);
    return em_ctx_status(c);
}

/*
 * An exponential moving average of parameters, diffusers' training_utils.EMAModel: the shadow
 * copies that diffusers' training scripts (train_unconditional.py --use_ema, the text-to-image
 * ones) sample and save instead of the last weights.
 *
 *     em_ema_options o = em_ema_default_options();
 *     o.use_ema_warmup = true;                       // train_unconditional.py's settings
 *     o.power = 0.75;
 *     em_ema *e = em_ema_create(c, params, n, &o);   // shadows = the parameters now
 *     for (...) { ...; em_optimizer_step(c, opt); em_ema_step(c, e); }
 *     em_ema_copy_to(c, e);                          // the averages into the parameters
 *     em_ema_free(e);
 *
 * Errors are recorded in the caller's context (ember/core.h).
 */
#ifndef EMBER_EMA_H
#define EMBER_EMA_H

#include "ember/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_ema em_ema;

/** EMAModel's arguments. */
typedef struct em_ema_options {
    double decay;              /* the largest decay (0.9999) */
    double min_decay;          /* the smallest (0.0) */
    int64_t update_after_step; /* optimizer steps before averaging starts (0) */
    bool use_ema_warmup;       /* decay 1 - (1 + step / inv_gamma)^-power (true); else
                                  (1 + step) / (10 + step) (false, the default) */
    double inv_gamma;          /* (1.0) */
    double power;              /* (2 / 3) */
} em_ema_options;

/** diffusers' EMAModel defaults (above). */
EM_API em_ema_options em_ema_default_options(void);

/**
 * An average of params[0..n) (borrowed: they must outlive it; floating tensors, any device):
 * the shadows start as copies of their values now, in their dtype and on their device. o NULL:
 * the defaults. NULL with the error in c: EM_ERR_INVALID_ARG (no parameters, a NULL one, an
 * integer one, decays outside [0, 1] or min above max, inv_gamma <= 0, power <= 0), EM_ERR_OOM.
 */
EM_API em_ema *em_ema_create(em_ctx *c, em_tensor *const *params, int n, const em_ema_options *o);
/** NULL is a no-op. */
EM_API void em_ema_free(em_ema *e);

/**
 * EMAModel.step after an optimizer step: the step count advances, the decay d is
 * get_decay(step) (0 up to update_after_step + 1 steps, then the warmup or (1 + s) / (10 + s)
 * curve clamped to [min_decay, decay]) and every shadow s becomes s - (1 - d) * (s - p).
 */
EM_API em_status em_ema_step(em_ctx *c, em_ema *e);
/** The decay the last step used (EMAModel.cur_decay_value; 0 before the first). */
EM_API double em_ema_decay(const em_ema *e);
/** Optimizer steps taken (EMAModel.optimization_step). */
EM_API int64_t em_ema_steps(const em_ema *e);
/** The shadow of parameter i (borrowed; NULL out of range). */
EM_API em_tensor *em_ema_shadow(const em_ema *e, int i);
/** EMAModel.copy_to: every parameter takes its shadow's values (in place). */
EM_API em_status em_ema_copy_to(em_ctx *c, em_ema *e);

#ifdef __cplusplus
}
#endif
#endif

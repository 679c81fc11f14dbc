/* Gradient clipping and learning-rate schedules (ember/optim.h). */
#include <math.h>

#include "ember/autograd.h"
#include "ember/ops.h"
#include "ember/optim.h"

em_status em_clip_grad_norm(em_ctx *c, em_tensor *const *params, int n, double max_norm,
                            double *total_norm) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!(max_norm > 0))
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, "clip_grad_norm",
                           "max_norm is %g: a positive number expected", max_norm);
    bool grad_on = em_grad_enable(c, false);
    double sq = 0;
    em_scope_push(c);
    for (int i = 0; i < n && !em_ctx_status(c); i++) {
        em_tensor *g = params && params[i] ? em_tensor_grad(params[i]) : NULL;
        if (!g) continue;
        /* squares in f32 (bf16/f16 widened exactly; f64 stays f64), summed by the reduction's
         * f64 lanes, a slab of rows at a time so no copy of a large gradient (an LM head's:
         * vocab x hidden) is made whole; the slabs' sums are added in double here */
        int64_t rows = em_tensor_ndim(g) ? em_tensor_dim(g, 0) : 1;
        int64_t per_row = rows ? em_tensor_numel(g) / rows : 0;
        int64_t slab = per_row ? ((int64_t)1 << 21) / per_row : rows;
        if (slab < 1) slab = 1;
        for (int64_t r0 = 0; r0 < rows && !em_ctx_status(c); r0 += slab) {
            em_scope_push(c);
            em_tensor *part = em_tensor_ndim(g) ? em_narrow(c, g, 0, r0, r0 + slab < rows ? slab
                                                                                    : rows - r0)
                                                : g;
            em_tensor *x = em_tensor_dtype(part) == EM_F64 || em_tensor_dtype(part) == EM_F32
                               ? part
                               : em_cast(c, part, EM_F32);
            double s = 0;
            if (em_item(c, em_sum(c, em_mul(c, x, x), NULL, 0, false), &s) == EM_OK) sq += s;
            em_scope_pop(c);
        }
    }
    double norm = sqrt(sq);
    if (total_norm) *total_norm = norm;
    double coef = max_norm / (norm + 1e-6);
    /* torch multiplies by min(coef, 1) always; by 1 it changes nothing, so only below */
    for (int i = 0; i < n && coef < 1.0 && !em_ctx_status(c); i++) {
        em_tensor *g = params && params[i] ? em_tensor_grad(params[i]) : NULL;
        if (g) em_assign(c, g, em_mul_scalar(c, g, (double)(float)coef));
    }
    em_scope_pop(c);
    em_grad_enable(c, grad_on);
    return em_ctx_status(c);
}

double em_lr_cosine_with_warmup(int64_t step, int64_t warmup, int64_t total, double num_cycles) {
    if (step < warmup) return (double)step / (double)(warmup > 1 ? warmup : 1);
    double span = (double)(total - warmup > 1 ? total - warmup : 1);
    double progress = (double)(step - warmup) / span;
    double v = 0.5 * (1.0 + cos(M_PI * num_cycles * 2.0 * progress));
    return v > 0 ? v : 0;
}

double em_lr_constant_with_warmup(int64_t step, int64_t warmup) {
    if (step < warmup) return (double)step / (double)(warmup > 1 ? warmup : 1);
    return 1.0;
}

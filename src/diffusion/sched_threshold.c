/*
 * Dynamic thresholding (Imagen; diffusers' _threshold_sample) of a predicted x0 [B, C, ...]:
 * per image, s = the dynamic_thresholding_ratio quantile of |x0| (torch.quantile, linear
 * interpolation, in float32), clamped to [1, sample_max_value]; x0 is clamped to [-s, s] and
 * divided by s. The quantile is taken on the host (one sort per image per step; the sample is
 * small next to a model call), the clamp and division are the device's ops.
 */
#include <math.h>
#include <stdlib.h>

#include "diffusion/sched_impl.h"

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* torch.quantile(v, q) of n values, sorted in place: rank q * (n - 1) in float32, the values
 * below and above it mixed by torch's lerp (weights under one half from below, else from
 * above); a NaN anywhere gives NaN, as torch's rank moves to the last (NaN-sorted) place. */
static float quantile(float *v, int64_t n, float q) {
    for (int64_t i = 0; i < n; i++)
        if (isnan(v[i])) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_f);
    float rank = q * (float)(n - 1);
    int64_t lo = (int64_t)rank, hi = (int64_t)ceilf(rank);
    /* past 2^24 values n - 1 itself may round up in float32 */
    if (hi > n - 1) hi = n - 1;
    if (lo > n - 1) lo = n - 1;
    float w = rank - (float)lo, a = v[lo], b = v[hi];
    return fabsf(w) < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w);
}

em_tensor *em_sched_threshold(em_ctx *c, const char *file, int line, const em_sched_cfg *cfg,
                              em_tensor *x0) {
    if (!x0) return NULL;
    int nd = em_tensor_ndim(x0);
    if (nd < 2) {
        em_fail_at(c, EM_ERR_SHAPE, "scheduler_step", file, line,
                   "dynamic thresholding needs a sample of [batch, channels, ...], got %d dims",
                   nd);
        return NULL;
    }
    int64_t B = em_tensor_dim(x0, 0), n = em_tensor_numel(x0) / (B > 0 ? B : 1);
    if (B == 0 || n == 0) return x0;
    float *v = malloc((size_t)(B * n) * sizeof *v);
    em_tensor **rows = malloc((size_t)B * sizeof *rows);
    if (!v || !rows || em_to_host_f32(c, x0, v, B * n) != EM_OK) {
        if (!v || !rows) em_fail_at(c, EM_ERR_OOM, "scheduler_step", file, line, "out of memory");
        free(v);
        free(rows);
        return NULL;
    }
    for (int64_t b = 0; b < B; b++) {
        float *r = v + b * n;
        for (int64_t i = 0; i < n; i++) r[i] = fabsf(r[i]);
        float s = quantile(r, n, (float)cfg->dynamic_thresholding_ratio);
        /* torch.clamp(s, min=1, max=sample_max_value): min first, then max (NaN stays NaN) */
        if (s < 1.0f) s = 1.0f;
        if (s > (float)cfg->sample_max_value) s = (float)cfg->sample_max_value;
        rows[b] = em_div_scalar(c, em_clamp(c, em_narrow(c, x0, 0, b, 1), -s, s), s);
    }
    em_tensor *out = B == 1 ? rows[0] : em_cat(c, rows, (int)B, 0);
    free(v);
    free(rows);
    return out;
}

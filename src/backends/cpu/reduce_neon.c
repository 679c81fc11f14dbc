/*
 * NEON row kernels of the reductions (aarch64), the twins of reduce_funcs.inc's portable ones,
 * which GCC leaves scalar (their selects and exp stay branches). Each keeps the portable
 * function's sixteen lanes (element k goes to lane k mod 16), its order of combining them and its
 * NaN rules, so the results are the portable twins' bits: only the speed differs.
 */
#include "backends/cpu/cpu.h"
#include "backends/cpu/ew_math.h"
#include "backends/cpu/neon.h"
#include "backends/cpu/reduce_funcs.h"

static double sum_f32(const float *v, int64_t n) {
    float64x2_t l[8];
    for (int j = 0; j < 8; j++) l[j] = vdupq_n_f64(0.0);
    int64_t k = 0;
    for (; k + 16 <= n; k += 16)
        for (int q = 0; q < 4; q++) {
            float32x4_t x = vld1q_f32(v + k + 4 * q);
            l[2 * q] = vaddq_f64(l[2 * q], vcvt_f64_f32(vget_low_f32(x)));
            l[2 * q + 1] = vaddq_f64(l[2 * q + 1], vcvt_high_f64_f32(x));
        }
    double t = 0;
    for (; k < n; k++) t += v[k];
    double lane[16];
    for (int j = 0; j < 8; j++) vst1q_f64(lane + 2 * j, l[j]);
    for (int j = 0; j < 16; j++) t += lane[j];
    return t;
}

/* Per lane: take x where x is better (GT: greater, else less) or x is NaN; lane NaNs stick. */
NEON_INLINE float32x4_t take(const bool GT, float32x4_t best, float32x4_t x) {
    uint32x4_t better = GT ? vcgtq_f32(x, best) : vcltq_f32(x, best);
    uint32x4_t nan = vmvnq_u32(vceqq_f32(x, x));
    return vbslq_f32(vorrq_u32(better, nan), x, best);
}

NEON_INLINE float best_f32(const bool GT, const float *v, int64_t n, bool *nan) {
    int64_t k = 0;
    bool isnan_ = false;
    float best = v[0];
    if (n >= 16) {
        float32x4_t l[4];
        for (int q = 0; q < 4; q++) l[q] = vld1q_f32(v + 4 * q);
        for (k = 16; k + 16 <= n; k += 16)
            for (int q = 0; q < 4; q++) l[q] = take(GT, l[q], vld1q_f32(v + k + 4 * q));
        float lane[16];
        for (int q = 0; q < 4; q++) vst1q_f32(lane + 4 * q, l[q]);
        best = lane[0];
        for (int j = 0; j < 16; j++) {
            isnan_ |= lane[j] != lane[j];
            best = (GT ? lane[j] > best : lane[j] < best) ? lane[j] : best;
        }
    }
    for (; k < n; k++) {
        isnan_ |= v[k] != v[k];
        best = (GT ? v[k] > best : v[k] < best) ? v[k] : best;
    }
    *nan = isnan_;
    return best;
}

static float max_f32(const float *v, int64_t n, bool *nan) { return best_f32(true, v, n, nan); }
static float min_f32(const float *v, int64_t n, bool *nan) { return best_f32(false, v, n, nan); }

static float rowmax(const float *v, int64_t n) {
    bool nan;
    return n ? max_f32(v, n, &nan) : -INFINITY;
}

/* e = exp(v - m) over the row, written back when STORE; returns the sum in the portable order
 * (the tail first, then the sixteen lanes). */
NEON_INLINE float exp_sum(const bool STORE, float *v, int64_t n, float m) {
    float32x4_t l[4];
    for (int q = 0; q < 4; q++) l[q] = vdupq_n_f32(0.0f);
    const float32x4_t mv = vdupq_n_f32(m);
    int64_t k = 0;
    for (; k + 16 <= n; k += 16)
        for (int q = 0; q < 4; q++) {
            float32x4_t e = em_neon_expf(vsubq_f32(vld1q_f32(v + k + 4 * q), mv));
            if (STORE) vst1q_f32(v + k + 4 * q, e);
            l[q] = vaddq_f32(l[q], e);
        }
    float sum = 0;
    for (; k < n; k++) {
        float e = em_expf(v[k] - m);
        if (STORE) v[k] = e;
        sum += e;
    }
    float lane[16];
    for (int q = 0; q < 4; q++) vst1q_f32(lane + 4 * q, l[q]);
    for (int j = 0; j < 16; j++) sum += lane[j];
    return sum;
}

static void softmax_f32(float *v, int64_t n) {
    float m = rowmax(v, n);
    if (m == -INFINITY) m = 0;
    float inv = 1.0f / exp_sum(true, v, n, m);
    for (int64_t k = 0; k < n; k++) v[k] *= inv;
}

static void log_softmax_f32(float *v, int64_t n) {
    float m = rowmax(v, n);
    if (m == -INFINITY) m = 0;
    float ls = logf(exp_sum(false, v, n, m));
    for (int64_t k = 0; k < n; k++) v[k] = v[k] - m - ls;
}

void em_red_fill_neon(void *table) {
    em_red_isa *t = table;
    t->sum_f32 = sum_f32;
    t->max_f32 = max_f32;
    t->min_f32 = min_f32;
    t->softmax_f32 = softmax_f32;
    t->log_softmax_f32 = log_softmax_f32;
}

/*
 * The bf16 dot engine with BFDOT (FEAT_BF16): each instruction does two multiply-adds per f32
 * lane straight from the bf16 weights, so nothing is widened. Built with +bf16 and reached only
 * through em_gemm_dot_neon(dt, true), which gemm.c asks for only where em_cpu_bf16_dot().
 */
#include "backends/cpu/gemm.h"
#include "backends/cpu/neon.h"

typedef struct dot_out {
    uint16_t *c;
    int64_t ldc;
    const float *bias;
} dot_out;

static void emit(void *user, int64_t i, int64_t j, float v) {
    const dot_out *o = user;
    o->c[i * o->ldc + j] = em_bf16_from_f32_inline(v + (o->bias ? o->bias[j] : 0.0f));
}

static void dot_bfdot(int64_t m, int64_t n, int64_t k, const void *x, int64_t ldx, const void *w,
                      int64_t ldw, void *c, int64_t ldc, em_dtype dt, const float *bias) {
    (void)dt;
    dot_out o = {c, ldc, bias};
    em_neon_dot_all(NEON_BFDOT, m, n, k, x, ldx, w, ldw, emit, &o);
}

em_gemm_dot_fn em_gemm_dot_neon_bf16(void) { return dot_bfdot; }

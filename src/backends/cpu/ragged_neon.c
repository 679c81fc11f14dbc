/*
 * NEON ragged-dot micro-kernels (twins in ragged_generic.c): the row-dot tiles of neon.h over a
 * group's rows and a block of its weight rows, f32 by FMLA and bf16 widened by a shift. With
 * FEAT_BF16 the bf16 kernels of ragged_neon_bf16.c (BFDOT, and the packed layout) replace it.
 */
#include "backends/cpu/cpu.h"
#include "backends/cpu/neon.h"
#include "backends/cpu/ragged.h"

static void nk_bf16(const uint16_t *x, int64_t ldx, int64_t rows, const uint16_t *w, int64_t ldw,
                    int64_t nn, int64_t k, float *out, int64_t ldo) {
    em_neon_dot_all(NEON_BF16, rows, nn, k, x, ldx, w, ldw, em_neon_emit_f32,
                    &(em_neon_f32_out){out, ldo});
}

static void nk_f32(const float *x, int64_t ldx, int64_t rows, const float *w, int64_t ldw,
                   int64_t nn, int64_t k, float *out, int64_t ldo) {
    em_neon_dot_all(NEON_F32, rows, nn, k, x, ldx, w, ldw, em_neon_emit_f32,
                    &(em_neon_f32_out){out, ldo});
}

void em_ragged_fill_neon(void *table) {
    em_ragged_isa *t = table;
    t->nk_f32 = nk_f32;
    t->nk_bf16 = nk_bf16;
    t->packed_bf16 = NULL;
    t->pack_pays = false;
    if (em_cpu_bf16_dot()) em_ragged_fill_neon_bf16(t);
}

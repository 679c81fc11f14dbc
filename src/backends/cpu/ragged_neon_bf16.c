/*
 * bf16 ragged-dot micro-kernels with BFDOT (FEAT_BF16), built with +bf16 and installed by
 * em_ragged_fill_neon only where em_cpu_bf16_dot(): the [N, K] layout through the row-dot tiles
 * of neon.h, and the packed layout (em_ragged_pack, ragged.h), which BFDOT's by-element form
 * reads as it is: a panel step holds 32 columns' (k, k+1) pairs, four columns a vector, and one
 * (k, k+1) pair of an x row is a 32-bit lane of a vector holding four steps of that row.
 */
#include "backends/cpu/cpu.h"
#include "backends/cpu/neon.h"
#include "backends/cpu/ragged.h"

static void nk_bfdot(const uint16_t *x, int64_t ldx, int64_t rows, const uint16_t *w,
                     int64_t ldw, int64_t nn, int64_t k, float *out, int64_t ldo) {
    em_neon_dot_all(NEON_BFDOT, rows, nn, k, x, ldx, w, ldw, em_neon_emit_f32,
                    &(em_neon_f32_out){out, ldo});
}

/* Rows per tile: 8 accumulators per row (32 columns) + 8 panel vectors + one x vector per row
 * fit the 32 registers for two rows. */
#define PACKED_MR 2

/* One panel step (32 columns) against lane L of each row's x vector. */
#define PACKED_STEP(p, xv, L)                                                                      \
    do {                                                                                           \
        bfloat16x8_t b_[8];                                                                        \
        for (int q = 0; q < 8; q++) b_[q] = vreinterpretq_bf16_u16(vld1q_u16((p) + 8 * q));       \
        for (int i = 0; i < R; i++)                                                                \
            for (int q = 0; q < 8; q++) acc[i][q] = vbfdotq_laneq_f32(acc[i][q], b_[q], xv[i], L); \
    } while (0)

/* R rows against one 32-column panel over all ks steps, each output in one lane of one
 * accumulator (one summation order whatever R), rounded once to bf16. */
NEON_INLINE void packed_tile(const int R, const uint16_t *x, int64_t ldx, const uint16_t *pb,
                             int64_t ks, uint16_t *out, int64_t ldo) {
    float32x4_t acc[PACKED_MR][8];
    for (int i = 0; i < R; i++)
        for (int q = 0; q < 8; q++) acc[i][q] = vdupq_n_f32(0.0f);
    int64_t s = 0;
    for (; s + 4 <= ks; s += 4, pb += 4 * 64) {
        bfloat16x8_t xv[PACKED_MR];
        for (int i = 0; i < R; i++)
            xv[i] = vreinterpretq_bf16_u16(vld1q_u16(x + i * ldx + 2 * s));
        PACKED_STEP(pb, xv, 0);
        PACKED_STEP(pb + 64, xv, 1);
        PACKED_STEP(pb + 128, xv, 2);
        PACKED_STEP(pb + 192, xv, 3);
    }
    for (; s < ks; s++, pb += 64) {
        bfloat16x8_t xv[PACKED_MR];
        for (int i = 0; i < R; i++) {
            uint32_t pair;
            memcpy(&pair, x + i * ldx + 2 * s, 4);
            xv[i] = vreinterpretq_bf16_u32(vdupq_n_u32(pair));
        }
        PACKED_STEP(pb, xv, 0);
    }
    for (int i = 0; i < R; i++)
        for (int q = 0; q < 8; q++) vst1_u16(out + i * ldo + 4 * q, em_neon_to_bf16(acc[i][q]));
}

static void packed_bf16(const uint16_t *x, int64_t ldx, int64_t rows, const uint16_t *wp,
                        int64_t np, int64_t ks, uint16_t *out, int64_t ldo) {
    for (int64_t p = 0; p < np; p++) {
        const uint16_t *pb = wp + p * ks * 64;
        int64_t r = 0;
        for (; r + 2 <= rows; r += 2)
            packed_tile(2, x + r * ldx, ldx, pb, ks, out + r * ldo + 32 * p, ldo);
        if (r < rows) packed_tile(1, x + r * ldx, ldx, pb, ks, out + r * ldo + 32 * p, ldo);
    }
}

void em_ragged_fill_neon_bf16(void *table) {
    em_ragged_isa *t = table;
    t->nk_bf16 = nk_bfdot;
    t->packed_bf16 = packed_bf16;
    /* not measured on hardware yet (CI runs it under qemu): BFDOT reads the panels as they are,
     * as vdpbf16ps does where packing measured faster */
    t->pack_pays = true;
}

/* Portable C ragged-dot micro-kernels (the twins of ragged_avx512.c). */
#include <string.h>

#include "backends/cpu/ragged.h"

static inline float bf(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void nk_bf16(const uint16_t *x, int64_t ldx, int64_t rows, const uint16_t *w,
                    int64_t ldw, int64_t nn, int64_t k, float *out, int64_t ldo) {
    for (int64_t n = 0; n < nn; n++) {
        const uint16_t *wr = w + n * ldw;
        for (int64_t r = 0; r < rows; r++) {
            const uint16_t *xr = x + r * ldx;
            float acc[8] = {0};
            int64_t i = 0;
            for (; i + 8 <= k; i += 8)
                for (int j = 0; j < 8; j++) acc[j] += bf(xr[i + j]) * bf(wr[i + j]);
            float s = 0;
            for (; i < k; i++) s += bf(xr[i]) * bf(wr[i]);
            for (int j = 0; j < 8; j++) s += acc[j];
            out[r * ldo + n] = s;
        }
    }
}

static void nk_f32(const float *x, int64_t ldx, int64_t rows, const float *w,
                   int64_t ldw, int64_t nn, int64_t k, float *out, int64_t ldo) {
    for (int64_t n = 0; n < nn; n++) {
        const float *wr = w + n * ldw;
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * ldx;
            float acc[8] = {0};
            int64_t i = 0;
            for (; i + 8 <= k; i += 8)
                for (int j = 0; j < 8; j++) acc[j] += xr[i + j] * wr[i + j];
            float s = 0;
            for (; i < k; i++) s += xr[i] * wr[i];
            for (int j = 0; j < 8; j++) s += acc[j];
            out[r * ldo + n] = s;
        }
    }
}

void em_ragged_fill_generic(void *table) {
    em_ragged_isa *t = table;
    t->nk_bf16 = nk_bf16;
    t->nk_f32 = nk_f32;
    t->packed_bf16 = NULL;
    t->pack_pays = false;
}

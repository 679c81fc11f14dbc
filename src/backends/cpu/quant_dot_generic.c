/* The quantized dot kernels in portable C (see quant_dot.h): the reference for the vector
 * levels and the fallback of every CPU. One weight row at a time, block by block, integer sums
 * inside a block and one f32 multiply-add per block, against 16-bit activation blocks. */
#include <string.h>

#include "backends/cpu/quant_dot.h"
#include "core/quant.h"

static inline float h2f(const uint8_t *p) { return em_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

static inline uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Sums are int64: 32 products of 16-bit activations fit int32, but not a 256-block's scaled
 * sub-block sums. */
static float row_q8_0(int64_t nb, const uint8_t *w, const em_qx16 *x) {
    float acc = 0;
    for (int64_t i = 0; i < nb; i++, w += 34) {
        int64_t sum = 0;
        for (int j = 0; j < 32; j++) sum += (int8_t)w[2 + j] * x[i].q[j];
        acc += h2f(w) * x[i].d * (float)sum;
    }
    return acc;
}

static float row_q4_0(int64_t nb, const uint8_t *w, const em_qx16 *x) {
    float acc = 0;
    for (int64_t i = 0; i < nb; i++, w += 18) {
        int64_t sum = 0;
        for (int j = 0; j < 16; j++)
            sum += ((w[2 + j] & 15) - 8) * x[i].q[j] + ((w[2 + j] >> 4) - 8) * x[i].q[j + 16];
        acc += h2f(w) * x[i].d * (float)sum;
    }
    return acc;
}

static float row_q4_1(int64_t nb, const uint8_t *w, const em_qx16 *x) {
    float acc = 0;
    for (int64_t i = 0; i < nb; i++, w += 20) {
        int64_t sum = 0;
        for (int j = 0; j < 16; j++)
            sum += (w[4 + j] & 15) * x[i].q[j] + (w[4 + j] >> 4) * x[i].q[j + 16];
        acc += h2f(w) * x[i].d * (float)sum + h2f(w + 2) * x[i].s;
    }
    return acc;
}

static float row_q5_0(int64_t nb, const uint8_t *w, const em_qx16 *x) {
    float acc = 0;
    for (int64_t i = 0; i < nb; i++, w += 22) {
        uint32_t qh = rd32(w + 2);
        int64_t sum = 0;
        for (int j = 0; j < 16; j++) {
            int lo = ((w[6 + j] & 15) | (int)((qh >> j) & 1) << 4) - 16;
            int hi = ((w[6 + j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4) - 16;
            sum += lo * x[i].q[j] + hi * x[i].q[j + 16];
        }
        acc += h2f(w) * x[i].d * (float)sum;
    }
    return acc;
}

static float row_q5_1(int64_t nb, const uint8_t *w, const em_qx16 *x) {
    float acc = 0;
    for (int64_t i = 0; i < nb; i++, w += 24) {
        uint32_t qh = rd32(w + 4);
        int64_t sum = 0;
        for (int j = 0; j < 16; j++) {
            int lo = (w[8 + j] & 15) | (int)((qh >> j) & 1) << 4;
            int hi = (w[8 + j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            sum += lo * x[i].q[j] + hi * x[i].q[j + 16];
        }
        acc += h2f(w) * x[i].d * (float)sum + h2f(w + 2) * x[i].s;
    }
    return acc;
}

/* Q4_K (qh NULL) and Q5_K: d sum_j sc_j dot_j - dmin sum_j m_j (sum of x)_j. */
static float row_k45(int64_t nb, const uint8_t *w, size_t bbytes, bool five, const em_qx16_k *x) {
    float acc = 0;
    for (int64_t i = 0; i < nb; i++, w += bbytes) {
        const uint8_t *qh = five ? w + 16 : NULL, *qs = w + (five ? 48 : 16);
        int64_t sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            em_q4k_scale_min(w + 4, j, &sc, &m);
            const uint8_t *q = qs + 32 * (j / 2);
            int shift = 4 * (j % 2);
            int64_t dot = 0;
            for (int e = 0; e < 32; e++) {
                int v = (q[e] >> shift) & 15;
                if (qh) v |= ((qh[e] >> j) & 1) << 4;
                dot += v * x[i].q[32 * j + e];
            }
            sumi += sc * dot;
            summ += m * (int64_t)x[i].sums[j];
        }
        acc += x[i].d * (h2f(w) * (float)sumi - h2f(w + 2) * (float)summ);
    }
    return acc;
}

static float row_q6_k(int64_t nb, const uint8_t *w, const em_qx16_k *x) {
    float acc = 0;
    for (int64_t i = 0; i < nb; i++, w += 210) {
        const uint8_t *ql = w, *qh = w + 128;
        const int8_t *sc = (const int8_t *)(w + 192);
        int64_t sumi = 0;
        for (int g = 0; g < 16; g++) {
            int64_t dot = 0;
            for (int t = 0; t < 16; t++) {
                int e = 16 * g + t, h = e / 128, j = (e % 128) / 32, l = e % 32;
                int lo = (ql[64 * h + 32 * (j % 2) + l] >> (4 * (j / 2))) & 15;
                int hi = (qh[32 * h + l] >> (2 * j)) & 3;
                dot += ((lo | hi << 4) - 32) * x[i].q[e];
            }
            sumi += sc[g] * dot;
        }
        acc += x[i].d * h2f(w + 208) * (float)sumi;
    }
    return acc;
}

#define ROWS_KERNEL(name, expr)                                                                    \
    static void name(int64_t k, const uint8_t *wr, size_t ldw, int rows, const void *xr,           \
                     size_t ldx, int nx, float *y, int64_t ldy) {                                  \
        for (int r = 0; r < rows; r++)                                                             \
            for (int i = 0; i < nx; i++) {                                                         \
                const uint8_t *w = wr + (size_t)r * ldw;                                           \
                const void *xq = (const uint8_t *)xr + (size_t)i * ldx;                            \
                y[i * ldy + r] = (expr);                                                           \
            }                                                                                      \
    }

ROWS_KERNEL(dot_q8_0, row_q8_0(k / 32, w, xq))
ROWS_KERNEL(dot_q4_0, row_q4_0(k / 32, w, xq))
ROWS_KERNEL(dot_q4_1, row_q4_1(k / 32, w, xq))
ROWS_KERNEL(dot_q5_0, row_q5_0(k / 32, w, xq))
ROWS_KERNEL(dot_q5_1, row_q5_1(k / 32, w, xq))
ROWS_KERNEL(dot_q4_k, row_k45(k / 256, w, 144, false, xq))
ROWS_KERNEL(dot_q5_k, row_k45(k / 256, w, 176, true, xq))
ROWS_KERNEL(dot_q6_k, row_q6_k(k / 256, w, xq))

void em_qdot_fill_generic(void *t) {
    em_qdot_isa *q = t;
    memset(q, 0, sizeof *q);
    q->kern[EM_Q8_0] = (em_qdot_kernel){em_qx_row_bytes_16, em_qx_quantize_16, dot_q8_0, 16};
    q->kern[EM_Q4_0] = (em_qdot_kernel){em_qx_row_bytes_16, em_qx_quantize_16, dot_q4_0, 16};
    q->kern[EM_Q4_1] = (em_qdot_kernel){em_qx_row_bytes_16, em_qx_quantize_16, dot_q4_1, 16};
    q->kern[EM_Q5_0] = (em_qdot_kernel){em_qx_row_bytes_16, em_qx_quantize_16, dot_q5_0, 16};
    q->kern[EM_Q5_1] = (em_qdot_kernel){em_qx_row_bytes_16, em_qx_quantize_16, dot_q5_1, 16};
    q->kern[EM_Q4_K] = (em_qdot_kernel){em_qx_row_bytes_16_k, em_qx_quantize_16_k, dot_q4_k, 16};
    q->kern[EM_Q5_K] = (em_qdot_kernel){em_qx_row_bytes_16_k, em_qx_quantize_16_k, dot_q5_k, 16};
    q->kern[EM_Q6_K] = (em_qdot_kernel){em_qx_row_bytes_16_k, em_qx_quantize_16_k, dot_q6_k, 16};
}

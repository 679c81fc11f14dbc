/*
 * Dequantization of ggml's block formats, bit for bit as the `gguf` Python package computes it
 * (gguf-py/gguf/quants.py, `dequantize_blocks` of each type): every product and sum is one f32
 * operation rounded on its own, in the package's order — (d * q) + m, not a fused
 * multiply-add — so nothing here may be contracted into an FMA.
 *
 * Block layouts (little-endian; d, m, dmin are IEEE f16):
 *   Q8_0  [d][32 x int8]                      x = q * d
 *   Q4_0  [d][16 bytes: lo nibbles = 0..15, hi = 16..31]         x = d * (q - 8)
 *   Q4_1  [d][m][16 bytes as Q4_0]             x = d * q + m
 *   Q5_0  [d][qh: u32, bit i = high bit of element i][16 bytes]  x = d * (q - 16)
 *   Q5_1  [d][m][qh][16 bytes]                 x = d * q + m
 *   Q4_K  [d][dmin][12 bytes: 8 six-bit scales and mins][128 bytes: 4 groups of 32 bytes,
 *         lo nibbles = sub-block 2g, hi = 2g + 1]                x = (d*sc) * q - (dmin*m)
 *   Q5_K  as Q4_K with [32 bytes qh: bit j of byte i = high bit of sub-block j, element i]
 *         before the nibbles
 *   Q6_K  [128 bytes lo nibbles][64 bytes 2-bit highs][16 x int8 scales][d]
 *         x = (d * scale[e / 16]) * (q - 32)
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
#include <string.h>

#include "core/quant.h"
#include "core/tensor_impl.h"

static inline float h2f(const uint8_t *p) { return em_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

static void deq_q8_0(const uint8_t *b, float *y) {
    float d = h2f(b);
    for (int i = 0; i < 32; i++) y[i] = (float)(int8_t)b[2 + i] * d;
}

static void deq_q4_0(const uint8_t *b, float *y) {
    float d = h2f(b);
    const uint8_t *qs = b + 2;
    for (int i = 0; i < 16; i++) {
        y[i] = d * (float)((qs[i] & 15) - 8);
        y[i + 16] = d * (float)((qs[i] >> 4) - 8);
    }
}

static void deq_q4_1(const uint8_t *b, float *y) {
    float d = h2f(b), m = h2f(b + 2);
    const uint8_t *qs = b + 4;
    for (int i = 0; i < 16; i++) {
        y[i] = d * (float)(qs[i] & 15) + m;
        y[i + 16] = d * (float)(qs[i] >> 4) + m;
    }
}

static inline uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void deq_q5_0(const uint8_t *b, float *y) {
    float d = h2f(b);
    uint32_t qh = rd32(b + 2);
    const uint8_t *qs = b + 6;
    for (int i = 0; i < 16; i++) {
        int lo = (qs[i] & 15) | (int)((qh >> i) & 1) << 4;
        int hi = (qs[i] >> 4) | (int)((qh >> (i + 16)) & 1) << 4;
        y[i] = d * (float)(lo - 16);
        y[i + 16] = d * (float)(hi - 16);
    }
}

static void deq_q5_1(const uint8_t *b, float *y) {
    float d = h2f(b), m = h2f(b + 2);
    uint32_t qh = rd32(b + 4);
    const uint8_t *qs = b + 8;
    for (int i = 0; i < 16; i++) {
        int lo = (qs[i] & 15) | (int)((qh >> i) & 1) << 4;
        int hi = (qs[i] >> 4) | (int)((qh >> (i + 16)) & 1) << 4;
        y[i] = d * (float)lo + m;
        y[i + 16] = d * (float)hi + m;
    }
}

void em_q4k_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Q4_K and Q5_K share scales and nibbles; qh is NULL for Q4_K. */
static void deq_k45(const uint8_t *b, const uint8_t *qh, const uint8_t *qs, float *y) {
    float d = h2f(b), dmin = h2f(b + 2);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        em_q4k_scale_min(b + 4, j, &sc, &m);
        float dl = d * (float)sc, ml = dmin * (float)m;
        const uint8_t *q = qs + 32 * (j / 2);
        int shift = 4 * (j % 2);
        for (int i = 0; i < 32; i++) {
            int v = (q[i] >> shift) & 15;
            if (qh) v |= ((qh[i] >> j) & 1) << 4;
            y[32 * j + i] = dl * (float)v - ml;
        }
    }
}

static void deq_q4_k(const uint8_t *b, float *y) { deq_k45(b, NULL, b + 16, y); }
static void deq_q5_k(const uint8_t *b, float *y) { deq_k45(b, b + 16, b + 48, y); }

static void deq_q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = h2f(b + 208);
    for (int h = 0; h < 2; h++) {
        for (int j = 0; j < 4; j++) {
            for (int i = 0; i < 32; i++) {
                int e = 128 * h + 32 * j + i;
                int lo = (ql[64 * h + 32 * (j % 2) + i] >> (4 * (j / 2))) & 15;
                int hi = (qh[32 * h + i] >> (2 * j)) & 3;
                y[e] = (d * (float)sc[e / 16]) * (float)((lo | hi << 4) - 32);
            }
        }
    }
}

typedef void (*deq_fn)(const uint8_t *block, float *out);

static deq_fn deq_of(em_dtype t) {
    switch (t) {
    case EM_Q8_0: return deq_q8_0;
    case EM_Q4_0: return deq_q4_0;
    case EM_Q4_1: return deq_q4_1;
    case EM_Q5_0: return deq_q5_0;
    case EM_Q5_1: return deq_q5_1;
    case EM_Q4_K: return deq_q4_k;
    case EM_Q5_K: return deq_q5_k;
    case EM_Q6_K: return deq_q6_k;
    default: return NULL;
    }
}

void em_dequantize(em_dtype t, const void *src, float *dst, int64_t n) {
    deq_fn f = deq_of(t);
    if (!f) return;
    int bs = em_dtype_table[t].block;
    size_t bb = em_dtype_table[t].size;
    const uint8_t *p = src;
    for (int64_t i = 0; i + bs <= n; i += bs, p += bb) f(p, dst + i);
}

void em_dequantize_to(em_dtype t, const void *src, void *dst, em_dtype dt, int64_t n) {
    if (dt == EM_F32) {
        em_dequantize(t, src, dst, n);
        return;
    }
    float tmp[256];
    int bs = em_dtype_table[t].block;
    size_t bb = em_dtype_table[t].size, es = em_esize(dt);
    const uint8_t *p = src;
    char *d = dst;
    for (int64_t i = 0; i + bs <= n; i += bs, p += bb) {
        em_dequantize(t, p, tmp, bs);
        em_convert(tmp, EM_F32, d + (size_t)i * es, dt, bs);
    }
}

/*
 * Portable C twins of the GEMM kernels (gemm_avx512.c): a small register-tile microkernel over
 * f32 panels (bf16 and f16 are widened while packing) and the row-dot engine. Plain loops that a
 * compiler can vectorise for the baseline ISA.
 */
#include "backends/cpu/gemm.h"

#define GMR 4
#define GNR 8

/* Accumulator tile (row stride GNR) -> the tile's destination. */
static void tile_store(const em_gemm_tile *t, const float *acc, int mr, int nr) {
    for (int i = 0; i < mr; i++) {
        for (int j = 0; j < nr; j++) {
            float v = acc[i * GNR + j];
            if (t->load_acc) v += t->acc[i * t->ld_acc + j];
            if (!t->final) {
                t->acc[i * t->ld_acc + j] = v;
                continue;
            }
            if (t->bias) v += t->bias[j];
            switch (t->out_dt) {
            case EM_F32: ((float *)t->out)[i * t->ld_out + j] = v; break;
            case EM_BF16: ((uint16_t *)t->out)[i * t->ld_out + j] = em_f32_to_bf16(v); break;
            default: ((uint16_t *)t->out)[i * t->ld_out + j] = em_f32_to_f16(v); break;
            }
        }
    }
}

static void ukr_f32(int64_t ks, const void *pa_, const void *pb_, int mr, int nr,
                    const em_gemm_tile *t) {
    const float *pa = pa_, *pb = pb_;
    float acc[GMR * GNR] = {0};
    for (int64_t k = 0; k < ks; k++, pa += GMR, pb += GNR)
        for (int i = 0; i < GMR; i++) {
            float a = pa[i];
            for (int j = 0; j < GNR; j++) acc[i * GNR + j] += a * pb[j];
        }
    tile_store(t, acc, mr, nr);
}

static void pack_f32(void *dst, int W, int width, int64_t kc, const void *src, em_dtype dt,
                     int64_t sw, int64_t sk) {
    em_gemm_pack_generic(dst, EM_GEMM_FMT_F32, W, width, kc, src, dt, sw, sk);
}

static const em_gemm_kernel kernel_f32 = {
    .name = "generic f32 4x8",
    .fmt = EM_GEMM_FMT_F32,
    .mr = GMR,
    .nr = GNR,
    .kc = 256,
    .mc = 64,
    .nc = 512,
    .pack = pack_f32,
    .ukr = ukr_f32,
};

const em_gemm_kernel *em_gemm_kernel_generic(em_dtype dt) {
    (void)dt;
    return &kernel_f32;
}

/* ---- dot engine ---- */

#define LANES 16

static void widen(float *dst, const void *src, em_dtype dt, int64_t n) {
    if (dt == EM_F32) {
        const float *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = s[i];
    } else if (dt == EM_BF16) {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = em_bf16_to_f32(s[i]);
    } else {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = em_f16_to_f32(s[i]);
    }
}

static void store_one(void *c, em_dtype dt, int64_t i, float v) {
    switch (dt) {
    case EM_F32: ((float *)c)[i] = v; break;
    case EM_BF16: ((uint16_t *)c)[i] = em_f32_to_bf16(v); break;
    default: ((uint16_t *)c)[i] = em_f32_to_f16(v); break;
    }
}

/* One weight row at a time against up to RB rows of x, widened in blocks of BLK elements so the
 * inner loop is plain f32 over LANES independent sums. */
static void dot(int64_t m, int64_t n, int64_t k, const void *x, int64_t ldx, const void *w,
                int64_t ldw, void *c, int64_t ldc, em_dtype dt, const float *bias) {
    enum { BLK = LANES * 16, RB = 8 };
    size_t es = em_esize(dt);
    float wb[BLK], xb[BLK];
    for (int64_t j = 0; j < n; j++) {
        const char *wr = (const char *)w + (size_t)(j * ldw) * es;
        for (int64_t i0 = 0; i0 < m; i0 += RB) {
            int rb = m - i0 < RB ? (int)(m - i0) : RB;
            float lane[RB][LANES] = {{0}};
            for (int64_t k0 = 0; k0 < k; k0 += BLK) {
                int64_t len = k - k0 < BLK ? k - k0 : BLK;
                int64_t padded = (len + LANES - 1) / LANES * LANES;
                widen(wb, wr + (size_t)k0 * es, dt, len);
                for (int64_t q = len; q < padded; q++) wb[q] = 0.0f;
                for (int r = 0; r < rb; r++) {
                    widen(xb, (const char *)x + (size_t)((i0 + r) * ldx + k0) * es, dt, len);
                    for (int64_t q = len; q < padded; q++) xb[q] = 0.0f;
                    for (int64_t q = 0; q < padded; q += LANES)
                        for (int l = 0; l < LANES; l++) lane[r][l] += xb[q + l] * wb[q + l];
                }
            }
            for (int r = 0; r < rb; r++) {
                float s = 0.0f;
                for (int l = 0; l < LANES; l++) s += lane[r][l];
                if (bias) s += bias[j];
                store_one(c, dt, (i0 + r) * ldc + j, s);
            }
        }
    }
}

em_gemm_dot_fn em_gemm_dot_generic(em_dtype dt) {
    (void)dt;
    return dot;
}

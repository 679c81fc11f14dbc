/*
 * NEON GEMM kernels for aarch64 (C twins in gemm_kern.inc, built as gemm_generic.c).
 *
 * Microkernel: an 8 x 12 tile in 24 of the 32 vector registers. Per k step it loads three
 * vectors of the B panel and two of the A panel and does 24 FMLAs by element (each A value is a
 * lane, no broadcast needed): 24 independent chains hide the FMA latency. Panels are f32; bf16
 * and f16 operands are widened while packing (the portable packer).
 *
 * Dot engine (decode-shaped products, see gemm.h): the row-dot tiles of neon.h, f32 by FMLA,
 * bf16 widened by a shift and f16 by FCVTL, then FMLA; bf16 with FEAT_BF16 takes the BFDOT engine
 * of gemm_neon_bf16.c instead (em_gemm_dot_neon(dt, true)).
 */
#include "backends/cpu/gemm.h"
#include "backends/cpu/neon.h"

#define MR 8
#define NR 12

static void store_one(void *c, em_dtype dt, int64_t i, float v) {
    switch (dt) {
    case EM_F32: ((float *)c)[i] = v; break;
    case EM_BF16: ((uint16_t *)c)[i] = em_bf16_from_f32_inline(v); break;
    default: ((uint16_t *)c)[i] = em_f32_to_f16(v); break;
    }
}

/* ---- microkernel ---- */

/* The accumulator tile (row stride NR) -> the tile's destination (partial sums, bias, dtype). */
static void tile_store(const em_gemm_tile *t, const float *acc, int mr, int nr) {
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float v = acc[i * NR + j];
            if (t->load_acc) v += t->acc[i * t->ld_acc + j];
            if (!t->final) {
                t->acc[i * t->ld_acc + j] = v;
                continue;
            }
            if (t->bias) v += t->bias[j];
            store_one(t->out, t->out_dt, i * t->ld_out + j, v);
        }
}

#define ROW(i, a, l)                                                                               \
    c##i##0 = vfmaq_laneq_f32(c##i##0, b0, a, l);                                                  \
    c##i##1 = vfmaq_laneq_f32(c##i##1, b1, a, l);                                                  \
    c##i##2 = vfmaq_laneq_f32(c##i##2, b2, a, l);
#define DECL(i) float32x4_t c##i##0 = vdupq_n_f32(0), c##i##1 = c##i##0, c##i##2 = c##i##0;
#define SAVE(i)                                                                                    \
    vst1q_f32(acc + (i) * NR, c##i##0);                                                            \
    vst1q_f32(acc + (i) * NR + 4, c##i##1);                                                        \
    vst1q_f32(acc + (i) * NR + 8, c##i##2);

static void ukr_f32(int64_t ks, const void *pa_, const void *pb_, int mr, int nr,
                    const em_gemm_tile *t) {
    const float *pa = pa_, *pb = pb_;
    DECL(0) DECL(1) DECL(2) DECL(3) DECL(4) DECL(5) DECL(6) DECL(7)
    for (int64_t k = 0; k < ks; k++, pa += MR, pb += NR) {
        const float32x4_t b0 = vld1q_f32(pb), b1 = vld1q_f32(pb + 4), b2 = vld1q_f32(pb + 8);
        const float32x4_t a0 = vld1q_f32(pa), a1 = vld1q_f32(pa + 4);
        ROW(0, a0, 0) ROW(1, a0, 1) ROW(2, a0, 2) ROW(3, a0, 3)
        ROW(4, a1, 0) ROW(5, a1, 1) ROW(6, a1, 2) ROW(7, a1, 3)
    }
    float acc[MR * NR];
    SAVE(0) SAVE(1) SAVE(2) SAVE(3) SAVE(4) SAVE(5) SAVE(6) SAVE(7)
    tile_store(t, acc, mr, nr);
}

static void pack_f32(void *dst, int W, int width, int64_t kc, const void *src, em_dtype dt,
                     int64_t sw, int64_t sk) {
    em_gemm_pack_generic(dst, EM_GEMM_FMT_F32, W, width, kc, src, dt, sw, sk);
}

/* Blocks: the B panel of a k block (kc x nr f32 = 12 KB) stays in L1 while A streams from L2
 * (mc x kc = 128 KB); nc bounds the B block (nc x kc = 480 KB) to a typical L2. Not tuned on
 * hardware: chosen from the usual L1 64 KB / L2 1 MB of Neoverse cores. */
static const em_gemm_kernel kernel_f32 = {
    .name = "neon f32",
    .fmt = EM_GEMM_FMT_F32,
    .mr = MR,
    .nr = NR,
    .kc = 256,
    .mc = 16 * MR,
    .nc = 40 * NR,
    .pack = pack_f32,
    .ukr = ukr_f32,
};

const em_gemm_kernel *em_gemm_kernel_neon(em_dtype dt) {
    (void)dt;
    return &kernel_f32;
}

/* ---- dot engine ---- */

/* Where the dot engine's outputs go: c (dtype dt, row stride ldc), plus the bias. */
typedef struct dot_out {
    void *c;
    int64_t ldc;
    const float *bias;
} dot_out;

#define DEFINE_DOT(name, K, DT)                                                                    \
    static void name##_emit(void *user, int64_t i, int64_t j, float v) {                           \
        const dot_out *o = user;                                                                   \
        store_one(o->c, DT, i * o->ldc + j, v + (o->bias ? o->bias[j] : 0.0f));                    \
    }                                                                                              \
    static void name(int64_t m, int64_t n, int64_t k, const void *x, int64_t ldx, const void *w,   \
                     int64_t ldw, void *c, int64_t ldc, em_dtype dt, const float *bias) {          \
        (void)dt;                                                                                  \
        dot_out o = {c, ldc, bias};                                                                \
        em_neon_dot_all(K, m, n, k, x, ldx, w, ldw, name##_emit, &o);                              \
    }
DEFINE_DOT(dot_f32, NEON_F32, EM_F32)
DEFINE_DOT(dot_bf16, NEON_BF16, EM_BF16)
DEFINE_DOT(dot_f16, NEON_F16, EM_F16)

em_gemm_dot_fn em_gemm_dot_neon(em_dtype dt, bool bf16_hw) {
    switch (dt) {
    case EM_F32: return dot_f32;
    case EM_F16: return dot_f16;
    case EM_BF16: return bf16_hw ? em_gemm_dot_neon_bf16() : dot_bf16;
    default: return NULL;
    }
}

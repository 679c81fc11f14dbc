/*
 * AVX-512 GEMM kernels (C twins in gemm_generic.c).
 *
 * Microkernel: a 14 x 32 tile in 28 zmm accumulators. Per k step it loads two vectors of the B
 * panel and broadcasts 14 words of the A panel: vfmadd231ps on f32 panels, vdpbf16ps on bf16
 * pair panels (each word holds k and k+1, so one instruction does two k steps). Zen 4 and Intel
 * cores issue one 512-bit FMA or dot per cycle per port pair, so 28 independent chains hide the
 * latency with room to spare, and the panels stream from L2 at a few bytes per cycle.
 *
 * Packers: fast paths for the two layouts that matter (lines contiguous along the panel width:
 * a copy or a pair interleave; lines contiguous along k: a 16 x 16 word transpose), everything
 * else through em_gemm_pack_generic.
 *
 * Dot engine: tiles of up to 4 rows of x by 4 weight rows, each weight vector loaded once and
 * used for every row of x in the tile; horizontal sums at the end.
 */
#include <immintrin.h>
#include <string.h>

#include "backends/cpu/cvt_avx512.h"
#include "backends/cpu/gemm.h"
#include "core/bf16_inline.h"

#define MR 14
#define NR 32
#define INLINE static inline __attribute__((always_inline))

/* Lines packed by transposition are many separate streams (one per row of A or of a weight):
 * the hardware prefetcher does not keep up, so the packer fetches each line 128 words (8 cache
 * lines) ahead into L2, which has more fills in flight than L1 (bf16 W^T panels from DRAM: 8 GB/s
 * without this and the 16-line loop order of PACK_TRANSPOSED, 17 GB/s with them, on one Zen 4
 * core). */
#define PACK_PF_WORDS 128
/* Lines packed by copy (a row of B per k step) are a matrix stride apart: fetch 32 rows ahead,
 * into L2 (B panels from DRAM: 8 -> 12 GB/s f32, 4 -> 10 GB/s bf16 on one core). */
#define PACK_PF_ROWS 32

/* ---- conversions ---- */

INLINE __m256i cvt_f16(__m512 v) {
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/* 16 (masked) elements of dtype dt at p as f32. */
INLINE __m512 load16(const void *p, __mmask16 m, em_dtype dt) {
    if (dt == EM_F32) return _mm512_maskz_loadu_ps(m, p);
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if (dt == EM_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

INLINE __mmask16 mask16(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

INLINE __mmask32 mask32(int64_t n) {
    return n >= 32 ? (__mmask32)0xffffffffu : n <= 0 ? 0 : (__mmask32)((1u << n) - 1);
}

/* ---- tile store ---- */

INLINE void store_half(const em_gemm_tile *t, float *acc, char *out, __m512 v, __mmask16 m,
                       __m512 bias) {
    if (t->load_acc) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, acc));
    if (!t->final) {
        _mm512_mask_storeu_ps(acc, m, v);
        return;
    }
    v = _mm512_add_ps(v, bias);
    switch (t->out_dt) {
    case EM_F32: _mm512_mask_storeu_ps(out, m, v); break;
    case EM_BF16: _mm256_mask_storeu_epi16(out, m, em_cvt_bf16_avx512(v)); break;
    default: _mm256_mask_storeu_epi16(out, m, cvt_f16(v)); break;
    }
}

INLINE void store_tile(const __m512 *c0, const __m512 *c1, const int mr, int nr,
                       const em_gemm_tile *t) {
    __mmask16 m0 = mask16(nr), m1 = mask16(nr - 16);
    __m512 bias0 = _mm512_setzero_ps(), bias1 = bias0;
    if (t->final && t->bias) {
        bias0 = _mm512_maskz_loadu_ps(m0, t->bias);
        bias1 = _mm512_maskz_loadu_ps(m1, t->bias + 16);
    }
    size_t es = em_esize(t->out_dt);
#pragma GCC unroll 14
    for (int i = 0; i < mr; i++) {
        float *acc = t->acc ? t->acc + i * t->ld_acc : NULL;
        char *out = (char *)t->out + (size_t)(i * t->ld_out) * es;
        store_half(t, acc, out, c0[i], m0, bias0);
        if (m1) store_half(t, acc ? acc + 16 : NULL, out + 16 * es, c1[i], m1, bias1);
    }
}

/* ---- microkernels ---- */

INLINE void ukr_body(const int mr, const bool bf, int64_t ks, const char *pa, const char *pb,
                     int nr, const em_gemm_tile *t) {
    __m512 c0[MR], c1[MR];
#pragma GCC unroll 14
    for (int i = 0; i < mr; i++) c0[i] = c1[i] = _mm512_setzero_ps();
    /* the C tile is read or written after the k loop: start fetching its lines now (rows are a
     * matrix stride apart, so the hardware prefetcher cannot guess them) */
    if (t->load_acc || t->out_dt == EM_F32) {
        const float *c = t->load_acc ? t->acc : (const float *)t->out;
        int64_t ld = t->load_acc ? t->ld_acc : t->ld_out;
        for (int i = 0; i < mr; i++) {
            _mm_prefetch((const char *)(c + i * ld), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + i * ld + 16), _MM_HINT_T0);
        }
    }
    for (int64_t k = 0; k < ks; k++) {
        const __m512 b0 = _mm512_load_ps((const float *)pb);
        const __m512 b1 = _mm512_load_ps((const float *)(pb + 64));
#pragma GCC unroll 14
        for (int i = 0; i < mr; i++) {
            if (bf) {
                int32_t w;
                memcpy(&w, pa + 4 * i, 4);
                __m512bh a = (__m512bh)_mm512_set1_epi32(w);
                c0[i] = _mm512_dpbf16_ps(c0[i], a, (__m512bh)_mm512_castps_si512(b0));
                c1[i] = _mm512_dpbf16_ps(c1[i], a, (__m512bh)_mm512_castps_si512(b1));
            } else {
                float w;
                memcpy(&w, pa + 4 * i, 4);
                __m512 a = _mm512_set1_ps(w);
                c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
                c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
            }
        }
        pa += 4 * MR;
        pb += 4 * NR;
    }
    store_tile(c0, c1, mr, nr, t);
}

#define UKR_CASES(BF)                                                                              \
    switch (mr) {                                                                                  \
    case 14: ukr_body(14, BF, ks, pa, pb, nr, t); break;                                           \
    case 13: ukr_body(13, BF, ks, pa, pb, nr, t); break;                                           \
    case 12: ukr_body(12, BF, ks, pa, pb, nr, t); break;                                           \
    case 11: ukr_body(11, BF, ks, pa, pb, nr, t); break;                                           \
    case 10: ukr_body(10, BF, ks, pa, pb, nr, t); break;                                           \
    case 9: ukr_body(9, BF, ks, pa, pb, nr, t); break;                                             \
    case 8: ukr_body(8, BF, ks, pa, pb, nr, t); break;                                             \
    case 7: ukr_body(7, BF, ks, pa, pb, nr, t); break;                                             \
    case 6: ukr_body(6, BF, ks, pa, pb, nr, t); break;                                             \
    case 5: ukr_body(5, BF, ks, pa, pb, nr, t); break;                                             \
    case 4: ukr_body(4, BF, ks, pa, pb, nr, t); break;                                             \
    case 3: ukr_body(3, BF, ks, pa, pb, nr, t); break;                                             \
    case 2: ukr_body(2, BF, ks, pa, pb, nr, t); break;                                             \
    default: ukr_body(1, BF, ks, pa, pb, nr, t); break;                                            \
    }

static void ukr_f32(int64_t ks, const void *pa_, const void *pb_, int mr, int nr,
                    const em_gemm_tile *t) {
    const char *pa = pa_, *pb = pb_;
    UKR_CASES(false)
}

static void ukr_bf16(int64_t ks, const void *pa_, const void *pb_, int mr, int nr,
                     const em_gemm_tile *t) {
    const char *pa = pa_, *pb = pb_;
    UKR_CASES(true)
}

/* ---- packers ---- */

/* In-register transpose of a 16 x 16 block of 32-bit words (r[i] = row i -> r[j] = column j). */
INLINE void transpose16(__m512 *r) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4g+q], 128-bit lane L: column 4L+q of rows 4g..4g+3 */
    __m512 u[16];
    for (int g = 0; g < 4; g++) {
        u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    /* a 4 x 4 transpose of 128-bit lanes for each q */
    for (int q = 0; q < 4; q++) {
        __m512 s0 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x88);
        __m512 s1 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xdd);
        __m512 s2 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x88);
        __m512 s3 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xdd);
        r[q] = _mm512_shuffle_f32x4(s0, s2, 0x88);
        r[8 + q] = _mm512_shuffle_f32x4(s0, s2, 0xdd);
        r[4 + q] = _mm512_shuffle_f32x4(s1, s3, 0x88);
        r[12 + q] = _mm512_shuffle_f32x4(s1, s3, 0xdd);
    }
}

/* Lines contiguous along k: for each group of 16 lines (16 read streams at a time), 16 words of
 * each line are transposed into 16 k steps. LOAD(w, k0, m) loads the masked words k0.. of line w
 * as a vector; LOAD_ADDR(w, k) is word k of line w. */
#define PACK_TRANSPOSED(nsteps, LOAD)                                                              \
    do {                                                                                           \
        for (int g = 0; g < W; g += 16) {                                                          \
            for (int64_t k0 = 0; k0 < (nsteps); k0 += 16) {                                        \
                int64_t len = (nsteps) - k0 < 16 ? (nsteps) - k0 : 16;                             \
                __mmask16 km = mask16(len);                                                        \
                __m512 r[16];                                                                      \
                for (int q = 0; q < 16; q++) {                                                     \
                    int w = g + q;                                                                 \
                    r[q] = w < width ? LOAD(w, k0, km) : _mm512_setzero_ps();                      \
                    if (w < width)                                                                 \
                        _mm_prefetch((const char *)&LOAD_ADDR(w, k0 + PACK_PF_WORDS),              \
                                     _MM_HINT_T1);                                                 \
                }                                                                                  \
                transpose16(r);                                                                    \
                __mmask16 wm = mask16(W - g);                                                      \
                for (int q = 0; q < len; q++)                                                      \
                    _mm512_mask_storeu_ps(d + (k0 + q) * W + g, wm, r[q]);                         \
            }                                                                                      \
        }                                                                                          \
    } while (0)

static void pack_f32(void *dst, int W, int width, int64_t kc, const void *src, em_dtype dt,
                     int64_t sw, int64_t sk) {
    const char *s = src;
    const size_t es = em_esize(dt);
    float *d = dst;
    if (sw == 1 && W <= 32) {
        __mmask16 m0 = mask16(width), m1 = mask16(width - 16);
        __mmask16 w0 = mask16(W), w1 = mask16(W - 16);
        for (int64_t k = 0; k < kc; k++, d += W) {
            const char *p = s + (size_t)(k * sk) * es;
            const char *ahead = s + (size_t)((k + PACK_PF_ROWS) * sk) * es;
            _mm_prefetch(ahead, _MM_HINT_T1);
            _mm_prefetch(ahead + (size_t)W * es - 1, _MM_HINT_T1);
            _mm512_mask_storeu_ps(d, w0, load16(p, m0, dt));
            if (w1) _mm512_mask_storeu_ps(d + 16, w1, load16(p + 16 * es, m1, dt));
        }
        return;
    }
    if (sk == 1 && W <= 32) {
#define LOAD_F(w, k0, km) load16(s + (size_t)((w) * sw + (k0)) * es, km, dt)
#define LOAD_ADDR(w, k) s[(size_t)((w) * sw + (k)) * es]
        PACK_TRANSPOSED(kc, LOAD_F);
#undef LOAD_F
#undef LOAD_ADDR
        return;
    }
    em_gemm_pack_generic(dst, EM_GEMM_FMT_F32, W, width, kc, src, dt, sw, sk);
}

static void pack_bf16x2(void *dst, int W, int width, int64_t kc, const void *src, em_dtype dt,
                        int64_t sw, int64_t sk) {
    const uint16_t *s = src;
    if (sk == 1 && W <= 32) {
        /* the (k, k+1) pairs are adjacent: transpose 32-bit words */
        float *d = dst;
        int64_t full = kc / 2;
#define LOAD_P(w, k0, km) _mm512_maskz_loadu_ps(km, s + (w) * sw + 2 * (k0))
#define LOAD_ADDR(w, k) s[(w) * sw + 2 * (k)]
        PACK_TRANSPOSED(full, LOAD_P);
#undef LOAD_P
#undef LOAD_ADDR
        if (kc & 1) {
            uint16_t *t = (uint16_t *)dst + 2 * full * W;
            for (int w = 0; w < W; w++) {
                t[2 * w] = w < width ? s[w * sw + kc - 1] : 0;
                t[2 * w + 1] = 0;
            }
        }
        return;
    }
    if (sw == 1 && W <= 32) {
        /* two k rows, each contiguous along the panel width: interleave them */
        const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
                                            40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33,
                                            1, 32, 0);
        const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
        __mmask32 wm = mask32(width);
        __mmask16 s0 = mask16(W), s1 = mask16(W - 16);
        char *d = dst;
        for (int64_t k = 0; k < kc; k += 2, d += 4 * W) {
            _mm_prefetch((const char *)(s + (k + PACK_PF_ROWS) * sk), _MM_HINT_T1);
            _mm_prefetch((const char *)(s + (k + PACK_PF_ROWS + 1) * sk), _MM_HINT_T1);
            __m512i r0 = _mm512_maskz_loadu_epi16(wm, s + k * sk);
            __m512i r1 = k + 1 < kc ? _mm512_maskz_loadu_epi16(wm, s + (k + 1) * sk)
                                    : _mm512_setzero_si512();
            _mm512_mask_storeu_epi32(d, s0, _mm512_permutex2var_epi16(r0, lo, r1));
            if (s1) _mm512_mask_storeu_epi32(d + 64, s1, _mm512_permutex2var_epi16(r0, hi, r1));
        }
        return;
    }
    em_gemm_pack_generic(dst, EM_GEMM_FMT_BF16X2, W, width, kc, src, dt, sw, sk);
}

static void pair_bf16(uint32_t *dst, const uint16_t *a, const uint16_t *b, int n) {
    for (int e = 0; e < n; e += 16) {
        const __mmask16 m = mask16(n - e);
        __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, a + e));
        if (b)
            w = _mm512_or_si512(
                w, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, b + e)), 16));
        _mm512_mask_storeu_epi32(dst + e, m, w);
    }
}

/* Blocks (bench/lab_gemm on Zen 4, 32 KB L1, 1 MB L2, 32 MB L3): a deep k block writes each C
 * tile once or twice instead of k/256 times, which beat keeping the B micro-panel in L1 (it streams
 * from L2 at a few bytes per cycle); mc keeps the A block (mc x kc) within half the L2. bf16 takes
 * K up to 2048 in one block, so its C needs no f32 partial sums in the common sizes. */
static const em_gemm_kernel kernel_f32 = {
    .name = "avx512 f32 14x32",
    .fmt = EM_GEMM_FMT_F32,
    .mr = MR,
    .nr = NR,
    .kc = 1024,
    .mc = 56,
    .nc = 2048,
    .pack = pack_f32,
    .ukr = ukr_f32,
};

static const em_gemm_kernel kernel_bf16 = {
    .name = "avx512 bf16 14x32 (vdpbf16ps)",
    .fmt = EM_GEMM_FMT_BF16X2,
    .mr = MR,
    .nr = NR,
    .kc = 2048,
    .mc = 56,
    .nc = 1024,
    .pack = pack_bf16x2,
    .ukr = ukr_bf16,
    .pair = pair_bf16,
};

const em_gemm_kernel *em_gemm_kernel_avx512(em_dtype dt, bool bf16_hw) {
    return dt == EM_BF16 && bf16_hw ? &kernel_bf16 : &kernel_f32;
}

/* ---- dot engine ---- */

INLINE void store_one(void *c, em_dtype dt, int64_t i, float v) {
    switch (dt) {
    case EM_F32: ((float *)c)[i] = v; break;
    case EM_BF16: ((uint16_t *)c)[i] = em_bf16_from_f32_inline(v); break;
    default: ((uint16_t *)c)[i] = em_f32_to_f16(v); break;
    }
}

/* The 16 horizontal sums of v[0..15], as one vector (element i = sum of v[i]): 15 adds and
 * 30 shuffles instead of 16 separate reductions. */
INLINE __m512 hsum16(const __m512 *v) {
    __m512 s[8], q[4], r[2];
    for (int i = 0; i < 8; i++) /* 256-bit halves: lanes 0-7 hold v[2i], 8-15 v[2i+1] */
        s[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee));
    for (int i = 0; i < 4; i++) /* 128-bit lane L holds v[4i+L] */
        q[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0xdd));
    for (int i = 0; i < 2; i++) /* lane L: v[8i+L] twice, v[8i+4+L] twice */
        r[i] = _mm512_add_ps(_mm512_shuffle_ps(q[2 * i], q[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(q[2 * i], q[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lane L: v[L], v[4+L], v[8+L], v[12+L] */
    __m512 t = _mm512_add_ps(_mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* element 4L+e holds v[4e+L]: transpose the 4 x 4 index */
    const __m512i idx = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_permutexvar_ps(idx, t);
}

/* An MB x NB tile of dot products over k. hw: vdpbf16ps on bf16 (32 elements a step);
 * otherwise f32 FMAs on elements widened from dt (16 a step). */
INLINE void dot_tile(const int MB, const int NB, const bool hw, const em_dtype dt, int64_t k,
                     const char *x, int64_t ldx, const char *w, int64_t ldw, const char *pf,
                     int pf_rows, float out[4][4]) {
    const size_t es = em_esize(dt);
    const int64_t step = hw ? 32 : 16;
    __m512 acc[4][4];
    for (int i = 0; i < MB; i++)
        for (int j = 0; j < NB; j++) acc[i][j] = _mm512_setzero_ps();
    int64_t kk = 0;
    for (; kk + step <= k; kk += step) {
        /* the next weight rows, fetched from DRAM into L2 while these are computed on (into
         * L1 they would hold its few fill buffers: M = 1 streamed 28 GB/s that way, 35 into L2) */
        if (pf)
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                if (j < pf_rows) _mm_prefetch(pf + (size_t)(j * ldw + kk) * es, _MM_HINT_T1);
        if (hw) {
            __m512i wv[4];
            for (int j = 0; j < NB; j++) wv[j] = _mm512_loadu_si512(w + (size_t)(j * ldw + kk) * 2);
            for (int i = 0; i < MB; i++) {
                __m512bh xv = (__m512bh)_mm512_loadu_si512(x + (size_t)(i * ldx + kk) * 2);
                for (int j = 0; j < NB; j++)
                    acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, (__m512bh)wv[j]);
            }
        } else {
            __m512 wv[4];
            for (int j = 0; j < NB; j++)
                wv[j] = load16(w + (size_t)(j * ldw + kk) * es, 0xffff, dt);
            for (int i = 0; i < MB; i++) {
                __m512 xv = load16(x + (size_t)(i * ldx + kk) * es, 0xffff, dt);
                for (int j = 0; j < NB; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
            }
        }
    }
    if (kk < k) {
        if (pf) /* the last, partial line of each next row too (see dot_row_bf16) */
            for (int j = 0; j < pf_rows; j++)
                _mm_prefetch(pf + (size_t)(j * ldw + kk) * es, _MM_HINT_T1);
        if (hw) {
            __mmask32 m = mask32(k - kk);
            __m512i wv[4];
            for (int j = 0; j < NB; j++)
                wv[j] = _mm512_maskz_loadu_epi16(m, w + (size_t)(j * ldw + kk) * 2);
            for (int i = 0; i < MB; i++) {
                __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(m, x + (size_t)(i * ldx + kk) * 2);
                for (int j = 0; j < NB; j++)
                    acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, (__m512bh)wv[j]);
            }
        } else {
            __mmask16 m = mask16(k - kk);
            __m512 wv[4];
            for (int j = 0; j < NB; j++) wv[j] = load16(w + (size_t)(j * ldw + kk) * es, m, dt);
            for (int i = 0; i < MB; i++) {
                __m512 xv = load16(x + (size_t)(i * ldx + kk) * es, m, dt);
                for (int j = 0; j < NB; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
            }
        }
    }
    /* one summation order for every tile shape: results do not depend on how N was split */
    __m512 v[16];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            v[i * 4 + j] = i < MB && j < NB ? acc[i][j] : _mm512_setzero_ps();
    _mm512_storeu_ps(&out[0][0], hsum16(v));
}

#define DOT_CASE(MB, NB)                                                                           \
    case (MB - 1) * 4 + NB - 1:                                                                    \
        dot_tile(MB, NB, hw_, dt_, k, xr, ldx, wr, ldw, pf, pf_rows, out);                         \
        break;
#define DOT_CASES_MB(MB) DOT_CASE(MB, 1) DOT_CASE(MB, 2) DOT_CASE(MB, 3) DOT_CASE(MB, 4)

#define DEFINE_DOT(name, HW, DT)                                                                   \
    static void name(int64_t m, int64_t n, int64_t k, const void *x, int64_t ldx, const void *w,   \
                     int64_t ldw, void *c, int64_t ldc, em_dtype dt, const float *bias) {          \
        (void)dt;                                                                                  \
        const bool hw_ = HW;                                                                       \
        const em_dtype dt_ = DT;                                                                   \
        const size_t es = em_esize(DT);                                                            \
        for (int64_t j = 0; j < n; j += 4) {                                                       \
            int nb = n - j < 4 ? (int)(n - j) : 4;                                                 \
            const char *wr = (const char *)w + (size_t)(j * ldw) * es;                             \
            int next = n - j - 4 < 4 ? (int)(n - j - 4) : 4;                                       \
            for (int64_t i = 0; i < m; i += 4) {                                                   \
                /* tile t of the ceil(m/4) prefetches rows [t*per, (t+1)*per) of the next block */ \
                int64_t per = (4 + (m + 3) / 4 - 1) / ((m + 3) / 4), r0 = i / 4 * per;             \
                int pf_rows = (int)(r0 + per < next ? per : next - r0);                            \
                const char *pf = pf_rows > 0 ? wr + (size_t)((4 + r0) * ldw) * es : NULL;          \
                int mb = m - i < 4 ? (int)(m - i) : 4;                                             \
                const char *xr = (const char *)x + (size_t)(i * ldx) * es;                         \
                float out[4][4];                                                                   \
                switch ((mb - 1) * 4 + nb - 1) {                                                   \
                    DOT_CASES_MB(1) DOT_CASES_MB(2) DOT_CASES_MB(3) DOT_CASES_MB(4)                \
                }                                                                                  \
                for (int a = 0; a < mb; a++)                                                       \
                    for (int b = 0; b < nb; b++)                                                   \
                        store_one(c, DT, (i + a) * ldc + j + b,                                    \
                                  out[a][b] + (bias ? bias[j + b] : 0.0f));                        \
            }                                                                                      \
        }                                                                                          \
    }

/* Row streaming, for bf16 weights with vdpbf16ps and up to four rows of x (decode): each weight
 * row is read front to back, so a thread's weights are one sequential stream, as in a plain read;
 * the 4 x 4 tiles above interleave four rows, and one Zen 4 core streamed them from DRAM 10-20 %
 * slower than one stream (measured per decode step of a Qwen3-0.6B-shaped model: 1.08-1.17x).
 * Software prefetch runs a fixed distance ahead into L2; the best distance measured depends on the
 * work per line (2 KB for one or two rows of x, 6 KB for three or four: with three, 2 KB left
 * MoE groups of three rows at 55-67 % of the read bandwidth in fast phases, 6 KB 82-85 %; one
 * row at 6 KB lost 5-10 points at batch 16); near the end of the weights it runs past them,
 * which is harmless (prefetches do not fault). The x rows stay in L1. Each output is summed
 * over four accumulators (the k lines modulo 4), then pairwise, then across lanes: one order
 * whatever the thread count and for one to four rows of x alike (the tiles and the wide tile,
 * for more rows, keep one accumulator per output). */
#define DOT_STREAM_PF 2048
#define DOT_STREAM_PF_3 6144

/* MB rows of x dotted with one weight row of k bf16 values: MB vectors of partial sums in res. */
INLINE void dot_row_bf16(const int MB, int64_t k, const char *x, int64_t ldx, const char *w,
                         __m512 *res) {
    const int pf = MB >= 3 ? DOT_STREAM_PF_3 : DOT_STREAM_PF;
    __m512 acc[4][4];
    for (int i = 0; i < MB; i++)
        for (int s = 0; s < 4; s++) acc[i][s] = _mm512_setzero_ps();
    int64_t kk = 0;
    for (; kk + 128 <= k; kk += 128) { /* four 64-byte lines of the weight row */
        for (int l = 0; l < 4; l++) _mm_prefetch(w + (size_t)kk * 2 + pf + 64 * l, _MM_HINT_T1);
        for (int s = 0; s < 4; s++) {
            __m512bh wv = (__m512bh)_mm512_loadu_si512(w + (size_t)(kk + 32 * s) * 2);
            for (int i = 0; i < MB; i++)
                acc[i][s] = _mm512_dpbf16_ps(
                    acc[i][s], (__m512bh)_mm512_loadu_si512(x + (size_t)(i * ldx + kk + 32 * s) * 2),
                    wv);
        }
    }
    /* the last up-to-four lines, masked; s stays a constant so acc stays in registers */
#pragma GCC unroll 4
    for (int s = 0; s < 4; s++, kk += 32) {
        if (kk >= k) break;
        /* keep the prefetch stream whole: rows whose length is not a multiple of 128 values
         * (Gemma 4's down projection, k = 704) would otherwise leave lines to demand misses */
        _mm_prefetch(w + (size_t)kk * 2 + pf, _MM_HINT_T1);
        __mmask32 m = mask32(k - kk);
        __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(m, w + (size_t)kk * 2);
        for (int i = 0; i < MB; i++)
            acc[i][s] = _mm512_dpbf16_ps(
                acc[i][s], (__m512bh)_mm512_maskz_loadu_epi16(m, x + (size_t)(i * ldx + kk) * 2), wv);
    }
    for (int i = 0; i < MB; i++)
        res[i] = _mm512_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]),
                               _mm512_add_ps(acc[i][2], acc[i][3]));
}

/* n weight rows against MB rows of x, 16 / MB weight rows per horizontal sum. */
INLINE void dot_stream_bf16(const int MB, int64_t n, int64_t k, const char *x, int64_t ldx,
                            const char *w, int64_t ldw, void *c, int64_t ldc,
                            const float *bias) {
    const int per = 16 / MB;
    for (int64_t j0 = 0; j0 < n; j0 += per) {
        int nb = n - j0 < per ? (int)(n - j0) : per;
        __m512 v[16];
        for (int q = 0; q < 16; q++) v[q] = _mm512_setzero_ps();
        for (int jj = 0; jj < nb; jj++)
            dot_row_bf16(MB, k, x, ldx, w + (size_t)((j0 + jj) * ldw) * 2, v + jj * MB);
        float out[16];
        _mm512_storeu_ps(out, hsum16(v));
        for (int jj = 0; jj < nb; jj++)
            for (int i = 0; i < MB; i++)
                store_one(c, EM_BF16, i * ldc + j0 + jj,
                          out[jj * MB + i] + (bias ? bias[j0 + jj] : 0.0f));
    }
}

/* Five to eight rows of x (MoE groups at batches 32-64): one tile of all MB rows against NB weight
 * rows (MB x NB <= 24 accumulators in registers), so each weight vector loaded feeds MB dot
 * products; the 4 x 4 tiles split such a group into 4 + (MB - 4) rows and load every weight
 * vector twice. Each output keeps one accumulator and the same lane reduction as the tiles, so
 * the results are those of the tiles bit for bit. The next block's rows are prefetched into L2
 * one line per row per step, as in the tiles. */
INLINE void dot_wide_bf16(const int MB, const int NB, int64_t n, int64_t k, const char *x,
                          int64_t ldx, const char *w, int64_t ldw, void *c, int64_t ldc,
                          const float *bias) {
    for (int64_t j = 0; j < n; j += NB) {
        const int nb = n - j < NB ? (int)(n - j) : NB;
        const char *wr = w + (size_t)(j * ldw) * 2;
        /* a last block of fewer rows reads its first row again in place of the missing ones
         * (their sums are dropped), so the tile keeps its constant shape */
        const char *wrow[4];
        for (int b = 0; b < NB; b++) wrow[b] = wr + (size_t)((b < nb ? b : 0) * ldw) * 2;
        int pf_rows = n - j - NB < NB ? (int)(n - j - NB) : NB;
        const char *pf = wr + (size_t)(NB * ldw) * 2;
        __m512 acc[8][4];
        for (int i = 0; i < MB; i++)
            for (int b = 0; b < NB; b++) acc[i][b] = _mm512_setzero_ps();
        int64_t kk = 0;
        for (; kk + 32 <= k; kk += 32) {
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++)
                if (b < pf_rows) _mm_prefetch(pf + (size_t)(b * ldw + kk) * 2, _MM_HINT_T1);
            __m512i wv[4];
            for (int b = 0; b < NB; b++) wv[b] = _mm512_loadu_si512(wrow[b] + (size_t)kk * 2);
            for (int i = 0; i < MB; i++) {
                __m512bh xv = (__m512bh)_mm512_loadu_si512(x + (size_t)(i * ldx + kk) * 2);
                for (int b = 0; b < NB; b++)
                    acc[i][b] = _mm512_dpbf16_ps(acc[i][b], xv, (__m512bh)wv[b]);
            }
        }
        if (kk < k) {
            for (int b = 0; b < pf_rows; b++)
                _mm_prefetch(pf + (size_t)(b * ldw + kk) * 2, _MM_HINT_T1);
            __mmask32 m = mask32(k - kk);
            __m512i wv[4];
            for (int b = 0; b < NB; b++)
                wv[b] = _mm512_maskz_loadu_epi16(m, wrow[b] + (size_t)kk * 2);
            for (int i = 0; i < MB; i++) {
                __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(m, x + (size_t)(i * ldx + kk) * 2);
                for (int b = 0; b < NB; b++)
                    acc[i][b] = _mm512_dpbf16_ps(acc[i][b], xv, (__m512bh)wv[b]);
            }
        }
        /* outputs in row-major (i, b) order, 16 per horizontal sum */
        float out[32];
        for (int q0 = 0; q0 < MB * NB; q0 += 16) {
            __m512 v[16];
            for (int q = 0; q < 16; q++)
                v[q] = q0 + q < MB * NB ? acc[(q0 + q) / NB][(q0 + q) % NB] : _mm512_setzero_ps();
            _mm512_storeu_ps(out + q0, hsum16(v));
        }
        for (int i = 0; i < MB; i++)
            for (int b = 0; b < nb; b++)
                store_one(c, EM_BF16, i * ldc + j + b,
                          out[i * NB + b] + (bias ? bias[j + b] : 0.0f));
    }
}

DEFINE_DOT(dot_bf16, true, EM_BF16)
DEFINE_DOT(dot_bf16_soft, false, EM_BF16)
DEFINE_DOT(dot_f32, false, EM_F32)
DEFINE_DOT(dot_f16, false, EM_F16)

/* bf16 with vdpbf16ps: row streaming for one to four rows of x, one wide tile for five to eight
 * (four weight rows a tile up to six rows of x, three beyond: at most 24 accumulators), 4 x 4
 * tiles for more */
static void dot_bf16_any(int64_t m, int64_t n, int64_t k, const void *x, int64_t ldx,
                         const void *w, int64_t ldw, void *c, int64_t ldc, em_dtype dt,
                         const float *bias) {
    switch (m) {
    case 1: dot_stream_bf16(1, n, k, x, ldx, w, ldw, c, ldc, bias); break;
    case 2: dot_stream_bf16(2, n, k, x, ldx, w, ldw, c, ldc, bias); break;
    case 3: dot_stream_bf16(3, n, k, x, ldx, w, ldw, c, ldc, bias); break;
    case 4: dot_stream_bf16(4, n, k, x, ldx, w, ldw, c, ldc, bias); break;
    case 5: dot_wide_bf16(5, 4, n, k, x, ldx, w, ldw, c, ldc, bias); break;
    case 6: dot_wide_bf16(6, 4, n, k, x, ldx, w, ldw, c, ldc, bias); break;
    case 7: dot_wide_bf16(7, 3, n, k, x, ldx, w, ldw, c, ldc, bias); break;
    case 8: dot_wide_bf16(8, 3, n, k, x, ldx, w, ldw, c, ldc, bias); break;
    default: dot_bf16(m, n, k, x, ldx, w, ldw, c, ldc, dt, bias);
    }
}

em_gemm_dot_fn em_gemm_dot_avx512(em_dtype dt, bool bf16_hw) {
    switch (dt) {
    case EM_F32: return dot_f32;
    case EM_F16: return dot_f16;
    case EM_BF16: return bf16_hw ? dot_bf16_any : dot_bf16_soft;
    default: return NULL;
    }
}

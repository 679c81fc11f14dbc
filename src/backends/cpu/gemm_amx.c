/*
 * The bf16 microkernel of the packed GEMM engine on AMX (Intel Sapphire Rapids and later):
 * C[16 x 64] += A[16 x 32k] @ B[32k x 64] per k tile, in four f32 accumulator tiles.
 *
 * tdpbf16ps multiplies a 16 x 32 bf16 A tile (rows contiguous along k, 64 bytes each) by a B
 * tile of 16 k pairs x 16 columns (each 32-bit word the (k, k+1) pair of one column: the BF16X2
 * panel layout of gemm.h) into a 16 x 16 f32 tile: 8192 multiply-adds, where one core's FMA units
 * do 32 (f32) per cycle. One thread measured 3.1 TFLOP/s of tdpbf16ps against 194 GFLOP/s of
 * AVX-512 FMA and 105 of vdpbf16ps on the machine this was written on (a Sapphire Rapids VM).
 *
 * Panels (format EM_GEMM_FMT_BF16X2_T16, whose k steps are rounded up to whole tiles of 16
 * pairs, zero-filled): a B panel is the BF16X2 layout with W = 64 words a step; an A panel
 * (W = 16) is 16 rows of ksteps pairs each, row after row, so that a tile is 16 rows of 64 bytes
 * at a row stride of the panel's depth. The pack function tells the two apart by W.
 *
 * Tile state: the kernel level reaches this file only where em_cpu_amx() (Linux granted the
 * tile data state). The tile configuration is loaded once per block of the driver (the kernel's
 * begin hook), not per microkernel call: ldtilecfg per call took a sixth of the kernel's time. A
 * block runs on one thread with nothing else in between, so another library's configuration
 * (loaded in the same thread between two of Ember's calls) cannot be in force inside one.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/amx_config.h"
#include "backends/cpu/cvt_avx512.h"
#include "backends/cpu/gemm.h"

#define INLINE static inline __attribute__((always_inline))

#define AMX_MR 16
#define AMX_NR 64
#define TILE_PAIRS 16 /* k pairs (32 bf16) in a tile's depth */

/* ---- packers ---- */

/* The A layout: `width` of 16 rows, row w's pair s at word w*ks + s; rows past width and pairs
 * past kc are zeros. */
static void pack_a(uint32_t *d, int width, int64_t kc, const uint16_t *s, int64_t sw,
                   int64_t sk) {
    const int64_t ks = em_gemm_ksteps(EM_GEMM_FMT_BF16X2_T16, kc);
    for (int w = 0; w < AMX_MR; w++) {
        uint16_t *row = (uint16_t *)(d + w * ks);
        int64_t k = 0;
        if (w < width) {
            const uint16_t *src = s + w * sw;
            if (sk == 1) {
                memcpy(row, src, (size_t)kc * 2);
                k = kc;
            } else {
                for (; k < kc; k++) row[k] = src[k * sk];
            }
        }
        memset(row + k, 0, (size_t)(2 * ks - k) * 2);
    }
}

/* 16 rows of 16 words (r[i] = row i) -> r[j] = column j. */
INLINE void transpose16(__m512i *r) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* r[4q + c] now holds, in 128-bit lane L, the words c, c+4, ... of rows 4L.. of group q:
     * exchange the lanes across the four groups */
    for (int c = 0; c < 4; c++) {
        __m512i a = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88);
        __m512i b = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xdd);
        __m512i e = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88);
        __m512i f = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xdd);
        t[c] = _mm512_shuffle_i32x4(a, e, 0x88);
        t[8 + c] = _mm512_shuffle_i32x4(a, e, 0xdd);
        t[4 + c] = _mm512_shuffle_i32x4(b, f, 0x88);
        t[12 + c] = _mm512_shuffle_i32x4(b, f, 0xdd);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

/*
 * The B layout: `width` of 64 lines (columns of B), step s holding the pairs (2s, 2s+1) of the
 * 64 lines. Lines contiguous along k (sk == 1: B = W^T of a weight W [N, K]) are transposed 16
 * lines x 16 pairs at a time; lines contiguous along the width (sw == 1: a row-major B) take two
 * rows of B per step and interleave them; other strides, one value at a time.
 */
static void pack_b(uint32_t *d, int width, int64_t kc, const uint16_t *s, int64_t sw,
                   int64_t sk) {
    const int64_t ks = em_gemm_ksteps(EM_GEMM_FMT_BF16X2_T16, kc), full = kc / 32;
    if (sk == 1) {
        for (int g = 0; g < AMX_NR; g += 16) {
            const int lines = width - g < 0 ? 0 : width - g > 16 ? 16 : width - g;
            for (int64_t c = 0; c < ks / 16; c++) {
                __m512i r[16];
                const int64_t k0 = 32 * c, left = kc - k0;
                const __mmask32 m = c < full ? 0xffffffffu
                                   : left <= 0 ? 0
                                               : (__mmask32)((1ull << left) - 1);
                for (int q = 0; q < 16; q++)
                    r[q] = q < lines ? _mm512_maskz_loadu_epi16(m, s + (g + q) * sw + k0)
                                     : _mm512_setzero_si512();
                transpose16(r);
                for (int p = 0; p < 16; p++)
                    _mm512_storeu_si512(d + (16 * c + p) * AMX_NR + g, r[p]);
            }
        }
        return;
    }
    if (sw == 1) {
        /* two k rows, each contiguous along the 64 lines: interleave their 16-bit values */
        const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
                                            40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33,
                                            1, 32, 0);
        const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
        const __mmask32 m0 = width >= 32 ? 0xffffffffu : (__mmask32)((1ull << width) - 1);
        const __mmask32 m1 = width <= 32   ? 0
                             : width >= 64 ? 0xffffffffu
                                           : (__mmask32)((1ull << (width - 32)) - 1);
        for (int64_t p = 0; p < ks; p++) {
            const int64_t k = 2 * p;
            __m512i r0a = _mm512_setzero_si512(), r0b = r0a, r1a = r0a, r1b = r0a;
            if (k < kc) {
                r0a = _mm512_maskz_loadu_epi16(m0, s + k * sk);
                r0b = _mm512_maskz_loadu_epi16(m1, s + k * sk + 32);
            }
            if (k + 1 < kc) {
                r1a = _mm512_maskz_loadu_epi16(m0, s + (k + 1) * sk);
                r1b = _mm512_maskz_loadu_epi16(m1, s + (k + 1) * sk + 32);
            }
            uint32_t *o = d + p * AMX_NR;
            _mm512_storeu_si512(o, _mm512_permutex2var_epi16(r0a, lo, r1a));
            _mm512_storeu_si512(o + 16, _mm512_permutex2var_epi16(r0a, hi, r1a));
            _mm512_storeu_si512(o + 32, _mm512_permutex2var_epi16(r0b, lo, r1b));
            _mm512_storeu_si512(o + 48, _mm512_permutex2var_epi16(r0b, hi, r1b));
        }
        return;
    }
    uint16_t *h = (uint16_t *)d;
    for (int64_t p = 0; p < ks; p++)
        for (int w = 0; w < AMX_NR; w++) {
            const int64_t k = 2 * p;
            uint16_t lo = 0, hi = 0;
            if (w < width && k < kc) lo = s[w * sw + k * sk];
            if (w < width && k + 1 < kc) hi = s[w * sw + (k + 1) * sk];
            h[2 * (p * AMX_NR + w)] = lo;
            h[2 * (p * AMX_NR + w) + 1] = hi;
        }
}

static void pack(void *dst, int W, int width, int64_t kc, const void *src, em_dtype dt,
                 int64_t sw, int64_t sk) {
    (void)dt; /* bf16 only: the kernel is chosen for bf16 operands */
    if (W == AMX_MR)
        pack_a(dst, width, kc, src, sw, sk);
    else
        pack_b(dst, width, kc, src, sw, sk);
}

/* ---- the microkernel ---- */

/* tmm0-3: C (16 rows of 16 f32); tmm4: A; tmm5-7: B (16 pairs x 16 columns) */
static void configure(void) { _tile_loadconfig(&em_amx_config_16x64); }

/* The f32 tile (16 x 64, row stride 64) into t: accumulated, biased, rounded as gemm.h says. */
static void store(const float *cbuf, int mr, int nr, const em_gemm_tile *t) {
    const size_t es = em_esize(t->out_dt);
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j += 16) {
            const __mmask16 m = nr - j >= 16 ? 0xffff : (__mmask16)((1u << (nr - j)) - 1);
            __m512 v = _mm512_loadu_ps(cbuf + i * AMX_NR + j);
            float *acc = t->acc ? t->acc + i * t->ld_acc + j : NULL;
            if (t->load_acc) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, acc));
            if (!t->final) {
                _mm512_mask_storeu_ps(acc, m, v);
                continue;
            }
            if (t->bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, t->bias + j));
            char *out = (char *)t->out + (size_t)(i * t->ld_out + j) * es;
            if (t->out_dt == EM_F32)
                _mm512_mask_storeu_ps(out, m, v);
            else
                _mm256_mask_storeu_epi16(out, m, em_cvt_bf16_avx512(v));
        }
}

static void ukr(int64_t ks, const void *pa_, const void *pb_, int mr, int nr,
                const em_gemm_tile *t) {
    const char *pa = pa_, *pb = pb_;
    const size_t lda = (size_t)ks * 4, ldb = AMX_NR * 4;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t c = 0; c < ks / TILE_PAIRS; c++) {
        const char *b = pb + (size_t)c * TILE_PAIRS * ldb;
        _tile_loadd(4, pa + (size_t)c * 64, lda);
        _tile_loadd(5, b, ldb);
        _tile_loadd(6, b + 64, ldb);
        _tile_loadd(7, b + 128, ldb);
        _tile_dpbf16ps(0, 4, 5);
        _tile_loadd(5, b + 192, ldb);
        _tile_dpbf16ps(1, 4, 6);
        _tile_dpbf16ps(2, 4, 7);
        _tile_dpbf16ps(3, 4, 5);
    }
    _Alignas(64) float cbuf[AMX_MR * AMX_NR];
    _tile_stored(0, cbuf, AMX_NR * 4);
    _tile_stored(1, cbuf + 16, AMX_NR * 4);
    _tile_stored(2, cbuf + 32, AMX_NR * 4);
    _tile_stored(3, cbuf + 48, AMX_NR * 4);
    store(cbuf, mr, nr, t);
}

/* Blocks: a k block of 2048 (B panel 256 KB, A block 128 x 4 KB, in a 2 MB L2) lets a bf16 C of
 * K <= 2048 take its sums straight from the tiles, without f32 partial sums between k blocks:
 * 2048^3 on 2 threads 14.7 ms with kc 1024 (a sixth of the kernel re-reading those sums), 10.6-
 * 11.8 with 2048, 11.9-12.6 with 4096. */
static const em_gemm_kernel kernel_bf16 = {
    .name = "amx bf16 16x64",
    .fmt = EM_GEMM_FMT_BF16X2_T16,
    .mr = AMX_MR,
    .nr = AMX_NR,
    .kc = 2048,
    .mc = 128,
    .nc = 1024,
    .pack = pack,
    .ukr = ukr,
    .begin = configure,
};

const em_gemm_kernel *em_gemm_kernel_amx(void) { return &kernel_bf16; }

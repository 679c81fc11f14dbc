/*
 * AVX2 + FMA GEMM kernels (portable twins: gemm_kern.inc, compiled as gemm_generic.c).
 *
 * Microkernel: a 6 x 16 f32 tile in 12 ymm accumulators. Per k step it loads two vectors of the
 * B panel and broadcasts six words of the A panel from memory (a broadcast load needs no ALU
 * port): 12 FMAs against 8 loads, which two FMA pipes (Haswell to Zen 4) issue at one k step
 * every 6 cycles with 12 independent chains hiding the 4-5 cycle latency. AVX2 has no bf16 dot
 * instruction, so bf16 and f16 operands are widened to f32 while packing (bf16 by a shift, f16
 * with F16C) and every dtype runs on this one f32 microkernel.
 *
 * Packers: fast paths for the two layouts that matter (lines contiguous along the panel width:
 * a row copy; lines contiguous along k: 8 x 8 transposes), everything else through
 * em_gemm_pack_generic.
 *
 * Dot engine (x @ w^T with w [N, K], decode): x is widened once per call into an f32 buffer (for
 * bf16 each 16-value chunk split into its even and odd elements, matching the shift / mask split
 * of the weight words, see cvt_avx2.h); one to four rows of x stream each weight row front to
 * back (one sequential stream per thread, as a plain read), more rows use tiles of 4 rows of x by
 * 3 weight rows that keep 12 accumulators in registers.
 */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cvt_avx2.h"
#include "backends/cpu/gemm.h"
#include "core/bf16_inline.h"

#define MR 6
#define NR 16
#define INLINE static inline __attribute__((always_inline))

/* Lines packed by transposition are many separate streams (one per row of A or of a weight):
 * each is fetched this many words ahead into L2 (see gemm_avx512.c). */
#define PACK_PF_WORDS 128
/* Lines packed by copy are a matrix stride apart: fetched this many rows ahead. */
#define PACK_PF_ROWS 16

/* ---- conversions ---- */

/* Eight elements of dtype dt at p as f32. */
INLINE __m256 load8(const void *p, em_dtype dt) {
    if (dt == EM_F32) return _mm256_loadu_ps(p);
    if (dt == EM_BF16) return em_load_bf16x8_avx2(p);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* n (< 8) elements, the rest zeros. */
INLINE __m256 load_part(const void *p, em_dtype dt, int n) {
    float t[8] = {0};
    for (int i = 0; i < n; i++)
        t[i] = dt == EM_F32    ? ((const float *)p)[i]
               : dt == EM_BF16 ? em_bf16_to_f32_inline(((const uint16_t *)p)[i])
                               : _cvtsh_ss(((const uint16_t *)p)[i]);
    return _mm256_loadu_ps(t);
}

static void store_one(void *c, em_dtype dt, int64_t i, float v) {
    switch (dt) {
    case EM_F32: ((float *)c)[i] = v; break;
    case EM_BF16: ((uint16_t *)c)[i] = em_bf16_from_f32_inline(v); break;
    default: ((uint16_t *)c)[i] = _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT); break;
    }
}

/* ---- tile store ---- */

/* Eight sums to out (dtype dt), first n of them. */
INLINE void store8(void *out, em_dtype dt, __m256 v, int n) {
    if (n == 8) {
        switch (dt) {
        case EM_F32: _mm256_storeu_ps(out, v); return;
        case EM_BF16: _mm_storeu_si128(out, em_cvt_bf16_avx2(v)); return;
        default: _mm_storeu_si128(out, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); return;
        }
    }
    float t[8];
    _mm256_storeu_ps(t, v);
    for (int j = 0; j < n; j++) store_one(out, dt, j, t[j]);
}

INLINE void store_half(const em_gemm_tile *t, float *acc, char *out, __m256 v, int n,
                       __m256 bias) {
    if (t->load_acc) v = _mm256_add_ps(v, n == 8 ? _mm256_loadu_ps(acc) : load_part(acc, EM_F32, n));
    if (!t->final) {
        store8(acc, EM_F32, v, n);
        return;
    }
    store8(out, t->out_dt, _mm256_add_ps(v, bias), n);
}

INLINE void store_tile(const __m256 *c0, const __m256 *c1, const int mr, int nr,
                       const em_gemm_tile *t) {
    int n0 = nr < 8 ? nr : 8, n1 = nr - 8 < 0 ? 0 : nr - 8;
    __m256 bias0 = _mm256_setzero_ps(), bias1 = bias0;
    if (t->final && t->bias) {
        bias0 = n0 == 8 ? _mm256_loadu_ps(t->bias) : load_part(t->bias, EM_F32, n0);
        if (n1) bias1 = n1 == 8 ? _mm256_loadu_ps(t->bias + 8) : load_part(t->bias + 8, EM_F32, n1);
    }
    size_t es = em_esize(t->out_dt);
    /* unrolled, so that the accumulators stay registers (an indexed array would live in memory
     * through the k loop) */
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++) {
        float *acc = t->acc ? t->acc + i * t->ld_acc : NULL;
        char *out = (char *)t->out + (size_t)(i * t->ld_out) * es;
        store_half(t, acc, out, c0[i], n0, bias0);
        if (n1) store_half(t, acc ? acc + 8 : NULL, out + 8 * es, c1[i], n1, bias1);
    }
}

/* ---- microkernel ---- */

INLINE void ukr_body(const int mr, int64_t ks, const float *pa, const float *pb, int nr,
                     const em_gemm_tile *t) {
    __m256 c0[MR], c1[MR];
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++) c0[i] = c1[i] = _mm256_setzero_ps();
    /* the C tile is read or written after the k loop: start fetching its lines now (rows are a
     * matrix stride apart, so the hardware prefetcher cannot guess them) */
    if (t->load_acc || t->out_dt == EM_F32) {
        const float *c = t->load_acc ? t->acc : (const float *)t->out;
        int64_t ld = t->load_acc ? t->ld_acc : t->ld_out;
        for (int i = 0; i < mr; i++) {
            _mm_prefetch((const char *)(c + i * ld), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + i * ld + 15), _MM_HINT_T0);
        }
    }
#pragma GCC unroll 4
    for (int64_t k = 0; k < ks; k++) {
        const __m256 b0 = _mm256_load_ps(pb);
        const __m256 b1 = _mm256_load_ps(pb + 8);
#pragma GCC unroll 6
        for (int i = 0; i < mr; i++) {
            const __m256 a = _mm256_broadcast_ss(pa + i);
            c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
        }
        pa += MR;
        pb += NR;
    }
    store_tile(c0, c1, mr, nr, t);
}

static void ukr_f32(int64_t ks, const void *pa_, const void *pb_, int mr, int nr,
                    const em_gemm_tile *t) {
    const float *pa = pa_, *pb = pb_;
    switch (mr) {
    case 6: ukr_body(6, ks, pa, pb, nr, t); break;
    case 5: ukr_body(5, ks, pa, pb, nr, t); break;
    case 4: ukr_body(4, ks, pa, pb, nr, t); break;
    case 3: ukr_body(3, ks, pa, pb, nr, t); break;
    case 2: ukr_body(2, ks, pa, pb, nr, t); break;
    default: ukr_body(1, ks, pa, pb, nr, t); break;
    }
}

/* ---- packers ---- */

/* In-register transpose of an 8 x 8 block of floats (r[i] = row i -> r[j] = column j). */
INLINE void transpose8(__m256 *r) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* Lines contiguous along k (sk == 1): groups of 8 lines, 8 k steps at a time, transposed. The
 * 8-float row stores of a group overlap the next group's first words when W is not a multiple
 * of 8 (W = 6: each k step's store spills two zeros into the next step, rewritten by it) and
 * may run 2 words past the panel, which the packer contract allows. */
INLINE void pack_transposed(float *d, int W, int width, int64_t kc, const char *s, em_dtype dt,
                            int64_t sw) {
    const size_t es = em_esize(dt);
    const int64_t kfull = kc & ~(int64_t)7;
    for (int g = 0; g < W; g += 8) {
        int lines = width - g < 0 ? 0 : width - g > 8 ? 8 : width - g;
        for (int64_t k0 = 0; k0 < kc; k0 += 8) {
            __m256 r[8];
            for (int q = 0; q < 8; q++) {
                const char *p = s + (size_t)((g + q) * sw + k0) * es;
                if (q >= lines) {
                    r[q] = _mm256_setzero_ps();
                    continue;
                }
                r[q] = k0 < kfull ? load8(p, dt) : load_part(p, dt, (int)(kc - k0));
                _mm_prefetch(p + PACK_PF_WORDS * es, _MM_HINT_T1);
            }
            transpose8(r);
            int steps = kc - k0 < 8 ? (int)(kc - k0) : 8;
            if (W - g >= 8 || g == 0) {
                for (int q = 0; q < steps; q++) _mm256_storeu_ps(d + (k0 + q) * W + g, r[q]);
            } else {
                /* a narrower group after a full one: exactly W - g words per step (a full
                 * store would spill into the next step's first group, already written) */
                float t[8];
                for (int q = 0; q < steps; q++) {
                    _mm256_storeu_ps(t, r[q]);
                    memcpy(d + (k0 + q) * W + g, t, (size_t)(W - g) * sizeof *t);
                }
            }
        }
    }
}

static void pack_f32(void *dst, int W, int width, int64_t kc, const void *src, em_dtype dt,
                     int64_t sw, int64_t sk) {
    const char *s = src;
    const size_t es = em_esize(dt);
    float *d = dst;
    if (sw == 1 && W == NR && width == NR) {
        /* a row of B per k step: 16 contiguous values */
        for (int64_t k = 0; k < kc; k++, d += W) {
            const char *p = s + (size_t)(k * sk) * es;
            const char *ahead = s + (size_t)((k + PACK_PF_ROWS) * sk) * es;
            _mm_prefetch(ahead, _MM_HINT_T1);
            _mm_prefetch(ahead + (size_t)W * es - 1, _MM_HINT_T1);
            _mm256_store_ps(d, load8(p, dt));
            _mm256_store_ps(d + 8, load8(p + 8 * es, dt));
        }
        return;
    }
    if (sk == 1) {
        pack_transposed(d, W, width, kc, s, dt, sw);
        return;
    }
    em_gemm_pack_generic(dst, EM_GEMM_FMT_F32, W, width, kc, src, dt, sw, sk);
}

/* Blocks (Zen 3: 32 KB L1, 512 KB L2 per core): the 16 x kc B micro-panel (16 KB) stays in L1
 * while the mc x kc A block (72 KB... see docs/performance-avx2.md for the sizes tried) streams
 * from L2; nc keeps a kc x nc B block within a few MB of L3. */
static const em_gemm_kernel kernel_f32 = {
    .name = "avx2 f32",
    .fmt = EM_GEMM_FMT_F32,
    .mr = MR,
    .nr = NR,
    .kc = 256,
    .mc = 72,
    .nc = 3072,
    .pack = pack_f32,
    .ukr = ukr_f32,
};

const em_gemm_kernel *em_gemm_kernel_avx2(em_dtype dt) {
    (void)dt; /* bf16 and f16 are widened by the packer */
    return &kernel_f32;
}

/* ---- dot engine ---- */

/* x values in f32 per call, on the stack up to this many floats; rows widened at a time */
#define DOT_X_STACK 8192
#define DOT_ROW_BLOCK 32
/* Bytes ahead of the current position that a streamed weight row is fetched into L2. One or two
 * rows of x: 512 (at 2048, the AVX-512 value, M = 1 read its weights at 0.45-0.64 of the read
 * probe on a loaded Zen 4 host, at 512 0.76-0.96, with none 0.70-0.90; bench/lab_read dot,
 * docs/notes/2026-12-04-avx2-read.md). */
#define DOT_STREAM_PF 512
#define DOT_STREAM_PF_3 4096

/* Sixteen weights at p (dtype DT) as two f32 vectors; for bf16 the even and odd elements. */
INLINE __m256 wlo(const em_dtype DT, const char *p) {
    if (DT == EM_BF16) return em_bf16_even_avx2(_mm256_loadu_si256((const __m256i *)p));
    if (DT == EM_F32) return _mm256_loadu_ps((const float *)p);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

INLINE __m256 whi(const em_dtype DT, const char *p) {
    if (DT == EM_BF16) return em_bf16_odd_avx2(_mm256_loadu_si256((const __m256i *)p));
    if (DT == EM_F32) return _mm256_loadu_ps((const float *)p + 8);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p + 1));
}

/* x rows [m, k] -> xs [m, kp] f32 (kp = k rounded up to 16, zeros beyond k); bf16 chunks of 16
 * are stored as their 8 even elements then their 8 odd ones, the order of wlo / whi. */
static void widen_x(float *xs, int64_t kp, const void *x, int64_t ldx, int64_t m, int64_t k,
                    em_dtype dt) {
    const size_t es = em_esize(dt);
    for (int64_t i = 0; i < m; i++) {
        const char *xr = (const char *)x + (size_t)(i * ldx) * es;
        float *d = xs + i * kp;
        for (int64_t c = 0; c < kp; c += 16) {
            char tail[64];
            const char *p = xr + (size_t)c * es;
            if (c + 16 > k) {
                memset(tail, 0, sizeof tail);
                memcpy(tail, p, (size_t)(k - c) * es);
                p = tail;
            }
            if (dt == EM_BF16) {
                _mm256_storeu_ps(d + c, wlo(EM_BF16, p));
                _mm256_storeu_ps(d + c + 8, whi(EM_BF16, p));
            } else {
                _mm256_storeu_ps(d + c, load8(p, dt));
                _mm256_storeu_ps(d + c + 8, load8(p + 8 * es, dt));
            }
        }
    }
}

/* The last partial 16-value chunk of a weight row, zero-padded (garbage past the row could be a
 * NaN or an Inf even where x is zero). */
INLINE const char *wtail(const em_dtype DT, const char *w, int64_t len, char *buf) {
    memset(buf, 0, 64);
    memcpy(buf, w, (size_t)len * em_esize(DT));
    return buf;
}

/*
 * MB (1..4) rows of x against one weight row, streamed front to back; MB vectors of partial sums
 * in res. One or two rows keep two accumulator pairs per row (the 4-cycle FMA latency would
 * otherwise bound a single row's chain), three or four one pair.
 */
INLINE void row_dot(const em_dtype DT, const int MB, int64_t k, const float *xs, int64_t kp,
                    const char *w, __m256 *res) {
    const int A = MB <= 2 ? 2 : 1;
    const size_t es = em_esize(DT);
    const int64_t pf = MB >= 3 ? DOT_STREAM_PF_3 : DOT_STREAM_PF;
    __m256 acc[4][4];
    #pragma GCC unroll 4
    for (int i = 0; i < MB; i++)
        #pragma GCC unroll 4
        for (int a = 0; a < 2 * A; a++) acc[i][a] = _mm256_setzero_ps();
    int64_t kk = 0;
    for (; kk + 32 <= k; kk += 32) {
        const char *p = w + (size_t)kk * es;
        _mm_prefetch(p + pf, _MM_HINT_T1);
        if (es == 4) _mm_prefetch(p + pf + 64, _MM_HINT_T1);
#pragma GCC unroll 2
        for (int s = 0; s < 2; s++) {
            const char *q = p + (size_t)(16 * s) * es;
            const int a = A == 2 ? 2 * s : 0;
            const __m256 lo = wlo(DT, q), hi = whi(DT, q);
            #pragma GCC unroll 4
            for (int i = 0; i < MB; i++) {
                const float *xr = xs + i * kp + kk + 16 * s;
                acc[i][a] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(xr), acc[i][a]);
                acc[i][a + 1] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(xr + 8), acc[i][a + 1]);
            }
        }
    }
    for (; kk < k; kk += 16) {
        char buf[64];
        const char *q = kk + 16 <= k ? w + (size_t)kk * es : wtail(DT, w + (size_t)kk * es, k - kk, buf);
        const __m256 lo = wlo(DT, q), hi = whi(DT, q);
        #pragma GCC unroll 4
        for (int i = 0; i < MB; i++) {
            const float *xr = xs + i * kp + kk;
            acc[i][0] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(xr), acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(xr + 8), acc[i][1]);
        }
    }
    #pragma GCC unroll 4
    for (int i = 0; i < MB; i++) {
        __m256 s = _mm256_add_ps(acc[i][0], acc[i][1]);
        if (A == 2) s = _mm256_add_ps(s, _mm256_add_ps(acc[i][2], acc[i][3]));
        res[i] = s;
    }
}

INLINE void dot_stream(const em_dtype DT, const em_dtype OT, const int MB, int64_t n, int64_t k,
                       const float *xs, int64_t kp, const char *w, int64_t ldw, void *c,
                       int64_t ldc, const float *bias) {
    const size_t es = em_esize(DT);
    for (int64_t j = 0; j < n; j++) {
        __m256 v[4];
        row_dot(DT, MB, k, xs, kp, w + (size_t)(j * ldw) * es, v);
        #pragma GCC unroll 4
        for (int i = 0; i < MB; i++)
            store_one(c, OT, i * ldc + j, em_hsum_avx2(v[i]) + (bias ? bias[j] : 0.0f));
    }
}

/* One 16-value step of a tile: the low then the high half of each weight row (rows[b]) against
 * the matching half of each x row (xs + i*kp), into acc[i][b]. */
INLINE void tile_step(const em_dtype DT, const int MB, const int NB, const char *const *rows,
                      const float *xs, int64_t kp, __m256 (*acc)[3]) {
    __m256 wv[3];
    #pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        #pragma GCC unroll 4
        for (int b = 0; b < NB; b++) wv[b] = h ? whi(DT, rows[b]) : wlo(DT, rows[b]);
        #pragma GCC unroll 4
        for (int i = 0; i < MB; i++) {
            const __m256 xv = _mm256_loadu_ps(xs + i * kp + 8 * h);
            #pragma GCC unroll 4
            for (int b = 0; b < NB; b++) acc[i][b] = _mm256_fmadd_ps(xv, wv[b], acc[i][b]);
        }
    }
}

/*
 * MB (1..4) rows of x by NB (1..3) weight rows over the whole k, one accumulator per output:
 * per 16 values, each half of a weight vector feeds MB FMAs and each x vector NB. The next
 * NB rows (pf, pf_rows of them) are fetched into L2 a line per row per step.
 */
INLINE void dot_tile(const em_dtype DT, const int MB, const int NB, int64_t k, const float *xs,
                     int64_t kp, const char *w, int64_t ldw, const char *pf, int pf_rows,
                     float *out) {
    const size_t es = em_esize(DT), lw = (size_t)ldw * es;
    __m256 acc[4][3];
    #pragma GCC unroll 4
    for (int i = 0; i < MB; i++)
        #pragma GCC unroll 4
        for (int b = 0; b < NB; b++) acc[i][b] = _mm256_setzero_ps();
    int64_t kk = 0;
    for (; kk + 16 <= k; kk += 16) {
        const char *p = w + (size_t)kk * es;
        if (pf && ((kk & 31) == 0 || es == 4))
            #pragma GCC unroll 4
            for (int b = 0; b < 3; b++)
                if (b < pf_rows) _mm_prefetch(pf + b * lw + (size_t)kk * es, _MM_HINT_T1);
        const char *rows[3] = {p, p + lw, p + 2 * lw};
        tile_step(DT, MB, NB, rows, xs + kk, kp, acc);
    }
    if (kk < k) { /* the rows' last, partial chunk, from zero-padded copies */
        char buf[3][64];
        const char *rows[3] = {buf[0], buf[1], buf[2]};
        #pragma GCC unroll 4
        for (int b = 0; b < NB; b++) wtail(DT, w + b * lw + (size_t)kk * es, k - kk, buf[b]);
        tile_step(DT, MB, NB, rows, xs + kk, kp, acc);
    }
    #pragma GCC unroll 4
    for (int i = 0; i < MB; i++)
        #pragma GCC unroll 4
        for (int b = 0; b < NB; b++) out[i * 3 + b] = em_hsum_avx2(acc[i][b]);
}

#define TILE_CASE(MB, NB)                                                                          \
    case (MB - 1) * 3 + NB - 1:                                                                    \
        dot_tile(DT, MB, NB, k, xr, kp, wr, ldw, pf, pf_rows, out);                                \
        break;
#define TILE_CASES_MB(MB) TILE_CASE(MB, 1) TILE_CASE(MB, 2) TILE_CASE(MB, 3)

/* Bytes of weight rows in a block of dot_tiles: read from DRAM by the first group of x rows
 * and from L2 by the others, while the group's x rows (4 x K f32) stay in L1. */
#define DOT_BLOCK_BYTES (128 * 1024)

/*
 * Tiles of 4 rows of x by 3 weight rows, over blocks of weight rows: within a block the groups
 * of x rows are the outer loop, so that a group's x stays in L1 while the block's weights come
 * from L2 (with the weight rows outer, every tile read its x rows from L2: 52 % of the FMA peak
 * at M = 16 with the weights in cache). Each tile fetches its share of the next block's rows
 * into L2. Every output is still one tile's sum over the whole k, as before the blocking.
 */
INLINE void dot_tiles(const em_dtype DT, const em_dtype OT, int64_t m, int64_t n, int64_t k,
                      const float *xs, int64_t kp, const void *w, int64_t ldw, void *c,
                      int64_t ldc, const float *bias) {
    const size_t es = em_esize(DT);
    int64_t jb_rows = (int64_t)(DOT_BLOCK_BYTES / ((size_t)k * es)) / 3 * 3;
    if (jb_rows < 3) jb_rows = 3;
    const int64_t groups = (m + 3) / 4;
    for (int64_t jb = 0; jb < n; jb += jb_rows) {
        const int64_t jn = n - jb < jb_rows ? n - jb : jb_rows;
        const int64_t next = n - jb - jn < jb_rows ? n - jb - jn : jb_rows;
        const int64_t tiles = (jn + 2) / 3 * groups, per = (next + tiles - 1) / tiles;
        int64_t t = 0;
        for (int64_t i = 0; i < m; i += 4) {
            const int mb = m - i < 4 ? (int)(m - i) : 4;
            const float *xr = xs + i * kp;
            for (int64_t j = jb; j < jb + jn; j += 3, t++) {
                const int nb = jb + jn - j < 3 ? (int)(jb + jn - j) : 3;
                const char *wr = (const char *)w + (size_t)(j * ldw) * es;
                const int64_t r0 = t * per;
                const int pf_rows = (int)(r0 + per < next ? per : next - r0);
                const char *pf =
                    pf_rows > 0 ? (const char *)w + (size_t)((jb + jn + r0) * ldw) * es : NULL;
                float out[12];
                switch ((mb - 1) * 3 + nb - 1) {
                    TILE_CASES_MB(1) TILE_CASES_MB(2) TILE_CASES_MB(3) TILE_CASES_MB(4)
                }
                for (int a = 0; a < mb; a++)
                    for (int b = 0; b < nb; b++)
                        store_one(c, OT, (i + a) * ldc + j + b,
                                  out[a * 3 + b] + (bias ? bias[j + b] : 0.0f));
            }
        }
    }
}

/* ---- broadcast tiles: bf16 weights against 16-row panels of x ---- */

/*
 * From 16 rows of x on, each bf16 weight is broadcast from its row (a 32-bit load of the word
 * that ends with it, shifted left by 16: exact) and multiplied with 16 rows of x at once, held
 * as x^T panels [k][16] f32. Six weight rows by two x vectors make 12 accumulators; per pair of
 * k: 12 broadcasts, 12 shifts, 4 x loads, 24 FMAs (the 4 x 3 tiles load an x vector for every
 * 2 FMAs, which bounds them by loads near 70 % of the FMA peak). docs/performance-avx2.md.
 */
#define BC_ROWS 16
#define BC_W 6

/* Rows [16, k] of x (bf16) -> xt [k][16] f32: groups of 8 rows, 8 k at a time, transposed. */
static void widen_xt(float *xt, const void *x, int64_t ldx, int64_t k) {
    const uint16_t *xb = x;
    const int64_t kfull = k & ~(int64_t)7;
    for (int g = 0; g < BC_ROWS; g += 8) {
        for (int64_t k0 = 0; k0 < k; k0 += 8) {
            __m256 r[8];
            for (int q = 0; q < 8; q++) {
                const uint16_t *p = xb + (g + q) * ldx + k0;
                r[q] = k0 < kfull ? load8(p, EM_BF16) : load_part(p, EM_BF16, (int)(k - k0));
            }
            transpose8(r);
            const int steps = k - k0 < 8 ? (int)(k - k0) : 8;
            for (int q = 0; q < steps; q++) _mm256_store_ps(xt + (k0 + q) * BC_ROWS + g, r[q]);
        }
    }
}

/* The bf16 at p as f32 in all lanes: the word starting with it, shifted (p + 3 is read) */
INLINE __m256 bc_w(const char *p) {
    __m256i v = _mm256_castps_si256(_mm256_broadcast_ss((const float *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* One k step of a tile: the weight at offset off of each row, against x^T row xk. */
INLINE void bc_step(const int NB, const char *w, size_t lw, size_t off, const float *xk,
                    __m256 (*acc)[2]) {
    const __m256 x0 = _mm256_load_ps(xk), x1 = _mm256_load_ps(xk + 8);
#pragma GCC unroll 6
    for (int b = 0; b < NB; b++) {
        const __m256 v = bc_w(w + b * lw + off);
        acc[b][0] = _mm256_fmadd_ps(v, x0, acc[b][0]);
        acc[b][1] = _mm256_fmadd_ps(v, x1, acc[b][1]);
    }
}

/*
 * NB (1..6) weight rows (bf16, lw bytes apart) by one x^T panel over the whole k: out[b][r].
 * With pf, the next tile's rows (pf, lw apart) are fetched into L2 along the way: their first
 * lines would otherwise be demand misses at every tile's start (a tile lasts a few us).
 * The last element of a row is broadcast from a copy (the word after it may not exist); every
 * other one from the word starting with it.
 */
INLINE void bc_tile(const int NB, int64_t k, const float *xt, const char *w, size_t lw,
                    const char *pf, float (*out)[BC_ROWS]) {
    __m256 acc[BC_W][2];
#pragma GCC unroll 6
    for (int b = 0; b < NB; b++) acc[b][0] = acc[b][1] = _mm256_setzero_ps();
    int64_t kk = 0;
    for (; kk + 16 < k; kk += 16) {
#pragma GCC unroll 6
        for (int b = 0; b < NB; b++) {
            _mm_prefetch(w + b * lw + 2 * kk + 1024, _MM_HINT_T0);
            if (pf) _mm_prefetch(pf + b * lw + 2 * kk, _MM_HINT_T1);
        }
#pragma GCC unroll 16
        for (int q = 0; q < 16; q++)
            bc_step(NB, w, lw, (size_t)(kk + q) * 2, xt + (kk + q) * BC_ROWS, acc);
    }
    for (; kk + 1 < k; kk++) bc_step(NB, w, lw, (size_t)kk * 2, xt + kk * BC_ROWS, acc);
    {
        uint16_t last[BC_W][2] = {{0}};
        for (int b = 0; b < NB; b++) memcpy(&last[b][0], w + b * lw + (size_t)kk * 2, 2);
        bc_step(NB, (const char *)last, sizeof last[0], 0, xt + kk * BC_ROWS, acc);
    }
#pragma GCC unroll 6
    for (int b = 0; b < NB; b++) {
        _mm256_storeu_ps(out[b], acc[b][0]);
        _mm256_storeu_ps(out[b] + 8, acc[b][1]);
    }
}

/* panels x^T panels (16 rows each, xt, k * 16 floats apart) against all n weight rows: weight
 * tiles outer, so that a tile's rows (6 x 2k bytes) stay in cache across the panels. */
INLINE void dot_bcast(const em_dtype OT, int64_t panels, int64_t n, int64_t k, const float *xt,
                      const void *w, int64_t ldw, void *c, int64_t ldc,
                      const float *bias) {
    const size_t lw = (size_t)ldw * 2;
    for (int64_t j = 0; j < n; j += BC_W) {
        const int nb = n - j < BC_W ? (int)(n - j) : BC_W;
        const char *wr = (const char *)w + (size_t)j * lw;
        const int pn = n - j - nb < BC_W ? (int)(n - j - nb) : BC_W;
        for (int64_t p = 0; p < panels; p++) {
            /* the first panel reads the tile from memory, the others from cache */
            const char *pf = p == 0 && pn > 0 ? wr + (size_t)nb * lw : NULL;
            float out[BC_W][BC_ROWS];
            const float *xp = xt + p * k * BC_ROWS;
            switch (nb) {
            case 1: bc_tile(1, k, xp, wr, lw, pf, out); break;
            case 2: bc_tile(2, k, xp, wr, lw, pf, out); break;
            case 3: bc_tile(3, k, xp, wr, lw, pf, out); break;
            case 4: bc_tile(4, k, xp, wr, lw, pf, out); break;
            case 5: bc_tile(5, k, xp, wr, lw, pf, out); break;
            default: bc_tile(6, k, xp, wr, lw, pf, out); break;
            }
            for (int r = 0; r < BC_ROWS; r++)
                for (int b = 0; b < nb; b++)
                    store_one(c, OT, (p * BC_ROWS + r) * ldc + j + b,
                              out[b][r] + (bias ? bias[j + b] : 0.0f));
        }
    }
}

/*
 * c[i, j] (dtype OT: DT, or f32 for ragged_dot's partial sums) for m rows of x. Rows are taken
 * in blocks of DOT_ROW_BLOCK, each widened once (an L2-sized buffer) and run against all n
 * weight rows; a block keeps its rows' summation order whatever n is split into, and the rows
 * of a call all take the same path, so results do not depend on the thread count.
 */
INLINE bool dot_any(const em_dtype DT, const em_dtype OT, int64_t m, int64_t n, int64_t k,
                    const void *x, int64_t ldx, const void *w, int64_t ldw, void *c, int64_t ldc,
                    const float *bias) {
    if (m <= 0 || n <= 0) return true;
    const int64_t kp = (k + 15) / 16 * 16, rb = m < DOT_ROW_BLOCK ? m : DOT_ROW_BLOCK;
    /* 64-byte aligned (kp is a multiple of 16 floats): no x load splits a cache line */
    _Alignas(64) float stack[DOT_X_STACK];
    float *xs = rb * kp <= DOT_X_STACK ? stack : aligned_alloc(64, (size_t)(rb * kp) * sizeof *xs);
    if (!xs) return false;
    const size_t es = em_esize(DT), os = em_esize(OT);
    for (int64_t i0 = 0; i0 < m; i0 += rb) {
        const int64_t mb = m - i0 < rb ? m - i0 : rb;
        void *cb = (char *)c + (size_t)(i0 * ldc) * os;
        const char *xb = (const char *)x + (size_t)(i0 * ldx) * es;
        /* bf16 from 16 rows: 16-row panels by broadcast tiles, the rest by 4 x 3 tiles (the
         * path of a row depends on its index and m only, never on n) */
        const int64_t panels = DT == EM_BF16 && m >= BC_ROWS ? mb / BC_ROWS : 0;
        if (panels) {
            const int64_t done = panels * BC_ROWS;
            for (int64_t p = 0; p < panels; p++)
                widen_xt(xs + p * k * BC_ROWS, xb + (size_t)(p * BC_ROWS * ldx) * es, ldx, k);
            dot_bcast(OT, panels, n, k, xs, w, ldw, cb, ldc, bias);
            if (done < mb) {
                float *xr = xs + done * kp; /* past the panels: done * k <= done * kp */
                widen_x(xr, kp, xb + (size_t)(done * ldx) * es, ldx, mb - done, k, DT);
                dot_tiles(DT, OT, mb - done, n, k, xr, kp, w, ldw,
                          (char *)cb + (size_t)(done * ldc) * os, ldc, bias);
            }
            continue;
        }
        widen_x(xs, kp, xb, ldx, mb, k, DT);
        switch (m <= 4 ? m : 0) { /* by m, not mb: one path for all rows of a call */
        case 1: dot_stream(DT, OT, 1, n, k, xs, kp, w, ldw, cb, ldc, bias); break;
        case 2: dot_stream(DT, OT, 2, n, k, xs, kp, w, ldw, cb, ldc, bias); break;
        case 3: dot_stream(DT, OT, 3, n, k, xs, kp, w, ldw, cb, ldc, bias); break;
        case 4: dot_stream(DT, OT, 4, n, k, xs, kp, w, ldw, cb, ldc, bias); break;
        default: dot_tiles(DT, OT, mb, n, k, xs, kp, w, ldw, cb, ldc, bias); break;
        }
    }
    if (xs != stack) free(xs);
    return true;
}

/* Without memory for the widened x, the portable engine (which needs none) does the work. */
#define DEFINE_DOT(name, DT)                                                                       \
    static void name(int64_t m, int64_t n, int64_t k, const void *x, int64_t ldx, const void *w,   \
                     int64_t ldw, void *c, int64_t ldc, em_dtype dt, const float *bias) {          \
        (void)dt;                                                                                  \
        if (!dot_any(DT, DT, m, n, k, x, ldx, w, ldw, c, ldc, bias))                               \
            em_gemm_dot_generic(DT)(m, n, k, x, ldx, w, ldw, c, ldc, DT, bias);                    \
    }
DEFINE_DOT(dot_f32, EM_F32)
DEFINE_DOT(dot_bf16, EM_BF16)
DEFINE_DOT(dot_f16, EM_F16)

bool em_gemm_dot_f32out_avx2(em_dtype dt, int64_t m, int64_t n, int64_t k, const void *x,
                             int64_t ldx, const void *w, int64_t ldw, float *c, int64_t ldc) {
    if (dt == EM_BF16) return dot_any(EM_BF16, EM_F32, m, n, k, x, ldx, w, ldw, c, ldc, NULL);
    return dot_any(EM_F32, EM_F32, m, n, k, x, ldx, w, ldw, c, ldc, NULL);
}

em_gemm_dot_fn em_gemm_dot_avx2(em_dtype dt) {
    switch (dt) {
    case EM_F32: return dot_f32;
    case EM_BF16: return dot_bf16;
    case EM_F16: return dot_f16;
    default: return NULL;
    }
}

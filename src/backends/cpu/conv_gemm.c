/*
 * conv2d as an implicit GEMM on the packed GEMM engine (gemm.h), for the shapes with enough
 * channels to fill its register tiles (em_conv_gemm_takes; the direct kernel of conv.c keeps
 * the rest).
 *
 * Per image and group: out[oc, p] = sum over k = (ic, kh, kw) of W[oc, k] * X_col[k, p], with
 * p = oh * wo + ow. W [og, cg*kh*kw] is A as it lies (contiguous weights), the NCHW output
 * [og, ho*wo] is C as it lies, and B = im2col(x) is never built: the engine asks for its kc x nr
 * panels through em_gemm_args.b_panel, and ig_panel gathers them from the image (stride,
 * padding as zeros, dilation, any input strides). Groups are a batch dimension of the product;
 * images another, or, when an image's output is small, its columns (IG_MERGE_MAX_HW). Column
 * blocks are capped at IG_NC_MAX. The engine sums every output element in one order whatever
 * the thread count, and the choices here depend on the shape only.
 *
 * The bias is per row of C (output channel) where the engine's is per column: it is added to
 * the f32 output afterwards, which rounds exactly as adding it to the accumulator would (one
 * f32 addition either way). A bf16/f16 output with a bias would round twice that way, so its
 * product keeps f32 sums (em_gemm_args.c_f32, in a buffer), and the final pass adds the bias
 * and rounds once, as the engine's own bias would.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/conv.h"
#include "backends/cpu/gemm.h"

/* Rows of B gathered at a time before the kernel's packer converts them (formats other than
 * f32 panels): a whole AMX tile's depth (32), so pieces of a BF16X2_T16 panel stay whole. */
#define IG_ROWS 32
/* The widest B panel of any kernel (AMX: 64 columns). */
#define IG_MAX_NR 64

typedef struct ig_ctx {
    em_dtype dt;
    int64_t kh, kw, taps;     /* kernel size, kh * kw */
    int64_t H, W, wo, hw;     /* input height and width, output width, output positions */
    int64_t sh, sw, ph, pw, dh, dw;
    int64_t xs_n, xs_c, xs_h, xs_w; /* input strides (elements) */
    bool rows;                      /* BF16X2 panels gathered by rows and packed (see ig_lines) */
} ig_ctx;

/* A run of a panel's columns that lies in one output row of one image. */
typedef struct ig_seg {
    int w0, len;     /* panel columns [w0, w0 + len) */
    int64_t ih0;     /* input row of tap row 0: oh * sh - ph */
    int64_t ow0;     /* output column of panel column w0 */
    int64_t xoff;    /* the image's offset in x (elements) */
} ig_seg;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Columns p of B are (image, oh, ow) = (p / hw, p % hw / wo, p % wo): one image per product, or
 * all of them when the images share one (see em_conv_gemm). */
static int segments(const ig_ctx *c, int64_t j0, int width, ig_seg *s) {
    int n = 0;
    for (int64_t p = j0, end = j0 + width; p < end;) {
        int64_t img = p / c->hw, q = p % c->hw, oh = q / c->wo, ow = q % c->wo;
        int64_t len = min64(end - p, c->wo - ow);
        s[n++] = (ig_seg){(int)(p - j0), (int)len, oh * c->sh - c->ph, ow, img * c->xs_n};
        p += len;
    }
    return n;
}

/* Output columns [lo, hi) whose input column ow * sw + off lies inside the image. */
static void valid_cols(const ig_ctx *c, int64_t off, int64_t *lo, int64_t *hi) {
    *lo = off >= 0 ? 0 : (-off + c->sw - 1) / c->sw;
    *hi = c->W - off > 0 ? (c->W - off + c->sw - 1) / c->sw : 0;
}

#define IG_MAX_KW 16

/* Row k = (ic, i, j) of X_col over the panel's columns into d (T: the element type). lo, hi:
 * valid_cols of tap column j. */
#define IG_GATHER(NAME, T)                                                                         \
    static void NAME(const ig_ctx *c, const T *x, int64_t ic, int64_t i, int64_t j, int64_t lo,   \
                     int64_t hi, const ig_seg *s, int ns, T *d) {                                  \
        const int64_t off = j * c->dw - c->pw, step = c->sw * c->xs_w;                            \
        for (int q = 0; q < ns; q++) {                                                             \
            T *o = d + s[q].w0;                                                                    \
            const int64_t ih = s[q].ih0 + i * c->dh, a = s[q].ow0, b = a + s[q].len;               \
            const int64_t v0 = max64(a, lo), v1 = min64(b, hi);                                    \
            if (ih < 0 || ih >= c->H || v1 <= v0) {                                                \
                for (int e = 0; e < s[q].len; e++) o[e] = 0;                                       \
                continue;                                                                          \
            }                                                                                      \
            for (int64_t e = a; e < v0; e++) o[e - a] = 0;                                         \
            const T *src = x + s[q].xoff + ic * c->xs_c + ih * c->xs_h + (v0 * c->sw + off) *      \
                                                                         c->xs_w;                  \
            T *dv = o + (v0 - a);                                                                  \
            if (step == 1)                                                                         \
                memcpy(dv, src, (size_t)(v1 - v0) * sizeof(T));                                    \
            else                                                                                   \
                for (int64_t e = 0; e < v1 - v0; e++) dv[e] = src[e * step];                       \
            for (int64_t e = v1; e < b; e++) o[e - a] = 0;                                         \
        }                                                                                          \
    }
IG_GATHER(gather32, uint32_t)
IG_GATHER(gather16, uint16_t)

/*
 * BF16X2 panels of a bf16 image read at stride 1 (SD's 3x3 convs on AVX512_BF16), written
 * directly. The kw taps of one (channel, kernel row) read one stretch of an input row at kw
 * shifts: each stretch (per segment, the segment's columns and the kw - 1 columns past them,
 * zeros outside the image) is copied once into a line, and the (k, k + 1) pairs are interleaved
 * from two lines' shifted windows (em_gemm_kernel.pair). Gathering each row (a memcpy per row
 * and segment, the pad columns element by element) and then interleaving the rows in the
 * kernel's packer took 9-10 % of a [2,320,64,64] conv, this 7 % (docs/notes/2026-12-04-conv-
 * pack.md); the same words come out.
 */
#define IG_LINE_MAX 320

typedef struct ig_line {
    int64_t key; /* ic * kh + i, or -1 */
    uint16_t v[IG_LINE_MAX];
} ig_line;

/* The line of (ic, i) over segments s (segment q at offset q's start plus q * (kw - 1) * dw). */
static void line_fill(const ig_ctx *c, const uint16_t *x, int64_t ic, int64_t i, const ig_seg *s,
                      int ns, uint16_t *l) {
    const int64_t ext = (c->kw - 1) * c->dw;
    for (int q = 0; q < ns; q++) {
        uint16_t *o = l + s[q].w0 + q * ext;
        const int64_t ih = s[q].ih0 + i * c->dh, n = s[q].len + ext, c0 = s[q].ow0 - c->pw;
        const int64_t v0 = max64(0, -c0), v1 = min64(n, c->W - c0);
        if (ih < 0 || ih >= c->H || v1 <= v0) {
            for (int64_t e = 0; e < n; e++) o[e] = 0;
            continue;
        }
        const uint16_t *src = x + s[q].xoff + ic * c->xs_c + ih * c->xs_h + c0;
        for (int64_t e = 0; e < v0; e++) o[e] = 0;
        for (int64_t e = v0; e < v1; e++) o[e] = src[e];
        for (int64_t e = v1; e < n; e++) o[e] = 0;
    }
}

/* A cursor over the rows k = (ic, i, j) of X_col, without divisions. */
typedef struct ig_pos {
    int64_t ic, i, j;
} ig_pos;

static void pos_next(const ig_ctx *c, ig_pos *p) {
    if (++p->j == c->kw) {
        p->j = 0;
        if (++p->i == c->kh) {
            p->i = 0;
            p->ic++;
        }
    }
}

/* lines[0..1] holding line p (filled if absent). Lines only advance along a panel, so the slot
 * not holding `keep` (the pair's other line) is free. */
static const uint16_t *line_get(const ig_ctx *c, const uint16_t *x, ig_line *lines,
                                const ig_pos *p, int64_t keep, const ig_seg *s, int ns) {
    const int64_t key = p->ic * c->kh + p->i;
    if (lines[0].key == key) return lines[0].v;
    if (lines[1].key == key) return lines[1].v;
    ig_line *l = lines[0].key != keep ? &lines[0] : &lines[1];
    l->key = key;
    line_fill(c, x, p->ic, p->i, s, ns, l->v);
    return l->v;
}

/* The portable em_gemm_kernel.pair. */
static void pair_lines(uint32_t *dst, const uint16_t *a, const uint16_t *b, int n) {
    if (b)
        for (int e = 0; e < n; e++) dst[e] = a[e] | (uint32_t)b[e] << 16;
    else
        for (int e = 0; e < n; e++) dst[e] = a[e];
}

static void ig_lines(const ig_ctx *c, const em_gemm_kernel *kern, uint32_t *dst,
                     const uint16_t *x, int64_t k0, int64_t kc, const ig_seg *s, int ns, int width,
                     int W) {
    void (*pair)(uint32_t *, const uint16_t *, const uint16_t *, int) =
        kern->pair ? kern->pair : pair_lines;
    const int64_t ext = (c->kw - 1) * c->dw;
    ig_line lines[2];
    lines[0].key = lines[1].key = -1;
    const int64_t t = k0 % c->taps;
    ig_pos p = {k0 / c->taps, t / c->kw, t % c->kw};
    for (int64_t k = 0; k < kc; k += 2, dst += W) {
        const ig_pos pa = p;
        pos_next(c, &p);
        const uint16_t *la = line_get(c, x, lines, &pa, -1, s, ns), *lb = NULL;
        int64_t jb = 0;
        if (k + 1 < kc) {
            lb = line_get(c, x, lines, &p, pa.ic * c->kh + pa.i, s, ns);
            jb = p.j;
            pos_next(c, &p);
        }
        for (int q = 0; q < ns; q++) {
            const int64_t at = s[q].w0 + q * ext;
            pair(dst + s[q].w0, la + at + pa.j * c->dw, lb ? lb + at + jb * c->dw : NULL,
                 s[q].len);
        }
        for (int e = width; e < W; e++) dst[e] = 0;
    }
}

/* em_gemm_b_panel_fn: f32 panels of an f32 image are written in place, BF16X2 panels of a bf16
 * image at stride 1 by ig_lines; other formats are gathered IG_ROWS rows at a time and handed
 * to the kernel's own packer. */
static void ig_panel(const void *ctx, const em_gemm_kernel *kern, void *dst, const void *b,
                     int64_t k0, int64_t kc, int64_t j0, int width) {
    const ig_ctx *c = ctx;
    ig_seg s[IG_MAX_NR];
    const int ns = segments(c, j0, width, s);
    const int W = kern->nr;
    const size_t es = em_esize(c->dt);
    const bool direct = kern->fmt == EM_GEMM_FMT_F32 && c->dt == EM_F32;
    if (!c->rows && kern->fmt == EM_GEMM_FMT_BF16X2 && c->dt == EM_BF16 && c->sw == 1 &&
        c->xs_w == 1 && width + ns * (c->kw - 1) * c->dw <= IG_LINE_MAX) {
        ig_lines(c, kern, dst, b, k0, kc, s, ns, width, W);
        return;
    }
    int64_t lo[IG_MAX_KW], hi[IG_MAX_KW];
    for (int64_t j = 0; j < c->kw && j < IG_MAX_KW; j++)
        valid_cols(c, j * c->dw - c->pw, &lo[j], &hi[j]);
    _Alignas(64) char tmp[IG_ROWS * IG_MAX_NR * 4];
    int64_t ic = k0 / c->taps, t = k0 % c->taps, i = t / c->kw, j = t % c->kw;
    for (int64_t k = 0; k < kc;) {
        const int64_t kn = direct ? kc : min64(IG_ROWS, kc - k);
        for (int64_t r = 0; r < kn; r++) {
            char *row = direct ? (char *)dst + (size_t)((k + r) * W) * 4 : tmp + (size_t)(r * W) * es;
            int64_t l, h;
            if (j < IG_MAX_KW) {
                l = lo[j];
                h = hi[j];
            } else {
                valid_cols(c, j * c->dw - c->pw, &l, &h);
            }
            if (es == 4)
                gather32(c, b, ic, i, j, l, h, s, ns, (uint32_t *)row);
            else
                gather16(c, b, ic, i, j, l, h, s, ns, (uint16_t *)row);
            if (direct)
                for (int e = width; e < W; e++) ((uint32_t *)row)[e] = 0;
            if (++j == c->kw) {
                j = 0;
                if (++i == c->kh) {
                    i = 0;
                    ic++;
                }
            }
        }
        if (!direct)
            kern->pack((char *)dst + (size_t)(em_gemm_ksteps(kern->fmt, k) * W) * 4, W, width, kn,
                       tmp, c->dt, 1, W);
        k += kn;
    }
}

/* ---- the choice ---- */

/* An image's output of at most this many positions shares one product with the other images
 * of the batch (columns image after image, into a buffer copied to the NCHW output after): the
 * engine packs A (the weights) once per product and column block, so per image the weights
 * were packed and read from DRAM once per image for as few as 64 columns of work ([2,1280,8,8]:
 * packing took a third of the time). From an nc block (2048 columns) on, each image already
 * fills its own column blocks and the copy would only cost. */
#define IG_MERGE_MAX_HW 1024

/* EMBER_CONV_ENGINE=direct|gemm forces one engine where it applies (tests run every conv2d
 * fixture through each; benchmarks compare them); anything else: the measured choice below. */
static int forced_engine(void) {
    const char *e = getenv("EMBER_CONV_ENGINE");
    if (!e) return 0;
    if (!strcmp(e, "direct")) return 1;
    if (!strcmp(e, "gemm")) return 2;
    return 0;
}

/* EMBER_CONV_GATHER=rows: BF16X2 panels gathered by rows and packed as before ig_lines (lab
 * comparisons: bench/lab_conv's `old`). */
static bool gather_rows(void) {
    const char *e = getenv("EMBER_CONV_GATHER");
    return e && !strcmp(e, "rows");
}

bool em_conv_gemm_takes(const em_tensor *x, const em_tensor *w, const em_tensor *bias,
                        const em_tensor *out, int64_t groups) {
    const int64_t og = w->shape[0] / groups;
    /* what the engine can express: A and C as they lie, B's panels gathered from x */
    if (!em_is_contiguous(w) || !em_is_contiguous(out) || w->dtype != x->dtype ||
        out->dtype != x->dtype || em_gemm_kernel_for(x->dtype)->nr > IG_MAX_NR)
        return false;
    for (int d = 0; d < 4; d++)
        if (x->strides[d] < 0) return false;
    int f = forced_engine();
    if (f) return f == 2;
    /* Measured (bench/lab_conv, one thread, CPU time; docs/notes/2026-12-03-conv-implicit-
     * gemm.md): the engine's 14-row tiles waste lanes on few output channels, and its B blocks
     * (kc x nc, megabytes) cost their packing and memory traffic over few rows: the direct kernel
     * wins by 1.2-2x below 64 output channels ([1,64,32,32] -> 32, [1,128,64,64] -> 64; SD's
     * conv_out to 4 channels: 1.4-2.1x), the two are even at 64-96, and the GEMM wins from 128 up
     * (SD 1.5's 3x3 convs 1.3-2x, its conv_in of 4 input channels 1.65x, VAE [1,512,64,64]
     * 3.3x). Few input channels do not hold the GEMM back (conv_in). f16 (widened to f32 while
     * packing, where the direct kernel converts all weights per call) gains 2-3x; bf16, on the
     * vdpbf16ps kernel (no AMX on that machine; the direct kernel widens it to f32 FMAs), gains
     * 1.8-3.5x in CPU time at SD 1.5's shapes, with or without a bias, 64x64 positions
     * included (2.0x at [2,320,64,64] on two threads, 2.1x on one; 2026-12-04: the 0.8x measured
     * there on 12-03 does not reproduce). */
    return og >= 128;
}

/* ---- the product ---- */

/* Column blocks of 256 positions: a B block of kc = 1024 steps is then 1 MB, within the L2,
 * where the kernel's own 2048 make it 8 MB, out to memory and back (one thread, CPU time, load
 * ~5: [2,320,64,64] 150-160 against 168-175 ms, [1,128,64,64] 14-15 against 17; the shapes of
 * up to 32x32 positions, whose images share a product, within the noise either way). */
#define IG_NC_MAX 256

/* The final pass over the output, per plane (image n, channel o): copied from the product's
 * buffer when there is one (merged: row o, columns n*hw...; else laid out as the output), plus
 * the bias. An f32 buffer of a bf16/f16 output (sums) gets the bias and is rounded once. */
typedef struct finish_job {
    em_tensor *out;
    char *buf;          /* or NULL: the output holds the product already */
    bool merged;        /* buf's layout */
    const float *bias;  /* or NULL */
    int64_t N, O, hw;
    size_t es;          /* of buf's elements */
} finish_job;

static void finish(void *user, int64_t p0, int64_t p1, int tid) {
    (void)tid;
    const finish_job *j = user;
    char *out = em_tensor_ptr(j->out);
    const size_t oes = em_esize(j->out->dtype);
    for (int64_t p = p0; p < p1; p++) {
        int64_t n = p / j->O, o = p % j->O;
        char *dst = out + (size_t)(p * j->hw) * oes;
        char *src = !j->buf ? dst
                    : j->buf + (size_t)((j->merged ? o * j->N + n : p) * j->hw) * j->es;
        if (j->es != oes) { /* f32 sums of a bf16/f16 output */
            float *v = (float *)src, b = j->bias ? j->bias[o] : 0;
            if (j->bias)
                for (int64_t e = 0; e < j->hw; e++) v[e] += b;
            em_conv_store_row(j->out, p * j->hw, v, j->hw);
            continue;
        }
        if (src != dst) memcpy(dst, src, (size_t)j->hw * oes);
        if (j->bias) {
            float *v = (float *)dst, b = j->bias[o];
            for (int64_t e = 0; e < j->hw; e++) v[e] += b;
        }
    }
}

em_status em_conv_gemm(const em_kernel_args *a) {
    const em_tensor *x = a->in[0], *w = a->in[1], *bias = a->n_in > 2 ? a->in[2] : NULL;
    em_tensor *out = a->out[0];
    const em_attr *at = a->attrs;
    const int64_t N = x->shape[0], G = at[3].i, O = w->shape[0], og = O / G, cg = w->shape[1];
    const int64_t ho = out->shape[2], wo = out->shape[3], hw = ho * wo;
    const int64_t kdepth = cg * w->shape[2] * w->shape[3];
    /* a bf16/f16 output with a bias: f32 sums in a buffer, rounded once in finish() */
    const bool sums = bias && x->dtype != EM_F32;
    const size_t es = sums ? sizeof(float) : em_esize(x->dtype);
    const bool merge = N > 1 && hw <= IG_MERGE_MAX_HW;
    ig_ctx c = {
        .dt = x->dtype,
        .kh = w->shape[2],
        .kw = w->shape[3],
        .taps = w->shape[2] * w->shape[3],
        .H = x->shape[2],
        .W = x->shape[3],
        .wo = wo,
        .hw = hw,
        .sh = at[0].v[0],
        .sw = at[0].v[1],
        .ph = at[1].v[0],
        .pw = at[1].v[1],
        .dh = at[2].v[0],
        .dw = at[2].v[1],
        .xs_n = x->strides[0],
        .xs_c = x->strides[1],
        .xs_h = x->strides[2],
        .xs_w = x->strides[3],
        .rows = gather_rows(),
    };
    em_gemm_args g = {0};
    g.m = og;
    g.k = kdepth;
    g.dtype = x->dtype;
    g.a = em_tensor_ptr(w);
    g.a_rs = kdepth;
    g.a_cs = 1;
    g.b = em_tensor_ptr(x);
    g.b_panel = ig_panel;
    g.b_ctx = &c;
    g.nc_max = IG_NC_MAX;
    g.c_f32 = sums;
    em_device *dev = em_device_cpu();
    void *buf = NULL;
    size_t got = 0;
    if (merge || sums) {
        buf = em_allocator_alloc(dev, (size_t)(O * N * hw) * es, &got);
        if (!buf)
            return em_op_fail(a->ctx, EM_ERR_OOM, "conv2d: cannot allocate %zu bytes for %lld "
                              "images' outputs", (size_t)(O * N * hw) * es, (long long)N);
    }
    if (merge) {
        /* one product per group: C [og, N*hw] at row o of the buffer [O, N*hw] */
        g.n = N * hw;
        g.ldc = N * hw;
        g.c = buf;
        g.batch_ndim = 1;
        g.batch_shape[0] = G;
        g.a_bs[0] = og * kdepth;
        g.b_bs[0] = cg * x->strides[1];
        g.c_bs[0] = og * N * hw;
    } else {
        /* one product per (image, group), C where the output lies (or laid out so in buf) */
        g.n = hw;
        g.ldc = hw;
        g.c = buf ? buf : em_tensor_ptr(out);
        g.batch_ndim = 2;
        g.batch_shape[0] = N;
        g.batch_shape[1] = G;
        g.a_bs[1] = og * kdepth;
        g.b_bs[0] = x->strides[0];
        g.b_bs[1] = cg * x->strides[1];
        g.c_bs[0] = O * hw;
        g.c_bs[1] = og * hw;
    }
    em_status st = em_gemm(&g);
    float *bf = NULL;
    if (st != EM_OK) {
        st = em_op_fail(a->ctx, st, "conv2d: cannot allocate the GEMM's packing buffers");
    } else if (bias && !(bf = em_cpu_to_f32(bias))) {
        st = em_op_fail(a->ctx, EM_ERR_OOM, "conv2d: cannot allocate %lld floats of bias",
                        (long long)O);
    } else if (buf || bf) {
        finish_job j = {out, buf, merge, bf, N, O, hw, es};
        /* ~64 KB per task */
        em_parallel_for(N * O, 1 + 16384 / hw, finish, &j);
    }
    free(bf);
    if (buf) em_allocator_free(dev, buf, got);
    return st;
}

/*
 * conv2d on the CPU: a direct convolution (no im2col), f32 accumulation, one rounding at the end.
 * Shapes with many output channels go to the implicit GEMM of conv_gemm.c instead
 * (em_conv_gemm_takes: the choice, measured per shape).
 *
 * Per image the input is copied once into a zero-padded f32 buffer whose rows are split into
 * `stride_w` phases (conv.h), so that every tap of every stride reads unit-stride runs; weights
 * are read in place when they are contiguous f32 (one sequential stream per output channel of a
 * tile), else from one f32 copy.
 *
 * The micro-kernels (conv_kern.inc, one build per instruction set) compute tiles of (a block of
 * output channels) x (a run of output positions) in registers. With stride 1 the positions run
 * on across rows of the padded width (the few columns past the output's width are computed and
 * dropped), so tiles are full whatever the image width, down to 8x8; with other strides a tile
 * stays in one output row. Work items are (channel block, chunk of positions), run on the thread
 * pool in the order that keeps the larger of (weights, image) in cache.
 *
 * This file also registers the family's other kernels (resample.c, pool.c).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/conv.h"
#include "backends/cpu/ew.h"

EM_CPU_ISA_TABLE(em_conv_isa, em_conv_isa_get, [EM_ISA_GENERIC] = em_conv_isa_generic,
                 [EM_ISA_AVX2] = EM_ISA_X86(em_conv_isa_avx2),
                 [EM_ISA_AVX512] = EM_ISA_X86(em_conv_isa_avx512))

/* ---- helpers shared with resample.c and pool.c ---- */

const float *em_conv_plane_f32(const em_tensor *t, int64_t p, float *buf) {
    int64_t C = t->shape[1], H = t->shape[2], W = t->shape[3];
    if (t->dtype == EM_F32 && em_is_contiguous(t))
        return (const float *)em_tensor_ptr(t) + p * H * W;
    const em_ew_isa *isa = em_ew_isa_get();
    size_t es = em_esize(t->dtype);
    const char *base = t->storage->data;
    int64_t off = t->offset + (p / C) * t->strides[0] + (p % C) * t->strides[1];
    for (int64_t h = 0; h < H; h++)
        isa->load[t->dtype](buf + h * W, base + (size_t)(off + h * t->strides[2]) * es,
                            t->strides[3], W);
    return buf;
}

void em_conv_store_row(em_tensor *t, int64_t off, const float *v, int64_t n) {
    char *dst = (char *)em_tensor_ptr(t) + (size_t)off * em_esize(t->dtype);
    if (t->dtype == EM_F32)
        memcpy(dst, v, (size_t)n * sizeof *v);
    else
        em_ew_isa_get()->store[t->dtype](dst, v, n);
}

/* ---- conv2d ---- */

typedef struct conv_job {
    const em_conv_isa *isa;
    em_conv_geom geom;
    em_conv_tile_fn tile;
    int ocb, nv_max;
    const em_tensor *x;
    em_tensor *out;
    int64_t n;                  /* the image being computed */
    int64_t C, H, W, O, ph, pw, sw, ho, wo, og, nblk;
    /* Flat mode (stride 1): an output row is computed over the whole padded width wq, so
     * positions m = oh * wq + ow run on across rows and tiles are full whatever the width; the
     * columns ow >= wo are dropped. Chunks are `chunk` positions. Row mode (other strides): a
     * chunk is one output row. */
    bool flat;
    int64_t span, chunk, n_chunks;
    bool blocks_outer;          /* item order: all chunks of a block, or all blocks of a chunk */
    float *xp;                  /* prepared image, [C][hp][sw][wq] (+ slack in flat mode) */
    const float *wf;            /* weights as f32, [O][cg][kh][kw] */
    const float *bias;          /* [O] or NULL */
} conv_job;

/* Channels [c0, c1) of image j->n into the padded, phase-split buffer. */
static void prep_rows(void *user, int64_t c0, int64_t c1, int tid) {
    (void)tid;
    const conv_job *j = user;
    const em_tensor *x = j->x;
    const em_ew_isa *isa = em_ew_isa_get();
    const char *base = x->storage->data;
    size_t es = em_esize(x->dtype);
    int64_t hp = j->geom.hp, sw = j->sw, wq = j->geom.wq;
    for (int64_t c = c0; c < c1; c++) {
        for (int64_t r = 0; r < hp; r++) {
            float *row = j->xp + (c * hp + r) * sw * wq;
            int64_t ih = r - j->ph;
            if (ih < 0 || ih >= j->H) {
                memset(row, 0, (size_t)(sw * wq) * sizeof *row);
                continue;
            }
            int64_t src = x->offset + j->n * x->strides[0] + c * x->strides[1] + ih * x->strides[2];
            for (int64_t p = 0; p < sw; p++) {
                float *ph = row + p * wq;
                /* phase element e holds padded column e*sw + p, input column e*sw + p - pw */
                int64_t e0 = j->pw > p ? (j->pw - p + sw - 1) / sw : 0;
                int64_t e1 = (j->W + j->pw - p + sw - 1) / sw;
                if (e0 > wq) e0 = wq;
                if (e1 > wq) e1 = wq;
                if (e1 < e0) e1 = e0;
                memset(ph, 0, (size_t)e0 * sizeof *ph);
                if (e1 > e0) {
                    int64_t col = e0 * sw + p - j->pw;
                    isa->load[x->dtype](ph + e0, base + (size_t)(src + col * x->strides[3]) * es,
                                        sw * x->strides[3], e1 - e0);
                }
                memset(ph + e1, 0, (size_t)(wq - e1) * sizeof *ph);
            }
        }
    }
}

/* Adds the bias to one tile's accumulators and writes the valid part: channels < n_oc and, for
 * each output row the tile covers, columns < wo. m0 is the tile's first position (flat mode) or
 * column (row mode, on row oh). */
static void store_tile(const conv_job *j, float *tile, int tw, int64_t n_oc, int64_t oc0,
                       int64_t oh, int64_t m0) {
    int64_t wq = j->geom.wq;
    for (int64_t o = 0; o < n_oc; o++) {
        float *acc = tile + o * tw;
        float bv = j->bias ? j->bias[oc0 + o] : 0.0f;
        int64_t plane = (j->n * j->O + oc0 + o) * j->ho;
        int64_t m = m0, end = m0 + tw;
        if (!j->flat) {
            int64_t width = j->wo - m0 < tw ? j->wo - m0 : tw;
            if (j->bias)
                for (int64_t k = 0; k < width; k++) acc[k] += bv;
            em_conv_store_row(j->out, (plane + oh) * j->wo + m0, acc, width);
            continue;
        }
        if (end > j->span) end = j->span;
        while (m < end) {
            int64_t r = m / wq, col = m % wq;
            int64_t stop = r * wq + j->wo < end ? r * wq + j->wo : end;
            if (col < j->wo) {
                float *v = acc + (m - m0);
                if (j->bias)
                    for (int64_t k = 0; k < stop - m; k++) v[k] += bv;
                em_conv_store_row(j->out, (plane + r) * j->wo + col, v, stop - m);
            }
            m = (r + 1) * wq;
        }
    }
}

/* Work items [i0, i1): (block over groups x channel blocks, chunk), in j->blocks_outer order. */
static void conv_items(void *user, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const conv_job *j = user;
    const em_conv_geom *g = &j->geom;
    _Alignas(64) float tile[EM_CONV_MAX_OCB * EM_CONV_MAX_NV * EM_CONV_MAX_VW];
    int vw = j->isa->vw, ocb = j->ocb;
    int64_t chan = g->hp * g->sw * g->wq, taps = g->kh * g->kw, nb = j->nblk * (j->O / j->og);
    for (int64_t it = i0; it < i1; it++) {
        int64_t gb = j->blocks_outer ? it / j->n_chunks : it % nb;
        int64_t ch = j->blocks_outer ? it % j->n_chunks : it / nb;
        int64_t grp = gb / j->nblk, blk = gb % j->nblk;
        const float *xg = j->xp + grp * g->cg * chan;
        int64_t oc0 = grp * j->og + blk * ocb;
        int64_t n_oc = j->og - blk * ocb < ocb ? j->og - blk * ocb : ocb;
        const float *wl[EM_CONV_MAX_OCB];
        for (int o = 0; o < ocb; o++)
            wl[o] = j->wf + (oc0 + (o < n_oc ? o : n_oc - 1)) * g->cg * taps;
        /* flat: positions [m, end) of row 0; rows: columns [0, wo) of row ch */
        int64_t oh = j->flat ? 0 : ch;
        int64_t m = j->flat ? ch * j->chunk : 0;
        int64_t end = j->flat ? (m + j->chunk < j->span ? m + j->chunk : j->span) : j->wo;
        while (m < end) {
            int64_t left = (end - m + vw - 1) / vw;
            int nv = left < j->nv_max ? (int)left : j->nv_max;
            j->tile(g, xg, wl, oh, m, nv, tile);
            store_tile(j, tile, nv * vw, n_oc, oc0, ch, m);
            m += nv * vw;
        }
    }
}

/* Product of n non-negative factors; false on overflow. */
static bool mul_ok(int64_t *out, int n, ...) {
    va_list ap;
    va_start(ap, n);
    int64_t p = 1;
    bool ok = true;
    for (int i = 0; i < n; i++) {
        int64_t f = va_arg(ap, int64_t);
        if (f < 0 || __builtin_mul_overflow(p, f, &p)) ok = false;
    }
    va_end(ap);
    *out = p;
    return ok;
}

static bool size_ok(int64_t n, size_t *bytes) {
    if (n < 0 || (uint64_t)n > SIZE_MAX / sizeof(float) / 2) return false;
    *bytes = (size_t)(n ? n : 1) * sizeof(float);
    return true;
}

static em_status conv2d_kernel(const em_kernel_args *a) {
    const em_conv_isa *cisa = em_conv_isa_get();
    const em_tensor *x = a->in[0], *w = a->in[1], *bias = a->n_in > 2 ? a->in[2] : NULL;
    em_tensor *out = a->out[0];
    const em_attr *at = a->attrs;
    conv_job j = {0};
    j.isa = cisa;
    j.x = x;
    j.out = out;
    j.C = x->shape[1];
    j.H = x->shape[2];
    j.W = x->shape[3];
    j.O = w->shape[0];
    j.ph = at[1].v[0];
    j.pw = at[1].v[1];
    j.sw = at[0].v[1];
    j.ho = out->shape[2];
    j.wo = out->shape[3];
    int64_t G = at[3].i, dw = at[2].v[1];
    j.og = j.O / G;
    em_conv_geom *g = &j.geom;
    g->cg = w->shape[1];
    g->kh = w->shape[2];
    g->kw = w->shape[3];
    g->sh = at[0].v[0];
    g->dh = at[2].v[0];
    g->sw = j.sw;
    g->hp = j.H + 2 * j.ph;
    if (out->numel == 0) return EM_OK;
    if (em_conv_gemm_takes(x, w, bias, out, G)) return em_conv_gemm(a);

    /* thin groups (depthwise) waste a wide block's lanes: one channel per tile instead */
    bool wide = j.og * 2 >= cisa->ocb;
    j.ocb = wide ? cisa->ocb : 1;
    j.nv_max = wide ? cisa->nv_wide : cisa->nv_narrow;
    j.tile = wide ? cisa->wide : cisa->narrow;
    j.nblk = (j.og + j.ocb - 1) / j.ocb;
    int tw = j.nv_max * cisa->vw;
    int64_t slack = 0;
    j.flat = g->sh == 1 && j.sw == 1;
    if (j.flat) {
        /* the last tile may run past the image by a tile and the taps' reach */
        g->wq = j.W + 2 * j.pw;
        j.span = j.ho * g->wq;
        j.chunk = (256 + tw - 1) / tw * tw;
        j.n_chunks = (j.span + j.chunk - 1) / j.chunk;
        slack = tw + (g->kw - 1) * dw;
    } else {
        /* phase rows long enough for the last (rounded-up) tile's furthest tap */
        int64_t wo_r = (j.wo + cisa->vw - 1) / cisa->vw * cisa->vw;
        g->wq = wo_r + (g->kw - 1) * dw / j.sw;
        j.n_chunks = j.ho;
    }

    size_t nb_x;
    int64_t n_xp;
    if (!mul_ok(&n_xp, 4, j.C, g->hp, j.sw, g->wq) || !size_ok(n_xp + slack, &nb_x))
        return em_op_fail(a->ctx, EM_ERR_OVERFLOW, "conv2d work buffers are too large");
    /* Keep the larger of (one image, all weights) in cache across consecutive items: the
     * weights of a block while it sweeps the image, or the image rows of a chunk while every
     * block passes over them. */
    j.blocks_outer = w->numel > n_xp;
    bool w_direct = w->dtype == EM_F32 && em_is_contiguous(w);
    float *xp = malloc(nb_x), *wf = w_direct ? NULL : em_cpu_to_f32(w);
    int64_t *koff = malloc((size_t)g->kw * sizeof *koff);
    float *bf = bias ? em_cpu_to_f32(bias) : NULL;
    em_status st = EM_OK;
    if (!xp || (!w_direct && !wf) || !koff || (bias && !bf)) {
        st = em_op_fail(a->ctx, EM_ERR_OOM, "cannot allocate %zu bytes of conv2d work buffers",
                        nb_x + (size_t)w->numel * sizeof(float));
        goto done;
    }
    memset(xp + n_xp, 0, (size_t)slack * sizeof *xp);
    for (int64_t k = 0; k < g->kw; k++) koff[k] = (k * dw % j.sw) * g->wq + k * dw / j.sw;
    g->koff = koff;
    j.xp = xp;
    j.wf = w_direct ? (const float *)em_tensor_ptr(w) : wf;
    j.bias = bf;

    int64_t taps = g->kh * g->kw;
    int64_t items = G * j.nblk * j.n_chunks;
    double per_item = 2.0 * j.ocb * (double)(j.flat ? j.chunk : j.wo) * (double)(g->cg * taps);
    int64_t grain = per_item >= 200000 ? 1 : 1 + (int64_t)(200000 / (per_item + 1));
    for (j.n = 0; j.n < x->shape[0]; j.n++) {
        em_parallel_for(j.C, 1 + 16384 / (g->hp * j.sw * g->wq + 1), prep_rows, &j);
        em_parallel_for(items, grain, conv_items, &j);
    }
done:
    free(xp);
    free(wf);
    free(koff);
    free(bf);
    return st;
}

void em_cpu_register_conv(em_kernel_fn *k) {
    k[EM_OP_CONV2D] = conv2d_kernel;
    k[EM_OP_UPSAMPLE_NEAREST] = em_cpu_upsample_nearest;
    k[EM_OP_UPSAMPLE_BILINEAR] = em_cpu_upsample_bilinear;
    k[EM_OP_AVG_POOL2D] = em_cpu_avg_pool2d;
}

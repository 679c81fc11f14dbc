/*
 * Upsampling (any output size, NCHW) as torch's F.interpolate(size=...) computes it on the CPU:
 * mode="nearest" and mode="bilinear" with align_corners true or false.
 *
 * Source positions follow ATen's UpSample.h bit for bit, in f32 (core/resample_src.h; its
 * fmaf matters: a separate multiply and subtract moves some weights by an ulp and, at dst = 1 of
 * a 3x upsample, changes a weight from 1e-8 to 0). Bilinear interpolates in f32 and rounds
 * once.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/conv.h"
#include "core/resample_src.h"

/* ---- nearest ---- */

typedef struct nearest_job {
    const em_tensor *x;
    em_tensor *out;
    const int64_t *iy, *ix; /* source row of each output row, source column of each column */
} nearest_job;

/* Output rows [r0, r1) over (plane, row); values are copied bit for bit. */
static void nearest_rows(void *user, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const nearest_job *j = user;
    const em_tensor *x = j->x;
    int64_t C = x->shape[1], ho = j->out->shape[2], wo = j->out->shape[3];
    size_t es = em_esize(x->dtype);
    const char *base = x->storage->data;
    char *dst = (char *)em_tensor_ptr(j->out);
    int64_t sx = x->strides[3];
    for (int64_t r = r0; r < r1; r++) {
        int64_t p = r / ho, oh = r % ho;
        int64_t src = x->offset + (p / C) * x->strides[0] + (p % C) * x->strides[1] +
                      j->iy[oh] * x->strides[2];
        char *d = dst + (size_t)(r * wo) * es;
        const char *s = base + (size_t)src * es;
        /* fixed-size copies: plain moves, no aliasing questions */
        if (es == 4)
            for (int64_t k = 0; k < wo; k++) memcpy(d + k * 4, s + j->ix[k] * sx * 4, 4);
        else
            for (int64_t k = 0; k < wo; k++) memcpy(d + k * 2, s + j->ix[k] * sx * 2, 2);
    }
}

em_status em_cpu_upsample_nearest(const em_kernel_args *a) {
    const em_tensor *x = a->in[0];
    em_tensor *out = a->out[0];
    int64_t H = x->shape[2], W = x->shape[3], ho = out->shape[2], wo = out->shape[3];
    if (out->numel == 0) return EM_OK;
    int64_t *iy = malloc((size_t)(ho + wo) * sizeof *iy);
    if (!iy)
        return em_op_fail(a->ctx, EM_ERR_OOM, "cannot allocate index tables for %lld x %lld",
                          (long long)ho, (long long)wo);
    int64_t *ix = iy + ho;
    for (int64_t k = 0; k < ho; k++) iy[k] = em_nearest_src(k, H, ho);
    for (int64_t k = 0; k < wo; k++) ix[k] = em_nearest_src(k, W, wo);
    nearest_job j = {x, out, iy, ix};
    int64_t rows = x->shape[0] * x->shape[1] * ho;
    em_parallel_for(rows, 1 + 32768 / wo, nearest_rows, &j);
    free(iy);
    return EM_OK;
}

/* ---- bilinear ---- */

typedef struct bilinear_job {
    const em_tensor *x;
    em_tensor *out;
    const em_lin_tap *ty, *tx;
    atomic_int oom;
} bilinear_job;

/* Interpolates source row `src` horizontally into dst[wo]. */
static void hrow(const float *src, const em_lin_tap *tx, int64_t wo, float *dst) {
    for (int64_t k = 0; k < wo; k++) {
        const em_lin_tap t = tx[k];
        dst[k] = src[t.i0] * t.l0 + src[t.i1] * t.l1;
    }
}

/* Planes [p0, p1) (n * C + c). Output rows visit source rows in order, so the two horizontally
 * interpolated rows a row needs are usually those of the previous one: they are kept in two
 * slots and computed once. */
static void bilinear_planes(void *user, int64_t p0, int64_t p1, int tid) {
    (void)tid;
    bilinear_job *j = user;
    const em_tensor *x = j->x;
    int64_t H = x->shape[2], W = x->shape[3], ho = j->out->shape[2], wo = j->out->shape[3];
    bool direct = x->dtype == EM_F32 && em_is_contiguous(x);
    float *buf = malloc((size_t)((direct ? 0 : H * W) + 3 * wo) * sizeof *buf);
    if (!buf) {
        atomic_store(&j->oom, 1);
        return;
    }
    float *slot[2] = {buf + (direct ? 0 : H * W), buf + (direct ? 0 : H * W) + wo};
    float *row = slot[1] + wo;
    for (int64_t p = p0; p < p1; p++) {
        const float *src = em_conv_plane_f32(x, p, buf);
        int64_t held[2] = {-1, -1};
        for (int64_t oh = 0; oh < ho; oh++) {
            const em_lin_tap ty = j->ty[oh];
            const float *t[2];
            int64_t need[2] = {ty.i0, ty.i1};
            for (int k = 0; k < 2; k++) {
                int s = held[0] == need[k] ? 0 : held[1] == need[k] ? 1 : -1;
                if (s < 0) {
                    /* replace the slot the other row does not use */
                    s = held[0] == need[1 - k] ? 1 : 0;
                    hrow(src + need[k] * W, j->tx, wo, slot[s]);
                    held[s] = need[k];
                }
                t[k] = slot[s];
            }
            const float *t0 = t[0], *t1 = t[1];
            float l0 = ty.l0, l1 = ty.l1;
            for (int64_t k = 0; k < wo; k++) row[k] = t0[k] * l0 + t1[k] * l1;
            em_conv_store_row(j->out, (p * ho + oh) * wo, row, wo);
        }
    }
    free(buf);
}

em_status em_cpu_upsample_bilinear(const em_kernel_args *a) {
    const em_tensor *x = a->in[0];
    em_tensor *out = a->out[0];
    bool ac = a->attrs[1].i != 0;
    int64_t H = x->shape[2], W = x->shape[3], ho = out->shape[2], wo = out->shape[3];
    if (out->numel == 0) return EM_OK;
    em_lin_tap *ty = malloc((size_t)(ho + wo) * sizeof *ty);
    if (!ty)
        return em_op_fail(a->ctx, EM_ERR_OOM, "cannot allocate index tables for %lld x %lld",
                          (long long)ho, (long long)wo);
    em_lin_tap *tx = ty + ho;
    for (int64_t k = 0; k < ho; k++) ty[k] = em_linear_src(k, H, ho, ac);
    for (int64_t k = 0; k < wo; k++) tx[k] = em_linear_src(k, W, wo, ac);
    bilinear_job j = {.x = x, .out = out, .ty = ty, .tx = tx};
    atomic_init(&j.oom, 0);
    em_parallel_for(x->shape[0] * x->shape[1], 1 + 32768 / (ho * wo), bilinear_planes, &j);
    free(ty);
    if (atomic_load(&j.oom))
        return em_op_fail(a->ctx, EM_ERR_OOM, "cannot allocate a %lld x %lld plane buffer",
                          (long long)H, (long long)W);
    return EM_OK;
}

/*
 * Source positions of upsample_nearest and upsample_bilinear (torch's F.interpolate with
 * size=...), shared by the CPU kernels (backends/cpu/resample.c) and the backward rules
 * (ops/grad_rules_conv.c), which must agree with them bit for bit.
 *
 * They follow ATen's UpSample.h in f32: the scale is float(in) / float(out) (align_corners:
 * float(in - 1) / float(out - 1)); nearest takes floor(dst * scale); bilinear's source is
 * scale * (dst + 0.5) - 0.5 clamped at 0, which torch's CPU build evaluates as one fused
 * multiply-add (hence fmaf). Equal input and output sizes copy, as in torch.
 */
#ifndef EMBER_RESAMPLE_SRC_H
#define EMBER_RESAMPLE_SRC_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* The source index of output position dst (nearest). */
static inline int64_t em_nearest_src(int64_t dst, int64_t in, int64_t out) {
    if (out == in) return dst;
    if (out == 2 * in) return dst >> 1;
    float scale = (float)in / (float)out;
    int64_t s = (int64_t)floorf((float)dst * scale);
    return s < in - 1 ? s : in - 1;
}

/* Output position dst reads l0 * x[i0] + l1 * x[i1] (bilinear, along one dim). */
typedef struct em_lin_tap {
    int64_t i0, i1;
    float l0, l1;
} em_lin_tap;

static inline em_lin_tap em_linear_src(int64_t dst, int64_t in, int64_t out, bool align_corners) {
    em_lin_tap t;
    if (out == in) {
        t.i0 = t.i1 = dst;
        t.l0 = 1.0f;
        t.l1 = 0.0f;
        return t;
    }
    float r;
    if (align_corners) {
        float scale = out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.0f;
        r = scale * (float)dst;
    } else {
        float scale = (float)in / (float)out;
        r = fmaf(scale, (float)dst + 0.5f, -0.5f);
        if (r < 0.0f) r = 0.0f;
    }
    int64_t i0 = (int64_t)floorf(r);
    if (i0 > in - 1) i0 = in - 1;
    float l1 = r - (float)i0;
    l1 = l1 < 0.0f ? 0.0f : l1 > 1.0f ? 1.0f : l1;
    t.i0 = i0;
    t.i1 = i0 + (i0 < in - 1 ? 1 : 0);
    t.l1 = l1;
    t.l0 = 1.0f - l1;
    return t;
}

#endif

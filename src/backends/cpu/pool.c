/*
 * avg_pool2d (NCHW) as torch computes it on the CPU: each window is clipped to the padded input
 * (which sets the divisor when count_include_pad), then to the input (the divisor otherwise);
 * the sum runs row by row in f32 and is divided once, then rounded once to the output dtype.
 * A window that lies entirely in the padding (possible only in ceil mode) gives 0.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "backends/cpu/conv.h"

typedef struct pool_job {
    const em_tensor *x;
    em_tensor *out;
    int64_t kh, kw, sh, sw, ph, pw;
    bool include_pad;
    atomic_int oom;
} pool_job;

static void pool_planes(void *user, int64_t p0, int64_t p1, int tid) {
    (void)tid;
    pool_job *j = user;
    const em_tensor *x = j->x;
    int64_t H = x->shape[2], W = x->shape[3], ho = j->out->shape[2], wo = j->out->shape[3];
    bool direct = x->dtype == EM_F32 && em_is_contiguous(x);
    float *buf = malloc((size_t)((direct ? 0 : H * W) + wo) * sizeof *buf);
    if (!buf) {
        atomic_store(&j->oom, 1);
        return;
    }
    float *row = buf + (direct ? 0 : H * W);
    for (int64_t p = p0; p < p1; p++) {
        const float *src = em_conv_plane_f32(x, p, buf);
        for (int64_t oh = 0; oh < ho; oh++) {
            int64_t h0 = oh * j->sh - j->ph;
            int64_t h1 = h0 + j->kh < H + j->ph ? h0 + j->kh : H + j->ph;
            int64_t span_h = h1 - h0;
            if (h0 < 0) h0 = 0;
            if (h1 > H) h1 = H;
            for (int64_t ow = 0; ow < wo; ow++) {
                int64_t w0 = ow * j->sw - j->pw;
                int64_t w1 = w0 + j->kw < W + j->pw ? w0 + j->kw : W + j->pw;
                int64_t span_w = w1 - w0;
                if (w0 < 0) w0 = 0;
                if (w1 > W) w1 = W;
                if (h0 >= h1 || w0 >= w1) {
                    row[ow] = 0.0f;
                    continue;
                }
                float sum = 0.0f;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) sum += src[ih * W + iw];
                int64_t div = j->include_pad ? span_h * span_w : (h1 - h0) * (w1 - w0);
                row[ow] = sum / (float)div;
            }
            em_conv_store_row(j->out, (p * ho + oh) * wo, row, wo);
        }
    }
    free(buf);
}

em_status em_cpu_avg_pool2d(const em_kernel_args *a) {
    const em_tensor *x = a->in[0];
    em_tensor *out = a->out[0];
    const em_attr *at = a->attrs;
    if (out->numel == 0) return EM_OK;
    pool_job j = {.x = x,
                  .out = out,
                  .kh = at[0].v[0],
                  .kw = at[0].v[1],
                  .sh = at[1].v[0],
                  .sw = at[1].v[1],
                  .ph = at[2].v[0],
                  .pw = at[2].v[1],
                  .include_pad = at[4].i != 0};
    atomic_init(&j.oom, 0);
    double per_plane = (double)out->shape[2] * (double)out->shape[3] * (double)(j.kh * j.kw);
    int64_t grain = per_plane >= 65536 ? 1 : 1 + (int64_t)(65536 / (per_plane + 1));
    em_parallel_for(x->shape[0] * x->shape[1], grain, pool_planes, &j);
    if (atomic_load(&j.oom))
        return em_op_fail(a->ctx, EM_ERR_OOM, "cannot allocate a %lld x %lld plane buffer",
                          (long long)x->shape[2], (long long)x->shape[3]);
    return EM_OK;
}

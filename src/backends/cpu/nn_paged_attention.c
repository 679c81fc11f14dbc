/*
 * Paged attention on the CPU (em_paged_attention): each query row walks its sequence's blocks
 * in the pools through the block table, with an online softmax in f32 (as the flash kernel:
 * logits, softmax and the weighted sum in f32, one rounding to q's dtype). An item is one
 * (row, query head, query); a block of keys is converted to f32 at once (its slots are
 * contiguous in a contiguous pool, one strided load otherwise).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "backends/cpu/ew.h"
#include "backends/cpu/nn.h"
#include "core/threadpool.h"

typedef struct pa_job {
    const em_ew_isa *isa;
    const em_tensor *q, *k, *v;
    em_tensor *out;
    int64_t *bt;   /* [B, MB] block ids, as i64 */
    int64_t *lens; /* [B] */
    int64_t b, hq, hkv, t, d, dv, mb, bs;
    float scale, softcap;
    int64_t window;
    atomic_int failed; /* out of memory in a task */
} pa_job;

static int64_t idx_at(const em_tensor *x, int64_t off) {
    const char *base = (const char *)nn_base(x);
    return x->dtype == EM_I32 ? ((const int32_t *)base)[off] : ((const int64_t *)base)[off];
}

static void pa_task(void *user, int64_t i0, int64_t i1, int thread) {
    (void)thread;
    pa_job *j = user;
    const em_ew_isa *isa = j->isa;
    float *buf = malloc((size_t)(j->d + j->dv + j->bs * (j->d + j->dv) + j->bs) * sizeof *buf);
    if (!buf) {
        atomic_store(&j->failed, 1);
        return;
    }
    float *qf = buf, *acc = qf + j->d, *kb = acc + j->dv, *vb = kb + j->bs * j->d,
          *lg = vb + j->bs * j->dv;
    const em_tensor *q = j->q, *k = j->k, *v = j->v;
    em_dtype dt = q->dtype;
    for (int64_t it = i0; it < i1; it++) {
        int64_t i = it % j->t, h = (it / j->t) % j->hq, b = it / (j->t * j->hq);
        int64_t kh = h / (j->hq / j->hkv);
        int64_t pos = j->lens[b] - j->t + i; /* this query's position; it sees keys <= pos */
        int64_t lo = j->window > 0 ? pos - j->window + 1 : 0;
        if (lo < 0) lo = 0;
        isa->load[dt](qf, nn_at(nn_base(q), dt, q->offset + b * q->strides[0] + h * q->strides[1] +
                                                   i * q->strides[2]),
                      q->strides[3], j->d);
        for (int64_t e = 0; e < j->dv; e++) acc[e] = 0;
        float mx = -INFINITY, sum = 0;
        for (int64_t p0 = lo - lo % j->bs; p0 <= pos; p0 += j->bs) {
            int64_t slot0 = j->bt[b * j->mb + p0 / j->bs] * j->bs;
            int64_t a = p0 < lo ? lo - p0 : 0, n = pos - p0 + 1 < j->bs ? pos - p0 + 1 : j->bs;
            for (int64_t r = a; r < n; r++) {
                isa->load[dt](kb + r * j->d,
                              nn_at(nn_base(k), dt, k->offset + kh * k->strides[0] +
                                                        (slot0 + r) * k->strides[1]),
                              k->strides[2], j->d);
                float s = 0;
                for (int64_t e = 0; e < j->d; e++) s += qf[e] * kb[r * j->d + e];
                s *= j->scale;
                if (j->softcap > 0) s = j->softcap * tanhf(s / j->softcap);
                lg[r] = s;
            }
            float bm = mx;
            for (int64_t r = a; r < n; r++) bm = lg[r] > bm ? lg[r] : bm;
            float corr = mx == -INFINITY ? 0.f : expf(mx - bm);
            sum *= corr;
            for (int64_t e = 0; e < j->dv; e++) acc[e] *= corr;
            mx = bm;
            for (int64_t r = a; r < n; r++) {
                float w = expf(lg[r] - mx);
                sum += w;
                isa->load[dt](vb, nn_at(nn_base(v), dt, v->offset + kh * v->strides[0] +
                                                          (slot0 + r) * v->strides[1]),
                              v->strides[2], j->dv);
                for (int64_t e = 0; e < j->dv; e++) acc[e] += w * vb[e];
            }
        }
        float inv = sum > 0 ? 1.f / sum : 0.f; /* no visible key: zeros, as em_sdpa */
        for (int64_t e = 0; e < j->dv; e++) acc[e] *= inv;
        em_tensor *o = j->out;
        isa->store[dt]((char *)em_tensor_ptr(o) +
                           (b * o->strides[0] + h * o->strides[1] + i * o->strides[2]) *
                               (int64_t)em_esize(dt),
                       acc, j->dv);
    }
    free(buf);
}

static em_status k_paged_attention(const em_kernel_args *a) {
    const em_tensor *q = a->in[0], *k = a->in[1], *v = a->in[2], *bt = a->in[3], *ln = a->in[4];
    pa_job j = {em_ew_isa_get(), q, k, v, a->out[0], NULL, NULL,
                q->shape[0], q->shape[1], k->shape[0], q->shape[2], q->shape[3], v->shape[2],
                bt->shape[1], a->attrs[0].i, 0, (float)a->attrs[3].f, a->attrs[2].i, 0};
    j.scale = a->attrs[1].f != 0 ? (float)a->attrs[1].f : 1.f / sqrtf((float)j.d);
    int64_t slots = k->shape[1], nblk = slots / j.bs;
    j.bt = malloc((size_t)(j.b * j.mb + 1) * sizeof *j.bt);
    j.lens = malloc((size_t)(j.b + 1) * sizeof *j.lens);
    em_status st = EM_OK;
    if (!j.bt || !j.lens) {
        st = em_op_fail(a->ctx, EM_ERR_OOM, "out of memory (block table)");
        goto done;
    }
    /* the values the shape rule could not see: every block a row reads exists */
    for (int64_t b = 0; b < j.b && !st; b++) {
        j.lens[b] = idx_at(ln, ln->offset + b * ln->strides[0]);
        if (j.lens[b] < 0 || j.lens[b] > j.mb * j.bs) {
            st = em_op_fail(a->ctx, EM_ERR_INVALID_ARG,
                            "row %lld holds %lld positions; its table has room for %lld",
                            (long long)b, (long long)j.lens[b], (long long)(j.mb * j.bs));
            break;
        }
        for (int64_t m = 0; m < j.mb; m++) {
            int64_t id = idx_at(bt, bt->offset + b * bt->strides[0] + m * bt->strides[1]);
            j.bt[b * j.mb + m] = id;
            if (m * j.bs < j.lens[b] && (id < 0 || id >= nblk)) {
                st = em_op_fail(a->ctx, EM_ERR_INVALID_ARG,
                                "row %lld, block %lld: id %lld is outside the pools' %lld blocks",
                                (long long)b, (long long)m, (long long)id, (long long)nblk);
                break;
            }
        }
    }
    if (!st) {
        int64_t items = j.b * j.hq * j.t;
        if (items) em_parallel_for(items, 1, pa_task, &j);
        if (atomic_load(&j.failed)) st = em_op_fail(a->ctx, EM_ERR_OOM, "out of memory (attention scratch)");
    }
done:
    free(j.bt);
    free(j.lens);
    return st;
}

void em_cpu_register_nn_paged_attention(em_kernel_fn *k) {
    k[EM_OP_PAGED_ATTENTION] = k_paged_attention;
}

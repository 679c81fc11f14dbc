/*
 * Rotary position embedding kernels.
 *
 * rope_cos_sin reproduces the Hugging Face rotary modules' forward: freqs = position (as f32)
 * times inv_freq in f32, emb = cat(freqs, freqs), cos = cos(emb) * scaling in f32, then cast to
 * the requested dtype.
 *
 * rope reproduces apply_rotary_pos_emb with rotate_half, including torch's rounding: q * cos and
 * rotate_half(q) * sin are each rounded to the promoted dtype of x and cos, and so is their sum
 * (in bf16: three roundings, as torch computes them). Dims past R pass through unchanged.
 */
#include <math.h>
#include <stdlib.h>

#include "backends/cpu/nn.h"

#define PAR_ELEMS 16384

/* ---- cos / sin tables ---- */

typedef struct cs_job {
    const em_ew_isa *isa;
    const em_tensor *pos;
    const float *inv; /* [half] */
    int64_t half;
    float scaling;
    em_tensor *cos, *sin;
    atomic_bool oom;
} cs_job;

static void cs_chunk(void *user, int64_t p0, int64_t p1, int tid) {
    (void)tid;
    cs_job *j = user;
    int64_t half = j->half, r = 2 * half;
    float *buf = malloc((size_t)(r ? 2 * r : 1) * sizeof *buf);
    if (!buf) {
        atomic_store(&j->oom, true);
        return;
    }
    float *cb = buf, *sb = buf + r;
    em_dtype dt = j->cos->dtype;
    size_t es = em_esize(dt);
    char *co = em_tensor_ptr(j->cos), *so = em_tensor_ptr(j->sin);
    for (int64_t p = p0; p < p1; p++) {
        float pos = (float)em_cpu_get_i64(j->pos, p);
        for (int64_t k = 0; k < half; k++) {
            float f = pos * j->inv[k];
            float c = cosf(f) * j->scaling, s = sinf(f) * j->scaling;
            cb[k] = cb[k + half] = c;
            sb[k] = sb[k + half] = s;
        }
        j->isa->store[dt](co + (size_t)(p * r) * es, cb, r);
        j->isa->store[dt](so + (size_t)(p * r) * es, sb, r);
    }
    free(buf);
}

static em_status k_rope_cos_sin(const em_kernel_args *a) {
    const em_tensor *inv = a->in[1];
    cs_job j = {.isa = em_ew_isa_get(), .pos = a->in[0], .half = inv->shape[0],
                .scaling = (float)a->attrs[0].f, .cos = a->out[0], .sin = a->out[1]};
    atomic_init(&j.oom, false);
    float *invf = malloc((size_t)(j.half ? j.half : 1) * sizeof *invf);
    if (!invf) return em_op_fail(a->ctx, EM_ERR_OOM, "cannot allocate inv_freq");
    nn_load_f32(j.isa, nn_at(nn_base(inv), inv->dtype, inv->offset), inv->dtype, 1, inv->shape,
                inv->strides, 0, j.half, invf);
    j.inv = invf;
    int64_t n = j.pos->numel;
    if (n > 0 && j.half > 0) em_parallel_for(n, PAR_ELEMS / (2 * j.half) + 1, cs_chunk, &j);
    free(invf);
    if (atomic_load(&j.oom)) return em_op_fail(a->ctx, EM_ERR_OOM, "cannot allocate a buffer");
    return EM_OK;
}

/* ---- applying the rotation ---- */

typedef struct rope_job {
    const em_ew_isa *isa;
    const em_nn_isa *nn;
    const em_tensor *x, *cos, *sin;
    em_tensor *out;
    em_dtype round_dt; /* dtype torch computes the products and the sum in (f32: no rounding) */
    atomic_bool oom;
} rope_job;

static void rope_chunk(void *user, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    rope_job *j = user;
    const em_tensor *x = j->x, *cs = j->cos, *sn = j->sin;
    int64_t nh = x->shape[1], nt = x->shape[2], d = x->shape[3], r = cs->shape[2];
    float *buf = malloc((size_t)(2 * r + 3 * d + 1) * sizeof *buf);
    if (!buf) {
        atomic_store(&j->oom, true);
        return;
    }
    float *cb = buf, *sb = cb + r, *xb = sb + r, *t1 = xb + d, *t2 = t1 + d;
    void (*rnd)(void *, int64_t) = j->round_dt == EM_F32 ? NULL : j->isa->round[j->round_dt];
    em_dtype xd = x->dtype, cd = cs->dtype;
    size_t es = em_esize(xd);
    const char *xbase = nn_base(x);
    for (int64_t it = i0; it < i1; it++) {
        int64_t b = it / nt, t = it % nt, bc = cs->shape[0] == 1 ? 0 : b;
        int64_t co = cs->offset + bc * cs->strides[0] + t * cs->strides[1];
        int64_t so = sn->offset + bc * sn->strides[0] + t * sn->strides[1];
        j->isa->load[cd](cb, nn_at(nn_base(cs), cd, co), cs->strides[2], r);
        j->isa->load[cd](sb, nn_at(nn_base(sn), cd, so), sn->strides[2], r);
        for (int64_t h = 0; h < nh; h++) {
            int64_t xo = x->offset + b * x->strides[0] + h * x->strides[1] + t * x->strides[2];
            j->isa->load[xd](xb, nn_at(xbase, xd, xo), x->strides[3], d);
            j->nn->rope_products(xb, cb, sb, r, t1, t2);
            if (rnd) {
                rnd(t1, r);
                rnd(t2, r);
            }
            j->nn->add(xb, t1, t2, r);
            char *dst = (char *)em_tensor_ptr(j->out) + (size_t)(((b * nh + h) * nt + t) * d) * es;
            j->isa->store[xd](dst, xb, d);
        }
    }
    free(buf);
}

static em_status k_rope(const em_kernel_args *a) {
    const em_tensor *x = a->in[0], *cs = a->in[1];
    rope_job j = {.isa = em_ew_isa_get(), .nn = em_nn_isa_get(), .x = x, .cos = cs, .sin = a->in[2], .out = a->out[0]};
    atomic_init(&j.oom, false);
    /* torch's promotion of x and cos: equal dtypes stay, otherwise f32 (bf16 with f16 too) */
    j.round_dt = x->dtype == cs->dtype ? x->dtype : EM_F32;
    int64_t items = x->shape[0] * x->shape[2];
    int64_t per = x->shape[1] * x->shape[3];
    if (items > 0 && per > 0) em_parallel_for(items, PAR_ELEMS / per + 1, rope_chunk, &j);
    if (atomic_load(&j.oom)) return em_op_fail(a->ctx, EM_ERR_OOM, "cannot allocate a buffer");
    return EM_OK;
}

void em_cpu_register_nn_rope(em_kernel_fn *k) {
    k[EM_OP_ROPE_COS_SIN] = k_rope_cos_sin;
    k[EM_OP_ROPE] = k_rope;
}

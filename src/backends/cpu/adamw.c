/*
 * adamw_step on the CPU for f32 tensors (other dtypes run ops/decomp.c's composition): torch's
 * AdamW update (ember/ops.h em_adamw_step) in one pass over p, g, m and v. Written op by op it reads and writes every element about a dozen times (one
 * temporary per operation); here each element is loaded once and stored once, so the update
 * costs what moving 7 floats per parameter costs. The arithmetic is the decomposition's
 * (ops/decomp.c), in f32 and in the same order, so both give the same values up to the
 * compiler's choice of fused multiply-adds (none: the project builds with ISO C contraction
 * rules).
 */
#include <math.h>

#include "backends/cpu/cpu.h"
#include "core/tensor_impl.h"
#include "core/threadpool.h"

typedef struct adamw_job {
    float *p, *m, *v;
    const float *g;
    float decay, b1c, b2, b2c, sqrt_bc2, eps, neg_step; /* b1c = 1 - beta1, b2c = 1 - beta2 */
} adamw_job;

static void adamw_range(void *user, int64_t b, int64_t e, int tid) {
    (void)tid;
    const adamw_job *j = user;
    float *restrict p = j->p, *restrict m = j->m, *restrict v = j->v;
    const float *restrict g = j->g;
    for (int64_t i = b; i < e; i++) {
        float pi = p[i] * j->decay, gi = g[i];
        float mi = m[i] + (gi - m[i]) * j->b1c;
        float vi = v[i] * j->b2 + (gi * gi) * j->b2c;
        float denom = sqrtf(vi) / j->sqrt_bc2 + j->eps;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi + (mi / denom) * j->neg_step;
    }
}

static float scalar_of(const em_tensor *t) { /* a 0-d tensor of any floating dtype */
    return (float)em_load_f64(t->storage->data, t->dtype, t->offset);
}

static float *f32_data(const em_tensor *t) {
    return (float *)t->storage->data + t->offset;
}

static em_status adamw_kernel(const em_kernel_args *a) {
    em_tensor *const *in = a->in;
    adamw_job j = {
        .p = f32_data(in[0]), .g = f32_data(in[1]), .m = f32_data(in[2]), .v = f32_data(in[3]),
        .decay = scalar_of(in[4]), .sqrt_bc2 = scalar_of(in[5]), .neg_step = scalar_of(in[6]),
        .b1c = (float)(1.0 - a->attrs[0].f), .b2 = (float)a->attrs[1].f,
        .b2c = (float)(1.0 - a->attrs[1].f), .eps = (float)a->attrs[2].f,
    };
    em_parallel_for(in[0]->numel, 1 << 14, adamw_range, &j);
    for (int i = 0; i < 4; i++)
        if (i != 1) atomic_fetch_add_explicit(&in[i]->storage->version, 1, memory_order_relaxed);
    return EM_OK;
}

void em_cpu_register_adamw(em_kernel_fn *k) { k[EM_OP_ADAMW_STEP] = adamw_kernel; }

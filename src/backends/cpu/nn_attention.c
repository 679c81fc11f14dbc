/*
 * The built-in scaled dot-product attention kernel: the shared flash-attention code
 * (sdpa_flash.h, also compiled into the attention kernel packages of kernels/sdpa/) over the
 * CPU's element-wise conversions and nn micro-kernels for its kernel level.
 */
#include "backends/cpu/sdpa_flash.h"

static sdpa_view view_of(const em_tensor *t) {
    sdpa_view v = {0};
    if (!t) return v;
    v.data = nn_at(nn_base(t), t->dtype, t->offset);
    v.dtype = (int)t->dtype;
    v.ndim = t->ndim;
    for (int d = 0; d < t->ndim && d < 4; d++) {
        v.shape[d] = t->shape[d];
        v.strides[d] = t->strides[d];
    }
    return v;
}

static em_status k_sdpa(const em_kernel_args *a) {
    const em_ew_isa *isa = em_ew_isa_get();
    sdpa_env env = {isa->load, isa->store, em_nn_isa_get(), em_parallel_for, em_num_threads()};
    sdpa_args s = {view_of(a->in[0]), view_of(a->in[1]), view_of(a->in[2]),
                   view_of(a->n_in > 3 ? a->in[3] : NULL), em_tensor_ptr(a->out[0]),
                   (int)a->out[0]->dtype, a->attrs[0].f, a->attrs[3].f, a->attrs[1].i != 0,
                   a->attrs[2].i, NULL};
    if (a->op->id == EM_OP_SDPA_LSE) s.lse = em_tensor_ptr(a->out[1]);
    const char *what = "";
    if (sdpa_flash_run(&env, &s, &what)) return em_op_fail(a->ctx, EM_ERR_OOM, "%s", what);
    return EM_OK;
}

/* sdpa and sdpa_lse (the same call, the rows' log-sum-exp written too) */
void em_cpu_register_nn_attention(em_kernel_fn *k) {
    k[EM_OP_SDPA] = k_sdpa;
    k[EM_OP_SDPA_LSE] = k_sdpa;
}

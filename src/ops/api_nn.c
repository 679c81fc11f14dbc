/* Public wrappers of linear algebra, normalisation, transformer, indexing, convolution and MoE
 * ops (ember/ops.h), and cross-device copies. */
#include <math.h>
#include <stdlib.h>

#include "core/tensor_impl.h"
#include "ember/ops.h"
#include "ops/dispatch.h"

em_tensor *em_to_(EM_OP_ARGS, em_tensor *x, em_device *dev) {
    if (!c || c->err.status) return NULL;
    if (!x || !dev) {
        em_fail_at(c, EM_ERR_INVALID_ARG, "to", file, line, "tensor or device is NULL");
        return NULL;
    }
    if (x->dev == dev) return em_scope_add(c, em_tensor_retain(x));
    if (c->grad_on && x->requires_grad) {
        /* the copy is not an op of the table: recording it is still to do */
        em_fail_at(c, EM_ERR_UNSUPPORTED, "to", file, line,
                   "copying a tensor that requires grad to %s while grad is enabled is not "
                   "differentiable yet (its gradient would stop here)", dev->name);
        return NULL;
    }
    if (x->sym) {
        em_sym_value_needed(c, x, "to");
        return NULL;
    }
    if (x->dev->be == dev->be && dev->be->copy) {
        /* device to device within one backend (e.g. two chips of one PJRT plugin) */
        if (em_tensor_materialize(c, x)) return NULL;
        em_tensor *r = em_tensor_new(c, dev, x->dtype, x->ndim, x->shape);
        if (!r) return NULL;
        em_status s = dev->be->copy(c, x, r);
        if (s == EM_OK) return em_scope_add(c, r);
        em_tensor_release(r);
        if (s != EM_ERR_UNSUPPORTED || c->err.status) return NULL;
    }
    /* Through host memory: the portable path every backend supports. */
    size_t nb = em_tensor_nbytes(x);
    void *tmp = malloc(nb ? nb : 1);
    if (!tmp) {
        em_fail_at(c, EM_ERR_OOM, "to", file, line, "cannot stage %zu bytes on the host", nb);
        return NULL;
    }
    em_tensor *r = NULL;
    if (em_to_host(c, x, tmp, nb) == EM_OK)
        r = em_from_host_on_(c, file, line, dev, x->dtype, x->ndim, x->shape, tmp);
    free(tmp);
    return r;
}

/* ---- linear algebra ---- */

em_tensor *em_matmul_(EM_OP_ARGS, em_tensor *a, em_tensor *b) {
    em_tensor *in[2] = {a, b};
    return EM_RUN(EM_OP_MATMUL, in, 2, NULL);
}

em_tensor *em_linear_(EM_OP_ARGS, em_tensor *x, em_tensor *w, em_tensor *bias) {
    em_tensor *in[3] = {x, w, bias};
    return EM_RUN(EM_OP_LINEAR, in, 3, NULL);
}

/* ---- normalisation ---- */

em_tensor *em_rms_norm_(EM_OP_ARGS, em_tensor *x, em_tensor *weight, double eps,
                        bool unit_offset) {
    em_tensor *in[2] = {x, weight};
    em_attr a[2] = {em_attr_float(eps), em_attr_int(unit_offset)};
    return EM_RUN(EM_OP_RMS_NORM, in, 2, a);
}

em_tensor *em_layer_norm_(EM_OP_ARGS, em_tensor *x, em_tensor *weight, em_tensor *bias,
                          double eps) {
    em_tensor *in[3] = {x, weight, bias};
    em_attr a[1] = {em_attr_float(eps)};
    return EM_RUN(EM_OP_LAYER_NORM, in, 3, a);
}

em_tensor *em_group_norm_(EM_OP_ARGS, em_tensor *x, int64_t groups, em_tensor *weight,
                          em_tensor *bias, double eps) {
    em_tensor *in[3] = {x, weight, bias};
    em_attr a[2] = {em_attr_int(groups), em_attr_float(eps)};
    return EM_RUN(EM_OP_GROUP_NORM, in, 3, a);
}

/* ---- transformer ---- */

em_tensor *em_rope_cos_sin_(EM_OP_ARGS, em_tensor *positions, em_tensor *inv_freq,
                            double scaling, em_dtype dtype, em_tensor **sin_out) {
    em_tensor *in[2] = {positions, inv_freq};
    em_attr a[2] = {em_attr_float(scaling), em_attr_int(dtype)};
    em_tensor *outs[2] = {NULL, NULL};
    em_tensor *r = em_op_run(c, file, line, EM_OP_ROPE_COS_SIN, in, 2, a, outs, 2, NULL);
    if (sin_out) *sin_out = outs[1];
    return r;
}

em_tensor *em_rope_(EM_OP_ARGS, em_tensor *x, em_tensor *cos, em_tensor *sin) {
    em_tensor *in[3] = {x, cos, sin};
    return EM_RUN(EM_OP_ROPE, in, 3, NULL);
}

em_sdpa_params em_sdpa_default_params(void) {
    em_sdpa_params p = {0, false, 0, 0};
    return p;
}

em_tensor *em_sdpa_(EM_OP_ARGS, em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *mask,
                    const em_sdpa_params *p) {
    em_sdpa_params d = em_sdpa_default_params();
    if (!p) p = &d;
    em_tensor *in[4] = {q, k, v, mask};
    em_attr a[4] = {em_attr_float(p->scale), em_attr_int(p->causal), em_attr_int(p->window),
                    em_attr_float(p->softcap)};
    return EM_RUN(EM_OP_SDPA, in, 4, a);
}

em_tensor *em_sdpa_lse_(EM_OP_ARGS, em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *mask,
                        const em_sdpa_params *p, em_dtype out_dtype, em_tensor **lse_out) {
    em_sdpa_params d = em_sdpa_default_params();
    if (!p) p = &d;
    if (lse_out) *lse_out = NULL;
    em_tensor *in[4] = {q, k, v, mask};
    em_attr a[5] = {em_attr_float(p->scale), em_attr_int(p->causal), em_attr_int(p->window),
                    em_attr_float(p->softcap), em_attr_int(out_dtype)};
    em_tensor *outs[2] = {NULL, NULL};
    em_tensor *r = em_op_run(c, file, line, EM_OP_SDPA_LSE, in, 4, a, outs, 2, NULL);
    if (lse_out) *lse_out = outs[1];
    return r;
}

em_tensor *em_paged_attention_(EM_OP_ARGS, em_tensor *q, em_tensor *k_pool, em_tensor *v_pool,
                               em_tensor *block_table, em_tensor *lens, int64_t block_size,
                               const em_sdpa_params *p) {
    em_sdpa_params d = em_sdpa_default_params();
    if (!p) p = &d;
    em_tensor *in[5] = {q, k_pool, v_pool, block_table, lens};
    em_attr a[4] = {em_attr_int(block_size), em_attr_float(p->scale), em_attr_int(p->window),
                    em_attr_float(p->softcap)};
    return EM_RUN(EM_OP_PAGED_ATTENTION, in, 5, a);
}

em_tensor *em_embedding_(EM_OP_ARGS, em_tensor *weight, em_tensor *ids) {
    em_tensor *in[2] = {weight, ids};
    return EM_RUN(EM_OP_EMBEDDING, in, 2, NULL);
}

/* ---- indexing ---- */

em_tensor *em_index_select_(EM_OP_ARGS, em_tensor *x, int dim, em_tensor *index) {
    em_tensor *in[2] = {x, index};
    em_attr a[1] = {em_attr_int(dim)};
    return EM_RUN(EM_OP_INDEX_SELECT, in, 2, a);
}

em_tensor *em_gather_(EM_OP_ARGS, em_tensor *x, int dim, em_tensor *index) {
    em_tensor *in[2] = {x, index};
    em_attr a[1] = {em_attr_int(dim)};
    return EM_RUN(EM_OP_GATHER, in, 2, a);
}

em_tensor *em_take_along_dim_(EM_OP_ARGS, em_tensor *x, em_tensor *index, int dim) {
    em_tensor *in[2] = {x, index};
    em_attr a[1] = {em_attr_int(dim)};
    return EM_RUN(EM_OP_TAKE_ALONG_DIM, in, 2, a);
}

em_tensor *em_scatter_(EM_OP_ARGS, em_tensor *x, int dim, em_tensor *index, em_tensor *src) {
    em_tensor *in[3] = {x, index, src};
    em_attr a[1] = {em_attr_int(dim)};
    return EM_RUN(EM_OP_SCATTER, in, 3, a);
}

em_tensor *em_scatter_add_(EM_OP_ARGS, em_tensor *x, int dim, em_tensor *index, em_tensor *src) {
    em_tensor *in[3] = {x, index, src};
    em_attr a[1] = {em_attr_int(dim)};
    return EM_RUN(EM_OP_SCATTER_ADD, in, 3, a);
}

em_tensor *em_index_add_(EM_OP_ARGS, em_tensor *x, int dim, em_tensor *index, em_tensor *src,
                         double alpha) {
    em_tensor *in[3] = {x, index, src};
    em_attr a[2] = {em_attr_int(dim), em_attr_float(alpha)};
    return EM_RUN(EM_OP_INDEX_ADD, in, 3, a);
}

em_status em_index_copy_(EM_OP_ARGS, em_tensor *dst, int64_t dim, em_tensor *index,
                         em_tensor *src) {
    em_tensor *in[3] = {dst, index, src};
    em_attr a[1] = {em_attr_int(dim)};
    if (!c) return EM_ERR_INVALID_ARG;
    em_op_exec(c, file, line, EM_OP_INDEX_COPY, in, 3, a, NULL, 0);
    return c->err.status;
}

em_tensor *em_topk_(EM_OP_ARGS, em_tensor *x, int64_t k, int dim, bool largest, bool sorted,
                    em_tensor **indices_out) {
    em_attr a[4] = {em_attr_int(k), em_attr_int(dim), em_attr_int(largest), em_attr_int(sorted)};
    em_tensor *outs[2] = {NULL, NULL};
    em_tensor *r = em_op_run(c, file, line, EM_OP_TOPK, &x, 1, a, outs, 2, NULL);
    if (indices_out) *indices_out = outs[1];
    return r;
}

em_tensor *em_sort_(EM_OP_ARGS, em_tensor *x, int dim, bool descending, em_tensor **indices_out) {
    em_attr a[2] = {em_attr_int(dim), em_attr_int(descending)};
    em_tensor *outs[2] = {NULL, NULL};
    em_tensor *r = em_op_run(c, file, line, EM_OP_SORT, &x, 1, a, outs, 2, NULL);
    if (indices_out) *indices_out = outs[1];
    return r;
}

em_tensor *em_argsort_(EM_OP_ARGS, em_tensor *x, int dim, bool descending) {
    em_attr a[2] = {em_attr_int(dim), em_attr_int(descending)};
    return EM_RUN(EM_OP_ARGSORT, &x, 1, a);
}

static em_tensor *list_op(EM_OP_ARGS, em_op_id id, em_tensor *const *xs, int n, int dim) {
    if (!c) return NULL;
    if (n < 1 || n > EM_MAX_INPUTS || !xs) {
        if (!c->err.status)
            em_fail_at(c, EM_ERR_INVALID_ARG, em_op_get(id)->name, file, line,
                       "%d tensors given (1 to %d allowed)", n, EM_MAX_INPUTS);
        return NULL;
    }
    em_attr a[1] = {em_attr_int(dim)};
    return EM_RUN(id, xs, n, a);
}

em_tensor *em_cat_(EM_OP_ARGS, em_tensor *const *xs, int n, int dim) {
    return list_op(c, file, line, EM_OP_CAT, xs, n, dim);
}

em_tensor *em_stack_(EM_OP_ARGS, em_tensor *const *xs, int n, int dim) {
    return list_op(c, file, line, EM_OP_STACK, xs, n, dim);
}

em_tensor *em_one_hot_(EM_OP_ARGS, em_tensor *index, int64_t num_classes) {
    em_attr a[1] = {em_attr_int(num_classes)};
    return EM_RUN(EM_OP_ONE_HOT, &index, 1, a);
}

em_tensor *em_repeat_interleave_(EM_OP_ARGS, em_tensor *x, int64_t repeats, int dim) {
    em_attr a[2] = {em_attr_int(repeats), em_attr_int(dim)};
    return EM_RUN(EM_OP_REPEAT_INTERLEAVE, &x, 1, a);
}

/* ---- convolution and resampling ---- */

em_conv2d_params em_conv2d_default_params(void) {
    em_conv2d_params p = {{1, 1}, {0, 0}, {1, 1}, 1};
    return p;
}

em_tensor *em_conv2d_(EM_OP_ARGS, em_tensor *x, em_tensor *w, em_tensor *bias,
                      const em_conv2d_params *p) {
    em_conv2d_params d = em_conv2d_default_params();
    if (!p) p = &d;
    em_tensor *in[3] = {x, w, bias};
    em_attr a[4] = {em_attr_ints(p->stride, 2), em_attr_ints(p->padding, 2),
                    em_attr_ints(p->dilation, 2), em_attr_int(p->groups)};
    return EM_RUN(EM_OP_CONV2D, in, 3, a);
}

em_tensor *em_upsample_nearest_(EM_OP_ARGS, em_tensor *x, int64_t out_h, int64_t out_w) {
    int64_t s[2] = {out_h, out_w};
    em_attr a[1] = {em_attr_ints(s, 2)};
    return EM_RUN(EM_OP_UPSAMPLE_NEAREST, &x, 1, a);
}

em_tensor *em_upsample_bilinear_(EM_OP_ARGS, em_tensor *x, int64_t out_h, int64_t out_w,
                                 bool align_corners) {
    int64_t s[2] = {out_h, out_w};
    em_attr a[2] = {em_attr_ints(s, 2), em_attr_int(align_corners)};
    return EM_RUN(EM_OP_UPSAMPLE_BILINEAR, &x, 1, a);
}

em_pool2d_params em_pool2d_default_params(int64_t k) {
    em_pool2d_params p = {{k, k}, {k, k}, {0, 0}, false, true};
    return p;
}

em_tensor *em_avg_pool2d_(EM_OP_ARGS, em_tensor *x, const em_pool2d_params *p) {
    if (!p) {
        if (c && !c->err.status)
            em_fail_at(c, EM_ERR_INVALID_ARG, "avg_pool2d", file, line, "params are NULL");
        return NULL;
    }
    em_attr a[5] = {em_attr_ints(p->kernel, 2), em_attr_ints(p->stride, 2),
                    em_attr_ints(p->padding, 2), em_attr_int(p->ceil_mode),
                    em_attr_int(p->count_include_pad)};
    return EM_RUN(EM_OP_AVG_POOL2D, &x, 1, a);
}

/* ---- mixture of experts ---- */

em_tensor *em_ragged_dot_(EM_OP_ARGS, em_tensor *lhs, em_tensor *rhs, em_tensor *group_sizes,
                          bool rhs_nk) {
    em_tensor *in[3] = {lhs, rhs, group_sizes};
    em_attr a[1] = {em_attr_int(rhs_nk)};
    return EM_RUN(EM_OP_RAGGED_DOT, in, 3, a);
}

/* Packing is a reshape and a permutation, so every device does it with the ops it has. */
em_tensor *em_ragged_pack_(EM_OP_ARGS, em_tensor *rhs) {
    if (!c || c->err.status) return NULL;
    if (!rhs) {
        em_fail_at(c, EM_ERR_INVALID_ARG, "ragged_pack", file, line, "rhs is NULL");
        return NULL;
    }
    char s[96];
    const int64_t *d = em_tensor_shape(rhs);
    if (em_tensor_ndim(rhs) != 3 || d[1] % 32 || d[2] % 2) {
        em_fail_at(c, EM_ERR_SHAPE, "ragged_pack", file, line,
                   "need rhs [G, N, K] with N a multiple of 32 and K even; got %s",
                   em_tensor_sig(rhs, s, sizeof s));
        return NULL;
    }
    em_tensor *v = em_reshape_(c, file, line, rhs, 5,
                               (int64_t[]){d[0], d[1] / 32, 32, d[2] / 2, 2});
    em_tensor *p = em_permute_(c, file, line, v, 5, (int[]){0, 1, 3, 2, 4});
    return em_contiguous_(c, file, line, p);
}

em_tensor *em_ragged_unpack_(EM_OP_ARGS, em_tensor *packed) {
    if (!c || c->err.status) return NULL;
    if (!packed) {
        em_fail_at(c, EM_ERR_INVALID_ARG, "ragged_unpack", file, line, "packed is NULL");
        return NULL;
    }
    char s[96];
    const int64_t *d = em_tensor_shape(packed);
    if (em_tensor_ndim(packed) != 5 || d[3] != 32 || d[4] != 2) {
        em_fail_at(c, EM_ERR_SHAPE, "ragged_unpack", file, line,
                   "need a packed [G, N/32, K/2, 32, 2]; got %s",
                   em_tensor_sig(packed, s, sizeof s));
        return NULL;
    }
    em_tensor *p = em_permute_(c, file, line, packed, 5, (int[]){0, 1, 3, 2, 4});
    return em_reshape_(c, file, line, em_contiguous_(c, file, line, p), 3,
                       (int64_t[]){d[0], d[1] * 32, d[2] * 2});
}

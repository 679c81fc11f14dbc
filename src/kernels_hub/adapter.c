/*
 * Calls into a package through the ABI (khub.h): an em_kernel_args becomes an ember_kernel_call
 * of plain structs, and the load-time self-test compares a package's implementation with the
 * built-in on small inputs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "core/threadpool.h"
#include "kernels_hub/khub.h"

_Static_assert(EMBER_KDT_F32 == (int)EM_F32 && EMBER_KDT_BF16 == (int)EM_BF16 &&
                   EMBER_KDT_F16 == (int)EM_F16 && EMBER_KDT_I64 == (int)EM_I64 &&
                   EMBER_KDT_I32 == (int)EM_I32 && EMBER_KDT_U8 == (int)EM_U8 &&
                   EMBER_KDT_BOOL == (int)EM_BOOL && EMBER_KDT_F64 == (int)EM_F64 &&
                   EMBER_KDT_I16 == (int)EM_I16 && EMBER_KDT_I8 == (int)EM_I8,
               "kernel_abi.h's dtype codes are em_dtype's");
_Static_assert(EMBER_KERNEL_MAX_DIMS == EM_MAX_DIMS, "kernel_abi.h's dims are Ember's");

#define MAX_ARGS 16 /* calls with more tensors go to the next implementation */

typedef struct call_buf {
    ember_kernel_call k;
    ember_kernel_tensor in[MAX_ARGS], out[MAX_ARGS];
    ember_kernel_attr at[EM_MAX_ATTRS];
} call_buf;

static void tensor_of(const em_tensor *t, bool with_data, ember_kernel_tensor *o) {
    memset(o, 0, sizeof *o);
    if (!t) return;
    o->dtype = (int32_t)t->dtype;
    o->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) {
        o->shape[d] = t->shape[d];
        o->strides[d] = t->strides[d];
    }
    if (with_data && t->storage)
        o->data = (char *)t->storage->data + t->offset * (int64_t)em_dtype_size(t->dtype);
}

static bool build(const em_kernel_args *a, unsigned mode, bool with_data, call_buf *b) {
    if (a->n_in > MAX_ARGS || a->n_out > MAX_ARGS) return false;
    for (int i = 0; i < a->n_in; i++)
        if (a->in[i] && (em_is_quant(a->in[i]->dtype) || !a->in[i]->dev->be->host_accessible))
            return false;
    memset(&b->k, 0, sizeof b->k);
    b->k.struct_size = sizeof b->k;
    b->k.op = a->op->name;
    b->k.mode = (int32_t)mode;
    b->k.n_in = a->n_in;
    b->k.n_out = a->n_out;
    b->k.n_attrs = a->op->n_attrs;
    for (int i = 0; i < a->n_in; i++) tensor_of(a->in[i], true, &b->in[i]);
    for (int i = 0; i < a->n_out; i++) tensor_of(a->out[i], with_data, &b->out[i]);
    for (int i = 0; i < a->op->n_attrs; i++) {
        ember_kernel_attr *t = &b->at[i];
        const em_attr *s = &a->attrs[i];
        t->name = a->op->attr_names[i];
        t->type = (int32_t)a->op->attr_types[i];
        t->i = s->i;
        t->f = s->f;
        t->n = a->op->attr_types[i] == EM_ATTR_INTS ? s->n : 0;
        t->ints = s->v;
    }
    b->k.in = b->in;
    b->k.out = b->out;
    b->k.attrs = b->at;
    b->k.n_threads = em_num_threads();
    b->k.parallel_for = with_data ? em_parallel_for : NULL;
    b->k.cpu_level = khub_host_level();
    return true;
}

_Static_assert((int)EMBER_KATTR_INT == (int)EM_ATTR_INT &&
                   (int)EMBER_KATTR_FLOAT == (int)EM_ATTR_FLOAT &&
                   (int)EMBER_KATTR_BOOL == (int)EM_ATTR_BOOL &&
                   (int)EMBER_KATTR_INTS == (int)EM_ATTR_INTS &&
                   (int)EMBER_KATTR_DTYPE == (int)EM_ATTR_DTYPE,
               "kernel_abi.h's attribute types are the op table's");

static bool supports(const em_kimpl *self, const em_kernel_args *a, unsigned mode) {
    const ember_kernel_impl *impl = self->user;
    call_buf b;
    if (!build(a, mode, false, &b)) return false;
    return !impl->supports || impl->supports(&b.k) != 0;
}

static em_status run(const em_kimpl *self, const em_kernel_args *a) {
    const ember_kernel_impl *impl = self->user;
    call_buf b;
    /* the mode was checked by the pick; the kernel learns it for its own use only */
    if (!build(a, a->ctx && a->ctx->grad_on ? EM_KMODE_TRAINING : EM_KMODE_INFERENCE, true, &b))
        return em_op_fail(a->ctx, EM_ERR_INTERNAL, "kernel %s was given a call it cannot take",
                          self->name);
    char err[256] = "";
    if (impl->run(&b.k, err, sizeof err) == 0) return EM_OK;
    err[sizeof err - 1] = 0;
    return em_op_fail(a->ctx, EM_ERR_BACKEND, "kernel %s from %s failed: %s", self->name,
                      self->source, err[0] ? err : "(no message)");
}

void khub_adapter_init(em_kimpl *k, const ember_kernel_impl *impl) {
    k->fn = NULL;
    k->run = run;
    k->supports = supports;
    k->user = (void *)impl;
}

/* ---- the self-test ------------------------------------------------------------------------ */

static float lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f * 6.0f - 3.0f;
}

/* Runs k and the built-in on one shape; 1 pass, 0 fail (why set), -1 declined. */
static int test_shape(em_ctx *c, em_kimpl *k, em_kernel_fn builtin, em_dtype dt,
                      const int64_t *shape, int ndim, char *why, size_t why_n) {
    const em_op_def *op = em_op_get(k->op);
    int n_in = op->min_in;
    em_tensor *in[3] = {0}, *o_ref = NULL, *o_hub = NULL;
    int res = 0;
    uint32_t seed = 12345;
    for (int i = 0; i < n_in; i++) {
        in[i] = em_tensor_new(c, em_device_cpu(), dt, ndim, shape);
        if (!in[i]) goto out;
        int64_t n = in[i]->numel;
        float *v = malloc((size_t)n * sizeof *v);
        if (!v) goto out;
        for (int64_t j = 0; j < n; j++) v[j] = lcg(&seed);
        em_convert(v, EM_F32, em_tensor_ptr(in[i]), dt, n);
        free(v);
    }
    em_attr attrs[EM_MAX_ATTRS];
    memset(attrs, 0, sizeof attrs);
    o_ref = em_tensor_new(c, em_device_cpu(), dt, ndim, shape);
    o_hub = em_tensor_new(c, em_device_cpu(), dt, ndim, shape);
    if (!o_ref || !o_hub) goto out;
    em_kernel_args a = {c, op, in, n_in, &o_hub, 1, attrs};
    if (!k->supports(k, &a, EM_KMODE_INFERENCE)) {
        res = -1;
        goto out;
    }
    if (em_kimpl_run(k, &a) != EM_OK) {
        snprintf(why, why_n, "%s", em_ctx_error(c)->message);
        goto out;
    }
    a.out = &o_ref;
    if (builtin(&a) != EM_OK) {
        snprintf(why, why_n, "the built-in failed: %s", em_ctx_error(c)->message);
        goto out;
    }
    float *r = em_cpu_to_f32(o_ref), *h = em_cpu_to_f32(o_hub);
    double tol = dt == EM_F32 ? 1e-5 : 1e-2;
    res = 1;
    for (int64_t j = 0; r && h && j < o_ref->numel && res == 1; j++) {
        bool bad = isnan(r[j]) != isnan(h[j]) ||
                   (!isnan(r[j]) && fabs((double)r[j] - h[j]) > tol * (1 + fabs((double)r[j])));
        if (bad) {
            char sh[64];
            snprintf(why, why_n, "self-test failed: element %lld of a %s %s input is %g, the "
                                 "built-in gives %g", (long long)j,
                     em_shape_str(shape, ndim, sh, sizeof sh), em_dtype_name(dt), (double)h[j],
                     (double)r[j]);
            res = 0;
        }
    }
    if (!r || !h) {
        snprintf(why, why_n, "out of memory");
        res = 0;
    }
    free(r);
    free(h);
out:
    for (int i = 0; i < 3; i++) em_tensor_release(in[i]);
    em_tensor_release(o_ref);
    em_tensor_release(o_hub);
    if (res == 0 && !why[0]) snprintf(why, why_n, "out of memory");
    return res;
}

bool khub_self_test(em_kimpl *k, char *why, size_t why_n) {
    why[0] = 0;
    const em_op_def *op = em_op_get(k->op);
    em_kernel_fn builtin = em_device_cpu()->be->kernels[k->op];
    if (op->kind != EM_OPK_EW || op->min_in > 2 || !builtin) {
        snprintf(why, why_n, "no self-test for %s (element-wise ops only so far)", op->name);
        return true;
    }
    em_dtype dt = EM_F32;
    const em_dtype order[] = {EM_F32, EM_BF16, EM_F16};
    for (int i = 2; i >= 0; i--)
        if (k->dtypes & ((uint64_t)1 << order[i])) dt = order[i];
    em_ctx *c = em_ctx_create();
    if (!c) {
        snprintf(why, why_n, "out of memory");
        return false;
    }
    static const int64_t shapes[][3] = {{2, 33, 1}, {7, 1, 1}, {3, 4, 5}};
    static const int ndims[] = {2, 1, 3};
    int ran = 0;
    bool ok = true;
    for (int s = 0; s < 3 && ok; s++) {
        int r = test_shape(c, k, builtin, dt, shapes[s], ndims[s], why, why_n);
        ok = r != 0;
        ran += r == 1;
        em_ctx_clear_error(c);
    }
    em_ctx_free(c);
    if (ok && !ran) snprintf(why, why_n, "self-test skipped: it declined every test shape");
    return ok;
}

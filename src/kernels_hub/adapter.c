/*
 * Calls into a package through the ABI (khub.h): an em_kernel_args becomes an ember_kernel_call
 * of plain structs (the load-time self-test is selftest.c).
 */
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

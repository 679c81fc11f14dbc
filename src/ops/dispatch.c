/*
 * The eager dispatcher. For every op call: check arity, NULLs and devices; run the op's shape
 * rule; then build a view, defer an element-wise op (fused mode), or allocate the outputs and run
 * the device's kernel. This path is the cost of a tiny op, so it allocates nothing but the
 * outputs and formats nothing unless there is an error.
 */
#include <stdlib.h>
#include <string.h>

#include "core/kernel_registry.h"
#include "core/tensor_impl.h"
#include "ops/autodiff.h"
#include "ops/dispatch.h"

/* Longest expression a fused chain may grow to before it is evaluated. */
#define EM_FUSE_MAX_DEPTH 16

static em_tensor *make_lazy(em_ctx *c, const em_op_def *op, em_device *dev,
                            em_tensor *const *in, int n_in, const em_attr *attrs,
                            const em_meta *m) {
    int depth = 1;
    for (int i = 0; i < n_in; i++)
        if (in[i]->lazy) depth += in[i]->lazy->depth;
    if (depth > EM_FUSE_MAX_DEPTH) return NULL; /* evaluate now instead */
    em_tensor *t = em_tensor_alloc_meta(m->dtype, m->ndim, m->shape);
    em_lazy *lz = t ? malloc(sizeof *lz) : NULL;
    if (!lz) {
        free(t);
        return NULL;
    }
    lz->op = op->id;
    lz->n_in = n_in;
    lz->depth = depth;
    for (int i = 0; i < n_in; i++) {
        lz->in[i] = em_tensor_retain(in[i]);
        lz->in_version[i] = in[i]->storage ? atomic_load(&in[i]->storage->version) : 0;
    }
    if (op->n_attrs) memcpy(lz->attrs, attrs, (size_t)op->n_attrs * sizeof *attrs);
    t->lazy = lz;
    t->dev = dev;
    return t;
}

/* The inputs that may be block-quantized (core.h: EM_Q8_0 ...): the weight of linear and of
 * embedding, whose kernels read the blocks as they are, and cast's input (dequantization).
 * Everything else — views included — would need kernels for every quantized layout, so it is
 * refused at the call, naming the op and the way out. */
static bool takes_quant(em_op_id id, int input) {
    switch (id) {
    case EM_OP_LINEAR: return input == 1;
    case EM_OP_EMBEDDING: return input == 0;
    case EM_OP_CAST: return input == 0;
    default: return false;
    }
}

int em_op_exec(em_ctx *c, const char *file, int line, em_op_id id, em_tensor *const *in, int n_in,
               const em_attr *attrs, em_tensor **outs, int max_out) {
    if (!c || c->err.status) return -1;
    const em_op_def *op = em_op_get(id);
    c->cur.op = op->name;
    c->cur.file = file;
    c->cur.line = line;
    c->cur.in = in;
    c->cur.n_in = n_in;
    c->cur.dev = NULL;
    if (n_in < op->min_in || (op->max_in >= 0 && n_in > op->max_in) || n_in > EM_MAX_INPUTS) {
        em_op_fail(c, EM_ERR_INVALID_ARG, "%d inputs given, %d to %d expected", n_in, op->min_in,
                   op->max_in < 0 ? EM_MAX_INPUTS : op->max_in);
        return -1;
    }
    em_device *dev = NULL;
    int dev_from = -1;
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) {
            if (i < op->min_in) {
                em_op_fail(c, EM_ERR_INVALID_ARG, "input %d is NULL", i);
                return -1;
            }
            continue;
        }
        if (in[i]->sym && !c->tracer) {
            em_op_fail(c, EM_ERR_INVALID_ARG,
                       "input %d is a traced value of a compiled function, used outside it", i);
            return -1;
        }
        if (em_is_quant(in[i]->dtype) && !takes_quant(id, i)) {
            em_op_fail(c, EM_ERR_DTYPE,
                       "input %d is block-quantized (%s); only linear's and embedding's weights "
                       "and cast's input may be: dequantize it first with em_cast (or load the "
                       "model with dtype f32/bf16)",
                       i, em_dtype_name(in[i]->dtype));
            return -1;
        }
        if (!dev) {
            dev = in[i]->dev;
            dev_from = i;
        } else if (in[i]->dev != dev) {
            em_op_fail(c, EM_ERR_DEVICE, "input %d is on %s but input %d is on %s", dev_from,
                       dev->name, i, in[i]->dev->name);
            return -1;
        }
    }
    if (!dev) dev = c->device;
    c->cur.dev = dev;

    em_meta metas[EM_MAX_OUTPUTS];
    int n_out = op->n_out;
    if (op->rule(c, op, in, n_in, attrs, metas, &n_out) != EM_OK) {
        if (!c->err.status) em_op_fail(c, EM_ERR_INTERNAL, "shape rule failed without a message");
        return -1;
    }
    if (n_out > max_out) {
        em_op_fail(c, EM_ERR_INVALID_ARG, "the op has %d outputs, room for %d", n_out, max_out);
        return -1;
    }
    /* no kernel on the device, but a composition of ops it runs (eagerly or traced) */
    em_decomp_fn decomp = op->kind == EM_OPK_OTHER && n_out <= 1
                              ? em_decomp_get(id, in, em_kset_get(dev->be, id) != NULL,
                                              c->tracer != NULL)
                              : NULL;
    if (decomp) {
        em_tensor *r = NULL;
        em_scope_push(c);
        em_status s = decomp(c, file, line, in, attrs, &r);
        if (r) r = em_tensor_retain(r); /* the caller's (em_op_exec's contract) */
        em_scope_pop(c);
        if (s != EM_OK || c->err.status || (n_out == 1 && !r)) {
            em_tensor_release(r);
            if (!c->err.status) em_op_fail(c, EM_ERR_INTERNAL, "decomposition failed");
            return -1;
        }
        if (n_out == 1) outs[0] = r;
        return n_out;
    }
    /* compile mode: the call is recorded, not run (the rule above already checked it, so a
     * mistake is reported here, at the call, not when the program runs) */
    if (c->tracer) {
        /* a function that enables grad inside its trace (a compiled training step) records
         * its symbolic values on the tape too, so its em_backward is traced as well */
        if (c->grad_on && em_grad_check_call(c, op, in, n_in) != EM_OK) return -1;
        int r = c->tracer->record(c, op, in, n_in, attrs, metas, n_out, outs);
        return r >= 0 && c->grad_on ? em_grad_record(c, op, in, n_in, attrs, outs, r) : r;
    }
    /* autodiff: refused before anything is written (an in-place write into a tensor whose
     * gradient is wanted); the call is recorded on the tape after it ran */
    if (c->grad_on && em_grad_check_call(c, op, in, n_in) != EM_OK) return -1;

    if (op->kind == EM_OPK_VIEW) {
        for (int i = 0; i < n_in; i++)
            if (in[i] && em_tensor_materialize(c, in[i])) return -1;
        if (em_view_build(c, op, in, attrs, metas, n_out, outs) != EM_OK) return -1;
        return c->grad_on ? em_grad_record(c, op, in, n_in, attrs, outs, n_out) : n_out;
    }

    /* the kernel registry's choice (core/kernel_registry.h): the built-in alone is one load */
    const em_kset *ks = em_kset_get(dev->be, id);
    if (!ks && op->kind != EM_OPK_CREATE) {
        em_op_fail(c, EM_ERR_UNSUPPORTED, "no kernel for this op on %s", dev->name);
        return -1;
    }

    /* fusion is the built-in element-wise engine's: an op with other implementations runs them */
    if (c->mode == EM_EAGER_FUSED && op->kind == EM_OPK_EW && dev->be->eval_lazy &&
        ks->trivial && !em_is_quant(in[0]->dtype)) { /* dequantization runs at once */
        em_tensor *t = make_lazy(c, op, dev, in, n_in, attrs, &metas[0]);
        if (t) {
            outs[0] = t;
            return c->grad_on ? em_grad_record(c, op, in, n_in, attrs, outs, 1) : 1;
        }
    }

    for (int i = 0; i < n_in; i++)
        if (in[i] && in[i]->lazy && em_tensor_materialize(c, in[i])) return -1;

    for (int o = 0; o < n_out; o++) {
        outs[o] = em_tensor_new(c, dev, metas[o].dtype, metas[o].ndim, metas[o].shape);
        if (!outs[o]) {
            for (int j = 0; j < o; j++) em_tensor_release(outs[j]);
            return -1;
        }
    }
    if (ks) {
        em_kernel_args a = {c, op, in, n_in, outs, n_out, attrs};
        unsigned mode = c->grad_on ? EM_KMODE_TRAINING : EM_KMODE_INFERENCE;
        const em_kimpl *k = em_kset_pick(ks, &a, mode);
        em_status s = k ? em_kimpl_run(k, &a)
                        : em_op_fail(c, EM_ERR_UNSUPPORTED, "no kernel on %s takes this call",
                                     dev->name);
        if (s == EM_OK && c->mode == EM_EAGER_SYNC && dev->be->sync) s = dev->be->sync(c, dev);
        if (s != EM_OK) {
            if (!c->err.status) em_op_fail(c, s, "kernel failed");
            for (int j = 0; j < n_out; j++) em_tensor_release(outs[j]);
            return -1;
        }
    }
    return c->grad_on ? em_grad_record(c, op, in, n_in, attrs, outs, n_out) : n_out;
}

em_status em_view_build(em_ctx *c, const em_op_def *op, em_tensor *const *in,
                        const em_attr *attrs, const em_meta *m, int n_out, em_tensor **out) {
    em_tensor *x = in[0];
    int64_t st[EM_MAX_OUTPUTS][EM_MAX_DIMS], off[EM_MAX_OUTPUTS];
    bool copy;
    em_status s = em_view_geometry(c, op, x, attrs, m, n_out, st, off, &copy);
    if (s != EM_OK) return s;
    if (copy) {
        em_tensor *cp;
        /* the copy is part of this view op: the tape records the view op, not the copy */
        bool grad_on = c->grad_on;
        c->grad_on = false;
        int got = em_op_exec(c, c->cur.file, c->cur.line, EM_OP_CONTIGUOUS, &x, 1, NULL, &cp, 1);
        c->grad_on = grad_on;
        if (got != 1) return c->err.status;
        em_tensor_set_contiguous_strides(cp); /* no-op: a fresh copy is contiguous */
        em_view_strides(cp, m->ndim, m->shape, st[0]);
        out[0] = em_tensor_view_of(cp, m->ndim, m->shape, st[0], cp->offset);
        em_tensor_release(cp);
        return out[0] ? EM_OK : em_op_fail(c, EM_ERR_OOM, "out of memory");
    }
    for (int o = 0; o < n_out; o++) {
        out[o] = em_tensor_view_of(x, m[o].ndim, m[o].shape, st[o], off[o]);
        if (!out[o]) {
            for (int j = 0; j < o; j++) em_tensor_release(out[j]);
            return em_op_fail(c, EM_ERR_OOM, "out of memory");
        }
    }
    return EM_OK;
}

em_tensor *em_op_run(em_ctx *c, const char *file, int line, em_op_id id, em_tensor *const *in,
                     int n_in, const em_attr *attrs, em_tensor **outs, int max_out,
                     int *n_out_actual) {
    em_tensor *local[EM_MAX_OUTPUTS];
    em_tensor **o = outs ? outs : local;
    int room = outs ? max_out : EM_MAX_OUTPUTS;
    int n = em_op_exec(c, file, line, id, in, n_in, attrs, o, room);
    if (n_out_actual) *n_out_actual = n < 0 ? 0 : n;
    if (n <= 0) return NULL;
    for (int i = 0; i < n; i++) {
        if (!em_scope_add(c, o[i])) {
            for (int j = i + 1; j < n; j++) em_tensor_release(o[j]);
            return NULL;
        }
    }
    /* when the caller passed no `outs`, outputs after the first stay reachable through the scope */
    return o[0];
}

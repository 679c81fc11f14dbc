/*
 * Fused mode on PJRT devices: a pending chain of element-wise ops (a DAG of lazy tensors) is
 * compiled as one StableHLO program when its value is needed. Each node is emitted by the same
 * code as the unfused op (pj_emit_ew) and rounded to its dtype the same way, so the results are
 * identical to async mode; XLA fuses the chain into one kernel.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"

#define FZ_MAX 64

typedef struct fz_node {
    em_tensor *t;
    int in[3]; /* >= 0: node index; < 0: -1 - leaf index */
} fz_node;

typedef struct fz {
    em_tensor *leaves[FZ_MAX];
    int n_leaves;
    fz_node nodes[FZ_MAX];
    int n_nodes;
    int err; /* 1 too large, 2 an input was overwritten in place */
} fz;

static int add(fz *f, em_tensor *t) {
    if (!t->lazy) {
        for (int i = 0; i < f->n_leaves; i++)
            if (f->leaves[i] == t) return -1 - i;
        if (f->n_leaves == FZ_MAX) {
            f->err = 1;
            return 0;
        }
        f->leaves[f->n_leaves++] = t;
        return -f->n_leaves;
    }
    for (int i = 0; i < f->n_nodes; i++)
        if (f->nodes[i].t == t) return i;
    int ins[3] = {0, 0, 0};
    for (int i = 0; i < t->lazy->n_in; i++) {
        em_tensor *x = t->lazy->in[i];
        if (!x->lazy && x->storage &&
            atomic_load_explicit(&x->storage->version, memory_order_relaxed) !=
                t->lazy->in_version[i]) {
            f->err = 2;
            return 0;
        }
        ins[i] = add(f, x);
        if (f->err) return 0;
    }
    if (f->n_nodes == FZ_MAX) {
        f->err = 1;
        return 0;
    }
    fz_node *n = &f->nodes[f->n_nodes];
    n->t = t;
    memcpy(n->in, ins, sizeof ins);
    return f->n_nodes++;
}

em_status pj_eval_lazy(em_ctx *c, em_tensor *t) {
    fz *f = calloc(1, sizeof *f);
    if (!f) return EM_FAIL(c, EM_ERR_OOM, "fused", "out of memory");
    add(f, t);
    if (f->err) {
        int err = f->err;
        free(f);
        return err == 2 ? EM_FAIL(c, EM_ERR_INVALID_ARG, "fused",
                                  "a tensor read by pending fused work was overwritten in place "
                                  "(assign) before the work ran; read the pending result first "
                                  "or use sync/async mode")
                        : EM_FAIL(c, EM_ERR_INTERNAL, "fused", "expression too large to fuse");
    }
    em_device *d = t->dev;
    pj_plugin *pl = ((pj_dev *)d->impl)->pl;
    pj_key k;
    pj_key_init(&k);
    pj_key_i64(&k, -1); /* not an op id: a fused chain */
    PJRT_Buffer *args[FZ_MAX];
    for (int i = 0; i < f->n_leaves; i++) {
        em_tensor *x = f->leaves[i];
        pj_buf *pb = x->storage->data;
        if (!pb->buf && !pb->shape_only) { /* cannot happen: uploads and kernels leave one */
            free(f);
            pj_key_free(&k);
            return EM_FAIL(c, EM_ERR_INTERNAL, "fused", "input %d holds no device buffer", i);
        }
        pj_key_tensor(&k, x);
        args[i] = pb->buf;
    }
    for (int i = 0; i < f->n_nodes; i++) {
        const fz_node *n = &f->nodes[i];
        const em_lazy *lz = n->t->lazy;
        const em_op_def *op = em_op_get(lz->op);
        int32_t hdr[4] = {(int32_t)lz->op, lz->n_in, (int32_t)n->t->dtype, n->t->ndim};
        pj_key_add(&k, hdr, sizeof hdr);
        pj_key_add(&k, n->in, sizeof n->in);
        pj_key_add(&k, n->t->shape, (size_t)n->t->ndim * sizeof *n->t->shape);
        for (int a = 0; a < op->n_attrs; a++) {
            pj_key_add(&k, &lz->attrs[a].i, sizeof lz->attrs[a].i);
            pj_key_add(&k, &lz->attrs[a].f, sizeof lz->attrs[a].f);
        }
    }
    if (k.oom) {
        free(f);
        pj_key_free(&k);
        return EM_FAIL(c, EM_ERR_OOM, "fused", "out of memory");
    }
    uint64_t h = pj_hash(k.p, k.len);
    pj_exec *x = pj_cache_find(pl, &k, h);
    if (!x) {
        sh_b b;
        sh_init(&b);
        sh_val lv[FZ_MAX], nv[FZ_MAX];
        for (int i = 0; i < f->n_leaves; i++) {
            const pj_buf *pb = f->leaves[i]->storage->data;
            lv[i] = sh_param(&b, sh_ty(sh_elem_of(pb->dtype), pb->ndim, pb->dims));
        }
        for (int i = 0; i < f->n_leaves; i++) lv[i] = pj_view_value(&b, lv[i], f->leaves[i]);
        for (int i = 0; i < f->n_nodes; i++) {
            const fz_node *n = &f->nodes[i];
            const em_lazy *lz = n->t->lazy;
            sh_val in[3];
            for (int j = 0; j < lz->n_in; j++) in[j] = n->in[j] >= 0 ? nv[n->in[j]] : lv[-1 - n->in[j]];
            em_meta m;
            m.dtype = n->t->dtype;
            m.ndim = n->t->ndim;
            memcpy(m.shape, n->t->shape, (size_t)m.ndim * sizeof *m.shape);
            nv[i] = pj_emit_ew(&b, lz->op, in, lz->in, lz->n_in, lz->attrs, &m);
            /* Unfused, every f32/f64 node result is rounded in memory; fused, the plugin's code
             * generator may contract a multiply into the next node's add (an FMA), which is
             * more accurate but not what async computes. A select on NaN (NaN in, NaN out)
             * between nodes is exact and keeps the multiply and the add apart. */
            sh_elem ne = nv[i].t.e;
            if ((ne == SH_F32 || ne == SH_F64) && i + 1 < f->n_nodes)
                nv[i] = sh_select(&b, sh_cmp(&b, "NE", nv[i], nv[i]), sh_const(&b, nv[i].t, NAN),
                                  nv[i]);
        }
        char *text = sh_finish(&b, &nv[f->n_nodes - 1], 1);
        if (!text) {
            em_status s = EM_FAIL(c, EM_ERR_INTERNAL, "fused", "StableHLO emitter: %s", b.err);
            sh_free(&b);
            free(f);
            pj_key_free(&k);
            return s;
        }
        sh_free(&b);
        char what[160];
        snprintf(what, sizeof what, "fused chain of %d element-wise ops", f->n_nodes);
        x = pj_compile(c, pl, &k, h, text, what, false);
        free(text);
    }
    pj_key_free(&k);
    em_status s = c->err.status;
    if (x) {
        PJRT_Buffer *out = NULL;
        s = pj_execute(c, d, x, args, f->n_leaves, &out, false);
        if (!s) pj_storage_set(t->storage, out, t->dtype, t->ndim, t->shape);
    }
    free(f);
    return s;
}

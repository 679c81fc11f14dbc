/*
 * The collectives on PJRT devices, replica mode (issue 18): the ranks of a device group of this
 * process (em_dist_local), one thread each, call the op with their tensors on their devices.
 * Each rank's kernel hands its part to the group's meeting point (core/group.h); the last rank
 * to arrive builds one program with stablehlo.all_reduce / all_gather / reduce_scatter /
 * all_to_all over replica_groups [[0..N-1]], compiles it for N replicas on the ranks' devices
 * (device assignment: replica r on rank r's device) and launches it once with N argument lists
 * (PJRT_LoadedExecutable_Execute, num_devices = N). Each rank's output is its replica's result.
 * Sums and maxima of bf16 run in f32 and are rounded once, as on the CPU over MPI.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"

/* One rank's part of a collective call. */
typedef struct part {
    const em_kernel_args *a;
    em_device *dev;
    em_tensor *x;       /* the input as one whole device buffer (a->in[0] or a copy) */
    int rank;
    em_status st;
    char msg[800];
} part;

static int group_attr(const em_op_def *op) { return em_op_attr_index(op, "group"); }

static void fail_all(part **p, int n, em_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail_all(part **p, int n, em_status st, const char *fmt, ...) {
    char msg[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (int r = 0; r < n; r++) {
        p[r]->st = st;
        snprintf(p[r]->msg, sizeof p[r]->msg, "%s", msg);
    }
}

/* The ranks called the same op with the same attributes (the group aside), dtype and shape on
 * devices of one plugin. */
static bool same_call(part **p, int n) {
    const em_kernel_args *a0 = p[0]->a;
    const em_tensor *x0 = p[0]->x;
    int gi = group_attr(a0->op);
    for (int r = 1; r < n; r++) {
        const em_kernel_args *a = p[r]->a;
        const em_tensor *x = p[r]->x;
        char s0[96], s1[96];
        if (a->op != a0->op) {
            fail_all(p, n, EM_ERR_INVALID_ARG, "rank %d called %s while rank 0 called %s: every "
                     "rank calls the same collectives in the same order", r, a->op->name,
                     a0->op->name);
            return false;
        }
        bool same = x->dtype == x0->dtype && x->ndim == x0->ndim &&
                    !memcmp(x->shape, x0->shape, (size_t)x->ndim * sizeof *x->shape);
        for (int i = 0; i < a->op->n_attrs && same; i++)
            same = i == gi || a->attrs[i].i == a0->attrs[i].i;
        if (!same) {
            fail_all(p, n, EM_ERR_SHAPE, "rank %d called %s with %s, rank 0 with %s (or other "
                     "attributes): every rank passes the same shape, dtype and attributes", r,
                     a->op->name, em_tensor_sig(x, s1, sizeof s1), em_tensor_sig(x0, s0, sizeof s0));
            return false;
        }
        if (((pj_dev *)p[r]->dev->impl)->pl != ((pj_dev *)p[0]->dev->impl)->pl) {
            fail_all(p, n, EM_ERR_DEVICE, "rank %d's device %s and rank 0's %s belong to "
                     "different PJRT plugins", r, p[r]->dev->name, p[0]->dev->name);
            return false;
        }
    }
    return true;
}

static int dim_of(int64_t d, int nd) { return (int)(d < 0 ? d + nd : d); }

/* The program: one parameter (the rank's x), one result (its share of the collective). */
static char *emit(const em_kernel_args *a, const em_tensor *x, int n, char *err, size_t err_n) {
    sh_b b;
    sh_init(&b);
    sh_val v = sh_param(&b, sh_ty(sh_elem_of(x->dtype), x->ndim, x->shape));
    const em_tensor *o = a->out[0];
    sh_type rt = sh_ty(sh_elem_of(o->dtype), o->ndim, o->shape);
    char groups[600], at[900];
    int u = snprintf(groups, sizeof groups, "replica_groups = dense<[[");
    for (int r = 0; r < n; r++) u += snprintf(groups + u, sizeof groups - (size_t)u, "%s%d",
                                              r ? ", " : "", r);
    snprintf(groups + u, sizeof groups - (size_t)u, "]]> : tensor<1x%dxi64>", n);
    switch (a->op->id) {
    case EM_OP_ALL_REDUCE:
    case EM_OP_REDUCE_SCATTER: {
        const char *body = a->attrs[0].i ? "maximum" : "add";
        bool rs = a->op->id == EM_OP_REDUCE_SCATTER;
        if (rs)
            snprintf(at, sizeof at, "%s, scatter_dimension = %d : i64", groups,
                     dim_of(a->attrs[1].i, x->ndim));
        else
            snprintf(at, sizeof at, "%s", groups);
        v = sh_convert(&b, v, SH_F32); /* sums in f32, one rounding (as the CPU over MPI) */
        v = sh_collective(&b, rs ? "stablehlo.reduce_scatter" : "stablehlo.all_reduce", v, body,
                          at, sh_ty_with(rt, SH_F32));
        v = sh_convert(&b, v, rt.e);
        break;
    }
    case EM_OP_ALL_GATHER:
        snprintf(at, sizeof at, "all_gather_dim = %d : i64, %s", dim_of(a->attrs[0].i, x->ndim),
                 groups);
        v = sh_collective(&b, "stablehlo.all_gather", v, NULL, at, rt);
        break;
    case EM_OP_ALL_TO_ALL:
        snprintf(at, sizeof at, "concat_dimension = %d : i64, %s, split_count = %d : i64, "
                 "split_dimension = %d : i64", dim_of(a->attrs[1].i, x->ndim), groups, n,
                 dim_of(a->attrs[0].i, x->ndim));
        v = sh_collective(&b, "stablehlo.all_to_all", v, NULL, at, rt);
        break;
    default:
        sh_fail(&b, "%s is not a collective", a->op->name);
    }
    char *text = sh_ok(&b) ? sh_finish(&b, &v, 1) : NULL;
    if (!text) snprintf(err, err_n, "StableHLO emitter: %s", b.err[0] ? b.err : "failed");
    sh_free(&b);
    return text;
}

static bool device_id(const pj_plugin *pl, PJRT_Device *dev, int64_t *id) {
    PJ_ARGS(PJRT_Device_GetDescription_Args, g, device_description);
    g.device = dev;
    PJRT_Error *e = pl->api->PJRT_Device_GetDescription(&g);
    if (e) {
        pj_error_free(pl, e);
        return false;
    }
    PJ_ARGS(PJRT_DeviceDescription_Id_Args, d, id);
    d.device_description = g.device_description;
    if ((e = pl->api->PJRT_DeviceDescription_Id(&d))) {
        pj_error_free(pl, e);
        return false;
    }
    *id = d.id;
    return true;
}

/* Copies the leader context's error into every part and clears it there. */
static void fail_from_ctx(part **p, int n, em_ctx *c) {
    fail_all(p, n, c->err.status ? c->err.status : EM_ERR_BACKEND, "%s", c->err.detail);
    em_ctx_clear_error(c);
}

/* Runs on the last rank's thread while the others wait: the whole collective for all ranks. */
static void lead(void **slots, int n, void *user) {
    part **p = (part **)slots, *me = user;
    em_ctx *c = me->a->ctx;
    if (!same_call(p, n)) return;
    pj_plugin *pl = ((pj_dev *)p[0]->dev->impl)->pl;
    const em_kernel_args *a = p[0]->a;
    int64_t ids[EM_GROUP_MAX];
    for (int r = 0; r < n; r++)
        if (!device_id(pl, ((pj_dev *)p[r]->dev->impl)->dev, &ids[r])) {
            fail_all(p, n, EM_ERR_BACKEND, "the plugin gave no device id for %s",
                     p[r]->dev->name);
            return;
        }
    /* the key: op, attributes but the group, input geometry, the device assignment */
    pj_key k;
    pj_key_init(&k);
    pj_key_add(&k, "coll", 4);
    pj_key_i64(&k, a->op->id);
    for (int i = 0; i < a->op->n_attrs; i++)
        if (i != group_attr(a->op)) pj_key_i64(&k, a->attrs[i].i);
    pj_key_i64(&k, p[0]->x->dtype);
    pj_key_i64(&k, p[0]->x->ndim);
    pj_key_add(&k, p[0]->x->shape, (size_t)p[0]->x->ndim * sizeof *p[0]->x->shape);
    pj_key_i64(&k, n);
    pj_key_add(&k, ids, (size_t)n * sizeof *ids);
    if (k.oom) {
        pj_key_free(&k);
        fail_all(p, n, EM_ERR_OOM, "out of memory");
        return;
    }
    uint64_t h = pj_hash(k.p, k.len);
    pj_exec *ex = pj_cache_find(pl, &k, h);
    if (!ex) {
        char err[300];
        char *text = emit(a, p[0]->x, n, err, sizeof err);
        if (!text) {
            pj_key_free(&k);
            fail_all(p, n, EM_ERR_INTERNAL, "%s", err);
            return;
        }
        /* the compile log names the degree and the devices */
        char what[512], sig[96];
        int u = snprintf(what, sizeof what, "%s(%s) x%d replicas on ", a->op->name,
                         em_tensor_sig(p[0]->x, sig, sizeof sig), n);
        for (int r = 0; r < n && u > 0 && (size_t)u < sizeof what; r++)
            u += snprintf(what + u, sizeof what - (size_t)u, "%s%s", r ? "," : "",
                          p[r]->dev->name);
        pj_compile_spec sp = {n, 1, false, ids};
        ex = pj_compile_for(c, pl, &k, h, text, what, true, &sp);
        free(text);
        if (!ex) {
            pj_key_free(&k);
            fail_from_ctx(p, n, c);
            return;
        }
    }
    pj_key_free(&k);
    PJRT_Buffer *in[EM_GROUP_MAX], *out[EM_GROUP_MAX] = {NULL};
    PJRT_Buffer *const *arg_lists[EM_GROUP_MAX];
    PJRT_Buffer **out_lists[EM_GROUP_MAX];
    PJRT_Event *ev[EM_GROUP_MAX] = {NULL};
    for (int r = 0; r < n; r++) {
        in[r] = ((pj_buf *)p[r]->x->storage->data)->buf;
        arg_lists[r] = &in[r];
        out_lists[r] = &out[r];
    }
    PJRT_ExecuteOptions o;
    memset(&o, 0, sizeof o);
    o.struct_size = PJ_SIZE(PJRT_ExecuteOptions, incarnation_ids);
    PJ_ARGS(PJRT_LoadedExecutable_Execute_Args, e, execute_device);
    e.executable = ex->exe;
    e.options = &o;
    e.argument_lists = arg_lists;
    e.num_devices = (size_t)n;
    e.num_args = 1;
    e.output_lists = out_lists;
    e.device_complete_events = ev;
    if (pj_check(c, pl, pl->api->PJRT_LoadedExecutable_Execute(&e), true, "execute")) {
        fail_from_ctx(p, n, c);
        return;
    }
    pthread_mutex_lock(&pl->cache.lock);
    pl->cache.stats.executions++;
    pthread_mutex_unlock(&pl->cache.lock);
    for (int r = 0; r < n; r++) {
        em_tensor *t = p[r]->a->out[0];
        pj_storage_set(t->storage, out[r], t->dtype, t->ndim, t->shape);
        if (ev[r] && pj_dev_track(c, p[r]->dev, ev[r])) {
            p[r]->st = c->err.status;
            snprintf(p[r]->msg, sizeof p[r]->msg, "%s", c->err.detail);
            em_ctx_clear_error(c);
        }
    }
}

/* The input as one whole buffer of its own shape (what every replica's parameter is): x itself
 * when it is, else a contiguous copy (*copy set, the caller releases it). */
static em_tensor *whole(em_ctx *c, em_tensor *x, em_tensor **copy) {
    *copy = NULL;
    if (pj_ensure_buffer(c, x, true)) return NULL;
    const pj_buf *pb = x->storage->data;
    if (em_is_contiguous(x) && x->offset == 0 && pb->dtype == x->dtype && pb->ndim == x->ndim &&
        !memcmp(pb->dims, x->shape, (size_t)x->ndim * sizeof *x->shape))
        return x;
    return *copy = pj_make_contiguous(c, x);
}

static em_status kernel(const em_kernel_args *a) {
    em_ctx *c = a->ctx;
    em_tensor *x0 = a->in[0];
    em_device *d = x0->dev;
    pj_dev *pd = d->impl;
    em_group_info g;
    if (!em_group_lookup((int)a->attrs[group_attr(a->op)].i, &g))
        return em_op_fail(c, EM_ERR_INVALID_ARG, "not a live group");
    if (g.transport != EM_GROUP_LOCAL)
        return em_op_fail(c, EM_ERR_UNSUPPORTED, "collectives on %s need a device group of this "
                          "process (em_dist_local); a group of processes (mpirun) runs its "
                          "collectives on the CPU", d->name);
    if (pd->pl->aot)
        return pj_aot_refuse(c, d, "a collective over several devices", true);
    em_device *want = em_local_group_device(g.local, g.rank);
    if (want != d)
        return em_op_fail(c, EM_ERR_DEVICE, "rank %d of the device group lives on %s; its "
                          "tensor is on %s", g.rank, want ? want->name : "?", d->name);
    em_tensor *copy;
    part me = {a, d, whole(c, x0, &copy), g.rank, EM_OK, ""};
    if (!me.x) { /* the others must not wait for this rank */
        em_local_break(g.local, g.rank, c->err.detail);
        return c->err.status;
    }
    char err[300];
    em_status s = em_local_meet(g.local, g.rank, &me, lead, &me, err, sizeof err);
    em_tensor_release(copy);
    if (s) return em_op_fail(c, s, "%s", err);
    if (me.st) return em_op_fail(c, me.st, "%s", me.msg);
    return EM_OK;
}

void pj_backend_collectives(em_backend *be) {
    be->kernels[EM_OP_ALL_REDUCE] = kernel;
    be->kernels[EM_OP_ALL_GATHER] = kernel;
    be->kernels[EM_OP_REDUCE_SCATTER] = kernel;
    be->kernels[EM_OP_ALL_TO_ALL] = kernel;
}

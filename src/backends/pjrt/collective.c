/*
 * The collectives on PJRT devices, replica mode (issue 18): the ranks of a device group of this
 * process (em_dist_local), one thread each, call the op with their tensors on their devices.
 * Each rank's kernel hands its part to the group's meeting point (core/group.h); the last rank
 * to arrive builds one program with stablehlo.all_reduce / all_gather / reduce_scatter /
 * all_to_all over replica_groups [[0..N-1]] (ring_shift: stablehlo.collective_permute with the
 * source_target_pairs [r, r + offset mod N]), compiles it for N replicas on the ranks' devices
 * (device assignment: replica r on rank r's device) and launches it once with N argument lists
 * (PJRT_LoadedExecutable_Execute, num_devices = N). Each rank's output is its replica's result.
 * Sums and maxima of bf16 run in f32 and are rounded once, as on the CPU over MPI.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"

/* How a rank's part of a meeting ended: the first member of every part below. */
typedef struct outcome {
    em_status st;
    char msg[800];
} outcome;

/* One rank's part of a collective call. */
typedef struct part {
    outcome o;
    const em_kernel_args *a;
    em_device *dev;
    em_tensor *x;       /* the input as one whole device buffer (a->in[0] or a copy) */
    int rank;
} part;

static int group_attr(const em_op_def *op) { return em_op_attr_index(op, "group"); }

/* Every part's outcome (each part starts with its outcome). */
static void fail_all(void *parts, int n, em_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail_all(void *parts, int n, em_status st, const char *fmt, ...) {
    char msg[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    outcome **o = parts;
    for (int r = 0; r < n; r++) {
        o[r]->st = st;
        snprintf(o[r]->msg, sizeof o[r]->msg, "%s", msg);
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

/* The replicas of a collective's groups: n_groups groups of `size` replicas, rep[k * size + i]
 * the replica of rank i of group k. A program over the collective's own group has one group,
 * 0..N-1; a program over the group it was split from has one group per color of the split. */
typedef struct layout {
    int n_groups, size;
    int rep[EM_GROUP_MAX];
} layout;

static layout flat(int n) {
    layout L = {1, n, {0}};
    for (int r = 0; r < n; r++) L.rep[r] = r;
    return L;
}

/* The collective of `op` (attributes `at`) over the replica groups of L applied to x, whose
 * logical rank is nd; the result has out's dtype and shape. */
static sh_val coll_value(sh_b *b, const em_op_def *op, const em_attr *attrs, sh_val v, int nd,
                         const em_meta *out, const layout *L) {
    sh_type rt = pj_meta_type(out);
    int n = L->size;
    char groups[1200], at[1500];
    int u = snprintf(groups, sizeof groups, "replica_groups = dense<[");
    for (int k = 0; k < L->n_groups; k++) {
        u += snprintf(groups + u, sizeof groups - (size_t)u, "%s[", k ? ", " : "");
        for (int r = 0; r < n; r++)
            u += snprintf(groups + u, sizeof groups - (size_t)u, "%s%d", r ? ", " : "",
                          L->rep[k * n + r]);
        u += snprintf(groups + u, sizeof groups - (size_t)u, "]");
    }
    snprintf(groups + u, sizeof groups - (size_t)u, "]> : tensor<%dx%dxi64>", L->n_groups, n);
    switch (op->id) {
    case EM_OP_ALL_REDUCE:
    case EM_OP_REDUCE_SCATTER: {
        const char *body = attrs[0].i ? "maximum" : "add";
        bool rs = op->id == EM_OP_REDUCE_SCATTER;
        if (rs)
            snprintf(at, sizeof at, "%s, scatter_dimension = %d : i64", groups,
                     dim_of(attrs[1].i, nd));
        else
            snprintf(at, sizeof at, "%s", groups);
        v = sh_convert(b, v, SH_F32); /* sums in f32, one rounding (as the CPU over MPI) */
        v = sh_collective(b, rs ? "stablehlo.reduce_scatter" : "stablehlo.all_reduce", v, body,
                          at, sh_ty_with(rt, SH_F32));
        return sh_convert(b, v, rt.e);
    }
    case EM_OP_ALL_GATHER:
        snprintf(at, sizeof at, "all_gather_dim = %d : i64, %s", dim_of(attrs[0].i, nd), groups);
        return sh_collective(b, "stablehlo.all_gather", v, NULL, at, rt);
    case EM_OP_ALL_TO_ALL:
        snprintf(at, sizeof at, "concat_dimension = %d : i64, %s, split_count = %d : i64, "
                 "split_dimension = %d : i64", dim_of(attrs[1].i, nd), groups, n,
                 dim_of(attrs[0].i, nd));
        return sh_collective(b, "stablehlo.all_to_all", v, NULL, at, rt);
    case EM_OP_RING_SHIFT: {
        int off = (int)(((attrs[0].i % n) + n) % n);
        if (off == 0) return v; /* every rank keeps its own */
        u = snprintf(at, sizeof at, "source_target_pairs = dense<[");
        for (int k = 0; k < L->n_groups; k++)
            for (int r = 0; r < n; r++)
                u += snprintf(at + u, sizeof at - (size_t)u, "%s[%d, %d]", k || r ? ", " : "",
                              L->rep[k * n + r], L->rep[k * n + (r + off) % n]);
        snprintf(at + u, sizeof at - (size_t)u, "]> : tensor<%dx2xi64>", L->n_groups * n);
        return sh_collective(b, "stablehlo.collective_permute", v, NULL, at, rt);
    }
    default:
        sh_fail(b, "%s is not a collective", op->name);
        return v;
    }
}

static em_meta meta_of(const em_tensor *t) {
    em_meta m;
    memset(&m, 0, sizeof m);
    m.dtype = t->dtype;
    m.ndim = t->ndim;
    memcpy(m.shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
    return m;
}

/* The eager program: one parameter (the rank's x), one result (its share of the collective). */
static char *emit(const em_kernel_args *a, const em_tensor *x, int n, char *err, size_t err_n) {
    sh_b b;
    sh_init(&b);
    sh_val v = sh_param(&b, sh_ty(sh_elem_of(x->dtype), x->ndim, x->shape));
    em_meta om = meta_of(a->out[0]);
    layout L = flat(n);
    v = coll_value(&b, a->op, a->attrs, v, x->ndim, &om, &L);
    char *text = sh_ok(&b) ? sh_finish(&b, &v, 1) : NULL;
    if (!text) snprintf(err, err_n, "StableHLO emitter: %s", b.err[0] ? b.err : "failed");
    sh_free(&b);
    return text;
}

/* The sub-group l's split when it was split from `root` and its groups are of one size; NULL
 * otherwise. */
static const em_local_split *split_from(const em_local_group *l, const em_local_group *root) {
    const em_local_split *sp = em_local_group_split(l);
    if (!sp || !sp->parent || sp->parent != root) return NULL;
    int count[EM_GROUP_MAX] = {0};
    for (int p = 0; p < sp->parent_size; p++) count[sp->group_of[p]]++;
    for (int k = 0; k < sp->n_groups; k++)
        if (count[k] != count[0]) return NULL;
    return sp;
}

/* The replica groups of a collective over l's ranks in a program over the group it was split
 * from: every group of the split, rank i of group k its member's rank in the parent. */
static layout split_layout(const em_local_split *sp) {
    layout L = {sp->n_groups, sp->parent_size / sp->n_groups, {0}};
    for (int p = 0; p < sp->parent_size; p++) L.rep[sp->group_of[p] * L.size + sp->rank_in[p]] = p;
    return L;
}

/* In a whole-graph program (compile mode): the collective over the node's device group, whose
 * size the replica groups name; the program is compiled for that many replicas
 * (pj_group_compile). In a program over the group it was split from (e->grp, pj_graph_group),
 * the replica groups are the split's partition of the parent's replicas. */
static em_status emit_program(pj_emit *e) {
    em_group_info g;
    if (!em_group_lookup((int)e->attrs[group_attr(e->op)].i, &g)) {
        sh_fail(e->b, "its group is not a live group");
        return EM_ERR_INVALID_ARG;
    }
    if (g.transport != EM_GROUP_LOCAL) {
        sh_fail(e->b, "a compiled program on a PJRT device runs the collectives of a device "
                "group of this process (em_dist_local); a group of processes (mpirun) runs "
                "them on the CPU");
        return EM_ERR_UNSUPPORTED;
    }
    layout L = flat(g.size);
    if (e->grp && e->grp->local != g.local) {
        const em_local_split *sp = split_from(g.local, e->grp->local);
        if (!sp) {
            sh_fail(e->b, "its device group was not split from the program's");
            return EM_ERR_INTERNAL;
        }
        L = split_layout(sp);
    }
    e->out[0] = coll_value(e->b, e->op, e->attrs, e->in[0], e->tin[0]->ndim, &e->out_meta[0],
                           &L);
    return sh_ok(e->b) ? EM_OK : EM_ERR_INTERNAL;
}

void pj_register_collective(pj_op *t) {
    t[EM_OP_ALL_REDUCE].emit_program = emit_program;
    t[EM_OP_ALL_GATHER].emit_program = emit_program;
    t[EM_OP_REDUCE_SCATTER].emit_program = emit_program;
    t[EM_OP_ALL_TO_ALL].emit_program = emit_program;
    t[EM_OP_RING_SHIFT].emit_program = emit_program;
}

bool pj_device_id(const pj_plugin *pl, const em_device *d, int64_t *id) {
    const pj_dev *pd = d->impl;
    if (pl->aot) { /* a compile-only device: its topology description's id */
        *id = pd->device_id;
        return true;
    }
    PJ_ARGS(PJRT_Device_GetDescription_Args, g, device_description);
    g.device = pd->dev;
    PJRT_Error *e = pl->api->PJRT_Device_GetDescription(&g);
    if (e) {
        pj_error_free(pl, e);
        return false;
    }
    PJ_ARGS(PJRT_DeviceDescription_Id_Args, di, id);
    di.device_description = g.device_description;
    if ((e = pl->api->PJRT_DeviceDescription_Id(&di))) {
        pj_error_free(pl, e);
        return false;
    }
    *id = di.id;
    return true;
}

/* Copies the leader context's error into every part and clears it there. */
static void fail_from_ctx(void *p, int n, em_ctx *c) {
    fail_all(p, n, c->err.status ? c->err.status : EM_ERR_BACKEND, "%s", c->err.detail);
    em_ctx_clear_error(c);
}

/*
 * Awaits the executions already launched on every member's device before a program that runs
 * on all of them. XLA's CPU client starts each device's part of a multi-device program on its
 * own small thread pool, where the part first takes one of the device's in-flight slots (32)
 * and then waits in the collectives' rendezvous for the other parts. With one device's slots
 * all held by eager work queued behind that pool, the parts already in the rendezvous hold
 * every pool thread, the queued work never runs, and the plugin aborts the process after 40 s
 * (docs/notes/2026-12-05-xla-group-deadlock.md). Drained first, no part waits for a slot.
 * The other ranks are waiting in the meet meanwhile, so nothing is launched on these devices
 * until the program is.
 */
static em_status drain_all(em_ctx *c, em_device *const *devs, int n) {
    em_status s = EM_OK;
    for (int r = 0; r < n; r++) {
        em_status sr = pj_dev_drain(s ? NULL : c, devs[r]);
        if (!s) s = sr;
    }
    return s;
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
        if (!pj_device_id(pl, p[r]->dev, &ids[r])) {
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
        pj_compile_spec sp = {n, 1, false, ids, false};
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
    em_device *devs[EM_GROUP_MAX];
    for (int r = 0; r < n; r++) {
        in[r] = ((pj_buf *)p[r]->x->storage->data)->buf;
        arg_lists[r] = &in[r];
        out_lists[r] = &out[r];
        devs[r] = p[r]->dev;
    }
    if (drain_all(c, devs, n) ||
        pj_execute_multi(c, pl, ex, n, 1, arg_lists, out_lists, ev, true)) {
        fail_from_ctx(p, n, c);
        return;
    }
    for (int r = 0; r < n; r++) {
        em_tensor *t = p[r]->a->out[0];
        pj_storage_set(t->storage, out[r], t->dtype, t->ndim, t->shape);
        if (ev[r] && pj_dev_track(c, p[r]->dev, ev[r])) {
            p[r]->o.st = c->err.status;
            snprintf(p[r]->o.msg, sizeof p[r]->o.msg, "%s", c->err.detail);
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
    part me = {{EM_OK, ""}, a, d, whole(c, x0, &copy), g.rank};
    if (!me.x) { /* the others must not wait for this rank */
        em_local_break(g.local, g.rank, c->err.detail);
        return c->err.status;
    }
    char err[300];
    em_status s = em_local_meet(g.local, g.rank, &me, lead, &me, err, sizeof err);
    em_tensor_release(copy);
    if (s) return em_op_fail(c, s, "%s", err);
    if (me.o.st) return em_op_fail(c, me.o.st, "%s", me.o.msg);
    return EM_OK;
}

/* ---- compile mode over a device group ---- */

/* The rank of `root` that rank `rank` of l is: l is root, or split from it; -1 if none. */
static int root_rank(const em_local_group *l, int rank, const em_local_group *root) {
    if (l == root) return rank;
    const em_local_split *sp = em_local_group_split(l);
    for (int p = 0; p < sp->parent_size; p++)
        if (sp->group_of[p] == sp->index && sp->rank_in[p] == rank) return p;
    return -1;
}

static em_local_group *parent_of(const em_local_group *l) {
    return em_local_group_split(l)->parent;
}

em_status pj_graph_group(em_ctx *c, const em_graph *g, em_device *dev, pj_group_spot *gs,
                         bool *found) {
    memset(gs, 0, sizeof *gs);
    *found = false;
    /* the first collective's group, and the first other group: they name the program's group
     * (root): the first's, or the one both were split from */
    em_group_info g0 = {0, 0, EM_GROUP_STORE_ONLY, NULL, NULL};
    const em_gnode *n0 = NULL, *n1 = NULL;
    em_local_group *root = NULL;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < g->n_nodes; i++) {
            const em_gnode *n = &g->nodes[i];
            const em_op_def *op = em_op_get(n->op);
            int gi = n->dead ? -1 : group_attr(op);
            if (gi < 0) continue;
            em_group_info gr;
            if (!em_group_lookup((int)n->attrs[gi].i, &gr))
                return em_fail_at(c, EM_ERR_INVALID_ARG, op->name, n->file, n->line,
                                  "its group is not a live group");
            if (gr.transport != EM_GROUP_LOCAL)
                return em_fail_at(c, EM_ERR_UNSUPPORTED, op->name, n->file, n->line,
                                  "a compiled program on %s runs the collectives of a device "
                                  "group of this process (em_dist_local); a group of processes "
                                  "(mpirun) runs them on the CPU", dev->name);
            const em_op_def *op0 = n0 ? em_op_get(n0->op) : NULL;
            if (pass == 0) {
                if (!n0) {
                    g0 = gr;
                    n0 = n;
                    root = gr.local;
                } else if (!n1 && gr.local != g0.local) {
                    n1 = n;
                    em_local_group *p0 = parent_of(g0.local), *p1 = parent_of(gr.local);
                    root = p1 == g0.local ? g0.local : p0 == gr.local ? gr.local
                           : p0 && p0 == p1 ? p0 : NULL;
                    if (!root)
                        return em_fail_at(c, EM_ERR_UNSUPPORTED, op->name, n->file, n->line,
                                          "this collective's device group and the one of the "
                                          "%s at %s:%d were not split from one device group "
                                          "(em_dist_split): a compiled program runs over one "
                                          "device group, or over sub-groups of one", op0->name,
                                          n0->file, n0->line);
                }
                continue;
            }
            /* pass 1: every group is root or split from it, all one rank of root */
            if (gr.local != root && parent_of(gr.local) != root)
                return em_fail_at(c, EM_ERR_UNSUPPORTED, op->name, n->file, n->line,
                                  "this collective's device group is neither the one of the %s "
                                  "at %s:%d nor split from the same device group "
                                  "(em_dist_split): a compiled program runs over one device "
                                  "group, or over sub-groups of one", op0->name, n0->file,
                                  n0->line);
            if (gr.local != root && !split_from(gr.local, root))
                return em_fail_at(c, EM_ERR_UNSUPPORTED, op->name, n->file, n->line,
                                  "this collective's device group comes from a split into "
                                  "groups of unequal sizes: a compiled program over several "
                                  "sub-groups needs equal ones (the replica groups)");
            int rr = root_rank(gr.local, gr.rank, root),
                r0 = root_rank(g0.local, g0.rank, root);
            if (rr != r0)
                return em_fail_at(c, EM_ERR_UNSUPPORTED, op->name, n->file, n->line,
                                  "this collective runs on rank %d of the program's device "
                                  "group, the %s at %s:%d on rank %d: a compiled program "
                                  "holds one rank's groups", rr, op0->name, n0->file, n0->line,
                                  r0);
        }
    if (n0 && root != g0.local) { /* the program runs over root, with this rank's rank there */
        g0.rank = root_rank(g0.local, g0.rank, root);
        g0.local = root;
        g0.size = em_local_group_size(root);
    }
    if (!n0) return EM_OK;
    const em_op_def *op0 = em_op_get(n0->op);
    em_device *want = em_local_group_device(g0.local, g0.rank);
    if (want != dev)
        return em_fail_at(c, EM_ERR_DEVICE, op0->name, n0->file, n0->line,
                          "rank %d of the device group lives on %s; the program is compiled "
                          "for %s", g0.rank, want ? want->name : "?", dev->name);
    pj_plugin *pl = ((pj_dev *)dev->impl)->pl;
    if (pl->aot)
        return pj_aot_refuse(c, dev, "a program over several devices", false);
    for (int r = 0; r < g0.size; r++) {
        em_device *d = em_local_group_device(g0.local, r);
        if (!d || !em_device_is_pjrt(d) || ((pj_dev *)d->impl)->pl != pl)
            return em_fail_at(c, EM_ERR_DEVICE, op0->name, n0->file, n0->line,
                              "rank %d's device %s is not a device of %s's plugin", r,
                              d ? d->name : "?", dev->name);
        if (!pj_device_id(pl, d, &gs->ids[r]))
            return em_fail_at(c, EM_ERR_BACKEND, op0->name, n0->file, n0->line,
                              "the plugin gave no device id for %s", d->name);
    }
    em_local_group_ref(g0.local);
    gs->local = g0.local;
    gs->rank = g0.rank;
    gs->size = g0.size;
    *found = true;
    return EM_OK;
}

void pj_group_release(pj_group_spot *gs) {
    if (gs && gs->local) em_local_group_unref(gs->local);
    if (gs) gs->local = NULL;
}

void pj_group_break(const pj_group_spot *gs, const char *why) {
    if (gs && gs->local) em_local_break(gs->local, gs->rank, why);
}

/* One rank's part of a group compile. */
typedef struct cpart {
    outcome o;
    em_ctx *c;
    pj_plugin *pl;
    const pj_group_spot *gs;
    const char *text, *what;
    const pj_key *k;
    pj_exec *x;
} cpart;

static void lead_compile(void **slots, int n, void *user) {
    cpart **p = (cpart **)slots, *me = user;
    for (int r = 1; r < n; r++)
        if (strcmp(p[r]->text, p[0]->text)) {
            fail_all(p, n, EM_ERR_INVALID_ARG, "rank %d traced another program than rank 0: "
                     "every rank of a device group compiles the same step", r);
            return;
        }
    pj_key k;
    pj_key_init(&k);
    pj_key_add(&k, me->k->p, me->k->len);
    pj_key_add(&k, "group", 5);
    pj_key_i64(&k, n);
    pj_key_add(&k, me->gs->ids, (size_t)n * sizeof *me->gs->ids);
    if (k.oom) {
        pj_key_free(&k);
        fail_all(p, n, EM_ERR_OOM, "out of memory");
        return;
    }
    uint64_t h = pj_hash(k.p, k.len);
    pj_exec *x = pj_cache_find(me->pl, &k, h);
    if (!x) {
        pj_compile_spec sp = {n, 1, false, me->gs->ids, false};
        x = pj_compile_for(me->c, me->pl, &k, h, me->text, me->what, false, &sp);
    }
    pj_key_free(&k);
    if (!x) {
        fail_from_ctx(p, n, me->c);
        return;
    }
    for (int r = 0; r < n; r++) p[r]->x = x;
}

pj_exec *pj_group_compile(em_ctx *c, pj_plugin *pl, const pj_group_spot *gs, const char *text,
                          const pj_key *k, const char *what) {
    char full[512], err[300];
    int u = snprintf(full, sizeof full, "%s, x%d replicas on ", what, gs->size);
    for (int r = 0; r < gs->size && u > 0 && (size_t)u < sizeof full; r++)
        u += snprintf(full + u, sizeof full - (size_t)u, "%s%s", r ? "," : "",
                      em_local_group_device(gs->local, r)->name);
    cpart me = {{EM_OK, ""}, c, pl, gs, text, full, k, NULL};
    em_status s = em_local_meet(gs->local, gs->rank, &me, lead_compile, &me, err, sizeof err);
    if (s) {
        EM_FAIL(c, s, "compile", "%s", err);
        return NULL;
    }
    if (me.o.st) {
        EM_FAIL(c, me.o.st, "compile", "%s", me.o.msg);
        return NULL;
    }
    return me.x;
}

/* One rank's part of a group launch. */
typedef struct xpart {
    outcome o;
    em_ctx *c;
    em_device *dev;
    pj_exec *x;
    PJRT_Buffer *const *args;
    int n_args;
    PJRT_Buffer **outs;
} xpart;

static void lead_execute(void **slots, int n, void *user) {
    xpart **p = (xpart **)slots, *me = user;
    em_ctx *c = me->c;
    PJRT_Buffer *const *arg_lists[EM_GROUP_MAX] = {NULL};
    PJRT_Buffer **out_lists[EM_GROUP_MAX] = {NULL};
    PJRT_Event *ev[EM_GROUP_MAX] = {NULL};
    em_device *devs[EM_GROUP_MAX];
    for (int r = 0; r < n; r++) {
        if (p[r]->x != p[0]->x || p[r]->n_args != p[0]->n_args) {
            fail_all(p, n, EM_ERR_INVALID_ARG, "rank %d runs another compiled program than "
                     "rank 0: every rank of a device group runs the same steps in the same "
                     "order", r);
            return;
        }
        arg_lists[r] = p[r]->args;
        out_lists[r] = p[r]->outs;
        devs[r] = p[r]->dev;
    }
    pj_plugin *pl = ((pj_dev *)p[0]->dev->impl)->pl;
    if (drain_all(c, devs, n) ||
        pj_execute_multi(c, pl, p[0]->x, n, p[0]->n_args, arg_lists, out_lists, ev, false)) {
        fail_from_ctx(p, n, c);
        return;
    }
    for (int r = 0; r < n; r++)
        if (ev[r] && pj_dev_track(c, p[r]->dev, ev[r])) {
            p[r]->o.st = c->err.status;
            snprintf(p[r]->o.msg, sizeof p[r]->o.msg, "%s", c->err.detail);
            em_ctx_clear_error(c);
        }
}

em_status pj_group_execute(em_ctx *c, const pj_group_spot *gs, em_device *dev, pj_exec *x,
                           PJRT_Buffer *const *args, int n_args, PJRT_Buffer **outs) {
    char err[300];
    xpart me = {{EM_OK, ""}, c, dev, x, args, n_args, outs};
    em_status s = em_local_meet(gs->local, gs->rank, &me, lead_execute, &me, err, sizeof err);
    if (s) return EM_FAIL(c, s, "compiled_run", "%s", err);
    if (me.o.st) return EM_FAIL(c, me.o.st, "compiled_run", "%s", me.o.msg);
    return EM_OK;
}

void pj_backend_collectives(em_backend *be) {
    be->kernels[EM_OP_ALL_REDUCE] = kernel;
    be->kernels[EM_OP_ALL_GATHER] = kernel;
    be->kernels[EM_OP_REDUCE_SCATTER] = kernel;
    be->kernels[EM_OP_ALL_TO_ALL] = kernel;
    be->kernels[EM_OP_RING_SHIFT] = kernel;
}

/*
 * Compile mode on the CPU: a traced graph (core/graph.h) lowered into an execution plan. Everything the eager dispatcher does per op call —
 * arity and device checks, shape rules, view construction, output allocation, fusion decisions —
 * is done once, here, when the plan is built. A run copies the inputs in and calls kernels:
 *
 *   - views are built once over their planned buffers (the buffers never move);
 *   - nodes that only depend on creation ops (folded) run once, at build;
 *   - chains of element-wise nodes whose intermediate values have one reader are evaluated as
 *     one expression by the CPU backend's fused engine, so those values never touch memory;
 *   - the other intermediate values live in one arena, placed by a first-fit allocator over
 *     their lifetimes (a buffer is reused once the last reader of every view of it has run).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu.h"
#include "core/graph.h"
#include "core/kernel_registry.h"

#define FUSE_MAX_NODES 16
#define ARENA_ALIGN 64

typedef struct step {
    const em_kimpl *k; /* a kernel call (the registry's choice at build), or */
    em_tensor *fused; /* an expression root to evaluate (lazy tree over plan tensors) */
    const em_op_def *op;
    int node;
    int n_in, n_out;
    em_tensor **in, **out; /* into the plan's pointer pool */
    const em_attr *attrs;
    int group; /* > 1: this step and the next group-1 call one op on one input, run together */
} step;

typedef struct em_cpu_plan {
    const em_graph *g; /* the graph it was built from (owned by the caller) */
    em_tensor **vt;    /* per value: the tensor that holds it (NULL for values not needed) */
    em_tensor **owned; /* tensors the plan created, released at free */
    int n_owned, cap_owned;
    step *steps;
    int n_steps;
    em_tensor **pool; /* step argument arrays */
    em_tensor *arena;
    em_program_info info;
    /* EMBER_PLAN_PROFILE=1: seconds per op, then per op run in groups, printed at free */
    double *prof;
    int64_t prof_runs;
} em_cpu_plan;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void profile_print(const em_cpu_plan *p) {
    double total = 0;
    for (int i = 0; i < 2 * EM_OP_COUNT; i++) total += p->prof[i];
    fprintf(stderr, "ember plan profile: %lld runs, %.3f ms per run\n", (long long)p->prof_runs,
            p->prof_runs ? total * 1e3 / (double)p->prof_runs : 0.0);
    for (int i = 0; i < 2 * EM_OP_COUNT; i++) {
        if (p->prof[i] <= 0) continue;
        char name[48];
        snprintf(name, sizeof name, "%s%s", em_op_get((em_op_id)(i % EM_OP_COUNT))->name,
                 i >= EM_OP_COUNT ? " (grouped)" : "");
        fprintf(stderr, "  %-18s %9.3f ms/run %5.1f%%\n", name,
                p->prof[i] * 1e3 / (double)(p->prof_runs ? p->prof_runs : 1),
                100 * p->prof[i] / (total > 0 ? total : 1));
    }
}

static bool own(em_cpu_plan *p, em_tensor *t) {
    if (p->n_owned == p->cap_owned) {
        int cap = p->cap_owned ? 2 * p->cap_owned : 256;
        em_tensor **o = realloc(p->owned, (size_t)cap * sizeof *o);
        if (!o) return false;
        p->owned = o;
        p->cap_owned = cap;
    }
    p->owned[p->n_owned++] = t;
    return true;
}

void em_cpu_program_free(void *prog) {
    em_cpu_plan *p = prog;
    if (!p) return;
    if (p->prof) profile_print(p);
    free(p->prof);
    for (int i = p->n_owned - 1; i >= 0; i--) em_tensor_release(p->owned[i]);
    free(p->owned);
    free(p->vt);
    free(p->steps);
    free(p->pool);
    em_tensor_release(p->arena);
    free(p);
}

/* ---- arena placement: first fit over free extents, merged on release ---- */

typedef struct extent {
    int64_t off, len;
} extent;

typedef struct arena_alloc {
    extent *free_;
    int n_free, cap;
    int64_t end;
} arena_alloc;

static int64_t arena_take(arena_alloc *a, int64_t len) {
    len = (len + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    if (len == 0) len = ARENA_ALIGN;
    int best = -1;
    for (int i = 0; i < a->n_free; i++)
        if (a->free_[i].len >= len && (best < 0 || a->free_[i].len < a->free_[best].len)) best = i;
    if (best >= 0) {
        int64_t off = a->free_[best].off;
        a->free_[best].off += len;
        a->free_[best].len -= len;
        if (!a->free_[best].len) a->free_[best] = a->free_[--a->n_free];
        return off;
    }
    /* grow: a free extent that ends at the arena's end is extended */
    for (int i = 0; i < a->n_free; i++)
        if (a->free_[i].off + a->free_[i].len == a->end) {
            int64_t off = a->free_[i].off;
            a->end = off + len;
            a->free_[i] = a->free_[--a->n_free];
            return off;
        }
    int64_t off = a->end;
    a->end += len;
    return off;
}

static bool arena_give(arena_alloc *a, int64_t off, int64_t len) {
    len = (len + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    if (len == 0) len = ARENA_ALIGN;
    for (int i = 0; i < a->n_free; i++) { /* merge with neighbours */
        extent *e = &a->free_[i];
        if (e->off + e->len == off) {
            off = e->off;
            len += e->len;
            a->free_[i--] = a->free_[--a->n_free];
        } else if (off + len == e->off) {
            len += e->len;
            a->free_[i--] = a->free_[--a->n_free];
        }
    }
    if (a->n_free == a->cap) {
        int cap = a->cap ? 2 * a->cap : 64;
        extent *f = realloc(a->free_, (size_t)cap * sizeof *f);
        if (!f) return false;
        a->free_ = f;
        a->cap = cap;
    }
    a->free_[a->n_free++] = (extent){off, len};
    return true;
}

/* ---- building ---- */

static em_status node_fail(em_ctx *c, const em_gnode *n, em_status s, const char *msg) {
    return em_fail_at(c, s, em_op_get(n->op)->name, n->file, n->line, "compile (cpu plan): %s",
                      msg);
}

static int64_t val_bytes(const em_gval *v) {
    int64_t n = 1;
    for (int i = 0; i < v->ndim; i++) n *= v->shape[i];
    return n * (int64_t)em_esize(v->dtype);
}

static bool same_shape(const em_gval *a, const em_gval *b) {
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape);
}

/* Whether the op has only its built-in kernel on this backend (the kernel registry). */
static bool builtin_only(const em_backend *be, em_op_id op) {
    const em_kset *ks = em_kset_get(be, op);
    return ks && ks->trivial;
}

/* Decides which element-wise nodes are computed inline by their only reader. */
static void mark_fusion(em_graph *g) {
    int *reader = malloc((size_t)g->n_vals * sizeof *reader);
    int *size = malloc((size_t)g->n_nodes * sizeof *size);
    int *epoch = malloc((size_t)g->n_nodes * sizeof *epoch);
    if (!reader || !size || !epoch) goto done;
    for (int v = 0; v < g->n_vals; v++) reader[v] = -1;
    int e = 0;
    for (int n = 0; n < g->n_nodes; n++) {
        em_gnode *nd = &g->nodes[n];
        size[n] = 1;
        epoch[n] = e;
        if (nd->dead) continue;
        if (em_gnode_writes(nd)) e++;
        for (int i = 0; i < nd->n_in; i++)
            if (nd->in[i] >= 0) reader[nd->in[i]] = n;
    }
    for (int n = 0; n < g->n_nodes; n++) {
        em_gnode *x = &g->nodes[n];
        if (x->dead || x->constant || em_op_get(x->op)->kind != EM_OPK_EW || x->n_out != 1)
            continue;
        const em_gval *xv = &g->vals[x->out0];
        if (xv->n_uses != 1 || !xv->dev->be->eval_lazy || !xv->dev->be->host_accessible) continue;
        int r = reader[x->out0];
        if (r < 0) continue; /* read by the graph's outputs only */
        em_gnode *y = &g->nodes[r];
        if (y->dead || y->constant || em_op_get(y->op)->kind != EM_OPK_EW || epoch[r] != epoch[n])
            continue;
        if (!same_shape(xv, &g->vals[y->out0]) || size[r] + size[n] > FUSE_MAX_NODES) continue;
        /* fusion is the built-in engine's: an op with other implementations (the kernel hub)
         * keeps its own step, so the registry chooses, as in eager mode */
        if (!builtin_only(xv->dev->be, x->op) || !builtin_only(xv->dev->be, y->op)) continue;
        x->fused_into = r;
        size[r] += size[n];
    }
done:
    free(reader);
    free(size);
    free(epoch);
}

/* The node whose step computes node n (n itself unless it is fused into a reader). */
static int exec_node(const em_graph *g, int n) {
    while (g->nodes[n].fused_into >= 0) n = g->nodes[n].fused_into;
    return n;
}

static em_tensor *arena_tensor(em_cpu_plan *p, const em_gval *v, int64_t off) {
    em_tensor *t = em_tensor_alloc_meta(v->dtype, v->ndim, v->shape);
    if (!t) return NULL;
    t->dev = p->arena->dev;
    t->storage = p->arena->storage;
    em_storage_retain(t->storage);
    t->offset = off / (int64_t)em_esize(v->dtype);
    return t;
}

/* A lazy tensor for fused node n over the plan's tensors (retains its inputs). */
static em_tensor *lazy_tensor(em_cpu_plan *p, const em_gnode *n, const em_gval *v) {
    em_tensor *t = em_tensor_alloc_meta(v->dtype, v->ndim, v->shape);
    em_lazy *lz = t ? calloc(1, sizeof *lz) : NULL;
    if (!lz) {
        free(t);
        return NULL;
    }
    t->dev = v->dev;
    lz->op = n->op;
    lz->n_in = n->n_in;
    lz->depth = 1;
    for (int i = 0; i < n->n_in; i++) lz->in[i] = em_tensor_retain(p->vt[n->in[i]]);
    memcpy(lz->attrs, n->attrs, sizeof lz->attrs);
    t->lazy = lz;
    return t;
}

static em_kernel_args step_args(em_ctx *c, const step *s);

static em_status run_step(em_ctx *c, em_cpu_plan *p, const step *s) {
    if (s->fused) return s->fused->dev->be->eval_lazy(c, s->fused);
    em_kernel_args a = step_args(c, s);
    c->cur.op = s->op->name;
    c->cur.file = p->g->nodes[s->node].file;
    c->cur.line = p->g->nodes[s->node].line;
    c->cur.in = s->in;
    c->cur.n_in = s->n_in;
    c->cur.dev = p->arena->dev;
    const em_kimpl *k = s->k;
    if (atomic_load_explicit(&k->disabled, memory_order_relaxed)) { /* since the build */
        const em_kset *ks = em_kset_get(p->arena->dev->be, s->op->id);
        k = ks ? em_kset_pick(ks, &a, EM_KMODE_COMPILE) : NULL;
        if (!k) return em_op_fail(c, EM_ERR_UNSUPPORTED, "no kernel takes this call any more");
    }
    em_status st = em_kimpl_run(k, &a);
    if (st != EM_OK && !c->err.status) em_op_fail(c, st, "kernel failed");
    return st;
}

static em_kernel_args step_args(em_ctx *c, const step *s) {
    em_kernel_args a = {c, s->op, s->in, s->n_in, s->out, s->n_out, s->attrs};
    return a;
}

/* Calls of one op that read the same input one after the other (the linears of the q/k/v
 * projections, of gate/up) run as one parallel pass where the op's kernels allow it
 * (em_cpu_group_get): one meeting of the threads instead of one per call. */
static void group_steps(em_ctx *c, em_cpu_plan *p) {
    for (int i = 0; i < p->n_steps;) {
        step *s = &p->steps[i];
        em_kernel_args a = step_args(c, s);
        /* the groups are the built-in kernels' */
        const em_cpu_group_fns *grp = s->k && s->k->fn ? em_cpu_group_get(s->op->id) : NULL;
        int n = 1;
        if (grp && grp->joins(&a))
            while (i + n < p->n_steps && n < EM_CPU_GROUP_MAX) {
                step *t = &p->steps[i + n];
                em_kernel_args b = step_args(c, t);
                if (!t->k || !t->k->fn || t->op != s->op || t->in[0] != s->in[0] ||
                    t->out[0]->dtype != s->out[0]->dtype || !grp->joins(&b))
                    break;
                n++;
            }
        s->group = n;
        if (n > 1) p->info.grouped += n;
        i += n;
    }
}

void *em_cpu_program_build(em_ctx *c, em_graph *g, em_device *dev, em_program_info *info) {
    if (g->spmd_parts > 1) {
        EM_FAIL(c, EM_ERR_UNSUPPORTED, "compile", "SPMD partitioning over %d devices runs on "
                "PJRT devices; %s is not one", g->spmd_parts, dev->name);
        return NULL;
    }
    em_cpu_plan *p = calloc(1, sizeof *p);
    int64_t *off = malloc(((size_t)g->n_vals + 1) * sizeof *off);
    int *last = malloc(((size_t)g->n_vals + 1) * sizeof *last);
    int *root = malloc(((size_t)g->n_vals + 1) * sizeof *root);
    arena_alloc aa = {0};
    if (!p || !off || !last || !root) goto oom;
    p->g = g;
    p->vt = calloc((size_t)g->n_vals + 1, sizeof *p->vt);
    p->steps = calloc((size_t)g->n_nodes + 1, sizeof *p->steps);
    size_t pool_n = 0;
    for (int n = 0; n < g->n_nodes; n++) pool_n += (size_t)(g->nodes[n].n_in + g->nodes[n].n_out);
    p->pool = calloc(pool_n + 1, sizeof *p->pool);
    if (!p->vt || !p->steps || !p->pool) goto oom;
    const char *prof = getenv("EMBER_PLAN_PROFILE");
    if (prof && *prof && strcmp(prof, "0") &&
        !(p->prof = calloc(2 * EM_OP_COUNT, sizeof(double))))
        goto oom;

    for (int n = 0; n < g->n_nodes; n++) {
        const em_gnode *nd = &g->nodes[n];
        if (nd->dead) continue;
        for (int o = 0; o < nd->n_out; o++)
            if (!g->vals[nd->out0 + o].dev->be->host_accessible) {
                node_fail(c, nd, EM_ERR_UNSUPPORTED, "the value is not on a host device");
                goto fail;
            }
    }
    for (int n = 0; n < g->n_nodes; n++) g->nodes[n].fused_into = -1;
    mark_fusion(g);

    /* lifetimes of the memory owners (views extend their root's) */
    for (int v = 0; v < g->n_vals; v++) {
        root[v] = v;
        last[v] = -1;
        off[v] = -1;
    }
    for (int n = 0; n < g->n_nodes; n++) {
        const em_gnode *nd = &g->nodes[n];
        if (nd->dead) continue;
        if (em_op_get(nd->op)->kind == EM_OPK_VIEW)
            for (int o = 0; o < nd->n_out; o++) root[nd->out0 + o] = root[nd->in[0]];
        int at = exec_node(g, n);
        for (int i = 0; i < nd->n_in; i++)
            if (nd->in[i] >= 0 && last[root[nd->in[i]]] < at) last[root[nd->in[i]]] = at;
    }
    for (int i = 0; i < g->n_outputs; i++) last[root[g->outputs[i]]] = g->n_nodes;

    /* placement, in program order: free what died before node n, then place n's outputs */
    int64_t unplanned = 0;
    int *live = malloc(((size_t)g->n_vals + 1) * sizeof *live);
    int n_live = 0;
    if (!live) goto oom;
    for (int n = 0; n < g->n_nodes; n++) {
        const em_gnode *nd = &g->nodes[n];
        if (nd->dead || nd->fused_into >= 0 || nd->constant ||
            em_op_get(nd->op)->kind == EM_OPK_VIEW)
            continue;
        for (int i = 0; i < n_live; i++)
            if (last[live[i]] < n) {
                if (!arena_give(&aa, off[live[i]], val_bytes(&g->vals[live[i]]))) {
                    free(live);
                    goto oom;
                }
                live[i--] = live[--n_live];
            }
        for (int o = 0; o < nd->n_out; o++) {
            int v = nd->out0 + o;
            off[v] = arena_take(&aa, val_bytes(&g->vals[v]));
            unplanned += val_bytes(&g->vals[v]);
            if (last[v] < n) last[v] = n; /* never read: still written by its kernel */
            live[n_live++] = v;
        }
    }
    free(live);
    p->info.arena_bytes = aa.end;
    p->info.unplanned_bytes = unplanned;
    int64_t arena_len = aa.end ? aa.end : ARENA_ALIGN;
    p->arena = em_tensor_new(c, dev, EM_U8, 1, &arena_len);
    if (!p->arena) goto fail;

    /* tensors for every value, steps for every kernel */
    for (int v = 0; v < g->n_vals; v++) {
        const em_gval *gv = &g->vals[v];
        if (gv->kind == EM_GV_CAPTURED) {
            p->vt[v] = gv->t;
        } else if (gv->kind == EM_GV_INPUT) {
            p->vt[v] = em_tensor_new(c, gv->dev, gv->dtype, gv->ndim, gv->shape);
            if (!p->vt[v] || !own(p, p->vt[v])) goto oom;
        }
    }
    size_t pool_at = 0;
    for (int n = 0; n < g->n_nodes; n++) {
        const em_gnode *nd = &g->nodes[n];
        if (nd->dead) continue;
        const em_op_def *op = em_op_get(nd->op);
        em_tensor *ins[EM_MAX_INPUTS];
        for (int i = 0; i < nd->n_in; i++) ins[i] = nd->in[i] >= 0 ? p->vt[nd->in[i]] : NULL;
        if (op->kind == EM_OPK_VIEW) { /* over the planned buffer: geometry only */
            em_meta m[EM_MAX_OUTPUTS];
            for (int o = 0; o < nd->n_out; o++) {
                const em_gval *gv = &g->vals[nd->out0 + o];
                m[o].dtype = gv->dtype;
                m[o].ndim = gv->ndim;
                memcpy(m[o].shape, gv->shape, sizeof m[o].shape);
            }
            int64_t st[EM_MAX_OUTPUTS][EM_MAX_DIMS], voff[EM_MAX_OUTPUTS];
            bool copy;
            if (em_view_geometry(c, op, ins[0], nd->attrs, m, nd->n_out, st, voff, &copy))
                goto fail;
            if (copy) { /* the trace records the copy a reshape needs as a node of its own */
                node_fail(c, nd, EM_ERR_INTERNAL, "a view copied its input");
                goto fail;
            }
            for (int o = 0; o < nd->n_out; o++) {
                em_tensor *t = em_tensor_view_of(ins[0], m[o].ndim, m[o].shape, st[o], voff[o]);
                if (!t || !own(p, t)) goto oom;
                p->vt[nd->out0 + o] = t;
            }
            continue;
        }
        if (nd->fused_into >= 0) {
            em_tensor *t = lazy_tensor(p, nd, &g->vals[nd->out0]);
            if (!t || !own(p, t)) goto oom;
            p->vt[nd->out0] = t;
            continue;
        }
        em_device *nd_dev = nd->n_out ? g->vals[nd->out0].dev : ins[0]->dev;
        const em_kset *ks = em_kset_get(nd_dev->be, nd->op);
        if (!ks) {
            node_fail(c, nd, EM_ERR_UNSUPPORTED, "no kernel for this op on the device");
            goto fail;
        }
        for (int o = 0; o < nd->n_out; o++) {
            const em_gval *gv = &g->vals[nd->out0 + o];
            em_tensor *t = nd->constant
                               ? em_tensor_new(c, gv->dev, gv->dtype, gv->ndim, gv->shape)
                               : arena_tensor(p, gv, off[nd->out0 + o]);
            if (!t || !own(p, t)) goto oom;
            p->vt[nd->out0 + o] = t;
        }
        step *s = &p->steps[p->n_steps];
        s->op = op;
        s->node = n;
        s->n_in = nd->n_in;
        s->n_out = nd->n_out;
        s->attrs = nd->attrs;
        s->in = p->pool + pool_at;
        memcpy(s->in, ins, (size_t)nd->n_in * sizeof *ins);
        pool_at += (size_t)nd->n_in;
        s->out = p->pool + pool_at;
        for (int o = 0; o < nd->n_out; o++) s->out[o] = p->vt[nd->out0 + o];
        pool_at += (size_t)nd->n_out;
        bool fused_root = false;
        for (int i = 0; i < nd->n_in; i++)
            if (ins[i] && ins[i]->lazy) fused_root = true;
        if (fused_root) {
            /* the expression root: a lazy twin of the planned output (readers see the plain
             * tensor, which a later expression must not expand again) */
            em_tensor *t = lazy_tensor(p, nd, &g->vals[nd->out0]);
            if (!t || !own(p, t)) goto oom;
            t->storage = s->out[0]->storage;
            em_storage_retain(t->storage);
            t->offset = s->out[0]->offset;
            s->fused = t;
            p->info.fused_groups++;
        } else {
            /* the registry's choice for these shapes, as an eager call would make it */
            em_kernel_args a = step_args(c, s);
            s->k = em_kset_pick(ks, &a, EM_KMODE_COMPILE);
            if (!s->k) {
                node_fail(c, nd, EM_ERR_UNSUPPORTED, "no kernel on the device takes this call");
                goto fail;
            }
        }
        if (nd->constant) { /* run once now; the step is not kept */
            if (run_step(c, p, s) != EM_OK) goto fail;
            continue;
        }
        p->n_steps++;
    }
    group_steps(c, p);
    for (int n = 0; n < g->n_nodes; n++)
        if (!g->nodes[n].dead && g->nodes[n].fused_into >= 0) p->info.fused_nodes++;
    p->info.kernels = p->n_steps;
    snprintf(p->info.kind, sizeof p->info.kind, "cpu-plan");
    *info = p->info;
    free(off);
    free(last);
    free(root);
    free(aa.free_);
    return p;
oom:
    if (!c->err.status) EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory building the CPU plan");
fail:
    free(off);
    free(last);
    free(root);
    free(aa.free_);
    em_cpu_program_free(p);
    return NULL;
}

/* ---- running ---- */

/* Fused expressions check that no input was overwritten since the expression was made; in a
 * plan the inputs are rewritten every run by design, so the recorded versions are refreshed. */
static void refresh_versions(em_tensor *t) {
    em_lazy *lz = t->lazy;
    for (int j = 0; j < lz->n_in; j++) {
        if (lz->in[j]->lazy) refresh_versions(lz->in[j]);
        else if (lz->in[j]->storage)
            lz->in_version[j] = atomic_load_explicit(&lz->in[j]->storage->version,
                                                     memory_order_relaxed);
    }
}

em_status em_cpu_program_run(em_ctx *c, void *prog, em_tensor *const *in, em_tensor **out) {
    em_cpu_plan *p = prog;
    const em_graph *g = p->g;
    for (int v = 0; v < g->n_vals; v++) {
        const em_gval *gv = &g->vals[v];
        if (gv->kind != EM_GV_INPUT || !p->vt[v]) continue;
        em_tensor *x = in[gv->index];
        if (em_tensor_materialize(c, x)) return c->err.status;
        if (x->dev->be->sync && x->dev->be->sync(c, x->dev)) return c->err.status;
        em_gather_strided(x, em_tensor_ptr(p->vt[v]));
    }
    em_call_info saved = c->cur;
    p->prof_runs++;
    for (int i = 0; i < p->n_steps; i++) {
        step *s = &p->steps[i];
        double t0 = p->prof ? now_s() : 0;
        if (s->group > 1) {
            em_kernel_args a[EM_CPU_GROUP_MAX];
            const em_kernel_args *ap[EM_CPU_GROUP_MAX];
            for (int j = 0; j < s->group; j++) {
                a[j] = step_args(c, &s[j]);
                ap[j] = &a[j];
            }
            em_cpu_group_get(s->op->id)->run(ap, s->group);
            i += s->group - 1;
            if (p->prof) p->prof[EM_OP_COUNT + s->op->id] += now_s() - t0;
            continue;
        }
        if (s->fused) refresh_versions(s->fused);
        if (run_step(c, p, s) != EM_OK) {
            c->cur = saved;
            return c->err.status ? c->err.status : EM_ERR_INTERNAL;
        }
        if (p->prof) p->prof[s->op->id] += now_s() - t0;
    }
    c->cur = saved;
    for (int i = 0; i < g->n_outputs; i++) {
        const em_tensor *src = p->vt[g->outputs[i]];
        out[i] = em_tensor_new(c, src->dev, src->dtype, src->ndim, src->shape);
        if (!out[i]) {
            for (int j = 0; j < i; j++) em_tensor_release(out[j]);
            return c->err.status;
        }
        em_gather_strided(src, em_tensor_ptr(out[i]));
    }
    return EM_OK;
}

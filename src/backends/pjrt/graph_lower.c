/*
 * Compile mode on PJRT devices: one StableHLO module for a whole traced graph (core/graph.h).
 *
 * @main takes the graph inputs (their logical shapes; a non-contiguous input is made contiguous
 * before the call) and then one parameter per distinct captured storage (weights, KV caches):
 * the storage's whole buffer. It returns the graph outputs and then the new contents of every
 * storage the graph wrote (ASSIGN, INDEX_COPY); em_pjrt_program_run puts those buffers into
 * the storages and bumps their versions, as the eager in-place kernels do.
 *
 * Lowering follows eager semantics with "slots": a slot is a buffer (a parameter, or the
 * output of a node) whose current value changes as the program writes into it. Every graph
 * value is a slot plus a view geometry (shape, strides, offset, in elements of the slot's
 * buffer), so view ops (reshape, permute, slice, ...) only compute a new geometry, exactly as
 * the eager dispatcher does (core/views.c), and a value is read (pj_view_value: a slice,
 * reshape, transpose, broadcast or gather of the slot's current value) when a node uses it.
 * A write (an op with an `update` hook: assign, index_copy) replaces the slot's current value
 * (pj_write_view: a dynamic_update_slice or a scatter), so every view of that buffer read
 * afterwards sees it and reads made before do not. Every other op is emitted by its eager
 * emitter (pj_op_get) on the values read.
 *
 * What differs from eager: index values are not checked on the host (out-of-range gathers
 * clamp and scatters drop, as XLA defines), and ragged_dot uses a lowering that needs no host
 * plan (the plugin's native ragged dot where it is used, else the gather/dense forms).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"
#include "backends/pjrt/snippet.h"

enum { GL_INPUT, GL_CAPTURED, GL_NODE };

typedef struct gl_slot {
    int kind;
    int input;          /* GL_INPUT: the input position */
    em_tensor *cap;     /* GL_CAPTURED: a captured tensor of the storage (borrowed from g) */
    em_storage *shadow; /* what the view helpers see: ->data points to pb */
    pj_buf pb;          /* the buffer's dtype and dims (no PJRT buffer) */
    sh_val cur;         /* the current value of the whole buffer */
    int version;        /* bumped by every write into it */
    bool written;
    int result; /* position among the results when written */
    int shard;  /* SPMD: the dim of the buffer split over the partitions, -1 replicated */
} gl_slot;

typedef struct gl_val {
    int slot; /* -1: not defined yet */
    em_dtype dtype;
    int ndim;
    int64_t shape[EM_MAX_DIMS], strides[EM_MAX_DIMS], offset, numel;
    sh_val read;      /* the last read of the value ... */
    int read_version; /* ... made at this version of its slot (-1: none) */
} gl_val;

typedef struct gl {
    em_ctx *c;
    const em_graph *g;
    sh_b b;
    gl_slot *slots;
    int n_slots;
    em_storage *shadows; /* one per slot (64-byte aligned) */
    gl_val *v;
    const em_gnode *node; /* being lowered (for errors) */
    const pj_group_spot *grp; /* the device group the program runs over, or NULL */
} gl;

/* ---- the program ---- */

typedef struct gl_cap {
    em_tensor *t; /* retained: keeps the storage alive */
    em_dtype dtype;
    int ndim;
    int64_t dims[EM_MAX_DIMS];
    int result; /* -1 when not written */
} gl_cap;

struct em_pjrt_program {
    em_device *dev;
    pj_plugin *pl;
    pj_exec *x; /* owned by the plugin's cache */
    int n_inputs;
    em_meta *in_meta;
    int *in_result; /* per input: result holding its new value when written, else -1 */
    int n_caps;
    gl_cap *caps;
    int n_outputs;
    em_meta *out_meta;
    int n_results;
    pj_group_spot grp; /* grp.local set: the graph's collectives run over this device group */
    pj_spmd *sp;       /* an SPMD program: the captured storages' tiles (spmd.c) */
};

/* ---- geometry ---- */

static void geom_contiguous(gl_val *v) {
    int64_t s = 1;
    for (int i = v->ndim - 1; i >= 0; i--) {
        v->strides[i] = s;
        s *= v->shape[i] ? v->shape[i] : 1;
    }
    v->offset = 0;
}

static int64_t numel_of(int nd, const int64_t *d) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= d[i];
    return n;
}

/* A tensor record describing value v as a view of its slot's buffer (no data of its own). */
static void shadow_tensor(const gl *L, const gl_val *v, em_tensor *t) {
    memset(t, 0, sizeof *t);
    t->dtype = v->dtype;
    t->ndim = v->ndim;
    memcpy(t->shape, v->shape, sizeof t->shape);
    memcpy(t->strides, v->strides, sizeof t->strides);
    t->offset = v->offset;
    t->numel = v->numel;
    t->dev = L->g->dev;
    t->storage = v->slot >= 0 ? L->slots[v->slot].shadow : NULL;
}

/* Two habits of XLA's CPU compiler (the xla_cpu_pjrt plugin) that a whole decode step runs
 * into; op-by-op programs never do, as each value there is a program's output.
 * - A one-row dot becomes a loop fusion (it takes in the bf16->f32 convert of the weight) into
 *   which the compiler then keeps fusing whatever computes the row (norm, residual adds, even
 *   the embedding gather), recomputing the row for every output element: 0.22x eager on a
 *   2-layer Qwen3-0.6B step (linear's program emitter, stablehlo_linalg.c, handles it).
 * - A cheap value with several users is recomputed inside each of them, so the residual stream
 *   of layer L is re-added from all earlier layers' outputs in every later layer (quadratic in
 *   the layers; 0.81x eager at batch 16, 28 layers).
 * Its fusion pass never pulls a reduce_window into a loop, so such values go through an
 * identity reduce_window (zeros interleaved by a pad, windows of two: x + 0) that it cannot see
 * through, which makes it compute them once. */
bool pj_xla_cpu(const pj_plugin *pl) { return !strcmp(pl->platform, "cpu"); }

sh_val pj_materialize(sh_b *b, sh_val x) {
    int64_t n = 1, lo = 0, hi = 1, interior = 1, win = 2, stride = 2;
    for (int i = 0; i < x.t.nd; i++) n *= x.t.d[i];
    if (n == 0) return x;
    sh_type t = x.t;
    sh_val zero = sh_const(b, sh_scalar_ty(x.t.e), 0);
    sh_val flat = sh_pad(b, sh_reshape(b, x, 1, &n), zero, &lo, &hi, &interior);
    return sh_reshape(b, sh_reduce_window(b, flat, zero, &win, &stride, "add"), t.nd, t.d);
}

static bool is_float(sh_elem e) { return e == SH_F32 || e == SH_BF16 || e == SH_F16 || e == SH_F64; }

/* ---- slots and values ---- */

static int new_slot(gl *L, int kind, em_dtype dt, int nd, const int64_t *dims) {
    int i = L->n_slots++;
    gl_slot *s = &L->slots[i];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->input = -1;
    s->result = -1;
    s->shard = -1;
    s->shadow = &L->shadows[i];
    memset(s->shadow, 0, sizeof *s->shadow);
    s->shadow->data = &s->pb;
    s->shadow->dev = L->g->dev;
    s->pb.dtype = dt;
    s->pb.ndim = nd;
    memcpy(s->pb.dims, dims, (size_t)nd * sizeof *dims);
    return i;
}

static sh_type slot_type(const gl_slot *s) {
    return sh_ty(sh_elem_of(s->pb.dtype), s->pb.ndim, s->pb.dims);
}

/* The value of graph value `id` now (after the writes lowered so far). */
static sh_val read_val(gl *L, int id) {
    gl_val *v = &L->v[id];
    const gl_slot *s = &L->slots[v->slot];
    if (v->read_version == s->version && v->read.id >= 0) return v->read;
    em_tensor t;
    shadow_tensor(L, v, &t);
    v->read = pj_view_value(&L->b, s->cur, &t);
    v->read_version = s->version;
    return v->read;
}

/* Defines value `id` as a new buffer holding x (converted to the value's dtype and shape). */
static void define_dense(gl *L, int id, sh_val x) {
    const em_gval *gv = &L->g->vals[id];
    gl_val *v = &L->v[id];
    sh_type want = sh_ty(sh_elem_of(gv->dtype), gv->ndim, gv->shape);
    if (x.id >= 0 && x.t.e != want.e) x = sh_convert(&L->b, x, want.e);
    if (x.id >= 0 && !sh_same_shape(&x.t, &want)) x = sh_reshape(&L->b, x, want.nd, want.d);
    int s = new_slot(L, GL_NODE, gv->dtype, gv->ndim, gv->shape);
    L->slots[s].cur = x;
    v->slot = s;
    v->dtype = gv->dtype;
    v->ndim = gv->ndim;
    memcpy(v->shape, gv->shape, sizeof v->shape);
    v->numel = numel_of(gv->ndim, gv->shape);
    geom_contiguous(v);
}

/* Reports an error at the node being lowered: its op and where the function called it. */
static em_status node_fail(gl *L, em_status s, const char *msg) {
    const em_gnode *n = L->node;
    return em_fail_at(L->c, s, em_op_get(n->op)->name, n->file, n->line, "%s", msg);
}

/* View ops: new geometry over the input's slot, computed by core/views.c as eager does. */
static em_status lower_view(gl *L, const em_gnode *n) {
    const em_graph *g = L->g;
    const gl_val *x = &L->v[n->in[0]];
    em_meta m[EM_MAX_OUTPUTS];
    for (int o = 0; o < n->n_out; o++) {
        const em_gval *go = &g->vals[n->out0 + o];
        m[o].dtype = go->dtype;
        m[o].ndim = go->ndim;
        memcpy(m[o].shape, go->shape, sizeof m[o].shape);
    }
    em_tensor t;
    shadow_tensor(L, x, &t);
    int64_t st[EM_MAX_OUTPUTS][EM_MAX_DIMS], off[EM_MAX_OUTPUTS];
    bool copy;
    em_call_info saved = L->c->cur;
    em_status s = em_view_geometry(L->c, em_op_get(n->op), &t, n->attrs, m, n->n_out, st, off,
                                   &copy);
    L->c->cur = saved;
    if (s != EM_OK) return s;
    if (copy) { /* eager copies (contiguous), then views the copy */
        define_dense(L, n->out0, read_val(L, n->in[0]));
        return EM_OK;
    }
    for (int o = 0; o < n->n_out; o++) {
        gl_val *v = &L->v[n->out0 + o];
        v->slot = x->slot;
        v->dtype = m[o].dtype;
        v->ndim = m[o].ndim;
        memcpy(v->shape, m[o].shape, sizeof v->shape);
        memcpy(v->strides, st[o], sizeof v->strides);
        v->offset = off[o];
        v->numel = numel_of(m[o].ndim, m[o].shape);
    }
    return EM_OK;
}

/* In-place ops: the destination's slot gets a new current value (the update of e). */
static void write_into(gl *L, int dst_id, const pj_op *po, pj_emit *e) {
    const gl_val *d = &L->v[dst_id];
    gl_slot *s = &L->slots[d->slot];
    sh_val cur = {.id = -1};
    if (po->update_reads_dst) cur = read_val(L, dst_id);
    em_tensor t;
    shadow_tensor(L, d, &t);
    s->cur = pj_write_view(&L->b, s->cur, &t, po->update(e, cur));
    s->version++;
    s->written = true;
}

static em_status lower_node(gl *L, const em_gnode *n, em_tensor *meta) {
    const em_graph *g = L->g;
    const em_op_def *op = em_op_get(n->op);
    if (op->kind == EM_OPK_VIEW) return lower_view(L, n);
    const pj_op *po = pj_op_get(n->op);
    pj_emit_fn fn = po->emit_program ? po->emit_program : po->emit;
    if (!fn && !po->update)
        return node_fail(L, EM_ERR_UNSUPPORTED,
                         "no StableHLO lowering for this op (compile mode, PJRT)");
    pj_emit e;
    memset(&e, 0, sizeof e);
    e.b = &L->b;
    e.op = op;
    e.n_in = n->n_in;
    e.attrs = n->attrs;
    e.n_out = n->n_out;
    e.pl = ((pj_dev *)g->dev->impl)->pl;
    e.grp = L->grp;
    em_tensor *tin[EM_MAX_INPUTS];
    for (int i = 0; i < n->n_in; i++) {
        tin[i] = NULL;
        if (n->in[i] < 0) continue;
        shadow_tensor(L, &L->v[n->in[i]], &meta[i]);
        meta[i].storage = NULL;
        tin[i] = &meta[i];
        e.present[i] = true;
        e.in_dt[i] = L->v[n->in[i]].dtype;
        if (!(po->update && i == 0)) e.in[i] = read_val(L, n->in[i]);
    }
    e.tin = tin;
    for (int o = 0; o < n->n_out; o++) {
        const em_gval *gv = &g->vals[n->out0 + o];
        e.out_meta[o].dtype = gv->dtype;
        e.out_meta[o].ndim = gv->ndim;
        memcpy(e.out_meta[o].shape, gv->shape, (size_t)gv->ndim * sizeof *gv->shape);
    }
    if (!sh_ok(&L->b)) return EM_OK; /* reported by the caller */
    if (po->update) {
        write_into(L, n->in[0], po, &e);
        return EM_OK;
    }
    /* the kernel registry's choice, as eager calls make it: a kernel-hub snippet may win */
    em_kernel_args ka = {L->c, op, tin, n->n_in, NULL, 0, n->attrs};
    const em_kimpl *sn = pj_snippet_pick(&e.pl->be, &ka);
    em_status s = sn ? pj_snippet_emit(&e, sn, fn) : fn(&e);
    if (s) {
        char why[320];
        snprintf(why, sizeof why, "StableHLO emitter: %s",
                 L->b.err[0] ? L->b.err : em_status_str(s));
        return node_fail(L, s, why);
    }
    for (int o = 0; o < n->n_out; o++) {
        define_dense(L, n->out0 + o, e.out[o]);
        gl_slot *sl = &L->slots[L->v[n->out0 + o].slot];
        if (pj_xla_cpu(e.pl) && g->vals[n->out0 + o].n_uses > 1 && sl->cur.id >= 0 &&
            is_float(sl->cur.t.e))
            sl->cur = pj_materialize(&L->b, sl->cur);
    }
    return EM_OK;
}

/* ---- module text ---- */

typedef struct gl_str {
    char *p;
    size_t len, cap;
    bool oom;
} gl_str;

static void str_put(gl_str *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void str_put(gl_str *s, const char *fmt, ...) {
    if (s->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = s->cap - s->len;
        int k = vsnprintf(s->p ? s->p + s->len : NULL, s->p ? room : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            s->oom = true;
            return;
        }
        if (s->p && (size_t)k < room) {
            s->len += (size_t)k;
            return;
        }
        size_t nc = s->cap ? s->cap * 2 : 4096;
        while (nc < s->len + (size_t)k + 1) nc *= 2;
        char *np = realloc(s->p, nc);
        if (!np) {
            s->oom = true;
            return;
        }
        s->p = np;
        s->cap = nc;
    }
}

static void str_type(gl_str *s, const sh_type *t) {
    str_put(s, "tensor<");
    for (int i = 0; i < t->nd; i++) str_put(s, "%lldx", (long long)t->d[i]);
    str_put(s, "%s>", sh_elem_name(t->e));
}

static void str_valref(gl_str *s, sh_val v) {
    if (v.sub >= 0)
        str_put(s, "%%v%d#%d", v.id, v.sub);
    else
        str_put(s, "%%v%d", v.id);
}

/* An SPMD sharding of a rank-nd value: tiles along dim over `parts` devices in order, or
 * replicated (dim < 0). sdy: Shardy's form over the module's mesh "x" (TPU: libtpu's GSPMD
 * partitioner refuses chlo.ragged_dot, "RaggedDot is only supported with Shardy"). */
static void str_sharding(gl_str *s, int nd, int dim, int parts, bool sdy) {
    if (sdy) {
        str_put(s, "sdy.sharding = #sdy.sharding<@mesh, [");
        for (int i = 0; i < nd; i++) str_put(s, "%s{%s}", i ? ", " : "", i == dim ? "\"x\"" : "");
        str_put(s, "]>");
        return;
    }
    if (dim < 0) {
        str_put(s, "mhlo.sharding = \"{replicated}\"");
        return;
    }
    str_put(s, "mhlo.sharding = \"{devices=[");
    for (int i = 0; i < nd; i++) str_put(s, "%s%d", i ? "," : "", i == dim ? parts : 1);
    str_put(s, "]");
    for (int d = 0; d < parts; d++) str_put(s, "%s%d", d ? "," : "", d);
    str_put(s, "}\"");
}

/* The module (as sh_finish, without its limit on the number of parameters). pshard / rshard:
 * SPMD (parts > 1) shardings of the parameters and results (split dims, -1 replicated); NULL
 * when the program is not partitioned. */
static char *finish(gl *L, const sh_type *params, const int *alias, int n_params,
                    const sh_val *res, int n_res, const int *pshard, const int *rshard,
                    int parts, bool sdy) {
    for (int i = 0; i < n_res; i++)
        if (res[i].id < 0) return NULL;
    if (!sh_ok(&L->b)) return NULL;
    gl_str s = {NULL, 0, 0, false};
    if (pshard) {
        str_put(&s, "module @ember attributes {mhlo.num_partitions = %d : i32, "
                "mhlo.num_replicas = 1 : i32} {\n", parts);
        if (sdy) str_put(&s, "  sdy.mesh @mesh = <[\"x\"=%d]>\n", parts);
        str_put(&s, "  func.func public @main(");
    } else {
        str_put(&s, "module @ember {\n  func.func public @main(");
    }
    for (int i = 0; i < n_params; i++) {
        str_put(&s, "%s%%v%d: ", i ? ", " : "", i);
        str_type(&s, &params[i]);
        if (pshard) {
            str_put(&s, " {");
            str_sharding(&s, params[i].nd, pshard[i], parts, sdy);
            /* a written cache is donated: its new value is computed into the same buffer */
            if (alias[i] >= 0) str_put(&s, ", tf.aliasing_output = %d : i32", alias[i]);
            str_put(&s, "}");
        } else if (alias[i] >= 0) {
            str_put(&s, " {tf.aliasing_output = %d : i32}", alias[i]);
        }
    }
    str_put(&s, ") -> (");
    for (int i = 0; i < n_res; i++) {
        if (i) str_put(&s, ", ");
        str_type(&s, &res[i].t);
        if (rshard) {
            str_put(&s, " {");
            str_sharding(&s, res[i].t.nd, rshard[i], parts, sdy);
            str_put(&s, "}");
        }
    }
    str_put(&s, ") {\n");
    if (L->b.len) str_put(&s, "%s", L->b.body);
    str_put(&s, "    \"func.return\"(");
    for (int i = 0; i < n_res; i++) {
        if (i) str_put(&s, ", ");
        str_valref(&s, res[i]);
    }
    str_put(&s, ") : (");
    for (int i = 0; i < n_res; i++) {
        if (i) str_put(&s, ", ");
        str_type(&s, &res[i].t);
    }
    str_put(&s, ") -> ()\n  }\n%s}\n", sh_funcs(&L->b));
    if (s.oom) {
        free(s.p);
        sh_fail(&L->b, "out of memory");
        return NULL;
    }
    return s.p;
}

/* ---- compile ---- */

void em_pjrt_program_free(em_pjrt_program *p) {
    if (!p) return;
    pj_group_release(&p->grp);
    pj_spmd_free(p->sp);
    for (int i = 0; i < p->n_caps; i++) em_tensor_release(p->caps[i].t);
    free(p->caps);
    free(p->in_meta);
    free(p->in_result);
    free(p->out_meta);
    free(p);
}

/* Gives a never-written storage a buffer of zeros (as the eager kernel does). */
static em_status ensure_buffer(em_ctx *c, em_tensor *t) { return pj_ensure_buffer(c, t, false); }

static em_status val_fail(em_ctx *c, const em_graph *g, int id, em_status s, const char *what) {
    /* the first node reading the value names the place */
    for (int i = 0; i < g->n_nodes; i++) {
        const em_gnode *n = &g->nodes[i];
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] == id)
                return em_fail_at(c, s, em_op_get(n->op)->name, n->file, n->line, "%s", what);
    }
    return EM_FAIL(c, s, "compile", "%s", what);
}

em_pjrt_program *em_pjrt_graph_compile(em_ctx *c, const em_graph *g, em_device *dev) {
    if (!c || c->err.status) return NULL;
    if (!g || !dev || !em_device_is_pjrt(dev)) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, "compile", "%s is not a PJRT device",
                dev ? dev->name : "(null)");
        return NULL;
    }
    pj_plugin *pl = ((pj_dev *)dev->impl)->pl;
    em_graph gd = *g; /* the graph as lowered: on dev */
    gd.dev = dev;
    gl L;
    memset(&L, 0, sizeof L);
    L.c = c;
    L.g = &gd;
    sh_init(&L.b);
    int cap_slots = g->n_vals + 1;
    size_t shadow_bytes = (size_t)cap_slots * sizeof(em_storage);
    L.slots = calloc((size_t)cap_slots, sizeof *L.slots);
    L.shadows = aligned_alloc(_Alignof(em_storage), shadow_bytes);
    L.v = calloc((size_t)(g->n_vals ? g->n_vals : 1), sizeof *L.v);
    em_tensor *meta = calloc(EM_MAX_INPUTS, sizeof *meta);
    sh_type *ptypes = calloc((size_t)cap_slots, sizeof *ptypes);
    int *pslot = calloc((size_t)cap_slots, sizeof *pslot);
    em_pjrt_program *p = calloc(1, sizeof *p);
    sh_val *res = NULL;
    char *text = NULL;
    int *alias = NULL, *pshard = NULL, *rshard = NULL;
    bool done = false;
    bool grouped = false, met = false; /* a device group's program; this rank met the others */
    /* EMBER_PJRT_DONATE=0 keeps written caches out of place (a copy per call) */
    const char *dn = getenv("EMBER_PJRT_DONATE");
    bool donate_off = dn && !strcmp(dn, "0");
    if (!L.slots || !L.shadows || !L.v || !meta || !ptypes || !pslot || !p) {
        EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory");
        goto fail;
    }
    p->dev = dev;
    p->pl = pl;
    p->n_inputs = g->n_inputs;
    p->n_outputs = g->n_outputs;
    p->in_meta = calloc((size_t)(g->n_inputs ? g->n_inputs : 1), sizeof *p->in_meta);
    p->in_result = calloc((size_t)(g->n_inputs ? g->n_inputs : 1), sizeof *p->in_result);
    p->out_meta = calloc((size_t)(g->n_outputs ? g->n_outputs : 1), sizeof *p->out_meta);
    p->caps = calloc((size_t)cap_slots, sizeof *p->caps);
    if (!p->in_meta || !p->in_result || !p->out_meta || !p->caps) {
        EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory");
        goto fail;
    }
    for (int i = 0; i < g->n_vals; i++) {
        L.v[i].slot = -1;
        L.v[i].read_version = -1;
    }

    /* parameters: the inputs, then one per captured storage */
    int n_params = 0;
    for (int i = 0; i < g->n_vals; i++) {
        const em_gval *gv = &g->vals[i];
        if (gv->kind != EM_GV_INPUT) continue;
        if (gv->index < 0 || gv->index >= g->n_inputs) {
            EM_FAIL(c, EM_ERR_INTERNAL, "compile", "value %d is input %d of %d", i, gv->index,
                    g->n_inputs);
            goto fail;
        }
        int s = new_slot(&L, GL_INPUT, gv->dtype, gv->ndim, gv->shape);
        L.slots[s].input = gv->index;
        L.v[i].slot = s;
        L.v[i].dtype = gv->dtype;
        L.v[i].ndim = gv->ndim;
        memcpy(L.v[i].shape, gv->shape, sizeof L.v[i].shape);
        L.v[i].numel = numel_of(gv->ndim, gv->shape);
        geom_contiguous(&L.v[i]);
        em_meta *m = &p->in_meta[gv->index];
        m->dtype = gv->dtype;
        m->ndim = gv->ndim;
        memcpy(m->shape, gv->shape, sizeof m->shape);
    }
    /* inputs in their order (a graph input no node reads still has its parameter) */
    for (int k = 0; k < g->n_inputs; k++) {
        int s = -1;
        for (int j = 0; j < L.n_slots; j++)
            if (L.slots[j].kind == GL_INPUT && L.slots[j].input == k) s = j;
        if (s < 0) {
            EM_FAIL(c, EM_ERR_INTERNAL, "compile", "graph input %d has no value", k);
            goto fail;
        }
        ptypes[n_params] = slot_type(&L.slots[s]);
        pslot[n_params++] = s;
    }
    for (int i = 0; i < g->n_vals; i++) {
        const em_gval *gv = &g->vals[i];
        if (gv->kind != EM_GV_CAPTURED) continue;
        em_tensor *t = gv->t;
        char msg[256];
        if (!t || t->dev != dev) {
            snprintf(msg, sizeof msg,
                     "a captured tensor lives on %s but the program runs on %s; move it with "
                     "em_to before tracing",
                     t && t->dev ? t->dev->name : "no device", dev->name);
            val_fail(c, g, i, EM_ERR_DEVICE, msg);
            goto fail;
        }
        if (em_tensor_materialize(c, t) || ensure_buffer(c, t)) goto fail;
        const pj_buf *pb = t->storage->data;
        if (pb->dtype != t->dtype) {
            snprintf(msg, sizeof msg, "a captured %s tensor's storage holds %s data",
                     em_dtype_name(t->dtype), em_dtype_name(pb->dtype));
            val_fail(c, g, i, EM_ERR_DTYPE, msg);
            goto fail;
        }
        int s = -1;
        for (int j = 0; j < L.n_slots; j++)
            if (L.slots[j].kind == GL_CAPTURED && L.slots[j].cap->storage == t->storage) s = j;
        if (s < 0) {
            s = new_slot(&L, GL_CAPTURED, pb->dtype, pb->ndim, pb->dims);
            L.slots[s].cap = t;
            ptypes[n_params] = slot_type(&L.slots[s]);
            pslot[n_params++] = s;
            int sd = g->spmd_parts > 1 && g->shard_dim ? g->shard_dim[i] : -1;
            if (sd >= pb->ndim || (sd >= 0 && pb->dims[sd] % g->spmd_parts)) {
                char dims[160];
                snprintf(msg, sizeof msg, "SPMD: a captured %s%s cannot be split along dim %d "
                         "into %d equal tiles", em_dtype_name(pb->dtype),
                         em_shape_str(pb->dims, pb->ndim, dims, sizeof dims), sd,
                         g->spmd_parts);
                val_fail(c, g, i, EM_ERR_SHAPE, msg);
                goto fail;
            }
            L.slots[s].shard = sd;
        }
        gl_val *v = &L.v[i];
        v->slot = s;
        v->dtype = t->dtype;
        v->ndim = t->ndim;
        memcpy(v->shape, t->shape, sizeof v->shape);
        memcpy(v->strides, t->strides, sizeof v->strides);
        v->offset = t->offset;
        v->numel = t->numel;
    }
    /* a graph with collectives runs over their device group, compiled once for all ranks */
    if (pj_graph_group(c, g, dev, &p->grp, &grouped)) goto fail;
    L.grp = grouped ? &p->grp : NULL;
    if (g->spmd_parts > 1) {
        if (grouped) {
            EM_FAIL(c, EM_ERR_UNSUPPORTED, "compile", "SPMD: the graph has collective ops of a "
                    "device group; an SPMD program gets its collectives from XLA's "
                    "partitioner (trace the model without --tp)");
            goto fail;
        }
        int n_caps = 0;
        for (int i = 0; i < n_params; i++) n_caps += L.slots[pslot[i]].kind == GL_CAPTURED;
        if (!(p->sp = pj_spmd_new(c, dev, g->spmd_parts, n_caps))) goto fail;
    }
    L.b.next = n_params; /* %v0 .. %v<n_params-1> are @main's arguments */
    for (int i = 0; i < n_params; i++) {
        sh_val a;
        memset(&a, 0, sizeof a);
        a.id = i;
        a.sub = -1;
        a.t = ptypes[i];
        L.slots[pslot[i]].cur = a;
    }

    /* the nodes, in program order */
    int n_live = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const em_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        n_live++;
        L.node = n;
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= g->n_vals || (n->in[j] >= 0 && L.v[n->in[j]].slot < 0)) {
                node_fail(&L, EM_ERR_INTERNAL, "an input is not defined before the node");
                goto fail;
            }
        if (lower_node(&L, n, meta)) goto fail;
        if (!sh_ok(&L.b)) {
            char why[320];
            snprintf(why, sizeof why, "StableHLO lowering: %s", L.b.err);
            node_fail(&L, EM_ERR_INTERNAL, why);
            goto fail;
        }
    }

    /* results: the outputs (read after every write), then the written storages */
    int n_res = g->n_outputs;
    for (int s = 0; s < L.n_slots; s++)
        if (L.slots[s].written && L.slots[s].kind != GL_NODE) L.slots[s].result = n_res++;
    res = calloc((size_t)(n_res ? n_res : 1), sizeof *res);
    if (!res) {
        EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory");
        goto fail;
    }
    for (int o = 0; o < g->n_outputs; o++) {
        int id = g->outputs[o];
        if (id < 0 || id >= g->n_vals || L.v[id].slot < 0) {
            EM_FAIL(c, EM_ERR_INTERNAL, "compile", "output %d (value %d) is not defined", o, id);
            goto fail;
        }
        const em_gval *gv = &g->vals[id];
        sh_val r = read_val(&L, id);
        sh_type want = sh_ty(sh_elem_of(gv->dtype), gv->ndim, gv->shape);
        if (r.id >= 0 && r.t.e != want.e) r = sh_convert(&L.b, r, want.e);
        if (r.id >= 0 && !sh_same_shape(&r.t, &want)) r = sh_reshape(&L.b, r, want.nd, want.d);
        res[o] = r;
        p->out_meta[o].dtype = gv->dtype;
        p->out_meta[o].ndim = gv->ndim;
        memcpy(p->out_meta[o].shape, gv->shape, sizeof p->out_meta[o].shape);
    }
    for (int k = 0; k < g->n_inputs; k++) p->in_result[k] = -1;
    for (int s = 0; s < L.n_slots; s++) {
        gl_slot *sl = &L.slots[s];
        if (sl->result < 0) continue;
        res[sl->result] = sl->cur;
        if (sl->kind == GL_INPUT) p->in_result[sl->input] = sl->result;
    }
    /* the captured storages, in parameter order */
    for (int i = 0; i < n_params; i++) {
        gl_slot *sl = &L.slots[pslot[i]];
        if (sl->kind != GL_CAPTURED) continue;
        gl_cap *cp = &p->caps[p->n_caps++];
        cp->t = em_tensor_retain(sl->cap);
        cp->dtype = sl->pb.dtype;
        cp->ndim = sl->pb.ndim;
        memcpy(cp->dims, sl->pb.dims, sizeof cp->dims);
        cp->result = sl->result;
    }
    p->n_results = n_res;
    if (!sh_ok(&L.b)) {
        EM_FAIL(c, EM_ERR_INTERNAL, "compile", "StableHLO lowering of the outputs: %s", L.b.err);
        goto fail;
    }
    alias = calloc((size_t)(n_params > 0 ? n_params : 1), sizeof *alias);
    if (!alias) {
        EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory");
        goto fail;
    }
    for (int i = 0; i < n_params; i++) {
        const gl_slot *sl = &L.slots[pslot[i]];
        alias[i] = sl->kind == GL_CAPTURED && sl->result >= 0 && !donate_off ? sl->result : -1;
    }
    if (p->sp) { /* the shardings: inputs and outputs replicated, captured storages split */
        pshard = calloc((size_t)n_params + 1, sizeof *pshard);
        rshard = calloc((size_t)n_res + 1, sizeof *rshard);
        if (!pshard || !rshard) {
            EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory");
            goto fail;
        }
        for (int r = 0; r < n_res; r++) rshard[r] = -1;
        for (int i = 0, k = 0; i < n_params; i++) {
            const gl_slot *sl = &L.slots[pslot[i]];
            pshard[i] = sl->kind == GL_CAPTURED ? sl->shard : -1;
            if (sl->kind == GL_CAPTURED) pj_spmd_set_dim(p->sp, k++, sl->shard);
            if (sl->result >= 0) rshard[sl->result] = pshard[i];
        }
    }
    /* TPU programs carry Shardy's shardings (libtpu's GSPMD refuses ragged_dot) */
    bool sdy = !strcmp(pl->platform, "tpu");
    text = finish(&L, ptypes, alias, n_params, res, n_res, pshard, rshard,
                  p->sp ? pj_spmd_parts(p->sp) : 0, sdy);
    if (!text) {
        EM_FAIL(c, EM_ERR_INTERNAL, "compile", "StableHLO module: %s",
                L.b.err[0] ? L.b.err : "invalid result");
        goto fail;
    }
    if (getenv("EMBER_PJRT_DUMP_GRAPH")) fprintf(stderr, "%s", text);

    /* the executable: keyed by the module text (which the graph's structure determines) */
    pj_key k;
    pj_key_init(&k);
    pj_key_i64(&k, -2); /* not an op id: a whole graph */
    size_t tl = strlen(text);
    pj_key_i64(&k, (int64_t)tl);
    pj_key_i64(&k, (int64_t)pj_hash(text, tl));
    pj_key_i64(&k, (int64_t)pj_hash(text, tl / 2));
    uint64_t h = pj_hash(k.p, k.len);
    char what[160];
    snprintf(what, sizeof what, "compile graph: %d nodes, %d params, %d results", n_live,
             n_params, n_res);
    if (grouped) {
        met = true;
        p->x = k.oom ? NULL : pj_group_compile(c, pl, &p->grp, text, &k, what);
        if (k.oom) EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory");
    } else if (p->sp) { /* num_partitions, SPMD on, the partitions' devices in the key */
        int parts = pj_spmd_parts(p->sp);
        pj_key_add(&k, "spmd", 4);
        pj_key_i64(&k, parts);
        pj_key_add(&k, pj_spmd_ids(p->sp), (size_t)parts * sizeof(int64_t));
        h = pj_hash(k.p, k.len);
        size_t wl = strlen(what);
        snprintf(what + wl, sizeof what - wl, ", SPMD over %d partitions", parts);
        pj_compile_spec sp = {1, parts, true, pj_spmd_ids(p->sp), sdy};
        if (!(p->x = pj_cache_find(pl, &k, h)))
            p->x = pj_compile_for(c, pl, &k, h, text, what, false, &sp);
    } else if (!(p->x = pj_cache_find(pl, &k, h))) {
        p->x = pj_compile(c, pl, &k, h, text, what, false);
    }
    pj_key_free(&k);
    if (!p->x) goto fail;
    if (p->x->n_out >= 0 && p->x->n_out != n_res) {
        EM_FAIL(c, EM_ERR_INTERNAL, "compile", "the executable has %d outputs, expected %d",
                p->x->n_out, n_res);
        goto fail;
    }
    done = true;
fail: /* also the way out on success (done) */
    free(text);
    free(res);
    free(alias);
    free(pshard);
    free(rshard);
    free(meta);
    free(ptypes);
    free(pslot);
    free(L.slots);
    free(L.shadows);
    free(L.v);
    sh_free(&L.b);
    if (done) return p;
    if (!c->err.status) EM_FAIL(c, EM_ERR_INTERNAL, "compile", "lowering failed");
    if (grouped && !met) pj_group_break(&p->grp, c->err.detail);
    em_pjrt_program_free(p);
    return NULL;
}

/* ---- run ---- */

static bool same_dims(int nd, const int64_t *a, int nd2, const int64_t *b) {
    if (nd != nd2) return false;
    for (int i = 0; i < nd; i++)
        if (a[i] != b[i]) return false;
    return true;
}

/* An SPMD program's launch: args[] holds the inputs' buffers on the first device (the
 * captured ones are ignored: each storage's tiles are used instead). The inputs are replicated
 * to every device, the written storages take their new tiles and are written back whole; outs
 * receives the first device's results but those of written captured storages. */
static em_status spmd_execute(em_ctx *c, em_pjrt_program *p, PJRT_Buffer *const *args,
                              PJRT_Buffer **outs) {
    pj_spmd *sp = p->sp;
    int parts = pj_spmd_parts(sp), n_args = p->n_inputs + p->n_caps, n_res = p->n_results;
    PJRT_Buffer **lists = calloc((size_t)(parts * n_args) + 1, sizeof *lists);
    PJRT_Buffer **olists = calloc((size_t)(parts * n_res) + 1, sizeof *olists);
    PJRT_Buffer **copies = calloc((size_t)(parts * p->n_inputs) + 1, sizeof *copies);
    PJRT_Buffer *per[PJ_SPMD_MAX];
    PJRT_Buffer *const *arg_lists[PJ_SPMD_MAX];
    PJRT_Buffer **out_lists[PJ_SPMD_MAX];
    PJRT_Event *ev[PJ_SPMD_MAX] = {NULL};
    em_status s = EM_OK;
    if (!lists || !olists || !copies) {
        s = EM_FAIL(c, EM_ERR_OOM, "compiled_run", "out of memory");
        goto done;
    }
    for (int i = 0; i < p->n_inputs && !s; i++) {
        const em_meta *m = &p->in_meta[i];
        s = pj_spmd_replicate(c, sp, args[i], m->dtype, m->ndim, m->shape, per);
        for (int d = 0; d < parts && !s; d++) {
            lists[d * n_args + i] = per[d];
            if (d) copies[d * p->n_inputs + i] = per[d];
        }
    }
    for (int k = 0; k < p->n_caps && !s; k++) {
        s = pj_spmd_cap_args(c, sp, k, p->caps[k].t, per);
        for (int d = 0; d < parts && !s; d++) lists[d * n_args + p->n_inputs + k] = per[d];
    }
    if (s) goto done;
    for (int d = 0; d < parts; d++) {
        arg_lists[d] = &lists[d * n_args];
        out_lists[d] = &olists[d * n_res];
    }
    if ((s = pj_execute_multi(c, p->pl, p->x, parts, n_args, arg_lists, out_lists, ev, false)))
        goto done;
    for (int d = 0; d < parts; d++)
        if (ev[d]) pj_event_free(p->pl, ev[d]); /* the reads below wait for the buffers */
    for (int k = 0; k < p->n_caps && !s; k++) {
        int r = p->caps[k].result;
        if (r < 0) continue;
        for (int d = 0; d < parts; d++) {
            per[d] = olists[d * n_res + r];
            olists[d * n_res + r] = NULL;
        }
        s = pj_spmd_take(c, sp, k, p->caps[k].t, per);
        for (int d = 0; d < parts; d++)
            if (per[d]) pj_buffer_free(p->pl, per[d]);
    }
    for (int r = 0; r < n_res; r++) {
        outs[r] = olists[r];
        olists[r] = NULL;
    }
done:
    if (olists)
        for (int i = 0; i < parts * n_res; i++)
            if (olists[i]) pj_buffer_free(p->pl, olists[i]);
    if (copies)
        for (int i = 0; i < parts * p->n_inputs; i++)
            if (copies[i]) pj_buffer_free(p->pl, copies[i]);
    free(lists);
    free(olists);
    free(copies);
    return s;
}

em_status em_pjrt_program_run(em_ctx *c, em_pjrt_program *p, em_tensor *const *in,
                              em_tensor **out) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (c->err.status) return c->err.status;
    if (!p) return EM_FAIL(c, EM_ERR_INVALID_ARG, "compiled_run", "no program");
    for (int o = 0; o < p->n_outputs; o++) out[o] = NULL;
    int n_args = p->n_inputs + p->n_caps;
    PJRT_Buffer **args = calloc((size_t)(n_args ? n_args : 1), sizeof *args);
    PJRT_Buffer **outs = calloc((size_t)(p->n_results ? p->n_results : 1), sizeof *outs);
    em_tensor **tmp = calloc((size_t)(p->n_inputs ? p->n_inputs : 1), sizeof *tmp);
    em_status s = EM_OK;
    bool met = false; /* this rank reached the group's launch (the others must not wait) */
    if (!args || !outs || !tmp) {
        s = EM_FAIL(c, EM_ERR_OOM, "compiled_run", "out of memory");
        goto done;
    }
    for (int i = 0; i < p->n_inputs; i++) {
        em_tensor *t = in[i];
        const em_meta *m = &p->in_meta[i];
        char a[160], b[160];
        if (!t) {
            s = EM_FAIL(c, EM_ERR_INVALID_ARG, "compiled_run", "input %d is NULL", i);
            goto done;
        }
        if (t->dev != p->dev) {
            s = EM_FAIL(c, EM_ERR_DEVICE, "compiled_run",
                        "input %d is on %s but the program runs on %s", i,
                        t->dev ? t->dev->name : "no device", p->dev->name);
            goto done;
        }
        if (t->dtype != m->dtype || !same_dims(t->ndim, t->shape, m->ndim, m->shape)) {
            s = EM_FAIL(c, EM_ERR_SHAPE, "compiled_run",
                        "input %d is %s%s but the program was compiled for %s%s", i,
                        em_dtype_name(t->dtype), em_shape_str(t->shape, t->ndim, a, sizeof a),
                        em_dtype_name(m->dtype), em_shape_str(m->shape, m->ndim, b, sizeof b));
            goto done;
        }
        if ((s = em_tensor_materialize(c, t))) goto done;
        const pj_buf *pb = t->storage ? t->storage->data : NULL;
        if (pb && (pb->buf || pb->shape_only) && em_is_contiguous(t) && t->offset == 0 &&
            pb->dtype == t->dtype &&
            same_dims(pb->ndim, pb->dims, t->ndim, t->shape)) {
            args[i] = pb->buf;
            continue;
        }
        /* another layout (a view, or a buffer of other dims): a contiguous copy */
        tmp[i] = pj_make_contiguous(c, t);
        if (!tmp[i]) {
            s = c->err.status ? c->err.status : EM_ERR_INTERNAL;
            goto done;
        }
        args[i] = ((pj_buf *)tmp[i]->storage->data)->buf;
    }
    for (int k = 0; k < p->n_caps; k++) {
        gl_cap *cp = &p->caps[k];
        if ((s = em_tensor_materialize(c, cp->t))) goto done;
        const pj_buf *pb = cp->t->storage->data;
        if ((!pb->buf && !pb->shape_only) || pb->dtype != cp->dtype ||
            !same_dims(pb->ndim, pb->dims, cp->ndim, cp->dims)) {
            char a[160], b[160];
            s = EM_FAIL(c, EM_ERR_INVALID_ARG, "compiled_run",
                        "captured tensor %d: its storage now holds %s%s, the program was compiled "
                        "for %s%s; compile again",
                        k, em_dtype_name(pb->dtype), em_shape_str(pb->dims, pb->ndim, a, sizeof a),
                        em_dtype_name(cp->dtype), em_shape_str(cp->dims, cp->ndim, b, sizeof b));
            goto done;
        }
        args[p->n_inputs + k] = pb->buf;
    }
    met = true;
    bool spmd = p->sp && !p->pl->aot; /* compile-only: counted as one launch, nothing runs */
    if (p->grp.local)
        s = pj_group_execute(c, &p->grp, p->dev, p->x, args, n_args, outs);
    else if (spmd)
        s = spmd_execute(c, p, args, outs);
    else
        s = pj_execute(c, p->dev, p->x, args, n_args, outs, false);
    if (s) goto done;
    /* the outputs */
    for (int o = 0; o < p->n_outputs; o++) {
        const em_meta *m = &p->out_meta[o];
        em_tensor *t = em_tensor_new(c, p->dev, m->dtype, m->ndim, m->shape);
        if (!t) {
            s = c->err.status ? c->err.status : EM_ERR_OOM;
            goto done;
        }
        pj_storage_set(t->storage, outs[o], m->dtype, m->ndim, m->shape);
        outs[o] = NULL;
        out[o] = t;
    }
    /* the written storages (an SPMD run has written them back itself) */
    for (int k = 0; k < p->n_caps && !spmd; k++) {
        gl_cap *cp = &p->caps[k];
        if (cp->result < 0) continue;
        pj_storage_set(cp->t->storage, outs[cp->result], cp->dtype, cp->ndim, cp->dims);
        outs[cp->result] = NULL;
        atomic_fetch_add(&cp->t->storage->version, 1);
    }
    /* written inputs: the new values go into the caller's tensors (any layout) */
    for (int i = 0; i < p->n_inputs; i++) {
        int r = p->in_result[i];
        if (r < 0) continue;
        const em_meta *m = &p->in_meta[i];
        em_tensor *nv = em_tensor_new(c, p->dev, m->dtype, m->ndim, m->shape);
        if (!nv) {
            s = c->err.status ? c->err.status : EM_ERR_OOM;
            goto done;
        }
        pj_storage_set(nv->storage, outs[r], m->dtype, m->ndim, m->shape);
        outs[r] = NULL;
        em_tensor *ab[2] = {in[i], nv};
        s = pj_run(c, EM_OP_ASSIGN, ab, 2, NULL, 0);
        em_tensor_release(nv);
        if (s) goto done;
    }
done:
    if (s && !met) pj_group_break(&p->grp, c->err.detail);
    if (outs)
        for (int r = 0; r < p->n_results; r++)
            if (outs[r]) pj_buffer_free(p->pl, outs[r]);
    if (s && out)
        for (int o = 0; o < p->n_outputs; o++) {
            em_tensor_release(out[o]);
            out[o] = NULL;
        }
    if (tmp)
        for (int i = 0; i < p->n_inputs; i++) em_tensor_release(tmp[i]);
    free(tmp);
    free(args);
    free(outs);
    return s;
}

/* ---- the backend table's entries ---- */

static void *program_build(em_ctx *c, em_graph *g, em_device *dev, em_program_info *info) {
    snprintf(info->kind, sizeof info->kind, "pjrt");
    return em_pjrt_graph_compile(c, g, dev);
}

static em_status program_run(em_ctx *c, void *prog, em_tensor *const *in, em_tensor **out) {
    return em_pjrt_program_run(c, prog, in, out);
}

static void program_free(void *prog) { em_pjrt_program_free(prog); }

void pj_backend_programs(em_backend *be) {
    be->program_build = program_build;
    be->program_run = program_run;
    be->program_free = program_free;
}

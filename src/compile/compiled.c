/*
 * em_compiled: the programs of a compiled function, one per input signature, and the call path
 * that picks one (checking its guards), or traces, optimises and lowers a new one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compile/trace.h"
#include "ember/autograd.h"
#include "ember/compile.h"

#define MAX_PROGRAMS_DEFAULT 64

typedef struct in_sig {
    em_dtype dtype;
    int ndim;
    int64_t shape[EM_MAX_DIMS];
    int64_t strides[EM_MAX_DIMS];
    em_device *dev;
} in_sig;

typedef struct program {
    int n_in, n_statics;
    in_sig *sig;
    int64_t *statics;
    em_graph g;
    const em_backend *be; /* whose program `prog` is */
    void *prog;
} program;

struct em_compiled {
    char name[64];
    em_compiled_fn fn;
    void *user;
    program **progs; /* most recently used first */
    int n_progs, max_progs;
    bool log;
    em_compile_stats st;
    int spmd_parts; /* em_compiled_set_spmd */
    em_shard_fn shard;
    void *shard_user;
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

em_compiled *em_compile(em_ctx *c, const char *name, em_compiled_fn fn, void *user) {
    if (!c || c->err.status) return NULL;
    if (!fn) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, "compile", "the function is NULL");
        return NULL;
    }
    em_compiled *f = calloc(1, sizeof *f);
    if (!f) {
        EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory");
        return NULL;
    }
    snprintf(f->name, sizeof f->name, "%s", name ? name : "fn");
    f->fn = fn;
    f->user = user;
    const char *e = getenv("EMBER_COMPILE_MAX_PROGRAMS");
    f->max_progs = e && atoi(e) > 0 ? atoi(e) : MAX_PROGRAMS_DEFAULT;
    e = getenv("EMBER_LOG_COMPILES");
    f->log = e && *e && strcmp(e, "0");
    return f;
}

em_status em_compiled_set_spmd(em_ctx *c, em_compiled *f, int parts, em_shard_fn fn,
                                void *user) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (c->err.status) return c->err.status;
    if (!f || parts < 0 || parts > 64 || (parts > 1 && !fn))
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "compile",
                       "SPMD: %s (parts %d, a shard function %s)",
                       !f ? "no compiled function" : "bad arguments", parts,
                       fn ? "given" : "missing");
    if (f->n_progs)
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "compile",
                       "SPMD: %s already has %d programs; partition it before the first call",
                       f->name, f->n_progs);
    f->spmd_parts = parts > 1 ? parts : 0;
    f->shard = fn;
    f->shard_user = user;
    return EM_OK;
}

static void program_free(program *p) {
    if (!p) return;
    if (p->prog) p->be->program_free(p->prog);
    em_graph_free(&p->g);
    free(p->sig);
    free(p->statics);
    free(p);
}

void em_compiled_free(em_compiled *f) {
    if (!f) return;
    for (int i = 0; i < f->n_progs; i++) program_free(f->progs[i]);
    free(f->progs);
    free(f);
}

void em_compiled_stats(const em_compiled *f, em_compile_stats *out) {
    if (!out) return;
    if (f) *out = f->st;
    else memset(out, 0, sizeof *out);
}

/* ---- guards ---- */

static bool matches(const program *p, em_tensor *const *in, int n_in, const int64_t *statics,
                    int n_statics) {
    if (p->n_in != n_in || p->n_statics != n_statics) return false;
    for (int i = 0; i < n_in; i++) {
        const in_sig *s = &p->sig[i];
        const em_tensor *t = in[i];
        if (s->dtype != t->dtype || s->ndim != t->ndim || s->dev != t->dev ||
            memcmp(s->shape, t->shape, (size_t)t->ndim * sizeof *t->shape) ||
            memcmp(s->strides, t->strides, (size_t)t->ndim * sizeof *t->strides))
            return false;
    }
    return !n_statics || !memcmp(p->statics, statics, (size_t)n_statics * sizeof *statics);
}

/* The first guard of p that the call breaks, as text. */
static void broken_guard(const program *p, em_tensor *const *in, int n_in, const int64_t *statics,
                         int n_statics, char *buf, size_t n) {
    if (p->n_in != n_in) {
        snprintf(buf, n, "number of inputs: %d -> %d", p->n_in, n_in);
        return;
    }
    for (int i = 0; i < n_in; i++) {
        const in_sig *s = &p->sig[i];
        const em_tensor *t = in[i];
        if (s->dev != t->dev) {
            snprintf(buf, n, "input %d device: %s -> %s", i, s->dev->name, t->dev->name);
            return;
        }
        if (s->dtype != t->dtype) {
            snprintf(buf, n, "input %d dtype: %s -> %s", i, em_dtype_name(s->dtype),
                     em_dtype_name(t->dtype));
            return;
        }
        if (s->ndim != t->ndim) {
            snprintf(buf, n, "input %d rank: %d -> %d", i, s->ndim, t->ndim);
            return;
        }
        for (int d = 0; d < t->ndim; d++)
            if (s->shape[d] != t->shape[d]) {
                snprintf(buf, n, "input %d dim %d: %lld -> %lld", i, d, (long long)s->shape[d],
                         (long long)t->shape[d]);
                return;
            }
        for (int d = 0; d < t->ndim; d++)
            if (s->strides[d] != t->strides[d]) {
                snprintf(buf, n, "input %d stride %d: %lld -> %lld", i, d,
                         (long long)s->strides[d], (long long)t->strides[d]);
                return;
            }
    }
    if (p->n_statics != n_statics) {
        snprintf(buf, n, "number of statics: %d -> %d", p->n_statics, n_statics);
        return;
    }
    for (int i = 0; i < n_statics; i++)
        if (p->statics[i] != statics[i]) {
            snprintf(buf, n, "static %d: %lld -> %lld", i, (long long)p->statics[i],
                     (long long)statics[i]);
            return;
        }
    snprintf(buf, n, "no guard broken");
}

const char *em_compiled_guards(const em_compiled *f, char *buf, size_t n) {
    if (!buf || !n) return buf;
    buf[0] = 0;
    if (!f || !f->n_progs) return buf;
    const program *p = f->progs[0];
    size_t at = 0;
    for (int i = 0; i < p->n_in && at < n; i++) {
        const in_sig *s = &p->sig[i];
        char sh[128] = "";
        size_t k = 0;
        for (int d = 0; d < s->ndim && k < sizeof sh; d++)
            k += (size_t)snprintf(sh + k, sizeof sh - k, "%s%lld", d ? "," : "",
                                  (long long)s->shape[d]);
        at += (size_t)snprintf(buf + at, n - at, "%sinput %d: %s[%s] on %s", i ? "; " : "", i,
                               em_dtype_name(s->dtype), sh, s->dev->name);
    }
    for (int i = 0; i < p->n_statics && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "; static %d == %lld", i,
                               (long long)p->statics[i]);
    return buf;
}

/* ---- tracing and lowering ---- */

static bool graph_one_device(em_ctx *c, const em_graph *g) {
    for (int v = 0; v < g->n_vals; v++) {
        const em_gval *gv = &g->vals[v];
        if (gv->dev == g->dev || (gv->kind == EM_GV_NODE && g->nodes[gv->node].dead)) continue;
        if (gv->dev->be == g->dev->be && g->dev->be->host_accessible) continue;
        const em_gnode *nd = gv->kind == EM_GV_NODE ? &g->nodes[gv->node] : NULL;
        em_fail_at(c, EM_ERR_DEVICE, nd ? em_op_get(nd->op)->name : "compile",
                   nd ? nd->file : "", nd ? nd->line : 0,
                   "a compiled function runs on one device: this value is on %s, the inputs on %s",
                   gv->dev->name, g->dev->name);
        return false;
    }
    return true;
}

/* Inputs are taken by value (the program reads a copy): a write into one would be lost, so it
 * is refused at the op that writes. */
static bool no_input_writes(em_ctx *c, const em_graph *g) {
    int *root = malloc(((size_t)g->n_vals + 1) * sizeof *root);
    if (!root) return true;
    bool ok = true;
    for (int v = 0; v < g->n_vals; v++) root[v] = v;
    for (int n = 0; n < g->n_nodes && ok; n++) {
        const em_gnode *nd = &g->nodes[n];
        if (em_op_get(nd->op)->kind == EM_OPK_VIEW)
            for (int o = 0; o < nd->n_out; o++) root[nd->out0 + o] = root[nd->in[0]];
        if (em_gnode_writes(nd) && g->vals[root[nd->in[0]]].kind == EM_GV_INPUT) {
            em_fail_at(c, EM_ERR_UNSUPPORTED, em_op_get(nd->op)->name, nd->file, nd->line,
                       "a compiled function cannot write into its input %d (inputs are read as "
                       "copies); write into a captured tensor instead",
                       g->vals[root[nd->in[0]]].index);
            ok = false;
        }
    }
    free(root);
    return ok;
}

static program *trace_and_lower(em_ctx *c, em_compiled *f, em_tensor *const *in, int n_in,
                                const int64_t *statics, int n_statics, int max_out) {
    program *p = calloc(1, sizeof *p);
    em_trace tr;
    memset(&tr, 0, sizeof tr);
    if (!p || !(p->sig = calloc((size_t)n_in + 1, sizeof *p->sig)) ||
        !(p->statics = calloc((size_t)n_statics + 1, sizeof *p->statics))) {
        program_free(p);
        EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory");
        return NULL;
    }
    p->n_in = n_in;
    p->n_statics = n_statics;
    for (int i = 0; i < n_in; i++) {
        p->sig[i].dtype = in[i]->dtype;
        p->sig[i].ndim = in[i]->ndim;
        memcpy(p->sig[i].shape, in[i]->shape, sizeof p->sig[i].shape);
        memcpy(p->sig[i].strides, in[i]->strides, sizeof p->sig[i].strides);
        p->sig[i].dev = in[i]->dev;
    }
    if (n_statics) memcpy(p->statics, statics, (size_t)n_statics * sizeof *statics);

    tr.g.dev = n_in ? in[0]->dev : c->device;
    tr.g.n_inputs = n_in;
    /* the trace starts with grad off whatever the caller's setting: captured weights that
     * require grad are not recorded unless the function itself enables grad (and then its
     * em_backward consumes the tape inside the trace) */
    bool grad_on = em_grad_enable(c, false);
    em_trace_begin(c, &tr);
    em_scope_push(c);
    em_tensor *syms[EM_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) syms[i] = em_scope_add(c, em_trace_input(c, in[i], i));
    em_tensor **outs = calloc((size_t)max_out + 1, sizeof *outs);
    int n_out = -1;
    if (!outs) EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory");
    if (!c->err.status) n_out = f->fn(c, syms, n_in, statics, n_statics, outs, max_out, f->user);
    if (!c->err.status && (n_out < 0 || n_out > max_out))
        EM_FAIL(c, EM_ERR_INVALID_ARG, "compile",
                "%s returned %d outputs without recording an error (room for %d)", f->name, n_out,
                max_out);
    if (!c->err.status) {
        tr.g.outputs = calloc((size_t)n_out + 1, sizeof *tr.g.outputs);
        if (!tr.g.outputs) EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory");
    }
    for (int i = 0; !c->err.status && i < n_out; i++) {
        if (!outs[i]) {
            EM_FAIL(c, EM_ERR_INVALID_ARG, "compile", "%s returned a NULL output %d", f->name, i);
            break;
        }
        int v = em_trace_value_of(c, outs[i]);
        if (v < 0) break;
        /* every output is a buffer of its own: copy inputs, captured tensors, views, repeats */
        const em_gval *gv = &tr.g.vals[v];
        bool repeat = false;
        for (int j = 0; j < i; j++) repeat |= tr.g.outputs[j] == v;
        if (gv->kind != EM_GV_NODE || repeat ||
            em_op_get(tr.g.nodes[gv->node].op)->kind == EM_OPK_VIEW)
            v = em_trace_copy(c, v);
        tr.g.outputs[i] = v;
        tr.g.n_outputs = i + 1;
    }
    free(outs);
    em_scope_pop(c);
    em_trace_end(c);
    em_grad_enable(c, grad_on);
    em_trace_free(&tr);
    p->g = tr.g; /* owns the graph from here, also on failure */
    if (c->err.status || !graph_one_device(c, &p->g) || !no_input_writes(c, &p->g)) {
        program_free(p);
        return NULL;
    }

    em_graph *g = &p->g;
    f->st.nodes_traced = g->n_nodes;
    f->st.removed_dead = em_pass_dce(g);
    f->st.removed_common = em_pass_cse(c, g);
    f->st.removed_dead += em_pass_dce(g);
    int live = 0;
    for (int n = 0; n < g->n_nodes; n++) live += !g->nodes[n].dead;
    f->st.nodes = live;
    /* the lowering is the device's backend's: it reads how often each value is used and
     * which nodes are constants */
    em_graph_count_uses(g);
    f->st.folded = em_pass_constants(g);
    const em_backend *be = g->dev->be;
    if (!be->program_build) {
        EM_FAIL(c, EM_ERR_UNSUPPORTED, "compile", "%s cannot run compiled functions",
                g->dev->name);
        program_free(p);
        return NULL;
    }
    if (f->spmd_parts > 1) { /* the shardings of the captured storages, for the lowering */
        g->spmd_parts = f->spmd_parts;
        g->shard_dim = malloc((size_t)g->n_vals + 1);
        if (!g->shard_dim) {
            EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory");
            program_free(p);
            return NULL;
        }
        for (int i = 0; i < g->n_vals; i++) {
            const em_gval *gv = &g->vals[i];
            int d = gv->kind == EM_GV_CAPTURED ? f->shard(f->shard_user, gv->t) : -1;
            g->shard_dim[i] = (signed char)(d >= 0 && d < EM_MAX_DIMS ? d : -1);
        }
    }
    em_program_info info;
    memset(&info, 0, sizeof info);
    p->be = be;
    p->prog = be->program_build(c, g, g->dev, &info);
    if (!p->prog) {
        program_free(p);
        return NULL;
    }
    f->st.fused_groups = info.fused_groups;
    f->st.fused_nodes = info.fused_nodes;
    f->st.kernels = info.kernels;
    f->st.grouped_linears = info.grouped;
    f->st.arena_bytes = info.arena_bytes;
    f->st.unplanned_bytes = info.unplanned_bytes;
    snprintf(f->st.backend, sizeof f->st.backend, "%s", info.kind);
    return p;
}

int em_compiled_call(em_ctx *c, em_compiled *f, em_tensor *const *in, int n_in,
                     const int64_t *statics, int n_statics, em_tensor **out, int max_out) {
    if (!c || c->err.status) return -1;
    if (!f || (n_in && !in) || n_in < 0 || n_in > EM_MAX_INPUTS || (n_statics && !statics) ||
        n_statics < 0 || (max_out && !out) || max_out < 0) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, "compiled_call",
                "bad arguments (%d inputs, %d statics, room for %d outputs)", n_in, n_statics,
                max_out);
        return -1;
    }
    if (c->tracer) {
        EM_FAIL(c, EM_ERR_UNSUPPORTED, "compiled_call",
                "%s is called while another function is being traced (nesting is not supported)",
                f->name);
        return -1;
    }
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) {
            EM_FAIL(c, EM_ERR_INVALID_ARG, "compiled_call", "%s: input %d is NULL", f->name, i);
            return -1;
        }
        if (c->grad_on && in[i]->requires_grad) {
            EM_FAIL(c, EM_ERR_UNSUPPORTED, "compiled_call",
                    "%s: input %d requires grad and grad is enabled: compiled functions are not "
                    "differentiable yet (call the eager code, or disable grad)", f->name, i);
            return -1;
        }
        if (in[i]->sym) {
            em_sym_value_needed(c, in[i], "compiled_call");
            return -1;
        }
    }
    int hit = -1;
    for (int i = 0; i < f->n_progs && hit < 0; i++)
        if (matches(f->progs[i], in, n_in, statics, n_statics)) hit = i;
    if (hit < 0) {
        char why[160];
        if (f->n_progs)
            broken_guard(f->progs[0], in, n_in, statics, n_statics, why, sizeof why);
        else
            snprintf(why, sizeof why, "first call");
        double t0 = now_ms();
        program *p = trace_and_lower(c, f, in, n_in, statics, n_statics, max_out);
        if (!p) return -1;
        double ms = now_ms() - t0;
        if (f->n_progs == f->max_progs) program_free(f->progs[--f->n_progs]);
        if (!f->progs) f->progs = calloc((size_t)f->max_progs, sizeof *f->progs);
        if (!f->progs) {
            program_free(p);
            EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory");
            return -1;
        }
        memmove(f->progs + 1, f->progs, (size_t)f->n_progs * sizeof *f->progs);
        f->progs[0] = p;
        f->n_progs++;
        f->st.compiles++;
        f->st.programs = f->n_progs;
        f->st.compile_ms += ms;
        snprintf(f->st.last_reason, sizeof f->st.last_reason, "%s", why);
        if (f->log)
            fprintf(stderr,
                    "ember compile: %s (%s) on %s: %d ops traced -> %d (dead %d, common %d, "
                    "folded %d), %s, %d kernels, %d fused groups, %d linears grouped, arena %.1f "
                    "of %.1f MiB, %.1f ms\n",
                    f->name, why, p->g.dev->name, f->st.nodes_traced, f->st.nodes,
                    f->st.removed_dead, f->st.removed_common, f->st.folded, f->st.backend,
                    f->st.kernels, f->st.fused_groups, f->st.grouped_linears,
                    (double)f->st.arena_bytes / 1048576.0,
                    (double)f->st.unplanned_bytes / 1048576.0, ms);
        hit = 0;
    } else if (hit > 0) {
        program *p = f->progs[hit];
        memmove(f->progs + 1, f->progs, (size_t)hit * sizeof *f->progs);
        f->progs[0] = p;
    }
    program *p = f->progs[0];
    int n_out = p->g.n_outputs;
    if (n_out > max_out) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, "compiled_call", "%s has %d outputs, room for %d",
                f->name, n_out, max_out);
        return -1;
    }
    em_tensor *res[EM_MAX_OUTPUTS];
    em_tensor **r = n_out <= EM_MAX_OUTPUTS ? res : calloc((size_t)n_out, sizeof *r);
    if (!r) {
        EM_FAIL(c, EM_ERR_OOM, "compiled_call", "out of memory");
        return -1;
    }
    em_status s = p->be->program_run(c, p->prog, in, r);
    if (s == EM_OK) {
        for (int i = 0; i < n_out; i++) out[i] = em_scope_add(c, r[i]);
        f->st.calls++;
    }
    if (r != res) free(r);
    return s == EM_OK ? n_out : -1;
}


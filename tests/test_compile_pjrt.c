/*
 * Compile mode's PJRT lowering (backends/pjrt/graph_lower.c): graphs built by hand (inputs,
 * captured weights and caches, views, in-place writes) become one StableHLO program; its
 * outputs and the captured storages afterwards are compared with the same nodes run eagerly on
 * the CPU device. Needs XLA's CPU plugin (EMBER_PJRT_XLA_PLUGIN or the installed xla-cpu-pjrt
 * package); without one every test prints a loud SKIP.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"
#include "ember/ember.h"
#include "harness.h"
#include "ops/dispatch.h"

static em_device *xla(em_ctx *c) {
    em_device *d = em_device_get(c, "xla:0");
    if (!d) {
        em_test_skip("no XLA CPU PJRT plugin (pip install xla-cpu-pjrt==0.0.1 or set "
                     "EMBER_PJRT_XLA_PLUGIN=/path/xla_cpu_pjrt.so): %s",
                     em_ctx_error(c)->message);
        em_ctx_clear_error(c);
    }
    return d;
}

/* ---- a graph built by hand, and its eager reference ---- */

#define GB_MAX 512

typedef struct gb {
    em_ctx *c;
    em_graph g;
    em_tensor *meta[GB_MAX]; /* per value: what the shape rules see (owned) */
    em_tensor *cpu[GB_MAX];  /* per captured value: its CPU mirror (borrowed) */
} gb;

static void gb_init(gb *b, em_ctx *c, em_device *d) {
    memset(b, 0, sizeof *b);
    b->c = c;
    b->g.vals = calloc(GB_MAX, sizeof *b->g.vals);
    b->g.nodes = calloc(GB_MAX, sizeof *b->g.nodes);
    b->g.outputs = calloc(GB_MAX, sizeof *b->g.outputs);
    b->g.cap_vals = b->g.cap_nodes = GB_MAX;
    b->g.dev = d;
}

static void gb_free(gb *b) {
    for (int i = 0; i < b->g.n_vals; i++) {
        em_tensor_release(b->meta[i]);
        if (b->g.vals[i].kind == EM_GV_CAPTURED) em_tensor_release(b->g.vals[i].t);
    }
    free(b->g.vals);
    free(b->g.nodes);
    free(b->g.outputs);
}

static int gb_val(gb *b, em_gval_kind kind, em_tensor *meta) {
    int id = b->g.n_vals++;
    em_gval *v = &b->g.vals[id];
    memset(v, 0, sizeof *v);
    v->kind = kind;
    v->dtype = meta->dtype;
    v->ndim = meta->ndim;
    memcpy(v->shape, meta->shape, sizeof v->shape);
    v->dev = b->g.dev;
    b->meta[id] = meta;
    return id;
}

static int gb_input(gb *b, em_dtype dt, int nd, const int64_t *shape) {
    int id = gb_val(b, EM_GV_INPUT, em_tensor_alloc_meta(dt, nd, shape));
    b->g.vals[id].index = b->g.n_inputs++;
    return id;
}

/* A captured device tensor t, mirrored on the CPU by cpu (a tensor of the same geometry over a
 * CPU copy of t's storage). */
static int gb_capture(gb *b, em_tensor *t, em_tensor *cpu) {
    int id = gb_val(b, EM_GV_CAPTURED, em_tensor_retain(t));
    b->g.vals[id].t = em_tensor_retain(t);
    b->g.vals[id].dev = t->dev;
    b->cpu[id] = cpu;
    return id;
}

/* Appends a node (outputs inferred by the op's shape rule); returns its first output value. */
static int gb_node_at(gb *b, int line, em_op_id op, int n_in, const int *in, const em_attr *attrs) {
    const em_op_def *def = em_op_get(op);
    em_tensor *tin[EM_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) tin[i] = in[i] >= 0 ? b->meta[in[i]] : NULL;
    em_meta m[EM_MAX_OUTPUTS];
    int n_out = def->n_out;
    em_attr none[EM_MAX_ATTRS];
    memset(none, 0, sizeof none);
    if (def->rule(b->c, def, tin, n_in, attrs ? attrs : none, m, &n_out) != EM_OK) {
        fprintf(stderr, "line %d: %s\n", line, em_ctx_error(b->c)->message);
        CHECK(0);
        return -1;
    }
    em_gnode *n = &b->g.nodes[b->g.n_nodes++];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->n_in = n_in;
    if (n_in) memcpy(n->in, in, (size_t)n_in * sizeof *in);
    if (attrs) memcpy(n->attrs, attrs, sizeof n->attrs);
    n->n_out = n_out;
    n->out0 = b->g.n_vals;
    n->file = __FILE__;
    n->line = line;
    n->fused_into = -1;
    for (int o = 0; o < n_out; o++) {
        int id = gb_val(b, EM_GV_NODE, em_tensor_alloc_meta(m[o].dtype, m[o].ndim, m[o].shape));
        b->g.vals[id].node = b->g.n_nodes - 1;
        b->g.vals[id].index = o;
    }
    return n_out ? n->out0 : -1;
}
#define NODE(b, op, n_in, in, attrs) gb_node_at((b), __LINE__, (op), (n_in), (in), (attrs))

static void gb_output(gb *b, int v) { b->g.outputs[b->g.n_outputs++] = v; }

/* Runs the graph's nodes eagerly on the CPU: inputs in[] (CPU tensors), the captured values'
 * CPU mirrors (written in place). out[] receives caller-owned references. */
static bool gb_reference(gb *b, em_tensor *const *in, em_tensor **out) {
    em_ctx *c = b->c;
    em_tensor *env[GB_MAX] = {NULL};
    bool owned[GB_MAX] = {false};
    for (int i = 0; i < b->g.n_vals; i++) {
        const em_gval *v = &b->g.vals[i];
        if (v->kind == EM_GV_INPUT) env[i] = in[v->index];
        if (v->kind == EM_GV_CAPTURED) env[i] = b->cpu[i];
    }
    bool ok = true;
    for (int k = 0; k < b->g.n_nodes && ok; k++) {
        const em_gnode *n = &b->g.nodes[k];
        em_tensor *ins[EM_MAX_INPUTS];
        for (int i = 0; i < n->n_in; i++) ins[i] = n->in[i] >= 0 ? env[n->in[i]] : NULL;
        em_tensor *outs[EM_MAX_OUTPUTS];
        int r = em_op_exec(c, n->file, n->line, n->op, ins, n->n_in, n->attrs,
                           n->n_out ? outs : NULL, n->n_out ? EM_MAX_OUTPUTS : 0);
        if (r != n->n_out) {
            fprintf(stderr, "reference node %d: %s\n", k, em_ctx_error(c)->message);
            ok = false;
            break;
        }
        for (int o = 0; o < r; o++) {
            env[n->out0 + o] = outs[o];
            owned[n->out0 + o] = true;
        }
    }
    for (int o = 0; o < b->g.n_outputs; o++)
        out[o] = ok ? em_tensor_retain(env[b->g.outputs[o]]) : NULL;
    for (int i = 0; i < b->g.n_vals; i++)
        if (owned[i]) em_tensor_release(env[i]);
    return ok;
}

/* ---- helpers ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) & 0xffff) / 32768.0f - 1.0f;
}

static em_tensor *rand_cpu(em_ctx *c, int nd, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    float *v = malloc((size_t)n * sizeof *v + 4);
    for (int64_t i = 0; i < n; i++) v[i] = frand();
    em_tensor *t = em_from_host_on(c, em_device_cpu(), EM_F32, nd, shape, v);
    free(v);
    return t;
}

static em_attr A_int(int64_t v) { return em_attr_int(v); }
static em_attr A_ints(int n, const int64_t *v) { return em_attr_ints(v, n); }

static em_attr *attrs4(em_attr *a, em_attr x0, em_attr x1, em_attr x2, em_attr x3) {
    memset(a, 0, EM_MAX_ATTRS * sizeof *a);
    a[0] = x0;
    a[1] = x1;
    a[2] = x2;
    a[3] = x3;
    return a;
}

static void release_all(em_tensor **t, int n) {
    for (int i = 0; i < n; i++) {
        em_tensor_release(t[i]);
        t[i] = NULL;
    }
}

/* ---- tests ---- */

/* linear + add + silu, reshape/transpose views, softmax, an assign into a slice of a captured
 * cache (read before and after the write, through other views of the same storage), an
 * index_copy into another cache, split/squeeze/unsqueeze/expand/permute views, and an assign
 * into a node's own buffer. Run twice (the second run sees the first one's writes). */
static void test_graph_mixed(void) {
    em_ctx *c = em_ctx_create();
    em_device *d = xla(c);
    if (!d) {
        em_ctx_free(c);
        return;
    }
    int64_t sw[2] = {16, 8}, sb[1] = {16}, sc[3] = {2, 6, 4}, sc2[2] = {5, 4};
    em_tensor *w_c = rand_cpu(c, 2, sw), *b_c = rand_cpu(c, 1, sb);
    em_tensor *cache_c = rand_cpu(c, 3, sc), *cache2_c = rand_cpu(c, 2, sc2);
    em_tensor *w_d = em_to(c, w_c, d), *b_d = em_to(c, b_c, d);
    em_tensor *cache_d = em_to(c, cache_c, d), *cache2_d = em_to(c, cache2_c, d);
    em_tensor *cview_c = em_slice(c, cache_c, 1, 4, 6, 1),
              *cview_d = em_slice(c, cache_d, 1, 4, 6, 1);
    CHECK(em_ctx_status(c) == EM_OK);

    gb B;
    gb_init(&B, c, d);
    em_attr a[EM_MAX_ATTRS];
    em_attr z = {0};
    int64_t sx[2] = {3, 8}, si[1] = {2};
    int X = gb_input(&B, EM_F32, 2, sx);
    int IDX = gb_input(&B, EM_I64, 1, si);
    int W = gb_capture(&B, w_d, w_c), BIAS = gb_capture(&B, b_d, b_c);
    int CACHE = gb_capture(&B, cache_d, cache_c), CVIEW = gb_capture(&B, cview_d, cview_c);
    int CACHE2 = gb_capture(&B, cache2_d, cache2_c);

    int h = NODE(&B, EM_OP_LINEAR, 3, ((int[]){X, W, BIAS}), NULL);
    int h2 = NODE(&B, EM_OP_ADD, 2, ((int[]){h, BIAS}), NULL);
    int s = NODE(&B, EM_OP_SILU, 1, ((int[]){h2}), NULL);
    int64_t s344[3] = {3, 4, 4};
    int r = NODE(&B, EM_OP_RESHAPE, 1, ((int[]){s}), attrs4(a, A_ints(3, s344), z, z, z));
    int t = NODE(&B, EM_OP_TRANSPOSE, 1, ((int[]){r}), attrs4(a, A_int(0), A_int(1), z, z));
    int p = NODE(&B, EM_OP_SOFTMAX, 1, ((int[]){t}), attrs4(a, A_int(-1), z, z, z));
    int cs = NODE(&B, EM_OP_SLICE, 1, ((int[]){CACHE}),
                  attrs4(a, A_int(1), A_int(1), A_int(4), A_int(1)));
    int pre = NODE(&B, EM_OP_ADD, 2, ((int[]){cs, cs}), NULL); /* before the write */
    int src =
        NODE(&B, EM_OP_SLICE, 1, ((int[]){p}), attrs4(a, A_int(0), A_int(0), A_int(2), A_int(1)));
    NODE(&B, EM_OP_ASSIGN, 2, ((int[]){cs, src}), NULL);
    int64_t s124[2] = {12, 4};
    int kv = NODE(&B, EM_OP_RESHAPE, 1, ((int[]){CACHE}), attrs4(a, A_ints(2, s124), z, z, z));
    int post = NODE(&B, EM_OP_ADD, 2, ((int[]){kv, kv}), NULL); /* after it */
    int post_cs = NODE(&B, EM_OP_NEG, 1, ((int[]){cs}), NULL);  /* the same value after it */
    int cv2 = NODE(&B, EM_OP_MUL, 2, ((int[]){CVIEW, CVIEW}), NULL);
    int s2 =
        NODE(&B, EM_OP_SLICE, 1, ((int[]){s}), attrs4(a, A_int(0), A_int(0), A_int(2), A_int(1)));
    int ic =
        NODE(&B, EM_OP_SLICE, 1, ((int[]){s2}), attrs4(a, A_int(1), A_int(3), A_int(7), A_int(1)));
    NODE(&B, EM_OP_INDEX_COPY, 3, ((int[]){CACHE2, IDX, ic}), attrs4(a, A_int(0), z, z, z));
    int c2 = NODE(&B, EM_OP_TRANSPOSE, 1, ((int[]){CACHE2}), attrs4(a, A_int(0), A_int(1), z, z));
    int64_t sizes[2] = {1, 3};
    int sp =
        NODE(&B, EM_OP_SPLIT, 1, ((int[]){p}), attrs4(a, A_int(0), A_ints(2, sizes), A_int(0), z));
    int64_t d0[1] = {0};
    int sq = NODE(&B, EM_OP_SQUEEZE, 1, ((int[]){sp}), attrs4(a, A_ints(1, d0), A_int(0), z, z));
    int un = NODE(&B, EM_OP_UNSQUEEZE, 1, ((int[]){sq}), attrs4(a, A_int(0), z, z, z));
    int64_t s234[3] = {2, 3, 4}, perm[3] = {0, 2, 1};
    int ex = NODE(&B, EM_OP_EXPAND, 1, ((int[]){un}), attrs4(a, A_ints(3, s234), z, z, z));
    int pm = NODE(&B, EM_OP_PERMUTE, 1, ((int[]){ex}), attrs4(a, A_ints(3, perm), z, z, z));
    int sp1 = NODE(&B, EM_OP_SUM, 1, ((int[]){sp + 1}), attrs4(a, A_ints(1, d0), A_int(0), z, z));
    int64_t s34[2] = {3, 4};
    int zf = NODE(&B, EM_OP_FULL, 0, NULL,
                  attrs4(a, A_int(EM_F32), A_ints(2, s34), em_attr_float(0.5), z));
    int zs =
        NODE(&B, EM_OP_SLICE, 1, ((int[]){zf}), attrs4(a, A_int(0), A_int(0), A_int(2), A_int(1)));
    int pre_z = NODE(&B, EM_OP_NEG, 1, ((int[]){zf}), NULL);
    NODE(&B, EM_OP_ASSIGN, 2, ((int[]){zs, ic}), NULL);
    int outs_v[] = {p, pre, post, cv2, c2, pm, sp1, zf, post_cs, pre_z};
    int n_out = (int)(sizeof outs_v / sizeof *outs_v);
    for (int i = 0; i < n_out; i++) gb_output(&B, outs_v[i]);
    CHECK(em_ctx_status(c) == EM_OK);

    unsigned v0 = atomic_load(&cache_d->storage->version);
    em_pjrt_program *prog = em_pjrt_graph_compile(c, &B.g, d);
    CHECK_MSG(prog != NULL, "%s", em_ctx_error(c)->message);
    for (int run = 0; prog && run < 2; run++) {
        em_tensor *x_c = rand_cpu(c, 2, sx);
        int64_t iv[2][2] = {{4, 1}, {0, 3}};
        em_tensor *i_c = em_from_host_on(c, em_device_cpu(), EM_I64, 1, si, iv[run]);
        /* run 1 passes x as a transposed (non-contiguous) view */
        em_tensor *x_d;
        if (run == 0) {
            x_d = em_to(c, x_c, d);
        } else {
            int64_t sxt[2] = {8, 3};
            float v[24];
            CHECK(em_to_host_f32(c, x_c, v, 24) == EM_OK);
            float vt[24];
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 8; j++) vt[j * 3 + i] = v[i * 8 + j];
            x_d = em_transpose(c, em_from_host_on(c, d, EM_F32, 2, sxt, vt), 0, 1);
            CHECK(!em_tensor_is_contiguous(x_d));
        }
        em_tensor *i_d = em_to(c, i_c, d);
        em_tensor *got[16] = {NULL}, *want[16] = {NULL};
        em_tensor *in_d[2] = {x_d, i_d}, *in_c[2] = {x_c, i_c};
        em_status st = em_pjrt_program_run(c, prog, in_d, got);
        CHECK_MSG(st == EM_OK, "%s", em_ctx_error(c)->message);
        CHECK(gb_reference(&B, in_c, want));
        const char *names[] = {"softmax", "cache read before the assign", "cache read after it",
                               "captured view", "index_copy target (transposed)",
                               "split/squeeze/unsqueeze/expand/permute", "sum of a split part",
                               "assign into a node's buffer", "the written slice after the write",
                               "a node's buffer before the write"};
        for (int o = 0; st == EM_OK && o < n_out; o++) {
            char what[128];
            snprintf(what, sizeof what, "run %d: output %d (%s)", run, o, names[o]);
            CHECK(em_tensor_device(got[o]) == d);
            CHECK(em_tensor_dtype(got[o]) == em_tensor_dtype(want[o]));
            em_test_allclose(c, got[o], want[o], 1e-5, 1e-5, what);
        }
        release_all(got, n_out);
        release_all(want, n_out);
        em_test_allclose(c, cache_d, cache_c, 1e-6, 1e-6, "cache after the run");
        em_test_allclose(c, cache2_d, cache2_c, 1e-6, 1e-6, "cache2 after the run");
    }
    CHECK(atomic_load(&cache_d->storage->version) == v0 + 2);
    em_pjrt_program_free(prog);
    gb_free(&B);
    CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", em_ctx_error(c)->message);
    em_ctx_free(c);
}

/* A write into a graph input reaches the caller's tensor, as in eager mode. */
static void test_graph_writes_input(void) {
    em_ctx *c = em_ctx_create();
    em_device *d = xla(c);
    if (!d) {
        em_ctx_free(c);
        return;
    }
    gb B;
    gb_init(&B, c, d);
    em_attr a[EM_MAX_ATTRS];
    int64_t sy[2] = {4, 4};
    int Y = gb_input(&B, EM_F32, 2, sy);
    int sl =
        NODE(&B, EM_OP_SLICE, 1, ((int[]){Y}), attrs4(a, A_int(0), A_int(1), A_int(3), A_int(1)));
    int ng = NODE(&B, EM_OP_NEG, 1, ((int[]){sl}), NULL);
    NODE(&B, EM_OP_ASSIGN, 2, ((int[]){sl, ng}), NULL);
    int tw = NODE(&B, EM_OP_ADD, 2, ((int[]){Y, Y}), NULL);
    gb_output(&B, tw);
    em_pjrt_program *prog = em_pjrt_graph_compile(c, &B.g, d);
    CHECK_MSG(prog != NULL, "%s", em_ctx_error(c)->message);
    if (prog) {
        em_tensor *y_c = rand_cpu(c, 2, sy), *y_d = em_to(c, y_c, d);
        em_tensor *got[1] = {NULL}, *want[1] = {NULL};
        CHECK(em_pjrt_program_run(c, prog, &y_d, got) == EM_OK);
        CHECK(gb_reference(&B, &y_c, want));
        em_test_allclose(c, got[0], want[0], 1e-6, 1e-6, "output");
        em_test_allclose(c, y_d, y_c, 1e-6, 1e-6, "the written input");
        release_all(got, 1);
        release_all(want, 1);
    }
    em_pjrt_program_free(prog);
    gb_free(&B);
    CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", em_ctx_error(c)->message);
    em_ctx_free(c);
}

/* ragged_dot inside a program: the group sizes are device data (no host plan). */
static void test_graph_ragged_dot(void) {
    em_ctx *c = em_ctx_create();
    em_device *d = xla(c);
    if (!d) {
        em_ctx_free(c);
        return;
    }
    for (int variant = 0; variant < 2; variant++) {
        /* M > G (the dense form) and M <= G (the gather form) */
        int64_t m = variant ? 2 : 7, g = 3;
        int64_t sl[2] = {m, 4}, sr[3] = {g, 4, 5}, sg[1] = {g};
        int32_t gs[2][3] = {{2, 0, 3}, {1, 1, 0}};
        em_tensor *rhs_c = rand_cpu(c, 3, sr), *rhs_d = em_to(c, rhs_c, d);
        gb B;
        gb_init(&B, c, d);
        em_attr a[EM_MAX_ATTRS];
        em_attr z = {0};
        int L = gb_input(&B, EM_F32, 2, sl);
        int G = gb_input(&B, EM_I32, 1, sg);
        int R = gb_capture(&B, rhs_d, rhs_c);
        int y = NODE(&B, EM_OP_RAGGED_DOT, 3, ((int[]){L, R, G}), attrs4(a, A_int(0), z, z, z));
        int ys = NODE(&B, EM_OP_SILU, 1, ((int[]){y}), NULL);
        gb_output(&B, ys);
        em_pjrt_program *prog = em_pjrt_graph_compile(c, &B.g, d);
        CHECK_MSG(prog != NULL, "%s", em_ctx_error(c)->message);
        if (prog) {
            em_tensor *l_c = rand_cpu(c, 2, sl), *l_d = em_to(c, l_c, d);
            em_tensor *g_c = em_from_host_on(c, em_device_cpu(), EM_I32, 1, sg, gs[variant]);
            em_tensor *g_d = em_to(c, g_c, d);
            em_tensor *in_d[2] = {l_d, g_d}, *in_c[2] = {l_c, g_c};
            em_tensor *got[1] = {NULL}, *want[1] = {NULL};
            CHECK(em_pjrt_program_run(c, prog, in_d, got) == EM_OK);
            CHECK(gb_reference(&B, in_c, want));
            em_test_allclose(c, got[0], want[0], 1e-5, 1e-5,
                             variant ? "ragged_dot (gather)" : "ragged_dot (dense)");
            release_all(got, 1);
            release_all(want, 1);
        }
        em_pjrt_program_free(prog);
        gb_free(&B);
    }
    CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", em_ctx_error(c)->message);
    em_ctx_free(c);
}

/* More captured storages than the per-op builder's 64 parameters. */
static void test_graph_many_params(void) {
    em_ctx *c = em_ctx_create();
    em_device *d = xla(c);
    if (!d) {
        em_ctx_free(c);
        return;
    }
    gb B;
    gb_init(&B, c, d);
    int64_t sh[1] = {3};
    int acc = gb_input(&B, EM_F32, 1, sh);
    for (int i = 0; i < 80; i++) {
        em_tensor *w_c = rand_cpu(c, 1, sh), *w_d = em_to(c, w_c, d);
        int w = gb_capture(&B, w_d, w_c);
        acc = NODE(&B, EM_OP_ADD, 2, ((int[]){acc, w}), NULL);
    }
    gb_output(&B, acc);
    em_pjrt_program *prog = em_pjrt_graph_compile(c, &B.g, d);
    CHECK_MSG(prog != NULL, "%s", em_ctx_error(c)->message);
    if (prog) {
        em_tensor *x_c = rand_cpu(c, 1, sh), *x_d = em_to(c, x_c, d);
        em_tensor *got[1] = {NULL}, *want[1] = {NULL};
        CHECK(em_pjrt_program_run(c, prog, &x_d, got) == EM_OK);
        CHECK(gb_reference(&B, &x_c, want));
        em_test_allclose(c, got[0], want[0], 1e-5, 1e-5, "80 captured weights");
        release_all(got, 1);
        release_all(want, 1);
        /* a wrong input signature is reported, not run */
        int64_t sh4[1] = {4};
        em_tensor *bad = em_to(c, rand_cpu(c, 1, sh4), d);
        CHECK(em_pjrt_program_run(c, prog, &bad, got) == EM_ERR_SHAPE);
        CHECK_ERR(c, EM_ERR_SHAPE, "input 0", "[4]", "[3]");
        em_ctx_clear_error(c);
    }
    em_pjrt_program_free(prog);
    gb_free(&B);
    em_ctx_free(c);
}

/* Errors name the node's op and the place the function called it. */
static void test_graph_errors(void) {
    em_ctx *c = em_ctx_create();
    em_device *d = xla(c);
    if (!d) {
        em_ctx_free(c);
        return;
    }
    gb B;
    gb_init(&B, c, d);
    int64_t sh[1] = {3};
    int x = gb_input(&B, EM_F32, 1, sh);
    em_tensor *w_c = rand_cpu(c, 1, sh);
    int w = gb_capture(&B, w_c, w_c); /* on the CPU: cannot be a parameter of an xla:0 program */
    int line = __LINE__ + 1;
    int y = NODE(&B, EM_OP_MUL, 2, ((int[]){x, w}), NULL);
    gb_output(&B, y);
    CHECK(em_pjrt_graph_compile(c, &B.g, d) == NULL);
    const em_error *e = em_ctx_error(c);
    CHECK(e && e->line == line && e->file && strstr(e->file, "test_compile_pjrt.c"));
    CHECK_ERR(c, EM_ERR_DEVICE, "mul", "cpu", "xla:0");
    em_ctx_clear_error(c);
    gb_free(&B);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_graph_mixed), T(test_graph_writes_input), T(test_graph_ragged_dot),
             T(test_graph_many_params), T(test_graph_errors))

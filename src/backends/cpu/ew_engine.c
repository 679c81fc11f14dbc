/*
 * The element-wise engine: one pass over the output in blocks, evaluating a small expression
 * program per block. An unfused element-wise op is a program of one node; fused mode hands it
 * the whole pending chain (a DAG of lazy tensors), so intermediate values live only in
 * block-sized buffers that stay in L1, and each input and the output cross memory once.
 *
 * Every node rounds its block to its dtype exactly as a store and reload would, so fused results
 * are bitwise equal to unfused ones.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/ew.h"

#define EW_BLOCK 256
#define EW_BLOCK_DIRECT 8192 /* when no value needs a scratch buffer */
#define EW_MAX_LEAVES 40
#define EW_MAX_NODES 20
#define EW_STACK_SCRATCH (48 * 1024)
#define EW_PAR_MIN 32768 /* elements below which one thread does the work */

EM_CPU_ISA_TABLE(em_ew_isa, em_ew_isa_get, [EM_ISA_GENERIC] = em_ew_fill_generic,
                 [EM_ISA_AVX2] = EM_ISA_X86(em_ew_fill_avx2),
                 [EM_ISA_AVX512] = EM_ISA_X86(em_ew_fill_avx512),
                 [EM_ISA_NEON] = EM_ISA_ARM(em_ew_fill_neon))

typedef struct ew_leaf {
    const em_tensor *t;
    const char *base; /* element 0 of the storage */
    em_dtype dtype;
    int64_t st[EM_MAX_DIMS]; /* strides in the (coalesced) output index space */
    bool direct;             /* native compute type and unit inner stride: no copy needed */
} ew_leaf;

typedef struct ew_node {
    em_op_id op;
    int n_in;
    int in[3];          /* slots */
    bool truth[3];      /* input converted to 0/1 */
    int ct_in, ct_out;
    em_dtype dtype;     /* output dtype */
    const em_attr *attrs;
    const em_tensor *t; /* the lazy tensor it computes (fused) */
} ew_node;

typedef struct ew_prog {
    const em_ew_isa *isa;
    int nd;
    int64_t shape[EM_MAX_DIMS];
    int n_leaves, n_nodes;
    ew_leaf leaves[EW_MAX_LEAVES];
    ew_node nodes[EW_MAX_NODES];
    int slot_ct[EW_MAX_LEAVES + EW_MAX_NODES];
    int root;
    em_dtype out_dtype;
    char *out;
    int64_t numel;
    int err; /* fused build: 1 too large, 2 an input was overwritten in place */
    int64_t block; /* elements per block: EW_BLOCK, or EW_BLOCK_DIRECT when nothing is copied */
} ew_prog;

static bool native(em_dtype t) { return t == EM_F32 || t == EM_F64 || t == EM_I64; }

static int add_leaf(ew_prog *p, const em_tensor *t, const int64_t *oshape, int ond) {
    for (int i = 0; i < p->n_leaves; i++)
        if (p->leaves[i].t == t) return i;
    if (p->n_leaves == EW_MAX_LEAVES) {
        p->err = 1;
        return -1;
    }
    int k = p->n_leaves++;
    ew_leaf *l = &p->leaves[k];
    l->t = t;
    l->dtype = t->dtype;
    l->base = (const char *)t->storage->data + (size_t)t->offset * em_esize(t->dtype);
    for (int d = 0; d < ond; d++) {
        int td = d - (ond - t->ndim);
        l->st[d] = (td < 0 || (t->shape[td] == 1 && oshape[d] != 1)) ? 0 : t->strides[td];
    }
    p->slot_ct[k] = em_ew_ct(t->dtype);
    return k;
}

/* Compute types of a node from its op and its inputs' dtypes. */
static void node_types(ew_node *n, em_tensor *const *in) {
    for (int i = 0; i < 3; i++) n->truth[i] = false;
    switch (n->op) {
    case EM_OP_EQ:
    case EM_OP_NE:
    case EM_OP_LT:
    case EM_OP_LE:
    case EM_OP_GT:
    case EM_OP_GE:
        n->ct_in = em_ew_ct(em_promote_types(in, 2));
        n->ct_out = EW_CT_I64;
        break;
    case EM_OP_LOGICAL_AND:
    case EM_OP_LOGICAL_OR:
    case EM_OP_LOGICAL_NOT:
        n->ct_in = n->ct_out = EW_CT_I64;
        n->truth[0] = n->truth[1] = true;
        break;
    case EM_OP_WHERE:
        n->ct_in = n->ct_out = em_ew_ct(n->dtype);
        n->truth[0] = true;
        break;
    case EM_OP_CAST:
        n->ct_in = em_ew_ct(in[0]->dtype);
        n->ct_out = em_ew_ct(n->dtype);
        break;
    default: n->ct_in = n->ct_out = em_ew_ct(n->dtype); break;
    }
}

/* Merges output dims that every leaf walks contiguously, dropping size-1 dims. */
static void coalesce(ew_prog *p) {
    int nd = 0;
    int64_t shape[EM_MAX_DIMS];
    int keep[EM_MAX_DIMS];
    for (int d = 0; d < p->nd; d++)
        if (p->shape[d] != 1) keep[nd++] = d;
    for (int i = 0; i < nd; i++) shape[i] = p->shape[keep[i]];
    for (int l = 0; l < p->n_leaves; l++) {
        int64_t st[EM_MAX_DIMS];
        for (int i = 0; i < nd; i++) st[i] = p->leaves[l].st[keep[i]];
        memcpy(p->leaves[l].st, st, sizeof st);
    }
    /* merge dim i into i+1 where possible, from the inside out */
    int out = nd;
    if (nd > 1) {
        int64_t ns[EM_MAX_DIMS];
        int64_t lst[EW_MAX_LEAVES][EM_MAX_DIMS];
        int w = 0;
        ns[0] = shape[0];
        for (int l = 0; l < p->n_leaves; l++) lst[l][0] = p->leaves[l].st[0];
        for (int i = 1; i < nd; i++) {
            bool ok = true;
            for (int l = 0; l < p->n_leaves && ok; l++)
                ok = lst[l][w] == p->leaves[l].st[i] * shape[i];
            if (ok) {
                ns[w] *= shape[i];
                for (int l = 0; l < p->n_leaves; l++) lst[l][w] = p->leaves[l].st[i];
            } else {
                w++;
                ns[w] = shape[i];
                for (int l = 0; l < p->n_leaves; l++) lst[l][w] = p->leaves[l].st[i];
            }
        }
        out = w + 1;
        memcpy(shape, ns, sizeof ns);
        for (int l = 0; l < p->n_leaves; l++) memcpy(p->leaves[l].st, lst[l], sizeof lst[l]);
    }
    p->nd = out;
    memcpy(p->shape, shape, (size_t)out * sizeof *shape);
    if (out == 0) { /* a single element */
        p->nd = 1;
        p->shape[0] = 1;
        for (int l = 0; l < p->n_leaves; l++) p->leaves[l].st[0] = 0;
    }
    for (int l = 0; l < p->n_leaves; l++) {
        ew_leaf *lf = &p->leaves[l];
        lf->direct = native(lf->dtype) && lf->st[p->nd - 1] == 1;
    }
}

/* ---- evaluation ---- */

typedef struct ew_job {
    const ew_prog *p;
} ew_job;

static void eval_range(const ew_prog *p, int64_t begin, int64_t end, char *scratch) {
    const em_ew_isa *isa = p->isa;
    int nslots = p->n_leaves + p->n_nodes;
    char *slot_buf[EW_MAX_LEAVES + EW_MAX_NODES];
    char *conv_buf[EW_MAX_NODES][3];
    char *s = scratch;
    for (int i = 0; i < nslots; i++, s += p->block * 8) slot_buf[i] = s;
    for (int n = 0; n < p->n_nodes; n++)
        for (int j = 0; j < p->nodes[n].n_in; j++, s += p->block * 8) conv_buf[n][j] = s;
    const void *ptr[EW_MAX_LEAVES + EW_MAX_NODES];
    int nd = p->nd;
    int64_t inner = p->shape[nd - 1];
    size_t oes = em_esize(p->out_dtype);

    int64_t pos = begin;
    while (pos < end) {
        /* multi-index of pos */
        int64_t rem = pos / inner, ii = pos % inner;
        int64_t len = inner - ii;
        if (len > end - pos) len = end - pos;
        if (len > p->block) len = p->block;
        int64_t outer_off[EW_MAX_LEAVES];
        for (int l = 0; l < p->n_leaves; l++) outer_off[l] = 0;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t i = rem % p->shape[d];
            rem /= p->shape[d];
            for (int l = 0; l < p->n_leaves; l++) outer_off[l] += i * p->leaves[l].st[d];
        }
        for (int l = 0; l < p->n_leaves; l++) {
            const ew_leaf *lf = &p->leaves[l];
            int64_t st = lf->st[nd - 1];
            const char *src = lf->base + (size_t)(outer_off[l] + ii * st) * em_esize(lf->dtype);
            if (lf->direct) {
                ptr[l] = src;
            } else {
                isa->load[lf->dtype](slot_buf[l], src, st, len);
                ptr[l] = slot_buf[l];
            }
        }
        char *dst = p->out + (size_t)pos * oes;
        for (int n = 0; n < p->n_nodes; n++) {
            const ew_node *nd_ = &p->nodes[n];
            int slot = p->n_leaves + n;
            const void *args[3] = {NULL, NULL, NULL};
            for (int j = 0; j < nd_->n_in; j++) {
                int is = nd_->in[j];
                int have = p->slot_ct[is];
                if (nd_->truth[j]) {
                    isa->truth[have](conv_buf[n][j], ptr[is], len);
                    args[j] = conv_buf[n][j];
                } else if (have != nd_->ct_in) {
                    isa->conv[have][nd_->ct_in](conv_buf[n][j], ptr[is], len);
                    args[j] = conv_buf[n][j];
                } else {
                    args[j] = ptr[is];
                }
            }
            bool to_out = slot == p->root && native(nd_->dtype);
            void *o = to_out ? (void *)dst : slot_buf[slot];
            if (nd_->op == EM_OP_CAST) {
                if (nd_->dtype == EM_BOOL)
                    isa->truth[nd_->ct_in](o, args[0], len);
                else if (nd_->ct_in != nd_->ct_out)
                    isa->conv[nd_->ct_in][nd_->ct_out](o, args[0], len);
                else
                    memcpy(o, args[0], (size_t)len * 8 / (nd_->ct_out == EW_CT_F32 ? 2 : 1));
            } else {
                isa->fn[nd_->op][nd_->ct_in](len, o, args[0], args[1], args[2], nd_->attrs);
            }
            if (!native(nd_->dtype) && isa->round[nd_->dtype]) isa->round[nd_->dtype](o, len);
            ptr[slot] = o;
        }
        const ew_node *rn = p->root >= p->n_leaves ? &p->nodes[p->root - p->n_leaves] : NULL;
        if (!(rn && native(rn->dtype))) isa->store[p->out_dtype](dst, ptr[p->root], len);
        pos += len;
    }
}

static size_t scratch_bytes(const ew_prog *p) {
    size_t n = (size_t)(p->n_leaves + p->n_nodes);
    for (int i = 0; i < p->n_nodes; i++) n += (size_t)p->nodes[i].n_in;
    return p->block == EW_BLOCK_DIRECT ? 0 : n * EW_BLOCK * 8;
}

static void par_body(void *user, int64_t b, int64_t e, int tid) {
    (void)tid;
    const ew_prog *p = user;
    size_t need = scratch_bytes(p);
    _Alignas(64) char stack[EW_STACK_SCRATCH];
    char *buf = need <= sizeof stack ? stack : malloc(need);
    if (!buf) return; /* cannot happen in practice; the caller pre-checks with one malloc */
    eval_range(p, b * p->block, e * p->block < p->numel ? e * p->block : p->numel, buf);
    if (buf != stack) free(buf);
}

/* A single node whose inputs are read in place and whose output is written in place needs no
 * scratch: it can run in long blocks (less per-block bookkeeping on large tensors). */
static bool direct_only(const ew_prog *p) {
    if (p->n_nodes != 1 || !native(p->out_dtype) || p->nodes[0].op == EM_OP_CAST) return false;
    const ew_node *n = &p->nodes[0];
    if (!native(n->dtype)) return false;
    for (int j = 0; j < n->n_in; j++)
        if (n->truth[j] || p->slot_ct[n->in[j]] != n->ct_in) return false;
    for (int l = 0; l < p->n_leaves; l++)
        if (!p->leaves[l].direct) return false;
    return true;
}

static em_status run(em_ctx *c, ew_prog *p) {
    if (p->numel == 0) return EM_OK;
    coalesce(p);
    p->block = direct_only(p) ? EW_BLOCK_DIRECT : EW_BLOCK;
    if (scratch_bytes(p) > EW_STACK_SCRATCH) {
        void *probe = malloc(scratch_bytes(p));
        if (!probe) return EM_FAIL(c, EM_ERR_OOM, "elementwise", "no scratch memory");
        free(probe);
    }
    int64_t blocks = (p->numel + p->block - 1) / p->block;
    if (p->numel < EW_PAR_MIN) {
        par_body(p, 0, blocks, 0);
    } else {
        int64_t grain = EW_PAR_MIN / p->block / 4;
        em_parallel_for(blocks, grain > 0 ? grain : 1, par_body, p);
    }
    return EM_OK;
}

static void prog_init(ew_prog *p, em_tensor *out) {
    p->isa = em_ew_isa_get();
    p->nd = out->ndim;
    memcpy(p->shape, out->shape, (size_t)out->ndim * sizeof *out->shape);
    p->n_leaves = p->n_nodes = 0;
    p->out_dtype = out->dtype;
    p->out = em_tensor_ptr(out);
    p->numel = out->numel;
    p->err = 0;
}

/* The kernel for every element-wise op (unfused). */
static em_status ew_kernel(const em_kernel_args *a) {
    ew_prog p;
    em_tensor *out = a->out[0];
    prog_init(&p, out);
    ew_node *n = &p.nodes[0];
    n->op = a->op->id;
    n->n_in = a->n_in;
    for (int i = 0; i < a->n_in; i++) n->in[i] = add_leaf(&p, a->in[i], out->shape, out->ndim);
    n->dtype = out->dtype;
    n->attrs = a->attrs;
    n->t = out;
    node_types(n, a->in);
    p.n_nodes = 1;
    p.slot_ct[p.n_leaves] = n->ct_out;
    p.root = p.n_leaves;
    return run(a->ctx, &p);
}

/* contiguous: a program with no nodes (the leaf is stored in its own dtype). */
static em_status contiguous_kernel(const em_kernel_args *a) {
    ew_prog p;
    em_tensor *out = a->out[0];
    prog_init(&p, out);
    p.root = add_leaf(&p, a->in[0], out->shape, out->ndim);
    return run(a->ctx, &p);
}

void em_cpu_register_assign(em_kernel_fn *k);

/* ---- fused mode ---- */

static int add_value(ew_prog *p, em_tensor *t, const em_tensor *root) {
    if (!t->lazy) return add_leaf(p, t, root->shape, root->ndim);
    for (int i = 0; i < p->n_nodes; i++)
        if (p->nodes[i].t == t) return -2 - i; /* shared sub-expression */
    int ins[3];
    for (int i = 0; i < t->lazy->n_in; i++) {
        em_tensor *x = t->lazy->in[i];
        if (!x->lazy && x->storage &&
            atomic_load_explicit(&x->storage->version, memory_order_relaxed) !=
                t->lazy->in_version[i])
        {
            p->err = 2; /* written in place (assign) after this chain read it */
            return -1;
        }
        ins[i] = add_value(p, x, root);
        if (ins[i] == -1) return -1;
    }
    if (p->n_nodes == EW_MAX_NODES) {
        p->err = 1;
        return -1;
    }
    int k = p->n_nodes++;
    ew_node *n = &p->nodes[k];
    n->op = t->lazy->op;
    n->n_in = t->lazy->n_in;
    memcpy(n->in, ins, sizeof ins);
    n->dtype = t->dtype;
    n->attrs = t->lazy->attrs;
    n->t = t;
    node_types(n, t->lazy->in);
    return -2 - k; /* node slots are renumbered once all leaves are known */
}

em_status em_cpu_eval_lazy(em_ctx *c, em_tensor *t) {
    ew_prog p;
    prog_init(&p, t);
    int r = add_value(&p, t, t);
    if (r == -1 && p.err != 2)
        return EM_FAIL(c, EM_ERR_INTERNAL, "fused", "expression too large to fuse");
    if (r == -1)
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "fused",
                       "a tensor read by pending fused work was overwritten in place (assign) "
                       "before the work ran; read the pending result first or use sync/async mode");
    /* node references were encoded as -2-k; map them to slots after the leaves */
    for (int k = 0; k < p.n_nodes; k++) {
        ew_node *n = &p.nodes[k];
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] <= -2) n->in[j] = p.n_leaves + (-2 - n->in[j]);
        p.slot_ct[p.n_leaves + k] = n->ct_out;
    }
    p.root = r <= -2 ? p.n_leaves + (-2 - r) : r;
    return run(c, &p);
}

void em_cpu_register_ew(em_kernel_fn *k) {
    for (int i = 0; i < EM_OP_COUNT; i++)
        if (em_op_get((em_op_id)i)->kind == EM_OPK_EW) k[i] = ew_kernel;
    k[EM_OP_CONTIGUOUS] = contiguous_kernel;
    em_cpu_register_assign(k);
}

/* ---- assign: in-place strided copy with broadcast and cast ---- */

static em_status assign_kernel(const em_kernel_args *a) {
    em_tensor *dst = a->in[0];
    const em_tensor *src = a->in[1];
    if (dst->numel == 0) return EM_OK;
    int nd = dst->ndim;
    int64_t sst[EM_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        int sd = d - (nd - src->ndim);
        sst[d] = (sd < 0 || (src->shape[sd] == 1 && dst->shape[d] != 1)) ? 0 : src->strides[sd];
    }
    int64_t inner = nd ? dst->shape[nd - 1] : 1;
    int64_t dis = nd ? dst->strides[nd - 1] : 1, sis = nd ? sst[nd - 1] : 1;
    size_t des = em_esize(dst->dtype), ses = em_esize(src->dtype);
    char *db = dst->storage->data;
    const char *sb = src->storage->data;
    int64_t idx[EM_MAX_DIMS] = {0};
    for (int64_t done = 0; done < dst->numel; done += inner) {
        int64_t doff = dst->offset, soff = src->offset;
        for (int d = 0; d < nd - 1; d++) {
            doff += idx[d] * dst->strides[d];
            soff += idx[d] * sst[d];
        }
        if (dis == 1 && sis == 1) {
            em_convert(sb + (size_t)soff * ses, src->dtype, db + (size_t)doff * des, dst->dtype,
                       inner);
        } else {
            for (int64_t i = 0; i < inner; i++)
                em_convert(sb + (size_t)(soff + i * sis) * ses, src->dtype,
                           db + (size_t)(doff + i * dis) * des, dst->dtype, 1);
        }
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < dst->shape[d]) break;
            idx[d] = 0;
        }
    }
    atomic_fetch_add_explicit(&dst->storage->version, 1, memory_order_relaxed);
    return EM_OK;
}

void em_cpu_register_assign(em_kernel_fn *k) { k[EM_OP_ASSIGN] = assign_kernel; }

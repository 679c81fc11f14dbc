/*
 * The PJRT backend table and its one kernel: every op of the op table runs as
 *   key (op, attributes, input geometry, dtypes) -> cached executable, or
 *   emit StableHLO (stablehlo_*.c) -> compile -> cache,
 * then executes on the inputs' device buffers; the outputs are new device buffers owned by the
 * output tensors. Views (strided inputs) are materialised inside the op's own program, so a
 * transposed or sliced input costs no extra execution.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"
#include "ops/dispatch.h"

static pj_emit_fn emitters[EM_OP_COUNT];
static pthread_once_t emit_once = PTHREAD_ONCE_INIT;

static void emit_init(void) {
    pj_register_ew(emitters);
    pj_register_create(emitters);
    pj_register_layout(emitters);
    pj_register_reduce(emitters);
    pj_register_linalg(emitters);
    pj_register_nn(emitters);
    pj_register_index(emitters);
    pj_register_conv(emitters);
    pj_register_moe(emitters);
}

pj_emit_fn pj_emitter(em_op_id op) {
    pthread_once(&emit_once, emit_init);
    return (unsigned)op < EM_OP_COUNT ? emitters[op] : NULL;
}

sh_type pj_meta_type(const em_meta *m) { return sh_ty(sh_elem_of(m->dtype), m->ndim, m->shape); }

/* ---- views ---- */

void pj_key_tensor(pj_key *k, const em_tensor *t) {
    const pj_buf *pb = t->storage->data;
    int32_t hdr[4] = {(int32_t)t->dtype, t->ndim, (int32_t)pb->dtype, pb->ndim};
    pj_key_add(k, hdr, sizeof hdr);
    pj_key_add(k, t->shape, (size_t)t->ndim * sizeof *t->shape);
    pj_key_add(k, t->strides, (size_t)t->ndim * sizeof *t->strides);
    pj_key_i64(k, t->offset);
    pj_key_add(k, pb->dims, (size_t)pb->ndim * sizeof *pb->dims);
}

/* Tries the slice/reshape/transpose/broadcast form of a view of flat [n]; false if the strides
 * do not nest (then a gather is used). */
static bool view_box(sh_b *b, sh_val flat, const em_tensor *t, sh_val *out) {
    int m = 0, order[EM_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] > 1 && t->strides[i] != 0) {
            if (t->strides[i] < 0) return false;
            order[m++] = i;
        }
    /* sort kept dims by stride, largest first (stable insertion sort) */
    for (int i = 1; i < m; i++)
        for (int j = i; j > 0 && t->strides[order[j]] > t->strides[order[j - 1]]; j--) {
            int x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    int64_t cont[EM_MAX_DIMS + 1];
    int nc = 0;
    for (int i = 0; i < m; i++) {
        int64_t s = t->strides[order[i]], sz = t->shape[order[i]];
        if (i == 0) {
            cont[nc++] = sz;
        } else {
            int64_t prev = t->strides[order[i - 1]];
            if (prev % s || sz > prev / s) return false;
            cont[nc++] = prev / s;
        }
    }
    int64_t inner = m ? t->strides[order[m - 1]] : 1;
    if (inner > 1) cont[nc++] = inner;
    int64_t span = m ? t->shape[order[0]] * t->strides[order[0]] : 1;
    int64_t n = flat.t.d[0];
    sh_val v = flat;
    if (t->offset + span > n) {
        int64_t lo = 0, hi = t->offset + span - n, in0 = 0;
        v = sh_pad(b, v, sh_const(b, sh_scalar_ty(v.t.e), 0), &lo, &hi, &in0);
    }
    v = sh_slice_dim(b, v, 0, t->offset, t->offset + span, 1);
    v = sh_reshape(b, v, nc, cont);
    int64_t st[EM_MAX_DIMS + 1], lim[EM_MAX_DIMS + 1], step[EM_MAX_DIMS + 1];
    for (int i = 0; i < nc; i++) {
        st[i] = 0;
        step[i] = 1;
        lim[i] = i < m ? t->shape[order[i]] : 1;
    }
    v = sh_slice(b, v, st, lim, step);
    int64_t sizes[EM_MAX_DIMS];
    for (int i = 0; i < m; i++) sizes[i] = t->shape[order[i]];
    v = sh_reshape(b, v, m, sizes);
    /* into the kept dims' original order */
    int perm[EM_MAX_DIMS], rank_of[EM_MAX_DIMS] = {0}; /* every kept dim is in order */
    int kept[EM_MAX_DIMS], nk = 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] > 1 && t->strides[i] != 0) kept[nk++] = i;
    for (int i = 0; i < m; i++) rank_of[order[i]] = i;
    for (int i = 0; i < nk; i++) perm[i] = rank_of[kept[i]];
    v = sh_transpose(b, v, perm);
    /* broadcast (stride-0 dims) and size-1 dims */
    int map[EM_MAX_DIMS];
    for (int i = 0; i < nk; i++) map[i] = kept[i];
    *out = sh_bcast_in_dim(b, v, map, t->ndim, t->shape);
    return true;
}

sh_val pj_view_value(sh_b *b, sh_val base, const em_tensor *t) {
    const pj_buf *pb = t->storage->data;
    int64_t bn = sh_numel(&base.t);
    if (pb->dtype != t->dtype) sh_fail(b, "storage holds %s, tensor is %s", em_dtype_name(pb->dtype),
                                       em_dtype_name(t->dtype));
    if (em_is_contiguous(t) && t->offset == 0 && bn == t->numel)
        return sh_reshape(b, base, t->ndim, t->shape);
    sh_val flat = sh_reshape(b, base, 1, &bn);
    sh_val r;
    if (t->numel == 0) return sh_const(b, sh_ty(base.t.e, t->ndim, t->shape), 0);
    if (view_box(b, flat, t, &r)) return r;
    /* any strides: gather element offset + sum(i_d * stride_d) */
    sh_type it = sh_ty(SH_I64, t->ndim, t->shape);
    sh_val idx = sh_const_i(b, it, t->offset);
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 1 || t->strides[d] == 0) continue;
        sh_val io = sh_iota(b, it, d);
        idx = sh_bin(b, "add", idx, sh_bin(b, "multiply", io, sh_const_i(b, it, t->strides[d])));
    }
    sh_gather_dims g;
    memset(&g, 0, sizeof g);
    g.collapsed[0] = 0;
    g.n_collapsed = 1;
    g.start_index_map[0] = 0;
    g.n_start_index_map = 1;
    g.index_vector_dim = t->ndim;
    g.slice_sizes[0] = 1;
    return sh_gather(b, flat, idx, &g, sh_ty(base.t.e, t->ndim, t->shape));
}

/* ---- the kernel ---- */

static void key_attrs(pj_key *k, const em_op_def *op, const em_attr *attrs) {
    for (int i = 0; i < op->n_attrs; i++) {
        const em_attr *a = &attrs[i];
        switch (op->attr_types[i]) {
        case EM_ATTR_FLOAT: pj_key_add(k, &a->f, sizeof a->f); break;
        case EM_ATTR_INTS:
            pj_key_i64(k, a->n);
            if (a->n > 0) pj_key_add(k, a->v, (size_t)a->n * sizeof *a->v);
            break;
        default: pj_key_i64(k, a->i); break;
        }
    }
}

static void describe(char *buf, size_t n, const em_kernel_args *a) {
    int u = snprintf(buf, n, "%s(", a->op->name);
    for (int i = 0; i < a->n_in && u > 0 && (size_t)u < n; i++) {
        char s[96];
        u += snprintf(buf + u, n - (size_t)u, "%s%s", i ? ", " : "",
                      a->in[i] ? em_tensor_sig(a->in[i], s, sizeof s) : "none");
    }
    if (u > 0 && (size_t)u < n) snprintf(buf + u, n - (size_t)u, ")");
}

em_status pj_ensure_buffer(em_ctx *c, em_tensor *t, bool in_op) {
    pj_buf *pb = t->storage->data;
    if (pb->buf || pb->shape_only) return EM_OK;
    size_t es = em_esize(t->dtype);
    int64_t n = (int64_t)(t->storage->nbytes / es);
    if (((pj_dev *)t->dev->impl)->pl->aot) { /* a shape is all a compile-only storage gets */
        pj_storage_set(t->storage, NULL, t->dtype, 1, &n);
        return EM_OK;
    }
    void *z = calloc((size_t)(n ? n : 1), es);
    em_tensor *tmp = z ? em_tensor_alloc_meta(t->dtype, 1, &n) : NULL;
    em_status s = EM_ERR_OOM;
    if (tmp) {
        tmp->storage = t->storage;
        tmp->dev = t->dev;
        s = t->dev->be->upload(c, tmp, z);
        tmp->storage = NULL;
        free(tmp);
    } else {
        s = in_op ? em_op_fail(c, EM_ERR_OOM, "out of memory")
                  : EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory");
    }
    free(z);
    return s;
}

static em_status ensure_buffer(em_ctx *c, em_tensor *t) { return pj_ensure_buffer(c, t, true); }

/* ASSIGN and INDEX_COPY write into the destination's storage: the program takes the whole
 * storage buffer and returns its new contents. */
static em_status emit_assign(pj_emit *e, sh_val base, const em_tensor *dst, em_dtype src_dt);
static em_status emit_index_copy(pj_emit *e, sh_val base, const em_tensor *dst);

/* ---- index checks ---- */

/* Index values are data: the CPU checks them and reports the first bad one at the op. The same
 * check here needs the indices on the host (a small read that waits for them); indices with
 * more than EMBER_PJRT_INDEX_CHECK elements (default 2^20; 0 disables) are not checked, and a
 * bad one then reads a clamped position (gathers) or is dropped (scatters), as XLA defines. */
static em_status check_indices(em_ctx *c, const em_kernel_args *a, int32_t **gs_out) {
    em_op_id id = a->op->id;
    int which = 1;
    int64_t size = 0;
    bool wrap = false;
    int dim = 0;
    switch (id) {
    case EM_OP_INDEX_SELECT:
    case EM_OP_GATHER:
    case EM_OP_TAKE_ALONG_DIM:
    case EM_OP_SCATTER:
    case EM_OP_SCATTER_ADD:
    case EM_OP_INDEX_ADD:
    case EM_OP_INDEX_COPY: {
        const em_tensor *x = a->in[0];
        int64_t d = a->attrs[0].i;
        dim = (int)(d < 0 ? d + (x->ndim ? x->ndim : 1) : d);
        size = x->ndim ? x->shape[dim] : 1;
        wrap = id == EM_OP_TAKE_ALONG_DIM;
        break;
    }
    case EM_OP_ONE_HOT:
        which = 0;
        size = a->attrs[0].i;
        break;
    case EM_OP_EMBEDDING: size = a->in[0]->shape[0]; break;
    case EM_OP_RAGGED_DOT: which = 2; break;
    default: return EM_OK;
    }
    em_tensor *idx = a->in[which];
    static int64_t limit = -1;
    if (limit < 0) {
        const char *e = getenv("EMBER_PJRT_INDEX_CHECK");
        limit = e && *e ? atoll(e) : (int64_t)1 << 20;
    }
    bool need = id == EM_OP_RAGGED_DOT && gs_out; /* the grouping plan needs the sizes */
    if (idx->numel == 0 || (idx->numel > limit && !need) || (limit == 0 && !need)) return EM_OK;
    size_t nb = em_tensor_nbytes(idx);
    void *buf = malloc(nb);
    if (!buf) return em_op_fail(c, EM_ERR_OOM, "cannot stage %zu bytes of indices", nb);
    em_call_info saved = c->cur;
    em_status s = em_to_host(c, idx, buf, nb);
    c->cur = saved;
    if (s) {
        free(buf);
        return s;
    }
    if (id == EM_OP_RAGGED_DOT) { /* group sizes: non-negative, at most M rows in all */
        int64_t m = a->in[0]->shape[0], total = 0;
        const int32_t *gs = buf;
        for (int64_t i = 0; i < idx->numel; i++) {
            int64_t g = gs[i];
            if (g < 0) {
                free(buf);
                return em_op_fail(c, EM_ERR_INVALID_ARG, "group_sizes[%lld] = %lld is negative",
                                  (long long)i, (long long)g);
            }
            total += gs[i];
            if (total > m) {
                free(buf);
                return em_op_fail(c, EM_ERR_INVALID_ARG,
                                  "group sizes sum to more than the %lld rows of lhs (reached %lld "
                                  "at group %lld)",
                                  (long long)m, (long long)total, (long long)i);
            }
        }
        if (gs_out)
            *gs_out = buf;
        else
            free(buf);
        return EM_OK;
    }
    int64_t lo = wrap ? -size : 0, bad = -1, v = 0;
    for (int64_t i = 0; i < idx->numel; i++) {
        v = idx->dtype == EM_I64 ? ((const int64_t *)buf)[i] : ((const int32_t *)buf)[i];
        if (v < lo || v >= size) {
            bad = i;
            break;
        }
    }
    free(buf);
    if (bad < 0) return EM_OK;
    int64_t coord[EM_MAX_DIMS], pos = bad;
    for (int d = idx->ndim - 1; d >= 0; d--) {
        coord[d] = idx->shape[d] ? pos % idx->shape[d] : 0;
        pos = idx->shape[d] ? pos / idx->shape[d] : 0;
    }
    char where[160];
    em_shape_str(coord, idx->ndim, where, sizeof where);
    if (id == EM_OP_ONE_HOT)
        return em_op_fail(c, EM_ERR_INDEX,
                          "class %lld at position %s is out of range for num_classes %lld",
                          (long long)v, where, (long long)size);
    if (id == EM_OP_EMBEDDING)
        return em_op_fail(c, EM_ERR_INDEX, "id %lld at position %s is out of range for %lld embeddings",
                          (long long)v, where, (long long)size);
    return em_op_fail(c, EM_ERR_INDEX,
                      "index %lld at position %s of the index is out of range for dim %d of size "
                      "%lld%s",
                      (long long)v, where, dim, (long long)size,
                      wrap ? " (negative values count from the end)" : "");
}

static em_status kernel_run(const em_kernel_args *a, em_device *d, pj_plugin *pl,
                            em_tensor *const *extra_t, int n_extra, const pj_ragged_plan *plan);

static em_status kernel(const em_kernel_args *a) {
    em_ctx *c = a->ctx;
    em_device *d = (em_device *)c->cur.dev;
    pj_dev *pd = d->impl;
    pj_plugin *pl = pd->pl;
    const em_op_def *op = a->op;
    int32_t *gs = NULL;
    bool plan_wanted = op->id == EM_OP_RAGGED_DOT && pj_ragged_wants_plan(pl);
    /* index values are data: a compile-only device has none to check (XLA's semantics apply,
     * as in a compiled program); a plan made from group sizes cannot be made there */
    if (pl->aot && plan_wanted)
        return pj_aot_refuse(c, d, "ragged_dot's grouped lowering (a plan from the group sizes; "
                                   "EMBER_PJRT_RAGGED=native, gather or dense compile without it)",
                             true);
    if (!pl->aot && check_indices(c, a, plan_wanted ? &gs : NULL)) return c->err.status;
    pj_ragged_plan plan = {0, 0, NULL, NULL};
    em_tensor *extra_t[2] = {NULL, NULL};
    int n_extra = 0;
    if (plan_wanted && gs) {
        em_status ps = pj_ragged_plan_make(c, gs, a->in[2]->numel, a->in[0]->shape[0], &plan);
        free(gs);
        if (ps) return ps;
        em_call_info saved = c->cur;
        extra_t[0] = em_tensor_new(c, d, EM_I32, 1, &plan.hb);
        int64_t nr = plan.hb * plan.cb;
        extra_t[1] = em_tensor_new(c, d, EM_I32, 1, &nr);
        if (extra_t[0] && extra_t[1] && !d->be->upload(c, extra_t[0], plan.experts) &&
            !d->be->upload(c, extra_t[1], plan.rows))
            n_extra = 2;
        c->cur = saved;
        free(plan.experts);
        free(plan.rows);
        if (n_extra != 2) {
            em_tensor_release(extra_t[0]);
            em_tensor_release(extra_t[1]);
            return c->err.status ? c->err.status : EM_ERR_OOM;
        }
    } else {
        free(gs);
    }
    em_status ks = kernel_run(a, d, pl, extra_t, n_extra, &plan);
    em_tensor_release(extra_t[0]);
    em_tensor_release(extra_t[1]);
    return ks;
}

static em_status kernel_run(const em_kernel_args *a, em_device *d, pj_plugin *pl,
                            em_tensor *const *extra_t, int n_extra, const pj_ragged_plan *plan) {
    em_ctx *c = a->ctx;
    const em_op_def *op = a->op;
    bool assign = op->id == EM_OP_ASSIGN, index_copy = op->id == EM_OP_INDEX_COPY;
    bool inplace = assign || index_copy; /* result: the destination's new storage buffer */
    pj_key k;
    pj_key_init(&k);
    pj_key_i64(&k, op->id);
    key_attrs(&k, op, a->attrs);
    PJRT_Buffer *args[EM_MAX_INPUTS + 4];
    int n_args = 0;
    for (int i = 0; i < a->n_in; i++) {
        em_tensor *t = a->in[i];
        pj_key_i64(&k, t ? 1 : 0);
        if (!t) continue;
        if (ensure_buffer(c, t)) {
            pj_key_free(&k);
            return c->err.status;
        }
        pj_key_tensor(&k, t);
        args[n_args++] = ((pj_buf *)t->storage->data)->buf;
    }
    for (int o = 0; o < a->n_out; o++) {
        const em_tensor *t = a->out[o];
        int32_t hdr[2] = {(int32_t)t->dtype, t->ndim};
        pj_key_add(&k, hdr, sizeof hdr);
        pj_key_add(&k, t->shape, (size_t)t->ndim * sizeof *t->shape);
    }
    pj_key_i64(&k, n_extra);
    if (n_extra) {
        pj_key_i64(&k, plan->hb);
        pj_key_i64(&k, plan->cb);
    }
    for (int i = 0; i < n_extra; i++) args[n_args++] = ((pj_buf *)extra_t[i]->storage->data)->buf;
    if (k.oom) {
        pj_key_free(&k);
        return em_op_fail(c, EM_ERR_OOM, "out of memory");
    }
    uint64_t h = pj_hash(k.p, k.len);
    pj_exec *x = pj_cache_find(pl, &k, h);
    if (!x) {
        pj_emit_fn fn = pj_emitter(op->id);
        if (!fn && !inplace) {
            pj_key_free(&k);
            return em_op_fail(c, EM_ERR_UNSUPPORTED, "no StableHLO lowering for this op");
        }
        sh_b b;
        sh_init(&b);
        pj_emit e;
        memset(&e, 0, sizeof e);
        e.b = &b;
        e.op = op;
        e.n_in = a->n_in;
        e.attrs = a->attrs;
        e.n_out = a->n_out;
        e.tin = a->in;
        e.pl = pl;
        sh_val params[EM_MAX_INPUTS];
        for (int i = 0, p = 0; i < a->n_in; i++) {
            em_tensor *t = a->in[i];
            if (!t) continue;
            const pj_buf *pb = t->storage->data;
            params[i] = sh_param(&b, sh_ty(sh_elem_of(pb->dtype), pb->ndim, pb->dims));
            e.present[i] = true;
            e.in_dt[i] = t->dtype;
            p++;
        }
        for (int i = 0; i < n_extra; i++)
            e.extra[i] = sh_param(&b, sh_ty(SH_I32, 1, extra_t[i]->shape));
        e.n_extra = n_extra;
        if (n_extra) {
            e.variant[0] = plan->hb;
            e.variant[1] = plan->cb;
        }
        for (int i = 0; i < a->n_in; i++)
            if (a->in[i] && !(inplace && i == 0)) e.in[i] = pj_view_value(&b, params[i], a->in[i]);
        for (int o = 0; o < a->n_out; o++) {
            const em_tensor *t = a->out[o];
            e.out_meta[o].dtype = t->dtype;
            e.out_meta[o].ndim = t->ndim;
            memcpy(e.out_meta[o].shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
        }
        em_status s = assign       ? emit_assign(&e, params[0], a->in[0], a->in[1]->dtype)
                      : index_copy ? emit_index_copy(&e, params[0], a->in[0])
                                   : fn(&e);
        char *text = NULL;
        int n_res = inplace ? 1 : a->n_out;
        if (s == EM_OK && sh_ok(&b)) {
            for (int o = 0; o < a->n_out; o++) {
                /* the result must be exactly the output's type */
                sh_type want = pj_meta_type(&e.out_meta[o]);
                sh_val v = e.out[o];
                if (v.id >= 0 && v.t.e != want.e) v = sh_convert(&b, v, want.e);
                if (v.id >= 0 && !sh_same_shape(&v.t, &want)) v = sh_reshape(&b, v, want.nd, want.d);
                e.out[o] = v;
            }
            text = sh_finish(&b, e.out, n_res);
        }
        if (!text) {
            if (!c->err.status)
                em_op_fail(c, s ? s : EM_ERR_INTERNAL, "StableHLO emitter: %s",
                           b.err[0] ? b.err : "failed");
            sh_free(&b);
            pj_key_free(&k);
            return c->err.status;
        }
        sh_free(&b);
        char what[512];
        describe(what, sizeof what, a);
        x = pj_compile(c, pl, &k, h, text, what, true);
        free(text);
        if (!x) {
            pj_key_free(&k);
            return c->err.status;
        }
    }
    pj_key_free(&k);
    PJRT_Buffer *outs[EM_MAX_OUTPUTS] = {NULL};
    int n_res = inplace ? 1 : a->n_out;
    if (x->n_out >= 0 && x->n_out != n_res)
        return em_op_fail(c, EM_ERR_INTERNAL, "executable has %d outputs, expected %d", x->n_out,
                          n_res);
    if (pj_execute(c, d, x, args, n_args, outs, true)) return c->err.status;
    if (inplace) {
        em_tensor *dst = a->in[0];
        pj_buf *pb = dst->storage->data;
        pj_storage_set(dst->storage, outs[0], pb->dtype, pb->ndim, pb->dims);
        atomic_fetch_add(&dst->storage->version, 1);
        return EM_OK;
    }
    for (int o = 0; o < a->n_out; o++) {
        em_tensor *t = a->out[o];
        pj_storage_set(t->storage, outs[o], t->dtype, t->ndim, t->shape);
    }
    return EM_OK;
}

/* ---- assign ---- */

/* The storage buffer `base` with the view dst (a tensor of that storage) replaced by `src`, a
 * value of dst's logical shape and dtype. */
static sh_val write_view(sh_b *b, sh_val base, const em_tensor *dst, sh_val src) {
    const pj_buf *pb = dst->storage->data;
    int64_t bn = sh_numel(&base.t);
    if (em_is_contiguous(dst) && dst->offset == 0 && dst->numel == bn) /* the whole buffer */
        return sh_reshape(b, src, base.t.nd, base.t.d);
    /* a box of the buffer (a slice with unit steps): dynamic_update_slice */
    int64_t cs[EM_MAX_DIMS], s = 1;
    for (int i = pb->ndim - 1; i >= 0; i--) {
        cs[i] = s;
        s *= pb->dims[i];
    }
    bool box = dst->ndim == pb->ndim;
    int64_t start[EM_MAX_DIMS], off = dst->offset;
    for (int i = 0; box && i < pb->ndim; i++) {
        box = dst->strides[i] == cs[i] || dst->shape[i] == 1;
        start[i] = off / cs[i];
        off %= cs[i];
        box = box && start[i] + dst->shape[i] <= pb->dims[i];
    }
    box = box && off == 0;
    if (box && dst->numel > 0) {
        sh_val idx[EM_MAX_DIMS];
        for (int i = 0; i < pb->ndim; i++) idx[i] = sh_const_i(b, sh_scalar_ty(SH_I64), start[i]);
        return sh_dynamic_update_slice(b, base, src, idx);
    }
    /* any view: scatter each element at offset + sum(i_d * stride_d) of the flat buffer */
    sh_val flat = sh_reshape(b, base, 1, &bn);
    if (dst->numel == 0) return base;
    sh_type it = sh_ty(SH_I64, dst->ndim, dst->shape);
    sh_val idx = sh_const_i(b, it, dst->offset);
    for (int d = 0; d < dst->ndim; d++) {
        if (dst->shape[d] == 1 || dst->strides[d] == 0) continue;
        sh_val io = sh_iota(b, it, d);
        idx = sh_bin(b, "add", idx, sh_bin(b, "multiply", io, sh_const_i(b, it, dst->strides[d])));
    }
    int64_t n = dst->numel;
    int64_t n1[2] = {n, 1};
    idx = sh_reshape(b, idx, 2, n1);
    src = sh_reshape(b, src, 1, &n);
    sh_scatter_dims sd;
    memset(&sd, 0, sizeof sd);
    sd.inserted_window[0] = 0;
    sd.n_inserted_window = 1;
    sd.to_operand[0] = 0;
    sd.n_to_operand = 1;
    sd.index_vector_dim = 1;
    sh_val r = sh_scatter(b, flat, idx, src, &sd, NULL);
    return sh_reshape(b, r, base.t.nd, base.t.d);
}

static em_status emit_assign(pj_emit *e, sh_val base, const em_tensor *dst, em_dtype src_dt) {
    sh_b *b = e->b;
    sh_val src = pj_cast(b, e->in[1], src_dt, dst->dtype);
    src = sh_bcast_to(b, src, dst->ndim, dst->shape);
    e->out[0] = write_view(b, base, dst, src);
    return EM_OK;
}

/* ---- index_copy ---- */

sh_val pj_emit_index_copy(sh_b *b, sh_val dst, sh_val index, sh_val src, int dim) {
    int nd = dst.t.nd;
    int64_t n = sh_numel(&index.t);
    bool ok = src.t.e == dst.t.e && src.t.nd == nd && index.t.nd <= 1 && (nd || n == 1) &&
              (nd == 0 || (dim >= 0 && dim < nd));
    for (int d = 0; ok && d < nd; d++) ok = src.t.d[d] == (d == dim ? n : dst.t.d[d]);
    if (!ok) {
        if (sh_ok(b))
            sh_fail(b, "index_copy: src %s[%d dims] does not fit the destination %s[%d dims] "
                    "at dim %d with %lld indices", sh_elem_name(src.t.e), src.t.nd,
                    sh_elem_name(dst.t.e), nd, dim, (long long)n);
        sh_val bad = dst;
        bad.id = -1;
        return bad;
    }
    if (n == 0) return dst;
    sh_val idx = sh_convert(b, index, SH_I64);
    if (nd == 0) { /* one value; its index must be 0, any other is dropped */
        sh_val i0 = sh_reshape(b, idx, 0, NULL);
        sh_val at0 = sh_cmp(b, "EQ", i0, sh_const_i(b, i0.t, 0));
        return sh_select(b, at0, sh_reshape(b, src, 0, NULL), dst);
    }
    int64_t n1[2] = {n, 1};
    idx = sh_reshape(b, idx, 2, n1);
    sh_scatter_dims s;
    memset(&s, 0, sizeof s);
    s.inserted_window[0] = dim;
    s.n_inserted_window = 1;
    s.to_operand[0] = dim;
    s.n_to_operand = 1;
    s.index_vector_dim = 1;
    /* updates: the index dim first, then the window dims in order (as index_add) */
    int perm[EM_MAX_DIMS], k = 0;
    perm[k++] = dim;
    for (int d = 0; d < nd; d++)
        if (d != dim) perm[k++] = d;
    sh_val upd = dim == 0 ? src : sh_transpose(b, src, perm);
    for (int d = 1; d < nd; d++) s.update_window[s.n_update_window++] = d;
    return sh_scatter(b, dst, idx, upd, &s, NULL);
}

/* The destination dst may be any (non-expanded) view of its storage: its current value is read
 * out of the buffer, updated, and written back (a reshape when dst is the whole buffer, a
 * dynamic_update_slice when it is a box of it, an element scatter otherwise). */
static em_status emit_index_copy(pj_emit *e, sh_val base, const em_tensor *dst) {
    sh_b *b = e->b;
    int64_t d = e->attrs[0].i;
    int nd = dst->ndim, dim = (int)(d < 0 ? d + (nd ? nd : 1) : d);
    sh_val cur = pj_view_value(b, base, dst);
    sh_val upd = pj_emit_index_copy(b, cur, e->in[1], e->in[2], nd ? dim : 0);
    e->out[0] = write_view(b, base, dst, upd);
    return EM_OK;
}

em_tensor *pj_make_contiguous(em_ctx *c, em_tensor *t);
em_tensor *pj_make_contiguous(em_ctx *c, em_tensor *t) {
    em_tensor *out = NULL;
    em_call_info saved = c->cur;
    int n = em_op_exec(c, __FILE__, __LINE__, EM_OP_CONTIGUOUS, &t, 1, NULL, &out, 1);
    c->cur = saved;
    return n == 1 ? out : NULL;
}

void pj_backend_query(em_backend *be);

void pj_backend_init(pj_plugin *pl) {
    em_backend *be = &pl->be;
    memset(be, 0, sizeof *be);
    be->struct_size = sizeof *be;
    be->platform = pl->platform;
    be->host_accessible = false;
    pj_backend_memory(be);
    pj_backend_query(be);
    be->eval_lazy = pj_eval_lazy;
    for (int i = 0; i < EM_OP_COUNT; i++) {
        const em_op_def *op = em_op_get((em_op_id)i);
        if (op->kind == EM_OPK_VIEW) continue;
        if (pj_emitter((em_op_id)i) || i == EM_OP_ASSIGN || i == EM_OP_INDEX_COPY)
            be->kernels[i] = kernel;
    }
}

/* ---- for whole-graph lowerings (graph_lower.c) ---- */

sh_val pj_assign_value(sh_b *b, sh_val base, const em_tensor *dst, sh_val src, em_dtype src_dt) {
    pj_emit e;
    memset(&e, 0, sizeof e);
    e.b = b;
    e.in[1] = src;
    e.out[0] = base;
    e.out[0].id = -1;
    emit_assign(&e, base, dst, src_dt);
    return e.out[0];
}

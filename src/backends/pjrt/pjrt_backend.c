/*
 * The PJRT backend table and its one kernel: every op of the op table runs as
 *   key (op, attributes, input geometry, dtypes) -> cached executable, or
 *   emit StableHLO (stablehlo_*.c) -> compile -> cache,
 * then executes on the inputs' device buffers; the outputs are new device buffers owned by the
 * output tensors. Views (strided inputs) are materialised inside the op's own program, so a
 * transposed or sliced input costs no extra execution.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"

static pj_op ops[EM_OP_COUNT];
static const pj_op no_op;
static pthread_once_t ops_once = PTHREAD_ONCE_INIT;

static void ops_init(void) {
    pj_register_ew(ops);
    pj_register_create(ops);
    pj_register_layout(ops);
    pj_register_reduce(ops);
    pj_register_linalg(ops);
    pj_register_nn(ops);
    pj_register_index(ops);
    pj_register_conv(ops);
    pj_register_moe(ops);
    pj_register_collective(ops);
    pj_register_paged(ops);
}

const pj_op *pj_op_get(em_op_id op) {
    pthread_once(&ops_once, ops_init);
    return (unsigned)op < EM_OP_COUNT ? &ops[op] : &no_op;
}

pj_emit_fn pj_emitter(em_op_id op) { return pj_op_get(op)->emit; }

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
    return sh_take_along(b, flat, idx, 0);
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

/* ---- host work before a program runs: index checks, extra inputs ---- */

/* Index values are data: the CPU checks them and reports the first bad one at the op. The same
 * check here needs the indices on the host (a small read that waits for them); indices with
 * more than EMBER_PJRT_INDEX_CHECK elements (default 2^20; 0 disables) are not checked, and a
 * bad one then reads a clamped position (gathers) or is dropped (scatters), as XLA defines. */
static int64_t index_check_limit = (int64_t)1 << 20;
static pthread_once_t index_check_once = PTHREAD_ONCE_INIT;

/* Read once for the process (contexts on several threads share it); a value that is not a
 * whole non-negative number keeps the default. */
static void index_check_read(void) {
    const char *e = getenv("EMBER_PJRT_INDEX_CHECK");
    if (!e || !*e) return;
    char *end;
    errno = 0;
    long long v = strtoll(e, &end, 10);
    if (!errno && !*end && v >= 0) index_check_limit = v;
}

em_status pj_read_indices(em_ctx *c, em_tensor *idx, bool need, void **out) {
    *out = NULL;
    pthread_once(&index_check_once, index_check_read);
    int64_t limit = index_check_limit;
    if (idx->numel == 0 || (idx->numel > limit && !need) || (limit == 0 && !need)) return EM_OK;
    size_t nb = em_tensor_nbytes(idx);
    void *buf = malloc(nb);
    if (!buf) return em_op_fail(c, EM_ERR_OOM, "cannot stage %zu bytes of indices", nb);
    em_call_info saved = c->cur;
    em_status s = em_to_host(c, idx, buf, nb);
    c->cur = saved;
    if (s) free(buf);
    else *out = buf;
    return s;
}

bool pj_index_rule_set(pj_index_rule *r, int input, int64_t lo, int64_t size, const char *noun,
                       const char *of, const char *fmt, ...) {
    r->input = input;
    r->lo = lo;
    r->size = size;
    r->noun = noun;
    r->of = of;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->range, sizeof r->range, fmt, ap);
    va_end(ap);
    return true;
}

static em_status check_indices(em_ctx *c, const pj_index_rule *r, em_tensor *idx) {
    void *buf;
    em_status s = pj_read_indices(c, idx, false, &buf);
    if (s || !buf) return s;
    int64_t bad = -1, v = 0;
    for (int64_t i = 0; i < idx->numel; i++) {
        v = idx->dtype == EM_I64 ? ((const int64_t *)buf)[i] : ((const int32_t *)buf)[i];
        if (v < r->lo || v >= r->size) {
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
    return em_op_fail(c, EM_ERR_INDEX, "%s %lld at position %s%s is out of range for %s", r->noun,
                      (long long)v, where, r->of, r->range);
}

em_status pj_extra_add(em_ctx *c, em_device *d, pj_extra *x, const int32_t *v, int64_t n) {
    if (x->n == (int)(sizeof x->t / sizeof *x->t))
        return em_op_fail(c, EM_ERR_INTERNAL, "too many extra inputs");
    em_call_info saved = c->cur;
    em_tensor *t = em_tensor_new(c, d, EM_I32, 1, &n);
    em_status s = t ? d->be->upload(c, t, v) : EM_ERR_OOM;
    c->cur = saved;
    if (s) {
        em_tensor_release(t);
        return c->err.status ? c->err.status : s;
    }
    x->t[x->n++] = t;
    return EM_OK;
}

void pj_extra_free(pj_extra *x) {
    for (int i = 0; i < x->n; i++) em_tensor_release(x->t[i]);
    x->n = 0;
}

static em_status kernel_run(const em_kernel_args *a, em_device *d, pj_plugin *pl,
                            const pj_op *po, const pj_extra *x, pj_alt *alt);

em_status pj_kernel_alt(const em_kernel_args *a, pj_alt *alt) {
    em_ctx *c = a->ctx;
    em_device *d = (em_device *)c->cur.dev;
    pj_dev *pd = d->impl;
    const pj_op *po = pj_op_get(a->op->id);
    pj_index_rule r;
    /* index values are data: a compile-only device has none to check (XLA's semantics apply,
     * as in a compiled program) */
    if (!pd->pl->aot && po->indices && po->indices(a, &r) && check_indices(c, &r, a->in[r.input]))
        return c->err.status;
    pj_extra x;
    memset(&x, 0, sizeof x);
    x.checks_only = alt != NULL;
    em_status s = po->prepare ? po->prepare(c, a, d, &x) : EM_OK;
    if (!s) s = kernel_run(a, d, pd->pl, po, &x, alt);
    pj_extra_free(&x);
    return s;
}

static em_status kernel(const em_kernel_args *a) { return pj_kernel_alt(a, NULL); }

static em_status kernel_run(const em_kernel_args *a, em_device *d, pj_plugin *pl,
                            const pj_op *po, const pj_extra *x, pj_alt *alt) {
    em_ctx *c = a->ctx;
    const em_op_def *op = a->op;
    /* result: the destination's new storage buffer (snippets never take in-place ops) */
    bool inplace = po->update != NULL && !alt;
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
    if (alt) pj_key_add(&k, alt->key, strlen(alt->key) + 1);
    pj_key_i64(&k, x->n);
    if (x->n) {
        pj_key_i64(&k, x->variant[0]);
        pj_key_i64(&k, x->variant[1]);
    }
    for (int i = 0; i < x->n; i++) args[n_args++] = ((pj_buf *)x->t[i]->storage->data)->buf;
    if (k.oom) {
        pj_key_free(&k);
        return em_op_fail(c, EM_ERR_OOM, "out of memory");
    }
    uint64_t h = pj_hash(k.p, k.len);
    pj_exec *ex = pj_cache_find(pl, &k, h);
    if (!ex) {
        pj_emit_fn fn = alt ? alt->emit : po->emit;
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
        e.user = alt ? alt->user : NULL;
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
        for (int i = 0; i < x->n; i++) e.extra[i] = sh_param(&b, sh_ty(SH_I32, 1, x->t[i]->shape));
        e.n_extra = x->n;
        e.variant[0] = x->variant[0];
        e.variant[1] = x->variant[1];
        for (int i = 0; i < a->n_in; i++)
            if (a->in[i] && !(inplace && i == 0)) e.in[i] = pj_view_value(&b, params[i], a->in[i]);
        for (int o = 0; o < a->n_out; o++) {
            const em_tensor *t = a->out[o];
            e.out_meta[o].dtype = t->dtype;
            e.out_meta[o].ndim = t->ndim;
            memcpy(e.out_meta[o].shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
        }
        em_status s = EM_OK;
        if (inplace) {
            sh_val cur = {.id = -1};
            if (po->update_reads_dst) cur = pj_view_value(&b, params[0], a->in[0]);
            e.out[0] = pj_write_view(&b, params[0], a->in[0], po->update(&e, cur));
        } else {
            s = fn(&e);
        }
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
            if (alt) alt->failed = true;
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
        ex = pj_compile(c, pl, &k, h, text, what, true);
        free(text);
        if (!ex && alt) alt->failed = true;
        if (!ex) {
            pj_key_free(&k);
            return c->err.status;
        }
    }
    pj_key_free(&k);
    PJRT_Buffer *outs[EM_MAX_OUTPUTS] = {NULL};
    int n_res = inplace ? 1 : a->n_out;
    if (ex->n_out >= 0 && ex->n_out != n_res)
        return em_op_fail(c, EM_ERR_INTERNAL, "executable has %d outputs, expected %d", ex->n_out,
                          n_res);
    if (pj_execute(c, d, ex, args, n_args, outs, true)) return c->err.status;
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

/* ---- writes into a storage (in-place ops) ---- */

sh_val pj_write_view(sh_b *b, sh_val base, const em_tensor *dst, sh_val src) {
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
    idx = sh_reshape(b, idx, 1, &n);
    src = sh_reshape(b, src, 1, &n);
    sh_val r = sh_scatter_along(b, flat, idx, src, 0, NULL);
    return sh_reshape(b, r, base.t.nd, base.t.d);
}

/* ---- the backend's own calls of its kernel ---- */

em_status pj_run(em_ctx *c, em_op_id id, em_tensor *const *in, int n_in, em_tensor **out,
                 int n_out) {
    if (c->err.status) return c->err.status;
    const em_op_def *op = em_op_get(id);
    em_device *d = in[0]->dev;
    em_call_info saved = c->cur;
    c->cur = (em_call_info){.op = op->name, .file = __FILE__, .line = __LINE__, .in = in,
                            .n_in = n_in, .dev = d};
    em_status s = EM_OK;
    for (int i = 0; i < n_in && !s; i++) s = em_tensor_materialize(c, in[i]);
    if (!s) {
        em_kernel_args a = {c, op, in, n_in, out, n_out, NULL};
        s = kernel(&a);
        if (s == EM_OK && c->mode == EM_EAGER_SYNC && d->be->sync) s = d->be->sync(c, d);
        if (s != EM_OK && !c->err.status) em_op_fail(c, s, "kernel failed");
    }
    c->cur = saved;
    return s;
}

em_tensor *pj_make_contiguous(em_ctx *c, em_tensor *t) {
    em_tensor *out = em_tensor_new(c, t->dev, t->dtype, t->ndim, t->shape);
    if (out && pj_run(c, EM_OP_CONTIGUOUS, &t, 1, &out, 1) != EM_OK) {
        em_tensor_release(out);
        out = NULL;
    }
    return out;
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
    pj_backend_programs(be);
    for (int i = 0; i < EM_OP_COUNT; i++) {
        const em_op_def *op = em_op_get((em_op_id)i);
        if (op->kind == EM_OPK_VIEW) continue;
        const pj_op *po = pj_op_get((em_op_id)i);
        if (po->emit || po->update) be->kernels[i] = kernel;
    }
    pj_backend_collectives(be);
}

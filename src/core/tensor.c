/* Tensor handles and storages: creation, views, reference counting, host copies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor_impl.h"

bool em_shape_numel(const int64_t *shape, int ndim, int64_t *out) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return false;
        if (shape[i] && n > INT64_MAX / shape[i]) return false;
        n *= shape[i];
    }
    *out = n;
    return true;
}

void em_tensor_set_contiguous_strides(em_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        t->strides[i] = s;
        s *= t->shape[i] ? t->shape[i] : 1;
    }
}

em_tensor *em_tensor_alloc_meta(em_dtype dtype, int ndim, const int64_t *shape) {
    em_tensor *t = malloc(sizeof *t);
    if (!t) return NULL;
    atomic_init(&t->refcount, 1);
    t->dtype = dtype;
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        t->numel *= shape[i];
    }
    em_tensor_set_contiguous_strides(t);
    t->offset = 0;
    t->dev = NULL;
    t->storage = NULL;
    t->lazy = NULL;
    t->sym = 0;
    t->requires_grad = false;
    t->grad = NULL;
    t->node = NULL;
    return t;
}

em_storage *em_storage_new(em_ctx *c, em_device *d, size_t nbytes) {
    em_storage *s = malloc(sizeof *s);
    if (!s) {
        EM_FAIL(c, EM_ERR_OOM, "alloc", "cannot allocate a storage record");
        return NULL;
    }
    atomic_init(&s->refcount, 1);
    atomic_init(&s->version, 0);
    s->dev = d;
    s->nbytes = nbytes;
    s->release = NULL;
    s->release_ud = NULL;
    s->alloc_nbytes = 0;
    if (nbytes <= EM_STORAGE_INLINE_BYTES && d->be->host_accessible) {
        s->data = s->inline_buf;
        return s;
    }
    size_t got = 0;
    s->data = em_allocator_alloc(d, nbytes ? nbytes : 1, &got);
    if (!s->data) {
        free(s);
        EM_FAIL(c, EM_ERR_OOM, "alloc", "cannot allocate %zu bytes on %s", nbytes, d->name);
        return NULL;
    }
    s->alloc_nbytes = got;
    return s;
}

void em_storage_retain(em_storage *s) { atomic_fetch_add_explicit(&s->refcount, 1, memory_order_relaxed); }

void em_storage_release(em_storage *s) {
    if (!s) return;
    if (atomic_fetch_sub_explicit(&s->refcount, 1, memory_order_acq_rel) != 1) return;
    if (s->release)
        s->release(s->release_ud);
    else if (s->alloc_nbytes)
        em_allocator_free(s->dev, s->data, s->alloc_nbytes);
    free(s);
}

/* A quantized tensor is whole blocks along its rows, in host memory (the kernels that read it
 * are the CPU's). */
static em_status check_quant(em_ctx *c, em_dtype dtype, int ndim, const int64_t *shape,
                             const em_device *d) {
    if (!em_is_quant(dtype)) return EM_OK;
    char b[160];
    int bs = em_dtype_table[dtype].block;
    if (ndim < 1 || shape[ndim - 1] % bs)
        return EM_FAIL(c, EM_ERR_SHAPE, "alloc",
                       "a %s tensor's rows are whole blocks of %d elements; shape %s is not",
                       em_dtype_name(dtype), bs, em_shape_str(shape, ndim, b, sizeof b));
    if (d && !d->be->host_accessible)
        return EM_FAIL(c, EM_ERR_UNSUPPORTED, "alloc",
                       "quantized %s tensors live on the CPU; %s gets them dequantized (em_cast "
                       "to f32 or bf16 first)",
                       em_dtype_name(dtype), d->name);
    return EM_OK;
}

em_status em_tensor_alloc_storage(em_ctx *c, em_tensor *t, em_device *d) {
    size_t es = em_esize(t->dtype);
    if (t->numel > (int64_t)(SIZE_MAX / 2 / es))
        return EM_FAIL(c, EM_ERR_OVERFLOW, "alloc", "%lld elements of %s overflow a size",
                       (long long)t->numel, em_dtype_name(t->dtype));
    em_status qs = check_quant(c, t->dtype, t->ndim, t->shape, d);
    if (qs) return qs;
    t->storage = em_storage_new(c, d, em_dtype_nbytes(t->dtype, t->numel));
    t->dev = d;
    return t->storage ? EM_OK : EM_ERR_OOM;
}

em_tensor *em_tensor_new(em_ctx *c, em_device *d, em_dtype dtype, int ndim, const int64_t *shape) {
    int64_t n;
    if (ndim < 0 || ndim > EM_MAX_DIMS) {
        EM_FAIL(c, EM_ERR_SHAPE, "alloc", "%d dimensions (at most %d)", ndim, EM_MAX_DIMS);
        return NULL;
    }
    if (!em_shape_numel(shape, ndim, &n)) {
        char b[160];
        EM_FAIL(c, EM_ERR_OVERFLOW, "alloc", "shape %s is negative or overflows",
                em_shape_str(shape, ndim, b, sizeof b));
        return NULL;
    }
    em_tensor *t = em_tensor_alloc_meta(dtype, ndim, shape);
    if (!t) {
        EM_FAIL(c, EM_ERR_OOM, "alloc", "cannot allocate a tensor record");
        return NULL;
    }
    if (em_tensor_alloc_storage(c, t, d) != EM_OK) {
        free(t);
        return NULL;
    }
    return t;
}

em_tensor *em_tensor_view_of(em_tensor *base, int ndim, const int64_t *shape,
                             const int64_t *strides, int64_t offset) {
    em_tensor *t = em_tensor_alloc_meta(base->dtype, ndim, shape);
    if (!t) return NULL;
    memcpy(t->strides, strides, (size_t)ndim * sizeof *strides);
    t->offset = offset;
    t->dev = base->dev;
    t->storage = base->storage;
    if (t->storage) em_storage_retain(t->storage); /* symbolic (traced) tensors have none */
    return t;
}

em_tensor *em_tensor_retain(em_tensor *t) {
    if (t) atomic_fetch_add_explicit(&t->refcount, 1, memory_order_relaxed);
    return t;
}

void em_tensor_release(em_tensor *t) {
    if (!t) return;
    if (atomic_fetch_sub_explicit(&t->refcount, 1, memory_order_acq_rel) != 1) return;
    if (t->lazy) {
        for (int i = 0; i < t->lazy->n_in; i++) em_tensor_release(t->lazy->in[i]);
        free(t->lazy);
    }
    em_tensor_release(t->grad);
    em_storage_release(t->storage);
    free(t);
}

bool em_is_contiguous(const em_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

em_status em_tensor_materialize(em_ctx *c, em_tensor *t) {
    if (!t->lazy) return EM_OK;
    const em_backend *be = t->dev->be;
    if (!t->storage && em_tensor_alloc_storage(c, t, t->dev) != EM_OK) return EM_ERR_OOM;
    em_status s = be->eval_lazy ? be->eval_lazy(c, t)
                                : EM_FAIL(c, EM_ERR_INTERNAL, "fused", "lazy tensor on %s",
                                          t->dev->name);
    if (s != EM_OK) return s;
    for (int i = 0; i < t->lazy->n_in; i++) em_tensor_release(t->lazy->in[i]);
    free(t->lazy);
    t->lazy = NULL;
    return EM_OK;
}

/* ---- queries ---- */
em_dtype em_tensor_dtype(const em_tensor *t) { return t ? t->dtype : EM_F32; }
int em_tensor_ndim(const em_tensor *t) { return t ? t->ndim : 0; }
const int64_t *em_tensor_shape(const em_tensor *t) { return t ? t->shape : NULL; }
const int64_t *em_tensor_strides(const em_tensor *t) { return t ? t->strides : NULL; }
int64_t em_tensor_numel(const em_tensor *t) { return t ? t->numel : 0; }
size_t em_tensor_nbytes(const em_tensor *t) {
    return t ? em_dtype_nbytes(t->dtype, t->numel) : 0;
}
em_device *em_tensor_device(const em_tensor *t) { return t ? t->dev : NULL; }
bool em_tensor_is_contiguous(const em_tensor *t) { return t && em_is_contiguous(t); }

int64_t em_tensor_dim(const em_tensor *t, int d) {
    if (!t) return 0;
    if (d < 0) d += t->ndim;
    return d >= 0 && d < t->ndim ? t->shape[d] : 0;
}

char *em_shape_str(const int64_t *shape, int ndim, char *buf, size_t n) {
    size_t u = 0;
    if (n == 0) return buf;
    buf[0] = 0;
    int k = snprintf(buf, n, "[");
    if (k > 0) u = (size_t)k;
    for (int i = 0; i < ndim && u < n; i++) {
        k = snprintf(buf + u, n - u, "%s%lld", i ? "," : "", (long long)shape[i]);
        if (k < 0) break;
        u += (size_t)k;
    }
    if (u < n) snprintf(buf + u, n - u, "]");
    return buf;
}

char *em_tensor_sig(const em_tensor *t, char *buf, size_t n) {
    if (!t) {
        snprintf(buf, n, "null");
        return buf;
    }
    char s[160];
    snprintf(buf, n, "%s%s", em_dtype_name(t->dtype), em_shape_str(t->shape, t->ndim, s, sizeof s));
    return buf;
}

/* ---- host memory ---- */

em_tensor *em_from_host_on_(em_ctx *c, const char *file, int line, em_device *dev, em_dtype dtype,
                            int ndim, const int64_t *shape, const void *data) {
    if (!c || c->err.status) return NULL;
    if (!dev) {
        em_fail_at(c, EM_ERR_INVALID_ARG, "from_host", file, line, "device is NULL");
        return NULL;
    }
    if ((unsigned)dtype >= EM_DTYPE_COUNT) {
        em_fail_at(c, EM_ERR_DTYPE, "from_host", file, line, "invalid dtype %d", (int)dtype);
        return NULL;
    }
    if (ndim < 0 || ndim > EM_MAX_DIMS || (ndim > 0 && !shape)) {
        em_fail_at(c, EM_ERR_SHAPE, "from_host", file, line, "%d dimensions (0 to %d allowed)",
                   ndim, EM_MAX_DIMS);
        return NULL;
    }
    int64_t n;
    if (!em_shape_numel(shape, ndim, &n)) {
        char b[160];
        em_fail_at(c, EM_ERR_OVERFLOW, "from_host", file, line,
                   "shape %s is negative or overflows", em_shape_str(shape, ndim, b, sizeof b));
        return NULL;
    }
    if (n > 0 && !data) {
        em_fail_at(c, EM_ERR_INVALID_ARG, "from_host", file, line, "data is NULL");
        return NULL;
    }
    em_tensor *t = em_tensor_new(c, dev, dtype, ndim, shape);
    if (!t) return NULL;
    em_status ws = EM_OK;
    if (dev->be->upload)
        ws = dev->be->upload(c, t, data);
    else if (n > 0)
        ws = dev->be->write(c, t->storage, 0, data, em_dtype_nbytes(dtype, n));
    if (ws != EM_OK) {
        em_tensor_release(t);
        return NULL;
    }
    return em_scope_add(c, t);
}

em_tensor *em_from_host_(em_ctx *c, const char *file, int line, em_dtype dtype, int ndim,
                         const int64_t *shape, const void *data) {
    return em_from_host_on_(c, file, line, c ? c->device : NULL, dtype, ndim, shape, data);
}

em_tensor *em_from_host_borrowed_(em_ctx *c, const char *file, int line, em_dtype dtype, int ndim,
                                  const int64_t *shape, void *data, size_t data_nbytes,
                                  void (*release)(void *), void *user_data) {
    if (!c || c->err.status) return NULL;
    int64_t n;
    if ((unsigned)dtype >= EM_DTYPE_COUNT || ndim < 0 || ndim > EM_MAX_DIMS ||
        (ndim > 0 && !shape) || !em_shape_numel(shape, ndim, &n)) {
        em_fail_at(c, EM_ERR_INVALID_ARG, "from_host_borrowed", file, line,
                   "invalid dtype or shape");
        return NULL;
    }
    if (check_quant(c, dtype, ndim, shape, NULL)) return NULL;
    /* quantized blocks are read bytewise: no alignment needed */
    size_t es = em_esize(dtype), align = em_is_quant(dtype) ? 1 : es;
    uint64_t need = em_dtype_nbytes(dtype, n);
    if (need > data_nbytes) {
        char b[160];
        em_fail_at(c, EM_ERR_SHAPE, "from_host_borrowed", file, line,
                   "shape %s of %s needs %llu bytes but only %zu are given",
                   em_shape_str(shape, ndim, b, sizeof b), em_dtype_name(dtype),
                   (unsigned long long)need, data_nbytes);
        return NULL;
    }
    if (n > 0 && (!data || ((uintptr_t)data % align) != 0)) {
        em_fail_at(c, EM_ERR_INVALID_ARG, "from_host_borrowed", file, line,
                   "data is NULL or not aligned to %zu bytes", align);
        return NULL;
    }
    em_tensor *t = em_tensor_alloc_meta(dtype, ndim, shape);
    em_storage *s = t ? malloc(sizeof *s) : NULL;
    if (!s) {
        free(t);
        em_fail_at(c, EM_ERR_OOM, "from_host_borrowed", file, line, "out of memory");
        return NULL;
    }
    atomic_init(&s->refcount, 1);
    atomic_init(&s->version, 0);
    s->dev = em_device_host();
    s->data = data;
    s->nbytes = data_nbytes;
    s->alloc_nbytes = 0;
    s->release = release;
    s->release_ud = user_data;
    t->storage = s;
    t->dev = s->dev;
    return em_scope_add(c, t);
}

/* Copies the elements of any strided CPU tensor into contiguous `dst` (same dtype). */
void em_gather_strided(const em_tensor *t, void *dst) {
    size_t es = em_esize(t->dtype);
    if (t->numel == 0) return;
    if (em_is_contiguous(t) || em_is_quant(t->dtype)) { /* quantized tensors have no views */
        memcpy(dst, em_tensor_ptr(t), em_dtype_nbytes(t->dtype, t->numel));
        return;
    }
    int64_t idx[EM_MAX_DIMS] = {0};
    const char *base = t->storage->data;
    char *out = dst;
    int nd = t->ndim;
    int64_t inner = nd ? t->shape[nd - 1] : 1, istride = nd ? t->strides[nd - 1] : 0;
    for (int64_t done = 0; done < t->numel; done += inner) {
        int64_t off = t->offset;
        for (int d = 0; d < nd - 1; d++) off += idx[d] * t->strides[d];
        for (int64_t i = 0; i < inner; i++) {
            memcpy(out, base + (size_t)(off + i * istride) * es, es);
            out += es;
        }
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
}

em_status em_sym_value_needed(em_ctx *c, const em_tensor *t, const char *what) {
    if (c->tracer) return c->tracer->value_needed(c, t, what);
    char sig[96];
    return em_fail_at(c, EM_ERR_INVALID_ARG, what, c->cur.file, c->cur.line,
                      "%s is a traced value of a compiled function, used outside it",
                      em_tensor_sig(t, sig, sizeof sig));
}

em_status em_to_host(em_ctx *c, em_tensor *t, void *dst, size_t dst_nbytes) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (c->err.status) return c->err.status;
    if (!t || (!dst && dst_nbytes))
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "to_host", "tensor or destination is NULL");
    if (t->sym) return em_sym_value_needed(c, t, "to_host");
    size_t need = em_tensor_nbytes(t);
    if (need != dst_nbytes) {
        char b[96];
        return EM_FAIL(c, EM_ERR_SHAPE, "to_host", "%s needs %zu bytes, destination holds %zu",
                       em_tensor_sig(t, b, sizeof b), need, dst_nbytes);
    }
    em_status s = em_tensor_materialize(c, t);
    if (s) return s;
    if (t->dev->be->sync && (s = t->dev->be->sync(c, t->dev))) return s;
    if (t->dev->be->host_accessible) {
        em_gather_strided(t, dst);
        return EM_OK;
    }
    if (t->dev->be->download) return t->dev->be->download(c, t, dst);
    if (!em_is_contiguous(t))
        return EM_FAIL(c, EM_ERR_UNSUPPORTED, "to_host",
                       "strided tensors on %s must be made contiguous first", t->dev->name);
    return t->dev->be->read(c, t->storage, em_dtype_nbytes(t->dtype, t->offset), dst, need);
}

em_status em_to_host_f32(em_ctx *c, em_tensor *t, float *dst, int64_t n) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (c->err.status) return c->err.status;
    if (!t || !dst) return EM_FAIL(c, EM_ERR_INVALID_ARG, "to_host_f32", "NULL argument");
    if (n != t->numel)
        return EM_FAIL(c, EM_ERR_SHAPE, "to_host_f32", "tensor has %lld elements, buffer %lld",
                       (long long)t->numel, (long long)n);
    if (t->dtype == EM_F32) return em_to_host(c, t, dst, (size_t)n * 4);
    size_t nb = em_tensor_nbytes(t);
    void *tmp = malloc(nb ? nb : 1);
    if (!tmp) return EM_FAIL(c, EM_ERR_OOM, "to_host_f32", "cannot allocate %zu bytes", nb);
    em_status s = em_to_host(c, t, tmp, nb);
    if (!s) em_convert(tmp, t->dtype, dst, EM_F32, n);
    free(tmp);
    return s;
}

em_status em_item(em_ctx *c, em_tensor *t, double *out) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (c->err.status) return c->err.status;
    if (!t || !out) return EM_FAIL(c, EM_ERR_INVALID_ARG, "item", "NULL argument");
    if (t->numel != 1) {
        char b[96];
        return EM_FAIL(c, EM_ERR_SHAPE, "item", "%s has %lld elements, not 1",
                       em_tensor_sig(t, b, sizeof b), (long long)t->numel);
    }
    unsigned char buf[8];
    em_status s = em_to_host(c, t, buf, em_esize(t->dtype));
    if (!s) *out = em_load_f64(buf, t->dtype, 0);
    return s;
}

void *em_tensor_data(em_ctx *c, em_tensor *t) {
    if (!c || c->err.status) return NULL;
    if (!t) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, "tensor_data", "tensor is NULL");
        return NULL;
    }
    if (t->sym) {
        em_sym_value_needed(c, t, "tensor_data");
        return NULL;
    }
    if (!t->dev->be->host_accessible) {
        EM_FAIL(c, EM_ERR_DEVICE, "tensor_data", "tensor lives on %s, not on the host",
                t->dev->name);
        return NULL;
    }
    if (em_tensor_materialize(c, t)) return NULL;
    if (t->dev->be->sync && t->dev->be->sync(c, t->dev)) return NULL;
    return em_tensor_ptr(t);
}

void em_print(em_ctx *c, em_tensor *t, int max_elems) {
    char sig[128];
    printf("tensor %s on %s", em_tensor_sig(t, sig, sizeof sig), t ? t->dev->name : "-");
    if (!t || t->numel == 0) {
        printf("\n");
        return;
    }
    int64_t n = t->numel < max_elems ? t->numel : max_elems;
    float *v = malloc((size_t)t->numel * sizeof *v);
    if (!v || em_to_host_f32(c, t, v, t->numel)) {
        printf(" (unreadable)\n");
        free(v);
        return;
    }
    printf(" = [");
    for (int64_t i = 0; i < n; i++) printf("%s%g", i ? ", " : "", (double)v[i]);
    printf("%s]\n", n < t->numel ? ", ..." : "");
    free(v);
}

em_tensor *em_scalar_(em_ctx *c, const char *file, int line, double value, em_dtype dtype) {
    if (!c || c->err.status) return NULL;
    if ((unsigned)dtype >= EM_DTYPE_COUNT) {
        em_fail_at(c, EM_ERR_DTYPE, "scalar", file, line, "invalid dtype %d", (int)dtype);
        return NULL;
    }
    unsigned char buf[8];
    em_store_f64(buf, dtype, 0, value);
    return em_from_host_(c, file, line, dtype, 0, NULL, buf);
}

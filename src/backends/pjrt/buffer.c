/*
 * Memory of PJRT devices: a storage's `data` is a pj_buf holding the PJRT buffer (or NULL until
 * something is written). Host -> device transfers are asynchronous (the plugin copies the data
 * before BufferFromHostBuffer returns with kImmutableOnlyDuringCall, then transfers on its own),
 * device -> host transfers await their event, and executions' completion events are kept per
 * device so that `sync` (and the sync eager mode) can wait for them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/pjrt/pjrt.h"

int pj_buffer_type(em_dtype t) {
    switch (t) {
    case EM_F32: return PJ_F32;
    case EM_BF16: return PJ_BF16;
    case EM_F16: return PJ_F16;
    case EM_F64: return PJ_F64;
    case EM_I64: return PJ_S64;
    case EM_I32: return PJ_S32;
    case EM_I16: return PJ_S16;
    case EM_I8: return PJ_S8;
    case EM_U8: return PJ_U8;
    case EM_BOOL: return PJ_PRED;
    default: return 0;
    }
}

void pj_event_free(const pj_plugin *pl, PJRT_Event *ev) {
    if (!ev) return;
    PJRT_Event_Args a;
    memset(&a, 0, sizeof a);
    a.struct_size = PJ_SIZE(PJRT_Event_Args, event);
    a.event = ev;
    pj_error_free(pl, pl->api->PJRT_Event_Destroy(&a));
}

em_status pj_event_await(em_ctx *c, const pj_plugin *pl, PJRT_Event *ev, bool in_op,
                         const char *what) {
    if (!ev) return EM_OK;
    PJRT_Event_Args a;
    memset(&a, 0, sizeof a);
    a.struct_size = PJ_SIZE(PJRT_Event_Args, event);
    a.event = ev;
    PJRT_Error *e = pl->api->PJRT_Event_Await(&a);
    pj_event_free(pl, ev);
    return pj_check(c, pl, e, in_op, what);
}

void pj_buffer_free(const pj_plugin *pl, PJRT_Buffer *b) {
    if (!b) return;
    PJRT_Buffer_Destroy_Args a;
    memset(&a, 0, sizeof a);
    a.struct_size = PJ_SIZE(PJRT_Buffer_Destroy_Args, buffer);
    a.buffer = b;
    pj_error_free(pl, pl->api->PJRT_Buffer_Destroy(&a));
}

void pj_storage_set(em_storage *s, PJRT_Buffer *b, em_dtype dt, int nd, const int64_t *dims) {
    pj_buf *pb = s->data;
    pj_dev *pd = s->dev->impl;
    const pj_plugin *pl = pd->pl;
    if (pl->aot) { /* no buffer: the storage takes the shape and counts its bytes */
        pb->shape_only = true;
        int64_t nb = (int64_t)s->nbytes;
        atomic_fetch_add(&pd->resident, nb - pb->counted);
        pb->counted = nb;
    }
    if (pb->buf) pj_buffer_free(pl, pb->buf);
    pb->buf = b;
    pb->dtype = dt;
    pb->ndim = nd;
    for (int i = 0; i < nd; i++) pb->dims[i] = dims[i];
}

em_status pj_dev_track(em_ctx *c, em_device *d, PJRT_Event *ev) {
    pj_dev *pd = d->impl;
    PJRT_Event *oldest = NULL;
    pthread_mutex_lock(&pd->lock);
    if (pd->n_pending == PJ_PENDING) {
        oldest = pd->pending[0];
        memmove(pd->pending, pd->pending + 1, (PJ_PENDING - 1) * sizeof *pd->pending);
        pd->n_pending--;
    }
    pd->pending[pd->n_pending++] = ev;
    pthread_mutex_unlock(&pd->lock);
    /* bounded queue: at most PJ_PENDING executions in flight per device */
    if (!oldest) return EM_OK;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    em_status s = pj_event_await(c, pd->pl, oldest, false, "pjrt_execute");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    pj_plugin *pl = pd->pl;
    pthread_mutex_lock(&pl->cache.lock);
    pl->cache.stats.wait_seconds += (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    pthread_mutex_unlock(&pl->cache.lock);
    return s;
}

/* ---- the backend's memory entries ---- */

static void *raw_alloc(em_device *d, size_t nbytes) {
    (void)d, (void)nbytes;
    return calloc(1, sizeof(pj_buf));
}

static void raw_free(em_device *d, void *p, size_t nbytes) {
    (void)nbytes;
    pj_buf *pb = p;
    if (pb && pb->counted) atomic_fetch_sub(&((pj_dev *)d->impl)->resident, pb->counted);
    if (pb && pb->buf) pj_buffer_free(((pj_dev *)d->impl)->pl, pb->buf);
    free(pb);
}

em_status pj_dev_drain(em_ctx *c, em_device *d) {
    pj_dev *pd = d->impl;
    PJRT_Event *evs[PJ_PENDING];
    pthread_mutex_lock(&pd->lock);
    int n = pd->n_pending;
    memcpy(evs, pd->pending, (size_t)n * sizeof *evs);
    pd->n_pending = 0;
    pthread_mutex_unlock(&pd->lock);
    em_status s = EM_OK;
    for (int i = 0; i < n; i++) {
        /* await all (and free all) even after a failure; report the first */
        em_ctx *cc = s ? NULL : c;
        if (cc) s = pj_event_await(cc, pd->pl, evs[i], false, "pjrt_execute");
        else pj_event_free(pd->pl, evs[i]);
    }
    return s;
}

/* Creates a device buffer from contiguous host data of the given shape. */
em_status pj_buffer_from_host(em_ctx *c, em_device *d, const void *src, em_dtype dt, int nd,
                              const int64_t *dims, PJRT_Buffer **out) {
    pj_dev *pd = d->impl;
    const pj_plugin *pl = pd->pl;
    static const unsigned char zero[16];
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= dims[i];
    PJRT_Client_BufferFromHostBuffer_Args a;
    memset(&a, 0, sizeof a);
    a.struct_size = PJ_SIZE(PJRT_Client_BufferFromHostBuffer_Args, buffer);
    a.client = pl->client;
    a.data = n ? src : zero;
    a.type = pj_buffer_type(dt);
    a.dims = dims;
    a.num_dims = (size_t)nd;
    a.host_buffer_semantics = PJ_HOST_IMMUTABLE_ONLY_DURING_CALL;
    a.device = pd->dev;
    if (pj_check(c, pl, pl->api->PJRT_Client_BufferFromHostBuffer(&a), false, "to_device"))
        return EM_ERR_BACKEND;
    /* the data was copied during the call; the event only says the host buffer is free */
    pj_event_free(pl, a.done_with_host_buffer);
    *out = a.buffer;
    return EM_OK;
}

static em_status upload(em_ctx *c, em_tensor *t, const void *src) {
    PJRT_Buffer *b = NULL;
    if (((pj_dev *)t->dev->impl)->pl->aot) { /* compile-only: the shape is all it keeps */
        pj_storage_set(t->storage, NULL, t->dtype, t->ndim, t->shape);
        return EM_OK;
    }
    if (pj_buffer_from_host(c, t->dev, src, t->dtype, t->ndim, t->shape, &b)) return EM_ERR_BACKEND;
    pj_storage_set(t->storage, b, t->dtype, t->ndim, t->shape);
    return EM_OK;
}

/* Byte-level write (the generic path; Ember uses `upload`): the storage becomes a u8 buffer. */
static em_status write_bytes(em_ctx *c, em_storage *s, size_t off, const void *src, size_t n) {
    if (off != 0 || n != s->nbytes)
        return EM_FAIL(c, EM_ERR_UNSUPPORTED, "to_device",
                       "partial writes into %s storages (use assign)", s->dev->name);
    int64_t dim = (int64_t)n;
    PJRT_Buffer *b = NULL;
    if (!((pj_dev *)s->dev->impl)->pl->aot &&
        pj_buffer_from_host(c, s->dev, src, EM_U8, 1, &dim, &b))
        return EM_ERR_BACKEND;
    pj_storage_set(s, b, EM_U8, 1, &dim);
    return EM_OK;
}

/* Copies a whole buffer to host memory dst (dst_n bytes). */
em_status pj_buffer_to_host(em_ctx *c, const pj_plugin *pl, PJRT_Buffer *b, void *dst,
                            size_t dst_n) {
    PJRT_Buffer_ToHostBuffer_Args a;
    memset(&a, 0, sizeof a);
    a.struct_size = PJ_SIZE(PJRT_Buffer_ToHostBuffer_Args, event);
    a.src = b;
    a.dst = dst;
    a.dst_size = dst_n;
    if (pj_check(c, pl, pl->api->PJRT_Buffer_ToHostBuffer(&a), false, "to_host"))
        return EM_ERR_BACKEND;
    return pj_event_await(c, pl, a.event, false, "to_host");
}

static em_status read_bytes(em_ctx *c, em_storage *s, size_t off, void *dst, size_t n) {
    pj_buf *pb = s->data;
    const pj_plugin *pl = ((pj_dev *)s->dev->impl)->pl;
    if (pl->aot) return pj_aot_refuse(c, s->dev, "to_host", false);
    if (!pb->buf) {
        memset(dst, 0, n);
        return EM_OK;
    }
    size_t total = s->nbytes;
    if (off == 0 && n == total) return pj_buffer_to_host(c, pl, pb->buf, dst, n);
    unsigned char *tmp = malloc(total ? total : 1);
    if (!tmp) return EM_FAIL(c, EM_ERR_OOM, "to_host", "cannot stage %zu bytes", total);
    em_status st = pj_buffer_to_host(c, pl, pb->buf, tmp, total);
    if (!st) memcpy(dst, tmp + off, n);
    free(tmp);
    return st;
}

/* Views are made contiguous on the device (pj_make_contiguous: slices, transposes, broadcasts
 * are materialised there), so only the tensor's own elements cross to the host. */
static bool plain(const em_tensor *t) {
    const pj_buf *pb = t->storage->data;
    if (!pb->buf || !em_is_contiguous(t) || t->offset != 0 || pb->dtype != t->dtype) return false;
    int64_t n = 1;
    for (int i = 0; i < pb->ndim; i++) n *= pb->dims[i];
    return n == t->numel;
}

static em_status download(em_ctx *c, em_tensor *t, void *dst) {
    size_t nb = em_tensor_nbytes(t);
    if (((pj_dev *)t->dev->impl)->pl->aot) return pj_aot_refuse(c, t->dev, "to_host", false);
    if (t->numel == 0) return EM_OK;
    const pj_plugin *pl = ((pj_dev *)t->dev->impl)->pl;
    if (plain(t)) return pj_buffer_to_host(c, pl, ((pj_buf *)t->storage->data)->buf, dst, nb);
    em_tensor *ct = pj_make_contiguous(c, t);
    if (!ct) return c->err.status ? c->err.status : EM_ERR_INTERNAL;
    em_status s = pj_buffer_to_host(c, pl, ((pj_buf *)ct->storage->data)->buf, dst, nb);
    em_tensor_release(ct);
    return s;
}

em_status pj_buffer_copy_to(em_ctx *c, const pj_plugin *pl, PJRT_Buffer *b, em_device *dst,
                            PJRT_Buffer **out) {
    if (!PJ_HAS(pl, PJRT_Buffer_CopyToDevice)) return EM_ERR_UNSUPPORTED;
    PJRT_Buffer_CopyToDevice_Args a;
    memset(&a, 0, sizeof a);
    a.struct_size = PJ_SIZE(PJRT_Buffer_CopyToDevice_Args, dst_buffer);
    a.buffer = b;
    a.dst_device = ((pj_dev *)dst->impl)->dev;
    em_status s = pj_check(c, pl, pl->api->PJRT_Buffer_CopyToDevice(&a), false, "to");
    if (!s) *out = a.dst_buffer;
    return s;
}

static em_status copy(em_ctx *c, em_tensor *x, em_tensor *dst) {
    const pj_plugin *pl = ((pj_dev *)x->dev->impl)->pl;
    if (pl->aot) { /* between devices of one slice: shapes move, there is nothing else */
        pj_storage_set(dst->storage, NULL, dst->dtype, dst->ndim, dst->shape);
        return EM_OK;
    }
    if (!PJ_HAS(pl, PJRT_Buffer_CopyToDevice)) return EM_ERR_UNSUPPORTED;
    em_tensor *src = x;
    if (!plain(x)) {
        src = pj_make_contiguous(c, x);
        if (!src) return c->err.status ? c->err.status : EM_ERR_INTERNAL;
    } else {
        em_tensor_retain(src);
    }
    PJRT_Buffer *b = NULL;
    em_status s = pj_buffer_copy_to(c, pl, ((pj_buf *)src->storage->data)->buf, dst->dev, &b);
    em_tensor_release(src);
    if (s) return s;
    pj_storage_set(dst->storage, b, dst->dtype, dst->ndim, dst->shape);
    return EM_OK;
}

void pj_backend_memory(em_backend *be) {
    be->raw_alloc = raw_alloc;
    be->raw_free = raw_free;
    be->write = write_bytes;
    be->read = read_bytes;
    be->sync = pj_dev_drain;
    be->upload = upload;
    be->download = download;
    be->copy = copy;
}

/*
 * SPMD programs (issue 18, lowering (b)): a compiled graph written at global shapes, its
 * captured storages annotated with shardings (graph_lower.c), compiled with num_partitions = N
 * and use_spmd_partitioning so XLA's partitioner inserts the collectives. This file keeps what
 * a run needs: each captured storage's tiles on the partitions' devices (made from the whole
 * buffer when its version changed, kept between runs and shared by every program that splits
 * the storage the same way, so a model's prefill and decode programs hold one set of weight
 * tiles and a cache written by one is read by the next without cutting it again), the
 * replicated inputs on every device, and after a run the written storages' new tiles, written
 * back whole into the storage so the eager side sees them, as a single-device program's writes
 * are.
 *
 * The tiles pass through host memory: a storage is read once, cut along its split dim and
 * uploaded tile by tile; a written one is gathered the same way. On XLA's CPU plugin device
 * memory is host memory; on an accelerator this costs a transfer of each written cache per
 * step (see docs/parallel.md, "not done").
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"

/* The tiles of one storage split one way, shared by the programs that use it (refs); the
 * programs retain the storage, so its address names it while any holds the set. */
typedef struct tile_set {
    struct tile_set *next;
    const em_storage *st;
    em_device *dev0;
    int parts, dim, refs;
    unsigned version; /* the storage version the tiles hold */
    PJRT_Buffer *tiles[PJ_SPMD_MAX]; /* NULL: not made */
} tile_set;

/* every live set (the lock guards the list and the reference counts; a set's tiles are used
 * by the thread running its programs, as a storage's buffer is) */
static pthread_mutex_t sets_lock = PTHREAD_MUTEX_INITIALIZER;
static tile_set *sets;

struct pj_spmd {
    int parts;
    em_device *devs[PJ_SPMD_MAX];
    int64_t ids[PJ_SPMD_MAX];
    int n_caps;
    int *dim;        /* per captured storage: split dim, -1 replicated */
    tile_set **set;  /* per captured storage, taken at its first run */
    pj_plugin *pl;
};

/* The set of (st, this program's devices, dim), made when none exists; NULL without memory. */
static tile_set *set_acquire(const pj_spmd *sp, const em_storage *st, int dim) {
    pthread_mutex_lock(&sets_lock);
    tile_set *t = sets;
    while (t && !(t->st == st && t->dev0 == sp->devs[0] && t->parts == sp->parts &&
                  t->dim == dim))
        t = t->next;
    if (!t && (t = calloc(1, sizeof *t))) {
        t->st = st;
        t->dev0 = sp->devs[0];
        t->parts = sp->parts;
        t->dim = dim;
        t->next = sets;
        sets = t;
    }
    if (t) t->refs++;
    pthread_mutex_unlock(&sets_lock);
    return t;
}

static void set_release(pj_plugin *pl, tile_set *t) {
    if (!t) return;
    pthread_mutex_lock(&sets_lock);
    bool last = --t->refs == 0;
    if (last)
        for (tile_set **p = &sets; *p; p = &(*p)->next)
            if (*p == t) {
                *p = t->next;
                break;
            }
    pthread_mutex_unlock(&sets_lock);
    if (!last) return;
    for (int d = 0; d < t->parts; d++)
        if (t->tiles[d]) pj_buffer_free(pl, t->tiles[d]);
    free(t);
}

static em_status spmd_fail(em_ctx *c, em_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static em_status spmd_fail(em_ctx *c, em_status s, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return EM_FAIL(c, s, "compile", "SPMD: %s", msg);
}

pj_spmd *pj_spmd_new(em_ctx *c, em_device *dev, int parts, int n_caps) {
    pj_dev *pd = dev->impl;
    pj_plugin *pl = pd->pl;
    if (parts > PJ_SPMD_MAX) {
        spmd_fail(c, EM_ERR_UNSUPPORTED, "%d partitions; at most %d", parts, PJ_SPMD_MAX);
        return NULL;
    }
    if (pd->local_index + parts > pl->n_devices) {
        spmd_fail(c, EM_ERR_DEVICE, "%d partitions from %s need devices %s:%d..%s:%d; the "
                  "plugin has %d devices%s", parts, dev->name, pl->name, pd->local_index,
                  pl->name, pd->local_index + parts - 1, pl->n_devices,
                  pj_xla_cpu(pl) ? " (XLA's CPU plugin: EMBER_PJRT_OPTIONS=cpu_device_count=N)"
                                 : "");
        return NULL;
    }
    pj_spmd *sp = calloc(1, sizeof *sp);
    if (!sp) goto oom;
    sp->parts = parts;
    sp->n_caps = n_caps;
    sp->pl = pl;
    sp->dim = calloc((size_t)n_caps + 1, sizeof *sp->dim);
    sp->set = calloc((size_t)n_caps + 1, sizeof *sp->set);
    if (!sp->dim || !sp->set) goto oom;
    for (int d = 0; d < parts; d++) {
        sp->devs[d] = pl->devices[pd->local_index + d];
        if (!pj_device_id(pl, sp->devs[d], &sp->ids[d])) {
            spmd_fail(c, EM_ERR_BACKEND, "the plugin gave no device id for %s",
                      sp->devs[d]->name);
            pj_spmd_free(sp);
            return NULL;
        }
    }
    return sp;
oom:
    pj_spmd_free(sp);
    EM_FAIL(c, EM_ERR_OOM, "compile", "out of memory");
    return NULL;
}

void pj_spmd_set_dim(pj_spmd *sp, int cap, int dim) { sp->dim[cap] = dim; }

int pj_spmd_parts(const pj_spmd *sp) { return sp->parts; }

const int64_t *pj_spmd_ids(const pj_spmd *sp) { return sp->ids; }

void pj_spmd_free(pj_spmd *sp) {
    if (!sp) return;
    if (sp->set)
        for (int k = 0; k < sp->n_caps; k++) set_release(sp->pl, sp->set[k]);
    free(sp->dim);
    free(sp->set);
    free(sp);
}

/* Box geometry of tile `d` of `parts` along `dim` of a dims[nd] buffer of esize-byte elements:
 * `outer` runs of `run` bytes, the tile's run starting at `first` within each `stride`. */
typedef struct tile_geom {
    int64_t outer, stride, run, first;
} tile_geom;

static tile_geom geom(int nd, const int64_t *dims, size_t esize, int dim, int parts, int d) {
    tile_geom t = {1, 0, 0, 0};
    int64_t inner = (int64_t)esize;
    for (int i = 0; i < dim; i++) t.outer *= dims[i];
    for (int i = dim + 1; i < nd; i++) inner *= dims[i];
    t.stride = dims[dim] * inner;
    t.run = dims[dim] / parts * inner;
    t.first = d * t.run;
    return t;
}

static int64_t nbytes_of(em_dtype dt, int nd, const int64_t *dims) {
    int64_t n = (int64_t)em_dtype_size(dt);
    for (int i = 0; i < nd; i++) n *= dims[i];
    return n;
}

/* Makes the tiles of set ts (storage of tensor t) from its whole buffer. */
static em_status make_tiles(em_ctx *c, pj_spmd *sp, tile_set *ts, const em_tensor *t) {
    const pj_buf *pb = t->storage->data;
    int dim = ts->dim;
    int64_t total = nbytes_of(pb->dtype, pb->ndim, pb->dims);
    size_t es = em_dtype_size(pb->dtype);
    unsigned char *whole = malloc((size_t)total + 1), *tile = malloc((size_t)total + 1);
    em_status s = EM_OK;
    if (!whole || !tile) {
        s = EM_FAIL(c, EM_ERR_OOM, "compiled_run", "out of memory");
        goto done;
    }
    if ((s = pj_buffer_to_host(c, sp->pl, pb->buf, whole, (size_t)total))) goto done;
    for (int d = 0; d < sp->parts; d++) {
        int64_t td[EM_MAX_DIMS];
        memcpy(td, pb->dims, sizeof td);
        const unsigned char *src = whole;
        if (dim >= 0) {
            tile_geom g = geom(pb->ndim, pb->dims, es, dim, sp->parts, d);
            for (int64_t o = 0; o < g.outer; o++)
                memcpy(tile + o * g.run, whole + o * g.stride + g.first, (size_t)g.run);
            td[dim] /= sp->parts;
            src = tile;
        }
        PJRT_Buffer **slot = &ts->tiles[d];
        PJRT_Buffer *b = NULL;
        if ((s = pj_buffer_from_host(c, sp->devs[d], src, pb->dtype, pb->ndim, td, &b)))
            goto done;
        if (*slot) pj_buffer_free(sp->pl, *slot);
        *slot = b;
    }
    ts->version = atomic_load(&t->storage->version);
done:
    free(whole);
    free(tile);
    return s;
}

em_status pj_spmd_cap_args(em_ctx *c, pj_spmd *sp, int cap, const em_tensor *t,
                           PJRT_Buffer **per_dev) {
    if (!sp->set[cap] && !(sp->set[cap] = set_acquire(sp, t->storage, sp->dim[cap])))
        return EM_FAIL(c, EM_ERR_OOM, "compiled_run", "out of memory");
    tile_set *ts = sp->set[cap];
    bool fresh = ts->version == atomic_load(&t->storage->version);
    for (int d = 0; d < sp->parts && fresh; d++) fresh = ts->tiles[d];
    if (!fresh) {
        em_status s = make_tiles(c, sp, ts, t);
        if (s) return s;
    }
    for (int d = 0; d < sp->parts; d++) per_dev[d] = ts->tiles[d];
    return EM_OK;
}

em_status pj_spmd_replicate(em_ctx *c, pj_spmd *sp, PJRT_Buffer *b0, em_dtype dt, int nd,
                            const int64_t *dims, PJRT_Buffer **per_dev) {
    per_dev[0] = b0;
    for (int d = 1; d < sp->parts; d++) per_dev[d] = NULL;
    if (sp->parts < 2) return EM_OK;
    /* device to device where the plugin can (the backend's own copy), else through the host */
    em_status s = EM_OK;
    for (int d = 1; d < sp->parts && !s; d++)
        s = pj_buffer_copy_to(c, sp->pl, b0, sp->devs[d], &per_dev[d]);
    if (s != EM_ERR_UNSUPPORTED) return s; /* (unsupported: known at the first, none made) */
    int64_t total = nbytes_of(dt, nd, dims);
    unsigned char *h = malloc((size_t)total + 1);
    if (!h) return EM_FAIL(c, EM_ERR_OOM, "compiled_run", "out of memory");
    s = pj_buffer_to_host(c, sp->pl, b0, h, (size_t)total);
    for (int d = 1; d < sp->parts && !s; d++)
        s = pj_buffer_from_host(c, sp->devs[d], h, dt, nd, dims, &per_dev[d]);
    free(h);
    return s;
}

em_status pj_spmd_take(em_ctx *c, pj_spmd *sp, int cap, em_tensor *t, PJRT_Buffer **per_dev) {
    pj_buf *pb = t->storage->data;
    em_dtype dt = pb->dtype;
    tile_set *ts = sp->set[cap]; /* taken by pj_spmd_cap_args before the run */
    int nd = pb->ndim, dim = ts->dim;
    int64_t dims[EM_MAX_DIMS];
    memcpy(dims, pb->dims, sizeof dims);
    /* the new tiles replace the old (which the program consumed when it donated them) */
    for (int d = 0; d < sp->parts; d++) {
        PJRT_Buffer **slot = &ts->tiles[d];
        if (*slot) pj_buffer_free(sp->pl, *slot);
        *slot = per_dev[d];
        per_dev[d] = NULL;
    }
    /* the storage gets the whole new value */
    int64_t total = nbytes_of(dt, nd, dims);
    size_t es = em_dtype_size(dt);
    unsigned char *whole = malloc((size_t)total + 1), *tile = malloc((size_t)total + 1);
    em_status s = EM_OK;
    if (!whole || !tile) {
        s = EM_FAIL(c, EM_ERR_OOM, "compiled_run", "out of memory");
        goto done;
    }
    for (int d = 0; d < (dim >= 0 ? sp->parts : 1) && !s; d++) {
        PJRT_Buffer *b = ts->tiles[d];
        if (dim < 0) {
            s = pj_buffer_to_host(c, sp->pl, b, whole, (size_t)total);
            break;
        }
        tile_geom g = geom(nd, dims, es, dim, sp->parts, d);
        if ((s = pj_buffer_to_host(c, sp->pl, b, tile, (size_t)(g.outer * g.run)))) break;
        for (int64_t o = 0; o < g.outer; o++)
            memcpy(whole + o * g.stride + g.first, tile + o * g.run, (size_t)g.run);
    }
    PJRT_Buffer *nb = NULL;
    if (!s) s = pj_buffer_from_host(c, sp->devs[0], whole, dt, nd, dims, &nb);
    if (!s) {
        pj_storage_set(t->storage, nb, dt, nd, dims);
        ts->version = atomic_fetch_add(&t->storage->version, 1) + 1;
    }
done:
    free(whole);
    free(tile);
    return s;
}

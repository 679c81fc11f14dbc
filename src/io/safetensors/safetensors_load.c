/* Tensors out of a checkpoint: zero-copy views of the mapping when the bytes are already an
 * Ember tensor on the CPU, converted copies otherwise, copies for other devices. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io/safetensors/safetensors_impl.h"

#define OP "safetensors_load"

static const em_st_entry *lookup(em_ctx *c, const em_safetensors *st, const char *name,
                                 const char *file, int line) {
    if (!st || !name) {
        em_fail_at(c, EM_ERR_INVALID_ARG, OP, file, line, "checkpoint or tensor name is NULL");
        return NULL;
    }
    const em_safetensors_info *ti = em_safetensors_find(st, name);
    if (!ti) {
        const char *near = em_st_nearest_name(st, name);
        em_fail_at(c, EM_ERR_NOT_FOUND, OP, file, line,
                   "no tensor \"%s\" in %s (%lld tensors)%s%s%s", name, st->path,
                   (long long)st->n_entries, near ? "; nearest name: \"" : "", near ? near : "",
                   near ? "\"" : "");
        return NULL;
    }
    return (const em_st_entry *)ti; /* info is the first member of the entry */
}

_Static_assert(offsetof(em_st_entry, info) == 0, "lookup casts info to its entry");

const void *em_safetensors_data(em_ctx *c, const em_safetensors *st, const char *name,
                                size_t *nbytes) {
    if (!c || c->err.status) return NULL;
    const em_st_entry *e = lookup(c, st, name, NULL, 0);
    if (!e) return NULL;
    if (nbytes) *nbytes = (size_t)e->info.nbytes;
    return st->files[e->file].image->base + e->info.file_offset;
}

em_tensor *em_safetensors_load_as_(em_ctx *c, const char *file, int line,
                                   const em_safetensors *st, const char *name, em_dtype dtype,
                                   em_device *dev) {
    if (!c || c->err.status) return NULL;
    const em_st_entry *e = lookup(c, st, name, file, line);
    if (!e) return NULL;
    const em_safetensors_info *ti = &e->info;
    const em_st_dtype_traits *tr = &em_st_dtype_table[ti->dtype];
    if ((unsigned)dtype >= EM_DTYPE_COUNT || em_is_quant(dtype)) {
        em_fail_at(c, EM_ERR_DTYPE, OP, file, line, "tensor \"%s\": invalid target dtype %d", name,
                   (int)dtype);
        return NULL;
    }
    if (!tr->loadable) {
        em_fail_at(c, EM_ERR_UNSUPPORTED, OP, file, line,
                   "tensor \"%s\" in %s: dtype %s has no Ember equivalent; read its bytes with "
                   "em_safetensors_data",
                   name, ti->file, tr->name);
        return NULL;
    }
    if (ti->ndim > EM_MAX_DIMS) {
        em_fail_at(c, EM_ERR_UNSUPPORTED, OP, file, line,
                   "tensor \"%s\" in %s has %d dimensions; Ember tensors have at most %d", name,
                   ti->file, ti->ndim, EM_MAX_DIMS);
        return NULL;
    }
    if (!dev) dev = c->device;
    em_st_image *im = st->files[e->file].image;
    uint8_t *src = im->base ? im->base + ti->file_offset : NULL;
    size_t es = em_esize(dtype);

    if (tr->has_native && tr->native == dtype) {
        if (dev == em_device_host() && ((uintptr_t)src % es) == 0) {
            em_st_image_retain(im);
            em_tensor *t = em_from_host_borrowed_(c, file, line, dtype, ti->ndim, ti->shape, src,
                                                  (size_t)ti->nbytes, em_st_image_release_cb, im);
            if (!t) em_st_image_release(im);
            return t;
        }
        /* unaligned bytes or another device: a copy straight from the mapping */
        return em_from_host_on_(c, file, line, dev, dtype, ti->ndim, ti->shape, src);
    }

    if ((uint64_t)ti->numel > SIZE_MAX / 2 / es) {
        em_fail_at(c, EM_ERR_OVERFLOW, OP, file, line, "tensor \"%s\": %lld elements of %s", name,
                   (long long)ti->numel, em_dtype_name(dtype));
        return NULL;
    }
    char what[320];
    snprintf(what, sizeof what, "tensor \"%s\" in %s", name, ti->file);
    if (dev->be->host_accessible) {
        em_tensor *t = em_tensor_new(c, dev, dtype, ti->ndim, ti->shape);
        if (!t) return NULL;
        if (ti->numel && em_st_convert(c, what, src, ti->dtype, em_tensor_ptr(t), dtype, ti->numel)) {
            em_tensor_release(t);
            return NULL;
        }
        return em_scope_add(c, t);
    }
    size_t nb = (size_t)ti->numel * es;
    void *tmp = malloc(nb ? nb : 1);
    if (!tmp) {
        em_fail_at(c, EM_ERR_OOM, OP, file, line, "%s: cannot stage %zu bytes on the host", what,
                   nb);
        return NULL;
    }
    em_tensor *t = NULL;
    if (!ti->numel || !em_st_convert(c, what, src, ti->dtype, tmp, dtype, ti->numel))
        t = em_from_host_on_(c, file, line, dev, dtype, ti->ndim, ti->shape, tmp);
    free(tmp);
    return t;
}

em_tensor *em_safetensors_load_(em_ctx *c, const char *file, int line, const em_safetensors *st,
                                const char *name, em_device *dev) {
    if (!c || c->err.status) return NULL;
    const em_st_entry *e = lookup(c, st, name, file, line);
    if (!e) return NULL;
    em_dtype dt;
    if (!em_st_dtype_natural(e->info.dtype, &dt)) {
        em_fail_at(c, EM_ERR_UNSUPPORTED, OP, file, line,
                   "tensor \"%s\" in %s: dtype %s has no Ember equivalent; read its bytes with "
                   "em_safetensors_data",
                   name, e->info.file, em_st_dtype_name(e->info.dtype));
        return NULL;
    }
    return em_safetensors_load_as_(c, file, line, st, name, dt, dev);
}

void em_st_drop_pages(const em_safetensors *st, const em_safetensors_info *ti) {
    if (!st || !ti) return;
    const em_st_entry *e = (const em_st_entry *)ti;
    em_st_image_drop_range(st->files[e->file].image, ti->file_offset, ti->nbytes);
}

void em_st_image_drop_range(const em_st_image *im, uint64_t off, uint64_t n) {
    if (!im || im->kind != EM_ST_IMAGE_MMAP || !im->base) return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t b = (uintptr_t)(im->base + off), end = b + (uintptr_t)n;
    b = (b + page - 1) & ~(page - 1); /* pages shared with a neighbour stay */
    end &= ~(page - 1);
    if (end > b) madvise((void *)b, end - b, MADV_DONTNEED);
}

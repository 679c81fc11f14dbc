/* Tensors out of a GGUF data section: zero-copy views of the mapping on the CPU when no
 * conversion is needed, converted or dequantized copies otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf/gguf_impl.h"

#define OP "gguf_load"

static const em_gguf_tensor_info *lookup(em_ctx *c, const em_gguf *g, const char *name,
                                         const char *file, int line) {
    if (!g || !name) {
        em_fail_at(c, EM_ERR_INVALID_ARG, OP, file, line, "file or tensor name is NULL");
        return NULL;
    }
    const em_gguf_tensor_info *ti = em_gguf_tensor_find(g, name);
    if (!ti) {
        const char *near = em_gguf_nearest_name(g, name);
        em_fail_at(c, EM_ERR_NOT_FOUND, OP, file, line,
                   "no tensor \"%s\" in %s (%lld tensors)%s%s%s", name, g->path,
                   (long long)g->n_tensors, near ? "; nearest name: \"" : "", near ? near : "",
                   near ? "\"" : "");
    }
    return ti;
}

const void *em_gguf_data(em_ctx *c, const em_gguf *g, const char *name, size_t *nbytes) {
    if (!c || c->err.status) return NULL;
    const em_gguf_tensor_info *ti = lookup(c, g, name, NULL, 0);
    if (!ti) return NULL;
    if (nbytes) *nbytes = (size_t)ti->nbytes;
    return g->image->base ? (const void *)(g->image->base + ti->file_offset) : (const void *)"";
}

static em_tensor *convert(em_ctx *c, const char *file, int line, const em_gguf_tensor_info *ti,
                          const uint8_t *src, em_dtype own, em_dtype dtype, em_device *dev);

em_tensor *em_gguf_load_as_(em_ctx *c, const char *file, int line, const em_gguf *g,
                            const char *name, em_dtype dtype, em_device *dev) {
    if (!c || c->err.status) return NULL;
    const em_gguf_tensor_info *ti = lookup(c, g, name, file, line);
    if (!ti) return NULL;
    const em_ggml_traits *tr = em_ggml_traits_of(ti->type);
    if (!tr->loadable) {
        em_fail_at(c, EM_ERR_UNSUPPORTED, OP, file, line,
                   "tensor \"%s\" in %s has type %s, which Ember does not load (it loads F32, "
                   "F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K)",
                   name, g->path, tr->name);
        return NULL;
    }
    em_dtype own = tr->dtype;
    if (!dev) dev = c->device;
    bool float_target = dtype == EM_F32 || dtype == EM_BF16 || dtype == EM_F16;
    if ((unsigned)dtype >= EM_DTYPE_COUNT || (dtype != own && !float_target)) {
        em_fail_at(c, EM_ERR_DTYPE, OP, file, line,
                   "tensor \"%s\" (%s) can be loaded as %s, f32, bf16 or f16, not as %s", name,
                   tr->name, em_dtype_name(own), em_dtype_name(dtype));
        return NULL;
    }
    uint8_t *src = g->image->base ? g->image->base + ti->file_offset : NULL;
    if (dtype == own) {
        if (dev == em_device_host() && ((uintptr_t)src % em_esize(own) == 0 || em_is_quant(own))) {
            em_st_image_retain(g->image);
            em_tensor *t = em_from_host_borrowed_(c, file, line, own, ti->ndim, ti->shape, src,
                                                  (size_t)ti->nbytes, em_st_image_release_cb,
                                                  g->image);
            if (!t) em_st_image_release(g->image);
            return t;
        }
        if (em_is_quant(own) && !dev->be->host_accessible) {
            em_fail_at(c, EM_ERR_UNSUPPORTED, OP, file, line,
                       "tensor \"%s\" is %s: quantized tensors live on the CPU; load it on %s "
                       "as f32 or bf16 (dequantized)", name, tr->name, dev->name);
            return NULL;
        }
        return em_from_host_on_(c, file, line, dev, own, ti->ndim, ti->shape, src);
    }
    void *aligned = NULL; /* a file with a small general.alignment may misalign f32/f16 data */
    if (!em_is_quant(own) && src && (uintptr_t)src % em_esize(own)) {
        aligned = malloc((size_t)ti->nbytes);
        if (!aligned) {
            em_fail_at(c, EM_ERR_OOM, OP, file, line, "tensor \"%s\": out of memory", name);
            return NULL;
        }
        memcpy(aligned, src, (size_t)ti->nbytes);
        src = aligned;
    }
    em_tensor *t = convert(c, file, line, ti, src, own, dtype, dev);
    free(aligned);
    return t;
}

/* A new tensor of `dtype` on dev holding ti's elements (own dtype at src) converted. */
static em_tensor *convert(em_ctx *c, const char *file, int line, const em_gguf_tensor_info *ti,
                          const uint8_t *src, em_dtype own, em_dtype dtype, em_device *dev) {
    const char *name = ti->name;
    size_t es = em_esize(dtype);
    if ((uint64_t)ti->numel > SIZE_MAX / 2 / es) {
        em_fail_at(c, EM_ERR_OVERFLOW, OP, file, line, "tensor \"%s\": %lld elements of %s", name,
                   (long long)ti->numel, em_dtype_name(dtype));
        return NULL;
    }
    if (dev->be->host_accessible) {
        em_tensor *t = em_tensor_new(c, dev, dtype, ti->ndim, ti->shape);
        if (!t) return NULL;
        if (ti->numel) em_convert(src, own, em_tensor_ptr(t), dtype, ti->numel);
        return em_scope_add(c, t);
    }
    void *tmp = malloc(ti->numel ? (size_t)ti->numel * es : 1);
    if (!tmp) {
        em_fail_at(c, EM_ERR_OOM, OP, file, line, "tensor \"%s\": cannot stage %zu bytes", name,
                   (size_t)ti->numel * es);
        return NULL;
    }
    if (ti->numel) em_convert(src, own, tmp, dtype, ti->numel);
    em_tensor *t = em_from_host_on_(c, file, line, dev, dtype, ti->ndim, ti->shape, tmp);
    free(tmp);
    return t;
}

em_tensor *em_gguf_load_(em_ctx *c, const char *file, int line, const em_gguf *g,
                         const char *name, em_device *dev) {
    if (!c || c->err.status) return NULL;
    const em_gguf_tensor_info *ti = lookup(c, g, name, file, line);
    if (!ti) return NULL;
    const em_ggml_traits *tr = em_ggml_traits_of(ti->type);
    return em_gguf_load_as_(c, file, line, g, name, tr->loadable ? tr->dtype : EM_F32, dev);
}

/*
 * ember/tensor.h — tensor handles: what a tensor is, how to make one from host memory and how to
 * read it back.
 *
 * A tensor is a reference-counted handle: dtype, shape, strides (in elements), an offset and a
 * storage that belongs to exactly one device. Views share storage. Tensors returned by Ember
 * functions belong to the context's innermost scope (see core.h); take a reference of your own
 * with em_tensor_retain (and give it back with em_tensor_release) only when a tensor must outlive
 * its scope without being kept.
 *
 * Functions that take a context and return a tensor are macros that pass the caller's source
 * position (__FILE__, __LINE__) so errors say where they happened; the functions behind them end
 * in `_` and take (file, line) after the context.
 */
#ifndef EMBER_TENSOR_H
#define EMBER_TENSOR_H

#include "ember/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Expands to the caller's source position (used by the op macros). */
#define EM_HERE __FILE__, __LINE__

/** `EM_SHAPE(2, 3)` expands to `2, (const int64_t[]){2, 3}`: an (ndim, shape) argument pair. */
#define EM_SHAPE(...)                                                                             \
    (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}

/* ---- queries (no context: they cannot fail; a NULL tensor gives 0 / NULL) ---- */
EM_API em_dtype em_tensor_dtype(const em_tensor *t);
EM_API int em_tensor_ndim(const em_tensor *t);
/** Pointer to the shape array (ndim entries), valid while the tensor lives. */
EM_API const int64_t *em_tensor_shape(const em_tensor *t);
/** Size of dimension `d`; negative `d` counts from the end. 0 if out of range. */
EM_API int64_t em_tensor_dim(const em_tensor *t, int d);
/** Strides in elements (ndim entries). */
EM_API const int64_t *em_tensor_strides(const em_tensor *t);
EM_API int64_t em_tensor_numel(const em_tensor *t);
/* numel * element size (numel / block size * block bytes for quantized dtypes) */
EM_API size_t em_tensor_nbytes(const em_tensor *t);
EM_API em_device *em_tensor_device(const em_tensor *t);
EM_API bool em_tensor_is_contiguous(const em_tensor *t);
/** Formats "bf16[2,3]" into buf (always NUL-terminated); returns buf. */
EM_API char *em_tensor_sig(const em_tensor *t, char *buf, size_t n);

/* ---- ownership ---- */
/** Adds a reference owned by the caller. Returns t. */
EM_API em_tensor *em_tensor_retain(em_tensor *t);
/** Drops a caller-owned reference; the last one frees the tensor (and its storage's last). */
EM_API void em_tensor_release(em_tensor *t);

/* ---- host memory ---- */
/**
 * New tensor on the context's default device holding a copy of `data` (ndim dims, contiguous,
 * dtype-sized elements). `data` may be NULL only when the tensor is empty.
 */
#define em_from_host(c, ...) em_from_host_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_from_host_(em_ctx *c, const char *file, int line, em_dtype dtype, int ndim,
                                const int64_t *shape, const void *data);
/** Same, on device `dev`. */
#define em_from_host_on(c, ...) em_from_host_on_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_from_host_on_(em_ctx *c, const char *file, int line, em_device *dev,
                                   em_dtype dtype, int ndim, const int64_t *shape, const void *data);
/**
 * Wraps host memory that the caller keeps alive (zero copy, CPU device only). `release` (may be
 * NULL) is called with `user_data` when the last reference to the storage goes. `data` must be
 * aligned to the element size. Strides NULL means contiguous.
 */
#define em_from_host_borrowed(c, ...) em_from_host_borrowed_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_from_host_borrowed_(em_ctx *c, const char *file, int line, em_dtype dtype,
                                         int ndim, const int64_t *shape, void *data,
                                         size_t data_nbytes, void (*release)(void *user_data),
                                         void *user_data);
/** A 0-d tensor holding `value` converted to `dtype`. */
#define em_scalar(c, ...) em_scalar_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_scalar_(em_ctx *c, const char *file, int line, double value, em_dtype dtype);

/**
 * Copies the tensor's elements, in row-major order, into `dst` (which holds `dst_nbytes`).
 * Waits for pending work (this is a materialisation point). The sizes must match exactly.
 */
EM_API em_status em_to_host(em_ctx *c, em_tensor *t, void *dst, size_t dst_nbytes);
/** Copies and converts to f32 (any dtype). `n` is the number of floats `dst` holds. */
EM_API em_status em_to_host_f32(em_ctx *c, em_tensor *t, float *dst, int64_t n);
/** The single element of a one-element tensor, as a double. */
EM_API em_status em_item(em_ctx *c, em_tensor *t, double *out);
/**
 * Host pointer to the first element of a CPU tensor (materialising pending fused work);
 * NULL with an error for other devices. The pointer follows the tensor's strides.
 */
EM_API void *em_tensor_data(em_ctx *c, em_tensor *t);
/** Prints shape, dtype, device and (up to `max_elems`) values to stdout, for debugging. */
EM_API void em_print(em_ctx *c, em_tensor *t, int max_elems);

/* ---- scalar conversions (round-to-nearest-even) ---- */
EM_API uint16_t em_f32_to_bf16(float f);
EM_API float em_bf16_to_f32(uint16_t h);
EM_API uint16_t em_f32_to_f16(float f);
EM_API float em_f16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif

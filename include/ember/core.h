/*
 * ember/core.h — status codes, dtypes, the context, scopes and devices.
 *
 * Every Ember call takes an `em_ctx`, the caller's context: one per thread of work. It holds
 * the scope stack (which owns the tensors ops return), the defaults (device, eager mode) and the
 * FIRST error that happened. An op that fails returns NULL and records the error; an op given a
 * NULL input, or called while the context holds an error, returns NULL and leaves the recorded
 * error alone. A chain of calls can therefore be checked once, at its end:
 *
 *     em_ctx *c = em_ctx_create();
 *     em_scope_push(c);
 *     em_tensor *y = em_add(c, em_matmul(c, x, w), b);
 *     if (!y) fprintf(stderr, "%s\n", em_ctx_error(c)->message);
 *     em_scope_pop(c);              // releases every tensor made inside the scope
 *     em_ctx_free(c);
 *
 * A context is not thread-safe: use one per thread. Tensors may be shared between contexts
 * (their reference counts are atomic); the device allocators are thread-safe.
 */
#ifndef EMBER_CORE_H
#define EMBER_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(EMBER_BUILDING) && defined(__GNUC__)
#define EM_API __attribute__((visibility("default")))
#else
#define EM_API
#endif

/** Most dimensions a tensor can have. */
#define EM_MAX_DIMS 8

/* ---------------------------------------------------------------------------------------------
 * Status codes. Append-only, explicit values.
 * ------------------------------------------------------------------------------------------- */
typedef enum em_status {
    EM_OK = 0,
    EM_ERR_INVALID_ARG = 1,  /* a NULL or out-of-range argument */
    EM_ERR_SHAPE = 2,        /* shapes that do not fit the op */
    EM_ERR_DTYPE = 3,        /* a dtype the op does not accept */
    EM_ERR_DEVICE = 4,       /* mixed devices, unknown device, device failure */
    EM_ERR_INDEX = 5,        /* an index value out of range */
    EM_ERR_OOM = 6,          /* allocation failed */
    EM_ERR_OVERFLOW = 7,     /* a size computation overflowed */
    EM_ERR_IO = 8,           /* a file or network operation failed */
    EM_ERR_FORMAT = 9,       /* malformed input file */
    EM_ERR_UNSUPPORTED = 10, /* valid request that this build or device cannot do */
    EM_ERR_INTERNAL = 11,    /* a bug in Ember */
    EM_ERR_BACKEND = 12,     /* an error reported by a backend (e.g. a PJRT plugin) */
    EM_ERR_NOT_FOUND = 13,   /* a file, key or name that does not exist */
    EM_STATUS_COUNT = 14
} em_status;

/** Constant, human readable name of a status ("shape error", ...). Never NULL. */
EM_API const char *em_status_str(em_status s);

/* ---------------------------------------------------------------------------------------------
 * Dtypes. Append-only, explicit values.
 * ------------------------------------------------------------------------------------------- */
typedef enum em_dtype {
    EM_F32 = 0,
    EM_BF16 = 1,
    EM_F16 = 2,
    EM_I64 = 3,
    EM_I32 = 4,
    EM_U8 = 5,
    EM_BOOL = 6,
    EM_F64 = 7,
    EM_I16 = 8,
    EM_I8 = 9,
    /* Block-quantized weights as GGUF files store them (ggml's layouts, see ember/gguf.h):
     * each block of 32 (or 256 for the K types) consecutive elements of a row is stored as
     * scales plus packed integers. A tensor of these dtypes is contiguous, lives on the CPU, and
     * its last dimension is a multiple of the block size. It is a first-class weight for
     * em_linear (x @ w^T with w [N, K] quantized: quantized dot kernels, no dequantized copy)
     * and em_embedding (rows dequantized on the fly); em_cast dequantizes it (to f32, bf16,
     * f16). Every other op refuses it with EM_ERR_DTYPE. */
    EM_Q8_0 = 10,
    EM_Q4_0 = 11,
    EM_Q4_1 = 12,
    EM_Q5_0 = 13,
    EM_Q5_1 = 14,
    EM_Q4_K = 15,
    EM_Q5_K = 16,
    EM_Q6_K = 17,
    EM_DTYPE_COUNT = 18
} em_dtype;

/**
 * Not a dtype: "whatever the source says", for option fields whose default is the checkpoint's
 * dtype (em_model_options.dtype). No tensor has it; em_dtype_name gives "auto".
 */
#define EM_DTYPE_AUTO ((em_dtype)-1)

/** Short name: "f32", "bf16", "q4_k", ... ("auto" for EM_DTYPE_AUTO); "?" for an invalid value. */
EM_API const char *em_dtype_name(em_dtype t);
/** Parses a dtype name ("f32", "float32", "bf16", "bfloat16", "q8_0", ...). False if unknown. */
EM_API bool em_dtype_parse(const char *name, em_dtype *out);
/** Size of one element in bytes; 0 for an invalid value and for block-quantized dtypes (whose
 *  sizes are em_dtype_block_bytes per em_dtype_block_size elements). */
EM_API size_t em_dtype_size(em_dtype t);
/** True for f32, bf16, f16, f64. */
EM_API bool em_dtype_is_float(em_dtype t);
/** True for the block-quantized dtypes (EM_Q8_0 ... EM_Q6_K). */
EM_API bool em_dtype_is_quantized(em_dtype t);
/** Elements per block: 32 (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), 256 (the K types), 1 for every other
 *  dtype; 0 for an invalid value. */
EM_API int em_dtype_block_size(em_dtype t);
/** Bytes per block (em_dtype_size for unquantized dtypes); 0 for an invalid value. */
EM_API size_t em_dtype_block_bytes(em_dtype t);

/* ---------------------------------------------------------------------------------------------
 * Errors and the context.
 * ------------------------------------------------------------------------------------------- */

/** The first error recorded in a context. All strings are owned by the context. */
typedef struct em_error {
    em_status status;
    char op[48];        /* op or function name that failed ("matmul", "safetensors_open") */
    char device[48];    /* device the op ran on, "" if none */
    char detail[768];   /* what went wrong, naming shapes, dtypes, indices, files */
    char message[1536]; /* one line: "<status>: <op>: <detail> [at file:line]" */
    const char *file;   /* caller's source position, when known (static string) */
    int line;
} em_error;

typedef struct em_ctx em_ctx;
typedef struct em_tensor em_tensor;
typedef struct em_device em_device;

/** Eager execution modes (DESIGN.md). */
typedef enum em_eager_mode {
    EM_EAGER_SYNC = 0,  /* every op completes before it returns */
    EM_EAGER_ASYNC = 1, /* ops are enqueued; reading on the host synchronises (default) */
    EM_EAGER_FUSED = 2  /* chains of element-wise ops may be merged into one pass */
} em_eager_mode;

/**
 * Creates a context. The eager mode comes from EMBER_EAGER (sync|async|fused; default async),
 * the default device is the CPU. Returns NULL only if memory is exhausted. Free with
 * em_ctx_free.
 */
EM_API em_ctx *em_ctx_create(void);
/** Releases every tensor still held by the context's scopes, then the context. NULL is a no-op. */
EM_API void em_ctx_free(em_ctx *c);

/** Status of the first recorded error, EM_OK if none. */
EM_API em_status em_ctx_status(const em_ctx *c);
/** The first recorded error, or NULL when there is none. Valid until the error is cleared. */
EM_API const em_error *em_ctx_error(const em_ctx *c);
/** Forgets the recorded error so that the context can be used again. */
EM_API void em_ctx_clear_error(em_ctx *c);
/**
 * Records an error (if none is recorded yet) in the name of `op`, printf-style. Used by code
 * written on top of Ember (models, tools) so their failures travel the same way. Returns `s`.
 */
EM_API em_status em_ctx_fail(em_ctx *c, em_status s, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/** Sets the eager mode. Switching away from fused first materialises pending work. */
EM_API void em_ctx_set_eager_mode(em_ctx *c, em_eager_mode m);
EM_API em_eager_mode em_ctx_eager_mode(const em_ctx *c);
/** Parses "sync", "async" or "fused". */
EM_API bool em_eager_mode_parse(const char *s, em_eager_mode *out);
EM_API const char *em_eager_mode_name(em_eager_mode m);

/** Default device for creation ops (initially the CPU). The device must outlive its use. */
EM_API void em_ctx_set_device(em_ctx *c, em_device *d);
EM_API em_device *em_ctx_device(const em_ctx *c);

/* ---------------------------------------------------------------------------------------------
 * Scopes. Every tensor an op returns belongs to the innermost open scope of its context; closing
 * the scope releases it unless it was kept (moved to the parent scope) or detached (handed to
 * the caller). A context always has a root scope, closed by em_ctx_free.
 * ------------------------------------------------------------------------------------------- */

/** Opens a scope. Returns the new depth (root = 0), or -1 with an error if out of memory. */
EM_API int em_scope_push(em_ctx *c);
/** Closes the innermost scope, releasing its tensors. Closing the root scope is a no-op. */
EM_API void em_scope_pop(em_ctx *c);
/** Current depth (root = 0). */
EM_API int em_scope_depth(const em_ctx *c);
/**
 * Moves `t` from the innermost scope to its parent, so it survives em_scope_pop. Returns `t`
 * (NULL passes through). If `t` is not held by the innermost scope, the parent gets a new
 * reference instead.
 */
EM_API em_tensor *em_keep(em_ctx *c, em_tensor *t);
/**
 * Removes `t` from the context's scopes and hands its reference to the caller, who must call
 * em_tensor_release. If no scope holds it, a new reference is returned. NULL passes through.
 */
EM_API em_tensor *em_detach(em_ctx *c, em_tensor *t);
/** Puts a caller-owned reference into the innermost scope (the inverse of em_detach). */
EM_API em_tensor *em_adopt(em_ctx *c, em_tensor *t);

/* ---------------------------------------------------------------------------------------------
 * Devices.
 * ------------------------------------------------------------------------------------------- */

/** What a device reports about itself (plain data). */
typedef struct em_device_info {
    char name[64];        /* "cpu", "xla:0", ... */
    char platform[32];    /* "cpu", "tpu", "cuda", ... */
    char kind[128];       /* hardware description */
    int index;            /* index within its platform */
    int64_t memory_bytes; /* total memory the device can address (0 if unknown) */
    int64_t memory_free;  /* free memory (-1 if unknown) */
    int threads;          /* CPU worker threads (0 for other devices) */
    char features[256];   /* e.g. "avx512f avx512bf16 avx2 fma" */
} em_device_info;

/**
 * Finds a device by name ("cpu", "cpu:0", ...). Returns NULL and records EM_ERR_DEVICE naming
 * every place that was tried when the device cannot be found. Devices live until process exit.
 */
EM_API em_device *em_device_get(em_ctx *c, const char *name);
/** The CPU device (never NULL). */
EM_API em_device *em_device_cpu(void);
/** Name of a device ("cpu"). */
EM_API const char *em_device_name(const em_device *d);
/** Fills `out` with the device's properties. */
EM_API em_status em_device_info_get(const em_device *d, em_device_info *out);
/** Waits for all work queued on the device. */
EM_API em_status em_device_sync(em_ctx *c, em_device *d);
/** Returns cached but unused memory of the device's allocator to the system. */
EM_API void em_device_empty_cache(em_device *d);
/** Allocator statistics in bytes: in use by tensors, and cached for reuse. */
EM_API void em_device_memory_stats(const em_device *d, int64_t *in_use, int64_t *cached);

/** Number of devices known so far (the CPU, then any PJRT devices that were opened). */
EM_API int em_device_count(void);
/** Device `i` (0 <= i < em_device_count()), NULL if out of range. */
EM_API em_device *em_device_at(int i);

/** Number of CPU worker threads, the caller included: EMBER_NUM_THREADS (1..1024) when set,
 *  else the physical cores among the CPUs this process may run on (its affinity mask), capped by
 *  its cgroup's CPU quota rounded up. Decided on the first call. */
EM_API int em_num_threads(void);
/** Changes the number of CPU worker threads (>= 1). Not to be called while ops run. */
EM_API void em_set_num_threads(int n);

/**
 * Frees memory an Ember function handed to the caller: strings and arrays whose documentation
 * says "free with em_free" (decoded text, token ids, rendered chat templates, paths). Owned
 * objects have their own em_<type>_free. NULL is a no-op.
 */
EM_API void em_free(void *p);

/** Library version string ("0.1.0"). */
EM_API const char *em_version(void);

#ifdef __cplusplus
}
#endif
#endif

/*
 * ember/safetensors.h — Hugging Face safetensors checkpoints, read and written as they are.
 *
 * Reading. em_safetensors_open maps a checkpoint (one .safetensors file, a sharded checkpoint's
 * model.safetensors.index.json, or a directory holding either) and validates every header
 * field before it returns: the header length, its JSON, dtype names, shapes against byte
 * ranges, and that the tensors' data_offsets tile the data section exactly, as the safetensors
 * library requires. Each failure is its own error message naming the file and the tensor.
 * Nothing is read from the tensors' data until a tensor is loaded.
 *
 *     em_safetensors *st = em_safetensors_open(c, "Qwen3-0.6B/");
 *     if (!st) { puts(em_ctx_error(c)->message); ... }
 *     em_tensor *w = em_safetensors_load_as(c, st, "model.norm.weight", EM_F32, NULL);
 *     em_safetensors_free(st);      // w stays valid: it holds the mapping (see below)
 *
 * Loading. em_safetensors_load gives a tensor in the file's own dtype when Ember has it (the
 * float8 and unsigned types are widened, see em_st_dtype_natural); em_safetensors_load_as
 * converts to any Ember dtype (bf16 checkpoint as f32, f32 as bf16, float8 decoded exactly...).
 * On the CPU, a tensor whose dtype needs no conversion and whose bytes are aligned in the file
 * is zero-copy: it points into the file mapping, which stays alive (reference counted) until
 * the last such tensor is released, even after em_safetensors_free. Such tensors are
 * copy-on-write: writing to one never changes the file (on a system with strict overcommit
 * that refuses such a mapping, the mapping is read-only instead). Other devices get a copy.
 *
 * Writing. em_safetensors_writer produces the same bytes as the `safetensors` library
 * (0.8.0): tensors sorted by dtype (the library's order) then by name, compact JSON with
 * `__metadata__` first, the header padded with spaces to a multiple of 8 bytes. One known
 * difference: the library orders several `__metadata__` entries at random (a Rust HashMap);
 * Ember keeps the order they were set in.
 *
 * A handle is immutable after open and may be read from several threads at once (each with
 * its own em_ctx).
 */
#ifndef EMBER_SAFETENSORS_H
#define EMBER_SAFETENSORS_H

#include "ember/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * File dtypes: every dtype name of the safetensors format. Append-only, explicit values.
 * ------------------------------------------------------------------------------------------- */
typedef enum em_st_dtype {
    EM_ST_BOOL = 0,
    EM_ST_U8 = 1,
    EM_ST_I8 = 2,
    EM_ST_I16 = 3,
    EM_ST_U16 = 4,
    EM_ST_F16 = 5,
    EM_ST_BF16 = 6,
    EM_ST_I32 = 7,
    EM_ST_U32 = 8,
    EM_ST_F32 = 9,
    EM_ST_F64 = 10,
    EM_ST_I64 = 11,
    EM_ST_U64 = 12,
    EM_ST_F8_E4M3 = 13,     /* torch.float8_e4m3fn: no infinities, NaN = S.1111.111, max 448 */
    EM_ST_F8_E5M2 = 14,     /* torch.float8_e5m2: IEEE-like, infinities and NaNs */
    EM_ST_F8_E4M3FNUZ = 15, /* torch.float8_e4m3fnuz: bias 8, the only NaN is 0x80 */
    EM_ST_F8_E5M2FNUZ = 16, /* torch.float8_e5m2fnuz: bias 16, the only NaN is 0x80 */
    EM_ST_F8_E8M0 = 17,     /* torch.float8_e8m0fnu: 2^(e-127), 0xFF = NaN (MX scales) */
    EM_ST_C64 = 18,         /* complex64: listed, not loadable */
    EM_ST_F4 = 19,          /* MX sub-byte formats: listed, not loadable */
    EM_ST_F6_E2M3 = 20,
    EM_ST_F6_E3M2 = 21,
    EM_ST_DTYPE_COUNT = 22
} em_st_dtype;

/** The format's name ("BF16", "F8_E4M3", ...); "?" for an invalid value. */
EM_API const char *em_st_dtype_name(em_st_dtype t);
/** Parses a format dtype name (exact, upper case as in files). False if unknown. */
EM_API bool em_st_dtype_parse(const char *name, em_st_dtype *out);
/** Bits per element (4 for F4, 6 for F6_*, 8 ... 64 otherwise); 0 for an invalid value. */
EM_API int em_st_dtype_bits(em_st_dtype t);
/**
 * The Ember dtype em_safetensors_load gives for a file dtype: the same type when Ember has it,
 * bf16 for every float8 type (all of their values are exact in bf16), i32 for U16, i64 for U32
 * and U64. False for C64, F4 and F6 (not loadable).
 */
EM_API bool em_st_dtype_natural(em_st_dtype t, em_dtype *out);
/** The file dtype that stores an Ember dtype (F32 for EM_F32, ...). */
EM_API em_st_dtype em_st_dtype_of(em_dtype t);

/* ---------------------------------------------------------------------------------------------
 * Reading.
 * ------------------------------------------------------------------------------------------- */
typedef struct em_safetensors em_safetensors;

/** What the header says about one tensor. Plain data owned by the handle. */
typedef struct em_safetensors_info {
    const char *name;       /* the Hub's tensor name */
    em_st_dtype dtype;      /* dtype as stored */
    int ndim;               /* dimensions (may exceed EM_MAX_DIMS: then not loadable) */
    const int64_t *shape;   /* ndim sizes, in elements */
    int64_t numel;          /* product of shape (1 for a 0-d tensor) */
    uint64_t nbytes;        /* data_end - data_begin */
    uint64_t data_begin;    /* data_offsets[0]: bytes from the start of the data section */
    uint64_t data_end;      /* data_offsets[1] */
    uint64_t file_offset;   /* absolute offset of the first byte in its file */
    const char *file;       /* path of the file holding the tensor */
} em_safetensors_info;

/**
 * Opens a checkpoint. `path` is a .safetensors file, a *.safetensors.index.json (sharded
 * checkpoint: all shards become one handle, weight_map decides which shard holds a name), or a
 * directory holding model.safetensors.index.json or model.safetensors. Returns NULL and records
 * an error (EM_ERR_IO, EM_ERR_FORMAT, EM_ERR_NOT_FOUND, EM_ERR_OVERFLOW) naming the file, and
 * the tensor where there is one, when anything is wrong. Free with em_safetensors_free.
 */
EM_API em_safetensors *em_safetensors_open(em_ctx *c, const char *path);
/** Releases the handle. Zero-copy tensors loaded from it stay valid. NULL is a no-op. */
EM_API void em_safetensors_free(em_safetensors *st);

/** Number of tensors (over all shards). */
EM_API int64_t em_safetensors_count(const em_safetensors *st);
/** Tensor `i` (0 <= i < count): shards in index order, then by offset. NULL if out of range. */
EM_API const em_safetensors_info *em_safetensors_info_at(const em_safetensors *st, int64_t i);
/** The tensor called `name`, or NULL (no error recorded) when there is none. */
EM_API const em_safetensors_info *em_safetensors_find(const em_safetensors *st, const char *name);
/** Whether a tensor called `name` exists. */
EM_API bool em_safetensors_has(const em_safetensors *st, const char *name);

/** Number of files (1, or the shard count). */
EM_API int em_safetensors_file_count(const em_safetensors *st);
/** Path of file `i`, NULL if out of range. */
EM_API const char *em_safetensors_file_path(const em_safetensors *st, int i);

/**
 * `__metadata__` entries (a string map). For a sharded checkpoint these are the entries of all
 * shards, the first shard's value winning for a key that several define. Strings are owned
 * by the handle. Returns the count / NULL when out of range or absent.
 */
EM_API int em_safetensors_metadata_count(const em_safetensors *st);
EM_API const char *em_safetensors_metadata_key(const em_safetensors *st, int i);
EM_API const char *em_safetensors_metadata_value(const em_safetensors *st, int i);
EM_API const char *em_safetensors_metadata_get(const em_safetensors *st, const char *key);

/**
 * The stored bytes of tensor `name` (little-endian, as in the file) and their count in
 * *nbytes. Valid until em_safetensors_free. NULL with EM_ERR_NOT_FOUND if absent.
 */
EM_API const void *em_safetensors_data(em_ctx *c, const em_safetensors *st, const char *name,
                                       size_t *nbytes);

/**
 * Tensor `name` in its natural dtype (em_st_dtype_natural) on `dev` (NULL: the context's
 * default device). The result belongs to the context's innermost scope. Errors:
 * EM_ERR_NOT_FOUND (no such tensor; the message names the checkpoint), EM_ERR_UNSUPPORTED
 * (C64/F4/F6, more than EM_MAX_DIMS dims), EM_ERR_OOM, device errors.
 */
#define em_safetensors_load(c, ...) em_safetensors_load_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_safetensors_load_(em_ctx *c, const char *file, int line,
                                       const em_safetensors *st, const char *name,
                                       em_device *dev);
/**
 * Tensor `name` converted to `dtype` on `dev` (NULL: default device). Conversions round to
 * nearest even as em_cast does; float8 values are decoded exactly (NaN stays NaN, the E5M2
 * infinities stay infinite). U64 values above INT64_MAX are an error when an integer dtype
 * is requested. Same errors as em_safetensors_load.
 */
#define em_safetensors_load_as(c, ...) em_safetensors_load_as_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_safetensors_load_as_(em_ctx *c, const char *file, int line,
                                          const em_safetensors *st, const char *name,
                                          em_dtype dtype, em_device *dev);

/* ---------------------------------------------------------------------------------------------
 * Writing.
 * ------------------------------------------------------------------------------------------- */
typedef struct em_safetensors_writer em_safetensors_writer;

/** A new, empty writer. NULL with EM_ERR_OOM. Free with em_safetensors_writer_free. */
EM_API em_safetensors_writer *em_safetensors_writer_create(em_ctx *c);
/** Frees the writer and the references it holds. NULL is a no-op. */
EM_API void em_safetensors_writer_free(em_safetensors_writer *w);
/**
 * Adds tensor `t` under `name` (copied). The writer takes its own reference to `t` and reads
 * the values when saving (any device, any strides). A name added twice is EM_ERR_INVALID_ARG.
 */
EM_API em_status em_safetensors_writer_add(em_ctx *c, em_safetensors_writer *w, const char *name,
                                           em_tensor *t);
/**
 * Adds raw little-endian bytes of any file dtype (float8, U16, ...). `data` is borrowed: it must
 * stay valid until the writer is freed. `nbytes` must equal the size the shape and dtype give.
 */
EM_API em_status em_safetensors_writer_add_raw(em_ctx *c, em_safetensors_writer *w,
                                               const char *name, em_st_dtype dtype, int ndim,
                                               const int64_t *shape, const void *data,
                                               size_t nbytes);
/**
 * Sets `__metadata__[key] = value` (both copied; a key set again keeps its place and takes the
 * new value). With key == NULL, only makes `__metadata__` present (possibly empty), as the
 * library does for `metadata={}`.
 */
EM_API em_status em_safetensors_writer_set_metadata(em_ctx *c, em_safetensors_writer *w,
                                                    const char *key, const char *value);
/**
 * Writes the file: to a temporary file next to `path`, then renamed over it, so a checkpoint
 * being read (mapped) is never truncated underneath its readers. EM_ERR_IO names the path.
 */
EM_API em_status em_safetensors_writer_save(em_ctx *c, em_safetensors_writer *w,
                                            const char *path);
/** The file's bytes in a buffer the caller frees with em_free (*out) of *out_nbytes bytes. */
EM_API em_status em_safetensors_writer_serialize(em_ctx *c, em_safetensors_writer *w, void **out,
                                                 size_t *out_nbytes);

/**
 * One-call save: `n` tensors with their names, and `metadata` as a NULL-terminated list of
 * key, value strings (NULL: no `__metadata__`).
 */
EM_API em_status em_safetensors_save(em_ctx *c, const char *path, int n,
                                     const char *const *names, em_tensor *const *tensors,
                                     const char *const *metadata);

#ifdef __cplusplus
}
#endif
#endif

/*
 * Private layout of safetensors handles: file images (mapped or borrowed), the per-file header
 * parser, dtype traits and conversion. The public API is in include/ember/safetensors.h.
 */
#ifndef EMBER_SAFETENSORS_IMPL_H
#define EMBER_SAFETENSORS_IMPL_H

#include <stdatomic.h>

#include "core/tensor_impl.h"
#include "ember/safetensors.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
/* The format is little-endian and zero-copy tensors use the bytes as they are. */
#error "Ember's safetensors reader assumes a little-endian host"
#endif

/* MAX_HEADER_SIZE of the safetensors library (safetensors/src/tensor.rs). */
#define EM_ST_MAX_HEADER 100000000ull

/* ---- dtype traits (safetensors_dtype.c) ---- */
typedef struct em_st_dtype_traits {
    const char *name;
    int bits;
    int rank;        /* position in the library's `Dtype` enum: the writer sorts by it */
    bool has_native; /* the bytes are an Ember dtype as they are */
    em_dtype native;
    bool loadable;
    em_dtype natural; /* what em_safetensors_load gives */
} em_st_dtype_traits;
extern const em_st_dtype_traits em_st_dtype_table[EM_ST_DTYPE_COUNT];

/*
 * Converts n elements stored as `st` at `src` (any alignment) into `dst` (aligned for `dt`).
 * Fails (recording an error naming `what`) only for U64 values that do not fit an integer
 * target, or for dtypes that cannot be loaded.
 */
em_status em_st_convert(em_ctx *c, const char *what, const void *src, em_st_dtype st, void *dst,
                        em_dtype dt, int64_t n);
/* Exact f32 value of one float8 code, with torch's NaN bit patterns. */
float em_st_f8_to_f32(em_st_dtype t, uint8_t code);

/* ---- file images ---- */
typedef enum em_st_image_kind {
    EM_ST_IMAGE_MMAP = 0,     /* mmap'd file: munmap at the last reference */
    EM_ST_IMAGE_BORROWED = 1, /* caller's memory (fuzzing, tests): nothing to free */
    EM_ST_IMAGE_EMPTY = 2     /* a zero-byte file */
} em_st_image_kind;

/* The bytes of one file, shared by the handle and every zero-copy tensor. */
typedef struct em_st_image {
    atomic_int refcount;
    em_st_image_kind kind;
    uint8_t *base;
    size_t len;
} em_st_image;

/* Unmaps the whole pages inside tensor `ti`'s bytes (from em_safetensors_find on st) from a
 * file mapping (MADV_DONTNEED; a later read faults them in again from the file), once the
 * caller holds a copy: the process then does not hold the checkpoint twice. Nothing for other
 * images. */
void em_st_drop_pages(const em_safetensors *st, const em_safetensors_info *ti);
/* The same for n bytes at offset off of any image. */
void em_st_image_drop_range(const em_st_image *im, uint64_t off, uint64_t n);

/* A new image record (refcount 1); NULL when out of memory. */
em_st_image *em_st_image_new(em_st_image_kind kind, uint8_t *base, size_t len);
/* Maps a whole file privately (copy-on-write); errors are recorded in the name of `op`. */
em_st_image *em_st_image_map(em_ctx *c, const char *path, const char *op);
void em_st_image_retain(em_st_image *im);
void em_st_image_release(em_st_image *im);
/* em_from_host_borrowed's release callback. */
void em_st_image_release_cb(void *im);

/* ---- handle ---- */
typedef struct em_st_file {
    char *path;
    em_st_image *image;
    uint64_t data_start; /* 8 + header length */
} em_st_file;

typedef struct em_st_entry {
    em_safetensors_info info;
    int file;        /* index into files */
    int64_t order;   /* position in the header (tie-break when sorting by offset) */
    bool dropped;    /* a duplicate across shards that the index does not choose */
} em_st_entry;

struct em_safetensors {
    char *path; /* what was opened (for messages) */
    em_st_file *files;
    int n_files;
    em_st_entry *entries; /* file order, then by data offset */
    int64_t n_entries, cap_entries;
    int64_t *by_name; /* entry indices sorted by name (strcmp) */
    char **meta_keys, **meta_values;
    int n_meta, cap_meta;
    bool has_meta; /* some file has a `__metadata__` object (possibly empty) */
};

/* Appends file `path` with image `im` (the handle takes the reference) and parses its header,
 * adding its tensors and metadata. Records an error and returns it on failure. */
em_status em_st_add_file(em_ctx *c, em_safetensors *st, const char *path, em_st_image *im);
/* Sorts the name index; a name in two files is an error unless `choose` resolves it. */
typedef int (*em_st_choose_fn)(void *user, const char *name); /* file index, or -1 */
em_status em_st_finish(em_ctx *c, em_safetensors *st, em_st_choose_fn choose, void *user);
em_safetensors *em_st_new(const char *path);
/* The existing name sharing the longest prefix with `name` (for "did you mean"), or NULL. */
const char *em_st_nearest_name(const em_safetensors *st, const char *name);

/*
 * Opens an in-memory safetensors image without copying it: `data` must stay valid until the
 * handle is closed and every tensor loaded from it is released. `name` is used in messages.
 * For fuzzing and tests.
 */
em_safetensors *em_safetensors_open_memory(em_ctx *c, const void *data, size_t n,
                                           const char *name);

/* Whether a UTF-8 string is valid (the header must be); *bad gets the first bad byte. */
bool em_st_utf8_valid(const uint8_t *s, size_t n, size_t *bad);

#endif

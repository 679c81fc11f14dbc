/*
 * Private layout of GGUF handles (include/ember/gguf.h), shared by:
 *   gguf_open.c   mapping, parsing and validating the header, tensor infos and data section
 *   gguf_meta.c   type tables and metadata queries
 *   gguf_load.c   tensors out of the data section (zero-copy, converted, dequantized)
 */
#ifndef EMBER_IO_GGUF_IMPL_H
#define EMBER_IO_GGUF_IMPL_H

#include "core/tensor_impl.h"
#include "ember/gguf.h"
#include "io/safetensors/safetensors_impl.h" /* em_st_image: the shared file-mapping record */

#define EM_GGUF_MAGIC 0x46554747u /* "GGUF" read as a little-endian u32 */
#define EM_GGUF_DEFAULT_ALIGNMENT 32u
#define EM_GGUF_MAX_DIMS 4         /* GGML_MAX_DIMS */
#define EM_GGUF_MAX_DEPTH 64       /* nesting of arrays of arrays */

/* One string of the file, copied with a NUL terminator. */
typedef struct em_gguf_str {
    const char *s;
    size_t len;
} em_gguf_str;

struct em_gguf_value {
    em_gguf_type type;
    union {
        uint64_t u;   /* unsigned integers */
        int64_t i;    /* signed integers */
        double f;     /* float32 / float64 */
        bool b;
    } num;
    em_gguf_str str;      /* STRING */
    /* ARRAY */
    em_gguf_type etype;
    uint64_t n;
    const uint8_t *raw;   /* numeric/bool elements as stored (little-endian, unaligned) */
    em_gguf_str *strs;    /* STRING elements */
    em_gguf_value *items; /* ARRAY elements */
};

typedef struct em_gguf_kv {
    em_gguf_str key;
    em_gguf_value value;
} em_gguf_kv;

/* A bump allocator: every string and array table of a handle lives in it. */
typedef struct em_gguf_arena {
    struct em_gguf_chunk *head;
} em_gguf_arena;
void *em_gguf_arena_alloc(em_gguf_arena *a, size_t n);
void em_gguf_arena_free(em_gguf_arena *a);

struct em_gguf {
    char *path;
    em_st_image *image;
    uint32_t version, alignment;
    uint64_t data_start; /* absolute */
    em_gguf_kv *kv;
    int64_t n_kv;
    int64_t *kv_by_key;  /* kv indices sorted by key */
    em_gguf_tensor_info *tensors;
    int64_t n_tensors;
    int64_t *by_name;    /* tensor indices sorted by name */
    em_gguf_arena arena;
};

/* Type table (gguf_meta.c). */
typedef struct em_ggml_traits {
    const char *name; /* NULL: no such type */
    int block, bytes;
    bool loadable;
    em_dtype dtype;   /* when loadable */
} em_ggml_traits;
const em_ggml_traits *em_ggml_traits_of(uint32_t type); /* NULL for unknown numbers */
/* Size in bytes of one element of a scalar value type; 0 for STRING and ARRAY. */
size_t em_gguf_scalar_size(em_gguf_type t);

/* How a general.architecture maps onto one of Ember's families (each family file of
 * src/models/ gives its row, see em_family). */
typedef struct em_gguf_arch {
    const char *gguf;       /* general.architecture, NULL: the family has no GGUF form */
    const char *model_type; /* the family (config.json's model_type) */
    bool permute_qk;        /* llama.cpp's converter permuted the q/k rows (LlamaModel) */
    bool norm_offset;       /* norms stored as 1 + w (Gemma) */
    const char *moe_prefix; /* where the experts live: "mlp." or "block_sparse_moe." */
} em_gguf_arch;
/* The config.json transformers builds for the metadata of a file of architecture `ar`, as
 * JSON text (*text_out, malloc'd), and the name to give it in messages ("<path> (metadata)",
 * into what[what_n]). */
em_status em_gguf_config_text(em_ctx *c, const em_gguf *g, const em_gguf_arch *ar,
                              char **text_out, char *what, size_t what_n);

/* Parses and validates the image (gguf_open.c); the handle takes the image's reference. */
em_gguf *em_gguf_parse(em_ctx *c, const char *name, em_st_image *im);
/* The name in the file closest to `name` (longest common prefix), for "did you mean". */
const char *em_gguf_nearest_name(const em_gguf *g, const char *name);

#endif

/*
 * ember/gguf.h — GGUF checkpoints (llama.cpp, Ollama), read as they are.
 *
 * em_gguf_open maps a .gguf file (versions 2 and 3, little-endian) and validates every field
 * before it returns: the magic and version, each count and string length against the bytes
 * left, every metadata value type (nested arrays included), `general.alignment`, each tensor's
 * dimensions and type, and that every tensor's bytes lie inside the data section, aligned, and
 * overlap no other tensor's. Names must be unique. Each failure is its own message naming the
 * file, the byte offset and the key or tensor.
 *
 *     em_gguf *g = em_gguf_open(c, "SmolLM2-135M-Instruct.Q4_1.gguf");
 *     const char *arch = em_gguf_get_str(g, "general.architecture", NULL);
 *     em_tensor *w = em_gguf_load(c, g, "blk.0.attn_q.weight", NULL);     // q4_1 [576, 576]
 *     em_tensor *f = em_gguf_load_as(c, g, "blk.0.attn_q.weight", EM_F32, NULL); // dequantized
 *     em_gguf_free(g);   // w stays valid: it holds the mapping
 *
 * Shapes. GGUF lists dimensions innermost first (ggml's ne[0] is the row length); Ember lists
 * them outermost first, as torch does: a GGUF tensor of dimensions [576, 1536] is an Ember
 * tensor of shape [1536, 576], whose rows of 576 elements are contiguous.
 *
 * Tensor types. F32, F16, BF16 and the block-quantized Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
 * Q5_K and Q6_K load (em_gguf_load gives the Ember dtype of the same name, quantized ones as
 * quantized tensors: see ember/core.h); the other ggml types are recognised (their sizes are
 * validated) and refused by name when loaded. Dequantization gives the same bits as the `gguf`
 * Python package's `gguf.quants.dequantize`.
 *
 * Zero copy. On the CPU a tensor whose type needs no conversion is a view of the file mapping,
 * which stays alive (reference counted) until the last such tensor is released, even after
 * em_gguf_free; writes to it are copy-on-write and never reach the file.
 *
 * A handle is immutable after open and may be read from several threads at once (each with its
 * own em_ctx). Strings returned by the handle are NUL-terminated copies owned by the handle.
 */
#ifndef EMBER_GGUF_H
#define EMBER_GGUF_H

#include "ember/config.h"
#include "ember/tensor.h"
#include "ember/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Metadata value types, with the format's numbers. Append-only. */
typedef enum em_gguf_type {
    EM_GGUF_UINT8 = 0,
    EM_GGUF_INT8 = 1,
    EM_GGUF_UINT16 = 2,
    EM_GGUF_INT16 = 3,
    EM_GGUF_UINT32 = 4,
    EM_GGUF_INT32 = 5,
    EM_GGUF_FLOAT32 = 6,
    EM_GGUF_BOOL = 7,
    EM_GGUF_STRING = 8,
    EM_GGUF_ARRAY = 9,
    EM_GGUF_UINT64 = 10,
    EM_GGUF_INT64 = 11,
    EM_GGUF_FLOAT64 = 12,
    EM_GGUF_TYPE_COUNT = 13
} em_gguf_type;

/** The format's name of a value type ("uint32", "array", ...); "?" for an invalid value. */
EM_API const char *em_gguf_type_name(em_gguf_type t);

/** ggml tensor types, with ggml's numbers (gaps are types removed from the format). */
typedef enum em_ggml_type {
    EM_GGML_F32 = 0,
    EM_GGML_F16 = 1,
    EM_GGML_Q4_0 = 2,
    EM_GGML_Q4_1 = 3,
    EM_GGML_Q5_0 = 6,
    EM_GGML_Q5_1 = 7,
    EM_GGML_Q8_0 = 8,
    EM_GGML_Q8_1 = 9,
    EM_GGML_Q2_K = 10,
    EM_GGML_Q3_K = 11,
    EM_GGML_Q4_K = 12,
    EM_GGML_Q5_K = 13,
    EM_GGML_Q6_K = 14,
    EM_GGML_Q8_K = 15,
    EM_GGML_IQ2_XXS = 16,
    EM_GGML_IQ2_XS = 17,
    EM_GGML_IQ3_XXS = 18,
    EM_GGML_IQ1_S = 19,
    EM_GGML_IQ4_NL = 20,
    EM_GGML_IQ3_S = 21,
    EM_GGML_IQ2_S = 22,
    EM_GGML_IQ4_XS = 23,
    EM_GGML_I8 = 24,
    EM_GGML_I16 = 25,
    EM_GGML_I32 = 26,
    EM_GGML_I64 = 27,
    EM_GGML_F64 = 28,
    EM_GGML_IQ1_M = 29,
    EM_GGML_BF16 = 30,
    EM_GGML_TQ1_0 = 34,
    EM_GGML_TQ2_0 = 35,
    EM_GGML_MXFP4 = 39,
    EM_GGML_TYPE_COUNT = 40
} em_ggml_type;

/** ggml's name of a tensor type ("Q4_K", "F32", ...); NULL for a number that names none. */
EM_API const char *em_ggml_type_name(em_ggml_type t);
/** Elements per block (1 for plain types, 32 or 256 for quantized ones); 0 if unknown. */
EM_API int em_ggml_type_block_size(em_ggml_type t);
/** Bytes per block; 0 if unknown. */
EM_API int em_ggml_type_block_bytes(em_ggml_type t);
/** The Ember dtype that holds this type as it is (EM_Q4_K for Q4_K, EM_F32 for F32, ...);
 *  false for types Ember does not load. */
EM_API bool em_ggml_type_dtype(em_ggml_type t, em_dtype *out);

/* ---------------------------------------------------------------------------------------------
 * Opening.
 * ------------------------------------------------------------------------------------------- */
typedef struct em_gguf em_gguf;

/**
 * Maps and validates a GGUF file. NULL with an error (EM_ERR_NOT_FOUND, EM_ERR_IO,
 * EM_ERR_FORMAT, EM_ERR_OVERFLOW, EM_ERR_UNSUPPORTED for big-endian files and versions other
 * than 2 and 3, EM_ERR_OOM) naming the file, the offset and the field. Close with
 * em_gguf_free.
 */
EM_API em_gguf *em_gguf_open(em_ctx *c, const char *path);
/**
 * The same from `n` bytes in memory, not copied: `data` must stay valid until the handle is
 * closed and every tensor loaded from it is released. `name` stands for the file in messages.
 */
EM_API em_gguf *em_gguf_open_memory(em_ctx *c, const void *data, size_t n, const char *name);
/** Releases the handle (zero-copy tensors loaded from it stay valid). NULL is a no-op. */
EM_API void em_gguf_free(em_gguf *g);

/** The file's path (or the name given to em_gguf_open_memory). */
EM_API const char *em_gguf_path(const em_gguf *g);
/** Format version (2 or 3). */
EM_API uint32_t em_gguf_version(const em_gguf *g);
/** Alignment of tensor data in bytes (general.alignment, default 32). */
EM_API uint32_t em_gguf_alignment(const em_gguf *g);
/** Absolute file offset where the data section starts. */
EM_API uint64_t em_gguf_data_offset(const em_gguf *g);

/* ---------------------------------------------------------------------------------------------
 * Metadata. A value is owned by the handle; arrays may hold arrays (of any depth the file
 * has, up to 64).
 * ------------------------------------------------------------------------------------------- */
typedef struct em_gguf_value em_gguf_value;

/** Number of key/value pairs. */
EM_API int64_t em_gguf_kv_count(const em_gguf *g);
/** Key `i` (file order), NULL if out of range. */
EM_API const char *em_gguf_kv_key(const em_gguf *g, int64_t i);
/** Value `i`, NULL if out of range. */
EM_API const em_gguf_value *em_gguf_kv_value(const em_gguf *g, int64_t i);
/** The value of `key`, NULL (no error recorded) when absent. */
EM_API const em_gguf_value *em_gguf_find(const em_gguf *g, const char *key);

/** The value's type. */
EM_API em_gguf_type em_gguf_value_type(const em_gguf_value *v);
/** Any integer type (and bool) as int64; false for other types and uint64 above INT64_MAX. */
EM_API bool em_gguf_value_int(const em_gguf_value *v, int64_t *out);
/** float32 or float64 (integers too, converted); false for strings and arrays. */
EM_API bool em_gguf_value_float(const em_gguf_value *v, double *out);
/** A bool; false for other types. */
EM_API bool em_gguf_value_bool(const em_gguf_value *v, bool *out);
/** A string (NUL-terminated, may hold NUL bytes: its length goes to *len), NULL for other types. */
EM_API const char *em_gguf_value_str(const em_gguf_value *v, size_t *len);

/** An array's element type and length (EM_GGUF_TYPE_COUNT and 0 when v is not an array). */
EM_API em_gguf_type em_gguf_array_type(const em_gguf_value *v);
EM_API uint64_t em_gguf_array_len(const em_gguf_value *v);
/** Element i of an integer/bool array as int64 (false: not such an array, out of range, or a
 *  uint64 above INT64_MAX). */
EM_API bool em_gguf_array_int(const em_gguf_value *v, uint64_t i, int64_t *out);
/** Element i of a float (or integer) array as double. */
EM_API bool em_gguf_array_float(const em_gguf_value *v, uint64_t i, double *out);
/** Element i of a string array (NULL when not one or out of range). */
EM_API const char *em_gguf_array_str(const em_gguf_value *v, uint64_t i, size_t *len);
/** Element i of an array of arrays (NULL when not one or out of range). */
EM_API const em_gguf_value *em_gguf_array_array(const em_gguf_value *v, uint64_t i);

/** Shorthands: the value of `key` when present and of a fitting type, else `dflt` / NULL. */
EM_API int64_t em_gguf_get_int(const em_gguf *g, const char *key, int64_t dflt);
EM_API double em_gguf_get_float(const em_gguf *g, const char *key, double dflt);
EM_API bool em_gguf_get_bool(const em_gguf *g, const char *key, bool dflt);
EM_API const char *em_gguf_get_str(const em_gguf *g, const char *key, size_t *len);

/* ---------------------------------------------------------------------------------------------
 * Tensors.
 * ------------------------------------------------------------------------------------------- */

/** What the file says about one tensor. Plain data owned by the handle. */
typedef struct em_gguf_tensor_info {
    const char *name;
    em_ggml_type type;
    int ndim;               /* 1 to 4 (a GGUF scalar has one dimension of 1) */
    const int64_t *shape;   /* ndim sizes in Ember's order (outermost first, see above) */
    int64_t numel;
    uint64_t nbytes;        /* stored bytes: numel / block size * block bytes */
    uint64_t offset;        /* from the start of the data section, as in the file */
    uint64_t file_offset;   /* absolute; file_offset + nbytes never exceeds the file size */
} em_gguf_tensor_info;

/** Number of tensors. */
EM_API int64_t em_gguf_tensor_count(const em_gguf *g);
/** Tensor `i` (file order); NULL if out of range. */
EM_API const em_gguf_tensor_info *em_gguf_tensor_at(const em_gguf *g, int64_t i);
/** The tensor called `name`, NULL (no error recorded) when absent. */
EM_API const em_gguf_tensor_info *em_gguf_tensor_find(const em_gguf *g, const char *name);

/** The stored bytes of tensor `name` (valid until em_gguf_free); NULL with EM_ERR_NOT_FOUND. */
EM_API const void *em_gguf_data(em_ctx *c, const em_gguf *g, const char *name, size_t *nbytes);

/**
 * Tensor `name` in its own type (em_ggml_type_dtype) on `dev` (NULL: the context's default
 * device), zero-copy on the CPU. Quantized tensors can be loaded on the CPU only. Errors:
 * EM_ERR_NOT_FOUND (the message names the nearest name), EM_ERR_UNSUPPORTED (a ggml type Ember
 * does not load, named; quantized on another device), EM_ERR_OOM, device errors. The result
 * belongs to the context's innermost scope.
 */
#define em_gguf_load(c, ...) em_gguf_load_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_gguf_load_(em_ctx *c, const char *file, int line, const em_gguf *g,
                                const char *name, em_device *dev);
/**
 * Tensor `name` converted to `dtype` (f32, bf16 or f16; or its own type), dequantized as
 * gguf.quants.dequantize does (f32 results are bit-identical; bf16/f16 round that f32 to
 * nearest even). Same errors as em_gguf_load.
 */
#define em_gguf_load_as(c, ...) em_gguf_load_as_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_gguf_load_as_(em_ctx *c, const char *file, int line, const em_gguf *g,
                                   const char *name, em_dtype dtype, em_device *dev);

/* ---------------------------------------------------------------------------------------------
 * The model config.
 * ------------------------------------------------------------------------------------------- */

/**
 * The config.json transformers builds from the file's metadata (<arch>.block_count,
 * .embedding_length, .attention.head_count, ... and the tokenizer's bos/eos/pad ids), read with
 * the defaults of the family's config class (ember/config.h). general.architecture llama (with
 * <arch>.expert_count: mixtral; general.name "mistral": mistral), mistral, qwen2, qwen3,
 * qwen3moe and gemma3 (as gemma3_text). Beyond transformers, as llama.cpp reads the file: rope
 * scaling (<arch>.rope.scaling.*) and Gemma 3's attention scale. tie_word_embeddings is true
 * when the file has no output.weight. Errors: EM_ERR_UNSUPPORTED (another architecture, named),
 * the config reader's. em_model_config_load also accepts a .gguf file.
 */
EM_API em_status em_model_config_from_gguf(em_ctx *c, const em_gguf *g, em_model_config *out);

/* ---------------------------------------------------------------------------------------------
 * The tokenizer.
 * ------------------------------------------------------------------------------------------- */

/**
 * The tokenizer the file's metadata describes (tokenizer.ggml.model "gpt2" or "llama", tokens,
 * token types, merges or scores, tokenizer.ggml.pre, bos/eos/unknown/padding ids,
 * add_bos_token / add_eos_token, tokenizer.chat_template), built as transformers 5.24 builds
 * one from the same file, so ids match transformers'. tokenizer.ggml.pre selects the
 * pre-tokenizer regex where transformers has one for the name (llama-bpe / llama3, qwen2,
 * tekken, gpt-4o and their aliases); other byte-level vocabularies (gpt-2, smollm, ...) get
 * GPT-2's regex, as in transformers — llama.cpp splits digits one by one for smollm, so its
 * ids can differ on numbers. The result is independent of the handle (it may be closed).
 * Errors: EM_ERR_NOT_FOUND (no tokenizer in the file), EM_ERR_UNSUPPORTED (another
 * tokenizer.ggml.model, named), EM_ERR_FORMAT (malformed metadata, merges naming tokens not in
 * the vocabulary), EM_ERR_OOM. em_tokenizer_load also accepts a .gguf file.
 */
EM_API em_tokenizer *em_tokenizer_from_gguf(em_ctx *c, const em_gguf *g);

#ifdef __cplusplus
}
#endif
#endif

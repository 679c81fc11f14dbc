/*
 * ember/tokenizer.h — Hugging Face tokenizers (`tokenizer.json`), id for id.
 *
 * Loads a `tokenizer.json` written by the `tokenizers` library (and, when it sits next to it, a
 * `tokenizer_config.json`) and encodes text to token ids and ids back to text exactly as
 * `tokenizers` 0.23 does: the same added-token matching, normalizer, pre-tokenizer, model
 * (BPE, WordPiece, WordLevel, Unigram), post-processor and decoder.
 *
 *     em_ctx *c = em_ctx_create();
 *     em_tokenizer *tok = em_tokenizer_load(c, "models/qwen3");   // a folder or a .json file
 *     em_token *ids; size_t n;
 *     if (em_tokenizer_encode(c, tok, "Hello world", 11, true, &ids, &n) == EM_OK) {
 *         char *text = em_tokenizer_decode(c, tok, ids, n, false, NULL);
 *         ...
 *         em_free(text);
 *         em_free(ids);
 *     }
 *     em_tokenizer_free(tok);
 *
 * What is and is not done:
 *   - encode() works on one sequence. `truncation` and `padding` in tokenizer.json are read but
 *     not applied (transformers' fast tokenizers also turn them off unless a call asks for them):
 *     the caller truncates and pads.
 *   - BPE `dropout` is ignored: encoding is deterministic (dropout is a training-time option).
 *   - Unsupported components (the `UnicodeScripts` pre-tokenizer, ...) make loading fail with
 *     EM_ERR_UNSUPPORTED naming the component and the file; they are never skipped silently.
 *   - The `Precompiled` normalizer (a SentencePiece charsmap: T5, SD3's tokenizer_3, most
 *     converted SentencePiece models) is applied as `tokenizers` does, per grapheme cluster
 *     (utf8proc's UAX #29 rules, which may differ from the library's unicode-segmentation on
 *     characters newer than the installed utf8proc); a malformed charsmap fails loading with
 *     EM_ERR_FORMAT, and a trie value pointing outside its strings fails the encode with
 *     EM_ERR_FORMAT.
 *   - decode() returns what `tokenizers` returns; transformers' extra
 *     `clean_up_tokenization_spaces` pass is not applied.
 *   - Known differences, all outside what real tokenizer files do: Metaspace's prepend_scheme
 *     "first" looks at whether a split starts the input, which Ember follows through added
 *     tokens, pre-tokenizer splits and normalizers that drop leading characters, but not
 *     through a normalizer that grows the first character (Prepend, NFD...) followed by a
 *     pre-tokenizer splitting inside that growth; an added token whose normalized form is empty
 *     is never matched (the library matches it everywhere); where two normalized added tokens
 *     share a normalized form, the one with the larger id wins (the library picks either, at
 *     random).
 *
 * Errors: every function that can fail records the error in the caller's context (em_ctx) with
 * the file, the JSON path of the offending component ("pre_tokenizer.pretokenizers[1]") and what
 * was expected, and returns NULL or a status. A call made while the context already holds an
 * error fails at once without touching it (see ember/core.h).
 *
 * Threads: a loaded tokenizer is read-only apart from an internal word cache that is protected by
 * a lock; encode and decode may run concurrently on one tokenizer from several threads, each with
 * its own em_ctx.
 */
#ifndef EMBER_TOKENIZER_H
#define EMBER_TOKENIZER_H

#include "ember/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_tokenizer em_tokenizer;

/** A token id on the host: what encode returns, decode and em_generate take (ember/generate.h).
 *  Model inputs on a device are i64 tensors, made from these where the tensor is made. */
typedef int32_t em_token;

/**
 * Loads a tokenizer. `path` is either a `tokenizer.json` file or a folder holding
 * `tokenizer.json` and, optionally, `tokenizer_config.json` (special tokens, add_bos_token,
 * add_eos_token, chat_template) and `chat_template.jinja` (a chat template that overrides the one
 * in tokenizer_config.json, as transformers does). Given a file named `tokenizer.json`, the
 * `tokenizer_config.json` and `chat_template.jinja` next to it are read too; a file with another
 * name is read alone.
 * A path ending in ".gguf" is read as a GGUF file's tokenizer (em_tokenizer_from_gguf, gguf.h).
 * Returns NULL and records EM_ERR_NOT_FOUND / EM_ERR_IO (file), EM_ERR_FORMAT (malformed JSON,
 * wrong types, missing fields, merges naming tokens not in the vocabulary, ...) or
 * EM_ERR_UNSUPPORTED (a component type Ember does not implement). Free with em_tokenizer_free.
 */
EM_API em_tokenizer *em_tokenizer_load(em_ctx *c, const char *path);

/**
 * Loads a tokenizer from the bytes of a tokenizer.json held in memory (not NUL-terminated;
 * copied, so the caller keeps ownership). `name` is used in error messages (may be NULL).
 * No tokenizer_config.json is read. Errors as em_tokenizer_load.
 */
EM_API em_tokenizer *em_tokenizer_load_json(em_ctx *c, const char *json, size_t len,
                                            const char *name);

/** Frees a tokenizer and everything it owns (token strings, the chat template). NULL is a no-op. */
EM_API void em_tokenizer_free(em_tokenizer *t);

/**
 * Encodes `len` bytes of UTF-8 text (NUL bytes are ordinary characters). With
 * `add_special_tokens` the post-processor adds its special tokens (e.g. BERT's [CLS] ... [SEP],
 * Gemma's <bos>); special tokens written inside the text are always recognised, as in
 * `tokenizers`. On success stores a newly allocated array of `*n_ids` ids in `*ids` (free it
 * with em_free; for an empty result `*ids` is a valid allocation and `*n_ids` is
 * 0) and returns EM_OK. On failure `*ids` is NULL, `*n_ids` 0, and the error is recorded:
 * EM_ERR_INVALID_ARG for NULL arguments or text that is not valid UTF-8 (naming the byte
 * offset), EM_ERR_FORMAT when the model cannot represent a character and has no unknown token,
 * EM_ERR_OOM.
 */
EM_API em_status em_tokenizer_encode(em_ctx *c, const em_tokenizer *t, const char *text,
                                     size_t len, bool add_special_tokens, em_token **ids,
                                     size_t *n_ids);

/**
 * Decodes ids to text with the tokenizer's decoder. Ids that name no token are skipped (as
 * `tokenizers` does); with `skip_special_tokens` the special added tokens are skipped too.
 * Returns a newly allocated NUL-terminated UTF-8 string (free it with em_free) and
 * stores its length in bytes in `*len` when `len` is not NULL (the text may hold NUL bytes
 * when a token does). Bytes that do not form valid UTF-8 become U+FFFD, as in `tokenizers`.
 * Returns NULL and records the error for NULL arguments or when memory is exhausted.
 */
EM_API char *em_tokenizer_decode(em_ctx *c, const em_tokenizer *t, const em_token *ids, size_t n,
                                 bool skip_special_tokens, size_t *len);

/**
 * Id of a token given as `len` bytes: the added tokens first, then the model's vocabulary
 * (as `tokenizers`' token_to_id). Returns -1 when there is no such token. Never fails.
 */
EM_API em_token em_tokenizer_token_to_id(const em_tokenizer *t, const char *token, size_t len);

/**
 * The token string of an id (an added token's content, or the model's vocabulary entry), owned
 * by the tokenizer and valid until em_tokenizer_free; its length in bytes goes to `*len` when
 * `len` is not NULL. Returns NULL for an id that names no token. Never fails.
 */
EM_API const char *em_tokenizer_id_to_token(const em_tokenizer *t, em_token id, size_t *len);

/**
 * Size of the vocabulary including the added tokens, counted as `tokenizers`'
 * get_vocab_size(with_added_tokens=True): model entries plus added tokens that are not in the
 * model's vocabulary.
 */
EM_API size_t em_tokenizer_vocab_size(const em_tokenizer *t);

/** Which special token (from tokenizer_config.json) em_tokenizer_special_* asks about. */
typedef enum em_special_token {
    EM_SPECIAL_BOS = 0,  /* bos_token */
    EM_SPECIAL_EOS = 1,  /* eos_token */
    EM_SPECIAL_PAD = 2,  /* pad_token */
    EM_SPECIAL_UNK = 3,  /* unk_token (falls back to the model's unk_token) */
    EM_SPECIAL_SEP = 4,  /* sep_token */
    EM_SPECIAL_CLS = 5,  /* cls_token */
    EM_SPECIAL_MASK = 6, /* mask_token */
    EM_SPECIAL_COUNT = 7
} em_special_token;

/**
 * The string of a special token named in tokenizer_config.json (owned by the tokenizer), or NULL
 * when the config names none (or was not loaded).
 */
EM_API const char *em_tokenizer_special_token(const em_tokenizer *t, em_special_token which);

/** Id of that special token, or -1 when it is not named or not in the vocabulary. */
EM_API em_token em_tokenizer_special_id(const em_tokenizer *t, em_special_token which);

/**
 * tokenizer_config.json's add_bos_token / add_eos_token, for callers that build prompts
 * themselves (e.g. a chat template's output). false when absent. They do not change
 * em_tokenizer_encode, which follows tokenizer.json's post-processor, as `tokenizers` does.
 */
EM_API bool em_tokenizer_add_bos_token(const em_tokenizer *t);
EM_API bool em_tokenizer_add_eos_token(const em_tokenizer *t);

/**
 * The chat template (a Jinja source string) owned by the tokenizer, or NULL when there is none.
 * `name` selects one of several named templates (tokenizer_config.json may hold a list of
 * {"name", "template"}); NULL asks for the default one ("default", or the only one).
 * chat_template.jinja next to tokenizer.json, when present, is the default template.
 */
EM_API const char *em_tokenizer_chat_template(const em_tokenizer *t, const char *name);

#ifdef __cplusplus
}
#endif
#endif

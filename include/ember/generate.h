/*
 * ember/generate.h — generation and sentence embeddings on top of a loaded model: what
 * transformers' `generate` and sentence-transformers' `encode` do.
 *
 *     em_generate_params p = em_generate_default_params(model);
 *     p.max_new_tokens = 64;
 *     p.on_token = print_piece;                 // streaming
 *     em_generate_result r;
 *     const char *texts[1] = {"The capital of France is"};
 *     em_generate_text(c, model, tok, texts, 1, &p, &r);    // or em_generate_chat, em_generate
 *     ... r.text[0], r.ids[0], r.n_ids[0], em_stop_reason_name(r.stop_reason[0]) ...
 *     em_generate_result_free(&r);
 *
 * Generation: a fixed-size KV cache per batch (written in place), left padding with attention
 * masks for batches of prompts of different lengths, greedy or sampled decoding (temperature,
 * top-k, top-p, min-p, repetition penalty; seeded, reproducible), stopping on the eos ids of
 * generation_config.json, on stop strings and at max_new_tokens, and streaming of the decoded
 * text as tokens arrive.
 */
#ifndef EMBER_GENERATE_H
#define EMBER_GENERATE_H

#include "ember/model.h"
#include "ember/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Called for every new token of every sequence: `piece` is the text this token completes
 * (UTF-8, NUL-terminated, owned by em_generate and valid during the call; empty for a skipped
 * special token), `id` the token. While the text ends inside an incomplete multi-byte character
 * the call waits for the token that completes it. The pieces concatenated are the sequence's
 * text decoded with skip_special_tokens; each step decodes only the last few ids (a prefix and
 * a read offset, as text-generation servers do), not the whole sequence. Return false to stop
 * that sequence.
 */
typedef bool (*em_token_callback)(void *user_data, int seq, em_token id, const char *piece);
/**
 * The same with the piece's length in bytes: a token's text may hold NUL bytes (byte-level
 * tokenizers have a token for byte 0), which a C string cuts; write the piece with its length.
 */
typedef bool (*em_token_bytes_callback)(void *user_data, int seq, em_token id, const char *piece,
                                        size_t len);

typedef struct em_generate_params {
    int64_t max_new_tokens;       /* tokens to add at most (> 0) */
    bool do_sample;               /* false: greedy */
    double temperature;           /* > 0 */
    int64_t top_k;                /* 0: off */
    double top_p;                 /* 1: off */
    double min_p;                 /* 0: off */
    double repetition_penalty;    /* 1: off (transformers' RepetitionPenaltyLogitsProcessor) */
    uint64_t seed;                /* sampling seed */
    const em_token *eos_ids;      /* stop ids; NULL: the generation config's */
    int n_eos_ids;
    const char *const *stop_strings; /* stop when the generated text ends with one (needs a
                                        tokenizer); may be NULL */
    int n_stop_strings;
    em_token_callback on_token;   /* may be NULL */
    void *user_data;
    bool compile;                 /* run the forward as a compiled program (em_model_compile) */
    int64_t compile_bucket;       /* its KV-length bucket (<= 0: 128) */
    int compile_batch_bucket;     /* compile: run the batch rounded up to a power of two, the
                                     extra rows copies of the first, so that batch sizes share
                                     programs (1: always, -1: never, 0: on PJRT devices, where a
                                     program takes seconds to compile and is cached across calls
                                     by its text) */
    em_token_bytes_callback on_token_bytes; /* may be NULL; called with on_token, after it,
                                               with the same user_data */
} em_generate_params;

/** The checkpoint's generation_config.json values (greedy unless it says do_sample), 256 new
 *  tokens at most. */
EM_API em_generate_params em_generate_default_params(const em_model *m);

/** Why a sequence stopped. Append-only, explicit values. */
typedef enum em_stop_reason {
    EM_STOP_NONE = 0,     /* not stopped (never in a result em_generate returns) */
    EM_STOP_EOS = 1,      /* it generated one of the eos ids */
    EM_STOP_STRING = 2,   /* its text ends with one of the stop strings */
    EM_STOP_LENGTH = 3,   /* max_new_tokens were generated */
    EM_STOP_CALLBACK = 4, /* on_token returned false */
    EM_STOP_REASON_COUNT = 5
} em_stop_reason;

/** "none", "eos", "stop_string", "length", "callback"; "?" for an invalid value. */
EM_API const char *em_stop_reason_name(em_stop_reason r);

typedef struct em_generate_result {
    int batch;
    em_token **ids;      /* ids[b]: the new tokens of sequence b (not the prompt) */
    int64_t *n_ids;
    em_stop_reason *stop_reason; /* why sequence b stopped */
    double prefill_s;    /* time to the first token */
    double decode_s;     /* time for the remaining tokens */
    int64_t decoded_tokens; /* tokens produced after the first, over all sequences */
    int64_t compiles;    /* with compile: programs compiled (prefill shape + key buckets) */
    double compile_s;    /* with compile: time spent tracing and compiling (in prefill/decode) */
    int64_t prompt_tokens; /* prompt ids over all sequences (without padding) */
    char **text;         /* em_generate_text / em_generate_chat: text[b], the new tokens of
                            sequence b decoded with skip_special_tokens; NULL from em_generate */
    size_t *text_len;    /* with text: text_len[b], text[b]'s length in bytes (it may hold NUL
                            bytes, as a token's text may) */
} em_generate_result;

/** Frees what a result holds (ids, stop reasons, texts) and zeroes it. NULL is a no-op. */
EM_API void em_generate_result_free(em_generate_result *r);

/**
 * Generates continuations of `batch` prompts (token ids; prompts[b] holds lens[b] ids). The
 * tokenizer (may be NULL) is needed for stop strings and for the text passed to on_token.
 * Fills *out (free with em_generate_result_free). Errors are recorded in c.
 */
EM_API em_status em_generate(em_ctx *c, const em_model *m, const em_tokenizer *tok,
                             const em_token *const *prompts, const int64_t *lens, int batch,
                             const em_generate_params *p, em_generate_result *out);

/**
 * Generates continuations of `batch` texts, as transformers' `tokenizer(texts)` + `generate` +
 * `batch_decode(skip_special_tokens=True)` do: each text is encoded with the tokenizer's
 * special tokens, the batch runs through em_generate (left padding for different lengths), and
 * out->text[b] holds the decoded new tokens of sequence b. Streaming, stop strings and the
 * rest of em_generate's behaviour are the same. Free the result with em_generate_result_free.
 * Errors (encoding, generation) are recorded in c; *out then holds nothing.
 */
EM_API em_status em_generate_text(em_ctx *c, const em_model *m, const em_tokenizer *tok,
                                  const char *const *texts, int batch,
                                  const em_generate_params *p, em_generate_result *out);

/**
 * The same for `batch` conversations, each a JSON array of message objects ({"role": ...,
 * "content": ...}), as `apply_chat_template(messages, add_generation_prompt=True)` + generate:
 * every conversation is rendered with the tokenizer's chat template (with extra_vars_json, may
 * be NULL, see em_chat_template_apply in ember/chat.h) and encoded without adding special tokens
 * (the template writes them). out->text[b] is the answer. EM_ERR_NOT_FOUND when the tokenizer
 * has no chat template.
 */
EM_API em_status em_generate_chat(em_ctx *c, const em_model *m, const em_tokenizer *tok,
                                  const char *const *conversations, int batch,
                                  const char *extra_vars_json, const em_generate_params *p,
                                  em_generate_result *out);

/**
 * Sentence embeddings as sentence-transformers computes them for all-MiniLM-L6-v2: tokenize
 * (with special tokens, truncated to the model's max positions), encode, mean-pool over the
 * real tokens, L2-normalise. Writes n x hidden floats to out (room for n * hidden).
 */
EM_API em_status em_embed_texts(em_ctx *c, const em_model *m, const em_tokenizer *tok,
                                const char *const *texts, int n, float *out);

#ifdef __cplusplus
}
#endif
#endif

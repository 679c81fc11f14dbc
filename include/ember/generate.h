/*
 * ember/generate.h — generation and sentence embeddings on top of a loaded model: what
 * transformers' `generate` and sentence-transformers' `encode` do.
 *
 *     em_generate_params p = em_generate_default_params(model);
 *     p.max_new_tokens = 64;
 *     p.on_token = print_piece;                 // streaming
 *     em_generate_result r;
 *     em_generate(c, model, tok, prompts, lens, 1, &p, &r);
 *     ... r.ids[0], r.n_ids[0] ...
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
 * Called for every new token of every sequence: `piece` is the newly decoded text (UTF-8, may
 * be empty while a multi-byte character is incomplete), `id` the token. Return false to stop
 * that sequence.
 */
typedef bool (*em_token_callback)(void *user_data, int seq, int64_t id, const char *piece);

typedef struct em_generate_params {
    int64_t max_new_tokens;       /* tokens to add at most (> 0) */
    bool do_sample;               /* false: greedy */
    double temperature;           /* > 0 */
    int64_t top_k;                /* 0: off */
    double top_p;                 /* 1: off */
    double min_p;                 /* 0: off */
    double repetition_penalty;    /* 1: off (transformers' RepetitionPenaltyLogitsProcessor) */
    uint64_t seed;                /* sampling seed */
    const int64_t *eos_ids;       /* stop ids; NULL: the generation config's */
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
} em_generate_params;

/** The checkpoint's generation_config.json values (greedy unless it says do_sample), 256 new
 *  tokens at most. */
EM_API em_generate_params em_generate_default_params(const em_model *m);

typedef struct em_generate_result {
    int batch;
    int64_t **ids;       /* ids[b]: the new tokens of sequence b (not the prompt) */
    int64_t *n_ids;
    char **stop_reason;  /* "eos", "stop_string", "length", "callback" */
    double prefill_s;    /* time to the first token */
    double decode_s;     /* time for the remaining tokens */
    int64_t decoded_tokens; /* tokens produced after the first, over all sequences */
    int64_t compiles;    /* with compile: programs compiled (prefill shape + key buckets) */
    double compile_s;    /* with compile: time spent tracing and compiling (in prefill/decode) */
} em_generate_result;

EM_API void em_generate_result_free(em_generate_result *r);

/**
 * Generates continuations of `batch` prompts (token ids; prompts[b] holds lens[b] ids). The
 * tokenizer (may be NULL) is needed for stop strings and for the text passed to on_token.
 * Fills *out (free with em_generate_result_free). Errors are recorded in c.
 */
EM_API em_status em_generate(em_ctx *c, const em_model *m, const em_tokenizer *tok,
                             const int64_t *const *prompts, const int64_t *lens, int batch,
                             const em_generate_params *p, em_generate_result *out);

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

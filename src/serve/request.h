/* The JSON bodies of the OpenAI endpoints, parsed and checked into a plain struct (no model, no
 * tokenizer, no HTTP: the part of the server a fuzzer can drive on its own). */
#ifndef EMBER_SERVE_REQUEST_H
#define EMBER_SERVE_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SRV_MAX_STOP 4 /* OpenAI's limit on `stop` strings */
#define SRV_MAX_N 128  /* OpenAI's limit on `n`, the choices of one request */

typedef enum srv_kind {
    SRV_CHAT,
    SRV_COMPLETION,
    SRV_TOKENIZE,
    SRV_DETOKENIZE,
    SRV_EMBEDDINGS
} srv_kind;

#define SRV_MAX_INPUTS 2048 /* OpenAI's limit on the texts of one embeddings request */

typedef struct srv_request {
    srv_kind kind;
    char *model;         /* as requested (NULL: not given) */
    char *messages_json; /* chat, and tokenize with messages: [{"role","content"}...], every
                            content a string (text parts joined) */
    char *prompt;        /* completions, tokenize with prompt */
    int32_t *tokens;     /* detokenize */
    size_t n_tokens;
    int64_t max_tokens;  /* -1: not given */
    bool has_temperature, has_top_p, has_top_k, has_seed;
    double temperature, top_p;
    double presence_penalty, frequency_penalty; /* OpenAI's, over the generated tokens (0: off) */
    int n;               /* choices (1-128), each a sequence of its own */
    int logprobs;        /* -1: not asked; else alternatives per token (chat 0-20, completions 0-5) */
    int64_t top_k;
    uint64_t seed;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    bool stream, include_usage;
    bool json_object;    /* response_format {"type": "json_object"}: the answer is one JSON object */
    bool add_special_tokens; /* tokenize: default true for a prompt, false for messages */
    char **inputs;           /* embeddings: the texts */
    size_t n_inputs;
    bool base64;             /* embeddings: encoding_format "base64" (little-endian f32) */
} srv_request;

/* An OpenAI-style error: HTTP status, "type", the offending parameter (may be empty). */
typedef struct srv_error {
    int http;
    const char *type;
    char param[40];
    char message[300];
} srv_error;

/* Parses `n` bytes of `body` (not NUL-terminated) as a request of `kind`. true and *out filled
 * (free with srv_request_free), or false with *err set (400 for malformed JSON, wrong types,
 * out-of-range values and unsupported options) and *out empty. */
bool srv_request_parse(const char *body, size_t n, srv_kind kind, srv_request *out,
                       srv_error *err);
void srv_request_free(srv_request *r);

/* Sets *err (message formatted). Returns false, for `return srv_fail(...)`. */
bool srv_fail(srv_error *err, int http, const char *type, const char *param, const char *fmt,
              ...) __attribute__((format(printf, 5, 6)));

#endif

/*
 * ember/server.h — an OpenAI-compatible HTTP server over a loaded language model, with
 * continuous batching: what `vllm serve` and llama.cpp's `llama-server` offer, embeddable.
 *
 *     em_server_options o = em_server_default_options();
 *     o.model = "Qwen/Qwen3-0.6B";                     // Hub id, folder or .gguf file
 *     o.port = 8080;
 *     em_server *s = em_server_create(c, &o);          // checks the options, binds nothing
 *     if (s && em_server_start(c, s) == EM_OK          // binds, loads the model in the background
 *         && em_server_wait_ready(c, s) == EM_OK) {    // /health answers 503 until then
 *         ... serve until asked to stop ...
 *     }
 *     em_server_stop(s, 30.0);                         // drains: finishes running requests
 *     em_server_free(s);
 *
 * Endpoints: GET /health, GET /v1/models, POST /v1/chat/completions, POST /v1/completions
 * (non-streaming, or server-sent events with "stream": true), POST /tokenize, POST /detokenize,
 * GET /metrics (Prometheus text, vLLM's metric names); for an encoder model (BERT family)
 * POST /v1/embeddings instead of the two generation endpoints. docs/serve.md describes the requests,
 * the parameters, the limits and what is not supported yet.
 *
 * One worker thread owns the model and its KV cache and runs the decode steps; requests join
 * the running batch and leave it between steps. The HTTP layer is libmicrohttpd: a build
 * without it has these functions, and em_server_create fails with EM_ERR_UNSUPPORTED.
 */
#ifndef EMBER_SERVER_H
#define EMBER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_server em_server;

typedef struct em_server_options {
    const char *model;       /* Hub id, Hub@rev, local folder or .gguf file (required) */
    const char *model_name;  /* the id /v1/models lists and requests name (NULL: `model`) */
    const char *device;      /* the model's device (NULL: the CPU) */
    const char *host;        /* address to bind ("127.0.0.1", the default; "0.0.0.0", "::") */
    int port;                /* TCP port; 0 picks a free one (em_server_port tells which) */
    const char *api_key;     /* when set, every endpoint but /health needs
                                "Authorization: Bearer <api_key>" (401 otherwise) */
    bool insecure_public;    /* allow a non-loopback host without an api_key */
    int max_batch;           /* sequences decoded together in one step (KV-cache rows), >= 1 */
    int parallel;            /* requests held at once, running and waiting; beyond: 429 */
    int64_t ctx;             /* positions per sequence, prompt + new tokens (0: the model's
                                max_position_embeddings, at most 4096) */
    size_t max_body_bytes;   /* larger request bodies get 413 */
    int64_t prefill_chunk;   /* tokens per prefill forward, one between two decode steps, so
                                running streams wait one chunk, not whole prompts: the waiting
                                prompts that fit it together (padding included) are prefilled as
                                one batch, a longer prompt alone in chunks of this many tokens
                                (0: whole prompts, all the waiting ones in one batch) */
    int prefix_cache;        /* the keys and values of this many recent prompts are kept; a new
                                prompt that starts with the same tokens (a shared system prompt,
                                a conversation's earlier turns) copies that prefix instead of
                                computing it; least recently used out first (0: no reuse) */
    int kv_block;            /* positions per block of the paged KV cache (blocks taken as
                                sequences grow, freed when they end, a reused prefix's blocks
                                shared); 0: the dense cache of max_batch x ctx positions (also
                                used where the paged one is not: a model split over devices) */
    int64_t kv_blocks;       /* the paged cache's budget in blocks (vLLM's
                                --num-gpu-blocks-override); 0: room for every row and kept prompt
                                at ctx, so the pool never runs out. When the pool runs out, kept
                                prompts are evicted, then the most recently admitted sequence is
                                preempted and later recomputed; a budget below one sequence of ctx
                                positions fails the load. Ignored by the dense cache */
    int64_t kv_memory;       /* the same budget in bytes of keys and values (vLLM's
                                --kv-cache-memory-bytes), rounded down to whole blocks; at most one
                                of kv_blocks and kv_memory (else em_server_create fails) */
    bool compile;            /* decode steps run as compiled programs (ember/compile.h), one per
                                batch bucket (1, 2, 4, ... max_batch rows; padding rows ignored)
                                and key-length bucket (compile_bucket positions), so requests
                                joining and leaving do not recompile once a pair was seen. Over
                                the paged cache the key bucket is the block tables' width; with
                                kv_block 0 over the dense cache. Prefill stays eager.
                                A model compile mode does not take fails the load by name */
    int compile_bucket;      /* key-length bucket of compile mode, in positions (0: 128) */
    bool quiet;              /* no log lines on stderr */
} em_server_options;

/** host 127.0.0.1, port 8080, max_batch 8, parallel 64, ctx 0 (the model's, <= 4096), bodies up
 *  to 1 MiB, prefill chunks of 64 tokens, 4 prompts kept for prefix reuse, KV blocks of 16
 *  positions sized for the worst case (no KV budget), compile mode off (key bucket 128 when on),
 *  no API key, logging on. */
EM_API em_server_options em_server_default_options(void);

/**
 * Checks the options and makes a server (nothing is bound or loaded yet). The strings of `o`
 * are copied. NULL with the error recorded in c: EM_ERR_INVALID_ARG for a missing model, a bad
 * port, max_batch or parallel below 1, a negative or double KV budget (kv_blocks and
 * kv_memory both set), or a non-loopback host without api_key or insecure_public; EM_ERR_UNSUPPORTED in a build without libmicrohttpd. Free with
 * em_server_free.
 */
EM_API em_server *em_server_create(em_ctx *c, const em_server_options *o);

/**
 * Binds the address and starts the HTTP threads and the worker, which loads the model (GET
 * /health answers 503 until it is loaded). Returns once the socket listens: EM_OK, or
 * EM_ERR_IO (address in use, not permitted) recorded in c. A server is started at most once.
 */
EM_API em_status em_server_start(em_ctx *c, em_server *s);

/**
 * Waits until the model is loaded: EM_OK, or the load's error copied into c (the server then
 * answers every model request with 503 and should be stopped).
 */
EM_API em_status em_server_wait_ready(em_ctx *c, em_server *s);

/** The TCP port the server listens on (after em_server_start; 0 before). */
EM_API int em_server_port(const em_server *s);

/**
 * Stops the server: new requests get 503, running and waiting ones may finish for up to
 * `drain_s` seconds (<= 0: none), then the remaining ones end with finish_reason "abort" and the
 * threads are joined. Returns the number of requests cut short. Safe on a server that was not
 * started; NULL is a no-op (0).
 */
EM_API int em_server_stop(em_server *s, double drain_s);

/** Stops the server (without draining) if it runs, and frees it. NULL is a no-op. */
EM_API void em_server_free(em_server *s);

#ifdef __cplusplus
}
#endif
#endif

/* The server's shared state: the jobs HTTP threads hand to the worker, and the counters
 * /metrics reads. One mutex (srv->mu) guards everything here that two threads touch. */
#ifndef EMBER_SERVE_IMPL_H
#define EMBER_SERVE_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "ember/generate.h"
#include "ember/server.h"
#include "serve/request.h"

#define SRV_MAX_TOP_LOGPROBS 20 /* OpenAI's limit on top_logprobs */

/* One generated token's log-probability under the model (log-softmax of its raw logits) and the
 * most likely alternatives, best first. */
typedef struct srv_logprob {
    int32_t id;
    float lp;
    int n_top;
    int32_t top_id[SRV_MAX_TOP_LOGPROBS];
    float top_lp[SRV_MAX_TOP_LOGPROBS];
} srv_logprob;

/* One generation request. Owned by its references (the HTTP thread that made it, the worker
 * while it queues or runs); the last srv_job_release frees it. */
typedef struct srv_job {
    int refs;                  /* under mu */
    struct srv_job *next;      /* the waiting queue (under mu) */
    /* set by the HTTP thread before submitting, then read-only */
    bool chat, stream, include_usage;
    em_token *prompt;          /* the prompt's ids (n_prompt) */
    int64_t n_prompt, max_tokens;
    em_generate_params gp;     /* sampling (do_sample, temperature, top-k/p, min-p, penalty) */
    float presence, frequency; /* OpenAI's penalties on the logits of generated tokens */
    int logprobs;              /* -1: none; else how many alternatives per token (0-20) */
    bool json_object;          /* JSON mode: only tokens that keep the answer a JSON object */
    uint64_t seed;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    char id[48];
    int64_t created;
    double t_submit;
    /* written by the worker, read by the HTTP thread (under mu) */
    char *text;                /* the answer so far, past stop strings never (NUL-terminated) */
    size_t text_len, text_cap;
    int64_t completion_tokens;
    srv_logprob *lp;           /* per generated token when logprobs >= 0 (n_lp of them) */
    int64_t n_lp, cap_lp;
    bool done;
    const char *finish_reason; /* "stop", "length", "abort" once done */
    char error[256];           /* a failure inside the worker (done, finish_reason "abort") */
    double t_first, t_last;
    /* written by the HTTP thread */
    bool cancelled;            /* the client went away: the worker drops it at the next step */
    /* the worker's alone: a request preempted to free KV blocks waits again with its row's
     * state (sampler, detokenizer, text sent) and the ids to recompute on re-admission (the
     * prompt and the generated tokens but the last, which the next decode step feeds) */
    struct srv_row *resume;
    em_token *resume_ids;
    int64_t n_resume;
} srv_job;

typedef struct srv_hist {
    const double *bounds;
    int n;
    int64_t counts[24];        /* cumulative per bound are computed when printed */
    int64_t count;
    double sum;
} srv_hist;

struct em_server {
    em_server_options o;       /* strings below are copies */
    char *model_arg, *model_name, *device, *host, *api_key;
    /* the model, loaded by the worker; set once, then read-only */
    em_model *model;
    em_tokenizer *tok;
    bool encoder;              /* an encoder model: /v1/embeddings only, no generation */
    int64_t ctx;
    char load_error[512];
    /* threads */
    pthread_mutex_t mu;
    pthread_cond_t cv;         /* the worker waits for jobs; HTTP threads wait for output */
    pthread_t worker;
    bool worker_started, loaded, load_failed, stopping, abort_all;
    void *daemon;              /* struct MHD_Daemon */
    int port;
    /* the queue and the counters (under mu) */
    srv_job *queue_head, *queue_tail;
    int n_waiting, n_running, n_held;
    int64_t kv_used, kv_total;
    int64_t kv_blocks_used, kv_blocks_total; /* paged: blocks any sequence holds (kept prompts
                                                 included), blocks of the pool */
    int64_t preemptions;       /* running sequences preempted (recomputed later) for KV blocks */
    int64_t prompt_tokens, generation_tokens, ok_stop, ok_length, ok_abort;
    int64_t http_errors;
    int64_t kv_shifts;         /* whole-cache copies to make room (scheduler.c) */
    int64_t prefill_chunks;    /* prompt chunks prefilled between decode steps */
    int64_t prefill_batches, prefill_batch_prompts; /* prompt groups prefilled together, prompts
                                                       in them */
    int64_t prefix_queries, prefix_hits; /* prompt tokens looked up / found in the prefix cache */
    int64_t compiles, compiled_programs; /* --compile: traces + compilations, programs held */
    int64_t prefill_compiles, prefill_programs; /* the same of the prefill chunks' programs */
    double compile_ms;         /* time spent compiling */
    srv_hist ttft, itl, e2e;
    uint64_t next_id;
};

/* logprobs.c: the `top` most likely ids of a row of raw logits into out->top_* (best first);
 * returns log(sum(exp(logits))), the normaliser of every log-probability of the row. */
float srv_logprob_top(const float *logits, int64_t vocab, int top, srv_logprob *out);
/* OpenAI's logprobs objects for tokens [from, to) of a job: chat's {"content": [...]}, or the
 * completions' {"tokens", "token_logprobs", "top_logprobs", "text_offset"} with offsets counted
 * from *offset (advanced). NULL when out of memory. */
json_t *srv_logprobs_json(em_server *s, const srv_job *j, int64_t from, int64_t to,
                          size_t *offset);

double srv_now(void);
void srv_job_release(em_server *s, srv_job *j);
/* Queues the n jobs of one request (its choices) for the worker, all at once, so that they are
 * prefilled as one group (takes a reference to each); all or nothing: false (429 / 503 in err),
 * none queued, when the server would hold more than `parallel` requests or is stopping. */
bool srv_submit(em_server *s, srv_job **jobs, int n, srv_error *err);
/* The worker thread: loads the model, then runs steps until stopped. */
void *srv_worker_main(void *arg);
/* metrics.c: a histogram of latencies in seconds (vLLM's bucket bounds), and the /metrics text
 * (*buf malloc'd, *len bytes; false when out of memory). */
void srv_hist_init(srv_hist *h);
void srv_hist_add(srv_hist *h, double v);
bool srv_metrics_text(em_server *s, char **buf, size_t *len);

#endif

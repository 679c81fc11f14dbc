/*
 * The HTTP face of the server on libmicrohttpd: one thread per connection (a connection thread
 * may block while its request waits for tokens), routing, API keys, OpenAI's response and
 * error JSON, server-sent events, /metrics, and the em_server_* lifecycle.
 */
#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ember/chat.h"
#include "ember/ember.h"
#include "serve/serve_impl.h"

/* ---- small helpers ---- */

static char *xstrdup(const char *s) { return s ? strdup(s) : NULL; }

/* Queues a response whose body is buf (len bytes, malloc'd; taken); MHD_NO when it fails. */
static enum MHD_Result reply_buffer(struct MHD_Connection *conn, unsigned status, char *buf,
                                    size_t len, const char *content_type) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(buf);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", content_type);
    enum MHD_Result ok = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ok;
}

/* Queues a response with a JSON body (takes `body`, a jansson object); MHD_NO when it fails. */
static enum MHD_Result reply_json(struct MHD_Connection *conn, unsigned status, json_t *body) {
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    return text ? reply_buffer(conn, status, text, strlen(text), "application/json") : MHD_NO;
}

static enum MHD_Result reply_error(em_server *s, struct MHD_Connection *conn,
                                   const srv_error *e, const char *code) {
    pthread_mutex_lock(&s->mu);
    s->http_errors++;
    pthread_mutex_unlock(&s->mu);
    json_t *err = json_pack("{s:s, s:s, s:o, s:o}", "message", e->message, "type",
                            e->type ? e->type : "invalid_request_error", "param",
                            e->param[0] ? json_string(e->param) : json_null(), "code",
                            code ? json_string(code) : json_null());
    return reply_json(conn, (unsigned)e->http, json_pack("{s:o}", "error", err));
}

static enum MHD_Result fail(em_server *s, struct MHD_Connection *conn, int http,
                            const char *type, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static enum MHD_Result fail(em_server *s, struct MHD_Connection *conn, int http,
                            const char *type, const char *code, const char *fmt, ...) {
    srv_error e;
    memset(&e, 0, sizeof e);
    e.http = http;
    e.type = type;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    return reply_error(s, conn, &e, code);
}

/* Whether the peer closed its side (a disconnected client). */
static bool peer_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static int conn_fd(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* Waits (mu held) for the worker's next broadcast or 50 ms. */
static void wait_a_little(em_server *s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

/* ---- generation requests ---- */

/* The job for a parsed request: its prompt tokenized (chat: rendered with the template first),
 * its sampling parameters, its limits. NULL with *err set. */
static srv_job *make_job(em_server *s, const srv_request *q, srv_error *err) {
    em_ctx *c = em_ctx_create();
    srv_job *j = calloc(1, sizeof *j);
    char *text = NULL;
    em_token *ids = NULL;
    size_t n = 0;
    if (!c || !j) {
        srv_fail(err, 500, "server_error", "", "out of memory");
        goto fail;
    }
    text = q->kind == SRV_CHAT ? em_chat_template_apply(c, s->tok, q->messages_json, true, NULL)
                               : xstrdup(q->prompt);
    if (!text) {
        srv_fail(err, q->kind == SRV_CHAT ? 400 : 500, "invalid_request_error",
                 q->kind == SRV_CHAT ? "messages" : "", "%s",
                 em_ctx_error(c) ? em_ctx_error(c)->message : "out of memory");
        goto fail;
    }
    /* a rendered conversation holds its special tokens already (as em_generate_chat) */
    if (em_tokenizer_encode(c, s->tok, text, strlen(text), q->kind != SRV_CHAT, &ids, &n)) {
        srv_fail(err, 400, "invalid_request_error", q->kind == SRV_CHAT ? "messages" : "prompt",
                 "%s", em_ctx_error(c)->message);
        goto fail;
    }
    if (n == 0) {
        srv_fail(err, 400, "invalid_request_error", "prompt", "the prompt has no tokens");
        goto fail;
    }
    int64_t vocab = em_model_config_get(s->model)->vocab_size;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab) {
            srv_fail(err, 400, "invalid_request_error", "prompt",
                     "the prompt's token %d lies outside the model's vocabulary (%lld)", ids[i],
                     (long long)vocab);
            goto fail;
        }
    int64_t room = s->ctx - (int64_t)n;
    if (room < 1 || (q->max_tokens > 0 && q->max_tokens > room)) {
        srv_fail(err, 400, "invalid_request_error", q->max_tokens > 0 ? "max_tokens" : "prompt",
                 "this model's context holds %lld tokens; the prompt has %zu and %lld new tokens "
                 "were asked for", (long long)s->ctx, n,
                 (long long)(q->max_tokens > 0 ? q->max_tokens : 1));
        goto fail;
    }
    j->chat = q->kind == SRV_CHAT;
    j->stream = q->stream;
    j->include_usage = q->include_usage;
    j->prompt = ids;
    ids = NULL;
    j->n_prompt = (int64_t)n;
    j->max_tokens = q->max_tokens > 0 ? q->max_tokens : room;
    /* the checkpoint's generation config, then what the request says */
    j->gp = em_generate_default_params(s->model);
    if (q->has_temperature) {
        j->gp.do_sample = q->temperature > 0;
        if (q->temperature > 0) j->gp.temperature = q->temperature;
    } else if (q->has_top_p || q->has_top_k) {
        j->gp.do_sample = true;
    }
    if (q->has_top_p) j->gp.top_p = q->top_p;
    j->logprobs = q->logprobs;
    j->presence = (float)q->presence_penalty;
    j->frequency = (float)q->frequency_penalty;
    j->json_object = q->json_object;
    if (q->has_top_k) j->gp.top_k = q->top_k;
    for (int k = 0; k < q->n_stop; k++) {
        if (!(j->stop[k] = strdup(q->stop[k]))) {
            srv_fail(err, 500, "server_error", "", "out of memory");
            goto fail;
        }
        j->n_stop = k + 1;
    }
    pthread_mutex_lock(&s->mu);
    uint64_t serial = ++s->next_id;
    pthread_mutex_unlock(&s->mu);
    j->seed = q->has_seed ? q->seed : (uint64_t)time(NULL) * 1000003u + serial;
    snprintf(j->id, sizeof j->id, "%s-%08llx%08llx", j->chat ? "chatcmpl" : "cmpl",
             (unsigned long long)time(NULL), (unsigned long long)serial);
    j->created = (int64_t)time(NULL);
    j->t_submit = srv_now();
    j->refs = 1;
    em_free(text);
    em_ctx_free(c);
    return j;
fail:
    em_free(text);
    em_free(ids);
    if (j) {
        free(j->prompt);
        for (int k = 0; k < j->n_stop; k++) free(j->stop[k]);
        free(j);
    }
    em_ctx_free(c);
    return NULL;
}

/* usage of a response of n choices: the prompt once, the completions summed (as OpenAI) */
static json_t *usage_json(srv_job *const *jobs, int n) {
    int64_t done = 0;
    for (int i = 0; i < n; i++) done += jobs[i]->completion_tokens;
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)jobs[0]->n_prompt,
                     "completion_tokens", (json_int_t)done, "total_tokens",
                     (json_int_t)(jobs[0]->n_prompt + done));
}

static char *sse_event(json_t *o) {
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    char *ev = body ? malloc(strlen(body) + 9) : NULL;
    if (ev) sprintf(ev, "data: %s\n\n", body);
    free(body);
    return ev;
}

/* A streamed chunk of choice `index`: `text` new (may be NULL: none), finish reason (NULL: not
 * yet), `first` (the chat role chunk), logprobs (taken; NULL: none). As "data: {...}\n\n". */
static char *chunk(em_server *s, const srv_job *j, int index, const char *text, size_t n,
                   const char *finish, bool first, json_t *lp) {
    json_t *choice;
    if (j->chat) {
        json_t *delta = json_object();
        if (first) {
            json_object_set_new(delta, "role", json_string("assistant"));
            json_object_set_new(delta, "content", json_string(""));
        }
        if (text && n) json_object_set_new(delta, "content", json_stringn(text, n));
        choice = json_pack("{s:i, s:o, s:o, s:o}", "index", index, "delta", delta, "logprobs",
                           lp ? lp : json_null(), "finish_reason",
                           finish ? json_string(finish) : json_null());
    } else {
        choice = json_pack("{s:i, s:s%, s:o, s:o}", "index", index, "text", text ? text : "",
                           text ? n : 0, "logprobs", lp ? lp : json_null(), "finish_reason",
                           finish ? json_string(finish) : json_null());
    }
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", j->id, "object",
                          j->chat ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)j->created, "model", s->model_name, "choices", choice);
    if (o && j->include_usage) json_object_set_new(o, "usage", json_null());
    return sse_event(o);
}

/* What one choice of a streamed response has sent. */
typedef struct srv_choice {
    srv_job *j;
    size_t sent_text;   /* bytes of j->text sent */
    int64_t sent_lp;    /* logprob entries sent */
    size_t lp_offset;   /* completions' text_offset of the next entry */
    bool sent_first, sent_finish;
} srv_choice;

/* The state of one streamed response: its n choices, each a job of its own. */
typedef struct srv_stream {
    em_server *s;
    srv_choice *ch;
    srv_job **jobs;
    int n, next;        /* next: the choice to look at first (round robin) */
    int fd;
    bool sent_usage, sent_done;
    char *pending;      /* an event not yet copied out in full */
    size_t pending_len, pending_off;
} srv_stream;

static bool choice_ready(const srv_choice *c) {
    return !c->sent_first || (!c->sent_finish && (c->j->text_len > c->sent_text || c->j->done));
}

/* The next event of choice i, or NULL when it has none now. mu held. */
static char *choice_event(srv_stream *st, int i) {
    srv_choice *c = &st->ch[i];
    srv_job *j = c->j;
    em_server *s = st->s;
    if (!c->sent_first) {
        c->sent_first = true;
        if (j->chat) return chunk(s, j, i, NULL, 0, NULL, true, NULL);
    }
    if (c->sent_finish || !(j->text_len > c->sent_text || j->done)) return NULL;
    const char *t = j->text ? j->text + c->sent_text : NULL;
    size_t n = j->text_len - c->sent_text;
    c->sent_text = j->text_len;
    if (j->done && !strcmp(j->finish_reason, "abort") && j->error[0]) {
        c->sent_finish = true;
        return sse_event(json_pack("{s:{s:s, s:s, s:n, s:n}}", "error", "message", j->error,
                                   "type", "server_error", "param", "code"));
    }
    if (j->done) c->sent_finish = true;
    json_t *lp = NULL;
    if (j->logprobs >= 0 && j->n_lp > c->sent_lp) {
        lp = srv_logprobs_json(s, j, c->sent_lp, j->n_lp, &c->lp_offset);
        c->sent_lp = j->n_lp;
    }
    return chunk(s, j, i, t, n, j->done ? j->finish_reason : NULL, false, lp);
}

/* The next event to send, or NULL at the end. mu held. */
static char *next_event(srv_stream *st) {
    for (int k = 0; k < st->n; k++) {
        int i = (st->next + k) % st->n;
        if (!choice_ready(&st->ch[i])) continue;
        char *ev = choice_event(st, i);
        if (ev) {
            st->next = (i + 1) % st->n;
            return ev;
        }
    }
    bool finished = true;
    for (int i = 0; i < st->n; i++) finished &= st->ch[i].sent_finish;
    if (!finished) return NULL;
    srv_job *j = st->jobs[0];
    if (j->include_usage && !st->sent_usage) {
        st->sent_usage = true;
        json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", j->id, "object",
                              j->chat ? "chat.completion.chunk" : "text_completion", "created",
                              (json_int_t)j->created, "model", st->s->model_name, "choices",
                              "usage", usage_json(st->jobs, st->n));
        return sse_event(o);
    }
    if (!st->sent_done) {
        st->sent_done = true;
        return strdup("data: [DONE]\n\n");
    }
    return NULL;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    srv_stream *st = cls;
    em_server *s = st->s;
    if (!st->pending) {
        pthread_mutex_lock(&s->mu);
        for (;;) {
            bool ready = false, finished = true;
            for (int i = 0; i < st->n; i++) {
                ready |= choice_ready(&st->ch[i]);
                finished &= st->ch[i].sent_finish;
            }
            if (ready || finished) {
                st->pending = next_event(st);
                if (st->pending || finished) break;
            }
            if (peer_gone(st->fd)) break;
            wait_a_little(s);
        }
        pthread_mutex_unlock(&s->mu);
        if (!st->pending) return st->sent_done ? MHD_CONTENT_READER_END_OF_STREAM
                                               : MHD_CONTENT_READER_END_WITH_ERROR;
        st->pending_len = strlen(st->pending);
        st->pending_off = 0;
    }
    size_t n = st->pending_len - st->pending_off;
    if (n > max) n = max;
    memcpy(buf, st->pending + st->pending_off, n);
    st->pending_off += n;
    if (st->pending_off == st->pending_len) {
        free(st->pending);
        st->pending = NULL;
    }
    return (ssize_t)n;
}

/* Cancels the jobs still running (their client went away) and drops the references. */
static void release_jobs(em_server *s, srv_job **jobs, int n, bool cancel) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; cancel && i < n; i++)
        if (jobs[i] && !jobs[i]->done) jobs[i]->cancelled = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++) srv_job_release(s, jobs[i]);
}

/* The response is gone (sent, or the connection closed): jobs still running are cancelled. */
static void stream_free(void *cls) {
    srv_stream *st = cls;
    release_jobs(st->s, st->jobs, st->n, true);
    free(st->jobs);
    free(st->ch);
    free(st->pending);
    free(st);
}

/* A copy of job j for another choice: its own prompt copy, stop strings and seed. */
static srv_job *clone_job(const srv_job *j, uint64_t seed) {
    srv_job *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    *k = *j;
    k->next = NULL;
    k->text = NULL;
    k->text_len = k->text_cap = 0;
    k->lp = NULL;
    k->n_lp = k->cap_lp = 0;
    k->n_stop = 0;
    k->refs = 1;
    k->seed = seed;
    k->prompt = malloc((size_t)j->n_prompt * sizeof *k->prompt);
    bool ok = k->prompt != NULL;
    if (ok) memcpy(k->prompt, j->prompt, (size_t)j->n_prompt * sizeof *k->prompt);
    for (int i = 0; ok && i < j->n_stop; i++) {
        ok = (k->stop[i] = strdup(j->stop[i])) != NULL;
        if (ok) k->n_stop = i + 1;
    }
    if (!ok) {
        free(k->prompt);
        for (int i = 0; i < k->n_stop; i++) free(k->stop[i]);
        free(k);
        return NULL;
    }
    return k;
}

static enum MHD_Result generate(em_server *s, struct MHD_Connection *conn, const srv_request *q) {
    srv_error err;
    memset(&err, 0, sizeof err);
    srv_job *j = make_job(s, q, &err);
    if (!j) return reply_error(s, conn, &err, err.http == 400 && !strcmp(err.param, "max_tokens")
                                                  ? "context_length_exceeded" : NULL);
    int n = q->n > 1 ? q->n : 1;
    srv_job **jobs = calloc((size_t)n, sizeof *jobs);
    if (!jobs) {
        srv_job_release(s, j);
        return fail(s, conn, 500, "server_error", NULL, "out of memory");
    }
    jobs[0] = j;
    /* choices after the first draw from seeds of their own (the same answer under greedy) */
    for (int i = 1; i < n; i++)
        if (!(jobs[i] = clone_job(j, j->seed + 0x9e3779b97f4a7c15ull * (uint64_t)i))) {
            release_jobs(s, jobs, i, false);
            free(jobs);
            return fail(s, conn, 500, "server_error", NULL, "out of memory");
        }
    if (!srv_submit(s, jobs, n, &err)) { /* all or nothing: none was queued */
        release_jobs(s, jobs, n, false);
        free(jobs);
        return reply_error(s, conn, &err, NULL);
    }
    int fd = conn_fd(conn);
    if (j->stream) {
        srv_stream *st = calloc(1, sizeof *st);
        srv_choice *ch = calloc((size_t)n, sizeof *ch);
        struct MHD_Response *r =
            st && ch ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read,
                                                         st, stream_free)
                     : NULL;
        if (!r) {
            free(st);
            free(ch);
            release_jobs(s, jobs, n, true);
            free(jobs);
            return MHD_NO;
        }
        st->s = s;
        st->jobs = jobs; /* the stream owns the HTTP thread's references now */
        st->ch = ch;
        st->n = n;
        st->fd = fd;
        for (int i = 0; i < n; i++) {
            ch[i].j = jobs[i];
            ch[i].sent_first = !j->chat; /* completions have no role chunk */
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result ok = MHD_queue_response(conn, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return ok;
    }
    pthread_mutex_lock(&s->mu);
    bool gone = false, all_done = false;
    while (!all_done && !(gone = peer_gone(fd))) {
        all_done = true;
        for (int i = 0; i < n; i++) all_done &= jobs[i]->done;
        if (!all_done) wait_a_little(s);
    }
    pthread_mutex_unlock(&s->mu);
    if (gone) {
        release_jobs(s, jobs, n, true);
        free(jobs);
        return MHD_NO;
    }
    enum MHD_Result ok;
    const srv_job *aborted = NULL;
    for (int i = 0; i < n && !aborted; i++)
        if (!strcmp(jobs[i]->finish_reason, "abort")) aborted = jobs[i];
    if (aborted) {
        pthread_mutex_lock(&s->mu);
        bool stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        ok = fail(s, conn, stopping ? 503 : 500, "server_error", NULL, "%s",
                  aborted->error[0] ? aborted->error : "the request was aborted");
    } else {
        json_t *choices = json_array();
        for (int i = 0; i < n; i++) {
            const srv_job *k = jobs[i];
            /* the text may hold NUL characters (a token can decode to one) */
            const char *t = k->text ? k->text : "";
            size_t offset = 0;
            json_t *lp = k->logprobs >= 0 ? srv_logprobs_json(s, k, 0, k->n_lp, &offset) : NULL;
            json_array_append_new(
                choices,
                k->chat ? json_pack("{s:i, s:{s:s, s:s%}, s:o, s:s}", "index", i, "message",
                                    "role", "assistant", "content", t, k->text_len, "logprobs",
                                    lp ? lp : json_null(), "finish_reason", k->finish_reason)
                        : json_pack("{s:i, s:s%, s:o, s:s}", "index", i, "text", t, k->text_len,
                                    "logprobs", lp ? lp : json_null(), "finish_reason",
                                    k->finish_reason));
        }
        ok = reply_json(conn, MHD_HTTP_OK,
                        json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", j->id, "object",
                                  j->chat ? "chat.completion" : "text_completion", "created",
                                  (json_int_t)j->created, "model", s->model_name, "choices",
                                  choices, "usage", usage_json(jobs, n)));
    }
    release_jobs(s, jobs, n, false);
    free(jobs);
    return ok;
}

/* ---- embeddings ---- */

/* Standard base64 of n bytes (no library among Ember's dependencies offers one; the OpenAI
 * client asks for base64 by default). Returns a malloc'd NUL-terminated string or NULL. */
static char *base64(const unsigned char *p, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        *o++ = tab[v >> 18 & 63];
        *o++ = tab[v >> 12 & 63];
        *o++ = i + 1 < n ? tab[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? tab[v & 63] : '=';
    }
    *o = 0;
    return out;
}

static enum MHD_Result embeddings(em_server *s, struct MHD_Connection *conn,
                                  const srv_request *q) {
    if (!s->encoder)
        return fail(s, conn, 400, "invalid_request_error", NULL,
                    "this server serves the causal language model '%.100s'; /v1/embeddings "
                    "needs an encoder model (e.g. all-MiniLM-L6-v2)", s->model_name);
    int64_t hidden = em_model_config_get(s->model)->hidden_size;
    float *vec = malloc(q->n_inputs * (size_t)hidden * sizeof *vec);
    em_ctx *c = em_ctx_create();
    if (!vec || !c) {
        free(vec);
        em_ctx_free(c);
        return fail(s, conn, 500, "server_error", NULL, "out of memory");
    }
    /* the prompt-token count of usage: the tokens the model saw, special tokens included */
    int64_t tokens = 0;
    for (size_t i = 0; i < q->n_inputs && !em_ctx_status(c); i++) {
        em_token *ids = NULL;
        size_t n = 0;
        if (!em_tokenizer_encode(c, s->tok, q->inputs[i], strlen(q->inputs[i]), true, &ids, &n))
            tokens += (int64_t)(n < (size_t)s->ctx ? n : (size_t)s->ctx);
        em_free(ids);
    }
    if (!em_ctx_status(c))
        em_embed_texts(c, s->model, s->tok, (const char *const *)q->inputs, (int)q->n_inputs, vec);
    enum MHD_Result ok;
    if (em_ctx_status(c)) {
        ok = fail(s, conn, 400, "invalid_request_error", "input", "%s", em_ctx_error(c)->message);
    } else {
        json_t *data = json_array();
        for (size_t i = 0; i < q->n_inputs; i++) {
            const float *v = vec + i * (size_t)hidden;
            json_t *e;
            if (q->base64) {
                char *b = base64((const unsigned char *)v, (size_t)hidden * sizeof *v);
                e = b ? json_string(b) : NULL;
                free(b);
            } else {
                e = json_array();
                for (int64_t k = 0; k < hidden; k++) json_array_append_new(e, json_real(v[k]));
            }
            json_array_append_new(data, json_pack("{s:s, s:I, s:o}", "object", "embedding",
                                                  "index", (json_int_t)i, "embedding", e));
        }
        ok = reply_json(conn, MHD_HTTP_OK,
                        json_pack("{s:s, s:o, s:s, s:{s:I, s:I}}", "object", "list", "data", data,
                                  "model", s->model_name, "usage", "prompt_tokens",
                                  (json_int_t)tokens, "total_tokens", (json_int_t)tokens));
        pthread_mutex_lock(&s->mu);
        s->prompt_tokens += tokens;
        pthread_mutex_unlock(&s->mu);
    }
    free(vec);
    em_ctx_free(c);
    return ok;
}

/* ---- tokenize, detokenize, models, health, metrics ---- */

static enum MHD_Result tokenize(em_server *s, struct MHD_Connection *conn, const srv_request *q) {
    em_ctx *c = em_ctx_create();
    char *text = q->messages_json ? em_chat_template_apply(c, s->tok, q->messages_json, true, NULL)
                                  : NULL;
    const char *t = q->messages_json ? text : q->prompt;
    em_token *ids = NULL;
    size_t n = 0;
    enum MHD_Result ok;
    if (!t || em_tokenizer_encode(c, s->tok, t, strlen(t), q->add_special_tokens, &ids, &n)) {
        ok = fail(s, conn, 400, "invalid_request_error", NULL, "%s",
                  em_ctx_error(c) ? em_ctx_error(c)->message : "out of memory");
    } else {
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
        ok = reply_json(conn, MHD_HTTP_OK,
                        json_pack("{s:o, s:I, s:I}", "tokens", arr, "count", (json_int_t)n,
                                  "max_model_len", (json_int_t)s->ctx));
    }
    em_free(ids);
    em_free(text);
    em_ctx_free(c);
    return ok;
}

static enum MHD_Result detokenize(em_server *s, struct MHD_Connection *conn,
                                  const srv_request *q) {
    em_ctx *c = em_ctx_create();
    size_t len = 0;
    char *text = em_tokenizer_decode(c, s->tok, q->tokens, q->n_tokens, false, &len);
    enum MHD_Result ok = text ? reply_json(conn, MHD_HTTP_OK,
                                           json_pack("{s:s%}", "prompt", text, len))
                              : fail(s, conn, 500, "server_error", NULL, "%s",
                                     em_ctx_error(c)->message);
    em_free(text);
    em_ctx_free(c);
    return ok;
}

static enum MHD_Result metrics(em_server *s, struct MHD_Connection *conn) {
    char *buf = NULL;
    size_t len = 0;
    if (!srv_metrics_text(s, &buf, &len)) return MHD_NO;
    return reply_buffer(conn, MHD_HTTP_OK, buf, len, "text/plain; version=0.0.4");
}

/* ---- routing ---- */

typedef struct srv_conn {
    char *body;
    size_t len, cap;
    bool too_big;
} srv_conn;

static bool key_ok(em_server *s, struct MHD_Connection *conn) {
    if (!s->api_key) return true;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return false;
    const char *k = h + 7, *want = s->api_key;
    size_t kl = strlen(k), wl = strlen(want);
    unsigned diff = kl != wl;
    for (size_t i = 0; i < wl; i++) diff |= (unsigned)(want[i] ^ (i < kl ? k[i] : 0));
    return diff == 0;
}

static enum MHD_Result route(em_server *s, struct MHD_Connection *conn, const char *url,
                             const char *method, srv_conn *sc) {
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    pthread_mutex_lock(&s->mu);
    bool loaded = s->loaded, failed = s->load_failed, stopping = s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (!strcmp(url, "/health")) {
        if (!get) return fail(s, conn, 405, "invalid_request_error", NULL, "use GET /health");
        if (loaded && !stopping) return reply_json(conn, MHD_HTTP_OK, json_object());
        return reply_json(conn, MHD_HTTP_SERVICE_UNAVAILABLE,
                          json_pack("{s:s}", "status", failed ? "load failed"
                                                   : stopping ? "stopping" : "loading"));
    }
    if (!key_ok(s, conn))
        return fail(s, conn, 401, "invalid_request_error", "invalid_api_key",
                    "a valid API key is needed (Authorization: Bearer KEY)");
    if (!strcmp(url, "/metrics") && get) return metrics(s, conn);
    srv_kind kind;
    if (!strcmp(url, "/v1/chat/completions")) kind = SRV_CHAT;
    else if (!strcmp(url, "/v1/completions")) kind = SRV_COMPLETION;
    else if (!strcmp(url, "/tokenize")) kind = SRV_TOKENIZE;
    else if (!strcmp(url, "/detokenize")) kind = SRV_DETOKENIZE;
    else if (!strcmp(url, "/v1/embeddings")) kind = SRV_EMBEDDINGS;
    else if (!strcmp(url, "/v1/models") && get) kind = (srv_kind)-1;
    else
        return fail(s, conn, 404, "invalid_request_error", NULL, "no endpoint %s %.200s", method,
                    url);
    if (!loaded)
        return fail(s, conn, 503, "server_error", NULL, "%s",
                    failed ? s->load_error : "the model is loading");
    if (kind == (srv_kind)-1)
        return reply_json(conn, MHD_HTTP_OK,
                          json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:I}]}", "object", "list",
                                    "data", "id", s->model_name, "object", "model", "created",
                                    (json_int_t)time(NULL), "owned_by", "ember", "max_model_len",
                                    (json_int_t)s->ctx));
    if (!post) return fail(s, conn, 405, "invalid_request_error", NULL, "use POST %s", url);
    if (sc->too_big)
        return fail(s, conn, 413, "invalid_request_error", NULL,
                    "the request body is larger than %zu bytes", s->o.max_body_bytes);
    srv_request q;
    srv_error err;
    if (!srv_request_parse(sc->body, sc->len, kind, &q, &err))
        return reply_error(s, conn, &err, NULL);
    enum MHD_Result ok;
    if (q.model && strcmp(q.model, s->model_name) &&
        (kind == SRV_CHAT || kind == SRV_COMPLETION || kind == SRV_EMBEDDINGS))
        ok = fail(s, conn, 404, "invalid_request_error", "model_not_found",
                  "the model '%.100s' does not exist; this server serves '%.100s'", q.model,
                  s->model_name);
    else if (kind == SRV_TOKENIZE) ok = tokenize(s, conn, &q);
    else if (kind == SRV_DETOKENIZE) ok = detokenize(s, conn, &q);
    else if (kind == SRV_EMBEDDINGS) ok = embeddings(s, conn, &q);
    else if (s->encoder)
        ok = fail(s, conn, 400, "invalid_request_error", NULL,
                  "'%.100s' is an encoder model: it serves /v1/embeddings, not %s", s->model_name,
                  url);
    else ok = generate(s, conn, &q);
    srv_request_free(&q);
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    (void)version;
    em_server *s = cls;
    srv_conn *sc = *con_cls;
    if (!sc) { /* the headers: set up, and refuse a body announced too big right away */
        if (!(sc = calloc(1, sizeof *sc))) return MHD_NO;
        *con_cls = sc;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body_bytes) sc->too_big = true;
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (sc->too_big || sc->len + n > s->o.max_body_bytes) {
            sc->too_big = true;
            return MHD_YES;
        }
        if (sc->len + n + 1 > sc->cap) {
            size_t cap = sc->cap ? sc->cap : 4096;
            while (cap < sc->len + n + 1) cap *= 2;
            char *nb = realloc(sc->body, cap);
            if (!nb) return MHD_NO;
            sc->body = nb;
            sc->cap = cap;
        }
        memcpy(sc->body + sc->len, upload_data, n);
        sc->len += n;
        return MHD_YES;
    }
    return route(s, conn, url, method, sc);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)conn, (void)toe;
    srv_conn *sc = *con_cls;
    if (sc) {
        free(sc->body);
        free(sc);
        *con_cls = NULL;
    }
}

/* ---- lifecycle ---- */

static bool is_loopback(const char *host) {
    if (!strcmp(host, "localhost") || !strcmp(host, "::1")) return true;
    struct in_addr a;
    return inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

em_server *em_server_create(em_ctx *c, const em_server_options *o) {
    if (!c || em_ctx_status(c)) return NULL;
    const char *host = o && o->host ? o->host : "127.0.0.1";
    if (!o || !o->model || !*o->model || o->port < 0 || o->port > 65535 || o->max_batch < 1 ||
        o->parallel < 1 || o->ctx < 0 || o->max_body_bytes < 1 || o->prefix_cache < 0 ||
        o->prefill_chunk < 0 || o->kv_block < 0 || o->kv_blocks < 0 || o->kv_memory < 0) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "server_create",
                    "needs a model, a port in [0, 65535], max_batch and parallel >= 1, ctx, "
                    "prefill_chunk, prefix_cache, kv_block, kv_blocks and kv_memory >= 0 and a "
                    "body limit");
        return NULL;
    }
    if (o->kv_blocks > 0 && o->kv_memory > 0) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "server_create",
                    "give the KV budget as kv_blocks (%lld) or kv_memory (%lld bytes), not both",
                    (long long)o->kv_blocks, (long long)o->kv_memory);
        return NULL;
    }
    if (!is_loopback(host) && !(o->api_key && *o->api_key) && !o->insecure_public) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "server_create",
                    "refusing to serve on %s (not a loopback address) without an API key; give "
                    "one, or --insecure-public to serve anyone who can reach it",
                    host);
        return NULL;
    }
    em_server *s = calloc(1, sizeof *s);
    if (!s) {
        em_ctx_fail(c, EM_ERR_OOM, "server_create", "out of memory");
        return NULL;
    }
    s->o = *o;
    s->model_arg = xstrdup(o->model);
    s->model_name = xstrdup(o->model_name ? o->model_name : o->model);
    s->device = xstrdup(o->device);
    s->host = xstrdup(host);
    s->api_key = o->api_key && *o->api_key ? xstrdup(o->api_key) : NULL;
    srv_hist_init(&s->ttft);
    srv_hist_init(&s->itl);
    srv_hist_init(&s->e2e);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (!s->model_arg || !s->model_name || !s->host || (o->device && !s->device) ||
        (s->api_key == NULL && o->api_key && *o->api_key)) {
        em_server_free(s);
        em_ctx_fail(c, EM_ERR_OOM, "server_create", "out of memory");
        return NULL;
    }
    return s;
}

em_status em_server_start(em_ctx *c, em_server *s) {
    if (!c || em_ctx_status(c)) return c ? em_ctx_status(c) : EM_ERR_INVALID_ARG;
    if (!s || s->daemon || s->worker_started)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, "server_start",
                           "needs a server that was not started");
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof port, "%d", s->o.port);
    int gai = getaddrinfo(s->host, port, &hints, &ai);
    if (gai || !ai)
        return em_ctx_fail(c, EM_ERR_IO, "server_start", "cannot resolve %s: %s", s->host,
                           gai_strerror(gai));
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    s->daemon = MHD_start_daemon(
        flags, (uint16_t)s->o.port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)(s->o.parallel + 64), MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
        MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon)
        return em_ctx_fail(c, EM_ERR_IO, "server_start",
                           "cannot listen on %s port %d (in use, or not permitted)", s->host,
                           s->o.port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->o.port;
    if (pthread_create(&s->worker, NULL, srv_worker_main, s)) {
        MHD_stop_daemon(s->daemon);
        s->daemon = NULL;
        return em_ctx_fail(c, EM_ERR_INTERNAL, "server_start", "cannot start the worker thread");
    }
    s->worker_started = true;
    return EM_OK;
}

em_status em_server_wait_ready(em_ctx *c, em_server *s) {
    if (!c || em_ctx_status(c)) return c ? em_ctx_status(c) : EM_ERR_INVALID_ARG;
    if (!s || !s->worker_started)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, "server_wait_ready", "the server was not started");
    pthread_mutex_lock(&s->mu);
    while (!s->loaded && !s->load_failed) pthread_cond_wait(&s->cv, &s->mu);
    bool ok = s->loaded;
    pthread_mutex_unlock(&s->mu);
    return ok ? EM_OK : em_ctx_fail(c, EM_ERR_IO, "server_load", "%s", s->load_error);
}

int em_server_port(const em_server *s) { return s ? s->port : 0; }

int em_server_stop(em_server *s, double drain_s) {
    if (!s) return 0;
    double deadline = srv_now() + (drain_s > 0 ? drain_s : 0);
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_broadcast(&s->cv);
    while (s->n_held > 0 && srv_now() < deadline) wait_a_little(s);
    int cut = s->n_held;
    s->abort_all = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->worker_started) {
        pthread_join(s->worker, NULL);
        s->worker_started = false;
    }
    if (s->daemon) {
        MHD_stop_daemon(s->daemon);
        s->daemon = NULL;
    }
    return cut;
}

void em_server_free(em_server *s) {
    if (!s) return;
    em_server_stop(s, 0);
    em_tokenizer_free(s->tok);
    em_model_free(s->model);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->model_arg);
    free(s->model_name);
    free(s->device);
    free(s->host);
    free(s->api_key);
    free(s);
}

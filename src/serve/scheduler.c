/*
 * The worker: one thread owns the model and a KV cache of max_batch rows x ctx positions, and
 * runs continuous batching over it. Requests join between steps (the waiting prompts that fit
 * the free rows are prefilled together in a cache of their own, see "admission", then their keys
 * and values are copied into free rows) and leave between steps (a finished or
 * abandoned row is filled with the last running one, so running rows are always rows 0..n-1
 * and a step runs only those).
 *
 * The cache has one length for all rows (em_model_forward's contract): a row holds its
 * sequence at positions [start, len), right-aligned, and the key mask hides [0, start), so
 * its position ids (cumulative count of real keys) are those it would have alone. A prompt
 * longer than `len` shifts every row right to make room; when `len` reaches ctx the rows shift
 * left by the smallest start. Both copy the cache (rare events); a paged cache would not need
 * them (docs/serve.md, "limits").
 *
 * With the paged cache (the default for a model on one device, w->pkv, models/paged_kv.h)
 * none of that holds: every row and every prompt being prefilled is a sequence of its own
 * blocks, written at its own length; a step attends over each row's blocks only, a row that
 * leaves gives its blocks back, and a reused prefix shares the kept prompt's blocks. The
 * one-length cache stays for models split over devices and for --kv-block 0.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ember/ember.h"
#include "ember/generate.h"
#include "generate/detok.h"
#include "generate/json_grammar.h"
#include "generate/sampling.h"
#include "models/model_impl.h"
#include "models/paged_kv.h"
#include "serve/compiled_step.h"
#include "serve/serve_impl.h"

typedef struct srv_row {
    srv_job *job;
    int64_t start;     /* first cache position of the sequence */
    int seq;           /* paged: its sequence (then start is unused) */
    int64_t *seen;     /* prompt + new ids (the repetition penalty reads them) */
    int64_t n_seen;
    em_token *gen;     /* new ids */
    int64_t n_gen;
    em_detok dt;
    size_t sent;       /* bytes of dt.text handed to the job */
    em_rng rng;
    int64_t last;      /* the id the next step feeds */
    int32_t *counts;   /* presence/frequency penalties: times each id was generated (vocab) */
    int64_t *distinct; /* the ids generated at least once, in order */
    int64_t n_distinct;
    em_json_state json; /* JSON mode: the answer's bytes so far, recognized */
    uint64_t admitted; /* the worker's clock when it (last) became a row: the newest is
                        * preempted first */
} srv_row;

/* A prompt in the group being prefilled. */
typedef struct srv_pf {
    srv_job *job;  /* NULL once it became a row or was dropped (its row then computes padding) */
    int64_t reuse; /* prompt tokens copied from a kept prefix */
    int64_t rem;   /* prompt tokens computed: n_prompt - reuse */
    struct srv_prefix *from; /* the kept prompt its reused prefix comes from (reuse > 0) */
    int seq;       /* paged: its sequence, and the tokens of rem computed so far */
    int64_t done;
} srv_pf;

/* A prompt kept for prefix reuse: its ids and the keys and values of all of them. */
typedef struct srv_prefix { /* (named: srv_pf points to it) */
    em_token *ids;
    int64_t n;
    em_kv_cache *kv; /* [1, n] */
    uint64_t used;   /* the worker's clock at its last use (least recently used goes first) */
    int seq;         /* paged: the sequence that holds its blocks (kv NULL), -1 when empty */
} srv_prefix;

static bool prefix_live(const srv_prefix *p) { return p->kv || p->seq >= 0; }

/* The ids a job's prefill computes: its prompt, or after a preemption the prompt and the tokens
 * generated before it (srv_job.resume_ids). */
static const em_token *job_ids(const srv_job *j) { return j->resume ? j->resume_ids : j->prompt; }
static int64_t job_len(const srv_job *j) { return j->resume ? j->n_resume : j->n_prompt; }

typedef struct srv_worker {
    em_server *s;
    em_ctx *c;
    const em_model *m;
    em_kv_cache *kv; /* [max_batch, ctx] */
    em_paged_kv *pkv; /* the paged cache instead (kv NULL) */
    srv_compiled *sc; /* --compile: the decode step over kv as compiled programs */
    int *seqs;        /* paged: a step's rows' sequences (max_batch) */
    float *pf_logits; /* paged: member g's next-token logits at g x vocab (members end their
                       * prompts at different chunks; decode steps between use w->logits) */
    em_kv_cache view; /* its first n rows, made per step */
    srv_row *rows;
    int n, max_batch;
    int64_t len, ctx, vocab;
    float *logits, *scratch;
    int32_t *order;
    uint8_t *mask;
    int64_t *ids;
    int64_t eos[64];
    int n_eos;
    /* the prompts being prefilled together (one group at a time, see "admission"): into a
     * cache of their own, a chunk between two decode steps while other rows run, then copied
     * into free rows */
    srv_pf *pf; /* max_batch of them */
    int n_pf;
    em_kv_cache *pf_cache; /* [n_pf, pf_c0 + pf_r] */
    int64_t pf_c0, pf_r;   /* the longest reused prefix, the most tokens a member computes */
    int64_t pf_done;       /* columns computed of pf_r */
    srv_prefix *prefixes; /* o.prefix_cache of them (kv NULL: empty) */
    /* JSON mode: every token's bytes (special tokens: none), made at the first such request */
    char **piece;
    uint32_t *piece_len;
    uint64_t clock;
    bool sliding; /* a sliding-window layer: a batch's prompts keep their keys contiguous */
    bool budget;  /* paged with o.kv_blocks / o.kv_memory below the worst case: it can run out */
} srv_worker;

double srv_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void job_free(srv_job *j) {
    free(j->prompt);
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    free(j->text);
    free(j->lp);
    free(j);
}

void srv_job_release(em_server *s, srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&s->mu);
    bool last = --j->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (last) job_free(j);
}

bool srv_submit(em_server *s, srv_job **jobs, int n, srv_error *err) {
    pthread_mutex_lock(&s->mu);
    bool ok = false;
    if (s->stopping || !s->loaded)
        srv_fail(err, 503, "server_error", "", s->stopping ? "the server is shutting down"
                                                           : "the model is not loaded yet");
    else if (s->n_held + n > s->o.parallel)
        srv_fail(err, 429, "rate_limit_error", "",
                 "the server holds %d requests already (--parallel); retry later", s->n_held);
    else
        ok = true;
    for (int i = 0; ok && i < n; i++) {
        srv_job *j = jobs[i];
        j->refs++;
        j->next = NULL;
        if (s->queue_tail) s->queue_tail->next = j;
        else s->queue_head = j;
        s->queue_tail = j;
        s->n_waiting++;
        s->n_held++;
    }
    if (ok) pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* ---- the cache ---- */

/* Copies rows' positions [lo, len) to [lo + d, len + d) in every layer, in place through a
 * copy (the ranges may overlap; the cache keeps its tensors, which compiled steps captured).
 * Positions the rows left keep stale keys: masked (before a row's start) or written before they
 * are read (past len). */
static em_status shift_all(srv_worker *w, int64_t d) {
    em_ctx *c = w->c;
    int64_t lo = w->len;
    for (int r = 0; r < w->n; r++)
        if (w->rows[r].start < lo) lo = w->rows[r].start;
    em_device *prev = em_ctx_device(c);
    for (int64_t i = 0; lo < w->len && i < w->m->n_layers && !em_ctx_status(c); i++) {
        em_tensor *kvs[2] = {w->kv->k[i], w->kv->v[i]};
        for (int k = 0; k < 2; k++) {
            if (!kvs[k]) continue;
            em_scope_push(c);
            em_ctx_set_device(c, em_tensor_device(kvs[k]));
            em_tensor *src = em_slice(c, kvs[k], 2, lo, w->len, 1);
            int64_t shape[4];
            for (int dim = 0; dim < 4; dim++) shape[dim] = src ? em_tensor_dim(src, dim) : 0;
            em_tensor *tmp = src ? em_zeros(c, em_tensor_dtype(src), 4, shape) : NULL;
            if (tmp && em_assign(c, tmp, src) == EM_OK)
                em_assign(c, em_slice(c, kvs[k], 2, lo + d, w->len + d, 1), tmp);
            em_scope_pop(c);
        }
    }
    em_ctx_set_device(c, prev);
    for (int r = 0; r < w->n; r++) w->rows[r].start += d;
    w->len += d;
    pthread_mutex_lock(&w->s->mu);
    w->s->kv_shifts++;
    pthread_mutex_unlock(&w->s->mu);
    return em_ctx_status(c);
}

/* Copies cache row `from` over row `to` (every position). */
static em_status copy_row(srv_worker *w, int from, int to) {
    em_ctx *c = w->c;
    em_scope_push(c);
    for (int64_t i = 0; i < w->m->n_layers; i++) {
        if (w->kv->k[i])
            em_assign(c, em_narrow(c, w->kv->k[i], 0, to, 1), em_narrow(c, w->kv->k[i], 0, from, 1));
        if (w->kv->v[i])
            em_assign(c, em_narrow(c, w->kv->v[i], 0, to, 1), em_narrow(c, w->kv->v[i], 0, from, 1));
    }
    em_scope_pop(c);
    return em_ctx_status(c);
}

/* The cache's first n rows as a cache of its own (views: writes land in w->kv). Inside a scope
 * the caller pops. */
static void make_view(srv_worker *w, int n) {
    em_ctx *c = w->c;
    w->view.batch = n;
    w->view.len = w->len;
    for (int64_t i = 0; i < w->m->n_layers; i++) {
        w->view.k[i] = w->kv->k[i] ? em_narrow(c, w->kv->k[i], 0, 0, n) : NULL;
        w->view.v[i] = w->kv->v[i] ? em_narrow(c, w->kv->v[i], 0, 0, n) : NULL;
    }
}

/* ---- output ---- */

static void publish_text(srv_worker *w, srv_job *j, const char *t, size_t n) {
    em_server *s = w->s;
    pthread_mutex_lock(&s->mu);
    if (n && j->text_len + n + 1 > j->text_cap) {
        size_t cap = j->text_cap ? j->text_cap : 256;
        while (cap < j->text_len + n + 1) cap *= 2;
        char *nt = realloc(j->text, cap);
        if (nt) {
            j->text = nt;
            j->text_cap = cap;
        } else {
            n = 0; /* out of memory: the text stops growing; the request ends below */
            snprintf(j->error, sizeof j->error, "out of memory (answer text)");
        }
    }
    if (n) {
        memcpy(j->text + j->text_len, t, n);
        j->text[j->text_len += n] = 0;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Hands the row's new text to its job, holding back what could begin a stop string. true when
 * the text reached a stop string (what precedes it is handed over, the rest never). */
static bool publish(srv_worker *w, srv_row *r, bool final) {
    srv_job *j = r->job;
    const char *t = r->dt.text ? r->dt.text : "";
    size_t len = r->dt.text_len, hold = 0, cut = len;
    bool stopped = false;
    for (int k = 0; k < j->n_stop; k++) {
        size_t sl = strlen(j->stop[k]);
        if (sl - 1 > hold) hold = sl - 1;
        size_t from = r->sent > sl ? r->sent - sl : 0;
        const char *hit = len >= sl ? strstr(t + from, j->stop[k]) : NULL;
        if (hit && (size_t)(hit - t) < cut) {
            cut = (size_t)(hit - t);
            stopped = true;
        }
    }
    size_t upto = stopped || final ? cut : (len > hold ? len - hold : 0);
    while (upto > r->sent && upto < len && ((unsigned char)t[upto] & 0xC0) == 0x80) upto--;
    if (upto > r->sent) {
        publish_text(w, j, t + r->sent, upto - r->sent);
        r->sent = upto;
    }
    return stopped;
}

static void finish_job(srv_worker *w, srv_job *j, const char *reason, int64_t n_gen) {
    em_server *s = w->s;
    double now = srv_now();
    pthread_mutex_lock(&s->mu);
    j->done = true;
    j->finish_reason = reason;
    j->completion_tokens = n_gen;
    if (!strcmp(reason, "stop")) s->ok_stop++;
    else if (!strcmp(reason, "length")) s->ok_length++;
    else s->ok_abort++;
    srv_hist_add(&s->e2e, now - j->t_submit);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void row_free(srv_row *r) {
    free(r->seen);
    free(r->gen);
    free(r->counts);
    free(r->distinct);
    em_detok_free(&r->dt);
    memset(r, 0, sizeof *r);
}

static void update_kv_gauge(srv_worker *w) {
    int64_t used = 0;
    for (int r = 0; !w->pkv && r < w->n; r++) used += w->len - w->rows[r].start;
    if (w->pkv) { /* distinct blocks of the rows and the prompts in flight (rows + prompts <=
                   * max_batch), in positions; as vLLM's gauge, blocks only kept prompts hold
                   * are not counted */
        int n = 0;
        for (int r = 0; r < w->n; r++) w->seqs[n++] = w->rows[r].seq;
        for (int g = 0; g < w->n_pf && n < w->max_batch; g++)
            if (w->pf[g].job) w->seqs[n++] = w->pf[g].seq;
        int64_t held = em_paged_kv_blocks_held(w->pkv, w->seqs, n);
        used = (held > 0 ? held : 0) * em_paged_kv_block_size(w->pkv);
    }
    pthread_mutex_lock(&w->s->mu);
    w->s->kv_used = used;
    w->s->kv_blocks_used = em_paged_kv_blocks_used(w->pkv);
    pthread_mutex_unlock(&w->s->mu);
}

/* Removes row r (its job finished or was dropped): the last row takes its place. */
static em_status remove_row(srv_worker *w, int r) {
    em_server *s = w->s;
    srv_job *j = w->rows[r].job;
    if (w->pkv) em_paged_seq_free(w->pkv, w->rows[r].seq); /* its blocks back to the pool */
    row_free(&w->rows[r]);
    srv_job_release(s, j);
    em_status st = EM_OK;
    int last = w->n - 1;
    if (r != last) {
        if (!w->pkv) st = copy_row(w, last, r);
        w->rows[r] = w->rows[last];
        memset(&w->rows[last], 0, sizeof w->rows[last]);
    }
    w->n--;
    if (w->n == 0) w->len = 0;
    update_kv_gauge(w);
    pthread_mutex_lock(&s->mu);
    s->n_running--;
    s->n_held--;
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* ---- the KV budget (paged): kept prompts evicted, then sequences preempted ----
 *
 * With a pool smaller than every row at ctx (o.kv_blocks / o.kv_memory) a step can find no free
 * block. As vLLM does: the kept prompts of the prefix cache go first (least recently used
 * first), then the sequence admitted last is preempted by recompute: its blocks go back to the
 * pool, its request waits again at the head of the queue with its row's state (sampler,
 * detokenizer, text sent), and on re-admission its prompt and the tokens it generated are
 * prefilled again; the stream goes on where it stopped. Preempting the newest first means the
 * oldest sequence always progresses, and since the pool holds one sequence of ctx positions
 * (load refuses less), every request ends. */

static int64_t pool_free(const srv_worker *w) {
    return em_paged_kv_blocks_total(w->pkv) - em_paged_kv_blocks_used(w->pkv);
}

/* Whether dropping kept prompt p gives a block back: whether it holds a block that no row, no
 * prompt in prefill and no other kept prompt holds (distinct blocks of all of them with and
 * without p). Evicting one whose blocks running rows share would lose it for nothing. */
static bool prefix_frees(srv_worker *w, const srv_prefix *p) {
    int cap = w->n + w->n_pf + w->s->o.prefix_cache + 1, n = 0;
    int *seqs = malloc((size_t)cap * sizeof *seqs);
    if (!seqs) return true; /* out of memory: evict it anyway */
    for (int r = 0; r < w->n; r++) seqs[n++] = w->rows[r].seq;
    for (int g = 0; g < w->n_pf; g++)
        if (w->pf[g].job) seqs[n++] = w->pf[g].seq;
    for (int e = 0; e < w->s->o.prefix_cache; e++)
        if (w->prefixes[e].seq >= 0 && &w->prefixes[e] != p) seqs[n++] = w->prefixes[e].seq;
    int64_t without = em_paged_kv_blocks_held(w->pkv, seqs, n);
    seqs[n++] = p->seq;
    int64_t with = em_paged_kv_blocks_held(w->pkv, seqs, n);
    free(seqs);
    return with < 0 || without < 0 || with > without;
}

/* Drops the least recently used kept prompt (but `keep`) that gives blocks back; false when
 * there is none. Its blocks that no other sequence shares return to the pool. */
static bool evict_prefix(srv_worker *w, const srv_prefix *keep) {
    srv_prefix *lru = NULL;
    for (int e = 0; w->prefixes && e < w->s->o.prefix_cache; e++) {
        srv_prefix *p = &w->prefixes[e];
        if (p->seq >= 0 && p != keep && (!lru || p->used < lru->used) && prefix_frees(w, p))
            lru = p;
    }
    if (!lru) return false;
    em_paged_seq_free(w->pkv, lru->seq);
    free(lru->ids);
    *lru = (srv_prefix){NULL, 0, NULL, 0, -1};
    return true;
}

/* Evicts kept prompts (but `keep`) until `need` blocks are free; whether they are. */
static bool reclaim(srv_worker *w, int64_t need, const srv_prefix *keep) {
    while (pool_free(w) < need && evict_prefix(w, keep)) {
    }
    return pool_free(w) >= need;
}

/* Puts a preempted job back at the head of the waiting queue (running -> waiting). */
static void requeue_front(srv_worker *w, srv_job *j) {
    em_server *s = w->s;
    pthread_mutex_lock(&s->mu);
    j->next = s->queue_head;
    s->queue_head = j;
    if (!s->queue_tail) s->queue_tail = j;
    s->n_running--;
    s->n_waiting++;
    int64_t n = ++s->preemptions;
    pthread_mutex_unlock(&s->mu);
    if (!s->o.quiet && (n == 1 || n % 50 == 0)) /* vLLM's warning, as rarely */
        fprintf(stderr, "ember serve: request %s preempted (the KV pool of %lld blocks is full; "
                        "it will be recomputed): %lld preemptions so far; a larger --kv-blocks "
                        "or --kv-memory, or a smaller --max-batch, avoids them\n",
                j->id, (long long)em_paged_kv_blocks_total(w->pkv), (long long)n);
}

/* Preempts the prompts being prefilled (they were admitted last): their blocks back to the
 * pool, their jobs back at the head of the queue in their order. */
static void preempt_group(srv_worker *w) {
    for (int g = w->n_pf - 1; g >= 0; g--) {
        srv_job *j = w->pf[g].job;
        em_paged_seq_free(w->pkv, w->pf[g].seq);
        w->pf[g].seq = -1;
        w->pf[g].job = NULL;
        if (j) requeue_front(w, j);
    }
    w->n_pf = 0;
}

/* Preempts row r by recompute: its state moves into its job, its blocks back to the pool, the
 * job back at the head of the queue. false (nothing changed) when out of memory. */
static bool preempt_row(srv_worker *w, int r) {
    srv_row *row = &w->rows[r];
    srv_job *j = row->job;
    int64_t n = row->n_seen - 1; /* the cache holds all but the last id, which the next step
                                  * feeds */
    srv_row *keep = malloc(sizeof *keep);
    em_token *ids = n > 0 ? malloc((size_t)n * sizeof *ids) : NULL;
    if (!keep || !ids) {
        free(keep);
        free(ids);
        return false;
    }
    for (int64_t i = 0; i < n; i++) ids[i] = (em_token)row->seen[i];
    em_paged_seq_free(w->pkv, row->seq);
    *keep = *row;
    keep->seq = -1;
    j->resume = keep;
    j->resume_ids = ids;
    j->n_resume = n;
    int last = w->n - 1;
    if (r != last) w->rows[r] = w->rows[last];
    memset(&w->rows[last], 0, sizeof w->rows[last]);
    w->n--;
    requeue_front(w, j);
    return true;
}

/* Before a decode step: a free block for every row whose last block is full. Kept prompts are
 * evicted, then the prompts in prefill preempted, then the rows admitted last. A row left alone
 * always fits (the pool holds one sequence of ctx); out of memory, the step fails and says so. */
static void make_room_step(srv_worker *w) {
    for (;;) {
        int64_t need = 0;
        for (int r = 0; r < w->n; r++) {
            int64_t len = em_paged_seq_len(w->pkv, w->rows[r].seq);
            need += em_paged_kv_blocks_for(w->pkv, len + 1) - em_paged_kv_blocks_for(w->pkv, len);
        }
        if (reclaim(w, need, NULL)) return;
        if (w->n_pf) {
            preempt_group(w);
            continue;
        }
        if (w->n <= 1) return;
        int newest = 0;
        for (int r = 1; r < w->n; r++)
            if (w->rows[r].admitted > w->rows[newest].admitted) newest = r;
        if (!preempt_row(w, newest)) return;
    }
}

/* Every id's bytes as the answer would get them (special tokens decode to nothing and are never
 * allowed in JSON mode). Decoded after an anchor token ("a") and cut after the anchor's text:
 * decoders that strip the first leading space (SentencePiece's) would otherwise hide the space
 * a token brings mid-answer. Once per worker, at the first JSON-mode request. */
static bool pieces_ready(srv_worker *w) {
    if (w->piece) return true;
    em_ctx *c = w->c;
    const em_tokenizer *tok = w->s->tok;
    em_token *a = NULL;
    size_t na = 0, pl = 0;
    char *prefix = NULL;
    if (em_tokenizer_encode(c, tok, "a", 1, false, &a, &na) == EM_OK && na == 1)
        prefix = em_tokenizer_decode(c, tok, a, 1, true, &pl);
    em_ctx_clear_error(c);
    char **piece = calloc((size_t)w->vocab, sizeof *piece);
    uint32_t *len = calloc((size_t)w->vocab, sizeof *len);
    bool ok = piece && len;
    for (int64_t id = 0; ok && id < w->vocab; id++) {
        em_token t[2] = {prefix ? a[0] : 0, (em_token)id};
        size_t n = 0;
        char *text = em_tokenizer_decode(c, tok, prefix ? t : t + 1, prefix ? 2 : 1, true, &n);
        if (text && prefix && n >= pl && !memcmp(text, prefix, pl)) {
            memmove(text, text + pl, n - pl + 1);
            n -= pl;
        } else if (text && prefix) { /* the anchor's text changed: this id alone */
            em_free(text);
            text = em_tokenizer_decode(c, tok, t + 1, 1, true, &n);
        }
        piece[id] = text;
        len[id] = text ? (uint32_t)n : 0;
        ok = text != NULL;
    }
    em_ctx_clear_error(c);
    em_free(a);
    em_free(prefix);
    if (!ok) {
        for (int64_t id = 0; piece && id < w->vocab; id++) em_free(piece[id]);
        free(piece);
        free(len);
        return false;
    }
    w->piece = piece;
    w->piece_len = len;
    return true;
}

/* JSON mode: -inf for every id whose bytes cannot continue the row's JSON object (and for those
 * with no bytes). false when no id can. */
static bool json_mask(srv_worker *w, srv_row *r, float *logits) {
    bool any = false;
    for (int64_t id = 0; id < w->vocab; id++) {
        em_json_state s = r->json;
        if (w->piece_len[id] && em_json_feed(&s, w->piece[id], w->piece_len[id])) any = true;
        else logits[id] = -INFINITY;
    }
    return any;
}

/* Takes the token sampled from `logits` for row r: records it, streams its text, and decides
 * whether the row is done. Returns the finish reason, or NULL to go on. */
static const char *take_token(srv_worker *w, srv_row *r, float *logits) {
    em_server *s = w->s;
    srv_job *j = r->job;
    srv_logprob lp;
    bool want_lp = j->logprobs >= 0;
    /* the model's own distribution: ranked before the penalties touch the logits */
    float logz = want_lp ? srv_logprob_top(logits, w->vocab, j->logprobs, &lp) : 0;
    /* OpenAI's penalties, on the raw logits of the ids generated so far (as vLLM applies them:
     * the output tokens only), before temperature and the truncations */
    for (int64_t k = 0; r->counts && k < r->n_distinct; k++) {
        int64_t d = r->distinct[k];
        logits[d] -= j->presence + j->frequency * (float)r->counts[d];
    }
    if (j->json_object && !json_mask(w, r, logits)) {
        snprintf(j->error, sizeof j->error, "JSON mode: no token of the vocabulary continues the "
                                            "answer as JSON");
        return "abort";
    }
    int64_t id = em_sample_next(logits, w->vocab, r->seen, r->n_seen, &j->gp, &r->rng, w->scratch,
                                w->order);
    bool json_done = false;
    if (j->json_object) { /* the mask let only continuations through */
        em_json_feed(&r->json, w->piece[id], w->piece_len[id]);
        json_done = em_json_complete(&r->json);
    }
    if (want_lp) { /* the chosen token's raw logit: its penalty given back */
        int32_t seen_before = r->counts ? r->counts[id] : 0;
        float raw = logits[id] + (seen_before ? j->presence + j->frequency * (float)seen_before : 0);
        lp.id = (int32_t)id;
        lp.lp = raw - logz;
    }
    if (r->counts && r->counts[id]++ == 0) r->distinct[r->n_distinct++] = id;
    r->seen[r->n_seen++] = id;
    r->gen[r->n_gen++] = (em_token)id;
    r->last = id;
    double now = srv_now();
    pthread_mutex_lock(&s->mu);
    if (want_lp && j->n_lp == j->cap_lp) {
        int64_t cap = j->cap_lp ? 2 * j->cap_lp : 64;
        srv_logprob *grown = realloc(j->lp, (size_t)cap * sizeof *grown);
        if (grown) j->lp = grown, j->cap_lp = cap;
    }
    if (want_lp && j->n_lp < j->cap_lp) j->lp[j->n_lp++] = lp; /* out of memory: fewer entries */
    s->generation_tokens++;
    if (r->n_gen == 1) {
        j->t_first = now;
        srv_hist_add(&s->ttft, now - j->t_submit);
    } else {
        srv_hist_add(&s->itl, now - j->t_last);
    }
    j->t_last = now;
    pthread_mutex_unlock(&s->mu);
    bool eos = false;
    for (int e = 0; e < w->n_eos; e++) eos |= id == w->eos[e];
    const char *piece = NULL;
    if (em_detok_step(w->c, &r->dt, r->gen, (size_t)r->n_gen, &piece)) {
        snprintf(j->error, sizeof j->error, "detokenizing: %.200s", em_ctx_error(w->c)->message);
        em_ctx_clear_error(w->c);
        return "abort";
    }
    bool length = r->n_gen >= j->max_tokens;
    if (publish(w, r, eos || length || json_done)) return "stop";
    if (eos || json_done) return "stop"; /* a complete JSON object is the whole answer */
    if (length) return "length";
    return NULL;
}

/* ---- admission: waiting prompts prefilled together (in chunks), then moved into free rows ----
 *
 * The prompts admitted together form one group, prefilled as one batched forward per chunk in
 * a cache of their own, [G, c0 + R]: c0 is the longest reused prefix and R the most tokens any
 * of them still computes. Prompt i's reused prefix (L_i tokens, copied from the prefix store)
 * sits at columns [c0 - L_i, c0), the tokens it computes (rem_i) at [c0 + R - rem_i, c0 + R);
 * the key mask hides everything else, holes included, so position ids (the count of real keys)
 * and the attended keys are the ones it has alone, and every prompt's last token lands in the
 * last column, whose logits give the first answer tokens. Moving a prompt into its row joins
 * its two segments (the row is contiguous). */

/* The kept prompt sharing the longest prefix with j's prompt, and that length (at most
 * n_prompt - 1: the last prompt token is always computed, its logits give the first token). */
static srv_prefix *prefix_find(srv_worker *w, const srv_job *j, int64_t *len) {
    srv_prefix *best = NULL;
    *len = 0;
    for (int e = 0; w->prefixes && e < w->s->o.prefix_cache; e++) {
        srv_prefix *p = &w->prefixes[e];
        if (!prefix_live(p)) continue;
        int64_t n = p->n < job_len(j) - 1 ? p->n : job_len(j) - 1, k = 0;
        while (k < n && p->ids[k] == job_ids(j)[k]) k++;
        if (k > *len) *len = k, best = p;
    }
    return best;
}

/* Whether a group of g prompts computing at most r tokens each (padding included) is worth
 * prefilling together: it fits one chunk (g x r <= --prefill-chunk, when chunked), and its
 * padding stays within the `sum` tokens it really computes. A batched forward amortizes the
 * weights' reads, which pays while a forward is small; beyond one chunk it would only make every
 * member wait for the last (on a CPU a large forward costs about its tokens, batched or not), so
 * the rest waits for the next group, a chunk later. */
static bool group_worth_it(const srv_worker *w, int g, int64_t r, int64_t sum) {
    int64_t chunk = w->s->o.prefill_chunk;
    return (chunk <= 0 || (int64_t)g * r <= chunk) && (int64_t)g * r <= 2 * sum;
}

static void count_group(srv_worker *w, int64_t queries, int64_t hits) {
    pthread_mutex_lock(&w->s->mu);
    w->s->prefix_queries += queries;
    w->s->prefix_hits += hits;
    w->s->prefill_batches++;
    w->s->prefill_batch_prompts += w->n_pf;
    pthread_mutex_unlock(&w->s->mu);
}

/* Paged: each member a sequence of its own, sharing the whole blocks of its reused prefix with
 * the kept prompt's sequence (a partial last block copied; left out, and computed again with the
 * prompt, when the pool has no free block). */
static em_status prefill_start_paged(srv_worker *w, int64_t queries) {
    int64_t hits = 0;
    for (int i = 0; i < w->n_pf; i++) w->pf[i].seq = -1;
    for (int i = 0; i < w->n_pf; i++) {
        srv_pf *g = &w->pf[i];
        g->seq = em_paged_seq_new(w->c, w->pkv);
        if (g->seq < 0) return em_ctx_status(w->c);
        int64_t got = g->from ? em_paged_seq_share(w->c, w->pkv, g->seq, g->from->seq, g->reuse) : 0;
        if (got < 0) return em_ctx_status(w->c);
        if (g->from) g->from->used = ++w->clock;
        g->reuse = got;
        g->rem = job_len(g->job) - got;
        g->done = 0;
        hits += got;
    }
    count_group(w, queries, hits);
    return EM_OK;
}

/* --compile: the metrics' compile counters after a compiled step. */
static void compile_counts(srv_worker *w) {
    int64_t compiles, programs, pf_compiles, pf_programs;
    double ms;
    srv_compiled_counts(w->sc, &compiles, &programs, &pf_compiles, &pf_programs, &ms);
    pthread_mutex_lock(&w->s->mu);
    w->s->compiles = compiles;
    w->s->compiled_programs = programs;
    w->s->prefill_compiles = pf_compiles;
    w->s->prefill_programs = pf_programs;
    w->s->compile_ms = ms;
    pthread_mutex_unlock(&w->s->mu);
}

/* Paged: up to `max` more prompt tokens (max <= 0: all): one forward of k columns, k the most
 * any member still computes, at most max / members (at least one), as the dense group's chunk;
 * a member with fewer left feeds them left-padded (em_paged_forward's n_new: written at its own
 * length, the padding nowhere). A member whose prompt ends leaves its next-token logits in row
 * g of w->pf_logits (decode steps until the group is admitted use w->logits). */
static em_status prefill_some_paged(srv_worker *w, int64_t max) {
    em_ctx *c = w->c;
    int n = 0;
    int64_t k = 0;
    for (int g = 0; g < w->n_pf; g++) {
        const srv_pf *m = &w->pf[g];
        if (!m->job || m->done == m->rem) continue;
        n++;
        if (m->rem - m->done > k) k = m->rem - m->done;
    }
    if (!n) return EM_OK;
    if (max > 0 && k > (max / n > 0 ? max / n : 1)) k = max / n > 0 ? max / n : 1;
    int64_t *ids = malloc((size_t)(n * k) * sizeof *ids), *add = malloc((size_t)n * sizeof *add);
    if (!ids || !add) {
        free(ids);
        free(add);
        return em_ctx_fail(c, EM_ERR_OOM, "serve", "out of memory");
    }
    int b = 0;
    for (int g = 0; g < w->n_pf; g++) {
        const srv_pf *m = &w->pf[g];
        if (!m->job || m->done == m->rem) continue;
        add[b] = m->rem - m->done < k ? m->rem - m->done : k;
        for (int64_t t = 0; t < k; t++) { /* padding feeds id 0 */
            int64_t x = t - (k - add[b]);
            ids[b * k + t] = x < 0 ? 0 : job_ids(m->job)[m->reuse + m->done + x];
        }
        w->seqs[b++] = m->seq;
    }
    int64_t need = 0; /* the chunk's new blocks: kept prompts make room, else, while rows run,
                       * the group (admitted last) is preempted and waits for room */
    for (int r = 0; r < n; r++) {
        int64_t len = em_paged_seq_len(w->pkv, w->seqs[r]);
        need += em_paged_kv_blocks_for(w->pkv, len + add[r]) - em_paged_kv_blocks_for(w->pkv, len);
    }
    if (!reclaim(w, need, NULL) && w->n > 0) {
        free(ids);
        free(add);
        preempt_group(w);
        return EM_OK;
    }
    em_scope_push(c);
    float *host = malloc((size_t)n * (size_t)w->vocab * sizeof *host);
    if (!host) {
        em_ctx_fail(c, EM_ERR_OOM, "serve", "out of memory");
    } else if (w->sc) { /* --compile: rows, columns and tables bucketed (compiled_step.c) */
        if (!srv_compiled_prefill_paged(c, w->sc, n, k, ids, w->seqs, add, host))
            compile_counts(w);
    } else {
        em_tensor *it = em_from_host(c, EM_I64, EM_SHAPE(n, k), ids);
        em_tensor *lg = it ? em_paged_forward(c, w->m, w->pkv, it, w->seqs, add, true) : NULL;
        if (lg) em_to_host(c, lg, host, (size_t)n * (size_t)w->vocab * sizeof *host);
    }
    if (host && !em_ctx_status(c)) {
        b = 0;
        for (int g = 0; g < w->n_pf; g++) {
            srv_pf *m = &w->pf[g];
            if (!m->job || m->done == m->rem) continue;
            m->done += add[b];
            if (m->done == m->rem)
                memcpy(w->pf_logits + (size_t)g * w->vocab, host + (size_t)b * w->vocab,
                       (size_t)w->vocab * sizeof *host);
            b++;
        }
    }
    em_scope_pop(c);
    free(host);
    free(ids);
    free(add);
    return em_ctx_status(c);
}

/* Whether every member still there has computed its whole prompt. */
static bool prefill_complete(const srv_worker *w) {
    if (!w->pkv) return w->pf_done == w->pf_r;
    for (int g = 0; g < w->n_pf; g++)
        if (w->pf[g].job && w->pf[g].done < w->pf[g].rem) return false;
    return true;
}

/* Starts the group's prefill: its cache, each member's reused prefix copied in (the keys and
 * values of positions [0, L) depend only on ids [0, L): causal attention). w->pf[0..n_pf) hold
 * the jobs. */
static em_status prefill_start(srv_worker *w) {
    em_ctx *c = w->c;
    int64_t c0 = 0, r = 0, queries = 0, hits = 0;
    for (int i = 0; i < w->n_pf; i++) {
        srv_pf *g = &w->pf[i];
        g->from = w->s->o.prefix_cache > 0 ? prefix_find(w, g->job, &g->reuse) : NULL;
        if (!g->from) g->reuse = 0;
        g->rem = job_len(g->job) - g->reuse;
        if (g->reuse > c0) c0 = g->reuse;
        if (g->rem > r) r = g->rem;
        queries += job_len(g->job);
        hits += g->reuse;
    }
    w->pf_c0 = c0;
    w->pf_r = r;
    w->pf_done = 0;
    if (w->pkv) return prefill_start_paged(w, queries);
    w->pf_cache = em_kv_cache_create(c, w->m, w->n_pf, c0 + r);
    if (!w->pf_cache) return em_ctx_status(c);
    em_scope_push(c);
    for (int g = 0; g < w->n_pf; g++) {
        int64_t L = w->pf[g].reuse;
        srv_prefix *from = w->pf[g].from;
        if (!from) continue;
        for (int64_t i = 0; i < w->m->n_layers; i++) {
            em_tensor *to[2] = {w->pf_cache->k[i], w->pf_cache->v[i]},
                      *src[2] = {from->kv->k[i], from->kv->v[i]};
            for (int k = 0; k < 2; k++)
                if (to[k] && src[k])
                    em_assign(c, em_slice(c, em_narrow(c, to[k], 0, g, 1), 2, c0 - L, c0, 1),
                              em_slice(c, src[k], 2, 0, L, 1));
        }
        from->used = ++w->clock;
    }
    em_scope_pop(c);
    if (em_ctx_status(c)) return em_ctx_status(c);
    w->pf_cache->len = c0;
    count_group(w, queries, hits);
    return EM_OK;
}

/* Prefills up to `max` more tokens across the group (max <= 0: all that remain): max / G
 * columns, at least one, for every member. The last chunk leaves each member's next-token
 * logits in w->logits (row g at g x vocab). */
static em_status prefill_some(srv_worker *w, int64_t max) {
    if (w->pkv) return prefill_some_paged(w, max);
    em_ctx *c = w->c;
    int64_t G = w->n_pf, c0 = w->pf_c0, R = w->pf_r, k = R - w->pf_done;
    if (max > 0 && k > (max / G > 0 ? max / G : 1)) k = max / G > 0 ? max / G : 1;
    int64_t x0 = c0 + w->pf_done, tk = x0 + k; /* the chunk's columns: [x0, tk) */
    int64_t *ids = malloc((size_t)(G * k) * sizeof *ids);
    uint8_t *mask = malloc((size_t)(G * tk));
    bool all = true; /* every key real: no mask needed (a group of one) */
    em_scope_push(c);
    if (!ids || !mask) em_ctx_fail(c, EM_ERR_OOM, "serve", "out of memory");
    for (int64_t g = 0; ids && mask && g < G; g++) {
        const srv_pf *m = &w->pf[g];
        int64_t first = c0 + R - m->rem; /* the column of its first computed token */
        for (int64_t x = 0; x < tk; x++) { /* a dropped member: all padding */
            bool real = m->job && (x < c0 ? x >= c0 - m->reuse : x >= first);
            mask[g * tk + x] = real;
            all &= real;
        }
        for (int64_t t = 0; t < k; t++) { /* padding feeds id 0, hidden by the mask */
            int64_t x = x0 + t;
            const srv_job *j = m->job;
            ids[g * k + t] = j && x >= first ? j->prompt[j->n_prompt - (c0 + R - x)] : 0;
        }
    }
    em_tensor *it = ids && mask ? em_from_host(c, EM_I64, EM_SHAPE(G, k), ids) : NULL;
    em_tensor *mk = it && !all ? em_from_host(c, EM_BOOL, EM_SHAPE(G, tk), mask) : NULL;
    em_tensor *lg = it && (all || mk) ? em_model_forward(c, w->m, it, mk, w->pf_cache, true) : NULL;
    if (lg && w->pf_done + k == R)
        em_to_host(c, lg, w->logits, (size_t)(G * w->vocab) * sizeof *w->logits);
    em_scope_pop(c);
    free(ids);
    free(mask);
    if (!em_ctx_status(c)) w->pf_done += k;
    return em_ctx_status(c);
}

/* Copies member g's keys and values (its two segments in the group cache) into dst's row `row`
 * at positions [at, at + n_prompt), every layer. */
static void prefill_copy(srv_worker *w, int g, em_kv_cache *dst, int64_t row, int64_t at) {
    em_ctx *c = w->c;
    const srv_pf *m = &w->pf[g];
    int64_t c0 = w->pf_c0, end = c0 + w->pf_r;
    em_scope_push(c);
    for (int64_t i = 0; i < w->m->n_layers && !em_ctx_status(c); i++) {
        em_tensor *to[2] = {dst->k[i], dst->v[i]}, *src[2] = {w->pf_cache->k[i], w->pf_cache->v[i]};
        for (int k = 0; k < 2; k++) {
            if (!to[k] || !src[k]) continue;
            em_tensor *d = em_narrow(c, to[k], 0, row, 1), *s = em_narrow(c, src[k], 0, g, 1);
            if (m->reuse)
                em_assign(c, em_slice(c, d, 2, at, at + m->reuse, 1),
                          em_slice(c, s, 2, c0 - m->reuse, c0, 1));
            em_assign(c, em_slice(c, d, 2, at + m->reuse, at + m->job->n_prompt, 1),
                      em_slice(c, s, 2, end - m->rem, end, 1));
        }
    }
    em_scope_pop(c);
}

/* After admission: member g's prompt and its keys and values are kept for reuse (replacing a
 * kept prompt it extends, else the least recently used). A group of one gives its cache away;
 * a larger one copies the member's row into a cache of its own. */
static void prefill_keep(srv_worker *w, int g) {
    em_ctx *c = w->c;
    const srv_job *j = w->pf[g].job;
    srv_prefix *slot = NULL;
    em_token *ids = w->s->o.prefix_cache > 0 ? malloc((size_t)j->n_prompt * sizeof *ids) : NULL;
    for (int e = 0; ids && e < w->s->o.prefix_cache; e++) {
        srv_prefix *p = &w->prefixes[e];
        bool covered = prefix_live(p) && p->n <= j->n_prompt &&
                       !memcmp(p->ids, j->prompt, (size_t)p->n * sizeof *p->ids);
        if (covered || !prefix_live(p)) {
            slot = p;
            if (covered) break;
        } else if (!slot || (prefix_live(slot) && p->used < slot->used)) {
            slot = p;
        }
    }
    if (w->pkv) { /* the prompt's whole blocks, shared with the row (its partial last one
                   * copied) */
        int64_t n = j->n_prompt;
        int seq = slot ? em_paged_seq_new(c, w->pkv) : -1;
        if (seq >= 0 && em_paged_seq_share(c, w->pkv, seq, w->pf[g].seq, n) != n) {
            em_paged_seq_free(w->pkv, seq);
            seq = -1;
        }
        em_ctx_clear_error(c); /* not kept: the request goes on without it */
        if (seq < 0) {
            free(ids);
            return;
        }
        free(slot->ids);
        em_paged_seq_free(w->pkv, slot->seq);
        memcpy(ids, j->prompt, (size_t)n * sizeof *ids);
        *slot = (srv_prefix){ids, n, NULL, ++w->clock, seq};
        return;
    }
    em_kv_cache *kv = NULL;
    if (slot && w->n_pf == 1) {
        kv = w->pf_cache;
        w->pf_cache = NULL;
    } else if (slot) {
        kv = em_kv_cache_create(c, w->m, 1, j->n_prompt);
        if (kv) prefill_copy(w, g, kv, 0, 0);
        if (kv && !em_ctx_status(c)) {
            kv->len = j->n_prompt;
        } else { /* not kept: the request goes on without it */
            em_kv_cache_free(kv);
            kv = NULL;
            em_ctx_clear_error(c);
        }
    }
    if (!kv) {
        free(ids);
        return;
    }
    free(slot->ids);
    em_kv_cache_free(slot->kv);
    memcpy(ids, j->prompt, (size_t)j->n_prompt * sizeof *ids);
    *slot = (srv_prefix){ids, j->n_prompt, kv, ++w->clock, -1};
}

/* Member g, prefilled, becomes row n: its keys and values copied into the shared cache at the
 * right-aligned positions, then its first token taken from row g of w->logits. Returns a finish
 * reason or NULL. The member's job moves to the row (w->pf[g].job becomes NULL). */
static const char *admit_finish(srv_worker *w, int g) {
    em_ctx *c = w->c;
    srv_job *j = w->pf[g].job;
    int64_t p = j->n_prompt;
    srv_row *r = &w->rows[w->n];
    if (j->resume) { /* a preempted request, recomputed: its row as it was goes on (the next
                      * step feeds its last id; this prefill's logits are not needed) */
        *r = *j->resume;
        free(j->resume);
        free(j->resume_ids);
        j->resume = NULL;
        j->resume_ids = NULL;
        j->n_resume = 0;
        r->seq = w->pf[g].seq;
        r->admitted = ++w->clock;
        w->pf[g].seq = -1;
        w->pf[g].job = NULL;
        w->n++;
        return NULL;
    }
    memset(r, 0, sizeof *r);
    r->job = j;
    r->admitted = ++w->clock;
    r->seen = malloc((size_t)(p + j->max_tokens) * sizeof *r->seen);
    r->gen = malloc((size_t)j->max_tokens * sizeof *r->gen);
    if (j->presence != 0 || j->frequency != 0) {
        r->counts = calloc((size_t)w->vocab, sizeof *r->counts);
        r->distinct = malloc((size_t)j->max_tokens * sizeof *r->distinct);
        if (!r->counts || !r->distinct) em_ctx_fail(c, EM_ERR_OOM, "serve", "out of memory");
    }
    if (!r->seen || !r->gen) em_ctx_fail(c, EM_ERR_OOM, "serve", "out of memory");
    for (int64_t i = 0; i < p && r->seen; i++) r->seen[i] = j->prompt[i];
    r->n_seen = p;
    r->dt.tok = w->s->tok;
    r->dt.skip_special = true;
    em_rng_seed(&r->rng, j->seed);
    em_json_init(&r->json);
    if (j->json_object && !pieces_ready(w)) em_ctx_fail(c, EM_ERR_OOM, "serve", "out of memory");
    r->seq = -1;
    if (w->pkv) { /* kept for reuse (its blocks shared), then the member's sequence is the row's */
        if (!em_ctx_status(c)) prefill_keep(w, g);
        r->seq = w->pf[g].seq;
        w->pf[g].seq = -1;
        w->n++; /* from here on the row exists; on failure the caller removes it */
    }
    /* room: the sequence ends at len, so len >= p (shift the others right if needed) */
    if (em_ctx_status(c) || w->pkv) {
    } else if (w->n == 0) {
        w->len = p;
    } else if (w->len < p) {
        shift_all(w, p - w->len);
    }
    if (!w->pkv) {
        r->start = w->len - p;
        w->n++; /* from here on the row exists; on failure the caller removes it */
        if (!em_ctx_status(c)) prefill_copy(w, g, w->kv, w->n - 1, r->start);
        if (!em_ctx_status(c)) prefill_keep(w, g);
    }
    w->pf[g].job = NULL;
    if (em_ctx_status(c)) {
        snprintf(j->error, sizeof j->error, "prefill: %.230s", em_ctx_error(c)->message);
        em_ctx_clear_error(c);
        return "abort";
    }
    pthread_mutex_lock(&w->s->mu);
    w->s->prompt_tokens += p;
    pthread_mutex_unlock(&w->s->mu);
    return take_token(w, r, (w->pkv ? w->pf_logits : w->logits) + (size_t)g * w->vocab);
}

/* ---- one decode step over the running rows ---- */


/* Paged: each row feeds its last id at its own length. */
static em_status step_forward_paged(srv_worker *w) {
    em_ctx *c = w->c;
    int n = w->n;
    for (int r = 0; r < n; r++) {
        w->ids[r] = w->rows[r].last;
        w->seqs[r] = w->rows[r].seq;
    }
    if (w->sc) { /* --compile: the batch rounded up to its bucket (compiled_step.c) */
        if (srv_compiled_step_paged(c, w->sc, n, w->ids, w->seqs, w->logits))
            return em_ctx_status(c);
        compile_counts(w);
        return EM_OK;
    }
    em_scope_push(c);
    em_tensor *it = em_from_host(c, EM_I64, EM_SHAPE(n, 1), w->ids);
    em_tensor *lg = it ? em_paged_forward(c, w->m, w->pkv, it, w->seqs, NULL, true) : NULL;
    if (lg) em_to_host(c, lg, w->logits, (size_t)(n * w->vocab) * sizeof *w->logits);
    em_scope_pop(c);
    return em_ctx_status(c);
}

/* The one-length cache: every row feeds its last id at len, its start masked. */
static em_status step_forward_dense(srv_worker *w) {
    em_ctx *c = w->c;
    int n = w->n;
    if (w->len + 1 > w->ctx) { /* the rows shift left by the smallest start (> 0, see top) */
        int64_t lo = w->len;
        for (int r = 0; r < n; r++)
            if (w->rows[r].start < lo) lo = w->rows[r].start;
        if (lo == 0)
            return em_ctx_fail(c, EM_ERR_INTERNAL, "serve", "the cache is full (len %lld)",
                               (long long)w->len);
        if (shift_all(w, -lo)) return em_ctx_status(c);
    }
    int64_t tk = w->len + 1;
    for (int r = 0; r < n; r++) {
        w->ids[r] = w->rows[r].last;
        for (int64_t k = 0; k < tk; k++) w->mask[r * tk + k] = k >= w->rows[r].start;
    }
    if (w->sc) { /* --compile: the batch rounded up to its bucket (compiled_step.c) */
        if (srv_compiled_step(c, w->sc, n, w->len, w->ids, w->mask, w->logits))
            return em_ctx_status(c);
        compile_counts(w);
        w->len = tk;
        return EM_OK;
    }
    em_scope_push(c);
    make_view(w, n);
    em_tensor *it = em_from_host(c, EM_I64, EM_SHAPE(n, 1), w->ids);
    em_tensor *mk = em_from_host(c, EM_BOOL, EM_SHAPE(n, tk), w->mask);
    em_tensor *lg = em_model_forward(c, w->m, it, mk, &w->view, true);
    if (lg) em_to_host(c, lg, w->logits, (size_t)(n * w->vocab) * sizeof *w->logits);
    em_scope_pop(c);
    if (em_ctx_status(c)) return em_ctx_status(c);
    w->len = tk;
    return EM_OK;
}

static em_status step(srv_worker *w) {
    em_ctx *c = w->c;
    int n = w->n;
    if (w->pkv) {
        make_room_step(w);
        n = w->n;
    }
    if (w->pkv ? step_forward_paged(w) : step_forward_dense(w)) return em_ctx_status(c);
    for (int r = n - 1; r >= 0; r--) { /* from the end: a removal moves an already-done row */
        srv_row *row = &w->rows[r];
        const char *why = take_token(w, row, w->logits + (size_t)r * w->vocab);
        if (why) {
            finish_job(w, row->job, why, row->n_gen);
            if (remove_row(w, r)) return em_ctx_status(c);
        }
    }
    return EM_OK;
}

/* ---- the loop ---- */

/* Frees what the worker holds besides the model and the tokenizer (after a failed load too:
 * whatever was made before the failure), leaving the pointers NULL. */
static void worker_free(srv_worker *w) {
    free(w->logits);
    free(w->scratch);
    free(w->order);
    free(w->mask);
    free(w->ids);
    free(w->seqs);
    free(w->pf_logits);
    free(w->rows);
    free(w->view.k);
    free(w->view.v);
    srv_compiled_free(w->sc); /* (views of w->kv: first) */
    em_kv_cache_free(w->kv);
    em_kv_cache_free(w->pf_cache);
    free(w->pf);
    for (int e = 0; w->prefixes && e < w->s->o.prefix_cache; e++) {
        free(w->prefixes[e].ids);
        em_kv_cache_free(w->prefixes[e].kv);
    }
    free(w->prefixes);
    em_paged_kv_free(w->pkv); /* (the sequences' blocks with it) */
    for (int64_t id = 0; w->piece && id < w->vocab; id++) em_free(w->piece[id]);
    free(w->piece);
    free(w->piece_len);
    em_ctx *c = w->c;
    em_server *s = w->s;
    memset(w, 0, sizeof *w);
    w->c = c;
    w->s = s;
}

/* The paged pool's budget in blocks from o.kv_blocks or o.kv_memory (bytes over one block's
 * keys and values in every layer); 0 without one; -1 (c failed) when it cannot hold one sequence
 * of ctx positions (`per` blocks): such a server could not finish a long request. */
static int64_t kv_budget_blocks(em_ctx *c, const em_server *s, const em_model *m, int64_t ctx,
                                int64_t per) {
    if (s->o.kv_blocks <= 0 && s->o.kv_memory <= 0) return 0;
    em_paged_kv *probe = em_paged_kv_create(c, m, 1, s->o.kv_block, 1); /* (+1 spare block) */
    int64_t block_bytes = probe ? em_paged_kv_bytes(probe) / 2 : 0;
    em_paged_kv_free(probe);
    if (block_bytes <= 0) {
        if (!em_ctx_status(c)) em_ctx_fail(c, EM_ERR_INTERNAL, "serve", "KV block size unknown");
        return -1;
    }
    int64_t blocks = s->o.kv_blocks > 0 ? s->o.kv_blocks : s->o.kv_memory / block_bytes;
    if (blocks >= per) return blocks;
    double mib = 1024.0 * 1024.0;
    char given[96];
    if (s->o.kv_blocks > 0)
        snprintf(given, sizeof given, "--kv-blocks %lld", (long long)s->o.kv_blocks);
    else
        snprintf(given, sizeof given, "--kv-memory %lld bytes (%.2f MiB, %lld blocks)",
                 (long long)s->o.kv_memory, (double)s->o.kv_memory / mib, (long long)blocks);
    em_ctx_fail(c, EM_ERR_INVALID_ARG, "serve",
                "the KV budget %s is smaller than one sequence of --ctx %lld positions needs: "
                "%lld blocks of %d positions (%.2f MiB at %lld bytes per block); raise the budget "
                "or lower --ctx",
                given, (long long)ctx, (long long)per, s->o.kv_block,
                (double)(per * block_bytes) / mib, (long long)block_bytes);
    return -1;
}

static bool load(srv_worker *w) {
    em_server *s = w->s;
    em_ctx *c = w->c;
    em_model_options mo = em_model_default_options();
    mo.device = s->device;
    mo.progress = false;
    em_model *m = em_model_load(c, s->model_arg, &mo);
    em_tokenizer *tok = m ? em_tokenizer_load(c, em_model_dir(m)) : NULL;
    /* an encoder serves /v1/embeddings only: no KV cache, no decode rows */
    bool encoder = m && tok && !em_model_is_causal_lm(m);
    int64_t ctx = s->o.ctx;
    if (encoder) {
        int64_t maxpos = em_model_config_get(m)->max_position_embeddings;
        ctx = maxpos > 0 ? maxpos : 512;
    } else if (!em_ctx_status(c)) {
        int64_t maxpos = em_model_config_get(m)->max_position_embeddings;
        if (ctx <= 0) ctx = maxpos > 0 && maxpos < 4096 ? maxpos : 4096;
        if (s->o.kv_block > 0 && em_paged_kv_supported(m)) {
            /* without a budget: room for every row and prompt in flight at ctx, and every kept
             * prompt; pages no block reached take no memory */
            int64_t per = (ctx + s->o.kv_block - 1) / s->o.kv_block;
            int64_t blocks = (int64_t)(s->o.max_batch + s->o.prefix_cache) * per;
            int64_t budget = kv_budget_blocks(c, s, m, ctx, per);
            if (budget > 0 && budget < blocks) blocks = budget, w->budget = true;
            if (budget >= 0)
                w->pkv = em_paged_kv_create(c, m, blocks, s->o.kv_block,
                                            2 * s->o.max_batch + s->o.prefix_cache + 1);
            if (w->pkv && s->o.compile)
                w->sc = srv_compiled_create_paged(c, m, w->pkv, s->o.max_batch, ctx,
                                                  s->o.compile_bucket);
        } else {
            w->kv = em_kv_cache_create(c, m, s->o.max_batch, ctx);
            if (w->kv && s->o.compile) w->sc = srv_compiled_create(c, m, w->kv, s->o.compile_bucket);
        }
    }
    if (!encoder && !em_ctx_status(c)) {
        const em_generation_config *g = em_model_generation_config(m);
        w->n_eos = g->n_eos_token_ids < 64 ? g->n_eos_token_ids : 64;
        for (int e = 0; e < w->n_eos; e++) w->eos[e] = g->eos_token_ids[e];
        w->m = m;
        for (int64_t i = 0; i < m->n_layers; i++) w->sliding |= m->layers[i].sliding;
        w->ctx = ctx;
        w->max_batch = s->o.max_batch;
        w->vocab = em_model_config_get(m)->vocab_size;
        size_t mb = (size_t)w->max_batch;
        w->logits = malloc(mb * (size_t)w->vocab * sizeof *w->logits);
        w->scratch = malloc((size_t)(2 * w->vocab + 16) * sizeof *w->scratch);
        w->order = malloc((size_t)(w->vocab + 16) * sizeof *w->order);
        w->mask = malloc(mb * (size_t)(ctx + 1));
        w->ids = malloc(mb * sizeof *w->ids);
        w->seqs = malloc(mb * sizeof *w->seqs);
        if (w->pkv) w->pf_logits = malloc(mb * (size_t)w->vocab * sizeof *w->pf_logits);
        w->rows = calloc(mb, sizeof *w->rows);
        w->pf = calloc(mb, sizeof *w->pf);
        if (s->o.prefix_cache > 0) w->prefixes = calloc((size_t)s->o.prefix_cache, sizeof *w->prefixes);
        for (int e = 0; w->prefixes && e < s->o.prefix_cache; e++) w->prefixes[e].seq = -1;
        w->view.m = m;
        w->view.max_len = ctx;
        w->view.k = calloc((size_t)m->n_layers + 1, sizeof *w->view.k);
        w->view.v = calloc((size_t)m->n_layers + 1, sizeof *w->view.v);
        if (!w->logits || !w->scratch || !w->order || !w->mask || !w->ids || !w->seqs || (w->pkv && !w->pf_logits) || !w->rows || !w->pf ||
            !w->view.k || !w->view.v || (s->o.prefix_cache > 0 && !w->prefixes))
            em_ctx_fail(c, EM_ERR_OOM, "serve", "out of memory");
    }
    pthread_mutex_lock(&s->mu);
    if (em_ctx_status(c)) {
        snprintf(s->load_error, sizeof s->load_error, "%.500s", em_ctx_error(c)->message);
        s->load_failed = true;
        em_tokenizer_free(tok);
        worker_free(w); /* (before the model: the caches hold views of its shapes) */
        em_model_free(m);
        w->m = NULL;
    } else {
        s->model = m;
        s->tok = tok;
        s->encoder = encoder;
        s->ctx = ctx;
        s->kv_total = encoder ? 0
                      : w->pkv ? em_paged_kv_blocks_total(w->pkv) * em_paged_kv_block_size(w->pkv)
                               : (int64_t)s->o.max_batch * ctx;
        s->kv_blocks_total = em_paged_kv_blocks_total(w->pkv);
        s->loaded = true;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    bool budget = s->o.kv_blocks > 0 || s->o.kv_memory > 0;
    if (s->loaded && !s->o.quiet && encoder)
        fprintf(stderr, "ember serve: %s (an encoder: /v1/embeddings) loaded in %.2f s\n",
                s->model_name, em_model_load_seconds(m));
    else if (s->loaded && !s->o.quiet && w->pkv)
        fprintf(stderr, "ember serve: %s loaded in %.2f s; paged KV cache of %lld blocks x %lld "
                        "positions (%.1f MiB reserved, taken as sequences grow%s)\n",
                s->model_name, em_model_load_seconds(m),
                (long long)em_paged_kv_blocks_total(w->pkv),
                (long long)em_paged_kv_block_size(w->pkv),
                (double)em_paged_kv_bytes(w->pkv) / (1024.0 * 1024.0),
                budget ? "; a budget: when it is full, kept prompts are evicted and the newest "
                         "sequences preempted, then recomputed"
                       : "");
    else if (s->loaded && !s->o.quiet)
        fprintf(stderr, "ember serve: %s loaded in %.2f s; %d rows x %lld positions of KV cache%s\n",
                s->model_name, em_model_load_seconds(m), s->o.max_batch, (long long)ctx,
                budget ? " (the dense cache: --kv-blocks / --kv-memory do not apply)" : "");
    if (s->loaded && !s->o.quiet && s->o.compile)
        fprintf(stderr, "ember serve: --compile: %s\n",
                encoder ? "no effect on an encoder model (embeddings run eagerly)"
                : w->pkv ? "decode steps run as compiled programs, one per batch bucket (1, 2, 4, "
                           "... --max-batch rows) and block-table bucket, over the paged KV "
                           "cache; prefill chunks too, one per (batch, power-of-two column, "
                           "table) bucket"
                         : "decode steps run as compiled programs, one per batch bucket (1, 2, 4, "
                           "... --max-batch rows) and key bucket, over the dense KV cache; "
                           "prefill runs eagerly");
    return s->loaded;
}

/* Ends a request that never ran or is cut short: "abort", with the reason in its error. */
static void abort_job(srv_worker *w, srv_job *j, int64_t n_gen, const char *why) {
    if (j->resume) { /* preempted: what it had generated counts */
        n_gen = j->resume->n_gen;
        row_free(j->resume);
        free(j->resume);
        free(j->resume_ids);
        j->resume = NULL;
        j->resume_ids = NULL;
    }
    if (why && !j->error[0]) snprintf(j->error, sizeof j->error, "%s", why);
    finish_job(w, j, "abort", n_gen);
}

/* Ends member g of the group (it never became a row): abort with `why`. Its row of the group
 * computes on as padding; the group ends when no member is left. */
static void drop_member(srv_worker *w, int g, const char *why) {
    em_server *s = w->s;
    srv_job *j = w->pf[g].job;
    w->pf[g].job = NULL;
    if (w->pkv) { /* its blocks back to the pool now */
        em_paged_seq_free(w->pkv, w->pf[g].seq);
        w->pf[g].seq = -1;
    }
    abort_job(w, j, 0, why);
    srv_job_release(s, j);
    pthread_mutex_lock(&s->mu);
    s->n_running--;
    s->n_held--;
    pthread_mutex_unlock(&s->mu);
    bool any = false;
    for (int i = 0; i < w->n_pf; i++) any |= w->pf[i].job != NULL;
    if (!any) {
        em_kv_cache_free(w->pf_cache);
        w->pf_cache = NULL;
        w->n_pf = 0;
    }
}

/* Ends the whole group (a failed start or forward): every member still waiting aborts. */
static void drop_group(srv_worker *w, const char *why) {
    for (int g = w->n_pf - 1; g >= 0; g--)
        if (w->pf[g].job) drop_member(w, g, why);
    em_kv_cache_free(w->pf_cache);
    w->pf_cache = NULL;
    w->n_pf = 0;
}

/* Takes the waiting jobs that start their prefill together into w->pf, in arrival order, while
 * rows are free and group_worth_it holds. A job stays for the next group when more than half of
 * what it would compute is a prefix it shares with a member (identical prompts arriving
 * together: the next group reuses the first one's keys and values instead of computing them
 * all). Called and returns with s->mu held. */
static void group_take(srv_worker *w) {
    em_server *s = w->s;
    int64_t r = 0, sum = 0, pending = 0; /* pending: the blocks the members taken will need */
    while (s->queue_head && w->n + w->n_pf < w->max_batch) {
        srv_job *j = s->queue_head;
        int64_t L = 0, rem = job_len(j);
        srv_prefix *from = NULL;
        if (!j->cancelled) {
            if (s->o.prefix_cache > 0) from = prefix_find(w, j, &L);
            rem -= L;
            int64_t shared = 0; /* the longest prefix shared with a member (capped as in
                                 * prefix_find) */
            for (int g = 0; s->o.prefix_cache > 0 && g < w->n_pf; g++) {
                const srv_job *o = w->pf[g].job;
                int64_t n = job_len(o) < job_len(j) - 1 ? job_len(o) : job_len(j) - 1, k = 0;
                while (k < n && job_ids(o)[k] == job_ids(j)[k]) k++;
                if (k > shared) shared = k;
            }
            /* a reused prefix leaves a hole before the computed tokens when the group's R is
             * longer: sliding windows count columns, so such a prompt goes alone there */
            bool hole = !w->pkv && w->sliding && (L > 0 || w->pf[0].reuse > 0);
            if (w->n_pf > 0 && (hole || 2 * (shared - L) > rem ||
                                !group_worth_it(w, w->n_pf + 1, rem > r ? rem : r, sum + rem)))
                break;
            if (w->budget) { /* the KV budget: its blocks (but the reused prefix's whole ones), and
                           * one block of headroom per running row, must be free; kept prompts
                           * make room, else it waits (in order) for rows to end. When nothing
                           * runs it goes anyway: the pool holds one sequence of ctx */
                int64_t need = em_paged_kv_blocks_for(w->pkv, job_len(j)) -
                               (from ? L / em_paged_kv_block_size(w->pkv) : 0);
                if (!reclaim(w, pending + need + w->n, from)) {
                    if (w->n > 0 || w->n_pf > 0) break;
                    reclaim(w, em_paged_kv_blocks_for(w->pkv, job_len(j)), NULL);
                }
                pending += need;
            }
        }
        s->queue_head = j->next;
        if (!s->queue_head) s->queue_tail = NULL;
        s->n_waiting--;
        if (j->cancelled) { /* never ran */
            s->n_held--;
            pthread_mutex_unlock(&s->mu);
            abort_job(w, j, 0, "client disconnected");
            srv_job_release(s, j);
            pthread_mutex_lock(&s->mu);
            continue;
        }
        s->n_running++;
        w->pf[w->n_pf++] = (srv_pf){.job = j, .reuse = L, .seq = -1};
        if (rem > r) r = rem;
        sum += rem;
    }
}

/* The group's prompts, prefilled, become rows: longest first, so that the shared cache makes
 * room (shifts) once at most. */
static void group_admit(srv_worker *w) {
    for (;;) {
        int g = -1;
        for (int i = 0; i < w->n_pf; i++)
            if (w->pf[i].job && (g < 0 || job_len(w->pf[i].job) > job_len(w->pf[g].job))) g = i;
        if (g < 0) break;
        srv_job *j = w->pf[g].job;
        int row = w->n;
        const char *why = admit_finish(w, g);
        if (why) {
            finish_job(w, j, why, w->rows[row].n_gen);
            remove_row(w, row);
        }
    }
    em_kv_cache_free(w->pf_cache);
    w->pf_cache = NULL;
    w->n_pf = 0;
}

void *srv_worker_main(void *arg) {
    em_server *s = arg;
    srv_worker w;
    memset(&w, 0, sizeof w);
    w.s = s;
    w.c = em_ctx_create();
    if (!w.c || !load(&w)) {
        if (!w.c) {
            pthread_mutex_lock(&s->mu);
            snprintf(s->load_error, sizeof s->load_error, "out of memory");
            s->load_failed = true;
            pthread_cond_broadcast(&s->cv);
            pthread_mutex_unlock(&s->mu);
        }
        em_ctx_free(w.c);
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    for (;;) {
        /* drop the rows whose client went away, or everything when told to abort */
        for (int r = w.n - 1; r >= 0; r--) {
            srv_job *j = w.rows[r].job;
            if (j->cancelled || s->abort_all) {
                pthread_mutex_unlock(&s->mu);
                abort_job(&w, j, w.rows[r].n_gen, j->cancelled ? "client disconnected"
                                                               : "the server stopped");
                remove_row(&w, r);
                pthread_mutex_lock(&s->mu);
            }
        }
        if (s->abort_all) /* the queue too */
            while (s->queue_head) {
                srv_job *j = s->queue_head;
                s->queue_head = j->next;
                s->n_waiting--;
                s->n_held--;
                pthread_mutex_unlock(&s->mu);
                abort_job(&w, j, 0, "the server stopped");
                srv_job_release(s, j);
                pthread_mutex_lock(&s->mu);
            }
        if (!s->queue_head) s->queue_tail = NULL;
        for (int g = w.n_pf - 1; g >= 0; g--) { /* the prompts in flight too */
            srv_job *j = w.pf[g].job;
            if (j && (j->cancelled || s->abort_all)) {
                pthread_mutex_unlock(&s->mu);
                drop_member(&w, g, j->cancelled ? "client disconnected" : "the server stopped");
                pthread_mutex_lock(&s->mu);
            }
        }
        if (w.n == 0 && !s->queue_head && !w.n_pf) {
            if (s->stopping) break;
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        /* the waiting jobs that fit the free rows start their prefill together, when no group
         * is in flight */
        if (!w.n_pf && s->queue_head && w.n < w.max_batch) {
            group_take(&w);
            if (w.n_pf) {
                pthread_mutex_unlock(&s->mu);
                if (prefill_start(&w)) {
                    char msg[256];
                    snprintf(msg, sizeof msg, "prefill: %.230s", em_ctx_error(w.c)->message);
                    em_ctx_clear_error(w.c);
                    drop_group(&w, msg);
                }
                pthread_mutex_lock(&s->mu);
            }
        }
        pthread_mutex_unlock(&s->mu);
        if (w.n > 0 && step(&w)) { /* a failed step ends every running request */
            char msg[256];
            snprintf(msg, sizeof msg, "decode step: %.230s", em_ctx_error(w.c)->message);
            if (!s->o.quiet) fprintf(stderr, "ember serve: %s\n", msg);
            em_ctx_clear_error(w.c);
            while (w.n > 0) {
                abort_job(&w, w.rows[w.n - 1].job, w.rows[w.n - 1].n_gen, msg);
                remove_row(&w, w.n - 1);
            }
        }
        /* one chunk of the group in flight between two steps; all of it when no row runs
         * (nobody waits for it) */
        if (w.n_pf) {
            bool others = w.n > 0 && s->o.prefill_chunk > 0;
            if (prefill_some(&w, others ? s->o.prefill_chunk : 0)) {
                char msg[256];
                snprintf(msg, sizeof msg, "prefill: %.230s", em_ctx_error(w.c)->message);
                em_ctx_clear_error(w.c);
                drop_group(&w, msg);
            } else {
                if (others && w.n_pf) {
                    pthread_mutex_lock(&s->mu);
                    s->prefill_chunks++;
                    pthread_mutex_unlock(&s->mu);
                }
                if (w.n_pf && prefill_complete(&w)) group_admit(&w);
            }
        }
        update_kv_gauge(&w);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    worker_free(&w);
    em_ctx_free(w.c);
    return NULL;
}

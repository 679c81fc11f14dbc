/* Generation (prefill, then one token per step with a fixed KV cache) and sentence
 * embeddings. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/tensor_impl.h"
#include "ember/chat.h"
#include "ember/generate.h"
#include "generate/detok.h"
#include "generate/sampling.h"
#include "models/model_impl.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

em_generate_params em_generate_default_params(const em_model *m) {
    em_generate_params p;
    memset(&p, 0, sizeof p);
    p.max_new_tokens = 256;
    p.temperature = 1.0;
    p.top_p = 1.0;
    p.repetition_penalty = 1.0;
    if (m) {
        const em_generation_config *g = &m->gen;
        p.do_sample = g->do_sample;
        p.temperature = g->temperature;
        p.top_k = g->top_k;
        p.top_p = g->top_p;
        p.min_p = g->min_p;
        p.repetition_penalty = g->repetition_penalty;
        if (g->max_new_tokens > 0) p.max_new_tokens = g->max_new_tokens;
    }
    return p;
}

static const char *const stop_names[] = {"none", "eos", "stop_string", "length", "callback"};
_Static_assert(EM_STOP_REASON_COUNT == sizeof stop_names / sizeof *stop_names,
               "update stop_names");

const char *em_stop_reason_name(em_stop_reason r) {
    return (unsigned)r < EM_STOP_REASON_COUNT ? stop_names[r] : "?";
}

void em_generate_result_free(em_generate_result *r) {
    if (!r) return;
    for (int b = 0; b < r->batch; b++) {
        if (r->ids) free(r->ids[b]);
        if (r->text) free(r->text[b]);
    }
    free(r->ids);
    free(r->n_ids);
    free(r->stop_reason);
    free(r->text);
    free(r->text_len);
    memset(r, 0, sizeof *r);
}

/* Per-sequence state: finished or not, tokens so far, the streamed text. */
typedef struct seq_state {
    bool done;
    int64_t n;
    em_detok dt;
} seq_state;

/* Whether the sequence's text so far (emitted text, then the pending incomplete tail) holds
 * `stop` within its last strlen(stop) + 64 bytes. */
static bool hits_stop(const em_detok *d, const char *stop, char *buf, size_t buf_n) {
    size_t sl = strlen(stop), len = d->text_len + d->tail_len;
    if (!sl || len < sl) return false;
    size_t from = len > sl + 64 ? len - sl - 64 : 0, k = 0;
    for (size_t i = from; i < len && k + 1 < buf_n; i++)
        buf[k++] = i < d->text_len ? d->text[i] : d->tail[i - d->text_len];
    buf[k] = 0;
    return strstr(buf, stop) != NULL;
}

em_status em_generate(em_ctx *c, const em_model *m, const em_tokenizer *tok,
                      const em_token *const *prompts, const int64_t *lens, int batch,
                      const em_generate_params *p, em_generate_result *out) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!m || !m->fam->causal || !prompts || !lens || batch < 1 || !p || !out ||
        p->max_new_tokens < 1)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, "generate",
                           "needs a causal LM, batch >= 1 prompts and max_new_tokens >= 1");
    if (p->n_stop_strings > 0 && !tok)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, "generate", "stop strings need a tokenizer");
    memset(out, 0, sizeof *out);
    int64_t lmax = 0;
    for (int b = 0; b < batch; b++) {
        if (lens[b] < 1 || !prompts[b])
            return em_ctx_fail(c, EM_ERR_INVALID_ARG, "generate", "prompt %d is empty", b);
        if (lens[b] > lmax) lmax = lens[b];
    }
    int64_t vocab = m->cfg.vocab_size, total = lmax + p->max_new_tokens;
    int n_eos = p->eos_ids ? p->n_eos_ids : m->gen.n_eos_token_ids;
    int64_t eos[64];
    if (n_eos < 0 || n_eos > 64)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, "generate", "%d eos ids (0..64)", n_eos);
    for (int e = 0; e < n_eos; e++) eos[e] = p->eos_ids ? p->eos_ids[e] : m->gen.eos_token_ids[e];
    int64_t pad = m->gen.pad_token_id >= 0 ? m->gen.pad_token_id : (n_eos ? eos[0] : 0);
    /* the batch the forward runs: rows >= batch mirror row 0 and are never sampled */
    int run = batch;
    bool bucket_batch = p->compile_batch_bucket > 0 ||
                        (p->compile_batch_bucket == 0 && !m->dev_embed->be->host_accessible);
    if (p->compile && bucket_batch)
        for (run = 1; run < batch;) run *= 2;

    out->batch = batch;
    out->ids = calloc((size_t)batch, sizeof *out->ids);
    out->n_ids = calloc((size_t)batch, sizeof *out->n_ids);
    out->stop_reason = calloc((size_t)batch, sizeof *out->stop_reason);
    int64_t *all = malloc((size_t)(run * total) * sizeof *all); /* prompt + new, per row */
    uint8_t *mask = calloc((size_t)(run * total), 1);
    float *logits = malloc((size_t)(run * vocab) * sizeof *logits);
    float *scratch = malloc((size_t)(2 * vocab + 16) * sizeof *scratch);
    int32_t *order = malloc((size_t)(vocab + 16) * sizeof *order);
    seq_state *st = calloc((size_t)batch, sizeof *st);
    size_t stop_buf_n = 65;
    for (int k = 0; k < p->n_stop_strings; k++) stop_buf_n += strlen(p->stop_strings[k]);
    char *stop_buf = malloc(stop_buf_n);
    em_kv_cache *kv = NULL;
    em_model_compiled *mc = NULL;
    em_status s = EM_OK;
    if (!out->ids || !out->n_ids || !out->stop_reason || !all || !mask || !logits || !scratch ||
        !order || !st || !stop_buf) {
        s = em_ctx_fail(c, EM_ERR_OOM, "generate", "out of memory");
        goto done;
    }
    for (int b = 0; b < batch; b++) {
        st[b].dt.tok = tok;
        st[b].dt.skip_special = true;
        out->prompt_tokens += lens[b];
    }
    for (int b = 0; b < batch; b++) {
        out->ids[b] = malloc((size_t)p->max_new_tokens * sizeof **out->ids);
        if (!out->ids[b]) {
            s = em_ctx_fail(c, EM_ERR_OOM, "generate", "out of memory");
            goto done;
        }
        int64_t padn = lmax - lens[b]; /* left padding */
        for (int64_t j = 0; j < lmax; j++) {
            all[b * total + j] = j < padn ? pad : prompts[b][j - padn];
            mask[b * total + j] = j >= padn;
        }
    }
    for (int b = batch; b < run; b++) {
        memcpy(all + b * total, all, (size_t)lmax * sizeof *all);
        memcpy(mask + b * total, mask, (size_t)lmax);
    }
    bool padded = false;
    for (int b = 0; b < batch; b++) padded |= lens[b] != lmax;
    kv = em_kv_cache_create(c, m, run, total);
    if (kv && p->compile) mc = em_model_compile(c, m, kv, p->compile_bucket);
    if (!kv || (p->compile && !mc)) {
        s = em_ctx_status(c);
        goto done;
    }
    em_rng rng;
    em_rng_seed(&rng, p->seed);
    double t0 = now_s();
    int64_t cur = lmax; /* positions filled */
    for (int64_t step = 0; step < p->max_new_tokens; step++) {
        em_scope_push(c);
        int64_t t = step == 0 ? lmax : 1;
        int64_t *idbuf = malloc((size_t)(run * t) * sizeof *idbuf);
        uint8_t *mk = padded ? malloc((size_t)(run * cur)) : NULL;
        if (!idbuf || (padded && !mk)) {
            free(idbuf);
            free(mk);
            em_scope_pop(c);
            s = em_ctx_fail(c, EM_ERR_OOM, "generate", "out of memory");
            goto done;
        }
        for (int b = 0; b < run; b++) {
            memcpy(idbuf + b * t, all + b * total + (cur - t), (size_t)t * sizeof *idbuf);
            if (mk) memcpy(mk + b * cur, mask + b * total, (size_t)cur);
        }
        em_tensor *ids = em_from_host(c, EM_I64, EM_SHAPE(run, t), idbuf);
        em_tensor *km = mk ? em_from_host(c, EM_BOOL, EM_SHAPE(run, cur), mk) : NULL;
        free(idbuf);
        free(mk);
        em_tensor *lg = mc ? em_model_forward_compiled(c, mc, ids, km, true)
                           : em_model_forward(c, m, ids, km, kv, true);
        s = lg ? em_to_host(c, lg, logits, (size_t)(run * vocab) * sizeof *logits)
               : em_ctx_status(c);
        em_scope_pop(c);
        if (s) goto done;
        if (step == 0) out->prefill_s = now_s() - t0;
        bool all_done = true;
        for (int b = 0; b < batch; b++) {
            int64_t id = pad;
            if (!st[b].done) {
                id = em_sample_next(logits + (size_t)b * vocab, vocab,
                                    all + b * total + (lmax - lens[b]), cur - (lmax - lens[b]), p,
                                    &rng, scratch, order);
                out->ids[b][st[b].n++] = (em_token)id;
                if (step > 0) out->decoded_tokens++;
                em_stop_reason why = EM_STOP_NONE;
                for (int e = 0; e < n_eos; e++)
                    if (id == eos[e]) why = EM_STOP_EOS;
                if (tok && (p->on_token || p->on_token_bytes || p->n_stop_strings)) {
                    const char *piece;
                    s = em_detok_step(c, &st[b].dt, out->ids[b], (size_t)st[b].n, &piece);
                    if (s) goto done;
                    /* the piece runs to the end of the text emitted (em_detok_step) */
                    size_t len = piece ? st[b].dt.text_len - (size_t)(piece - st[b].dt.text) : 0;
                    if (p->on_token && piece &&
                        !p->on_token(p->user_data, b, (em_token)id, piece) && !why)
                        why = EM_STOP_CALLBACK;
                    if (p->on_token_bytes && piece &&
                        !p->on_token_bytes(p->user_data, b, (em_token)id, piece, len) && !why)
                        why = EM_STOP_CALLBACK;
                    for (int k = 0; k < p->n_stop_strings && !why; k++)
                        if (hits_stop(&st[b].dt, p->stop_strings[k], stop_buf, stop_buf_n))
                            why = EM_STOP_STRING;
                } else {
                    if (p->on_token && !p->on_token(p->user_data, b, (em_token)id, "") && !why)
                        why = EM_STOP_CALLBACK;
                    if (p->on_token_bytes &&
                        !p->on_token_bytes(p->user_data, b, (em_token)id, "", 0) && !why)
                        why = EM_STOP_CALLBACK;
                }
                if (!why && st[b].n == p->max_new_tokens) why = EM_STOP_LENGTH;
                if (why) {
                    st[b].done = true;
                    out->stop_reason[b] = why;
                }
            }
            all[b * total + cur] = id;
            mask[b * total + cur] = 1;
            all_done &= st[b].done;
        }
        for (int b = batch; b < run; b++) {
            all[b * total + cur] = all[cur];
            mask[b * total + cur] = 1;
        }
        cur++;
        if (all_done) break;
    }
    out->decode_s = now_s() - t0 - out->prefill_s;
    for (int b = 0; b < batch; b++) out->n_ids[b] = st[b].n;
done:
    if (mc) {
        em_compile_stats cs;
        em_model_compiled_stats(mc, &cs);
        out->compiles = cs.compiles;
        out->compile_s = cs.compile_ms / 1e3;
    }
    em_model_compiled_free(mc);
    em_kv_cache_free(kv);
    free(all);
    free(mask);
    free(logits);
    free(scratch);
    free(order);
    for (int b = 0; st && b < batch; b++) em_detok_free(&st[b].dt);
    free(st);
    free(stop_buf);
    if (s) em_generate_result_free(out);
    return s;
}

/* ---- text in, text out ---- */

/* Encodes texts[b] (rendered first when `chat`), generates, decodes the new tokens. */
static em_status generate_texts(em_ctx *c, const em_model *m, const em_tokenizer *tok,
                                const char *const *texts, int batch, bool chat,
                                const char *extra_vars_json, const em_generate_params *p,
                                em_generate_result *out) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!tok || !texts || batch < 1 || !out)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, "generate",
                           "needs a tokenizer, batch >= 1 texts and a result");
    memset(out, 0, sizeof *out);
    em_token **ids = calloc((size_t)batch, sizeof *ids);
    int64_t *lens = calloc((size_t)batch, sizeof *lens);
    em_status s = ids && lens ? EM_OK : em_ctx_fail(c, EM_ERR_OOM, "generate", "out of memory");
    for (int b = 0; b < batch && !s; b++) {
        if (!texts[b]) {
            s = em_ctx_fail(c, EM_ERR_INVALID_ARG, "generate", "text %d is NULL", b);
            break;
        }
        char *rendered = chat ? em_chat_template_apply(c, tok, texts[b], true, extra_vars_json)
                              : NULL;
        const char *t = chat ? rendered : texts[b];
        size_t n = 0;
        /* a rendered conversation holds its special tokens already */
        s = t ? em_tokenizer_encode(c, tok, t, strlen(t), !chat, &ids[b], &n) : em_ctx_status(c);
        em_free(rendered);
        lens[b] = (int64_t)n;
    }
    if (!s) s = em_generate(c, m, tok, (const em_token *const *)ids, lens, batch, p, out);
    if (!s) {
        out->text = calloc((size_t)batch, sizeof *out->text);
        out->text_len = calloc((size_t)batch, sizeof *out->text_len);
        if (!out->text || !out->text_len)
            s = em_ctx_fail(c, EM_ERR_OOM, "generate", "out of memory");
        for (int b = 0; b < batch && !s; b++) {
            out->text[b] = em_tokenizer_decode(c, tok, out->ids[b], (size_t)out->n_ids[b], true,
                                               &out->text_len[b]);
            if (!out->text[b]) s = em_ctx_status(c);
        }
        if (s) em_generate_result_free(out);
    }
    for (int b = 0; ids && b < batch; b++) em_free(ids[b]);
    free(ids);
    free(lens);
    return s;
}

em_status em_generate_text(em_ctx *c, const em_model *m, const em_tokenizer *tok,
                           const char *const *texts, int batch, const em_generate_params *p,
                           em_generate_result *out) {
    return generate_texts(c, m, tok, texts, batch, false, NULL, p, out);
}

em_status em_generate_chat(em_ctx *c, const em_model *m, const em_tokenizer *tok,
                           const char *const *conversations, int batch,
                           const char *extra_vars_json, const em_generate_params *p,
                           em_generate_result *out) {
    return generate_texts(c, m, tok, conversations, batch, true, extra_vars_json, p, out);
}


/* ---- sentence embeddings ---- */

em_status em_embed_texts(em_ctx *c, const em_model *m, const em_tokenizer *tok,
                         const char *const *texts, int n, float *out) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!m || m->fam->causal || !tok || !texts || n < 1 || !out)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, "embed",
                           "needs an encoder model, a tokenizer and n >= 1 texts");
    int64_t maxpos = em_tensor_dim(m->pos_emb, 0), limit = maxpos;
    /* sentence-transformers' max_seq_length (256 for all-MiniLM-L6-v2) when configured */
    char path[1100];
    snprintf(path, sizeof path, "%s/sentence_bert_config.json", m->dir);
    json_t *sb = json_load_file(path, 0, NULL); /* absent or unreadable: no limit of its own */
    json_t *msl = json_object_get(sb, "max_seq_length");
    if (json_is_integer(msl) && json_integer_value(msl) > 0 && json_integer_value(msl) < limit)
        limit = json_integer_value(msl);
    json_decref(sb);
    em_token **ids = calloc((size_t)n, sizeof *ids);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    em_status s = EM_OK;
    if (!ids || !lens) {
        free(ids);
        free(lens);
        return em_ctx_fail(c, EM_ERR_OOM, "embed", "out of memory");
    }
    int64_t tmax = 1;
    for (int i = 0; i < n && !s; i++) {
        s = em_tokenizer_encode(c, tok, texts[i] ? texts[i] : "", texts[i] ? strlen(texts[i]) : 0,
                                true, &ids[i], &lens[i]);
        if (!s && (int64_t)lens[i] > limit) { /* truncate, keeping the final [SEP] */
            ids[i][limit - 1] = ids[i][lens[i] - 1];
            lens[i] = (size_t)limit;
        }
        if (!s && (int64_t)lens[i] > tmax) tmax = (int64_t)lens[i];
    }
    int64_t hid = m->cfg.hidden_size;
    int64_t *idb = s ? NULL : calloc((size_t)(n * tmax), sizeof *idb);
    uint8_t *mk = s ? NULL : calloc((size_t)(n * tmax), 1);
    if (!s && (!idb || !mk)) s = em_ctx_fail(c, EM_ERR_OOM, "embed", "out of memory");
    if (!s) {
        em_token padid = em_tokenizer_special_id(tok, EM_SPECIAL_PAD);
        for (int i = 0; i < n; i++)
            for (int64_t j = 0; j < tmax; j++) {
                bool real = j < (int64_t)lens[i];
                idb[i * tmax + j] = real ? ids[i][j] : (padid >= 0 ? padid : 0);
                mk[i * tmax + j] = real;
            }
        em_scope_push(c);
        em_tensor *it = em_from_host(c, EM_I64, EM_SHAPE(n, tmax), idb);
        em_tensor *mt = em_from_host(c, EM_BOOL, EM_SHAPE(n, tmax), mk);
        em_tensor *h = em_model_encode(c, m, it, mt, NULL);
        /* mean over the real tokens, then L2 normalisation (the Normalize module) */
        em_tensor *mf = em_unsqueeze(c, em_cast(c, mt, EM_F32), -1);
        int dim = 1;
        em_tensor *sum = em_sum(c, em_mul(c, h, mf), &dim, 1, false);
        em_tensor *cnt = em_clamp(c, em_sum(c, mf, &dim, 1, false), 1e-9, NAN);
        em_tensor *mean = em_div(c, sum, cnt);
        int last = -1;
        em_tensor *norm = em_clamp(c, em_sqrt(c, em_sum(c, em_mul(c, mean, mean), &last, 1, true)),
                                   1e-12, NAN);
        em_tensor *e = em_div(c, mean, norm);
        s = em_to_host(c, e, out, (size_t)(n * hid) * sizeof *out);
        em_scope_pop(c);
    }
    for (int i = 0; i < n; i++) em_free(ids[i]);
    free(ids);
    free(lens);
    free(idb);
    free(mk);
    return s;
}

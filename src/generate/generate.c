/* Generation (prefill, then one token per step with a fixed KV cache) and sentence
 * embeddings. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/tensor_impl.h"
#include "ember/generate.h"
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

void em_generate_result_free(em_generate_result *r) {
    if (!r) return;
    for (int b = 0; b < r->batch; b++) {
        if (r->ids) free(r->ids[b]);
        if (r->stop_reason) free(r->stop_reason[b]);
    }
    free(r->ids);
    free(r->n_ids);
    free(r->stop_reason);
    memset(r, 0, sizeof *r);
}

/* Per-sequence streaming state: how much decoded text was already handed out. */
typedef struct seq_state {
    bool done;
    size_t emitted;
    int64_t n;
} seq_state;

/* Text of the new tokens, and whether its end is a complete character (no U+FFFD tail from a
 * split multi-byte sequence). */
static char *decode_new(em_ctx *c, const em_tokenizer *tok, const int64_t *ids, int64_t n,
                        size_t *len) {
    int32_t *tmp = malloc((size_t)(n + 1) * sizeof *tmp);
    if (!tmp) return NULL;
    for (int64_t i = 0; i < n; i++) tmp[i] = (int32_t)ids[i];
    char *s = em_tokenizer_decode(c, tok, tmp, (size_t)n, true, len);
    free(tmp);
    return s;
}

static bool ends_incomplete(const char *s, size_t len) {
    return len >= 3 && (unsigned char)s[len - 3] == 0xEF && (unsigned char)s[len - 2] == 0xBF &&
           (unsigned char)s[len - 1] == 0xBD;
}

em_status em_generate(em_ctx *c, const em_model *m, const em_tokenizer *tok,
                      const int64_t *const *prompts, const int64_t *lens, int batch,
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
    const int64_t *eos = p->eos_ids ? p->eos_ids : m->gen.eos_token_ids;
    int n_eos = p->eos_ids ? p->n_eos_ids : m->gen.n_eos_token_ids;
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
    int64_t *step_ids = malloc((size_t)run * sizeof *step_ids);
    em_kv_cache *kv = NULL;
    em_model_compiled *mc = NULL;
    em_status s = EM_OK;
    if (!out->ids || !out->n_ids || !out->stop_reason || !all || !mask || !logits || !scratch ||
        !order || !st || !step_ids) {
        s = em_ctx_fail(c, EM_ERR_OOM, "generate", "out of memory");
        goto done;
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
                id = em_sample_next(logits + (size_t)b * vocab, vocab, all + b * total + (lmax - lens[b]),
                                    cur - (lmax - lens[b]), p, &rng, scratch, order);
                out->ids[b][st[b].n++] = id;
                if (step > 0) out->decoded_tokens++;
                const char *why = NULL;
                for (int e = 0; e < n_eos; e++)
                    if (id == eos[e]) why = "eos";
                if (tok && (p->on_token || p->n_stop_strings)) {
                    size_t len = 0;
                    char *text = decode_new(c, tok, out->ids[b], st[b].n, &len);
                    if (!text) {
                        s = em_ctx_status(c);
                        goto done;
                    }
                    if (p->on_token && len >= st[b].emitted && !ends_incomplete(text, len)) {
                        if (!p->on_token(p->user_data, b, id, text + st[b].emitted) && !why)
                            why = "callback";
                        st[b].emitted = len;
                    }
                    for (int k = 0; k < p->n_stop_strings && !why; k++) {
                        size_t sl = strlen(p->stop_strings[k]);
                        if (sl && len >= sl && strstr(text + (len > sl + 64 ? len - sl - 64 : 0),
                                                      p->stop_strings[k]))
                            why = "stop_string";
                    }
                    em_free(text);
                } else if (p->on_token && !p->on_token(p->user_data, b, id, "") && !why) {
                    why = "callback";
                }
                if (!why && st[b].n == p->max_new_tokens) why = "length";
                if (why) {
                    st[b].done = true;
                    out->stop_reason[b] = strdup(why);
                }
            }
            all[b * total + cur] = id;
            mask[b * total + cur] = 1;
            step_ids[b] = id;
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
    free(st);
    free(step_ids);
    if (s) em_generate_result_free(out);
    return s;
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
    int32_t **ids = calloc((size_t)n, sizeof *ids);
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
        int32_t padid = em_tokenizer_special_id(tok, EM_SPECIAL_PAD);
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

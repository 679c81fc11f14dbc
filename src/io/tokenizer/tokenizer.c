/*
 * The tokenizer's public API and its two pipelines (tokenizers/src/tokenizer/mod.rs):
 *
 *   encode: added tokens on the raw text -> normalizer on each remaining piece -> added tokens
 *           (normalized ones) -> pre-tokenizers -> model -> post-processor
 *   decode: ids -> token strings (special ones optionally skipped) -> decoder
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer/tokenizer_impl.h"

bool tk_enc_fail(tk_enc *e, em_status s, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    em_ctx_fail(e->c, s, "tokenizer_encode", "%s (tokenizer %s)", msg,
                e->t->name ? e->t->name : "?");
    return false;
}

void tk_enc_free(tk_enc *e) {
    tk_rx_state_free(&e->rx);
    for (int i = 0; i < 2; i++) tk_buf_free(&e->norm[i]);
    for (int i = 0; i < TK_MAX_PRETOK; i++) {
        tk_buf_free(&e->level[i][0]);
        tk_buf_free(&e->level[i][1]);
    }
    for (int i = 0; i < 2; i++) {
        free(e->added_spans[i].v);
        free(e->added_ids[i].v);
    }
    tk_buf_free(&e->word);
    free(e->syms);
    free(e->heap);
    free(e->best_score);
    free(e->best_start);
    free(e->best_id);
    free(e->tmp.v);
}

/* One piece of raw text between added tokens: normalize, find normalized added tokens, then
 * pre-tokenize and tokenize what is left. */
static bool encode_piece(tk_enc *e, const char *s, size_t n, bool at_origin) {
    const em_tokenizer *t = e->t;
    const char *ns = s;
    size_t nn = n;
    if (t->normalizer) {
        bool lead_removed = false;
        if (!tk_normalize(e, t->normalizer, s, n, &e->norm[0], &lead_removed)) return false;
        ns = e->norm[0].p ? e->norm[0].p : "";
        nn = e->norm[0].len;
        if (lead_removed) at_origin = false;
    }
    if (nn == 0) return true;
    if (!t->added.has_normalized) return tk_pretok_run(e, 0, ns, nn, at_origin);
    tk_spans *sp = &e->added_spans[1];
    tk_ids *ids = &e->added_ids[1];
    if (!tk_added_find(e, &t->added.normalized, ns, nn, sp, ids)) return false;
    for (size_t i = 0; i < sp->n; i++) {
        if (sp->v[i].match) {
            if (!tk_ids_push(&e->out, ids->v[i]))
                return tk_enc_fail(e, EM_ERR_OOM, "out of memory");
        } else if (!tk_pretok_run(e, 0, ns + sp->v[i].start, sp->v[i].end - sp->v[i].start,
                                  at_origin && sp->v[i].start == 0))
            return false;
    }
    return true;
}

em_status em_tokenizer_encode(em_ctx *c, const em_tokenizer *t, const char *text, size_t len,
                              bool add_special_tokens, int32_t **ids, size_t *n_ids) {
    if (ids) *ids = NULL;
    if (n_ids) *n_ids = 0;
    if (em_ctx_status(c) != EM_OK) return em_ctx_status(c);
    if (!t || (!text && len) || !ids || !n_ids)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, "tokenizer_encode",
                           "NULL argument (tokenizer %p, text %p, ids %p, n_ids %p)",
                           (const void *)t, (const void *)text, (void *)ids, (void *)n_ids);
    if (!text) text = "";
    size_t bad;
    if (!tk_utf8_valid(text, len, &bad))
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, "tokenizer_encode",
                           "the text is not valid UTF-8: bad byte 0x%02x at offset %zu of %zu",
                           (unsigned char)text[bad], bad, len);
    tk_enc e = {.c = c, .t = t};
    bool ok = true;
    if (!tk_ids_push(&e.out, 0)) ok = tk_enc_fail(&e, EM_ERR_OOM, "out of memory");
    e.out.n = 0;
    if (ok && t->added.has_raw) {
        tk_spans *sp = &e.added_spans[0];
        tk_ids *aid = &e.added_ids[0];
        ok = tk_added_find(&e, &t->added.raw, text, len, sp, aid);
        for (size_t i = 0; ok && i < sp->n; i++) {
            if (sp->v[i].match) ok = tk_ids_push(&e.out, aid->v[i]) ||
                                     tk_enc_fail(&e, EM_ERR_OOM, "out of memory");
            else if (sp->v[i].end > sp->v[i].start)
                ok = encode_piece(&e, text + sp->v[i].start, sp->v[i].end - sp->v[i].start,
                                  sp->v[i].start == 0);
        }
    } else if (ok && len) {
        ok = encode_piece(&e, text, len, true);
    }
    if (ok && t->post) ok = tk_post_process(&e, t->post, &e.out, add_special_tokens);
    tk_enc_free(&e);
    if (!ok) {
        free(e.out.v);
        return em_ctx_status(c) != EM_OK ? em_ctx_status(c) : EM_ERR_INTERNAL;
    }
    *ids = e.out.v;
    *n_ids = e.out.n;
    return EM_OK;
}


/* The string of an id as decode sees it: an added token's normalized form when it has one
 * (simple_id_to_token), else its content, else the model's vocabulary entry. */
static const char *decode_token(const em_tokenizer *t, int32_t id, size_t *len) {
    uint64_t k;
    if (id >= 0 && tk_u64map_get(&t->added.by_id, (uint64_t)id, &k)) {
        const tk_added_token *a = &t->added.toks[k];
        if (a->norm) {
            *len = a->norm_len;
            return a->norm;
        }
        *len = a->len;
        return a->content;
    }
    return tk_vocab_token(&t->model.vocab, id, len);
}

char *em_tokenizer_decode(em_ctx *c, const em_tokenizer *t, const int32_t *ids, size_t n,
                          bool skip_special_tokens, size_t *len) {
    if (len) *len = 0;
    if (em_ctx_status(c) != EM_OK) return NULL;
    if (!t || (!ids && n)) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "tokenizer_decode", "NULL argument (tokenizer %p, "
                    "ids %p)", (const void *)t, (const void *)ids);
        return NULL;
    }
    tk_strlist toks = {0};
    tk_buf out = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++) {
        size_t tl;
        const char *s = decode_token(t, ids[i], &tl);
        if (!s) continue;
        if (skip_special_tokens && tk_strmap_get(&t->added.special, s, tl) >= 0) continue;
        ok = tk_strlist_push(&toks, s, tl);
    }
    if (!ok) em_ctx_fail(c, EM_ERR_OOM, "tokenizer_decode", "out of memory");
    if (ok) ok = tk_decode_tokens(c, t, t->decoder, &toks, &out);
    tk_strlist_free(&toks);
    if (ok && !tk_buf_reserve(&out, 1)) {
        em_ctx_fail(c, EM_ERR_OOM, "tokenizer_decode", "out of memory");
        ok = false;
    }
    if (!ok) {
        tk_buf_free(&out);
        return NULL;
    }
    out.p[out.len] = 0;
    if (len) *len = out.len;
    return out.p;
}

int32_t em_tokenizer_token_to_id(const em_tokenizer *t, const char *token, size_t len) {
    if (!t || (!token && len)) return -1;
    if (!token) token = "";
    int32_t id = tk_strmap_get(&t->added.by_content, token, len);
    return id >= 0 ? id : tk_strmap_get(&t->model.vocab.map, token, len);
}

const char *em_tokenizer_id_to_token(const em_tokenizer *t, int32_t id, size_t *len) {
    if (!t) return NULL;
    size_t l = 0;
    const char *s = decode_token(t, id, &l);
    if (s && len) *len = l;
    return s;
}

size_t em_tokenizer_vocab_size(const em_tokenizer *t) {
    if (!t) return 0;
    size_t n = t->model.vocab.size;
    for (size_t i = 0; i < t->added.n; i++)
        if (tk_strmap_get(&t->model.vocab.map, t->added.toks[i].content, t->added.toks[i].len) <
            0)
            n++;
    return n;
}

const char *em_tokenizer_special_token(const em_tokenizer *t, em_special_token which) {
    if (!t || (unsigned)which >= EM_SPECIAL_COUNT) return NULL;
    return t->special[which];
}

int32_t em_tokenizer_special_id(const em_tokenizer *t, em_special_token which) {
    if (!t || (unsigned)which >= EM_SPECIAL_COUNT) return -1;
    return t->special_id[which];
}

bool em_tokenizer_add_bos_token(const em_tokenizer *t) { return t && t->add_bos; }
bool em_tokenizer_add_eos_token(const em_tokenizer *t) { return t && t->add_eos; }

const char *em_tokenizer_chat_template(const em_tokenizer *t, const char *name) {
    if (!t || !t->n_templates) return NULL;
    for (size_t i = 0; i < t->n_templates; i++)
        if (!strcmp(t->tpl_names[i], name ? name : "default")) return t->tpl_sources[i];
    if (!name && t->n_templates == 1) return t->tpl_sources[0];
    return NULL;
}

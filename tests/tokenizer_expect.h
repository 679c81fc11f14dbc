/*
 * Shared by test_tokenizer.c and test_tokenizer_minilm.c: runs a tokenizer on the text set of
 * tests/fixtures/tokenizers/texts.json and compares everything with what `tokenizers` returned
 * (tests/fixtures/tokenizers/expected/<name>.json, made by scripts/gen_tokenizer_fixtures.py).
 */
#ifndef EMBER_TESTS_TOKENIZER_EXPECT_H
#define EMBER_TESTS_TOKENIZER_EXPECT_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/tokenizer.h"
#include "generate/detok.h"
#include "harness.h"

typedef struct tk_stats {
    int cases, cases_ok;      /* texts: encode (both modes) and decode (both modes) all right */
    int roundtrips, roundtrips_ok; /* decode(encode(text)) == text where the library agrees */
    int decodes, decodes_ok;  /* decoded id sequences */
    int tokens, tokens_ok;    /* id <-> token */
    int streams, streams_ok;  /* id sequences streamed one id at a time (em_generate's
                                 incremental detokenizer) whose pieces add up to the decode */
    int split_steps;          /* streamed ids that ended inside a multi-byte character */
    int fallback_steps;       /* streamed ids whose window decode needed the whole sequence */
    int unstreamable;         /* id sequences no stream can give: an id changes the text of
                                 the ids before it after that text was complete */
} tk_stats;

static inline void fixture_path(char *out, size_t n, const char *rel) {
    snprintf(out, n, "%s/tokenizers/%s", em_test_fixtures_dir(), rel);
}

static inline json_t *load_fixture_json(const char *rel) {
    char p[4096];
    fixture_path(p, sizeof p, rel);
    json_error_t je;
    json_t *j = json_load_file(p, JSON_ALLOW_NUL, &je);
    if (!j) fprintf(stderr, "cannot read %s: %s (line %d)\n", p, je.text, je.line);
    return j;
}

static inline void show_ids(const char *label, const int32_t *v, size_t n, size_t at) {
    size_t a = at > 4 ? at - 4 : 0, z = at + 6 < n ? at + 6 : n;
    fprintf(stderr, "    %s [%zu]:", label, n);
    for (size_t i = a; i < z; i++) fprintf(stderr, i == at ? " >%d<" : " %d", v[i]);
    fprintf(stderr, "\n");
}

/* Compares ids with the JSON array; prints the first difference. */
static inline bool same_ids(const char *what, const char *label, const int32_t *ids, size_t n,
                            json_t *want) {
    size_t m = json_array_size(want);
    int32_t *w = malloc((m ? m : 1) * sizeof *w);
    for (size_t i = 0; i < m; i++) w[i] = (int32_t)json_integer_value(json_array_get(want, i));
    size_t i = 0;
    while (i < n && i < m && ids[i] == w[i]) i++;
    bool ok = n == m && i == n;
    if (!ok) {
        fprintf(stderr, "  %s: %s: ids differ at %zu\n", label, what, i);
        show_ids("tokenizers", w, m, i);
        show_ids("ember     ", ids, n, i);
    }
    free(w);
    return ok;
}

static inline bool same_text(const char *what, const char *label, const char *got, size_t gl,
                             json_t *want) {
    const char *w = json_string_value(want);
    size_t wl = json_string_length(want);
    if (got && w && gl == wl && !memcmp(got, w, wl)) return true;
    fprintf(stderr, "  %s: %s: text differs\n    tokenizers: \"%.*s\"\n    ember     : \"%.*s\"\n",
            label, what, (int)(wl > 300 ? 300 : wl), w ? w : "", (int)(gl > 300 ? 300 : gl),
            got ? got : "(null)");
    return false;
}

static inline int32_t *ids_from_json(json_t *a, size_t *n) {
    *n = json_array_size(a);
    int32_t *v = malloc((*n ? *n : 1) * sizeof *v);
    for (size_t i = 0; i < *n; i++) v[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return v;
}

/* Whether every complete decode of a prefix of ids[0..n) is a prefix of the whole decode,
 * `full` (fl bytes): only then can text streamed as it completes add up to the decode. */
static inline bool prefix_stable(em_ctx *c, const em_tokenizer *tok, const em_token *ids,
                                 size_t n, const char *full, size_t fl) {
    bool ok = true;
    for (size_t i = 1; ok && i < n; i++) {
        size_t l = 0;
        char *d = em_tokenizer_decode(c, tok, ids, i, true, &l);
        bool incomplete = l >= 3 && !memcmp(d + l - 3, "\xEF\xBF\xBD", 3);
        ok = !d || incomplete || (l <= fl && !memcmp(d, full, l));
        em_free(d);
    }
    return ok;
}

/*
 * Streams ids[0..n) one id at a time through the incremental detokenizer that em_generate's
 * on_token uses (skip_special_tokens): the pieces, followed by what is still pending at the
 * end, must be the text `tokenizers` decodes from all the ids (`want`) and Ember's own decode
 * of them.
 */
static inline bool check_stream(em_ctx *c, const em_tokenizer *tok, const em_token *ids,
                                size_t n, json_t *want, const char *label, const char *what,
                                tk_stats *st) {
    em_detok d;
    memset(&d, 0, sizeof d);
    d.tok = tok;
    d.skip_special = true;
    size_t cap = 64, len = 0;
    char *got = malloc(cap);
    bool ok = got != NULL;
    for (size_t i = 1; ok && i <= n; i++) {
        const char *piece;
        ok = em_detok_step(c, &d, ids, i, &piece) == EM_OK;
        if (ok && !piece) st->split_steps++;
        size_t pl = 0;
        /* a piece is NUL-terminated; a NUL inside a token's text ends it early, so take the
         * bytes the step appended instead */
        if (ok && piece) pl = (size_t)(d.text + d.text_len - piece);
        if (ok && len + pl + 1 > cap) {
            while (len + pl + 1 > cap) cap *= 2;
            char *g = realloc(got, cap);
            ok = g != NULL;
            if (g) got = g;
        }
        if (ok && pl) memcpy(got + len, piece, pl), len += pl;
    }
    if (ok && len + d.tail_len + 1 > cap) {
        char *g = realloc(got, len + d.tail_len + 1);
        ok = g != NULL;
        if (g) got = g;
    }
    if (ok && d.tail_len) memcpy(got + len, d.tail, d.tail_len), len += d.tail_len;
    st->fallback_steps += (int)d.fallbacks;
    char w[200];
    snprintf(w, sizeof w, "stream of %s (skip special)", what);
    if (!ok) {
        fprintf(stderr, "  %s: %s: %s\n", label, w, em_ctx_error(c) ? em_ctx_error(c)->message
                                                                    : "out of memory");
        em_ctx_clear_error(c);
    } else {
        size_t fl = 0;
        char *full = em_tokenizer_decode(c, tok, ids, n, true, &fl);
        const char *wt = json_string_value(want);
        bool same = full && fl == len && !memcmp(full, got, len) && wt &&
                    json_string_length(want) == len && !memcmp(wt, got, len);
        if (!same && full && !prefix_stable(c, tok, ids, n, full, fl)) {
            st->unstreamable++; /* random ids only: the stream keeps what it emitted */
        } else if (!same) {
            ok = same_text(w, label, got, len, want);
            if (full && (fl != len || memcmp(full, got, len)))
                fprintf(stderr, "  %s: %s: differs from the full decode\n", label, w);
            ok = false;
        }
        em_free(full);
        em_ctx_clear_error(c);
    }
    em_detok_free(&d);
    free(got);
    st->streams++;
    st->streams_ok += ok;
    return ok;
}

/* Runs every expectation of `exp` on `tok`; adds to st and counts failures in the harness. */
static inline void check_expected(em_ctx *c, const em_tokenizer *tok, json_t *exp, json_t *texts,
                                  const char *label, tk_stats *st) {
    json_t *cases = json_object_get(exp, "cases");
    for (size_t k = 0; k < json_array_size(cases); k++) {
        json_t *cs = json_array_get(cases, k);
        json_t *tx = json_array_get(texts, (size_t)json_integer_value(json_object_get(cs, "text")));
        const char *text = json_string_value(json_object_get(tx, "text"));
        size_t tl = json_string_length(json_object_get(tx, "text"));
        char what[128];
        snprintf(what, sizeof what, "text \"%s\"", json_string_value(json_object_get(tx, "name")));
        bool ok = true;
        int32_t *ids = NULL, *ids_sp = NULL;
        size_t n = 0, n_sp = 0;
        if (em_tokenizer_encode(c, tok, text, tl, false, &ids, &n) != EM_OK ||
            em_tokenizer_encode(c, tok, text, tl, true, &ids_sp, &n_sp) != EM_OK) {
            fprintf(stderr, "  %s: %s: encode failed: %s\n", label, what,
                    em_ctx_error(c) ? em_ctx_error(c)->message : "?");
            em_ctx_clear_error(c);
            ok = false;
        } else {
            ok &= same_ids(what, label, ids, n, json_object_get(cs, "ids"));
            json_t *want_sp = json_object_get(cs, "ids_special");
            if (want_sp) {
                ok &= same_ids(what, label, ids_sp, n_sp, want_sp);
            } else {
                json_t *pre = json_object_get(cs, "special_prefix");
                json_t *suf = json_object_get(cs, "special_suffix");
                json_t *all = json_array();
                if (pre) json_array_extend(all, pre);
                json_array_extend(all, json_object_get(cs, "ids"));
                if (suf) json_array_extend(all, suf);
                char w2[160];
                snprintf(w2, sizeof w2, "%s with special tokens", what);
                ok &= same_ids(w2, label, ids_sp, n_sp, all);
                json_decref(all);
            }
            json_t *dec = json_object_get(cs, "decoded");
            json_t *dec_skip = json_object_get(cs, "decoded_skip");
            if (!dec_skip) dec_skip = dec;
            for (int skip = 0; skip < 2; skip++) {
                size_t dl;
                char *d = em_tokenizer_decode(c, tok, ids_sp, n_sp, skip, &dl);
                char w2[160];
                snprintf(w2, sizeof w2, "decode of %s%s", what, skip ? " (skip special)" : "");
                ok &= same_text(w2, label, d, dl, skip ? dec_skip : dec);
                em_free(d);
                if (!d) em_ctx_clear_error(c);
            }
            ok &= check_stream(c, tok, ids_sp, n_sp, dec_skip, label, what, st);
            /* round trip where the tokenizer is lossless (the library gives the text back):
             * decode(encode(text), skip_special_tokens) == text */
            size_t dl;
            char *d = em_tokenizer_decode(c, tok, ids_sp, n_sp, true, &dl);
            if (json_string_length(dec_skip) == tl && !memcmp(json_string_value(dec_skip), text, tl)) {
                st->roundtrips++;
                if (d && dl == tl && !memcmp(d, text, tl)) st->roundtrips_ok++;
                else {
                    fprintf(stderr, "  %s: %s: no round trip\n", label, what);
                    ok = false;
                }
            }
            em_free(d);
        }
        em_free(ids);
        em_free(ids_sp);
        st->cases++;
        st->cases_ok += ok;
        CHECK_MSG(ok, "%s: %s", label, what);
    }
    json_t *decs = json_object_get(exp, "decode");
    for (size_t k = 0; k < json_array_size(decs); k++) {
        json_t *d = json_array_get(decs, k);
        size_t n;
        int32_t *ids = ids_from_json(json_object_get(d, "ids"), &n);
        bool ok = true;
        for (int skip = 0; skip < 2; skip++) {
            size_t dl;
            char *text = em_tokenizer_decode(c, tok, ids, n, skip, &dl);
            char w[64];
            snprintf(w, sizeof w, "random decode %zu%s", k, skip ? " (skip special)" : "");
            ok &= same_text(w, label, text, dl, json_object_get(d, skip ? "text_skip" : "text"));
            em_free(text);
        }
        char w[64];
        snprintf(w, sizeof w, "random ids %zu", k);
        ok &= check_stream(c, tok, ids, n, json_object_get(d, "text_skip"), label, w, st);
        free(ids);
        st->decodes++;
        st->decodes_ok += ok;
        CHECK_MSG(ok, "%s: decode %zu", label, k);
    }
    json_t *toks = json_object_get(exp, "tokens");
    for (size_t k = 0; k < json_array_size(toks); k++) {
        json_t *e = json_array_get(toks, k);
        int32_t id = (int32_t)json_integer_value(json_array_get(e, 0));
        json_t *s = json_array_get(e, 1);
        size_t l = 0;
        const char *got = em_tokenizer_id_to_token(tok, id, &l);
        bool ok = got && l == json_string_length(s) && !memcmp(got, json_string_value(s), l);
        json_t *back = json_array_get(e, 2);
        int32_t want_back = json_is_integer(back) ? (int32_t)json_integer_value(back) : -1;
        int32_t got_back =
            em_tokenizer_token_to_id(tok, json_string_value(s), json_string_length(s));
        if (!ok || got_back != want_back)
            fprintf(stderr, "  %s: token %d: id_to_token \"%s\" (want \"%s\"), token_to_id %d "
                            "(want %d)\n", label, id, got ? got : "(null)", json_string_value(s),
                    got_back, want_back);
        ok &= got_back == want_back;
        st->tokens++;
        st->tokens_ok += ok;
        CHECK(ok);
    }
    size_t vs = em_tokenizer_vocab_size(tok);
    CHECK_MSG(vs == (size_t)json_integer_value(json_object_get(exp, "vocab_size")),
              "%s: vocab size %zu, tokenizers says %lld", label, vs,
              (long long)json_integer_value(json_object_get(exp, "vocab_size")));
}

static inline void print_stats(const char *label, const tk_stats *s) {
    fprintf(stderr, "  %-30s %2d/%-2d texts (x2 encode, x2 decode), %d/%d round trips, "
                    "%d/%d decodes, %d/%d tokens, %d/%d streams (%d ids inside a character, "
                    "%d full decodes, %d unstreamable)\n", label, s->cases_ok, s->cases,
            s->roundtrips_ok, s->roundtrips, s->decodes_ok, s->decodes, s->tokens_ok, s->tokens,
            s->streams_ok, s->streams, s->split_steps, s->fallback_steps, s->unstreamable);
}

#endif

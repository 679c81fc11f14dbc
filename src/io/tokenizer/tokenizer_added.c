/*
 * Added tokens (tokenizers/src/tokenizer/added_vocabulary.rs).
 *
 * `tokenizers` finds added tokens with a leftmost-longest Aho-Corasick automaton, once over the
 * raw text for tokens with normalized = false, then over each normalized piece for tokens with
 * normalized = true. A byte trie walked from each position gives the same matches: the leftmost
 * position where some pattern starts, and the longest pattern there. Matches are then filtered
 * and widened as the library does (single_word, lstrip, rstrip); a discarded match still moves
 * the search past its end, exactly like the automaton's iterator.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer/tokenizer_impl.h"

bool tk_trie_add(tk_trie *t, const char *s, size_t n, int32_t val, int32_t *dup) {
    *dup = -1;
    if (!t->val) {
        t->cap_nodes = 64;
        t->val = malloc(t->cap_nodes * sizeof *t->val);
        if (!t->val || !tk_u64map_init(&t->edges, 64)) return false;
        t->val[0] = -1;
        t->n_nodes = 1;
    }
    uint64_t node = 0, child;
    for (size_t i = 0; i < n; i++) {
        uint64_t key = (node << 8) | (unsigned char)s[i];
        if (!tk_u64map_get(&t->edges, key, &child)) {
            if (t->n_nodes == t->cap_nodes) {
                size_t cap = t->cap_nodes * 2;
                int32_t *v = realloc(t->val, cap * sizeof *v);
                if (!v) return false;
                t->val = v;
                t->cap_nodes = cap;
            }
            child = t->n_nodes++;
            t->val[child] = -1;
            if (!tk_u64map_put(&t->edges, key, child)) return false;
        }
        node = child;
    }
    if (t->val[node] >= 0) *dup = t->val[node];
    t->val[node] = val;
    t->first[(unsigned char)s[0] >> 3] |= (uint8_t)(1u << ((unsigned char)s[0] & 7));
    return true;
}

void tk_trie_free(tk_trie *t) {
    tk_u64map_free(&t->edges);
    free(t->val);
    memset(t, 0, sizeof *t);
}

void tk_added_free(tk_added *a) {
    free(a->toks);
    tk_strmap_free(&a->by_content);
    tk_u64map_free(&a->by_id);
    tk_strmap_free(&a->special);
    tk_trie_free(&a->raw);
    tk_trie_free(&a->normalized);
    memset(a, 0, sizeof *a);
}

/* Longest pattern starting at p: returns its end, or 0 when none (patterns are not empty). */
static size_t longest_at(const tk_trie *t, const char *s, size_t n, size_t p, int32_t *val) {
    uint64_t node = 0, child;
    size_t best = 0;
    for (size_t i = p; i < n; i++) {
        if (!tk_u64map_get(&t->edges, (node << 8) | (unsigned char)s[i], &child)) break;
        node = child;
        if (t->val[node] >= 0) {
            best = i + 1;
            *val = t->val[node];
        }
    }
    return best;
}

static uint32_t last_char(const char *s, size_t end) {
    size_t b = end - 1;
    while (b > 0 && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
    size_t k;
    return tk_utf8_next(s + b, &k);
}

bool tk_added_find(tk_enc *e, const tk_trie *trie, const char *s, size_t n, tk_spans *out,
                   tk_ids *ids) {
    out->n = 0;
    ids->n = 0;
    const tk_added *a = &e->t->added;
    size_t start_offset = 0, pos = 0;
    while (pos < n) {
        size_t ms = pos, me = 0;
        int32_t idx = -1;
        for (; ms < n; ms++) {
            unsigned char b = (unsigned char)s[ms];
            if (!(trie->first[b >> 3] & (1u << (b & 7)))) continue;
            me = longest_at(trie, s, n, ms, &idx);
            if (me) break;
        }
        if (!me) break;
        pos = me;
        const tk_added_token *tok = &a->toks[idx];
        if (tok->single_word) {
            bool start_space = ms == 0 || !tk_is_word_char(last_char(s, ms));
            size_t k;
            bool stop_space = me == n || !tk_is_word_char(tk_utf8_next(s + me, &k));
            if (!start_space || !stop_space) continue;
        }
        if (tok->lstrip) {
            size_t ns = ms;
            while (ns > 0) {
                size_t b = ns - 1;
                while (b > 0 && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
                size_t k;
                if (!tk_is_whitespace(tk_utf8_next(s + b, &k))) break;
                ns = b;
            }
            ms = ns > start_offset ? ns : start_offset;
        }
        if (tok->rstrip) {
            while (me < n) {
                size_t k;
                if (!tk_is_whitespace(tk_utf8_next(s + me, &k))) break;
                me += k;
            }
        }
        if (start_offset < ms && (!tk_spans_push(out, start_offset, ms, false) ||
                                  !tk_ids_push(ids, -1)))
            goto oom;
        /* a match that lstrip moved to the end of an earlier match's rstrip is empty: the
         * library drops empty splits, token or not */
        if (me > ms && (!tk_spans_push(out, ms, me, true) || !tk_ids_push(ids, tok->id)))
            goto oom;
        start_offset = me;
    }
    if (start_offset != n &&
        (!tk_spans_push(out, start_offset, n, false) || !tk_ids_push(ids, -1)))
        goto oom;
    return true;
oom:
    return tk_enc_fail(e, EM_ERR_OOM, "out of memory while matching added tokens");
}

/* ---- loading (tokenizer.json "added_tokens") ---- */

bool tk_parse_added_tokens(tk_ld *l, json_t *arr) {
    em_tokenizer *t = l->t;
    tk_added *a = &t->added;
    if (!arr || json_is_null(arr)) return true;
    if (!json_is_array(arr))
        return tk_ld_fail(l, EM_ERR_FORMAT, "added_tokens", "must be an array, not %s", tk_json_kind(arr));
    size_t n = json_array_size(arr);
    if (!tk_strmap_init(&a->by_content, n) || !tk_u64map_init(&a->by_id, n) ||
        !tk_strmap_init(&a->special, n))
        return tk_ld_oom(l);
    /* ids come from the vocabulary, not from the file (AddedVocabulary::add_tokens) */
    int64_t next_id = (int64_t)t->model.vocab.size;
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(arr, i);
        char w[64];
        snprintf(w, sizeof w, "added_tokens[%zu]", i);
        if (!json_is_object(o)) return tk_ld_fail(l, EM_ERR_FORMAT, w, "must be an object");
        tk_added_token tok = {0};
        if (!tk_opt_str(l, o, "content", true, &tok.content, &tok.len, w) ||
            !tk_opt_bool(l, o, "special", false, &tok.special, w) ||
            !tk_opt_bool(l, o, "single_word", false, &tok.single_word, w) ||
            !tk_opt_bool(l, o, "lstrip", false, &tok.lstrip, w) ||
            !tk_opt_bool(l, o, "rstrip", false, &tok.rstrip, w) ||
            !tk_opt_bool(l, o, "normalized", !tok.special, &tok.normalized, w))
            return false;
        json_t *id = json_object_get(o, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0)
            return tk_ld_fail(l, EM_ERR_FORMAT, w, "\"id\" must be a non-negative integer");
        if (tok.len == 0) continue;
        int32_t existing = tk_strmap_get(&a->by_content, tok.content, tok.len);
        uint64_t k;
        if (existing >= 0 && tk_u64map_get(&a->by_id, (uint64_t)existing, &k)) {
            const tk_added_token *p = &a->toks[k];
            if (p->special == tok.special && p->single_word == tok.single_word &&
                p->lstrip == tok.lstrip && p->rstrip == tok.rstrip &&
                p->normalized == tok.normalized)
                continue;
        }
        int32_t new_id = existing >= 0 ? existing
                                       : tk_strmap_get(&t->model.vocab.map, tok.content, tok.len);
        if (new_id < 0) {
            /* the model's vocabulary may already use ids at or above its size */
            if (next_id > INT32_MAX) return tk_ld_fail(l, EM_ERR_FORMAT, w, "too many tokens");
            new_id = (int32_t)next_id++;
        }
        tok.id = new_id;
        if (tok.normalized && t->normalizer) {
            tk_buf out = {0};
            bool lead;
            tk_enc e = {.c = l->c, .t = t};
            bool ok = tk_normalize(&e, t->normalizer, tok.content, tok.len, &out, &lead);
            tk_enc_free(&e);
            if (!ok) {
                tk_buf_free(&out);
                return false;
            }
            if (out.len != tok.len || memcmp(out.p, tok.content, tok.len)) {
                tok.norm = tk_arena_strndup(&t->arena, out.p ? out.p : "", out.len);
                tok.norm_len = out.len;
                if (!tok.norm) {
                    tk_buf_free(&out);
                    return tk_ld_oom(l);
                }
            }
            tk_buf_free(&out);
        }
        if (!tk_strmap_put(&a->by_content, tok.content, tok.len, new_id)) return tk_ld_oom(l);
        if (tok.special && !tk_strmap_put(&a->special, tok.content, tok.len, 1)) return tk_ld_oom(l);
        if (tk_u64map_get(&a->by_id, (uint64_t)new_id, &k)) {
            /* same id again: the new properties replace the old, a cached normalized form
             * stays (as normalized_cache does) */
            if (!tok.norm && a->toks[k].norm) {
                tok.norm = a->toks[k].norm;
                tok.norm_len = a->toks[k].norm_len;
            }
            a->toks[k] = tok;
            continue;
        }
        if (a->n == a->cap) {
            size_t cap = a->cap ? a->cap * 2 : 16;
            tk_added_token *nt = realloc(a->toks, cap * sizeof *nt);
            if (!nt) return tk_ld_oom(l);
            a->toks = nt;
            a->cap = cap;
        }
        a->toks[a->n] = tok;
        if (!tk_u64map_put(&a->by_id, (uint64_t)new_id, a->n)) return tk_ld_oom(l);
        a->n++;
    }
    /* the two matching sets, in id order so that among equal patterns the larger id wins */
    size_t *order = malloc((a->n ? a->n : 1) * sizeof *order);
    if (!order) return tk_ld_oom(l);
    for (size_t i = 0; i < a->n; i++) order[i] = i;
    for (size_t i = 1; i < a->n; i++) { /* insertion sort by id (added tokens are few) */
        size_t x = order[i], j = i;
        while (j > 0 && a->toks[order[j - 1]].id > a->toks[x].id) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = x;
    }
    for (size_t i = 0; i < a->n; i++) {
        const tk_added_token *tok = &a->toks[order[i]];
        tk_trie *trie = tok->normalized ? &a->normalized : &a->raw;
        const char *pat = tok->normalized && tok->norm ? tok->norm : tok->content;
        size_t pl = tok->normalized && tok->norm ? tok->norm_len : tok->len;
        if (!pl) continue;
        int32_t dup;
        if (!tk_trie_add(trie, pat, pl, (int32_t)order[i], &dup)) {
            free(order);
            return tk_ld_oom(l);
        }
        if (tok->normalized) a->has_normalized = true;
        else a->has_raw = true;
    }
    free(order);
    return true;
}

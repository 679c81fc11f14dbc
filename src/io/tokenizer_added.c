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
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer_impl.h"

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

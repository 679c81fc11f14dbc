/*
 * WordPiece, WordLevel and Unigram models (tokenizers/src/models/{wordpiece,wordlevel,unigram}),
 * the vocabulary helpers and the model dispatch.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer/tokenizer_impl.h"

/* ---- vocabulary ---- */

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

bool tk_vocab_finish(tk_vocab *v) {
    const tk_strmap *m = &v->map;
    int32_t max_id = -1;
    for (uint32_t i = 0; i < m->n; i++)
        if (m->ents[i].val > max_id) max_id = m->ents[i].val;
    size_t n = m->n;
    if (max_id < 0) return true;
    if ((size_t)max_id < n * 4 + 65536) {
        v->rev_n = (size_t)max_id + 1;
        v->rev_s = calloc(v->rev_n, sizeof *v->rev_s);
        v->rev_len = calloc(v->rev_n, sizeof *v->rev_len);
        if (!v->rev_s || !v->rev_len) return false;
        /* with duplicate ids the last entry wins (an arbitrary but stable choice) */
        for (uint32_t i = 0; i < m->n; i++) {
            v->rev_s[m->ents[i].val] = m->ents[i].s;
            v->rev_len[m->ents[i].val] = m->ents[i].len;
        }
        return true;
    }
    /* sparse ids: sorted (id, index) pairs */
    int64_t *pairs = malloc(n * sizeof *pairs);
    if (!pairs) return false;
    for (uint32_t i = 0; i < m->n; i++) pairs[i] = ((int64_t)m->ents[i].val << 32) | i;
    qsort(pairs, n, sizeof *pairs, cmp_i64);
    v->sparse_ids = malloc(n * sizeof *v->sparse_ids);
    v->rev_s = malloc(n * sizeof *v->rev_s);
    v->rev_len = malloc(n * sizeof *v->rev_len);
    if (!v->sparse_ids || !v->rev_s || !v->rev_len) {
        free(pairs);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t k = (uint32_t)pairs[i];
        v->sparse_ids[i] = (int32_t)(pairs[i] >> 32);
        v->rev_s[i] = m->ents[k].s;
        v->rev_len[i] = m->ents[k].len;
    }
    v->rev_n = n;
    free(pairs);
    return true;
}

const char *tk_vocab_token(const tk_vocab *v, int32_t id, size_t *len) {
    if (id < 0 || !v->rev_s) return NULL;
    if (!v->sparse_ids) {
        if ((size_t)id >= v->rev_n || !v->rev_s[id]) return NULL;
        if (len) *len = v->rev_len[id];
        return v->rev_s[id];
    }
    size_t lo = 0, hi = v->rev_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v->sparse_ids[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    /* the last of equal ids, like the dense table */
    if (lo >= v->rev_n || v->sparse_ids[lo] != id) return NULL;
    while (lo + 1 < v->rev_n && v->sparse_ids[lo + 1] == id) lo++;
    if (len) *len = v->rev_len[lo];
    return v->rev_s[lo];
}

void tk_vocab_free(tk_vocab *v) {
    tk_strmap_free(&v->map);
    free(v->rev_s);
    free(v->rev_len);
    free(v->sparse_ids);
    memset(v, 0, sizeof *v);
}

void tk_model_free(tk_model *m) {
    tk_vocab_free(&m->vocab);
    tk_u64map_free(&m->merges);
    tk_bpe_cache_free(m->cache);
    free(m->char_ids);
    free(m->scores);
    tk_u64map_free(&m->trie);
    free(m->trie_val);
    memset(m, 0, sizeof *m);
}

static bool oom(tk_enc *e) { return tk_enc_fail(e, EM_ERR_OOM, "out of memory in the model"); }

/* ---- WordPiece: greedy longest-match-first ---- */

static bool wordpiece_unk(tk_enc *e, const tk_model *m) {
    if (m->unk_id < 0)
        return tk_enc_fail(e, EM_ERR_FORMAT,
                           "WordPiece: the unknown token \"%s\" is not in the vocabulary",
                           m->unk_token ? m->unk_token : "");
    return tk_ids_push(&e->out, m->unk_id) ? true : oom(e);
}

static bool wordpiece(tk_enc *e, const tk_model *m, const char *s, size_t n) {
    size_t chars = 0;
    for (size_t i = 0; i < n; i += tk_utf8_len((unsigned char)s[i])) chars++;
    if (chars > m->max_input_chars_per_word) return wordpiece_unk(e, m);
    size_t before = e->out.n;
    tk_buf *b = &e->word;
    size_t start = 0;
    while (start < n) {
        size_t end = n;
        int32_t found = -1;
        while (start < end) {
            const char *sub = s + start;
            size_t sl = end - start;
            if (start > 0) {
                b->len = 0;
                if (!tk_buf_append(b, m->prefix, m->prefix_len) || !tk_buf_append(b, sub, sl))
                    return oom(e);
                sub = b->p;
                sl = b->len;
            }
            found = tk_strmap_get(&m->vocab.map, sub, sl);
            if (found >= 0) break;
            /* drop the last character */
            size_t k = end - 1;
            while (k > start && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
            end = k;
        }
        if (found < 0) {
            e->out.n = before;
            return wordpiece_unk(e, m);
        }
        if (!tk_ids_push(&e->out, found)) return oom(e);
        start = end;
    }
    return true;
}

/* ---- WordLevel ---- */

static bool wordlevel(tk_enc *e, const tk_model *m, const char *s, size_t n) {
    int32_t id = tk_strmap_get(&m->vocab.map, s, n);
    if (id < 0) id = m->unk_id;
    if (id < 0)
        return tk_enc_fail(e, EM_ERR_FORMAT,
                           "WordLevel: \"%.*s\" is not in the vocabulary and the unknown token "
                           "\"%s\" is not either", (int)(n > 60 ? 60 : n), s,
                           m->unk_token ? m->unk_token : "");
    return tk_ids_push(&e->out, id) ? true : oom(e);
}

/* ---- Unigram: Viterbi over the lattice of vocabulary pieces (encode_optimized) ---- */

#define UNK_PENALTY 10.0

bool tk_unigram_build(tk_model *m) {
    m->trie_nodes = 1;
    size_t cap = 1024;
    m->trie_val = malloc(cap * sizeof *m->trie_val);
    if (!m->trie_val || !tk_u64map_init(&m->trie, m->vocab.size * 4)) return false;
    m->trie_val[0] = -1;
    m->min_score = INFINITY;
    for (size_t id = 0; id < m->vocab.size; id++) {
        size_t len;
        const char *s = tk_vocab_token(&m->vocab, (int32_t)id, &len);
        if (m->scores[id] < m->min_score) m->min_score = m->scores[id];
        if (!s || !len) continue;
        uint64_t node = 0;
        for (size_t i = 0; i < len; i++) {
            uint64_t key = (node << 8) | (unsigned char)s[i], child;
            if (!tk_u64map_get(&m->trie, key, &child)) {
                if (m->trie_nodes == cap) {
                    cap *= 2;
                    int32_t *v = realloc(m->trie_val, cap * sizeof *v);
                    if (!v) return false;
                    m->trie_val = v;
                }
                child = m->trie_nodes++;
                m->trie_val[child] = -1;
                if (!tk_u64map_put(&m->trie, key, child)) return false;
            }
            node = child;
        }
        if (len > m->max_token_len) m->max_token_len = len;
    }
    /* the value of a node is the id the token string maps to (the last duplicate) */
    for (uint32_t i = 0; i < m->vocab.map.n; i++) {
        const struct tk_strmap_ent *en = &m->vocab.map.ents[i];
        uint64_t node = 0, child = 0;
        bool ok = en->len > 0;
        for (size_t j = 0; ok && j < en->len; j++) {
            ok = tk_u64map_get(&m->trie, (node << 8) | (unsigned char)en->s[j], &child);
            node = child;
        }
        if (ok) m->trie_val[node] = en->val;
    }
    return true;
}

static bool unigram(tk_enc *e, const tk_model *m, const char *s, size_t n) {
    if (e->best_cap < n + 1) {
        size_t cap = n + 1 < 256 ? 256 : (n + 1) * 2;
        double *bs = realloc(e->best_score, cap * sizeof *bs);
        if (!bs) return oom(e);
        e->best_score = bs;
        size_t *st = realloc(e->best_start, cap * sizeof *st);
        if (!st) return oom(e);
        e->best_start = st;
        int32_t *bi = realloc(e->best_id, cap * sizeof *bi);
        if (!bi) return oom(e);
        e->best_id = bi;
        e->best_cap = cap;
    }
    double *score = e->best_score;
    size_t *from = e->best_start;
    int32_t *idv = e->best_id;
    for (size_t i = 0; i <= n; i++) {
        score[i] = 0;
        from[i] = SIZE_MAX;
        idv[i] = 0;
    }
    double unk_score = m->min_score - UNK_PENALTY;
    for (size_t at = 0; at < n;) {
        double here = score[at];
        size_t mblen = tk_utf8_len((unsigned char)s[at]);
        bool single = false;
        uint64_t node = 0, child;
        for (size_t j = at; j < n; j++) {
            if (!tk_u64map_get(&m->trie, (node << 8) | (unsigned char)s[j], &child)) break;
            node = child;
            int32_t id = m->trie_val[node];
            if (id < 0) continue;
            size_t endp = j + 1;
            double cand = m->scores[id] + here;
            if (from[endp] == SIZE_MAX || cand > score[endp]) {
                score[endp] = cand;
                from[endp] = at;
                idv[endp] = id;
            }
            if (endp - at == mblen) single = true;
        }
        if (!single) {
            size_t endp = at + mblen;
            double cand = unk_score + here;
            if (from[endp] == SIZE_MAX || cand > score[endp]) {
                if (m->unk_id < 0)
                    return tk_enc_fail(e, EM_ERR_FORMAT,
                                       "Unigram: a character is not in the vocabulary and the "
                                       "model has no unk_id");
                score[endp] = cand;
                from[endp] = at;
                idv[endp] = m->unk_id;
            }
        }
        at += mblen;
    }
    /* backtrack into (start, end) pieces, fusing runs of unknown pieces */
    tk_ids *pieces = &e->tmp; /* pairs start, end in reverse order */
    pieces->n = 0;
    size_t end = n, fuse_end = SIZE_MAX, fuse_start = 0;
    while (end > 0) {
        size_t st = from[end];
        if (st == SIZE_MAX) return tk_enc_fail(e, EM_ERR_INTERNAL, "Unigram: broken lattice");
        if (idv[end] == m->unk_id && m->unk_id >= 0) {
            if (fuse_end == SIZE_MAX) fuse_end = end;
            fuse_start = st;
        } else {
            if (fuse_end != SIZE_MAX) {
                if (!tk_ids_push(pieces, (int32_t)fuse_start) ||
                    !tk_ids_push(pieces, (int32_t)fuse_end))
                    return oom(e);
                fuse_end = SIZE_MAX;
            }
            if (!tk_ids_push(pieces, (int32_t)st) || !tk_ids_push(pieces, (int32_t)end))
                return oom(e);
        }
        end = st;
    }
    if (fuse_end != SIZE_MAX &&
        (!tk_ids_push(pieces, (int32_t)fuse_start) || !tk_ids_push(pieces, (int32_t)fuse_end)))
        return oom(e);
    /* pieces -> ids (Model::tokenize): a string lookup, byte fallback, then unk */
    for (size_t i = pieces->n; i >= 2; i -= 2) {
        size_t a = (size_t)pieces->v[i - 2], z = (size_t)pieces->v[i - 1];
        int32_t id = tk_strmap_get(&m->vocab.map, s + a, z - a);
        if (id >= 0) {
            if (!tk_ids_push(&e->out, id)) return oom(e);
            continue;
        }
        if (m->byte_fallback) {
            bool all = true;
            for (size_t j = a; j < z && all; j++) all = m->byte_ids[(unsigned char)s[j]] >= 0;
            if (all) {
                for (size_t j = a; j < z; j++)
                    if (!tk_ids_push(&e->out, m->byte_ids[(unsigned char)s[j]])) return oom(e);
                continue;
            }
        }
        if (m->unk_id < 0)
            return tk_enc_fail(e, EM_ERR_FORMAT, "Unigram: unknown piece and no unk_id");
        if (!tk_ids_push(&e->out, m->unk_id)) return oom(e);
    }
    return true;
}

bool tk_model_tokenize(tk_enc *e, const char *s, size_t len) {
    if (len == 0) return true;
    const tk_model *m = &e->t->model;
    switch (m->type) {
    case TK_MODEL_BPE: return tk_bpe_tokenize(e, s, len);
    case TK_MODEL_WORDPIECE: return wordpiece(e, m, s, len);
    case TK_MODEL_WORDLEVEL: return wordlevel(e, m, s, len);
    case TK_MODEL_UNIGRAM: return unigram(e, m, s, len);
    }
    return tk_enc_fail(e, EM_ERR_INTERNAL, "unknown model type");
}


/* The vocabulary as a JSON object (slow path). */
static bool vocab_from_json(tk_ld *l, json_t *v, tk_vocab *voc) {
    if (!json_is_object(v))
        return tk_ld_fail(l, EM_ERR_FORMAT, "model.vocab", "must be an object {\"token\": id}, not %s",
                     tk_json_kind(v));
    if (!tk_strmap_init(&voc->map, json_object_size(v))) return tk_ld_oom(l);
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) > INT32_MAX)
            return tk_ld_fail(l, EM_ERR_FORMAT, "model.vocab",
                         "the id of \"%.60s\" must be an integer in [0, 2147483647], not %s", key,
                         tk_json_kind(val));
        size_t n = strlen(key);
        char *k = tk_arena_strndup(&l->t->arena, key, n);
        if (!k || !tk_strmap_put(&voc->map, k, n, (int32_t)json_integer_value(val)))
            return tk_ld_oom(l);
    }
    voc->size = voc->map.n;
    return true;
}

bool tk_bpe_merges_from(tk_ld *l, tk_model *m, size_t n, tk_merge_get_fn get, void *user) {
    if (!tk_u64map_init(&m->merges, n)) return tk_ld_oom(l);
    uint32_t rank = 0;
    tk_merge_batch *batch = calloc(1, sizeof *batch);
    if (!batch) return tk_ld_oom(l);
    bool ok = true;
    char err[400];
    for (size_t i = 0; i < n && ok; i++) {
        const char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        if (!get(l, user, i, &a, &la, &b, &lb)) {
            ok = false;
            break;
        }
        if (!a) continue; /* not a merge (a "#version" line) */
        if (!tk_bpe_merge_add(m, batch, a, la, b, lb, rank++, i, err, sizeof err))
            ok = tk_ld_fail(l, EM_ERR_FORMAT, NULL, "%s", err);
    }
    if (ok && !tk_bpe_merge_flush(m, batch, err, sizeof err))
        ok = tk_ld_fail(l, EM_ERR_FORMAT, NULL, "%s", err);
    tk_buf_free(&batch->buf);
    free(batch);
    return ok;
}

/* Merge i of a JSON merges array: "a b" or ["a", "b"]. */
static bool json_merge(tk_ld *l, void *user, size_t i, const char **a, size_t *la, const char **b,
                       size_t *lb) {
    json_t *e = json_array_get(user, i);
    char w[64];
    snprintf(w, sizeof w, "model.merges[%zu]", i);
    if (json_is_string(e)) {
        const char *s = json_string_value(e);
        size_t n = json_string_length(e);
        if (n >= 8 && !memcmp(s, "#version", 8)) {
            *a = NULL;
            return true;
        }
        const char *sp = memchr(s, ' ', n);
        if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp - s) - 1))
            return tk_ld_fail(l, EM_ERR_FORMAT, w, "\"%.60s\" must hold exactly one space", s);
        *a = s, *la = (size_t)(sp - s), *b = sp + 1, *lb = n - *la - 1;
        return true;
    }
    if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
        json_is_string(json_array_get(e, 1))) {
        *a = json_string_value(json_array_get(e, 0));
        *la = json_string_length(json_array_get(e, 0));
        *b = json_string_value(json_array_get(e, 1));
        *lb = json_string_length(json_array_get(e, 1));
        return true;
    }
    return tk_ld_fail(l, EM_ERR_FORMAT, w,
                      "must be a string \"a b\" or a pair [\"a\", \"b\"], not %s", tk_json_kind(e));
}

static bool merges_from_json(tk_ld *l, json_t *v, tk_model *m) {
    if (!json_is_array(v))
        return tk_ld_fail(l, EM_ERR_FORMAT, "model.merges", "must be an array, not %s", tk_json_kind(v));
    return tk_bpe_merges_from(l, m, json_array_size(v), json_merge, v);
}

static bool unigram_vocab_from_json(tk_ld *l, json_t *v, tk_model *m) {
    if (!json_is_array(v))
        return tk_ld_fail(l, EM_ERR_FORMAT, "model.vocab",
                     "a Unigram vocabulary must be an array of [\"piece\", score], not %s",
                     tk_json_kind(v));
    size_t n = json_array_size(v);
    if (n >= INT32_MAX) return tk_ld_fail(l, EM_ERR_FORMAT, "model.vocab", "too many pieces");
    m->scores = malloc((n ? n : 1) * sizeof *m->scores);
    m->vocab.rev_s = malloc((n ? n : 1) * sizeof *m->vocab.rev_s);
    m->vocab.rev_len = malloc((n ? n : 1) * sizeof *m->vocab.rev_len);
    if (!m->scores || !m->vocab.rev_s || !m->vocab.rev_len || !tk_strmap_init(&m->vocab.map, n))
        return tk_ld_oom(l);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        json_t *s = json_array_get(e, 0), *sc = json_array_get(e, 1);
        if (!json_is_array(e) || json_array_size(e) != 2 || !json_is_string(s) ||
            !json_is_number(sc)) {
            char w[64];
            snprintf(w, sizeof w, "model.vocab[%zu]", i);
            return tk_ld_fail(l, EM_ERR_FORMAT, w, "must be [\"piece\", score]");
        }
        size_t len = json_string_length(s);
        char *k = tk_arena_strndup(&l->t->arena, json_string_value(s), len);
        if (!k || !tk_strmap_put(&m->vocab.map, k, len, (int32_t)i)) return tk_ld_oom(l);
        m->scores[i] = json_number_value(sc);
        m->vocab.rev_s[i] = k;
        m->vocab.rev_len[i] = (uint32_t)len;
    }
    m->vocab.size = n;
    m->vocab.rev_n = n;
    return true;
}

bool tk_bpe_options(tk_ld *l, json_t *v, tk_model *m) {
    m->type = TK_MODEL_BPE;
    const char *prefix, *suffix;
    size_t pl, sl;
    if (!tk_opt_str(l, v, "unk_token", false, &m->unk_token, &m->unk_len, "model") ||
        !tk_opt_str(l, v, "continuing_subword_prefix", false, &prefix, &pl, "model") ||
        !tk_opt_str(l, v, "end_of_word_suffix", false, &suffix, &sl, "model") ||
        !tk_opt_bool(l, v, "fuse_unk", false, &m->fuse_unk, "model") ||
        !tk_opt_bool(l, v, "byte_fallback", false, &m->byte_fallback, "model") ||
        !tk_opt_bool(l, v, "ignore_merges", false, &m->ignore_merges, "model"))
        return false;
    json_t *dropout = json_object_get(v, "dropout");
    if (dropout && !json_is_null(dropout) && !json_is_number(dropout))
        return tk_ld_fail(l, EM_ERR_FORMAT, "model", "\"dropout\" must be null or a number");
    m->prefix = prefix, m->prefix_len = pl;
    m->suffix = suffix, m->suffix_len = sl;
    if (m->unk_token) m->unk_id = tk_strmap_get(&m->vocab.map, m->unk_token, m->unk_len);
    return true;
}

bool tk_parse_model(tk_ld *l, json_t *v, const char *doc, const tk_json_span *vs,
                        const tk_json_span *ms) {
    tk_model *m = &l->t->model;
    m->unk_id = -1;
    if (!json_is_object(v))
        return tk_ld_fail(l, EM_ERR_FORMAT, "model", "expected an object, found %s",
                     v ? tk_json_kind(v) : "nothing");
    json_t *ty = json_object_get(v, "type");
    const char *type;
    if (ty) {
        if (!json_is_string(ty)) return tk_ld_fail(l, EM_ERR_FORMAT, "model", "\"type\" must be a string");
        type = json_string_value(ty);
    } else if (json_object_get(v, "merges") || (ms && ms->end))
        type = "BPE"; /* files older than the "type" field: infer as serde's untagged enum did */
    else if (json_object_get(v, "continuing_subword_prefix") ||
             json_object_get(v, "max_input_chars_per_word"))
        type = "WordPiece";
    else if (json_is_array(json_object_get(v, "vocab")) ||
             (vs && vs->end && doc[vs->start] == '['))
        type = "Unigram";
    else
        type = "WordLevel";
    char err[600];
    bool fast = vs && vs->end > vs->start;

    if (!strcmp(type, "Unigram")) {
        m->type = TK_MODEL_UNIGRAM;
        if (fast) {
            if (!tk_json_parse_unigram_vocab(doc, *vs, &l->t->arena, m, err, sizeof err))
                return tk_ld_fail(l, EM_ERR_FORMAT, NULL, "%s", err);
        } else {
            json_t *voc = json_object_get(v, "vocab");
            if (!voc) return tk_ld_fail(l, EM_ERR_FORMAT, "model", "missing \"vocab\"");
            if (!unigram_vocab_from_json(l, voc, m)) return false;
        }
        json_t *unk = json_object_get(v, "unk_id");
        if (unk && !json_is_null(unk)) {
            if (!json_is_integer(unk) || json_integer_value(unk) < 0)
                return tk_ld_fail(l, EM_ERR_FORMAT, "model", "\"unk_id\" must be null or an index");
            if ((size_t)json_integer_value(unk) >= m->vocab.size)
                return tk_ld_fail(l, EM_ERR_FORMAT, "model",
                             "\"unk_id\" %lld is larger than the vocabulary (%zu pieces)",
                             (long long)json_integer_value(unk), m->vocab.size);
            m->unk_id = (int32_t)json_integer_value(unk);
        }
        if (!tk_opt_bool(l, v, "byte_fallback", false, &m->byte_fallback, "model")) return false;
        for (int b = 0; b < 256; b++) {
            char tok[8];
            snprintf(tok, sizeof tok, "<0x%02X>", b);
            m->byte_ids[b] = tk_strmap_get(&m->vocab.map, tok, 6);
        }
        return tk_unigram_build(m) ? true : tk_ld_oom(l);
    }

    bool is_bpe = !strcmp(type, "BPE"), is_wp = !strcmp(type, "WordPiece"),
         is_wl = !strcmp(type, "WordLevel");
    if (!is_bpe && !is_wp && !is_wl)
        return tk_ld_fail(l, EM_ERR_FORMAT, "model", "unknown model type \"%s\"", type);
    if (fast) {
        if (doc[vs->start] != '{')
            return tk_ld_fail(l, EM_ERR_FORMAT, "model.vocab", "must be an object {\"token\": id}");
        if (!tk_json_parse_vocab(doc, *vs, &l->t->arena, &m->vocab, err, sizeof err))
            return tk_ld_fail(l, EM_ERR_FORMAT, NULL, "%s", err);
    } else {
        json_t *voc = json_object_get(v, "vocab");
        if (!voc) return tk_ld_fail(l, EM_ERR_FORMAT, "model", "missing \"vocab\"");
        if (!vocab_from_json(l, voc, &m->vocab)) return false;
    }
    if (!tk_vocab_finish(&m->vocab)) return tk_ld_oom(l);

    if (is_bpe) {
        if (!tk_bpe_options(l, v, m)) return false;
        if (ms && ms->end > ms->start) {
            if (!tk_json_parse_merges(doc, *ms, m, err, sizeof err))
                return tk_ld_fail(l, EM_ERR_FORMAT, NULL, "%s", err);
        } else {
            json_t *mg = json_object_get(v, "merges");
            if (!mg) return tk_ld_fail(l, EM_ERR_FORMAT, "model", "missing \"merges\"");
            if (!merges_from_json(l, mg, m)) return false;
        }
        return tk_bpe_init(m) ? true : tk_ld_oom(l);
    }
    if (is_wp) {
        m->type = TK_MODEL_WORDPIECE;
        if (!tk_opt_str(l, v, "unk_token", false, &m->unk_token, &m->unk_len, "model") ||
            !tk_opt_str(l, v, "continuing_subword_prefix", false, &m->prefix, &m->prefix_len,
                     "model") ||
            !tk_opt_uint(l, v, "max_input_chars_per_word", 100, &m->max_input_chars_per_word,
                      "model"))
            return false;
        if (!m->unk_token) m->unk_token = "[UNK]", m->unk_len = 5;
        if (!m->prefix) m->prefix = "##", m->prefix_len = 2;
    } else {
        m->type = TK_MODEL_WORDLEVEL;
        if (!tk_opt_str(l, v, "unk_token", false, &m->unk_token, &m->unk_len, "model")) return false;
        if (!m->unk_token) m->unk_token = "<unk>", m->unk_len = 5;
    }
    m->unk_id = tk_strmap_get(&m->vocab.map, m->unk_token, m->unk_len);
    return true;
}

/*
 * The BPE model (tokenizers/src/models/bpe/{model,word}.rs).
 *
 * A word starts as one symbol per character (with continuing_subword_prefix on all but the
 * first and end_of_word_suffix on the last; unknown characters become byte-fallback tokens or
 * the unknown token, fused or not), then the pair with the lowest merge rank is merged until no
 * pair can be: a min-heap on (rank, position), stale entries skipped, as word.rs does.
 * Results for words shorter than 256 bytes are kept in a cache of 65,536 words and at most 2^20
 * ids (the library keeps 10,000 words per thread); the cache changes speed, never results.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer/tokenizer_impl.h"

#define BPE_CACHE_CAPACITY 65536
#define BPE_CACHE_MAX_IDS (1u << 20)   /* bounds the cache's memory too: 4 MB of ids... */
#define BPE_CACHE_MAX_KEYS (4u << 20)  /* ...and about 4 MB of words */
#define BPE_CACHE_MAX_LEN 256

struct tk_sym {
    int32_t c;
    int32_t prev, next;
    uint32_t len;
};

struct tk_merge_ent {
    uint32_t rank, pos;
    int32_t new_id;
};

static inline bool ent_less(const struct tk_merge_ent *a, const struct tk_merge_ent *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(struct tk_merge_ent *h, size_t *n, struct tk_merge_ent x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ent_less(&x, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static struct tk_merge_ent heap_pop(struct tk_merge_ent *h, size_t *n) {
    struct tk_merge_ent top = h[0];
    struct tk_merge_ent x = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= *n) break;
        size_t m = l;
        if (l + 1 < *n && ent_less(&h[l + 1], &h[l])) m = l + 1;
        if (!ent_less(&h[m], &x)) break;
        h[i] = h[m];
        i = m;
    }
    h[i] = x;
    return top;
}

static inline bool merge_get(const tk_model *m, int32_t a, int32_t b, uint32_t *rank,
                             int32_t *new_id) {
    uint64_t v;
    if (!tk_u64map_get(&m->merges, ((uint64_t)(uint32_t)a << 32) | (uint32_t)b, &v))
        return false;
    *rank = (uint32_t)(v >> 32);
    *new_id = (int32_t)(uint32_t)v;
    return true;
}

bool tk_bpe_merge_add(tk_model *m, tk_merge_batch *b, const char *a, size_t alen, const char *bb,
                      size_t blen, uint32_t rank, size_t index, char *err, size_t errsz) {
    if (alen > UINT32_MAX / 2 || blen > UINT32_MAX / 2) {
        snprintf(err, errsz, "model.merges[%zu] is too long", index);
        return false;
    }
    if (b->n == (int)(sizeof b->item / sizeof b->item[0]) && !tk_bpe_merge_flush(m, b, err, errsz))
        return false;
    size_t cut = m->prefix ? m->prefix_len : 0;
    if (cut > blen) {
        snprintf(err, errsz, "model.merges[%zu]: token \"%.*s\" is shorter than the continuing "
                             "subword prefix", index, (int)(blen > 100 ? 100 : blen), bb);
        return false;
    }
    struct tk_merge_item *it = &b->item[b->n++];
    it->alen = (uint32_t)alen, it->blen = (uint32_t)blen;
    it->rank = rank, it->index = index;
    it->aoff = b->buf.len;
    it->boff = it->aoff + alen;
    it->noff = it->boff + blen;
    it->nlen = (uint32_t)(alen + blen - cut);
    if (!tk_buf_append(&b->buf, a, alen) || !tk_buf_append(&b->buf, bb, blen) ||
        !tk_buf_append(&b->buf, a, alen) || !tk_buf_append(&b->buf, bb + cut, blen - cut)) {
        snprintf(err, errsz, "out of memory");
        return false;
    }
    return true;
}

bool tk_bpe_merge_flush(tk_model *m, tk_merge_batch *b, char *err, size_t errsz) {
    const tk_strmap *v = &m->vocab.map;
    const char *p = b->buf.p;
    /* 1. hash everything and start loading the slots */
    for (int i = 0; i < b->n; i++) {
        struct tk_merge_item *it = &b->item[i];
        it->ha = tk_hash(p + it->aoff, it->alen);
        it->hb = tk_hash(p + it->boff, it->blen);
        it->hn = tk_hash(p + it->noff, it->nlen);
        tk_strmap_prefetch(v, it->ha);
        tk_strmap_prefetch(v, it->hb);
        tk_strmap_prefetch(v, it->hn);
    }
    /* 2. probe, and start loading the merge table's slots */
    for (int i = 0; i < b->n; i++) {
        struct tk_merge_item *it = &b->item[i];
        it->ia = tk_strmap_get_h(v, p + it->aoff, it->alen, it->ha);
        it->ib = tk_strmap_get_h(v, p + it->boff, it->blen, it->hb);
        it->inew = tk_strmap_get_h(v, p + it->noff, it->nlen, it->hn);
        if (it->ia >= 0 && it->ib >= 0)
            tk_u64map_prefetch(&m->merges, ((uint64_t)(uint32_t)it->ia << 32) | (uint32_t)it->ib);
    }
    /* 3. insert, in order: a repeated pair keeps the later rank, as collecting into a HashMap
     * does */
    bool ok = true;
    for (int i = 0; ok && i < b->n; i++) {
        struct tk_merge_item *it = &b->item[i];
        if (it->ia < 0 || it->ib < 0) {
            const char *w = p + (it->ia < 0 ? it->aoff : it->boff);
            size_t wl = it->ia < 0 ? it->alen : it->blen;
            snprintf(err, errsz, "model.merges[%zu] names the token \"%.*s\" that is not in the "
                                 "vocabulary", it->index, (int)(wl > 100 ? 100 : wl), w);
            ok = false;
        } else if (it->inew < 0) {
            snprintf(err, errsz, "model.merges[%zu] (\"%.*s\" \"%.*s\") makes \"%.*s\", which is "
                                 "not in the vocabulary", it->index,
                     (int)(it->alen > 60 ? 60 : it->alen), p + it->aoff,
                     (int)(it->blen > 60 ? 60 : it->blen), p + it->boff,
                     (int)(it->nlen > 120 ? 120 : it->nlen), p + it->noff);
            ok = false;
        } else if (!tk_u64map_put(&m->merges,
                                  ((uint64_t)(uint32_t)it->ia << 32) | (uint32_t)it->ib,
                                  ((uint64_t)it->rank << 32) | (uint32_t)it->inew)) {
            snprintf(err, errsz, "out of memory");
            ok = false;
        }
    }
    b->n = 0;
    b->buf.len = 0;
    return ok;
}

bool tk_bpe_init(tk_model *m) {
    for (int b = 0; b < 256; b++) {
        char tok[8];
        snprintf(tok, sizeof tok, "<0x%02X>", b);
        m->byte_ids[b] = tk_strmap_get(&m->vocab.map, tok, 6);
    }
    m->char_ids = malloc(0x800 * sizeof *m->char_ids);
    if (!m->char_ids) return false;
    for (uint32_t cp = 0; cp < 0x800; cp++) {
        char u[4];
        size_t k = tk_utf8_encode(cp, u);
        m->char_ids[cp] = tk_strmap_get(&m->vocab.map, u, k);
    }
    m->cache = calloc(1, sizeof *m->cache);
    if (!m->cache) return false;
    if (pthread_mutex_init(&m->cache->lock, NULL)) {
        free(m->cache);
        m->cache = NULL;
        return false;
    }
    if (!tk_strmap_init(&m->cache->map, BPE_CACHE_CAPACITY)) return false;
    return true;
}

void tk_bpe_cache_free(tk_bpe_cache *c) {
    if (!c) return;
    pthread_mutex_destroy(&c->lock);
    tk_strmap_free(&c->map);
    tk_arena_free(&c->keys);
    free(c->ids.v);
    free(c->spans);
    free(c);
}

static bool ensure_scratch(tk_enc *e, size_t nsym) {
    if (e->syms_cap < nsym) {
        size_t cap = nsym < 64 ? 64 : nsym * 2;
        struct tk_sym *s = realloc(e->syms, cap * sizeof *s);
        if (!s) return false;
        e->syms = s;
        e->syms_cap = cap;
    }
    /* the heap holds at most nsym - 1 initial pairs plus two per merge: 3 * nsym */
    if (e->heap_cap < nsym * 3 + 4) {
        size_t cap = nsym * 3 + 64;
        struct tk_merge_ent *h = realloc(e->heap, cap * sizeof *h);
        if (!h) return false;
        e->heap = h;
        e->heap_cap = cap;
    }
    return true;
}

static inline void sym_add(struct tk_sym *syms, size_t *n, int32_t c, uint32_t len) {
    size_t i = (*n)++;
    syms[i].c = c;
    syms[i].len = len;
    syms[i].prev = (int32_t)i - 1;
    syms[i].next = -1;
    if (i > 0) syms[i - 1].next = (int32_t)i;
}

/* merge_word + merge_all: appends the word's ids to out. */
static bool bpe_word(tk_enc *e, const tk_model *m, const char *w, size_t n, tk_ids *out) {
    if (!ensure_scratch(e, n + 2)) return tk_enc_fail(e, EM_ERR_OOM, "out of memory in BPE");
    struct tk_sym *syms = e->syms;
    size_t ns = 0;
    bool plain = !m->prefix && !m->suffix;
    int32_t unk = -1;
    uint32_t unk_len = 0;
    tk_buf *tmp = &e->word;
    for (size_t i = 0; i < n;) {
        size_t k = tk_utf8_len((unsigned char)w[i]);
        bool first = i == 0, last = i + k >= n;
        int32_t id = -1;
        const char *s = w + i;
        size_t sl = k;
        if (plain && k <= 2) {
            size_t kk;
            id = m->char_ids[tk_utf8_next(w + i, &kk)];
        } else {
            if ((!first && m->prefix) || (last && m->suffix)) {
                tmp->len = 0;
                if (!first && m->prefix && !tk_buf_append(tmp, m->prefix, m->prefix_len))
                    goto oom;
                if (!tk_buf_append(tmp, w + i, k)) goto oom;
                if (last && m->suffix && !tk_buf_append(tmp, m->suffix, m->suffix_len)) goto oom;
                s = tmp->p;
                sl = tmp->len;
            }
            id = tk_strmap_get(&m->vocab.map, s, sl);
        }
        if (id >= 0) {
            if (unk >= 0) {
                if (!ensure_scratch(e, ns + 2)) goto oom;
                syms = e->syms;
                sym_add(syms, &ns, unk, unk_len);
                unk = -1;
            }
            sym_add(syms, &ns, id, (uint32_t)k);
            i += k;
            continue;
        }
        if (m->byte_fallback) {
            bool all = true;
            for (size_t j = 0; j < sl && all; j++) all = m->byte_ids[(unsigned char)s[j]] >= 0;
            if (all) {
                if (!ensure_scratch(e, ns + sl + 2)) goto oom;
                syms = e->syms;
                for (size_t j = 0; j < sl; j++)
                    sym_add(syms, &ns, m->byte_ids[(unsigned char)s[j]], 1);
                i += k;
                continue;
            }
        }
        if (m->unk_token) {
            if (m->unk_id < 0)
                return tk_enc_fail(e, EM_ERR_FORMAT,
                                   "BPE: the unknown token \"%s\" is not in the vocabulary",
                                   m->unk_token);
            if (unk >= 0 && m->fuse_unk) {
                unk_len += (uint32_t)k;
            } else {
                if (unk >= 0) {
                    if (!ensure_scratch(e, ns + 2)) goto oom;
                    syms = e->syms;
                    sym_add(syms, &ns, unk, unk_len);
                }
                unk = m->unk_id;
                unk_len = (uint32_t)k;
            }
        }
        i += k;
    }
    if (unk >= 0) {
        if (!ensure_scratch(e, ns + 2)) goto oom;
        syms = e->syms;
        sym_add(syms, &ns, unk, unk_len);
    }
    if (!ensure_scratch(e, ns + 1)) goto oom;
    syms = e->syms;

    /* merge_all */
    struct tk_merge_ent *h = e->heap;
    size_t hn = 0;
    for (size_t i = 0; i + 1 < ns; i++) {
        uint32_t rank;
        int32_t nid;
        if (merge_get(m, syms[i].c, syms[i + 1].c, &rank, &nid))
            heap_push(h, &hn, (struct tk_merge_ent){rank, (uint32_t)i, nid});
    }
    while (hn) {
        struct tk_merge_ent top = heap_pop(h, &hn);
        struct tk_sym *cur = &syms[top.pos];
        if (cur->len == 0 || cur->next == -1) continue;
        struct tk_sym right = syms[cur->next];
        uint32_t rank;
        int32_t nid;
        if (!merge_get(m, cur->c, right.c, &rank, &nid) || nid != top.new_id) continue;
        int32_t next_pos = cur->next;
        cur->c = top.new_id;
        cur->len += right.len;
        cur->next = right.next;
        syms[next_pos].len = 0;
        if (right.next > -1 && (size_t)right.next < ns) syms[right.next].prev = (int32_t)top.pos;
        if (cur->prev >= 0) {
            const struct tk_sym *p = &syms[cur->prev];
            if (merge_get(m, p->c, cur->c, &rank, &nid)) {
                if (hn + 1 >= e->heap_cap) goto oom;
                heap_push(h, &hn, (struct tk_merge_ent){rank, (uint32_t)cur->prev, nid});
            }
        }
        if (cur->next >= 0 && (size_t)cur->next < ns) {
            const struct tk_sym *nx = &syms[cur->next];
            if (merge_get(m, cur->c, nx->c, &rank, &nid)) {
                if (hn + 1 >= e->heap_cap) goto oom;
                heap_push(h, &hn, (struct tk_merge_ent){rank, top.pos, nid});
            }
        }
    }
    for (size_t i = 0; i < ns; i++)
        if (syms[i].len && !tk_ids_push(out, syms[i].c)) goto oom;
    return true;
oom:
    return tk_enc_fail(e, EM_ERR_OOM, "out of memory in BPE");
}

static bool cache_lookup(tk_bpe_cache *c, const char *s, size_t n, tk_ids *out, bool *hit) {
    *hit = false;
    if (!c || n >= BPE_CACHE_MAX_LEN) return true;
    if (pthread_mutex_trylock(&c->lock)) return true; /* busy: compute without the cache */
    int32_t k = tk_strmap_get(&c->map, s, n);
    bool ok = true;
    if (k >= 0) {
        if (c->spans[k].n) ok = tk_ids_append(out, c->ids.v + c->spans[k].off, c->spans[k].n);
        *hit = true;
    }
    pthread_mutex_unlock(&c->lock);
    return ok;
}

static void cache_store(tk_bpe_cache *c, const char *s, size_t n, const int32_t *ids,
                        size_t nids) {
    if (!c || n >= BPE_CACHE_MAX_LEN) return;
    if (pthread_mutex_trylock(&c->lock)) return;
    if (c->n < BPE_CACHE_CAPACITY && c->ids.n + nids <= BPE_CACHE_MAX_IDS &&
        c->keys.total <= BPE_CACHE_MAX_KEYS && tk_strmap_get(&c->map, s, n) < 0) {
        if (c->n == c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 256;
            void *p = realloc(c->spans, cap * sizeof *c->spans);
            if (!p) goto out;
            c->spans = p;
            c->cap = cap;
        }
        char *key = tk_arena_strndup(&c->keys, s, n);
        size_t off = c->ids.n;
        if (!key || !tk_ids_append(&c->ids, ids, nids)) goto out;
        if (!tk_strmap_put(&c->map, key, n, (int32_t)c->n)) {
            c->ids.n = off;
            goto out;
        }
        c->spans[c->n].off = (uint32_t)off;
        c->spans[c->n].n = (uint32_t)nids;
        c->n++;
    }
out:
    pthread_mutex_unlock(&c->lock);
}

bool tk_bpe_tokenize(tk_enc *e, const char *s, size_t n) {
    const tk_model *m = &e->t->model;
    if (m->ignore_merges) {
        int32_t id = tk_strmap_get(&m->vocab.map, s, n);
        if (id >= 0)
            return tk_ids_push(&e->out, id) ? true
                                            : tk_enc_fail(e, EM_ERR_OOM, "out of memory");
    }
    bool hit;
    if (!cache_lookup(m->cache, s, n, &e->out, &hit))
        return tk_enc_fail(e, EM_ERR_OOM, "out of memory");
    if (hit) return true;
    size_t before = e->out.n;
    if (!bpe_word(e, m, s, n, &e->out)) return false;
    if (e->out.n > before) cache_store(m->cache, s, n, e->out.v + before, e->out.n - before);
    else cache_store(m->cache, s, n, NULL, 0);
    return true;
}

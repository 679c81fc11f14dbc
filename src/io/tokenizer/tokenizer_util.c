/* Tokenizer utilities: growable buffers, an arena, hash maps, UTF-8. */
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer/tokenizer_impl.h"

/* ---- buffers ---- */

bool tk_buf_reserve(tk_buf *b, size_t extra) {
    if (b->cap - b->len > extra) return true; /* keep one byte for a terminating NUL */
    size_t need = b->len + extra + 1;
    if (need < b->len) return false;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) return false;
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    return true;
}

bool tk_buf_append(tk_buf *b, const void *s, size_t n) {
    if (!tk_buf_reserve(b, n)) return false;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    return true;
}

bool tk_buf_putc(tk_buf *b, char ch) {
    if (!tk_buf_reserve(b, 1)) return false;
    b->p[b->len++] = ch;
    return true;
}

bool tk_buf_put_cp(tk_buf *b, uint32_t cp) {
    char u[4];
    size_t n = tk_utf8_encode(cp, u);
    return tk_buf_append(b, u, n);
}

void tk_buf_free(tk_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

bool tk_ids_push(tk_ids *a, int32_t x) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return false;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return true;
}

bool tk_ids_append(tk_ids *a, const int32_t *x, size_t n) {
    if (a->cap - a->n < n) {
        size_t cap = a->cap ? a->cap : 64;
        while (cap - a->n < n) cap *= 2;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return false;
        a->v = v;
        a->cap = cap;
    }
    if (n) memcpy(a->v + a->n, x, n * sizeof *x);
    a->n += n;
    return true;
}

bool tk_spans_push(tk_spans *s, size_t start, size_t end, bool match) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 32;
        tk_span *v = realloc(s->v, cap * sizeof *v);
        if (!v) return false;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (tk_span){start, end, match};
    return true;
}

/* ---- arena ---- */

struct tk_arena_block {
    struct tk_arena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *tk_arena_alloc(tk_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    struct tk_arena_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > (1u << 20) ? n : (1u << 20);
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = a->head;
        a->head = b;
        a->total += cap;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

char *tk_arena_strndup(tk_arena *a, const char *s, size_t n) {
    char *p = tk_arena_alloc(a, n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void tk_arena_free(tk_arena *a) {
    struct tk_arena_block *b = a->head;
    while (b) {
        struct tk_arena_block *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
    a->total = 0;
}

/* ---- hashing: 8 bytes at a time, multiply-xorshift mixing ---- */

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    return x;
}

uint64_t tk_hash(const void *s, size_t n) {
    const unsigned char *p = s;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x9fb21c651e98df25ull;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++) w |= (uint64_t)p[i] << (8 * i);
    h = (h ^ w) * 0x9fb21c651e98df25ull;
    return mix64(h);
}

/* ---- string map ----
 * Each slot holds the upper half of the key's hash next to the entry index, so that a probe
 * touches an entry (and its string) only when the tags agree: loading a 150k-token vocabulary
 * and its merges is a few hundred thousand lookups, bound by cache misses. */

static inline uint64_t key_head(const char *s, size_t n) {
    uint64_t h = 0;
    memcpy(&h, s, n < 8 ? n : 8);
    return h;
}

/* en->len == n already holds */
static inline bool key_eq(const struct tk_strmap_ent *en, const char *s, size_t n, uint64_t head) {
    if (en->head != head) return false;
    return n <= 8 || !memcmp(en->s + 8, s + 8, n - 8);
}

static bool strmap_rehash(tk_strmap *m, uint32_t nslots) {
    uint64_t *slots = calloc(nslots, sizeof *slots);
    if (!slots) return false;
    uint32_t mask = nslots - 1;
    for (uint32_t i = 0; i < m->n; i++) {
        uint64_t h = tk_hash(m->ents[i].s, m->ents[i].len);
        uint32_t j = (uint32_t)h & mask;
        while (slots[j]) j = (j + 1) & mask;
        slots[j] = (h & 0xFFFFFFFF00000000ull) | (i + 1);
    }
    free(m->slots);
    m->slots = slots;
    m->mask = mask;
    return true;
}

bool tk_strmap_init(tk_strmap *m, size_t expected) {
    memset(m, 0, sizeof *m);
    uint32_t n = 16;
    while (n < expected * 2 && n < (1u << 30)) n *= 2;
    m->slots = calloc(n, sizeof *m->slots);
    if (!m->slots) return false;
    m->mask = n - 1;
    return true;
}

int32_t tk_strmap_get_h(const tk_strmap *m, const char *s, size_t len, uint64_t h) {
    if (!m->slots) return -1;
    uint32_t j = (uint32_t)h & m->mask;
    uint64_t tag = h & 0xFFFFFFFF00000000ull, head = key_head(s, len);
    for (;;) {
        uint64_t e = m->slots[j];
        if (!e) return -1;
        if ((e & 0xFFFFFFFF00000000ull) == tag) {
            const struct tk_strmap_ent *en = &m->ents[(uint32_t)e - 1];
            if (en->len == len && key_eq(en, s, len, head)) return en->val;
        }
        j = (j + 1) & m->mask;
    }
}

int32_t tk_strmap_get(const tk_strmap *m, const char *s, size_t len) {
    return tk_strmap_get_h(m, s, len, tk_hash(s, len));
}

bool tk_strmap_put(tk_strmap *m, const char *s, size_t len, int32_t val) {
    return tk_strmap_put_h(m, s, len, val, tk_hash(s, len));
}

bool tk_strmap_put_h(tk_strmap *m, const char *s, size_t len, int32_t val, uint64_t h) {
    if (len > UINT32_MAX || m->n >= (1u << 30)) return false;
    if (!m->slots && !tk_strmap_init(m, 16)) return false;
    uint64_t tag = h & 0xFFFFFFFF00000000ull, head = key_head(s, len);
    uint32_t j = (uint32_t)h & m->mask;
    for (;;) {
        uint64_t e = m->slots[j];
        if (!e) break;
        if ((e & 0xFFFFFFFF00000000ull) == tag) {
            struct tk_strmap_ent *en = &m->ents[(uint32_t)e - 1];
            if (en->len == len && key_eq(en, s, len, head)) {
                en->val = val;
                return true;
            }
        }
        j = (j + 1) & m->mask;
    }
    if (m->n == m->ents_cap) {
        uint32_t cap = m->ents_cap ? m->ents_cap * 2 : 16;
        struct tk_strmap_ent *ne = realloc(m->ents, (size_t)cap * sizeof *ne);
        if (!ne) return false;
        m->ents = ne;
        m->ents_cap = cap;
    }
    m->ents[m->n] = (struct tk_strmap_ent){s, head, (uint32_t)len, val};
    m->n++;
    m->slots[j] = tag | m->n;
    if ((uint64_t)m->n * 2 > m->mask) {
        if (m->mask >= (1u << 30)) return false;
        if (!strmap_rehash(m, (m->mask + 1) * 2)) return false;
    }
    return true;
}

void tk_strmap_free(tk_strmap *m) {
    free(m->slots);
    free(m->ents);
    memset(m, 0, sizeof *m);
}

/* ---- u64 map ---- */

bool tk_u64map_init(tk_u64map *m, size_t expected) {
    memset(m, 0, sizeof *m);
    uint32_t n = 16;
    while (n < expected * 2 && n < (1u << 30)) n *= 2;
    m->e = calloc(n, sizeof *m->e);
    if (!m->e) return false;
    m->mask = n - 1;
    return true;
}

static bool u64map_grow(tk_u64map *m) {
    if (m->mask >= (1u << 30)) return false;
    tk_u64map nm;
    if (!tk_u64map_init(&nm, (size_t)(m->mask + 1))) return false;
    for (uint32_t i = 0; i <= m->mask; i++) {
        if (!m->e[i].key) continue;
        uint32_t j = (uint32_t)mix64(m->e[i].key) & nm.mask;
        while (nm.e[j].key) j = (j + 1) & nm.mask;
        nm.e[j] = m->e[i];
        nm.n++;
    }
    tk_u64map_free(m);
    *m = nm;
    return true;
}

bool tk_u64map_put(tk_u64map *m, uint64_t key, uint64_t val) {
    if (!m->e && !tk_u64map_init(m, 16)) return false;
    uint64_t k = key + 1;
    if (!k) return false; /* UINT64_MAX is not a valid key */
    uint32_t j = (uint32_t)mix64(k) & m->mask;
    while (m->e[j].key) {
        if (m->e[j].key == k) {
            m->e[j].val = val;
            return true;
        }
        j = (j + 1) & m->mask;
    }
    m->e[j].key = k;
    m->e[j].val = val;
    m->n++;
    if ((uint64_t)m->n * 2 > m->mask) return u64map_grow(m);
    return true;
}

void tk_u64map_prefetch(const tk_u64map *m, uint64_t key) {
    if (m->e) __builtin_prefetch(&m->e[(uint32_t)mix64(key + 1) & m->mask]);
}

bool tk_u64map_get(const tk_u64map *m, uint64_t key, uint64_t *val) {
    if (!m->e) return false;
    uint64_t k = key + 1;
    uint32_t j = (uint32_t)mix64(k) & m->mask;
    for (;;) {
        uint64_t x = m->e[j].key;
        if (!x) return false;
        if (x == k) {
            *val = m->e[j].val;
            return true;
        }
        j = (j + 1) & m->mask;
    }
}

void tk_u64map_free(tk_u64map *m) {
    free(m->e);
    memset(m, 0, sizeof *m);
}

/* ---- UTF-8 ---- */

/* Length of the valid UTF-8 sequence at s (RFC 3629: no overlongs, no surrogates, <= U+10FFFF),
 * or 0 when the bytes at s do not start one. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0;
    if (c < 0xE0) return n >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && s[1] < 0xA0) return 0;
        if (c == 0xED && s[1] >= 0xA0) return 0;
        return 3;
    }
    if (c < 0xF5) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        if (c == 0xF0 && s[1] < 0x90) return 0;
        if (c == 0xF4 && s[1] >= 0x90) return 0;
        return 4;
    }
    return 0;
}

bool tk_utf8_valid(const char *s, size_t n, size_t *bad) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        /* ASCII fast path, 8 bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, u + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        size_t k = utf8_seq(u + i, n - i);
        if (!k) {
            if (bad) *bad = i;
            return false;
        }
        i += k;
    }
    return true;
}

size_t tk_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the longest prefix of s that could still begin a valid sequence (at least 1): the
 * "maximal subpart" that from_utf8_lossy replaces with a single U+FFFD. */
static size_t utf8_bad_prefix(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 1;
    size_t i = 1;
    if (i < n && s[i] >= lo && s[i] <= hi) i++;
    else return 1;
    while (i < need && i < n && (s[i] & 0xC0) == 0x80) i++;
    return i;
}

bool tk_utf8_lossy_append(tk_buf *out, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        size_t k = utf8_seq(u + i, n - i);
        if (k) {
            i += k;
            continue;
        }
        if (!tk_buf_append(out, s + run, i - run)) return false;
        if (!tk_buf_append(out, "\xEF\xBF\xBD", 3)) return false;
        i += utf8_bad_prefix(u + i, n - i);
        run = i;
    }
    return tk_buf_append(out, s + run, n - run);
}

/* ---- string lists ---- */

static bool strlist_grow(tk_strlist *l) {
    if (l->n < l->cap) return true;
    size_t cap = l->cap ? l->cap * 2 : 32;
    size_t *off = realloc(l->off, cap * sizeof *off);
    if (!off) return false;
    l->off = off;
    size_t *len = realloc(l->len, cap * sizeof *len);
    if (!len) return false;
    l->len = len;
    l->cap = cap;
    return true;
}

bool tk_strlist_push(tk_strlist *l, const char *s, size_t n) {
    if (!strlist_grow(l)) return false;
    l->off[l->n] = l->data.len;
    if (!tk_buf_append(&l->data, s, n)) return false;
    l->len[l->n++] = n;
    return true;
}

bool tk_strlist_begin(tk_strlist *l) {
    if (!strlist_grow(l)) return false;
    l->off[l->n] = l->data.len;
    return true;
}

void tk_strlist_end(tk_strlist *l) {
    l->len[l->n] = l->data.len - l->off[l->n];
    l->n++;
}

void tk_strlist_clear(tk_strlist *l) {
    l->n = 0;
    l->data.len = 0;
}

void tk_strlist_free(tk_strlist *l) {
    tk_buf_free(&l->data);
    free(l->off);
    free(l->len);
    memset(l, 0, sizeof *l);
}

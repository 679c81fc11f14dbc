/*
 * The "Precompiled" normalizer (tokenizers' normalizers/precompiled.rs over the spm_precompiled
 * crate): a SentencePiece normalization charsmap, base64 in tokenizer.json's
 * "precompiled_charsmap".
 *
 * The charsmap (sentencepiece normalizer.cc): a u32 little-endian trie size in bytes, the Darts
 * double-array trie (that many bytes of u32 little-endian units), then the normalized strings:
 * NUL-terminated UTF-8 strings that the trie's leaf values index by byte offset.
 *
 * Normalizing follows precompiled.rs exactly: the text is cut into extended grapheme clusters
 * (utf8proc's UAX #29 rules, as unicode-segmentation does); a cluster shorter than 6 bytes whose
 * bytes have a trie match is replaced as a whole by the string of the FIRST (shortest) prefix
 * found (spm_precompiled's `transform`: common_prefix_search(..)[0]); otherwise each of its
 * characters is looked up alone the same way and kept as is when nothing matches. A key's NUL
 * byte ends the search, as in Darts.
 *
 * Loading refuses a malformed charsmap (bad base64, trie size not a positive multiple of 4 or
 * past the end, strings not UTF-8 or not NUL-terminated). A leaf value found while normalizing
 * that points outside the strings, or into the middle of a character, fails the encode with an
 * error; trie positions out of the array end the search (no match). Nothing is read out of
 * bounds.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "io/tokenizer/tokenizer_impl.h"

struct tk_precompiled {
    uint32_t *units;
    size_t n_units;
    char *strs; /* the normalized strings */
    size_t strs_len;
};

/* ---- loading ---- */

static int b64_val(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Standard base64 with padding (the crate's BASE64_STANDARD). Returns false on bad input. */
static bool b64_decode(const char *s, size_t n, unsigned char *out, size_t *out_len) {
    if (n % 4) return false;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)s[i + k];
            if (c == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
                continue;
            }
            if (pad) return false; /* data after '=' */
            v[k] = b64_val(c);
            if (v[k] < 0) return false;
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 |
                     (uint32_t)v[3];
        out[o++] = (unsigned char)(w >> 16);
        if (pad < 2) out[o++] = (unsigned char)(w >> 8);
        if (pad < 1) out[o++] = (unsigned char)w;
    }
    *out_len = o;
    return true;
}

bool tk_precompiled_parse(tk_ld *l, json_t *v, const char *where, tk_precompiled **out) {
    *out = NULL;
    json_t *m = json_object_get(v, "precompiled_charsmap");
    if (!json_is_string(m))
        return tk_ld_fail(l, EM_ERR_FORMAT, where,
                          "\"precompiled_charsmap\" must be a base64 string, not %s",
                          m ? tk_json_kind(m) : "missing");
    const char *s = json_string_value(m);
    size_t n = json_string_length(m);
    unsigned char *raw = malloc(n / 4 * 3 + 1);
    if (!raw) return tk_ld_oom(l);
    size_t len = 0;
    const char *bad = NULL;
    uint32_t trie = 0;
    if (!b64_decode(s, n, raw, &len)) bad = "is not valid base64";
    else if (len < 4) bad = "is shorter than its 4-byte trie size";
    else {
        trie = (uint32_t)raw[0] | (uint32_t)raw[1] << 8 | (uint32_t)raw[2] << 16 |
               (uint32_t)raw[3] << 24;
        if (trie == 0 || trie % 4) bad = "has a trie size that is not a positive multiple of 4";
        else if (trie > len - 4) bad = "has a trie size past its end";
    }
    size_t strs_len = bad ? 0 : len - 4 - trie;
    const char *strs = (const char *)raw + 4 + trie;
    size_t at;
    if (!bad && !tk_utf8_valid(strs, strs_len, &at))
        bad = "has normalized strings that are not UTF-8";
    else if (!bad && strs_len && strs[strs_len - 1] != 0)
        bad = "has normalized strings that do not end with a NUL";
    if (bad) {
        free(raw);
        return tk_ld_fail(l, EM_ERR_FORMAT, where,
                          "the Precompiled normalizer's \"precompiled_charsmap\" %s (%zu bytes)",
                          bad, len);
    }
    tk_precompiled *pc = calloc(1, sizeof *pc);
    if (pc) {
        pc->n_units = trie / 4;
        pc->units = malloc(pc->n_units * sizeof *pc->units);
        pc->strs = malloc(strs_len + 1);
    }
    if (!pc || !pc->units || !pc->strs) {
        free(raw);
        tk_precompiled_free(pc);
        return tk_ld_oom(l);
    }
    for (size_t i = 0; i < pc->n_units; i++) {
        const unsigned char *u = raw + 4 + 4 * i;
        pc->units[i] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 |
                       (uint32_t)u[3] << 24;
    }
    memcpy(pc->strs, strs, strs_len);
    pc->strs[strs_len] = 0;
    pc->strs_len = strs_len;
    free(raw);
    *out = pc;
    return true;
}

void tk_precompiled_free(tk_precompiled *pc) {
    if (!pc) return;
    free(pc->units);
    free(pc->strs);
    free(pc);
}

/* ---- normalizing ---- */

/* Darts units (spm_precompiled's ArrayUnitTrait). */
static bool unit_leaf(uint32_t u) { return (u >> 8) & 1; }
static uint32_t unit_value(uint32_t u) { return u & 0x7FFFFFFFu; }
static uint32_t unit_label(uint32_t u) { return u & (0x80000000u | 0xFFu); }
static size_t unit_offset(uint32_t u) { return (size_t)(u >> 10) << ((u & (1u << 9)) >> 6); }

/* The first (shortest) prefix of key with a leaf: its string in *rep / *rep_len. Returns 1 on a
 * match, 0 on none, -1 when the leaf's value is not the start of a string. */
static int first_match(const tk_precompiled *pc, const char *key, size_t n, const char **rep,
                       size_t *rep_len) {
    size_t pos = unit_offset(pc->units[0]);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c == 0) break;
        pos ^= c;
        if (pos >= pc->n_units) return 0;
        uint32_t u = pc->units[pos];
        if (unit_label(u) != c) return 0;
        pos ^= unit_offset(u);
        if (unit_leaf(u)) {
            if (pos >= pc->n_units) return 0;
            size_t v = unit_value(pc->units[pos]);
            bool mid_char = v < pc->strs_len && ((unsigned char)pc->strs[v] & 0xC0) == 0x80;
            if (v > pc->strs_len || mid_char) return -1;
            *rep = pc->strs + v;
            *rep_len = strlen(pc->strs + v); /* strs is NUL-terminated past its end too */
            return 1;
        }
    }
    return 0;
}

static bool put_match(tk_enc *e, const tk_precompiled *pc, const char *s, size_t n, tk_buf *out,
                      bool *done) {
    const char *rep;
    size_t rep_len;
    int r = first_match(pc, s, n, &rep, &rep_len);
    if (r < 0)
        return tk_enc_fail(e, EM_ERR_FORMAT,
                           "the Precompiled normalizer's charsmap has a trie value that is not "
                           "the start of one of its strings (%zu bytes)", pc->strs_len);
    *done = r == 1;
    if (*done && !tk_buf_append(out, rep, rep_len))
        return tk_enc_fail(e, EM_ERR_OOM, "out of memory in a normalizer");
    return true;
}

bool tk_precompiled_normalize(tk_enc *e, const tk_precompiled *pc, const char *s, size_t n,
                              tk_buf *out, bool *lead_removed) {
    size_t base = out->len;
    bool first_empty = false;
    utf8proc_int32_t state = 0;
    for (size_t g = 0; g < n;) {
        /* the grapheme cluster [g, z) */
        size_t k;
        uint32_t prev = tk_utf8_next(s + g, &k), c;
        size_t z = g + k;
        for (; z < n; z += k, prev = c) {
            c = tk_utf8_next(s + z, &k);
            if (utf8proc_grapheme_break_stateful((utf8proc_int32_t)prev, (utf8proc_int32_t)c,
                                                 &state))
                break;
        }
        bool done = false;
        if (z - g < 6 && !put_match(e, pc, s + g, z - g, out, &done)) return false;
        for (size_t i = g; !done && i < z; i += k) {
            tk_utf8_next(s + i, &k);
            bool hit;
            if (!put_match(e, pc, s + i, k, out, &hit)) return false;
            if (!hit && !tk_buf_append(out, s + i, k))
                return tk_enc_fail(e, EM_ERR_OOM, "out of memory in a normalizer");
        }
        if (g == 0) first_empty = out->len == base;
        g = z;
    }
    if (first_empty && out->len > base) *lead_removed = true;
    return true;
}

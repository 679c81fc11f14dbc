/* Incremental detokenization (detok.h). */
#include "generate/detok.h"

#include <stdlib.h>
#include <string.h>

/* A decoded text that ends with U+FFFD ends inside an incomplete character (tokenizers turns
 * the bytes of a split multi-byte sequence into replacement characters). */
static bool ends_incomplete(const char *s, size_t len) {
    return len >= 3 && (unsigned char)s[len - 3] == 0xEF && (unsigned char)s[len - 2] == 0xBF &&
           (unsigned char)s[len - 1] == 0xBD;
}

/* buf[at..) = s[0..n), NUL-terminated, growing buf as needed. */
static em_status put(em_ctx *c, char **buf, size_t *len, size_t *cap, size_t at, const char *s,
                     size_t n) {
    if (at + n + 1 > *cap) {
        size_t nc = *cap ? *cap : 64;
        while (nc < at + n + 1) nc *= 2;
        char *nb = realloc(*buf, nc);
        if (!nb) return em_ctx_fail(c, EM_ERR_OOM, "generate", "out of memory (streamed text)");
        *buf = nb;
        *cap = nc;
    }
    if (n) memcpy(*buf + at, s, n);
    (*buf)[at + n] = 0;
    *len = at + n;
    return EM_OK;
}

em_status em_detok_step(em_ctx *c, em_detok *d, const em_token *ids, size_t n,
                        const char **piece) {
    *piece = NULL;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!d || !d->tok || !ids || n <= d->read)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, "generate", "detokenizer: no new id");
    size_t plen = 0, nlen = 0, flen = 0;
    char *pre = d->read > d->prefix ? em_tokenizer_decode(c, d->tok, ids + d->prefix,
                                                          d->read - d->prefix, d->skip_special,
                                                          &plen)
                                    : NULL;
    char *cur = em_tokenizer_decode(c, d->tok, ids + d->prefix, n - d->prefix, d->skip_special,
                                    &nlen);
    char *full = NULL;
    em_status s = em_ctx_status(c);
    if (s) goto out;
    const char *whole = cur, *add = cur; /* the decode, and what it adds */
    size_t whole_len = nlen, add_len = 0;
    bool extends = plen <= nlen && (!plen || !memcmp(pre, cur, plen));
    if (ends_incomplete(cur, nlen)) {
        /* nothing to emit yet. A byte-fallback decoder may also have merged the prefix's last
         * bytes into the incomplete run (all of them U+FFFD until it completes): the text
         * pending after the emitted one is then unknown, and left empty */
        s = extends ? put(c, &d->tail, &d->tail_len, &d->tail_cap, 0, cur + plen, nlen - plen)
                    : put(c, &d->tail, &d->tail_len, &d->tail_cap, 0, "", 0);
        goto out;
    }
    if (extends) {
        add = cur + plen;
        add_len = nlen - plen;
    } else {
        /* the window's decode does not extend the prefix's (a decoder that looks further
         * back): decode everything, as a non-incremental stream does, and take what follows
         * the text emitted so far */
        d->fallbacks++;
        full = em_tokenizer_decode(c, d->tok, ids, n, d->skip_special, &flen);
        if ((s = em_ctx_status(c))) goto out;
        if (flen < d->text_len) { /* shorter than what was emitted: nothing to add */
            s = put(c, &d->tail, &d->tail_len, &d->tail_cap, 0, "", 0);
            goto out;
        }
        whole = full, whole_len = flen;
        add = full + d->text_len, add_len = flen - d->text_len;
        /* when the emitted text is not a prefix of the decode (ids that change how earlier
         * ones decode, e.g. a byte-fallback token that turns the byte before it into U+FFFD),
         * what was emitted stays; the rest starts at a character boundary, never inside one */
        if (d->text_len && memcmp(full, d->text, d->text_len))
            while (add_len && ((unsigned char)*add & 0xC0) == 0x80) add++, add_len--;
    }
    if (ends_incomplete(whole, whole_len)) {
        s = put(c, &d->tail, &d->tail_len, &d->tail_cap, 0, add, add_len);
        goto out;
    }
    size_t at = d->text_len;
    s = put(c, &d->text, &d->text_len, &d->text_cap, at, add, add_len);
    if (!s) s = put(c, &d->tail, &d->tail_len, &d->tail_cap, 0, "", 0);
    if (s) goto out;
    *piece = d->text + at;
    if (add_len > 0) { /* a skipped special token adds nothing: the offsets stay */
        d->prefix = d->read;
        d->read = n;
    }
out:
    em_free(pre);
    em_free(cur);
    em_free(full);
    return s;
}

void em_detok_free(em_detok *d) {
    if (!d) return;
    free(d->text);
    free(d->tail);
    d->text = d->tail = NULL;
    d->text_len = d->text_cap = d->tail_len = d->tail_cap = 0;
}

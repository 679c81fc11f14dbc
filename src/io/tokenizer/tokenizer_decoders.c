/*
 * Decoders (tokenizers/src/decoders): each maps a list of token strings to a new list
 * (decode_chain); the final text is their concatenation.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer/tokenizer_impl.h"

/* GPT-2 character -> byte (the inverse of bytes_char); -1 for other characters. The largest
 * such character is U+0143. */
static int16_t char_byte[324];
static pthread_once_t char_byte_once = PTHREAD_ONCE_INIT;

static void char_byte_init(void) {
    for (int i = 0; i < 324; i++) char_byte[i] = -1;
    for (int b = 0; b < 256; b++) char_byte[tk_byte_level_char((uint8_t)b)] = (int16_t)b;
}

static int byte_of_char(uint32_t c) {
    pthread_once(&char_byte_once, char_byte_init);
    return c < 324 ? char_byte[c] : -1;
}

static bool byte_level(const tk_strlist *in, tk_strlist *out) {
    tk_buf bytes = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < in->n; i++) {
        const char *s = tk_strlist_at(in, i);
        size_t n = in->len[i], mark = bytes.len;
        for (size_t j = 0; ok && j < n;) {
            size_t k;
            uint32_t c = tk_utf8_next(s + j, &k);
            int b = byte_of_char(c);
            if (b < 0) { /* not all byte characters: keep the token's own bytes */
                bytes.len = mark;
                ok = tk_buf_append(&bytes, s, n);
                break;
            }
            ok = tk_buf_putc(&bytes, (char)b);
            j += k;
        }
    }
    if (ok) {
        ok = tk_strlist_begin(out) && tk_utf8_lossy_append(&out->data, bytes.p ? bytes.p : "",
                                                           bytes.len);
        if (ok) tk_strlist_end(out);
    }
    tk_buf_free(&bytes);
    return ok;
}

static bool metaspace(const tk_decoder *d, const tk_strlist *in, tk_strlist *out) {
    for (size_t i = 0; i < in->n; i++) {
        const char *s = tk_strlist_at(in, i);
        size_t n = in->len[i];
        if (!tk_strlist_begin(out)) return false;
        for (size_t j = 0; j < n;) {
            size_t k;
            uint32_t c = tk_utf8_next(s + j, &k);
            if (c == d->ch) {
                if (!(i == 0 && d->prepend != TK_PREPEND_NEVER) && !tk_buf_putc(&out->data, ' '))
                    return false;
            } else if (!tk_buf_append(&out->data, s + j, k))
                return false;
            j += k;
        }
        tk_strlist_end(out);
    }
    return true;
}

/* Replaces every occurrence of `from` by `to` in buf (str::replace). */
static bool replace_all(tk_buf *buf, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to);
    tk_buf r = {0};
    size_t i = 0;
    bool changed = false;
    while (i < buf->len) {
        if (buf->len - i >= fl && !memcmp(buf->p + i, from, fl)) {
            if (!tk_buf_append(&r, to, tl)) goto fail;
            i += fl;
            changed = true;
        } else {
            if (!tk_buf_putc(&r, buf->p[i])) goto fail;
            i++;
        }
    }
    if (changed) {
        tk_buf_free(buf);
        *buf = r;
    } else
        tk_buf_free(&r);
    return true;
fail:
    tk_buf_free(&r);
    return false;
}

/* wordpiece::cleanup */
static bool cleanup(tk_buf *b) {
    static const char *const pairs[][2] = {
        {" .", "."},  {" ?", "?"},    {" !", "!"},    {" ,", ","},   {" ' ", "'"},
        {" n't", "n't"}, {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"},
        {" 're", "'re"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (!replace_all(b, pairs[i][0], pairs[i][1])) return false;
    return true;
}

static bool wordpiece(const tk_decoder *d, const tk_strlist *in, tk_strlist *out) {
    tk_buf t = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < in->n; i++) {
        const char *s = tk_strlist_at(in, i);
        size_t n = in->len[i];
        t.len = 0;
        if (i != 0) {
            if (n >= d->str_len && !memcmp(s, d->str, d->str_len))
                ok = tk_buf_append(&t, s + d->str_len, n - d->str_len);
            else
                ok = tk_buf_putc(&t, ' ') && tk_buf_append(&t, s, n);
        } else
            ok = tk_buf_append(&t, s, n);
        if (ok && d->cleanup) ok = cleanup(&t);
        if (ok) ok = tk_strlist_push(out, t.p ? t.p : "", t.len);
    }
    tk_buf_free(&t);
    return ok;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool flush_bytes(tk_buf *pending, tk_strlist *out) {
    if (!pending->len) return true;
    bool ok = true;
    if (tk_utf8_valid(pending->p, pending->len, NULL))
        ok = tk_strlist_push(out, pending->p, pending->len);
    else
        for (size_t i = 0; ok && i < pending->len; i++)
            ok = tk_strlist_push(out, "\xEF\xBF\xBD", 3);
    pending->len = 0;
    return ok;
}

static bool byte_fallback(const tk_strlist *in, tk_strlist *out) {
    tk_buf pending = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < in->n; i++) {
        const char *s = tk_strlist_at(in, i);
        size_t n = in->len[i];
        int hi, lo;
        /* u8::from_str_radix also accepts a leading '+', which "<0x+5>" would need; such a
         * token is two hex digits only when both are digits */
        if (n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && (hi = hexval(s[3])) >= 0 &&
            (lo = hexval(s[4])) >= 0) {
            ok = tk_buf_putc(&pending, (char)(hi * 16 + lo));
            continue;
        }
        if (n == 6 && !memcmp(s, "<0x+", 4) && s[5] == '>' && (lo = hexval(s[4])) >= 0) {
            ok = tk_buf_putc(&pending, (char)lo);
            continue;
        }
        ok = flush_bytes(&pending, out) && tk_strlist_push(out, s, n);
    }
    if (ok) ok = flush_bytes(&pending, out);
    tk_buf_free(&pending);
    return ok;
}

static bool fuse(const tk_strlist *in, tk_strlist *out) {
    if (!tk_strlist_begin(out)) return false;
    for (size_t i = 0; i < in->n; i++)
        if (!tk_buf_append(&out->data, tk_strlist_at(in, i), in->len[i])) return false;
    tk_strlist_end(out);
    return true;
}

static bool strip(const tk_decoder *d, const tk_strlist *in, tk_strlist *out) {
    for (size_t i = 0; i < in->n; i++) {
        const char *s = tk_strlist_at(in, i);
        size_t n = in->len[i];
        /* character boundaries */
        size_t nchars = 0;
        for (size_t j = 0; j < n; j += tk_utf8_len((unsigned char)s[j])) nchars++;
        size_t a = 0, achars = 0;
        for (size_t c = 0; c < d->start && a < n; c++) {
            size_t k;
            if (tk_utf8_next(s + a, &k) != d->ch) break;
            a += k;
            achars++;
        }
        size_t z = n;
        for (size_t c = 0; c < d->stop && z > a && nchars - c > achars; c++) {
            size_t b = z - 1;
            while (b > 0 && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
            size_t k;
            if (tk_utf8_next(s + b, &k) != d->ch) break;
            z = b;
        }
        if (!tk_strlist_push(out, s + a, z - a)) return false;
    }
    return true;
}

static bool replace(em_ctx *c, const tk_decoder *d, const tk_strlist *in, tk_strlist *out) {
    tk_rx_state st = {0};
    tk_spans sp = {0};
    char err[320];
    bool ok = true;
    for (size_t i = 0; ok && i < in->n; i++) {
        const char *s = tk_strlist_at(in, i);
        size_t n = in->len[i];
        if (!tk_regex_find_matches(&st, &d->re, s, n, &sp, err, sizeof err)) {
            em_ctx_fail(c, EM_ERR_INTERNAL, "tokenizer_decode", "decoder Replace: %s", err);
            ok = false;
            break;
        }
        ok = tk_strlist_begin(out);
        for (size_t j = 0; ok && j < sp.n; j++)
            ok = sp.v[j].match ? tk_buf_append(&out->data, d->str, d->str_len)
                               : tk_buf_append(&out->data, s + sp.v[j].start,
                                               sp.v[j].end - sp.v[j].start);
        if (ok) tk_strlist_end(out);
    }
    free(sp.v);
    tk_rx_state_free(&st);
    return ok;
}

static bool bpe(const tk_decoder *d, const tk_strlist *in, tk_strlist *out) {
    tk_buf t = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < in->n; i++) {
        t.len = 0;
        ok = tk_buf_append(&t, tk_strlist_at(in, i), in->len[i]);
        if (ok && d->str_len) {
            char *from = strndup(d->str, d->str_len);
            ok = from && replace_all(&t, from, i + 1 == in->n ? "" : " ");
            free(from);
        }
        if (ok) ok = tk_strlist_push(out, t.p ? t.p : "", t.len);
    }
    tk_buf_free(&t);
    return ok;
}

static bool ctc(const tk_decoder *d, const tk_strlist *in, tk_strlist *out) {
    tk_buf t = {0};
    bool ok = true;
    char *pad = strndup(d->str, d->str_len), *delim = strndup(d->str2, d->str2_len);
    if (!pad || !delim) ok = false;
    for (size_t i = 0; ok && i < in->n; i++) {
        const char *s = tk_strlist_at(in, i);
        size_t n = in->len[i];
        if (i > 0 && n == in->len[i - 1] && !memcmp(s, tk_strlist_at(in, i - 1), n)) continue;
        t.len = 0;
        ok = tk_buf_append(&t, s, n) && (!d->str_len || replace_all(&t, pad, ""));
        if (ok && d->cleanup) ok = cleanup(&t) && (!d->str2_len || replace_all(&t, delim, " "));
        if (ok && t.len) ok = tk_strlist_push(out, t.p, t.len);
    }
    free(pad);
    free(delim);
    tk_buf_free(&t);
    return ok;
}

static bool chain(em_ctx *c, const tk_decoder *d, tk_strlist *in, tk_strlist *out) {
    tk_strlist_clear(out);
    switch (d->type) {
    case TK_DEC_BYTE_LEVEL: return byte_level(in, out);
    case TK_DEC_METASPACE: return metaspace(d, in, out);
    case TK_DEC_WORDPIECE: return wordpiece(d, in, out);
    case TK_DEC_BYTE_FALLBACK: return byte_fallback(in, out);
    case TK_DEC_FUSE: return fuse(in, out);
    case TK_DEC_STRIP: return strip(d, in, out);
    case TK_DEC_REPLACE: return replace(c, d, in, out);
    case TK_DEC_BPE: return bpe(d, in, out);
    case TK_DEC_CTC: return ctc(d, in, out);
    case TK_DEC_SEQUENCE: {
        tk_strlist tmp = {0};
        tk_strlist *cur = in, *nxt = out;
        bool ok = true;
        /* ping-pong so that the result ends in `out` */
        for (size_t i = 0; ok && i < d->n_children; i++) {
            nxt = (cur == out) ? &tmp : out;
            ok = chain(c, &d->children[i], cur, nxt);
            cur = nxt;
        }
        if (ok && cur != out) {
            tk_strlist_clear(out);
            for (size_t i = 0; ok && i < cur->n; i++)
                ok = tk_strlist_push(out, tk_strlist_at(cur, i), cur->len[i]);
        }
        tk_strlist_free(&tmp);
        return ok;
    }
    }
    return false;
}

bool tk_decode_tokens(em_ctx *c, const em_tokenizer *t, const tk_decoder *d, tk_strlist *toks,
                      tk_buf *out) {
    (void)t;
    out->len = 0;
    if (!d) { /* no decoder: the tokens joined by spaces */
        for (size_t i = 0; i < toks->n; i++)
            if ((i && !tk_buf_putc(out, ' ')) ||
                !tk_buf_append(out, tk_strlist_at(toks, i), toks->len[i]))
                goto oom;
        return true;
    }
    tk_strlist res = {0};
    if (!chain(c, d, toks, &res)) {
        tk_strlist_free(&res);
        if (em_ctx_status(c) != EM_OK) return false;
        goto oom;
    }
    bool ok = true;
    for (size_t i = 0; ok && i < res.n; i++)
        ok = tk_buf_append(out, tk_strlist_at(&res, i), res.len[i]);
    tk_strlist_free(&res);
    if (ok) return true;
oom:
    em_ctx_fail(c, EM_ERR_OOM, "tokenizer_decode", "out of memory while decoding");
    return false;
}

void tk_decoder_free(tk_decoder *d) {
    if (!d) return;
    tk_regex_free(&d->re);
    for (size_t i = 0; i < d->n_children; i++) tk_decoder_free(&d->children[i]);
    free(d->children);
}

/* ---- loading (tokenizer.json "decoder") ---- */

bool tk_parse_decoder(tk_ld *l, json_t *v, const char *where, tk_decoder *d, int depth) {
    memset(d, 0, sizeof *d);
    const char *type;
    if (depth > 16) return tk_ld_fail(l, EM_ERR_FORMAT, where, "decoders nested too deeply");
    if (!tk_get_type(l, v, where, &type)) return false;
    if (!strcmp(type, "ByteLevel")) {
        d->type = TK_DEC_BYTE_LEVEL;
        return true;
    }
    if (!strcmp(type, "Metaspace")) {
        d->type = TK_DEC_METASPACE;
        return tk_opt_char(l, v, "replacement", 0x2581, &d->ch, where) &&
               tk_get_prepend_scheme(l, v, where, &d->prepend);
    }
    if (!strcmp(type, "WordPiece")) {
        d->type = TK_DEC_WORDPIECE;
        if (!tk_opt_str(l, v, "prefix", false, &d->str, &d->str_len, where) ||
            !tk_opt_bool(l, v, "cleanup", true, &d->cleanup, where))
            return false;
        if (!d->str) d->str = "##", d->str_len = 2;
        return true;
    }
    if (!strcmp(type, "ByteFallback")) {
        d->type = TK_DEC_BYTE_FALLBACK;
        return true;
    }
    if (!strcmp(type, "Fuse")) {
        d->type = TK_DEC_FUSE;
        return true;
    }
    if (!strcmp(type, "Strip")) {
        d->type = TK_DEC_STRIP;
        if (!json_object_get(v, "content"))
            return tk_ld_fail(l, EM_ERR_FORMAT, where, "missing \"content\"");
        return tk_opt_char(l, v, "content", ' ', &d->ch, where) &&
               tk_opt_uint(l, v, "start", 0, &d->start, where) &&
               tk_opt_uint(l, v, "stop", 0, &d->stop, where);
    }
    if (!strcmp(type, "Replace")) {
        d->type = TK_DEC_REPLACE;
        return tk_get_pattern(l, v, where, &d->re) &&
               tk_opt_str(l, v, "content", true, &d->str, &d->str_len, where);
    }
    if (!strcmp(type, "BPEDecoder")) {
        d->type = TK_DEC_BPE;
        if (!tk_opt_str(l, v, "suffix", false, &d->str, &d->str_len, where)) return false;
        if (!d->str) d->str = "</w>", d->str_len = 4;
        return true;
    }
    if (!strcmp(type, "CTC")) {
        d->type = TK_DEC_CTC;
        if (!tk_opt_str(l, v, "pad_token", false, &d->str, &d->str_len, where) ||
            !tk_opt_str(l, v, "word_delimiter_token", false, &d->str2, &d->str2_len, where) ||
            !tk_opt_bool(l, v, "cleanup", true, &d->cleanup, where))
            return false;
        if (!d->str) d->str = "<pad>", d->str_len = 5;
        if (!d->str2) d->str2 = "|", d->str2_len = 1;
        return true;
    }
    if (!strcmp(type, "Sequence")) {
        d->type = TK_DEC_SEQUENCE;
        json_t *arr;
        if (!tk_get_array(l, v, "decoders", where, &arr)) return false;
        d->n_children = json_array_size(arr);
        d->children = calloc(d->n_children ? d->n_children : 1, sizeof *d->children);
        if (!d->children) return tk_ld_oom(l);
        for (size_t i = 0; i < d->n_children; i++) {
            char w[200];
            snprintf(w, sizeof w, "%s.decoders[%zu]", where, i);
            if (!tk_parse_decoder(l, json_array_get(arr, i), w, &d->children[i], depth + 1))
                return false;
        }
        return true;
    }
    return tk_ld_fail(l, EM_ERR_FORMAT, where, "unknown decoder type \"%s\"", type);
}

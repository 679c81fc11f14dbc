/*
 * Pre-tokenizers (tokenizers/src/pre_tokenizers and NormalizedString::split).
 *
 * `tokenizers` applies each pre-tokenizer to every split before the next one runs. Each step
 * treats its splits independently, so running the steps depth-first on one split at a time gives
 * the same splits in the same order, without building the intermediate lists: step k cuts its
 * input into pieces and hands each non-empty piece to step k + 1; after the last step a piece
 * goes to the model.
 */
#include <string.h>

#include "io/tokenizer_impl.h"

/* The byte -> character table of GPT-2's byte-level encoding (bytes_char in byte_level.rs):
 * printable bytes map to themselves, the others to U+0100 + n in byte order. */
static uint16_t byte_char[256];
static char byte_utf8[256][2];
static uint8_t byte_utf8_len[256];
static pthread_once_t byte_once = PTHREAD_ONCE_INIT;

static void byte_table_init(void) {
    uint32_t n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        byte_char[b] = (uint16_t)(printable ? (uint32_t)b : 256 + n++);
        char u[4];
        byte_utf8_len[b] = (uint8_t)tk_utf8_encode(byte_char[b], u);
        memcpy(byte_utf8[b], u, byte_utf8_len[b]);
    }
}

uint32_t tk_byte_level_char(uint8_t b) {
    pthread_once(&byte_once, byte_table_init);
    return byte_char[b];
}

/* Appends the byte-level image of s (each byte as its GPT-2 character). */
bool tk_byte_level_map(const char *s, size_t n, tk_buf *out) {
    pthread_once(&byte_once, byte_table_init);
    if (!tk_buf_reserve(out, n * 2)) return false;
    char *o = out->p + out->len;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        o[0] = byte_utf8[b][0];
        if (byte_utf8_len[b] == 2) *++o = byte_utf8[b][1];
        o++;
    }
    out->len = (size_t)(o - out->p);
    return true;
}

bool tk_split_by_behavior(const tk_spans *m, tk_split_behavior b, tk_spans *out) {
    out->n = 0;
    bool prev = false;
    switch (b) {
    case TK_SPLIT_ISOLATED:
        for (size_t i = 0; i < m->n; i++)
            if (!tk_spans_push(out, m->v[i].start, m->v[i].end, false)) return false;
        return true;
    case TK_SPLIT_REMOVED:
        for (size_t i = 0; i < m->n; i++)
            if (!m->v[i].match && !tk_spans_push(out, m->v[i].start, m->v[i].end, false))
                return false;
        return true;
    case TK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < m->n; i++) {
            bool is = m->v[i].match;
            if (is == prev && out->n) out->v[out->n - 1].end = m->v[i].end;
            else if (!tk_spans_push(out, m->v[i].start, m->v[i].end, false)) return false;
            prev = is;
        }
        return true;
    case TK_SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < m->n; i++) {
            bool is = m->v[i].match;
            if (is && !prev && out->n) out->v[out->n - 1].end = m->v[i].end;
            else if (!tk_spans_push(out, m->v[i].start, m->v[i].end, false)) return false;
            prev = is;
        }
        return true;
    case TK_SPLIT_MERGED_WITH_NEXT:
        for (size_t i = m->n; i-- > 0;) {
            bool is = m->v[i].match;
            if (is && !prev && out->n) out->v[out->n - 1].start = m->v[i].start;
            else if (!tk_spans_push(out, m->v[i].start, m->v[i].end, false)) return false;
            prev = is;
        }
        for (size_t i = 0, j = out->n ? out->n - 1 : 0; i < j; i++, j--) {
            tk_span t = out->v[i];
            out->v[i] = out->v[j];
            out->v[j] = t;
        }
        return true;
    }
    return false;
}

/* Pattern::find_matches for a character predicate: every matching character is its own match
 * span, the text between them one non-match span. */
typedef bool (*tk_pred)(uint32_t c, uint32_t arg);

static bool pred_find_matches(const char *s, size_t n, tk_pred pred, uint32_t arg,
                              tk_spans *out) {
    out->n = 0;
    if (n == 0) return tk_spans_push(out, 0, 0, false);
    size_t last = 0;
    for (size_t i = 0; i < n;) {
        size_t k;
        uint32_t c = tk_utf8_next(s + i, &k);
        if (pred(c, arg)) {
            if (last < i && !tk_spans_push(out, last, i, false)) return false;
            if (!tk_spans_push(out, i, i + k, true)) return false;
            last = i + k;
        }
        i += k;
    }
    if (n > last && !tk_spans_push(out, last, n, false)) return false;
    return true;
}

static bool pred_ws(uint32_t c, uint32_t arg) { return (void)arg, tk_is_whitespace(c); }
static bool pred_punct(uint32_t c, uint32_t arg) { return (void)arg, tk_is_bert_punct(c); }
static bool pred_numeric(uint32_t c, uint32_t arg) { return (void)arg, tk_is_numeric(c); }
static bool pred_char(uint32_t c, uint32_t arg) { return c == arg; }

/* Whitespace: the pieces the regex \w+|[^\w\s]+ matches (runs of word characters, runs of
 * other non-space characters); the whitespace between them is dropped. */
static bool whitespace_pieces(const char *s, size_t n, tk_spans *out) {
    out->n = 0;
    size_t i = 0;
    while (i < n) {
        size_t k;
        uint32_t c = tk_utf8_next(s + i, &k);
        bool word = tk_is_word_char(c);
        if (!word && tk_is_whitespace(c)) {
            i += k;
            continue;
        }
        size_t start = i;
        i += k;
        while (i < n) {
            c = tk_utf8_next(s + i, &k);
            bool w = tk_is_word_char(c);
            if (word ? !w : (w || tk_is_whitespace(c))) break;
            i += k;
        }
        if (!tk_spans_push(out, start, i, false)) return false;
    }
    return true;
}

static bool oom(tk_enc *e) { return tk_enc_fail(e, EM_ERR_OOM, "out of memory while splitting"); }

/* Hands every non-empty piece of src to the next step. */
static bool run_pieces(tk_enc *e, size_t step, const char *src, const tk_spans *pieces,
                       bool at_origin) {
    for (size_t i = 0; i < pieces->n; i++) {
        const tk_span *p = &pieces->v[i];
        if (p->end <= p->start) continue;
        if (!tk_pretok_run(e, step + 1, src + p->start, p->end - p->start,
                           at_origin && p->start == 0))
            return false;
    }
    return true;
}

bool tk_pretok_run(tk_enc *e, size_t step, const char *s, size_t len, bool at_origin) {
    if (len == 0) return true;
    const em_tokenizer *t = e->t;
    if (step == t->n_pretok) return tk_model_tokenize(e, s, len);
    const tk_pretok *p = &t->pretok[step];
    tk_spans *m = &e->spans[step][0], *pieces = &e->spans[step][1];
    tk_buf *b0 = &e->level[step][0], *b1 = &e->level[step][1];
    char err[320];

    switch (p->type) {
    case TK_PT_SPLIT:
        if (!tk_regex_find_matches(&e->rx, &p->re, s, len, m, err, sizeof err))
            return tk_enc_fail(e, EM_ERR_INTERNAL, "pre_tokenizer Split: %s", err);
        if (p->invert)
            for (size_t i = 0; i < m->n; i++) m->v[i].match = !m->v[i].match;
        if (!tk_split_by_behavior(m, p->behavior, pieces)) return oom(e);
        return run_pieces(e, step, s, pieces, at_origin);

    case TK_PT_BYTE_LEVEL: {
        const char *src = s;
        size_t n = len;
        if (p->add_prefix_space && s[0] != ' ') {
            b0->len = 0;
            if (!tk_buf_putc(b0, ' ') || !tk_buf_append(b0, s, len)) return oom(e);
            src = b0->p;
            n = b0->len;
        }
        if (p->use_regex) {
            if (!tk_regex_find_matches(&e->rx, &p->re, src, n, m, err, sizeof err))
                return tk_enc_fail(e, EM_ERR_INTERNAL, "pre_tokenizer ByteLevel: %s", err);
        } else {
            m->n = 0;
            if (!tk_spans_push(m, 0, n, false)) return oom(e);
        }
        for (size_t i = 0; i < m->n; i++) {
            size_t a = m->v[i].start, z = m->v[i].end;
            if (z <= a) continue;
            b1->len = 0;
            if (!tk_byte_level_map(src + a, z - a, b1)) return oom(e);
            if (!tk_pretok_run(e, step + 1, b1->p, b1->len, at_origin && a == 0)) return false;
        }
        return true;
    }

    case TK_PT_METASPACE: {
        char rep[4];
        size_t rl = tk_utf8_encode(p->ch, rep);
        b0->len = 0;
        bool starts_with_rep = false;
        {
            size_t k;
            starts_with_rep = tk_utf8_next(s, &k) == p->ch || (s[0] == ' ');
        }
        if ((p->prepend == TK_PREPEND_ALWAYS || (p->prepend == TK_PREPEND_FIRST && at_origin)) &&
            !starts_with_rep)
            if (!tk_buf_append(b0, rep, rl)) return oom(e);
        for (size_t i = 0; i < len; i++) {
            if (s[i] == ' ') {
                if (!tk_buf_append(b0, rep, rl)) return oom(e);
            } else if (!tk_buf_putc(b0, s[i]))
                return oom(e);
        }
        if (!p->split) return tk_pretok_run(e, step + 1, b0->p, b0->len, at_origin);
        if (!pred_find_matches(b0->p, b0->len, pred_char, p->ch, m)) return oom(e);
        if (!tk_split_by_behavior(m, TK_SPLIT_MERGED_WITH_NEXT, pieces)) return oom(e);
        return run_pieces(e, step, b0->p, pieces, at_origin);
    }

    case TK_PT_WHITESPACE:
        if (!whitespace_pieces(s, len, pieces)) return oom(e);
        return run_pieces(e, step, s, pieces, at_origin);

    case TK_PT_WS_SPLIT:
        if (!pred_find_matches(s, len, pred_ws, 0, m)) return oom(e);
        if (!tk_split_by_behavior(m, TK_SPLIT_REMOVED, pieces)) return oom(e);
        return run_pieces(e, step, s, pieces, at_origin);

    case TK_PT_PUNCT:
        if (!pred_find_matches(s, len, pred_punct, 0, m)) return oom(e);
        if (!tk_split_by_behavior(m, p->behavior, pieces)) return oom(e);
        return run_pieces(e, step, s, pieces, at_origin);

    case TK_PT_DIGITS:
        if (!pred_find_matches(s, len, pred_numeric, 0, m)) return oom(e);
        if (!tk_split_by_behavior(m, p->individual_digits ? TK_SPLIT_ISOLATED
                                                          : TK_SPLIT_CONTIGUOUS,
                                  pieces))
            return oom(e);
        return run_pieces(e, step, s, pieces, at_origin);

    case TK_PT_CHAR_DELIMITER:
        if (!pred_find_matches(s, len, pred_char, p->ch, m)) return oom(e);
        if (!tk_split_by_behavior(m, TK_SPLIT_REMOVED, pieces)) return oom(e);
        return run_pieces(e, step, s, pieces, at_origin);

    case TK_PT_FIXED_LENGTH: {
        pieces->n = 0;
        size_t i = 0;
        while (i < len) {
            size_t start = i;
            for (size_t c = 0; c < p->length && i < len; c++)
                i += tk_utf8_len((unsigned char)s[i]);
            if (!tk_spans_push(pieces, start, i, false)) return oom(e);
        }
        return run_pieces(e, step, s, pieces, at_origin);
    }
    }
    return tk_enc_fail(e, EM_ERR_INTERNAL, "unknown pre-tokenizer step %d", (int)p->type);
}

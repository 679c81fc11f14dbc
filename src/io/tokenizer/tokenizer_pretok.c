/*
 * Pre-tokenizers (tokenizers/src/pre_tokenizers and NormalizedString::split).
 *
 * `tokenizers` applies each pre-tokenizer to every split before the next one runs. Each step
 * treats its splits independently, so running the steps depth-first on one split at a time gives
 * the same splits in the same order, without building the intermediate lists: step k cuts its
 * input into pieces and hands each non-empty piece to step k + 1; after the last step a piece
 * goes to the model.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "io/tokenizer/tokenizer_impl.h"

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

/* ---- streaming splits ----
 * A pattern's spans come one at a time (regex matches as they are found, or characters that
 * satisfy a predicate) and go through the behaviour's fold below, which needs to hold at most one
 * piece back; every piece it lets go is pre-tokenized further at once. This is the fold of
 * NormalizedString::split, run forwards (MergedWithNext, which the library folds from the end,
 * holds a match until it sees what follows). */

typedef struct splitter {
    tk_enc *e;
    size_t step;
    const char *src;
    bool at_origin, invert;
    tk_split_behavior b;
    bool prev_match; /* the fold's previous_match */
    bool have;       /* a piece is held back */
    size_t hs, he;
    bool failed;
} splitter;

static bool emit(splitter *sp, size_t a, size_t z) {
    if (z <= a) return true; /* empty splits are dropped */
    if (!tk_pretok_run(sp->e, sp->step + 1, sp->src + a, z - a, sp->at_origin && a == 0)) {
        sp->failed = true;
        return false;
    }
    return true;
}

static bool feed(void *ctx, size_t a, size_t z, bool m) {
    splitter *sp = ctx;
    if (sp->invert) m = !m;
    switch (sp->b) {
    case TK_SPLIT_ISOLATED: return emit(sp, a, z);
    case TK_SPLIT_REMOVED: return m ? true : emit(sp, a, z);
    case TK_SPLIT_CONTIGUOUS:
    case TK_SPLIT_MERGED_WITH_PREVIOUS: {
        bool merge = sp->b == TK_SPLIT_CONTIGUOUS ? m == sp->prev_match : m && !sp->prev_match;
        sp->prev_match = m;
        if (merge && sp->have) {
            sp->he = z;
            return true;
        }
        if (sp->have && !emit(sp, sp->hs, sp->he)) return false;
        sp->have = true;
        sp->hs = a, sp->he = z;
        return true;
    }
    case TK_SPLIT_MERGED_WITH_NEXT:
        if (sp->have) { /* a held match */
            sp->have = false;
            if (!m) return emit(sp, sp->hs, z);
            if (!emit(sp, sp->hs, sp->he)) return false;
        }
        if (m) {
            sp->have = true;
            sp->hs = a, sp->he = z;
            return true;
        }
        return emit(sp, a, z);
    }
    return false;
}

static bool finish(splitter *sp) { return !sp->have || emit(sp, sp->hs, sp->he); }

static splitter splitter_make(tk_enc *e, size_t step, const char *src, bool at_origin,
                              tk_split_behavior b, bool invert) {
    return (splitter){.e = e, .step = step, .src = src, .at_origin = at_origin, .b = b,
                      .invert = invert};
}

typedef bool (*tk_pred)(uint32_t c, uint32_t arg);

/* Pattern::find_matches for a character predicate: every matching character is its own match
 * span, the text between them one non-match span. */
static bool pred_split(splitter *sp, const char *s, size_t n, tk_pred pred, uint32_t arg) {
    size_t last = 0;
    for (size_t i = 0; i < n;) {
        size_t k;
        uint32_t c = tk_utf8_next(s + i, &k);
        if (pred(c, arg)) {
            if (last < i && !feed(sp, last, i, false)) return false;
            if (!feed(sp, i, i + k, true)) return false;
            last = i + k;
        }
        i += k;
    }
    if (n > last && !feed(sp, last, n, false)) return false;
    return finish(sp);
}

static bool pred_ws(uint32_t c, uint32_t arg) { return (void)arg, tk_is_whitespace(c); }
static bool pred_punct(uint32_t c, uint32_t arg) { return (void)arg, tk_is_bert_punct(c); }
static bool pred_numeric(uint32_t c, uint32_t arg) { return (void)arg, tk_is_numeric(c); }
static bool pred_char(uint32_t c, uint32_t arg) { return c == arg; }

/* Whitespace: the pieces the regex \w+|[^\w\s]+ matches (runs of word characters, runs of
 * other non-space characters); the whitespace between them is dropped. */
static bool whitespace_split(splitter *sp, const char *s, size_t n) {
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
        if (!emit(sp, start, i)) return false;
    }
    return true;
}

/* ByteLevel with its regex: each match, mapped to byte characters, goes on. */
typedef struct bl_ctx {
    tk_enc *e;
    size_t step;
    const char *src;
    bool at_origin;
    tk_buf *buf;
    bool failed;
} bl_ctx;

static bool bl_piece(void *ctx, size_t a, size_t z, bool m) {
    (void)m;
    bl_ctx *b = ctx;
    if (z <= a) return true;
    b->buf->len = 0;
    if (!tk_byte_level_map(b->src + a, z - a, b->buf)) {
        tk_enc_fail(b->e, EM_ERR_OOM, "out of memory while splitting");
        b->failed = true;
        return false;
    }
    if (!tk_pretok_run(b->e, b->step + 1, b->buf->p, b->buf->len, b->at_origin && a == 0)) {
        b->failed = true;
        return false;
    }
    return true;
}

static bool oom(tk_enc *e) { return tk_enc_fail(e, EM_ERR_OOM, "out of memory while splitting"); }

/* Runs a regex through a splitter. */
static bool regex_split(tk_enc *e, const tk_regex *re, splitter *sp, const char *s, size_t n,
                        const char *who) {
    char err[320];
    bool stopped;
    if (!tk_regex_each(&e->rx, re, s, n, feed, sp, &stopped, err, sizeof err))
        return tk_enc_fail(e, EM_ERR_INTERNAL, "pre_tokenizer %s: %s", who, err);
    if (stopped || sp->failed) return false;
    return finish(sp);
}

bool tk_pretok_run(tk_enc *e, size_t step, const char *s, size_t len, bool at_origin) {
    if (len == 0) return true;
    const em_tokenizer *t = e->t;
    if (step == t->n_pretok) return tk_model_tokenize(e, s, len);
    const tk_pretok *p = &t->pretok[step];
    tk_buf *b0 = &e->level[step][0], *b1 = &e->level[step][1];
    splitter sp;

    switch (p->type) {
    case TK_PT_SPLIT:
        sp = splitter_make(e, step, s, at_origin, p->behavior, p->invert);
        return regex_split(e, &p->re, &sp, s, len, "Split");

    case TK_PT_BYTE_LEVEL: {
        const char *src = s;
        size_t n = len;
        if (p->add_prefix_space && s[0] != ' ') {
            b0->len = 0;
            if (!tk_buf_putc(b0, ' ') || !tk_buf_append(b0, s, len)) return oom(e);
            src = b0->p;
            n = b0->len;
        }
        bl_ctx bc = {e, step, src, at_origin, b1, false};
        if (!p->use_regex) return bl_piece(&bc, 0, n, false);
        char err[320];
        bool stopped;
        if (!tk_regex_each(&e->rx, &p->re, src, n, bl_piece, &bc, &stopped, err, sizeof err))
            return tk_enc_fail(e, EM_ERR_INTERNAL, "pre_tokenizer ByteLevel: %s", err);
        return !stopped && !bc.failed;
    }

    case TK_PT_METASPACE: {
        char rep[4];
        size_t rl = tk_utf8_encode(p->ch, rep);
        b0->len = 0;
        size_t k;
        bool starts_with_rep = s[0] == ' ' || tk_utf8_next(s, &k) == p->ch;
        if ((p->prepend == TK_PREPEND_ALWAYS || (p->prepend == TK_PREPEND_FIRST && at_origin)) &&
            !starts_with_rep)
            if (!tk_buf_append(b0, rep, rl)) return oom(e);
        if (!tk_buf_reserve(b0, len * rl)) return oom(e);
        for (size_t i = 0; i < len; i++) {
            if (s[i] == ' ') {
                memcpy(b0->p + b0->len, rep, rl);
                b0->len += rl;
            } else
                b0->p[b0->len++] = s[i];
        }
        if (!p->split) return tk_pretok_run(e, step + 1, b0->p, b0->len, at_origin);
        sp = splitter_make(e, step, b0->p, at_origin, TK_SPLIT_MERGED_WITH_NEXT, false);
        return pred_split(&sp, b0->p, b0->len, pred_char, p->ch);
    }

    case TK_PT_WHITESPACE:
        sp = splitter_make(e, step, s, at_origin, TK_SPLIT_ISOLATED, false);
        return whitespace_split(&sp, s, len);

    case TK_PT_WS_SPLIT:
        sp = splitter_make(e, step, s, at_origin, TK_SPLIT_REMOVED, false);
        return pred_split(&sp, s, len, pred_ws, 0);

    case TK_PT_PUNCT:
        sp = splitter_make(e, step, s, at_origin, p->behavior, false);
        return pred_split(&sp, s, len, pred_punct, 0);

    case TK_PT_DIGITS:
        sp = splitter_make(e, step, s, at_origin,
                           p->individual_digits ? TK_SPLIT_ISOLATED : TK_SPLIT_CONTIGUOUS, false);
        return pred_split(&sp, s, len, pred_numeric, 0);

    case TK_PT_CHAR_DELIMITER:
        sp = splitter_make(e, step, s, at_origin, TK_SPLIT_REMOVED, false);
        return pred_split(&sp, s, len, pred_char, p->ch);

    case TK_PT_FIXED_LENGTH: {
        sp = splitter_make(e, step, s, at_origin, TK_SPLIT_ISOLATED, false);
        size_t i = 0;
        while (i < len) {
            size_t start = i;
            for (size_t c = 0; c < p->length && i < len; c++)
                i += tk_utf8_len((unsigned char)s[i]);
            if (!emit(&sp, start, i)) return false;
        }
        return true;
    }
    }
    return tk_enc_fail(e, EM_ERR_INTERNAL, "unknown pre-tokenizer step %d", (int)p->type);
}

/* ---- loading (tokenizer.json "pre_tokenizer") ---- */

/* GPT-2's split (pre_tokenizers/byte_level.rs), used by ByteLevel with use_regex. */
static const char gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";


static tk_pretok *pretok_add(tk_ld *l, const char *where) {
    em_tokenizer *t = l->t;
    if (t->n_pretok == TK_MAX_PRETOK) {
        tk_ld_fail(l, EM_ERR_UNSUPPORTED, where, "more than %d pre-tokenizer steps", TK_MAX_PRETOK);
        return NULL;
    }
    tk_pretok *p = &t->pretok[t->n_pretok++];
    memset(p, 0, sizeof *p);
    return p;
}

bool tk_parse_pretok(tk_ld *l, json_t *v, const char *where, int depth) {
    const char *type;
    if (depth > 16) return tk_ld_fail(l, EM_ERR_FORMAT, where, "pre-tokenizers nested too deeply");
    if (!tk_get_type(l, v, where, &type)) return false;
    if (!strcmp(type, "Sequence")) {
        json_t *arr;
        if (!tk_get_array(l, v, "pretokenizers", where, &arr)) return false;
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char w[200];
            snprintf(w, sizeof w, "%s.pretokenizers[%zu]", where, i);
            if (!tk_parse_pretok(l, json_array_get(arr, i), w, depth + 1)) return false;
        }
        return true;
    }
    if (!strcmp(type, "BertPreTokenizer")) {
        tk_pretok *a = pretok_add(l, where);
        if (!a) return false;
        a->type = TK_PT_WS_SPLIT;
        tk_pretok *b = pretok_add(l, where);
        if (!b) return false;
        b->type = TK_PT_PUNCT;
        b->behavior = TK_SPLIT_ISOLATED;
        return true;
    }
    tk_pretok *p = pretok_add(l, where);
    if (!p) return false;
    if (!strcmp(type, "Split")) {
        p->type = TK_PT_SPLIT;
        return tk_get_pattern(l, v, where, &p->re) && tk_get_behavior(l, v, where, true, &p->behavior) &&
               tk_opt_bool(l, v, "invert", false, &p->invert, where);
    }
    if (!strcmp(type, "ByteLevel")) {
        p->type = TK_PT_BYTE_LEVEL;
        if (!tk_opt_bool(l, v, "add_prefix_space", true, &p->add_prefix_space, where) ||
            !tk_opt_bool(l, v, "use_regex", true, &p->use_regex, where))
            return false;
        if (p->use_regex) {
            char err[400];
            if (!tk_regex_compile(&p->re, gpt2_regex, strlen(gpt2_regex), false, err, sizeof err))
                return tk_ld_fail(l, EM_ERR_INTERNAL, where, "%s", err);
        }
        return true;
    }
    if (!strcmp(type, "Metaspace")) {
        p->type = TK_PT_METASPACE;
        return tk_opt_char(l, v, "replacement", 0x2581, &p->ch, where) &&
               tk_get_prepend_scheme(l, v, where, &p->prepend) &&
               tk_opt_bool(l, v, "split", true, &p->split, where);
    }
    if (!strcmp(type, "Whitespace")) {
        p->type = TK_PT_WHITESPACE;
        return true;
    }
    if (!strcmp(type, "WhitespaceSplit")) {
        p->type = TK_PT_WS_SPLIT;
        return true;
    }
    if (!strcmp(type, "Punctuation")) {
        p->type = TK_PT_PUNCT;
        return tk_get_behavior(l, v, where, false, &p->behavior);
    }
    if (!strcmp(type, "Digits")) {
        p->type = TK_PT_DIGITS;
        return tk_opt_bool(l, v, "individual_digits", false, &p->individual_digits, where);
    }
    if (!strcmp(type, "CharDelimiterSplit")) {
        p->type = TK_PT_CHAR_DELIMITER;
        if (!json_object_get(v, "delimiter"))
            return tk_ld_fail(l, EM_ERR_FORMAT, where, "missing \"delimiter\"");
        return tk_opt_char(l, v, "delimiter", 0, &p->ch, where);
    }
    if (!strcmp(type, "FixedLength")) {
        p->type = TK_PT_FIXED_LENGTH;
        if (!tk_opt_uint(l, v, "length", 5, &p->length, where)) return false;
        if (p->length == 0) return tk_ld_fail(l, EM_ERR_FORMAT, where, "\"length\" must be positive");
        return true;
    }
    l->t->n_pretok--;
    if (!strcmp(type, "UnicodeScripts"))
        return tk_ld_fail(l, EM_ERR_UNSUPPORTED, where,
                     "the pre-tokenizer type \"UnicodeScripts\" is not supported by Ember");
    return tk_ld_fail(l, EM_ERR_FORMAT, where, "unknown pre-tokenizer type \"%s\"", type);
}

/*
 * Loading tokenizer.json and tokenizer_config.json (tokenizers/src/tokenizer/serialization.rs
 * and the Deserialize impls of each component).
 *
 * The document is read whole; the model's vocab and merges go through the fast scanner of
 * tokenizer_json.c, the rest through jansson. Every component is checked field by field and a
 * failure names the file, the JSON path of the component ("pre_tokenizer.pretokenizers[1]")
 * and what was expected. Component types that `tokenizers` has and Ember does not are
 * EM_ERR_UNSUPPORTED; types neither knows are EM_ERR_FORMAT.
 */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/tokenizer_impl.h"

/* GPT-2's split (pre_tokenizers/byte_level.rs), used by ByteLevel with use_regex. */
static const char gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef struct ld {
    em_ctx *c;
    const char *file;
    em_tokenizer *t;
} ld;

static bool lfail(ld *l, em_status s, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static bool lfail(ld *l, em_status s, const char *where, const char *fmt, ...) {
    char msg[560];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    em_ctx_fail(l->c, s, "tokenizer_load", "%s: %s%s%s", l->file, where ? where : "",
                where && *where ? ": " : "", msg);
    return false;
}

static bool oom(ld *l) { return lfail(l, EM_ERR_OOM, NULL, "out of memory"); }

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* ---- field helpers: absent and null mean "use the default" ---- */

static bool opt_bool(ld *l, json_t *o, const char *key, bool dflt, bool *out, const char *where) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return true;
    }
    if (!json_is_boolean(v))
        return lfail(l, EM_ERR_FORMAT, where, "\"%s\" must be a boolean, not %s", key,
                     json_kind(v));
    *out = json_is_true(v);
    return true;
}

/* A string field copied into the arena; *out = NULL when absent or null (unless required). */
static bool opt_str(ld *l, json_t *o, const char *key, bool required, const char **out,
                    size_t *len, const char *where) {
    json_t *v = json_object_get(o, key);
    *out = NULL;
    if (len) *len = 0;
    if (!v || json_is_null(v)) {
        if (required) return lfail(l, EM_ERR_FORMAT, where, "missing the string \"%s\"", key);
        return true;
    }
    if (!json_is_string(v))
        return lfail(l, EM_ERR_FORMAT, where, "\"%s\" must be a string, not %s", key,
                     json_kind(v));
    size_t n = json_string_length(v);
    char *s = tk_arena_strndup(&l->t->arena, json_string_value(v), n);
    if (!s) return oom(l);
    *out = s;
    if (len) *len = n;
    return true;
}

static bool opt_uint(ld *l, json_t *o, const char *key, size_t dflt, size_t *out,
                     const char *where) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return true;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return lfail(l, EM_ERR_FORMAT, where, "\"%s\" must be a non-negative integer, not %s",
                     key, json_kind(v));
    *out = (size_t)json_integer_value(v);
    return true;
}

/* A field holding one character (Rust `char`). */
static bool opt_char(ld *l, json_t *o, const char *key, uint32_t dflt, uint32_t *out,
                     const char *where) {
    json_t *v = json_object_get(o, key);
    if (!v) {
        *out = dflt;
        return true;
    }
    size_t k;
    if (json_is_string(v) && json_string_length(v) > 0) {
        const char *s = json_string_value(v);
        uint32_t c = tk_utf8_next(s, &k);
        if (k == json_string_length(v)) {
            *out = c;
            return true;
        }
    }
    return lfail(l, EM_ERR_FORMAT, where, "\"%s\" must be a string of exactly one character",
                 key);
}

static bool get_type(ld *l, json_t *v, const char *where, const char **type) {
    if (!json_is_object(v))
        return lfail(l, EM_ERR_FORMAT, where, "expected an object, found %s", json_kind(v));
    json_t *ty = json_object_get(v, "type");
    if (!json_is_string(ty))
        return lfail(l, EM_ERR_FORMAT, where, "missing the string \"type\"");
    *type = json_string_value(ty);
    return true;
}

/* {"String": "..."} or {"Regex": "..."} */
static bool get_pattern(ld *l, json_t *o, const char *where, tk_regex *re) {
    json_t *p = json_object_get(o, "pattern");
    json_t *s = json_is_object(p) ? json_object_get(p, "String") : NULL;
    json_t *r = json_is_object(p) ? json_object_get(p, "Regex") : NULL;
    if (!json_is_object(p) || json_object_size(p) != 1 || !(json_is_string(s) || json_is_string(r)))
        return lfail(l, EM_ERR_FORMAT, where,
                     "\"pattern\" must be {\"String\": \"...\"} or {\"Regex\": \"...\"}");
    json_t *v = s ? s : r;
    char err[400];
    if (!tk_regex_compile(re, json_string_value(v), json_string_length(v), s != NULL, err,
                          sizeof err))
        return lfail(l, EM_ERR_FORMAT, where, "%s", err);
    return true;
}

static bool get_behavior(ld *l, json_t *o, const char *where, bool required,
                         tk_split_behavior *b) {
    static const struct {
        const char *name;
        tk_split_behavior b;
    } names[] = {{"Removed", TK_SPLIT_REMOVED},
                 {"Isolated", TK_SPLIT_ISOLATED},
                 {"MergedWithPrevious", TK_SPLIT_MERGED_WITH_PREVIOUS},
                 {"MergedWithNext", TK_SPLIT_MERGED_WITH_NEXT},
                 {"Contiguous", TK_SPLIT_CONTIGUOUS}};
    json_t *v = json_object_get(o, "behavior");
    if (!v) {
        if (required) return lfail(l, EM_ERR_FORMAT, where, "missing \"behavior\"");
        *b = TK_SPLIT_ISOLATED;
        return true;
    }
    if (json_is_string(v))
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (!strcmp(json_string_value(v), names[i].name)) {
                *b = names[i].b;
                return true;
            }
    return lfail(l, EM_ERR_FORMAT, where,
                 "\"behavior\" must be one of Removed, Isolated, MergedWithPrevious, "
                 "MergedWithNext, Contiguous");
}

static bool get_prepend_scheme(ld *l, json_t *o, const char *where, tk_prepend_scheme *out) {
    json_t *v = json_object_get(o, "prepend_scheme");
    *out = TK_PREPEND_ALWAYS;
    if (v) {
        const char *s = json_is_string(v) ? json_string_value(v) : "";
        if (!strcmp(s, "always")) *out = TK_PREPEND_ALWAYS;
        else if (!strcmp(s, "first")) *out = TK_PREPEND_FIRST;
        else if (!strcmp(s, "never")) *out = TK_PREPEND_NEVER;
        else
            return lfail(l, EM_ERR_FORMAT, where,
                         "\"prepend_scheme\" must be \"always\", \"first\" or \"never\"");
    }
    /* the older add_prefix_space: false must agree with prepend_scheme (metaspace.rs) */
    json_t *aps = json_object_get(o, "add_prefix_space");
    if (json_is_false(aps)) {
        if (*out != TK_PREPEND_NEVER)
            return lfail(l, EM_ERR_FORMAT, where,
                         "add_prefix_space does not match declared prepend_scheme");
        *out = TK_PREPEND_NEVER;
    }
    return true;
}

static bool get_array(ld *l, json_t *o, const char *key, const char *where, json_t **out) {
    *out = json_object_get(o, key);
    if (!json_is_array(*out))
        return lfail(l, EM_ERR_FORMAT, where, "\"%s\" must be an array", key);
    return true;
}

/* ---- normalizers ---- */

static bool parse_norm(ld *l, json_t *v, const char *where, tk_norm *n) {
    memset(n, 0, sizeof *n);
    const char *type;
    if (!get_type(l, v, where, &type)) return false;
    static const struct {
        const char *name;
        tk_norm_type type;
    } simple[] = {{"NFC", TK_NORM_NFC},           {"NFD", TK_NORM_NFD},
                  {"NFKC", TK_NORM_NFKC},         {"NFKD", TK_NORM_NFKD},
                  {"Lowercase", TK_NORM_LOWERCASE}, {"StripAccents", TK_NORM_STRIP_ACCENTS},
                  {"Nmt", TK_NORM_NMT},           {"ByteLevel", TK_NORM_BYTE_LEVEL}};
    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
        if (!strcmp(type, simple[i].name)) {
            n->type = simple[i].type;
            return true;
        }
    if (!strcmp(type, "Sequence")) {
        n->type = TK_NORM_SEQUENCE;
        json_t *arr;
        if (!get_array(l, v, "normalizers", where, &arr)) return false;
        n->n_children = json_array_size(arr);
        n->children = calloc(n->n_children ? n->n_children : 1, sizeof *n->children);
        if (!n->children) return oom(l);
        for (size_t i = 0; i < n->n_children; i++) {
            char w[200];
            snprintf(w, sizeof w, "%s.normalizers[%zu]", where, i);
            if (!parse_norm(l, json_array_get(arr, i), w, &n->children[i])) {
                n->n_children = i + 1; /* free what was built */
                return false;
            }
        }
        return true;
    }
    if (!strcmp(type, "BertNormalizer") || !strcmp(type, "Bert")) {
        n->type = TK_NORM_BERT;
        bool lower = true;
        if (!opt_bool(l, v, "clean_text", true, &n->clean_text, where) ||
            !opt_bool(l, v, "handle_chinese_chars", true, &n->handle_chinese_chars, where) ||
            !opt_bool(l, v, "lowercase", true, &lower, where))
            return false;
        n->lowercase = lower;
        /* strip_accents: None means "same as lowercase" */
        return opt_bool(l, v, "strip_accents", lower, &n->strip_accents, where);
    }
    if (!strcmp(type, "Strip")) {
        n->type = TK_NORM_STRIP;
        return opt_bool(l, v, "strip_left", true, &n->strip_left, where) &&
               opt_bool(l, v, "strip_right", true, &n->strip_right, where);
    }
    if (!strcmp(type, "Replace")) {
        n->type = TK_NORM_REPLACE;
        return get_pattern(l, v, where, &n->re) &&
               opt_str(l, v, "content", true, &n->content, &n->content_len, where);
    }
    if (!strcmp(type, "Prepend")) {
        n->type = TK_NORM_PREPEND;
        return opt_str(l, v, "prepend", true, &n->content, &n->content_len, where);
    }
    if (!strcmp(type, "Precompiled"))
        return lfail(l, EM_ERR_UNSUPPORTED, where,
                     "the normalizer type \"Precompiled\" (a SentencePiece precompiled "
                     "charsmap) is not supported by Ember");
    return lfail(l, EM_ERR_FORMAT, where, "unknown normalizer type \"%s\"", type);
}

void tk_norm_free(tk_norm *n) {
    if (!n) return;
    tk_regex_free(&n->re);
    for (size_t i = 0; i < n->n_children; i++) tk_norm_free(&n->children[i]);
    free(n->children);
}

/* ---- pre-tokenizers (flattened) ---- */

static tk_pretok *pretok_add(ld *l, const char *where) {
    em_tokenizer *t = l->t;
    if (t->n_pretok == TK_MAX_PRETOK) {
        lfail(l, EM_ERR_UNSUPPORTED, where, "more than %d pre-tokenizer steps", TK_MAX_PRETOK);
        return NULL;
    }
    tk_pretok *p = &t->pretok[t->n_pretok++];
    memset(p, 0, sizeof *p);
    return p;
}

static bool parse_pretok(ld *l, json_t *v, const char *where, int depth) {
    const char *type;
    if (depth > 16) return lfail(l, EM_ERR_FORMAT, where, "pre-tokenizers nested too deeply");
    if (!get_type(l, v, where, &type)) return false;
    if (!strcmp(type, "Sequence")) {
        json_t *arr;
        if (!get_array(l, v, "pretokenizers", where, &arr)) return false;
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char w[200];
            snprintf(w, sizeof w, "%s.pretokenizers[%zu]", where, i);
            if (!parse_pretok(l, json_array_get(arr, i), w, depth + 1)) return false;
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
        return get_pattern(l, v, where, &p->re) && get_behavior(l, v, where, true, &p->behavior) &&
               opt_bool(l, v, "invert", false, &p->invert, where);
    }
    if (!strcmp(type, "ByteLevel")) {
        p->type = TK_PT_BYTE_LEVEL;
        if (!opt_bool(l, v, "add_prefix_space", true, &p->add_prefix_space, where) ||
            !opt_bool(l, v, "use_regex", true, &p->use_regex, where))
            return false;
        if (p->use_regex) {
            char err[400];
            if (!tk_regex_compile(&p->re, gpt2_regex, strlen(gpt2_regex), false, err, sizeof err))
                return lfail(l, EM_ERR_INTERNAL, where, "%s", err);
        }
        return true;
    }
    if (!strcmp(type, "Metaspace")) {
        p->type = TK_PT_METASPACE;
        return opt_char(l, v, "replacement", 0x2581, &p->ch, where) &&
               get_prepend_scheme(l, v, where, &p->prepend) &&
               opt_bool(l, v, "split", true, &p->split, where);
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
        return get_behavior(l, v, where, false, &p->behavior);
    }
    if (!strcmp(type, "Digits")) {
        p->type = TK_PT_DIGITS;
        return opt_bool(l, v, "individual_digits", false, &p->individual_digits, where);
    }
    if (!strcmp(type, "CharDelimiterSplit")) {
        p->type = TK_PT_CHAR_DELIMITER;
        if (!json_object_get(v, "delimiter"))
            return lfail(l, EM_ERR_FORMAT, where, "missing \"delimiter\"");
        return opt_char(l, v, "delimiter", 0, &p->ch, where);
    }
    if (!strcmp(type, "FixedLength")) {
        p->type = TK_PT_FIXED_LENGTH;
        if (!opt_uint(l, v, "length", 5, &p->length, where)) return false;
        if (p->length == 0) return lfail(l, EM_ERR_FORMAT, where, "\"length\" must be positive");
        return true;
    }
    l->t->n_pretok--;
    if (!strcmp(type, "UnicodeScripts"))
        return lfail(l, EM_ERR_UNSUPPORTED, where,
                     "the pre-tokenizer type \"UnicodeScripts\" is not supported by Ember");
    return lfail(l, EM_ERR_FORMAT, where, "unknown pre-tokenizer type \"%s\"", type);
}

/* ---- post-processors ---- */

static bool token_pair(ld *l, json_t *o, const char *key, const char *where, int32_t *id) {
    json_t *v = json_object_get(o, key);
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_string(json_array_get(v, 0)) ||
        !json_is_integer(json_array_get(v, 1)) || json_integer_value(json_array_get(v, 1)) < 0 ||
        json_integer_value(json_array_get(v, 1)) > INT32_MAX)
        return lfail(l, EM_ERR_FORMAT, where, "\"%s\" must be [\"token\", id]", key);
    *id = (int32_t)json_integer_value(json_array_get(v, 1));
    return true;
}

static bool parse_template(ld *l, json_t *v, const char *key, const char *where, json_t *specials,
                           tk_tpl_piece **out, size_t *n_out, bool single) {
    json_t *arr;
    if (!get_array(l, v, key, where, &arr)) return false;
    size_t n = json_array_size(arr);
    *out = calloc(n ? n : 1, sizeof **out);
    if (!*out) return oom(l);
    *n_out = n;
    for (size_t i = 0; i < n; i++) {
        json_t *p = json_array_get(arr, i);
        json_t *seq = json_object_get(p, "Sequence"), *sp = json_object_get(p, "SpecialToken");
        char w[220];
        snprintf(w, sizeof w, "%s.%s[%zu]", where, key, i);
        tk_tpl_piece *pc = &(*out)[i];
        if (json_is_object(seq)) {
            json_t *id = json_object_get(seq, "id");
            const char *s = json_is_string(id) ? json_string_value(id) : "";
            if (strcmp(s, "A") && strcmp(s, "B"))
                return lfail(l, EM_ERR_FORMAT, w, "a Sequence id must be \"A\" or \"B\"");
            pc->is_sequence = true;
            pc->seq = s[0] == 'B';
            if (single && pc->seq)
                return lfail(l, EM_ERR_FORMAT, w,
                             "the single-sequence template uses sequence B");
        } else if (json_is_object(sp)) {
            json_t *id = json_object_get(sp, "id");
            if (!json_is_string(id))
                return lfail(l, EM_ERR_FORMAT, w, "a SpecialToken needs a string \"id\"");
            json_t *tok = json_object_get(specials, json_string_value(id));
            json_t *ids = json_object_get(tok, "ids");
            if (!json_is_array(ids))
                return lfail(l, EM_ERR_FORMAT, w,
                             "the special token \"%s\" is not described in special_tokens",
                             json_string_value(id));
            size_t m = json_array_size(ids);
            pc->ids = malloc((m ? m : 1) * sizeof *pc->ids);
            if (!pc->ids) return oom(l);
            pc->n_ids = m;
            for (size_t j = 0; j < m; j++) {
                json_t *x = json_array_get(ids, j);
                if (!json_is_integer(x) || json_integer_value(x) < 0 ||
                    json_integer_value(x) > INT32_MAX)
                    return lfail(l, EM_ERR_FORMAT, w,
                                 "special_tokens[\"%s\"].ids must be non-negative integers",
                                 json_string_value(id));
                pc->ids[j] = (int32_t)json_integer_value(x);
            }
        } else
            return lfail(l, EM_ERR_FORMAT, w,
                         "a template piece must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
    return true;
}

static bool parse_post(ld *l, json_t *v, const char *where, tk_post *p, int depth) {
    memset(p, 0, sizeof *p);
    const char *type;
    if (depth > 16) return lfail(l, EM_ERR_FORMAT, where, "post-processors nested too deeply");
    if (!get_type(l, v, where, &type)) return false;
    if (!strcmp(type, "TemplateProcessing")) {
        p->type = TK_POST_TEMPLATE;
        json_t *specials = json_object_get(v, "special_tokens");
        if (specials && !json_is_object(specials))
            return lfail(l, EM_ERR_FORMAT, where, "\"special_tokens\" must be an object");
        return parse_template(l, v, "single", where, specials, &p->single, &p->n_single, true) &&
               parse_template(l, v, "pair", where, specials, &p->pair, &p->n_pair, false);
    }
    if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        p->type = type[0] == 'B' ? TK_POST_BERT : TK_POST_ROBERTA;
        return token_pair(l, v, "cls", where, &p->cls_id) &&
               token_pair(l, v, "sep", where, &p->sep_id);
    }
    if (!strcmp(type, "ByteLevel")) {
        p->type = TK_POST_BYTE_LEVEL;
        return true;
    }
    if (!strcmp(type, "Sequence")) {
        p->type = TK_POST_SEQUENCE;
        json_t *arr;
        if (!get_array(l, v, "processors", where, &arr)) return false;
        p->n_children = json_array_size(arr);
        p->children = calloc(p->n_children ? p->n_children : 1, sizeof *p->children);
        if (!p->children) return oom(l);
        for (size_t i = 0; i < p->n_children; i++) {
            char w[200];
            snprintf(w, sizeof w, "%s.processors[%zu]", where, i);
            if (!parse_post(l, json_array_get(arr, i), w, &p->children[i], depth + 1)) return false;
        }
        return true;
    }
    return lfail(l, EM_ERR_FORMAT, where, "unknown post-processor type \"%s\"", type);
}

/* ---- decoders ---- */

static bool parse_decoder(ld *l, json_t *v, const char *where, tk_decoder *d, int depth) {
    memset(d, 0, sizeof *d);
    const char *type;
    if (depth > 16) return lfail(l, EM_ERR_FORMAT, where, "decoders nested too deeply");
    if (!get_type(l, v, where, &type)) return false;
    if (!strcmp(type, "ByteLevel")) {
        d->type = TK_DEC_BYTE_LEVEL;
        return true;
    }
    if (!strcmp(type, "Metaspace")) {
        d->type = TK_DEC_METASPACE;
        return opt_char(l, v, "replacement", 0x2581, &d->ch, where) &&
               get_prepend_scheme(l, v, where, &d->prepend);
    }
    if (!strcmp(type, "WordPiece")) {
        d->type = TK_DEC_WORDPIECE;
        if (!opt_str(l, v, "prefix", false, &d->str, &d->str_len, where) ||
            !opt_bool(l, v, "cleanup", true, &d->cleanup, where))
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
            return lfail(l, EM_ERR_FORMAT, where, "missing \"content\"");
        return opt_char(l, v, "content", ' ', &d->ch, where) &&
               opt_uint(l, v, "start", 0, &d->start, where) &&
               opt_uint(l, v, "stop", 0, &d->stop, where);
    }
    if (!strcmp(type, "Replace")) {
        d->type = TK_DEC_REPLACE;
        return get_pattern(l, v, where, &d->re) &&
               opt_str(l, v, "content", true, &d->str, &d->str_len, where);
    }
    if (!strcmp(type, "BPEDecoder")) {
        d->type = TK_DEC_BPE;
        if (!opt_str(l, v, "suffix", false, &d->str, &d->str_len, where)) return false;
        if (!d->str) d->str = "</w>", d->str_len = 4;
        return true;
    }
    if (!strcmp(type, "CTC")) {
        d->type = TK_DEC_CTC;
        if (!opt_str(l, v, "pad_token", false, &d->str, &d->str_len, where) ||
            !opt_str(l, v, "word_delimiter_token", false, &d->str2, &d->str2_len, where) ||
            !opt_bool(l, v, "cleanup", true, &d->cleanup, where))
            return false;
        if (!d->str) d->str = "<pad>", d->str_len = 5;
        if (!d->str2) d->str2 = "|", d->str2_len = 1;
        return true;
    }
    if (!strcmp(type, "Sequence")) {
        d->type = TK_DEC_SEQUENCE;
        json_t *arr;
        if (!get_array(l, v, "decoders", where, &arr)) return false;
        d->n_children = json_array_size(arr);
        d->children = calloc(d->n_children ? d->n_children : 1, sizeof *d->children);
        if (!d->children) return oom(l);
        for (size_t i = 0; i < d->n_children; i++) {
            char w[200];
            snprintf(w, sizeof w, "%s.decoders[%zu]", where, i);
            if (!parse_decoder(l, json_array_get(arr, i), w, &d->children[i], depth + 1))
                return false;
        }
        return true;
    }
    return lfail(l, EM_ERR_FORMAT, where, "unknown decoder type \"%s\"", type);
}

/* ---- model ---- */

/* The vocabulary as a JSON object (slow path). */
static bool vocab_from_json(ld *l, json_t *v, tk_vocab *voc) {
    if (!json_is_object(v))
        return lfail(l, EM_ERR_FORMAT, "model.vocab", "must be an object {\"token\": id}, not %s",
                     json_kind(v));
    if (!tk_strmap_init(&voc->map, json_object_size(v))) return oom(l);
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) > INT32_MAX)
            return lfail(l, EM_ERR_FORMAT, "model.vocab",
                         "the id of \"%.60s\" must be an integer in [0, 2147483647], not %s", key,
                         json_kind(val));
        size_t n = strlen(key);
        char *k = tk_arena_strndup(&l->t->arena, key, n);
        if (!k || !tk_strmap_put(&voc->map, k, n, (int32_t)json_integer_value(val)))
            return oom(l);
    }
    voc->size = voc->map.n;
    return true;
}

static bool merges_from_json(ld *l, json_t *v, tk_model *m) {
    if (!json_is_array(v))
        return lfail(l, EM_ERR_FORMAT, "model.merges", "must be an array, not %s", json_kind(v));
    if (!tk_u64map_init(&m->merges, json_array_size(v))) return oom(l);
    uint32_t rank = 0;
    tk_merge_batch *batch = calloc(1, sizeof *batch);
    if (!batch) return oom(l);
    bool ok = true;
    char err[400];
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i);
        const char *a, *b;
        size_t la, lb;
        char w[64];
        snprintf(w, sizeof w, "model.merges[%zu]", i);
        if (json_is_string(e)) {
            const char *s = json_string_value(e);
            size_t n = json_string_length(e);
            if (n >= 8 && !memcmp(s, "#version", 8)) continue;
            const char *sp = memchr(s, ' ', n);
            if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp - s) - 1)) {
                ok = lfail(l, EM_ERR_FORMAT, w, "\"%.60s\" must hold exactly one space", s);
                break;
            }
            a = s, la = (size_t)(sp - s), b = sp + 1, lb = n - la - 1;
        } else if (json_is_array(e) && json_array_size(e) == 2 &&
                   json_is_string(json_array_get(e, 0)) && json_is_string(json_array_get(e, 1))) {
            a = json_string_value(json_array_get(e, 0));
            la = json_string_length(json_array_get(e, 0));
            b = json_string_value(json_array_get(e, 1));
            lb = json_string_length(json_array_get(e, 1));
        } else {
            ok = lfail(l, EM_ERR_FORMAT, w,
                       "must be a string \"a b\" or a pair [\"a\", \"b\"], not %s", json_kind(e));
            break;
        }
        if (!tk_bpe_merge_add(m, batch, a, la, b, lb, rank++, i, err, sizeof err)) {
            ok = lfail(l, EM_ERR_FORMAT, NULL, "%s", err);
            break;
        }
    }
    if (ok && !tk_bpe_merge_flush(m, batch, err, sizeof err))
        ok = lfail(l, EM_ERR_FORMAT, NULL, "%s", err);
    tk_buf_free(&batch->buf);
    free(batch);
    return ok;
}

static bool unigram_vocab_from_json(ld *l, json_t *v, tk_model *m) {
    if (!json_is_array(v))
        return lfail(l, EM_ERR_FORMAT, "model.vocab",
                     "a Unigram vocabulary must be an array of [\"piece\", score], not %s",
                     json_kind(v));
    size_t n = json_array_size(v);
    if (n >= INT32_MAX) return lfail(l, EM_ERR_FORMAT, "model.vocab", "too many pieces");
    m->scores = malloc((n ? n : 1) * sizeof *m->scores);
    m->vocab.rev_s = malloc((n ? n : 1) * sizeof *m->vocab.rev_s);
    m->vocab.rev_len = malloc((n ? n : 1) * sizeof *m->vocab.rev_len);
    if (!m->scores || !m->vocab.rev_s || !m->vocab.rev_len || !tk_strmap_init(&m->vocab.map, n))
        return oom(l);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        json_t *s = json_array_get(e, 0), *sc = json_array_get(e, 1);
        if (!json_is_array(e) || json_array_size(e) != 2 || !json_is_string(s) ||
            !json_is_number(sc)) {
            char w[64];
            snprintf(w, sizeof w, "model.vocab[%zu]", i);
            return lfail(l, EM_ERR_FORMAT, w, "must be [\"piece\", score]");
        }
        size_t len = json_string_length(s);
        char *k = tk_arena_strndup(&l->t->arena, json_string_value(s), len);
        if (!k || !tk_strmap_put(&m->vocab.map, k, len, (int32_t)i)) return oom(l);
        m->scores[i] = json_number_value(sc);
        m->vocab.rev_s[i] = k;
        m->vocab.rev_len[i] = (uint32_t)len;
    }
    m->vocab.size = n;
    m->vocab.rev_n = n;
    return true;
}

static bool parse_model(ld *l, json_t *v, const char *doc, const tk_json_span *vs,
                        const tk_json_span *ms) {
    tk_model *m = &l->t->model;
    m->unk_id = -1;
    if (!json_is_object(v))
        return lfail(l, EM_ERR_FORMAT, "model", "expected an object, found %s",
                     v ? json_kind(v) : "nothing");
    json_t *ty = json_object_get(v, "type");
    const char *type;
    if (ty) {
        if (!json_is_string(ty)) return lfail(l, EM_ERR_FORMAT, "model", "\"type\" must be a string");
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
                return lfail(l, EM_ERR_FORMAT, NULL, "%s", err);
        } else {
            json_t *voc = json_object_get(v, "vocab");
            if (!voc) return lfail(l, EM_ERR_FORMAT, "model", "missing \"vocab\"");
            if (!unigram_vocab_from_json(l, voc, m)) return false;
        }
        json_t *unk = json_object_get(v, "unk_id");
        if (unk && !json_is_null(unk)) {
            if (!json_is_integer(unk) || json_integer_value(unk) < 0)
                return lfail(l, EM_ERR_FORMAT, "model", "\"unk_id\" must be null or an index");
            if ((size_t)json_integer_value(unk) >= m->vocab.size)
                return lfail(l, EM_ERR_FORMAT, "model",
                             "\"unk_id\" %lld is larger than the vocabulary (%zu pieces)",
                             (long long)json_integer_value(unk), m->vocab.size);
            m->unk_id = (int32_t)json_integer_value(unk);
        }
        if (!opt_bool(l, v, "byte_fallback", false, &m->byte_fallback, "model")) return false;
        for (int b = 0; b < 256; b++) {
            char tok[8];
            snprintf(tok, sizeof tok, "<0x%02X>", b);
            m->byte_ids[b] = tk_strmap_get(&m->vocab.map, tok, 6);
        }
        return tk_unigram_build(m) ? true : oom(l);
    }

    bool is_bpe = !strcmp(type, "BPE"), is_wp = !strcmp(type, "WordPiece"),
         is_wl = !strcmp(type, "WordLevel");
    if (!is_bpe && !is_wp && !is_wl)
        return lfail(l, EM_ERR_FORMAT, "model", "unknown model type \"%s\"", type);
    if (fast) {
        if (doc[vs->start] != '{')
            return lfail(l, EM_ERR_FORMAT, "model.vocab", "must be an object {\"token\": id}");
        if (!tk_json_parse_vocab(doc, *vs, &l->t->arena, &m->vocab, err, sizeof err))
            return lfail(l, EM_ERR_FORMAT, NULL, "%s", err);
    } else {
        json_t *voc = json_object_get(v, "vocab");
        if (!voc) return lfail(l, EM_ERR_FORMAT, "model", "missing \"vocab\"");
        if (!vocab_from_json(l, voc, &m->vocab)) return false;
    }
    if (!tk_vocab_finish(&m->vocab)) return oom(l);

    if (is_bpe) {
        m->type = TK_MODEL_BPE;
        const char *prefix, *suffix;
        size_t pl, sl;
        if (!opt_str(l, v, "unk_token", false, &m->unk_token, &m->unk_len, "model") ||
            !opt_str(l, v, "continuing_subword_prefix", false, &prefix, &pl, "model") ||
            !opt_str(l, v, "end_of_word_suffix", false, &suffix, &sl, "model") ||
            !opt_bool(l, v, "fuse_unk", false, &m->fuse_unk, "model") ||
            !opt_bool(l, v, "byte_fallback", false, &m->byte_fallback, "model") ||
            !opt_bool(l, v, "ignore_merges", false, &m->ignore_merges, "model"))
            return false;
        json_t *dropout = json_object_get(v, "dropout");
        if (dropout && !json_is_null(dropout) && !json_is_number(dropout))
            return lfail(l, EM_ERR_FORMAT, "model", "\"dropout\" must be null or a number");
        m->prefix = prefix, m->prefix_len = pl;
        m->suffix = suffix, m->suffix_len = sl;
        if (m->unk_token) m->unk_id = tk_strmap_get(&m->vocab.map, m->unk_token, m->unk_len);
        if (ms && ms->end > ms->start) {
            if (!tk_json_parse_merges(doc, *ms, m, err, sizeof err))
                return lfail(l, EM_ERR_FORMAT, NULL, "%s", err);
        } else {
            json_t *mg = json_object_get(v, "merges");
            if (!mg) return lfail(l, EM_ERR_FORMAT, "model", "missing \"merges\"");
            if (!merges_from_json(l, mg, m)) return false;
        }
        return tk_bpe_init(m) ? true : oom(l);
    }
    if (is_wp) {
        m->type = TK_MODEL_WORDPIECE;
        if (!opt_str(l, v, "unk_token", false, &m->unk_token, &m->unk_len, "model") ||
            !opt_str(l, v, "continuing_subword_prefix", false, &m->prefix, &m->prefix_len,
                     "model") ||
            !opt_uint(l, v, "max_input_chars_per_word", 100, &m->max_input_chars_per_word,
                      "model"))
            return false;
        if (!m->unk_token) m->unk_token = "[UNK]", m->unk_len = 5;
        if (!m->prefix) m->prefix = "##", m->prefix_len = 2;
    } else {
        m->type = TK_MODEL_WORDLEVEL;
        if (!opt_str(l, v, "unk_token", false, &m->unk_token, &m->unk_len, "model")) return false;
        if (!m->unk_token) m->unk_token = "<unk>", m->unk_len = 5;
    }
    m->unk_id = tk_strmap_get(&m->vocab.map, m->unk_token, m->unk_len);
    return true;
}

/* ---- added tokens ---- */

static bool add_tokens(ld *l, json_t *arr) {
    em_tokenizer *t = l->t;
    tk_added *a = &t->added;
    if (!arr || json_is_null(arr)) return true;
    if (!json_is_array(arr))
        return lfail(l, EM_ERR_FORMAT, "added_tokens", "must be an array, not %s", json_kind(arr));
    size_t n = json_array_size(arr);
    if (!tk_strmap_init(&a->by_content, n) || !tk_u64map_init(&a->by_id, n) ||
        !tk_strmap_init(&a->special, n))
        return oom(l);
    /* ids come from the vocabulary, not from the file (AddedVocabulary::add_tokens) */
    int64_t next_id = (int64_t)t->model.vocab.size;
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(arr, i);
        char w[64];
        snprintf(w, sizeof w, "added_tokens[%zu]", i);
        if (!json_is_object(o)) return lfail(l, EM_ERR_FORMAT, w, "must be an object");
        tk_added_token tok = {0};
        if (!opt_str(l, o, "content", true, &tok.content, &tok.len, w) ||
            !opt_bool(l, o, "special", false, &tok.special, w) ||
            !opt_bool(l, o, "single_word", false, &tok.single_word, w) ||
            !opt_bool(l, o, "lstrip", false, &tok.lstrip, w) ||
            !opt_bool(l, o, "rstrip", false, &tok.rstrip, w) ||
            !opt_bool(l, o, "normalized", !tok.special, &tok.normalized, w))
            return false;
        json_t *id = json_object_get(o, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0)
            return lfail(l, EM_ERR_FORMAT, w, "\"id\" must be a non-negative integer");
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
            if (next_id > INT32_MAX) return lfail(l, EM_ERR_FORMAT, w, "too many tokens");
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
                    return oom(l);
                }
            }
            tk_buf_free(&out);
        }
        if (!tk_strmap_put(&a->by_content, tok.content, tok.len, new_id)) return oom(l);
        if (tok.special && !tk_strmap_put(&a->special, tok.content, tok.len, 1)) return oom(l);
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
            if (!nt) return oom(l);
            a->toks = nt;
            a->cap = cap;
        }
        a->toks[a->n] = tok;
        if (!tk_u64map_put(&a->by_id, (uint64_t)new_id, a->n)) return oom(l);
        a->n++;
    }
    /* the two matching sets, in id order so that among equal patterns the larger id wins */
    size_t *order = malloc((a->n ? a->n : 1) * sizeof *order);
    if (!order) return oom(l);
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
            return oom(l);
        }
        if (tok->normalized) a->has_normalized = true;
        else a->has_raw = true;
    }
    free(order);
    return true;
}

/* ---- tokenizer_config.json ---- */

static bool read_file(em_ctx *c, const char *path, bool optional, char **buf, size_t *len,
                      bool *found) {
    *buf = NULL;
    *len = 0;
    if (found) *found = false;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (optional && errno == ENOENT) return true;
        em_ctx_fail(c, errno == ENOENT ? EM_ERR_NOT_FOUND : EM_ERR_IO, "tokenizer_load",
                    "cannot open %s: %s", path, strerror(errno));
        return false;
    }
    struct stat st;
    if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode) || st.st_size > ((int64_t)1 << 31)) {
        em_ctx_fail(c, EM_ERR_IO, "tokenizer_load", "%s is not a regular file of at most 2 GiB",
                    path);
        fclose(f);
        return false;
    }
    size_t n = (size_t)st.st_size;
    char *b = malloc(n + 1);
    if (!b) {
        em_ctx_fail(c, EM_ERR_OOM, "tokenizer_load", "cannot allocate %zu bytes for %s", n, path);
        fclose(f);
        return false;
    }
    size_t got = fread(b, 1, n, f);
    fclose(f);
    if (got != n) {
        em_ctx_fail(c, EM_ERR_IO, "tokenizer_load", "read %zu of %zu bytes of %s", got, n, path);
        free(b);
        return false;
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    if (found) *found = true;
    return true;
}

static json_t *parse_json(ld *l, const char *doc, size_t len, size_t flags) {
    json_error_t je;
    json_t *root = json_loadb(doc, len, JSON_ALLOW_NUL | flags, &je);
    if (!root) {
        lfail(l, EM_ERR_FORMAT, NULL, "malformed JSON at line %d, column %d: %s", je.line,
              je.column, je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        lfail(l, EM_ERR_FORMAT, NULL, "the top level must be an object, not %s", json_kind(root));
        json_decref(root);
        return NULL;
    }
    return root;
}

static bool add_template(ld *l, const char *name, const char *src, size_t len) {
    em_tokenizer *t = l->t;
    for (size_t i = 0; i < t->n_templates; i++)
        if (!strcmp(t->tpl_names[i], name)) {
            t->tpl_sources[i] = tk_arena_strndup(&t->arena, src, len);
            return t->tpl_sources[i] ? true : oom(l);
        }
    const char **nn = realloc(t->tpl_names, (t->n_templates + 1) * sizeof *nn);
    if (!nn) return oom(l);
    t->tpl_names = nn;
    const char **ns = realloc(t->tpl_sources, (t->n_templates + 1) * sizeof *ns);
    if (!ns) return oom(l);
    t->tpl_sources = ns;
    t->tpl_names[t->n_templates] = tk_arena_strndup(&t->arena, name, strlen(name));
    t->tpl_sources[t->n_templates] = tk_arena_strndup(&t->arena, src, len);
    if (!t->tpl_names[t->n_templates] || !t->tpl_sources[t->n_templates]) return oom(l);
    t->n_templates++;
    return true;
}

static bool load_config(em_ctx *c, em_tokenizer *t, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    char *buf;
    size_t len;
    bool found;
    if (!read_file(c, path, true, &buf, &len, &found)) return false;
    ld l = {c, path, t};
    bool ok = true;
    if (found) {
        /* integers such as model_max_length = 1e30 are of no interest here */
        json_t *root = parse_json(&l, buf, len, JSON_DECODE_INT_AS_REAL);
        ok = root != NULL;
        static const char *const keys[EM_SPECIAL_COUNT] = {
            "bos_token", "eos_token", "pad_token", "unk_token",
            "sep_token", "cls_token", "mask_token"};
        for (int i = 0; ok && i < EM_SPECIAL_COUNT; i++) {
            json_t *v = json_object_get(root, keys[i]);
            if (json_is_object(v)) v = json_object_get(v, "content"); /* {"content": ...} form */
            if (!v || json_is_null(v)) continue;
            if (!json_is_string(v)) {
                ok = lfail(&l, EM_ERR_FORMAT, keys[i], "must be a string, an object with a "
                                                       "\"content\" string, or null");
                break;
            }
            t->special[i] = tk_arena_strndup(&t->arena, json_string_value(v), json_string_length(v));
            if (!t->special[i]) ok = oom(&l);
        }
        if (ok) ok = opt_bool(&l, root, "add_bos_token", false, &t->add_bos, NULL) &&
                     opt_bool(&l, root, "add_eos_token", false, &t->add_eos, NULL);
        json_t *tpl = ok ? json_object_get(root, "chat_template") : NULL;
        if (json_is_string(tpl)) {
            ok = add_template(&l, "default", json_string_value(tpl), json_string_length(tpl));
        } else if (json_is_array(tpl)) {
            for (size_t i = 0; ok && i < json_array_size(tpl); i++) {
                json_t *e = json_array_get(tpl, i);
                json_t *nm = json_object_get(e, "name"), *src = json_object_get(e, "template");
                if (!json_is_string(nm) || !json_is_string(src))
                    ok = lfail(&l, EM_ERR_FORMAT, "chat_template",
                               "a list of templates must hold {\"name\", \"template\"} strings");
                else
                    ok = add_template(&l, json_string_value(nm), json_string_value(src),
                                      json_string_length(src));
            }
        } else if (tpl && !json_is_null(tpl))
            ok = lfail(&l, EM_ERR_FORMAT, "chat_template", "must be a string or a list");
        json_decref(root);
        free(buf);
    }
    /* chat_template.jinja (transformers >= 4.43 saves the template there) overrides */
    if (ok) {
        snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
        if (!read_file(c, path, true, &buf, &len, &found)) return false;
        if (found) {
            ld lj = {c, path, t};
            ok = add_template(&lj, "default", buf, len);
            free(buf);
        }
    }
    return ok;
}

/* ---- the document ---- */

static em_tokenizer *load_doc(em_ctx *c, const char *doc, size_t len, const char *name,
                              const char *config_dir) {
    em_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        em_ctx_fail(c, EM_ERR_OOM, "tokenizer_load", "out of memory");
        return NULL;
    }
    for (int i = 0; i < EM_SPECIAL_COUNT; i++) t->special_id[i] = -1;
    t->name = strdup(name ? name : "tokenizer.json");
    t->pretok = calloc(TK_MAX_PRETOK, sizeof *t->pretok);
    ld l = {c, t->name ? t->name : "tokenizer.json", t};
    json_t *root = NULL;
    char *stripped = NULL;
    if (!t->name || !t->pretok) {
        oom(&l);
        goto fail;
    }
    size_t bad;
    if (!tk_utf8_valid(doc, len, &bad)) {
        int line, col;
        tk_json_line_col(doc, len, bad, &line, &col);
        lfail(&l, EM_ERR_FORMAT, NULL, "not valid UTF-8 at line %d, column %d (byte %zu)", line,
              col, bad);
        goto fail;
    }
    /* fast path: cut model.vocab and model.merges out for jansson */
    tk_json_span vs = {0, 0}, ms = {0, 0};
    bool fast = tk_json_find_model_arrays(doc, len, &vs, &ms);
    if (fast) {
        tk_json_span cut[2] = {vs, ms};
        int ncut = ms.end > ms.start ? 2 : 1;
        if (ncut == 2 && cut[1].start < cut[0].start) {
            tk_json_span x = cut[0];
            cut[0] = cut[1];
            cut[1] = x;
        }
        stripped = malloc(len + 16); /* "null" may be longer than a cut "{}" */
        if (!stripped) {
            oom(&l);
            goto fail;
        }
        size_t o = 0, from = 0;
        for (int i = 0; i < ncut; i++) {
            memcpy(stripped + o, doc + from, cut[i].start - from);
            o += cut[i].start - from;
            memcpy(stripped + o, "null", 4);
            o += 4;
            from = cut[i].end;
        }
        memcpy(stripped + o, doc + from, len - from);
        o += len - from;
        json_error_t je;
        root = json_loadb(stripped, o, JSON_ALLOW_NUL, &je);
        if (!root) {
            /* report the position in the original document */
            size_t pos = je.position > 0 ? (size_t)je.position : 0, shift = 0;
            for (int i = 0; i < ncut; i++) {
                size_t st = cut[i].start - shift; /* where the cut starts in `stripped` */
                if (pos > st + 4) pos += cut[i].end - cut[i].start - 4;
                else break;
                shift += cut[i].end - cut[i].start - 4;
            }
            int line, col;
            tk_json_line_col(doc, len, pos, &line, &col);
            lfail(&l, EM_ERR_FORMAT, NULL, "malformed JSON at line %d, column %d: %s", line, col,
                  je.text);
            goto fail;
        }
    } else {
        root = parse_json(&l, doc, len, 0);
        if (!root) goto fail;
    }
    if (!json_is_object(root)) {
        lfail(&l, EM_ERR_FORMAT, NULL, "the top level must be an object");
        goto fail;
    }
    json_t *ver = json_object_get(root, "version");
    if (ver && (!json_is_string(ver) || strcmp(json_string_value(ver), "1.0"))) {
        lfail(&l, EM_ERR_FORMAT, "version", "unknown tokenizer version (expected \"1.0\")");
        goto fail;
    }
    json_t *v = json_object_get(root, "normalizer");
    if (v && !json_is_null(v)) {
        t->normalizer = calloc(1, sizeof *t->normalizer);
        if (!t->normalizer) {
            oom(&l);
            goto fail;
        }
        if (!parse_norm(&l, v, "normalizer", t->normalizer)) goto fail;
    }
    v = json_object_get(root, "pre_tokenizer");
    if (v && !json_is_null(v) && !parse_pretok(&l, v, "pre_tokenizer", 0)) goto fail;
    if (!parse_model(&l, json_object_get(root, "model"), doc, fast ? &vs : NULL,
                     fast ? &ms : NULL))
        goto fail;
    v = json_object_get(root, "post_processor");
    if (v && !json_is_null(v)) {
        t->post = calloc(1, sizeof *t->post);
        if (!t->post) {
            oom(&l);
            goto fail;
        }
        if (!parse_post(&l, v, "post_processor", t->post, 0)) goto fail;
    }
    v = json_object_get(root, "decoder");
    if (v && !json_is_null(v)) {
        t->decoder = calloc(1, sizeof *t->decoder);
        if (!t->decoder) {
            oom(&l);
            goto fail;
        }
        if (!parse_decoder(&l, v, "decoder", t->decoder, 0)) goto fail;
    }
    if (!add_tokens(&l, json_object_get(root, "added_tokens"))) goto fail;
    json_decref(root);
    root = NULL;
    free(stripped);
    stripped = NULL;
    if (config_dir && !load_config(c, t, config_dir)) goto fail;
    for (int i = 0; i < EM_SPECIAL_COUNT; i++)
        if (t->special[i])
            t->special_id[i] = em_tokenizer_token_to_id(t, t->special[i], strlen(t->special[i]));
    if (!t->special[EM_SPECIAL_UNK] && t->model.unk_token) {
        t->special[EM_SPECIAL_UNK] = t->model.unk_token;
        t->special_id[EM_SPECIAL_UNK] = t->model.unk_id;
    }
    return t;
fail:
    json_decref(root);
    free(stripped);
    em_tokenizer_free(t);
    return NULL;
}

em_tokenizer *em_tokenizer_load_json(em_ctx *c, const char *json, size_t len, const char *name) {
    if (em_ctx_status(c) != EM_OK) return NULL;
    if (!json && len) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "tokenizer_load", "json is NULL");
        return NULL;
    }
    return load_doc(c, json ? json : "", len, name ? name : "tokenizer.json", NULL);
}

em_tokenizer *em_tokenizer_load(em_ctx *c, const char *path) {
    if (em_ctx_status(c) != EM_OK) return NULL;
    if (!path) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "tokenizer_load", "path is NULL");
        return NULL;
    }
    struct stat st;
    if (stat(path, &st)) {
        em_ctx_fail(c, errno == ENOENT ? EM_ERR_NOT_FOUND : EM_ERR_IO, "tokenizer_load",
                    "cannot find %s: %s (expected a tokenizer.json or a folder holding one)",
                    path, strerror(errno));
        return NULL;
    }
    char file[4096], dir[4096];
    const char *config_dir = NULL;
    if (S_ISDIR(st.st_mode)) {
        snprintf(file, sizeof file, "%s/tokenizer.json", path);
        snprintf(dir, sizeof dir, "%s", path);
        config_dir = dir;
    } else {
        snprintf(file, sizeof file, "%s", path);
        const char *slash = strrchr(path, '/');
        const char *base = slash ? slash + 1 : path;
        if (!strcmp(base, "tokenizer.json")) {
            if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
            else snprintf(dir, sizeof dir, ".");
            config_dir = dir;
        }
    }
    char *buf;
    size_t len;
    if (!read_file(c, file, false, &buf, &len, NULL)) return NULL;
    em_tokenizer *t = load_doc(c, buf, len, file, config_dir);
    free(buf);
    return t;
}

void em_tokenizer_free(em_tokenizer *t) {
    if (!t) return;
    tk_model_free(&t->model);
    if (t->normalizer) tk_norm_free(t->normalizer);
    free(t->normalizer);
    if (t->pretok)
        for (size_t i = 0; i < t->n_pretok; i++) tk_regex_free(&t->pretok[i].re);
    free(t->pretok);
    if (t->post) tk_post_free(t->post);
    free(t->post);
    if (t->decoder) tk_decoder_free(t->decoder);
    free(t->decoder);
    tk_added_free(&t->added);
    free(t->tpl_names);
    free(t->tpl_sources);
    tk_arena_free(&t->arena);
    free(t->name);
    free(t);
}

/*
 * Private declarations of the tokenizer (include/ember/tokenizer.h), shared by its files:
 *
 *   tokenizer.c             public API, the encode and decode pipelines
 *   tokenizer_load.c        reading tokenizer.json / tokenizer_config.json (the document)
 *   tokenizer_fields.c      checked reading of JSON fields, shared by the component loaders
 *   tokenizer_json.c        fast scanner for the big model arrays (vocab, merges)
 *   tokenizer_util.c        buffers, arena, hash maps, UTF-8 helpers
 *   tokenizer_unicode.c     character classes and case/normal forms as `tokenizers` sees them
 *   tokenizer_regex.c       PCRE2 wrapper with Oniguruma's match iteration
 *   tokenizer_added.c       added tokens: matching before and after normalization
 *   tokenizer_normalizers.c normalizers
 *   tokenizer_precompiled.c the Precompiled normalizer (SentencePiece charsmap)
 *   tokenizer_pretok.c      pre-tokenizers (split behaviours)
 *   tokenizer_bpe.c         the BPE model (+ its word cache)
 *   tokenizer_models.c      WordPiece, WordLevel and Unigram models
 *   tokenizer_post.c        post-processors
 *   tokenizer_decoders.c    decoders
 *
 * Each component file also holds the loader of its part of tokenizer.json (tk_parse_*).
 *
 * The pipeline follows `tokenizers` (huggingface/tokenizers, tokenizer/mod.rs) but tracks no
 * offsets: only the ids matter. The one place where `tokenizers` looks at offsets (Metaspace's
 * prepend_scheme "first", which asks whether a split starts at offset 0 of the input) is served
 * by an `at_origin` flag carried along with each split.
 */
#ifndef EMBER_IO_TOKENIZER_IMPL_H
#define EMBER_IO_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdint.h>

#include "ember/tokenizer.h"

/* ---------------------------------------------------------------------------------------------
 * Utilities (tokenizer_util.c)
 * ------------------------------------------------------------------------------------------- */

/* A growable byte buffer. */
typedef struct tk_buf {
    char *p;
    size_t len, cap;
} tk_buf;

bool tk_buf_reserve(tk_buf *b, size_t extra);
bool tk_buf_append(tk_buf *b, const void *s, size_t n);
bool tk_buf_putc(tk_buf *b, char ch);
bool tk_buf_put_cp(tk_buf *b, uint32_t cp); /* appends a code point as UTF-8 */
void tk_buf_free(tk_buf *b);

/* A growable array of int32 (ids). */
typedef struct tk_ids {
    int32_t *v;
    size_t n, cap;
} tk_ids;
bool tk_ids_push(tk_ids *a, int32_t x);
bool tk_ids_append(tk_ids *a, const int32_t *x, size_t n);

/* Bump allocator for strings that live as long as the tokenizer. */
typedef struct tk_arena {
    struct tk_arena_block *head;
    size_t total;
} tk_arena;
void *tk_arena_alloc(tk_arena *a, size_t n);
/* NUL-terminated copy of n bytes (NULL if out of memory). */
char *tk_arena_strndup(tk_arena *a, const char *s, size_t n);
void tk_arena_free(tk_arena *a);

uint64_t tk_hash(const void *s, size_t n);

/* Open-addressing map from byte strings to int32 values. Keys are not copied: they must stay
 * valid (arena strings) as long as the map. Putting an existing key replaces its value. */
typedef struct tk_strmap {
    uint64_t *slots; /* hash tag << 32 | (entry index + 1); 0 = empty */
    uint32_t mask;
    struct tk_strmap_ent {
        const char *s;
        uint64_t head; /* the first 8 bytes of the key, zero padded */
        uint32_t len;
        int32_t val;
    } *ents;
    uint32_t n, ents_cap;
} tk_strmap;
bool tk_strmap_init(tk_strmap *m, size_t expected);
bool tk_strmap_put(tk_strmap *m, const char *s, size_t len, int32_t val);
bool tk_strmap_put_h(tk_strmap *m, const char *s, size_t len, int32_t val, uint64_t h);
/* Returns the value or -1 when absent. */
int32_t tk_strmap_get(const tk_strmap *m, const char *s, size_t len);
int32_t tk_strmap_get_h(const tk_strmap *m, const char *s, size_t len, uint64_t h);
/* Starts loading the slot a key with hash h probes first (to overlap cache misses). */
static inline void tk_strmap_prefetch(const tk_strmap *m, uint64_t h) {
    if (m->slots) __builtin_prefetch(&m->slots[(uint32_t)h & m->mask]);
}
void tk_strmap_free(tk_strmap *m);

/* Open-addressing map from 64-bit keys to 64-bit values (BPE merges: pair -> rank, new id). */
typedef struct tk_u64map {
    struct tk_u64ent {
        uint64_t key; /* key + 1; 0 = empty */
        uint64_t val;
    } *e;
    uint32_t mask, n;
} tk_u64map;
bool tk_u64map_init(tk_u64map *m, size_t expected);
bool tk_u64map_put(tk_u64map *m, uint64_t key, uint64_t val);
bool tk_u64map_get(const tk_u64map *m, uint64_t key, uint64_t *val);
void tk_u64map_prefetch(const tk_u64map *m, uint64_t key);
void tk_u64map_free(tk_u64map *m);

/* UTF-8. tk_utf8_valid returns the length when the whole text is valid, else the offset of the
 * first bad byte via *bad. tk_utf8_next decodes one code point of valid UTF-8 at s. */
bool tk_utf8_valid(const char *s, size_t n, size_t *bad);
static inline uint32_t tk_utf8_next(const char *s, size_t *len) {
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] < 0x80) {
        *len = 1;
        return u[0];
    }
    if (u[0] < 0xE0) {
        *len = 2;
        return ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
    }
    if (u[0] < 0xF0) {
        *len = 3;
        return ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    }
    *len = 4;
    return ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
           ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
}
static inline size_t tk_utf8_len(unsigned char lead) {
    return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}
size_t tk_utf8_encode(uint32_t cp, char out[4]);
/* Appends bytes to out, replacing invalid UTF-8 the way Rust's String::from_utf8_lossy does
 * (one U+FFFD per maximal invalid subpart). */
bool tk_utf8_lossy_append(tk_buf *out, const char *s, size_t n);

/* A list of strings stored back to back in one buffer (used by the decoders). */
typedef struct tk_strlist {
    tk_buf data;
    size_t *off, *len;
    size_t n, cap;
} tk_strlist;
bool tk_strlist_push(tk_strlist *l, const char *s, size_t n);
/* Starts a new string and returns false on OOM; append to l->data, then close it. */
bool tk_strlist_begin(tk_strlist *l);
void tk_strlist_end(tk_strlist *l);
void tk_strlist_clear(tk_strlist *l);
void tk_strlist_free(tk_strlist *l);
static inline const char *tk_strlist_at(const tk_strlist *l, size_t i) {
    return l->data.p ? l->data.p + l->off[i] : "";
}

/* ---------------------------------------------------------------------------------------------
 * Unicode (tokenizer_unicode.c): each predicate matches the Rust function `tokenizers` calls.
 * ------------------------------------------------------------------------------------------- */
bool tk_is_whitespace(uint32_t c);    /* char::is_whitespace (White_Space) */
bool tk_is_numeric(uint32_t c);       /* char::is_numeric (N*) */
bool tk_is_bert_punct(uint32_t c);    /* ASCII punctuation or P* (unicode_categories) */
bool tk_is_other(uint32_t c);         /* unicode_categories is_other (Cc Cf Co Cs) */
bool tk_is_mark_nonspacing(uint32_t c); /* Mn */
bool tk_is_combining_mark(uint32_t c);  /* M* */
bool tk_is_word_char(uint32_t c);     /* regex crate \w */
bool tk_is_chinese_char(uint32_t c);  /* BertNormalizer's CJK blocks */
/* char::to_lowercase: writes up to 3 code points, returns how many. */
int tk_to_lower(uint32_t c, uint32_t out[3]);
typedef enum tk_nf { TK_NFC, TK_NFD, TK_NFKC, TK_NFKD } tk_nf;
/* Appends the normal form of s to out. False on OOM or internal error. */
bool tk_normalize_form(tk_nf form, const char *s, size_t n, tk_buf *out);

/* ---------------------------------------------------------------------------------------------
 * Regex (tokenizer_regex.c)
 * ------------------------------------------------------------------------------------------- */
typedef struct tk_regex {
    pcre2_code *code;
    bool jit;
} tk_regex;

/* Per-call matching state (match data, JIT stack), created lazily. */
typedef struct tk_rx_state {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
} tk_rx_state;

/* A piece of a string: [start, end) and whether it is a pattern match. */
typedef struct tk_span {
    size_t start, end;
    bool match;
} tk_span;

typedef struct tk_spans {
    tk_span *v;
    size_t n, cap;
} tk_spans;
bool tk_spans_push(tk_spans *s, size_t start, size_t end, bool match);

/* Compiles `pattern` (literal when `literal`). Returns false with a message in err. */
bool tk_regex_compile(tk_regex *re, const char *pattern, size_t len, bool literal, char *err,
                      size_t errsz);
void tk_regex_free(tk_regex *re);
/* `tokenizers`' Pattern::find_matches for a regex: the whole string as contiguous spans, each
 * flagged match / not match, with Oniguruma's handling of empty matches. An empty string gives
 * one empty non-match span. Returns false (with message) on a matching failure or OOM. */
bool tk_regex_find_matches(tk_rx_state *st, const tk_regex *re, const char *s, size_t n,
                           tk_spans *out, char *err, size_t errsz);
/* The same spans, handed one at a time to fn (which returns false to stop: *stopped is then
 * set and the call still returns true). Returns false (with message) on a matching failure. */
typedef bool (*tk_span_fn)(void *ctx, size_t start, size_t end, bool match);
bool tk_regex_each(tk_rx_state *st, const tk_regex *re, const char *s, size_t n, tk_span_fn fn,
                   void *ctx, bool *stopped, char *err, size_t errsz);
void tk_rx_state_free(tk_rx_state *st);

/* ---------------------------------------------------------------------------------------------
 * Components
 * ------------------------------------------------------------------------------------------- */

typedef enum tk_split_behavior {
    TK_SPLIT_REMOVED,
    TK_SPLIT_ISOLATED,
    TK_SPLIT_MERGED_WITH_PREVIOUS,
    TK_SPLIT_MERGED_WITH_NEXT,
    TK_SPLIT_CONTIGUOUS
} tk_split_behavior;

typedef enum tk_norm_type {
    TK_NORM_SEQUENCE,
    TK_NORM_NFC,
    TK_NORM_NFD,
    TK_NORM_NFKC,
    TK_NORM_NFKD,
    TK_NORM_LOWERCASE,
    TK_NORM_STRIP_ACCENTS,
    TK_NORM_STRIP,
    TK_NORM_REPLACE,
    TK_NORM_PREPEND,
    TK_NORM_BERT,
    TK_NORM_NMT,
    TK_NORM_BYTE_LEVEL,
    TK_NORM_PRECOMPILED
} tk_norm_type;

/* A parsed SentencePiece charsmap (tokenizer_precompiled.c). */
typedef struct tk_precompiled tk_precompiled;

typedef struct tk_norm {
    tk_norm_type type;
    struct tk_norm *children; /* Sequence */
    size_t n_children;
    bool strip_left, strip_right;          /* Strip */
    bool clean_text, handle_chinese_chars; /* BertNormalizer */
    bool strip_accents, lowercase;
    tk_regex re;                           /* Replace */
    const char *content;                   /* Replace / Prepend */
    size_t content_len;
    tk_precompiled *pc;                    /* Precompiled (owned) */
} tk_norm;

typedef enum tk_pretok_type {
    TK_PT_SPLIT,         /* regex or string pattern */
    TK_PT_BYTE_LEVEL,
    TK_PT_METASPACE,
    TK_PT_WHITESPACE,    /* \w+|[^\w\s]+ */
    TK_PT_WS_SPLIT,      /* WhitespaceSplit, BertPreTokenizer's first half */
    TK_PT_PUNCT,         /* Punctuation, BertPreTokenizer's second half */
    TK_PT_DIGITS,
    TK_PT_CHAR_DELIMITER,
    TK_PT_FIXED_LENGTH
} tk_pretok_type;

typedef enum tk_prepend_scheme { TK_PREPEND_ALWAYS, TK_PREPEND_FIRST, TK_PREPEND_NEVER } tk_prepend_scheme;

/* Pre-tokenizers are flattened (Sequence of Sequence, BertPreTokenizer) into one list. */
typedef struct tk_pretok {
    tk_pretok_type type;
    tk_split_behavior behavior;
    bool invert;               /* Split */
    tk_regex re;               /* Split */
    bool add_prefix_space;     /* ByteLevel */
    bool use_regex;            /* ByteLevel */
    uint32_t ch;               /* Metaspace replacement, CharDelimiterSplit delimiter */
    tk_prepend_scheme prepend; /* Metaspace */
    bool split;                /* Metaspace */
    bool individual_digits;    /* Digits */
    size_t length;             /* FixedLength */
} tk_pretok;

typedef enum tk_model_type {
    TK_MODEL_BPE,
    TK_MODEL_WORDPIECE,
    TK_MODEL_WORDLEVEL,
    TK_MODEL_UNIGRAM
} tk_model_type;

/* A vocabulary: token string <-> id. */
typedef struct tk_vocab {
    tk_strmap map;      /* token -> id (last duplicate wins, like serde's HashMap) */
    size_t size;        /* the model's get_vocab_size() */
    /* id -> token: dense when ids are compact, else sorted pairs */
    const char **rev_s;
    uint32_t *rev_len;
    size_t rev_n;       /* dense table length (max id + 1) */
    int32_t *sparse_ids; /* sorted ids when not dense (rev_s/rev_len parallel) */
} tk_vocab;

const char *tk_vocab_token(const tk_vocab *v, int32_t id, size_t *len);
/* Builds the id -> token direction from the map. */
bool tk_vocab_finish(tk_vocab *v);
void tk_vocab_free(tk_vocab *v);

/* The BPE word cache (tokenizer_bpe.c). */
typedef struct tk_bpe_cache {
    pthread_mutex_t lock;
    tk_strmap map; /* word -> index into spans */
    tk_arena keys;
    tk_ids ids;
    struct {
        uint32_t off, n;
    } *spans;
    size_t n, cap;
} tk_bpe_cache;

typedef struct tk_model {
    tk_model_type type;
    tk_vocab vocab;
    const char *unk_token; /* NULL if none */
    size_t unk_len;
    int32_t unk_id;        /* -1 if none */
    /* BPE */
    tk_u64map merges;      /* (left id << 32 | right id) -> (rank << 32 | new id) */
    const char *prefix, *suffix; /* continuing_subword_prefix / end_of_word_suffix (BPE: NULL
                                    when absent; WordPiece: prefix always set) */
    size_t prefix_len, suffix_len;
    bool fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_ids[256]; /* ids of "<0xXX>" tokens, -1 when absent */
    int32_t *char_ids;     /* ids of the one-character tokens below U+0800 (one or two UTF-8
                              bytes: all of GPT-2's byte characters), -1 when absent */
    tk_bpe_cache *cache;
    /* WordPiece */
    size_t max_input_chars_per_word;
    /* Unigram */
    double *scores;        /* per id */
    double min_score;
    size_t max_token_len;
    tk_u64map trie;        /* (node << 8 | byte) -> child node; node 0 = root */
    int32_t *trie_val;     /* node -> token id or -1 */
    size_t trie_nodes;
} tk_model;

typedef enum tk_post_type {
    TK_POST_TEMPLATE,
    TK_POST_BERT,
    TK_POST_ROBERTA,
    TK_POST_BYTE_LEVEL,
    TK_POST_SEQUENCE
} tk_post_type;

/* One piece of a template: a sequence (A = 0, B = 1) or the ids of a special token. */
typedef struct tk_tpl_piece {
    bool is_sequence;
    int seq;
    int32_t *ids;
    size_t n_ids;
} tk_tpl_piece;

typedef struct tk_post {
    tk_post_type type;
    tk_tpl_piece *single, *pair;
    size_t n_single, n_pair;
    int32_t cls_id, sep_id;
    struct tk_post *children;
    size_t n_children;
} tk_post;

typedef enum tk_dec_type {
    TK_DEC_BYTE_LEVEL,
    TK_DEC_METASPACE,
    TK_DEC_WORDPIECE,
    TK_DEC_BYTE_FALLBACK,
    TK_DEC_FUSE,
    TK_DEC_STRIP,
    TK_DEC_REPLACE,
    TK_DEC_BPE,
    TK_DEC_CTC,
    TK_DEC_SEQUENCE
} tk_dec_type;

typedef struct tk_decoder {
    tk_dec_type type;
    uint32_t ch;            /* Metaspace replacement, Strip content */
    tk_prepend_scheme prepend;
    const char *str;        /* WordPiece prefix, Replace content, BPE suffix, CTC pad token */
    size_t str_len;
    const char *str2;       /* CTC word delimiter */
    size_t str2_len;
    bool cleanup;
    size_t start, stop;     /* Strip */
    tk_regex re;            /* Replace */
    struct tk_decoder *children;
    size_t n_children;
} tk_decoder;

/* Added tokens (tokenizer/added_vocabulary.rs). */
typedef struct tk_added_token {
    const char *content;
    size_t len;
    const char *norm; /* normalized form when it differs from content, else NULL */
    size_t norm_len;
    int32_t id;
    bool special, single_word, lstrip, rstrip, normalized;
} tk_added_token;

/* A byte trie over the patterns of one matching set (leftmost-longest matching). */
typedef struct tk_trie {
    tk_u64map edges;  /* (node << 8 | byte) -> child */
    int32_t *val;     /* node -> index into tk_added.toks, or -1 */
    size_t n_nodes, cap_nodes;
    uint8_t first[32]; /* bitmap of the first bytes of the patterns */
} tk_trie;

typedef struct tk_added {
    tk_added_token *toks; /* one per id, in the order they were first added */
    size_t n, cap;
    tk_strmap by_content;  /* content -> id */
    tk_u64map by_id;       /* id -> index into toks */
    tk_strmap special;     /* contents of special tokens -> 1 */
    tk_trie raw, normalized;
    bool has_raw, has_normalized;
} tk_added;

struct em_tokenizer {
    char *name; /* file name used in messages */
    tk_arena arena;
    tk_model model;
    tk_norm *normalizer;    /* NULL when none */
    tk_pretok *pretok;      /* flattened list */
    size_t n_pretok;
    tk_post *post;          /* NULL when none */
    tk_decoder *decoder;    /* NULL when none */
    tk_added added;
    /* tokenizer_config.json */
    const char *special[EM_SPECIAL_COUNT];
    int32_t special_id[EM_SPECIAL_COUNT];
    bool add_bos, add_eos;
    const char **tpl_names, **tpl_sources;
    size_t n_templates;
};

/* ---------------------------------------------------------------------------------------------
 * Encode state: everything one encode call needs, so that a tokenizer stays read-only.
 * ------------------------------------------------------------------------------------------- */

#define TK_MAX_PRETOK 32 /* flattened pre-tokenizer steps */

typedef struct tk_enc {
    em_ctx *c;
    const em_tokenizer *t;
    tk_ids out;
    tk_rx_state rx;
    tk_buf norm[2];                  /* normalizer ping-pong */
    tk_buf level[TK_MAX_PRETOK][2];  /* per pre-tokenizer step */
    tk_spans added_spans[2];           /* raw text, normalized piece */
    tk_ids added_ids[2];
    /* model scratch */
    tk_buf word;
    struct tk_sym *syms;
    size_t syms_cap;
    struct tk_merge_ent *heap;
    size_t heap_cap;
    double *best_score;
    size_t *best_start;
    int32_t *best_id;
    size_t best_cap;
    tk_ids tmp;
} tk_enc;

/* Frees an encode state's scratch buffers (not its output). */
void tk_enc_free(tk_enc *e);
/* Records an error in the encode's context; returns false. */
bool tk_enc_fail(tk_enc *e, em_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Stage entry points. Each returns false after recording an error. */
bool tk_normalize(tk_enc *e, const tk_norm *n, const char *s, size_t len, tk_buf *out,
                  bool *lead_removed);
bool tk_pretok_run(tk_enc *e, size_t step, const char *s, size_t len, bool at_origin);
bool tk_model_tokenize(tk_enc *e, const char *s, size_t len);
bool tk_bpe_tokenize(tk_enc *e, const char *s, size_t len);
bool tk_post_process(tk_enc *e, const tk_post *p, tk_ids *ids, bool add_special);
bool tk_decode_tokens(em_ctx *c, const em_tokenizer *t, const tk_decoder *d, tk_strlist *toks,
                      tk_buf *out);

/* Added tokens: split `s` into spans, each either text (match = false) or one added token whose
 * id is stored in ids[i] (match = true). */
bool tk_added_find(tk_enc *e, const tk_trie *trie, const char *s, size_t n, tk_spans *out,
                   tk_ids *ids);
void tk_added_free(tk_added *a);
bool tk_trie_add(tk_trie *t, const char *s, size_t n, int32_t val, int32_t *dup);
void tk_trie_free(tk_trie *t);

/* GPT-2's byte-level map (tokenizer_pretok.c): appends each byte of s as its character. */
bool tk_byte_level_map(const char *s, size_t n, tk_buf *out);
uint32_t tk_byte_level_char(uint8_t b);

/* Builders used by tokenizer_load.c. Merges are added in batches: tk_bpe_merge_add queues a
 * copy of one, tk_bpe_merge_flush resolves the queue (and reports the first bad merge, naming
 * its index). Batching lets the hash-table probes of many merges overlap. */
typedef struct tk_merge_batch {
    struct tk_merge_item {
        size_t aoff, boff, noff; /* a, b and the merged token (a + b minus the prefix) in buf */
        uint32_t alen, blen, nlen, rank;
        size_t index;
        uint64_t ha, hb, hn;
        int32_t ia, ib, inew;
    } item[64];
    int n;
    tk_buf buf;
} tk_merge_batch;
bool tk_bpe_merge_add(tk_model *m, tk_merge_batch *b, const char *a, size_t alen, const char *bb,
                      size_t blen, uint32_t rank, size_t index, char *err, size_t errsz);
bool tk_bpe_merge_flush(tk_model *m, tk_merge_batch *b, char *err, size_t errsz);
bool tk_bpe_init(tk_model *m);
void tk_bpe_cache_free(tk_bpe_cache *c);
bool tk_unigram_build(tk_model *m);
void tk_model_free(tk_model *m);
void tk_norm_free(tk_norm *n);
/* The Precompiled normalizer (tokenizer_precompiled.c): parse refuses a malformed charsmap;
 * normalize appends to out and records an error on failure. */
void tk_precompiled_free(tk_precompiled *pc);
bool tk_precompiled_normalize(tk_enc *e, const tk_precompiled *pc, const char *s, size_t n,
                              tk_buf *out, bool *lead_removed);
void tk_post_free(tk_post *p);
void tk_decoder_free(tk_decoder *d);

/* ---------------------------------------------------------------------------------------------
 * Loading (tokenizer_fields.c and the tk_parse_* of each component)
 * ------------------------------------------------------------------------------------------- */

typedef struct tk_json_span {
    size_t start, end; /* byte range of a value in the document */
} tk_json_span;

/* What a loader needs: the context for errors, the file name for messages, the tokenizer being
 * built (its arena owns the strings). */
typedef struct tk_ld {
    em_ctx *c;
    const char *file;
    em_tokenizer *t;
} tk_ld;

/* Records "<file>: <where>: <message>" (where may be NULL); returns false. */
bool tk_ld_fail(tk_ld *l, em_status s, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
bool tk_ld_oom(tk_ld *l);
const char *tk_json_kind(const json_t *v); /* "an object", "a string", ... */
/* Optional fields (absent or null: the default). Strings are copied into the arena. */
bool tk_opt_bool(tk_ld *l, json_t *o, const char *key, bool dflt, bool *out, const char *where);
bool tk_opt_str(tk_ld *l, json_t *o, const char *key, bool required, const char **out,
                size_t *len, const char *where);
bool tk_opt_uint(tk_ld *l, json_t *o, const char *key, size_t dflt, size_t *out,
                 const char *where);
bool tk_opt_char(tk_ld *l, json_t *o, const char *key, uint32_t dflt, uint32_t *out,
                 const char *where); /* a string of exactly one character */
bool tk_get_type(tk_ld *l, json_t *v, const char *where, const char **type);
bool tk_get_pattern(tk_ld *l, json_t *o, const char *where, tk_regex *re);
bool tk_get_behavior(tk_ld *l, json_t *o, const char *where, bool required,
                     tk_split_behavior *b);
bool tk_get_prepend_scheme(tk_ld *l, json_t *o, const char *where, tk_prepend_scheme *out);
bool tk_get_array(tk_ld *l, json_t *o, const char *key, const char *where, json_t **out);

/* The component loaders. `where` is the JSON path used in messages. */
bool tk_parse_normalizer(tk_ld *l, json_t *v, const char *where, tk_norm *n);
bool tk_precompiled_parse(tk_ld *l, json_t *v, const char *where, tk_precompiled **out);
bool tk_parse_pretok(tk_ld *l, json_t *v, const char *where, int depth); /* appends to t->pretok */
bool tk_parse_post(tk_ld *l, json_t *v, const char *where, tk_post *p, int depth);
bool tk_parse_decoder(tk_ld *l, json_t *v, const char *where, tk_decoder *d, int depth);
/* model; vs / ms: the spans of model.vocab / model.merges found by the fast scanner (NULL to
 * read them with jansson) */
bool tk_parse_model(tk_ld *l, json_t *v, const char *doc, const tk_json_span *vs,
                    const tk_json_span *ms);
bool tk_parse_added_tokens(tk_ld *l, json_t *arr);

/* Construction from data (GGUF metadata, io/gguf/gguf_tokenizer.c) with the same parts. */
/* A new, empty tokenizer named `name` (special ids -1); NULL with an error when out of memory. */
em_tokenizer *tk_new(em_ctx *c, const char *name);
/* Resolves special_id[] from special[] (and the model's unk token) once everything is loaded. */
void tk_resolve_specials(em_tokenizer *t);
/* Adds (or replaces) a named chat template. */
bool tk_add_template(tk_ld *l, const char *name, const char *src, size_t len);
/* The BPE options of a model object (unk_token, prefix/suffix, fuse_unk, byte_fallback,
 * ignore_merges, dropout) into m, whose vocabulary is already in place; sets the BPE type. */
bool tk_bpe_options(tk_ld *l, json_t *v, tk_model *m);
/* Merges in rank order from a list: get gives entry i as (a, b), a NULL when the entry is not a
 * merge; it returns false after recording an error. */
typedef bool (*tk_merge_get_fn)(tk_ld *l, void *user, size_t i, const char **a, size_t *la,
                                const char **b, size_t *lb);
bool tk_bpe_merges_from(tk_ld *l, tk_model *m, size_t n, tk_merge_get_fn get, void *user);

/* Fast JSON scanner (tokenizer_json.c). */
/* Finds model.vocab and model.merges at the top level of a tokenizer.json. Returns false when
 * the document does not have the expected shape (the caller then uses the full parser). */
bool tk_json_find_model_arrays(const char *doc, size_t len, tk_json_span *vocab,
                               tk_json_span *merges);
/* Parses a JSON object {"token": id, ...} into v (strings copied into the arena). Returns false
 * with a message (naming the byte offset) on any deviation. */
bool tk_json_parse_vocab(const char *doc, tk_json_span sp, tk_arena *a, tk_vocab *v, char *err,
                         size_t errsz);
/* Parses merges ["a b", ...] or [["a","b"], ...], calling tk_bpe_build_merge for each. */
bool tk_json_parse_merges(const char *doc, tk_json_span sp, tk_model *m, char *err,
                          size_t errsz);
/* Parses a Unigram vocabulary [["token", score], ...]. */
bool tk_json_parse_unigram_vocab(const char *doc, tk_json_span sp, tk_arena *a, tk_model *m,
                                 char *err, size_t errsz);
/* Line and column (1-based) of a byte offset, for messages. */
void tk_json_line_col(const char *doc, size_t len, size_t off, int *line, int *col);

#endif

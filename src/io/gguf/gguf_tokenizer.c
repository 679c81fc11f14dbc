/*
 * The tokenizer of a GGUF file, built from its metadata (tokenizer.ggml.*) into Ember's
 * tokenizer exactly as transformers builds one from the same file (transformers 5.24,
 * integrations/gguf/gguf_tokenizer_mapping.py), so that the ids match transformers':
 *
 *   gpt2   byte-level BPE (GPT2Tokenizer): tokens outside GPT-2's byte alphabet respelled byte
 *          by byte, the file's merges; pre-tokenizer: the Split regex tokenizer.ggml.pre names
 *          (llama-bpe, qwen2, tekken, gpt-4o families) followed by ByteLevel without regex, or
 *          ByteLevel with GPT-2's regex for other names (gpt-2, smollm, ...); ByteLevel decoder.
 *   llama  sentencepiece BPE (LlamaTokenizer): Metaspace("▁", prepend "first"), byte fallback,
 *          fused unknowns, the file's merges or, when it has none, merges rebuilt from the
 *          scores (generate_merges); decoder Replace ▁ / ByteFallback / Fuse / Strip. For
 *          gemma, gemma2 and gemma3 files GemmaTokenizer's pipeline instead: blank tokens
 *          respelled as "▁"s, merges rebuilt in file order, normalizer Replace " " → "▁".
 *
 * Added tokens: the control tokens (token type 3) as special, the user-defined ones (type 4)
 * as plain added tokens. Post-processor: bos before and eos after when add_bos_token /
 * add_eos_token say so (add_bos_token defaults to true for llama vocabularies). The vocabulary
 * and merges go straight into the BPE tables; the small components are described as
 * tokenizer.json objects and read by the same loaders as a tokenizer.json.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf/gguf_impl.h"
#include "io/tokenizer/tokenizer_impl.h"

#define OP "tokenizer_load"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_BYTE = 6 };

/* The pre-tokenizer regexes of transformers' GGUF_PRE_TOKENIZER_SPLITS. */
#define LLAMA3_SPLIT                                                                              \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"                     \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define TEKKEN_SPLIT                                                                              \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"   \
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"  \
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define GPT4O_SPLIT                                                                               \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"   \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"                                                               \
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"  \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"                                                               \
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2_SPLIT                                                                               \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"                          \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN35_SPLIT                                                                              \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"                  \
    "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const struct {
    const char *pre, *regex;
} splits[] = {
    {"llama3", LLAMA3_SPLIT},    {"llama-v3", LLAMA3_SPLIT},      {"llama-bpe", LLAMA3_SPLIT},
    {"falcon3", LLAMA3_SPLIT},   {"falcon-h1", LLAMA3_SPLIT},     {"pixtral", LLAMA3_SPLIT},
    {"midm-2.0", LLAMA3_SPLIT},  {"lfm2", LLAMA3_SPLIT},          {"jina-v5-nano", LLAMA3_SPLIT},
    {"dbrx", LLAMA3_SPLIT},      {"smaug-bpe", LLAMA3_SPLIT},     {"tekken", TEKKEN_SPLIT},
    {"qwen2", QWEN2_SPLIT},      {"deepseek-r1-qwen", QWEN2_SPLIT}, {"kormo", QWEN2_SPLIT},
    {"f2llmv2", QWEN2_SPLIT},    {"megrez", QWEN2_SPLIT},         {"qwen35", QWEN35_SPLIT},
    {"gpt-4o", GPT4O_SPLIT},     {"llama4", GPT4O_SPLIT},         {"kanana2", GPT4O_SPLIT},
    {"talkie", GPT4O_SPLIT},     {"minimax-m2", GPT4O_SPLIT},
};

typedef struct gb {
    tk_ld l;
    const em_gguf *g;
    bool byte_level, gemma;
    uint64_t n;            /* tokens */
    const char **tok;      /* the vocabulary's spelling of each token (arena) */
    size_t *len;
    const em_gguf_value *types, *scores, *merges;
} gb;

/* ---- the vocabulary ---- */

/* Whether code point cp is one of the 256 characters of GPT-2's byte alphabet
 * (bytes_to_unicode: printable Latin-1 as itself, the other 68 bytes as U+0100 onwards). */
static bool byte_alphabet(uint32_t cp) {
    return (cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255) ||
           (cp >= 256 && cp < 256 + 68);
}

static bool in_alphabet(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t k;
        if (!byte_alphabet(tk_utf8_next(s + i, &k))) return false;
        i += k;
    }
    return true;
}

static bool all_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ') return false;
    return n > 0;
}

static bool spell_tokens(gb *b, const em_gguf_value *tokens) {
    em_tokenizer *t = b->l.t;
    b->tok = tk_arena_alloc(&t->arena, (size_t)b->n * sizeof *b->tok);
    b->len = tk_arena_alloc(&t->arena, (size_t)b->n * sizeof *b->len);
    if (!b->tok || !b->len) return tk_ld_oom(&b->l);
    for (uint64_t i = 0; i < b->n; i++) {
        size_t n;
        const char *s = em_gguf_array_str(tokens, i, &n);
        size_t bad;
        if (!tk_utf8_valid(s, n, &bad))
            return tk_ld_fail(&b->l, EM_ERR_FORMAT, "tokenizer.ggml.tokens",
                              "token %llu is not valid UTF-8 (byte %zu)", (unsigned long long)i,
                              bad);
        tk_buf out = {0};
        bool ok = true;
        if (b->byte_level && !in_alphabet(s, n))
            ok = tk_byte_level_map(s, n, &out); /* GPT-2's spelling of the UTF-8 bytes */
        else if (b->gemma && all_blank(s, n))
            for (size_t k = 0; k < n && ok; k++) ok = tk_buf_append(&out, "\xe2\x96\x81", 3);
        else
            ok = tk_buf_append(&out, s, n);
        b->tok[i] = ok ? tk_arena_strndup(&t->arena, out.p ? out.p : "", out.len) : NULL;
        b->len[i] = out.len;
        tk_buf_free(&out);
        if (!b->tok[i]) return tk_ld_oom(&b->l);
    }
    tk_vocab *v = &t->model.vocab;
    if (!tk_strmap_init(&v->map, (size_t)b->n)) return tk_ld_oom(&b->l);
    for (uint64_t i = 0; i < b->n; i++) /* a repeated spelling keeps its last id, as a dict */
        if (!tk_strmap_put(&v->map, b->tok[i], b->len[i], (int32_t)i)) return tk_ld_oom(&b->l);
    v->size = v->map.n;
    return tk_vocab_finish(v) ? true : tk_ld_oom(&b->l);
}

static int token_type(const gb *b, uint64_t i) {
    int64_t t;
    return b->types && em_gguf_array_int(b->types, i, &t) ? (int)t : TT_NORMAL;
}

/* ---- merges ---- */

static bool file_merge(tk_ld *l, void *user, size_t i, const char **a, size_t *la,
                       const char **bb, size_t *lb) {
    gb *b = user;
    size_t n;
    const char *s = em_gguf_array_str(b->merges, i, &n);
    const char *sp = memchr(s, ' ', n);
    if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp - s) - 1))
        return tk_ld_fail(l, EM_ERR_FORMAT, "tokenizer.ggml.merges",
                          "merge %zu \"%.60s\" must hold exactly one space", i, s);
    *a = s, *la = (size_t)(sp - s), *bb = sp + 1, *lb = n - *la - 1;
    return true;
}

/* transformers' generate_merges: every split of a token into two vocabulary tokens, taken in
 * the order of the tokens' scores (best first; ties: the longer left piece, then the longer
 * right piece, then the file order), pieces of one token ordered by their ids. */
typedef struct cand {
    double score;
    uint32_t la_chars, lb_chars;
    uint64_t seq;   /* position in the unsorted list: the sort is stable */
    uint32_t tok;   /* the token split */
    uint32_t cut;   /* byte offset of the split */
    int32_t ida, idb;
} cand;

static int cmp_local(const void *x, const void *y) {
    const cand *a = x, *b = y;
    if (a->ida != b->ida) return a->ida < b->ida ? -1 : 1;
    if (a->idb != b->idb) return a->idb < b->idb ? -1 : 1;
    return (a->seq > b->seq) - (a->seq < b->seq);
}

static int cmp_global(const void *x, const void *y) {
    const cand *a = x, *b = y;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    if (a->la_chars != b->la_chars) return a->la_chars > b->la_chars ? -1 : 1;
    if (a->lb_chars != b->lb_chars) return a->lb_chars > b->lb_chars ? -1 : 1;
    return (a->seq > b->seq) - (a->seq < b->seq);
}

typedef struct cand_list {
    cand *v;
    size_t n, cap;
    gb *b;
} cand_list;

static bool gen_merge(tk_ld *l, void *user, size_t i, const char **a, size_t *la,
                      const char **bb, size_t *lb) {
    (void)l;
    const cand_list *cl = user;
    const cand *c = &cl->v[i];
    const char *s = cl->b->tok[c->tok];
    *a = s, *la = c->cut, *bb = s + c->cut, *lb = cl->b->len[c->tok] - c->cut;
    return true;
}

static bool generated_merges(gb *b) {
    tk_model *m = &b->l.t->model;
    cand_list cl = {NULL, 0, 0, b};
    bool ok = true;
    /* the dict of scores iterates tokens in the order of their first occurrence and keeps the
     * last score of a repeated spelling */
    tk_strmap seen = {0};
    if (!tk_strmap_init(&seen, (size_t)b->n)) return tk_ld_oom(&b->l);
    for (uint64_t i = 0; i < b->n && ok; i++) {
        if (tk_strmap_get(&seen, b->tok[i], b->len[i]) >= 0) continue;
        if (!tk_strmap_put(&seen, b->tok[i], b->len[i], 1)) {
            ok = tk_ld_oom(&b->l);
            break;
        }
        int32_t last = tk_strmap_get(&m->vocab.map, b->tok[i], b->len[i]);
        double score = 0;
        if (b->gemma)
            score = -(double)last;
        else if (!em_gguf_array_float(b->scores, (uint64_t)last, &score))
            score = 0;
        size_t start = cl.n;
        const char *s = b->tok[i];
        size_t n = b->len[i], la_chars = 0;
        for (size_t cut = 0; cut < n;) {
            size_t k = tk_utf8_len((unsigned char)s[cut]);
            if (cut > 0) {
                int32_t ia = tk_strmap_get(&m->vocab.map, s, cut);
                int32_t ib = tk_strmap_get(&m->vocab.map, s + cut, n - cut);
                if (ia >= 0 && ib >= 0) {
                    if (cl.n == cl.cap) {
                        size_t nc = cl.cap ? 2 * cl.cap : 1024;
                        cand *nv = realloc(cl.v, nc * sizeof *nv);
                        if (!nv) {
                            ok = tk_ld_oom(&b->l);
                            break;
                        }
                        cl.v = nv, cl.cap = nc;
                    }
                    cl.v[cl.n] = (cand){score, (uint32_t)la_chars, 0, cl.n, (uint32_t)i,
                                        (uint32_t)cut, ia, ib};
                    cl.n++;
                }
            }
            la_chars++;
            cut += k;
        }
        for (size_t k = start; k < cl.n; k++) /* la_chars now counts the whole token */
            cl.v[k].lb_chars = (uint32_t)(la_chars - cl.v[k].la_chars);
        if (cl.n > start) qsort(cl.v + start, cl.n - start, sizeof *cl.v, cmp_local);
        for (size_t k = start; k < cl.n; k++) cl.v[k].seq = k;
    }
    tk_strmap_free(&seen);
    if (ok) {
        if (cl.n) qsort(cl.v, cl.n, sizeof *cl.v, cmp_global);
        ok = tk_bpe_merges_from(&b->l, m, cl.n, gen_merge, &cl);
    }
    free(cl.v);
    return ok;
}

/* ---- the components, as tokenizer.json objects ---- */

static json_t *obj(const char *type) { return json_pack("{s:s}", "type", type); }

static bool parse_parts(gb *b, const char *pre) {
    tk_ld *l = &b->l;
    em_tokenizer *t = l->t;
    json_t *pt = NULL, *dec = NULL, *norm = NULL;
    if (b->byte_level) {
        const char *rx = NULL;
        for (size_t i = 0; pre && i < sizeof splits / sizeof splits[0]; i++)
            if (!strcmp(pre, splits[i].pre)) rx = splits[i].regex;
        if (rx)
            pt = json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}", "type",
                           "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex", rx,
                           "behavior", "Isolated", "invert", 0, "type", "ByteLevel",
                           "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 0);
        else
            pt = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
                           "trim_offsets", 1, "use_regex", 1);
        dec = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 1,
                        "trim_offsets", 1, "use_regex", 1);
    } else if (b->gemma) {
        norm = json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "String", " ",
                         "content", "\xe2\x96\x81");
        pt = json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "String", " ",
                       "behavior", "MergedWithPrevious", "invert", 0);
        dec = json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, o, o]}", "type", "Sequence", "decoders",
                        "type", "Replace", "pattern", "String", "\xe2\x96\x81", "content", " ",
                        obj("ByteFallback"), obj("Fuse"));
    } else {
        pt = json_pack("{s:s, s:s, s:s, s:b}", "type", "Metaspace", "replacement", "\xe2\x96\x81",
                       "prepend_scheme", "first", "split", 0);
        dec = json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, o, o, {s:s, s:s, s:i, s:i}]}", "type",
                        "Sequence", "decoders", "type", "Replace", "pattern", "String",
                        "\xe2\x96\x81", "content", " ", obj("ByteFallback"), obj("Fuse"), "type",
                        "Strip", "content", " ", "start", 1, "stop", 0);
    }
    bool ok = pt && dec && (norm || !b->gemma);
    if (!ok) tk_ld_oom(l);
    if (ok && norm) {
        t->normalizer = calloc(1, sizeof *t->normalizer);
        ok = t->normalizer ? tk_parse_normalizer(l, norm, "normalizer", t->normalizer)
                           : tk_ld_oom(l);
    }
    if (ok) ok = tk_parse_pretok(l, pt, "pre_tokenizer", 0);
    if (ok) {
        t->decoder = calloc(1, sizeof *t->decoder);
        ok = t->decoder ? tk_parse_decoder(l, dec, "decoder", t->decoder, 0) : tk_ld_oom(l);
    }
    json_decref(pt);
    json_decref(dec);
    json_decref(norm);
    return ok;
}

/* The added tokens, in the order transformers adds them; a token added again takes the flags of
 * its last addition (tokenizers' AddedVocabulary). */
typedef struct added_list {
    json_t *arr;     /* {"content", "special", ...} objects in order of first addition */
    json_t *by_text; /* content -> index into arr */
} added_list;

static bool add_one(added_list *a, const char *s, size_t n, bool special) {
    json_t *idx = json_object_getn(a->by_text, s, n);
    if (idx) return !json_object_set_new(json_array_get(a->arr, (size_t)json_integer_value(idx)),
                                         "special", json_boolean(special));
    json_t *content = json_stringn(s, n);
    json_t *o = content ? json_pack("{s:i, s:o, s:b, s:b, s:b, s:b, s:b}", "id", 0, "content",
                                    content, "single_word", 0, "lstrip", 0, "rstrip", 0,
                                    "normalized", 0, "special", special)
                        : NULL;
    json_t *at = json_integer((json_int_t)json_array_size(a->arr));
    return o && !json_object_setn_new(a->by_text, s, n, at) && !json_array_append_new(a->arr, o);
}

/*
 * 1. the special tokens the tokenizer class defines by default (GPT2Tokenizer: <|endoftext|>;
 *    LlamaTokenizer: <s>, </s>, <unk>; GemmaTokenizer: <bos>, <eos>, <unk>, <pad>, <mask>),
 *    which get new ids when the vocabulary lacks them;
 * 2. the control tokens (type 3) as special; a byte-level one outside GPT-2's alphabet is a
 *    mislabel transformers skips;
 * 3. the user-defined tokens (type 4) the vocabulary holds, as plain added tokens;
 * 4. the file's bos, eos, unknown and padding tokens, as special.
 */
static bool added_tokens(gb *b, const em_gguf_value *tokens) {
    static const char *const defaults_gpt2[] = {"<|endoftext|>", NULL};
    static const char *const defaults_llama[] = {"<s>", "</s>", "<unk>", NULL};
    static const char *const defaults_gemma[] = {"<bos>", "<eos>", "<unk>", "<pad>", "<mask>",
                                                 NULL};
    const char *const *defaults = b->byte_level ? defaults_gpt2
                                  : b->gemma    ? defaults_gemma
                                                : defaults_llama;
    static const char *const file_specials[] = {
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"};
    const tk_strmap *voc = &b->l.t->model.vocab.map;
    added_list a = {json_array(), json_object()};
    bool ok = a.arr && a.by_text;
    for (size_t k = 0; ok && defaults[k]; k++)
        ok = add_one(&a, defaults[k], strlen(defaults[k]), true);
    for (int pass = 0; pass < 2 && ok; pass++)
        for (uint64_t i = 0; i < b->n && ok; i++) {
            size_t n;
            const char *s = em_gguf_array_str(tokens, i, &n); /* as the file spells it */
            int tt = token_type(b, i);
            if (tt != (pass ? TT_USER_DEFINED : TT_CONTROL)) continue;
            if (!pass && b->byte_level && !in_alphabet(s, n)) continue;
            if (pass && tk_strmap_get(voc, s, n) < 0 && !json_object_getn(a.by_text, s, n))
                continue;
            ok = add_one(&a, s, n, !pass);
        }
    for (size_t k = 0; ok && k < sizeof file_specials / sizeof file_specials[0]; k++) {
        int64_t id;
        if (!em_gguf_value_int(em_gguf_find(b->g, file_specials[k]), &id) || id < 0 ||
            (uint64_t)id >= b->n)
            continue;
        size_t n;
        const char *s = em_gguf_array_str(tokens, (uint64_t)id, &n);
        ok = add_one(&a, s, n, true);
    }
    if (ok) ok = tk_parse_added_tokens(&b->l, a.arr);
    else tk_ld_oom(&b->l);
    json_decref(a.arr);
    json_decref(a.by_text);
    return ok;
}

/* Special tokens by id, and the post-processor that adds bos/eos. */
static bool specials(gb *b, bool llama_vocab) {
    tk_ld *l = &b->l;
    em_tokenizer *t = l->t;
    static const struct {
        const char *key;
        em_special_token which;
    } ids[] = {{"tokenizer.ggml.bos_token_id", EM_SPECIAL_BOS},
               {"tokenizer.ggml.eos_token_id", EM_SPECIAL_EOS},
               {"tokenizer.ggml.unknown_token_id", EM_SPECIAL_UNK},
               {"tokenizer.ggml.padding_token_id", EM_SPECIAL_PAD}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        const em_gguf_value *v = em_gguf_find(b->g, ids[i].key);
        int64_t id;
        if (!v) continue;
        if (!em_gguf_value_int(v, &id) || id < 0 || (uint64_t)id >= b->n)
            return tk_ld_fail(l, EM_ERR_FORMAT, ids[i].key, "must be a token id below %llu",
                              (unsigned long long)b->n);
        size_t n;
        const char *s = em_gguf_array_str(em_gguf_find(b->g, "tokenizer.ggml.tokens"),
                                          (uint64_t)id, &n);
        t->special[ids[i].which] = tk_arena_strndup(&t->arena, s, n);
        if (!t->special[ids[i].which]) return tk_ld_oom(l);
    }
    t->add_bos = em_gguf_get_bool(b->g, "tokenizer.ggml.add_bos_token", llama_vocab);
    t->add_eos = em_gguf_get_bool(b->g, "tokenizer.ggml.add_eos_token", false);
    const char *bos = t->special[EM_SPECIAL_BOS], *eos = t->special[EM_SPECIAL_EOS];
    bool add_bos = t->add_bos && bos, add_eos = t->add_eos && eos;
    json_t *single = json_array(), *stoks = json_object();
    bool ok = single && stoks;
    if (ok && add_bos)
        ok = !json_array_append_new(single, json_pack("{s:{s:s, s:i}}", "SpecialToken", "id", bos,
                                                      "type_id", 0));
    if (ok)
        ok = !json_array_append_new(single, json_pack("{s:{s:s, s:i}}", "Sequence", "id", "A",
                                                      "type_id", 0));
    if (ok && add_eos)
        ok = !json_array_append_new(single, json_pack("{s:{s:s, s:i}}", "SpecialToken", "id", eos,
                                                      "type_id", 0));
    for (int k = 0; ok && k < 2; k++) {
        const char *s = k ? eos : bos;
        if (!(k ? add_eos : add_bos)) continue;
        int32_t id = em_tokenizer_token_to_id(t, s, strlen(s));
        ok = !json_object_set_new(stoks, s, json_pack("{s:s, s:[i], s:[s]}", "id", s, "ids", id,
                                                      "tokens", s));
    }
    json_t *post = ok ? json_pack("{s:s, s:O, s:O, s:O}", "type", "TemplateProcessing", "single",
                                  single, "pair", single, "special_tokens", stoks)
                      : NULL;
    json_decref(single);
    json_decref(stoks);
    if (!post) return tk_ld_oom(l);
    t->post = calloc(1, sizeof *t->post);
    ok = t->post ? tk_parse_post(l, post, "post_processor", t->post, 0) : tk_ld_oom(l);
    json_decref(post);
    size_t n;
    const char *tpl = em_gguf_get_str(b->g, "tokenizer.chat_template", &n);
    if (ok && tpl) ok = tk_add_template(l, "default", tpl, n);
    return ok;
}

em_tokenizer *em_tokenizer_from_gguf(em_ctx *c, const em_gguf *g) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!g) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "the GGUF handle is NULL");
        return NULL;
    }
    const char *model = em_gguf_get_str(g, "tokenizer.ggml.model", NULL);
    const em_gguf_value *tokens = em_gguf_find(g, "tokenizer.ggml.tokens");
    if (!model || !tokens) {
        em_ctx_fail(c, EM_ERR_NOT_FOUND, OP, "%s has no tokenizer (tokenizer.ggml.model and "
                    "tokenizer.ggml.tokens)", em_gguf_path(g));
        return NULL;
    }
    bool byte_level = !strcmp(model, "gpt2"), llama = !strcmp(model, "llama");
    if (!byte_level && !llama) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP, "%s: tokenizer.ggml.model \"%s\" is not supported "
                    "(Ember builds \"gpt2\" and \"llama\" tokenizers)", em_gguf_path(g), model);
        return NULL;
    }
    if (em_gguf_array_type(tokens) != EM_GGUF_STRING || em_gguf_array_len(tokens) == 0 ||
        em_gguf_array_len(tokens) > INT32_MAX) {
        em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s: tokenizer.ggml.tokens must be a non-empty array of "
                    "strings", em_gguf_path(g));
        return NULL;
    }
    em_tokenizer *t = tk_new(c, em_gguf_path(g));
    if (!t) return NULL;
    const char *arch = em_gguf_get_str(g, "general.architecture", NULL);
    gb b = {{c, t->name, t}, g, byte_level, false, em_gguf_array_len(tokens), NULL, NULL,
            NULL, NULL, NULL};
    b.gemma = llama && arch && (!strcmp(arch, "gemma") || !strcmp(arch, "gemma2") ||
                                !strcmp(arch, "gemma3"));
    b.types = em_gguf_find(g, "tokenizer.ggml.token_type");
    b.scores = em_gguf_find(g, "tokenizer.ggml.scores");
    b.merges = em_gguf_find(g, "tokenizer.ggml.merges");
    bool ok = true;
    if (b.types && (em_gguf_array_len(b.types) != b.n ||
                    em_gguf_array_type(b.types) == EM_GGUF_STRING ||
                    em_gguf_array_type(b.types) == EM_GGUF_ARRAY))
        ok = tk_ld_fail(&b.l, EM_ERR_FORMAT, "tokenizer.ggml.token_type",
                        "must be %llu integers, one per token", (unsigned long long)b.n);
    if (ok && b.merges && em_gguf_array_type(b.merges) != EM_GGUF_STRING)
        ok = tk_ld_fail(&b.l, EM_ERR_FORMAT, "tokenizer.ggml.merges", "must be strings \"a b\"");
    if (ok && llama && !b.merges && !b.gemma &&
        (!b.scores || em_gguf_array_len(b.scores) != b.n))
        ok = tk_ld_fail(&b.l, EM_ERR_FORMAT, "tokenizer.ggml.scores",
                        "a llama vocabulary without merges needs one score per token");
    ok = ok && spell_tokens(&b, tokens);
    tk_model *m = &t->model;
    m->unk_id = -1;
    json_t *opts = ok ? (byte_level ? json_pack("{s:s, s:s}", "continuing_subword_prefix", "",
                                                "end_of_word_suffix", "")
                         : b.gemma ? json_pack("{s:s, s:b, s:b}", "unk_token", "<unk>",
                                               "fuse_unk", 1, "byte_fallback", 1)
                                   : json_pack("{s:b, s:b}", "fuse_unk", 1, "byte_fallback", 1))
                      : NULL;
    if (ok && !opts) ok = tk_ld_oom(&b.l);
    ok = ok && tk_bpe_options(&b.l, opts, m);
    json_decref(opts);
    if (ok && m->prefix && !m->prefix_len) m->prefix = NULL; /* "" is no prefix */
    if (ok && m->suffix && !m->suffix_len) m->suffix = NULL;
    if (ok) {
        if (b.merges)
            ok = tk_bpe_merges_from(&b.l, m, (size_t)em_gguf_array_len(b.merges), file_merge, &b);
        else if (llama)
            ok = generated_merges(&b);
        else
            ok = tk_bpe_merges_from(&b.l, m, 0, file_merge, &b);
    }
    if (ok && byte_level)
        for (int k = 0; k < 256; k++) m->byte_ids[k] = -1;
    if (ok && !tk_bpe_init(m)) ok = tk_ld_oom(&b.l);
    ok = ok && parse_parts(&b, em_gguf_get_str(g, "tokenizer.ggml.pre", NULL)) &&
         added_tokens(&b, tokens) && specials(&b, llama);
    if (!ok) {
        em_tokenizer_free(t);
        return NULL;
    }
    tk_resolve_specials(t);
    return t;
}

/* The CLIP tokenizer of Stable Diffusion folders: a tokenizer.json when the folder has one,
 * else the tokenizer transformers 5's CLIPTokenizer builds from vocab.json + merges.txt, made as
 * a tokenizer.json document in memory so that Ember's one BPE implementation (io/tokenizer)
 * runs both; plus the pipelines' padding="max_length", truncation=True. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/file_read.h"
#include "ember/clip.h"
#include "ember/tensor.h"

#define OP "CLIPTokenizer"
#define MAX_FILE_BYTES ((size_t)64 << 20)
#define DEFAULT_MAX_LENGTH 77

/* The special tokens CLIPTokenizer knows, in the order transformers registers them (a later
 * one with the same content sets the added token's flags, as transformers' does). */
enum { SP_BOS, SP_EOS, SP_UNK, SP_PAD, SP_N };
static const char *const SP_KEY[SP_N] = {"bos_token", "eos_token", "unk_token", "pad_token"};
static const char *const SP_DEFAULT[SP_N] = {"<|startoftext|>", "<|endoftext|>", "<|endoftext|>",
                                             "<|endoftext|>"};

typedef struct special {
    char *content;
    json_t *flags; /* the {"content": ...} object it was given as, or NULL for a string */
} special;

struct em_clip_tokenizer {
    em_tokenizer *tok;
    int64_t max_length;
    em_token id[SP_N];
};

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", name);
    return p;
}

static bool is_file(const char *p) {
    struct stat sb;
    return p && stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* A JSON file of the folder as an object; *root NULL without error when it does not exist. */
static bool read_json(em_ctx *c, const char *dir, const char *name, json_t **root) {
    *root = NULL;
    char *p = join(dir, name);
    if (!p) return em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory"), false;
    bool missing = false;
    size_t len = 0;
    char *text = em_file_read(c, OP, p, MAX_FILE_BYTES, &len, &missing);
    if (text) {
        json_error_t e;
        *root = json_loadb(text, len, 0, &e);
        if (!*root)
            em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s is not valid JSON: %s (line %d, column %d)", p,
                        e.text, e.line, e.column);
        else if (!json_is_object(*root)) {
            em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s is not a JSON object", p);
            json_decref(*root);
            *root = NULL;
        }
    }
    free(text);
    free(p);
    return !em_ctx_status(c);
}

/* Reads model_max_length and the special tokens of one config file over what is already set. */
static bool read_specials(em_ctx *c, const char *dir, const char *name, special *sp,
                          int64_t *max_length) {
    json_t *root;
    if (!read_json(c, dir, name, &root)) return false;
    if (!root) return true;
    bool ok = true;
    json_t *ml = json_object_get(root, "model_max_length");
    if (ml && !json_is_null(ml)) {
        /* transformers writes a huge number (1e30) for "no limit": CLIP's context applies */
        if (!json_is_number(ml) || json_number_value(ml) < 2) {
            em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s/%s: model_max_length must be a number >= 2",
                        dir, name);
            ok = false;
        } else if (json_number_value(ml) < 1e9)
            *max_length = (int64_t)json_number_value(ml);
    }
    for (int i = 0; ok && i < SP_N; i++) {
        json_t *v = json_object_get(root, SP_KEY[i]);
        if (!v || json_is_null(v)) continue;
        json_t *content = json_is_object(v) ? json_object_get(v, "content") : v;
        if (!json_is_string(content)) {
            em_ctx_fail(c, EM_ERR_FORMAT, OP,
                        "%s/%s: %s must be a string or an object with a string \"content\"", dir,
                        name, SP_KEY[i]);
            ok = false;
            break;
        }
        char *s = strdup(json_string_value(content));
        if (!s) {
            em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
            ok = false;
            break;
        }
        free(sp[i].content);
        json_decref(sp[i].flags);
        sp[i].content = s;
        sp[i].flags = json_is_object(v) ? json_incref(v) : NULL;
    }
    json_decref(root);
    return ok;
}

/* merges.txt as tokenizer.json's [["a", "b"], ...]: the "#version" line and empty lines are
 * skipped; every other line is two pieces separated by one space. */
static json_t *read_merges(em_ctx *c, const char *path) {
    size_t len = 0;
    char *text = em_file_read(c, OP, path, MAX_FILE_BYTES, &len, NULL);
    if (!text) return NULL;
    json_t *arr = json_array();
    size_t line = 0;
    for (char *s = text, *end = text + len; arr && s < end; line++) {
        char *nl = memchr(s, '\n', (size_t)(end - s));
        char *e = nl ? nl : end;
        if (e > s && e[-1] == '\r') e[-1] = 0, e--;
        *e = 0;
        if (*s && !(line == 0 && !strncmp(s, "#version", 8))) {
            char *sp = strchr(s, ' ');
            if (!sp || sp == s || !sp[1] || strchr(sp + 1, ' ') || strlen(s) != (size_t)(e - s)) {
                em_ctx_fail(c, EM_ERR_FORMAT, OP,
                            "%s line %zu: a merge is two pieces separated by one space, got '%.60s'",
                            path, line + 1, s);
                json_decref(arr);
                arr = NULL;
                break;
            }
            *sp = 0;
            json_t *pair = json_pack("[ss]", s, sp + 1);
            if (!pair || json_array_append_new(arr, pair)) {
                em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
                json_decref(arr);
                arr = NULL;
            }
        }
        s = nl ? nl + 1 : end;
    }
    free(text);
    if (!arr && !em_ctx_status(c)) em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    return arr;
}

static bool flag(const special *s, const char *key) {
    json_t *v = s->flags ? json_object_get(s->flags, key) : NULL;
    return v && json_is_true(v);
}

/* The special added tokens: each content once, the last registration's flags (a string is not
 * normalized, as transformers registers it), ids from the vocabulary. */
static json_t *added_tokens(em_ctx *c, const char *vocab_file, json_t *vocab, const special *sp) {
    json_t *arr = json_array();
    for (int i = 0; arr && i < SP_N; i++) {
        int last = i;
        bool first = true;
        for (int j = 0; j < SP_N; j++)
            if (!strcmp(sp[j].content, sp[i].content)) {
                if (j < i) first = false;
                last = j;
            }
        if (!first) continue;
        json_t *id = json_object_get(vocab, sp[i].content);
        if (!json_is_integer(id)) {
            em_ctx_fail(c, EM_ERR_NOT_FOUND, OP, "%s '%s' is not in %s", SP_KEY[i], sp[i].content,
                        vocab_file);
            json_decref(arr);
            return NULL;
        }
        const special *s = &sp[last];
        json_t *t = json_pack("{sIsssbsbsbsbsb}", "id", json_integer_value(id), "content",
                              s->content, "single_word", flag(s, "single_word"), "lstrip",
                              flag(s, "lstrip"), "rstrip", flag(s, "rstrip"), "normalized",
                              flag(s, "normalized"), "special", 1);
        if (!t || json_array_append_new(arr, t)) {
            json_decref(arr);
            arr = NULL;
        }
    }
    if (!arr && !em_ctx_status(c)) em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    return arr;
}

/* tokenizer.json as transformers 5.24's CLIPTokenizer.__init__ builds it. */
static const char *const CLIP_PIPELINE =
    "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,"
    " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"},"
    "   {\"type\": \"Replace\", \"pattern\": {\"Regex\": \"\\\\s+\"}, \"content\": \" \"},"
    "   {\"type\": \"Lowercase\"}]},"
    " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
    "   {\"type\": \"Split\", \"pattern\": {\"Regex\": \"<\\\\|startoftext\\\\|>|<\\\\|endoftext"
    "\\\\|>|'s|'t|'re|'ve|'m|'ll|'d|[\\\\p{L}]+|[\\\\p{N}]|[^\\\\s\\\\p{L}\\\\p{N}]+\"},"
    "    \"behavior\": \"Removed\", \"invert\": true},"
    "   {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true,"
    "    \"use_regex\": true}]},"
    " \"post_processor\": null,"
    " \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true,"
    "   \"use_regex\": true},"
    " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"continuing_subword_prefix\": \"\","
    "   \"end_of_word_suffix\": \"</w>\", \"fuse_unk\": false, \"byte_fallback\": false,"
    "   \"ignore_merges\": false}}";

static em_tokenizer *from_vocab_merges(em_ctx *c, const char *dir, const special *sp) {
    char *vf = join(dir, "vocab.json"), *mf = join(dir, "merges.txt");
    em_tokenizer *tok = NULL;
    json_t *doc = NULL, *vocab = NULL, *merges = NULL, *added = NULL;
    if (!vf || !mf) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        goto done;
    }
    if (!is_file(vf) || !is_file(mf)) {
        em_ctx_fail(c, EM_ERR_NOT_FOUND, OP,
                    "%s holds no tokenizer.json and no %s (a CLIP tokenizer folder has "
                    "tokenizer.json, or vocab.json and merges.txt)",
                    dir, is_file(vf) ? "merges.txt" : "vocab.json");
        goto done;
    }
    if (!read_json(c, dir, "vocab.json", &vocab) || !(merges = read_merges(c, mf)) ||
        !(added = added_tokens(c, vf, vocab, sp)))
        goto done;
    doc = json_loads(CLIP_PIPELINE, 0, NULL);
    json_t *model = doc ? json_object_get(doc, "model") : NULL;
    if (!model || json_object_set(model, "vocab", vocab) || json_object_set(model, "merges", merges) ||
        json_object_set_new(model, "unk_token", json_string(sp[SP_UNK].content)) ||
        json_object_set(doc, "added_tokens", added)) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        goto done;
    }
    char *text = json_dumps(doc, JSON_COMPACT);
    if (!text) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        goto done;
    }
    tok = em_tokenizer_load_json(c, text, strlen(text), vf);
    free(text);
done:
    json_decref(doc);
    json_decref(vocab);
    json_decref(merges);
    json_decref(added);
    free(vf);
    free(mf);
    return tok;
}

em_clip_tokenizer *em_clip_tokenizer_load(em_ctx *c, const char *dir) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!dir || !*dir) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "the folder is NULL or empty");
        return NULL;
    }
    special sp[SP_N] = {{0}};
    em_clip_tokenizer *t = calloc(1, sizeof *t);
    char *tj = join(dir, "tokenizer.json");
    if (!t || !tj) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        goto fail;
    }
    t->max_length = DEFAULT_MAX_LENGTH;
    for (int i = 0; i < SP_N; i++)
        if (!(sp[i].content = strdup(SP_DEFAULT[i]))) {
            em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
            goto fail;
        }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        em_ctx_fail(c, EM_ERR_NOT_FOUND, OP, "%s is not a folder", dir);
        goto fail;
    }
    /* transformers: tokenizer_config.json's values, then special_tokens_map.json's */
    if (!read_specials(c, dir, "tokenizer_config.json", sp, &t->max_length) ||
        !read_specials(c, dir, "special_tokens_map.json", sp, &t->max_length))
        goto fail;
    t->tok = is_file(tj) ? em_tokenizer_load(c, tj) : from_vocab_merges(c, dir, sp);
    if (!t->tok) goto fail;
    for (int i = 0; i < SP_N; i++) {
        t->id[i] = em_tokenizer_token_to_id(t->tok, sp[i].content, strlen(sp[i].content));
        if (t->id[i] < 0) {
            em_ctx_fail(c, EM_ERR_NOT_FOUND, OP, "%s '%s' is not in the vocabulary of %s",
                        SP_KEY[i], sp[i].content, dir);
            goto fail;
        }
    }
    for (int i = 0; i < SP_N; i++) free(sp[i].content), json_decref(sp[i].flags);
    free(tj);
    return t;
fail:
    for (int i = 0; i < SP_N; i++) free(sp[i].content), json_decref(sp[i].flags);
    free(tj);
    em_clip_tokenizer_free(t);
    return NULL;
}

void em_clip_tokenizer_free(em_clip_tokenizer *t) {
    if (!t) return;
    em_tokenizer_free(t->tok);
    free(t);
}

const em_tokenizer *em_clip_tokenizer_base(const em_clip_tokenizer *t) { return t ? t->tok : NULL; }

int64_t em_clip_tokenizer_max_length(const em_clip_tokenizer *t) { return t ? t->max_length : 0; }

em_token em_clip_tokenizer_special_id(const em_clip_tokenizer *t, em_special_token which) {
    if (!t) return -1;
    switch (which) {
    case EM_SPECIAL_BOS: return t->id[SP_BOS];
    case EM_SPECIAL_EOS: return t->id[SP_EOS];
    case EM_SPECIAL_UNK: return t->id[SP_UNK];
    case EM_SPECIAL_PAD: return t->id[SP_PAD];
    default: return -1;
    }
}

em_status em_clip_tokenize(em_ctx *c, const em_clip_tokenizer *t, const char *prompt, size_t len,
                           int64_t max_length, em_token *ids, int32_t *mask, int64_t *n_real) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!t || !prompt || !ids)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "tokenizer, prompt or ids is NULL");
    if (!max_length) max_length = t->max_length;
    if (max_length < 2)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP,
                           "max_length %lld: at least 2 (bos and eos) are needed",
                           (long long)max_length);
    em_token *body = NULL;
    size_t n = 0;
    em_status s = em_tokenizer_encode(c, t->tok, prompt, len, false, &body, &n);
    if (s) return s;
    /* truncation=True: the prompt's tokens are cut so that bos and eos fit */
    int64_t keep = (int64_t)n < max_length - 2 ? (int64_t)n : max_length - 2;
    ids[0] = t->id[SP_BOS];
    memcpy(ids + 1, body, (size_t)keep * sizeof *ids);
    ids[keep + 1] = t->id[SP_EOS];
    for (int64_t i = keep + 2; i < max_length; i++) ids[i] = t->id[SP_PAD];
    if (mask)
        for (int64_t i = 0; i < max_length; i++) mask[i] = i < keep + 2;
    if (n_real) *n_real = keep + 2;
    em_free(body);
    return EM_OK;
}

em_tensor *em_clip_tokenize_batch(em_ctx *c, const em_clip_tokenizer *t,
                                  const char *const *prompts, int n, int64_t max_length,
                                  em_tensor **mask) {
    if (mask) *mask = NULL;
    if (!c || em_ctx_status(c)) return NULL;
    if (!t || !prompts || n < 1) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "needs a tokenizer and at least one prompt");
        return NULL;
    }
    if (!max_length) max_length = t->max_length;
    if (max_length < 2 || max_length > ((int64_t)1 << 24)) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "max_length %lld: expected 2 to 2^24",
                    (long long)max_length);
        return NULL;
    }
    size_t total = (size_t)n * (size_t)max_length;
    em_token *ids = malloc(total * sizeof *ids);
    int32_t *m = malloc(total * sizeof *m);
    int64_t *ids64 = malloc(total * sizeof *ids64), *m64 = malloc(total * sizeof *m64);
    em_tensor *r = NULL;
    if (!ids || !m || !ids64 || !m64)
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    for (int i = 0; i < n && !em_ctx_status(c); i++) {
        if (!prompts[i]) {
            em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "prompt %d is NULL", i);
            break;
        }
        em_clip_tokenize(c, t, prompts[i], strlen(prompts[i]), max_length,
                         ids + (size_t)i * (size_t)max_length, m + (size_t)i * (size_t)max_length,
                         NULL);
    }
    if (!em_ctx_status(c)) {
        for (size_t i = 0; i < total; i++) ids64[i] = ids[i], m64[i] = m[i];
        int64_t shape[2] = {n, max_length};
        r = em_from_host(c, EM_I64, 2, shape, ids64);
        if (mask && r) *mask = em_from_host(c, EM_I64, 2, shape, m64);
        if (em_ctx_status(c)) {
            r = NULL;
            if (mask) *mask = NULL;
        }
    }
    free(ids);
    free(m);
    free(ids64);
    free(m64);
    return r;
}

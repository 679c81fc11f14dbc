/* Tokenizers built from GGUF metadata against what transformers builds from the same files
 * (scripts/gen_gguf_fixtures.py tokenizers): byte-level vocabularies with several
 * tokenizer.ggml.pre names, sentencepiece vocabularies with merges and with scores only, a
 * gemma3 one; ids of a few hundred strings with and without special tokens, decoded text,
 * special tokens and chat templates rendered and encoded. The real SmolLM2-135M-Instruct GGUF
 * is checked the same way when scripts/fetch_smollm2.sh has fetched it (EMBER_SMOLLM2_GGUF). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ember/ember.h"
#include "harness.h"

/* The expectations (their texts hold U+0000). */
static json_t *load(const char *rel) {
    json_error_t je;
    json_t *j = json_load_file(em_test_fixture_path("gguf", rel), JSON_ALLOW_NUL, &je);
    CHECK_MSG(j, "cannot read %s: %s", rel, je.text);
    return j;
}

static bool same_ids(const int32_t *got, size_t n, json_t *want) {
    if (n != json_array_size(want)) return false;
    for (size_t i = 0; i < n; i++)
        if (got[i] != json_integer_value(json_array_get(want, i))) return false;
    return true;
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* Checks one tokenizer against its expectations (cases[i] = [ids, ids with special tokens,
 * decoded text, decoded text skipping special tokens], a null text meaning texts[i] itself);
 * returns the number of mismatching cases. */
static int check_tokenizer(em_ctx *c, em_tokenizer *t, json_t *texts, json_t *exp,
                           const char *name) {
    int bad = 0;
    json_t *cases = json_object_get(exp, "cases");
    CHECK(json_array_size(cases) == json_array_size(texts));
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *cs = json_array_get(cases, i);
        json_t *text = json_array_get(texts, i);
        const char *s = json_string_value(text);
        size_t len = json_string_length(text);
        for (int special = 0; special < 2; special++) {
            int32_t *ids = NULL;
            size_t n = 0;
            json_t *want = json_array_get(cs, (size_t)special);
            if (em_tokenizer_encode(c, t, s, len, special, &ids, &n) != EM_OK ||
                !same_ids(ids, n, want)) {
                if (bad++ < 5) {
                    fprintf(stderr, "%s: \"%.60s\" (special %d): %s\n", name, s, special,
                            em_ctx_error(c) ? em_ctx_error(c)->message : "ids differ");
                    print_ids("got", ids, n);
                    char *w = json_dumps(want, JSON_COMPACT);
                    fprintf(stderr, "  want: %.300s\n", w);
                    free(w);
                }
                em_ctx_clear_error(c);
            } else {
                size_t dl;
                char *d = em_tokenizer_decode(c, t, ids, n, special, &dl);
                json_t *wd = json_array_get(cs, 2 + (size_t)special);
                if (json_is_null(wd)) wd = text;
                if (!d || dl != json_string_length(wd) || memcmp(d, json_string_value(wd), dl)) {
                    if (bad++ < 5)
                        fprintf(stderr, "%s: decode of \"%.60s\" gives \"%.60s\"\n", name, s,
                                d ? d : "(error)");
                    em_ctx_clear_error(c);
                }
                em_free(d);
            }
            em_free(ids);
        }
    }
    CHECK_MSG(json_array_size(cases) >= 300, "%s: %zu cases", name, json_array_size(cases));
    /* special tokens as transformers names them */
    json_t *sp = json_object_get(exp, "special");
    static const struct {
        const char *key;
        em_special_token which;
    } specials[] = {{"bos_token", EM_SPECIAL_BOS}, {"eos_token", EM_SPECIAL_EOS},
                    {"unk_token", EM_SPECIAL_UNK}, {"pad_token", EM_SPECIAL_PAD}};
    for (size_t k = 0; k < sizeof specials / sizeof specials[0]; k++) {
        json_t *w = json_object_get(sp, specials[k].key);
        const char *got = em_tokenizer_special_token(t, specials[k].which);
        if (json_is_string(w))
            CHECK_MSG(got && !strcmp(got, json_string_value(w)), "%s: %s is %s", name,
                      specials[k].key, got ? got : "(none)");
        else if (specials[k].which != EM_SPECIAL_UNK) /* the model's unk may stand in */
            CHECK_MSG(!got, "%s: %s is %s, want none", name, specials[k].key, got);
    }
    CHECK_MSG(em_tokenizer_add_bos_token(t) == json_is_true(json_object_get(exp, "add_bos")),
              "%s: add_bos_token", name);
    CHECK_MSG(em_tokenizer_vocab_size(t) ==
                  (size_t)json_integer_value(json_object_get(exp, "vocab_size")),
              "%s: vocabulary of %zu", name, em_tokenizer_vocab_size(t));
    /* chat templates: rendered as transformers renders them, then encoded */
    json_t *chats = json_object_get(exp, "chats");
    for (size_t i = 0; i < json_array_size(chats); i++) {
        json_t *ch = json_array_get(chats, i);
        char *msgs = json_dumps(json_object_get(ch, "messages"), JSON_COMPACT);
        char *text = em_chat_template_apply(c, t, msgs, true, NULL);
        const char *want = json_string_value(json_object_get(ch, "text"));
        CHECK_MSG(text && !strcmp(text, want), "%s: chat %zu renders \"%.200s\"", name, i,
                  text ? text : em_ctx_error(c)->message);
        int32_t *ids = NULL;
        size_t n = 0;
        if (text) em_tokenizer_encode(c, t, text, strlen(text), false, &ids, &n);
        CHECK_MSG(ids && same_ids(ids, n, json_object_get(ch, "ids")), "%s: chat %zu ids", name,
                  i);
        em_ctx_clear_error(c);
        em_free(ids);
        em_free(text);
        free(msgs);
    }
    return bad;
}

static void test_synthetic(void) {
    json_t *doc = load("tokenizers.json");
    json_t *toks = json_object_get(doc, "tokenizers");
    CHECK(json_object_size(toks) >= 7);
    em_ctx *c = em_ctx_create();
    const char *name;
    json_t *exp;
    json_object_foreach(toks, name, exp) {
        char rel[128];
        snprintf(rel, sizeof rel, "tok_%s.gguf", name);
        em_tokenizer *t = em_tokenizer_load(c, em_test_fixture_path("gguf", rel));
        CHECK_MSG(t, "%s: %s", name, em_ctx_error(c) ? em_ctx_error(c)->message : "");
        if (!t) {
            em_ctx_clear_error(c);
            continue;
        }
        int bad = check_tokenizer(c, t, json_object_get(doc, "texts"), exp, name);
        CHECK_MSG(bad == 0, "%s: %d mismatches", name, bad);
        em_tokenizer_free(t);
    }
    em_ctx_free(c);
    json_decref(doc);
}

static void test_errors(void) {
    em_ctx *c = em_ctx_create();
    /* a GGUF without a tokenizer */
    em_gguf *g = em_gguf_open(c, em_test_fixture_path("gguf", "types.gguf"));
    CHECK(g && !em_tokenizer_from_gguf(c, g));
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "has no tokenizer");
    em_gguf_free(g);
    CHECK(!em_tokenizer_load(c, em_test_fixture_path("gguf", "malformed/bad_magic.gguf")));
    CHECK_ERR(c, EM_ERR_FORMAT, "GGUF");
    em_ctx_free(c);
}

static void test_real_smollm2(void) {
    const char *path = getenv("EMBER_SMOLLM2_GGUF");
    if (!path || access(path, R_OK)) {
        em_test_skip("the real SmolLM2-135M-Instruct GGUF is not here (%s); "
                     "scripts/fetch_smollm2.sh fetches it", path ? path : "EMBER_SMOLLM2_GGUF unset");
        return;
    }
    json_t *exp = load("real_smollm2_tokenizer.json");
    em_ctx *c = em_ctx_create();
    em_tokenizer *t = em_tokenizer_load(c, path);
    CHECK_MSG(t, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    json_t *e = json_object_get(json_object_get(exp, "tokenizers"), "smollm2");
    CHECK(e != NULL);
    if (t && e) CHECK(check_tokenizer(c, t, json_object_get(exp, "texts"), e, "smollm2") == 0);
    em_tokenizer_free(t);
    em_ctx_free(c);
    json_decref(exp);
}

EM_TEST_MAIN(T(test_synthetic), T(test_errors), T(test_real_smollm2))

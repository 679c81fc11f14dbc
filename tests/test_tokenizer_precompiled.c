/*
 * The "Precompiled" normalizer (a SentencePiece charsmap;
 * src/io/tokenizer/tokenizer_precompiled.c).
 *
 * The ids of the trained T5-style tokenizer norm_precompiled.json (a real nmt_nfkc charsmap,
 * scripts/gen_precompiled_fixtures.py) are checked on every text by test_tokenizer's fixture
 * loop; here its normalizer's output is checked against `tokenizers`' normalize_str on the same
 * texts (full-width letters, ligatures, accents precomposed and combining, compatibility
 * characters, odd spaces, controls, emoji, a long string), and hand-made charsmaps check the
 * trie walk and that malformed ones are refused (at load) or fail an encode, never read out of
 * bounds.
 */
#include <stdint.h>

#include "io/tokenizer/tokenizer_impl.h"
#include "tokenizer_expect.h"

static void test_normalized_strings(void) {
    json_t *texts = load_fixture_json("texts.json");
    json_t *exp = load_fixture_json("expected/norm_precompiled.json");
    char path[4096];
    fixture_path(path, sizeof path, "norm_precompiled.json");
    em_ctx *c = em_ctx_create();
    em_tokenizer *t = em_tokenizer_load(c, path);
    CHECK_MSG(t && texts && exp, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "fixtures");
    json_t *norm = json_object_get(exp, "normalized");
    CHECK(t == NULL || (t->normalizer && t->normalizer->type == TK_NORM_SEQUENCE &&
                        t->normalizer->children[0].type == TK_NORM_PRECOMPILED));
    size_t n = json_array_size(norm), same = 0;
    CHECK(n == json_array_size(texts) && n >= 25);
    tk_enc e = {.c = c, .t = t};
    for (size_t i = 0; t && i < n; i++) {
        json_t *tx = json_object_get(json_array_get(texts, i), "text");
        json_t *want = json_array_get(norm, i);
        tk_buf out = {0};
        bool lead = false;
        bool ok = tk_normalize(&e, t->normalizer, json_string_value(tx), json_string_length(tx),
                               &out, &lead);
        CHECK_MSG(ok, "text %zu: %s", i, em_ctx_error(c) ? em_ctx_error(c)->message : "?");
        const char *name = json_string_value(json_object_get(json_array_get(texts, i), "name"));
        if (ok && same_text("normalized", name, out.p ? out.p : "", out.len, want))
            same++;
        tk_buf_free(&out);
    }
    fprintf(stderr, "  norm_precompiled: %zu/%zu normalized texts equal tokenizers'\n", same, n);
    CHECK(same == n);
    tk_enc_free(&e);
    em_tokenizer_free(t);
    em_ctx_free(c);
    json_decref(texts);
    json_decref(exp);
}

/* ---- hand-made charsmaps ---- */

static void b64(const unsigned char *p, size_t n, char *out) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        out[o++] = A[w >> 18];
        out[o++] = A[(w >> 12) & 63];
        out[o++] = i + 1 < n ? A[(w >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? A[w & 63] : '=';
    }
    out[o] = 0;
}

static void put32(unsigned char *p, uint32_t v) {
    for (int k = 0; k < 4; k++) p[k] = (unsigned char)(v >> (8 * k));
}

/* A Darts trie of the one key "a" whose leaf value is `value`, then the strings `strs`
 * (strs_len bytes): the root's offset 1 leads to unit 1 ^ 'a' = 96 (label 'a', has_leaf,
 * offset 1), whose value unit is 96 ^ 1 = 97. `trie_size` overrides the size field when
 * nonzero; `cut` keeps only that many bytes. Only 98 units: 1 ^ 'b' = 99 is past the array,
 * where Ember stops the search (no match; the library would index out of bounds and panic).
 * Returns a tokenizer.json: that normalizer and a BPE over {a, b, ab}. */
static char *doc_with(uint32_t value, const char *strs, size_t strs_len, uint32_t trie_size,
                      size_t cut) {
    enum { UNITS = 98 };
    unsigned char raw[4 + 4 * UNITS + 16];
    memset(raw, 0, sizeof raw);
    put32(raw, trie_size ? trie_size : 4 * UNITS);
    put32(raw + 4 + 4 * 0, 1u << 10);
    put32(raw + 4 + 4 * 96, 'a' | 0x100u | (1u << 10));
    put32(raw + 4 + 4 * 97, value);
    memcpy(raw + 4 + 4 * UNITS, strs, strs_len);
    size_t n = 4 + 4 * UNITS + strs_len;
    if (cut) n = cut;
    char enc[2 * sizeof raw];
    b64(raw, n, enc);
    char *doc = malloc(8192);
    snprintf(doc, 8192,
             "{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":{\"type\":\"Sequence\","
             "\"normalizers\":[{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"%s\"}]},"
             "\"pre_tokenizer\":null,\"post_processor\":null,\"decoder\":null,\"model\":"
             "{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}}",
             enc);
    return doc;
}

static void test_handmade(void) {
    em_ctx *c = em_ctx_create();
    /* "a" -> "b": "aab" becomes "bbb" */
    char *doc = doc_with(0, "b\0", 2, 0, 0);
    em_tokenizer *t = em_tokenizer_load_json(c, doc, strlen(doc), "pc.json");
    CHECK_MSG(t != NULL, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    em_token *ids = NULL;
    size_t n = 0;
    if (t) {
        CHECK(em_tokenizer_encode(c, t, "aab", 3, false, &ids, &n) == EM_OK);
        CHECK(n == 3 && ids && ids[0] == 1 && ids[1] == 1 && ids[2] == 1);
        em_free(ids);
    }
    em_tokenizer_free(t);
    free(doc);
    /* a leaf value past the strings, or inside a character: the encode fails, nothing read */
    const struct {
        uint32_t value;
        const char *strs;
        size_t len;
    } bad_values[] = {{1000, "b\0", 2}, {3, "b\0", 2}, {1, "\xC3\xA9\0", 3}};
    for (size_t i = 0; i < 3; i++) {
        doc = doc_with(bad_values[i].value, bad_values[i].strs, bad_values[i].len, 0, 0);
        t = em_tokenizer_load_json(c, doc, strlen(doc), "pc.json");
        CHECK(t != NULL);
        ids = NULL;
        if (t) {
            CHECK(em_tokenizer_encode(c, t, "ba", 2, false, &ids, &n) != EM_OK);
            CHECK_ERR(c, EM_ERR_FORMAT, "Precompiled", "trie value");
        }
        em_free(ids);
        em_tokenizer_free(t);
        free(doc);
    }
    /* a value at the very end of the strings is the empty string: "a" is dropped */
    doc = doc_with(2, "b\0", 2, 0, 0);
    t = em_tokenizer_load_json(c, doc, strlen(doc), "pc.json");
    if (t && em_tokenizer_encode(c, t, "bab", 3, false, &ids, &n) == EM_OK) {
        CHECK(n == 2 && ids[0] == 1 && ids[1] == 1);
        em_free(ids);
    } else
        CHECK_MSG(false, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    em_tokenizer_free(t);
    free(doc);

    /* malformed charsmaps are refused at load, naming the file */
    const struct {
        uint32_t size;
        const char *strs;
        size_t len, cut;
        const char *needle;
    } bad[] = {
        {0, "b\0", 2, 3, "shorter than"},            /* 3 bytes */
        {4 * 98 + 8, "b\0", 2, 0, "past its end"},    /* trie size beyond the data */
        {6, "b\0", 2, 0, "multiple of 4"},
        {0xFFFFFFFCu, "b\0", 2, 0, "past its end"},
        {0, "ab", 2, 0, "NUL"},                        /* not terminated */
        {0, "\xFF\0", 2, 0, "UTF-8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        doc = doc_with(0, bad[i].strs, bad[i].len, bad[i].size, bad[i].cut);
        t = em_tokenizer_load_json(c, doc, strlen(doc), "pc.json");
        CHECK_MSG(t == NULL, "case %zu loaded", i);
        CHECK_ERR(c, EM_ERR_FORMAT, "pc.json", "precompiled_charsmap", bad[i].needle);
        em_tokenizer_free(t);
        free(doc);
    }
    const char *docs[] = {
        "{\"version\":\"1.0\",\"normalizer\":{\"type\":\"Precompiled\",\"precompiled_charsmap\":"
        "\"!!!!\"},\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}",
        "{\"version\":\"1.0\",\"normalizer\":{\"type\":\"Precompiled\",\"precompiled_charsmap\":"
        "\"AAAA=AAA\"},\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}",
        "{\"version\":\"1.0\",\"normalizer\":{\"type\":\"Precompiled\",\"precompiled_charsmap\":"
        "5},\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}",
        "{\"version\":\"1.0\",\"normalizer\":{\"type\":\"Precompiled\"},\"model\":{\"type\":"
        "\"BPE\",\"vocab\":{},\"merges\":[]}}",
        "{\"version\":\"1.0\",\"normalizer\":{\"type\":\"Precompiled\",\"precompiled_charsmap\":"
        "\"\"},\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}",
    };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        t = em_tokenizer_load_json(c, docs[i], strlen(docs[i]), "pc.json");
        CHECK_MSG(t == NULL, "doc %zu loaded", i);
        CHECK_ERR(c, EM_ERR_FORMAT, "pc.json", "precompiled_charsmap");
        em_tokenizer_free(t);
    }
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_normalized_strings), T(test_handmade))

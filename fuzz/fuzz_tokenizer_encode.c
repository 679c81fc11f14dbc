/*
 * Fuzzes encoding and decoding with fixed tokenizers: the fixture tokenizers of
 * tests/fixtures/tokenizers (found next to this file; the first input byte picks one), or an
 * embedded byte-level one when the fixtures are not there. The rest of the input is the text;
 * it is also decoded as a list of ids.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/core.h"
#include "ember/tokenizer.h"
#include "fuzz_util.h"

static const char embedded[] =
    "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":5,\"content\":\"<s>\",\"special\":true,"
    "\"normalized\":false,\"lstrip\":false,\"rstrip\":false,\"single_word\":false}],"
    "\"normalizer\":{\"type\":\"NFKC\"},\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":"
    "[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s*|\\\\p{L}+\"},\"behavior\":\"Isolated\","
    "\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"use_regex\":true}]},"
    "\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
    "\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"\xC4\xA0\":3,\"\xC4\xA0" "a\":4},\"merges\":[\"a b\","
    "\"\xC4\xA0 a\"]}}";

#define MAX_TOK 16
static em_tokenizer *toks[MAX_TOK];
static int n_toks;

static void load_all(void) {
    static const char *const names[] = {
        "bpe_bytelevel", "bpe_gemma_style", "bpe_llama2_style", "bpe_llama3_style",
        "wordpiece_bert", "unigram_metaspace", "unigram_byte_fallback", "wordlevel",
        "bpe_prefix_suffix", "bpe_byte_fallback_unk", "added_flags"};
    em_ctx *c = em_ctx_create();
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", __FILE__);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && n_toks < MAX_TOK; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/../tests/fixtures/tokenizers/%s.json", dir, names[i]);
        em_tokenizer *t = em_tokenizer_load(c, p);
        if (t) toks[n_toks++] = t;
        em_ctx_clear_error(c);
    }
    em_tokenizer *t = em_tokenizer_load_json(c, embedded, strlen(embedded), "embedded");
    if (!t) {
        fprintf(stderr, "embedded tokenizer: %s\n", em_ctx_error(c)->message);
        abort();
    }
    toks[n_toks++] = t;
    fprintf(stderr, "fuzz_tokenizer_encode: %d tokenizers\n", n_toks);
    em_ctx_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!n_toks) load_all();
    if (size < 1) return 0;
    em_tokenizer *t = toks[data[0] % n_toks];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    em_ctx *c = em_ctx_create();
    for (int sp = 0; sp < 2; sp++) {
        int32_t *ids;
        size_t n;
        if (em_tokenizer_encode(c, t, text, len, sp, &ids, &n) == EM_OK) {
            for (int skip = 0; skip < 2; skip++) {
                char *back = em_tokenizer_decode(c, t, ids, n, skip, NULL);
                if (!back) abort(); /* decoding ids the tokenizer made cannot fail */
                em_free(back);
            }
            em_free(ids);
        }
        em_ctx_clear_error(c);
    }
    /* the same bytes as ids */
    size_t n = len / 4;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    for (size_t i = 0; i < n; i++) {
        uint32_t v;
        memcpy(&v, text + 4 * i, 4);
        ids[i] = (int32_t)(v % 70000u) - 3;
    }
    char *back = em_tokenizer_decode(c, t, ids, n, data[0] & 1, NULL);
    em_free(back);
    free(ids);
    em_ctx_free(c);
    return 0;
}

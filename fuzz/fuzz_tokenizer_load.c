/* Fuzzes loading a tokenizer.json from arbitrary bytes, then uses whatever loaded: a few encodes
 * and decodes must run without crashing, whatever the components say. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ember/core.h"
#include "ember/tokenizer.h"
#include "fuzz_util.h"

static const char *const probes[] = {
    "", " ", "Hello world! It's 2024.", "  a\tb\n\nc  ", "caf\xC3\xA9 cafe\xCC\x81",
    "\xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", "<s>x</s>[CLS]<|im_start|>",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    em_ctx *c = em_ctx_create();
    em_tokenizer *t = em_tokenizer_load_json(c, (const char *)data, size, "fuzz.json");
    if (t) {
        for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
            int32_t *ids;
            size_t n;
            for (int sp = 0; sp < 2; sp++) {
                if (em_tokenizer_encode(c, t, probes[i], strlen(probes[i]), sp, &ids, &n) ==
                    EM_OK) {
                    char *text = em_tokenizer_decode(c, t, ids, n, sp, NULL);
                    em_free(text);
                    em_free(ids);
                }
                em_ctx_clear_error(c);
            }
        }
        int32_t some[8];
        size_t vs = em_tokenizer_vocab_size(t);
        for (int i = 0; i < 8; i++) some[i] = (int32_t)((size_t)(i * 7919) % (vs + 3)) - 1;
        char *text = em_tokenizer_decode(c, t, some, 8, false, NULL);
        em_free(text);
        for (int i = -1; i < 4; i++) em_tokenizer_id_to_token(t, i, NULL);
        em_tokenizer_token_to_id(t, "a", 1);
        em_tokenizer_chat_template(t, NULL);
        em_tokenizer_free(t);
    }
    em_ctx_free(c);
    return 0;
}

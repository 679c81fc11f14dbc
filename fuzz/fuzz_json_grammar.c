/* libFuzzer target: arbitrary bytes through JSON mode's recognizer (src/generate/json_grammar.c),
 * the way decoding feeds it: token by token. The first byte picks a split point; the verdict
 * must not depend on how the bytes are cut into tokens (the mask asks about whole tokens, the
 * answer grows token by token), and nothing may follow a complete object. */
#include "fuzz_util.h"
#include "generate/json_grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *text = (const char *)data + 1;
    size_t n = size - 1, cut = n ? data[0] % (n + 1) : 0;
    em_json_state whole, parts;
    em_json_init(&whole);
    em_json_init(&parts);
    bool ok_whole = em_json_feed(&whole, text, n);
    bool ok_parts = em_json_feed(&parts, text, cut) && em_json_feed(&parts, text + cut, n - cut);
    INVARIANT(ok_whole == ok_parts);
    if (ok_whole) {
        INVARIANT(em_json_complete(&whole) == em_json_complete(&parts));
        INVARIANT(whole.depth <= EM_JSON_MAX_DEPTH);
        if (em_json_complete(&whole)) {
            em_json_state after = whole;
            INVARIANT(!em_json_feed(&after, "}", 1) && !em_json_feed(&after, " ", 1));
        }
    }
    return 0;
}

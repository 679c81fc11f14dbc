/* libFuzzer target: arbitrary bytes as the JSON body of each OpenAI endpoint `ember serve`
 * parses (the first byte picks the endpoint). Either the body is refused with an OpenAI-style
 * error (an HTTP status, a type and a message), or the request is consistent: a chat has its
 * messages as JSON, a completion its prompt, values within the documented ranges. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "serve/request.h"
#include "fuzz_util.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    srv_kind kind = (srv_kind)(data[0] % 5);
    srv_request r;
    srv_error e;
    if (!srv_request_parse((const char *)data + 1, size - 1, kind, &r, &e)) {
        INVARIANT(e.http >= 400 && e.http < 600 && e.type && e.message[0]);
        return 0;
    }
    INVARIANT(r.kind == kind);
    if (kind == SRV_CHAT) {
        json_t *m = json_loads(r.messages_json, 0, NULL); /* what the template renders */
        INVARIANT(json_is_array(m) && json_array_size(m) > 0);
        json_decref(m);
    }
    if (kind == SRV_COMPLETION) INVARIANT(r.prompt != NULL);
    if (kind == SRV_TOKENIZE) INVARIANT(r.prompt != NULL || r.messages_json != NULL);
    if (kind == SRV_DETOKENIZE) INVARIANT(r.tokens != NULL);
    if (kind == SRV_EMBEDDINGS) {
        INVARIANT(r.n_inputs >= 1 && r.n_inputs <= SRV_MAX_INPUTS);
        for (size_t i = 0; i < r.n_inputs; i++) INVARIANT(r.inputs[i] && r.inputs[i][0]);
    }
    INVARIANT(r.max_tokens == -1 || r.max_tokens >= 1);
    INVARIANT(!r.has_temperature || (r.temperature >= 0 && r.temperature <= 2));
    INVARIANT(!r.has_top_p || (r.top_p > 0 && r.top_p <= 1));
    INVARIANT(r.top_k >= 0 && r.n_stop >= 0 && r.n_stop <= SRV_MAX_STOP);
    INVARIANT(r.logprobs >= -1 && r.logprobs <= 20);
    INVARIANT(kind > SRV_COMPLETION || (r.n >= 1 && r.n <= SRV_MAX_N));
    INVARIANT(r.presence_penalty >= -2 && r.presence_penalty <= 2 &&
              r.frequency_penalty >= -2 && r.frequency_penalty <= 2);
    for (int i = 0; i < r.n_stop; i++) INVARIANT(r.stop[i] && r.stop[i][0]);
    INVARIANT(!r.include_usage || r.stream);
    srv_request_free(&r);
    return 0;
}

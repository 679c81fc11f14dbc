/* Fuzzes the chat-template interpreter: the input is a template source, rendered over a fixed
 * conversation (tools, reasoning, unicode) with tight limits. It must never crash, hang or leak;
 * every failure must come back as an error in the context. The last input byte's low bit picks
 * add_generation_prompt. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "io/jinja/jinja.h"
#include "fuzz_util.h"

static const char *MESSAGES =
    "[{\"role\":\"system\",\"content\":\"You are {{ helpful }}.\"},"
    "{\"role\":\"user\",\"content\":\"Gr\\u00fc\\u00dfe \\u03a3\\u039f\\u03a6\\u039f\\u03a3 "
    "\\ud83d\\ude00 {% if x %} <b>&\"},"
    "{\"role\":\"assistant\",\"content\":\"<think>\\nhm\\n</think>\\n\\nok\","
    "\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
    "{\"a\":[1,2.5,null,true],\"b\":{\"c\":\"d\"}}}}]},"
    "{\"role\":\"tool\",\"content\":\"42\"},"
    "{\"role\":\"assistant\",\"content\":\"done\",\"reasoning_content\":\"why\"},"
    "{\"role\":\"user\",\"content\":\"  bye  \\n\",\"name\":null}]";

static const char *EXTRA =
    "{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"enable_thinking\":false,"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"type\":"
    "\"integer\"}}}}}}],\"n\":3,\"x\":1.5}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static em_ctx *c;
    if (!c) c = em_ctx_create();
    if (size > 64 * 1024) return 0;
    char *src = fuzz_text(data, size);
    if (!src) return 0;
    em_chat_template *t = em_chat_template_compile(c, src);
    if (t) {
        jinja_limits lim = jinja_default_limits();
        lim.max_output = 64 * 1024;
        lim.max_memory = 64u << 20;
        lim.max_steps = 200 * 1000;
        jinja_template_set_limits(t, &lim);
        bool agp = size && (data[size - 1] & 1);
        char *out = em_chat_template_render(c, t, MESSAGES, agp, EXTRA);
        if (!out && em_ctx_status(c) == EM_OK) abort(); /* a failure must say why */
        em_free(out);
        em_chat_template_free(t);
    } else if (em_ctx_status(c) == EM_OK) {
        abort();
    }
    if (em_ctx_status(c) == EM_ERR_INTERNAL) abort(); /* a bug in Ember */
    em_ctx_clear_error(c);
    free(src);
    return 0;
}

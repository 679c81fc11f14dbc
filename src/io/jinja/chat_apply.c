/* apply_chat_template: a tokenizer's chat template rendered with its special tokens. */
#include <jansson.h>
#include <stdlib.h>

#include "ember/chat.h"
#include "ember/tokenizer.h"

char *em_chat_template_apply(em_ctx *c, const em_tokenizer *tok, const char *messages_json,
                             bool add_generation_prompt, const char *extra_vars_json) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!tok || !messages_json) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "apply_chat_template", "tokenizer or messages is NULL");
        return NULL;
    }
    const char *src = em_tokenizer_chat_template(tok, NULL);
    if (!src) {
        em_ctx_fail(c, EM_ERR_NOT_FOUND, "apply_chat_template",
                    "the tokenizer has no chat template (tokenizer_config.json's chat_template or "
                    "chat_template.jinja)");
        return NULL;
    }
    json_t *vars = json_object();
    if (extra_vars_json) {
        json_error_t je;
        json_t *extra = json_loads(extra_vars_json, 0, &je);
        if (!json_is_object(extra)) {
            json_decref(extra);
            json_decref(vars);
            em_ctx_fail(c, EM_ERR_INVALID_ARG, "apply_chat_template",
                        "extra variables are not a JSON object (%s)", je.text);
            return NULL;
        }
        json_object_update(vars, extra);
        json_decref(extra);
    }
    static const struct {
        em_special_token which;
        const char *name;
    } specials[] = {{EM_SPECIAL_BOS, "bos_token"}, {EM_SPECIAL_EOS, "eos_token"},
                    {EM_SPECIAL_PAD, "pad_token"}, {EM_SPECIAL_UNK, "unk_token"},
                    {EM_SPECIAL_SEP, "sep_token"}, {EM_SPECIAL_CLS, "cls_token"},
                    {EM_SPECIAL_MASK, "mask_token"}};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
        const char *v = em_tokenizer_special_token(tok, specials[i].which);
        if (v && !json_object_get(vars, specials[i].name))
            json_object_set_new(vars, specials[i].name, json_string(v));
    }
    char *vj = json_dumps(vars, JSON_COMPACT);
    json_decref(vars);
    em_chat_template *t = vj ? em_chat_template_compile(c, src) : NULL;
    char *out = t ? em_chat_template_render(c, t, messages_json, add_generation_prompt, vj) : NULL;
    em_chat_template_free(t);
    free(vj);
    return out;
}

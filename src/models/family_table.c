/* The families Ember loads, by config.json model_type. */
#include <string.h>

#include "models/model_impl.h"

extern const em_family em_family_qwen3, em_family_qwen3_moe, em_family_llama, em_family_mistral,
    em_family_mixtral, em_family_gemma3_text, em_family_gemma4_text, em_family_bert,
    em_family_qwen2;

static const em_family *const families[] = {
    &em_family_qwen3,       &em_family_qwen3_moe,   &em_family_llama,       &em_family_mistral,
    &em_family_mixtral,     &em_family_gemma3_text, &em_family_gemma4_text, &em_family_bert,
    &em_family_qwen2,
};

const em_family *em_family_find(const char *model_type) {
    if (!model_type) return NULL;
    if (!strcmp(model_type, "gemma3")) model_type = "gemma3_text";
    if (!strcmp(model_type, "gemma4")) model_type = "gemma4_text";
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (!strcmp(families[i]->model_type, model_type)) return families[i];
    return NULL;
}

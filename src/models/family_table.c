/* The families Ember loads: the one table that config reading (model_config.c), model loading
 * and its error messages consult. A new family is a file in src/models/
 * (its em_family) and a row here. */
#include <stdio.h>
#include <string.h>

#include "models/model_impl.h"

extern const em_family em_family_qwen2, em_family_qwen3, em_family_qwen3_moe, em_family_llama,
    em_family_mistral, em_family_mixtral, em_family_gemma3_text, em_family_gemma4_text,
    em_family_bert;

static const em_family *const families[] = {
    &em_family_qwen2,       &em_family_qwen3,       &em_family_qwen3_moe,
    &em_family_llama,       &em_family_mistral,     &em_family_mixtral,
    &em_family_gemma3_text, &em_family_gemma4_text, &em_family_bert,
};
#define N_FAMILIES (sizeof families / sizeof families[0])

const em_family *em_family_find(const char *model_type) {
    if (!model_type) return NULL;
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (!strcmp(families[i]->config.model_type, model_type) ||
            (families[i]->config.multimodal && !strcmp(families[i]->config.multimodal, model_type)))
            return families[i];
    return NULL;
}

void em_family_names(char *buf, size_t n) {
    size_t k = 0, count = 0, total = 0;
    for (size_t i = 0; i < N_FAMILIES; i++) total += families[i]->config.multimodal ? 2 : 1;
    if (n) buf[0] = 0;
    for (size_t i = 0; i < N_FAMILIES; i++)
        for (int j = 0; j < 2; j++) {
            const em_cfg_family *f = &families[i]->config;
            const char *name = j ? f->multimodal : f->model_type;
            if (!name) continue;
            count++;
            const char *sep = count == 1 ? "" : count == total ? " and " : ", ";
            int w = snprintf(buf + k, k < n ? n - k : 0, "%s%s", sep, name);
            if (w > 0) k += (size_t)w;
        }
}

const em_gguf_arch *em_family_gguf_arch(em_ctx *c, const char *op, const em_gguf *g) {
    const char *a = em_gguf_get_str(g, "general.architecture", NULL);
    char names[256];
    size_t k = 0, total = 0, count = 0;
    for (size_t i = 0; i < N_FAMILIES; i++) {
        const em_gguf_arch *r = &families[i]->gguf;
        if (!r->gguf) continue;
        if (a && !strcmp(a, r->gguf)) return r;
        total++;
    }
    names[0] = 0;
    for (size_t i = 0; i < N_FAMILIES; i++) {
        const char *n = families[i]->gguf.gguf;
        if (!n) continue;
        count++;
        int w = snprintf(names + k, k < sizeof names ? sizeof names - k : 0, "%s%s",
                         count == 1 ? "" : count == total ? " and " : ", ", n);
        if (w > 0) k += (size_t)w;
    }
    em_ctx_fail(c, EM_ERR_UNSUPPORTED, op,
                "%s: general.architecture \"%s\" is not supported (Ember reads %s GGUF files)",
                em_gguf_path(g), a ? a : "(missing)", names);
    return NULL;
}

/* libFuzzer target: arbitrary bytes as a user's tensor-parallel plan override (`--tp-plan FILE`,
 * em_model_options.tp_plan), merged over each decoder family's plan. The first byte picks the
 * family. Either the text is refused with a message and the model keeps its family's plan, or
 * the merged plan is a NULL-terminated list of patterns and rule names, every one non-empty, and
 * every pattern of the family's plan is still in it (the user's rules replace, never drop). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "fuzz_util.h"
#include "models/model_impl.h"

static const char *const families[] = {"llama", "mistral", "mixtral",      "qwen2",
                                       "qwen3", "qwen3_moe", "gemma3_text", "gemma4_text"};

static bool has_pattern(const em_tp_rule *plan, const char *pattern) {
    for (const em_tp_rule *r = plan; r->pattern; r++)
        if (!strcmp(r->pattern, pattern)) return true;
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *type = families[data[0] % (sizeof families / sizeof *families)];
    const em_family *fam = em_family_find(type);
    INVARIANT(fam && fam->tp_plan);
    char *text = fuzz_text(data + 1, size - 1);
    em_ctx *c = em_ctx_create();
    em_model *m = calloc(1, sizeof *m);
    if (!text || !c || !m) goto out;
    snprintf(m->cfg.model_type, sizeof m->cfg.model_type, "%s", type);
    m->fam = fam;
    m->tp_size = 2;
    if (em_tp_plan_apply(c, m, text) == EM_OK) {
        const em_tp_rule *plan = em_tp_plan_of(m);
        INVARIANT(plan);
        for (const em_tp_rule *r = plan; r->pattern; r++)
            INVARIANT(r->pattern[0] && r->style && r->style[0]);
        for (const em_tp_rule *r = fam->tp_plan; r->pattern; r++)
            INVARIANT(has_pattern(plan, r->pattern));
    } else {
        INVARIANT(em_ctx_error(c) && em_ctx_error(c)->message[0]);
        INVARIANT(m->tp_rules == NULL);
        em_ctx_clear_error(c);
    }
out:
    if (m) free(m->tp_rules);
    free(m);
    em_ctx_free(c);
    free(text);
    return 0;
}

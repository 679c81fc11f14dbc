/*
 * User overrides of a tensor-parallel plan (em_model_options.tp_plan, `ember ... --tp-plan
 * FILE`): a JSON object mapping module patterns to transformers' rule names, merged over the
 * family's plan as transformers merges DistributedConfig(tp_plan={...}) over
 * base_model_tp_plan: the rules it names replace the family's, the others are kept.
 *
 * Ember's decoder places its collectives at fixed points (after o_proj, after the MLP or MoE
 * block, after the embedding when it is split, after lm_head), so an override may change only
 * what those points allow: the embedding (embedding_rowwise or replicate) and lm_head
 * (colwise_gather_output or replicate); every other pattern may restate the family's rule but
 * not change it. Anything else is refused naming the pattern and the rule. Under SPMD
 * (em_model_options.spmd) the rules are only shardings and XLA's partitioner places the
 * collectives, so any rule Ember runs may go on any module pattern.
 */
#include <stdlib.h>
#include <string.h>

#include "io/config/config_impl.h"
#include "models/model_impl.h"

#define OP "model_load"

/* transformers' rule names (ALL_PARALLEL_STYLES, 5.24) that Ember does not run */
static const char *const not_done[] = {"embedding_colwise", "colwise_rep",  "rowwise_split_input",
                                       "rowwise_rep",       "packed_rowwise", "sequence_parallel",
                                       "mla_kv_a_proj",     "all_reduce",   "moe_identity_expert",
                                       "local_params",      NULL};
/* the ones it runs (grouped_gemm and ep_dispatch_experts belong to the expert-parallel plan) */
static const char *const done[] = {"colwise",
                                   "rowwise",
                                   "packed_colwise",
                                   "colwise_gather_output",
                                   "replicated_with_grad_allreduce",
                                   "embedding_rowwise",
                                   "moe_tp_experts",
                                   "replicate",
                                   NULL};

static int index_of(const char *const *list, const char *s) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], s)) return i;
    return -1;
}

/* "layers.*.self_attn.q_proj": dot-separated names of [A-Za-z0-9_], "*" a whole component */
static bool pattern_ok(const char *p) {
    if (!*p) return false;
    for (const char *s = p; *s; s++) {
        bool start = s == p || s[-1] == '.';
        if (*s == '.') {
            if (start || !s[1]) return false;
        } else if (*s == '*') {
            if (!start || (s[1] && s[1] != '.')) return false;
        } else if (!(*s == '_' || (*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z') ||
                     (*s >= 'A' && *s <= 'Z'))) {
            return false;
        }
    }
    return true;
}

static const em_tp_rule *family_rule(const em_tp_rule *plan, const char *pattern) {
    for (const em_tp_rule *r = plan; r->pattern; r++)
        if (!strcmp(r->pattern, pattern)) return r;
    return NULL;
}

/* One override: refused unless Ember's decoder can run it (see the file comment). */
static em_status check_rule(em_ctx *c, const em_model *m, const char *pattern, const char *rule) {
    const char *fam = m->cfg.model_type;
    if (!pattern_ok(pattern))
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "tp_plan: pattern '%s' is not a module "
                           "pattern (dot-separated names, '*' for a whole layer index, as in "
                           "'layers.*.self_attn.q_proj')", pattern);
    if (index_of(not_done, rule) >= 0)
        return em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP, "tp_plan: '%s': the rule '%s' is "
                           "transformers' but not done in Ember", pattern, rule);
    if (index_of(done, rule) < 0)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "tp_plan: '%s': '%s' is not a rule name "
                           "(transformers' names Ember runs: colwise, rowwise, packed_colwise, "
                           "colwise_gather_output, replicated_with_grad_allreduce, "
                           "embedding_rowwise, moe_tp_experts, replicate)", pattern, rule);
    /* SPMD: the rules are shardings and XLA places the collectives, so any rule Ember runs
     * may go on any module */
    if (m->spmd_parts > 1) return EM_OK;
    if (!strcmp(pattern, "embed_tokens")) {
        if (strcmp(rule, "embedding_rowwise") && strcmp(rule, "replicate"))
            return em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP, "tp_plan: 'embed_tokens' takes "
                               "'embedding_rowwise' or 'replicate', not '%s'", rule);
        return EM_OK;
    }
    if (!strcmp(pattern, "lm_head")) {
        if (strcmp(rule, "colwise_gather_output") && strcmp(rule, "replicate"))
            return em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP, "tp_plan: 'lm_head' takes "
                               "'colwise_gather_output' or 'replicate', not '%s'", rule);
        return EM_OK;
    }
    const em_tp_rule *f = family_rule(m->fam->tp_plan, pattern);
    if (!f)
        return em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP, "tp_plan: pattern '%s' is not in the %s "
                           "family's plan; Ember's decoder can change only 'embed_tokens' and "
                           "'lm_head' (its collectives sit at fixed points)", pattern, fam);
    if (strcmp(f->style, rule))
        return em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP, "tp_plan: '%s' is '%s' in the %s "
                           "family's plan and Ember's decoder places its collectives by it: '%s' "
                           "is not done there (only 'embed_tokens' and 'lm_head' can change)",
                           pattern, f->style, fam, rule);
    return EM_OK;
}

em_status em_tp_plan_apply(em_ctx *c, em_model *m, const char *text) {
    if (m->tp_size <= 1 && m->spmd_parts <= 1) return EM_OK;
    /* a family without a plan (BERT, whose loader has no tp step) is refused here, at once */
    if (!m->fam->tp_plan) return em_tp_check(c, m);
    if (!text) return EM_OK;
    json_t *root;
    if (em_cfg_parse_text(c, OP, text, strlen(text), "tp_plan", &root)) return em_ctx_status(c);
    if (json_object_size(root) == 0) {
        json_decref(root);
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "tp_plan: an empty plan applies no rule "
                           "(every weight whole on every rank): load without tensor "
                           "parallelism instead");
    }
    size_t nf = 0, extra = 0;
    while (m->fam->tp_plan[nf].pattern) nf++;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!json_is_string(v)) { /* the message first: key and v die with root */
            em_ctx_fail(c, EM_ERR_FORMAT, OP, "tp_plan: '%s' maps to %s, not a rule name (a "
                        "string)", key, em_cfg_kind(v));
            json_decref(root);
            return em_ctx_status(c);
        }
        if (check_rule(c, m, key, json_string_value(v))) {
            json_decref(root);
            return em_ctx_status(c);
        }
        if (!family_rule(m->fam->tp_plan, key)) extra++;
    }
    /* the merged plan: the user's rules first (a pattern of theirs replaces the family's), then
     * the family's others; the strings are copied into one block after the rules */
    size_t n = nf + extra, bytes = (n + 1) * sizeof(em_tp_rule);
    json_object_foreach(root, key, v) bytes += strlen(key) + strlen(json_string_value(v)) + 2;
    em_tp_rule *rules = calloc(1, bytes);
    if (!rules) {
        json_decref(root);
        return em_ctx_fail(c, EM_ERR_OOM, OP, "tp_plan: out of memory");
    }
    char *s = (char *)(rules + n + 1);
    size_t k = 0;
    json_object_foreach(root, key, v) {
        const char *style = json_string_value(v);
        size_t a = strlen(key) + 1, b = strlen(style) + 1;
        rules[k].pattern = memcpy(s, key, a);
        rules[k++].style = memcpy(s + a, style, b);
        s += a + b;
    }
    for (size_t i = 0; i < nf; i++)
        if (!json_object_get(root, m->fam->tp_plan[i].pattern)) rules[k++] = m->fam->tp_plan[i];
    json_decref(root);
    free(m->tp_rules);
    m->tp_rules = rules;
    return EM_OK;
}

const em_tp_rule *em_tp_plan_of(const em_model *m) {
    return m->tp_rules ? m->tp_rules : m->fam->tp_plan;
}

/*
 * The placement report of tensor parallelism: per rule of the plan, the weights it placed, the
 * slice a rank holds (as a formula in the rank r) and the bytes per rank; said so when KV heads
 * are replicated. Filled by em_tp_shard as the weights load; `ember generate --tp N` prints it.
 * Every split divides evenly (em_tp_check), so every rank holds the same bytes per rule.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model_impl.h"

struct em_tp_place {
    const em_tp_rule *rule; /* NULL: the weights no rule names (replicated) */
    int64_t tensors, bytes;
    char slice[128];        /* of the rule's first weight */
};

static em_tp_place *entry(em_model *m, const em_tp_rule *rule) {
    for (int i = 0; i < m->n_tp_place; i++)
        if (m->tp_place[i].rule == rule) return &m->tp_place[i];
    em_tp_place *p = realloc(m->tp_place, (size_t)(m->n_tp_place + 1) * sizeof *p);
    if (!p) return NULL;
    m->tp_place = p;
    p = &p[m->n_tp_place++];
    memset(p, 0, sizeof *p);
    p->rule = rule;
    return p;
}

void em_tp_record(em_model *m, const em_tp_rule *rule, const char *slice, int64_t bytes) {
    if (m->tp_size <= 1) return;
    em_tp_place *p = entry(m, rule);
    if (!p) return; /* out of memory: the report is only a report */
    if (!p->tensors++) snprintf(p->slice, sizeof p->slice, "%s", slice);
    p->bytes += bytes;
}

void em_tp_report_free(em_model *m) {
    free(m->tp_place);
    m->tp_place = NULL;
    m->n_tp_place = 0;
}

/* the plan's module rules (moe_tp_experts, ep_dispatch_experts): no weight, a reduction */
static void modules(const em_model *m, const em_tp_rule *plan, char *buf, size_t n, size_t *u) {
    for (const em_tp_rule *r = plan; r && r->pattern; r++)
        if (!strcmp(r->style, "moe_tp_experts") || !strcmp(r->style, "ep_dispatch_experts")) {
            bool used = false; /* only the module rules of this checkpoint's naming */
            size_t k = strlen(r->pattern);
            for (int i = 0; i < m->n_tp_place && !used; i++)
                used = m->tp_place[i].rule && !strncmp(m->tp_place[i].rule->pattern, r->pattern, k) &&
                       m->tp_place[i].rule->pattern[k] == '.';
            if (used && *u < n)
                *u += (size_t)snprintf(buf + *u, n - *u, "  %-40s %-30s %s\n", r->pattern,
                                       r->style, "the block's partial outputs summed with "
                                       "all_reduce; the router replicated");
        }
}

int em_model_tp_placement(const em_model *m, char *buf, size_t n) {
    if (!buf || !n) return 0;
    buf[0] = 0;
    if (!m || m->tp_size <= 1) return 0;
    size_t u = 0;
    int64_t total = 0;
#define PUT(...) (u < n ? (u += (size_t)snprintf(buf + u, n - u, __VA_ARGS__)) : u)
    PUT("tensor parallelism: degree %d%s; per rank r = 0..%d (rank %d's bytes; every rank "
        "holds the same):\n", m->tp_size, m->tp_ep ? ", experts by expert parallelism" : "",
        m->tp_size - 1, m->tp_rank);
    PUT("  %-40s %-30s %7s  %-44s %s\n", "pattern", "rule", "tensors", "slice of rank r",
        "bytes/rank");
    for (int pass = 0; pass < 2; pass++) /* the plan's rules, then the replicated rest */
        for (int i = 0; i < m->n_tp_place; i++) {
            const em_tp_place *p = &m->tp_place[i];
            if ((p->rule == NULL) != (pass == 1)) continue;
            PUT("  %-40s %-30s %7lld  %-44s %lld\n",
                p->rule ? p->rule->pattern : "(every other weight)",
                p->rule ? p->rule->style : "replicated", (long long)p->tensors, p->slice,
                (long long)p->bytes);
            total += p->bytes;
        }
    modules(m, m->tp_ep ? m->fam->ep_plan : em_tp_plan_of(m), buf, n, &u);
    if (em_tp_kv_replicated(m))
        PUT("  KV heads replicated: %lld KV heads for degree %d: rank r keeps KV head "
            "r / %lld (its query heads read it), each held by %lld ranks\n",
            (long long)m->tp_kv_parts, m->tp_size, (long long)(m->tp_size / m->tp_kv_parts),
            (long long)(m->tp_size / m->tp_kv_parts));
    PUT("  total per rank: %lld bytes\n", (long long)total);
#undef PUT
    return (int)(u < n ? u : n - 1);
}

/*
 * SPMD on PJRT devices (issue 18, lowering (b)): a decoder loaded whole on xla:0 with
 * em_model_options.spmd = N; its compiled steps are written at global shapes, the weights
 * annotated with the family's tensor-parallel plan as shardings (colwise rows, rowwise columns,
 * the vocabulary rows of the embedding and LM head, KV caches by head), compiled with
 * num_partitions = N and use_spmd_partitioning, and run with each device's tiles in one launch.
 * Checked per family at degree 2 (qwen3 at 4 too, its 2 KV heads replicated):
 *  - the compiled logits within 1e-4 of transformers' (tests/fixtures/models/FAMILY_ref) and
 *    1e-5 of the same model's eager, unpartitioned forward;
 *  - compiled greedy generation (prefill and decode programs, the KV cache written back whole
 *    after each step) gives transformers' tokens;
 *  - the collectives XLA's partitioner put in the optimised program are the plan's, the ones
 *    the replica-mode program has (test_pjrt_tp): an all-reduce after the vocab-parallel
 *    embedding and after o_proj and the MLP of each layer (2 L + 1) and one all-gather of the
 *    logits, nothing else, so a partitioning that gathered whole weights or activations fails
 *    (with KV heads fewer than the devices, also the 2 per layer of the new keys and values
 *    that XLA gathers among the devices sharing a KV head).
 * Skipped, loudly, without XLA's CPU plugin.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

/* The programs the executable cache held before a case (their reports' addresses, which stay
 * put while the cache lives), so a case checks only the programs it compiled. */
#define MAX_SEEN 4096
typedef struct seen_set {
    const em_pjrt_program_report *p[MAX_SEEN];
    int n;
} seen_set;

static int note_seen(const em_pjrt_program_report *r, void *user) {
    seen_set *s = user;
    if (s->n < MAX_SEEN) s->p[s->n++] = r;
    return 0;
}

static bool was_seen(const seen_set *s, const em_pjrt_program_report *r) {
    for (int i = 0; i < s->n; i++)
        if (s->p[i] == r) return true;
    return false;
}

typedef struct counts {
    const seen_set *before;
    char tag[48]; /* "SPMD over N partitions": the programs of this degree */
    int programs, wrong;
    int want_ar, want_ar_hi, want_ag; /* all-reduces in [want_ar, want_ar_hi] */
    bool any_cp;  /* MoE: collective-permutes allowed (counted) */
    int cp;
    char first_wrong[400];
} counts;

static int check_report(const em_pjrt_program_report *r, void *user) {
    counts *k = user;
    if (!strstr(r->what, k->tag) || was_seen(k->before, r)) return 0;
    k->programs++;
    bool ok = r->all_reduces >= k->want_ar && r->all_reduces <= k->want_ar_hi &&
              r->all_gathers == k->want_ag &&
              r->reduce_scatters == 0 && r->all_to_alls == 0 &&
              (k->any_cp || r->collective_permutes == 0);
    if (r->collective_permutes > k->cp) k->cp = r->collective_permutes;
    if (!ok && !k->wrong++)
        snprintf(k->first_wrong, sizeof k->first_wrong,
                 "%s: %d all-reduce, %d all-gather, %d reduce-scatter, %d all-to-all, %d "
                 "collective-permute; the plan has %d all-reduce and %d all-gather",
                 r->what, r->all_reduces, r->all_gathers, r->reduce_scatters, r->all_to_alls,
                 r->collective_permutes, k->want_ar, k->want_ag);
    return 0;
}

static seen_set before; /* (large: not on the stack) */

/* want_ar: the all-reduces the plan implies, -1 for the family's own plan (2 L + 1); ep: the
 * experts split by expert (em_model_options.ep_size) */
static void check_family_plan(const char *family, int parts, const char *plan, int want_ar,
                              int ep) {
    em_ctx *c = em_ctx_create();
    if (!em_test_xla_or_skip(c)) {
        em_ctx_free(c);
        return;
    }
    char rel[128], dir[1024], what[160];
    snprintf(rel, sizeof rel, "models/%s_ref", family);
    em_test_bundle *b = em_test_bundle_load(rel);
    CHECK(b != NULL);
    snprintf(dir, sizeof dir, "%s/models/%s", em_test_fixtures_dir(), family);
    em_model_options o = em_model_default_options();
    o.dtype = EM_F32;
    o.progress = false;
    o.offline = true;
    o.device = "xla:0";
    o.spmd = parts;
    o.tp_plan = plan;
    o.ep_size = ep;
    em_model *m = b ? em_model_load(c, dir, &o) : NULL;
    CHECK_MSG(m != NULL, "%s: load: %s", family, em_ctx_status(c) ? em_ctx_error(c)->message : "");
    if (!m) {
        em_test_bundle_free(b);
        em_ctx_free(c);
        return;
    }
    em_device *x0 = em_device_get(c, "xla:0");
    before.n = 0;
    em_pjrt_reports(x0, note_seen, &before);
    em_scope_push(c);
    em_tensor *ids = em_test_bundle_get(b, c, "ids");
    em_tensor *eager = em_model_forward(c, m, ids, NULL, NULL, false);
    em_kv_cache *kv = em_kv_cache_create(c, m, em_tensor_dim(ids, 0), em_tensor_dim(ids, 1) + 8);
    em_model_compiled *mc = kv ? em_model_compile(c, m, kv, 0) : NULL;
    em_tensor *lg = mc ? em_model_forward_compiled(c, mc, ids, NULL, false) : NULL;
    snprintf(what, sizeof what, "%s SPMD over %d devices: logits f32", family, parts);
    CHECK_MSG(eager && lg, "%s: %s", what, em_ctx_status(c) ? em_ctx_error(c)->message : "");
    if (eager && lg) {
        CHECK(em_test_allclose(c, lg, em_test_bundle_get(b, c, "logits_f32"), 1e-4, 1e-4, what));
        snprintf(what, sizeof what, "%s SPMD over %d devices: against the eager forward",
                 family, parts);
        CHECK(em_test_allclose(c, lg, eager, 1e-5, 1e-5, what));
    }
    em_model_compiled_free(mc);
    em_kv_cache_free(kv);
    /* greedy generation, compiled: prefill and decode programs over the devices */
    char why[1700];
    CHECK_MSG(em_test_greedy_matches(c, m, b, true, why, sizeof why), "%s SPMD over %d "
              "devices: %s", family, parts, why);
    em_scope_pop(c);
    /* the collectives XLA's partitioner inserted */
    const em_model_config *cfg = em_model_config_get(m);
    int layers = (int)cfg->num_hidden_layers;
    /* KV heads fewer than the devices: their projections are whole on every device, and XLA
     * computes each layer's new keys and values split over the devices that share a KV head
     * and all-gathers them there (2 per layer, [T, B, 1, D] each); the rank plan computes them
     * whole on each rank instead */
    int kv_gathers = cfg->num_key_value_heads % parts ? 2 * layers : 0;
    /* MoE: the fused gate/up stack [E, 2I, H] cannot be tiled so that each device keeps its
     * slice of both halves (packed_colwise), so it stays whole and XLA moves part of the
     * routed rows' intermediate between the devices with collective-permutes (measured: 1 per
     * layer for qwen3_moe, 2 for mixtral, [rows, I/2] each); counted, not limited */
    int ar = want_ar >= 0 ? want_ar : 2 * layers + 1;
    /* expert parallelism: no collective-permute (whole experts per device), and XLA may reduce
     * a layer's expert outputs in two parts in the prefill (measured: one more all-reduce in
     * some layers) */
    counts k = {&before, "", 0, 0, ar, ep ? ar + layers : ar, 1 + kv_gathers,
                cfg->num_experts > 0 && !ep, 0, ""};
    snprintf(k.tag, sizeof k.tag, "SPMD over %d partitions", parts);
    em_pjrt_reports(x0, check_report, &k);
    CHECK_MSG(k.programs >= 2, "%s: %d SPMD programs in the cache, want the forward, the "
              "prefill and the decode step", family, k.programs);
    CHECK_MSG(k.wrong == 0, "%s: %d of %d SPMD programs: %s", family, k.wrong, k.programs,
              k.first_wrong);
    printf("%s%s: %d SPMD programs over %d devices, each with %d%s all-reduce and %d all-gather "
           "(at most %d collective-permute)\n", family, ep ? " (experts split by expert)" : "",
           k.programs, parts, k.want_ar, ep ? "+" : "", k.want_ag, k.cp);
    em_model_free(m);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

static void check_family(const char *family, int parts) {
    check_family_plan(family, parts, NULL, -1, 0);
}

static void test_llama(void) { check_family("llama", 2); }
static void test_mistral(void) { check_family("mistral", 2); }
static void test_qwen2(void) { check_family("qwen2", 2); }
static void test_qwen3(void) { check_family("qwen3", 2); }
/* 4 devices, 2 KV heads: the KV projections and caches replicated, as the rank plan does */
static void test_qwen3_degree4(void) { check_family("qwen3", 4); }
static void test_gemma3(void) { check_family("gemma3_text", 2); }
static void test_gemma4(void) { check_family("gemma4_text", 2); }
/* Gemma 4's MoE layers reduce the dense MLP and the experts apart (3 per layer in the rank
 * plan); XLA's all-reduce combiner puts the two into one two-operand all-reduce instruction,
 * so the program shows 2 L + 1 instructions for the plan's 3 L + 1 reductions */
static void test_gemma4_moe(void) { check_family("gemma4", 2); }
static void test_qwen3_moe(void) { check_family("qwen3_moe", 2); }
static void test_mixtral(void) { check_family("mixtral", 2); }
/* expert parallelism's plan as shardings: whole experts per device (grouped_gemm, the stacks
 * split by expert), so no collective-permute */
static void test_moe_ep(void) {
    check_family_plan("qwen3_moe", 2, NULL, -1, 2);
    check_family_plan("mixtral", 2, NULL, -1, 2);
    check_family_plan("gemma4", 2, NULL, -1, 2);
}
/* a user's plan: the attention whole on every device (as transformers' Gemma 4 expert-parallel
 * plan keeps it), which the rank decoder cannot run; under SPMD the rules are only shardings:
 * one all-reduce per layer fewer (the embedding's and the MLPs': L + 1) */
static void test_plan_attention_replicated(void) {
    check_family_plan("qwen3", 2,
                      "{\"layers.*.self_attn.q_proj\": \"replicate\", "
                      "\"layers.*.self_attn.k_proj\": \"replicate\", "
                      "\"layers.*.self_attn.v_proj\": \"replicate\", "
                      "\"layers.*.self_attn.o_proj\": \"replicate\"}",
                      3, 0);
}

/* Refusals: SPMD with a device group, on the CPU, over more devices than the plugin has. */
static void test_refused(void) {
    em_ctx *c = em_ctx_create();
    if (!em_test_xla_or_skip(c)) {
        em_ctx_free(c);
        return;
    }
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/qwen3", em_test_fixtures_dir());
    em_model_options o = em_model_default_options();
    o.dtype = EM_F32;
    o.progress = false;
    o.offline = true;
    o.spmd = 2;
    o.device = "cpu";
    em_model *m = em_model_load(c, dir, &o);
    CHECK(m != NULL);
    em_kv_cache *kv = m ? em_kv_cache_create(c, m, 1, 16) : NULL;
    em_model_compiled *mc = kv ? em_model_compile(c, m, kv, 0) : NULL;
    em_scope_push(c);
    em_tensor *ids = em_from_host(c, EM_I64, 2, (int64_t[]){1, 2}, (int64_t[]){1, 2});
    CHECK(mc && !em_model_forward_compiled(c, mc, ids, NULL, false));
    CHECK_MSG(em_ctx_status(c) && strstr(em_ctx_error(c)->message, "runs on PJRT devices"),
              "%s", em_ctx_status(c) ? em_ctx_error(c)->message : "no error");
    em_ctx_clear_error(c);
    em_scope_pop(c);
    em_model_compiled_free(mc);
    em_kv_cache_free(kv);
    em_model_free(m);
    o.device = "xla:0";
    o.spmd = 16; /* the test process gives XLA's CPU plugin 4 devices */
    m = em_model_load(c, dir, &o);
    kv = m ? em_kv_cache_create(c, m, 1, 16) : NULL;
    mc = kv ? em_model_compile(c, m, kv, 0) : NULL;
    em_scope_push(c);
    ids = em_from_host(c, EM_I64, 2, (int64_t[]){1, 2}, (int64_t[]){1, 2});
    ids = em_to(c, ids, em_device_get(c, "xla:0"));
    CHECK(mc && !em_model_forward_compiled(c, mc, ids, NULL, false));
    CHECK_MSG(em_ctx_status(c) && strstr(em_ctx_error(c)->message, "the plugin has 4 devices"),
              "%s", em_ctx_status(c) ? em_ctx_error(c)->message : "no error");
    em_ctx_clear_error(c);
    em_scope_pop(c);
    em_model_compiled_free(mc);
    em_kv_cache_free(kv);
    em_model_free(m);
    em_ctx_free(c);
}

int main(int argc, char **argv) {
    setenv("EMBER_PJRT_OPTIONS", "cpu_device_count=4", 0);
    static const em_test_case tests[] = {T(test_llama),  T(test_mistral),       T(test_qwen2),
                                         T(test_qwen3),  T(test_qwen3_degree4), T(test_gemma3),
                                         T(test_gemma4),    T(test_gemma4_moe),
                                         T(test_qwen3_moe), T(test_mixtral), T(test_moe_ep),
                                         T(test_plan_attention_replicated), T(test_refused)};
    return em_test_run(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
}

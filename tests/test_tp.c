/*
 * Tensor parallelism of the decoder families over MPI (tests/CMakeLists.txt runs it under
 * `mpirun -np 2` and `-np 4`; at 4 the test checkpoints' 2 KV heads are each replicated on 2
 * ranks): each rank loads its slices by the family's plan; the logits must match
 * transformers' (tests/fixtures/models/<family>_ref, scripts/gen_model_fixtures.py) within 1e-4
 * in f32, eagerly and compiled, and greedy decoding must give transformers' tokens. Alone (a
 * world of one) it checks the same without splitting.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

static em_dist *G;

static em_moe_impl Impl = EM_MOE_RAGGED;
static const char *Plan; /* em_model_options.tp_plan of the split model */

static em_model *load(em_ctx *c, const char *family, em_dist *tp, int ep) {
    em_model_options o = em_model_default_options();
    o.moe_impl = Impl;
    o.dtype = EM_F32;
    o.tp = tp;
    o.ep_size = tp ? ep : 0;
    o.tp_plan = tp ? Plan : NULL;
    return em_test_load_fixture_model(c, family, &o);
}

/* ep: 0 (the tp plan; MoE experts split by moe_tp_experts) or the degree (expert
 * parallelism) */
static void check_family_ep(const char *family, int ep) {
    char rel[128], what[160];
    snprintf(rel, sizeof rel, "models/%s_ref", family);
    em_test_bundle *b = em_test_bundle_load(rel);
    CHECK(b != NULL);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    em_model *m = load(c, family, G, ep);
    CHECK_MSG(m != NULL, "%s (ep %d): %s", family, ep,
              em_ctx_status(c) ? em_ctx_error(c)->message : "");
    em_model *whole = em_dist_world_size(G) > 1 ? load(c, family, NULL, 0) : NULL;
    if (m) {
        int world = em_dist_world_size(G);
        /* resident weights: the split ones divided by the degree, the rest (embedding, norms,
         * and a tied lm_head's slice) whole */
        if (whole && em_dist_rank(G) == 0)
            printf("%s%s: weights per rank %lld bytes at degree %d, %lld whole\n", family,
                   ep > 1 ? " (expert parallel)" : "", (long long)em_model_weight_bytes(m, false),
                   world,
                   (long long)em_model_weight_bytes(whole, false));
        if (whole)
            CHECK_MSG(em_model_weight_bytes(m, false) < em_model_weight_bytes(whole, false),
                      "%s: a rank holds as much as the whole model", family);
        if (whole) { /* the placement report accounts for every byte the rank holds */
            char report[8192], total[96];
            em_model_tp_placement(m, report, sizeof report);
            snprintf(total, sizeof total, "total per rank: %lld bytes",
                     (long long)em_model_weight_bytes(m, false));
            CHECK_MSG(strstr(report, total) != NULL, "%s: the placement report lacks '%s':\n%s",
                      family, total, report);
            CHECK_MSG(!strstr(report, "KV heads replicated") == (world <= 2),
                      "%s: KV-head replication at degree %d: %s", family, world, report);
        }
        em_scope_push(c);
        em_tensor *ids = em_test_bundle_get(b, c, "ids");
        snprintf(what, sizeof what, "%s logits f32 at degree %d", family, world);
        em_tensor *lg = em_model_forward(c, m, ids, NULL, NULL, false);
        CHECK_MSG(lg != NULL, "%s: %s", what, em_ctx_status(c) ? em_ctx_error(c)->message : "");
        if (lg) CHECK(em_test_allclose(c, lg, em_test_bundle_get(b, c, "logits_f32"), 1e-4, 1e-4,
                                       what));
        if (em_model_compile_supported(m) && Impl != EM_MOE_LOOP) { /* compile mode: the collectives in a CPU plan */
            em_kv_cache *kv = em_kv_cache_create(c, m, em_tensor_dim(ids, 0),
                                                 em_tensor_dim(ids, 1) + 8);
            em_model_compiled *mc = em_model_compile(c, m, kv, 0);
            snprintf(what, sizeof what, "%s logits f32 compiled at degree %d", family, world);
            em_tensor *lc = em_model_forward_compiled(c, mc, ids, NULL, false);
            CHECK_MSG(lc != NULL, "%s: %s", what,
                      em_ctx_status(c) ? em_ctx_error(c)->message : "");
            if (lc) CHECK(em_test_allclose(c, lc, em_test_bundle_get(b, c, "logits_f32"), 1e-4,
                                           1e-4, what));
            em_model_compiled_free(mc);
            em_kv_cache_free(kv);
        }
        /* greedy decoding of the first prompt */
        char why[1700];
        CHECK_MSG(em_test_greedy_matches(c, m, b, false, why, sizeof why), "%s at degree %d: %s",
                  family, world, why);
        em_scope_pop(c);
        CHECK(em_ctx_status(c) == EM_OK);
    }
    em_model_free(whole);
    em_model_free(m);
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void check_family(const char *family) { check_family_ep(family, 0); }

static void test_llama(void) { check_family("llama"); }
static void test_mistral(void) { check_family("mistral"); }
static void test_qwen3(void) { check_family("qwen3"); }
/* MoE: moe_tp_experts (every rank a slice of every expert) and expert parallelism (every rank
 * whole experts), each against transformers */
static void test_qwen3_moe(void) { check_family("qwen3_moe"); }
static void test_qwen3_moe_ep(void) { check_family_ep("qwen3_moe", em_dist_world_size(G)); }
/* the other expert implementations (loop and dense read the routing on the host; dense is
 * compiled too, with the routing on the device) */
static void test_qwen3_moe_impls(void) {
    for (Impl = EM_MOE_LOOP; Impl <= EM_MOE_DENSE; Impl++) {
        check_family_ep("qwen3_moe", 0);
        check_family_ep("qwen3_moe", em_dist_world_size(G));
    }
    Impl = EM_MOE_RAGGED;
}
static void test_mixtral(void) { check_family("mixtral"); }
/* Qwen2 (biases on q, k, v: split with their rows) and Gemma 3 (q/k norms, scaled embedding) */
static void test_qwen2(void) { check_family("qwen2"); }
static void test_gemma3(void) { check_family("gemma3_text"); }
/* Gemma 4: per-layer inputs and KV sharing (gemma4_text); the 26B-A4B layout (gemma4: fused v5
 * experts split by packed_colwise/rowwise next to a dense MLP, one KV head in the full layer,
 * replicated) */
static void test_gemma4(void) { check_family("gemma4_text"); }
static void test_gemma4_moe(void) { check_family("gemma4"); }
static void test_gemma4_moe_ep(void) { check_family_ep("gemma4", em_dist_world_size(G)); }

/* The user's overrides of the plan: the embedding or lm_head replicated instead of split (the
 * outputs the same); on llama's tied head, both or the embedding alone. */
static void test_plan_overrides(void) {
    static const struct { const char *family, *plan; } cases[] = {
        {"qwen3", "{\"embed_tokens\": \"replicate\"}"},
        {"qwen3", "{\"lm_head\": \"replicate\", \"layers.*.mlp.down_proj\": \"rowwise\"}"},
        {"llama", "{\"embed_tokens\": \"replicate\"}"},
        {"llama", "{\"embed_tokens\": \"replicate\", \"lm_head\": \"replicate\"}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Plan = cases[i].plan;
        check_family(cases[i].family);
    }
    Plan = NULL;
}

/* Overrides Ember cannot run are refused at load, naming the pattern and the rule. */
static void test_plan_refused(void) {
    if (em_dist_world_size(G) == 1) {
        em_test_skip("needs more than one rank");
        return;
    }
    static const struct { const char *family, *plan, *want[3]; em_status status; } cases[] = {
        {"qwen3", "{\"lm_head\": ", {"tp_plan", "not valid JSON", ""}, EM_ERR_FORMAT},
        {"qwen3", "[1]", {"tp_plan", "not an object", ""}, EM_ERR_FORMAT},
        {"qwen3", "{\"lm_head\": 3}", {"'lm_head'", "not a rule name", ""}, EM_ERR_FORMAT},
        {"qwen3", "{\"layers.*.mlp.up_proj\": \"colwize\"}", {"colwize", "not a rule name",
         "colwise"}, EM_ERR_INVALID_ARG},
        {"qwen3", "{\"layers.*.mlp.up_proj\": \"sequence_parallel\"}",
         {"sequence_parallel", "not done in Ember", "layers.*.mlp.up_proj"}, EM_ERR_UNSUPPORTED},
        {"qwen3", "{\"layers..q\": \"colwise\"}", {"'layers..q'", "not a module pattern", ""},
         EM_ERR_INVALID_ARG},
        {"qwen3", "{\"layers.*.mlp.act\": \"colwise\"}", {"'layers.*.mlp.act'",
         "not in the qwen3 family's plan", ""}, EM_ERR_UNSUPPORTED},
        {"qwen3", "{\"layers.*.self_attn.o_proj\": \"colwise\"}",
         {"'layers.*.self_attn.o_proj' is 'rowwise'", "'colwise' is not done", ""},
         EM_ERR_UNSUPPORTED},
        {"qwen3", "{\"embed_tokens\": \"colwise\"}", {"'embed_tokens' takes", "'colwise'", ""},
         EM_ERR_UNSUPPORTED},
        {"qwen3", "{}", {"tp_plan", "empty plan", "without tensor parallelism"},
         EM_ERR_INVALID_ARG},
        {"llama", "{\"lm_head\": \"replicate\"}", {"tied", "embedding_rowwise",
         "replicate 'embed_tokens'"}, EM_ERR_UNSUPPORTED},
    };
    em_ctx *c = em_ctx_create();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        em_model_options o = em_model_default_options();
        o.progress = false;
        o.offline = true;
        o.tp = G;
        o.tp_plan = cases[i].plan;
        em_model *m = em_model_load(c, em_test_fixture_path("models", cases[i].family), &o);
        CHECK_MSG(m == NULL, "tp_plan %s was accepted", cases[i].plan);
        em_model_free(m);
        CHECK_ERR(c, cases[i].status, cases[i].want[0], cases[i].want[1], cases[i].want[2]);
        em_ctx_clear_error(c);
    }
    em_ctx_free(c);
}
static void test_mixtral_ep(void) { check_family_ep("mixtral", em_dist_world_size(G)); }

/* A family without a plan is refused, naming it. */
static void test_no_plan(void) {
    if (em_dist_world_size(G) == 1) {
        em_test_skip("needs more than one rank");
        return;
    }
    em_ctx *c = em_ctx_create();
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/bert", em_test_fixtures_dir());
    em_model_options o = em_model_default_options();
    o.progress = false;
    o.offline = true;
    o.tp = G;
    CHECK(!em_model_load(c, dir, &o));
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "tensor parallelism", "bert", "no plan");
    em_ctx_free(c);
}

/* qwen3_moe's checkpoint with its config.json's `key` set to `value` (a scratch folder, the
 * weights linked), loaded at the group's degree with ep_size ep: NULL expected. */
static void refused_with(em_ctx *c, const char *key, int value, int ep) {
    char *cfg = em_test_read_file(em_test_fixture_path("models", "qwen3_moe/config.json"), NULL);
    CHECK(cfg != NULL);
    if (!cfg) return;
    char needle[96], *at;
    snprintf(needle, sizeof needle, "\"%s\": ", key);
    at = strstr(cfg, needle);
    CHECK_MSG(at != NULL, "no %s in the config", key);
    if (!at) {
        free(cfg);
        return;
    }
    at += strlen(needle);
    size_t digits = strspn(at, "0123456789");
    char *text = malloc(strlen(cfg) + 32);
    snprintf(text, strlen(cfg) + 32, "%.*s%d%s", (int)(at - cfg), cfg, value, at + digits);
    char tag[32];
    snprintf(tag, sizeof tag, "tp_moe_r%d", em_dist_rank(G));
    if (em_test_scratch_make(tag)) {
        em_test_scratch_write("config.json", text);
        em_test_scratch_link("model.safetensors", "models", "qwen3_moe/model.safetensors");
        em_model_options o = em_model_default_options();
        o.progress = false;
        o.offline = true;
        o.tp = G;
        o.ep_size = ep;
        em_model *m = em_model_load(c, em_test_scratch_dir(), &o);
        CHECK(m == NULL);
        em_model_free(m);
        em_test_scratch_remove();
    }
    free(text);
    free(cfg);
}

/* MoE sizes that do not divide by the degree are refused naming them; so are an ep_size other
 * than the degree and expert parallelism of a model without experts. */
static void test_moe_refused(void) {
    if (em_dist_world_size(G) == 1) {
        em_test_skip("needs more than one rank");
        return;
    }
    int n = em_dist_world_size(G);
    char want[64];
    snprintf(want, sizeof want, "the degree %d", n);
    em_ctx *c = em_ctx_create();
    refused_with(c, "moe_intermediate_size", 4 * n + 1, 0);
    CHECK_ERR(c, EM_ERR_SHAPE, "tensor parallelism", "moe_intermediate_size", want);
    em_ctx_clear_error(c);
    refused_with(c, "num_local_experts", 2 * n + 1, n);
    CHECK_ERR(c, EM_ERR_SHAPE, "tensor parallelism", "num_experts", want);
    em_ctx_clear_error(c);
    refused_with(c, "vocab_size", 2 * n + 1, 0); /* the embedding and lm_head split by rows */
    snprintf(want, sizeof want, "vocab_size (%d) is not divisible by the degree %d", 2 * n + 1, n);
    CHECK_ERR(c, EM_ERR_SHAPE, "tensor parallelism", want, "");
    em_ctx_clear_error(c);
    snprintf(want, sizeof want, "the degree %d", n);
    refused_with(c, "num_local_experts", 8, n + 1);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "expert parallelism", "ep_size", "must equal");
    em_ctx_clear_error(c);
    em_model_options o = em_model_default_options();
    o.progress = false;
    o.offline = true;
    o.tp = G;
    o.ep_size = n;
    CHECK(!em_model_load(c, em_test_fixture_path("models", "qwen3"), &o));
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "expert parallelism", "qwen3", "no MoE layers");
    em_ctx_free(c);
}

int main(int argc, char **argv) {
    static const em_test_case tests[] = {T(test_llama),     T(test_mistral),
                                         T(test_qwen3),     T(test_qwen3_moe),
                                         T(test_qwen3_moe_ep), T(test_qwen3_moe_impls), T(test_mixtral),
                                         T(test_mixtral_ep), T(test_moe_refused),
                                         T(test_qwen2),      T(test_gemma3),
                                         T(test_gemma4),     T(test_gemma4_moe), T(test_gemma4_moe_ep),
                                         T(test_plan_overrides), T(test_plan_refused),
                                         T(test_no_plan)};
    return em_test_run_in_group(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv, &G);
}

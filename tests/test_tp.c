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

static em_model *load(em_ctx *c, const char *family, em_dist *tp) {
    em_model_options o = em_model_default_options();
    o.dtype = EM_F32;
    o.tp = tp;
    return em_test_load_fixture_model(c, family, &o);
}

static void check_family(const char *family) {
    char rel[128], what[160];
    snprintf(rel, sizeof rel, "models/%s_ref", family);
    em_test_bundle *b = em_test_bundle_load(rel);
    CHECK(b != NULL);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    em_model *m = load(c, family, G);
    em_model *whole = em_dist_world_size(G) > 1 ? load(c, family, NULL) : NULL;
    if (m) {
        int world = em_dist_world_size(G);
        /* resident weights: the split ones divided by the degree, the rest (embedding, norms,
         * and a tied lm_head's slice) whole */
        if (whole && em_dist_rank(G) == 0)
            printf("%s: weights per rank %lld bytes at degree %d, %lld whole\n", family,
                   (long long)em_model_weight_bytes(m, false), world,
                   (long long)em_model_weight_bytes(whole, false));
        if (whole)
            CHECK_MSG(em_model_weight_bytes(m, false) < em_model_weight_bytes(whole, false),
                      "%s: a rank holds as much as the whole model", family);
        em_scope_push(c);
        em_tensor *ids = em_test_bundle_get(b, c, "ids");
        snprintf(what, sizeof what, "%s logits f32 at degree %d", family, world);
        em_tensor *lg = em_model_forward(c, m, ids, NULL, NULL, false);
        CHECK_MSG(lg != NULL, "%s: %s", what, em_ctx_status(c) ? em_ctx_error(c)->message : "");
        if (lg) CHECK(em_test_allclose(c, lg, em_test_bundle_get(b, c, "logits_f32"), 1e-4, 1e-4,
                                       what));
        if (em_model_compile_supported(m)) { /* compile mode: the collectives in a CPU plan */
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
        int64_t n_ids, n_want;
        em_token *tids = em_test_host_tokens(c, ids, &n_ids);
        em_token *want = em_test_host_tokens(c, em_test_bundle_get(b, c, "greedy"), &n_want);
        int64_t plen = n_ids / 2;
        em_generate_params p = em_generate_default_params(m);
        p.max_new_tokens = n_want;
        p.do_sample = false;
        p.repetition_penalty = 1.0;
        p.eos_ids = tids; /* a non-NULL list of length 0: no eos stop (as the reference) */
        p.n_eos_ids = 0;
        const em_token *prompts[1] = {tids};
        em_generate_result r;
        if (tids && want && em_generate(c, m, NULL, prompts, &plen, 1, &p, &r) == EM_OK) {
            CHECK_MSG(r.n_ids[0] == n_want &&
                          !memcmp(r.ids[0], want, (size_t)n_want * sizeof *want),
                      "%s: greedy tokens at degree %d differ from transformers", family, world);
            em_generate_result_free(&r);
        } else {
            CHECK_MSG(false, "%s: %s", family,
                      em_ctx_status(c) ? em_ctx_error(c)->message : "no tokens");
        }
        free(tids);
        free(want);
        em_scope_pop(c);
        CHECK(em_ctx_status(c) == EM_OK);
    }
    em_model_free(whole);
    em_model_free(m);
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void test_llama(void) { check_family("llama"); }
static void test_mistral(void) { check_family("mistral"); }
static void test_qwen3(void) { check_family("qwen3"); }

/* A family without a plan is refused, naming it. */
static void test_no_plan(void) {
    if (em_dist_world_size(G) == 1) {
        em_test_skip("needs more than one rank");
        return;
    }
    em_ctx *c = em_ctx_create();
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/gemma3_text", em_test_fixtures_dir());
    em_model_options o = em_model_default_options();
    o.progress = false;
    o.offline = true;
    o.tp = G;
    CHECK(!em_model_load(c, dir, &o));
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "tensor parallelism", "gemma3_text", "no plan");
    em_ctx_free(c);
}

int main(int argc, char **argv) {
    static const em_test_case tests[] = {T(test_llama), T(test_mistral), T(test_qwen3),
                                         T(test_no_plan)};
    return em_test_run_in_group(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv, &G);
}

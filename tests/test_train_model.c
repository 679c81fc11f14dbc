/*
 * The causal-LM loss and every parameter's gradient of the tiny checkpoints of
 * tests/fixtures/models against transformers (tests/fixtures/train/<family>_grads, written by
 * scripts/gen_train_fixtures.py in f32): Ember's forward (em_model_forward without a cache),
 * em_cross_entropy over the shifted labels and em_backward must give transformers' loss within
 * 1e-5 and each gradient within 1e-5 relative to that tensor's largest element. Llama's tiny
 * checkpoint ties the LM head to the embeddings, so its embedding gradient is the sum of both
 * uses; Qwen3-MoE's router and experts train through the ragged and the loop implementations.
 * Each check runs again with gradient checkpointing (em_model_set_gradient_checkpointing: every
 * layer recomputed in the backward), against the same fixtures and tolerances.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

/* max |got - want| <= tol * max |want| */
static bool close_scaled(em_ctx *c, em_tensor *got, em_tensor *want, double tol, const char *what) {
    int64_t n = em_tensor_numel(want);
    if (!got || em_tensor_numel(got) != n) {
        CHECK_MSG(false, "%s: missing or wrong size", what);
        return false;
    }
    float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    bool ok = a && b && !em_to_host_f32(c, got, a, n) && !em_to_host_f32(c, want, b, n);
    double err = 0, scale = 0;
    for (int64_t i = 0; ok && i < n; i++) {
        err = fmax(err, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    free(a);
    free(b);
    ok = ok && err <= tol * scale;
    CHECK_MSG(ok, "%s: max error %.3g, largest element %.3g (tolerance %.1g relative)", what, err,
              scale, tol);
    return ok;
}

/* One family's loss and gradients against tests/fixtures/train/<family>_grads, or, with aux, the
 * MoE families with output_router_logits (<family>_aux_grads): the LM loss plus
 * router_aux_loss_coef times em_model_forward_router_aux's load-balancing loss must be
 * transformers' loss, with every gradient (the router's gets the balancing term's share). */
static void check_grads_tol(const char *family, em_moe_impl impl, bool aux, bool ckpt, double tol,
                            float **keep) {
    char rel[128];
    snprintf(rel, sizeof rel, "train/%s_%sgrads", family, aux ? "aux_" : "");
    em_test_bundle *b = em_test_bundle_load(rel);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    em_model_options o = em_model_default_options();
    o.progress = false;
    o.moe_impl = impl;
    em_model *m = em_model_load(c, em_test_fixture_path("models", family), &o);
    CHECK_MSG(m != NULL, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (!m) {
        em_ctx_free(c);
        em_test_bundle_free(b);
        return;
    }
    CHECK(em_model_set_gradient_checkpointing(c, m, ckpt) == EM_OK);
    em_model_param ps[128];
    int np = em_model_params(c, m, ps, 128);
    CHECK_MSG(np > 0 && np <= 128, "em_model_params: %d", np);
    if (np > 128) np = 128;
    CHECK(np == em_test_bundle_meta_int(b, "params", -1));
    for (int i = 0; i < np; i++) CHECK(em_tensor_requires_grad(c, ps[i].tensor, true) == EM_OK);
    em_tensor *ids = em_test_bundle_get(b, c, "ids"), *labels = em_test_bundle_get(b, c, "labels");
    int64_t B = em_tensor_dim(ids, 0), T = em_tensor_dim(ids, 1), V = em_model_config_get(m)->vocab_size;
    em_grad_enable(c, true);
    em_tensor *balance = NULL;
    em_tensor *logits = aux ? em_model_forward_router_aux(c, m, ids, &balance)
                            : em_model_forward(c, m, ids, NULL, NULL, false);
    /* transformers' causal-LM loss: position t predicts label t+1 */
    em_tensor *pred = em_reshape(c, em_slice(c, logits, 1, 0, T - 1, 1), 2,
                                 (int64_t[]){B * (T - 1), V});
    em_tensor *next = em_reshape(c, em_slice(c, labels, 1, 1, T, 1), 1,
                                 (int64_t[]){B * (T - 1)});
    em_tensor *loss = em_cross_entropy(c, pred, next, -100);
    if (aux) {
        double coef = em_test_bundle_meta_num(b, "router_aux_loss_coef", 0), av = NAN, want = NAN;
        CHECK(coef > 0);
        CHECK(balance != NULL && em_item(c, balance, &av) == EM_OK);
        CHECK(em_item(c, em_test_bundle_get(b, c, "aux_loss"), &want) == EM_OK);
        CHECK_MSG(fabs(av - want) <= 1e-5, "%s aux loss %.9g, transformers %.9g", family, av, want);
        loss = em_add(c, loss, em_mul_scalar(c, balance, coef));
    }
    em_grad_enable(c, false);
    /* recomputed layers are one tape node each (the layer's 20-odd op calls otherwise) */
    int64_t layers = em_model_config_get(m)->num_hidden_layers;
    int tape = em_grad_tape_size(c);
    if (ckpt) CHECK_MSG(tape < 40, "%s: %d nodes on the tape with checkpointing", family, tape);
    else CHECK_MSG(tape > 15 * layers, "%s: %d nodes on the tape", family, tape);
    double lv = NAN, want = NAN;
    CHECK(em_item(c, loss, &lv) == EM_OK);
    CHECK(em_item(c, em_test_bundle_get(b, c, "loss"), &want) == EM_OK);
    CHECK_MSG(fabs(lv - want) <= 1e-5, "%s loss %.9g, transformers %.9g", family, lv, want);
    if (!aux)
        em_test_allclose(c, logits, em_test_bundle_get(b, c, "logits"), 1e-4, 1e-4, "logits");
    CHECK(em_backward(c, loss) == EM_OK);
    if (em_ctx_error(c)) fprintf(stderr, "%s\n", em_ctx_error(c)->message);
    for (int i = 0; i < np; i++) {
        char key[160], what[200];
        snprintf(key, sizeof key, "grad/%.96s", ps[i].name);
        snprintf(what, sizeof what, "%.24s%s%s (moe %d) %.150s", family, aux ? " aux" : "",
                 ckpt ? " recompute" : "", (int)impl, key);
        em_tensor *g = em_tensor_grad(ps[i].tensor);
        close_scaled(c, g, em_test_bundle_get(b, c, key), tol, what);
        if (keep && g && i < 128) { /* the run without recomputation's, or compared with it */
            int64_t n = em_tensor_numel(g);
            float *a = malloc((size_t)n * sizeof *a);
            CHECK(a && !em_to_host_f32(c, g, a, n));
            if (a && !keep[i]) {
                keep[i] = a;
                a = NULL;
            } else if (a) {
                double err = 0;
                for (int64_t j = 0; j < n; j++) err = fmax(err, fabs((double)a[j] - keep[i][j]));
                CHECK_MSG(err == 0, "%s: %.3g from the run without recomputation", what, err);
            }
            free(a);
        }
        em_tensor_zero_grad(ps[i].tensor);
    }
    em_model_free(m);
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void check_grads(const char *family, em_moe_impl impl, bool aux, bool ckpt) {
    check_grads_tol(family, impl, aux, ckpt, 1e-5, NULL);
}

static void check_family_impl(const char *family, em_moe_impl impl) {
    check_grads(family, impl, false, false);
    check_grads(family, impl, false, true);
}

/* a dense model has no router: aux NULL, the logits as em_model_forward's; aux NULL refused */
static void test_router_aux_dense(void) {
    em_ctx *c = em_ctx_create();
    em_model_options o = em_model_default_options();
    o.progress = false;
    em_model *m = em_model_load(c, em_test_fixture_path("models", "qwen3"), &o);
    CHECK(m != NULL);
    em_tensor *ids = em_from_host(c, EM_I64, 2, (int64_t[]){1, 3}, (int64_t[]){5, 6, 7});
    em_tensor *aux = ids;
    CHECK(em_model_forward_router_aux(c, m, ids, &aux) != NULL && aux == NULL);
    CHECK(em_model_forward_router_aux(c, m, ids, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "aux", "NULL");
    em_model_free(m);
    em_ctx_free(c);
}

static void test_router_aux(void) {
    for (int ckpt = 0; ckpt < 2; ckpt++) {
        check_grads("qwen3_moe", EM_MOE_RAGGED, true, ckpt);
        check_grads("qwen3_moe", EM_MOE_LOOP, true, ckpt);
        check_grads("mixtral", EM_MOE_RAGGED, true, ckpt);
    }
}

static void check_family(const char *family) { check_family_impl(family, EM_MOE_RAGGED); }

static void test_qwen3(void) { check_family("qwen3"); }
static void test_llama_tied(void) { check_family("llama"); }
/* the router trains through softmax and topk, the experts through ragged_dot (ragged) or per
 * expert linears (loop). Not dense: it reads the routing weights on the host and makes a new
 * tensor of them, which cuts the router's gradient (as .tolist() would in torch). */
static void test_qwen3_moe(void) {
    check_family_impl("qwen3_moe", EM_MOE_RAGGED);
    check_family_impl("qwen3_moe", EM_MOE_LOOP);
}

/* Gemma 4: per-layer inputs, a soft-capped head, and layers 2-3 reading layers 0-1's keys and
 * values (recomputed: their regions take layers 0-1's region outputs as inputs). The tiny
 * checkpoint is ill-conditioned in f32: torch's own f32 gradients are up to 3.6e-5 (relative to
 * the tensor's largest element) from its f64 ones, so the gradients are checked to 1e-4; the
 * recomputed run's gradients must equal the plain run's exactly. */
static void test_gemma4(void) {
    float *keep[128] = {NULL};
    check_grads_tol("gemma4_text", EM_MOE_RAGGED, false, false, 1e-4, keep);
    check_grads_tol("gemma4_text", EM_MOE_RAGGED, false, true, 1e-4, keep);
    for (int i = 0; i < 128; i++) free(keep[i]);
}

/* Gemma 4 with experts (the tiny 26B-A4B layout of tests/fixtures/models/gemma4, weights under
 * model.language_model.): the router (proj, scale, per_expert_scale) and the experts train
 * through both MoE implementations, beside the dense MLP. This checkpoint is better conditioned
 * than gemma4_text (no per-layer inputs, no shared keys/values): the worst gradient is 5.9e-6
 * relative from transformers' (measured, AVX-512), so the 1e-5 holds; the recomputed
 * run's gradients must equal the plain run's exactly. */
static void test_gemma4_moe(void) {
    for (int impl = 0; impl < 2; impl++) {
        float *keep[128] = {NULL};
        em_moe_impl mi = impl ? EM_MOE_LOOP : EM_MOE_RAGGED;
        check_grads_tol("gemma4", mi, false, false, 1e-5, keep);
        check_grads_tol("gemma4", mi, false, true, 1e-5, keep);
        for (int i = 0; i < 128; i++) free(keep[i]);
    }
}

/* gemma4 recomputes its layers too (per-layer inputs, KV sharing); a NULL model is refused */
static void test_checkpointing_refused(void) {
    em_ctx *c = em_ctx_create();
    em_model_options o = em_model_default_options();
    o.progress = false;
    em_model *m = em_model_load(c, em_test_fixture_path("models", "gemma4_text"), &o);
    CHECK_MSG(m != NULL, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    CHECK(em_model_set_gradient_checkpointing(c, m, true) == EM_OK);
    CHECK(em_model_set_gradient_checkpointing(c, m, false) == EM_OK);
    CHECK(em_model_set_gradient_checkpointing(c, NULL, true) == EM_ERR_INVALID_ARG);
    em_model_free(m);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_qwen3), T(test_llama_tied), T(test_qwen3_moe), T(test_gemma4),
             T(test_gemma4_moe), T(test_router_aux), T(test_router_aux_dense), T(test_checkpointing_refused))

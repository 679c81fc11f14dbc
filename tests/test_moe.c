/* The MoE block against transformers' Qwen3-MoE and Gemma 4 blocks (tests/fixtures/moe, made by
 * scripts/gen_moe_fixtures.py): routing, and the experts through each implementation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

static void check_bundle(const char *name, bool bf16, bool gemma) {
    char rel[128];
    snprintf(rel, sizeof rel, "moe/%s", name);
    em_test_bundle *b = em_test_bundle_load(rel);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    em_moe_params p = em_moe_default_params();
    p.top_k = em_test_bundle_meta_int(b, "top_k", 2);
    p.norm_topk_prob = em_test_bundle_meta_int(b, "norm_topk_prob", 0) != 0;
    p.act = gemma ? EM_MOE_ACT_GELU_TANH : EM_MOE_ACT_SILU;
    em_tensor *x = em_test_bundle_get(b, c, "x");
    em_tensor *logits = em_test_bundle_get(b, c, "logits");
    em_tensor *want_w = em_test_bundle_get(b, c, "route_weights");
    em_tensor *want_i = em_test_bundle_get(b, c, "route_indices");
    em_moe_weights w = {em_test_bundle_get(b, c, "gate_up"), em_test_bundle_get(b, c, "down"),
                        gemma ? em_test_bundle_get(b, c, "per_expert_scale") : NULL};
    em_tensor *want_y = em_test_bundle_get(b, c, "y");
    /* routing */
    em_tensor *idx = NULL;
    em_tensor *rw = em_moe_route(c, logits, &p, w.per_expert_scale,
                                 em_tensor_dtype(want_w), &idx);
    double rt = bf16 ? 1e-2 : 1e-6;
    char what[160];
    snprintf(what, sizeof what, "%s route weights", name);
    em_test_allclose(c, rw, want_w, rt, rt, what);
    snprintf(what, sizeof what, "%s route indices", name);
    em_test_allclose(c, idx, want_i, 0, 0, what);
    /* experts, with transformers' routing, through each implementation, the routing read on
     * the host and then kept on the device (compile mode's path; loop cannot do that), with the
     * weights as the Hub has them and packed (em_ragged_pack: what a model load gives ragged on
     * a CPU with AVX-512 BF16; loop and dense unpack them per expert) */
    em_moe_weights wp = {em_ragged_pack(c, w.gate_up), em_ragged_pack(c, w.down),
                         w.per_expert_scale};
    CHECK(em_tensor_ndim(wp.gate_up) == 5 && em_tensor_ndim(wp.down) == 5);
    for (int packed = 0; packed < 2; packed++)
    for (int dev = 0; dev < 2; dev++)
        for (int impl = 0; impl < 3; impl++) {
            p.impl = (em_moe_impl)impl;
            p.device_routing = dev;
            em_moe_stats st = {0};
            em_tensor *y = em_moe_experts(c, x, want_i, want_w, packed ? &wp : &w, &p, &st);
            if (dev && p.impl == EM_MOE_LOOP) {
                CHECK(y == NULL);
                CHECK_ERR(c, EM_ERR_UNSUPPORTED, "moe_experts", "loop",
                          "needs the routing on the host", "use ragged or dense");
                continue;
            }
            snprintf(what, sizeof what, "%s experts (%s%s%s)", name, em_moe_impl_name(p.impl),
                     dev ? ", device routing" : "", packed ? ", packed weights" : "");
            double tol = bf16 ? 2e-2 : 2e-5;
            em_test_allclose(c, y, want_y, tol, tol, what);
            CHECK(st.rows == em_tensor_numel(want_i));
            CHECK(dev ? st.experts_hit == -1 : st.experts_hit > 0 && st.experts_hit <= 8);
            em_ctx_clear_error(c);
        }
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void test_qwen3_moe(void) {
    check_bundle("qwen3_moe_norm_f32", false, false);
    check_bundle("qwen3_moe_nonorm_f32", false, false);
    check_bundle("qwen3_moe_norm_bf16", true, false);
    check_bundle("qwen3_moe_nonorm_bf16", true, false);
}

static void test_gemma4(void) {
    check_bundle("gemma4_f32", false, true);
    check_bundle("gemma4_bf16", true, true);
}

/* The device routing reorders nothing: argsort is stable, so its ragged rows come in the host
 * counting sort's order and the results match bit for bit; so does the dense matrix. i32
 * indices, as a caller may hold them. */
static void test_device_routing_matches_host(void) {
    em_ctx *c = em_ctx_create();
    em_moe_params p = em_moe_default_params();
    CHECK(!p.device_routing);
    em_tensor *x = em_randn(c, EM_F32, EM_SHAPE(5, 8), 1, 0.0, 1.0);
    em_moe_weights w = {em_randn(c, EM_F32, EM_SHAPE(4, 12, 8), 2, 0.0, 0.3),
                        em_randn(c, EM_F32, EM_SHAPE(4, 8, 6), 3, 0.0, 0.3), NULL};
    int32_t ids[10] = {3, 0, 0, 2, 3, 1, 0, 3, 2, 0}; /* expert 1 once, 3 three times */
    em_tensor *idx = em_from_host(c, EM_I32, EM_SHAPE(5, 2), ids);
    em_tensor *rw = em_rand(c, EM_F32, EM_SHAPE(5, 2), 4, 0.0, 1.0);
    for (int impl = 0; impl < 3; impl += 2) { /* ragged, dense */
        p.impl = (em_moe_impl)impl;
        p.device_routing = false;
        em_tensor *want = em_moe_experts(c, x, idx, rw, &w, &p, NULL);
        p.device_routing = true;
        em_moe_stats st = {0};
        em_tensor *got = em_moe_experts(c, x, idx, rw, &w, &p, &st);
        em_test_allclose(c, got, want, 0, 0, em_moe_impl_name(p.impl));
        CHECK(st.experts_hit == -1 && st.rows == 10);
    }
    em_ctx_free(c);
}

static void test_errors(void) {
    em_ctx *c = em_ctx_create();
    em_moe_params p = em_moe_default_params();
    em_tensor *x = em_zeros(c, EM_F32, EM_SHAPE(3, 8));
    em_moe_weights w = {em_zeros(c, EM_F32, EM_SHAPE(4, 10, 8)), em_zeros(c, EM_F32, EM_SHAPE(4, 8, 6)),
                        NULL};
    int64_t bad[6] = {0, 1, 2, 3, 4, 0};
    em_tensor *idx = em_from_host(c, EM_I64, EM_SHAPE(3, 2), bad);
    em_tensor *rw = em_ones(c, EM_F32, EM_SHAPE(3, 2));
    CHECK(em_moe_experts(c, x, idx, rw, &w, &p, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "moe_experts", "gate_up");
    w.gate_up = em_zeros(c, EM_F32, EM_SHAPE(4, 12, 8));
    CHECK(em_moe_experts(c, x, idx, rw, &w, &p, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INDEX, "routing index 4");
    /* with the routing on the device the range is the caller's contract; on the CPU one_hot
     * still catches it */
    p.device_routing = true;
    CHECK(em_moe_experts(c, x, idx, rw, &w, &p, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INDEX, "one_hot");
    /* packing: N a multiple of 32, K even, rank 3; unpacking: a packed shape */
    CHECK(em_ragged_pack(c, em_zeros(c, EM_F32, EM_SHAPE(4, 10, 8))) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "ragged_pack", "multiple of 32", "[4,10,8]");
    CHECK(em_ragged_pack(c, em_zeros(c, EM_F32, EM_SHAPE(4, 32, 7))) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "ragged_pack", "K even", "[4,32,7]");
    CHECK(em_ragged_pack(c, em_zeros(c, EM_F32, EM_SHAPE(32, 8))) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "ragged_pack", "[G, N, K]");
    CHECK(em_ragged_pack(c, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "ragged_pack", "NULL");
    CHECK(em_ragged_unpack(c, em_zeros(c, EM_F32, EM_SHAPE(4, 1, 4, 16, 2))) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "ragged_unpack", "[4,1,4,16,2]");
    /* an MoE block whose packed weights do not fit x */
    em_tensor *x16 = em_zeros(c, EM_F32, EM_SHAPE(3, 16));
    w.gate_up = em_ragged_pack(c, em_zeros(c, EM_F32, EM_SHAPE(4, 64, 16)));
    w.down = em_ragged_pack(c, em_zeros(c, EM_F32, EM_SHAPE(4, 32, 32)));
    CHECK(em_moe_experts(c, x16, idx, rw, &w, &p, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "moe_experts", "ragged_pack forms");
    em_ctx_free(c);
}

/* Packing round-trips on any dtype, and ragged_dot gives the same rows from either layout. */
static void test_pack_roundtrip(void) {
    em_ctx *c = em_ctx_create();
    em_dtype dts[3] = {EM_F32, EM_BF16, EM_F16};
    int32_t sizes[3] = {5, 0, 17};
    for (int i = 0; i < 3; i++) {
        em_tensor *w = em_randn(c, dts[i], EM_SHAPE(3, 64, 18), 7, 0.0, 1.0);
        em_tensor *p = em_ragged_pack(c, w);
        CHECK(em_tensor_ndim(p) == 5 && em_tensor_dim(p, 1) == 2 && em_tensor_dim(p, 2) == 9);
        em_test_allclose(c, em_ragged_unpack(c, p), w, 0, 0, em_dtype_name(dts[i]));
        em_tensor *x = em_randn(c, dts[i], EM_SHAPE(24, 18), 8, 0.0, 1.0);
        em_tensor *gs = em_from_host(c, EM_I32, EM_SHAPE(3), sizes);
        double tol = dts[i] == EM_F32 ? 1e-5 : 1e-2;
        em_test_allclose(c, em_ragged_dot(c, x, p, gs, true), em_ragged_dot(c, x, w, gs, true),
                         tol, tol, em_dtype_name(dts[i]));
    }
    em_ctx_free(c);
}

/* The packed kernel's tasks split the columns, never a sum: the same bits on any thread count,
 * with groups that take one to three row blocks. */
static void test_packed_thread_invariance(void) {
    em_ctx *c = em_ctx_create();
    int saved = em_num_threads();
    int32_t sizes[4] = {3, 17, 0, 30};
    em_tensor *w = em_ragged_pack(c, em_randn(c, EM_BF16, EM_SHAPE(4, 512, 96), 9, 0.0, 0.2));
    em_tensor *x = em_randn(c, EM_BF16, EM_SHAPE(52, 96), 10, 0.0, 1.0);
    em_tensor *gs = em_from_host(c, EM_I32, EM_SHAPE(4), sizes);
    em_set_num_threads(1);
    em_tensor *one = em_ragged_dot(c, x, w, gs, true);
    em_tensor_data(c, one);
    for (int t = 2; t <= 3; t++) {
        em_set_num_threads(t);
        char what[32];
        snprintf(what, sizeof what, "%d threads", t);
        em_test_allclose(c, em_ragged_dot(c, x, w, gs, true), one, 0, 0, what);
    }
    em_set_num_threads(saved);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_qwen3_moe), T(test_gemma4), T(test_device_routing_matches_host),
             T(test_errors), T(test_pack_roundtrip), T(test_packed_thread_invariance))

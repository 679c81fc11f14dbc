/* Properties of the nn kernels that the torch fixtures (tests/fixtures/ops/nn.*) cannot show
 * at their small sizes: results independent of the thread count once the work is split
 * across threads, attention's empty rows, and errors that leave no result. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

/* Largest |a - b| over two tensors of the same shape (read as f32). */
static double max_diff(em_ctx *c, em_tensor *a, em_tensor *b) {
    if (!a || !b || em_tensor_numel(a) != em_tensor_numel(b)) return INFINITY;
    int64_t n = em_tensor_numel(a);
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    double m = INFINITY;
    if (x && y && em_to_host_f32(c, a, x, n) == EM_OK && em_to_host_f32(c, b, y, n) == EM_OK) {
        m = 0;
        for (int64_t i = 0; i < n; i++) {
            double d = fabs((double)x[i] - (double)y[i]);
            if (d > m || d != d) m = d;
        }
    }
    free(x);
    free(y);
    return m;
}

typedef struct nn_outputs {
    em_tensor *t[10];
} nn_outputs;

/* Runs every op on inputs large enough to be split across threads. */
static void run_all(em_ctx *c, nn_outputs *o) {
    int64_t xs[2] = {96, 1536}, ws[1] = {1536};
    em_tensor *x = em_randn(c, EM_BF16, 2, xs, 1, 0.0, 2.0);
    em_tensor *w = em_randn(c, EM_BF16, 1, ws, 2, 1.0, 0.2);
    o->t[0] = em_rms_norm(c, x, w, 1e-6, false);
    o->t[1] = em_layer_norm(c, x, w, w, 1e-5);
    int64_t gs[4] = {2, 32, 24, 24}, cs[1] = {32};
    em_tensor *gx = em_randn(c, EM_F32, 4, gs, 3, 0.5, 1.0);
    em_tensor *gw = em_randn(c, EM_F32, 1, cs, 4, 1.0, 0.1);
    o->t[2] = em_group_norm(c, gx, 8, gw, gw, 1e-6);
    int64_t ps[2] = {2, 300}, is[1] = {32};
    em_tensor *pos = em_cast(c, em_rand(c, EM_F32, 2, ps, 5, 0.0, 5000.0), EM_I64);
    em_tensor *inv = em_rand(c, EM_F32, 1, is, 6, 0.0, 1.0);
    em_tensor *sn = NULL;
    em_tensor *cs_ = em_rope_cos_sin(c, pos, inv, 1.25, EM_BF16, &sn);
    o->t[3] = cs_;
    int64_t qs[4] = {2, 8, 300, 64};
    em_tensor *q = em_randn(c, EM_BF16, 4, qs, 7, 0.0, 1.0);
    o->t[4] = em_rope(c, q, cs_, sn);
    int64_t es[2] = {500, 256}, ids[2] = {4, 100};
    em_tensor *emb = em_randn(c, EM_BF16, 2, es, 8, 0.0, 1.0);
    em_tensor *id = em_cast(c, em_rand(c, EM_F32, 2, ids, 9, 0.0, 499.0), EM_I64);
    o->t[5] = em_embedding(c, emb, id);
    /* attention: a decode step over a long cache (split keys), and a causal prefill */
    int64_t dq[4] = {1, 8, 1, 64}, dk[4] = {1, 2, 3000, 64};
    em_tensor *k = em_randn(c, EM_BF16, 4, dk, 10, 0.0, 1.0);
    em_tensor *v = em_randn(c, EM_BF16, 4, dk, 11, 0.0, 1.0);
    em_sdpa_params p = em_sdpa_default_params();
    p.causal = true;
    o->t[6] = em_sdpa(c, em_randn(c, EM_BF16, 4, dq, 12, 0.0, 1.0), k, v, NULL, &p);
    int64_t pq[4] = {1, 4, 200, 64}, pk[4] = {1, 2, 200, 64};
    p.window = 50;
    o->t[7] = em_sdpa(c, em_randn(c, EM_F32, 4, pq, 13, 0.0, 1.0),
                      em_randn(c, EM_F32, 4, pk, 14, 0.0, 1.0),
                      em_randn(c, EM_F32, 4, pk, 15, 0.0, 1.0), NULL, &p);
    o->t[8] = sn;
    /* bf16 self-attention at an SD 1.5 head dim (the pair-dot route on AVX-512 BF16) */
    int64_t ss[4] = {1, 8, 300, 40};
    o->t[9] = em_sdpa(c, em_randn(c, EM_BF16, 4, ss, 16, 0.0, 1.0),
                      em_randn(c, EM_BF16, 4, ss, 17, 0.0, 1.0),
                      em_randn(c, EM_BF16, 4, ss, 18, 0.0, 1.0), NULL, NULL);
}

static void test_thread_count_invariance(void) {
    em_ctx *c = em_ctx_create();
    int saved = em_num_threads();
    nn_outputs one, many;
    em_set_num_threads(1);
    run_all(c, &one);
    em_set_num_threads(4);
    run_all(c, &many);
    em_set_num_threads(saved);
    CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    static const char *names[10] = {"rms_norm",    "layer_norm",   "group_norm", "rope_cos_sin",
                                    "rope",        "embedding",    "sdpa decode", "sdpa prefill",
                                    "sin",         "sdpa bf16 d40"};
    for (int i = 0; i < 10; i++) {
        double d = max_diff(c, one.t[i], many.t[i]);
        /* row-wise kernels are bitwise reproducible; a decode split over threads merges
         * partial softmaxes in another grouping (a rounding or two of f32, then bf16) */
        double tol = i == 6 ? 8e-3 : i == 7 ? 1e-6 : 0.0;
        CHECK_MSG(d <= tol, "%s: 1 and 4 threads differ by %g", names[i], d);
    }
    em_ctx_free(c);
}

static void test_sdpa_empty_rows(void) {
    em_ctx *c = em_ctx_create();
    em_sdpa_params p = em_sdpa_default_params();
    /* no keys at all */
    int64_t qs[4] = {1, 2, 3, 8}, ks[4] = {1, 1, 0, 8};
    em_tensor *q = em_randn(c, EM_F32, 4, qs, 1, 0.0, 1.0);
    em_tensor *k = em_zeros(c, EM_F32, 4, ks), *v = em_zeros(c, EM_F32, 4, ks);
    em_tensor *o = em_sdpa(c, q, k, v, NULL, &p);
    float buf[48];
    CHECK(o && em_to_host(c, o, buf, sizeof buf) == EM_OK);
    bool zero = true;
    for (int i = 0; i < 48; i++) zero &= buf[i] == 0.0f;
    CHECK_MSG(zero, "attention over no keys must give zeros");
    /* causal with more queries than keys: the first Tq - Tk queries see nothing */
    int64_t ks2[4] = {1, 1, 2, 8};
    k = em_randn(c, EM_F32, 4, ks2, 2, 0.0, 1.0);
    v = em_randn(c, EM_F32, 4, ks2, 3, 1.0, 1.0);
    p.causal = true;
    o = em_sdpa(c, q, k, v, NULL, &p);
    CHECK(o && em_to_host(c, o, buf, sizeof buf) == EM_OK);
    for (int h = 0; h < 2; h++) {
        bool row0 = true, row1 = false;
        for (int x = 0; x < 8; x++) {
            row0 &= buf[h * 24 + x] == 0.0f;
            row1 |= buf[h * 24 + 8 + x] != 0.0f;
        }
        CHECK_MSG(row0 && row1, "head %d: query 0 sees no key (zeros), query 1 sees key 0", h);
    }
    CHECK(em_ctx_status(c) == EM_OK);
    em_ctx_free(c);
}

/* bf16 attention's tiles at odd edges against the f32 route on the same values: an odd key
 * count (the last pair half empty), a causal window whose key range starts on an odd key (a
 * tile that does not start on a pair of the head's packed V), and the causal diagonal. On a
 * CPU with the bf16 pair dot product this is the route that packs V once per head (items of
 * 64 rows, five of them a head); elsewhere the same check of the f32-tile route. */
static void test_sdpa_bf16_tile_edges(void) {
    em_ctx *c = em_ctx_create();
    int64_t s[4] = {1, 2, 301, 40};
    em_tensor *q = em_randn(c, EM_BF16, 4, s, 21, 0.0, 1.0);
    em_tensor *k = em_randn(c, EM_BF16, 4, s, 22, 0.0, 1.0);
    em_tensor *v = em_randn(c, EM_BF16, 4, s, 23, 0.0, 1.0);
    em_tensor *qf = em_cast(c, q, EM_F32), *kf = em_cast(c, k, EM_F32);
    em_tensor *vf = em_cast(c, v, EM_F32);
    static const char *names[3] = {"full (301 keys)", "causal window 38", "causal"};
    for (int i = 0; i < 3; i++) {
        em_sdpa_params p = em_sdpa_default_params();
        p.causal = i > 0;
        p.window = i == 1 ? 38 : 0;
        em_tensor *o = em_sdpa(c, q, k, v, NULL, &p), *of = em_sdpa(c, qf, kf, vf, NULL, &p);
        /* P rounded to bf16 (2^-9 relative a weight) and the result to bf16 (|o| < 2) */
        double d = max_diff(c, o, of);
        CHECK_MSG(d <= 2e-2, "%s: bf16 and f32 attention differ by %g", names[i], d);
    }
    CHECK(em_ctx_status(c) == EM_OK);
    em_ctx_free(c);
}

static void test_embedding_error_leaves_nothing(void) {
    em_ctx *c = em_ctx_create();
    em_scope_push(c);
    int64_t ws[2] = {4, 3}, is[1] = {3};
    em_tensor *w = em_randn(c, EM_F32, 2, ws, 1, 0.0, 1.0);
    int64_t bad[3] = {0, 4, 1};
    em_tensor *ids = em_from_host(c, EM_I64, 1, is, bad);
    CHECK(em_embedding(c, w, ids) == NULL);
    CHECK_ERR(c, EM_ERR_INDEX, "embedding", "id 4 at position [1]", "4 embeddings");
    em_scope_pop(c);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_thread_count_invariance), T(test_sdpa_empty_rows),
             T(test_sdpa_bf16_tile_edges), T(test_embedding_error_leaves_nothing))

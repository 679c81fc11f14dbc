/* Core mechanics: contexts, errors, scopes, ownership, views, dtypes, eager modes. Values here
 * are small hand-checked constants; op values are checked against torch in test_ops. */
#include <math.h>
#include <stdlib.h>

#include "core/tensor_impl.h"
#include "ember/ember.h"
#include "harness.h"

static void test_create_and_read(void) {
    em_ctx *c = em_ctx_create();
    float v[6] = {1, 2, 3, 4, 5, 6};
    em_tensor *t = em_from_host(c, EM_F32, EM_SHAPE(2, 3), v);
    CHECK(t && em_tensor_ndim(t) == 2 && em_tensor_dim(t, 0) == 2 && em_tensor_dim(t, -1) == 3);
    CHECK(em_tensor_numel(t) == 6 && em_tensor_is_contiguous(t));
    float back[6];
    CHECK(em_to_host(c, t, back, sizeof back) == EM_OK);
    CHECK(memcmp(v, back, sizeof v) == 0);
    /* wrong destination size: an error naming the sizes */
    CHECK(em_to_host(c, t, back, 8) == EM_ERR_SHAPE);
    CHECK_ERR(c, EM_ERR_SHAPE, "to_host", "24 bytes");
    double x;
    em_tensor *s = em_scalar(c, 2.5, EM_BF16);
    CHECK(em_item(c, s, &x) == EM_OK && x == 2.5);
    CHECK(em_item(c, t, &x) == EM_ERR_SHAPE);
    em_ctx_clear_error(c);
    em_ctx_free(c);
}

static void test_error_chain(void) {
    em_ctx *c = em_ctx_create();
    em_tensor *a = em_zeros(c, EM_F32, EM_SHAPE(2, 3));
    em_tensor *b = em_zeros(c, EM_F32, EM_SHAPE(4));
    /* the first failure is reported, the chain returns NULL, nothing is overwritten */
    int line = __LINE__ + 1;
    em_tensor *r = em_mul(c, em_add(c, a, b), a);
    CHECK(r == NULL);
    const em_error *e = em_ctx_error(c);
    CHECK(e && e->status == EM_ERR_SHAPE && !strcmp(e->op, "add") && e->line == line);
    CHECK(e && strstr(e->message, "[2,3]") && strstr(e->message, "[4]") &&
          strstr(e->message, "f32[2,3]") && strstr(e->message, "device cpu") &&
          strstr(e->message, "test_core.c"));
    /* an op called while an error is recorded returns NULL and keeps the first error */
    CHECK(em_neg(c, a) == NULL && !strcmp(em_ctx_error(c)->op, "add"));
    em_ctx_clear_error(c);
    CHECK(em_ctx_status(c) == EM_OK);
    /* NULL inputs without a recorded error are an invalid-argument error */
    CHECK(em_add(c, a, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "add", "input 1 is NULL");
    em_ctx_free(c);
}

static void test_scopes(void) {
    em_ctx *c = em_ctx_create();
    int64_t in_use0;
    em_device_memory_stats(em_device_cpu(), &in_use0, NULL);
    em_tensor *kept;
    em_scope_push(c);
    {
        em_tensor *a = em_ones(c, EM_F32, EM_SHAPE(256, 256));
        em_tensor *b = em_add(c, a, a);
        kept = em_keep(c, em_mul(c, b, a));
    }
    em_scope_pop(c);
    CHECK(kept && em_tensor_numel(kept) == 65536);
    double v;
    CHECK(em_item(c, em_sum(c, kept, NULL, 0, false), &v) == EM_OK && v == 2 * 65536);
    /* detach hands the reference to the caller */
    em_tensor *d = em_detach(c, kept);
    em_ctx_free(c);
    CHECK(em_tensor_numel(d) == 65536);
    em_tensor_release(d);
    int64_t in_use1;
    em_device_memory_stats(em_device_cpu(), &in_use1, NULL);
    CHECK_MSG(in_use1 == in_use0, "%lld bytes still in use", (long long)(in_use1 - in_use0));
}

static void test_views_share_storage(void) {
    em_ctx *c = em_ctx_create();
    em_tensor *a = em_arange(c, 0, 24, 1, EM_F32);
    em_tensor *r = em_reshape(c, a, EM_SHAPE(2, 3, 4));
    em_tensor *p = em_permute(c, r, 3, (int[]){2, 0, 1});
    CHECK(em_tensor_dim(p, 0) == 4 && em_tensor_dim(p, 1) == 2 && em_tensor_dim(p, 2) == 3);
    CHECK(!em_tensor_is_contiguous(p));
    CHECK(r->storage == a->storage && p->storage == a->storage);
    /* p[1, 1, 2] = r[1, 2, 1] = 1*12 + 2*4 + 1 */
    float buf[24];
    CHECK(em_to_host(c, p, buf, sizeof buf) == EM_OK);
    CHECK(buf[1 * 6 + 1 * 3 + 2] == 21);
    em_tensor *s = em_slice(c, a, 0, 1, 20, 3); /* 1, 4, ..., 19 */
    CHECK(em_tensor_numel(s) == 7);
    CHECK(em_to_host(c, s, buf, 7 * 4) == EM_OK && buf[6] == 19);
    em_tensor *v = em_view(c, p, EM_SHAPE(24));
    CHECK(v == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "view", "reshape");
    em_tensor *flat = em_reshape(c, p, EM_SHAPE(-1));
    CHECK(flat && em_tensor_numel(flat) == 24 && flat->storage != a->storage);
    em_tensor *e = em_expand(c, em_unsqueeze(c, s, 0), EM_SHAPE(3, -1));
    CHECK(e && em_tensor_strides(e)[0] == 0 && em_tensor_dim(e, 0) == 3);
    em_tensor *parts[4];
    CHECK(em_split(c, a, 10, 0, parts, 4) == 3 && em_tensor_numel(parts[2]) == 4);
    em_ctx_free(c);
}

static void test_dtype_conversions(void) {
    /* round-to-nearest-even at the halfway points */
    CHECK(em_f32_to_bf16(1.00390625f) == 0x3f80);  /* 1 + 2^-8: halfway, even stays */
    CHECK(em_f32_to_bf16(1.01171875f) == 0x3f82);  /* 1 + 3*2^-8: halfway, rounds up to even */
    CHECK(em_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00);
    CHECK(em_f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02);
    CHECK(em_f32_to_f16(65520.0f) == 0x7c00); /* overflows to inf */
    CHECK(em_f16_to_f32(0x0001) == ldexpf(1, -24));
    CHECK(em_f32_to_f16(ldexpf(1, -25)) == 0x0000);      /* halfway to the smallest: even */
    CHECK(em_f32_to_f16(ldexpf(1.5f, -25)) == 0x0001);
    CHECK(isnan(em_bf16_to_f32(em_f32_to_bf16(NAN))));
    for (uint32_t h = 0; h < 0x7c00; h += 7) CHECK(em_f32_to_f16(em_f16_to_f32((uint16_t)h)) == h);
}

static void test_fused_equals_unfused(void) {
    em_ctx *c = em_ctx_create();
    em_tensor *x = em_randn(c, EM_BF16, EM_SHAPE(33, 70), 7, 0, 1);
    em_tensor *y = em_randn(c, EM_BF16, EM_SHAPE(70), 8, 0, 1);
    em_tensor *outs[2];
    for (int m = 0; m < 2; m++) {
        em_ctx_set_eager_mode(c, m ? EM_EAGER_FUSED : EM_EAGER_SYNC);
        em_tensor *h = em_mul(c, em_silu(c, x), em_add(c, y, em_scalar(c, 0.5, EM_F32)));
        em_tensor *z = em_tanh(c, em_sub(c, em_exp(c, em_neg(c, h)), h));
        if (m) CHECK(z && z->lazy != NULL); /* really deferred */
        outs[m] = z;
    }
    uint16_t a[33 * 70], b[33 * 70];
    CHECK(em_to_host(c, outs[0], a, sizeof a) == EM_OK);
    CHECK_MSG(em_to_host(c, outs[1], b, sizeof b) == EM_OK, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    CHECK(memcmp(a, b, sizeof a) == 0);
    em_ctx_free(c);
}

static void test_fused_sees_in_place_writes(void) {
    em_ctx *c = em_ctx_create();
    em_ctx_set_eager_mode(c, EM_EAGER_FUSED);
    em_tensor *cache = em_zeros(c, EM_F32, EM_SHAPE(4));
    em_tensor *pending = em_add_scalar(c, cache, 1.0); /* deferred: reads cache later */
    CHECK(pending && pending->lazy);
    CHECK(em_assign(c, em_slice(c, cache, 0, 0, 2, 1), em_ones(c, EM_F32, EM_SHAPE(2))) == EM_OK);
    float v[4];
    /* never a silently wrong value: the overwritten input is reported */
    CHECK(em_to_host(c, pending, v, sizeof v) != EM_OK);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "overwritten in place");
    em_tensor *now = em_add_scalar(c, cache, 1.0);
    CHECK(em_to_host(c, now, v, sizeof v) == EM_OK && v[0] == 2 && v[3] == 1);
    em_ctx_free(c);
}

static void test_mixed_devices_and_bad_dtype(void) {
    em_ctx *c = em_ctx_create();
    em_tensor *i = em_arange(c, 0, 4, 1, EM_I64);
    CHECK(em_mean(c, i, NULL, 0, false) == NULL);
    CHECK_ERR(c, EM_ERR_DTYPE, "mean", "i64");
    CHECK(em_device_get(c, "tpu:0") == NULL);
    CHECK_ERR(c, EM_ERR_DEVICE, "tpu:0");
    CHECK(em_zeros(c, EM_F32, EM_SHAPE(1LL << 40, 1LL << 40)) == NULL);
    CHECK_ERR(c, EM_ERR_OVERFLOW, "overflows");
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_create_and_read), T(test_error_chain), T(test_scopes),
             T(test_views_share_storage), T(test_dtype_conversions),
             T(test_fused_equals_unfused), T(test_fused_sees_in_place_writes),
             T(test_mixed_devices_and_bad_dtype))

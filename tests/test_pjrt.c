/*
 * The PJRT backend. Without a plugin: the StableHLO emitter against golden text
 * (tests/fixtures/pjrt/NAME.mlir) and the compile-option bytes. With XLA's CPU plugin (found as
 * em_device_get("xla") finds it: EMBER_PJRT_XLA_PLUGIN or the installed xla-cpu-pjrt package):
 * devices and options, transfers and device-to-device copies, views and in-place writes,
 * results against the CPU backend, the three eager modes, the executable cache, plugin errors
 * and the MoE block against transformers' fixtures. Without a plugin these print a loud SKIP.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"
#include "ember/ember.h"
#include "harness.h"

/* ---- golden StableHLO text ---- */

/* Emits op `id` for inputs of the given types (plain, contiguous) into text. */
static char *emit_text(em_op_id id, int n_in, const em_dtype *dts, const int *nds,
                       const int64_t (*shapes)[EM_MAX_DIMS], const em_attr *attrs) {
    em_ctx *c = em_ctx_create();
    em_tensor *in[8];
    for (int i = 0; i < n_in; i++) in[i] = em_empty(c, dts[i], nds[i], shapes[i]);
    em_meta metas[4];
    int n_out = em_op_get(id)->n_out;
    em_op_get(id)->rule(c, em_op_get(id), in, n_in, attrs, metas, &n_out);
    sh_b b;
    sh_init(&b);
    pj_emit e;
    memset(&e, 0, sizeof e);
    e.b = &b;
    e.op = em_op_get(id);
    e.n_in = n_in;
    e.attrs = attrs;
    e.n_out = n_out;
    e.tin = in;
    for (int i = 0; i < n_in; i++) {
        e.in[i] = sh_param(&b, sh_ty(sh_elem_of(dts[i]), nds[i], shapes[i]));
        e.present[i] = true;
        e.in_dt[i] = dts[i];
    }
    for (int o = 0; o < n_out; o++) e.out_meta[o] = metas[o];
    char *text = NULL;
    if (pj_emitter(id)(&e) == EM_OK) {
        for (int o = 0; o < n_out; o++) {
            sh_type want = pj_meta_type(&metas[o]);
            if (e.out[o].t.e != want.e) e.out[o] = sh_convert(&b, e.out[o], want.e);
            if (!sh_same_shape(&e.out[o].t, &want)) e.out[o] = sh_reshape(&b, e.out[o], want.nd, want.d);
        }
        text = sh_finish(&b, e.out, n_out);
    }
    if (!text) fprintf(stderr, "emitter: %s\n", b.err);
    sh_free(&b);
    em_ctx_free(c);
    return text;
}

/* Compares with tests/fixtures/pjrt/<name>.mlir; EMBER_UPDATE_GOLDEN=1 rewrites it (review the
 * diff: the text is Ember's own output, kept to catch unintended changes). */
static void check_golden(const char *name, char *text) {
    CHECK(text != NULL);
    if (!text) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/pjrt/%s.mlir", em_test_fixtures_dir(), name);
    if (getenv("EMBER_UPDATE_GOLDEN")) {
        FILE *f = fopen(path, "wb");
        if (f) {
            fputs(text, f);
            fclose(f);
        }
        printf("wrote %s\n", path);
    }
    char *want = em_test_read_file(path, NULL);
    CHECK_MSG(want && !strcmp(want, text), "%s differs from the golden text:\n%s", path, text);
    free(want);
    free(text);
}

static void test_golden_add_broadcast(void) {
    em_dtype dt[2] = {EM_BF16, EM_F32};
    int nd[2] = {2, 1};
    const int64_t sh[2][EM_MAX_DIMS] = {{2, 3}, {3}};
    check_golden("add_bf16_f32_broadcast", emit_text(EM_OP_ADD, 2, dt, nd, sh, NULL));
}

static void test_golden_sum(void) {
    em_dtype dt[1] = {EM_BF16};
    int nd[1] = {2};
    const int64_t sh[1][EM_MAX_DIMS] = {{4, 5}};
    em_attr a[2];
    memset(a, 0, sizeof a);
    a[0].n = 1;
    a[0].v[0] = -1;
    a[1].i = 1;
    check_golden("sum_bf16_keepdim", emit_text(EM_OP_SUM, 1, dt, nd, sh, a));
}

static void test_golden_matmul(void) {
    em_dtype dt[2] = {EM_BF16, EM_BF16};
    int nd[2] = {3, 2};
    const int64_t sh[2][EM_MAX_DIMS] = {{2, 3, 4}, {4, 5}};
    check_golden("matmul_bf16", emit_text(EM_OP_MATMUL, 2, dt, nd, sh, NULL));
}

static void test_golden_argmax(void) {
    em_dtype dt[1] = {EM_F32};
    int nd[1] = {2};
    const int64_t sh[1][EM_MAX_DIMS] = {{3, 4}};
    em_attr a[3];
    memset(a, 0, sizeof a);
    a[0].i = 1;
    check_golden("argmax_f32", emit_text(EM_OP_ARGMAX, 1, dt, nd, sh, a));
}

static void test_compile_options(void) {
    unsigned char o[64];
    size_t n = pj_compile_options(o, sizeof o);
    /* executable_build_options {num_replicas: 1, num_partitions: 1}, portable */
    static const unsigned char want[] = {0x1a, 0x04, 0x20, 0x01, 0x28, 0x01, 0x20, 0x01};
    CHECK(n == sizeof want && !memcmp(o, want, n));
}

/* ---- with a plugin ---- */

static em_device *xla(em_ctx *c, int i) {
    char name[16];
    snprintf(name, sizeof name, "xla:%d", i);
    em_device *d = em_device_get(c, name);
    if (!d) {
        em_test_skip("no XLA CPU PJRT plugin (pip install xla-cpu-pjrt==0.0.1 or set "
                     "EMBER_PJRT_XLA_PLUGIN=/path/xla_cpu_pjrt.so): %s",
                     em_ctx_error(c)->message);
        em_ctx_clear_error(c);
    }
    return d;
}

/* f32 contents of any tensor */
static float *vals(em_ctx *c, em_tensor *t) {
    float *v = malloc((size_t)(t ? em_tensor_numel(t) : 1) * sizeof *v + 4);
    if (t && v && em_to_host_f32(c, t, v, em_tensor_numel(t)) != EM_OK) {
        free(v);
        return NULL;
    }
    return v;
}

static void test_devices_and_options(void) {
    em_ctx *c = em_ctx_create();
    /* first open with two CPU devices in one process */
    em_pjrt_option o = {"cpu_device_count", EM_PJRT_OPT_INT, 2, 0, false, NULL};
    int n = em_pjrt_open(c, "xla", NULL, &o, 1);
    if (n < 0) {
        em_test_skip("%s", em_ctx_error(c)->message);
        em_ctx_free(c);
        return;
    }
    CHECK(n >= 2);
    em_device *d = xla(c, 0);
    em_device_info info;
    CHECK(em_device_info_get(d, &info) == EM_OK);
    CHECK(!strcmp(info.platform, "cpu"));
    CHECK(em_device_is_pjrt(d) && !em_device_is_pjrt(em_device_cpu()));
    em_pjrt_plugin_info pi;
    CHECK(em_pjrt_plugin_info_get(d, &pi) == EM_OK && pi.api_major == 0 && pi.api_minor >= 81);
    /* a device that does not exist names what there is */
    CHECK(em_device_get(c, "xla:99") == NULL);
    CHECK_ERR(c, EM_ERR_DEVICE, "xla:99");
    em_ctx_clear_error(c);
    em_ctx_free(c);
}

static void test_transfers_and_copies(void) {
    em_ctx *c = em_ctx_create();
    em_device *d0 = xla(c, 0), *d1 = em_device_get(c, "xla:1");
    em_ctx_clear_error(c);
    if (!d0) {
        em_ctx_free(c);
        return;
    }
    float a[6] = {1, -2, 3.5f, 4, 5, -6};
    em_tensor *x = em_from_host_on(c, d0, EM_F32, EM_SHAPE(2, 3), a);
    float back[6];
    CHECK(em_to_host(c, x, back, sizeof back) == EM_OK && !memcmp(a, back, sizeof a));
    /* views read back through the device */
    em_tensor *t = em_transpose(c, x, 0, 1);
    CHECK(em_to_host(c, t, back, sizeof back) == EM_OK);
    CHECK(back[0] == 1 && back[1] == 4 && back[2] == -2 && back[5] == -6);
    em_tensor *s = em_slice(c, x, 1, 1, 3, 1);
    float b4[4];
    CHECK(em_to_host(c, s, b4, sizeof b4) == EM_OK && b4[0] == -2 && b4[3] == -6);
    if (d1) { /* device to device */
        em_tensor *y = em_to(c, t, d1);
        CHECK(y && em_tensor_device(y) == d1);
        CHECK(em_to_host(c, y, back, sizeof back) == EM_OK && back[1] == 4);
        /* mixing devices in one op is an error naming both */
        CHECK(em_add(c, x, y) == NULL);
        CHECK_ERR(c, EM_ERR_DEVICE, "xla:0", "xla:1");
        em_ctx_clear_error(c);
    }
    em_tensor *h = em_to(c, x, em_device_cpu());
    CHECK(h && ((float *)em_tensor_data(c, h))[2] == 3.5f);
    /* empty tensors */
    em_tensor *e = em_from_host_on(c, d0, EM_F32, EM_SHAPE(0, 3), NULL);
    em_tensor *es = em_sum(c, e, NULL, 0, false);
    double v = -1;
    CHECK(es && em_item(c, es, &v) == EM_OK && v == 0);
    CHECK(em_ctx_status(c) == EM_OK);
    em_ctx_free(c);
}

/* KV-cache style writes: assign into a slice of a device tensor, and into a strided view */
static void test_assign(void) {
    em_ctx *c = em_ctx_create();
    em_device *d = xla(c, 0);
    if (!d) {
        em_ctx_free(c);
        return;
    }
    em_ctx_set_device(c, d);
    em_tensor *cache = em_zeros(c, EM_BF16, EM_SHAPE(2, 4, 3));
    CHECK(em_tensor_device(cache) == d);
    float kv[6] = {1, 2, 3, 4, 5, 6};
    em_tensor *src = em_from_host_on(c, d, EM_F32, EM_SHAPE(2, 1, 3), kv);
    CHECK(em_assign(c, em_slice(c, cache, 1, 2, 3, 1), src) == EM_OK);
    /* a strided destination (every other row of dim 1) gets a broadcast scalar */
    CHECK(em_assign(c, em_slice(c, cache, 1, 1, 4, 2), em_scalar(c, 7, EM_F32)) == EM_OK);
    float *v = vals(c, cache);
    CHECK(v != NULL);
    if (v) {
        /* rows (dim 1): 0 untouched, 1 and 3 the scalar, 2 the source */
        CHECK(v[0] == 0 && v[3] == 7 && v[6] == 1 && v[8] == 3 && v[9] == 7 && v[11] == 7);
        CHECK(v[12] == 0 && v[15] == 7 && v[18] == 4 && v[20] == 6 && v[23] == 7);
    }
    free(v);
    CHECK(em_ctx_status(c) == EM_OK);
    em_ctx_free(c);
}

/* ops on the device against the CPU backend, in every eager mode; fused == async bitwise */
static em_tensor *chain(em_ctx *c, em_tensor *x, em_tensor *y) {
    em_tensor *h = em_add(c, em_mul(c, x, y), y);
    h = em_sub(c, em_silu(c, h), x);
    h = em_mul(c, em_tanh(c, h), em_exp(c, em_neg(c, y)));
    return em_add(c, h, x);
}

static void test_modes_against_cpu(void) {
    em_ctx *c = em_ctx_create();
    em_device *d = xla(c, 0);
    if (!d) {
        em_ctx_free(c);
        return;
    }
    enum { N = 257 * 3 };
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    for (int i = 0; i < N; i++) {
        a[i] = sinf((float)i * 0.37f) * 3;
        b[i] = cosf((float)i * 0.11f);
    }
    em_tensor *xc = em_from_host(c, EM_F32, EM_SHAPE(3, 257), a);
    em_tensor *yc = em_from_host(c, EM_F32, EM_SHAPE(3, 257), b);
    em_tensor *xd = em_from_host_on(c, d, EM_F32, EM_SHAPE(3, 257), a);
    em_tensor *yd = em_from_host_on(c, d, EM_F32, EM_SHAPE(3, 257), b);
    float *ref = vals(c, chain(c, xc, yc));
    float *out[3] = {NULL, NULL, NULL};
    em_eager_mode modes[3] = {EM_EAGER_SYNC, EM_EAGER_ASYNC, EM_EAGER_FUSED};
    for (int m = 0; m < 3; m++) {
        em_ctx_set_eager_mode(c, modes[m]);
        out[m] = vals(c, chain(c, xd, yd));
    }
    em_ctx_set_eager_mode(c, EM_EAGER_ASYNC);
    CHECK(ref && out[0] && out[1] && out[2]);
    if (ref && out[0] && out[1] && out[2]) {
        double worst = 0;
        for (int i = 0; i < N; i++) {
            double e = fabs((double)out[1][i] - ref[i]);
            if (e > worst) worst = e;
        }
        CHECK_MSG(worst < 1e-5, "xla vs cpu: max error %g", worst);
        CHECK(!memcmp(out[0], out[1], N * sizeof(float)));
        CHECK_MSG(!memcmp(out[2], out[1], N * sizeof(float)), "fused differs from async");
    }
    /* softmax and a bf16 matmul against the CPU */
    em_tensor *sm = em_softmax(c, xd, -1);
    float *s1 = vals(c, sm), *s2 = vals(c, em_softmax(c, xc, -1));
    CHECK(s1 && s2);
    for (int i = 0; s1 && s2 && i < N; i++) CHECK_MSG(fabsf(s1[i] - s2[i]) < 1e-6f, "softmax %d", i);
    /* a bf16 matmul against a host product of the same bf16 values (f32 accumulation) */
    em_tensor *w = em_randn(c, EM_BF16, EM_SHAPE(257, 16), 3, 0, 0.1);
    em_tensor *xb = em_cast(c, xd, EM_BF16);
    em_tensor *md = em_matmul(c, xb, em_to(c, w, d));
    float *m1 = vals(c, md), *wv = vals(c, w), *xv = vals(c, xb);
    CHECK_MSG(m1 && wv && xv, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    for (int i = 0; m1 && wv && xv && i < 3; i++)
        for (int j = 0; j < 16; j++) {
            double acc = 0;
            for (int k = 0; k < 257; k++) acc += (double)xv[i * 257 + k] * wv[k * 16 + j];
            float want = em_bf16_to_f32(em_f32_to_bf16((float)acc));
            CHECK_MSG(fabsf(m1[i * 16 + j] - want) <= 0.01f * fabsf(want) + 1e-2f,
                      "matmul [%d,%d]: %g vs %g", i, j, (double)m1[i * 16 + j], (double)want);
        }
    free(wv);
    free(xv);
    for (int m = 0; m < 3; m++) free(out[m]);
    free(ref);
    free(s1);
    free(s2);
    free(m1);
    free(a);
    free(b);
    CHECK(em_ctx_status(c) == EM_OK);
    em_ctx_free(c);
}

static void test_cache(void) {
    em_ctx *c = em_ctx_create();
    em_device *d = xla(c, 0);
    if (!d) {
        em_ctx_free(c);
        return;
    }
    em_pjrt_cache_stats s0, s1, s2;
    em_tensor *x = em_from_host_on(c, d, EM_F32, EM_SHAPE(5), ((float[]){1, 2, 3, 4, 5}));
    em_pjrt_cache_stats_get(d, &s0);
    em_tensor *r1 = em_mul(c, em_abs(c, x), x);
    em_pjrt_cache_stats_get(d, &s1);
    em_tensor *r2 = em_mul(c, em_abs(c, x), x);
    em_pjrt_cache_stats_get(d, &s2);
    CHECK(r1 && r2);
    CHECK(s2.misses == s1.misses && s2.hits == s1.hits + 2);
    CHECK(s1.misses >= s0.misses);
    em_ctx_free(c);
}

/* a plugin error becomes an Ember error and the process goes on */
static void test_plugin_errors(void) {
    em_ctx *c = em_ctx_create();
    em_device *d = xla(c, 0);
    if (!d) {
        em_ctx_free(c);
        return;
    }
    pj_plugin *pl = ((pj_dev *)d->impl)->pl;
    pj_key k;
    pj_key_init(&k);
    pj_key_i64(&k, 12345);
    pj_exec *x = pj_compile(c, pl, &k, pj_hash(k.p, k.len), "module { this is not mlir }",
                            "test", false);
    CHECK(x == NULL);
    CHECK_ERR(c, EM_ERR_BACKEND, "plugin xla");
    em_ctx_clear_error(c);
    pj_key_free(&k);
    /* a bad index is reported at the op, as on the CPU */
    em_tensor *w = em_from_host_on(c, d, EM_F32, EM_SHAPE(3, 2), ((float[]){1, 2, 3, 4, 5, 6}));
    em_tensor *ids = em_from_host_on(c, d, EM_I64, EM_SHAPE(2), ((int64_t[]){1, 3}));
    CHECK(em_embedding(c, w, ids) == NULL);
    CHECK_ERR(c, EM_ERR_INDEX, "embedding", "id 3", "3 embeddings");
    em_ctx_clear_error(c);
    em_tensor *ok = em_embedding(c, w, em_from_host_on(c, d, EM_I64, EM_SHAPE(1), ((int64_t[]){2})));
    float *v = vals(c, ok);
    CHECK(v && v[0] == 5 && v[1] == 6);
    free(v);
    em_ctx_free(c);
}

/* the MoE block on the device against transformers' Qwen3-MoE fixture, every implementation */
static void test_moe_block(void) {
    em_ctx *c = em_ctx_create();
    em_device *d = xla(c, 0);
    if (!d) {
        em_ctx_free(c);
        return;
    }
    em_test_bundle *bu = em_test_bundle_load("moe/qwen3_moe_norm_f32");
    CHECK(bu != NULL);
    if (!bu) {
        em_ctx_free(c);
        return;
    }
    em_ctx_set_device(c, d);
    em_tensor *x = em_test_bundle_get(bu, c, "x"), *router = em_test_bundle_get(bu, c, "router");
    em_moe_weights w = {em_test_bundle_get(bu, c, "gate_up"), em_test_bundle_get(bu, c, "down"),
                        NULL};
    em_ctx_set_device(c, em_device_cpu());
    em_tensor *y_ref = em_test_bundle_get(bu, c, "y");
    em_ctx_set_device(c, d); /* the block makes its helper tensors on the default device */
    em_moe_params p = em_moe_default_params();
    p.top_k = em_test_bundle_meta_int(bu, "top_k", 2);
    p.norm_topk_prob = em_test_bundle_meta_int(bu, "norm_topk_prob", 1) != 0;
    em_moe_impl impls[3] = {EM_MOE_RAGGED, EM_MOE_LOOP, EM_MOE_DENSE};
    for (int i = 0; i < 3; i++) {
        p.impl = impls[i];
        em_tensor *idx = NULL;
        em_tensor *rw = em_moe_route(c, em_linear(c, x, router, NULL), &p, NULL, EM_F32, &idx);
        em_tensor *y = em_moe_experts(c, x, idx, rw, &w, &p, NULL);
        CHECK_MSG(y != NULL, "%s: %s", em_moe_impl_name(impls[i]),
                  em_ctx_error(c) ? em_ctx_error(c)->message : "");
        if (y) {
            CHECK(em_tensor_device(y) == d);
            CHECK(em_test_allclose(c, em_to(c, y, em_device_cpu()), y_ref, 1e-4, 1e-4,
                                   em_moe_impl_name(impls[i])));
        }
        em_ctx_clear_error(c);
    }
    em_test_bundle_free(bu);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_golden_add_broadcast), T(test_golden_sum), T(test_golden_matmul),
             T(test_golden_argmax), T(test_compile_options), T(test_devices_and_options),
             T(test_transfers_and_copies), T(test_assign), T(test_modes_against_cpu),
             T(test_cache), T(test_plugin_errors), T(test_moe_block))

/* GGUF reading against files made by the real `gguf` package (scripts/gen_gguf_fixtures.py):
 * metadata of every value type as the package's GGUFReader reads it, tensor infos, every
 * tensor type dequantized bit for bit as gguf.quants.dequantize, quantized tensors in linear,
 * embedding and cast (and refused by the other ops), and one malformed file per validation
 * failure. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor_impl.h"
#include "ember/ember.h"
#include "harness.h"

static const char *fx(const char *rel) { return em_test_fixture_path("gguf", rel); }

static em_status status_of(const char *name) {
    if (!strcmp(name, "format")) return EM_ERR_FORMAT;
    if (!strcmp(name, "unsupported")) return EM_ERR_UNSUPPORTED;
    if (!strcmp(name, "overflow")) return EM_ERR_OVERFLOW;
    return EM_ERR_INTERNAL;
}

static void test_malformed(void) {
    json_t *doc = em_test_load_json(fx("malformed.json"));
    CHECK(doc && json_object_size(doc) >= 30);
    em_ctx *c = em_ctx_create();
    const char *name;
    json_t *e;
    json_object_foreach(doc, name, e) {
        char rel[128];
        snprintf(rel, sizeof rel, "malformed/%s.gguf", name);
        em_status want = status_of(json_string_value(json_object_get(e, "status")));
        const char *needle = json_string_value(json_object_get(e, "contains"));
        em_gguf *g = em_gguf_open(c, fx(rel));
        CHECK_MSG(!g, "%s was accepted", name);
        em_gguf_free(g);
        const em_error *err = em_ctx_error(c);
        CHECK_MSG(err && err->status == want && strstr(err->message, needle) &&
                      strstr(err->message, name),
                  "%s: want %s with \"%s\", got: %s", name, em_status_str(want), needle,
                  err ? err->message : "no error");
        em_ctx_clear_error(c);
        /* the same bytes from memory */
        size_t n;
        void *bytes = em_test_read_file(fx(rel), &n);
        g = em_gguf_open_memory(c, bytes, n, name);
        CHECK_MSG(!g && em_ctx_status(c) == want, "%s from memory", name);
        em_gguf_free(g);
        em_ctx_clear_error(c);
        free(bytes);
    }
    em_gguf_open(c, fx("no_such_file.gguf"));
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "no_such_file.gguf");
    em_ctx_free(c);
    json_decref(doc);
}

/* Compares a value with what GGUFReader read (types: outer type then element types). */
static void check_value(const em_gguf_value *v, json_t *types, size_t ti, json_t *want,
                        const char *key) {
    const char *t = json_string_value(json_array_get(types, ti));
    CHECK_MSG(t && !strcmp(em_gguf_type_name(em_gguf_value_type(v)), t), "%s: type %s, want %s",
              key, em_gguf_type_name(em_gguf_value_type(v)), t ? t : "?");
    switch (em_gguf_value_type(v)) {
    case EM_GGUF_STRING: {
        size_t len;
        const char *s = em_gguf_value_str(v, &len);
        CHECK_MSG(s && len == strlen(json_string_value(want)) &&
                      !strcmp(s, json_string_value(want)), "%s: \"%s\"", key, s ? s : "");
        break;
    }
    case EM_GGUF_FLOAT32:
    case EM_GGUF_FLOAT64: {
        double d;
        CHECK(em_gguf_value_float(v, &d) && d == json_number_value(want));
        break;
    }
    case EM_GGUF_BOOL: {
        bool b;
        CHECK(em_gguf_value_bool(v, &b) && b == json_is_true(want));
        break;
    }
    case EM_GGUF_UINT64: {
        int64_t i;
        double d;
        /* above INT64_MAX (a string in the JSON): not an int64, but a double */
        if (json_is_string(want))
            CHECK_MSG(!em_gguf_value_int(v, &i) && em_gguf_value_float(v, &d) &&
                          d == strtod(json_string_value(want), NULL),
                      "%s: a uint64 above INT64_MAX", key);
        else
            CHECK(em_gguf_value_int(v, &i) && i == json_integer_value(want));
        break;
    }
    case EM_GGUF_ARRAY: {
        CHECK_MSG(em_gguf_array_len(v) == json_array_size(want), "%s: %llu elements", key,
                  (unsigned long long)em_gguf_array_len(v));
        em_gguf_type et = em_gguf_array_type(v);
        for (uint64_t i = 0; i < em_gguf_array_len(v) && i < json_array_size(want); i++) {
            json_t *w = json_array_get(want, (size_t)i);
            if (et == EM_GGUF_ARRAY) {
                check_value(em_gguf_array_array(v, i), types, ti + 1, w, key);
            } else if (et == EM_GGUF_STRING) {
                const char *s = em_gguf_array_str(v, i, NULL);
                CHECK_MSG(s && !strcmp(s, json_string_value(w)), "%s[%llu]", key,
                          (unsigned long long)i);
            } else if (et == EM_GGUF_FLOAT32 || et == EM_GGUF_FLOAT64) {
                double d;
                CHECK(em_gguf_array_float(v, i, &d) && d == json_number_value(w));
            } else {
                int64_t x;
                CHECK_MSG(em_gguf_array_int(v, i, &x) &&
                              x == (json_is_boolean(w) ? json_is_true(w) : json_integer_value(w)),
                          "%s[%llu]", key, (unsigned long long)i);
            }
        }
        CHECK(!em_gguf_array_array(v, em_gguf_array_len(v)));
        break;
    }
    default: {
        int64_t i;
        CHECK_MSG(em_gguf_value_int(v, &i) && i == json_integer_value(want), "%s", key);
    }
    }
}

static void test_metadata(void) {
    json_t *doc = em_test_load_json(fx("meta.json"));
    json_t *keys = json_object_get(doc, "keys"), *order = json_object_get(doc, "order");
    em_ctx *c = em_ctx_create();
    const char *files[] = {"meta.gguf", "meta_v2.gguf"};
    for (int f = 0; f < 2; f++) {
        em_gguf *g = em_gguf_open(c, fx(files[f]));
        CHECK_MSG(g, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
        if (!g) continue;
        CHECK(em_gguf_version(g) == (f ? 2u : 3u));
        CHECK(em_gguf_kv_count(g) == (int64_t)json_array_size(order));
        for (size_t i = 0; i < json_array_size(order); i++) {
            const char *key = json_string_value(json_array_get(order, i));
            CHECK_MSG(!strcmp(em_gguf_kv_key(g, (int64_t)i), key), "key %zu is %s, want %s", i,
                      em_gguf_kv_key(g, (int64_t)i), key);
            json_t *e = json_object_get(keys, key);
            const em_gguf_value *v = em_gguf_find(g, key);
            CHECK_MSG(v == em_gguf_kv_value(g, (int64_t)i), "%s", key);
            if (v) check_value(v, json_object_get(e, "types"), 0, json_object_get(e, "value"), key);
        }
        CHECK(!em_gguf_find(g, "no.such.key"));
        CHECK(em_gguf_get_int(g, "k.i8", 0) == -100 && em_gguf_get_int(g, "k.str", 7) == 7);
        CHECK(!strcmp(em_gguf_get_str(g, "general.architecture", NULL), "test"));
        CHECK(em_gguf_alignment(g) == 32 && em_gguf_tensor_count(g) == 0);
        em_gguf_free(g);
    }
    em_ctx_free(c);
    json_decref(doc);
}

static void test_types(void) {
    em_ctx *c = em_ctx_create();
    em_gguf *g = em_gguf_open(c, fx("types.gguf"));
    json_t *doc = em_test_load_json(fx("types.json"));
    em_test_bundle *b = em_test_bundle_load("gguf/types");
    CHECK_MSG(g && doc && b, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (!g || !doc || !b) goto out;
    json_t *infos = json_object_get(json_object_get(doc, "meta"), "tensors");
    CHECK(em_gguf_tensor_count(g) == (int64_t)json_object_size(infos));
    const char *name;
    json_t *e;
    json_object_foreach(infos, name, e) {
        em_scope_push(c);
        const em_gguf_tensor_info *ti = em_gguf_tensor_find(g, name);
        CHECK_MSG(ti, "no tensor %s", name);
        if (!ti) continue;
        json_t *sh = json_object_get(e, "shape");
        CHECK(!strcmp(em_ggml_type_name(ti->type), json_string_value(json_object_get(e, "type"))));
        CHECK(ti->ndim == (int)json_array_size(sh));
        for (int d = 0; d < ti->ndim; d++)
            CHECK(ti->shape[d] == json_integer_value(json_array_get(sh, (size_t)d)));
        CHECK(ti->nbytes == (uint64_t)json_integer_value(json_object_get(e, "nbytes")));
        CHECK(ti->file_offset == (uint64_t)json_integer_value(json_object_get(e, "offset")));
        em_dtype own;
        if (!em_ggml_type_dtype(ti->type, &own)) { /* refused by name */
            CHECK(!em_gguf_load(c, g, name, NULL));
            CHECK_ERR(c, EM_ERR_UNSUPPORTED, name, em_ggml_type_name(ti->type));
            em_scope_pop(c);
            continue;
        }
        char key[96];
        snprintf(key, sizeof key, "deq.%s", name);
        em_tensor *want = em_test_bundle_get(b, c, key);
        em_tensor *got = em_gguf_load_as(c, g, name, EM_F32, NULL);
        em_tensor *nat = em_gguf_load(c, g, name, NULL);
        CHECK_MSG(got && nat && want, "%s: %s", name,
                  em_ctx_error(c) ? em_ctx_error(c)->message : "");
        if (got && nat && want) {
            CHECK(em_tensor_dtype(nat) == own);
            CHECK(em_tensor_numel(got) == em_tensor_numel(want));
            size_t nb = em_tensor_nbytes(got);
            /* bit for bit, NaN payloads included */
            CHECK_MSG(!memcmp(em_tensor_data(c, got), em_tensor_data(c, want), nb),
                      "%s: not bit-identical to gguf.quants.dequantize", name);
            em_tensor *cast = em_cast(c, nat, EM_F32);
            CHECK_MSG(cast && !memcmp(em_tensor_data(c, cast), em_tensor_data(c, want), nb),
                      "%s: em_cast differs", name);
            /* bf16: the f32 values rounded to nearest even */
            em_tensor *h = em_gguf_load_as(c, g, name, EM_BF16, NULL);
            em_tensor *hw = em_cast(c, want, EM_BF16);
            CHECK(h && hw && !memcmp(em_tensor_data(c, h), em_tensor_data(c, hw),
                                     em_tensor_nbytes(h)));
            /* zero copy: the quantized bytes are the file's */
            size_t n;
            const void *raw = em_gguf_data(c, g, name, &n);
            CHECK(raw && n == ti->nbytes && em_tensor_nbytes(nat) == n);
            if (own != EM_F16 && own != EM_F32 && own != EM_BF16)
                CHECK(em_tensor_data(c, nat) == raw);
        }
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    CHECK(!em_gguf_load(c, g, "t.q4_kk", NULL));
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "t.q4_kk", "nearest name: \"t.q4_k\"");
    CHECK(!em_gguf_load_as(c, g, "t.q4_0", EM_I32, NULL));
    CHECK_ERR(c, EM_ERR_DTYPE, "t.q4_0");
out:
    em_test_bundle_free(b);
    json_decref(doc);
    em_gguf_free(g);
    em_ctx_free(c);
}

static void test_tensors_outlive_handle(void) {
    em_ctx *c = em_ctx_create();
    em_gguf *g = em_gguf_open(c, fx("types.gguf"));
    em_tensor *w = em_gguf_load(c, g, "t.q8_0", NULL);
    em_gguf_free(g);
    em_tensor *f = em_cast(c, w, EM_F32);
    CHECK(f && em_tensor_numel(f) == 3 * 512);
    em_ctx_free(c);
}

static void test_align1(void) {
    em_ctx *c = em_ctx_create();
    em_gguf *g = em_gguf_open(c, fx("align1.gguf"));
    CHECK(g && em_gguf_alignment(g) == 1);
    float v[3];
    em_tensor *t = em_gguf_load(c, g, "b", NULL);
    CHECK(t && em_to_host(c, t, v, sizeof v) == EM_OK);
    CHECK(v[0] == 0.25f && v[1] == -8.0f && v[2] == 3.0e38f);
    t = em_gguf_load_as(c, g, "b", EM_BF16, NULL);
    CHECK(t && em_to_host_f32(c, t, v, 3) == EM_OK && v[1] == -8.0f);
    t = em_gguf_load_as(c, g, "a", EM_F32, NULL);
    CHECK(t && em_to_host(c, t, v, sizeof v) == EM_OK && v[2] == 3.0f);
    em_gguf_free(g);
    em_ctx_free(c);
}

/* Quantized tensors in ops: linear against the dequantized f32 product, within the rounding
 * of x to 16 bits (at most sum_k |w_jk| * max|x_block| / 65534 per output, with a block of
 * 256 for the K types, plus f32 rounding);
 * embedding and cast exactly; every other op refuses them. */
static void check_qlinear(em_ctx *c, em_tensor *wq, em_tensor *wf, int64_t m, int block,
                          const char *name) {
    int64_t n = em_tensor_dim(wf, 0), k = em_tensor_dim(wf, 1);
    em_tensor *x = em_randn(c, EM_F32, EM_SHAPE(m, k), 11, 0, 1);
    em_tensor *bias = em_randn(c, EM_F32, EM_SHAPE(n), 12, 0, 1);
    em_tensor *got = em_linear(c, x, wq, bias), *want = em_linear(c, x, wf, bias);
    CHECK_MSG(got && want, "%s: %s", name, em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (!got || !want) {
        em_ctx_clear_error(c);
        return;
    }
    const float *xs = em_tensor_data(c, x), *ws = em_tensor_data(c, wf);
    const float *g = em_tensor_data(c, got), *r = em_tensor_data(c, want);
    int bad = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double bound = 0, mag = 0;
            for (int64_t b0 = 0; b0 < k; b0 += block) {
                double amax = 0, sw = 0;
                for (int64_t t = b0; t < b0 + block; t++) {
                    amax = fmax(amax, fabs(xs[i * k + t]));
                    sw += fabs(ws[j * k + t]);
                    mag += fabs(ws[j * k + t] * xs[i * k + t]);
                }
                bound += sw * amax / 65534;
            }
            bound += 2e-6 * mag + 1e-6;
            if (fabs(g[i * n + j] - r[i * n + j]) > bound && bad++ < 3)
                fprintf(stderr, "%s m=%lld [%lld,%lld]: %g vs %g (bound %g)\n", name,
                        (long long)m, (long long)i, (long long)j, g[i * n + j], r[i * n + j],
                        bound);
        }
    CHECK_MSG(!bad, "%s: %d outputs out of bounds at m=%lld", name, bad, (long long)m);
    /* a bf16 input gives a bf16 result of the same product */
    em_tensor *gb = em_linear(c, em_cast(c, x, EM_BF16), wq, NULL);
    CHECK(gb && em_tensor_dtype(gb) == EM_BF16);
}

static void test_quant_ops(void) {
    em_ctx *c = em_ctx_create();
    em_gguf *g = em_gguf_open(c, fx("types.gguf"));
    const char *names[] = {"t.q8_0", "t.q4_0", "t.q4_1", "t.q5_0", "t.q5_1",
                           "t.q4_k", "t.q5_k", "t.q6_k"};
    for (size_t i = 0; g && i < sizeof names / sizeof names[0]; i++) {
        em_scope_push(c);
        em_tensor *wq = em_gguf_load(c, g, names[i], NULL);
        em_tensor *wf = em_gguf_load_as(c, g, names[i], EM_F32, NULL);
        int block = em_dtype_block_size(em_tensor_dtype(wq));
        /* the dot kernels below 64 rows of x (register tiles of 4 or 8 and their tails, tiles
         * of 32 rows), dequantized blocks of weight rows in the f32 GEMM from 64 on */
        static const int64_t ms[] = {1, 3, 6, 16, 17, 39, 63, 64, 97};
        for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++)
            check_qlinear(c, wq, wf, ms[k], block, names[i]);
        /* embedding rows are the dequantized rows */
        em_tensor *ids = em_from_host(c, EM_I64, 2, (int64_t[]){2, 2}, (int64_t[]){2, 0, 1, 2});
        em_tensor *e = em_embedding(c, wq, ids), *ef = em_embedding(c, wf, ids);
        CHECK(e && ef && em_tensor_dtype(e) == EM_F32 &&
              !memcmp(em_tensor_data(c, e), em_tensor_data(c, ef), em_tensor_nbytes(ef)));
        em_tensor *bad_ids = em_from_host(c, EM_I64, 1, (int64_t[]){1}, (int64_t[]){3});
        CHECK(!em_embedding(c, wq, bad_ids));
        CHECK_ERR(c, EM_ERR_INDEX, "id 3");
        /* everything else refuses it, naming the dtype */
        CHECK(!em_add(c, wq, wq));
        CHECK_ERR(c, EM_ERR_DTYPE, "add", em_dtype_name(em_tensor_dtype(wq)), "em_cast");
        CHECK(!em_transpose(c, wq, 0, 1));
        CHECK_ERR(c, EM_ERR_DTYPE, "transpose");
        CHECK(!em_matmul(c, wf, wq));
        CHECK_ERR(c, EM_ERR_DTYPE, "matmul");
        CHECK(!em_cast(c, wq, EM_I32));
        CHECK_ERR(c, EM_ERR_DTYPE, "cast");
        CHECK(!em_cast(c, wf, em_tensor_dtype(wq)));
        CHECK_ERR(c, EM_ERR_DTYPE, "block-quantized");
        em_scope_pop(c);
    }
    /* a quantized tensor's rows are whole blocks */
    uint8_t blk[34] = {0};
    CHECK(!em_from_host(c, EM_Q8_0, 1, (int64_t[]){16}, blk));
    CHECK_ERR(c, EM_ERR_SHAPE, "blocks of 32");
    CHECK(em_tensor_nbytes(em_from_host(c, EM_Q8_0, 1, (int64_t[]){32}, blk)) == 34);
    CHECK(em_dtype_size(EM_Q4_K) == 0 && em_dtype_block_size(EM_Q4_K) == 256 &&
          em_dtype_block_bytes(EM_Q4_K) == 144 && em_dtype_is_quantized(EM_Q6_K) &&
          !em_dtype_is_quantized(EM_F32));
    em_dtype d;
    CHECK(em_dtype_parse("q5_k", &d) && d == EM_Q5_K);
    em_gguf_free(g);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_malformed), T(test_metadata), T(test_types), T(test_tensors_outlive_handle),
             T(test_align1), T(test_quant_ops))

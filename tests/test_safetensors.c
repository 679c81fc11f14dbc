/* safetensors reading and writing against files made by the real safetensors / torch /
 * transformers (scripts/gen_format_fixtures.py): decoded values of every dtype compared bit for
 * bit with torch, sharded checkpoints from save_pretrained, a malformed-file corpus that the
 * library also rejects, and the writer's bytes compared with the library's. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tensor_impl.h"
#include "ember/ember.h"
#include "ember/safetensors.h"
#include "harness.h"
#include "io/safetensors/safetensors_impl.h"

static const char *fx(const char *rel) { return em_test_fixture_path("safetensors", rel); }

static json_t *load_json(const char *path) { return em_test_load_json(path); }

/* Hex string → bytes (malloc'd); *n gets the count. */
static unsigned char *unhex(const char *s, size_t *n) {
    size_t len = strlen(s) / 2;
    unsigned char *b = malloc(len ? len : 1);
    for (size_t i = 0; i < len; i++) {
        unsigned v;
        sscanf(s + 2 * i, "%2x", &v);
        b[i] = (unsigned char)v;
    }
    *n = len;
    return b;
}

/* Compares a loaded tensor's bytes with the expected hex; reports the first differing byte. */
static void check_bytes(em_ctx *c, em_tensor *t, const char *hex, const char *what,
                        const char *as) {
    CHECK_MSG(t != NULL, "%s as %s: %s", what, as,
              em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (!t) {
        em_ctx_clear_error(c);
        return;
    }
    size_t n;
    unsigned char *want = unhex(hex, &n);
    size_t got_n = em_tensor_nbytes(t);
    unsigned char *got = malloc(got_n ? got_n : 1);
    CHECK(em_to_host(c, t, got, got_n) == EM_OK);
    CHECK_MSG(got_n == n, "%s as %s: %zu bytes, want %zu", what, as, got_n, n);
    if (got_n == n) {
        size_t i = 0;
        while (i < n && got[i] == want[i]) i++;
        CHECK_MSG(i == n, "%s as %s: byte %zu is 0x%02x, torch gives 0x%02x", what, as, i,
                  i < n ? got[i] : 0, i < n ? want[i] : 0);
    }
    free(got);
    free(want);
}

/* ---- every dtype, decoded as torch decodes it ---- */

static void test_dtypes(void) {
    em_ctx *c = em_ctx_create();
    json_t *exp = load_json(fx("dtypes.json"));
    em_safetensors *st = em_safetensors_open(c, fx("dtypes.safetensors"));
    CHECK_MSG(st != NULL, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (!st || !exp) goto out;
    CHECK(em_safetensors_count(st) == (int64_t)json_object_size(exp));
    const char *name;
    json_t *e;
    int f8_seen = 0;
    json_object_foreach(exp, name, e) {
        em_scope_push(c);
        const em_safetensors_info *ti = em_safetensors_find(st, name);
        CHECK_MSG(ti != NULL, "tensor %s missing", name);
        if (!ti) continue;
        const char *dt = json_string_value(json_object_get(e, "dtype"));
        CHECK_MSG(!strcmp(em_st_dtype_name(ti->dtype), dt), "%s: dtype %s, want %s", name,
                  em_st_dtype_name(ti->dtype), dt);
        json_t *shape = json_object_get(e, "shape");
        CHECK((size_t)ti->ndim == json_array_size(shape));
        for (int d = 0; d < ti->ndim && d < (int)json_array_size(shape); d++)
            CHECK(ti->shape[d] == json_integer_value(json_array_get(shape, (size_t)d)));
        /* the stored bytes */
        size_t nb;
        const void *raw = em_safetensors_data(c, st, name, &nb);
        size_t rn;
        unsigned char *want = unhex(json_string_value(json_object_get(e, "raw")), &rn);
        CHECK_MSG(raw && nb == rn && (!rn || !memcmp(raw, want, rn)), "%s: raw bytes differ", name);
        free(want);
        /* conversions, against torch's .to(dtype) */
        static const struct {
            const char *key;
            em_dtype dt;
        } as[] = {{"f32", EM_F32}, {"bf16", EM_BF16}, {"f64", EM_F64}, {"i64", EM_I64}};
        for (size_t k = 0; k < sizeof as / sizeof as[0]; k++) {
            json_t *h = json_object_get(e, as[k].key);
            if (!h) continue;
            em_tensor *t = em_safetensors_load_as(c, st, name, as[k].dt, NULL);
            check_bytes(c, t, json_string_value(h), name, as[k].key);
        }
        /* the natural dtype */
        em_dtype natural;
        CHECK(em_st_dtype_natural(ti->dtype, &natural));
        em_tensor *t = em_safetensors_load(c, st, name, NULL);
        CHECK(t && em_tensor_dtype(t) == natural);
        if (!strncmp(dt, "F8_", 3)) {
            f8_seen++;
            CHECK(natural == EM_BF16);
            check_bytes(c, t, json_string_value(json_object_get(e, "bf16")), name, "natural");
        } else if (dt[0] == 'U' && dt[1] != '8') {
            CHECK(natural == (!strcmp(dt, "U16") ? EM_I32 : EM_I64));
        } else {
            check_bytes(c, t, json_string_value(json_object_get(e, "raw")), name, "natural");
        }
        em_scope_pop(c);
    }
    CHECK(f8_seen == 5);
    /* U64 above INT64_MAX cannot become an integer; i32 narrowing is allowed like a cast */
    CHECK(em_ctx_status(c) == EM_OK);
out:
    em_safetensors_free(st);
    json_decref(exp);
    em_ctx_free(c);
}

/* ---- zero copy: tensors point into the mapping and outlive the handle ---- */

static void test_zero_copy(void) {
    em_ctx *c = em_ctx_create();
    em_safetensors *st = em_safetensors_open(c, fx("dtypes.safetensors"));
    CHECK(st != NULL);
    if (!st) goto out;
    size_t nb;
    const float *raw = em_safetensors_data(c, st, "f32", &nb);
    float want[24];
    memcpy(want, raw, sizeof want);
    em_tensor *t = em_detach(c, em_safetensors_load_as(c, st, "f32", EM_F32, NULL));
    em_tensor *b = em_detach(c, em_safetensors_load(c, st, "bf16", NULL));
    em_tensor *conv = em_detach(c, em_safetensors_load_as(c, st, "bf16", EM_F32, NULL));
    CHECK(t && b && conv);
    CHECK(em_tensor_data(c, t) == (const void *)raw);      /* zero copy */
    CHECK(em_tensor_data(c, b) == em_safetensors_data(c, st, "bf16", &nb));
    CHECK(em_tensor_data(c, conv) != em_safetensors_data(c, st, "bf16", &nb));
    em_safetensors_free(st);
    /* the mapping lives on through the tensors */
    float got[24];
    CHECK(em_to_host(c, t, got, sizeof got) == EM_OK && !memcmp(got, want, sizeof got));
    /* writes are private (copy-on-write): the file keeps its bytes */
    float *p = em_tensor_data(c, t);
    p[1] = 12345.0f;
    em_tensor *sum = em_sum(c, t, NULL, 0, false);
    CHECK(sum != NULL);
    em_tensor_release(t);
    em_tensor_release(b);
    em_tensor_release(conv);
    st = em_safetensors_open(c, fx("dtypes.safetensors"));
    CHECK(st && !memcmp(em_safetensors_data(c, st, "f32", &nb), want, sizeof want));
    em_safetensors_free(st);
out:
    em_ctx_free(c);
}

/* ---- metadata ---- */

static void test_metadata(void) {
    em_ctx *c = em_ctx_create();
    em_safetensors *st = em_safetensors_open(c, fx("meta_one.safetensors"));
    CHECK(st && em_safetensors_metadata_count(st) == 1);
    CHECK(st && !strcmp(em_safetensors_metadata_get(st, "format"), "pt"));
    CHECK(st && !strcmp(em_safetensors_metadata_key(st, 0), "format"));
    CHECK(st && em_safetensors_metadata_get(st, "nope") == NULL);
    em_safetensors_free(st);
    st = em_safetensors_open(c, fx("meta_none.safetensors"));
    CHECK(st && em_safetensors_metadata_count(st) == 0 && !st->has_meta);
    em_safetensors_free(st);
    st = em_safetensors_open(c, fx("dtypes.safetensors"));
    CHECK(st && em_safetensors_metadata_count(st) == 2);
    CHECK(st && !strcmp(em_safetensors_metadata_get(st, "note"), "every dtype"));
    em_safetensors_free(st);
    CHECK(em_ctx_status(c) == EM_OK);
    em_ctx_free(c);
}

/* ---- sharded checkpoints ---- */

static void check_sharded(em_ctx *c, em_safetensors *st, json_t *exp) {
    CHECK(em_safetensors_file_count(st) == 2);
    CHECK(em_safetensors_count(st) == (int64_t)json_object_size(exp));
    const char *name;
    json_t *e;
    json_object_foreach(exp, name, e) {
        const em_safetensors_info *ti = em_safetensors_find(st, name);
        CHECK_MSG(ti != NULL, "%s missing", name);
        if (!ti) continue;
        const char *shard = json_string_value(json_object_get(e, "shard"));
        size_t fl = strlen(ti->file), sl = strlen(shard);
        CHECK_MSG(fl >= sl && !strcmp(ti->file + fl - sl, shard), "%s in %s, want %s", name,
                  ti->file, shard);
        em_scope_push(c);
        check_bytes(c, em_safetensors_load(c, st, name, NULL),
                    json_string_value(json_object_get(e, "raw")), name, "natural");
        em_tensor *f = em_safetensors_load_as(c, st, name, EM_F32, NULL);
        CHECK(f && em_tensor_dtype(f) == EM_F32 && em_tensor_numel(f) == ti->numel);
        em_scope_pop(c);
    }
    /* iteration covers every tensor once, shard by shard */
    int64_t n = em_safetensors_count(st);
    for (int64_t i = 0; i < n; i++) {
        const em_safetensors_info *ti = em_safetensors_info_at(st, i);
        CHECK(ti && json_object_get(exp, ti->name));
        if (i) CHECK(strcmp(em_safetensors_info_at(st, i - 1)->file, ti->file) <= 0);
    }
    CHECK(em_safetensors_info_at(st, n) == NULL);
    CHECK(!strcmp(em_safetensors_metadata_get(st, "format"), "pt"));
}

static void test_sharded(void) {
    em_ctx *c = em_ctx_create();
    json_t *exp = load_json(fx("sharded.json"));
    em_safetensors *st = em_safetensors_open(c, fx("sharded"));
    CHECK_MSG(st != NULL, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (st && exp) check_sharded(c, st, exp);
    em_safetensors_free(st);
    st = em_safetensors_open(c, fx("sharded/model.safetensors.index.json"));
    CHECK(st != NULL);
    if (st && exp) check_sharded(c, st, exp);
    em_safetensors_free(st);

    CHECK(em_safetensors_open(c, fx("sharded/missing_shard.index.json")) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "model-00009-of-00009.safetensors", "lm_head.extra",
              "missing_shard.index.json");
    CHECK(em_safetensors_open(c, fx("sharded/missing_weight.index.json")) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "model.layers.7.mlp.up_proj.weight",
              "that shard has no such tensor", "missing_weight.index.json");
    /* a directory with no checkpoint, a missing file */
    CHECK(em_safetensors_open(c, fx("malformed")) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "model.safetensors");
    CHECK(em_safetensors_open(c, fx("nope.safetensors")) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "nope.safetensors", "No such file");
    json_decref(exp);
    em_ctx_free(c);
}

static void test_lookup_errors(void) {
    em_ctx *c = em_ctx_create();
    em_safetensors *st = em_safetensors_open(c, fx("sharded"));
    CHECK(st != NULL);
    CHECK(em_safetensors_has(st, "model.norm.weight"));
    CHECK(!em_safetensors_has(st, "model.norm.weights"));
    CHECK(em_safetensors_load(c, st, "model.norm.weights", NULL) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "no tensor \"model.norm.weights\"", "model.safetensors.index.json",
              "nearest name: \"model.norm.weight\"");
    CHECK(em_safetensors_load_as(c, st, "model.norm.weight", (em_dtype)99, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_DTYPE, "model.norm.weight");
    em_safetensors_free(st);
    em_ctx_free(c);
}

/* ---- malformed files: each one a specific message naming the file and the tensor ---- */

static void test_malformed(void) {
    em_ctx *c = em_ctx_create();
    json_t *man = load_json(fx("malformed/manifest.json"));
    CHECK(man != NULL && json_object_size(man) >= 25);
    const char *name;
    json_t *e;
    json_object_foreach(man, name, e) {
        char rel[256];
        snprintf(rel, sizeof rel, "malformed/%s.safetensors", name);
        const char *path = fx(rel);
        em_safetensors *st = em_safetensors_open(c, path);
        CHECK_MSG(st == NULL, "%s was accepted", name);
        em_safetensors_free(st);
        const em_error *err = em_ctx_error(c);
        if (!err) continue;
        const char *status = json_string_value(json_object_get(e, "status"));
        em_status want = !strcmp(status, "overflow") ? EM_ERR_OVERFLOW : EM_ERR_FORMAT;
        CHECK_MSG(err->status == want, "%s: %s", name, err->message);
        CHECK_MSG(strstr(err->message, rel) != NULL, "%s: message lacks the file: %s", name,
                  err->message);
        size_t i;
        json_t *needle;
        json_array_foreach(json_object_get(e, "contains"), i, needle)
            CHECK_MSG(strstr(err->message, json_string_value(needle)) != NULL,
                      "%s: message lacks \"%s\": %s", name, json_string_value(needle),
                      err->message);
        /* the same bytes through the in-memory path give the same verdict */
        size_t n;
        void *bytes = em_test_read_file(path, &n);
        em_ctx_clear_error(c);
        CHECK(em_safetensors_open_memory(c, bytes, n, name) == NULL);
        CHECK_MSG(em_ctx_status(c) == want, "%s in memory", name);
        em_ctx_clear_error(c);
        free(bytes);
    }
    json_decref(man);
    em_ctx_free(c);
}

/* ---- writer: the library's bytes ---- */

/* Re-serialises an opened file with Ember's writer, adding tensors in reverse order. */
static void *rewrite(em_ctx *c, em_safetensors *st, size_t *n, const char *save_path) {
    em_safetensors_writer *w = em_safetensors_writer_create(c);
    if (!w) return NULL;
    em_scope_push(c);
    for (int64_t i = em_safetensors_count(st) - 1; i >= 0; i--) {
        const em_safetensors_info *ti = em_safetensors_info_at(st, i);
        em_dtype dt;
        if (em_st_dtype_natural(ti->dtype, &dt) && em_st_dtype_of(dt) == ti->dtype) {
            em_safetensors_writer_add(c, w, ti->name, em_safetensors_load(c, st, ti->name, NULL));
        } else {
            size_t nb;
            const void *p = em_safetensors_data(c, st, ti->name, &nb);
            em_safetensors_writer_add_raw(c, w, ti->name, ti->dtype, ti->ndim, ti->shape, p, nb);
        }
    }
    if (st->has_meta) em_safetensors_writer_set_metadata(c, w, NULL, NULL);
    for (int i = 0; i < em_safetensors_metadata_count(st); i++)
        em_safetensors_writer_set_metadata(c, w, em_safetensors_metadata_key(st, i),
                                           em_safetensors_metadata_value(st, i));
    void *out = NULL;
    if (save_path) {
        if (em_safetensors_writer_save(c, w, save_path) == EM_OK)
            out = em_test_read_file(save_path, n);
    } else {
        em_safetensors_writer_serialize(c, w, &out, n);
    }
    em_scope_pop(c);
    em_safetensors_writer_free(w);
    return out;
}

static void check_rewrite(em_ctx *c, const char *path, bool via_file) {
    size_t want_n = 0, got_n = 0;
    void *want = em_test_read_file(path, &want_n);
    em_safetensors *st = em_safetensors_open(c, path);
    CHECK_MSG(st != NULL, "%s: %s", path, em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (!st) {
        em_ctx_clear_error(c);
        free(want);
        return;
    }
    char tmp[] = "/tmp/ember_st_writeXXXXXX";
    int fd = via_file ? mkstemp(tmp) : -1;
    if (fd >= 0) close(fd);
    void *got = rewrite(c, st, &got_n, via_file ? tmp : NULL);
    if (via_file) unlink(tmp);
    CHECK_MSG(em_ctx_status(c) == EM_OK, "%s: %s", path,
              em_ctx_error(c) ? em_ctx_error(c)->message : "");
    em_ctx_clear_error(c);
    size_t i = 0;
    while (got && i < got_n && i < want_n && ((char *)got)[i] == ((char *)want)[i]) i++;
    CHECK_MSG(got && got_n == want_n && i == want_n,
              "%s: Ember wrote %zu bytes, the library %zu; first difference at byte %zu", path,
              got_n, want_n, i);
    free(got);
    free(want);
    em_safetensors_free(st);
}

static void test_writer_bytes(void) {
    em_ctx *c = em_ctx_create();
    static const char *files[] = {"mixed", "mixed_meta", "meta_empty", "names", "empty",
                                  "pad0", "pad1", "pad2", "pad3", "pad4", "pad5", "pad6", "pad7"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "writer/%s.safetensors", files[i]);
        check_rewrite(c, fx(rel), i % 2 == 0);
    }
    /* the checkpoints transformers wrote, shard by shard */
    check_rewrite(c, fx("sharded/model-00001-of-00002.safetensors"), true);
    check_rewrite(c, fx("sharded/model-00002-of-00002.safetensors"), false);
    check_rewrite(c, fx("dtypes.safetensors"), false);
    em_ctx_free(c);
}

/* Strided, lazily fused and converted tensors are written as their values. */
static void test_writer_values(void) {
    em_ctx *c = em_ctx_create();
    float v[6] = {1, 2, 3, 4, 5, 6};
    em_tensor *a = em_from_host(c, EM_F32, EM_SHAPE(2, 3), v);
    em_tensor *at = em_transpose(c, a, 0, 1);
    em_tensor *sum = em_add(c, a, a);
    em_tensor *b16 = em_cast(c, a, EM_BF16);
    const char *names[] = {"t", "sum", "b16"};
    em_tensor *ts[] = {at, sum, b16};
    const char *meta[] = {"format", "pt", "k", "v", NULL};
    char tmp[] = "/tmp/ember_st_valuesXXXXXX";
    int fd = mkstemp(tmp);
    close(fd);
    CHECK(em_safetensors_save(c, tmp, 3, names, ts, meta) == EM_OK);
    em_safetensors *st = em_safetensors_open(c, tmp);
    CHECK(st && em_safetensors_count(st) == 3 && em_safetensors_metadata_count(st) == 2);
    CHECK(st && !strcmp(em_safetensors_metadata_key(st, 1), "k"));
    float got[6];
    em_tensor *t = em_safetensors_load(c, st, "t", NULL);
    CHECK(t && em_tensor_dim(t, 0) == 3 && em_tensor_dim(t, 1) == 2);
    CHECK(em_to_host(c, t, got, sizeof got) == EM_OK);
    CHECK(got[0] == 1 && got[1] == 4 && got[2] == 2 && got[5] == 6);
    CHECK(em_to_host_f32(c, em_safetensors_load(c, st, "sum", NULL), got, 6) == EM_OK &&
          got[5] == 12);
    em_tensor *bb = em_safetensors_load(c, st, "b16", NULL);
    CHECK(bb && em_tensor_dtype(bb) == EM_BF16);
    em_safetensors_free(st);
    /* errors: duplicate names, reserved name, wrong raw size */
    em_safetensors_writer *w = em_safetensors_writer_create(c);
    CHECK(em_safetensors_writer_add(c, w, "x", a) == EM_OK);
    CHECK(em_safetensors_writer_add(c, w, "x", a) == EM_ERR_INVALID_ARG);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "\"x\" was added twice");
    CHECK(em_safetensors_writer_add(c, w, "__metadata__", a) == EM_ERR_INVALID_ARG);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "reserved");
    unsigned char raw[3] = {1, 2, 3};
    CHECK(em_safetensors_writer_add_raw(c, w, "r", EM_ST_F8_E4M3, EM_SHAPE(4), raw, 3) ==
          EM_ERR_SHAPE);
    CHECK_ERR(c, EM_ERR_SHAPE, "\"r\"", "4 elements of F8_E4M3");
    CHECK(em_safetensors_writer_save(c, w, "/nonexistent-dir/x.safetensors") == EM_ERR_IO);
    CHECK_ERR(c, EM_ERR_IO, "/nonexistent-dir/x.safetensors");
    em_safetensors_writer_free(w);
    unlink(tmp);
    em_ctx_free(c);
}

/* A tensor with more dims than Ember has can be listed but not loaded; C64 likewise. */
static void test_unloadable(void) {
    em_ctx *c = em_ctx_create();
    em_safetensors_writer *w = em_safetensors_writer_create(c);
    int64_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 2};
    float v[2] = {1, 2};
    CHECK(em_safetensors_writer_add_raw(c, w, "deep", EM_ST_F32, 9, shape, v, 8) == EM_OK);
    CHECK(em_safetensors_writer_add_raw(c, w, "cplx", EM_ST_C64, 1, shape, v, 8) == EM_OK);
    void *buf;
    size_t n;
    CHECK(em_safetensors_writer_serialize(c, w, &buf, &n) == EM_OK);
    em_safetensors_writer_free(w);
    em_safetensors *st = em_safetensors_open_memory(c, buf, n, "mem");
    CHECK(st && em_safetensors_find(st, "deep")->ndim == 9);
    CHECK(em_safetensors_load(c, st, "deep", NULL) == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "\"deep\"", "9 dimensions");
    CHECK(em_safetensors_load_as(c, st, "cplx", EM_F32, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "\"cplx\"", "C64");
    em_safetensors_free(st);
    free(buf);
    em_ctx_free(c);
}

/* U64 values past INT64_MAX do not fit an integer dtype; floats take them rounded. */
static void test_u64_range(void) {
    em_ctx *c = em_ctx_create();
    em_safetensors_writer *w = em_safetensors_writer_create(c);
    uint64_t v[2] = {5, UINT64_MAX};
    CHECK(em_safetensors_writer_add_raw(c, w, "u", EM_ST_U64, EM_SHAPE(2), v, 16) == EM_OK);
    void *buf;
    size_t n;
    CHECK(em_safetensors_writer_serialize(c, w, &buf, &n) == EM_OK);
    em_safetensors_writer_free(w);
    em_safetensors *st = em_safetensors_open_memory(c, buf, n, "mem");
    CHECK(em_safetensors_load(c, st, "u", NULL) == NULL);
    CHECK_ERR(c, EM_ERR_OVERFLOW, "\"u\"", "element 1", "18446744073709551615");
    double d[2];
    em_tensor *t = em_safetensors_load_as(c, st, "u", EM_F64, NULL);
    CHECK(t && em_to_host(c, t, d, sizeof d) == EM_OK && d[0] == 5 && d[1] == 18446744073709551616.0);
    em_safetensors_free(st);
    free(buf);
    em_ctx_free(c);
}

/* Shards that share a name: the index decides; without a say it is an error. */
static void write_shard(em_ctx *c, const char *path, const char *a, float va, const char *b,
                        float vb) {
    em_tensor *ta = em_full(c, EM_F32, EM_SHAPE(2), va), *tb = em_full(c, EM_F32, EM_SHAPE(2), vb);
    const char *names[] = {a, b};
    em_tensor *ts[] = {ta, tb};
    const char *meta[] = {"format", va < 10 ? "first" : "second", NULL};
    CHECK(em_safetensors_save(c, path, 2, names, ts, meta) == EM_OK);
}

static void test_shard_duplicates(void) {
    em_ctx *c = em_ctx_create();
    char dir[] = "/tmp/ember_st_shardsXXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char pa[128], pb[128], idx[128], bad[128];
    snprintf(pa, sizeof pa, "%s/a.safetensors", dir);
    snprintf(pb, sizeof pb, "%s/b.safetensors", dir);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    snprintf(bad, sizeof bad, "%s/bad.index.json", dir);
    write_shard(c, pa, "x", 1, "y", 2);
    write_shard(c, pb, "y", 30, "z", 40);
    FILE *f = fopen(idx, "w");
    fputs("{\"metadata\": {\"total_size\": 32}, \"weight_map\": {\"x\": \"a.safetensors\", "
          "\"y\": \"b.safetensors\", \"z\": \"b.safetensors\"}}",
          f);
    fclose(f);
    f = fopen(bad, "w");
    fputs("{\"weight_map\": {\"x\": \"a.safetensors\", \"z\": \"b.safetensors\"}}", f);
    fclose(f);
    em_safetensors *st = em_safetensors_open(c, dir);
    CHECK(st && em_safetensors_count(st) == 3 && em_safetensors_file_count(st) == 2);
    float v[2] = {0};
    CHECK(em_to_host(c, em_safetensors_load(c, st, "y", NULL), v, sizeof v) == EM_OK &&
          v[0] == 30);
    CHECK(st && !strcmp(em_safetensors_metadata_get(st, "format"), "first"));
    em_safetensors_free(st);
    CHECK(em_safetensors_open(c, bad) == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "tensor \"y\" is in both", "a.safetensors", "b.safetensors");
    /* a shard path that leaves the checkpoint directory */
    f = fopen(bad, "w");
    fputs("{\"weight_map\": {\"x\": \"../a.safetensors\"}}", f);
    fclose(f);
    CHECK(em_safetensors_open(c, bad) == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "../a.safetensors", "not a file name inside");
    unlink(pa), unlink(pb), unlink(idx), unlink(bad), rmdir(dir);
    em_ctx_free(c);
}

/* The library writes `{},"__metadata__":{}}` for no tensors and empty metadata (serde_json with
 * a zero length hint); Ember writes the valid header instead. */
static void test_empty_metadata_only(void) {
    em_ctx *c = em_ctx_create();
    em_safetensors_writer *w = em_safetensors_writer_create(c);
    CHECK(em_safetensors_writer_set_metadata(c, w, NULL, NULL) == EM_OK);
    void *buf;
    size_t n;
    CHECK(em_safetensors_writer_serialize(c, w, &buf, &n) == EM_OK);
    CHECK(n == 32 && !memcmp((char *)buf + 8, "{\"__metadata__\":{}}     ", 24));
    em_safetensors *st = em_safetensors_open_memory(c, buf, n, "mem");
    CHECK(st && em_safetensors_count(st) == 0 && st->has_meta);
    em_safetensors_free(st);
    free(buf);
    em_safetensors_writer_free(w);
    em_ctx_free(c);
}

/* Tensors big enough to be converted by several threads; the bf16 → f32 reference is the
 * definition of bf16 (the upper half of an f32). */
static void test_parallel_convert(void) {
    em_ctx *c = em_ctx_create();
    int64_t n = 3 * (1 << 20) + 123;
    uint16_t *b = malloc((size_t)n * 2);
    uint32_t x = 12345;
    for (int64_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        b[i] = (uint16_t)(x >> 16);
        if ((b[i] & 0x7f80) == 0x7f80) b[i] &= 0xbfff; /* no NaN/inf: plain values */
    }
    em_safetensors_writer *w = em_safetensors_writer_create(c);
    em_safetensors_writer_add_raw(c, w, "w", EM_ST_BF16, EM_SHAPE(n), b, (size_t)n * 2);
    em_safetensors_writer_add_raw(c, w, "q", EM_ST_F8_E4M3, EM_SHAPE(n), b, (size_t)n);
    void *buf;
    size_t nb;
    CHECK(em_safetensors_writer_serialize(c, w, &buf, &nb) == EM_OK);
    em_safetensors_writer_free(w);
    em_safetensors *st = em_safetensors_open_memory(c, buf, nb, "big");
    em_tensor *f = em_safetensors_load_as(c, st, "w", EM_F32, NULL);
    const uint32_t *fv = em_tensor_data(c, f);
    int64_t bad = -1;
    for (int64_t i = 0; fv && i < n && bad < 0; i++)
        if (fv[i] != (uint32_t)b[i] << 16) bad = i;
    CHECK_MSG(fv && bad < 0, "element %lld", (long long)bad);
    em_tensor *q = em_safetensors_load_as(c, st, "q", EM_F32, NULL);
    const float *qv = em_tensor_data(c, q);
    const uint8_t *codes = (const uint8_t *)b;
    bad = -1;
    for (int64_t i = 0; qv && i < n && bad < 0; i++) {
        float want = em_st_f8_to_f32(EM_ST_F8_E4M3, codes[i]);
        if (memcmp(&qv[i], &want, 4)) bad = i;
    }
    CHECK_MSG(qv && bad < 0, "f8 element %lld", (long long)bad);
    em_safetensors_free(st);
    em_ctx_free(c);
    free(buf);
    free(b);
}

/* A writer that does not sort by alignment leaves an f32 at an odd offset: loads copy it. */
static void test_misaligned(void) {
    em_ctx *c = em_ctx_create();
    const char *h = "{\"u\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
                    "\"f\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[3,11]}}";
    size_t hn = strlen(h), pad = (8 - hn % 8) % 8, n = 8 + hn + pad + 11;
    unsigned char *buf = calloc(1, n);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((hn + pad) >> (8 * i));
    memcpy(buf + 8, h, hn);
    memset(buf + 8 + hn, ' ', pad);
    float want[2] = {1.5f, -2.25f};
    memcpy(buf + 8 + hn + pad + 3, want, 8);
    em_safetensors *st = em_safetensors_open_memory(c, buf, n, "odd");
    CHECK(st != NULL);
    em_tensor *t = em_safetensors_load(c, st, "f", NULL);
    float got[2];
    CHECK(em_to_host(c, t, got, sizeof got) == EM_OK && got[0] == 1.5f && got[1] == -2.25f);
    CHECK(em_tensor_data(c, t) != (void *)(buf + 8 + hn + pad + 3)); /* a copy */
    em_tensor *d = em_safetensors_load_as(c, st, "f", EM_F64, NULL);
    double dv[2];
    CHECK(em_to_host(c, d, dv, sizeof dv) == EM_OK && dv[0] == 1.5 && dv[1] == -2.25);
    em_safetensors_free(st);
    em_ctx_free(c);
    free(buf);
}

EM_TEST_MAIN(T(test_parallel_convert), T(test_misaligned), T(test_shard_duplicates), T(test_empty_metadata_only), T(test_dtypes), T(test_zero_copy), T(test_metadata), T(test_sharded),
             T(test_lookup_errors), T(test_malformed), T(test_writer_bytes),
             T(test_writer_values), T(test_unloadable), T(test_u64_range))

/* The CLIP tokenizer and CLIPTextModel against transformers 5.24 (tests/fixtures/diffusion/clip,
 * made by scripts/gen_clip_fixtures.py): the pipelines' padded, truncated ids for ten prompts
 * from three tokenizer folders (vocab.json + merges.txt with SD 1.x's and SD 2.x's pad tokens, and
 * a tokenizer.json), the text model's last_hidden_state, pooler_output, hidden_states and
 * clip-skip embeddings within 1e-4, and clear errors for bad folders and inputs. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

static const char *const TOK_FOLDERS[] = {"tok_slow", "tok_fast", "tok_sd2"};

static bool ids_equal(json_t *want, const int32_t *got, int64_t n) {
    if ((int64_t)json_array_size(want) != n) return false;
    for (int64_t i = 0; i < n; i++)
        if (json_integer_value(json_array_get(want, (size_t)i)) != got[i]) return false;
    return true;
}

static void test_clip_tokenizer_matches_transformers(void) {
    json_t *ref = em_test_load_json(em_test_fixture_path("diffusion", "clip/clip_tokenizer_ref.json"));
    CHECK(ref != NULL);
    if (!ref) return;
    json_t *prompts = json_object_get(ref, "prompts");
    em_ctx *c = em_ctx_create();
    for (size_t f = 0; f < sizeof TOK_FOLDERS / sizeof TOK_FOLDERS[0]; f++) {
        char rel[64];
        snprintf(rel, sizeof rel, "clip/%s", TOK_FOLDERS[f]);
        json_t *want = json_object_get(json_object_get(ref, "folders"), TOK_FOLDERS[f]);
        em_clip_tokenizer *t = em_clip_tokenizer_load(c, em_test_fixture_path("diffusion", rel));
        CHECK_MSG(t != NULL, "%s: %s", rel, em_ctx_error(c) ? em_ctx_error(c)->message : "");
        if (!t || !want) {
            em_ctx_clear_error(c);
            continue;
        }
        int64_t len = em_clip_tokenizer_max_length(t);
        CHECK(len == json_integer_value(json_object_get(want, "model_max_length")));
        CHECK(em_clip_tokenizer_special_id(t, EM_SPECIAL_BOS) ==
              json_integer_value(json_object_get(want, "bos")));
        CHECK(em_clip_tokenizer_special_id(t, EM_SPECIAL_EOS) ==
              json_integer_value(json_object_get(want, "eos")));
        CHECK(em_clip_tokenizer_special_id(t, EM_SPECIAL_PAD) ==
              json_integer_value(json_object_get(want, "pad")));
        for (size_t i = 0; i < json_array_size(prompts); i++) {
            const char *p = json_string_value(json_array_get(prompts, i));
            int32_t ids[77], mask[77];
            int64_t n_real = 0;
            CHECK(len == 77);
            if (len != 77) break;
            CHECK(em_clip_tokenize(c, t, p, strlen(p), 0, ids, mask, &n_real) == EM_OK);
            CHECK_MSG(ids_equal(json_array_get(json_object_get(want, "input_ids"), i), ids, 77),
                      "%s prompt %zu '%.40s'", rel, i, p);
            CHECK_MSG(ids_equal(json_array_get(json_object_get(want, "attention_mask"), i), mask,
                                77), "%s prompt %zu mask", rel, i);
            /* the prompt's own tokens, unpadded (add_special_tokens=False) */
            em_token *plain = NULL;
            size_t n = 0;
            CHECK(em_tokenizer_encode(c, em_clip_tokenizer_base(t), p, strlen(p), false, &plain,
                                      &n) == EM_OK);
            CHECK_MSG(ids_equal(json_array_get(json_object_get(want, "plain_ids"), i), plain,
                                (int64_t)n), "%s prompt %zu plain ids", rel, i);
            CHECK(n_real == (int64_t)(n + 2 < 77 ? n + 2 : 77));
            em_free(plain);
        }
        /* the batch as tensors */
        em_scope_push(c);
        const char *two[] = {json_string_value(json_array_get(prompts, 0)),
                             json_string_value(json_array_get(prompts, 9))};
        em_tensor *mask = NULL;
        em_tensor *ids = em_clip_tokenize_batch(c, t, two, 2, 0, &mask);
        CHECK(ids && mask && em_tensor_ndim(ids) == 2 && em_tensor_dim(ids, 0) == 2 &&
              em_tensor_dim(ids, 1) == 77 && em_tensor_dtype(ids) == EM_I64);
        int64_t n_ids = 0;
        int32_t *host = ids ? em_test_host_tokens(c, ids, &n_ids) : NULL;
        CHECK(host && n_ids == 154 &&
              ids_equal(json_array_get(json_object_get(want, "input_ids"), 9), host + 77, 77));
        free(host);
        em_scope_pop(c);
        em_clip_tokenizer_free(t);
    }
    em_ctx_free(c);
    json_decref(ref);
}

static void compare(em_ctx *c, em_test_bundle *b, const char *tag, const char *name,
                    em_tensor *got, const char *model) {
    char key[64], what[128];
    snprintf(key, sizeof key, "%s%s", tag, name);
    snprintf(what, sizeof what, "%s %s", model, key);
    CHECK_MSG(got != NULL, "%s: %s", what, em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (got) em_test_allclose(c, got, em_test_bundle_get(b, c, key), 1e-4, 1e-4, what);
}

static void check_model(em_ctx *c, const char *name, const char *device) {
    char rel[96];
    snprintf(rel, sizeof rel, "diffusion/clip/%s_ref", name);
    em_test_bundle *b = em_test_bundle_load(rel);
    snprintf(rel, sizeof rel, "clip/%s", name);
    em_clip_text *m = em_clip_text_load(c, em_test_fixture_path("diffusion", rel), device);
    CHECK_MSG(m != NULL, "%s: %s", name, em_ctx_error(c) ? em_ctx_error(c)->message : "");
    CHECK(b != NULL);
    if (!m || !b) {
        em_ctx_clear_error(c);
        em_clip_text_free(m);
        em_test_bundle_free(b);
        return;
    }
    const em_clip_text_config *g = em_clip_text_get_config(m);
    CHECK(g->num_hidden_layers == em_test_bundle_meta_int(b, "layers", -1));
    const char *tags[] = {"", "masked_", "short_"};
    for (int k = 0; k < 3; k++) {
        em_scope_push(c);
        char key[64];
        snprintf(key, sizeof key, "%sids", tags[k]);
        em_tensor *ids = em_test_bundle_get(b, c, key);
        em_tensor *mask = NULL;
        if (k) {
            snprintf(key, sizeof key, "%smask", tags[k]);
            mask = em_test_bundle_get(b, c, key);
        }
        em_clip_text_output o;
        CHECK(em_clip_text_forward(c, m, ids, mask, -2, &o) == EM_OK);
        compare(c, b, tags[k], "last_hidden_state", o.last_hidden_state, name);
        compare(c, b, tags[k], "pooler_output", o.pooler_output, name);
        compare(c, b, tags[k], "hidden_m2", o.hidden_state, name);
        if (g->has_projection) compare(c, b, tags[k], "text_embeds", o.text_embeds, name);
        else CHECK(o.text_embeds == NULL);
        /* hidden_states[0] (the embeddings) through a non-negative index */
        CHECK(em_clip_text_forward(c, m, ids, mask, 0, &o) == EM_OK);
        if (k == 2) compare(c, b, tags[k], "hidden_0", o.hidden_state, name);
        CHECK(em_clip_text_forward(c, m, ids, mask, EM_CLIP_TEXT_NO_HIDDEN, &o) == EM_OK);
        CHECK(o.hidden_state == NULL);
        /* diffusers' encode_prompt: clip_skip 1 and 0 */
        compare(c, b, tags[k], "clip_skip1", em_clip_text_prompt_embeds(c, m, ids, mask, 1), name);
        compare(c, b, tags[k], "last_hidden_state", em_clip_text_prompt_embeds(c, m, ids, mask, 0),
                name);
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    em_clip_text_free(m);
    em_test_bundle_free(b);
}

static void test_clip_text_matches_transformers(void) {
    em_ctx *c = em_ctx_create();
    check_model(c, "clip_text", NULL);      /* quick_gelu, eos_token_id rule */
    check_model(c, "clip_text_proj", NULL); /* gelu, legacy eos_token_id == 2 rule, projection */
    em_ctx_free(c);
}

/* The same on XLA's CPU plugin: weights there, ids and masks given on the host's device. */
static void test_clip_text_on_xla(void) {
    em_ctx *c = em_ctx_create();
    if (em_test_xla_or_skip(c)) {
        check_model(c, "clip_text", "xla:0");
        check_model(c, "clip_text_proj", "xla:0");
    }
    em_ctx_free(c);
}

/* The whole chain from a tokenizer folder: the prompts' ids give the recorded embeddings. */
static void test_clip_tokenizer_feeds_model(void) {
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/clip/clip_text_ref");
    em_clip_tokenizer *t = em_clip_tokenizer_load(c, em_test_fixture_path("diffusion", "clip/tok_slow"));
    json_t *ref = em_test_load_json(em_test_fixture_path("diffusion", "clip/clip_tokenizer_ref.json"));
    CHECK(b && t && ref);
    if (b && t && ref) {
        json_t *prompts = json_object_get(ref, "prompts");
        const char *p[3];
        for (int i = 0; i < 3; i++) p[i] = json_string_value(json_array_get(prompts, (size_t)i));
        em_tensor *ids = em_clip_tokenize_batch(c, t, p, 3, 0, NULL);
        em_test_allclose(c, ids, em_test_bundle_get(b, c, "ids"), 0, 0, "tokenized batch");
    }
    json_decref(ref);
    em_clip_tokenizer_free(t);
    em_test_bundle_free(b);
    em_ctx_free(c);
}

static void test_clip_tokenizer_errors(void) {
    em_ctx *c = em_ctx_create();
    CHECK(em_clip_tokenizer_load(c, "/nonexistent/clip") == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "/nonexistent/clip");
    const char *scratch = em_test_scratch_make("clip_tok");
    if (!scratch) {
        em_ctx_free(c);
        return;
    }
    CHECK(em_clip_tokenizer_load(c, scratch) == NULL); /* empty folder */
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "vocab.json");
    em_test_scratch_link("vocab.json", "diffusion", "clip/tok_slow/vocab.json");
    CHECK(em_clip_tokenizer_load(c, scratch) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "merges.txt");
    em_test_scratch_write("merges.txt", "#version: 0.2\nt h\nth e</w> x\n");
    CHECK(em_clip_tokenizer_load(c, scratch) == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "merges.txt line 3");
    em_test_scratch_write("merges.txt", "#version: 0.2\nt h\n");
    em_test_scratch_write("tokenizer_config.json", "{\"pad_token\": \"<|pad|>\"}");
    CHECK(em_clip_tokenizer_load(c, scratch) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "pad_token '<|pad|>'", "vocab.json");
    em_test_scratch_write("tokenizer_config.json", "{\"model_max_length\": \"77\"}");
    CHECK(em_clip_tokenizer_load(c, scratch) == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "tokenizer_config.json", "model_max_length");
    em_test_scratch_write("tokenizer_config.json", "{\"bos_token\": 5");
    CHECK(em_clip_tokenizer_load(c, scratch) == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "tokenizer_config.json", "not valid JSON");
    em_test_scratch_write("tokenizer_config.json", "{\"model_max_length\": 1e30}");
    em_clip_tokenizer *t = em_clip_tokenizer_load(c, scratch);
    CHECK(t && em_clip_tokenizer_max_length(t) == 77); /* "no limit": CLIP's context */
    int32_t ids[8];
    CHECK(em_clip_tokenize(c, t, "a", 1, 1, ids, NULL, NULL) != EM_OK);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "max_length 1");
    CHECK(em_clip_tokenize(c, t, "\xff", 1, 8, ids, NULL, NULL) != EM_OK);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "UTF-8");
    /* truncation to a short max_length keeps bos and eos */
    int64_t n_real = 0;
    CHECK(em_clip_tokenize(c, t, "a b c d e f g h i", 17, 4, ids, NULL, &n_real) == EM_OK);
    CHECK(n_real == 4 && ids[0] == em_clip_tokenizer_special_id(t, EM_SPECIAL_BOS) &&
          ids[3] == em_clip_tokenizer_special_id(t, EM_SPECIAL_EOS));
    em_clip_tokenizer_free(t);
    em_test_scratch_remove();
    em_ctx_free(c);
}

/* The clip_text fixture's config with `key` set to the JSON `value` (NULL: as it is). */
static void write_config(const char *key, const char *value) {
    json_t *cfg = em_test_load_json(em_test_fixture_path("diffusion", "clip/clip_text/config.json"));
    CHECK(cfg != NULL);
    if (!cfg) return;
    if (key) json_object_set_new(cfg, key, json_loads(value, JSON_DECODE_ANY, NULL));
    char *text = json_dumps(cfg, 0);
    em_test_scratch_write("config.json", text);
    free(text);
    json_decref(cfg);
}

static void test_clip_text_errors(void) {
    em_ctx *c = em_ctx_create();
    CHECK(em_clip_text_load(c, "/nonexistent/te", NULL) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "/nonexistent/te");
    const char *scratch = em_test_scratch_make("clip_text");
    if (!scratch) {
        em_ctx_free(c);
        return;
    }
    write_config(NULL, NULL);
    CHECK(em_clip_text_load(c, scratch, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "model.safetensors");
    em_test_scratch_link("model.safetensors", "diffusion", "clip/clip_text/model.safetensors");
    write_config("hidden_act", "\"gelu_fast\"");
    CHECK(em_clip_text_load(c, scratch, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "hidden_act 'gelu_fast'", "config.json");
    write_config("hidden_size", "48");
    CHECK(em_clip_text_load(c, scratch, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "embeddings.token_embedding.weight", "[785, 32]",
              "[785, 48]");
    write_config("num_hidden_layers", "4");
    CHECK(em_clip_text_load(c, scratch, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "encoder.layers.3.layer_norm1.weight");
    write_config("num_attention_heads", "5");
    CHECK(em_clip_text_load(c, scratch, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "num_attention_heads");
    write_config("vocab_size", "\"many\"");
    CHECK(em_clip_text_load(c, scratch, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "vocab_size");
    write_config("eos_token_id", "[784, 2]");
    CHECK(em_clip_text_load(c, scratch, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "eos_token_id");
    em_test_scratch_write("config.json", "{\"model_type\": \"t5\"}");
    CHECK(em_clip_text_load(c, scratch, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "model_type 't5'");
    /* a CLIPModel config: its text_config is read */
    em_test_scratch_write("config.json",
                          "{\"model_type\": \"clip\", \"text_config\": {\"vocab_size\": 785, "
                          "\"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 3, "
                          "\"num_attention_heads\": 4, \"hidden_act\": \"relu\", "
                          "\"eos_token_id\": 784}}");
    em_clip_text *m = em_clip_text_load(c, scratch, NULL);
    CHECK_MSG(m != NULL, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    em_ctx_clear_error(c);
    if (m) {
        em_scope_push(c);
        em_clip_text_output o;
        em_tensor *long_ids = em_zeros(c, EM_I64, 2, (int64_t[]){1, 78});
        CHECK(em_clip_text_forward(c, m, long_ids, NULL, EM_CLIP_TEXT_NO_HIDDEN, &o) != EM_OK);
        CHECK_ERR(c, EM_ERR_SHAPE, "max_position_embeddings", "[1,78]");
        em_tensor *fids = em_zeros(c, EM_F32, 2, (int64_t[]){1, 4});
        CHECK(em_clip_text_forward(c, m, fids, NULL, EM_CLIP_TEXT_NO_HIDDEN, &o) != EM_OK);
        CHECK_ERR(c, EM_ERR_DTYPE, "i64 or i32");
        em_tensor *ids = em_zeros(c, EM_I64, 2, (int64_t[]){2, 4});
        em_tensor *mask = em_zeros(c, EM_I64, 2, (int64_t[]){2, 5});
        CHECK(em_clip_text_forward(c, m, ids, mask, EM_CLIP_TEXT_NO_HIDDEN, &o) != EM_OK);
        CHECK_ERR(c, EM_ERR_SHAPE, "attention_mask");
        CHECK(em_clip_text_forward(c, m, ids, NULL, 4, &o) != EM_OK);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "hidden_index 4");
        CHECK(em_clip_text_forward(c, m, ids, NULL, -5, &o) != EM_OK);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "hidden_index -5");
        CHECK(em_clip_text_prompt_embeds(c, m, ids, NULL, 4) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "clip_skip 4");
        CHECK(em_clip_text_forward(c, m, ids, NULL, -1, &o) == EM_OK && o.hidden_state);
        em_scope_pop(c);
        em_clip_text_free(m);
    }
    em_test_scratch_remove();
    em_ctx_free(c);
}

EM_TEST_MAIN({"clip_tokenizer_matches_transformers", test_clip_tokenizer_matches_transformers},
             {"clip_text_matches_transformers", test_clip_text_matches_transformers},
             {"clip_text_on_xla", test_clip_text_on_xla},
             {"clip_tokenizer_feeds_model", test_clip_tokenizer_feeds_model},
             {"clip_tokenizer_errors", test_clip_tokenizer_errors},
             {"clip_text_errors", test_clip_text_errors})

/* T5EncoderModel and the T5 tokenizer against transformers 5.24 (tests/fixtures/diffusion/t5,
 * made by scripts/gen_t5_fixtures.py): last_hidden_state of a gated-gelu (T5 v1.1) and a relu
 * encoder within 1e-4, with and without an attention mask; the tokenizer's padded, truncated
 * ids for ten prompts at two lengths, exactly; clear errors for bad configs and inputs. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

static const char *msg(em_ctx *c) { return em_ctx_error(c) ? em_ctx_error(c)->message : ""; }

static void test_t5_encoder_matches_transformers(void) {
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("diffusion/t5_ref");
    static const char *const names[] = {"gated", "relu"};
    for (int k = 0; b && k < 2; k++) {
        char rel[32], what[64];
        snprintf(rel, sizeof rel, "t5/%s", names[k]);
        em_t5_encoder *m = em_t5_encoder_load(c, em_test_fixture_path("diffusion", rel), NULL);
        CHECK_MSG(m != NULL, "%s: %s", rel, msg(c));
        if (!m) {
            em_ctx_clear_error(c);
            continue;
        }
        CHECK(em_t5_encoder_get_config(m)->is_gated_act == (k == 0));
        CHECK(!strcmp(em_t5_encoder_get_config(m)->dense_act_fn, k == 0 ? "gelu_new" : "relu"));
        em_scope_push(c);
        em_tensor *ids = em_test_bundle_get(b, c, "ids");
        snprintf(what, sizeof what, "T5EncoderModel %s", names[k]);
        snprintf(rel, sizeof rel, "%s_out", names[k]);
        em_tensor *out = em_t5_encoder_forward(c, m, ids, NULL);
        CHECK_MSG(out != NULL, "%s", msg(c));
        em_test_allclose(c, out, em_test_bundle_get(b, c, rel), 1e-4, 0, what);
        if (k == 0) {
            out = em_t5_encoder_forward(c, m, ids, em_test_bundle_get(b, c, "mask"));
            em_test_allclose(c, out, em_test_bundle_get(b, c, "gated_masked_out"), 1e-4, 0,
                             "T5EncoderModel gated with an attention mask");
            /* bad inputs */
            em_ctx_clear_error(c);
            CHECK(em_t5_encoder_forward(c, m, NULL, NULL) == NULL);
            CHECK_ERR(c, EM_ERR_INVALID_ARG, "NULL");
            em_ctx_clear_error(c);
            em_tensor *f = em_zeros(c, EM_F32, 2, (int64_t[]){1, 3});
            CHECK(em_t5_encoder_forward(c, m, f, NULL) == NULL);
            CHECK_ERR(c, EM_ERR_DTYPE, "i64");
            em_ctx_clear_error(c);
            em_tensor *i3 = em_zeros(c, EM_I64, 1, (int64_t[]){3});
            CHECK(em_t5_encoder_forward(c, m, i3, NULL) == NULL);
            CHECK_ERR(c, EM_ERR_SHAPE, "[B, T]");
            em_ctx_clear_error(c);
            /* an id outside the vocabulary (60 tokens) */
            em_tensor *oor = em_from_host(c, EM_I64, 2, (int64_t[]){1, 2}, (int64_t[]){0, 60});
            CHECK(em_t5_encoder_forward(c, m, oor, NULL) == NULL);
            CHECK_MSG(em_ctx_status(c) != EM_OK, "an id past the vocabulary ran");
            em_ctx_clear_error(c);
            em_tensor *mk = em_zeros(c, EM_I64, 2, (int64_t[]){2, 3});
            CHECK(em_t5_encoder_forward(c, m, ids, mk) == NULL);
            CHECK_ERR(c, EM_ERR_SHAPE, "attention_mask");
        }
        em_ctx_clear_error(c);
        em_scope_pop(c);
        em_t5_encoder_free(m);
    }
    em_test_bundle_free(b);
    em_ctx_free(c);
}

static bool row_equal(json_t *want, em_ctx *c, em_tensor *ids, int64_t r, int64_t len) {
    if ((int64_t)json_array_size(want) != len) return false;
    for (int64_t i = 0; i < len; i++)
        if (json_integer_value(json_array_get(want, (size_t)i)) !=
            (json_int_t)em_test_at(c, em_reshape(c, ids, 1, (int64_t[]){-1}), r * len + i))
            return false;
    return true;
}

static void test_t5_tokenizer_matches_transformers(void) {
    json_t *ref = em_test_load_json(em_test_fixture_path("diffusion", "t5_ref.json"));
    CHECK(ref != NULL);
    if (!ref) return;
    json_t *meta = json_object_get(ref, "meta"), *prompts = json_object_get(meta, "prompts");
    em_ctx *c = em_ctx_create();
    em_t5_tokenizer *t = em_t5_tokenizer_load(c, em_test_fixture_path("diffusion", "t5/tok"));
    CHECK_MSG(t != NULL, "%s", msg(c));
    size_t n = json_array_size(prompts);
    const char **ps = calloc(n, sizeof *ps);
    for (size_t i = 0; i < n; i++) ps[i] = json_string_value(json_array_get(prompts, i));
    static const struct {
        const char *key;
        int64_t len;
    } lens[] = {{"tok_ids", 16}, {"tok_ids_8", 8}};
    for (int k = 0; t && k < 2; k++) {
        em_scope_push(c);
        em_tensor *mask = NULL;
        em_tensor *ids = em_t5_tokenize_batch(c, t, ps, (int)n, lens[k].len, &mask);
        CHECK_MSG(ids && mask, "%s", msg(c));
        for (size_t i = 0; ids && i < n; i++) {
            json_t *want = json_array_get(json_object_get(meta, lens[k].key), i);
            CHECK_MSG(row_equal(want, c, ids, (int64_t)i, lens[k].len), "%s prompt %zu '%s'",
                      lens[k].key, i, ps[i]);
            /* the mask: 1 up to and with the eos */
            for (int64_t j = 0; j < lens[k].len; j++) {
                json_int_t id = json_integer_value(json_array_get(want, (size_t)j));
                bool before_pad = true;
                for (int64_t q = 0; q <= j; q++)
                    if (!json_integer_value(json_array_get(want, (size_t)q))) before_pad = false;
                (void)id;
                CHECK(em_test_at(c, em_reshape(c, mask, 1, (int64_t[]){-1}),
                                 (long long)i * lens[k].len + j) == (before_pad ? 1.0 : 0.0));
            }
        }
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    /* the prompts' own tokens */
    for (size_t i = 0; t && i < n; i++) {
        em_token *ids = NULL;
        size_t k = 0;
        CHECK(em_tokenizer_encode(c, em_t5_tokenizer_base(t), ps[i], strlen(ps[i]), false, &ids,
                                  &k) == EM_OK);
        json_t *want = json_array_get(json_object_get(meta, "tok_plain"), i);
        bool same = k == json_array_size(want);
        for (size_t j = 0; same && j < k; j++)
            same = ids[j] == json_integer_value(json_array_get(want, j));
        CHECK_MSG(same, "plain prompt %zu '%s'", i, ps[i]);
        em_free(ids);
    }
    /* a truncated SentencePiece charsmap (the first bytes of a real T5's) is refused */
    json_t *tj = em_test_load_json(em_test_fixture_path("diffusion", "t5/tok/tokenizer.json"));
    if (tj && em_test_scratch_make("t5_tok")) {
        json_object_set_new(tj, "normalizer",
                            json_pack("{s:s, s:s}", "type", "Precompiled", "precompiled_charsmap",
                                      "ALQCAACEAAAAAACAAQAAgMz8AgC4BQAAhyIAgMzkAgC4PQAA"));
        char *text = json_dumps(tj, 0);
        em_test_scratch_write("tokenizer.json", text);
        free(text);
        CHECK(em_t5_tokenizer_load(c, em_test_scratch_dir()) == NULL);
        CHECK_ERR(c, EM_ERR_FORMAT, "precompiled_charsmap", "past its end");
        em_ctx_clear_error(c);
        em_test_scratch_remove();
    }
    json_decref(tj);
    /* bad calls */
    CHECK(em_t5_tokenize_batch(c, t, ps, (int)n, 0, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "max_length");
    em_ctx_clear_error(c);
    CHECK(em_t5_tokenizer_load(c, em_test_fixture_path("diffusion", "t5/gated")) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "tokenizer.json");
    em_ctx_clear_error(c);
    free(ps);
    em_t5_tokenizer_free(t);
    em_ctx_free(c);
    json_decref(ref);
}

/* An SD3 tokenizer_3 style folder: T5TokenizerFast's tokenizer.json with a real nmt_nfkc
 * "Precompiled" normalizer (tests/fixtures/tokenizers/norm_precompiled.json, converted by
 * transformers' T5Converter; scripts/gen_precompiled_fixtures.py) loads as a T5 tokenizer, and
 * its ids with </s> appended equal `tokenizers`' on every text of the tokenizer text set. */
static void test_t5_tokenizer_precompiled(void) {
    em_ctx *c = em_ctx_create();
    /* the texts hold U+0000 */
    json_t *texts =
        json_load_file(em_test_fixture_path("tokenizers", "texts.json"), JSON_ALLOW_NUL, NULL);
    json_t *exp = json_load_file(
        em_test_fixture_path("tokenizers", "expected/norm_precompiled.json"), JSON_ALLOW_NUL, NULL);
    CHECK(texts && exp);
    if (!em_test_scratch_make("t5_pc")) {
        json_decref(texts);
        json_decref(exp);
        em_ctx_free(c);
        return;
    }
    em_test_scratch_link("tokenizer.json", "tokenizers", "norm_precompiled.json");
    em_test_scratch_write("tokenizer_config.json",
                          "{\"eos_token\": \"</s>\", \"pad_token\": \"<pad>\", "
                          "\"unk_token\": \"<unk>\", \"tokenizer_class\": \"T5Tokenizer\"}");
    em_t5_tokenizer *t = em_t5_tokenizer_load(c, em_test_scratch_dir());
    CHECK_MSG(t != NULL, "%s", msg(c));
    json_t *cases = json_object_get(exp, "cases");
    size_t same = 0, n = json_array_size(cases);
    for (size_t i = 0; t && i < n; i++) {
        json_t *cs = json_array_get(cases, i);
        json_t *tx = json_object_get(
            json_array_get(texts, (size_t)json_integer_value(json_object_get(cs, "text"))), "text");
        em_token *ids = NULL;
        size_t k = 0;
        if (em_tokenizer_encode(c, em_t5_tokenizer_base(t), json_string_value(tx),
                                json_string_length(tx), true, &ids, &k) != EM_OK)
            continue;
        json_t *want = json_object_get(cs, "ids"), *suf = json_object_get(cs, "special_suffix");
        size_t nw = json_array_size(want);
        bool ok = k == nw + json_array_size(suf);
        for (size_t j = 0; ok && j < k; j++)
            ok = ids[j] == json_integer_value(j < nw ? json_array_get(want, j)
                                                      : json_array_get(suf, j - nw));
        same += ok;
        em_free(ids);
    }
    CHECK_MSG(n >= 25 && same == n, "%zu/%zu texts", same, n);
    em_t5_tokenizer_free(t);
    em_test_scratch_remove();
    json_decref(texts);
    json_decref(exp);
    em_ctx_free(c);
}

/* A model's folder with config.json replaced: the error names the field. */
static void bad_config(em_ctx *c, const char *cfg, em_status want, const char *needle) {
    const char *dir = em_test_scratch_make("t5_bad");
    em_test_scratch_link("model.safetensors", "diffusion", "t5/gated/model.safetensors");
    em_test_scratch_write("config.json", cfg);
    CHECK(em_t5_encoder_load(c, dir, NULL) == NULL);
    CHECK_ERR(c, want, needle);
    em_ctx_clear_error(c);
    em_test_scratch_remove();
}

#define BASE "\"vocab_size\": 60, \"d_kv\": 6, \"num_layers\": 3, \"num_heads\": 2, " \
             "\"relative_attention_num_buckets\": 8"
#define GATED BASE ", \"d_model\": 16, \"d_ff\": 24"

static void test_t5_bad_configs(void) {
    em_ctx *c = em_ctx_create();
    bad_config(c, "{" GATED ", \"feed_forward_proj\": \"gated-gelu\", \"model_type\": \"umt5\"}",
               EM_ERR_UNSUPPORTED, "umt5");
    bad_config(c, "{" GATED ", \"feed_forward_proj\": \"gelu-new-x\"}", EM_ERR_FORMAT,
               "feed_forward_proj");
    bad_config(c, "{" GATED ", \"feed_forward_proj\": \"gated-mish\"}", EM_ERR_UNSUPPORTED,
               "dense_act_fn 'mish'");
    bad_config(c, "{" GATED ", \"feed_forward_proj\": \"gated-gelu\", \"is_decoder\": true}",
               EM_ERR_UNSUPPORTED, "is_decoder");
    bad_config(c, "{" BASE ", \"d_ff\": 24, \"feed_forward_proj\": \"gated-gelu\", "
               "\"d_model\": 0}", EM_ERR_FORMAT, "d_model");
    bad_config(c, "{" GATED ", \"relative_attention_max_distance\": 2}", EM_ERR_FORMAT,
               "relative_attention_max_distance must exceed");
    /* relu: the checkpoint has wi_0 / wi_1, not wi */
    bad_config(c, "{" GATED ", \"feed_forward_proj\": \"relu\"}", EM_ERR_NOT_FOUND,
               "DenseReluDense.wi.weight");
    /* a width the weights do not have */
    bad_config(c, "{" BASE ", \"d_model\": 16, \"feed_forward_proj\": \"gated-gelu\", "
               "\"d_ff\": 32}", EM_ERR_SHAPE, "wi_0");
    /* the saved dense_act_fn wins over feed_forward_proj's */
    const char *dir = em_test_scratch_make("t5_act");
    em_test_scratch_link("model.safetensors", "diffusion", "t5/gated/model.safetensors");
    em_test_scratch_write("config.json", "{" GATED ", \"relative_attention_max_distance\""
                          ": 12, \"feed_forward_proj\": \"relu\", \"dense_act_fn\": \"silu\", "
                          "\"is_gated_act\": true}");
    em_t5_encoder *m = em_t5_encoder_load(c, dir, NULL);
    CHECK_MSG(m && em_t5_encoder_get_config(m)->is_gated_act &&
                  !strcmp(em_t5_encoder_get_config(m)->dense_act_fn, "silu"), "%s", msg(c));
    em_t5_encoder_free(m);
    em_ctx_clear_error(c);
    em_test_scratch_remove();
    CHECK(em_t5_encoder_load(c, NULL, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "folder");
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_t5_encoder_matches_transformers), T(test_t5_tokenizer_matches_transformers),
             T(test_t5_bad_configs), T(test_t5_tokenizer_precompiled))

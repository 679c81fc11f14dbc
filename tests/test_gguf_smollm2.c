/* The real SmolLM2-135M-Instruct (Q4_1 GGUF) against transformers on the same file
 * (scripts/gen_gguf_fixtures.py --smollm2): five chat questions rendered with the file's
 * template. With --dtype f32 (dequantized at load, as transformers does) the last token's
 * logits match within 1e-3 (at 4096 fixed random ids and the 64 best) and the 24-token greedy
 * continuations exactly. The weights as stored (quantized kernels) are held to the rounding of
 * 16-bit activations (relative RMS error below 2e-3); their tokens are reported. Skips loudly
 * when scripts/fetch_smollm2.sh has not fetched the file (EMBER_SMOLLM2_GGUF). */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ember/ember.h"
#include "harness.h"

/* Under the sanitizers (10x slower) two questions keep the test short; the others add no code. */
#if defined(__SANITIZE_ADDRESS__)
#define QUESTIONS 2
#else
#define QUESTIONS 5
#endif

typedef struct streamed {
    char text[4096];
    size_t len;
} streamed;

static bool collect(void *user, int seq, em_token id, const char *piece) {
    streamed *st = user;
    size_t n = strlen(piece);
    if (st->len + n < sizeof st->text) memcpy(st->text + st->len, piece, n + 1), st->len += n;
    return true;
}

/* em_generate_chat from the question's text: rendered with the file's chat template, encoded,
 * generated, decoded, as transformers' apply_chat_template + generate did for the fixture.
 * The prompt and the tokens are transformers'; the streamed pieces add up to the answer. */
static void check_generate_chat(em_ctx *c, const em_model *m, const em_tokenizer *tok,
                                em_test_bundle *b) {
    char path[4096];
    snprintf(path, sizeof path, "%s/gguf/real_smollm2.json", em_test_fixtures_dir());
    json_t *doc = json_load_file(path, 0, NULL);
    json_t *questions = json_object_get(json_object_get(doc, "meta"), "questions");
    CHECK_MSG(json_array_size(questions) >= QUESTIONS, "no questions in %s", path);
    for (int q = 0; q < QUESTIONS && q < (int)json_array_size(questions); q++) {
        em_scope_push(c);
        char key[64];
        snprintf(key, sizeof key, "q%d.ids", q);
        int64_t n_prompt = em_tensor_numel(em_test_bundle_get(b, c, key));
        snprintf(key, sizeof key, "q%d.greedy", q);
        em_tensor *greedy = em_cast(c, em_test_bundle_get(b, c, key), EM_I32);
        const em_token *g = em_tensor_data(c, greedy);
        int64_t gn = em_tensor_numel(greedy);
        json_t *msgs = json_pack("[{s:s, s:O}]", "role", "user", "content",
                                 json_array_get(questions, (size_t)q));
        char *mj = json_dumps(msgs, JSON_COMPACT);
        em_generate_params p = em_generate_default_params(m);
        p.max_new_tokens = 24;
        p.do_sample = false;
        streamed st = {.len = 0};
        p.on_token = collect;
        p.user_data = &st;
        em_generate_result r;
        const char *convs[1] = {mj};
        if (g && em_generate_chat(c, m, tok, convs, 1, NULL, &p, &r) == EM_OK) {
            CHECK_MSG(r.prompt_tokens == n_prompt, "question %d: prompt of %lld tokens, "
                      "transformers' has %lld", q, (long long)r.prompt_tokens,
                      (long long)n_prompt);
            CHECK_MSG(r.n_ids[0] == gn && !memcmp(r.ids[0], g, (size_t)gn * sizeof *g),
                      "question %d: em_generate_chat's tokens differ from transformers'", q);
            char *want = em_tokenizer_decode(c, tok, g, (size_t)gn, true, NULL);
            CHECK_MSG(want && r.text && !strcmp(r.text[0], want),
                      "question %d: text \"%s\", want \"%s\"", q, r.text ? r.text[0] : "",
                      want ? want : "");
            CHECK_MSG(r.text && !strcmp(st.text, r.text[0]),
                      "question %d: streamed \"%s\", decoded \"%s\"", q, st.text,
                      r.text ? r.text[0] : "");
            CHECK_MSG(r.stop_reason[0] == EM_STOP_EOS ||
                          (r.n_ids[0] == 24 && r.stop_reason[0] == EM_STOP_LENGTH),
                      "question %d: stopped by %s", q, em_stop_reason_name(r.stop_reason[0]));
            em_free(want);
            em_generate_result_free(&r);
        } else {
            CHECK_MSG(false, "question %d: %s", q, em_ctx_error(c) ? em_ctx_error(c)->message : "");
            em_ctx_clear_error(c);
        }
        free(mj);
        json_decref(msgs);
        em_scope_pop(c);
    }
    json_decref(doc);
}

static void test_smollm2(void) {
    const char *path = getenv("EMBER_SMOLLM2_GGUF");
    if (!path || access(path, R_OK)) {
        em_test_skip("the real SmolLM2-135M-Instruct GGUF is not here (%s); "
                     "scripts/fetch_smollm2.sh fetches it", path ? path : "EMBER_SMOLLM2_GGUF unset");
        return;
    }
    em_test_bundle *b = em_test_bundle_load("gguf/real_smollm2");
    CHECK(b != NULL);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    em_tokenizer *tok = em_tokenizer_load(c, path);
    CHECK(tok != NULL);
    for (int quant = 0; quant < 2 && tok; quant++) {
        em_model_options o = em_model_default_options();
        o.progress = false;
        if (!quant) {
            o.dtype = EM_F32;
        }
        em_model *m = em_model_load(c, path, &o);
        CHECK_MSG(m, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
        if (!m) break;
        int same_tokens = 0;
        for (int q = 0; q < QUESTIONS; q++) {
            char key[64];
            em_scope_push(c);
            snprintf(key, sizeof key, "q%d.ids", q);
            em_tensor *ids = em_test_bundle_get(b, c, key);
            snprintf(key, sizeof key, "q%d.greedy", q);
            em_tensor *greedy = em_test_bundle_get(b, c, key);
            int64_t n = em_tensor_numel(ids);
            em_tensor *x = em_reshape(c, ids, 2, (int64_t[]){1, n});
            em_tensor *lg = em_reshape(c, em_model_forward(c, m, x, NULL, NULL, true), 1,
                                       (int64_t[]){em_model_config_get(m)->vocab_size});
            /* the logits at the fixed random ids and at transformers' 64 best */
            static const char *const parts[2][2] = {{"subset", "subset_logits"},
                                                    {"top_ids", "top_logits"}};
            double err = 0, sq = 0, ref = 0;
            for (int k = 0; k < 2 && lg; k++) {
                if (k) snprintf(key, sizeof key, "q%d.%s", q, parts[k][0]);
                em_tensor *at = em_test_bundle_get(b, c, k ? key : parts[0][0]);
                snprintf(key, sizeof key, "q%d.%s", q, parts[k][1]);
                em_tensor *want = em_test_bundle_get(b, c, key);
                const int64_t *idx = em_tensor_data(c, at);
                const float *w = em_tensor_data(c, want), *g = em_tensor_data(c, lg);
                for (int64_t i = 0; idx && w && g && i < em_tensor_numel(at); i++) {
                    double d = fabs(g[idx[i]] - w[i]);
                    err = d > err ? d : err;
                    sq += d * d;
                    ref += (double)w[i] * w[i];
                }
            }
            double rel = sqrt(sq / (ref > 0 ? ref : 1));
            if (!quant)
                CHECK_MSG(lg && err <= 1e-3, "question %d: logits differ by %g", q, err);
            else
                CHECK_MSG(lg && rel < 2e-3, "question %d quantized: relative RMS error %g", q, rel);
            /* 24 greedy tokens, stopping at the end of turn as transformers does */
            em_generate_params p = em_generate_default_params(m);
            p.max_new_tokens = 24;
            p.do_sample = false;
            em_generate_result r;
            const em_token *prompt = em_tensor_data(c, em_cast(c, ids, EM_I32));
            const em_token *prompts[1] = {prompt};
            int64_t lens[1] = {n};
            if (prompt && em_generate(c, m, tok, prompts, lens, 1, &p, &r) == EM_OK) {
                const em_token *g = em_tensor_data(c, em_cast(c, greedy, EM_I32));
                int64_t gn = em_tensor_numel(greedy);
                bool same = r.n_ids[0] == gn && g && !memcmp(r.ids[0], g, (size_t)gn * sizeof *g);
                same_tokens += same;
                char *text = em_tokenizer_decode(c, tok, r.ids[0], (size_t)r.n_ids[0], true, NULL);
                printf("  %s q%d (%s, logits max |diff| %.1e, rel RMS %.1e): %s%s\n",
                       quant ? "as stored" : "f32      ", q,
                       same ? "tokens = transformers'" : "tokens differ", err, rel,
                       text ? text : "", same ? "" : " [!]");
                em_free(text);
                if (!quant) CHECK_MSG(same, "question %d: greedy tokens differ", q);
                em_generate_result_free(&r);
            } else {
                CHECK_MSG(false, "question %d: %s", q, em_ctx_error(c)->message);
            }
            em_ctx_clear_error(c);
            em_scope_pop(c);
        }
        printf("%s: %d of %d greedy continuations equal to transformers'\n",
               quant ? "weights as stored (Q4_1/Q8_0 kernels)" : "dequantized to f32", same_tokens,
               QUESTIONS);
        if (!quant) check_generate_chat(c, m, tok, b);
        em_model_free(m);
    }
    em_tokenizer_free(tok);
    em_ctx_free(c);
    em_test_bundle_free(b);
}

EM_TEST_MAIN(T(test_smollm2))

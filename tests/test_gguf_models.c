/* Models read from GGUF files against transformers (scripts/gen_gguf_fixtures.py models): tiny
 * llama, qwen2, qwen3, qwen3moe, mixtral and gemma3 models written as llama.cpp's converter
 * writes them (q/k rows permuted for llama, Gemma norms + 1, stacked experts, Q8_0 matrices),
 * and the logits and greedy tokens of the same models holding the file's weights (transformers
 * reading the files agrees exactly for llama, qwen2 and qwen3).
 *   - with dtype f32 (dequantized at load): logits within 1e-4, greedy tokens exactly;
 *   - as stored (Q8_0 matrices used by the quantized kernels): logits within the rounding of the
 *     activations to 16 bits (relative RMS error below 5e-4), and the greedy tokens, eager and
 *     compiled alike;
 *   - an explicit device map and the config read from the metadata;
 *   - a bf16 file (convert_hf_to_gguf.py --outtype bf16) runs in bf16 as stored, as transformers
 *     takes a checkpoint's torch_dtype: logits within bf16 activation rounding (relative RMS
 *     below 2e-2), and exactly the f32 reference with dtype f32. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

static const char *const ARCHS[] = {"llama", "qwen2", "qwen3", "qwen3moe", "mixtral", "gemma3"};

static const char *model_path(const char *arch) {
    char rel[64];
    snprintf(rel, sizeof rel, "model_%s.gguf", arch);
    return em_test_fixture_path("gguf", rel);
}

/* Relative RMS difference of two equally sized f32 tensors. */
static double rel_rms(em_ctx *c, em_tensor *a, em_tensor *b) {
    const float *x = em_tensor_data(c, a), *y = em_tensor_data(c, b);
    double se = 0, s2 = 0;
    for (int64_t i = 0; x && y && i < em_tensor_numel(a); i++) {
        se += (x[i] - y[i]) * (double)(x[i] - y[i]);
        s2 += (double)y[i] * y[i];
    }
    return x && y ? sqrt(se / (s2 > 0 ? s2 : 1)) : INFINITY;
}

static void test_models(void) {
    em_test_bundle *b = em_test_bundle_load("gguf/models");
    CHECK(b != NULL);
    if (!b) return;
    static const int64_t ids[12] = {1, 17, 250, 3, 99, 42, 7, 128, 64, 200, 5, 31};
    em_ctx *c = em_ctx_create();
    for (size_t a = 0; a < sizeof ARCHS / sizeof ARCHS[0]; a++) {
        const char *arch = ARCHS[a];
        char key[64];
        em_scope_push(c);
        snprintf(key, sizeof key, "%s.logits", arch);
        em_tensor *want = em_test_bundle_get(b, c, key);
        snprintf(key, sizeof key, "%s.greedy", arch);
        em_tensor *greedy = em_test_bundle_get(b, c, key);
        em_tensor *x = em_from_host(c, EM_I64, EM_SHAPE(1, 12), ids);
        for (int quant = 0; quant < 2; quant++) {
            em_model_options o = em_model_default_options();
            o.progress = false;
            if (!quant) {
                o.dtype = EM_F32;
            }
            em_model *m = em_model_load(c, model_path(arch), &o);
            CHECK_MSG(m, "%s: %s", arch, em_ctx_error(c) ? em_ctx_error(c)->message : "");
            if (!m) {
                em_ctx_clear_error(c);
                continue;
            }
            em_tensor *lg = em_model_forward(c, m, x, NULL, NULL, false);
            em_tensor *got = lg ? em_reshape(c, lg, 2, em_tensor_shape(want)) : NULL;
            if (!quant) CHECK(em_test_allclose(c, got, want, 1e-4, 1e-4, arch));
            {   /* greedy continuation through the KV cache */
                em_generate_params p = em_generate_default_params(m);
                p.max_new_tokens = 8;
                static const em_token no_eos[1] = {-1}; /* as the reference: no eos */
                p.eos_ids = no_eos;
                p.n_eos_ids = 1;
                em_generate_result r;
                em_token prompt[12];
                for (int i = 0; i < 12; i++) prompt[i] = (em_token)ids[i];
                const em_token *prompts[1] = {prompt};
                int64_t lens[1] = {12};
                if (em_generate(c, m, NULL, prompts, lens, 1, &p, &r) == EM_OK) {
                    const em_token *g = em_tensor_data(c, em_cast(c, greedy, EM_I32));
                    bool same = r.n_ids[0] == 8 && g && !memcmp(r.ids[0], g, 8 * sizeof *g);
                    CHECK_MSG(same, "%s%s: greedy tokens differ", arch, quant ? " quantized" : "");
                    em_generate_result_free(&r);
                } else {
                    CHECK_MSG(false, "%s: %s", arch, em_ctx_error(c)->message);
                    em_ctx_clear_error(c);
                }
            }
            if (quant) {
                double e = rel_rms(c, got, want);
                CHECK_MSG(e < 5e-4, "%s quantized: relative RMS error %g", arch, e);
                printf("  %-9s as stored (Q8_0 kernels): logits relative RMS error %.2e\n", arch,
                       e);
                /* compile mode runs the same kernels */
                em_kv_cache *kv = em_kv_cache_create(c, m, 1, 32);
                em_model_compiled *mc = kv ? em_model_compile(c, m, kv, 16) : NULL;
                em_tensor *lc = mc ? em_model_forward_compiled(c, mc, x, NULL, false) : NULL;
                em_tensor *gc = lc ? em_reshape(c, lc, 2, em_tensor_shape(want)) : NULL;
                CHECK_MSG(gc && rel_rms(c, gc, got) < 1e-5, "%s: compiled %s", arch,
                          em_ctx_error(c) ? em_ctx_error(c)->message : "differs");
                em_ctx_clear_error(c);
                em_model_compiled_free(mc);
                em_kv_cache_free(kv);
            }
            em_ctx_clear_error(c);
            em_model_free(m);
        }
        em_scope_pop(c);
    }
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void test_bf16_file(void) {
    em_test_bundle *b = em_test_bundle_load("gguf/models_bf16");
    CHECK(b != NULL);
    if (!b) return;
    static const int64_t ids[12] = {1, 17, 250, 3, 99, 42, 7, 128, 64, 200, 5, 31};
    em_ctx *c = em_ctx_create();
    em_tensor *want = em_test_bundle_get(b, c, "llama.logits");
    em_tensor *x = em_from_host(c, EM_I64, EM_SHAPE(1, 12), ids);
    for (int f32 = 0; f32 < 2; f32++) {
        em_model_options o = em_model_default_options();
        o.progress = false;
        if (f32) o.dtype = EM_F32;
        em_model *m = em_model_load(c, em_test_fixture_path("gguf", "model_llama_bf16.gguf"), &o);
        CHECK_MSG(m, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
        if (!m) break;
        char wd[160];
        em_model_weight_dtypes(m, wd, sizeof wd);
        CHECK_MSG(em_model_dtype(m) == (f32 ? EM_F32 : EM_BF16) &&
                  (f32 || strstr(wd, "bf16")), "dtype %s, weights %s",
                  em_dtype_name(em_model_dtype(m)), wd);
        em_tensor *lg = em_model_forward(c, m, x, NULL, NULL, false);
        em_tensor *got = lg ? em_reshape(c, em_cast(c, lg, EM_F32), 2, em_tensor_shape(want))
                            : NULL;
        if (f32) {
            CHECK(em_test_allclose(c, got, want, 1e-4, 1e-4, "llama bf16 file as f32"));
        } else {
            double e = rel_rms(c, got, want);
            CHECK_MSG(e < 2e-2, "bf16: relative RMS error %g", e);
            printf("  llama bf16 file in bf16: logits relative RMS error %.2e\n", e);
        }
        em_model_free(m);
    }
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void test_config_and_map(void) {
    em_ctx *c = em_ctx_create();
    em_model_config cfg;
    CHECK(em_model_config_load(c, model_path("qwen3moe"), &cfg) == EM_OK);
    CHECK(!strcmp(cfg.model_type, "qwen3_moe") && cfg.num_hidden_layers == 2 &&
          cfg.head_dim == 16 && cfg.num_experts == 4 && cfg.num_experts_per_tok == 2 &&
          cfg.moe_intermediate_size == 32 && cfg.norm_topk_prob && !cfg.tie_word_embeddings);
    em_model_config_free(&cfg);
    CHECK(em_model_config_load(c, model_path("mixtral"), &cfg) == EM_OK);
    CHECK(!strcmp(cfg.model_type, "mixtral") && cfg.num_experts == 4);
    em_model_config_free(&cfg);
    CHECK(em_model_config_load(c, model_path("llama"), &cfg) == EM_OK);
    CHECK(cfg.tie_word_embeddings && cfg.head_dim == 16 && cfg.rms_norm_eps == 1e-5f);
    em_model_config_free(&cfg);
    /* an explicit device map over the Hub's module names */
    em_model_options o = em_model_default_options();
    o.progress = false;
    o.device_map = "model.embed_tokens=cpu,model.layers.0-1=cpu,model.norm=cpu,lm_head=cpu";
    em_model *m = em_model_load(c, model_path("llama"), &o);
    char map[512];
    CHECK_MSG(m && em_model_device_map(m, map, sizeof map) > 0 &&
                  strstr(map, "model.layers.1=cpu"),
              "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    em_model_free(m);
    o.device_map = "model.embed_tokens=cpu";
    CHECK(!em_model_load(c, model_path("llama"), &o));
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "model.layers.0");
    /* an architecture Ember does not read, named */
    CHECK(!em_model_load(c, em_test_fixture_path("gguf", "types.gguf"), NULL));
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "\"test\"");
    /* ... and the config reader says which it reads: the family table's GGUF rows */
    em_model_config bad;
    CHECK(em_model_config_load(c, em_test_fixture_path("gguf", "types.gguf"), &bad) ==
          EM_ERR_UNSUPPORTED);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "\"test\"", "llama", "qwen3moe", "gemma3 GGUF files");
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_models), T(test_bf16_file), T(test_config_and_map))

/* Every model family against transformers on tiny random checkpoints (tests/fixtures/models,
 * made by scripts/gen_model_fixtures.py): logits in f32 (1e-4) and bf16, greedy continuations
 * token for token, with and without batching and left padding, with each MoE implementation. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tensor_impl.h"
#include "ember/ember.h"
#include "ember/generate.h"
#include "harness.h"
#include "models/model_impl.h"

static em_model *load_on(em_ctx *c, const char *family, em_dtype dt, const char *device,
                         const char *map) {
    em_model_options o = em_model_default_options();
    o.device = device;
    o.device_map = map;
    o.dtype = dt;
    return em_test_load_fixture_model(c, family, &o);
}

static em_model *load(em_ctx *c, const char *family, em_dtype dt) {
    return load_on(c, family, dt, NULL, NULL);
}

static bool compiled_greedy; /* check_greedy runs em_generate with compile on */

static void check_greedy(em_ctx *c, em_model *m, em_test_bundle *b, const char *family,
                         const char *what) {
    int64_t n_ids, n_want;
    em_token *ids = em_test_host_tokens(c, em_test_bundle_get(b, c, "ids"), &n_ids);
    em_token *want = em_test_host_tokens(c, em_test_bundle_get(b, c, "greedy"), &n_want);
    if (!ids || !want) {
        CHECK(false);
        free(ids);
        free(want);
        return;
    }
    int64_t plen = n_ids / 2;
    em_generate_params p = em_generate_default_params(m);
    p.max_new_tokens = n_want;
    p.do_sample = false;
    p.repetition_penalty = 1.0;
    p.eos_ids = ids; /* a non-NULL list of length 0: no eos stop (as the reference) */
    p.n_eos_ids = 0;
    p.compile = compiled_greedy;
    p.compile_bucket = 4; /* small buckets: the tiny sequences cross several */
    const em_token *prompts[1] = {ids};
    em_generate_result r;
    if (em_generate(c, m, NULL, prompts, &plen, 1, &p, &r) == EM_OK) {
        CHECK_MSG(r.n_ids[0] == n_want && !memcmp(r.ids[0], want, (size_t)n_want * sizeof *want),
                  "%s %s: greedy tokens differ from transformers", family, what);
        if (compiled_greedy) /* one program per key bucket reached, plus the prefill shape */
            CHECK_MSG(r.compiles >= 2 && r.compiles <= 1 + (plen + n_want + 3) / 4,
                      "%s %s: %lld compiles", family, what, (long long)r.compiles);
        em_generate_result_free(&r);
    } else {
        CHECK_MSG(false, "%s: %s", family, em_ctx_error(c)->message);
        em_ctx_clear_error(c);
    }
    /* the left-padded batch */
    int64_t nb, nm, ng;
    em_token *bids = em_test_host_tokens(c, em_test_bundle_get(b, c, "batch_ids"), &nb);
    em_token *bmask = em_test_host_tokens(c, em_test_bundle_get(b, c, "batch_mask"), &nm);
    em_token *bwant = em_test_host_tokens(c, em_test_bundle_get(b, c, "batch_greedy"), &ng);
    if (bids && bmask && bwant) {
        int64_t width = nb / 2, lens[2] = {0, 0};
        const em_token *pr[2];
        for (int k = 0; k < 2; k++) {
            for (int64_t j = 0; j < width; j++) lens[k] += bmask[k * width + j];
            pr[k] = bids + k * width + (width - lens[k]);
        }
        p.max_new_tokens = ng / 2;
        if (em_generate(c, m, NULL, pr, lens, 2, &p, &r) == EM_OK) {
            for (int k = 0; k < 2; k++)
                CHECK_MSG(r.n_ids[k] == ng / 2 &&
                              !memcmp(r.ids[k], bwant + k * (ng / 2), (size_t)(ng / 2) * sizeof *bwant),
                          "%s %s: batched greedy row %d differs from transformers", family, what, k);
            em_generate_result_free(&r);
        } else {
            CHECK_MSG(false, "%s batch: %s", family, em_ctx_error(c)->message);
            em_ctx_clear_error(c);
        }
        if (compiled_greedy) {
            /* three rows run as a batch bucket of four (the fourth a copy of the first) */
            const em_token *pr3[3] = {pr[0], pr[1], pr[0]};
            int64_t lens3[3] = {lens[0], lens[1], lens[0]};
            p.compile_batch_bucket = 1;
            if (em_generate(c, m, NULL, pr3, lens3, 3, &p, &r) == EM_OK) {
                for (int k = 0; k < 3; k++)
                    CHECK_MSG(r.n_ids[k] == ng / 2 &&
                                  !memcmp(r.ids[k], bwant + (k % 2) * (ng / 2),
                                          (size_t)(ng / 2) * sizeof *bwant),
                              "%s %s: batch-bucketed greedy row %d differs from transformers",
                              family, what, k);
                em_generate_result_free(&r);
            } else {
                CHECK_MSG(false, "%s batch bucket: %s", family, em_ctx_error(c)->message);
                em_ctx_clear_error(c);
            }
        }
    }
    free(bids);
    free(bmask);
    free(bwant);
    free(ids);
    free(want);
}

/* tests/fixtures/models/<family>_ref: transformers' ids, logits and greedy tokens */
static em_test_bundle *ref_bundle(const char *family) {
    char rel[128];
    snprintf(rel, sizeof rel, "models/%s_ref", family);
    return em_test_bundle_load(rel);
}

/* bf16_tol: atol = rtol for the bf16 logits */
static void check_causal_tol(const char *family, bool moe, double bf16_tol) {
    em_test_bundle *b = ref_bundle(family);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    em_model *m = load(c, family, EM_F32);
    if (m) {
        em_scope_push(c);
        em_tensor *ids = em_test_bundle_get(b, c, "ids");
        em_tensor *lg = em_model_forward(c, m, ids, NULL, NULL, false);
        char what[128];
        snprintf(what, sizeof what, "%s logits f32", family);
        em_test_allclose(c, lg, em_test_bundle_get(b, c, "logits_f32"), 1e-4, 1e-4, what);
        em_scope_pop(c);
        em_ctx_clear_error(c);
        check_greedy(c, m, b, family, "f32");
        if (em_model_compile_supported(m)) { /* compile mode: logits and greedy tokens */
            em_scope_push(c);
            em_tensor *ids2 = em_test_bundle_get(b, c, "ids");
            em_kv_cache *kv = em_kv_cache_create(c, m, em_tensor_dim(ids2, 0),
                                                 em_tensor_dim(ids2, 1) + 8);
            em_model_compiled *mc = em_model_compile(c, m, kv, 0);
            snprintf(what, sizeof what, "%s logits f32 compiled", family);
            em_test_allclose(c, em_model_forward_compiled(c, mc, ids2, NULL, false),
                             em_test_bundle_get(b, c, "logits_f32"), 1e-4, 1e-4, what);
            em_model_compiled_free(mc);
            em_kv_cache_free(kv);
            em_scope_pop(c);
            em_ctx_clear_error(c);
            compiled_greedy = true;
            check_greedy(c, m, b, family, "f32 compiled");
            compiled_greedy = false;
        }
        if (moe)
            for (int impl = EM_MOE_LOOP; impl <= EM_MOE_DENSE; impl++) {
                em_model_set_moe_impl(m, (em_moe_impl)impl);
                check_greedy(c, m, b, family, em_moe_impl_name((em_moe_impl)impl));
            }
        em_model_free(m);
    }
    /* bf16: HF rounds every op to bf16, as Ember does; differences are a few bf16 ulps */
    m = load(c, family, EM_BF16);
    if (m) {
        em_scope_push(c);
        em_tensor *lg = em_model_forward(c, m, em_test_bundle_get(b, c, "ids"), NULL, NULL, false);
        char what[128];
        snprintf(what, sizeof what, "%s logits bf16", family);
        em_test_allclose(c, lg, em_test_bundle_get(b, c, "logits_bf16"), bf16_tol, bf16_tol, what);
        em_scope_pop(c);
        em_model_free(m);
    }
    em_ctx_clear_error(c);
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void check_causal(const char *family, bool moe) { check_causal_tol(family, moe, 6e-2); }

static void test_qwen3(void) { check_causal("qwen3", false); }
static void test_qwen3_moe(void) { check_causal("qwen3_moe", true); }
static void test_llama(void) { check_causal("llama", false); }
static void test_mistral(void) { check_causal("mistral", false); }
static void test_mixtral(void) { check_causal("mixtral", true); }
static void test_gemma3(void) { check_causal("gemma3_text", false); }
/* per-layer inputs, KV sharing, double-wide MLPs, two head sizes, proportional rope. In bf16
 * its four layers drift further from f32 than the other fixtures do: transformers' own eager
 * and sdpa attention differ by 0.15 on its bf16 logits (Ember's largest difference is 0.15). */
static void test_gemma4_text(void) { check_causal_tol("gemma4_text", false, 0.2); }
/* a gemma4 (multimodal) checkpoint's text part: dense MLP + experts, keys = values */
static void test_gemma4_moe(void) { check_causal("gemma4", true); }

static void test_bert(void) {
    em_test_bundle *b = em_test_bundle_load("models/bert_ref");
    if (!b) return;
    em_ctx *c = em_ctx_create();
    em_model *m = load(c, "bert", EM_F32);
    if (m) {
        CHECK(!em_model_is_causal_lm(m));
        em_tensor *h = em_model_encode(c, m, em_test_bundle_get(b, c, "ids"),
                                       em_test_bundle_get(b, c, "mask"), NULL);
        em_test_allclose(c, h, em_test_bundle_get(b, c, "hidden"), 1e-4, 1e-4, "bert hidden");
        em_model_free(m);
    }
    em_ctx_free(c);
    em_test_bundle_free(b);
}

/* ---- weights copied out of the checkpoint mapping into huge pages ---- */

static bool thp_on(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char buf[128] = {0};
    bool on = f && fgets(buf, sizeof buf, f) && !strstr(buf, "[never]");
    if (f) fclose(f);
    return on;
}

/* The qwen3 fixture with its vocabulary padded from 256 to 8192 rows (zeros), so that the
 * embedding and lm_head are 2 MiB tensors, which the loader copies into huge pages: the first
 * 256 logits are still transformers' (the padded rows add logits of 0 and are never looked up);
 * with zero_copy the weights stay views of the mapping and the logits are the same bits. */
static void test_weight_copies(void) {
    em_test_bundle *b = em_test_bundle_load("models/qwen3_ref");
    if (!b) return;
    em_ctx *c = em_ctx_create();
    char src[1024], path[1200], dir[] = "/tmp/ember_copies_XXXXXX";
    snprintf(src, sizeof src, "%s/models/qwen3", em_test_fixtures_dir());
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/config.json", src);
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    CHECK_MSG(cfg != NULL, "%s: %s", path, je.text);
    json_object_set_new(cfg, "vocab_size", json_integer(8192));
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(cfg && json_dump_file(cfg, path, JSON_INDENT(1)) == 0);
    json_decref(cfg);
    em_safetensors *st = em_safetensors_open(c, src);
    em_safetensors_writer *w = em_safetensors_writer_create(c);
    for (int64_t i = 0; st && w && i < em_safetensors_count(st); i++) {
        const char *name = em_safetensors_info_at(st, i)->name;
        em_tensor *t = em_safetensors_load(c, st, name, NULL);
        if (!strcmp(name, "model.embed_tokens.weight") || !strcmp(name, "lm_head.weight")) {
            em_tensor *big = em_zeros(c, EM_F32, EM_SHAPE(8192, em_tensor_dim(t, 1)));
            em_assign(c, em_narrow(c, big, 0, 0, em_tensor_dim(t, 0)), t);
            t = big;
        }
        em_safetensors_writer_add(c, w, name, t);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(em_safetensors_writer_save(c, w, path) == EM_OK);
    em_safetensors_writer_free(w);
    em_safetensors_free(st);
    em_tensor *first = NULL;
    for (int zc = 0; zc < 2 && !em_ctx_status(c); zc++) {
        em_model_options o = em_model_default_options();
        o.progress = false;
        o.offline = true;
        o.zero_copy = zc;
        em_model *m = em_model_load(c, dir, &o);
        CHECK_MSG(m != NULL, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
        if (!m) break;
        bool copied = m->embed->storage->release == NULL && m->lm_head->storage->release == NULL;
        if (zc)
            CHECK_MSG(!copied, "zero_copy: the embedding should be a view of the mapping");
        else if (thp_on())
            CHECK_MSG(copied, "the 2 MiB embedding and lm_head should be copies");
        else
            fprintf(stderr, "note: transparent huge pages are off here; no copies to check\n");
        em_tensor *lg = em_model_forward(c, m, em_test_bundle_get(b, c, "ids"), NULL, NULL, false);
        em_tensor *head = em_narrow(c, lg, -1, 0, 256);
        em_test_allclose(c, head, em_test_bundle_get(b, c, "logits_f32"), 1e-4, 1e-4,
                         zc ? "padded vocab, zero copy" : "padded vocab, copies");
        if (!zc) first = em_keep(c, head);
        else em_test_allclose(c, head, first, 0, 0, "copies and zero copy agree bit for bit");
        em_model_free(m);
    }
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
    em_ctx_free(c);
    em_test_bundle_free(b);
}

/* ---- Gemma 4: config layouts, forwards without a cache or in chunks, errors ---- */

/* A copy of fixture `family` in a temporary directory (the weights linked) whose config.json
 * `edit` changes (its text part: text_config when nested). Returns the directory (free it with
 * drop_variant) or NULL. */
static char *make_variant(const char *family, void (*edit)(json_t *text)) {
    char src[1024], path[1200];
    snprintf(src, sizeof src, "%s/models/%s", em_test_fixtures_dir(), family);
    char *dir = strdup("/tmp/ember_gemma4_XXXXXX");
    if (!dir || !mkdtemp(dir)) {
        CHECK_MSG(false, "mkdtemp failed");
        free(dir);
        return NULL;
    }
    snprintf(path, sizeof path, "%s/config.json", src);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    CHECK_MSG(root != NULL, "%s: %s", path, je.text);
    json_t *tc = json_object_get(root, "text_config");
    edit(json_is_object(tc) ? tc : root);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(root && json_dump_file(root, path, JSON_INDENT(1)) == 0);
    json_decref(root);
    char from[1100], *abs_src = realpath(src, NULL); /* the link must not be relative */
    snprintf(from, sizeof from, "%s/model.safetensors", abs_src ? abs_src : src);
    free(abs_src);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(symlink(from, path) == 0);
    return dir;
}

static void drop_variant(char *dir) {
    if (!dir) return;
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    rmdir(dir);
    free(dir);
}

/* the Hub's spelling: global_head_dim and num_global_key_value_heads, no per_layer_config */
static void hub_style(json_t *t) {
    json_object_del(t, "per_layer_config");
    json_object_set_new(t, "global_head_dim", json_integer(16));
    if (json_is_true(json_object_get(t, "attention_k_eq_v")))
        json_object_set_new(t, "num_global_key_value_heads", json_integer(1));
}

static em_model *load_dir(em_ctx *c, const char *dir) {
    em_model_options o = em_model_default_options();
    o.dtype = EM_F32;
    o.progress = false;
    o.offline = true;
    return em_model_load(c, dir, &o);
}

/* logits_f32 of the fixture through a Hub-style config, without a cache for the last position
 * only (the KV-shared layers then run on it alone), and with a cache fed in two chunks */
static void check_gemma4_paths(const char *family) {
    em_test_bundle *b = ref_bundle(family);
    char *dir = make_variant(family, hub_style);
    if (!b || !dir) {
        em_test_bundle_free(b);
        drop_variant(dir);
        return;
    }
    em_ctx *c = em_ctx_create();
    em_model *m = load_dir(c, dir);
    CHECK_MSG(m != NULL, "%s hub-style config: %s", family,
              em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (m) {
        char what[160];
        em_tensor *ids = em_test_bundle_get(b, c, "ids");
        em_tensor *want = em_test_bundle_get(b, c, "logits_f32");
        int64_t t = em_tensor_dim(ids, 1), split = 5;
        snprintf(what, sizeof what, "%s logits f32 (hub-style config)", family);
        em_test_allclose(c, em_model_forward(c, m, ids, NULL, NULL, false), want, 1e-4, 1e-4,
                         what);
        snprintf(what, sizeof what, "%s last logits without a cache", family);
        em_test_allclose(c, em_model_forward(c, m, ids, NULL, NULL, true),
                         em_narrow(c, want, 1, t - 1, 1), 1e-4, 1e-4, what);
        em_kv_cache *kv = em_kv_cache_create(c, m, 2, t);
        em_tensor *l1 = em_model_forward(c, m, em_narrow(c, ids, 1, 0, split), NULL, kv, false);
        em_tensor *l2 = em_model_forward(c, m, em_narrow(c, ids, 1, split, t - split), NULL, kv,
                                         false);
        snprintf(what, sizeof what, "%s logits with a cache, in two chunks", family);
        em_test_allclose(c, em_cat(c, (em_tensor *[]){l1, l2}, 2, 1), want, 1e-4, 1e-4, what);
        CHECK(em_kv_cache_length(kv) == t);
        em_kv_cache_reset(kv);
        em_model_forward(c, m, em_narrow(c, ids, 1, 0, split), NULL, kv, true);
        snprintf(what, sizeof what, "%s last logits with a cache", family);
        em_test_allclose(c, em_model_forward(c, m, em_narrow(c, ids, 1, split, t - split), NULL,
                                             kv, true),
                         em_narrow(c, want, 1, t - 1, 1), 1e-4, 1e-4, what);
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s: %s", family, em_ctx_error(c)->message);
        em_kv_cache_free(kv);
        em_model_free(m);
    }
    em_ctx_free(c);
    em_test_bundle_free(b);
    drop_variant(dir);
}

static void test_gemma4_paths(void) {
    check_gemma4_paths("gemma4_text");
    check_gemma4_paths("gemma4");
}

static void skip_layer(json_t *t) {
    json_object_set_new(json_object_get(json_object_get(t, "per_layer_config"), "1"), "skip",
                        json_pack("[s]", "mlp"));
}
static void bidirectional(json_t *t) {
    json_object_set_new(t, "use_bidirectional_attention", json_string("all"));
}
static void all_shared(json_t *t) {
    json_object_set_new(t, "num_kv_shared_layers", json_integer(4));
}
static void wrong_head_dim(json_t *t) {
    json_object_set_new(json_object_get(json_object_get(t, "per_layer_config"), "3"), "head_dim",
                        json_integer(32));
}
static void shared_sliding_only(json_t *t) {
    json_t *lt = json_object_get(t, "layer_types");
    json_array_set_new(lt, 0, json_string("full_attention"));
    json_object_set_new(json_object_get(t, "per_layer_config"), "0",
                        json_pack("{s:i}", "head_dim", 16));
}

static void test_gemma4_errors(void) {
    static const struct {
        void (*edit)(json_t *);
        em_status status;
        const char *needle;
    } cases[] = {
        {skip_layer, EM_ERR_UNSUPPORTED, "per_layer_config[1].skip"},
        {bidirectional, EM_ERR_UNSUPPORTED, "use_bidirectional_attention"},
        {all_shared, EM_ERR_FORMAT, "num_kv_shared_layers 4"},
        {wrong_head_dim, EM_ERR_UNSUPPORTED, "full layers 1 and 3"},
        {shared_sliding_only, EM_ERR_FORMAT, "layer 2 (sliding_attention) shares"},
    };
    em_ctx *c = em_ctx_create();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *dir = make_variant("gemma4_text", cases[i].edit);
        if (!dir) continue;
        em_model *m = load_dir(c, dir);
        CHECK_MSG(m == NULL, "case %zu loaded", i);
        em_model_free(m);
        CHECK_ERR(c, cases[i].status, cases[i].needle);
        drop_variant(dir);
    }
    em_ctx_free(c);
}

/* Gemma 4 in compile mode (its layer is built from the decoder's blocks, so it traces) against
 * its own eager forward: a prefill with a cache and then decode steps for the last position
 * only, where the KV-sharing layers run on that position alone, within 1e-5. */
static void check_gemma4_compiled(const char *family) {
    em_test_bundle *b = ref_bundle(family);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    em_model *m = load(c, family, EM_F32);
    if (m) {
        CHECK_MSG(em_model_compile_supported(m), "%s: compile mode not supported", family);
        em_scope_push(c);
        em_tensor *ids = em_test_bundle_get(b, c, "ids");
        int64_t bsz = em_tensor_dim(ids, 0), t = em_tensor_dim(ids, 1), split = 5;
        em_kv_cache *ke = em_kv_cache_create(c, m, bsz, t);
        em_kv_cache *kc = em_kv_cache_create(c, m, bsz, t);
        em_model_compiled *mc = em_model_compile(c, m, kc, 4);
        char what[160];
        em_tensor *pre = em_narrow(c, ids, 1, 0, split);
        snprintf(what, sizeof what, "%s prefill compiled vs eager", family);
        em_test_allclose(c, em_model_forward_compiled(c, mc, pre, NULL, false),
                         em_model_forward(c, m, pre, NULL, ke, false), 1e-5, 1e-5, what);
        for (int64_t i = split; i < t; i++) {
            em_tensor *step = em_narrow(c, ids, 1, i, 1);
            snprintf(what, sizeof what, "%s decode step %lld compiled vs eager", family,
                     (long long)i);
            em_test_allclose(c, em_model_forward_compiled(c, mc, step, NULL, true),
                             em_model_forward(c, m, step, NULL, ke, true), 1e-5, 1e-5, what);
        }
        em_compile_stats st;
        em_model_compiled_stats(mc, &st);
        CHECK_MSG(st.compiles >= 2, "%s: %lld compiles", family, (long long)st.compiles);
        CHECK_MSG(em_ctx_status(c) == EM_OK, "%s: %s", family, em_ctx_error(c)->message);
        em_model_compiled_free(mc);
        em_kv_cache_free(kc);
        em_kv_cache_free(ke);
        em_scope_pop(c);
        em_model_free(m);
    }
    em_ctx_clear_error(c);
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void test_gemma4_compiled(void) {
    check_gemma4_compiled("gemma4_text");
    check_gemma4_compiled("gemma4");
}

/* On a PJRT device (XLA's CPU plugin) and split between cpu and xla: the same greedy tokens as
 * transformers (and so as the CPU backend). Skipped, loudly, when no plugin is installed. */
static void test_on_xla(void) {
    em_ctx *c = em_ctx_create();
    em_device *xla = em_test_xla_or_skip(c);
    if (!xla) {
        em_ctx_free(c);
        return;
    }
    const char *families[] = {"qwen3", "qwen3_moe", "gemma3_text", "gemma4_text", "gemma4"};
    for (int i = 0; i < 5; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "models/%s_ref", families[i]);
        em_test_bundle *b = em_test_bundle_load(rel);
        em_model *m = load_on(c, families[i], EM_F32, "xla:0", NULL);
        if (m && b) check_greedy(c, m, b, families[i], "on xla:0");
        if (m && b && em_model_compile_supported(m)) { /* one StableHLO program per step */
            compiled_greedy = true;
            check_greedy(c, m, b, families[i], "compiled on xla:0");
            compiled_greedy = false;
        }
        em_model_free(m);
        if (i == 0 && b) { /* layers split between the CPU and the PJRT device */
            m = load_on(c, families[i], EM_F32, NULL,
                        "model.embed_tokens=cpu,model.layers.0=cpu,model.layers.1=xla:0,"
                        "model.norm=xla:0");
            if (m) check_greedy(c, m, b, families[i], "split cpu/xla:0");
            em_model_free(m);
        }
        em_test_bundle_free(b);
        em_ctx_clear_error(c);
    }
    em_ctx_free(c);
}

static void test_errors(void) {
    em_ctx *c = em_ctx_create();
    em_model_options o = em_model_default_options();
    o.offline = true;
    o.progress = false;
    CHECK(em_model_load(c, "/nonexistent/dir", &o) == NULL);
    CHECK(em_ctx_status(c) != EM_OK);
    em_ctx_clear_error(c);
    /* a device map that misses a module is an error naming it */
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/qwen3", em_test_fixtures_dir());
    o.device_map = "model.embed_tokens=cpu,model.layers.0-0=cpu,model.norm=cpu";
    CHECK(em_model_load(c, dir, &o) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "model.layers.1");
    o.device_map = "model.embed_tokens=cpu,model.layers.0-1=cpu,model.norm=cpu,lm_head=cpu";
    em_model *m = em_model_load(c, dir, &o);
    CHECK(m != NULL);
    char map[2048];
    em_model_device_map(m, map, sizeof map);
    CHECK(strstr(map, "model.layers.1=cpu") != NULL);
    /* a cache too small for the request is an error, not an overflow */
    em_kv_cache *kv = em_kv_cache_create(c, m, 1, 4);
    int64_t six[6] = {3, 4, 5, 6, 7, 8};
    CHECK(em_model_forward(c, m, em_from_host(c, EM_I64, EM_SHAPE(1, 6), six), NULL, kv, true) ==
          NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "model_forward", "cache");
    em_kv_cache_free(kv);
    em_model_free(m);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_qwen3), T(test_weight_copies), T(test_qwen3_moe), T(test_llama), T(test_mistral), T(test_mixtral),
             T(test_gemma3), T(test_gemma4_text), T(test_gemma4_moe), T(test_gemma4_paths), T(test_gemma4_compiled),
             T(test_gemma4_errors), T(test_bert), T(test_on_xla), T(test_errors))

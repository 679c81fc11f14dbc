/* config.json / generation_config.json against the values transformers' own config classes give
 * for the same files (scripts/gen_format_fixtures.py): files written by save_pretrained, minimal
 * files that rely on the per-model_type defaults, older key spellings, nested text_config, and
 * wrong types that must name the key and the file. */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ember/config.h"
#include "ember/ember.h"
#include "harness.h"

static const char *cfg_dir(const char *rel) { return em_test_fixture_path("config", rel); }

static json_t *load_json(const char *path) { return em_test_load_json(path); }

#define CHECK_INT(name, got, want_json)                                                            \
    do {                                                                                           \
        json_t *w_ = (want_json);                                                                  \
        int64_t want_ = json_is_null(w_) ? -1 : (int64_t)json_integer_value(w_);                   \
        CHECK_MSG((int64_t)(got) == want_, "%s: %s = %lld, transformers %lld", name, #got,        \
                  (long long)(got), (long long)want_);                                             \
    } while (0)

static bool near(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(1.0, fabs(b)); }

static void check_rope(const char *name, const char *which, const em_rope_config *r,
                       const char *type, json_t *want) {
    if (!want) return;
    const char *k;
    json_t *v;
    json_object_foreach(want, k, v) {
        if (!strcmp(k, "rope_type")) {
            CHECK_MSG(!strcmp(type, json_string_value(v)), "%s: %s type %s, transformers %s", name,
                      which, type, json_string_value(v));
            continue;
        }
        double got;
        if (!strcmp(k, "rope_theta"))
            got = r->theta;
        else if (!strcmp(k, "partial_rotary_factor"))
            got = r->partial_rotary_factor;
        else if (!strcmp(k, "factor"))
            got = r->factor;
        else if (!strcmp(k, "original_max_position_embeddings"))
            got = (double)r->original_max_position_embeddings;
        else if (!strcmp(k, "low_freq_factor"))
            got = r->low_freq_factor;
        else if (!strcmp(k, "high_freq_factor"))
            got = r->high_freq_factor;
        else if (!strcmp(k, "beta_fast"))
            got = r->beta_fast;
        else if (!strcmp(k, "beta_slow"))
            got = r->beta_slow;
        else if (!strcmp(k, "attention_factor"))
            got = r->attention_factor;
        else if (!strcmp(k, "mscale"))
            got = r->mscale;
        else if (!strcmp(k, "mscale_all_dim"))
            got = r->mscale_all_dim;
        else if (!strcmp(k, "truncate"))
            got = r->truncate;
        else {
            CHECK_MSG(false, "%s: unexpected rope key %s", name, k);
            continue;
        }
        double want_v = json_is_boolean(v) ? json_is_true(v) : json_number_value(v);
        CHECK_MSG(near(got, want_v), "%s: %s.%s = %g, transformers %g", name, which, k, got,
                  want_v);
    }
}

static void check_config(const char *name, const em_model_config *m, json_t *e) {
    CHECK_MSG(!strcmp(m->model_type, json_string_value(json_object_get(e, "model_type"))),
              "%s: model_type %s", name, m->model_type);
    CHECK_MSG(!strcmp(m->text_model_type,
                      json_string_value(json_object_get(e, "text_model_type"))),
              "%s: text_model_type %s", name, m->text_model_type);
    CHECK_MSG(m->known_model_type, "%s: model type not known", name);
    json_t *arch = json_object_get(e, "architectures");
    CHECK((size_t)m->n_architectures == json_array_size(arch));
    for (int i = 0; i < m->n_architectures && i < (int)json_array_size(arch); i++)
        CHECK(!strcmp(m->architectures[i], json_string_value(json_array_get(arch, (size_t)i))));
    CHECK_INT(name, m->vocab_size, json_object_get(e, "vocab_size"));
    CHECK_INT(name, m->hidden_size, json_object_get(e, "hidden_size"));
    CHECK_INT(name, m->intermediate_size, json_object_get(e, "intermediate_size"));
    CHECK_INT(name, m->num_hidden_layers, json_object_get(e, "num_hidden_layers"));
    CHECK_INT(name, m->num_attention_heads, json_object_get(e, "num_attention_heads"));
    CHECK_INT(name, m->num_key_value_heads, json_object_get(e, "num_key_value_heads"));
    CHECK_INT(name, m->head_dim, json_object_get(e, "head_dim"));
    CHECK_INT(name, m->max_position_embeddings, json_object_get(e, "max_position_embeddings"));
    CHECK_INT(name, m->sliding_window, json_object_get(e, "sliding_window"));
    CHECK_INT(name, m->bos_token_id, json_object_get(e, "bos_token_id"));
    CHECK_INT(name, m->pad_token_id, json_object_get(e, "pad_token_id"));
    json_t *eos = json_object_get(e, "eos_token_ids");
    CHECK_MSG((size_t)m->n_eos_token_ids == json_array_size(eos), "%s: %d eos ids", name,
              m->n_eos_token_ids);
    for (int i = 0; i < m->n_eos_token_ids && i < (int)json_array_size(eos); i++)
        CHECK_INT(name, m->eos_token_ids[i], json_array_get(eos, (size_t)i));
    CHECK_MSG(!strcmp(m->hidden_act, json_string_value(json_object_get(e, "hidden_act"))),
              "%s: hidden_act %s", name, m->hidden_act);
    CHECK_MSG(m->attention_bias == json_is_true(json_object_get(e, "attention_bias")), "%s: bias",
              name);
    CHECK_MSG(m->mlp_bias == json_is_true(json_object_get(e, "mlp_bias")), "%s: mlp_bias", name);
    CHECK_MSG(m->tie_word_embeddings == json_is_true(json_object_get(e, "tie_word_embeddings")),
              "%s: tie_word_embeddings %d", name, m->tie_word_embeddings);
    json_t *dt = json_object_get(e, "dtype");
    if (json_is_string(dt)) {
        em_dtype want;
        CHECK(em_dtype_parse(json_string_value(dt), &want));
        CHECK_MSG(m->has_dtype && m->dtype == want, "%s: dtype %s", name, m->dtype_name);
    } else {
        CHECK_MSG(!m->has_dtype, "%s: unexpected dtype %s", name, m->dtype_name);
    }
    json_t *v;
    if ((v = json_object_get(e, "rms_norm_eps")))
        CHECK_MSG(near(m->rms_norm_eps, json_number_value(v)), "%s: rms_norm_eps %g", name,
                  m->rms_norm_eps);
    if ((v = json_object_get(e, "layer_norm_eps")))
        CHECK_MSG(near(m->layer_norm_eps, json_number_value(v)), "%s: layer_norm_eps", name);
    if ((v = json_object_get(e, "type_vocab_size"))) CHECK_INT(name, m->type_vocab_size, v);
    json_t *lt = json_object_get(e, "layer_types");
    CHECK(m->layer_types && (int64_t)json_array_size(lt) == m->num_hidden_layers);
    for (size_t i = 0; m->layer_types && i < json_array_size(lt); i++)
        CHECK_MSG((int64_t)m->layer_types[i] == json_integer_value(json_array_get(lt, i)),
                  "%s: layer_types[%zu] = %d", name, i, (int)m->layer_types[i]);
    if (json_object_get(e, "rope")) {
        check_rope(name, "rope", &m->rope, m->rope_type, json_object_get(e, "rope"));
        check_rope(name, "rope_local", &m->rope_local, m->rope_local_type,
                   json_object_get(e, "rope_local"));
        CHECK(m->rope.max_position_embeddings == m->max_position_embeddings);
    }
    if ((v = json_object_get(e, "num_experts"))) {
        CHECK_INT(name, m->num_experts, v);
        CHECK_INT(name, m->num_experts_per_tok, json_object_get(e, "num_experts_per_tok"));
        CHECK_INT(name, m->moe_intermediate_size, json_object_get(e, "moe_intermediate_size"));
        CHECK_INT(name, m->decoder_sparse_step, json_object_get(e, "decoder_sparse_step"));
        CHECK(m->norm_topk_prob == json_is_true(json_object_get(e, "norm_topk_prob")));
        json_t *mol = json_object_get(e, "mlp_only_layers");
        CHECK((size_t)m->n_mlp_only_layers == json_array_size(mol));
        for (int i = 0; i < m->n_mlp_only_layers && i < (int)json_array_size(mol); i++)
            CHECK_INT(name, m->mlp_only_layers[i], json_array_get(mol, (size_t)i));
    } else {
        CHECK_MSG(m->num_experts == 0, "%s: num_experts %lld", name, (long long)m->num_experts);
    }
    if ((v = json_object_get(e, "rope_head_dim"))) CHECK_INT(name, m->rope.head_dim, v);
    else CHECK_MSG(m->rope.head_dim == m->head_dim, "%s: rope head_dim", name);
    if ((v = json_object_get(e, "query_pre_attn_scalar")))
        CHECK(near(m->query_pre_attn_scalar, json_number_value(v)));
    if ((v = json_object_get(e, "final_logit_softcapping")))
        CHECK(near(m->final_logit_softcapping, json_number_value(v)));
    if ((v = json_object_get(e, "attn_logit_softcapping")))
        CHECK(near(m->attn_logit_softcapping, json_number_value(v)));
}

static void check_generation(const char *name, const em_generation_config *g, json_t *e) {
    CHECK_MSG(g->do_sample == json_is_true(json_object_get(e, "do_sample")), "%s: do_sample", name);
    CHECK_MSG(near(g->temperature, json_number_value(json_object_get(e, "temperature"))),
              "%s: temperature %g", name, g->temperature);
    CHECK_INT(name, g->top_k, json_object_get(e, "top_k"));
    CHECK_MSG(near(g->top_p, json_number_value(json_object_get(e, "top_p"))), "%s: top_p", name);
    CHECK_MSG(near(g->min_p, json_number_value(json_object_get(e, "min_p"))), "%s: min_p", name);
    CHECK_MSG(near(g->repetition_penalty,
                   json_number_value(json_object_get(e, "repetition_penalty"))),
              "%s: repetition_penalty", name);
    CHECK_INT(name, g->max_new_tokens, json_object_get(e, "max_new_tokens"));
    CHECK_INT(name, g->max_length, json_object_get(e, "max_length"));
    CHECK_INT(name, g->bos_token_id, json_object_get(e, "bos_token_id"));
    CHECK_INT(name, g->pad_token_id, json_object_get(e, "pad_token_id"));
    json_t *eos = json_object_get(e, "eos_token_ids");
    CHECK_MSG((size_t)g->n_eos_token_ids == json_array_size(eos), "%s: eos count", name);
    for (int i = 0; i < g->n_eos_token_ids && i < (int)json_array_size(eos); i++)
        CHECK_INT(name, g->eos_token_ids[i], json_array_get(eos, (size_t)i));
}

static void test_families(void) {
    em_ctx *c = em_ctx_create();
    DIR *d = opendir(cfg_dir(""));
    CHECK(d != NULL);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.' || !strcmp(de->d_name, "bad") ||
            !strcmp(de->d_name, "generation"))
            continue;
        char rel[512];
        snprintf(rel, sizeof rel, "%s/expected.json", de->d_name);
        json_t *e = load_json(cfg_dir(rel));
        if (!e) continue;
        em_model_config m;
        em_status s = em_model_config_load(c, cfg_dir(de->d_name), &m);
        CHECK_MSG(s == EM_OK, "%s: %s", de->d_name, em_ctx_error(c) ? em_ctx_error(c)->message : "");
        em_ctx_clear_error(c);
        if (s == EM_OK) {
            check_config(de->d_name, &m, e);
            n++;
            snprintf(rel, sizeof rel, "%s/generation_expected.json", de->d_name);
            json_t *ge = load_json(cfg_dir(rel));
            em_generation_config g = em_generation_config_from_model(&m);
            if (ge) check_generation(de->d_name, &g, ge);
            json_decref(ge);
        }
        em_model_config_free(&m);
        json_decref(e);
    }
    if (d) closedir(d);
    CHECK_MSG(n >= 24, "only %d configs checked", n);
    em_ctx_free(c);
}

static void test_wrong_types(void) {
    em_ctx *c = em_ctx_create();
    json_t *man = load_json(cfg_dir("bad/manifest.json"));
    CHECK(man && json_object_size(man) >= 15);
    const char *name;
    json_t *e;
    json_object_foreach(man, name, e) {
        char rel[256];
        snprintf(rel, sizeof rel, "bad/%s", name);
        em_model_config m;
        CHECK_MSG(em_model_config_load(c, cfg_dir(rel), &m) == EM_ERR_FORMAT, "%s accepted", name);
        char key[128];
        snprintf(key, sizeof key, "\"%s", json_string_value(json_object_get(e, "key")));
        snprintf(rel, sizeof rel, "bad/%s/config.json", name);
        CHECK_ERR(c, EM_ERR_FORMAT, key, rel);
        CHECK(m.layer_types == NULL && m.json_ == NULL); /* nothing left behind */
    }
    json_decref(man);
    em_ctx_free(c);
}

static void test_generation(void) {
    em_ctx *c = em_ctx_create();
    static const char *cases[] = {"qwen3", "greedy", "empty"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "generation/%s/expected.json", cases[i]);
        json_t *e = load_json(cfg_dir(rel));
        snprintf(rel, sizeof rel, "generation/%s", cases[i]);
        em_generation_config g;
        CHECK_MSG(em_generation_config_load(c, cfg_dir(rel), &g) == EM_OK, "%s: %s", cases[i],
                  em_ctx_error(c) ? em_ctx_error(c)->message : "");
        em_ctx_clear_error(c);
        if (e) check_generation(cases[i], &g, e);
        json_decref(e);
    }
    em_generation_config g;
    CHECK(em_generation_config_load(c, cfg_dir("generation/qwen3"), &g) == EM_OK);
    CHECK((g.set & EM_GEN_SET_TOP_K) && (g.set & EM_GEN_SET_EOS) && !(g.set & EM_GEN_SET_MAX_LENGTH));
    CHECK(em_generation_config_load(c, cfg_dir("generation/bad_temperature"), &g) == EM_ERR_FORMAT);
    CHECK_ERR(c, EM_ERR_FORMAT, "\"temperature\" is a string", "bad_temperature/generation_config.json");
    CHECK(g.temperature == 1.0 && g.set == 0);
    CHECK(em_generation_config_load(c, cfg_dir("nope"), &g) == EM_ERR_NOT_FOUND);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "nope");
    em_ctx_free(c);
}

/* In-memory parsing, an unknown model_type, raw access to keys the struct lacks, bad JSON. */
static void test_parse_text(void) {
    em_ctx *c = em_ctx_create();
    const char *j = "{\"model_type\": \"phi3\", \"hidden_size\": 96, \"num_attention_heads\": 4,"
                    " \"num_hidden_layers\": 2, \"resid_pdrop\": 0.25, \"custom\": \"x\","
                    " \"use_thing\": true, \"n\": 7, \"rope_scaling\": {\"type\": \"longrope\","
                    " \"short_factor\": [1.0], \"long_factor\": [2.0]}}";
    em_model_config m;
    CHECK(em_model_config_parse(c, j, strlen(j), "mem.json", &m) == EM_OK);
    CHECK(!m.known_model_type && !strcmp(m.model_type, "phi3"));
    CHECK(m.hidden_size == 96 && m.head_dim == 24 && m.num_key_value_heads == 4);
    CHECK(!m.rope_known && !strcmp(m.rope_type, "longrope"));
    double d;
    int64_t n;
    bool b;
    CHECK(em_model_config_get_double(&m, "resid_pdrop", &d) && d == 0.25);
    CHECK(em_model_config_get_int(&m, "n", &n) && n == 7);
    CHECK(em_model_config_get_bool(&m, "use_thing", &b) && b);
    CHECK(!strcmp(em_model_config_get_string(&m, "custom"), "x"));
    CHECK(!em_model_config_get_int(&m, "custom", &n) && !em_model_config_get_string(&m, "zz"));
    em_model_config_free(&m);
    em_model_config_free(&m); /* zeroed: a second free is harmless */
    /* the router's load-balancing loss: off with transformers' 0.001 weight unless asked */
    const char *moe = "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"num_attention_heads\": 4,"
                      " \"num_hidden_layers\": 2, \"num_experts\": 4}";
    CHECK(em_model_config_parse(c, moe, strlen(moe), "moe.json", &m) == EM_OK);
    CHECK(!m.output_router_logits && m.router_aux_loss_coef == 0.001);
    em_model_config_free(&m);
    const char *aux = "{\"model_type\": \"mixtral\", \"hidden_size\": 64, \"num_attention_heads\": 8,"
                      " \"num_hidden_layers\": 2, \"num_local_experts\": 4,"
                      " \"output_router_logits\": true, \"router_aux_loss_coef\": 0.02}";
    CHECK_MSG(em_model_config_parse(c, aux, strlen(aux), "aux.json", &m) == EM_OK, "%s",
              em_ctx_error(c) ? em_ctx_error(c)->message : "");
    CHECK(m.output_router_logits && m.router_aux_loss_coef == 0.02);
    em_model_config_free(&m);
    CHECK(em_model_config_parse(c, "{\"model_type\": ", 15, "cut.json", &m) == EM_ERR_FORMAT);
    CHECK_ERR(c, EM_ERR_FORMAT, "cut.json", "not valid JSON");
    CHECK(em_model_config_parse(c, "[1]", 3, "arr.json", &m) == EM_ERR_FORMAT);
    CHECK_ERR(c, EM_ERR_FORMAT, "arr.json", "not an object");
    CHECK(em_model_config_parse(c, "{}", 2, "empty.json", &m) == EM_ERR_FORMAT);
    CHECK_ERR(c, EM_ERR_FORMAT, "empty.json", "model_type");
    const char *big = "{\"model_type\": \"llama\", \"num_hidden_layers\": 100000000000}";
    CHECK(em_model_config_parse(c, big, strlen(big), "big.json", &m) == EM_ERR_FORMAT);
    CHECK_ERR(c, EM_ERR_FORMAT, "num_hidden_layers", "implausibly large");
    const char *neg = "{\"model_type\": \"llama\", \"hidden_size\": -64}";
    CHECK(em_model_config_parse(c, neg, strlen(neg), "neg.json", &m) == EM_ERR_FORMAT);
    CHECK_ERR(c, EM_ERR_FORMAT, "\"hidden_size\" is -64");
    CHECK(em_model_config_load(c, cfg_dir("nope"), &m) == EM_ERR_NOT_FOUND);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "config/nope");
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_families), T(test_wrong_types), T(test_generation), T(test_parse_text))

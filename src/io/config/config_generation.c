/* generation_config.json → em_generation_config. Unset values take the defaults transformers'
 * generate() applies (GenerationConfig._get_default_generation_params, transformers 5.24). */
#include <stdlib.h>
#include <string.h>

#include "io/config/config_impl.h"

#define OP "generation_config_load"

em_generation_config em_generation_config_default(void) {
    em_generation_config g;
    memset(&g, 0, sizeof g);
    g.bos_token_id = g.pad_token_id = -1;
    g.do_sample = false;
    g.temperature = 1.0;
    g.top_k = 50;
    g.top_p = 1.0;
    g.min_p = 0.0;
    g.repetition_penalty = 1.0;
    g.max_new_tokens = -1;
    g.max_length = 20;
    return g;
}

/* GenerationConfig.from_model_config takes the token ids of the top-level config and, for the
 * ones still unset, those of the text config. */
em_generation_config em_generation_config_from_model(const em_model_config *cfg) {
    em_generation_config g = em_generation_config_default();
    if (!cfg) return g;
    g.bos_token_id = cfg->bos_token_id;
    g.pad_token_id = cfg->pad_token_id;
    g.n_eos_token_ids = cfg->n_eos_token_ids;
    memcpy(g.eos_token_ids, cfg->eos_token_ids, sizeof g.eos_token_ids);
    json_t *root = cfg->json_;
    if (!cfg->nested_text_config || !json_is_object(root)) return g;
    json_t *v;
    if (json_is_integer(v = json_object_get(root, "bos_token_id")))
        g.bos_token_id = (int64_t)json_integer_value(v);
    if (json_is_integer(v = json_object_get(root, "pad_token_id")))
        g.pad_token_id = (int64_t)json_integer_value(v);
    v = json_object_get(root, "eos_token_id");
    if (json_is_integer(v)) {
        g.eos_token_ids[0] = (int64_t)json_integer_value(v);
        g.n_eos_token_ids = 1;
    } else if (json_is_array(v) && json_array_size(v) <= EM_CONFIG_MAX_TOKEN_IDS) {
        size_t i;
        json_t *x;
        int n = 0;
        json_array_foreach(v, i, x) if (json_is_integer(x)) g.eos_token_ids[n++] =
            (int64_t)json_integer_value(x);
        g.n_eos_token_ids = n;
    }
    return g;
}

em_status em_generation_config_from_json(em_ctx *c, json_t *root, const char *file,
                                         em_generation_config *out) {
    em_generation_config g = em_generation_config_default();
    em_cfg_src s = {c, file, "", root, OP, NULL};
    em_status e;
    bool p;
    int64_t v;
#define SETBIT(bit) \
    if (p) g.set |= (bit)
    if ((e = em_cfg_bool(&s, "do_sample", true, &g.do_sample, &p))) goto fail;
    SETBIT(EM_GEN_SET_DO_SAMPLE);
    if ((e = em_cfg_num(&s, "temperature", true, &g.temperature, &p))) goto fail;
    SETBIT(EM_GEN_SET_TEMPERATURE);
    if ((e = em_cfg_int(&s, "top_k", true, &g.top_k, &p))) goto fail;
    SETBIT(EM_GEN_SET_TOP_K);
    if ((e = em_cfg_num(&s, "top_p", true, &g.top_p, &p))) goto fail;
    SETBIT(EM_GEN_SET_TOP_P);
    if ((e = em_cfg_num(&s, "min_p", true, &g.min_p, &p))) goto fail;
    SETBIT(EM_GEN_SET_MIN_P);
    if ((e = em_cfg_num(&s, "repetition_penalty", true, &g.repetition_penalty, &p))) goto fail;
    SETBIT(EM_GEN_SET_REPETITION_PENALTY);
    if ((e = em_cfg_int(&s, "max_new_tokens", true, &g.max_new_tokens, &p))) goto fail;
    SETBIT(EM_GEN_SET_MAX_NEW_TOKENS);
    if ((e = em_cfg_int(&s, "max_length", true, &g.max_length, &p))) goto fail;
    SETBIT(EM_GEN_SET_MAX_LENGTH);
    if ((e = em_cfg_int(&s, "bos_token_id", true, &v, &p))) goto fail;
    if (p) g.bos_token_id = v;
    SETBIT(EM_GEN_SET_BOS);
    if ((e = em_cfg_int(&s, "pad_token_id", true, &v, &p))) goto fail;
    if (p) g.pad_token_id = v;
    SETBIT(EM_GEN_SET_PAD);
    if ((e = em_cfg_ids(&s, "eos_token_id", g.eos_token_ids, &g.n_eos_token_ids, &p))) goto fail;
    SETBIT(EM_GEN_SET_EOS);
#undef SETBIT
    if (g.temperature < 0 || g.top_p < 0 || g.top_p > 1 || g.min_p < 0 || g.min_p > 1 ||
        g.repetition_penalty <= 0 || g.top_k < 0) {
        e = EM_FAIL(c, EM_ERR_FORMAT, OP,
                    "%s: sampling values out of range (temperature %g, top_k %lld, top_p %g, "
                    "min_p %g, repetition_penalty %g)",
                    file, g.temperature, (long long)g.top_k, g.top_p, g.min_p,
                    g.repetition_penalty);
        goto fail;
    }
    *out = g;
    return EM_OK;
fail:
    *out = em_generation_config_default();
    return e;
}

em_status em_generation_config_parse(em_ctx *c, const char *json, size_t n, const char *name,
                                     em_generation_config *out) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (out) *out = em_generation_config_default();
    if (c->err.status) return c->err.status;
    if (!out || (!json && n)) return EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "NULL argument");
    if (!name) name = "generation_config.json";
    json_t *root;
    em_status e = em_cfg_parse_text(c, OP, json ? json : "", n, name, &root);
    if (e) return e;
    e = em_generation_config_from_json(c, root, name, out);
    json_decref(root);
    return e;
}

em_status em_generation_config_load(em_ctx *c, const char *path, em_generation_config *out) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (out) *out = em_generation_config_default();
    if (c->err.status) return c->err.status;
    if (!out) return EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "out is NULL");
    json_t *root;
    char *file;
    em_status e = em_cfg_load_file(c, OP, path, "generation_config.json", &root, &file);
    if (e) return e;
    e = em_generation_config_from_json(c, root, file, out);
    json_decref(root);
    free(file);
    return e;
}

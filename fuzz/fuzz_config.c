/* libFuzzer target: arbitrary bytes as config.json and as generation_config.json. Either they
 * are rejected with a message, or the struct is consistent (layer_types sized by
 * num_hidden_layers, positive head sizes dividing as the attention needs). */
#include <stdlib.h>

#include "ember/config.h"
#include "ember/ember.h"
#include "fuzz_util.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    em_ctx *c = em_ctx_create();
    if (!c) return 0;
    em_model_config m;
    if (em_model_config_parse(c, (const char *)data, size, "fuzz.json", &m) == EM_OK) {
        INVARIANT(m.num_attention_heads > 0 && m.num_key_value_heads > 0 && m.head_dim > 0);
        INVARIANT(m.num_attention_heads % m.num_key_value_heads == 0);
        INVARIANT(m.num_hidden_layers >= 0 && m.layer_types != NULL);
        int sum = 0;
        for (int64_t i = 0; i < m.num_hidden_layers; i++) sum += m.layer_types[i] <= EM_LAYER_OTHER;
        INVARIANT(sum == m.num_hidden_layers);
        for (int i = 0; i < m.n_mlp_only_layers; i++)
            INVARIANT(m.mlp_only_layers[i] >= 0 && m.mlp_only_layers[i] < m.num_hidden_layers);
        INVARIANT(m.n_eos_token_ids >= 0 && m.n_eos_token_ids <= EM_CONFIG_MAX_TOKEN_IDS);
        em_generation_config g = em_generation_config_from_model(&m);
        INVARIANT(g.n_eos_token_ids <= EM_CONFIG_MAX_TOKEN_IDS);
        int64_t x;
        em_model_config_get_int(&m, "hidden_size", &x);
        em_model_config_free(&m);
    } else {
        INVARIANT(em_ctx_error(c) && em_ctx_error(c)->message[0]);
        INVARIANT(m.layer_types == NULL && m.json_ == NULL);
        em_ctx_clear_error(c);
    }
    em_generation_config g;
    if (em_generation_config_parse(c, (const char *)data, size, "fuzz.json", &g) == EM_OK)
        INVARIANT(g.n_eos_token_ids <= EM_CONFIG_MAX_TOKEN_IDS && g.top_k >= 0);
    em_ctx_free(c);
    return 0;
}

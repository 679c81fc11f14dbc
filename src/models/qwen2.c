/* Qwen2 (and Qwen2.5): a Llama-like decoder whose q, k and v projections have biases. */
#include "models/model_impl.h"

/* Qwen2Config defaults */
static void qwen2_defaults(em_model_config *m) {
    m->vocab_size = 151936, m->hidden_size = 4096, m->intermediate_size = 22016;
    m->num_hidden_layers = 32, m->num_attention_heads = 32, m->num_key_value_heads = 32;
    m->max_position_embeddings = 32768;
    m->sliding_window = 4096, m->max_window_layers = 28;
}

/* transformers' Qwen2Config.base_model_tp_plan and Qwen2ForCausalLM._tp_plan, with the
 * vocab-parallel embedding transformers adds to every base model's plan (init_parallel_plans);
 * the q/k/v biases are split with their rows (colwise) */
static const em_tp_rule qwen2_tp_plan[] = {EM_TP_RULE_EMBED, EM_TP_RULES_QKV, EM_TP_RULE_O,
                                           EM_TP_RULES_MLP,  EM_TP_RULE_HEAD, {NULL, NULL}};

const em_family em_family_qwen2 = {
    .config = {.model_type = "qwen2",
               .defaults = qwen2_defaults,
               .has_layer_types = true,
               .use_sliding_window = true,
               .sliding = EM_CFG_SLIDING_AFTER_MAX},
    .gguf = {"qwen2", "qwen2", .moe_prefix = "mlp."},
    .causal = true,
    .load = em_decoder_load,
    .tp_plan = qwen2_tp_plan,
};

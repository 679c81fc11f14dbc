/* Gemma 3 text: RMSNorm with (1 + weight), sandwich norms around attention and MLP, embeddings
 * scaled by sqrt(hidden), q/k norms, query_pre_attn_scalar, sliding/global layer pattern with a
 * local rope base for sliding layers, GELU-tanh MLP, optional logit softcapping. gemma3
 * (multimodal) checkpoints are read through their text part. */
#include <stdio.h>

#include "models/model_impl.h"

/* Gemma3TextConfig defaults */
static void gemma3_defaults(em_model_config *m) {
    m->vocab_size = 262208, m->hidden_size = 2304, m->intermediate_size = 9216;
    m->num_hidden_layers = 26, m->num_attention_heads = 8, m->num_key_value_heads = 4;
    m->head_dim = 256;
    snprintf(m->hidden_act, sizeof m->hidden_act, "gelu_pytorch_tanh");
    m->max_position_embeddings = 131072;
    m->pad_token_id = 0, m->eos_token_ids[0] = 1, m->n_eos_token_ids = 1, m->bos_token_id = 2;
    m->tie_word_embeddings = true;
    m->sliding_window = 4096, m->query_pre_attn_scalar = 256, m->sliding_window_pattern = 6;
}

/* __post_init__: the layer pattern, and a bidirectional window halved */
static em_status gemma3_post_init(em_cfg_src *s, em_model_config *m, int64_t *pattern) {
    em_status e;
    if ((e = em_cfg_int(s, "sliding_window_pattern", false, pattern, NULL))) return e;
    if ((e = em_cfg_positive(s, "sliding_window_pattern", *pattern, false))) return e;
    m->sliding_window_pattern = *pattern;
    bool bidi = false;
    if ((e = em_cfg_bool(s, "use_bidirectional_attention", true, &bidi, NULL))) return e;
    if (bidi) m->sliding_window = m->sliding_window / 2 + 1;
    return EM_OK;
}

/* transformers' Gemma3TextConfig.base_model_tp_plan and Gemma3ForCausalLM._tp_plan, with the
 * vocab-parallel embedding transformers adds to every base model's plan (init_parallel_plans;
 * Gemma3TextScaledWordEmbedding is an nn.Embedding: the scale multiplies the summed rows) */
static const em_tp_rule gemma3_tp_plan[] = {
    EM_TP_RULE_EMBED, EM_TP_RULES_QKV,   EM_TP_RULES_QK_NORM, EM_TP_RULE_O,
    EM_TP_RULES_MLP,  EM_TP_RULE_HEAD,   {NULL, NULL}};

const em_family em_family_gemma3_text = {
    .config = {.model_type = "gemma3_text",
               .multimodal = "gemma3",
               .defaults = gemma3_defaults,
               .head_dim_fixed = true,
               .has_layer_types = true,
               .gemma_activation = true,
               .sliding = EM_CFG_SLIDING_PATTERN,
               .sliding_pattern = 6,
               .nested_rope = true,
               .rope_scaling_full = true,
               .rope_full_theta = 1e6,
               .rope_local_theta = 1e4,
               .post_init = gemma3_post_init},
    .gguf = {"gemma3", "gemma3_text", .norm_offset = true, .moe_prefix = "mlp."},
    .causal = true,
    .qk_norm = true,
    .gemma = true,
    .load = em_decoder_load,
    .tp_plan = gemma3_tp_plan,
};

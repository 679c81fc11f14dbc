/* Qwen3 and Qwen3-MoE: Llama-like decoders with a per-head RMSNorm on q and k. Qwen3-MoE swaps
 * the MLP of every decoder_sparse_step-th layer (except mlp_only_layers) for 128 experts, top-8,
 * softmax routing, renormalised when norm_topk_prob (names mlp.gate, mlp.experts.<e>.*_proj). */
#include "models/model_impl.h"

/* Qwen3Config and Qwen3MoeConfig defaults */
static void qwen3_defaults(em_model_config *m) {
    m->vocab_size = 151936, m->hidden_size = 4096, m->intermediate_size = 22016;
    m->num_hidden_layers = 32, m->num_attention_heads = 32, m->num_key_value_heads = 32;
    m->head_dim = 128, m->max_position_embeddings = 32768;
    m->sliding_window = 4096, m->max_window_layers = 28;
}

static void qwen3_moe_defaults(em_model_config *m) {
    m->vocab_size = 151936, m->hidden_size = 2048, m->intermediate_size = 6144;
    m->num_hidden_layers = 24, m->num_attention_heads = 32, m->num_key_value_heads = 4;
    m->max_position_embeddings = 32768, m->sliding_window = 4096;
    m->moe_intermediate_size = 768, m->num_experts_per_tok = 8, m->num_experts = 128;
}

/* the attention's rules, the same in Qwen3's and Qwen3-MoE's plans */
#define QWEN3_ATTENTION_RULES EM_TP_RULES_QKV, EM_TP_RULES_QK_NORM, EM_TP_RULE_O

/* transformers' Qwen3Model.base_model_tp_plan and Qwen3ForCausalLM._tp_plan, with the
 * vocab-parallel embedding transformers adds to every base model's plan (init_parallel_plans) */
static const em_tp_rule qwen3_tp_plan[] = {EM_TP_RULE_EMBED, QWEN3_ATTENTION_RULES, EM_TP_RULES_MLP,
                                           EM_TP_RULE_HEAD, {NULL, NULL}};

/* transformers' Qwen3MoeConfig.base_model_tp_plan (the fused v5 experts; the embedding
 * vocab-parallel as transformers adds it) with the Hub's
 * per-expert names (gate_proj, up_proj: colwise in each expert; down_proj: rowwise); "experts"
 * is the module rule: the block's partial outputs are summed with all_reduce. The router
 * (mlp.gate) is replicated. */
static const em_tp_rule qwen3_moe_tp_plan[] = {
    EM_TP_RULE_EMBED,
    QWEN3_ATTENTION_RULES,
    {"layers.*.mlp.experts.gate_up_proj", "packed_colwise"},
    {"layers.*.mlp.experts.down_proj", "rowwise"},
    {"layers.*.mlp.experts.*.gate_proj", "colwise"},
    {"layers.*.mlp.experts.*.up_proj", "colwise"},
    {"layers.*.mlp.experts.*.down_proj", "rowwise"},
    {"layers.*.mlp.experts", "moe_tp_experts"},
    EM_TP_RULES_MLP,
    EM_TP_RULE_HEAD,
    {NULL, NULL}};

/* transformers' Qwen3MoeConfig.base_model_ep_plan, with the per-expert names: each rank holds
 * whole experts, its contiguous share; its rules come before the tp plan's */
static const em_tp_rule qwen3_moe_ep_plan[] = {
    {"layers.*.mlp.experts.gate_up_proj", "grouped_gemm"},
    {"layers.*.mlp.experts.down_proj", "grouped_gemm"},
    {"layers.*.mlp.experts.*.gate_proj", "grouped_gemm"},
    {"layers.*.mlp.experts.*.up_proj", "grouped_gemm"},
    {"layers.*.mlp.experts.*.down_proj", "grouped_gemm"},
    {"layers.*.mlp.experts", "ep_dispatch_experts"},
    {NULL, NULL}};

const em_family em_family_qwen3 = {
    .config = {.model_type = "qwen3",
               .defaults = qwen3_defaults,
               .head_dim_fixed = true,
               .has_layer_types = true,
               .use_sliding_window = true,
               .sliding = EM_CFG_SLIDING_AFTER_MAX},
    .gguf = {"qwen3", "qwen3", .moe_prefix = "mlp."},
    .causal = true,
    .qk_norm = true,
    .load = em_decoder_load,
    .tp_plan = qwen3_tp_plan,
};
const em_family em_family_qwen3_moe = {
    .config = {.model_type = "qwen3_moe", .defaults = qwen3_moe_defaults,
               .use_sliding_window = true},
    .gguf = {"qwen3moe", "qwen3_moe", .moe_prefix = "mlp."},
    .causal = true,
    .qk_norm = true,
    .moe = 1,
    .load = em_decoder_load,
    .tp_plan = qwen3_moe_tp_plan,
    .ep_plan = qwen3_moe_ep_plan,
};

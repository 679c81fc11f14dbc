/* Llama (3.x, with llama3 rope scaling), Mistral (sliding window) and Mixtral (block_sparse_moe
 * with experts w1 = gate, w3 = up, w2 = down; routing always renormalised). */
#include "models/model_impl.h"

/* LlamaConfig, MistralConfig and MixtralConfig defaults */
static void llama_defaults(em_model_config *m) {
    m->vocab_size = 32000, m->hidden_size = 4096, m->intermediate_size = 11008;
    m->num_hidden_layers = 32, m->num_attention_heads = 32;
    m->max_position_embeddings = 2048;
    m->bos_token_id = 1, m->eos_token_ids[0] = 2, m->n_eos_token_ids = 1;
}

static void mistral_defaults(em_model_config *m) {
    m->vocab_size = 32000, m->hidden_size = 4096, m->intermediate_size = 14336;
    m->num_hidden_layers = 32, m->num_attention_heads = 32, m->num_key_value_heads = 8;
    m->max_position_embeddings = 4096 * 32;
    m->bos_token_id = 1, m->eos_token_ids[0] = 2, m->n_eos_token_ids = 1;
    m->sliding_window = 4096;
}

static void mixtral_defaults(em_model_config *m) {
    mistral_defaults(m);
    m->sliding_window = 0;
    m->rms_norm_eps = 1e-5;
    m->num_experts_per_tok = 2, m->num_experts = 8;
}

/* transformers' LlamaModel.base_model_tp_plan and LlamaForCausalLM._tp_plan, with the
 * vocab-parallel embedding transformers adds to every base model's plan (init_parallel_plans) */
static const em_tp_rule llama_tp_plan[] = {EM_TP_RULE_EMBED, EM_TP_RULES_QKV, EM_TP_RULE_O,
                                           EM_TP_RULES_MLP,  EM_TP_RULE_HEAD, {NULL, NULL}};

/* transformers' MixtralConfig.base_model_tp_plan (the fused v5 experts) with the Hub's
 * per-expert names (w1 = gate, w3 = up: colwise in each expert; w2 = down: rowwise), Llama's
 * embedding, attention and lm_head; "experts" is the module rule: the block's partial outputs are summed
 * with all_reduce */
static const em_tp_rule mixtral_tp_plan[] = {
    EM_TP_RULE_EMBED,
    EM_TP_RULES_QKV,
    EM_TP_RULE_O,
    {"layers.*.mlp.experts.gate_up_proj", "packed_colwise"},
    {"layers.*.mlp.experts.down_proj", "rowwise"},
    {"layers.*.block_sparse_moe.experts.*.w1", "colwise"},
    {"layers.*.block_sparse_moe.experts.*.w3", "colwise"},
    {"layers.*.block_sparse_moe.experts.*.w2", "rowwise"},
    {"layers.*.mlp.experts", "moe_tp_experts"},
    {"layers.*.block_sparse_moe.experts", "moe_tp_experts"},
    EM_TP_RULE_HEAD,
    {NULL, NULL}};

/* transformers' MixtralConfig.base_model_ep_plan, with the per-expert names: each rank holds
 * whole experts, its contiguous share */
static const em_tp_rule mixtral_ep_plan[] = {
    {"layers.*.mlp.experts.gate_up_proj", "grouped_gemm"},
    {"layers.*.mlp.experts.down_proj", "grouped_gemm"},
    {"layers.*.block_sparse_moe.experts.*.w1", "grouped_gemm"},
    {"layers.*.block_sparse_moe.experts.*.w3", "grouped_gemm"},
    {"layers.*.block_sparse_moe.experts.*.w2", "grouped_gemm"},
    {"layers.*.mlp.experts", "ep_dispatch_experts"},
    {"layers.*.block_sparse_moe.experts", "ep_dispatch_experts"},
    {NULL, NULL}};

const em_family em_family_llama = {
    .config = {.model_type = "llama", .defaults = llama_defaults},
    .gguf = {"llama", "llama", .permute_qk = true, .moe_prefix = "mlp."},
    .causal = true,
    .load = em_decoder_load,
    .tp_plan = llama_tp_plan,
};
const em_family em_family_mistral = {
    .config = {.model_type = "mistral", .defaults = mistral_defaults},
    .gguf = {"mistral", "mistral", .permute_qk = true, .moe_prefix = "mlp."},
    .causal = true,
    .load = em_decoder_load,
    .tp_plan = llama_tp_plan, /* MistralModel's plan is Llama's */
};
const em_family em_family_mixtral = {
    .config = {.model_type = "mixtral", .defaults = mixtral_defaults, .default_theta = 1e6},
    .causal = true,
    .moe = 2,
    .load = em_decoder_load,
    .tp_plan = mixtral_tp_plan,
    .ep_plan = mixtral_ep_plan,
};

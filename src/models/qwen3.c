/* Qwen3 and Qwen3-MoE: Llama-like decoders with a per-head RMSNorm on q and k. Qwen3-MoE swaps
 * the MLP of every decoder_sparse_step-th layer (except mlp_only_layers) for 128 experts, top-8,
 * softmax routing, renormalised when norm_topk_prob (names mlp.gate, mlp.experts.<e>.*_proj). */
#include "models/model_impl.h"

const em_family em_family_qwen3 = {
    .model_type = "qwen3",
    .causal = true,
    .qk_norm = true,
    .load = em_decoder_load,
};

const em_family em_family_qwen3_moe = {
    .model_type = "qwen3_moe",
    .causal = true,
    .qk_norm = true,
    .moe = 1,
    .load = em_decoder_load,
};

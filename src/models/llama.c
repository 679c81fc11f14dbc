/* Llama (3.x, with llama3 rope scaling), Mistral (sliding window) and Mixtral (block_sparse_moe
 * with experts w1 = gate, w3 = up, w2 = down; routing always renormalised). */
#include "models/model_impl.h"

const em_family em_family_llama = {
    .model_type = "llama",
    .causal = true,
    .load = em_decoder_load,
};

const em_family em_family_mistral = {
    .model_type = "mistral",
    .causal = true,
    .load = em_decoder_load,
};

const em_family em_family_mixtral = {
    .model_type = "mixtral",
    .causal = true,
    .moe = 2,
    .load = em_decoder_load,
};

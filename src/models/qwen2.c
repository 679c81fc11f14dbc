/* Qwen2 (and Qwen2.5): a Llama-like decoder whose q, k and v projections have biases. */
#include "models/model_impl.h"

const em_family em_family_qwen2 = {
    .model_type = "qwen2",
    .causal = true,
    .load = em_decoder_load,
};

/* Gemma 3 text: RMSNorm with (1 + weight), sandwich norms around attention and MLP, embeddings
 * scaled by sqrt(hidden), q/k norms, query_pre_attn_scalar, sliding/global layer pattern with a
 * local rope base for sliding layers, GELU-tanh MLP, optional logit softcapping. gemma3
 * (multimodal) checkpoints are read through their text part. */
#include "models/model_impl.h"

const em_family em_family_gemma3_text = {
    .model_type = "gemma3_text",
    .multimodal = "gemma3",
    .causal = true,
    .qk_norm = true,
    .gemma = true,
    .load = em_decoder_load,
};

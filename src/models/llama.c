/* Llama (3.x, with llama3 rope scaling), Mistral (sliding window) and Mixtral (block_sparse_moe
 * with experts w1 = gate, w3 = up, w2 = down; routing always renormalised). */
#include "models/model_impl.h"

const em_family em_family_llama = {"llama", true, false, false, 0, em_decoder_load, NULL};
const em_family em_family_mistral = {"mistral", true, false, false, 0, em_decoder_load, NULL};
const em_family em_family_mixtral = {"mixtral", true, false, false, 2, em_decoder_load, NULL};

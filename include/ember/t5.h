/*
 * ember/t5.h — the T5 text encoder of Stable Diffusion 3 pipelines (`text_encoder_3` /
 * `tokenizer_3`): transformers 5.24's T5EncoderModel and the T5 tokenizer as diffusers calls it.
 *
 *     em_t5_tokenizer *tok = em_t5_tokenizer_load(c, "sd3/tokenizer_3");
 *     em_t5_encoder *te = em_t5_encoder_load(c, "sd3/text_encoder_3", NULL); // context's device
 *     const char *prompts[] = {"a photo of a cat"};
 *     em_tensor *ids = em_t5_tokenize_batch(c, tok, prompts, 1, 256, NULL);  // [1, 256] i64
 *     em_tensor *h = em_t5_encoder_forward(c, te, ids, NULL);                // [1, 256, d_model]
 *     em_t5_encoder_free(te);
 *     em_t5_tokenizer_free(tok);
 *
 * Errors: every function that can fail records the error in the caller's context (naming the
 * file, the field or tensor, the shapes) and returns NULL; a call made while the context holds
 * an error fails at once (ember/core.h). Tensors returned are in the caller's current scope.
 */
#ifndef EMBER_T5_H
#define EMBER_T5_H

#include "ember/core.h"
#include "ember/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * The T5 tokenizer
 * ------------------------------------------------------------------------------------------- */

typedef struct em_t5_tokenizer em_t5_tokenizer;

/**
 * Loads a T5 tokenizer folder: its `tokenizer.json` (read by em_tokenizer_load, with the
 * `tokenizer_config.json` next to it naming eos_token and pad_token). The post-processor must
 * append the eos token and nothing else (T5's TemplateProcessing "$A </s>"): that is checked.
 * A SentencePiece "Precompiled" normalizer (real T5 checkpoints' charsmap, SD3's tokenizer_3)
 * is applied as `tokenizers` does (a malformed charsmap: EM_ERR_FORMAT). Returns NULL and records
 * EM_ERR_NOT_FOUND (no tokenizer.json; an eos or pad token that is not in the vocabulary),
 * EM_ERR_FORMAT, EM_ERR_UNSUPPORTED (as em_tokenizer_load; a post-processor that does not
 * append eos alone), EM_ERR_IO. Free with em_t5_tokenizer_free.
 */
EM_API em_t5_tokenizer *em_t5_tokenizer_load(em_ctx *c, const char *dir);
/** Frees the tokenizer (NULL is a no-op). */
EM_API void em_t5_tokenizer_free(em_t5_tokenizer *t);
/** The underlying tokenizer (owned by `t`). */
EM_API const em_tokenizer *em_t5_tokenizer_base(const em_t5_tokenizer *t);

/**
 * `tokenizer(prompts, padding="max_length", max_length=max_length, truncation=True,
 * add_special_tokens=True)` for `n` NUL-terminated UTF-8 prompts, as diffusers'
 * _get_t5_prompt_embeds calls it: each prompt's tokens cut to max_length - 1, the eos token,
 * then the pad token up to max_length. Returns the ids, i64 [n, max_length] on the context's
 * device, and the attention mask, i64 [n, max_length] (1 for tokens and eos), in `*mask` when
 * `mask` is not NULL. NULL with EM_ERR_INVALID_ARG (NULL arguments, n < 1, max_length outside
 * 1 to 2^24, text that is not UTF-8).
 */
EM_API em_tensor *em_t5_tokenize_batch(em_ctx *c, const em_t5_tokenizer *t,
                                       const char *const *prompts, int n, int64_t max_length,
                                       em_tensor **mask);

/* ---------------------------------------------------------------------------------------------
 * T5EncoderModel
 * ------------------------------------------------------------------------------------------- */

/** T5Config's fields as read (transformers' defaults for absent ones). */
typedef struct em_t5_config {
    int64_t vocab_size, d_model, d_kv, d_ff, num_layers, num_heads;
    int64_t relative_attention_num_buckets, relative_attention_max_distance;
    char feed_forward_proj[32]; /* "relu", "gated-gelu", "{act}" or "gated-{act}" */
    char dense_act_fn[24];      /* derived from feed_forward_proj ("gated-gelu": gelu_new) unless
                                   config.json sets it, as transformers does */
    bool is_gated_act;          /* likewise */
    double layer_norm_epsilon;
} em_t5_config;

typedef struct em_t5_encoder em_t5_encoder;

/**
 * Loads a T5EncoderModel folder (config.json + model.safetensors, or its .index.json) onto
 * `device` (NULL: the context's device), weights as f32 (f16/bf16 checkpoints are converted).
 * Weights as transformers saves them: `shared.weight` (or `encoder.embed_tokens.weight`),
 * `encoder.block.N.layer.0.SelfAttention.{q,k,v,o}.weight`, block 0's
 * `...SelfAttention.relative_attention_bias.weight`, `encoder.block.N.layer.0.layer_norm.weight`,
 * `encoder.block.N.layer.1.DenseReluDense.{wi,wi_0,wi_1,wo}.weight`, `...layer.1.layer_norm
 * .weight`, `encoder.final_layer_norm.weight`; each shape is checked against the config.
 * Config: model_type must be "t5" (umT5's per-layer position biases are not implemented);
 * is_decoder true is refused; dense_act_fn one of relu, gelu, gelu_new, gelu_pytorch_tanh,
 * silu / swish (others EM_ERR_UNSUPPORTED, named); feed_forward_proj not of the form "{act}"
 * or "gated-{act}" is EM_ERR_FORMAT, as transformers refuses it. Returns NULL and records
 * EM_ERR_NOT_FOUND (no config.json, no safetensors, a missing tensor), EM_ERR_FORMAT,
 * EM_ERR_SHAPE (a weight's shape, naming both), EM_ERR_UNSUPPORTED. Free with
 * em_t5_encoder_free.
 */
EM_API em_t5_encoder *em_t5_encoder_load(em_ctx *c, const char *dir, const char *device);
/** Frees the model and its weights (NULL is a no-op). */
EM_API void em_t5_encoder_free(em_t5_encoder *m);
/** The config the model was loaded with (owned by the model). */
EM_API const em_t5_config *em_t5_encoder_get_config(const em_t5_encoder *m);
/** The device the weights live on. */
EM_API em_device *em_t5_encoder_device(const em_t5_encoder *m);

/**
 * T5EncoderModel(input_ids, attention_mask).last_hidden_state: `ids` integer [B, T] (any
 * device; copied to the model's), ids in [0, vocab_size); `attention_mask` (may be NULL, as
 * diffusers passes none) [B, T], non-zero for keys to attend to. Returns [B, T, d_model] f32 on
 * the model's device in the caller's scope, or NULL with EM_ERR_INVALID_ARG / EM_ERR_SHAPE /
 * EM_ERR_DTYPE naming the shapes.
 */
EM_API em_tensor *em_t5_encoder_forward(em_ctx *c, const em_t5_encoder *m, em_tensor *ids,
                                        em_tensor *attention_mask);

#ifdef __cplusplus
}
#endif
#endif

/*
 * ember/clip.h — the CLIP text encoder of Stable Diffusion pipelines: the CLIP tokenizer and
 * CLIPTextModel / CLIPTextModelWithProjection, as transformers 5.24 computes them.
 *
 * A Stable Diffusion folder holds them as `tokenizer/` (vocab.json + merges.txt +
 * tokenizer_config.json + special_tokens_map.json, or a tokenizer.json) and `text_encoder/`
 * (config.json + model.safetensors):
 *
 *     em_clip_tokenizer *tok = em_clip_tokenizer_load(c, "sd15/tokenizer");
 *     em_clip_text *te = em_clip_text_load(c, "sd15/text_encoder", NULL);  // context's device
 *     const char *prompts[] = {"a photo of an astronaut riding a horse on mars"};
 *     em_tensor *mask;
 *     em_tensor *ids = em_clip_tokenize_batch(c, tok, prompts, 1, 0, &mask);  // [1, 77] i64
 *     em_clip_text_output out;
 *     if (em_clip_text_forward(c, te, ids, NULL, EM_CLIP_TEXT_NO_HIDDEN, &out) == EM_OK)
 *         ... out.last_hidden_state [1, 77, 768] is the pipeline's prompt_embeds ...
 *     em_clip_text_free(te);
 *     em_clip_tokenizer_free(tok);
 *
 * Errors: every function that can fail records the error in the caller's context (naming the
 * file, the field or tensor, the shapes) and returns NULL or a status; a call made while the
 * context holds an error fails at once (ember/core.h). Tensors returned are in the caller's
 * current scope.
 */
#ifndef EMBER_CLIP_H
#define EMBER_CLIP_H

#include "ember/core.h"
#include "ember/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * The CLIP tokenizer
 * ------------------------------------------------------------------------------------------- */

typedef struct em_clip_tokenizer em_clip_tokenizer;

/**
 * Loads a CLIP tokenizer folder. With a `tokenizer.json` there, that file is the tokenizer (read
 * by em_tokenizer_load). Without one, the tokenizer transformers' CLIPTokenizer builds from
 * `vocab.json` + `merges.txt` is made: NFC, whitespace runs to one space, lowercase; CLIP's
 * split regex then byte-level pieces; BPE with the `</w>` end-of-word suffix; the special
 * tokens (bos, eos, unk, pad) as special added tokens. `tokenizer_config.json` and then
 * `special_tokens_map.json` (each optional) give model_max_length and the special tokens
 * (strings or {"content": ...} objects; defaults `<|startoftext|>`, `<|endoftext|>` for eos, unk
 * and pad, as CLIPTokenizer's); without a model_max_length the length is 77, CLIP's context.
 * Returns NULL and records EM_ERR_NOT_FOUND (no tokenizer.json and no vocab.json/merges.txt; a
 * special token that is not in the vocabulary), EM_ERR_FORMAT (malformed files, naming the file
 * and the line or field), EM_ERR_IO. Free with em_clip_tokenizer_free.
 */
EM_API em_clip_tokenizer *em_clip_tokenizer_load(em_ctx *c, const char *dir);
/** Frees the tokenizer (NULL is a no-op). */
EM_API void em_clip_tokenizer_free(em_clip_tokenizer *t);
/** The underlying tokenizer (owned by `t`): for decoding, token_to_id, plain encoding. */
EM_API const em_tokenizer *em_clip_tokenizer_base(const em_clip_tokenizer *t);
/** model_max_length (77 for Stable Diffusion's tokenizers). */
EM_API int64_t em_clip_tokenizer_max_length(const em_clip_tokenizer *t);
/** The id of the bos, eos, pad or unk token (EM_SPECIAL_BOS/EOS/PAD/UNK); -1 for others. */
EM_API em_token em_clip_tokenizer_special_id(const em_clip_tokenizer *t, em_special_token which);

/**
 * What Stable Diffusion pipelines call, `tokenizer(prompt, padding="max_length",
 * max_length=max_length, truncation=True)`, for one prompt of `len` bytes of UTF-8: bos, the
 * prompt's tokens truncated to max_length - 2, eos, then the pad token up to max_length.
 * `max_length` 0 means model_max_length; it must be at least 2. Writes max_length ids to `ids`
 * and the attention mask (1 for bos, tokens and eos, 0 for padding) to `mask` (may be NULL);
 * stores the number of unpadded tokens in `*n_real` (may be NULL). Errors: EM_ERR_INVALID_ARG
 * (NULL arguments, max_length below 2, text that is not UTF-8).
 */
EM_API em_status em_clip_tokenize(em_ctx *c, const em_clip_tokenizer *t, const char *prompt,
                                  size_t len, int64_t max_length, em_token *ids, int32_t *mask,
                                  int64_t *n_real);
/**
 * The same for `n` NUL-terminated prompts as tensors on the context's device: returns the ids,
 * i64 [n, max_length], and stores the attention mask, i64 [n, max_length], in `*mask` when
 * `mask` is not NULL. NULL on error (as em_clip_tokenize; n must be at least 1).
 */
EM_API em_tensor *em_clip_tokenize_batch(em_ctx *c, const em_clip_tokenizer *t,
                                         const char *const *prompts, int n, int64_t max_length,
                                         em_tensor **mask);

/* ---------------------------------------------------------------------------------------------
 * CLIPTextModel
 * ------------------------------------------------------------------------------------------- */

/** CLIPTextConfig's fields as read (transformers' defaults for absent ones). */
typedef struct em_clip_text_config {
    int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
    int64_t max_position_embeddings, projection_dim;
    int64_t bos_token_id, eos_token_id, pad_token_id;
    char hidden_act[24]; /* quick_gelu, gelu, gelu_new / gelu_pytorch_tanh, relu, silu */
    double layer_norm_eps;
    bool has_projection; /* text_projection.weight is in the checkpoint
                            (CLIPTextModelWithProjection, SDXL's text_encoder_2) */
} em_clip_text_config;

typedef struct em_clip_text em_clip_text;

/**
 * Loads a CLIPTextModel folder (config.json + model.safetensors, or its .index.json). The
 * config may be CLIPTextConfig's (model_type clip_text_model) or a CLIPModel's, whose
 * `text_config` is read. Weights are the checkpoint's names (`text_model.encoder.layers.0.
 * self_attn.q_proj.weight`, ...), loaded as f32 (f16/bf16 checkpoints are converted) onto
 * `device` (NULL: the context's device). Each weight's shape is checked against the config.
 * Returns NULL and records EM_ERR_NOT_FOUND (no config.json, no safetensors file, a missing
 * tensor, naming it), EM_ERR_FORMAT (a field of the wrong type or value, naming it and the file),
 * EM_ERR_SHAPE (a weight whose shape the config does not imply, naming both shapes),
 * EM_ERR_UNSUPPORTED (a hidden_act Ember does not implement, named). Free with
 * em_clip_text_free.
 */
EM_API em_clip_text *em_clip_text_load(em_ctx *c, const char *dir, const char *device);
/** Frees the model and its weights (NULL is a no-op). */
EM_API void em_clip_text_free(em_clip_text *m);
/** The config the model was loaded with (owned by the model). */
EM_API const em_clip_text_config *em_clip_text_get_config(const em_clip_text *m);
/** The device the weights live on. */
EM_API em_device *em_clip_text_device(const em_clip_text *m);

/** em_clip_text_forward's hidden_index when no intermediate hidden state is wanted. */
#define EM_CLIP_TEXT_NO_HIDDEN (-2147483647 - 1) /* INT_MIN without <limits.h>, which the
                                                  Python package's header stubs lack */

/** What the forward returns; tensors in the caller's scope, f32 on the model's device. */
typedef struct em_clip_text_output {
    em_tensor *last_hidden_state; /* [B, T, H], after final_layer_norm */
    em_tensor *pooler_output;     /* [B, H]: last_hidden_state at each row's eos token */
    em_tensor *text_embeds;       /* [B, projection_dim] with a projection, else NULL */
    em_tensor *hidden_state;      /* hidden_states[hidden_index] (no final norm), or NULL */
} em_clip_text_output;

/**
 * CLIPTextModel's forward on `ids` (integer [B, T], T <= max_position_embeddings, on any
 * device; copied to the model's). `attention_mask` (may be NULL) is [B, T], non-zero for tokens
 * to attend to, combined with the causal mask as transformers does. pooler_output takes, per
 * row, the first position whose id is eos_token_id; when eos_token_id is 2 (configs written
 * before transformers' PR #24773) the position of the largest id, as transformers does.
 * `hidden_index` picks one entry of transformers' `hidden_states` (the embeddings, then each
 * layer's output, num_hidden_layers + 1 in all), negative counting from the end as Python does:
 * -2 is the penultimate layer's output; EM_CLIP_TEXT_NO_HIDDEN asks for none.
 * Returns EM_OK and fills `out`, or records EM_ERR_INVALID_ARG / EM_ERR_SHAPE / EM_ERR_DTYPE
 * naming the shapes, or an index outside the hidden states.
 */
EM_API em_status em_clip_text_forward(em_ctx *c, const em_clip_text *m, em_tensor *ids,
                                      em_tensor *attention_mask, int hidden_index,
                                      em_clip_text_output *out);

/**
 * The prompt embeddings diffusers' StableDiffusionPipeline.encode_prompt makes: with
 * clip_skip 0 the last_hidden_state; with clip_skip k > 0
 * final_layer_norm(hidden_states[-(k + 1)]). `attention_mask` as em_clip_text_forward (the
 * pipelines pass it only when the text encoder's config sets use_attention_mask). Returns
 * [B, T, H] f32 in the caller's scope, or NULL with the error recorded (clip_skip below 0 or
 * above num_hidden_layers is EM_ERR_INVALID_ARG; num_hidden_layers takes the embeddings).
 */
EM_API em_tensor *em_clip_text_prompt_embeds(em_ctx *c, const em_clip_text *m, em_tensor *ids,
                                             em_tensor *attention_mask, int clip_skip);

#ifdef __cplusplus
}
#endif
#endif

/*
 * DiT: diffusers' DiTTransformer2DModel (Transformer2DModel with norm_type "ada_norm_zero", as
 * DiTPipeline's folders name it) loaded from a component folder and run over Ember's ops.
 *
 *     em_dit *d = em_dit_load(c, "dit-xl-2-256/transformer", NULL, EM_F32);
 *     em_tensor *out = em_dit_forward(c, d, x, t, labels);   // x [N, C, H, W], labels i64 [N]
 *     em_dit_free(d);
 *
 * docs/diffusion.md ("DiTPipeline") lists the config fields and what each does.
 */
#ifndef EMBER_DIT_H
#define EMBER_DIT_H

#include "ember/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/** activation_fn of the feed-forward. Append-only. */
typedef enum em_dit_activation {
    EM_DIT_ACT_GELU_TANH = 0, /* "gelu-approximate": GELU(approximate="tanh") */
    EM_DIT_ACT_GELU = 1,      /* "gelu" */
    EM_DIT_ACT_GEGLU = 2      /* "geglu": proj to 2 * inner, hidden * gelu(gate) */
} em_dit_activation;

/** The config.json of a DiTTransformer2DModel, defaults filled as diffusers fills them. */
typedef struct em_dit_config {
    int64_t num_attention_heads, attention_head_dim; /* inner dim = their product */
    int64_t in_channels, out_channels;  /* out_channels null: in_channels */
    int64_t num_layers;
    int64_t sample_size;                /* latent height = width */
    int64_t patch_size;
    int64_t num_embeds_ada_norm;        /* classes; the label table has one more row (null) */
    int64_t norm_num_groups;            /* read; DiT's blocks have no group norm */
    double dropout;                     /* read; inference ignores it */
    double norm_eps;                    /* the feed-forward's LayerNorm (norm3) */
    bool attention_bias;                /* to_q / to_k / to_v biases */
    bool upcast_attention;              /* Ember's attention is f32 inside anyway */
    bool norm_elementwise_affine;       /* norm3's weight and bias */
    em_dit_activation activation;
} em_dit_config;

/** Reads `path` (a folder holding config.json, or the file). Unknown `_class_name`, a
 *  norm_type other than ada_norm_zero, an activation Ember lacks: EM_ERR_UNSUPPORTED naming the
 *  field and value; wrong types or sizes: EM_ERR_FORMAT. `out` is zeroed on failure. */
EM_API em_status em_dit_config_load(em_ctx *c, const char *path, em_dit_config *out);
/** Same from `n` bytes of JSON; `name` stands for the file in messages (NULL: "config.json"). */
EM_API em_status em_dit_config_parse(em_ctx *c, const char *json, size_t n, const char *name,
                                     em_dit_config *out);

typedef struct em_dit em_dit;

/** Loads a transformer folder (config.json + diffusion_pytorch_model.safetensors) onto
 *  `device` (NULL: c's device) as `dtype` (f32, bf16, f16). Every weight's shape is checked
 *  against the config (a mismatch names the tensor and both shapes). NULL with the error in c.
 *  Free with em_dit_free. */
EM_API em_dit *em_dit_load(em_ctx *c, const char *dir, const char *device, em_dtype dtype);
/** Releases the weights. NULL is a no-op. */
EM_API void em_dit_free(em_dit *d);
/** The model's config (owned by d). */
EM_API const em_dit_config *em_dit_get_config(const em_dit *d);
/** The device holding the weights. */
EM_API em_device *em_dit_device(const em_dit *d);

/**
 * DiTTransformer2DModel.forward(sample, timestep, class_labels).sample: sample [N, in, H, H]
 * (H a multiple of patch_size; diffusers' unpatchify takes a square grid) of the model's dtype
 * and device; timestep 0-d, [1] or [N] of any numeric dtype (used as f32); class_labels an
 * integer [N] tensor with values in [0, num_embeds_ada_norm] (the last is the null class of
 * classifier-free guidance; a value outside fails in the embedding, naming it). Returns
 * [N, out_channels, H, H] in c's current scope; NULL with an error naming the shapes.
 */
EM_API em_tensor *em_dit_forward(em_ctx *c, em_dit *d, em_tensor *sample, em_tensor *timestep,
                                 em_tensor *class_labels);

#ifdef __cplusplus
}
#endif
#endif

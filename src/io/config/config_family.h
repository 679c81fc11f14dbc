/*
 * What the config.json reader (config_model.c) needs to know of a model family: the defaults
 * of its transformers config class, the rules its __post_init__ applies, and hooks for keys of
 * its own. The reader is generic; each family file of src/models/ fills one of these in its
 * em_family row, and the models layer hands the reader a lookup over its family table (io
 * never uses models).
 */
#ifndef EMBER_CONFIG_FAMILY_H
#define EMBER_CONFIG_FAMILY_H

#include "io/config/config_impl.h"

/* Which layers slide when config.json gives no layer_types. */
typedef enum em_cfg_sliding {
    EM_CFG_SLIDING_ALL,        /* every layer when sliding_window is set (no layer_types) */
    EM_CFG_SLIDING_AFTER_MAX,  /* layers from max_window_layers on (Qwen2, Qwen3) */
    EM_CFG_SLIDING_PATTERN,    /* all but every pattern-th layer (Gemma) */
} em_cfg_sliding;

typedef struct em_cfg_family {
    const char *model_type; /* config.json's model_type of the text config */
    const char *multimodal; /* the multimodal model_type whose text_config it is, or NULL */
    /* the class's field defaults, over the reader's common ones (rms_norm_eps 1e-6,
     * num_key_value_heads -1 and head_dim 0 meaning "derive", no special tokens, silu) */
    void (*defaults)(em_model_config *m);
    bool head_dim_fixed;      /* head_dim absent/None stays the default (else hidden / heads) */
    bool has_layer_types;     /* the class has a layer_types field the model uses */
    bool gemma_activation;    /* the MLP uses hidden_activation, not hidden_act */
    bool use_sliding_window;  /* sliding_window applies only with use_sliding_window (Qwen) */
    double default_theta;     /* RotaryEmbeddingConfigMixin.default_theta (0: 10000) */
    em_cfg_sliding sliding;   /* layer_types when absent */
    int64_t sliding_pattern;  /* EM_CFG_SLIDING_PATTERN's period (post_init may change it) */
    bool last_layer_full;     /* the last layer is always full attention (Gemma 4) */
    /* rope per layer type (rope_parameters.full_attention / .sliding_attention) */
    bool nested_rope;
    bool rope_scaling_full;   /* rope_scaling updates the full-attention entry (Gemma 3) */
    double rope_full_theta;   /* full entry's theta when rope_theta is absent (0: the default) */
    bool rope_full_fixed;     /* ... even when rope_theta is given (Gemma 4) */
    const char *rope_full_type;    /* the full entry's default rope_type (NULL: "default") */
    double rope_full_partial;      /* its partial_rotary_factor when there is no full entry */
    double rope_local_theta;       /* sliding entry's theta (0: the full default) */
    bool rope_no_local_base_freq;  /* rope_local_base_freq is not read (Gemma 4) */
    /* __post_init__ keys of its own, read after the common ones and before their checks;
     * *pattern is sliding_pattern. NULL: none */
    em_status (*post_init)(em_cfg_src *s, em_model_config *m, int64_t *pattern);
    /* after the layer types and ropes (Gemma 4's full-attention head size). NULL: none */
    em_status (*post_rope)(em_cfg_src *s, em_model_config *m);
} em_cfg_family;

/* The families the reader knows: find by (text or multimodal) model_type, and the rules an
 * unknown model_type is read with. */
typedef struct em_cfg_families {
    const em_cfg_family *(*find)(const char *model_type);
    const em_cfg_family *fallback;
} em_cfg_families;

/* Reads the model config from a parsed document (takes ownership of root on success). */
em_status em_model_config_read(em_ctx *c, json_t *root, const char *file,
                               const em_cfg_families *fams, em_model_config *out);

#endif

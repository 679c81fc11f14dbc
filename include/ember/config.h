/*
 * ember/config.h — config.json and generation_config.json of Hugging Face checkpoints, read into
 * typed structs with the Hub's defaults.
 *
 *     em_model_config cfg;
 *     if (em_model_config_load(c, "Qwen3-0.6B/", &cfg) != EM_OK) { ... em_ctx_error(c) ... }
 *     printf("%s: %lld layers\n", cfg.model_type, (long long)cfg.num_hidden_layers);
 *     em_model_config_free(&cfg);
 *
 * A key missing from the file takes the default of transformers' config class for the file's
 * model_type (models/<type>/configuration_<type>.py, transformers 5.24): qwen3, qwen3_moe,
 * llama, mistral, mixtral, gemma3 / gemma3_text, gemma4 / gemma4_text and bert. Derived values
 * follow the same classes: head_dim = hidden_size / num_attention_heads where the class does
 * so, num_key_value_heads = num_attention_heads when absent, layer_types from sliding_window /
 * sliding_window_pattern / max_window_layers, and rope parameters standardised from either the
 * new `rope_parameters` or the older `rope_theta` + `rope_scaling` keys. Multimodal configs
 * (gemma3, gemma4) are read through their nested `text_config`. Another model_type is read with
 * llama's defaults and reported as such in `known_model_type`.
 *
 * Unknown keys are ignored (they stay reachable through em_model_config_get_*). A known key of
 * the wrong JSON type is an error (EM_ERR_FORMAT) naming the key and the file; integers are
 * accepted where a float is expected. Nothing is allocated when a function fails.
 */
#ifndef EMBER_CONFIG_H
#define EMBER_CONFIG_H

#include "ember/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Most token ids kept from an `eos_token_id` list. */
#define EM_CONFIG_MAX_TOKEN_IDS 16

/** One entry of `layer_types`. Append-only. */
typedef enum em_layer_type {
    EM_LAYER_FULL_ATTENTION = 0,
    EM_LAYER_SLIDING_ATTENTION = 1,
    EM_LAYER_CHUNKED_ATTENTION = 2,
    EM_LAYER_LINEAR_ATTENTION = 3, /* also the legacy name "mamba" */
    EM_LAYER_OTHER = 4             /* another name transformers allows ("conv", "hybrid", ...) */
} em_layer_type;

/** The text decoder (or encoder) hyper-parameters of config.json. Plain data; free with
 *  em_model_config_free. Sizes are counts of elements. */
typedef struct em_model_config {
    char model_type[64];      /* top-level model_type ("qwen3", "gemma3") */
    char text_model_type[64]; /* model_type of the part read: "gemma3_text" for gemma3, else = */
    bool known_model_type;    /* defaults come from this model_type's class (else llama's) */
    bool nested_text_config;  /* the values were read from "text_config" */
    char architectures[4][96];/* "architectures" entries ("Qwen3ForCausalLM") */
    int n_architectures;

    int64_t vocab_size;
    int64_t hidden_size;
    int64_t intermediate_size;
    int64_t num_hidden_layers;
    int64_t num_attention_heads;
    int64_t num_key_value_heads;
    int64_t head_dim;
    int64_t max_position_embeddings;
    double rms_norm_eps;          /* RMSNorm epsilon (decoders) */
    double layer_norm_eps;        /* LayerNorm epsilon (BERT) */
    char hidden_act[32];          /* hidden_act, or hidden_activation for Gemma ("silu", ...) */
    bool attention_bias;
    bool mlp_bias;
    bool tie_word_embeddings;

    /* dtype / torch_dtype ("bfloat16"); dtype is valid when has_dtype. */
    char dtype_name[32];
    bool has_dtype;
    em_dtype dtype;

    /* Rotary embeddings: `rope` for full-attention layers (all layers of most models),
     * `rope_local` for sliding-attention layers (equal to `rope` unless the config gives them
     * their own, as Gemma 3's rope_local_base_freq). rope.theta is rope_theta; head_dim and
     * max_position_embeddings are filled in. rope_type names the type as the file does
     * ("default", "llama3", "proportional", ...); rope_known is false for a type em_rope_type
     * does not cover (rope.type is then EM_ROPE_DEFAULT and must not be trusted). */
    em_rope_config rope, rope_local;
    char rope_type[24], rope_local_type[24];
    bool rope_known, rope_local_known;

    /* Attention pattern. */
    int64_t sliding_window;         /* 0: no sliding window */
    int64_t sliding_window_pattern; /* Gemma 3: every n-th layer is global (0 if n/a) */
    int64_t max_window_layers;      /* Qwen3 */
    em_layer_type *layer_types;     /* num_hidden_layers entries (owned) */

    /* Special tokens; -1 when absent or null. */
    int64_t bos_token_id;
    int64_t pad_token_id;
    int64_t eos_token_ids[EM_CONFIG_MAX_TOKEN_IDS];
    int n_eos_token_ids;

    /* Mixture of experts (0 when the model has none). */
    int64_t num_experts;            /* num_experts / num_local_experts */
    int64_t num_experts_per_tok;    /* num_experts_per_tok / top_k_experts */
    int64_t moe_intermediate_size;
    int64_t decoder_sparse_step;
    bool norm_topk_prob;
    bool output_router_logits;      /* train with the router's load-balancing loss (transformers'
                                       load_balancing_loss_func) added to the LM loss */
    double router_aux_loss_coef;    /* its weight (0.001) */
    int64_t shared_expert_intermediate_size;
    int64_t *mlp_only_layers;       /* owned; n_mlp_only_layers entries */
    int n_mlp_only_layers;

    /* Gemma. */
    double query_pre_attn_scalar;   /* attention scale is query_pre_attn_scalar^-0.5 (0: n/a) */
    double final_logit_softcapping; /* 0: none */
    double attn_logit_softcapping;  /* 0: none */

    /* BERT. */
    int64_t type_vocab_size;

    void *json_; /* private: the parsed document, for em_model_config_get_* */
} em_model_config;

/**
 * Reads `path` (a config.json, a directory holding one, or a .gguf file: see
 * em_model_config_from_gguf in ember/gguf.h) into `out`. On failure records an
 * error naming the file and key (EM_ERR_IO, EM_ERR_NOT_FOUND, EM_ERR_FORMAT) and leaves `out`
 * zeroed (em_model_config_free on it is a no-op).
 */
EM_API em_status em_model_config_load(em_ctx *c, const char *path, em_model_config *out);
/** Same, from `n` bytes of JSON text; `name` stands for the file in messages. */
EM_API em_status em_model_config_parse(em_ctx *c, const char *json, size_t n, const char *name,
                                       em_model_config *out);
/** Releases what the config owns and zeroes it. NULL is a no-op. */
EM_API void em_model_config_free(em_model_config *cfg);

/**
 * Any key of the file, for values the struct does not carry: looked up in `text_config` first
 * (when the config is nested), then at the top level. False (no error) when the key is absent,
 * null or of another type. The string is owned by the config.
 */
EM_API bool em_model_config_get_int(const em_model_config *cfg, const char *key, int64_t *out);
EM_API bool em_model_config_get_double(const em_model_config *cfg, const char *key, double *out);
EM_API bool em_model_config_get_bool(const em_model_config *cfg, const char *key, bool *out);
EM_API const char *em_model_config_get_string(const em_model_config *cfg, const char *key);

/* ---------------------------------------------------------------------------------------------
 * generation_config.json
 * ------------------------------------------------------------------------------------------- */

/** Bits of em_generation_config.set: which values the file gave. */
enum {
    EM_GEN_SET_DO_SAMPLE = 1 << 0,
    EM_GEN_SET_TEMPERATURE = 1 << 1,
    EM_GEN_SET_TOP_K = 1 << 2,
    EM_GEN_SET_TOP_P = 1 << 3,
    EM_GEN_SET_MIN_P = 1 << 4,
    EM_GEN_SET_REPETITION_PENALTY = 1 << 5,
    EM_GEN_SET_MAX_NEW_TOKENS = 1 << 6,
    EM_GEN_SET_MAX_LENGTH = 1 << 7,
    EM_GEN_SET_EOS = 1 << 8,
    EM_GEN_SET_BOS = 1 << 9,
    EM_GEN_SET_PAD = 1 << 10
};

/** Sampling and stopping defaults of a checkpoint. Plain data. Values the file does not set
 *  hold transformers' generate() defaults (GenerationConfig._get_default_generation_params). */
typedef struct em_generation_config {
    int64_t bos_token_id;  /* -1: none */
    int64_t pad_token_id;  /* -1: none */
    int64_t eos_token_ids[EM_CONFIG_MAX_TOKEN_IDS];
    int n_eos_token_ids;
    bool do_sample;            /* default false */
    double temperature;        /* default 1.0 */
    int64_t top_k;             /* default 50 */
    double top_p;              /* default 1.0 */
    double min_p;              /* default 0 (off) */
    double repetition_penalty; /* default 1.0 */
    int64_t max_new_tokens;    /* -1: not set */
    int64_t max_length;        /* default 20 (prompt included) */
    uint32_t set;              /* EM_GEN_SET_* bits */
} em_generation_config;

/** transformers' defaults, nothing set, no special tokens. */
EM_API em_generation_config em_generation_config_default(void);
/**
 * Reads generation_config.json (or a directory holding one) into `out`. Errors name the file
 * and the key; `out` is left at the defaults on failure.
 */
EM_API em_status em_generation_config_load(em_ctx *c, const char *path, em_generation_config *out);
EM_API em_status em_generation_config_parse(em_ctx *c, const char *json, size_t n,
                                            const char *name, em_generation_config *out);
/**
 * What transformers uses when a checkpoint has no generation_config.json
 * (GenerationConfig.from_model_config): the defaults with the model config's bos, eos and pad
 * token ids.
 */
EM_API em_generation_config em_generation_config_from_model(const em_model_config *cfg);

#ifdef __cplusplus
}
#endif
#endif

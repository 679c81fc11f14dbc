/*
 * ember/model.h — Hugging Face models loaded as they are: what
 * `AutoModelForCausalLM.from_pretrained(id, device_map=...)` does in Python.
 *
 *     em_model_options o = em_model_default_options();
 *     o.dtype = EM_BF16;                                         // default: EM_DTYPE_AUTO
 *     em_model *m = em_model_load(c, "Qwen/Qwen3-0.6B", &o);   // Hub id, Hub@rev or a folder
 *     em_kv_cache *kv = em_kv_cache_create(c, m, 1, 512);
 *     em_tensor *logits = em_model_forward(c, m, ids, NULL, kv, true);  // [B, 1, vocab]
 *
 * Families, chosen by config.json's model_type: qwen2, qwen3, qwen3_moe, llama, mistral, mixtral,
 * gemma3_text and gemma4_text (and gemma3 / gemma4 checkpoints' text part; image, audio and
 * video inputs are not supported), bert (an encoder: em_model_encode / em_model_embed). Tensor names are the Hub's; MoE experts are stacked at load into the
 * transformers v5 layout (gate_up [E, 2I, H], down [E, H, I]) whatever the checkpoint stores.
 *
 * A model is immutable after loading and may be used from several threads, each with its own
 * em_ctx and its own KV cache.
 */
#ifndef EMBER_MODEL_H
#define EMBER_MODEL_H

#include "ember/config.h"
#include "ember/moe.h"
#include "ember/compile.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_model em_model;

typedef struct em_model_options {
    /** Device for the whole model ("cpu", "xla:0", ...); NULL: the context's default. Ignored
     *  when device_map is set. */
    const char *device;
    /**
     * Accelerate's device_map: "auto" (fill the available devices in order of free memory,
     * then the CPU), or an explicit map "prefix=device,..." whose module prefixes must cover
     * every weight, e.g. "model.embed_tokens=cpu,model.layers.0-13=cpu,model.layers.14-27=xla:0,
     * model.norm=xla:0,lm_head=xla:0" (a range "a-b" expands over layer indices). NULL: none.
     */
    const char *device_map;
    em_dtype dtype;          /* weights and activations (f32, bf16, f16); EM_DTYPE_AUTO (the
                                default): the checkpoint's dtype when it is f32/bf16, else f32;
                                a GGUF file's weights as stored */
    em_moe_impl moe_impl;    /* expert implementation (default ragged; with ragged, bf16
                                experts on an AVX-512 BF16 CPU are packed at load, see
                                em_ragged_pack, unless zero_copy) */
    bool progress;           /* a progress bar on stderr while loading, when it is a terminal */
    bool offline;            /* never download (as HF_HUB_OFFLINE=1) */
    /** Keep CPU weights as views of the checkpoint's file mapping (no copy, instant load).
     *  false (default): weights of 2 MiB and more are copied into 2 MiB pages when the kernel
     *  has transparent huge pages, which decode streams 2-7 % faster (4 KiB pages stop the
     *  hardware prefetcher at every page); EMBER_ZERO_COPY_WEIGHTS=1 sets it too. */
    bool zero_copy;
    /** Tensor parallelism over this process group (ember/dist.h; NULL or a group of one: none):
     *  each rank loads only its slices of the weights named by the family's plan (transformers'
     *  rule names: colwise, rowwise, colwise_gather_output, ...) and the layers sum their
     *  partial outputs with all_reduce. A group of processes (em_dist_init under mpirun) runs
     *  on the CPU (collectives over MPI); a rank of a device group (em_dist_local) runs on its
     *  device (`device` must then be em_dist_device's name), each rank loaded and driven by its
     *  own thread. Decoder families with a plan (llama, mistral, qwen2, qwen3, qwen3_moe, mixtral,
     *  gemma3_text, gemma4_text; MoE experts as ep_size says; the embedding vocab-parallel;
     *  tp_plan overrides it); KV heads fewer than the degree are replicated; a size that
     *  does not divide by the degree is refused naming it. em_model_tp_placement reports where
     *  the weights went. The group must outlive the model. */
    struct em_dist *tp;
    /** Expert parallelism of the MoE layers (transformers' DistributedConfig.ep_size, with its
     *  ep_implementation "all_reduce"): 0 or 1, the experts follow the tp plan (moe_tp_experts:
     *  every rank a slice of every expert's intermediate dimension); the tp group's size: rank r
     *  holds whole experts, the r-th contiguous 1/ep_size of them, the router runs on every rank,
     *  the tokens routed elsewhere contribute zero and the block's outputs are summed with
     *  all_reduce. Other values, or ep_size without MoE layers, are refused at load. */
    int ep_size;
    /** Overrides of the family's tensor-parallel plan (transformers' DistributedConfig.tp_plan
     *  dict), as JSON text: `{"embed_tokens": "replicate", "lm_head": "colwise_gather_output"}`;
     *  the rules it names replace the family's, the others are kept. Ember's decoder places its
     *  collectives at fixed points, so only `embed_tokens` (embedding_rowwise or replicate) and
     *  `lm_head` (colwise_gather_output or replicate) can change; restating another rule of the
     *  plan is accepted. Invalid JSON, an unknown rule name, a bad pattern, a pattern outside
     *  the plan or a change the decoder cannot run are refused at load naming them. Read
     *  during em_model_load only (the caller keeps ownership). NULL: the family's plan. */
    const char *tp_plan;
    /** SPMD over `spmd` devices (0 or 1: off): the model is loaded whole on `device` (a PJRT
     *  device, with spmd - 1 more of its plugin after it) and its compiled steps
     *  (em_model_compile, em_generate with compile) are partitioned over those devices by
     *  XLA's SPMD partitioner (em_compiled_set_spmd): each weight split as the family's
     *  tensor-parallel plan (and tp_plan) splits it (colwise: its rows, rowwise: its columns,
     *  the vocabulary rows of the embedding and LM head), the KV caches by KV head, the rest
     *  replicated, and a dim that does not divide replicated too; XLA inserts the collectives.
     *  Eager forwards run unpartitioned on `device`. Not with `tp`; refused on the CPU. */
    int spmd;
    /** SPMD only: split each MoE layer's fused gate/up expert stack [E, 2I, H] (the plan's
     *  packed_colwise) by its hidden dim H, the dot's contraction (XLA then all-reduces the
     *  [tokens, 2I] product), instead of keeping it whole on every device (a tile along 2I
     *  would give one device all of gate and another all of up). Whole, a 48-layer
     *  Qwen3-30B-A3B's stacks (38.7 GB in bf16) do not fit one v6e chip's 32 GB
     *  (docs/tpu-aot.md). ep_size = spmd instead splits both expert stacks by expert (the
     *  expert-parallel plan), which XLA's partitioner serves by all-gathering the stacks. */
    bool spmd_split_gate_up;
    /** Weights without values, for a compile-only device (em_device_is_compile_only: tpu-aot:,
     *  cuda-aot:) where nothing runs: each weight is made on `device` with the shape the
     *  checkpoint's safetensors header gives it, in the model's dtype, and its data is never
     *  read, so a checkpoint written with `ember make-checkpoint --shape-only` (headers and
     *  sparse, unwritten data: no disk used) loads at once whatever its size. Refused (at load,
     *  EM_ERR_INVALID_ARG) on a device that executes, with a device_map or tp, or for a GGUF
     *  file. */
    bool shape_only;
} em_model_options;

/** device NULL, no device_map, the checkpoint's dtype, ragged MoE, progress on, online. */
EM_API em_model_options em_model_default_options(void);

/**
 * Loads a model from a Hub id ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-0.6B@REV", resolved through the
 * Hub cache and downloaded when missing), a local directory, or a local .gguf file (llama,
 * mistral, mixtral, qwen2, qwen3, qwen3moe, gemma3; see ember/gguf.h: its config, tokenizer and
 * weights come from the file). A GGUF file's quantized matrices stay quantized (used by the
 * quantized kernels, activations in f32) unless o->dtype is set (not EM_DTYPE_AUTO), which
 * dequantizes every weight to o->dtype at load; on devices other than the CPU they are always
 * dequantized. Weights go from the mapped files straight to their device (zero-copy on the CPU when the dtype matches). NULL with an error
 * naming the file, tensor or key when anything is missing or malformed. Free with em_model_free.
 */
EM_API em_model *em_model_load(em_ctx *c, const char *id_or_dir, const em_model_options *o);
EM_API void em_model_free(em_model *m);

/** The model's config.json (owned by the model; the name follows the `get` rule of
 *  docs/api-style.md: em_model_config is a type, so the accessor is em_<type>_get). */
EM_API const em_model_config *em_model_config_get(const em_model *m);
/** The generation_config.json of the checkpoint (or transformers' defaults from config.json). */
EM_API const em_generation_config *em_model_generation_config(const em_model *m);
/** The local directory the model was read from (the Hub snapshot for Hub ids). */
EM_API const char *em_model_dir(const em_model *m);
EM_API em_dtype em_model_dtype(const em_model *m);
/** True for decoder-only language models, false for encoders (bert). */
EM_API bool em_model_is_causal_lm(const em_model *m);
/** Writes the resolved device map, one "module=device" per line; returns the length. */
EM_API int em_model_device_map(const em_model *m, char *buf, size_t n);
/**
 * The placement report of a tensor-parallel model (loaded with em_model_options.tp): per rule of
 * the family's plan, the weights it placed, the slice rank r holds and the bytes per rank, the
 * replicated rest, the MoE module rules, and whether KV heads are replicated. Written into buf
 * (always NUL-terminated, truncated to n); returns the length, 0 without tensor parallelism.
 */
EM_API int em_model_tp_placement(const em_model *m, char *buf, size_t n);
/** Seconds spent in em_model_load. */
EM_API double em_model_load_seconds(const em_model *m);
/**
 * Bytes of the weights as the model holds them, quantized ones at their quantized size. With
 * `decode_step`, only what one decode step reads in full: every weight but the embedding table
 * (of which a step reads one row per token) unless it is also the LM head (tied); MoE experts
 * all counted (a step reads those its tokens are routed to).
 */
EM_API int64_t em_model_weight_bytes(const em_model *m, bool decode_step);
/**
 * Writes the dtypes the weights are held in, by share of their bytes ("q4_1 67%, q8_0 31%,
 * f32 2%") into buf (always NUL-terminated); returns the length. A GGUF file's quantized
 * weights are held as stored unless a dtype was asked for at load, or the model sits on a
 * device other than the CPU (quantized weights are dequantized for PJRT devices).
 */
EM_API int em_model_weight_dtypes(const em_model *m, char *buf, size_t n);
/** Sets the MoE expert implementation used by later forwards. Experts packed at load (ragged's
 *  layout, see em_model_options.moe_impl) stay packed: loop and dense then unpack each expert
 *  per call, correct but slower than loading with that implementation. */
EM_API void em_model_set_moe_impl(em_model *m, em_moe_impl impl);
/**
 * Gradient checkpointing (transformers' model.gradient_checkpointing_enable()): while recording
 * for autodiff (em_grad_enable) a forward without a KV cache then runs each decoder layer as an
 * em_checkpoint region (ember/autograd.h): the backward keeps only the layers' inputs and
 * recomputes one layer's activations at a time, about one more forward's work per step for
 * activation memory of one layer instead of all. Gradients are the same. Forwards with a cache
 * or not recording are unchanged. Set it before forwards, not while another thread runs one.
 * Gemma 4's per-layer inputs and shared keys/values pass between the regions as their inputs
 * and outputs. EM_ERR_UNSUPPORTED (naming the reason) for a model that is not a decoder LM;
 * `on = false` always succeeds. Returns the status.
 */
EM_API em_status em_model_set_gradient_checkpointing(em_ctx *c, em_model *m, bool on);

/** One trainable tensor of a model, under the name transformers gives it. */
typedef struct em_model_param {
    char name[160];    /* the Hub's tensor name ("model.layers.0.self_attn.q_proj.weight") */
    em_tensor *tensor; /* borrowed: owned by the model, valid until em_model_free */
} em_model_param;

/**
 * The parameters of a decoder language model, as transformers' model.named_parameters() lists them:
 * names with the checkpoint's prefix, a tied LM head listed once (as the embedding), MoE experts in
 * the v5 stacked layout (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]),
 * Gemma 4's per-layer input weights and its experts (router.proj.weight, router.scale,
 * router.per_expert_scale, experts.gate_up_proj, experts.down_proj, the norms beside them; not its
 * layer_scalar: a buffer). Writes the first `max` of them into out (out may be NULL when max is 0)
 * and returns how many there are. The tensors are the model's own weights: a trainer marks them
 * with em_tensor_requires_grad and updates them in place (then the model is no longer immutable:
 * do not run forwards on other threads meanwhile). -1 with EM_ERR_UNSUPPORTED for models whose
 * weights are not plain trainable tensors: encoders, quantized GGUF weights, experts packed at
 * load for ragged_dot, tensor-parallel shards; EM_ERR_INVALID_ARG for NULL arguments.
 */
EM_API int em_model_params(em_ctx *c, const em_model *m, em_model_param *out, int max);

/* ---- decoder-only language models ---- */

/** A fixed-size key/value cache for `batch` sequences of at most `max_len` positions, written
 *  in place (no reallocation while generating). Free with em_kv_cache_free. */
typedef struct em_kv_cache em_kv_cache;
EM_API em_kv_cache *em_kv_cache_create(em_ctx *c, const em_model *m, int64_t batch,
                                       int64_t max_len);
EM_API void em_kv_cache_free(em_kv_cache *kv);
/** Forgets the cached positions (the memory is kept). */
EM_API void em_kv_cache_reset(em_kv_cache *kv);
/** Positions already in the cache. */
EM_API int64_t em_kv_cache_length(const em_kv_cache *kv);
/** MoE models: distinct experts hit in the last forward, summed over layers (0 otherwise). */
EM_API int64_t em_kv_cache_experts_hit(const em_kv_cache *kv);

/**
 * One forward step: ids [B, T] (i64) continue the sequences held by the cache (which is
 * advanced by T). key_mask [B, cache length + T] (bool, true = real token; NULL: all real)
 * marks left padding; position ids follow transformers (cumulative count of real tokens - 1).
 * Returns logits [B, T, vocab] in f32 (only the last position when last_only: [B, 1, vocab]).
 * A NULL cache runs without one (T is then the whole sequence).
 */
EM_API em_tensor *em_model_forward(em_ctx *c, const em_model *m, em_tensor *ids,
                                   em_tensor *key_mask, em_kv_cache *cache, bool last_only);

/**
 * em_model_forward of whole sequences (no cache, no mask, all positions) that also gives, in
 * *aux, the MoE router's auxiliary load-balancing loss of this forward as transformers'
 * load_balancing_loss_func computes it without an attention mask (Switch Transformer):
 * num_experts * sum_e f_e P_e over the tokens of every MoE layer, f_e the share of top-k choices
 * that went to expert e and P_e the mean routing probability of e. Differentiable through P_e
 * (as in torch: the counts have no gradient). *aux is a 0-d f32 tensor, or NULL when no MoE layer
 * ran (a dense model). Scale it by the config's router_aux_loss_coef and add it to the LM loss
 * (`ember train` does when the config's output_router_logits is true). Returns the logits as
 * em_model_forward; on error NULL and *aux NULL (aux NULL itself is EM_ERR_INVALID_ARG).
 */
EM_API em_tensor *em_model_forward_router_aux(em_ctx *c, const em_model *m, em_tensor *ids,
                                              em_tensor **aux);

/* ---- compile mode (ember/compile.h) ---- */

/**
 * The forward step of a decoder language model as a compiled function bound to `cache` (which
 * must outlive it). Shapes depend only on the batch, the number of new tokens and the key
 * bucket: the cache length rounded up to a multiple of `bucket` (<= 0: 128), capped at the
 * cache's size. Positions, write positions and masks are data, so a decode loop compiles one
 * program per bucket it reaches (plus one for the prefill shape). The model must sit on one
 * device; MoE routing stays on the device (em_kv_cache_experts_hit then reads -1). Families with
 * their own forward (gemma4) are not supported yet: EM_ERR_UNSUPPORTED. NULL on error.
 */
typedef struct em_model_compiled em_model_compiled;
EM_API em_model_compiled *em_model_compile(em_ctx *c, const em_model *m, em_kv_cache *cache,
                                           int64_t bucket);
/** Whether em_model_compile accepts the model (a decoder with the shared forward on one
 *  device). */
EM_API bool em_model_compile_supported(const em_model *m);
/** em_model_forward through the compiled step (same arguments and results; the cache is the
 *  one given to em_model_compile). */
EM_API em_tensor *em_model_forward_compiled(em_ctx *c, em_model_compiled *mc, em_tensor *ids,
                                            em_tensor *key_mask, bool last_only);
/** Compile counters (compiles, time spent compiling, the last reason). */
EM_API void em_model_compiled_stats(const em_model_compiled *mc, em_compile_stats *out);
EM_API void em_model_compiled_free(em_model_compiled *mc);

/* ---- encoders (bert) ---- */

/** Last hidden states [B, T, H] (f32) for ids [B, T] with mask [B, T] (bool or integer, may be
 *  NULL) and token types [B, T] (may be NULL: zeros). */
EM_API em_tensor *em_model_encode(em_ctx *c, const em_model *m, em_tensor *ids,
                                  em_tensor *mask, em_tensor *token_types);

#ifdef __cplusplus
}
#endif
#endif

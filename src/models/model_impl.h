/*
 * Private layout of loaded models: the family table, per-layer weights, the KV cache, and the
 * weight loader the family files use.
 */
#ifndef EMBER_MODEL_IMPL_H
#define EMBER_MODEL_IMPL_H

#include "core/tensor_impl.h"
#include "ember/model.h"
#include "ember/safetensors.h"
#include "io/config/config_family.h"
#include "io/gguf/gguf_impl.h"

#define EM_MAX_ROPE_FREQS 512

typedef struct em_model em_model;
typedef struct em_tp_place em_tp_place; /* tp_report.c */

/* ---- GGUF files as a weight source (model_gguf.c) ---- */
typedef struct em_gguf_src em_gguf_src;
struct em_gguf;
/* Opens a .gguf file whose tensors are then named as the Hub names them (cfg: the config read
 * from its metadata). NULL with an error. */
em_gguf_src *em_gguf_src_open(em_ctx *c, const char *path, const em_model_config *cfg);
void em_gguf_src_close(em_gguf_src *s);
const struct em_gguf *em_gguf_src_file(const em_gguf_src *s);
/* The activations' dtype for a file's weights as stored: bf16 when most bytes of its matrices are
 * bf16 (as transformers takes a checkpoint's torch_dtype), else f32 (quantized and f32/f16). */
em_dtype em_gguf_src_float_dtype(const em_gguf_src *s);
bool em_gguf_src_has(const em_gguf_src *s, const char *hub);
/* Bytes of the tensors under `prefix.` (all of them for NULL), and of one tensor. */
int64_t em_gguf_src_bytes(const em_gguf_src *s, const char *prefix);
uint64_t em_gguf_src_entry_bytes(const em_gguf_src *s, const char *hub);
/* Tensor `hub` for the model: its own quantized type when keep_quant and it is a linear's or
 * the embedding's matrix bound for the CPU, else converted to dtype; on dev, in c's scope. */
em_tensor *em_gguf_src_load(em_ctx *c, const em_gguf_src *s, const char *hub, em_dtype dtype,
                            bool keep_quant, em_device *dev);
/* llama.cpp's rope_freqs.weight (per-frequency divisors of Llama 3's rope) into out[n]:
 * returns n, 0 when the file has none, -1 with an error. */
int em_gguf_src_rope_factors(em_ctx *c, const em_gguf_src *s, float *out, int n);
/* Gives back the mapping's pages of tensor `hub` once a copy is held. */
void em_gguf_src_drop(const em_gguf_src *s, const char *hub);

/* ---- the weight loader ---- */
typedef struct em_wload {
    em_ctx *c;
    em_model *m;
    em_safetensors *st;
    em_gguf_src *gs;     /* a GGUF file instead of st */
    bool keep_quant;     /* GGUF: quantized matrices stay quantized (see em_gguf_src_load) */
    char prefix[96];     /* "model." or the text part of a multimodal checkpoint */
    int64_t done_bytes, total_bytes;
    bool progress;
    double last_draw;
    bool huge_copy;      /* copy large CPU weights out of the mapping into 2 MiB pages */
    bool pack_experts;   /* expert weights in em_ragged_pack's layout where it pays (ragged MoE,
                            weights not kept as views of the mapping) */
    bool shape_only;     /* compile-only device: weights made from the headers, data unread */
} em_wload;

/* Tensor `<name>` (printf-style, no prefix added) converted to the model dtype on dev.
 * Required: records an error naming the tensor and the checkpoint when absent. The result is
 * owned by the caller (outside any scope). */
em_tensor *em_wl_get(em_wload *w, em_device *dev, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same, NULL without an error when absent. */
em_tensor *em_wl_opt(em_wload *w, em_device *dev, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Whether a tensor exists. */
bool em_wl_has(em_wload *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Experts of one MoE layer stacked as gate_up [E, 2I, H] and down [E, H, I], from either the
 * fused v5 tensors `<base>experts.gate_up_proj` / `<base>experts.down_proj` or per-expert
 * tensors `<base>experts.<e>.<gate>.weight` etc. Returns false with an error. */
bool em_wl_experts(em_wload *w, em_device *dev, const char *base, int64_t n_experts,
                   const char *gate, const char *up, const char *down, em_tensor **gate_up,
                   em_tensor **down_out);

/* ---- decoder layers ---- */
typedef struct em_dec_layer {
    em_device *dev;
    bool sliding;  /* sliding-window attention (and the local rope for Gemma 3) */
    bool moe;
    em_tensor *in_norm, *post_attn_norm, *pre_ffn_norm, *post_ffn_norm;
    em_tensor *q, *k, *v, *o, *q_bias, *k_bias, *v_bias, *o_bias, *q_norm, *k_norm;
    em_tensor *gate, *up, *down;   /* dense MLP */
    em_tensor *router;             /* MoE: [E, H] */
    em_moe_weights experts;
    /* Gemma 4 (gemma4.c); zero for the other families */
    int64_t head_dim, kv_heads;    /* this layer's sizes (0: the config's) */
    bool kv_shared;                /* reads the keys/values of layer kv_src (no cache of its own) */
    bool k_eq_v;                   /* values are the key projection (no v_proj) */
    int64_t kv_src;
    em_tensor *pre_ffn_norm_2, *post_ffn_norm_1, *post_ffn_norm_2; /* MoE beside the MLP */
    em_tensor *router_scale;       /* [H] */
    em_tensor *pl_gate, *pl_proj, *pl_norm; /* per-layer input: [P, H], [H, P], [H] */
    em_tensor *layer_scalar;       /* [1] or NULL */
} em_dec_layer;

/* ---- BERT ---- */
typedef struct em_bert_layer {
    em_tensor *q, *qb, *k, *kb, *v, *vb, *ao, *aob, *ln1, *ln1b, *inter, *interb, *out, *outb,
        *ln2, *ln2b;
} em_bert_layer;

/* ---- families ---- */
typedef enum em_mlp_act { EM_ACT_SILU, EM_ACT_GELU_TANH, EM_ACT_GELU } em_mlp_act;
/* RMSNorm variants: x * w (Llama), x * (1 + w) (Gemma 3), computed in f32 times w and rounded
 * once (Gemma 4) */
typedef enum em_norm_kind { EM_NORM_RMS, EM_NORM_RMS_1P, EM_NORM_RMS_F32 } em_norm_kind;

typedef struct em_fwd em_fwd; /* one forward step (decoder_blocks.h) */

/* One rule of a tensor-parallel plan: weights whose name (after the checkpoint's prefix, without
 * .weight/.bias; "*" matches a layer index) is `pattern` are placed by `style`, one of
 * transformers' names: colwise, rowwise, packed_colwise, colwise_gather_output,
 * embedding_rowwise, replicated_with_grad_allreduce, replicate (whole). A plan ends with
 * {NULL, NULL}. */
typedef struct em_tp_rule {
    const char *pattern, *style;
} em_tp_rule;

/* The rules the decoder families' plans share (transformers' base_model_tp_plan entries, the
 * vocab-parallel embedding init_parallel_plans adds, and the LM's _tp_plan). */
#define EM_TP_RULE_EMBED {"embed_tokens", "embedding_rowwise"}
#define EM_TP_RULES_QKV                                                  \
    {"layers.*.self_attn.q_proj", "colwise"},                            \
    {"layers.*.self_attn.k_proj", "colwise"},                            \
    {"layers.*.self_attn.v_proj", "colwise"}
#define EM_TP_RULES_QK_NORM                                              \
    {"layers.*.self_attn.q_norm", "replicated_with_grad_allreduce"},     \
    {"layers.*.self_attn.k_norm", "replicated_with_grad_allreduce"}
#define EM_TP_RULE_O {"layers.*.self_attn.o_proj", "rowwise"}
#define EM_TP_RULES_MLP                                                  \
    {"layers.*.mlp.gate_proj", "colwise"},                               \
    {"layers.*.mlp.up_proj", "colwise"},                                 \
    {"layers.*.mlp.down_proj", "rowwise"}
#define EM_TP_RULE_HEAD {"lm_head", "colwise_gather_output"}

typedef struct em_family {
    /* its config.json: model_type (and the multimodal model_type whose text part it reads),
     * the config class's defaults and rules, read by io's config reader */
    em_cfg_family config;
    em_gguf_arch gguf; /* its GGUF files (llama.cpp's general.architecture), if any */
    bool causal;               /* decoder LM (else encoder) */
    /* the shared loader's naming (em_decoder_load) */
    bool qk_norm;              /* per-head RMSNorm of q and k (Qwen3, Gemma 3) */
    bool gemma;                /* 1 + weight norms, sandwich norms, scaled embeddings */
    int moe;                   /* 0 none, 1 Qwen3-MoE names, 2 Mixtral names */
    /* reads the family's own config.json keys into the model (per-layer sizes, the blocks'
     * options) once the config is read and the layers allocated; NULL: none */
    em_status (*config_hook)(em_ctx *c, em_model *m);
    /* loads everything after the common setup (weights, per-layer flags, the model's block
     * options) */
    em_status (*load)(em_wload *w);
    /* hooks of the shared forward (decoder.c), NULL: none / the shared one */
    void (*after_embed)(em_fwd *f, em_tensor *ids, em_tensor *h); /* ids on the embed device */
    em_tensor *(*layer)(em_fwd *f, const em_dec_layer *l, em_tensor *h, int64_t li);
    /* its tensor-parallel plan (transformers' base_model_tp_plan and the LM's _tp_plan, as
     * data); NULL: the family cannot be split */
    const em_tp_rule *tp_plan;
    /* its expert-parallel plan (transformers' base_model_ep_plan): rules that take precedence
     * over tp_plan's when em_model_options.ep_size asks for expert parallelism; NULL: none */
    const em_tp_rule *ep_plan;
} em_family;

/* The weights the model reads that transformers keeps as saved buffers, not parameters (Gemma
 * 4's layer_scalar), under their Hub names, as em_model_params lists parameters: the count, at
 * most max written to out; -1 for a NULL model or output (model_params.c). A trainer holds them
 * frozen and writes them into its checkpoints. */
int em_model_buffers(const em_model *m, em_model_param *out, int max);
/* How many weights the model reads that neither em_model_params nor em_model_buffers lists (a
 * trainer's checkpoint would lack them): 0 for every family today; -1 with c's error
 * (em_model_params' refusal, out of memory). */
int em_model_unlisted_weights(em_ctx *c, const em_model *m);
/* Every weight the model holds, each once (a tied head is the embedding), in a malloc'ed array
 * *out the caller frees: the count (0 with *out NULL when out of memory) (model_load.c). */
int em_model_weight_list(const em_model *m, em_tensor ***out);

/* The family of a (text or multimodal) model_type from family_table.c, NULL if none. */
const em_family *em_family_find(const char *model_type);
/* The family row of a GGUF file's general.architecture; NULL with an EM_ERR_UNSUPPORTED
 * error (in the name of `op`) listing the architectures the table has. */
const em_gguf_arch *em_family_gguf_arch(em_ctx *c, const char *op, const em_gguf *g);
/* The supported model_types for messages: "qwen2, qwen3, ... and bert" (truncated to n). */
void em_family_names(char *buf, size_t n);
/* The shared decoder loader (family files call it with their naming). */
em_status em_decoder_load(em_wload *w);
/* Tensor parallelism of a tied lm_head (m->lm_head is the embedding): the embedding's slice
 * when both are split by vocabulary, a slice of the replicated embedding when only the head
 * is, refused when only the embedding is. */
em_status em_decoder_tie_tp_head(em_wload *w);
/* hidden_act / hidden_activation of config.json as an activation */
em_mlp_act em_decoder_act(const char *name);
/* Position ids [B, T] (i64, CPU) of the last T of tk keys as transformers computes them from the
 * key mask [B, tk] (may be NULL: pos0, pos0 + 1, ...). */
em_tensor *em_decoder_positions(em_ctx *c, em_tensor *key_mask, int64_t b, int64_t t,
                                int64_t pos0, int64_t tk);
/* The same from a key mask already on the host ([B, tk] bytes, NULL: no padding) into pos
 * [B, T]. */
void em_decoder_positions_host(const uint8_t *mk, int64_t b, int64_t t, int64_t pos0, int64_t tk,
                               int64_t *pos);
/* Checks that ids [B, T] and key_mask [B, cache length + T] (may be NULL) continue `kv` (may
 * be NULL) of model m; false with an EM_ERR_SHAPE error in the name of `what`. */
bool em_decoder_check_step(em_ctx *c, const char *what, const em_model *m,
                           const em_kv_cache *kv, em_tensor *ids, em_tensor *key_mask);
em_status em_bert_load(em_wload *w);
/* The forward with static shapes that compile mode traces (decoder.c): positions [B, T] and
 * cache_pos [T] (i64) and the masks [B, 1, T, L] (bool; mask_local for sliding layers, may be
 * NULL) are tensors on the model's device; keys are written with index_copy and attention reads
 * the first L cache positions. Does not advance the cache (the caller does). */
em_tensor *em_decoder_forward_static(em_ctx *c, const em_model *m, em_tensor *ids,
                                     em_tensor *positions, em_tensor *cache_pos, em_tensor *mask,
                                     em_tensor *mask_local, em_kv_cache *kv, bool last_only);

/* Eager decoding on an accelerator (model_compile.c): the cache length grows by one each step,
 * so the plain forward's attention has new shapes every step and a PJRT device compiles its ops
 * again each time. The bucketed forward is compile mode's static forward run eagerly (positions
 * and masks as data over the cache length rounded up to 128), so each op compiles once per
 * bucket. _pays: the model runs whole on one device that is not the host's memory (a PJRT
 * device), without tensor parallelism or SPMD, and kv is its cache. */
bool em_model_forward_bucketed_pays(const em_model *m, const em_kv_cache *kv);
em_tensor *em_model_forward_bucketed(em_ctx *c, const em_model *m, em_tensor *ids,
                                     em_tensor *key_mask, em_kv_cache *kv, bool last_only);

struct em_kv_cache {
    const em_model *m;
    int64_t batch, max_len, len;
    int64_t experts_hit; /* MoE: distinct experts hit, summed over layers, in the last forward */
    em_tensor **k, **v; /* per layer [B, Hkv, max_len, D], caller-owned */
};

struct em_model {
    em_model_config cfg;
    em_generation_config gen;
    const em_family *fam;
    char dir[1024];
    char prefix[96]; /* the checkpoint's prefix of the decoder's names ("model.") */
    em_dtype dtype;
    em_moe_impl moe_impl;
    bool grad_ckpt; /* recompute each layer in the backward (em_model_set_gradient_checkpointing) */
    double load_s;
    /* placement */
    em_device *dev_embed, *dev_head;
    char *map_text;
    /* decoder */
    em_tensor *embed, *final_norm, *lm_head;
    int64_t n_layers;
    em_dec_layer *layers;
    em_mlp_act act;
    float inv_freq[EM_MAX_ROPE_FREQS], inv_freq_local[EM_MAX_ROPE_FREQS];
    int n_freq, n_freq_local;
    float rope_scaling, rope_scaling_local;
    double attn_scale;     /* 0: 1/sqrt(head_dim) */
    /* the blocks' options (decoder_blocks.h), set by the family's loader */
    em_norm_kind norm;
    bool v_norm;              /* scale-free RMSNorm of the values (Gemma 4) */
    double attn_softcap;      /* tanh softcap of the attention scores (0: none) */
    bool moe_norm_topk;       /* renormalise the top-k routing weights */
    bool moe_weights_f32;     /* routing weights stay f32 (Gemma 4's per-expert scale) */
    bool softcap_model_dtype; /* final logit softcap before the f32 cast (Gemma 4) */
    double embed_scale;    /* Gemma: sqrt(hidden) (0: none) */
    /* Gemma 4's per-layer inputs (hidden_size_per_layer_input = pl_dim > 0) */
    em_tensor *embed_pl;       /* [vocab_per_layer, n_layers * P] */
    em_tensor *pl_model_proj;  /* [n_layers * P, H] */
    em_tensor *pl_proj_norm;   /* [P] */
    int64_t pl_dim;
    int64_t first_kv_shared;   /* layers from here on reuse earlier keys/values (n_layers: none) */
    /* tensor parallelism: the group (NULL: none), this rank, the degree */
    struct em_dist *tp;
    int tp_rank, tp_size;
    bool tp_ep;            /* MoE experts: whole experts per rank (expert parallelism), else
                              moe_tp_experts */
    em_tp_place *tp_place;  /* the placement report (tp_report.c) */
    int n_tp_place;
    int64_t tp_kv_parts;   /* KV projections split in this many parts (em_tp_check): the degree,
                              or num_key_value_heads when fewer (each replicated) */
    em_tp_rule *tp_rules;  /* the plan with the user's overrides (tp_plan.c, one block); NULL:
                              the family's */
    bool tp_embed_split;   /* embedding_rowwise: this rank holds a slice of the vocabulary */
    bool tp_head_split;    /* colwise_gather_output: lm_head's logits gathered */
    int spmd_parts;        /* em_model_options.spmd: compiled steps partitioned (0: off) */
    bool spmd_split_gate_up; /* em_model_options.spmd_split_gate_up */
    /* bert */
    em_tensor *word_emb, *pos_emb, *type_emb, *emb_ln, *emb_lnb;
    em_bert_layer *bert;
};

/* ---- tensor parallelism (tp.c) ---- */
/* Checks that the model can be split tp_size ways (its family's plan, the CPU, every split
 * size divisible: the error names the dimension, its size and the degree). */
em_status em_tp_check(em_ctx *c, em_model *m);
/* The rank's slice of weight `name` (the checkpoint's full name) by the plan, as a fresh
 * contiguous tensor (only the slice is read from a mapped file); t itself when replicated. */
em_tensor *em_tp_shard(em_wload *w, const char *name, em_tensor *t);
/* The rule of the plan (the expert-parallel plan's first, with ep) for weight `name` (NULL:
 * replicated). */
const em_tp_rule *em_tp_rule_of(const em_model *m, const char *prefix, const char *name);
/* The experts of a layer of n_experts this rank holds: all, or with expert parallelism its
 * contiguous share first .. first + count - 1. */
void em_tp_experts_held(const em_model *m, int64_t n_experts, int64_t *first, int64_t *count);
/* The style the plan gives weight `name` (NULL: replicated). */
const char *em_tp_style(const em_model *m, const char *prefix, const char *name);
/* Whether the model has fewer KV heads than the degree (which divides by them): each KV head is
 * then held by degree / num_key_value_heads ranks, those whose query heads read it. */
bool em_tp_kv_replicated(const em_model *m);
/* The parts a layer's hkv KV heads are split in: 1 without tp, the degree, or hkv when fewer
 * (each KV head then held whole by degree / hkv ranks). */
int64_t em_tp_kv_parts(const em_model *m, int64_t hkv);
/* After loading: the config's head counts become this rank's (the forward reads them). */
void em_tp_localize(em_model *m);
/* Adds a weight placed by `rule` (NULL: no rule, replicated) to the placement report: the
 * slice's description (for the rule's first weight) and the bytes this rank holds. */
void em_tp_record(em_model *m, const em_tp_rule *rule, const char *slice, int64_t bytes);
void em_tp_report_free(em_model *m);
/* Merges the user's overrides (em_model_options.tp_plan: a JSON object of module patterns to
 * rule names) over the family's plan into m->tp_rules; refuses a rule name, a pattern or a
 * change the decoder cannot run, naming it. NULL text: the family's plan. (tp_plan.c) */
em_status em_tp_plan_apply(em_ctx *c, em_model *m, const char *text);
/* The plan in force: the merged one, else the family's (NULL: none). */
const em_tp_rule *em_tp_plan_of(const em_model *m);
/* The token embedding of ids: with embedding_rowwise, each rank looks up the ids in its slice
 * of the vocabulary (zeros for the others) and the ranks' rows are summed with all_reduce. */
em_tensor *em_tp_embedding(em_ctx *c, const em_model *m, em_tensor *ids);
/* Sums a row-parallel layer's partial outputs over the ranks (x itself without tp). */
em_tensor *em_tp_reduce(em_ctx *c, const em_model *m, em_tensor *x);

/* x on device d (a copy through em_to when it lives elsewhere); NULL passes through. */
static inline em_tensor *em_model_to_dev(em_ctx *c, em_tensor *x, em_device *d) {
    return x && em_tensor_device(x) != d ? em_to(c, x, d) : x;
}

/* Bytes of the checkpoint's tensors whose names start with `prefix.` */
int64_t em_wl_bytes(em_wload *w, const char *prefix);
/* device placement (device_map.c): fills dev_embed, dev_head and layers[i].dev */
em_status em_model_place(em_ctx *c, em_model *m, const em_model_options *o, em_wload *w);

#endif

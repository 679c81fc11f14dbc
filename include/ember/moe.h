/*
 * ember/moe.h — the mixture-of-experts block, with three interchangeable implementations.
 *
 *   ragged  (default) tokens sorted by expert with a counting sort (an argsort on the device
 *           with device_routing), then two ragged_dot calls: every hit expert's weights are
 *           read once, whatever the batch.
 *   loop    what transformers' default eager block does: a loop over the experts that were hit,
 *           gathering their tokens, two linear layers each, index_add back.
 *   dense   every expert for every token, weighted by the (mostly zero) routing weights.
 *
 * All three give the same result within rounding (tested against transformers' block). Weights
 * use the transformers v5 layout: gate_up [E, 2I, H] (gate rows, then up rows) and down [E, H, I],
 * or either of them packed by em_ragged_pack ([E, N/32, K/2, 32, 2]), the layout ragged reads
 * fastest on AVX-512 BF16 CPUs and the one a model load gives bf16 experts there; loop and
 * dense accept packed weights too but unpack each expert they use on every call.
 */
#ifndef EMBER_MOE_H
#define EMBER_MOE_H

#include "ember/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum em_moe_impl { EM_MOE_RAGGED = 0, EM_MOE_LOOP = 1, EM_MOE_DENSE = 2 } em_moe_impl;
/** "ragged", "loop" or "dense". */
EM_API bool em_moe_impl_parse(const char *s, em_moe_impl *out);
EM_API const char *em_moe_impl_name(em_moe_impl impl);

typedef enum em_moe_act {
    EM_MOE_ACT_SILU = 0,     /* SwiGLU: silu(gate) * up (Qwen3-MoE, Mixtral) */
    EM_MOE_ACT_GELU_TANH = 1 /* GeGLU: gelu_tanh(gate) * up (Gemma 4) */
} em_moe_act;

typedef struct em_moe_params {
    int64_t top_k;         /* experts per token */
    bool norm_topk_prob;   /* renormalise the top-k probabilities to sum to 1 */
    em_moe_act act;
    em_moe_impl impl;
    /* Keeps the routing on the device (for compile mode, where a traced function may not read
     * tensor values on the host): no host reads, and every shape depends only on T, k and E,
     * never on which experts were chosen. ragged sorts the rows with argsort and counts the
     * groups with one_hot; dense builds its [T, E] weights with one_hot. loop is refused
     * (EM_ERR_UNSUPPORTED): it needs the routing on the host. Indices outside [0, E) are the
     * caller's contract here (nothing can check them on the host; one_hot may still fail).
     * stats->experts_hit is -1: it is not known without a host read. */
    bool device_routing;
    /* Expert parallelism: the weights hold experts expert_first .. expert_first + E - 1 of the
     * router's n_experts (0: the weights' own count, all of them). Rows routed to experts the
     * weights do not hold contribute zero (the caller sums the ranks' outputs); they cost no
     * expert compute in ragged and loop. */
    int64_t expert_first, n_experts;
} em_moe_params;

/** top_k 2, no renormalisation, SiLU, ragged, routing read on the host, all experts held. */
EM_API em_moe_params em_moe_default_params(void);

typedef struct em_moe_weights {
    em_tensor *gate_up;          /* [E, 2I, H], or packed [E, 2I/32, H/2, 32, 2] */
    em_tensor *down;             /* [E, H, I], or packed [E, H/32, I/2, 32, 2] */
    em_tensor *per_expert_scale; /* [E] multiplies the routing weights (Gemma 4), or NULL */
} em_moe_weights;

/** What a call did (for benchmarks and logs). */
typedef struct em_moe_stats {
    int64_t experts_hit; /* distinct experts with at least one token; -1 with device_routing */
    int64_t rows;        /* token-expert pairs (tokens * top_k) */
} em_moe_stats;

/**
 * Routing: probs = softmax(logits) in f32, the top_k largest (ties as torch.topk orders them),
 * renormalised if asked, times per_expert_scale when given, cast to `dtype`.
 * logits [T, E]. Returns the weights [T, top_k] and writes the i64 expert indices [T, top_k]
 * to *indices_out. NULL on error.
 */
#define em_moe_route(c, ...) em_moe_route_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_moe_route_(EM_OP_ARGS, em_tensor *logits, const em_moe_params *p,
                                em_tensor *per_expert_scale, em_dtype dtype,
                                em_tensor **indices_out);

/**
 * The experts: x [T, H] with its routing (indices [T, k] i64, weights [T, k]) through the
 * chosen implementation. Returns [T, H] in x's dtype; fills *stats when not NULL.
 */
#define em_moe_experts(c, ...) em_moe_experts_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_moe_experts_(EM_OP_ARGS, em_tensor *x, em_tensor *indices,
                                  em_tensor *weights, const em_moe_weights *w,
                                  const em_moe_params *p, em_moe_stats *stats);

#ifdef __cplusplus
}
#endif
#endif

/*
 * The decoder's building blocks (decoder.c), in the spirit of llama.cpp's build_norm /
 * build_attn / build_ffn / build_moe_ffn. A family file composes its layer from them (gemma4.c)
 * or takes the shared one (em_blk_layer); what differs between families is data the family's
 * loader sets on the model and its layers (norm kind, head sizes, q/k/v norms, KV sharing,
 * routing options), never a branch on the family here.
 *
 * Every block runs eagerly and under compile mode's tracer: with f->stat the KV cache is
 * written at f->cache_pos and masks come with the inputs, so no block reads a tensor's values
 * on the host.
 */
#ifndef EMBER_DECODER_BLOCKS_H
#define EMBER_DECODER_BLOCKS_H

#include "models/model_impl.h"

/* One forward step's state. */
struct em_fwd {
    em_ctx *c;
    const em_model *m;
    em_kv_cache *kv;        /* NULL: no cache (keys and values of this step only) */
    /* a paged cache's step (paged_kv.c), instead of kv: per layer pools [Hkv, S, D], the
     * slots this step writes [B*T] (row-major), the rows' block tables [B, MB] and lengths
     * after the step [B] (i64, on the CPU) */
    em_tensor **pg_k, **pg_v, *pg_slots, *pg_table, *pg_lens;
    int64_t pg_block;
    int64_t b, t, pos0, tk; /* batch, new tokens, cached positions, keys after this step */
    em_tensor *positions;   /* [B, T] i64 on the CPU (on the model's device when static) */
    em_tensor *key_mask;    /* [B, Tk] bool on the CPU, or NULL */
    /* static (compile mode): the KV write positions [T] and full masks [B, 1, T, Tk] (true =
     * attend; causality, padding and the key bucket's unused tail in them), for global and
     * sliding layers; shapes depend on the bucket only, never on the cache length */
    bool stat;
    em_tensor *cache_pos, *smask, *smask_local;
    em_tensor *pli;            /* per-layer inputs [B, T, L, P] (Gemma 4), or NULL */
    int64_t pli_first;         /* the layer of pli's first slice (a checkpointed layer's own
                                * slice [B, T, 1, P]: its index), 0 else */
    em_tensor **keys, **vals;  /* without a cache: per layer, keys/values a later layer shares */
    /* per device: rope tables (global, and local for sliding layers) and the mask */
    em_device *dev;
    em_tensor *cos, *sin, *cos_l, *sin_l, *mask;
    /* the router's load-balancing loss, when asked for (em_model_forward_router_aux): the sum
     * over MoE layers and tokens of the routing probabilities [E] (f32, differentiable), the
     * top-k choices per expert [E] (f32 counts, exact below 2^24, no gradient: torch.histc),
     * both on the device so a traced step holds them, and the rows counted */
    bool want_aux;
    em_tensor *aux_prob_sum, *aux_counts;
    int64_t aux_rows;
    /* a checkpointed layer's recomputation (decoder_recompute.c): the routing probabilities
     * again (for their gradient), but the choices were counted by the first run */
    bool aux_skip_counts;
};

/* The forward of a step whose em_fwd is filled (decoder.c): embedding, layers, final norm and
 * LM head; f32 logits [B, T or 1, V]. */
em_tensor *em_decoder_forward_body(em_fwd *f, em_tensor *ids, bool last_only);

/* A decoder layer: h [B, T, H] -> [B, T, H] (em_blk_layer or the family's own). */
typedef em_tensor *(*em_blk_layer_fn)(em_fwd *f, const em_dec_layer *l, em_tensor *h, int64_t li);

/* Moves the step to device d: rope tables for f->positions and the padding mask there
 * (recomputed only when the device changes; f->dev = NULL forces it). */
void em_blk_enter_device(em_fwd *f, em_device *d);
/* RMSNorm of the model's kind (m->norm) over the last dim; w NULL: no scale. */
em_tensor *em_blk_norm(em_fwd *f, em_tensor *x, em_tensor *w);
/* The model's MLP activation. */
em_tensor *em_blk_act(em_fwd *f, em_tensor *g);
/* Self-attention of layer li on x [B, T, H]: projections (biases when present), per-head q/k
 * norms (l->q_norm, l->k_norm), the values' scale-free norm (m->v_norm), keys as values
 * (l->k_eq_v), rope (local tables on sliding layers when the model has them), the cache write,
 * keys/values of layer l->kv_src when l->kv_shared, the sliding window, m->attn_scale and
 * m->attn_softcap. Returns [B, T, H]. */
em_tensor *em_blk_attn(em_fwd *f, const em_dec_layer *l, em_tensor *x, int64_t li);
/* The gated MLP down(act(gate(x)) * up(x)). */
em_tensor *em_blk_ffn(em_fwd *f, const em_dec_layer *l, em_tensor *x);
/* The routed experts of layer l on x [B, T, H]; the router reads router_in [B, T, H] (x for
 * most families). Top-k of m->cfg, renormalised when m->moe_norm_topk, scaled by
 * l->experts.per_expert_scale when present, weights in f32 when m->moe_weights_f32. */
em_tensor *em_blk_moe(em_fwd *f, const em_dec_layer *l, em_tensor *router_in, em_tensor *x);
/* The shared layer: pre-norm attention and MLP/MoE with residuals, and the sandwich norms
 * (post_attn_norm on the attention output, pre/post_ffn_norm) where the layer has
 * pre_ffn_norm. */
em_tensor *em_blk_layer(em_fwd *f, const em_dec_layer *l, em_tensor *h, int64_t li);
/* layer(f, l, h, li) as a checkpointed region (em_checkpoint): while recording, its activations
 * are not kept but recomputed in the backward (the model's gradient checkpointing,
 * decoder_recompute.c). The region keeps what it reads of f; with f->want_aux the layer's routing
 * probabilities come out of the region too and are added to f->aux_prob_sum here. The layer's
 * slice of f->pli and, on a KV-sharing layer, the source layer's f->keys/vals are region inputs;
 * a layer whose keys and values a later layer reads returns them as outputs, stored in
 * f->keys/vals here (so gradients reach it through them). Only for a forward without a cache,
 * on models em_model_set_gradient_checkpointing accepted. */
em_tensor *em_blk_layer_checkpointed(em_fwd *f, em_blk_layer_fn layer, const em_dec_layer *l,
                                     em_tensor *h, int64_t li);
/* x times / divided by a Python float: torch keeps the number in f32 for bf16 tensors
 * (opmath), where em_mul_scalar would round it to the tensor's dtype first. */
em_tensor *em_blk_mul_f32(em_ctx *c, em_tensor *x, double v);
em_tensor *em_blk_div_f32(em_ctx *c, em_tensor *x, double v);

#endif

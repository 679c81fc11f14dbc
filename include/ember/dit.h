/*
 * DiT: diffusers' DiTTransformer2DModel (Transformer2DModel with norm_type "ada_norm_zero", as
 * DiTPipeline's folders name it) loaded from a component folder and run over Ember's ops.
 *
 *     em_dit *d = em_dit_load(c, "dit-xl-2-256/transformer", NULL, EM_F32);
 *     em_tensor *out = em_dit_forward(c, d, x, t, labels);   // x [N, C, H, W], labels i64 [N]
 *     em_dit_free(d);
 *
 * em_dit_load_tp splits the blocks' attention heads and feed-forward over a process group
 * (tensor parallelism; docs/parallel.md, "DiT").
 *
 * docs/diffusion.md ("DiTPipeline") lists the config fields and what each does.
 */
#ifndef EMBER_DIT_H
#define EMBER_DIT_H

#include "ember/dist.h"
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
struct em_dist; /* ember/dist.h */

/** Loads a transformer folder (config.json + diffusion_pytorch_model.safetensors) onto
 *  `device` (NULL: c's device) as `dtype` (f32, bf16, f16). Every weight's shape is checked
 *  against the config (a mismatch names the tensor and both shapes). NULL with the error in c.
 *  Free with em_dit_free. */
EM_API em_dit *em_dit_load(em_ctx *c, const char *dir, const char *device, em_dtype dtype);
/**
 * em_dit_load with tensor parallelism over the process group `tp` (ember/dist.h; NULL or a
 * group of one: em_dit_load), as diffusers' TensorParallelConfig(tp_degree=N): in every
 * transformer block rank r keeps attention heads [r*H/N, (r+1)*H/N) (to_q, to_k, to_v split
 * by rows, column-parallel; to_out.0 by columns, row-parallel, its partial outputs summed with
 * em_all_reduce and its bias added once after) and 1/N of the feed-forward's inner width
 * (ff.net.0.proj by rows, each half of it for geglu; ff.net.2 by columns, summed the same way).
 * Everything else (patch embedding, adaLN-Zero and its timestep/label embeddings, the final
 * layers) is whole on every rank. The full checkpoint is read and each rank keeps its slices.
 * A group of processes (em_dist_init under mpirun) runs on the CPU (`device` NULL or "cpu");
 * a rank of a device group (em_dist_local) on its device (`device` NULL or that device's
 * name). num_attention_heads or the feed-forward width (4 * inner dim) not divisible by the
 * degree: EM_ERR_SHAPE naming the size and the degree. Every rank calls em_dit_forward with
 * the same inputs in the same order and gets the same output. The group must outlive d.
 */
EM_API em_dit *em_dit_load_tp(em_ctx *c, const char *dir, const char *device, em_dtype dtype,
                              struct em_dist *tp);
/**
 * Context parallelism over the process group `cp` (NULL or a group of one: none), as diffusers'
 * ContextParallelConfig for the transformer: the image tokens are split over the ranks (rank r
 * runs every block on tokens [r*T/R, (r+1)*T/R) of the T = (H/p)^2 patches), each block's
 * attention takes its queries from the rank's tokens and its keys and values from all of them (by
 * the ring, em_ring_shift of the K and V blocks R - 1 times per block, a rank holding one block at
 * a time; or with em_dit_set_cp_schedule's EM_CP_ALL_GATHER one em_all_gather of K and V per
 * block), and the output's patches are gathered before the unpatchify, so every rank returns the
 * whole output. The weights are whole on every rank (nothing is reloaded). The group must run on
 * d's device (a process group on the CPU, or a device group's rank on its device) and outlive d.
 * Tensor parallelism too (em_dit_load_tp over another group): each rank runs its heads of its
 * tokens (tensor parallelism over one group of a mesh, context parallelism over the other:
 * em_dist_mesh2d); cp being the tensor-parallel group itself is EM_ERR_INVALID_ARG; with degrees
 * set (em_dit_set_cp_degrees) whose product is not the group's size, EM_ERR_INVALID_ARG (nothing
 * changed); T not divisible by R is refused by em_dit_forward (EM_ERR_SHAPE naming T and R). Every
 * rank calls em_dit_forward with the same inputs in the same order.
 */
EM_API em_status em_dit_set_context_parallel(em_ctx *c, em_dit *d, struct em_dist *cp);
/**
 * The schedule of d's context-parallel attention (ember/dist.h's em_cp_schedule): EM_CP_RING
 * (the default: the key and value blocks passed around the ring of ranks with em_ring_shift,
 * one block held at a time, merged by log-sum-exp), EM_CP_ALL_GATHER (every rank's keys and
 * values gathered, one attention over them) or EM_CP_ULYSSES (all-to-all from tokens to heads
 * and back; the heads must divide by the degree). Each gives the one-device output within f32
 * rounding; it may be set before or after em_dit_set_context_parallel and is kept across it.
 * EM_ERR_INVALID_ARG for another value or a NULL d.
 */
EM_API em_status em_dit_set_cp_schedule(em_ctx *c, em_dit *d, em_cp_schedule s);
/**
 * diffusers' ContextParallelConfig(ring_degree, ulysses_degree) for d's context parallelism:
 * ring_degree x ulysses_degree must be the group's size (checked here when the group is set,
 * else by em_dit_set_context_parallel; EM_ERR_INVALID_ARG naming the three). ulysses_degree
 * 1: the schedule's attention (em_dit_set_cp_schedule); ring_degree 1: Ulysses over the whole
 * group (as EM_CP_ULYSSES); both > 1: diffusers' unified attention, its rank layout (a mesh
 * (ring, ulysses), rank r at (r / ulysses_degree, r % ulysses_degree), em_dist_mesh2d): an
 * all-to-all over the ulysses_degree consecutive ranks trades their token blocks for a head
 * split, the ring over the ranks r % ulysses_degree alike on those heads (em_sdpa_lse merged
 * by log-sum-exp), and an all-to-all back; the heads must divide by ulysses_degree (else the
 * forward fails with EM_ERR_SHAPE naming both). Making the mesh's sub-groups is a collective:
 * every rank calls this (and em_dit_set_context_parallel) in the same order. Both 0: unset
 * (the default: the schedule alone). Kept across em_dit_set_context_parallel. Other values
 * (a degree < 1 with the other not 0) are EM_ERR_INVALID_ARG; so is a NULL d.
 */
EM_API em_status em_dit_set_cp_degrees(em_ctx *c, em_dit *d, int ring_degree,
                                  int ulysses_degree);
/** The context-parallel degree d runs at (1: not split). */
EM_API int em_dit_cp_degree(const em_dit *d);
/** The tensor-parallel degree d runs at (1: not split). */
EM_API int em_dit_tp_degree(const em_dit *d);
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

/*
 * Flux: diffusers' FluxTransformer2DModel (the transformer of FluxPipeline) loaded from a
 * component folder and run over Ember's ops.
 *
 *     em_flux *m = em_flux_load(c, "flux-dev/transformer", NULL, EM_F32);
 *     em_tensor *out = em_flux_forward(c, m, &in);   // in.hidden_states [N, T, in_channels]
 *     em_flux_free(m);
 *
 * docs/diffusion.md ("FluxPipeline") lists the config fields and what each does.
 */
#ifndef EMBER_FLUX_H
#define EMBER_FLUX_H

#include "ember/dist.h"
#include "ember/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EM_FLUX_MAX_AXES 8

/** The config.json of a FluxTransformer2DModel, defaults filled as diffusers fills them. */
typedef struct em_flux_config {
    int64_t patch_size;             /* proj_out gives patch_size^2 * out_channels features */
    int64_t in_channels, out_channels; /* out_channels null: in_channels */
    int64_t num_layers;             /* double-stream blocks (transformer_blocks) */
    int64_t num_single_layers;      /* single-stream blocks (single_transformer_blocks) */
    int64_t attention_head_dim, num_attention_heads; /* inner dim = their product */
    int64_t joint_attention_dim;    /* width of encoder_hidden_states (context_embedder in) */
    int64_t pooled_projection_dim;  /* width of pooled_projections */
    bool guidance_embeds;           /* a guidance embedder (FLUX.1-dev); false: FLUX.1-schnell */
    int n_axes;                     /* len(axes_dims_rope), the ids' columns */
    int64_t axes_dims_rope[EM_FLUX_MAX_AXES]; /* sum = attention_head_dim, each even */
} em_flux_config;

/** Reads `path` (a folder holding config.json, or the file). Unknown `_class_name`:
 *  EM_ERR_UNSUPPORTED naming it; wrong types, sizes, axes_dims_rope not summing to
 *  attention_head_dim or odd: EM_ERR_FORMAT naming the field. `out` is zeroed on failure. */
EM_API em_status em_flux_config_load(em_ctx *c, const char *path, em_flux_config *out);
/** Same from `n` bytes of JSON; `name` stands for the file in messages (NULL: "config.json"). */
EM_API em_status em_flux_config_parse(em_ctx *c, const char *json, size_t n, const char *name,
                                      em_flux_config *out);

typedef struct em_flux em_flux;

/** Loads a transformer folder (config.json + diffusion_pytorch_model.safetensors, or its
 *  sharded index) onto `device` (NULL: c's device) as `dtype` (f32, bf16, f16). Every weight's
 *  shape is checked against the config (a mismatch names the tensor and both shapes). NULL with
 *  the error in c. Free with em_flux_free. */
EM_API em_flux *em_flux_load(em_ctx *c, const char *dir, const char *device, em_dtype dtype);
struct em_dist; /* ember/dist.h */
/**
 * em_flux_load with tensor parallelism over the group `tp` (ember/dist.h; NULL or a group of
 * one: em_flux_load), as diffusers' TensorParallelConfig(tp_degree=N): in every joint block
 * rank r keeps attention heads [r*H/N, (r+1)*H/N) (to_q/to_k/to_v and
 * add_q_proj/add_k_proj/add_v_proj split by rows, column-parallel; to_out.0 and to_add_out by
 * columns, row-parallel, their partial outputs summed with em_all_reduce and the bias added
 * once after) and 1/N of both feed-forwards' inner width (ff.net.0.proj /
 * ff_context.net.0.proj by rows; ff.net.2 / ff_context.net.2 by columns); in every single-
 * stream block the rank's heads (to_q/to_k/to_v by rows), 1/N of proj_mlp's rows, and of
 * proj_out (over [attention; mlp]) the columns of its heads and of its mlp slice, summed the
 * same way. Everything else (embedders, time/guidance/text embeddings, adaLN modulations, qk
 * RMSNorms, rotary tables, norm_out, proj_out) is whole on every rank. The full checkpoint is
 * read and each rank keeps its slices. A group of processes (em_dist_init under mpirun) runs
 * on the CPU (`device` NULL or "cpu"); a rank of a device group (em_dist_local) on its device
 * (`device` NULL or its name); another device: EM_ERR_UNSUPPORTED. num_attention_heads or the
 * feed-forward width (4 * inner dim) not divisible by the degree: EM_ERR_SHAPE naming the size
 * and the degree. Every rank runs the forward with the same inputs in the same order and gets
 * the same output, equal to the unsplit one within f32 rounding. The group must outlive the
 * model.
 */
EM_API em_flux *em_flux_load_tp(em_ctx *c, const char *dir, const char *device, em_dtype dtype,
                                struct em_dist *tp);
/** The tensor-parallel degree the model runs at (1: not split). */
EM_API int em_flux_tp_degree(const em_flux *m);
/**
 * Context parallelism over the group `cp` (NULL or a group of one: none), as diffusers'
 * ContextParallelConfig for the transformer: the T image tokens of hidden_states are split over
 * the R ranks (rank r runs every block on tokens [r*T/R, (r+1)*T/R) with their rotary rows), the
 * text tokens are whole on every rank; each attention, joint and single-stream, takes its queries
 * from the text and the rank's image tokens, its keys and values from the text and every rank's
 * image tokens (rotated, then passed around the ring or gathered once per block:
 * em_flux_set_cp_schedule; the text's never move), and the output's tokens are gathered after
 * proj_out, so every rank returns the whole output. The weights are whole on every rank. The group
 * must run on m's device (a process group on the CPU, a device group's rank on its device) and
 * outlive m. Tensor parallelism too (em_flux_load_tp over another group): each rank runs its heads
 * of its tokens (tensor parallelism over one group of a mesh, context parallelism over the other:
 * em_dist_mesh2d); cp being the tensor-parallel group itself is EM_ERR_INVALID_ARG; with degrees
 * set (em_flux_set_cp_degrees) whose product is not the group's size, EM_ERR_INVALID_ARG (nothing
 * changed); T not divisible by R is refused by the forward (EM_ERR_SHAPE naming T and R). Every
 * rank runs the forward with the same inputs in the same order.
 */
EM_API em_status em_flux_set_context_parallel(em_ctx *c, em_flux *m, struct em_dist *cp);
/**
 * The schedule of m's context-parallel attention (ember/dist.h's em_cp_schedule): EM_CP_RING
 * (the default: the key and value blocks passed around the ring of ranks with em_ring_shift,
 * one block held at a time, merged by log-sum-exp), EM_CP_ALL_GATHER (every rank's keys and
 * values gathered, one attention over them) or EM_CP_ULYSSES (all-to-all from tokens to heads
 * and back; the heads must divide by the degree). Each gives the one-device output within f32
 * rounding; it may be set before or after em_flux_set_context_parallel and is kept across it.
 * EM_ERR_INVALID_ARG for another value or a NULL m.
 */
EM_API em_status em_flux_set_cp_schedule(em_ctx *c, em_flux *m, em_cp_schedule s);
/**
 * diffusers' ContextParallelConfig(ring_degree, ulysses_degree) for m's context parallelism:
 * ring_degree x ulysses_degree must be the group's size (checked here when the group is set,
 * else by em_flux_set_context_parallel; EM_ERR_INVALID_ARG naming the three). ulysses_degree
 * 1: the schedule's attention (em_flux_set_cp_schedule); ring_degree 1: Ulysses over the whole
 * group (as EM_CP_ULYSSES); both > 1: diffusers' unified attention, its rank layout (a mesh
 * (ring, ulysses), rank r at (r / ulysses_degree, r % ulysses_degree), em_dist_mesh2d): an
 * all-to-all over the ulysses_degree consecutive ranks trades their token blocks for a head
 * split, the ring over the ranks r % ulysses_degree alike on those heads (em_sdpa_lse merged
 * by log-sum-exp), and an all-to-all back; the heads must divide by ulysses_degree (else the
 * forward fails with EM_ERR_SHAPE naming both). Making the mesh's sub-groups is a collective:
 * every rank calls this (and em_flux_set_context_parallel) in the same order. Both 0: unset
 * (the default: the schedule alone). Kept across em_flux_set_context_parallel. Other values
 * (a degree < 1 with the other not 0) are EM_ERR_INVALID_ARG; so is a NULL m.
 */
EM_API em_status em_flux_set_cp_degrees(em_ctx *c, em_flux *m, int ring_degree,
                                  int ulysses_degree);
/** The context-parallel degree m runs at (1: not split). */
EM_API int em_flux_cp_degree(const em_flux *m);
/** Releases the weights. NULL is a no-op. */
EM_API void em_flux_free(em_flux *m);
/** The model's config (owned by m). */
EM_API const em_flux_config *em_flux_get_config(const em_flux *m);
/** The device holding the weights. */
EM_API em_device *em_flux_device(const em_flux *m);

/** FluxTransformer2DModel.forward's inputs (tensors borrowed). */
typedef struct em_flux_inputs {
    em_tensor *hidden_states;         /* [N, T, in_channels] (the packed latents) */
    em_tensor *encoder_hidden_states; /* [N, L, joint_attention_dim] */
    em_tensor *pooled_projections;    /* [N, pooled_projection_dim] */
    em_tensor *timestep;              /* 0-d, [1] or [N], any numeric dtype: t / 1000 as
                                         FluxPipeline passes it (the model multiplies by 1000) */
    em_tensor *guidance;              /* as timestep; required with guidance_embeds, else must
                                         be NULL (diffusers ignores none: it would fail) */
    em_tensor *img_ids;               /* [T, n_axes] positions, any numeric dtype/device */
    em_tensor *txt_ids;               /* [L, n_axes] */
} em_flux_inputs;

/**
 * FluxTransformer2DModel.forward(...).sample: [N, T, patch_size^2 * out_channels] in c's
 * current scope. hidden_states, encoder_hidden_states and pooled_projections of the model's
 * dtype and device. The rotary tables are computed from the ids on the host in f64 as
 * FluxPosEmbed does (theta 10000). NULL with an error naming the shapes.
 */
EM_API em_tensor *em_flux_forward(em_ctx *c, em_flux *m, const em_flux_inputs *in);

#ifdef __cplusplus
}
#endif
#endif

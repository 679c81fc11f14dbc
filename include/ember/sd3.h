/*
 * Stable Diffusion 3: diffusers' SD3Transformer2DModel (the MMDiT of StableDiffusion3Pipeline)
 * loaded from a component folder and run over Ember's ops.
 *
 *     em_sd3 *m = em_sd3_load(c, "sd3-medium/transformer", NULL, EM_F32);
 *     em_tensor *out = em_sd3_forward(c, m, x, ctx, pooled, t); // x [N, C, H, W]
 *     em_sd3_free(m);
 *
 * docs/diffusion.md ("StableDiffusion3Pipeline") lists the config fields and what each does.
 */
#ifndef EMBER_SD3_H
#define EMBER_SD3_H

#include "ember/dist.h"
#include "ember/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The config.json of an SD3Transformer2DModel, defaults filled as diffusers fills them. */
typedef struct em_sd3_config {
    int64_t sample_size;            /* base size of the positional table (sample / patch) */
    int64_t patch_size;
    int64_t in_channels, out_channels; /* out_channels null: in_channels */
    int64_t num_layers;             /* the last block is context_pre_only */
    int64_t attention_head_dim, num_attention_heads; /* inner dim = their product */
    int64_t joint_attention_dim;    /* width of encoder_hidden_states (context_embedder in) */
    int64_t caption_projection_dim; /* context_embedder out; must equal the inner dim */
    int64_t pooled_projection_dim;  /* width of pooled_projections */
    int64_t pos_embed_max_size;     /* side of the stored sin-cos table, centre-cropped */
    bool qk_norm_rms;               /* qk_norm "rms_norm" (SD3.5); false: null */
} em_sd3_config;

/** Reads `path` (a folder holding config.json, or the file). Unknown `_class_name`, a qk_norm
 *  other than null or "rms_norm", dual_attention_layers naming a block (SD3.5 Medium's MMDiT-X),
 *  a null pos_embed_max_size: EM_ERR_UNSUPPORTED naming the field and value; wrong types or
 *  sizes: EM_ERR_FORMAT. `out` is zeroed on failure. */
EM_API em_status em_sd3_config_load(em_ctx *c, const char *path, em_sd3_config *out);
/** Same from `n` bytes of JSON; `name` stands for the file in messages (NULL: "config.json"). */
EM_API em_status em_sd3_config_parse(em_ctx *c, const char *json, size_t n, const char *name,
                                     em_sd3_config *out);

typedef struct em_sd3 em_sd3;

/** Loads a transformer folder (config.json + diffusion_pytorch_model.safetensors, or its
 *  sharded index) onto `device` (NULL: c's device) as `dtype` (f32, bf16, f16). Every weight's
 *  shape is checked against the config (a mismatch names the tensor and both shapes). NULL with
 *  the error in c. Free with em_sd3_free. */
EM_API em_sd3 *em_sd3_load(em_ctx *c, const char *dir, const char *device, em_dtype dtype);
struct em_dist; /* ember/dist.h */
/**
 * em_sd3_load with tensor parallelism over the group `tp` (ember/dist.h; NULL or a group of
 * one: em_sd3_load), as diffusers' TensorParallelConfig(tp_degree=N): in every joint block
 * rank r keeps attention heads [r*H/N, (r+1)*H/N) (to_q/to_k/to_v and
 * add_q_proj/add_k_proj/add_v_proj split by rows, column-parallel; to_out.0 and to_add_out by
 * columns, row-parallel, their partial outputs summed with em_all_reduce and the bias added
 * once after) and 1/N of both feed-forwards' inner width (ff.net.0.proj and
 * ff_context.net.0.proj by rows; ff.net.2 and ff_context.net.2 by columns, summed the same
 * way). Everything else (patch embedding, the timestep/text embeddings, context embedder,
 * adaLN modulations, qk RMSNorms, norm_out, proj_out) is whole on every rank. The full
 * checkpoint is read and each rank keeps its slices. A group of processes (em_dist_init under
 * mpirun) runs on the CPU (`device` NULL or "cpu"); a rank of a device group (em_dist_local)
 * on its device (`device` NULL or its name); another device: EM_ERR_UNSUPPORTED.
 * num_attention_heads or the feed-forward width (4 * inner dim) not divisible by the degree:
 * EM_ERR_SHAPE naming the size and the degree. Every rank runs the forward with the same
 * inputs in the same order and gets the same output, equal to the unsplit one within f32
 * rounding. The group must outlive the model.
 */
EM_API em_sd3 *em_sd3_load_tp(em_ctx *c, const char *dir, const char *device, em_dtype dtype,
                              struct em_dist *tp);
/** The tensor-parallel degree the model runs at (1: not split). */
EM_API int em_sd3_tp_degree(const em_sd3 *m);
/**
 * Context parallelism over the group `cp` (NULL or a group of one: none), as diffusers'
 * ContextParallelConfig for the transformer: the image tokens are split over the R ranks (rank r
 * runs every block on patches [r*T/R, (r+1)*T/R) of the T = (H/p)(W/p) patches), the text tokens
 * are whole on every rank; each block's joint attention takes its queries from the rank's image
 * tokens and the text, its keys and values from every rank's image tokens (by the ring or one
 * em_all_gather of K and V per block: em_sd3_set_cp_schedule) and the text (whole on every rank,
 * never passed around), and the output's patches are gathered before the unpatchify, so every rank
 * returns the whole output. The weights are whole on every rank. The group must run on m's device
 * (a process group on the CPU, a device group's rank on its device) and outlive m. Tensor
 * parallelism too (em_sd3_load_tp over another group): each rank runs its heads of its tokens
 * (tensor parallelism over one group of a mesh, context parallelism over the other:
 * em_dist_mesh2d); cp being the tensor-parallel group itself is EM_ERR_INVALID_ARG; with degrees
 * set (em_sd3_set_cp_degrees) whose product is not the group's size, EM_ERR_INVALID_ARG (nothing
 * changed); T not divisible by R is refused by em_sd3_forward (EM_ERR_SHAPE naming T and R). Every
 * rank calls em_sd3_forward with the same inputs in the same order.
 */
EM_API em_status em_sd3_set_context_parallel(em_ctx *c, em_sd3 *m, struct em_dist *cp);
/**
 * The schedule of m's context-parallel attention (ember/dist.h's em_cp_schedule): EM_CP_RING
 * (the default: the key and value blocks passed around the ring of ranks with em_ring_shift,
 * one block held at a time, merged by log-sum-exp), EM_CP_ALL_GATHER (every rank's keys and
 * values gathered, one attention over them) or EM_CP_ULYSSES (all-to-all from tokens to heads
 * and back; the heads must divide by the degree). Each gives the one-device output within f32
 * rounding; it may be set before or after em_sd3_set_context_parallel and is kept across it.
 * EM_ERR_INVALID_ARG for another value or a NULL m.
 */
EM_API em_status em_sd3_set_cp_schedule(em_ctx *c, em_sd3 *m, em_cp_schedule s);
/**
 * diffusers' ContextParallelConfig(ring_degree, ulysses_degree) for m's context parallelism:
 * ring_degree x ulysses_degree must be the group's size (checked here when the group is set,
 * else by em_sd3_set_context_parallel; EM_ERR_INVALID_ARG naming the three). ulysses_degree
 * 1: the schedule's attention (em_sd3_set_cp_schedule); ring_degree 1: Ulysses over the whole
 * group (as EM_CP_ULYSSES); both > 1: diffusers' unified attention, its rank layout (a mesh
 * (ring, ulysses), rank r at (r / ulysses_degree, r % ulysses_degree), em_dist_mesh2d): an
 * all-to-all over the ulysses_degree consecutive ranks trades their token blocks for a head
 * split, the ring over the ranks r % ulysses_degree alike on those heads (em_sdpa_lse merged
 * by log-sum-exp), and an all-to-all back; the heads must divide by ulysses_degree (else the
 * forward fails with EM_ERR_SHAPE naming both). Making the mesh's sub-groups is a collective:
 * every rank calls this (and em_sd3_set_context_parallel) in the same order. Both 0: unset
 * (the default: the schedule alone). Kept across em_sd3_set_context_parallel. Other values
 * (a degree < 1 with the other not 0) are EM_ERR_INVALID_ARG; so is a NULL m.
 */
EM_API em_status em_sd3_set_cp_degrees(em_ctx *c, em_sd3 *m, int ring_degree,
                                  int ulysses_degree);
/** The context-parallel degree m runs at (1: not split). */
EM_API int em_sd3_cp_degree(const em_sd3 *m);
/** Releases the weights. NULL is a no-op. */
EM_API void em_sd3_free(em_sd3 *m);
/** The model's config (owned by m). */
EM_API const em_sd3_config *em_sd3_get_config(const em_sd3 *m);
/** The device holding the weights. */
EM_API em_device *em_sd3_device(const em_sd3 *m);

/**
 * SD3Transformer2DModel.forward(hidden_states, encoder_hidden_states, pooled_projections,
 * timestep).sample: sample [N, in, H, W] (H and W multiples of patch_size, at most
 * pos_embed_max_size patches each), encoder_hidden_states [N, L, joint_attention_dim],
 * pooled_projections [N, pooled_projection_dim], all of the model's dtype and device; timestep
 * 0-d, [1] or [N] of any numeric dtype (used as f32). Returns [N, out_channels, H, W] in c's
 * current scope; NULL with an error naming the shapes.
 */
EM_API em_tensor *em_sd3_forward(em_ctx *c, em_sd3 *m, em_tensor *sample,
                                 em_tensor *encoder_hidden_states,
                                 em_tensor *pooled_projections, em_tensor *timestep);

#ifdef __cplusplus
}
#endif
#endif

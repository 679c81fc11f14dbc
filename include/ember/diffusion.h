/*
 * ember/diffusion.h — diffusers models and pipeline folders, loaded as diffusers saves them.
 *
 * A diffusers pipeline folder holds model_index.json (the pipeline's class and, per component,
 * the library and class that saved it) and one sub-folder per component. Ember reads the index,
 * loads the denoiser and hands the scheduler's folder to the scheduler code:
 *
 *     em_pipeline_index idx;
 *     if (em_pipeline_index_load(c, "ddpm-cifar10/", &idx) != EM_OK) { ... em_ctx_error(c) ... }
 *     em_unet2d_options o = em_unet2d_default_options();
 *     o.device = "xla:0";
 *     em_unet2d *unet = em_unet2d_load(c, idx.unet_dir, &o);    // or em_pipeline_load_unet
 *     em_tensor *eps = em_unet2d_forward(c, unet, x, t, NULL); // x [N, C, H, W], t a 0-d tensor
 *     ...
 *     em_unet2d_free(unet);
 *     em_pipeline_index_free(&idx);
 *
 * UNet2DModel (diffusers 0.42): every field of its config.json is honoured or, when it names
 * something Ember does not implement, refused by name ("UNet2DModel: resnet_time_scale_shift
 * 'ada_group' is not supported"). Supported: down blocks DownBlock2D / AttnDownBlock2D, up
 * blocks UpBlock2D / AttnUpBlock2D (the "UNetRes" prefixed spellings too), mid block
 * UNetMidBlock2D or none, time embeddings positional / fourier / learned, class embeddings
 * (num_class_embeds table, "timestep", "identity"), resnet_time_scale_shift default /
 * scale_shift, downsample_type / upsample_type conv / resnet, act_fn silu / swish / gelu / relu.
 * Weight names are diffusers' (and the older query/key/value/proj_attn names of attention
 * blocks); every weight's shape is checked against the config at load.
 *
 *
 * UNet2DConditionModel (Stable Diffusion's denoiser) loads through the same em_unet2d_load (the
 * config's _class_name decides; cfg.conditional is then true) and runs with
 * em_unet2d_forward_cond. Supported: CrossAttnDownBlock2D / DownBlock2D, CrossAttnUpBlock2D /
 * UpBlock2D, UNetMidBlock2DCrossAttn or none; Transformer2DModels with 1x1-conv or linear
 * (use_linear_projection) projections, attention_head_dim and transformer_layers_per_block as
 * an int or a list per block, cross_attention_dim, upcast_attention (f32 only), conv_in/out
 * kernels, addition_embed_type "text_time" (SDXL; run with em_unet2d_forward_added). Refused by
 * name: class embeddings, other added embeddings, only/dual cross-attention, encoder_hid
 * projections, num_attention_heads, time_cond_proj_dim, other block, mid-block, attention and
 * time-embedding types, lists for layers_per_block or cross_attention_dim.
 *
 * A model is immutable after loading and may be used from several threads, each with its own
 * em_ctx.
 */
#ifndef EMBER_DIFFUSION_H
#define EMBER_DIFFUSION_H

#include "ember/compile.h"
#include "ember/dist.h"
#include "ember/ops.h"
#include "ember/scheduler.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * UNet2DModel
 * ------------------------------------------------------------------------------------------- */

/** Most down (and up) blocks a UNet2DModel may have. */
#define EM_UNET2D_MAX_BLOCKS 8
/** Most resnets per down block (layers_per_block). */
#define EM_UNET2D_MAX_LAYERS 32

/** Block kinds of down_block_types / up_block_types. Append-only. */
typedef enum em_unet2d_block_type {
    EM_UNET2D_BLOCK_PLAIN = 0, /* DownBlock2D / UpBlock2D: resnets only */
    EM_UNET2D_BLOCK_ATTN = 1,  /* AttnDownBlock2D / AttnUpBlock2D: a self-attention per resnet */
    EM_UNET2D_BLOCK_CROSS_ATTN = 2 /* CrossAttnDownBlock2D / CrossAttnUpBlock2D
                                      (UNet2DConditionModel): a Transformer2DModel per resnet */
} em_unet2d_block_type;

/** time_embedding_type. Append-only. */
typedef enum em_unet2d_time_embedding {
    EM_UNET2D_TIME_POSITIONAL = 0, /* sinusoidal (Timesteps) */
    EM_UNET2D_TIME_FOURIER = 1,    /* GaussianFourierProjection of log(t), output divided by t */
    EM_UNET2D_TIME_LEARNED = 2     /* an nn.Embedding of num_train_timesteps rows */
} em_unet2d_time_embedding;

/** class_embed_type (with num_class_embeds). Append-only. */
typedef enum em_unet2d_class_embedding {
    EM_UNET2D_CLASS_NONE = 0,
    EM_UNET2D_CLASS_TABLE = 1,    /* class_embed_type null, num_class_embeds set: nn.Embedding */
    EM_UNET2D_CLASS_TIMESTEP = 2, /* "timestep": labels embedded like timesteps */
    EM_UNET2D_CLASS_IDENTITY = 3  /* "identity": labels are the embedding [N, time_embed_dim] */
} em_unet2d_class_embedding;

/** The config.json of a UNet2DModel, defaults filled as diffusers fills them. Plain data. */
typedef struct em_unet2d_config {
    int64_t sample_size[2];    /* (height, width); 0 when the config has none */
    int64_t in_channels, out_channels;
    bool center_input_sample;  /* sample = 2 * sample - 1 first */
    em_unet2d_time_embedding time_embedding;
    int64_t time_embed_dim;    /* time_embedding_dim, else 4 * block_out_channels[0] */
    double freq_shift;         /* positional: downscale_freq_shift */
    bool flip_sin_to_cos;      /* positional: cos before sin */
    int n_blocks;              /* len(block_out_channels) */
    int64_t block_out_channels[EM_UNET2D_MAX_BLOCKS];
    em_unet2d_block_type down_blocks[EM_UNET2D_MAX_BLOCKS];
    em_unet2d_block_type up_blocks[EM_UNET2D_MAX_BLOCKS];
    int64_t layers_per_block;  /* resnets per down block (up blocks have one more) */
    bool mid_block;            /* mid_block_type "UNetMidBlock2D" (false: null) */
    bool add_attention;        /* the mid block's attention */
    double mid_block_scale_factor;
    int64_t downsample_padding;
    bool downsample_resnet;    /* downsample_type "resnet" (else "conv"); attention blocks only */
    bool upsample_resnet;      /* upsample_type "resnet" (else "conv"); attention blocks only */
    char act_fn[16];           /* "silu", "swish", "gelu", "relu" */
    int64_t attention_head_dim;/* 0: null (one head of all channels) */
    int64_t norm_num_groups;
    int64_t attn_norm_num_groups; /* 0: null (the mid block's rule) */
    double norm_eps;
    bool scale_shift;          /* resnet_time_scale_shift "scale_shift" (else "default") */
    em_unet2d_class_embedding class_embedding;
    int64_t num_class_embeds;  /* rows of the class table (0: none) */
    int64_t num_train_timesteps; /* learned time embedding's rows (0: null) */
    /* UNet2DConditionModel (zero for a UNet2DModel, whose conv kernels are 3) */
    bool conditional;           /* _class_name UNet2DConditionModel: needs encoder_hidden_states */
    int64_t cross_attention_dim;/* encoder_hidden_states' last dimension */
    bool use_linear_projection; /* proj_in / proj_out linear (SD 2.x), else 1x1 convs (SD 1.x) */
    bool upcast_attention;      /* attention scores in f32: what an f32 model computes anyway */
    bool mid_cross_attn;        /* mid_block_type UNetMidBlock2DCrossAttn */
    /* per down block (the up blocks take them reversed, the mid block the last): heads of the
     * Transformer2DModels (diffusers reads attention_head_dim as the head count) and their
     * BasicTransformerBlocks (transformer_layers_per_block) */
    int64_t attn_heads[EM_UNET2D_MAX_BLOCKS];
    int64_t transformer_layers[EM_UNET2D_MAX_BLOCKS];
    int64_t conv_in_kernel, conv_out_kernel; /* odd sizes ("same" padding) */
    /* addition_embed_type "text_time" (SDXL): add_time_proj = Timesteps(addition_time_embed_dim,
     * flip_sin_to_cos, freq_shift) of each of the K time ids (SDXL base 6, its refiner 5),
     * concatenated after the pooled text embeds (projection_class_embeddings_input_dim =
     * text embeds' width + K * addition_time_embed_dim in all) through add_embedding =
     * TimestepEmbedding (SiLU), added to the time embedding. All zero without it. */
    bool text_time;
    int64_t addition_time_embed_dim;
    int64_t projection_class_embeddings_input_dim;
    int64_t text_embeds_dim;    /* projection_class_embeddings_input_dim - 6 * addition_...:
                                   the width with SDXL base's 6 time ids (a refiner's UNet, fed
                                   5, takes addition_time_embed_dim more) */
} em_unet2d_config;

/**
 * Reads a UNet2DModel config.json (`path` is the file or the folder holding it) into `out`.
 * Errors (nothing allocated): EM_ERR_NOT_FOUND / EM_ERR_IO (the file), EM_ERR_FORMAT (not JSON,
 * `_class_name` neither UNet2DModel nor UNet2DConditionModel, a field of the wrong type, a missing required field, sizes
 * that do not agree: each naming the field and the file), EM_ERR_UNSUPPORTED (a value Ember
 * does not implement, named: a block type, an activation, a time or class embedding type).
 */
EM_API em_status em_unet2d_config_load(em_ctx *c, const char *path, em_unet2d_config *out);
/** Same, from `n` bytes of JSON text; `name` stands for the file in messages (NULL:
 *  "config.json"). */
EM_API em_status em_unet2d_config_parse(em_ctx *c, const char *json, size_t n, const char *name,
                                        em_unet2d_config *out);

typedef struct em_unet2d em_unet2d;

typedef struct em_unet2d_options {
    const char *device; /* "cpu", "xla:0", ...; NULL: the context's default device */
    em_dtype dtype;     /* weights and activations: f32 (default), bf16 or f16 */
} em_unet2d_options;

/** device NULL, f32. */
EM_API em_unet2d_options em_unet2d_default_options(void);

/**
 * Loads a UNet2DModel from a diffusers component folder: config.json and
 * diffusion_pytorch_model.safetensors (or a sharded index of it). o may be NULL (defaults).
 * NULL with an error naming the file and the field or tensor: the errors of
 * em_unet2d_config_load, EM_ERR_NOT_FOUND (a weight missing), EM_ERR_SHAPE (a weight whose shape
 * disagrees with the config), EM_ERR_DEVICE. Free with em_unet2d_free.
 */
EM_API em_unet2d *em_unet2d_load(em_ctx *c, const char *dir, const em_unet2d_options *o);
/** Releases the model's weights. NULL is a no-op. */
EM_API void em_unet2d_free(em_unet2d *u);
/** The model's config (owned by the model). */
EM_API const em_unet2d_config *em_unet2d_get_config(const em_unet2d *u);
/** The device holding the model's weights. */
EM_API em_device *em_unet2d_device(const em_unet2d *u);

/**
 * UNet2DModel.forward(sample, timestep, class_labels).sample: sample [N, in_channels, H, W] in
 * the model's dtype on its device, H and W multiples of 2^(n_blocks - 1). timestep is a tensor
 * on the model's device: 0-d or [1] (the same for every sample) or [N]; any numeric dtype, used
 * as f32 (integers as torch converts them; a learned embedding takes it as an index). Passing
 * the timestep as a tensor lets a compiled step take it as an input instead of a constant.
 * class_labels [N] (i64 for a class table, floating for "timestep"; [N, time_embed_dim] for
 * "identity") is required when the model has a class embedding and refused otherwise. Returns
 * [N, out_channels, H, W] in the current scope, NULL with an error naming the shape at fault.
 */
EM_API em_tensor *em_unet2d_forward(em_ctx *c, em_unet2d *u, em_tensor *sample,
                                    em_tensor *timestep, em_tensor *class_labels);
/**
 * UNet2DConditionModel.forward(sample, timestep, encoder_hidden_states).sample: sample and
 * timestep as em_unet2d_forward; encoder_hidden_states [N, L, cross_attention_dim] (the text
 * encoder's output, any L) in the model's dtype on its device. Returns [N, out_channels, H, W] in
 * the current scope; NULL with an error naming the shape at fault (EM_ERR_INVALID_ARG for a
 * UNet2DModel, which takes em_unet2d_forward, or NULL states).
 */
EM_API em_tensor *em_unet2d_forward_cond(em_ctx *c, em_unet2d *u, em_tensor *sample,
                                         em_tensor *timestep, em_tensor *encoder_hidden_states);
/** SDXL's added_cond_kwargs for a UNet2DConditionModel with addition_embed_type "text_time".
 *  Borrowed tensors on the model's device, any floating dtype. */
typedef struct em_unet2d_added_cond {
    em_tensor *text_embeds; /* [N, text_embeds_dim] (with 6 time ids): the pooled prompt
                               embeds (text_encoder_2's text_embeds) */
    em_tensor *time_ids;    /* [N, 6]: original_size + crops_coords_top_left + target_size;
                               or [N, K] for any K whose embeddings and text_embeds fill
                               projection_class_embeddings_input_dim (a refiner's [N, 5]:
                               original_size + crops_coords_top_left + aesthetic score) */
} em_unet2d_added_cond;

/**
 * UNet2DConditionModel.forward(sample, timestep, encoder_hidden_states, added_cond_kwargs=
 * {"text_embeds", "time_ids"}).sample: as em_unet2d_forward_cond (which is this with added
 * NULL). A "text_time" model (cfg.text_time) requires both tensors (EM_ERR_INVALID_ARG naming
 * them when missing, EM_ERR_SHAPE naming the shapes wanted, EM_ERR_DTYPE for a non-floating
 * tensor or one on another device); any other model refuses them (EM_ERR_INVALID_ARG).
 */
EM_API em_tensor *em_unet2d_forward_added(em_ctx *c, em_unet2d *u, em_tensor *sample,
                                          em_tensor *timestep, em_tensor *encoder_hidden_states,
                                          const em_unet2d_added_cond *added);
/** em_unet2d_forward with a host timestep (made a 0-d f32 tensor on the model's device). diffusers
 *  turns a Python number into an integer tensor; pipelines pass tensors, whose values this
 *  keeps as they are. */
EM_API em_tensor *em_unet2d_forward_at(em_ctx *c, em_unet2d *u, em_tensor *sample,
                                       double timestep, em_tensor *class_labels);

/* ---------------------------------------------------------------------------------------------
 * Pipeline folders (model_index.json)
 * ------------------------------------------------------------------------------------------- */

/** Pipeline classes of model_index.json's `_class_name`. Append-only. */
typedef enum em_pipeline_class {
    EM_PIPELINE_DDPM = 0, /* DDPMPipeline: unet (UNet2DModel) + scheduler */
    EM_PIPELINE_DDIM = 1, /* DDIMPipeline: unet (UNet2DModel) + scheduler */
    EM_PIPELINE_STABLE_DIFFUSION = 2, /* StableDiffusionPipeline: tokenizer, text_encoder
                                         (CLIPTextModel), unet (UNet2DConditionModel), vae
                                         (AutoencoderKL), scheduler. Also
                                         StableDiffusionInpaintPipeline folders (class_name
                                         says which; the UNet may take 9 channels) */
    EM_PIPELINE_DIT = 3, /* DiTPipeline: transformer (DiTTransformer2DModel) + vae (AutoencoderKL)
                           + scheduler (ember/dit.h) */
    EM_PIPELINE_STABLE_DIFFUSION_XL = 4 /* StableDiffusionXLPipeline: Stable Diffusion's
                                           components plus tokenizer_2 and text_encoder_2
                                           (CLIPTextModelWithProjection); the UNet has
                                           addition_embed_type "text_time". Also
                                           StableDiffusionXLImg2ImgPipeline and
                                           StableDiffusionXLInpaintPipeline folders (class_name
                                           says which), the refiner's layout included: no
                                           tokenizer / text_encoder */,
    EM_PIPELINE_STABLE_DIFFUSION_3 = 5 /* StableDiffusion3Pipeline: transformer
                                          (SD3Transformer2DModel, ember/sd3.h), vae
                                          (AutoencoderKL), scheduler, tokenizer + text_encoder
                                          and tokenizer_2 + text_encoder_2 (CLIP with
                                          projection), tokenizer_3 + text_encoder_3 (T5,
                                          ember/t5.h) or neither (zero T5 embeddings) */,
    EM_PIPELINE_FLUX = 6 /* FluxPipeline: transformer (FluxTransformer2DModel, ember/flux.h),
                            vae (AutoencoderKL), scheduler, tokenizer + text_encoder (CLIP,
                            pooled output), tokenizer_2 + text_encoder_2 (T5, ember/t5.h) */
} em_pipeline_class;

/** What model_index.json says, with the component folders resolved. Plain data; free with
 *  em_pipeline_index_free. Paths are malloc'd and absolute or relative as `dir` was given. */
typedef struct em_pipeline_index {
    em_pipeline_class pipeline;
    char class_name[64];           /* "DDPMPipeline" */
    char diffusers_version[32];    /* "_diffusers_version" ("" when absent) */
    char *dir;                     /* the pipeline folder */
    char *unet_dir;                /* <dir>/unet */
    char unet_class[64];           /* "UNet2DModel" */
    char *scheduler_dir;           /* <dir>/scheduler */
    char *scheduler_config;        /* <dir>/scheduler/scheduler_config.json */
    char scheduler_class[64];      /* "DDPMScheduler", "DDIMScheduler", ... as the file says */
    /* StableDiffusionPipeline's other components (NULL / "" for the others) */
    char *text_encoder_dir, *tokenizer_dir;
    char text_encoder_class[64], tokenizer_class[64];
    char *transformer_dir;         /* DiT, SD3 and Flux: <dir>/transformer (else NULL) */
    char transformer_class[64];    /* "DiTTransformer2DModel", "Transformer2DModel",
                                      "SD3Transformer2DModel", "FluxTransformer2DModel" */
    char *vae_dir;                 /* Stable Diffusion and DiT: <dir>/vae (else NULL) */
    char vae_class[64];            /* "AutoencoderKL" */
    /* StableDiffusionXLPipeline's and SD3's second CLIP, FluxPipeline's T5 (NULL / "" / false
     * for the others) */
    char *text_encoder_2_dir, *tokenizer_2_dir;
    char text_encoder_2_class[64], tokenizer_2_class[64];
    bool force_zeros_for_empty_prompt; /* the pipeline config's (default true): a NULL negative
                                          prompt is zero embeddings, not "" encoded */
    /* StableDiffusionXLImg2ImgPipeline's requires_aesthetics_score (an SDXL refiner's; default
     * false): the time ids are (height, width, 0, 0, aesthetic score), five, and runs need an
     * init image. A refiner folder has no tokenizer and text_encoder (text_encoder_dir and
     * tokenizer_dir NULL): text_encoder_2 encodes the prompt alone. */
    bool requires_aesthetics_score;
    /* StableDiffusion3Pipeline's T5 (text_encoder_3 T5EncoderModel, tokenizer_3 T5TokenizerFast
     * or T5Tokenizer); NULL / "" when the folder has neither (diffusers then uses zero T5
     * embeddings) and for the other pipelines */
    char *text_encoder_3_dir, *tokenizer_3_dir;
    char text_encoder_3_class[64], tokenizer_3_class[64];
} em_pipeline_index;

/**
 * Reads <dir>/model_index.json and checks that every component the pipeline class needs is
 * named there with a class Ember can load and that its folder (and the scheduler's
 * scheduler_config.json) exists. The scheduler class is returned as written (the scheduler
 * code judges it). Errors, each naming model_index.json or the component's folder:
 * EM_ERR_NOT_FOUND (no model_index.json, a component or its folder missing), EM_ERR_FORMAT
 * (not JSON, a field of the wrong type), EM_ERR_UNSUPPORTED (an unknown pipeline class or a
 * component class Ember cannot load, named). `out` is zeroed on failure.
 */
EM_API em_status em_pipeline_index_load(em_ctx *c, const char *dir, em_pipeline_index *out);
/** Frees the paths and zeroes the struct. NULL is a no-op. */
EM_API void em_pipeline_index_free(em_pipeline_index *idx);
/** Name of a pipeline class ("DDPMPipeline"). */
EM_API const char *em_pipeline_class_name(em_pipeline_class p);
/** em_unet2d_load of the index's unet component. */
EM_API em_unet2d *em_pipeline_load_unet(em_ctx *c, const em_pipeline_index *idx,
                                        const em_unet2d_options *o);

/* ---------------------------------------------------------------------------------------------
 * Pipelines: DDPMPipeline / DDIMPipeline
 *
 *     em_pipeline *p = em_pipeline_load(c, "ddpm-cifar10/", NULL); // its UNet + scheduler
 *     em_pipeline_to(c, p, "xla:0");                                 // optional
 *     em_pipeline_set_scheduler(c, p, EM_SCHED_DDIM);                // optional: DDIM.from_config
 *     em_pipeline_run_params rp = em_pipeline_default_params();
 *     rp.steps = 50;
 *     rp.seed = 42;                       // torch.Generator("cpu").manual_seed(42)
 *     em_tensor *img = em_pipeline_run(c, p, &rp);   // f32 [1, H, W, C] in [0, 1] on the CPU
 *     em_png_write_tensor(c, "out.png", img, 1);
 *     em_pipeline_free(p);
 *
 * The run is diffusers' __call__(generator=torch.Generator("cpu").manual_seed(seed),
 * num_inference_steps=steps, eta=eta, output_type="np"): the initial latents are
 * torch.randn((1, in_channels, sample_size, sample_size)) from that generator (drawn on the host,
 * then moved to the UNet's device), and the steps that draw noise (DDPM at t > 0, DDIM with
 * eta > 0, Euler ancestral) draw it from the same generator in the same order. With a swapped
 * scheduler the loop also applies scale_model_input and init_noise_sigma (DDPMPipeline's own
 * loop omits both, which only DDPM/DDIM-type schedulers can do without; for them both are the
 * identity, so the run is the pipeline's). A pipeline is not thread-safe (its scheduler keeps
 * step state).
 * ------------------------------------------------------------------------------------------- */

typedef struct em_pipeline em_pipeline;

typedef struct em_pipeline_options {
    const char *device; /* "cpu", "xla:0", ...; NULL: the context's default device */
    /* diffusers' torch_dtype: f32 (the default), bf16 or f16 for the denoiser's (UNet or DiT
     * transformer) and the VAE's weights and activations. The text encoders stay f32 (their
     * embeddings are cast to the denoiser's dtype), and so do the latents and the scheduler's
     * arithmetic: each denoiser call takes its input cast to the dtype and gives its output
     * back as f32 (diffusers keeps the latents in the dtype between steps, so half-precision
     * images differ from diffusers' by about as much as diffusers' own differ from f32). An f16
     * VAE whose config says force_upcast decodes in f32 in the SDXL pipelines, as diffusers'
     * upcast_vae does. */
    em_dtype dtype;
    /* Tensor parallelism of the transformer of DiTPipeline, StableDiffusion3Pipeline or
     * FluxPipeline over this process group (NULL or a group of one: none): em_dit_load_tp
     * (ember/dit.h), em_sd3_load_tp (ember/sd3.h) or em_flux_load_tp (ember/flux.h) splits the
     * blocks' heads and feed-forward; the text encoders, the VAE and the scheduler are whole on
     * every rank (on the rank's device), and every rank runs the pipeline with the same
     * parameters and gets the same image. Other pipelines refuse a group of more than one
     * (EM_ERR_UNSUPPORTED). The group must outlive the pipeline. */
    struct em_dist *tp;
    /* Context parallelism of the transformer of DiTPipeline, StableDiffusion3Pipeline or
     * FluxPipeline over this process group (NULL or a group of one: none):
     * em_dit_set_context_parallel (ember/dit.h; em_sd3_..., em_flux_...) splits the image tokens
     * over the ranks, as diffusers' ContextParallelConfig; with tp too when they are two
     * groups (em_dist_mesh2d: each rank its heads of its tokens; the same group for both is
     * EM_ERR_INVALID_ARG); other pipelines refuse a group of more than one. The group must
     * outlive the pipeline. */
    struct em_dist *cp;
    /* How cp's attention meets every rank's keys: EM_CP_RING (the default, diffusers'
     * ring_degree), EM_CP_ALL_GATHER or EM_CP_ULYSSES (its ulysses_degree; ember/dist.h's
     * em_cp_schedule). */
    em_cp_schedule cp_schedule;
    /* diffusers' ContextParallelConfig(ring_degree, ulysses_degree) for cp (both 0, the
     * default: cp_schedule alone decides): their product must be cp's size; both > 1 runs the
     * unified attention (em_dit_set_cp_degrees in ember/dit.h). Ignored without cp. */
    int cp_ring_degree, cp_ulysses_degree;
} em_pipeline_options;

/** device NULL, dtype f32, tp NULL, cp NULL, cp_schedule EM_CP_RING, the cp degrees 0. */
EM_API em_pipeline_options em_pipeline_default_options(void);

/**
 * Loads a pipeline folder: model_index.json (em_pipeline_index_load), the UNet (Stable
 * Diffusion and SDXL also their tokenizers, text encoders and VAE; DiTPipeline:
 * the transformer and the VAE, ember/dit.h, ember/vae.h) onto o->device and the scheduler from
 * scheduler/scheduler_config.json. A DDIMPipeline turns its folder's
 * scheduler into a DDIMScheduler (DDIMScheduler.from_config), as diffusers' DDIMPipeline does.
 * o may be NULL. NULL with the first error in c, naming the file and what is wrong: the errors
 * of em_pipeline_index_load (unknown pipeline class, a component missing or of an unknown
 * class, broken JSON), of em_unet2d_load and of em_scheduler_from_file; EM_ERR_DTYPE for a
 * dtype other than f32, bf16 and f16. Free with em_pipeline_free.
 */
EM_API em_pipeline *em_pipeline_load(em_ctx *c, const char *dir, const em_pipeline_options *o);
/** Frees the UNet, the scheduler and the index. NULL is a no-op. */
EM_API void em_pipeline_free(em_pipeline *p);
/**
 * pipe.to(device): the UNet's (DiTPipeline: the transformer's and the VAE's) weights are
 * loaded again from the folder onto `device`, in the pipeline's dtype (the old copy is released only once the new one
 * is loaded, so a failure leaves the pipeline as it was). The same device is a no-op.
 * EM_ERR_DEVICE for an unknown device (from em_device_get), the errors of em_unet2d_load
 * (em_dit_load, em_vae_load); the status is returned and recorded in c.
 */
EM_API em_status em_pipeline_to(em_ctx *c, em_pipeline *p, const char *device);
/**
 * pipe.scheduler = <kind>.from_config(pipe.scheduler.config) (em_scheduler_from_config). On
 * failure (a config the new class refuses) the old scheduler stays; the status is returned.
 */
EM_API em_status em_pipeline_set_scheduler(em_ctx *c, em_pipeline *p, em_scheduler_kind kind);

/** The pipeline's index (class, folders), owned by p. */
EM_API const em_pipeline_index *em_pipeline_get_index(const em_pipeline *p);
/** The pipeline's UNet (NULL for DiTPipeline) and scheduler, owned by p (valid until the next
 *  em_pipeline_to / em_pipeline_set_scheduler or em_pipeline_free). */
EM_API em_unet2d *em_pipeline_unet(const em_pipeline *p);
/** DiTPipeline's transformer (ember/dit.h; NULL for the other pipelines), owned by p, valid as
 *  em_pipeline_unet's. */
struct em_dit;
EM_API struct em_dit *em_pipeline_dit(const em_pipeline *p);
/** StableDiffusion3Pipeline's and FluxPipeline's transformers (ember/sd3.h, ember/flux.h; NULL
 *  for the other pipelines), owned by p, valid as em_pipeline_unet's. */
struct em_sd3;
struct em_flux;
EM_API struct em_sd3 *em_pipeline_sd3(const em_pipeline *p);
EM_API struct em_flux *em_pipeline_flux(const em_pipeline *p);
EM_API em_scheduler *em_pipeline_scheduler(const em_pipeline *p);
/** The device the UNet (DiTPipeline: the transformer) is on. */
EM_API em_device *em_pipeline_device(const em_pipeline *p);
/** The shape of the initial latents: [1, in_channels, sample_size...] of the UNet (or DiT
 *  transformer). False (shape untouched) when the UNet's config has no sample_size. */
EM_API bool em_pipeline_latent_shape(const em_pipeline *p, int64_t shape[4]);

/** Called after each denoising step i (0-based) of n, at timestep t, with the seconds the step
 *  took (the device synchronised first). Return false to stop the run (EM_ERR_INVALID_ARG,
 *  "stopped by the progress callback"). */
typedef bool (*em_pipeline_progress_fn)(void *user, int64_t i, int64_t n, double t,
                                        double seconds);

typedef struct em_pipeline_run_params {
    int64_t steps;        /* num_inference_steps; 0: the class's default (DDPM 1000, DDIM 50) */
    double eta;           /* DDIM's eta; must be 0 with other schedulers */
    uint64_t seed;        /* torch.Generator("cpu").manual_seed(seed) */
    em_tensor *latents;   /* NULL: drawn from the generator; else f32 of the latent shape (any
                             device; borrowed), and the generator only gives per-step noise */
    em_pipeline_progress_fn progress; /* NULL: none */
    void *user;           /* passed to progress */
    bool compile;         /* the denoiser step as one compiled function (ember/compile.h): traced
                             once per latent shape, the timestep a fresh 0-d tensor input each
                             step (never a constant), so steps reuse the program; the scheduler
                             step stays eager */
    em_compile_stats *compile_stats; /* with compile: the run's counters (may be NULL) */
    /* StableDiffusionPipeline and StableDiffusionXLPipeline only (refused by the other
     * pipelines when set) */
    const char *prompt;          /* required ("" is a prompt); NULL for the others */
    const char *negative_prompt; /* NULL: "" (diffusers' unconditional embedding); SDXL with
                                    force_zeros_for_empty_prompt: zero embeddings (an explicit ""
                                    is encoded) */
    int64_t height, width;       /* the image's size; 0: unet sample_size * vae_scale_factor */
    /* Stable Diffusion and DiT: classifier-free guidance when > 1; 0: the pipeline's default
     * (StableDiffusionPipeline 7.5, StableDiffusionXLPipeline 5.0, StableDiffusion3Pipeline
     * 7.0, DiTPipeline 4.0); refused by the unconditional pipelines. StableDiffusion3Pipeline
     * takes prompts, negative prompts, prompt_2 / negative_prompt_2 (and their lists), height,
     * width, num_images_per_prompt, seeds, latents, compile, vae_slicing and
     * max_sequence_length; its other run options are refused by name (EM_ERR_UNSUPPORTED) */
    double guidance_scale;
    int64_t class_label;  /* DiTPipeline's class_labels=[class_label] (required there, in
                             [0, num_embeds_ada_norm), unless class_labels is given); -1: none
                             (the other pipelines) */
    /* DiTPipeline's class_labels=[...] (a batch of num_class_labels images, one per label, in
     * the list's order): the latents are one torch.randn of [B, C, h, w] (latents, when given,
     * must be [B, C, h, w]); under guidance the transformer sees 2B rows, the labels then B
     * null classes, as diffusers does. Borrowed; class_label must then be -1. NULL: class_label.
     * Refused by the other pipelines. */
    const int64_t *class_labels;
    int64_t num_class_labels;
    bool vae_tiling;      /* code with the VAE in tiles, diffusers' pipe.vae.enable_tiling():
                             the result decoded (em_vae_decode_tiled) and an init image encoded
                             (em_vae_encode_tiled), with the VAE's default tiles; refused by the
                             pipelines without a VAE */
    /* Image to image, StableDiffusionImg2ImgPipeline on Stable Diffusion folders and
     * StableDiffusionXLImg2ImgPipeline on SDXL base folders (time ids from the image's size,
     * requires_aesthetics_score false): the init
     * image, f32 [1, H, W, 3] in [0, 1] (the layout em_pipeline_run returns; any device;
     * borrowed), H and W multiples of the VAE's scale factor (Ember does not resize: height and
     * width, when given, must be the image's). It is encoded by the VAE (a posterior sample
     * drawn from the generator), noised to the schedule's step (1 - strength) * steps, and
     * denoised from there. NULL: text to image. */
    em_tensor *image;
    double strength;      /* with image: how much of the schedule runs, in (0, 1]; 0: diffusers'
                             default, 0.8 (SDXL: 0.3). int(steps * strength) must be at least 1 */
    /* Batches. DDPMPipeline / DDIMPipeline: num_images_per_prompt is diffusers' batch_size
     * (the latents one torch.randn of [B, C, H, W], per-step noise drawn over the batch).
     * StableDiffusionPipeline and StableDiffusionXLPipeline (as diffusers' num_images_per_prompt
     * and a list of prompts): the run denoises B = (prompts ? num_prompts : 1) * num_images_per_prompt latents
     * together (the UNet sees 2B rows under guidance: the negative embeddings, each repeated
     * num_images_per_prompt times, then the prompts' likewise), drawn as one torch.randn of
     * [B, C, h, w] from the generator (latents, when given, must be [B, C, h, w]); per-step
     * noise is drawn over the batch; an init image is encoded once and repeated B times, as
     * StableDiffusionImg2ImgPipeline does. The result is [B, H, W, C], prompt-major. B is at
     * most EM_PIPELINE_MAX_BATCH. */
    int64_t num_images_per_prompt; /* 0 or 1: one image per prompt; negative refused; > 1
                                      refused by DiTPipeline (give class_labels) */
    const char *const *prompts;    /* NULL: `prompt`; else num_prompts prompts (prompt NULL) */
    int64_t num_prompts;
    const char *const *negative_prompts; /* with prompts: NULL (every one "") or num_prompts
                                            strings (negative_prompt must then be NULL, as
                                            diffusers refuses a string with a list) */
    bool vae_slicing;     /* decode the batch one image at a time, diffusers'
                             pipe.vae.enable_slicing() (em_vae_enable_slicing; the same image);
                             refused by the pipelines without a VAE */
    /* StableDiffusionXLPipeline's prompt_2 / negative_prompt_2: the texts tokenizer_2 and
     * text_encoder_2 encode (the first encoder takes prompt / negative_prompt). NULL or "": the
     * prompt / negative prompt again, as diffusers' `prompt_2 or prompt`. With
     * force_zeros_for_empty_prompt and no negative prompt the negatives are zeros whatever
     * negative_prompt_2 is, as in diffusers. Refused with prompts (give the lists) and by the
     * other pipelines. Borrowed. */
    const char *prompt_2;
    const char *negative_prompt_2;
    /* With prompts (SDXL): NULL (the prompts / negative prompts again) or num_prompts strings,
     * each encoded as given ("" included, as diffusers encodes a list's entries). Borrowed. */
    const char *const *prompts_2;
    const char *const *negative_prompts_2;
    /* StableDiffusionXLImg2ImgPipeline with requires_aesthetics_score (a refiner): the last time
     * id of the prompts' rows and of the negatives' rows. em_pipeline_default_params sets
     * diffusers' defaults, 6.0 and 2.5; the other pipelines ignore them, as diffusers' do. */
    double aesthetic_score;
    double negative_aesthetic_score;
    /* Inpainting, StableDiffusionInpaintPipeline on Stable Diffusion folders and
     * StableDiffusionXLInpaintPipeline on SDXL ones (with image): the mask, f32 [1, H, W] or
     * [1, H, W, 1] (the image's size, any device, borrowed), binarised at 0.5 as diffusers' mask
     * processor does; white (1) is repainted. A UNet of 9 input channels (the inpainting
     * models') takes the mask and the masked image's latents beside the latents; a 4-channel one
     * keeps the known region from the image's latents after every step. strength 0 is the
     * default, 1.0 (pure noise; SDXL 0.9999). Such a UNet needs a mask. NULL: no inpainting. */
    em_tensor *mask_image;
    /* StableDiffusionPipeline (and its image to image and inpainting): the prompt embeddings
     * given instead of prompt / prompts, as diffusers' prompt_embeds: f32 [n, L,
     * cross_attention_dim] (any device, borrowed; n prompts' worth, each repeated
     * num_images_per_prompt times). Under guidance negative_prompt_embeds (the same shape) are
     * the unconditional half; without them the negative prompt (negative_prompt with n 1, or n
     * negative_prompts; NULL: "") is encoded, tokenized to L tokens. Refused with a prompt and
     * by the other pipelines. NULL: encode the prompts. StableDiffusionXLPipeline (and its
     * refiner) takes them too, cross_attention_dim wide (the encoders' states side by side),
     * with pooled_prompt_embeds [n, text_encoder_2's projection_dim] required beside them (and
     * negative_pooled_prompt_embeds beside negative_prompt_embeds); without negatives under
     * guidance they are zeros (force_zeros_for_empty_prompt and no negative prompt) or the
     * negative prompts encoded by every encoder at L tokens, as diffusers does. */
    em_tensor *prompt_embeds;
    em_tensor *negative_prompt_embeds;
    /* A generator per image, diffusers' generator=[torch.Generator("cpu").manual_seed(s) for s
     * in seeds] (em_torch_generator_create_list): num_seeds must be the run's batch B; row i of
     * the initial latents and of every per-step noise comes from seeds[i], image to image samples
     * row i's posterior from seeds[i], and inpainting samples its image's (and the masked
     * image's) posterior from seeds[0], as diffusers does. Borrowed; `seed` is then unused.
     * NULL: one generator from `seed`. */
    const uint64_t *seeds;
    int64_t num_seeds;
    /* SDXL's hand-over between the base and the refiner (diffusers' "ensemble of expert
     * denoisers"): denoising_end in (0, 1) stops the run before the timesteps below
     * round(T - denoising_end * T) (T num_train_timesteps); with output_latents the run returns
     * its latents f32 [B, C, h, w] (output_type="latent", on the CPU) instead of images (any
     * pipeline with a VAE). image_latents (SDXL image to image: [1 or B, C, h, w] f32, any device,
     * borrowed) are the init image as latents (not encoded; time ids from their size times the
     * VAE's factor), noised at the first step as an encoded image would be, unless
     * denoising_start in (0, 1) starts the schedule at the first timestep below the same cutoff
     * and adds no noise (strength is then unused). 0: none. */
    double denoising_end;
    double denoising_start;
    bool output_latents;
    em_tensor *image_latents;
    /* SDXL with prompt_embeds: the pooled text embeds (see prompt_embeds). Borrowed. */
    em_tensor *pooled_prompt_embeds;
    em_tensor *negative_pooled_prompt_embeds;
    /* StableDiffusion3Pipeline's max_sequence_length: the T5 tokens after the 77 CLIP ones
     * (zeros without text_encoder_3), 1 to 512; 0: 256, diffusers' default */
    int64_t max_sequence_length;
} em_pipeline_run_params;

/** The largest batch em_pipeline_run makes (num_prompts * num_images_per_prompt,
 *  num_class_labels). */
#define EM_PIPELINE_MAX_BATCH 1024

/** steps 0, eta 0, seed 0, no latents, no progress, no prompt, guidance_scale 0 (the pipeline's
 *  default), class_label -1, no class_labels, no init image (strength 0: 0.8, SDXL 0.3, when an
 *  image is given), num_images_per_prompt 1, no prompt list, no VAE tiling or slicing,
 *  aesthetic_score 6.0 and negative_aesthetic_score 2.5. */
EM_API em_pipeline_run_params em_pipeline_default_params(void);

/**
 * Runs the denoising loop and returns the image as diffusers' output_type="np" does: f32
 * [B, H, W, C] = clamp(x / 2 + 0.5, 0, 1) in HWC order, on the CPU, in c's current scope (B 1
 * but for a batch: rp->num_images_per_prompt / rp->prompts, DiT's rp->num_class_labels).
 * rp NULL: the defaults. NULL with the error in c: latents of the wrong shape or dtype
 * (EM_ERR_SHAPE / EM_ERR_DTYPE, naming both shapes), eta != 0 with a scheduler other than
 * DDIM (EM_ERR_INVALID_ARG), no sample_size and no latents, a step count the scheduler
 * refuses, and the first error of a UNet forward or scheduler step (naming the step).
 * DiTPipeline (its loop, classifier-free guidance included, in docs/diffusion.md) then decodes
 * with the VAE; a missing or out-of-range class_label, or a class_label / guidance_scale given
 * to another pipeline, is EM_ERR_INVALID_ARG. An init image given to a pipeline other than Stable
 * Diffusion or SDXL, with latents, of the wrong shape or dtype (EM_ERR_SHAPE / EM_ERR_DTYPE), or a
 * strength outside (0, 1] or one that leaves no step, is refused likewise; FlowMatch, which has
 * no add_noise, is EM_ERR_UNSUPPORTED with an image. A batch the pipeline does not take
 * (prompts outside Stable Diffusion, num_images_per_prompt > 1 for DiT, class_labels outside
 * DiT), class_labels with class_label, num_class_labels < 1 or a label out of range (named by
 * its index), num_images_per_prompt < 0, a batch larger than
 * EM_PIPELINE_MAX_BATCH, prompts with prompt or negative_prompt, num_prompts < 1 or a NULL
 * entry, and vae_slicing without a VAE are EM_ERR_INVALID_ARG; so are second prompts
 * (prompt_2 and the rest) outside SDXL, prompt_2 / negative_prompt_2 with prompts, the lists
 * without prompts, and a NULL entry in them.
 */
EM_API em_tensor *em_pipeline_run(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp);

#ifdef __cplusplus
}
#endif
#endif

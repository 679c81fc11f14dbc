/* UNet2DModel internals shared by its loader (unet2d.c) and its blocks (unet_blocks.c), which
 * AutoencoderKL (vae.c) reuses: the weights resolved at load into one struct per diffusers
 * module, so a missing or misshapen tensor is found when loading, never in the middle of a
 * forward. */
#ifndef EMBER_DIFFUSION_UNET_IMPL_H
#define EMBER_DIFFUSION_UNET_IMPL_H

#include "ember/diffusion.h"
#include "ember/safetensors.h"

/* A layer's weight and bias (conv, linear, group norm); bias may be NULL (conv_shortcut
 * without bias never occurs in UNet2DModel, kept general). w == NULL: the layer is absent. */
typedef struct unet_param {
    em_tensor *w, *b;
} unet_param;

typedef enum unet_act { UNET_ACT_SILU, UNET_ACT_GELU, UNET_ACT_RELU } unet_act;

/* What the blocks' forwards take besides their weights: a UNet2DModel's from its config, the
 * VAE's Encoder/Decoder fixed by diffusers (eps 1e-6, padding 0, default shift). */
typedef struct unet_settings {
    unet_act act;               /* the resnets' nonlinearity */
    int64_t groups;             /* the resnets' group norm groups */
    double eps;                 /* every group norm's eps */
    bool scale_shift;           /* resnet_time_scale_shift "scale_shift" */
    int64_t downsample_padding; /* the conv downsamplers' padding (0: F.pad (0, 1, 0, 1)) */
} unet_settings;

/* ResnetBlock2D. */
typedef struct unet_resnet {
    int64_t in, out;
    unet_param norm1, conv1, temb_proj, norm2, conv2, shortcut;
    bool up, down;       /* resnet up/downsamplers: nearest x2 / 2x2 average before conv1 */
    double out_scale;    /* output_scale_factor */
} unet_resnet;

/* Attention with _from_deprecated_attn_block: group norm, one self-attention over H*W. */
typedef struct unet_attn {
    int64_t channels, heads, head_dim;
    int64_t groups;                /* the group norm's groups (0: no group norm) */
    unet_param norm, q, k, v, out; /* norm.w == NULL: no group norm */
    double rescale;                /* rescale_output_factor */
} unet_attn;

/* BasicTransformerBlock (norm_type layer_norm): self-attention, cross-attention over the
 * encoder's hidden states, GEGLU feed-forward, each after its LayerNorm, each residual. */
typedef struct unet_tblock {
    unet_param norm1, norm2, norm3;             /* LayerNorms (eps 1e-5) */
    unet_param q1, k1, v1, o1, q2, k2, v2, o2;  /* attn1 / attn2: to_q, to_k, to_v (no bias),
                                                   to_out.0 */
    unet_param ff_in, ff_out;                   /* ff.net.0.proj (GEGLU, 2 * 4 * dim rows),
                                                   ff.net.2 */
} unet_tblock;

/* Transformer2DModel with continuous input: group norm (eps 1e-6), proj_in (1x1 conv, or
 * linear with use_linear_projection), BasicTransformerBlocks, proj_out, plus the input. */
typedef struct unet_xformer {
    int64_t channels, heads, head_dim, groups;
    bool linear;
    int n;                 /* BasicTransformerBlocks */
    unet_tblock *blocks;   /* [n] */
    unet_param norm, proj_in, proj_out;
} unet_xformer;

/* A down, mid or up block: resnets, optional attention after each, optional resampler. */
typedef struct unet_block {
    int n;               /* resnets */
    unet_resnet *res;    /* [n] */
    unet_attn *attn;     /* [n] (mid block: [n - 1], after resnets 0..n-2) or NULL */
    unet_xformer *xf;    /* cross-attention blocks: [n] as attn, or NULL */
    unet_param conv;     /* downsamplers.0.conv / upsamplers.0.conv (w NULL: none) */
    unet_resnet *resampler; /* resnet down/upsampler (NULL: none) */
} unet_block;

struct em_unet2d {
    em_unet2d_config cfg;
    char *dir;
    em_device *dev;
    em_dtype dtype;
    unet_settings set;
    em_tensor *freqs;    /* positional: [1, C0/2] f32 frequencies as diffusers computes them */
    em_tensor *time_proj;/* fourier: W [C0]; learned: the table [T, C0] */
    unet_param time_l1, time_l2;
    em_tensor *class_table;          /* class table [num_class_embeds, D] */
    unet_param class_l1, class_l2;   /* "timestep" class embedding */
    em_tensor *add_freqs;            /* text_time: add_time_proj's [1, addition_time_embed_dim/2] */
    unet_param add_l1, add_l2;       /* text_time: add_embedding.linear_1 / linear_2 */
    unet_param conv_in, norm_out, conv_out;
    unet_block down[EM_UNET2D_MAX_BLOCKS], up[EM_UNET2D_MAX_BLOCKS], mid;
    /* every parameter under diffusers' name, in load order (em_unet2d_param): the names
     * malloc'd, the tensors borrowed from the fields above */
    int n_params, cap_params;
    char **param_names;
    em_tensor **params;
    char *config_json; /* em_unet2d_create's config text (NULL: loaded, <dir>/config.json) */
};

/* ---- loading (unet_blocks.c) ---- */
typedef struct unet_loader {
    em_ctx *c;
    em_safetensors *st;
    em_unet2d *u;      /* UNet2DModel's own loaders only; the block loaders below do not use it */
    const char *file;  /* the safetensors file, for messages */
    const char *dir;   /* the component folder (its config.json is named in messages) */
    const char *op;    /* the op errors carry ("UNet2DModel", "AutoencoderKL") */
    em_dtype dtype;
    em_device *dev;
    int64_t temb_dim;  /* the resnets' time_emb_proj input (0: none, temb_channels=None) */
    bool scale_shift;  /* time_emb_proj gives scale and shift (2 * out rows) */
    int64_t head_dim;  /* attention_head_dim (0: one head of all channels) */
    /* em_unet2d_create: st is NULL and each weight is drawn from init with torch's default
     * initialisation of its layer type instead of read */
    struct em_torch_generator *init;
} unet_loader;

/* Loads `<prefix>.<name>.weight` (and `.bias` when has_bias) checking the weight's shape
 * (ndim sizes) and the bias's ([shape[0]]). Returns false with an error. */
bool unet_load_param(unet_loader *l, unet_param *p, const char *prefix, const char *name,
                     bool has_bias, int ndim, const int64_t *shape);
bool unet_load_resnet(unet_loader *l, unet_resnet *r, const char *prefix, int64_t in,
                      int64_t out);
bool unet_load_attn(unet_loader *l, unet_attn *a, const char *prefix, int64_t channels,
                    int64_t groups, double rescale);
/* A Transformer2DModel at `prefix` over `channels` channels: `heads` heads of
 * channels / heads, `layers` blocks, cross-attention over `cross_dim` wide states. */
bool unet_load_xformer(unet_loader *l, unet_xformer *x, const char *prefix, int64_t channels,
                       int64_t heads, int64_t layers, int64_t cross_dim, int64_t groups,
                       bool linear);
void unet_xformer_free(unet_xformer *x);
/* b->n resnets (and as many attention slots when attn), zeroed. */
bool unet_alloc_block(unet_loader *l, unet_block *b, int n, bool attn);
/* b->xf: n zeroed Transformer2DModel slots. */
bool unet_alloc_xformers(unet_loader *l, unet_block *b, int n);
void unet_block_free(unet_block *b);
/* Opens l->dir's weights file (diff_weights_file; l->st and l->file are set for the call) and
 * runs load(l, user) in a scope of its own. False with the error in l->c. */
bool unet_load_folder(unet_loader *l, bool (*load)(unet_loader *l, void *user), void *user);
void unet_param_free(unet_param *p);
/* em_unet2d_create's draw of parameter `name` (the weight of shape[ndim], or with bias its
 * bias) in torch's default initialisation of the layer (unet_params.c). NULL with an error. */
em_tensor *unet_init_weight(unet_loader *l, const char *name, int ndim, const int64_t *shape,
                            bool bias, bool has_bias);
/* Appends (name, t) to l->u's parameter list (nothing without l->u). False when out of
 * memory. */
bool unet_record_param(unet_loader *l, const char *name, em_tensor *t);

/* A UNet2DModel of config cfg on o's device: weights read from `dir` (init NULL) or drawn
 * from init (em_unet2d_create; dir then only names the model in messages). unet2d.c. */
em_unet2d *unet2d_build(em_ctx *c, const em_unet2d_config *cfg, const char *dir,
                        const em_unet2d_options *o, struct em_torch_generator *init);

/* ---- forward (unet_blocks.c); results in the current scope ---- */
/* act_fn "gelu", "relu"; anything else (the parsers accept only "silu" / "swish") is SiLU. */
unet_act unet_act_from_name(const char *name);
em_tensor *unet_act_apply(em_ctx *c, unet_act a, em_tensor *x);
/* temb NULL: a resnet without time_emb_proj (the VAE's). */
em_tensor *unet_resnet_forward(em_ctx *c, const unet_settings *s, const unet_resnet *r,
                               em_tensor *x, em_tensor *temb);
em_tensor *unet_attn_forward(em_ctx *c, const unet_settings *s, const unet_attn *a,
                             em_tensor *x);
/* Transformer2DModel.forward(x [N, C, H, W], encoder_hidden_states [N, L, D]). */
em_tensor *unet_xformer_forward(em_ctx *c, const unet_xformer *x, em_tensor *h, em_tensor *ctx);
/* The down block's conv downsampler (diffusers' F.pad (0, 1, 0, 1) when padding is 0). */
em_tensor *unet_downsample(em_ctx *c, const unet_settings *s, const unet_param *conv,
                           em_tensor *x);
/* Nearest x2 then the 3x3 conv. */
em_tensor *unet_upsample(em_ctx *c, const unet_param *conv, em_tensor *x);
/* A 3x3 (or 1x1) convolution, stride 1, "same" padding. */
em_tensor *unet_conv(em_ctx *c, const unet_param *p, em_tensor *x);

#endif

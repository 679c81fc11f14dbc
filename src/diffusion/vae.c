/* AutoencoderKL (diffusers 0.42, models/autoencoders/autoencoder_kl.py and vae.py): the
 * Encoder and Decoder built from UNet2DModel's blocks (unet_blocks.c) as diffusers builds them
 * — every resnet without a time embedding, eps 1e-6, the mid block's attention one head over
 * all channels, the encoder's downsamplers padding 0 — and the quant convs around them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/unet_impl.h"
#include "diffusion/vae_impl.h"
#include "diffusion/weights.h"
#include "ember/vae.h"

#define OP "AutoencoderKL"
#define VAE_EPS 1e-6 /* Encoder / Decoder pass resnet_eps=1e-6 and GroupNorm(eps=1e-6) */

/* The Encoder or the Decoder. */
typedef struct vae_coder {
    unet_param conv_in, norm_out, conv_out;
    unet_block blocks[EM_VAE_MAX_BLOCKS], mid;
} vae_coder;

struct em_vae {
    em_vae_config cfg;
    char *dir;
    em_device *dev;
    em_dtype dtype;
    unet_settings set;
    vae_coder enc, dec;
    unet_param quant, post_quant; /* w NULL: use_quant_conv / use_post_quant_conv false */
    bool slicing;                 /* vae.enable_slicing(): a batch coded one image at a time */
};

void em_vae_enable_slicing(em_vae *v, bool slicing) {
    if (v) v->slicing = slicing;
}

const em_vae_config *em_vae_get_config(const em_vae *v) { return v ? &v->cfg : NULL; }

em_device *em_vae_device(const em_vae *v) { return v ? v->dev : NULL; }

static void coder_free(vae_coder *k) {
    for (int i = 0; i < EM_VAE_MAX_BLOCKS; i++) unet_block_free(&k->blocks[i]);
    unet_block_free(&k->mid);
    unet_param_free(&k->conv_in);
    unet_param_free(&k->norm_out);
    unet_param_free(&k->conv_out);
}

void em_vae_free(em_vae *v) {
    if (!v) return;
    coder_free(&v->enc);
    coder_free(&v->dec);
    unet_param_free(&v->quant);
    unet_param_free(&v->post_quant);
    free(v->dir);
    free(v);
}

/* ---------------------------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------------------------- */

/* <part>.mid_block: UNetMidBlock2D(resnet_eps=1e-6, attention_head_dim=channels, default shift):
 * two resnets and, with mid_block_add_attention, one attention with the resnets' groups. */
static bool load_mid(unet_loader *l, const em_vae_config *cfg, unet_block *b, const char *part) {
    int64_t ch = cfg->block_out_channels[cfg->n_blocks - 1];
    char pre[96];
    if (!unet_alloc_block(l, b, 2, cfg->mid_block_add_attention)) return false;
    for (int j = 0; j < 2; j++) {
        snprintf(pre, sizeof pre, "%s.mid_block.resnets.%d", part, j);
        if (!unet_load_resnet(l, &b->res[j], pre, ch, ch)) return false;
    }
    snprintf(pre, sizeof pre, "%s.mid_block.attentions.0", part);
    return !b->attn || unet_load_attn(l, &b->attn[0], pre, ch, cfg->norm_num_groups, 1.0);
}

/* The 3x3 conv_in, the 3x3 conv_out and conv_norm_out over `norm_ch` channels. */
static bool load_ends(unet_loader *l, vae_coder *k, const char *part, int64_t in, int64_t first,
                      int64_t norm_ch, int64_t out) {
    return unet_load_param(l, &k->conv_in, part, "conv_in", true, 4,
                           (int64_t[]){first, in, 3, 3}) &&
           unet_load_param(l, &k->norm_out, part, "conv_norm_out", true, 1,
                           (int64_t[]){norm_ch}) &&
           unet_load_param(l, &k->conv_out, part, "conv_out", true, 4,
                           (int64_t[]){out, norm_ch, 3, 3});
}

/* Encoder: DownEncoderBlock2D i has layers_per_block resnets and, but the last, a conv
 * downsampler. */
static bool load_encoder(unet_loader *l, const em_vae_config *cfg, vae_coder *k) {
    int n = cfg->n_blocks;
    int64_t out = cfg->block_out_channels[0];
    if (!load_ends(l, k, "encoder", cfg->in_channels, out, cfg->block_out_channels[n - 1],
                   2 * cfg->latent_channels))
        return false;
    for (int i = 0; i < n; i++) {
        int64_t in = out;
        out = cfg->block_out_channels[i];
        unet_block *b = &k->blocks[i];
        char pre[96];
        if (!unet_alloc_block(l, b, (int)cfg->layers_per_block, false)) return false;
        for (int j = 0; j < b->n; j++) {
            snprintf(pre, sizeof pre, "encoder.down_blocks.%d.resnets.%d", i, j);
            if (!unet_load_resnet(l, &b->res[j], pre, j ? out : in, out)) return false;
        }
        snprintf(pre, sizeof pre, "encoder.down_blocks.%d.downsamplers.0", i);
        if (i < n - 1 &&
            !unet_load_param(l, &b->conv, pre, "conv", true, 4, (int64_t[]){out, out, 3, 3}))
            return false;
    }
    return load_mid(l, cfg, &k->mid, "encoder");
}

/* Decoder: UpDecoderBlock2D i (channels reversed) has layers_per_block + 1 resnets and, but
 * the last, a conv upsampler. */
static bool load_decoder(unet_loader *l, const em_vae_config *cfg, vae_coder *k) {
    int n = cfg->n_blocks;
    int64_t out = cfg->block_out_channels[n - 1];
    if (!load_ends(l, k, "decoder", cfg->latent_channels, out, cfg->block_out_channels[0],
                   cfg->out_channels) ||
        !load_mid(l, cfg, &k->mid, "decoder"))
        return false;
    for (int i = 0; i < n; i++) {
        int64_t prev = out;
        out = cfg->block_out_channels[n - 1 - i];
        unet_block *b = &k->blocks[i];
        char pre[96];
        if (!unet_alloc_block(l, b, (int)cfg->layers_per_block + 1, false)) return false;
        for (int j = 0; j < b->n; j++) {
            snprintf(pre, sizeof pre, "decoder.up_blocks.%d.resnets.%d", i, j);
            if (!unet_load_resnet(l, &b->res[j], pre, j ? out : prev, out)) return false;
        }
        snprintf(pre, sizeof pre, "decoder.up_blocks.%d.upsamplers.0", i);
        if (i < n - 1 &&
            !unet_load_param(l, &b->conv, pre, "conv", true, 4, (int64_t[]){out, out, 3, 3}))
            return false;
    }
    return true;
}

static bool load_weights(unet_loader *l, void *user) {
    em_vae *v = user;
    const em_vae_config *cfg = &v->cfg;
    int64_t z2 = 2 * cfg->latent_channels, z = cfg->latent_channels;
    return load_encoder(l, cfg, &v->enc) && load_decoder(l, cfg, &v->dec) &&
           (!cfg->use_quant_conv ||
            unet_load_param(l, &v->quant, "", "quant_conv", true, 4, (int64_t[]){z2, z2, 1, 1})) &&
           (!cfg->use_post_quant_conv ||
            unet_load_param(l, &v->post_quant, "", "post_quant_conv", true, 4,
                            (int64_t[]){z, z, 1, 1}));
}

em_vae *em_vae_load(em_ctx *c, const char *dir, const char *device, em_dtype dtype) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!diff_check_load_args(c, OP, dir, dtype)) return NULL;
    em_vae *v = calloc(1, sizeof *v);
    if (!v || !(v->dir = strdup(dir))) {
        free(v);
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    if (em_vae_config_load(c, dir, &v->cfg) != EM_OK) {
        em_vae_free(v);
        return NULL;
    }
    v->dtype = dtype;
    v->dev = device ? em_device_get(c, device) : em_ctx_device(c);
    v->set = (unet_settings){.act = unet_act_from_name(v->cfg.act_fn),
                             .groups = v->cfg.norm_num_groups,
                             .eps = VAE_EPS,
                             .scale_shift = false,
                             .downsample_padding = 0};
    /* temb_dim 0: every resnet is built with temb_channels=None; head_dim 0: one head */
    unet_loader l = {.c = c, .dir = dir, .op = OP, .dtype = dtype, .dev = v->dev};
    if (v->dev) unet_load_folder(&l, load_weights, v);
    if (em_ctx_status(c)) {
        em_vae_free(v);
        return NULL;
    }
    return v;
}

/* ---------------------------------------------------------------------------------------------
 * Forward
 * ------------------------------------------------------------------------------------------- */

static bool check_input(em_ctx *c, const em_vae *v, em_tensor *x, const char *what,
                        int64_t channels, const char *field) {
    char sig[160];
    if (em_tensor_ndim(x) != 4 || em_tensor_dim(x, 1) != channels || !em_tensor_dim(x, 2) ||
        !em_tensor_dim(x, 3)) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP, "%s %s: expected [N, %lld, H, W] (the VAE %s has %s = "
                    "%lld)", what, em_tensor_sig(x, sig, sizeof sig), (long long)channels,
                    v->dir, field, (long long)channels);
        return false;
    }
    if (em_tensor_dtype(x) != v->dtype) {
        em_ctx_fail(c, EM_ERR_DTYPE, OP, "%s %s: the VAE (%s) is %s", what,
                    em_tensor_sig(x, sig, sizeof sig), v->dir, em_dtype_name(v->dtype));
        return false;
    }
    if (em_tensor_device(x) != v->dev) {
        em_ctx_fail(c, EM_ERR_DEVICE, OP, "%s is on %s, the VAE (%s) on %s", what,
                    em_device_name(em_tensor_device(x)), v->dir, em_device_name(v->dev));
        return false;
    }
    return true;
}

static em_tensor *mid_forward(em_ctx *c, const em_vae *v, const unet_block *mid, em_tensor *x) {
    x = unet_resnet_forward(c, &v->set, &mid->res[0], x, NULL);
    if (mid->attn) x = unet_attn_forward(c, &v->set, &mid->attn[0], x);
    return unet_resnet_forward(c, &v->set, &mid->res[1], x, NULL);
}

/* conv_norm_out, then nn.SiLU (conv_act is SiLU whatever act_fn is), then conv_out */
static em_tensor *out_forward(em_ctx *c, const em_vae *v, const vae_coder *k, em_tensor *x) {
    x = em_group_norm(c, x, v->set.groups, k->norm_out.w, k->norm_out.b, v->set.eps);
    return unet_conv(c, &k->conv_out, em_silu(c, x));
}

/* post_quant_conv and the Decoder on one input (a whole latent or a tile) */
static em_tensor *decode_raw(em_ctx *c, const em_vae *v, em_tensor *z) {
    em_tensor *x = v->post_quant.w ? unet_conv(c, &v->post_quant, z) : z;
    const vae_coder *k = &v->dec;
    x = mid_forward(c, v, &k->mid, unet_conv(c, &k->conv_in, x));
    for (int i = 0; i < v->cfg.n_blocks; i++) {
        const unet_block *b = &k->blocks[i];
        for (int j = 0; j < b->n; j++) x = unet_resnet_forward(c, &v->set, &b->res[j], x, NULL);
        if (b->conv.w) x = unet_upsample(c, &b->conv, x);
    }
    return out_forward(c, v, k, x);
}

/* the Encoder and quant_conv: the moments [N, 2 latent_channels, h, w] */
static em_tensor *encode_raw(em_ctx *c, const em_vae *v, em_tensor *image) {
    const vae_coder *k = &v->enc;
    em_tensor *x = unet_conv(c, &k->conv_in, image);
    for (int i = 0; i < v->cfg.n_blocks; i++) {
        const unet_block *b = &k->blocks[i];
        for (int j = 0; j < b->n; j++) x = unet_resnet_forward(c, &v->set, &b->res[j], x, NULL);
        if (b->conv.w) x = unet_downsample(c, &v->set, &b->conv, x);
    }
    x = out_forward(c, v, k, mid_forward(c, v, &k->mid, x));
    return v->quant.w ? unet_conv(c, &v->quant, x) : x;
}

em_vae_tiling em_vae_default_tiling(const em_vae *v) {
    em_vae_tiling t = {0, 0, 0};
    if (!v) return t;
    t.tile_sample_min_size = v->cfg.sample_size[0];
    /* int(sample_size / 2 ** (len(block_out_channels) - 1)) */
    t.tile_latent_min_size =
        (int64_t)((double)v->cfg.sample_size[0] / (double)((int64_t)1 << (v->cfg.n_blocks - 1)));
    t.tile_overlap_factor = 0.25;
    return t;
}

static bool check_tiling(em_ctx *c, const em_vae_tiling *t) {
    /* the strides: int(latent * (1 - f)) for decode, int(sample * (1 - f)) for encode */
    if (t->tile_sample_min_size < 1 || t->tile_latent_min_size < 1 ||
        !(t->tile_overlap_factor >= 0 && t->tile_overlap_factor < 1) ||
        (int64_t)((double)t->tile_latent_min_size * (1 - t->tile_overlap_factor)) < 1 ||
        (int64_t)((double)t->tile_sample_min_size * (1 - t->tile_overlap_factor)) < 1) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP,
                    "tiling: tile_sample_min_size %lld, tile_latent_min_size %lld, "
                    "tile_overlap_factor %g: the sizes must be >= 1 and the overlap in [0, 1) "
                    "leaving a stride of at least one pixel",
                    (long long)t->tile_sample_min_size, (long long)t->tile_latent_min_size,
                    t->tile_overlap_factor);
        return false;
    }
    return true;
}

/* The decoder (the encoder and quant_conv) on x: in tiles when t is given and x is larger than
 * a tile (diffusers' _decode / _encode). In the current scope; NULL with the error. */
static em_tensor *code_one(em_ctx *c, const em_vae *v, em_tensor *x, const em_vae_tiling *t,
                           bool dec) {
    vae_tile_fn fn = dec ? decode_raw : encode_raw;
    int64_t in = !t ? 0 : dec ? t->tile_latent_min_size : t->tile_sample_min_size;
    int64_t out = !t ? 0 : dec ? t->tile_sample_min_size : t->tile_latent_min_size;
    if (t && (em_tensor_dim(x, 2) > in || em_tensor_dim(x, 3) > in))
        return vae_tiled(c, v, x, in, out, t->tile_overlap_factor, fn);
    return fn(c, v, x);
}

/* code_one on the batch x, or with slicing on one image at a time (AutoencoderKL.decode /
 * encode with use_slicing: x.split(1), each coded, torch.cat), each image's intermediates
 * released before the next. In the current scope; NULL with the error. */
#define CAT_MAX 64 /* the tensors one em_cat takes (ember/ops.h) */

static em_tensor *code(em_ctx *c, const em_vae *v, em_tensor *x, const em_vae_tiling *t,
                       bool dec) {
    int64_t n = em_tensor_dim(x, 0);
    if (v->slicing && n > 1) {
        em_tensor **parts = calloc((size_t)n, sizeof *parts);
        if (!parts) {
            em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
            return NULL;
        }
        int64_t i = 0;
        for (; i < n; i++) {
            em_scope_push(c);
            parts[i] = em_keep(c, code_one(c, v, em_narrow(c, x, 0, i, 1), t, dec));
            em_scope_pop(c);
            if (!parts[i]) break;
        }
        /* torch.cat, in groups of what one em_cat takes, then of the groups */
        for (int64_t m = n; i == n && m > 1 && !em_ctx_status(c);) {
            int64_t k = 0;
            for (int64_t j = 0; j < m; j += CAT_MAX, k++)
                parts[k] = m - j == 1 ? parts[j]
                                      : em_cat(c, parts + j,
                                               (int)(m - j < CAT_MAX ? m - j : CAT_MAX),
                                               0);
            m = k;
        }
        em_tensor *out = i == n ? parts[0] : NULL;
        free(parts);
        return out;
    }
    return code_one(c, v, x, t, dec);
}

static em_tensor *decode(em_ctx *c, em_vae *v, em_tensor *z, const em_vae_tiling *t) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!v || !z) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "decode: %s is NULL", v ? "the latents" : "vae");
        return NULL;
    }
    if (!check_input(c, v, z, "latents", v->cfg.latent_channels, "latent_channels")) return NULL;
    if (t && !check_tiling(c, t)) return NULL;
    em_scope_push(c);
    em_tensor *x = em_keep(c, code(c, v, z, t, true));
    em_scope_pop(c);
    return x;
}

em_tensor *em_vae_decode(em_ctx *c, em_vae *v, em_tensor *z) { return decode(c, v, z, NULL); }

em_tensor *em_vae_decode_tiled(em_ctx *c, em_vae *v, em_tensor *z, const em_vae_tiling *t) {
    em_vae_tiling d = em_vae_default_tiling(v);
    return decode(c, v, z, t ? t : &d);
}

static em_status encode(em_ctx *c, em_vae *v, em_tensor *image, const em_vae_tiling *t,
                        em_vae_latent_dist *out) {
    if (!c || em_ctx_status(c)) return c ? em_ctx_status(c) : EM_ERR_INVALID_ARG;
    if (out) memset(out, 0, sizeof *out);
    if (!v || !image || !out)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "encode: vae, image or out is NULL");
    if (!check_input(c, v, image, "image", v->cfg.in_channels, "in_channels"))
        return em_ctx_status(c);
    if (t && !check_tiling(c, t)) return em_ctx_status(c);
    em_scope_push(c);
    em_tensor *x = code(c, v, image, t, false);
    /* DiagonalGaussianDistribution: torch.chunk(moments, 2, dim=1), logvar clamped */
    em_tensor *parts[2] = {NULL, NULL};
    if (x && em_split(c, x, v->cfg.latent_channels, 1, parts, 2) == 2) {
        out->mean = em_keep(c, em_contiguous(c, parts[0]));
        out->logvar = em_keep(c, em_clamp(c, parts[1], -30.0, 20.0));
    }
    em_scope_pop(c);
    if (em_ctx_status(c) || !out->mean || !out->logvar) {
        memset(out, 0, sizeof *out);
        return em_ctx_status(c) ? em_ctx_status(c)
                                : em_ctx_fail(c, EM_ERR_INTERNAL, OP, "encode produced nothing");
    }
    return EM_OK;
}

em_status em_vae_encode(em_ctx *c, em_vae *v, em_tensor *image, em_vae_latent_dist *out) {
    return encode(c, v, image, NULL, out);
}

em_status em_vae_encode_tiled(em_ctx *c, em_vae *v, em_tensor *image, const em_vae_tiling *t,
                              em_vae_latent_dist *out) {
    em_vae_tiling d = em_vae_default_tiling(v);
    return encode(c, v, image, t ? t : &d, out);
}

em_tensor *em_vae_latent_sample(em_ctx *c, const em_vae_latent_dist *d, em_tensor *noise) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!d || !d->mean || !d->logvar || !noise) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "latent sample: the distribution or noise is NULL");
        return NULL;
    }
    char a[160], b[160];
    bool same = em_tensor_ndim(noise) == em_tensor_ndim(d->mean);
    for (int i = 0; same && i < em_tensor_ndim(noise); i++)
        same = em_tensor_dim(noise, i) == em_tensor_dim(d->mean, i);
    if (!same || em_tensor_dtype(noise) != em_tensor_dtype(d->mean) ||
        em_tensor_device(noise) != em_tensor_device(d->mean)) {
        em_status st = !same ? EM_ERR_SHAPE
                       : em_tensor_dtype(noise) != em_tensor_dtype(d->mean) ? EM_ERR_DTYPE
                                                                           : EM_ERR_DEVICE;
        em_ctx_fail(c, st, OP, "latent sample: noise %s on %s must match the mean %s on %s",
                    em_tensor_sig(noise, a, sizeof a), em_device_name(em_tensor_device(noise)),
                    em_tensor_sig(d->mean, b, sizeof b),
                    em_device_name(em_tensor_device(d->mean)));
        return NULL;
    }
    em_scope_push(c);
    em_tensor *std = em_exp(c, em_mul_scalar(c, d->logvar, 0.5));
    em_tensor *x = em_keep(c, em_add(c, d->mean, em_mul(c, std, noise)));
    em_scope_pop(c);
    return x;
}

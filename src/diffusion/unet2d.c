/* UNet2DModel and UNet2DConditionModel (diffusers 0.42, models/unets/unet_2d.py and
 * unet_2d_condition.py): loading a component folder onto a device and the forward over Ember's
 * eager ops. The two share their layout (time embedding, down/mid/up blocks of resnets, skips);
 * the conditional one has Transformer2DModels where the other has self-attention. The blocks are
 * in unet_blocks.c and unet_transformer.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/unet_impl.h"
#include "diffusion/weights.h"

#define OP "UNet2DModel"
#define OP_COND "UNet2DConditionModel"

em_unet2d_options em_unet2d_default_options(void) {
    return (em_unet2d_options){.device = NULL, .dtype = EM_F32};
}

const em_unet2d_config *em_unet2d_get_config(const em_unet2d *u) { return u ? &u->cfg : NULL; }

em_device *em_unet2d_device(const em_unet2d *u) { return u ? u->dev : NULL; }

void em_unet2d_free(em_unet2d *u) {
    if (!u) return;
    for (int i = 0; i < EM_UNET2D_MAX_BLOCKS; i++) {
        unet_block_free(&u->down[i]);
        unet_block_free(&u->up[i]);
    }
    unet_block_free(&u->mid);
    unet_param *ps[] = {&u->time_l1, &u->time_l2, &u->class_l1, &u->class_l2, &u->add_l1,
                        &u->add_l2, &u->conv_in, &u->norm_out, &u->conv_out};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) unet_param_free(ps[i]);
    em_tensor_release(u->freqs);
    em_tensor_release(u->add_freqs);
    em_tensor_release(u->time_proj);
    em_tensor_release(u->class_table);
    for (int i = 0; i < u->n_params; i++) free(u->param_names[i]);
    free(u->param_names);
    free(u->params); /* borrowed from the fields above */
    free(u->config_json);
    free(u->dir);
    free(u);
}

/* ---------------------------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------------------------- */

/* Timesteps' frequencies exp(-ln(10000) * i / (half - freq_shift)) for an embedding `width`
 * wide, rounded at each step to f32 as get_timestep_embedding computes them, into *out. */
static bool make_freqs(em_ctx *c, em_unet2d *u, int64_t width, em_tensor **out) {
    int64_t half = width / 2;
    float *f = malloc((size_t)(half ? half : 1) * sizeof *f);
    if (!f) return em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory"), false;
    float scale = (float)-log(10000.0), den = (float)((double)half - u->cfg.freq_shift);
    for (int64_t i = 0; i < half; i++) {
        float e = scale * (float)i;
        f[i] = expf(e / den);
    }
    em_tensor *t = em_from_host_on(c, u->dev, EM_F32, 2, (int64_t[]){1, half}, f);
    free(f);
    *out = t ? em_detach(c, t) : NULL;
    return *out != NULL;
}

static bool load_time(unet_loader *l) {
    em_unet2d *u = l->u;
    const em_unet2d_config *cfg = &u->cfg;
    int64_t c0 = cfg->block_out_channels[0], d = cfg->time_embed_dim, tin = c0;
    unet_param p = {0};
    switch (cfg->time_embedding) {
    case EM_UNET2D_TIME_POSITIONAL:
        if (!make_freqs(l->c, u, c0, &u->freqs)) return false;
        break;
    case EM_UNET2D_TIME_FOURIER:
        tin = 2 * c0;
        if (!unet_load_param(l, &p, "", "time_proj", false, 1, (int64_t[]){c0})) return false;
        break;
    case EM_UNET2D_TIME_LEARNED:
        if (!unet_load_param(l, &p, "", "time_proj", false, 2,
                             (int64_t[]){cfg->num_train_timesteps, c0}))
            return false;
        break;
    }
    u->time_proj = p.w;
    if (!unet_load_param(l, &u->time_l1, "time_embedding", "linear_1", true, 2,
                         (int64_t[]){d, tin}) ||
        !unet_load_param(l, &u->time_l2, "time_embedding", "linear_2", true, 2,
                         (int64_t[]){d, d}))
        return false;
    /* text_time: add_embedding's input width is the config's, which the pipeline's pooled
     * embeds (text_encoder_2's projection_dim) must then match */
    if (cfg->text_time &&
        (!make_freqs(l->c, u, cfg->addition_time_embed_dim, &u->add_freqs) ||
         !unet_load_param(l, &u->add_l1, "add_embedding", "linear_1", true, 2,
                          (int64_t[]){d, cfg->projection_class_embeddings_input_dim}) ||
         !unet_load_param(l, &u->add_l2, "add_embedding", "linear_2", true, 2,
                          (int64_t[]){d, d})))
        return false;
    switch (cfg->class_embedding) {
    case EM_UNET2D_CLASS_TABLE:
        if (!unet_load_param(l, &p, "", "class_embedding", false, 2,
                             (int64_t[]){cfg->num_class_embeds, d}))
            return false;
        u->class_table = p.w;
        break;
    case EM_UNET2D_CLASS_TIMESTEP:
        return unet_load_param(l, &u->class_l1, "class_embedding", "linear_1", true, 2,
                               (int64_t[]){d, tin}) &&
               unet_load_param(l, &u->class_l2, "class_embedding", "linear_2", true, 2,
                               (int64_t[]){d, d});
    case EM_UNET2D_CLASS_NONE:
    case EM_UNET2D_CLASS_IDENTITY: break;
    }
    return true;
}

/* The Transformer2DModel of a cross-attention block over `ch` channels with the heads and
 * layers of down block `i` (the up blocks' reversed, the mid block's the last). */
static bool load_xformer(unet_loader *l, unet_xformer *x, const char *prefix, int64_t ch,
                         int i) {
    const em_unet2d_config *cfg = &l->u->cfg;
    return unet_load_xformer(l, x, prefix, ch, cfg->attn_heads[i], cfg->transformer_layers[i],
                             cfg->cross_attention_dim, cfg->norm_num_groups,
                             cfg->use_linear_projection);
}

/* A resnet down/upsampler (downsample_type / upsample_type "resnet"). */
static bool load_resampler(unet_loader *l, unet_block *b, const char *prefix, int64_t ch,
                           bool up) {
    b->resampler = calloc(1, sizeof *b->resampler);
    if (!b->resampler) return em_ctx_fail(l->c, EM_ERR_OOM, OP, "out of memory"), false;
    b->resampler->up = up;
    b->resampler->down = !up;
    return unet_load_resnet(l, b->resampler, prefix, ch, ch);
}

static bool load_down(unet_loader *l) {
    const em_unet2d_config *cfg = &l->u->cfg;
    char pre[128];
    int64_t out = cfg->block_out_channels[0];
    for (int i = 0; i < cfg->n_blocks; i++) {
        int64_t in = out;
        out = cfg->block_out_channels[i];
        bool attn = cfg->down_blocks[i] == EM_UNET2D_BLOCK_ATTN;
        bool xattn = cfg->down_blocks[i] == EM_UNET2D_BLOCK_CROSS_ATTN;
        unet_block *b = &l->u->down[i];
        if (!unet_alloc_block(l, b, (int)cfg->layers_per_block, attn) ||
            (xattn && !unet_alloc_xformers(l, b, b->n)))
            return false;
        for (int j = 0; j < b->n; j++) {
            snprintf(pre, sizeof pre, "down_blocks.%d.resnets.%d", i, j);
            if (!unet_load_resnet(l, &b->res[j], pre, j ? out : in, out)) return false;
            snprintf(pre, sizeof pre, "down_blocks.%d.attentions.%d", i, j);
            if (attn && !unet_load_attn(l, &b->attn[j], pre, out, cfg->norm_num_groups, 1.0))
                return false;
            if (xattn && !load_xformer(l, &b->xf[j], pre, out, i)) return false;
        }
        if (i == cfg->n_blocks - 1) continue; /* the last block does not downsample */
        snprintf(pre, sizeof pre, "down_blocks.%d.downsamplers.0", i);
        /* DownBlock2D always downsamples with a conv; downsample_type is for attention blocks */
        if (attn && cfg->downsample_resnet) {
            if (!load_resampler(l, b, pre, out, false)) return false;
        } else if (!unet_load_param(l, &b->conv, pre, "conv", true, 4,
                                    (int64_t[]){out, out, 3, 3}))
            return false;
    }
    return true;
}

static bool load_mid(unet_loader *l) {
    const em_unet2d_config *cfg = &l->u->cfg;
    if (!cfg->mid_block) return true;
    int64_t ch = cfg->block_out_channels[cfg->n_blocks - 1];
    unet_block *b = &l->u->mid;
    if (!unet_alloc_block(l, b, 2, cfg->add_attention) ||
        (cfg->mid_cross_attn && !unet_alloc_xformers(l, b, b->n)))
        return false;
    for (int j = 0; j < 2; j++) {
        char pre[64];
        snprintf(pre, sizeof pre, "mid_block.resnets.%d", j);
        if (!unet_load_resnet(l, &b->res[j], pre, ch, ch)) return false;
        b->res[j].out_scale = cfg->mid_block_scale_factor;
    }
    if (cfg->mid_cross_attn) /* UNetMidBlock2DCrossAttn: resnet, transformer, resnet */
        return load_xformer(l, &b->xf[0], "mid_block.attentions.0", ch, cfg->n_blocks - 1);
    if (!cfg->add_attention) return true;
    /* UNetMidBlock2D: attn_norm_num_groups, else the resnets' groups with the default time
     * shift and no group norm at all with scale_shift */
    int64_t groups = cfg->attn_norm_num_groups ? cfg->attn_norm_num_groups
                     : cfg->scale_shift        ? 0
                                               : cfg->norm_num_groups;
    return unet_load_attn(l, &b->attn[0], "mid_block.attentions.0", ch, groups,
                          cfg->mid_block_scale_factor);
}

static bool load_up(unet_loader *l) {
    const em_unet2d_config *cfg = &l->u->cfg;
    int n = cfg->n_blocks;
    char pre[128];
    int64_t out = cfg->block_out_channels[n - 1];
    for (int i = 0; i < n; i++) {
        int64_t prev = out;
        out = cfg->block_out_channels[n - 1 - i];
        int64_t in = cfg->block_out_channels[n - 1 - (i + 1 < n ? i + 1 : n - 1)];
        bool attn = cfg->up_blocks[i] == EM_UNET2D_BLOCK_ATTN;
        bool xattn = cfg->up_blocks[i] == EM_UNET2D_BLOCK_CROSS_ATTN;
        unet_block *b = &l->u->up[i];
        if (!unet_alloc_block(l, b, (int)cfg->layers_per_block + 1, attn) ||
            (xattn && !unet_alloc_xformers(l, b, b->n)))
            return false;
        for (int j = 0; j < b->n; j++) {
            int64_t skip = j == b->n - 1 ? in : out, rin = j == 0 ? prev : out;
            snprintf(pre, sizeof pre, "up_blocks.%d.resnets.%d", i, j);
            if (!unet_load_resnet(l, &b->res[j], pre, rin + skip, out)) return false;
            snprintf(pre, sizeof pre, "up_blocks.%d.attentions.%d", i, j);
            if (attn && !unet_load_attn(l, &b->attn[j], pre, out, cfg->norm_num_groups, 1.0))
                return false;
            if (xattn && !load_xformer(l, &b->xf[j], pre, out, n - 1 - i)) return false;
        }
        if (i == n - 1) continue;
        snprintf(pre, sizeof pre, "up_blocks.%d.upsamplers.0", i);
        if (attn && cfg->upsample_resnet) {
            if (!load_resampler(l, b, pre, out, true)) return false;
        } else if (!unet_load_param(l, &b->conv, pre, "conv", true, 4,
                                    (int64_t[]){out, out, 3, 3}))
            return false;
    }
    return true;
}

static bool load_weights(unet_loader *l, void *user) {
    (void)user;
    const em_unet2d_config *cfg = &l->u->cfg;
    int64_t c0 = cfg->block_out_channels[0], ki = cfg->conv_in_kernel, ko = cfg->conv_out_kernel;
    return unet_load_param(l, &l->u->conv_in, "", "conv_in", true, 4,
                           (int64_t[]){c0, cfg->in_channels, ki, ki}) &&
           load_time(l) && load_down(l) && load_mid(l) && load_up(l) &&
           unet_load_param(l, &l->u->norm_out, "", "conv_norm_out", true, 1, (int64_t[]){c0}) &&
           unet_load_param(l, &l->u->conv_out, "", "conv_out", true, 4,
                           (int64_t[]){cfg->out_channels, c0, ko, ko});
}

em_unet2d *unet2d_build(em_ctx *c, const em_unet2d_config *cfg, const char *dir,
                        const em_unet2d_options *o, struct em_torch_generator *init) {
    em_unet2d_options opts = o ? *o : em_unet2d_default_options();
    if (!diff_check_load_args(c, OP, dir, opts.dtype)) return NULL;
    em_unet2d *u = calloc(1, sizeof *u);
    if (!u || !(u->dir = strdup(dir))) {
        free(u);
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    u->cfg = *cfg;
    if (u->cfg.upcast_attention && opts.dtype != EM_F32) {
        /* diffusers then computes the scores in f32; Ember's attention does not promise that */
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP_COND,
                    "%s/config.json: upcast_attention with %s weights is not supported (f32 is)",
                    dir, em_dtype_name(opts.dtype));
        em_unet2d_free(u);
        return NULL;
    }
    u->dtype = opts.dtype;
    u->dev = opts.device ? em_device_get(c, opts.device) : em_ctx_device(c);
    u->set.groups = u->cfg.norm_num_groups;
    u->set.eps = u->cfg.norm_eps;
    u->set.act = unet_act_from_name(u->cfg.act_fn);
    u->set.scale_shift = u->cfg.scale_shift;
    u->set.downsample_padding = u->cfg.downsample_padding;
    unet_loader l = {.c = c, .u = u, .dir = dir, .op = u->cfg.conditional ? OP_COND : OP, .dtype = u->dtype, .dev = u->dev,
                     .temb_dim = u->cfg.time_embed_dim, .scale_shift = u->cfg.scale_shift,
                     .head_dim = u->cfg.attention_head_dim, .init = init};
    if (u->dev && !init) {
        unet_load_folder(&l, load_weights, NULL);
    } else if (u->dev) { /* em_unet2d_create: drawn, not read */
        em_scope_push(c);
        load_weights(&l, NULL);
        em_scope_pop(c);
    }
    if (em_ctx_status(c)) {
        em_unet2d_free(u);
        return NULL;
    }
    return u;
}

em_unet2d *em_unet2d_load(em_ctx *c, const char *dir, const em_unet2d_options *o) {
    if (!c || em_ctx_status(c)) return NULL;
    em_unet2d_config cfg;
    if (!diff_check_load_args(c, OP, dir, o ? o->dtype : EM_F32) ||
        em_unet2d_config_load(c, dir, &cfg) != EM_OK)
        return NULL;
    return unet2d_build(c, &cfg, dir, o, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * Forward
 * ------------------------------------------------------------------------------------------- */

/* Timesteps(width, flip_sin_to_cos, freq_shift) of the f32 column col [n, 1] with the
 * frequencies freqs [1, width / 2]: [n, width]. */
static em_tensor *sinusoid(em_ctx *c, const em_unet2d *u, em_tensor *col, em_tensor *freqs,
                           int64_t width, int64_t n) {
    em_tensor *arg = em_mul(c, col, freqs); /* [n, width/2] */
    em_tensor *s = em_sin(c, arg), *co = em_cos(c, arg);
    em_tensor *parts[3] = {u->cfg.flip_sin_to_cos ? co : s, u->cfg.flip_sin_to_cos ? s : co, NULL};
    int np = 2;
    if (width % 2) { /* an odd width gets a zero column */
        em_device *prev = em_ctx_device(c);
        em_ctx_set_device(c, u->dev);
        parts[np++] = em_zeros(c, EM_F32, 2, (int64_t[]){n, 1});
        em_ctx_set_device(c, prev);
    }
    return em_cat(c, parts, np, 1);
}

/* time_proj of f32 values t [N]: the positional, fourier or learned embedding [N, tin]. */
static em_tensor *time_proj(em_ctx *c, const em_unet2d *u, em_tensor *t, int64_t n) {
    int64_t c0 = u->cfg.block_out_channels[0];
    em_tensor *col = em_reshape(c, t, 2, (int64_t[]){n, 1});
    switch (u->cfg.time_embedding) {
    case EM_UNET2D_TIME_LEARNED: return em_embedding(c, u->time_proj, em_cast(c, t, EM_I64));
    case EM_UNET2D_TIME_FOURIER: {
        /* x[:, None] * W[None, :] * 2 * pi of log(x), sin before cos */
        em_tensor *w = em_reshape(c, u->time_proj, 2, (int64_t[]){1, c0});
        em_tensor *p = em_mul(c, em_log(c, col), em_cast(c, w, EM_F32));
        p = em_mul_scalar(c, em_mul_scalar(c, p, 2.0), M_PI);
        em_tensor *parts[2] = {em_sin(c, p), em_cos(c, p)};
        return em_cat(c, parts, 2, 1);
    }
    case EM_UNET2D_TIME_POSITIONAL: break;
    }
    return sinusoid(c, u, col, u->freqs, c0, n);
}

/* TimestepEmbedding: linear_2(act(linear_1(x))); act is SiLU in UNet2DModel, the config's
 * act_fn in UNet2DConditionModel */
static em_tensor *embed_mlp(em_ctx *c, const em_unet2d *u, const unet_param *l1,
                            const unet_param *l2, em_tensor *x) {
    x = em_cast(c, x, u->dtype);
    em_tensor *h = em_linear(c, x, l1->w, l1->b);
    h = u->cfg.conditional ? unet_act_apply(c, u->set.act, h) : em_silu(c, h);
    return em_linear(c, h, l2->w, l2->b);
}

static bool check_inputs(em_ctx *c, const em_unet2d *u, em_tensor *sample, em_tensor *timestep,
                         em_tensor *labels) {
    const em_unet2d_config *cfg = &u->cfg;
    char sig[160];
    int nd = em_tensor_ndim(sample);
    if (nd != 4) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP, "sample must be [N, C, H, W], got %s (model %s)",
                    em_tensor_sig(sample, sig, sizeof sig), u->dir);
        return false;
    }
    int64_t n = em_tensor_dim(sample, 0), ch = em_tensor_dim(sample, 1), mult = 1;
    for (int i = 1; i < cfg->n_blocks; i++) mult *= 2;
    if (ch != cfg->in_channels) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP,
                    "sample %s has %lld channels, the model (%s) takes in_channels = %lld",
                    em_tensor_sig(sample, sig, sizeof sig), (long long)ch, u->dir,
                    (long long)cfg->in_channels);
        return false;
    }
    if (em_tensor_dim(sample, 2) % mult || em_tensor_dim(sample, 3) % mult ||
        !em_tensor_dim(sample, 2) || !em_tensor_dim(sample, 3)) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP,
                    "sample %s: height and width must be positive multiples of %lld (the model "
                    "%s downsamples %d times)",
                    em_tensor_sig(sample, sig, sizeof sig), (long long)mult, u->dir,
                    cfg->n_blocks - 1);
        return false;
    }
    if (em_tensor_dtype(sample) != u->dtype) {
        em_ctx_fail(c, EM_ERR_DTYPE, OP, "sample %s: the model (%s) is %s",
                    em_tensor_sig(sample, sig, sizeof sig), u->dir, em_dtype_name(u->dtype));
        return false;
    }
    em_tensor *on[3] = {sample, timestep, labels};
    for (int i = 0; i < 3; i++)
        if (on[i] && em_tensor_device(on[i]) != u->dev) {
            em_ctx_fail(c, EM_ERR_DEVICE, OP, "%s is on %s, the model (%s) on %s",
                        i == 0 ? "sample" : i == 1 ? "timestep" : "class_labels",
                        em_device_name(em_tensor_device(on[i])), u->dir,
                        em_device_name(u->dev));
            return false;
        }
    int64_t tn = em_tensor_numel(timestep);
    if (em_tensor_ndim(timestep) > 1 || (tn != 1 && tn != n)) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP,
                    "timestep %s must be 0-d, [1] or [N] with N = %lld (the batch of the sample)",
                    em_tensor_sig(timestep, sig, sizeof sig), (long long)n);
        return false;
    }
    if (cfg->class_embedding == EM_UNET2D_CLASS_NONE) {
        if (labels)
            em_ctx_fail(c, EM_ERR_INVALID_ARG, OP,
                        "class_labels given but the model (%s) has no class embedding", u->dir);
        return !labels;
    }
    if (!labels) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP,
                    "the model (%s) is class-conditioned: class_labels are required", u->dir);
        return false;
    }
    bool ident = cfg->class_embedding == EM_UNET2D_CLASS_IDENTITY;
    bool ok = ident ? em_tensor_ndim(labels) == 2 && em_tensor_dim(labels, 0) == n &&
                          em_tensor_dim(labels, 1) == cfg->time_embed_dim
                    : em_tensor_ndim(labels) == 1 && em_tensor_dim(labels, 0) == n;
    if (cfg->class_embedding == EM_UNET2D_CLASS_TABLE && em_dtype_is_float(em_tensor_dtype(labels)))
        ok = false;
    if (!ok)
        em_ctx_fail(c, EM_ERR_SHAPE, OP, "class_labels %s: expected %s [%lld%s]",
                    em_tensor_sig(labels, sig, sizeof sig),
                    cfg->class_embedding == EM_UNET2D_CLASS_TABLE ? "integer labels" : "values",
                    (long long)n, ident ? ", time_embed_dim" : "");
    return ok;
}

/* The time (and class) embedding [N, D] in the model's dtype. */
static em_tensor *embed(em_ctx *c, const em_unet2d *u, em_tensor *tf, em_tensor *labels,
                        int64_t n) {
    em_tensor *emb = embed_mlp(c, u, &u->time_l1, &u->time_l2, time_proj(c, u, tf, n));
    switch (u->cfg.class_embedding) {
    case EM_UNET2D_CLASS_NONE: return emb;
    case EM_UNET2D_CLASS_TABLE: return em_add(c, emb, em_embedding(c, u->class_table, labels));
    case EM_UNET2D_CLASS_TIMESTEP: {
        em_tensor *lf = em_cast(c, labels, EM_F32);
        return em_add(c, emb, embed_mlp(c, u, &u->class_l1, &u->class_l2,
                                        time_proj(c, u, lf, n)));
    }
    case EM_UNET2D_CLASS_IDENTITY: break;
    }
    return em_add(c, emb, em_cast(c, labels, u->dtype));
}

/* addition_embed_type "text_time": add_embedding(cat([text_embeds, add_time_proj(time_ids
 * .flatten()).reshape(N, -1)], -1)), TimestepEmbedding's default SiLU (not the config's act_fn),
 * [N, D] in the model's dtype. */
static em_tensor *text_time_embed(em_ctx *c, const em_unet2d *u, const em_unet2d_added_cond *a,
                                  int64_t n) {
    int64_t w = u->cfg.addition_time_embed_dim, k = em_tensor_dim(a->time_ids, 1);
    em_tensor *ids = em_reshape(c, em_cast(c, a->time_ids, EM_F32), 2, (int64_t[]){k * n, 1});
    em_tensor *te = em_reshape(c, sinusoid(c, u, ids, u->add_freqs, w, k * n), 2,
                               (int64_t[]){n, k * w});
    em_tensor *parts[2] = {em_cast(c, a->text_embeds, EM_F32), te};
    em_tensor *x = em_cast(c, em_cat(c, parts, 2, 1), u->dtype);
    em_tensor *h = em_silu(c, em_linear(c, x, u->add_l1.w, u->add_l1.b));
    return em_linear(c, h, u->add_l2.w, u->add_l2.b);
}

/* The added conditioning of a text_time model: time_ids [N, K] (SDXL base's K = 6, a refiner's
 * 5) and text_embeds [N, projection_class_embeddings_input_dim - K * addition_time_embed_dim]
 * (floating, any float dtype), on the model's device; none for the other models. */
static bool check_added(em_ctx *c, const em_unet2d *u, em_tensor *sample,
                        const em_unet2d_added_cond *a) {
    char s1[160], s2[160];
    bool have = a && (a->text_embeds || a->time_ids);
    if (!u->cfg.text_time) {
        if (have)
            em_ctx_fail(c, EM_ERR_INVALID_ARG, OP_COND, "text_embeds / time_ids given but the "
                        "model (%s) has no addition_embed_type 'text_time'", u->dir);
        return !have;
    }
    if (!a || !a->text_embeds || !a->time_ids) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP_COND,
                    "the model (%s) has addition_embed_type 'text_time': it needs text_embeds "
                    "[N, %lld] and time_ids [N, 6] (em_unet2d_forward_added)", u->dir,
                    (long long)u->cfg.text_embeds_dim);
        return false;
    }
    int64_t n = em_tensor_dim(sample, 0);
    em_tensor *te = a->text_embeds, *ti = a->time_ids;
    /* the time ids' count as given (diffusers' add_embedding takes any split of its input) */
    int64_t k = em_tensor_ndim(ti) == 2 && em_tensor_dim(ti, 1) > 0 ? em_tensor_dim(ti, 1) : 6;
    int64_t want = u->cfg.projection_class_embeddings_input_dim -
                   k * u->cfg.addition_time_embed_dim;
    if (em_tensor_ndim(te) != 2 || em_tensor_dim(te, 0) != n || em_tensor_dim(te, 1) != want ||
        want <= 0 || em_tensor_ndim(ti) != 2 || em_tensor_dim(ti, 0) != n) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP_COND,
                    "text_embeds %s and time_ids %s: expected [%lld, %lld] and [%lld, %lld] (the "
                    "sample's batch; projection_class_embeddings_input_dim %lld - %lld * "
                    "addition_time_embed_dim %lld; model %s)", em_tensor_sig(te, s1, sizeof s1),
                    em_tensor_sig(ti, s2, sizeof s2), (long long)n, (long long)want, (long long)n,
                    (long long)k, (long long)u->cfg.projection_class_embeddings_input_dim,
                    (long long)k, (long long)u->cfg.addition_time_embed_dim, u->dir);
        return false;
    }
    if (!em_dtype_is_float(em_tensor_dtype(te)) || !em_dtype_is_float(em_tensor_dtype(ti)) ||
        em_tensor_device(te) != u->dev || em_tensor_device(ti) != u->dev) {
        em_ctx_fail(c, EM_ERR_DTYPE, OP_COND, "text_embeds %s on %s and time_ids %s on %s: both "
                    "must be floating, on the model's device %s (model %s)",
                    em_tensor_sig(te, s1, sizeof s1), em_device_name(em_tensor_device(te)),
                    em_tensor_sig(ti, s2, sizeof s2), em_device_name(em_tensor_device(ti)),
                    em_device_name(u->dev), u->dir);
        return false;
    }
    return true;
}

/* encoder_hidden_states [N, L, cross_attention_dim] of the model's dtype and device. */
static bool check_context(em_ctx *c, const em_unet2d *u, em_tensor *sample, em_tensor *ehs) {
    char sig[160];
    if (!ehs) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP_COND,
                    "the model (%s) needs encoder_hidden_states [N, L, %lld]", u->dir,
                    (long long)u->cfg.cross_attention_dim);
        return false;
    }
    if (em_tensor_ndim(ehs) != 3 || em_tensor_dim(ehs, 0) != em_tensor_dim(sample, 0) ||
        em_tensor_dim(ehs, 2) != u->cfg.cross_attention_dim || em_tensor_dim(ehs, 1) < 1) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP_COND,
                    "encoder_hidden_states %s: expected [%lld, L, %lld] (the sample's batch, the "
                    "model's cross_attention_dim; model %s)",
                    em_tensor_sig(ehs, sig, sizeof sig), (long long)em_tensor_dim(sample, 0),
                    (long long)u->cfg.cross_attention_dim, u->dir);
        return false;
    }
    if (em_tensor_dtype(ehs) != u->dtype || em_tensor_device(ehs) != u->dev) {
        em_ctx_fail(c, EM_ERR_DTYPE, OP_COND,
                    "encoder_hidden_states %s on %s: the model (%s) is %s on %s",
                    em_tensor_sig(ehs, sig, sizeof sig), em_device_name(em_tensor_device(ehs)),
                    u->dir, em_dtype_name(u->dtype), em_device_name(u->dev));
        return false;
    }
    return true;
}

static em_tensor *forward(em_ctx *c, em_unet2d *u, em_tensor *sample, em_tensor *timestep,
                          em_tensor *class_labels, em_tensor *ehs,
                          const em_unet2d_added_cond *added) {
    if (!check_inputs(c, u, sample, timestep, class_labels)) return NULL;
    const em_unet2d_config *cfg = &u->cfg;
    int64_t n = em_tensor_dim(sample, 0);
    em_scope_push(c);
    em_tensor *x = sample;
    if (cfg->center_input_sample) x = em_add_scalar(c, em_mul_scalar(c, x, 2.0), -1.0);
    /* timesteps * ones(N): one value per sample, as f32 (timesteps[:, None].float()) */
    em_tensor *tf = em_expand(c, em_reshape(c, em_cast(c, timestep, EM_F32), 1, (int64_t[]){-1}),
                              1, (int64_t[]){n});
    if (cfg->time_embedding == EM_UNET2D_TIME_LEARNED)
        tf = em_expand(c, em_reshape(c, timestep, 1, (int64_t[]){-1}), 1, (int64_t[]){n});
    em_tensor *temb = embed(c, u, tf, class_labels, n);
    if (cfg->text_time) temb = em_add(c, temb, text_time_embed(c, u, added, n));

    /* down: the skip stack holds conv_in's output and every resnet's and downsampler's */
    em_tensor *skips[1 + EM_UNET2D_MAX_BLOCKS * (EM_UNET2D_MAX_LAYERS + 1)];
    int ns = 0;
    x = unet_conv(c, &u->conv_in, x);
    skips[ns++] = x;
    for (int i = 0; i < cfg->n_blocks; i++) {
        const unet_block *b = &u->down[i];
        for (int j = 0; j < b->n; j++) {
            x = unet_resnet_forward(c, &u->set, &b->res[j], x, temb);
            if (b->attn) x = unet_attn_forward(c, &u->set, &b->attn[j], x);
            if (b->xf) x = unet_xformer_forward(c, &b->xf[j], x, ehs);
            skips[ns++] = x;
        }
        if (b->resampler) {
            x = unet_resnet_forward(c, &u->set, b->resampler, x, temb);
            skips[ns++] = x;
        } else if (b->conv.w) {
            x = unet_downsample(c, &u->set, &b->conv, x);
            skips[ns++] = x;
        }
    }
    if (cfg->mid_block) {
        x = unet_resnet_forward(c, &u->set, &u->mid.res[0], x, temb);
        if (u->mid.attn) x = unet_attn_forward(c, &u->set, &u->mid.attn[0], x);
        if (u->mid.xf) x = unet_xformer_forward(c, &u->mid.xf[0], x, ehs);
        x = unet_resnet_forward(c, &u->set, &u->mid.res[1], x, temb);
    }
    for (int i = 0; i < cfg->n_blocks; i++) {
        const unet_block *b = &u->up[i];
        for (int j = 0; j < b->n; j++) {
            em_tensor *pair[2] = {x, skips[--ns]};
            x = unet_resnet_forward(c, &u->set, &b->res[j], em_cat(c, pair, 2, 1), temb);
            if (b->attn) x = unet_attn_forward(c, &u->set, &b->attn[j], x);
            if (b->xf) x = unet_xformer_forward(c, &b->xf[j], x, ehs);
        }
        if (b->resampler)
            x = unet_resnet_forward(c, &u->set, b->resampler, x, temb);
        else if (b->conv.w)
            x = unet_upsample(c, &b->conv, x);
    }
    x = em_group_norm(c, x, u->set.groups, u->norm_out.w, u->norm_out.b, u->set.eps);
    x = unet_conv(c, &u->conv_out, em_silu(c, x));
    if (cfg->time_embedding == EM_UNET2D_TIME_FOURIER)
        x = em_div(c, x, em_cast(c, em_reshape(c, tf, 4, (int64_t[]){n, 1, 1, 1}), u->dtype));
    x = em_keep(c, x);
    em_scope_pop(c);
    return x;
}

em_tensor *em_unet2d_forward(em_ctx *c, em_unet2d *u, em_tensor *sample, em_tensor *timestep,
                             em_tensor *class_labels) {
    if (!c || em_ctx_status(c) || !sample || !timestep) return NULL;
    if (!u) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "model is NULL");
        return NULL;
    }
    if (u->cfg.conditional) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP_COND,
                    "the model (%s) is a UNet2DConditionModel: call em_unet2d_forward_cond with "
                    "encoder_hidden_states", u->dir);
        return NULL;
    }
    return forward(c, u, sample, timestep, class_labels, NULL, NULL);
}

em_tensor *em_unet2d_forward_cond(em_ctx *c, em_unet2d *u, em_tensor *sample,
                                  em_tensor *timestep, em_tensor *encoder_hidden_states) {
    return em_unet2d_forward_added(c, u, sample, timestep, encoder_hidden_states, NULL);
}

em_tensor *em_unet2d_forward_added(em_ctx *c, em_unet2d *u, em_tensor *sample,
                                   em_tensor *timestep, em_tensor *encoder_hidden_states,
                                   const em_unet2d_added_cond *added) {
    if (!c || em_ctx_status(c) || !sample || !timestep) return NULL;
    if (!u) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP_COND, "model is NULL");
        return NULL;
    }
    if (!u->cfg.conditional) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP,
                    "the model (%s) is a UNet2DModel: it takes no encoder_hidden_states "
                    "(em_unet2d_forward)", u->dir);
        return NULL;
    }
    if (!check_context(c, u, sample, encoder_hidden_states) ||
        (em_tensor_ndim(sample) == 4 && !check_added(c, u, sample, added)))
        return NULL;
    return forward(c, u, sample, timestep, NULL, encoder_hidden_states, added);
}

em_tensor *em_unet2d_forward_at(em_ctx *c, em_unet2d *u, em_tensor *sample, double timestep,
                                em_tensor *class_labels) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!u) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "model is NULL");
        return NULL;
    }
    float v = (float)timestep;
    em_scope_push(c);
    em_tensor *t = em_from_host_on(c, u->dev, EM_F32, 0, NULL, &v);
    em_tensor *out = em_keep(c, em_unet2d_forward(c, u, sample, t, class_labels));
    em_scope_pop(c);
    return out;
}

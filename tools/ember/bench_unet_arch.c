/* The presets' configs and the walk over a UNet2DConditionModel's layers (bench_unet_arch.h).
 * The walk mirrors diffusers' UNet2DConditionModel.__init__ (unet_2d_condition.py) and its
 * blocks, and counts FLOPs analytically from the shapes it visits: a KxK conv 2*N*Ho*Wo*Co*Ci*K*K,
 * a linear 2*rows*in*out, attention 2*N*Tq*Tk*C for QK^T and as much for PV. The benchmark's
 * peer counts the same forward with torch.utils.flop_counter, which checks both. */
#include "bench_unet_arch.h"

#include <stdio.h>
#include <string.h>

/* SD 1.5's unet/config.json as runwayml/stable-diffusion-v1-5 ships it (the fields diffusers
 * would fill with the same defaults left out). */
static const char SD15[] =
    "{\"_class_name\": \"UNet2DConditionModel\", \"act_fn\": \"silu\", \"attention_head_dim\": 8,"
    " \"block_out_channels\": [320, 640, 1280, 1280], \"center_input_sample\": false,"
    " \"cross_attention_dim\": 768, \"down_block_types\": [\"CrossAttnDownBlock2D\","
    " \"CrossAttnDownBlock2D\", \"CrossAttnDownBlock2D\", \"DownBlock2D\"],"
    " \"downsample_padding\": 1, \"flip_sin_to_cos\": true, \"freq_shift\": 0, \"in_channels\": 4,"
    " \"layers_per_block\": 2, \"mid_block_scale_factor\": 1, \"norm_eps\": 1e-05,"
    " \"norm_num_groups\": 32, \"out_channels\": 4, \"sample_size\": 64,"
    " \"up_block_types\": [\"UpBlock2D\", \"CrossAttnUpBlock2D\", \"CrossAttnUpBlock2D\","
    " \"CrossAttnUpBlock2D\"]}";

/* The same layout, small: two blocks of 32 and 64 channels, 4 heads, 32-wide text states. */
static const char TINY[] =
    "{\"_class_name\": \"UNet2DConditionModel\", \"act_fn\": \"silu\", \"attention_head_dim\": 4,"
    " \"block_out_channels\": [32, 64], \"cross_attention_dim\": 32,"
    " \"down_block_types\": [\"CrossAttnDownBlock2D\", \"DownBlock2D\"], \"in_channels\": 4,"
    " \"layers_per_block\": 2, \"norm_num_groups\": 32, \"out_channels\": 4, \"sample_size\": 8,"
    " \"up_block_types\": [\"UpBlock2D\", \"CrossAttnUpBlock2D\"]}";

const char *bench_unet_preset_config(const char *preset) {
    if (!strcmp(preset, "sd15")) return SD15;
    if (!strcmp(preset, "tiny")) return TINY;
    return NULL;
}

typedef struct walk {
    const em_unet2d_config *cfg;
    int64_t n, L; /* batch, text tokens */
    bench_unet_param_fn param;
    void *user;
    bench_unet_flops f;
    bool ok;
} walk;

static void p(walk *k, const char *prefix, const char *name, int ndim, const int64_t *shape) {
    if (!k->ok || !k->param) return;
    char key[256];
    snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", name);
    k->ok = k->param(k->user, key, ndim, shape);
}

static void norm(walk *k, const char *prefix, const char *name, int64_t ch) {
    char pre[200];
    snprintf(pre, sizeof pre, "%s%s%s", prefix, *prefix ? "." : "", name);
    p(k, pre, "weight", 1, (int64_t[]){ch});
    p(k, pre, "bias", 1, (int64_t[]){ch});
}

/* A KxK conv whose output is ho x wo. */
static void conv(walk *k, const char *prefix, const char *name, int64_t ci, int64_t co,
                 int64_t ks, int64_t ho, int64_t wo) {
    char pre[200];
    snprintf(pre, sizeof pre, "%s%s%s", prefix, *prefix ? "." : "", name);
    p(k, pre, "weight", 4, (int64_t[]){co, ci, ks, ks});
    p(k, pre, "bias", 1, (int64_t[]){co});
    double f = 2.0 * (double)(k->n * ho * wo * co * ci * ks * ks);
    if (ks == 1) k->f.conv1x1 += f;
    else k->f.conv3x3 += f;
}

static void linear(walk *k, const char *prefix, const char *name, int64_t in, int64_t out,
                   bool bias, int64_t rows) {
    char pre[200];
    snprintf(pre, sizeof pre, "%s%s%s", prefix, *prefix ? "." : "", name);
    p(k, pre, "weight", 2, (int64_t[]){out, in});
    if (bias) p(k, pre, "bias", 1, (int64_t[]){out});
    k->f.linear += 2.0 * (double)(rows * in * out);
}

/* ResnetBlock2D at h x w. */
static void resnet(walk *k, const char *pre, int64_t in, int64_t out, int64_t h, int64_t w) {
    norm(k, pre, "norm1", in);
    conv(k, pre, "conv1", in, out, 3, h, w);
    linear(k, pre, "time_emb_proj", k->cfg->time_embed_dim, out, true, k->n);
    norm(k, pre, "norm2", out);
    conv(k, pre, "conv2", out, out, 3, h, w);
    if (in != out) conv(k, pre, "conv_shortcut", in, out, 1, h, w);
}

/* Attention (to_q/k/v without bias, to_out.0 with) of t queries over kv keys of width kv_dim. */
static void attention(walk *k, const char *pre, int64_t ch, int64_t t, int64_t kv, int64_t kv_dim) {
    linear(k, pre, "to_q", ch, ch, false, k->n * t);
    linear(k, pre, "to_k", kv_dim, ch, false, k->n * kv);
    linear(k, pre, "to_v", kv_dim, ch, false, k->n * kv);
    linear(k, pre, "to_out.0", ch, ch, true, k->n * t);
    k->f.attention += 4.0 * (double)(k->n * t * kv * ch);
}

/* Transformer2DModel over ch channels at h x w with `layers` BasicTransformerBlocks. */
static void xformer(walk *k, const char *prefix, int64_t ch, int64_t layers, int64_t h,
                    int64_t w) {
    int64_t t = h * w, xd = k->cfg->cross_attention_dim;
    norm(k, prefix, "norm", ch);
    if (k->cfg->use_linear_projection) linear(k, prefix, "proj_in", ch, ch, true, k->n * t);
    else conv(k, prefix, "proj_in", ch, ch, 1, h, w);
    for (int64_t i = 0; i < layers; i++) {
        char pre[256], sub[300];
        snprintf(pre, sizeof pre, "%.200s.transformer_blocks.%lld", prefix, (long long)i);
        norm(k, pre, "norm1", ch);
        norm(k, pre, "norm2", ch);
        norm(k, pre, "norm3", ch);
        snprintf(sub, sizeof sub, "%s.attn1", pre);
        attention(k, sub, ch, t, t, ch);
        snprintf(sub, sizeof sub, "%s.attn2", pre);
        attention(k, sub, ch, t, k->L, xd);
        snprintf(sub, sizeof sub, "%s.ff.net", pre);
        linear(k, sub, "0.proj", ch, 8 * ch, true, k->n * t); /* GEGLU: 2 x 4 * ch */
        linear(k, sub, "2", 4 * ch, ch, true, k->n * t);
    }
    if (k->cfg->use_linear_projection) linear(k, prefix, "proj_out", ch, ch, true, k->n * t);
    else conv(k, prefix, "proj_out", ch, ch, 1, h, w);
}

bool bench_unet_walk(const em_unet2d_config *cfg, int64_t batch, int64_t h, int64_t w,
                     int64_t ctx_len, bench_unet_param_fn param, void *user,
                     bench_unet_flops *flops) {
    walk k = {.cfg = cfg, .n = batch, .L = ctx_len, .param = param, .user = user, .ok = true};
    int nb = cfg->n_blocks;
    if (!cfg->conditional || nb < 1 || nb > EM_UNET2D_MAX_BLOCKS ||
        cfg->time_embedding != EM_UNET2D_TIME_POSITIONAL || cfg->class_embedding ||
        cfg->scale_shift || !cfg->mid_cross_attn)
        return false;
    for (int i = 0; i < nb; i++)
        if (cfg->down_blocks[i] == EM_UNET2D_BLOCK_ATTN || cfg->up_blocks[i] == EM_UNET2D_BLOCK_ATTN)
            return false;
    const int64_t *ch = cfg->block_out_channels, lpb = cfg->layers_per_block;
    int64_t skips[EM_UNET2D_MAX_BLOCKS * (EM_UNET2D_MAX_LAYERS + 1) + 1];
    int ns = 0;
    char pre[128];
    conv(&k, "", "conv_in", cfg->in_channels, ch[0], cfg->conv_in_kernel, h, w);
    linear(&k, "time_embedding", "linear_1", ch[0], cfg->time_embed_dim, true, batch);
    linear(&k, "time_embedding", "linear_2", cfg->time_embed_dim, cfg->time_embed_dim, true,
           batch);
    skips[ns++] = ch[0];
    int64_t out = ch[0];
    for (int i = 0; i < nb; i++) {
        int64_t in = out;
        out = ch[i];
        for (int64_t j = 0; j < lpb; j++) {
            snprintf(pre, sizeof pre, "down_blocks.%d.resnets.%lld", i, (long long)j);
            resnet(&k, pre, j ? out : in, out, h, w);
            if (cfg->down_blocks[i] == EM_UNET2D_BLOCK_CROSS_ATTN) {
                snprintf(pre, sizeof pre, "down_blocks.%d.attentions.%lld", i, (long long)j);
                xformer(&k, pre, out, cfg->transformer_layers[i], h, w);
            }
            skips[ns++] = out;
        }
        if (i < nb - 1) {
            h = (h - 1) / 2 + 1; /* stride 2, padding 1 */
            w = (w - 1) / 2 + 1;
            snprintf(pre, sizeof pre, "down_blocks.%d.downsamplers.0", i);
            conv(&k, pre, "conv", out, out, 3, h, w);
            skips[ns++] = out;
        }
    }
    resnet(&k, "mid_block.resnets.0", out, out, h, w);
    xformer(&k, "mid_block.attentions.0", out, cfg->transformer_layers[nb - 1], h, w);
    resnet(&k, "mid_block.resnets.1", out, out, h, w);
    int64_t prev = out;
    for (int i = 0; i < nb; i++) {
        out = ch[nb - 1 - i];
        for (int64_t j = 0; j <= lpb; j++) {
            snprintf(pre, sizeof pre, "up_blocks.%d.resnets.%lld", i, (long long)j);
            resnet(&k, pre, (j ? out : prev) + skips[--ns], out, h, w);
            if (cfg->up_blocks[i] == EM_UNET2D_BLOCK_CROSS_ATTN) {
                snprintf(pre, sizeof pre, "up_blocks.%d.attentions.%lld", i, (long long)j);
                xformer(&k, pre, out, cfg->transformer_layers[nb - 1 - i], h, w);
            }
        }
        if (i < nb - 1) {
            h *= 2;
            w *= 2;
            snprintf(pre, sizeof pre, "up_blocks.%d.upsamplers.0", i);
            conv(&k, pre, "conv", out, out, 3, h, w);
        }
        prev = out;
    }
    norm(&k, "", "conv_norm_out", ch[0]);
    conv(&k, "", "conv_out", ch[0], cfg->out_channels, cfg->conv_out_kernel, h, w);
    if (flops) *flops = k.f;
    return k.ok;
}

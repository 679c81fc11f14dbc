/* UNet2DConditionModel's config.json (diffusers 0.42, models/unets/unet_2d_condition.py): every
 * field of its __init__ read with its default; the values of the features Ember does not
 * implement (added/class embeddings, dual or only cross-attention, other block types ...) refused
 * by name. */
#include <stdio.h>
#include <string.h>

#include "diffusion/unet_config_impl.h"
#include "diffusion/weights.h"

/* A field that must be absent or null (the feature it turns on is not implemented). */
static bool want_null(cfg_src *s, const char *key) {
    json_t *v = ucfg_field(s, key);
    if (!v) return true;
    char val[64];
    if (json_is_string(v))
        snprintf(val, sizeof val, "%s", json_string_value(v));
    else if (json_is_integer(v))
        snprintf(val, sizeof val, "%lld", (long long)json_integer_value(v));
    else
        snprintf(val, sizeof val, "%s", json_is_true(v) ? "true" : "(non-null)");
    return ucfg_unsupported(s, key, val, "only null is");
}

/* A flag that must be false (or a list of falses, as only_cross_attention may be). */
static bool want_false(cfg_src *s, const char *key) {
    json_t *v = ucfg_field(s, key);
    if (!v || json_is_false(v)) return true;
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) if (!json_is_false(e)) return ucfg_unsupported(
            s, key, "a list with true", "only false is");
        return true;
    }
    if (!json_is_boolean(v)) return ucfg_wrong(s, key, v, "true or false");
    return ucfg_unsupported(s, key, "true", "only false is");
}

/* An int for every block, or a list of n_blocks ints (attention_head_dim,
 * transformer_layers_per_block). */
static bool per_block(cfg_src *s, const char *key, int64_t *out, int n) {
    json_t *v = ucfg_field(s, key);
    if (!v) return true;
    if (json_is_integer(v)) {
        int64_t x = 0;
        if (!ucfg_get_int(s, key, &x, 1)) return false;
        for (int i = 0; i < n; i++) out[i] = x;
        return true;
    }
    if (!json_is_array(v)) return ucfg_wrong(s, key, v, "an integer or a list of integers");
    if (json_array_size(v) != (size_t)n) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, s->op, "%s: '%s' has %zu entries for %d blocks", s->file,
                    key, json_array_size(v), n);
        return false;
    }
    for (int i = 0; i < n; i++) {
        json_t *e = json_array_get(v, (size_t)i);
        if (json_is_array(e))
            return ucfg_unsupported(s, key, "a nested list", "an integer per block is");
        if (!json_is_integer(e) || json_integer_value(e) < 1 || json_integer_value(e) > 4096)
            return ucfg_wrong(s, key, e, "a list of integers from 1 to 4096");
        out[i] = (int64_t)json_integer_value(e);
    }
    return true;
}

/* SDXL's added conditioning: addition_embed_type "text_time" (the only value besides null that
 * Ember implements), its addition_time_embed_dim and projection_class_embeddings_input_dim,
 * which must leave a positive width for the pooled text embeds next to the 6 time ids. */
static bool text_time_parse(cfg_src *s, em_unet2d_config *cfg) {
    char aet[32] = "";
    int64_t atd = 0, pci = 0;
    if (!ucfg_get_str(s, "addition_embed_type", aet, sizeof aet) ||
        !ucfg_get_int(s, "addition_time_embed_dim", &atd, 1) ||
        !ucfg_get_int(s, "projection_class_embeddings_input_dim", &pci, 1))
        return false;
    if (!aet[0]) return true; /* the other two serve nothing then (class_embed_type is null) */
    if (strcmp(aet, "text_time"))
        return ucfg_unsupported(s, "addition_embed_type", aet, "null and text_time are");
    if (!atd || !pci) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, s->op, "%s: addition_embed_type 'text_time' needs "
                    "addition_time_embed_dim and projection_class_embeddings_input_dim", s->file);
        return false;
    }
    if (pci <= 6 * atd) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, s->op, "%s: projection_class_embeddings_input_dim %lld "
                    "must exceed 6 * addition_time_embed_dim = %lld (the 6 time ids' embeddings; "
                    "the rest is the pooled text embeds' width)", s->file, (long long)pci,
                    (long long)(6 * atd));
        return false;
    }
    cfg->text_time = true;
    cfg->addition_time_embed_dim = atd;
    cfg->projection_class_embeddings_input_dim = pci;
    cfg->text_embeds_dim = pci - 6 * atd;
    return true;
}

static void cond_defaults(em_unet2d_config *cfg) {
    ucfg_set_defaults(cfg);
    cfg->conditional = true;
    cfg->in_channels = cfg->out_channels = 4;
    const int64_t boc[4] = {320, 640, 1280, 1280};
    for (int i = 0; i < 4; i++) {
        cfg->block_out_channels[i] = boc[i];
        cfg->down_blocks[i] = i < 3 ? EM_UNET2D_BLOCK_CROSS_ATTN : EM_UNET2D_BLOCK_PLAIN;
        cfg->up_blocks[i] = i > 0 ? EM_UNET2D_BLOCK_CROSS_ATTN : EM_UNET2D_BLOCK_PLAIN;
    }
    cfg->mid_block = cfg->mid_cross_attn = true;
    cfg->add_attention = false;
    cfg->cross_attention_dim = 1280;
}

bool unet_cond_config_parse(cfg_src *s, em_unet2d_config *cfg) {
    s->cond = true;
    s->op = "UNet2DConditionModel";
    cond_defaults(cfg);
    char tet[32] = "", mid[64] = "UNetMidBlock2DCrossAttn", shift[32] = "",
         attn_type[32] = "";
    int n_down = 0, n_up = 0;
    int64_t ted = 0;
    double dropout = 0, out_scale = 1.0;
    json_t *midv = json_object_get(s->obj, "mid_block_type");
    if (midv && json_is_null(midv)) mid[0] = 0;
    json_t *lpb = ucfg_field(s, "layers_per_block");
    if (lpb && json_is_array(lpb))
        return ucfg_unsupported(s, "layers_per_block", "a list", "one integer is");
    json_t *cad = ucfg_field(s, "cross_attention_dim");
    if (cad && json_is_array(cad))
        return ucfg_unsupported(s, "cross_attention_dim", "a list", "one integer is");
    if (ucfg_field(s, "norm_num_groups") == NULL && json_object_get(s->obj, "norm_num_groups"))
        return ucfg_unsupported(s, "norm_num_groups", "null", "an integer is");
    if (!ucfg_get_sample_size(s, cfg) || !ucfg_get_int(s, "in_channels", &cfg->in_channels, 1) ||
        !ucfg_get_int(s, "out_channels", &cfg->out_channels, 1) ||
        !ucfg_get_bool(s, "center_input_sample", &cfg->center_input_sample) ||
        !ucfg_get_bool(s, "flip_sin_to_cos", &cfg->flip_sin_to_cos) ||
        !ucfg_get_num(s, "freq_shift", &cfg->freq_shift) || !ucfg_get_channels(s, cfg) ||
        !ucfg_get_blocks(s, "down_block_types", true, cfg->down_blocks, &n_down) ||
        !ucfg_get_blocks(s, "up_block_types", false, cfg->up_blocks, &n_up) ||
        !ucfg_get_str(s, "mid_block_type", mid, sizeof mid) ||
        !ucfg_get_int(s, "layers_per_block", &cfg->layers_per_block, 1) ||
        !ucfg_get_int(s, "downsample_padding", &cfg->downsample_padding, 0) ||
        !ucfg_get_num(s, "mid_block_scale_factor", &cfg->mid_block_scale_factor) ||
        !ucfg_get_num(s, "dropout", &dropout) ||
        !ucfg_get_str(s, "act_fn", cfg->act_fn, sizeof cfg->act_fn) ||
        !ucfg_get_int(s, "norm_num_groups", &cfg->norm_num_groups, 1) ||
        !ucfg_get_num(s, "norm_eps", &cfg->norm_eps) ||
        !ucfg_get_int(s, "cross_attention_dim", &cfg->cross_attention_dim, 1) ||
        !ucfg_get_bool(s, "use_linear_projection", &cfg->use_linear_projection) ||
        !ucfg_get_bool(s, "upcast_attention", &cfg->upcast_attention) ||
        !ucfg_get_str(s, "resnet_time_scale_shift", shift, sizeof shift) ||
        !ucfg_get_num(s, "resnet_out_scale_factor", &out_scale) ||
        !ucfg_get_str(s, "time_embedding_type", tet, sizeof tet) ||
        !ucfg_get_int(s, "time_embedding_dim", &ted, 1) ||
        !ucfg_get_int(s, "conv_in_kernel", &cfg->conv_in_kernel, 1) ||
        !ucfg_get_int(s, "conv_out_kernel", &cfg->conv_out_kernel, 1) ||
        !ucfg_get_str(s, "attention_type", attn_type, sizeof attn_type))
        return false;
    /* what Ember does not implement, refused by name */
    if (!text_time_parse(s, cfg)) return false;
    const char *nulls[] = {"reverse_transformer_layers_per_block", "encoder_hid_dim",
                           "encoder_hid_dim_type", "num_attention_heads", "class_embed_type",
                           "num_class_embeds", "time_embedding_act_fn",
                           "timestep_post_act", "time_cond_proj_dim", "cross_attention_norm"};
    for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
        if (!want_null(s, nulls[i])) return false;
    const char *falses[] = {"only_cross_attention", "dual_cross_attention",
                            "resnet_skip_time_act", "class_embeddings_concat",
                            "mid_block_only_cross_attention"};
    for (size_t i = 0; i < sizeof falses / sizeof falses[0]; i++)
        if (!want_false(s, falses[i])) return false;
    if (tet[0] && strcmp(tet, "positional"))
        return ucfg_unsupported(s, "time_embedding_type", tet, "positional is");
    if (mid[0] && strcmp(mid, "UNetMidBlock2DCrossAttn"))
        return ucfg_unsupported(s, "mid_block_type", mid, "UNetMidBlock2DCrossAttn and null are");
    cfg->mid_block = cfg->mid_cross_attn = mid[0] != 0;
    if (strcmp(cfg->act_fn, "silu") && strcmp(cfg->act_fn, "swish") &&
        strcmp(cfg->act_fn, "gelu") && strcmp(cfg->act_fn, "relu"))
        return ucfg_unsupported(s, "act_fn", cfg->act_fn, "silu, swish, gelu and relu are");
    if (shift[0] && strcmp(shift, "default") && strcmp(shift, "scale_shift"))
        return ucfg_unsupported(s, "resnet_time_scale_shift", shift,
                                "default and scale_shift are");
    cfg->scale_shift = !strcmp(shift, "scale_shift");
    if (attn_type[0] && strcmp(attn_type, "default"))
        return ucfg_unsupported(s, "attention_type", attn_type, "default is");
    if (out_scale != 1.0) {
        char v[32];
        snprintf(v, sizeof v, "%g", out_scale);
        return ucfg_unsupported(s, "resnet_out_scale_factor", v, "1.0 is");
    }
    if (cfg->conv_in_kernel % 2 == 0 || cfg->conv_out_kernel % 2 == 0) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, s->op, "%s: conv_in_kernel and conv_out_kernel must be "
                    "odd (got %lld and %lld)", s->file, (long long)cfg->conv_in_kernel,
                    (long long)cfg->conv_out_kernel);
        return false;
    }
    if (!(cfg->norm_eps > 0) || !(cfg->mid_block_scale_factor != 0)) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, s->op,
                    "%s: norm_eps must be > 0 and mid_block_scale_factor non-zero", s->file);
        return false;
    }
    int nd = n_down ? n_down : 4, nu = n_up ? n_up : 4;
    if (nd != cfg->n_blocks || nu != cfg->n_blocks) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, s->op,
                    "%s: %d block_out_channels but %d down_block_types and %d up_block_types",
                    s->file, cfg->n_blocks, nd, nu);
        return false;
    }
    for (int i = 0; i < cfg->n_blocks; i++) {
        cfg->attn_heads[i] = 8;
        cfg->transformer_layers[i] = 1;
    }
    /* attention_head_dim is the head count in UNet2DConditionModel (num_attention_heads
     * defaults to it, a naming diffusers keeps for its old checkpoints) */
    if (!per_block(s, "attention_head_dim", cfg->attn_heads, cfg->n_blocks) ||
        !per_block(s, "transformer_layers_per_block", cfg->transformer_layers, cfg->n_blocks))
        return false;
    cfg->attention_head_dim = cfg->attn_heads[0];
    if (!diff_check_blocks(s->c, s->op, s->file, cfg->block_out_channels, cfg->n_blocks,
                           cfg->norm_num_groups, cfg->layers_per_block, EM_UNET2D_MAX_LAYERS))
        return false;
    for (int i = 0; i < cfg->n_blocks; i++)
        if (cfg->attn_heads[i] > cfg->block_out_channels[i]) {
            em_ctx_fail(s->c, EM_ERR_FORMAT, s->op, "%s: %lld attention heads for the %lld "
                        "channels of block %d", s->file, (long long)cfg->attn_heads[i],
                        (long long)cfg->block_out_channels[i], i);
            return false;
        }
    cfg->time_embed_dim = ted ? ted : 4 * cfg->block_out_channels[0];
    return true;
}

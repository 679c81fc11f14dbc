/* UNet2DModel's config.json: every field of diffusers 0.42's UNet2DModel.__init__ read with its
 * default, values Ember does not implement refused by name. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/file_read.h"
#include "diffusion/weights.h"
#include "ember/diffusion.h"
#include "diffusion/unet_config_impl.h"
#include "io/config/config_impl.h"

#define OP "UNet2DModel"
#define MAX_CONFIG_BYTES (1 << 20)
/* bound on every size, so products of sizes cannot overflow */
#define MAX_SIZE ((int64_t)1 << 30)

bool ucfg_wrong(cfg_src *s, const char *key, const json_t *v, const char *want) {
    em_ctx_fail(s->c, EM_ERR_FORMAT, s->op, "%s: field '%s' is %s, expected %s", s->file, key,
                em_cfg_kind(v), want);
    return false;
}

/* The value of key, NULL when absent or null (the default applies). */
json_t *ucfg_field(cfg_src *s, const char *key) {
    json_t *v = json_object_get(s->obj, key);
    return v && !json_is_null(v) ? v : NULL;
}

bool ucfg_get_int(cfg_src *s, const char *key, int64_t *out, int64_t min) {
    json_t *v = ucfg_field(s, key);
    if (!v) return true;
    if (!json_is_integer(v)) return ucfg_wrong(s, key, v, "an integer");
    *out = (int64_t)json_integer_value(v);
    if (*out < min || *out > MAX_SIZE) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, s->op, "%s: field '%s' is %lld, expected %lld to %lld",
                    s->file, key, (long long)*out, (long long)min, (long long)MAX_SIZE);
        return false;
    }
    return true;
}

bool ucfg_get_num(cfg_src *s, const char *key, double *out) {
    json_t *v = ucfg_field(s, key);
    if (!v) return true;
    if (!json_is_number(v)) return ucfg_wrong(s, key, v, "a number");
    *out = json_number_value(v);
    return true;
}

bool ucfg_get_bool(cfg_src *s, const char *key, bool *out) {
    json_t *v = ucfg_field(s, key);
    if (!v) return true;
    if (!json_is_boolean(v)) return ucfg_wrong(s, key, v, "true or false");
    *out = json_is_true(v);
    return true;
}

/* A string field into buf ("" stays when absent or null, so callers test buf[0]). */
bool ucfg_get_str(cfg_src *s, const char *key, char *buf, size_t n) {
    json_t *v = ucfg_field(s, key);
    if (!v) return true;
    if (!json_is_string(v)) return ucfg_wrong(s, key, v, "a string");
    snprintf(buf, n, "%s", json_string_value(v));
    return true;
}

bool ucfg_unsupported(cfg_src *s, const char *key, const char *value, const char *supported) {
    em_ctx_fail(s->c, EM_ERR_UNSUPPORTED, s->op, "%s '%s' is not supported (%s; in %s)", key, value,
                supported, s->file);
    return false;
}

/* down_block_types / up_block_types: a list of n known names into types (n in *n, or checked
 * against it when *n > 0). */
bool ucfg_get_blocks(cfg_src *s, const char *key, bool down, em_unet2d_block_type *types,
                       int *n) {
    json_t *v = ucfg_field(s, key);
    if (!v) return true; /* defaults already set */
    if (!json_is_array(v)) return ucfg_wrong(s, key, v, "a list of block names");
    size_t len = json_array_size(v);
    if (len < 1 || len > EM_UNET2D_MAX_BLOCKS) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, s->op, "%s: '%s' has %zu entries, expected 1 to %d",
                    s->file, key, len, EM_UNET2D_MAX_BLOCKS);
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_string(e)) return ucfg_wrong(s, key, e, "a list of block names");
        const char *name = json_string_value(e);
        /* get_down_block / get_up_block drop a "UNetRes" prefix */
        if (!strncmp(name, "UNetRes", 7)) name += 7;
        const char *plain = down ? "DownBlock2D" : "UpBlock2D";
        /* UNet2DModel's attention blocks self-attend; UNet2DConditionModel's cross-attend */
        const char *attn = s->cond ? (down ? "CrossAttnDownBlock2D" : "CrossAttnUpBlock2D")
                                   : (down ? "AttnDownBlock2D" : "AttnUpBlock2D");
        if (!strcmp(name, plain))
            types[i] = EM_UNET2D_BLOCK_PLAIN;
        else if (!strcmp(name, attn))
            types[i] = s->cond ? EM_UNET2D_BLOCK_CROSS_ATTN : EM_UNET2D_BLOCK_ATTN;
        else {
            char what[64], supported[96];
            snprintf(what, sizeof what, "%s entry", key);
            snprintf(supported, sizeof supported, "%s and %s are", plain, attn);
            return ucfg_unsupported(s, what, json_string_value(e), supported);
        }
    }
    *n = (int)len;
    return true;
}

bool ucfg_get_channels(cfg_src *s, em_unet2d_config *cfg) {
    json_t *v = ucfg_field(s, "block_out_channels");
    if (!v) return true;
    if (!json_is_array(v)) return ucfg_wrong(s, "block_out_channels", v, "a list of integers");
    size_t len = json_array_size(v);
    if (len < 1 || len > EM_UNET2D_MAX_BLOCKS) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, s->op,
                    "%s: 'block_out_channels' has %zu entries, expected 1 to %d", s->file, len,
                    EM_UNET2D_MAX_BLOCKS);
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_integer(e) || json_integer_value(e) < 1 || json_integer_value(e) > MAX_SIZE)
            return ucfg_wrong(s, "block_out_channels", e, "a list of positive integers");
        cfg->block_out_channels[i] = (int64_t)json_integer_value(e);
    }
    cfg->n_blocks = (int)len;
    return true;
}

bool ucfg_get_sample_size(cfg_src *s, em_unet2d_config *cfg) {
    json_t *v = ucfg_field(s, "sample_size");
    if (!v) return true;
    if (json_is_integer(v) && json_integer_value(v) > 0) {
        cfg->sample_size[0] = cfg->sample_size[1] = (int64_t)json_integer_value(v);
        return true;
    }
    if (json_is_array(v) && json_array_size(v) == 2 &&
        json_is_integer(json_array_get(v, 0)) && json_is_integer(json_array_get(v, 1)) &&
        json_integer_value(json_array_get(v, 0)) > 0 && json_integer_value(json_array_get(v, 1)) > 0) {
        cfg->sample_size[0] = (int64_t)json_integer_value(json_array_get(v, 0));
        cfg->sample_size[1] = (int64_t)json_integer_value(json_array_get(v, 1));
        return true;
    }
    return ucfg_wrong(s, "sample_size", v, "a positive integer or [height, width]");
}

void ucfg_set_defaults(em_unet2d_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->in_channels = cfg->out_channels = 3;
    cfg->flip_sin_to_cos = true;
    cfg->n_blocks = 4;
    const int64_t boc[4] = {224, 448, 672, 896};
    for (int i = 0; i < 4; i++) {
        cfg->block_out_channels[i] = boc[i];
        cfg->down_blocks[i] = i == 0 ? EM_UNET2D_BLOCK_PLAIN : EM_UNET2D_BLOCK_ATTN;
        cfg->up_blocks[i] = i == 3 ? EM_UNET2D_BLOCK_PLAIN : EM_UNET2D_BLOCK_ATTN;
    }
    cfg->layers_per_block = 2;
    cfg->mid_block = true;
    cfg->add_attention = true;
    cfg->mid_block_scale_factor = 1.0;
    cfg->downsample_padding = 1;
    snprintf(cfg->act_fn, sizeof cfg->act_fn, "silu");
    cfg->attention_head_dim = 8;
    cfg->norm_num_groups = 32;
    cfg->norm_eps = 1e-5;
    cfg->conv_in_kernel = cfg->conv_out_kernel = 3;
}

static bool parse(cfg_src *s, em_unet2d_config *cfg) {
    char cls[64] = "", tet[32] = "", mid[64] = "UNetMidBlock2D", down_t[32] = "",
         up_t[32] = "", shift[32] = "", cet[32] = "";
    ucfg_set_defaults(cfg);
    if (!ucfg_get_str(s, "_class_name", cls, sizeof cls)) return false;
    if (!strcmp(cls, "UNet2DConditionModel")) return unet_cond_config_parse(s, cfg);
    if (cls[0] && strcmp(cls, "UNet2DModel"))
        return ucfg_unsupported(s, "_class_name", cls,
                                "this loader reads UNet2DModel and UNet2DConditionModel");
    json_t *midv = json_object_get(s->obj, "mid_block_type");
    if (midv && json_is_null(midv)) mid[0] = 0; /* null: no mid block (absent: the default) */
    int n_down = 0, n_up = 0;
    int64_t ted = 0;
    if (!ucfg_get_sample_size(s, cfg) || !ucfg_get_int(s, "in_channels", &cfg->in_channels, 1) ||
        !ucfg_get_int(s, "out_channels", &cfg->out_channels, 1) ||
        !ucfg_get_bool(s, "center_input_sample", &cfg->center_input_sample) ||
        !ucfg_get_str(s, "time_embedding_type", tet, sizeof tet) ||
        !ucfg_get_int(s, "time_embedding_dim", &ted, 1) || !ucfg_get_num(s, "freq_shift", &cfg->freq_shift) ||
        !ucfg_get_bool(s, "flip_sin_to_cos", &cfg->flip_sin_to_cos) || !ucfg_get_channels(s, cfg) ||
        !ucfg_get_blocks(s, "down_block_types", true, cfg->down_blocks, &n_down) ||
        !ucfg_get_blocks(s, "up_block_types", false, cfg->up_blocks, &n_up) ||
        !ucfg_get_str(s, "mid_block_type", mid, sizeof mid) ||
        !ucfg_get_int(s, "layers_per_block", &cfg->layers_per_block, 1) ||
        !ucfg_get_num(s, "mid_block_scale_factor", &cfg->mid_block_scale_factor) ||
        !ucfg_get_int(s, "downsample_padding", &cfg->downsample_padding, 0) ||
        !ucfg_get_str(s, "downsample_type", down_t, sizeof down_t) ||
        !ucfg_get_str(s, "upsample_type", up_t, sizeof up_t) ||
        !ucfg_get_str(s, "act_fn", cfg->act_fn, sizeof cfg->act_fn) ||
        !ucfg_get_int(s, "norm_num_groups", &cfg->norm_num_groups, 1) ||
        !ucfg_get_int(s, "attn_norm_num_groups", &cfg->attn_norm_num_groups, 1) ||
        !ucfg_get_num(s, "norm_eps", &cfg->norm_eps) ||
        !ucfg_get_str(s, "resnet_time_scale_shift", shift, sizeof shift) ||
        !ucfg_get_bool(s, "add_attention", &cfg->add_attention) ||
        !ucfg_get_str(s, "class_embed_type", cet, sizeof cet) ||
        !ucfg_get_int(s, "num_class_embeds", &cfg->num_class_embeds, 1) ||
        !ucfg_get_int(s, "num_train_timesteps", &cfg->num_train_timesteps, 1))
        return false;
    /* attention_head_dim: null means one head over all channels */
    json_t *ahd = json_object_get(s->obj, "attention_head_dim");
    if (ahd && json_is_null(ahd))
        cfg->attention_head_dim = 0;
    else if (!ucfg_get_int(s, "attention_head_dim", &cfg->attention_head_dim, 1))
        return false;
    double dropout = 0;
    if (!ucfg_get_num(s, "dropout", &dropout)) return false; /* inference: dropout does nothing */

    if (!tet[0] || !strcmp(tet, "positional"))
        cfg->time_embedding = EM_UNET2D_TIME_POSITIONAL;
    else if (!strcmp(tet, "fourier"))
        cfg->time_embedding = EM_UNET2D_TIME_FOURIER;
    else if (!strcmp(tet, "learned"))
        cfg->time_embedding = EM_UNET2D_TIME_LEARNED;
    else
        return ucfg_unsupported(s, "time_embedding_type", tet, "positional, fourier and learned are");
    if (cfg->time_embedding == EM_UNET2D_TIME_LEARNED && !cfg->num_train_timesteps) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, s->op,
                    "%s: time_embedding_type 'learned' needs num_train_timesteps", s->file);
        return false;
    }
    if (mid[0] && strcmp(mid, "UNetMidBlock2D"))
        return ucfg_unsupported(s, "mid_block_type", mid, "UNetMidBlock2D and null are");
    cfg->mid_block = mid[0] != 0;
    if (down_t[0] && strcmp(down_t, "conv") && strcmp(down_t, "resnet"))
        return ucfg_unsupported(s, "downsample_type", down_t, "conv and resnet are");
    if (up_t[0] && strcmp(up_t, "conv") && strcmp(up_t, "resnet"))
        return ucfg_unsupported(s, "upsample_type", up_t, "conv and resnet are");
    cfg->downsample_resnet = !strcmp(down_t, "resnet");
    cfg->upsample_resnet = !strcmp(up_t, "resnet");
    if (strcmp(cfg->act_fn, "silu") && strcmp(cfg->act_fn, "swish") &&
        strcmp(cfg->act_fn, "gelu") && strcmp(cfg->act_fn, "relu"))
        return ucfg_unsupported(s, "act_fn", cfg->act_fn, "silu, swish, gelu and relu are");
    if (shift[0] && strcmp(shift, "default") && strcmp(shift, "scale_shift"))
        return ucfg_unsupported(s, "resnet_time_scale_shift", shift, "default and scale_shift are");
    cfg->scale_shift = !strcmp(shift, "scale_shift");
    if (!cet[0])
        cfg->class_embedding = cfg->num_class_embeds ? EM_UNET2D_CLASS_TABLE : EM_UNET2D_CLASS_NONE;
    else if (!strcmp(cet, "timestep"))
        cfg->class_embedding = EM_UNET2D_CLASS_TIMESTEP;
    else if (!strcmp(cet, "identity"))
        cfg->class_embedding = EM_UNET2D_CLASS_IDENTITY;
    else
        return ucfg_unsupported(s, "class_embed_type", cet, "null, timestep and identity are");
    if (!(cfg->norm_eps > 0) || !(cfg->mid_block_scale_factor != 0)) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, s->op,
                    "%s: norm_eps must be > 0 and mid_block_scale_factor non-zero", s->file);
        return false;
    }

    /* the sizes must agree, as UNet2DModel.__init__ requires */
    if (n_down && n_down != n_up) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, s->op,
                    "%s: %d down_block_types but %d up_block_types (they must be as many)",
                    s->file, n_down, n_up);
        return false;
    }
    if ((n_down ? n_down : 4) != cfg->n_blocks || (n_up ? n_up : 4) != cfg->n_blocks) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, s->op,
                    "%s: %d block_out_channels but %d down_block_types and %d up_block_types",
                    s->file, cfg->n_blocks, n_down ? n_down : 4, n_up ? n_up : 4);
        return false;
    }
    if (!diff_check_blocks(s->c, OP, s->file, cfg->block_out_channels, cfg->n_blocks,
                           cfg->norm_num_groups, cfg->layers_per_block, EM_UNET2D_MAX_LAYERS))
        return false;
    cfg->time_embed_dim = ted ? ted : 4 * cfg->block_out_channels[0];
    return true;
}

em_status em_unet2d_config_parse(em_ctx *c, const char *json, size_t n, const char *name,
                                em_unet2d_config *out) {
    if (!c || em_ctx_status(c)) return c ? em_ctx_status(c) : EM_ERR_INVALID_ARG;
    if (out) memset(out, 0, sizeof *out);
    if (!json || !out) return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "json or out is NULL");
    if (!name) name = "config.json";
    json_error_t jerr;
    json_t *root = json_loadb(json, n, 0, &jerr);
    if (!root || !json_is_object(root)) {
        if (root)
            em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s is not a JSON object", name);
        else
            em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s is not valid JSON: %s (line %d, column %d)",
                        name, jerr.text, jerr.line, jerr.column);
        json_decref(root);
        return em_ctx_status(c);
    }
    cfg_src s = {c, root, name, OP, false};
    bool ok = parse(&s, out);
    json_decref(root);
    if (!ok) {
        memset(out, 0, sizeof *out);
        return em_ctx_status(c);
    }
    return EM_OK;
}

em_status em_unet2d_config_load(em_ctx *c, const char *path, em_unet2d_config *out) {
    if (!c || em_ctx_status(c)) return c ? em_ctx_status(c) : EM_ERR_INVALID_ARG;
    if (out) memset(out, 0, sizeof *out);
    if (!path || !*path || !out)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "path or out is NULL or empty");
    struct stat sb;
    char file[4096];
    size_t pl = strlen(path);
    bool json_file = pl >= 5 && !strcmp(path + pl - 5, ".json");
    /* a folder, or what should have been one (the message then names its config.json) */
    if ((stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) || !json_file)
        snprintf(file, sizeof file, "%s%sconfig.json", path,
                 path[strlen(path) - 1] == '/' ? "" : "/");
    else
        snprintf(file, sizeof file, "%s", path);
    size_t len = 0;
    char *text = em_file_read(c, OP, file, MAX_CONFIG_BYTES, &len, NULL);
    if (!text) return em_ctx_status(c);
    em_status st = em_unet2d_config_parse(c, text, len, file, out);
    free(text);
    return st;
}

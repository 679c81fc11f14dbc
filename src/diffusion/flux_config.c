/* FluxTransformer2DModel's config.json: every field of diffusers 0.42's
 * FluxTransformer2DModel.__init__ read with its default (patch_size, in_channels, out_channels,
 * num_layers, num_single_layers, attention_head_dim, num_attention_heads, joint_attention_dim,
 * pooled_projection_dim, guidance_embeds, axes_dims_rope); values diffusers could not run
 * (axes not summing to the head dim, odd axes) refused by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/weights.h"
#include "ember/flux.h"
#include "io/config/config_impl.h"

#define OP "FluxTransformer2DModel"
/* bound on every size, so products of sizes cannot overflow */
#define MAX_SIZE ((int64_t)1 << 24)

static bool get_size(em_cfg_src *s, const char *key, int64_t *v, int64_t min) {
    return diff_cfg_size(s, key, v, min, MAX_SIZE);
}

/* the rotary tables cover the whole head: the axes sum to attention_head_dim */
static bool check_axes_sum(em_cfg_src *s, const em_flux_config *cfg) {
    int64_t sum = 0;
    for (int i = 0; i < cfg->n_axes; i++) sum += cfg->axes_dims_rope[i];
    if (sum != cfg->attention_head_dim) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, OP, "%s: axes_dims_rope sum to %lld, not "
                    "attention_head_dim %lld (the rotary tables cover the whole head)", s->file,
                    (long long)sum, (long long)cfg->attention_head_dim);
        return false;
    }
    return true;
}

/* axes_dims_rope: a list of even positive ints (the rotary dims per id column) */
static bool get_axes(em_cfg_src *s, em_flux_config *cfg) {
    json_t *v = json_object_get(s->obj, "axes_dims_rope");
    if (!v) /* the default (16, 56, 56) must fit the head too */
        return check_axes_sum(s, cfg);
    if (!json_is_array(v) || json_array_size(v) < 1 || json_array_size(v) > EM_FLUX_MAX_AXES) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, OP, "%s: axes_dims_rope must be a list of 1 to %d "
                    "rotary dims, not %s", s->file, EM_FLUX_MAX_AXES, em_cfg_kind(v));
        return false;
    }
    cfg->n_axes = (int)json_array_size(v);
    for (int i = 0; i < cfg->n_axes; i++) {
        json_t *e = json_array_get(v, (size_t)i);
        json_int_t d = json_is_integer(e) ? json_integer_value(e) : 0;
        if (d < 2 || d > MAX_SIZE || d % 2) {
            em_ctx_fail(s->c, EM_ERR_FORMAT, OP, "%s: axes_dims_rope[%d] must be an even "
                        "positive size (each axis rotates pairs)", s->file, i);
            return false;
        }
        cfg->axes_dims_rope[i] = d;
    }
    return check_axes_sum(s, cfg);
}

static bool parse(em_cfg_src *s, em_flux_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->patch_size = 1;
    cfg->in_channels = 64;
    cfg->num_layers = 19;
    cfg->num_single_layers = 38;
    cfg->attention_head_dim = 128;
    cfg->num_attention_heads = 24;
    cfg->joint_attention_dim = 4096;
    cfg->pooled_projection_dim = 768;
    cfg->n_axes = 3;
    cfg->axes_dims_rope[0] = 16;
    cfg->axes_dims_rope[1] = cfg->axes_dims_rope[2] = 56;
    char cls[64] = "";
    bool has_out = false;
    if (em_cfg_str(s, "_class_name", true, cls, sizeof cls, NULL)) return false;
    if (cls[0] && strcmp(cls, "FluxTransformer2DModel"))
        return diff_cfg_unsupported(s, "_class_name", cls, "FluxTransformer2DModel is");
    if (!get_size(s, "patch_size", &cfg->patch_size, 1) ||
        !get_size(s, "in_channels", &cfg->in_channels, 1) ||
        !get_size(s, "num_layers", &cfg->num_layers, 0) ||
        !get_size(s, "num_single_layers", &cfg->num_single_layers, 0) ||
        !get_size(s, "attention_head_dim", &cfg->attention_head_dim, 1) ||
        !get_size(s, "num_attention_heads", &cfg->num_attention_heads, 1) ||
        !get_size(s, "joint_attention_dim", &cfg->joint_attention_dim, 1) ||
        !get_size(s, "pooled_projection_dim", &cfg->pooled_projection_dim, 1) ||
        em_cfg_int(s, "out_channels", true, &cfg->out_channels, &has_out) ||
        em_cfg_bool(s, "guidance_embeds", false, &cfg->guidance_embeds, NULL))
        return false;
    if (!has_out || cfg->out_channels == 0) cfg->out_channels = cfg->in_channels; /* `or` */
    if (cfg->out_channels < 1 || cfg->out_channels > MAX_SIZE) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, OP, "%s: out_channels %lld out of range (1 to %lld)",
                    s->file, (long long)cfg->out_channels, (long long)MAX_SIZE);
        return false;
    }
    int64_t inner = cfg->num_attention_heads * cfg->attention_head_dim;
    int64_t out = cfg->patch_size * cfg->patch_size * cfg->out_channels;
    if (inner > MAX_SIZE || out > MAX_SIZE || 4 * inner > MAX_SIZE) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, OP, "%s: num_attention_heads * attention_head_dim "
                    "(%lld) or patch_size^2 * out_channels (%lld) is too large (max %lld)",
                    s->file, (long long)inner, (long long)out, (long long)MAX_SIZE / 4);
        return false;
    }
    return get_axes(s, cfg);
}

static bool parse_any(em_cfg_src *s, void *out) { return parse(s, out); }

em_status em_flux_config_parse(em_ctx *c, const char *json, size_t n, const char *name,
                               em_flux_config *out) {
    return diff_config_parse(c, OP, json, n, name, parse_any, out, sizeof *out);
}

em_status em_flux_config_load(em_ctx *c, const char *path, em_flux_config *out) {
    return diff_config_load(c, OP, path, parse_any, out, sizeof *out);
}

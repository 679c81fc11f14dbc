/* DiTTransformer2DModel's config.json: every field of diffusers 0.42's
 * DiTTransformer2DModel.__init__ read with its default, values Ember does not implement refused
 * by name. A folder saved as "Transformer2DModel" with norm_type "ada_norm_zero" is the same
 * model (diffusers remaps the class and ignores the fields DiT does not have). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/weights.h"
#include "ember/dit.h"
#include "io/config/config_impl.h"

#define OP "DiTTransformer2DModel"
/* bound on every size, so products of sizes cannot overflow */
#define MAX_SIZE ((int64_t)1 << 24)

#define unsupported diff_cfg_unsupported

/* A size field in [min, MAX_SIZE] (absent or null: the default stays). */
static bool get_size(em_cfg_src *s, const char *key, int64_t *v, int64_t min) {
    return diff_cfg_size(s, key, v, min, MAX_SIZE);
}

static bool get_activation(em_cfg_src *s, em_dit_config *cfg) {
    char act[32] = "gelu-approximate";
    if (em_cfg_str(s, "activation_fn", true, act, sizeof act, NULL)) return false;
    if (!strcmp(act, "gelu-approximate"))
        cfg->activation = EM_DIT_ACT_GELU_TANH;
    else if (!strcmp(act, "gelu"))
        cfg->activation = EM_DIT_ACT_GELU;
    else if (!strcmp(act, "geglu"))
        cfg->activation = EM_DIT_ACT_GEGLU;
    else
        return unsupported(s, "activation_fn", act, "gelu-approximate, gelu and geglu are");
    return true;
}

static bool parse(em_cfg_src *s, em_dit_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->num_attention_heads = 16;
    cfg->attention_head_dim = 72;
    cfg->in_channels = 4;
    cfg->num_layers = 28;
    cfg->norm_num_groups = 32;
    cfg->attention_bias = true;
    cfg->sample_size = 32;
    cfg->patch_size = 2;
    cfg->num_embeds_ada_norm = 1000;
    cfg->norm_eps = 1e-5;
    char cls[64] = "", norm[32] = "ada_norm_zero";
    bool has_out = false;
    if (em_cfg_str(s, "_class_name", true, cls, sizeof cls, NULL) ||
        em_cfg_str(s, "norm_type", true, norm, sizeof norm, NULL))
        return false;
    if (cls[0] && strcmp(cls, "DiTTransformer2DModel") && strcmp(cls, "Transformer2DModel"))
        return unsupported(s, "_class_name", cls,
                           "DiTTransformer2DModel and Transformer2DModel are");
    if (strcmp(norm, "ada_norm_zero"))
        return unsupported(s, "norm_type", norm, "DiT's ada_norm_zero is");
    if (!get_size(s, "num_attention_heads", &cfg->num_attention_heads, 1) ||
        !get_size(s, "attention_head_dim", &cfg->attention_head_dim, 1) ||
        !get_size(s, "in_channels", &cfg->in_channels, 1) ||
        !get_size(s, "num_layers", &cfg->num_layers, 1) ||
        !get_size(s, "sample_size", &cfg->sample_size, 1) ||
        !get_size(s, "patch_size", &cfg->patch_size, 1) ||
        !get_size(s, "norm_num_groups", &cfg->norm_num_groups, 1) ||
        em_cfg_int(s, "out_channels", true, &cfg->out_channels, &has_out) ||
        em_cfg_num(s, "dropout", true, &cfg->dropout, NULL) ||
        em_cfg_num(s, "norm_eps", true, &cfg->norm_eps, NULL) ||
        em_cfg_bool(s, "attention_bias", true, &cfg->attention_bias, NULL) ||
        em_cfg_bool(s, "upcast_attention", true, &cfg->upcast_attention, NULL) ||
        em_cfg_bool(s, "norm_elementwise_affine", true, &cfg->norm_elementwise_affine, NULL) ||
        !get_activation(s, cfg))
        return false;
    json_t *ne = json_object_get(s->obj, "num_embeds_ada_norm");
    if (ne && json_is_null(ne)) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, OP,
                    "%s: num_embeds_ada_norm is null, ada_norm_zero needs the class count",
                    s->file);
        return false;
    }
    if (!get_size(s, "num_embeds_ada_norm", &cfg->num_embeds_ada_norm, 1)) return false;
    if (!has_out || cfg->out_channels == 0) cfg->out_channels = cfg->in_channels;
    if (cfg->out_channels < 1 || cfg->out_channels > MAX_SIZE) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, OP, "%s: out_channels is %lld", s->file,
                    (long long)cfg->out_channels);
        return false;
    }
    int64_t inner = cfg->num_attention_heads * cfg->attention_head_dim;
    /* get_2d_sincos_pos_embed splits the width in four (sin and cos of h and of w) */
    if (inner % 4 || inner > MAX_SIZE) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, OP,
                    "%s: num_attention_heads * attention_head_dim = %lld must be a multiple of "
                    "4 (the 2D sin-cos positional embedding) and at most %lld",
                    s->file, (long long)inner, (long long)MAX_SIZE);
        return false;
    }
    if (cfg->sample_size % cfg->patch_size) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, OP, "%s: sample_size %lld is not a multiple of "
                    "patch_size %lld", s->file, (long long)cfg->sample_size,
                    (long long)cfg->patch_size);
        return false;
    }
    return true;
}

static bool parse_any(em_cfg_src *s, void *out) { return parse(s, out); }

em_status em_dit_config_parse(em_ctx *c, const char *json, size_t n, const char *name,
                              em_dit_config *out) {
    return diff_config_parse(c, OP, json, n, name, parse_any, out, sizeof *out);
}

em_status em_dit_config_load(em_ctx *c, const char *path, em_dit_config *out) {
    return diff_config_load(c, OP, path, parse_any, out, sizeof *out);
}

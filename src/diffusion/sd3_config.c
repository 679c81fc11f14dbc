/* SD3Transformer2DModel's config.json: every field of diffusers 0.42's
 * SD3Transformer2DModel.__init__ read with its default, values Ember does not implement refused
 * by name (qk_norm other than rms_norm, dual_attention_layers naming a block, a null
 * pos_embed_max_size). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/weights.h"
#include "ember/sd3.h"
#include "io/config/config_impl.h"

#define OP "SD3Transformer2DModel"
/* bound on every size, so products of sizes cannot overflow */
#define MAX_SIZE ((int64_t)1 << 24)

#define unsupported diff_cfg_unsupported

static bool get_size(em_cfg_src *s, const char *key, int64_t *v, int64_t min) {
    return diff_cfg_size(s, key, v, min, MAX_SIZE);
}

static bool fail(em_cfg_src *s, const char *what, long long a, long long b) {
    em_ctx_fail(s->c, EM_ERR_FORMAT, OP, "%s: %s (%lld, %lld)", s->file, what, a, b);
    return false;
}

/* dual_attention_layers: a list of block indices (SD3.5 Medium's MMDiT-X blocks); refused when
 * one names a block of the model (diffusers ignores indices past num_layers). */
static bool get_dual(em_cfg_src *s, const em_sd3_config *cfg) {
    json_t *v = json_object_get(s->obj, "dual_attention_layers");
    if (!v || json_is_null(v)) return true;
    if (!json_is_array(v)) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, OP, "%s: dual_attention_layers must be a list of block "
                    "indices, not %s", s->file, em_cfg_kind(v));
        return false;
    }
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_integer(e)) {
            em_ctx_fail(s->c, EM_ERR_FORMAT, OP, "%s: dual_attention_layers[%zu] is %s, not a "
                        "block index", s->file, i, em_cfg_kind(e));
            return false;
        }
        json_int_t b = json_integer_value(e);
        if (b >= 0 && b < cfg->num_layers) {
            char val[32];
            snprintf(val, sizeof val, "[..., %lld, ...]", (long long)b);
            return unsupported(s, "dual_attention_layers", val,
                               "SD3.5 Medium's dual-attention (MMDiT-X) blocks are not "
                               "implemented; an empty list is");
        }
    }
    return true;
}

static bool parse(em_cfg_src *s, em_sd3_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->sample_size = 128;
    cfg->patch_size = 2;
    cfg->in_channels = 16;
    cfg->num_layers = 18;
    cfg->attention_head_dim = 64;
    cfg->num_attention_heads = 18;
    cfg->joint_attention_dim = 4096;
    cfg->caption_projection_dim = 1152;
    cfg->pooled_projection_dim = 2048;
    cfg->out_channels = 16;
    cfg->pos_embed_max_size = 96;
    char cls[64] = "", qk[32] = "";
    bool has_qk = false, has_out = false;
    if (em_cfg_str(s, "_class_name", true, cls, sizeof cls, NULL)) return false;
    if (cls[0] && strcmp(cls, "SD3Transformer2DModel"))
        return unsupported(s, "_class_name", cls, "SD3Transformer2DModel is");
    json_t *pm = json_object_get(s->obj, "pos_embed_max_size");
    if (pm && json_is_null(pm))
        return unsupported(s, "pos_embed_max_size", "null",
                           "a stored positional table (an integer size) is");
    if (!get_size(s, "sample_size", &cfg->sample_size, 1) ||
        !get_size(s, "patch_size", &cfg->patch_size, 1) ||
        !get_size(s, "in_channels", &cfg->in_channels, 1) ||
        !get_size(s, "num_layers", &cfg->num_layers, 1) ||
        !get_size(s, "attention_head_dim", &cfg->attention_head_dim, 1) ||
        !get_size(s, "num_attention_heads", &cfg->num_attention_heads, 1) ||
        !get_size(s, "joint_attention_dim", &cfg->joint_attention_dim, 1) ||
        !get_size(s, "caption_projection_dim", &cfg->caption_projection_dim, 1) ||
        !get_size(s, "pooled_projection_dim", &cfg->pooled_projection_dim, 1) ||
        !get_size(s, "pos_embed_max_size", &cfg->pos_embed_max_size, 1) ||
        em_cfg_int(s, "out_channels", true, &cfg->out_channels, &has_out) ||
        em_cfg_str(s, "qk_norm", true, qk, sizeof qk, &has_qk))
        return false;
    if (json_object_get(s->obj, "out_channels") && !has_out)
        cfg->out_channels = cfg->in_channels; /* null: in_channels */
    if (cfg->out_channels < 1 || cfg->out_channels > MAX_SIZE)
        return fail(s, "out_channels out of range (value, max)", (long long)cfg->out_channels,
                    (long long)MAX_SIZE);
    if (has_qk && strcmp(qk, "rms_norm"))
        return unsupported(s, "qk_norm", qk, "null and rms_norm are");
    cfg->qk_norm_rms = has_qk;
    if (!get_dual(s, cfg)) return false;
    int64_t inner = cfg->num_attention_heads * cfg->attention_head_dim;
    if (inner > MAX_SIZE)
        return fail(s, "num_attention_heads * attention_head_dim is too large (value, max)",
                    (long long)inner, (long long)MAX_SIZE);
    /* the context stream's blocks are inner_dim wide: context_embedder must give that width */
    if (cfg->caption_projection_dim != inner)
        return fail(s, "caption_projection_dim must equal num_attention_heads * "
                    "attention_head_dim (caption_projection_dim, inner dim)",
                    (long long)cfg->caption_projection_dim, (long long)inner);
    if (inner % 4)
        return fail(s, "the inner dim must be a multiple of 4 for the 2D sin-cos table "
                    "(inner dim, 4)", (long long)inner, 4);
    if (cfg->pos_embed_max_size > 4096)
        return fail(s, "pos_embed_max_size is too large (value, max)",
                    (long long)cfg->pos_embed_max_size, 4096);
    return true;
}

static bool parse_any(em_cfg_src *s, void *out) { return parse(s, out); }

em_status em_sd3_config_parse(em_ctx *c, const char *json, size_t n, const char *name,
                              em_sd3_config *out) {
    return diff_config_parse(c, OP, json, n, name, parse_any, out, sizeof *out);
}

em_status em_sd3_config_load(em_ctx *c, const char *path, em_sd3_config *out) {
    return diff_config_load(c, OP, path, parse_any, out, sizeof *out);
}

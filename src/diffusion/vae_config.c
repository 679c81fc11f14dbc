/* AutoencoderKL's config.json: every field of diffusers 0.42's AutoencoderKL.__init__ read with
 * its default, values Ember does not implement refused by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/weights.h"
#include "ember/vae.h"
#include "io/config/config_impl.h"

#define OP "AutoencoderKL"
/* bound on every size, so products of sizes cannot overflow */
#define MAX_SIZE ((int64_t)1 << 30)

static bool fail_format(em_cfg_src *s, const char *key, const json_t *v, const char *want) {
    em_ctx_fail(s->c, EM_ERR_FORMAT, OP, "%s: field '%s' is %s, expected %s", s->file, key,
                em_cfg_kind(v), want);
    return false;
}

#define unsupported diff_cfg_unsupported

/* A size field in [min, MAX_SIZE] (absent or null: the default stays). */
static bool get_size(em_cfg_src *s, const char *key, int64_t *v, int64_t min) {
    return diff_cfg_size(s, key, v, min, MAX_SIZE);
}

/* A JSON list at key (absent or null: NULL, the default stays) of 1..max entries. */
static bool get_list(em_cfg_src *s, const char *key, size_t max, json_t **out) {
    json_t *v = json_object_get(s->obj, key);
    *out = NULL;
    if (!v || json_is_null(v)) return true;
    if (!json_is_array(v)) return fail_format(s, key, v, "a list");
    if (json_array_size(v) < 1 || json_array_size(v) > max) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, OP, "%s: '%s' has %zu entries, expected 1 to %zu",
                    s->file, key, json_array_size(v), max);
        return false;
    }
    *out = v;
    return true;
}

/* down_block_types / up_block_types: only the VAE's own blocks (get_down_block drops a
 * "UNetRes" prefix, so that spelling is accepted too). Returns the count, or -1. */
static int get_blocks(em_cfg_src *s, const char *key, const char *want) {
    json_t *v;
    if (!get_list(s, key, EM_VAE_MAX_BLOCKS, &v)) return -1;
    if (!v) return 1; /* the default: one block */
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_string(e)) return fail_format(s, key, e, "a list of block names"), -1;
        const char *name = json_string_value(e);
        if (!strncmp(name, "UNetRes", 7)) name += 7;
        if (strcmp(name, want)) {
            char what[64], sup[64];
            snprintf(what, sizeof what, "%s entry", key);
            snprintf(sup, sizeof sup, "%s is", want);
            return unsupported(s, what, json_string_value(e), sup), -1;
        }
    }
    return (int)json_array_size(v);
}

static bool get_channels(em_cfg_src *s, em_vae_config *cfg) {
    json_t *v;
    if (!get_list(s, "block_out_channels", EM_VAE_MAX_BLOCKS, &v)) return false;
    if (!v) return true;
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_integer(e) || json_integer_value(e) < 1 || json_integer_value(e) > MAX_SIZE)
            return fail_format(s, "block_out_channels", e, "a list of positive integers");
        cfg->block_out_channels[i] = (int64_t)json_integer_value(e);
    }
    cfg->n_blocks = (int)json_array_size(v);
    return true;
}

static bool get_sample_size(em_cfg_src *s, em_vae_config *cfg) {
    json_t *v = json_object_get(s->obj, "sample_size");
    if (!v || json_is_null(v)) return true;
    if (json_is_integer(v) && json_integer_value(v) > 0) {
        cfg->sample_size[0] = cfg->sample_size[1] = (int64_t)json_integer_value(v);
        return true;
    }
    json_t *h = json_array_get(v, 0), *w = json_array_get(v, 1);
    if (json_is_array(v) && json_array_size(v) == 2 && json_is_integer(h) &&
        json_is_integer(w) && json_integer_value(h) > 0 && json_integer_value(w) > 0) {
        cfg->sample_size[0] = (int64_t)json_integer_value(h);
        cfg->sample_size[1] = (int64_t)json_integer_value(w);
        return true;
    }
    return fail_format(s, "sample_size", v, "a positive integer or [height, width]");
}

/* latents_mean / latents_std: null or latent_channels numbers (other pipelines' metadata;
 * AutoencoderKL's encode and decode do not use them); *has says whether one is set. */
static bool check_stats(em_cfg_src *s, const char *key, int64_t latent_channels, bool *has) {
    json_t *v;
    if (!get_list(s, key, (size_t)latent_channels, &v)) return false;
    *has = v != NULL;
    for (size_t i = 0; v && i < json_array_size(v); i++)
        if (!json_is_number(json_array_get(v, i)))
            return fail_format(s, key, json_array_get(v, i), "a list of numbers");
    if (v && (int64_t)json_array_size(v) != latent_channels) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, OP, "%s: '%s' has %zu entries, latent_channels is %lld",
                    s->file, key, json_array_size(v), (long long)latent_channels);
        return false;
    }
    return true;
}

static void set_defaults(em_vae_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->in_channels = cfg->out_channels = 3;
    cfg->latent_channels = 4;
    cfg->n_blocks = 1;
    cfg->block_out_channels[0] = 64;
    cfg->layers_per_block = 1;
    snprintf(cfg->act_fn, sizeof cfg->act_fn, "silu");
    cfg->norm_num_groups = 32;
    cfg->sample_size[0] = cfg->sample_size[1] = 32;
    cfg->scaling_factor = 0.18215;
    cfg->force_upcast = cfg->use_quant_conv = cfg->use_post_quant_conv = true;
    cfg->mid_block_add_attention = true;
}

static bool parse(em_cfg_src *s, em_vae_config *cfg) {
    char cls[64] = "";
    set_defaults(cfg);
    if (em_cfg_str(s, "_class_name", true, cls, sizeof cls, NULL)) return false;
    if (cls[0] && strcmp(cls, "AutoencoderKL"))
        return unsupported(s, "_class_name", cls, "this loader reads AutoencoderKL");
    if (!get_size(s, "in_channels", &cfg->in_channels, 1) ||
        !get_size(s, "out_channels", &cfg->out_channels, 1) ||
        !get_size(s, "latent_channels", &cfg->latent_channels, 1) ||
        !get_size(s, "layers_per_block", &cfg->layers_per_block, 1) ||
        !get_size(s, "norm_num_groups", &cfg->norm_num_groups, 1) || !get_channels(s, cfg) ||
        !get_sample_size(s, cfg) ||
        em_cfg_str(s, "act_fn", true, cfg->act_fn, sizeof cfg->act_fn, NULL) ||
        em_cfg_num(s, "scaling_factor", true, &cfg->scaling_factor, NULL) ||
        em_cfg_num(s, "shift_factor", true, &cfg->shift_factor, &cfg->has_shift_factor) ||
        em_cfg_bool(s, "force_upcast", true, &cfg->force_upcast, NULL) ||
        em_cfg_bool(s, "use_quant_conv", true, &cfg->use_quant_conv, NULL) ||
        em_cfg_bool(s, "use_post_quant_conv", true, &cfg->use_post_quant_conv, NULL) ||
        em_cfg_bool(s, "mid_block_add_attention", true, &cfg->mid_block_add_attention, NULL) ||
        !check_stats(s, "latents_mean", cfg->latent_channels, &cfg->has_latents_mean) ||
        !check_stats(s, "latents_std", cfg->latent_channels, &cfg->has_latents_std))
        return false;
    int n_down = get_blocks(s, "down_block_types", "DownEncoderBlock2D");
    if (n_down < 0) return false;
    int n_up = get_blocks(s, "up_block_types", "UpDecoderBlock2D");
    if (n_up < 0) return false;
    if (strcmp(cfg->act_fn, "silu") && strcmp(cfg->act_fn, "swish") &&
        strcmp(cfg->act_fn, "gelu") && strcmp(cfg->act_fn, "relu"))
        return unsupported(s, "act_fn", cfg->act_fn, "silu, swish, gelu and relu are");
    if (!(cfg->scaling_factor != 0)) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, OP, "%s: scaling_factor must be non-zero", s->file);
        return false;
    }
    /* the sizes must agree, as Encoder and Decoder build them */
    if (n_down != cfg->n_blocks || n_up != cfg->n_blocks) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, OP,
                    "%s: %d block_out_channels but %d down_block_types and %d up_block_types",
                    s->file, cfg->n_blocks, n_down, n_up);
        return false;
    }
    return diff_check_blocks(s->c, OP, s->file, cfg->block_out_channels, cfg->n_blocks,
                             cfg->norm_num_groups, cfg->layers_per_block, EM_VAE_MAX_LAYERS);
}

em_status em_vae_config_parse(em_ctx *c, const char *json, size_t n, const char *name,
                              em_vae_config *out) {
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
    em_cfg_src s = {c, name, "", root, OP, NULL};
    bool ok = parse(&s, out);
    json_decref(root);
    if (!ok) memset(out, 0, sizeof *out);
    return ok ? EM_OK : em_ctx_status(c);
}

static bool parse_any(em_cfg_src *s, void *out) { return parse(s, out); }

em_status em_vae_config_load(em_ctx *c, const char *path, em_vae_config *out) {
    return diff_config_load(c, OP, path, parse_any, out, sizeof *out);
}

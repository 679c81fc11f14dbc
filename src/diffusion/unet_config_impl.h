/* The config.json readers shared by UNet2DModel's parser (unet2d_config.c) and
 * UNet2DConditionModel's (unet_cond_config.c): typed field getters whose errors name the file,
 * the field and the class. */
#ifndef EMBER_DIFFUSION_UNET_CONFIG_IMPL_H
#define EMBER_DIFFUSION_UNET_CONFIG_IMPL_H

#include <jansson.h>

#include "ember/diffusion.h"

typedef struct cfg_src {
    em_ctx *c;
    json_t *obj;
    const char *file;
    const char *op;   /* the class errors carry */
    bool cond;        /* UNet2DConditionModel: its block names */
} cfg_src;

/* Each getter leaves *out untouched when the field is absent or null (the default applies) and
 * returns false with an error naming the field for a value of the wrong type or range. */
bool ucfg_wrong(cfg_src *s, const char *key, const json_t *v, const char *want);
json_t *ucfg_field(cfg_src *s, const char *key);
bool ucfg_get_int(cfg_src *s, const char *key, int64_t *out, int64_t min);
bool ucfg_get_num(cfg_src *s, const char *key, double *out);
bool ucfg_get_bool(cfg_src *s, const char *key, bool *out);
bool ucfg_get_str(cfg_src *s, const char *key, char *buf, size_t n);
/* EM_ERR_UNSUPPORTED: "<key> '<value>' is not supported (<supported>; in <file>)". */
bool ucfg_unsupported(cfg_src *s, const char *key, const char *value, const char *supported);
bool ucfg_get_blocks(cfg_src *s, const char *key, bool down, em_unet2d_block_type *types, int *n);
bool ucfg_get_channels(cfg_src *s, em_unet2d_config *cfg);
bool ucfg_get_sample_size(cfg_src *s, em_unet2d_config *cfg);
/* UNet2DModel's defaults. */
void ucfg_set_defaults(em_unet2d_config *cfg);

/* UNet2DConditionModel's config (s->obj, `_class_name` already read) into cfg. */
bool unet_cond_config_parse(cfg_src *s, em_unet2d_config *cfg);

#endif

/* Loading a component's weights with the shape its config implies, shared by the diffusion
 * components (UNet2DModel, AutoencoderKL, the CLIP text encoder), so a config that disagrees
 * with its weights fails at load naming the tensor, both shapes and the config's folder; and
 * the checks their loaders and configs share. */
#ifndef EMBER_DIFFUSION_WEIGHTS_H
#define EMBER_DIFFUSION_WEIGHTS_H

#include "ember/safetensors.h"

/* Where weights come from: `file` (for messages), the component's folder `dir` (its
 * config.json is named in messages), the dtype and device they are loaded as, and the name
 * errors carry as their op. */
typedef struct diff_weights {
    em_ctx *c;
    em_safetensors *st;
    const char *file;
    const char *dir;
    const char *op;
    em_dtype dtype;
    em_device *dev;
} diff_weights;

/* Tensor `name` checked to be `ndim`-d of `shape`, converted to w->dtype on w->dev, owned by the
 * caller (detached from every scope). NULL with EM_ERR_NOT_FOUND (missing) or EM_ERR_SHAPE. */
em_tensor *diff_load_checked(const diff_weights *w, const char *name, int ndim,
                             const int64_t *shape);

/* The weights file of a diffusers component folder: <dir>/diffusion_pytorch_model.safetensors
 * .index.json when it exists, else <dir>/diffusion_pytorch_model.safetensors (malloc'd). NULL
 * with EM_ERR_NOT_FOUND naming the folder when neither exists (Ember reads safetensors only). */
char *diff_weights_file(em_ctx *c, const char *op, const char *dir);
/* The same for a transformers component (the text encoders): <dir>/model.safetensors.index.json
 * or <dir>/model.safetensors. */
char *diff_text_weights_file(em_ctx *c, const char *op, const char *dir);

/* A loader's arguments: a non-empty folder and a dtype of f32, bf16 or f16. False with
 * EM_ERR_INVALID_ARG / EM_ERR_DTYPE. */
bool diff_check_load_args(em_ctx *c, const char *op, const char *dir, em_dtype dtype);

/* What a UNet's or VAE's config must agree on: each of the n block_out_channels divisible by
 * the norm groups (EM_ERR_FORMAT) and layers_per_block at most max_layers (EM_ERR_UNSUPPORTED),
 * naming `file`. */
bool diff_check_blocks(em_ctx *c, const char *op, const char *file, const int64_t *channels,
                       int n, int64_t groups, int64_t layers, int max_layers);

/* A component's config.json (`path`: its folder or the file, em_cfg_load_file) handed to
 * parse(s, out), which fills out or fails with the error in c; `size` bytes of out are zeroed
 * first and again on failure. Argument errors (NULL or empty path) name `op`. */
struct em_cfg_src;
/* "<key> '<value>' is not supported (<supported>; in <file>)": EM_ERR_UNSUPPORTED with s's op;
 * returns false. */
bool diff_cfg_unsupported(struct em_cfg_src *s, const char *key, const char *value,
                          const char *supported);
/* An integer field in [min, max] (absent or null: *v keeps its default); false with
 * EM_ERR_FORMAT naming the field, its value and the range. */
bool diff_cfg_size(struct em_cfg_src *s, const char *key, int64_t *v, int64_t min, int64_t max);
typedef bool (*diff_config_fn)(struct em_cfg_src *s, void *out);
em_status diff_config_load(em_ctx *c, const char *op, const char *path, diff_config_fn parse,
                           void *out, size_t size);
/* The same from n bytes of JSON text; `name` stands for the file (NULL: "config.json"). */
em_status diff_config_parse(em_ctx *c, const char *op, const char *json, size_t n,
                            const char *name, diff_config_fn parse, void *out, size_t size);

#endif

/* diff_load_checked: a weight with the shape its component's config implies; the folder's
 * weights file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "diffusion/weights.h"
#include "io/config/config_impl.h"

bool diff_cfg_unsupported(em_cfg_src *s, const char *key, const char *value,
                          const char *supported) {
    em_ctx_fail(s->c, EM_ERR_UNSUPPORTED, s->op, "%s '%s' is not supported (%s; in %s)", key,
                value, supported, s->file);
    return false;
}

bool diff_cfg_size(em_cfg_src *s, const char *key, int64_t *v, int64_t min, int64_t max) {
    if (em_cfg_int(s, key, true, v, NULL)) return false;
    if (*v < min || *v > max) {
        em_ctx_fail(s->c, EM_ERR_FORMAT, s->op, "%s: field '%s' is %lld, expected %lld to %lld",
                    s->file, key, (long long)*v, (long long)min, (long long)max);
        return false;
    }
    return true;
}

/* parse on the document root of `file`; takes root over */
static em_status run_parse(em_ctx *c, const char *op, const char *file, json_t *root,
                           diff_config_fn parse, void *out, size_t size) {
    em_cfg_src s = {c, file, "", root, op, NULL};
    bool ok = parse(&s, out);
    json_decref(root);
    if (!ok) memset(out, 0, size);
    return ok ? EM_OK : em_ctx_status(c);
}

em_status diff_config_load(em_ctx *c, const char *op, const char *path, diff_config_fn parse,
                           void *out, size_t size) {
    if (!c || em_ctx_status(c)) return c ? em_ctx_status(c) : EM_ERR_INVALID_ARG;
    if (out) memset(out, 0, size);
    if (!path || !*path || !out)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, op, "path or out is NULL or empty");
    json_t *root = NULL;
    char *file = NULL;
    if (em_cfg_load_file(c, op, path, "config.json", &root, &file)) return em_ctx_status(c);
    em_status st = run_parse(c, op, file, root, parse, out, size);
    free(file);
    return st;
}

em_status diff_config_parse(em_ctx *c, const char *op, const char *json, size_t n,
                            const char *name, diff_config_fn parse, void *out, size_t size) {
    if (!c || em_ctx_status(c)) return c ? em_ctx_status(c) : EM_ERR_INVALID_ARG;
    if (out) memset(out, 0, size);
    if (!json || !out) return em_ctx_fail(c, EM_ERR_INVALID_ARG, op, "json or out is NULL");
    if (!name) name = "config.json";
    json_t *root = NULL;
    if (em_cfg_parse_text(c, op, json, n, name, &root)) return em_ctx_status(c);
    return run_parse(c, op, name, root, parse, out, size);
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    snprintf(buf, n, "[");
    for (int d = 0; d < ndim && d < EM_MAX_DIMS; d++)
        snprintf(buf + strlen(buf), n - strlen(buf), "%s%lld", d ? ", " : "", (long long)shape[d]);
    snprintf(buf + strlen(buf), n - strlen(buf), "]");
}

em_tensor *diff_load_checked(const diff_weights *w, const char *name, int ndim,
                             const int64_t *shape) {
    const em_safetensors_info *info = em_safetensors_find(w->st, name);
    if (!info) {
        em_ctx_fail(w->c, EM_ERR_NOT_FOUND, w->op, "tensor '%s' is missing from %s", name,
                    w->file);
        return NULL;
    }
    bool ok = info->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = info->shape[d] == shape[d];
    if (!ok) {
        char want[160], got[160];
        shape_str(want, sizeof want, ndim, shape);
        shape_str(got, sizeof got, info->ndim, info->shape);
        em_ctx_fail(w->c, EM_ERR_SHAPE, w->op,
                    "tensor '%s' in %s has shape %s, the config (%s/config.json) implies %s", name,
                    w->file, got, w->dir, want);
        return NULL;
    }
    em_tensor *t = em_safetensors_load_as(w->c, w->st, name, w->dtype, w->dev);
    return t ? em_detach(w->c, t) : NULL;
}

static bool is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* <dir>/<base>.safetensors.index.json when it exists, else <dir>/<base>.safetensors. */
static char *weights_file(em_ctx *c, const char *op, const char *dir, const char *base) {
    size_t n = strlen(dir) + strlen(base) + 32;
    char *file = malloc(n);
    if (!file) {
        em_ctx_fail(c, EM_ERR_OOM, op, "out of memory");
        return NULL;
    }
    const char *sep = *dir && dir[strlen(dir) - 1] == '/' ? "" : "/";
    snprintf(file, n, "%s%s%s.safetensors.index.json", dir, sep, base);
    if (!is_file(file)) snprintf(file, n, "%s%s%s.safetensors", dir, sep, base);
    if (is_file(file)) return file;
    free(file);
    em_ctx_fail(c, EM_ERR_NOT_FOUND, op,
                "%s holds no %s.safetensors (nor its .index.json); Ember reads safetensors "
                "weights only", dir, base);
    return NULL;
}

char *diff_weights_file(em_ctx *c, const char *op, const char *dir) {
    return weights_file(c, op, dir, "diffusion_pytorch_model");
}

char *diff_text_weights_file(em_ctx *c, const char *op, const char *dir) {
    return weights_file(c, op, dir, "model");
}

bool diff_check_load_args(em_ctx *c, const char *op, const char *dir, em_dtype dtype) {
    if (!dir || !*dir) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, op, "the folder is NULL or empty");
        return false;
    }
    if (dtype != EM_F32 && dtype != EM_BF16 && dtype != EM_F16) {
        em_ctx_fail(c, EM_ERR_DTYPE, op, "dtype %s: f32, bf16 and f16 are supported",
                    em_dtype_name(dtype));
        return false;
    }
    return true;
}

bool diff_check_blocks(em_ctx *c, const char *op, const char *file, const int64_t *channels,
                       int n, int64_t groups, int64_t layers, int max_layers) {
    for (int i = 0; i < n; i++)
        if (channels[i] % groups) {
            em_ctx_fail(c, EM_ERR_FORMAT, op,
                        "%s: block_out_channels[%d] = %lld is not divisible by norm_num_groups "
                        "%lld", file, i, (long long)channels[i], (long long)groups);
            return false;
        }
    if (layers > max_layers) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, op, "%s: layers_per_block %lld is more than %d", file,
                    (long long)layers, max_layers);
        return false;
    }
    return true;
}

/* A UNet2DModel's parameters under diffusers' names, a fresh UNet2DModel from a config (torch's
 * default initialisation per layer type, drawn from a seeded generator), and writing a model
 * (and a DDPMPipeline folder around it) as diffusers saves them, so a model Ember trained loads
 * in diffusers and in Ember alike. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/make_dirs.h"
#include "diffusion/unet_impl.h"
#include "ember/ddpm.h"
#include "ember/torch_rng.h"

#define OP "UNet2DModel"

/* What `diffusers_version` the files written here claim (the version the loaders follow). */
#define DIFFUSERS_VERSION "0.42.0"

bool unet_record_param(unet_loader *l, const char *name, em_tensor *t) {
    em_unet2d *u = l->u;
    if (!u) return true;
    if (u->n_params == u->cap_params) {
        int cap = u->cap_params ? 2 * u->cap_params : 64;
        char **names = realloc(u->param_names, (size_t)cap * sizeof *names);
        if (names) u->param_names = names;
        em_tensor **ps = names ? realloc(u->params, (size_t)cap * sizeof *ps) : NULL;
        if (ps) u->params = ps;
        if (!names || !ps) return em_ctx_fail(l->c, EM_ERR_OOM, l->op, "out of memory"), false;
        u->cap_params = cap;
    }
    char *n = strdup(name);
    if (!n) return em_ctx_fail(l->c, EM_ERR_OOM, l->op, "out of memory"), false;
    u->param_names[u->n_params] = n;
    u->params[u->n_params++] = t;
    return true;
}

/* A uniform float in [0, 1) from 24 random bits (as torch's uniform_ draws f32 values). */
static float uniform01(em_torch_generator *g) {
    return (float)(em_torch_generator_random(g) >> 8) * (1.0f / 16777216.0f);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

em_tensor *unet_init_weight(unet_loader *l, const char *name, int ndim, const int64_t *shape,
                            bool bias, bool has_bias) {
    int64_t numel = bias ? shape[0] : 1, fan_in = 1;
    for (int d = 0; !bias && d < ndim; d++) numel *= shape[d];
    for (int d = 1; d < ndim; d++) fan_in *= shape[d];
    float *v = malloc((size_t)numel * sizeof *v);
    if (!v) return em_ctx_fail(l->c, EM_ERR_OOM, l->op, "out of memory"), NULL;
    if (ndim == 1 && has_bias) {
        /* GroupNorm / LayerNorm: weight 1, bias 0 */
        for (int64_t i = 0; i < numel; i++) v[i] = bias ? 0.0f : 1.0f;
    } else if (ndim == 1 || ends_with(name, "time_proj.weight") ||
               ends_with(name, "class_embedding.weight")) {
        /* nn.Embedding: N(0, 1); GaussianFourierProjection: N(0, 1) * scale 16 */
        em_status st = em_torch_randn_fill(l->init, v, numel);
        for (int64_t i = 0; !st && ndim == 1 && i < numel; i++) v[i] *= 16.0f;
    } else {
        /* nn.Conv2d / nn.Linear: kaiming_uniform_(a=sqrt(5)) for the weight, the same bound
         * 1/sqrt(fan_in) for the bias */
        float bound = 1.0f / sqrtf((float)fan_in);
        for (int64_t i = 0; i < numel; i++) v[i] = (2.0f * uniform01(l->init) - 1.0f) * bound;
    }
    em_tensor *t = em_from_host_on(l->c, l->dev, EM_F32, bias ? 1 : ndim, shape, v);
    free(v);
    if (t && l->dtype != EM_F32) t = em_cast(l->c, t, l->dtype);
    return t ? em_detach(l->c, t) : NULL;
}

int em_unet2d_param_count(const em_unet2d *u) { return u ? u->n_params : 0; }

const char *em_unet2d_param_name(const em_unet2d *u, int i) {
    return u && i >= 0 && i < u->n_params ? u->param_names[i] : NULL;
}

em_tensor *em_unet2d_param(const em_unet2d *u, int i) {
    return u && i >= 0 && i < u->n_params ? u->params[i] : NULL;
}

em_tensor *em_unet2d_find_param(const em_unet2d *u, const char *name) {
    for (int i = 0; u && name && i < u->n_params; i++)
        if (!strcmp(u->param_names[i], name)) return u->params[i];
    return NULL;
}

em_unet2d *em_unet2d_create(em_ctx *c, const char *config_json, size_t n, uint64_t seed,
                            const em_unet2d_options *o) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!config_json) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "em_unet2d_create: the config is NULL");
        return NULL;
    }
    em_unet2d_config cfg;
    if (em_unet2d_config_parse(c, config_json, n, "the config given to em_unet2d_create", &cfg))
        return NULL;
    if (cfg.conditional) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP,
                    "em_unet2d_create makes UNet2DModels; the config is a UNet2DConditionModel");
        return NULL;
    }
    em_torch_generator *g = em_torch_generator_create(seed);
    char *text = malloc(n + 1);
    if (!g || !text) {
        em_torch_generator_free(g);
        free(text);
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    memcpy(text, config_json, n);
    text[n] = '\0';
    em_unet2d *u = unet2d_build(c, &cfg, "(em_unet2d_create)", o, g);
    em_torch_generator_free(g);
    if (u) u->config_json = text;
    else free(text);
    return u;
}

/* ---------------------------------------------------------------------------------------------
 * Saving
 * ------------------------------------------------------------------------------------------- */

/* j (taken over) written to `path` with diffusers' indentation. */
static em_status write_json(em_ctx *c, json_t *j, const char *path) {
    int rc = j ? json_dump_file(j, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : -1;
    json_decref(j);
    if (rc != 0) return em_ctx_fail(c, EM_ERR_IO, OP, "cannot write %s", path);
    return EM_OK;
}

/* The model's config.json as a JSON object: its create text or its folder's file, with
 * _class_name and _diffusers_version set when missing. */
static json_t *config_object(em_ctx *c, const em_unet2d *u) {
    json_error_t err;
    json_t *j;
    char path[4096];
    if (u->config_json) {
        j = json_loads(u->config_json, 0, &err);
        snprintf(path, sizeof path, "the config given to em_unet2d_create");
    } else {
        snprintf(path, sizeof path, "%s/config.json", u->dir);
        j = json_load_file(path, 0, &err);
    }
    if (!json_is_object(j)) {
        json_decref(j);
        em_ctx_fail(c, EM_ERR_FORMAT, OP, "cannot read %s again: %s", path, err.text);
        return NULL;
    }
    if (!json_object_get(j, "_class_name"))
        json_object_set_new(j, "_class_name", json_string("UNet2DModel"));
    if (!json_object_get(j, "_diffusers_version"))
        json_object_set_new(j, "_diffusers_version", json_string(DIFFUSERS_VERSION));
    return j;
}

em_status em_unet2d_save(em_ctx *c, const em_unet2d *u, const char *dir) {
    if (!c || em_ctx_status(c)) return c ? em_ctx_status(c) : EM_ERR_INVALID_ARG;
    if (!u || !dir || !*dir)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "em_unet2d_save: NULL model or folder");
    if (u->cfg.conditional)
        return em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP,
                           "em_unet2d_save writes UNet2DModels, not UNet2DConditionModels");
    json_t *cfg = config_object(c, u); /* read before writing: dir may be the model's own */
    if (!cfg) return em_ctx_status(c);
    char path[4096];
    if (em_make_dirs(c, OP, dir)) {
        json_decref(cfg);
        return em_ctx_status(c);
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (write_json(c, cfg, path)) return em_ctx_status(c);
    snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
    const char *meta[] = {"format", "pt", NULL};
    return em_safetensors_save(c, path, u->n_params, (const char *const *)u->param_names,
                               u->params, meta);
}

em_status em_ddpm_pipeline_save(em_ctx *c, const em_unet2d *u, const char *scheduler_json,
                                const char *dir) {
    if (!c || em_ctx_status(c)) return c ? em_ctx_status(c) : EM_ERR_INVALID_ARG;
    if (!u || !dir || !*dir)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, "DDPMPipeline",
                           "em_ddpm_pipeline_save: NULL model or folder");
    json_error_t err;
    json_t *sched = scheduler_json ? json_loads(scheduler_json, 0, &err) : json_object();
    if (!json_is_object(sched)) {
        json_decref(sched);
        return em_ctx_fail(c, EM_ERR_FORMAT, "DDPMPipeline",
                           "the scheduler config is not a JSON object: %s",
                           scheduler_json ? err.text : "");
    }
    if (!json_object_get(sched, "_class_name"))
        json_object_set_new(sched, "_class_name", json_string("DDPMScheduler"));
    if (!json_object_get(sched, "_diffusers_version"))
        json_object_set_new(sched, "_diffusers_version", json_string(DIFFUSERS_VERSION));
    const char *sched_class = json_string_value(json_object_get(sched, "_class_name"));
    json_t *index = json_pack("{s:s, s:s, s:[s,s], s:[s,s]}", "_class_name", "DDPMPipeline",
                              "_diffusers_version", DIFFUSERS_VERSION, "scheduler", "diffusers",
                              sched_class ? sched_class : "DDPMScheduler", "unet", "diffusers",
                              "UNet2DModel");
    char path[4096];
    snprintf(path, sizeof path, "%s/unet", dir);
    if (em_make_dirs(c, OP, dir) || em_unet2d_save(c, u, path)) goto fail;
    snprintf(path, sizeof path, "%s/scheduler", dir);
    if (em_make_dirs(c, OP, path)) goto fail;
    snprintf(path, sizeof path, "%s/scheduler/scheduler_config.json", dir);
    em_status st = write_json(c, sched, path);
    sched = NULL;
    if (st) goto fail;
    snprintf(path, sizeof path, "%s/model_index.json", dir);
    st = write_json(c, index, path);
    return st;
fail:
    json_decref(sched);
    json_decref(index);
    return em_ctx_status(c);
}

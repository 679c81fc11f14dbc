/* Pipeline folders: model_index.json routed to the components a pipeline class needs (the
 * pipeline object of pipeline.c is built on this index). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/file_read.h"
#include "diffusion/pipeline_impl.h"

#define OP "model_index.json"
#define MAX_INDEX_BYTES (1 << 20)

static const char *const PIPELINE_NAMES[] = {"DDPMPipeline", "DDIMPipeline",
                                              "StableDiffusionPipeline", "DiTPipeline",
                                              "StableDiffusionXLPipeline",
                                              "StableDiffusion3Pipeline", "FluxPipeline"};

const char *em_pipeline_class_name(em_pipeline_class p) {
    return (unsigned)p < sizeof PIPELINE_NAMES / sizeof PIPELINE_NAMES[0] ? PIPELINE_NAMES[p]
                                                                          : "unknown";
}

void em_pipeline_index_free(em_pipeline_index *idx) {
    if (!idx) return;
    free(idx->dir);
    free(idx->unet_dir);
    free(idx->scheduler_dir);
    free(idx->scheduler_config);
    free(idx->text_encoder_dir);
    free(idx->tokenizer_dir);
    free(idx->transformer_dir);
    free(idx->vae_dir);
    free(idx->text_encoder_2_dir);
    free(idx->tokenizer_2_dir);
    free(idx->text_encoder_3_dir);
    free(idx->tokenizer_3_dir);
    memset(idx, 0, sizeof *idx);
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", name);
    return p;
}

static bool exists(const char *p, bool dir) {
    struct stat sb;
    return stat(p, &sb) == 0 && (dir ? S_ISDIR(sb.st_mode) : S_ISREG(sb.st_mode));
}

/* Component `name`: ["library", "Class"] in the index and its folder <dir>/<name>. Writes the
 * class to cls and returns the folder (malloc'd), NULL with an error. */
static char *component(em_ctx *c, json_t *root, const char *file, const char *dir,
                       const char *pipeline, const char *name, char *cls, size_t n) {
    json_t *v = json_object_get(root, name);
    if (!v || json_is_null(v) ||
        (json_is_array(v) && json_array_size(v) == 2 && json_is_null(json_array_get(v, 1)))) {
        em_ctx_fail(c, EM_ERR_NOT_FOUND, OP, "%s: %s needs a '%s' component, the file has none",
                    file, pipeline, name);
        return NULL;
    }
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_string(json_array_get(v, 0)) ||
        !json_is_string(json_array_get(v, 1)) || !*json_string_value(json_array_get(v, 1))) {
        em_ctx_fail(c, EM_ERR_FORMAT, OP,
                    "%s: component '%s' must be [\"library\", \"ClassName\"]", file, name);
        return NULL;
    }
    snprintf(cls, n, "%s", json_string_value(json_array_get(v, 1)));
    char *sub = join(dir, name);
    if (!sub) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    if (!exists(sub, true)) {
        em_ctx_fail(c, EM_ERR_NOT_FOUND, OP,
                    "%s names component '%s' (%s) but its folder %s does not exist", file, name,
                    cls, sub);
        free(sub);
        return NULL;
    }
    return sub;
}

/* An entry that is missing, null or [null, null] (a pipeline saved without that component). */
static bool absent(json_t *root, const char *name) {
    json_t *v = json_object_get(root, name);
    return !v || json_is_null(v) ||
           (json_is_array(v) && json_array_size(v) == 2 && json_is_null(json_array_get(v, 0)) &&
            json_is_null(json_array_get(v, 1)));
}

/* A pipeline config flag: true or false; missing or null keeps *out. */
static bool flag(em_ctx *c, json_t *root, const char *file, const char *key, bool *out) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) {
        em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s: %s must be true or false", file, key);
        return false;
    }
    *out = json_is_true(v);
    return true;
}

/* A component the pipeline class needs: its folder and its class, one of `want`. */
typedef struct comp_spec {
    const char *key;
    char **dir;
    char *cls;
    const char *want[2];
} comp_spec;

static bool components(em_ctx *c, json_t *root, const char *file, const char *dir,
                       em_pipeline_index *out, const comp_spec *comps, size_t n) {
    const char *name = out->class_name;
    for (size_t i = 0; i < n; i++) {
        *comps[i].dir = component(c, root, file, dir, name, comps[i].key, comps[i].cls, 64);
        if (!*comps[i].dir) return false;
        if (strcmp(comps[i].cls, comps[i].want[0]) &&
            (!comps[i].want[1] || strcmp(comps[i].cls, comps[i].want[1]))) {
            em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP,
                        "%s: %s class '%s' is not supported by %s (%s%s%s is)", file,
                        comps[i].key, comps[i].cls, name, comps[i].want[0],
                        comps[i].want[1] ? " or " : "", comps[i].want[1] ? comps[i].want[1] : "");
            return false;
        }
    }
    return true;
}

/* StableDiffusionPipeline's text_encoder, tokenizer and vae (the safety checker, feature
 * extractor and image encoder are not run; their entries are not read). */
static bool sd_components(em_ctx *c, json_t *root, const char *file, const char *dir,
                          em_pipeline_index *out) {
    const comp_spec comps[] = {
        {"text_encoder", &out->text_encoder_dir, out->text_encoder_class, {"CLIPTextModel", NULL}},
        {"tokenizer", &out->tokenizer_dir, out->tokenizer_class,
         {"CLIPTokenizer", "CLIPTokenizerFast"}},
        {"vae", &out->vae_dir, out->vae_class, {"AutoencoderKL", NULL}},
    };
    return components(c, root, file, dir, out, comps, sizeof comps / sizeof comps[0]);
}

/* StableDiffusionXLPipeline: Stable Diffusion's components (the refiner's layout has neither
 * tokenizer nor text_encoder: [null, null] both), the second tokenizer and text encoder, and its
 * pipeline config: force_zeros_for_empty_prompt and requires_aesthetics_score. */
static bool sdxl_components(em_ctx *c, json_t *root, const char *file, const char *dir,
                            em_pipeline_index *out) {
    bool no_te = absent(root, "text_encoder"), no_tok = absent(root, "tokenizer");
    if (no_te != no_tok) {
        em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s: %s has a '%s' component but no '%s' (the two go "
                    "together: both, or neither as in a refiner)", file, out->class_name,
                    no_te ? "tokenizer" : "text_encoder", no_te ? "text_encoder" : "tokenizer");
        return false;
    }
    if (no_te) {
        const comp_spec vae[] = {{"vae", &out->vae_dir, out->vae_class, {"AutoencoderKL", NULL}}};
        if (!components(c, root, file, dir, out, vae, 1)) return false;
    } else if (!sd_components(c, root, file, dir, out)) {
        return false;
    }
    const comp_spec comps[] = {
        {"text_encoder_2", &out->text_encoder_2_dir, out->text_encoder_2_class,
         {"CLIPTextModelWithProjection", NULL}},
        {"tokenizer_2", &out->tokenizer_2_dir, out->tokenizer_2_class,
         {"CLIPTokenizer", "CLIPTokenizerFast"}},
    };
    if (!components(c, root, file, dir, out, comps, sizeof comps / sizeof comps[0])) return false;
    out->force_zeros_for_empty_prompt = true;
    out->requires_aesthetics_score = false;
    return flag(c, root, file, "force_zeros_for_empty_prompt",
                &out->force_zeros_for_empty_prompt) &&
           flag(c, root, file, "requires_aesthetics_score", &out->requires_aesthetics_score);
}

/* StableDiffusion3Pipeline: transformer (SD3Transformer2DModel), vae, both CLIP encoders with
 * projection and their tokenizers, and the T5 (text_encoder_3 with tokenizer_3) or neither
 * (diffusers then uses zeros for its embeddings). */
static bool sd3_components(em_ctx *c, json_t *root, const char *file, const char *dir,
                           em_pipeline_index *out) {
    bool no_te3 = absent(root, "text_encoder_3"), no_tok3 = absent(root, "tokenizer_3");
    if (no_te3 != no_tok3) {
        em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s: %s has a '%s' component but no '%s' (the two go "
                    "together: both, or neither for zero T5 embeddings)", file, out->class_name,
                    no_te3 ? "tokenizer_3" : "text_encoder_3",
                    no_te3 ? "text_encoder_3" : "tokenizer_3");
        return false;
    }
    const comp_spec t5[] = {
        {"text_encoder_3", &out->text_encoder_3_dir, out->text_encoder_3_class,
         {"T5EncoderModel", NULL}},
        {"tokenizer_3", &out->tokenizer_3_dir, out->tokenizer_3_class,
         {"T5TokenizerFast", "T5Tokenizer"}},
    };
    if (!no_te3 && !components(c, root, file, dir, out, t5, 2)) return false;
    const comp_spec comps[] = {
        {"transformer", &out->transformer_dir, out->transformer_class,
         {"SD3Transformer2DModel", NULL}},
        {"vae", &out->vae_dir, out->vae_class, {"AutoencoderKL", NULL}},
        {"text_encoder", &out->text_encoder_dir, out->text_encoder_class,
         {"CLIPTextModelWithProjection", NULL}},
        {"tokenizer", &out->tokenizer_dir, out->tokenizer_class,
         {"CLIPTokenizer", "CLIPTokenizerFast"}},
        {"text_encoder_2", &out->text_encoder_2_dir, out->text_encoder_2_class,
         {"CLIPTextModelWithProjection", NULL}},
        {"tokenizer_2", &out->tokenizer_2_dir, out->tokenizer_2_class,
         {"CLIPTokenizer", "CLIPTokenizerFast"}},
    };
    return components(c, root, file, dir, out, comps, sizeof comps / sizeof comps[0]);
}

/* FluxPipeline: transformer (FluxTransformer2DModel), vae, text_encoder (CLIPTextModel: its
 * pooled output) with tokenizer, text_encoder_2 (T5EncoderModel) with tokenizer_2; image_encoder
 * and feature_extractor (IP-Adapter) are not read. */
static bool flux_components(em_ctx *c, json_t *root, const char *file, const char *dir,
                            em_pipeline_index *out) {
    const comp_spec comps[] = {
        {"transformer", &out->transformer_dir, out->transformer_class,
         {"FluxTransformer2DModel", NULL}},
        {"vae", &out->vae_dir, out->vae_class, {"AutoencoderKL", NULL}},
        {"text_encoder", &out->text_encoder_dir, out->text_encoder_class, {"CLIPTextModel", NULL}},
        {"tokenizer", &out->tokenizer_dir, out->tokenizer_class,
         {"CLIPTokenizer", "CLIPTokenizerFast"}},
        {"text_encoder_2", &out->text_encoder_2_dir, out->text_encoder_2_class,
         {"T5EncoderModel", NULL}},
        {"tokenizer_2", &out->tokenizer_2_dir, out->tokenizer_2_class,
         {"T5TokenizerFast", "T5Tokenizer"}},
    };
    return components(c, root, file, dir, out, comps, sizeof comps / sizeof comps[0]);
}

/* DiTPipeline: transformer (DiTTransformer2DModel, or Transformer2DModel, which diffusers
 * remaps to it) and vae (AutoencoderKL). */
static bool dit_components(em_ctx *c, json_t *root, const char *file, const char *dir,
                           em_pipeline_index *out) {
    const comp_spec comps[] = {
        {"transformer", &out->transformer_dir, out->transformer_class,
         {"DiTTransformer2DModel", "Transformer2DModel"}},
        {"vae", &out->vae_dir, out->vae_class, {"AutoencoderKL", NULL}},
    };
    return components(c, root, file, dir, out, comps, sizeof comps / sizeof comps[0]);
}

static em_status parse(em_ctx *c, json_t *root, const char *file, const char *dir,
                       em_pipeline_index *out) {
    json_t *cls = json_object_get(root, "_class_name");
    if (!cls || !json_is_string(cls))
        return em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s has no \"_class_name\" string", file);
    const char *name = json_string_value(cls);
    snprintf(out->class_name, sizeof out->class_name, "%s", name);
    size_t np = sizeof PIPELINE_NAMES / sizeof PIPELINE_NAMES[0], i = 0;
    while (i < np && strcmp(name, PIPELINE_NAMES[i])) i++;
    if (!strcmp(name, "StableDiffusionXLImg2ImgPipeline") ||
        !strcmp(name, "StableDiffusionXLInpaintPipeline"))
        i = EM_PIPELINE_STABLE_DIFFUSION_XL;
    if (!strcmp(name, "StableDiffusionInpaintPipeline")) i = EM_PIPELINE_STABLE_DIFFUSION;
    if (i == np)
        return em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP,
                           "%s: pipeline class '%s' is not supported (DDPMPipeline, "
                           "DDIMPipeline, StableDiffusionPipeline, StableDiffusionXLPipeline, "
                           "StableDiffusionXLImg2ImgPipeline, StableDiffusionInpaintPipeline, "
                           "StableDiffusionXLInpaintPipeline, StableDiffusion3Pipeline, "
                           "FluxPipeline and DiTPipeline are)", file, name);
    out->pipeline = (em_pipeline_class)i;
    json_t *ver = json_object_get(root, "_diffusers_version");
    if (ver && json_is_string(ver))
        snprintf(out->diffusers_version, sizeof out->diffusers_version, "%s",
                 json_string_value(ver));
    if (!(out->dir = strdup(dir))) return em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    if (out->pipeline == EM_PIPELINE_DIT) {
        if (!dit_components(c, root, file, dir, out)) return em_ctx_status(c);
    } else if (out->pipeline == EM_PIPELINE_STABLE_DIFFUSION_3) {
        if (!sd3_components(c, root, file, dir, out)) return em_ctx_status(c);
    } else if (out->pipeline == EM_PIPELINE_FLUX) {
        if (!flux_components(c, root, file, dir, out)) return em_ctx_status(c);
    } else {
        out->unet_dir = component(c, root, file, dir, name, "unet", out->unet_class,
                                  sizeof out->unet_class);
        if (!out->unet_dir) return em_ctx_status(c);
        bool xl = out->pipeline == EM_PIPELINE_STABLE_DIFFUSION_XL;
        bool sd = out->pipeline == EM_PIPELINE_STABLE_DIFFUSION || xl;
        const char *unet_cls = sd ? "UNet2DConditionModel" : "UNet2DModel";
        if (strcmp(out->unet_class, unet_cls))
            return em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP,
                               "%s: unet class '%s' is not supported by %s (%s is)", file,
                               out->unet_class, name, unet_cls);
        if (xl ? !sdxl_components(c, root, file, dir, out)
               : sd && !sd_components(c, root, file, dir, out))
            return em_ctx_status(c);
    }
    out->scheduler_dir = component(c, root, file, dir, name, "scheduler", out->scheduler_class,
                                   sizeof out->scheduler_class);
    if (!out->scheduler_dir) return em_ctx_status(c);
    out->scheduler_config = join(out->scheduler_dir, "scheduler_config.json");
    if (!out->scheduler_config) return em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    if (!exists(out->scheduler_config, false))
        return em_ctx_fail(c, EM_ERR_NOT_FOUND, OP, "%s: the scheduler component has no %s",
                           file, out->scheduler_config);
    return EM_OK;
}

em_status em_pipeline_index_parse(em_ctx *c, const char *text, size_t len, const char *file,
                                  const char *dir, em_pipeline_index *out) {
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    if (!root)
        em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s is not valid JSON: %s (line %d, column %d)", file,
                    jerr.text, jerr.line, jerr.column);
    else if (!json_is_object(root))
        em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s is not a JSON object", file);
    else
        parse(c, root, file, dir, out);
    json_decref(root);
    if (em_ctx_status(c)) {
        em_pipeline_index_free(out);
        return em_ctx_status(c);
    }
    return EM_OK;
}

em_status em_pipeline_index_load(em_ctx *c, const char *dir, em_pipeline_index *out) {
    if (!c || em_ctx_status(c)) return c ? em_ctx_status(c) : EM_ERR_INVALID_ARG;
    if (out) memset(out, 0, sizeof *out);
    if (!dir || !*dir || !out)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "folder or out is NULL or empty");
    char *file = join(dir, "model_index.json");
    if (!file) return em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    size_t len = 0;
    char *text = em_file_read(c, OP, file, MAX_INDEX_BYTES, &len, NULL);
    if (text) em_pipeline_index_parse(c, text, len, file, dir, out);
    free(text);
    free(file);
    return em_ctx_status(c);
}

em_unet2d *em_pipeline_load_unet(em_ctx *c, const em_pipeline_index *idx,
                                 const em_unet2d_options *o) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!idx || !idx->unet_dir) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "the pipeline index is NULL or not loaded");
        return NULL;
    }
    return em_unet2d_load(c, idx->unet_dir, o);
}

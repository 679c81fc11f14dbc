/* The public config readers (ember/config.h, ember/gguf.h): config.json or a GGUF file's
 * metadata read by io's generic reader (src/io/config/config_model.c) with the rules of the
 * family that the family table (family_table.c) gives for its model_type. */
#include <stdlib.h>
#include <string.h>

#include "io/config/config_family.h"
#include "io/gguf/gguf_impl.h"
#include "models/model_impl.h"

#define OP "config_load"

static const em_cfg_family *find_config(const char *model_type) {
    const em_family *f = em_family_find(model_type);
    return f ? &f->config : NULL;
}

/* A model_type no family has is read with Llama's class defaults (known_model_type false). */
static em_status read_config(em_ctx *c, json_t *root, const char *file, em_model_config *out) {
    em_cfg_families fams = {find_config, find_config("llama")};
    return em_model_config_read(c, root, file, &fams, out);
}

em_status em_model_config_parse(em_ctx *c, const char *json, size_t n, const char *name,
                                em_model_config *out) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (out) memset(out, 0, sizeof *out);
    if (c->err.status) return c->err.status;
    if (!out || (!json && n)) return EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "NULL argument");
    if (!name) name = "config.json";
    json_t *root;
    em_status e = em_cfg_parse_text(c, OP, json ? json : "", n, name, &root);
    if (e) return e;
    e = read_config(c, root, name, out);
    if (e) json_decref(root);
    return e;
}

em_status em_model_config_from_gguf(em_ctx *c, const em_gguf *g, em_model_config *out) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (out) memset(out, 0, sizeof *out);
    if (c->err.status) return c->err.status;
    if (!g || !out) return EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "file or config is NULL");
    const em_gguf_arch *ar = em_family_gguf_arch(c, OP, g);
    if (!ar) return em_ctx_status(c);
    char *text = NULL, name[1100];
    em_status s = em_gguf_config_text(c, g, ar, &text, name, sizeof name);
    if (s == EM_OK) s = em_model_config_parse(c, text, strlen(text), name, out);
    free(text);
    return s;
}

em_status em_model_config_load(em_ctx *c, const char *path, em_model_config *out) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (out) memset(out, 0, sizeof *out);
    if (c->err.status) return c->err.status;
    if (!out) return EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "out is NULL");
    size_t pl = path ? strlen(path) : 0;
    if (pl > 5 && !strcmp(path + pl - 5, ".gguf")) { /* the metadata of a GGUF file */
        em_gguf *g = em_gguf_open(c, path);
        em_status gs = g ? em_model_config_from_gguf(c, g, out) : em_ctx_status(c);
        em_gguf_free(g);
        return gs;
    }
    json_t *root;
    char *file;
    em_status e = em_cfg_load_file(c, OP, path, "config.json", &root, &file);
    if (e) return e;
    e = read_config(c, root, file, out);
    if (e) json_decref(root);
    free(file);
    return e;
}

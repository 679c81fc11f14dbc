/*
 * Typed reads of JSON configuration keys with errors that name the file and the key
 * (config_json.c), shared by config.json and generation_config.json readers.
 */
#ifndef EMBER_CONFIG_IMPL_H
#define EMBER_CONFIG_IMPL_H

#include <jansson.h>

#include "core/tensor_impl.h"
#include "ember/config.h"

/* Where keys are read from: an object of a file, with a prefix for nested objects
 * ("text_config.") so messages name the key as the user sees it. */
typedef struct em_cfg_src {
    em_ctx *c;
    const char *file;
    const char *prefix;
    json_t *obj;
    const char *op;
    json_t *fallback; /* looked up when obj lacks a key (or holds null there), or NULL */
} em_cfg_src;

/* Each reader leaves *out alone and returns EM_OK with *present = false when the key is
 * absent, or null and `nullable`. A value of the wrong type (or null where the class does not
 * allow it) is EM_ERR_FORMAT. `present` may be NULL. */
em_status em_cfg_int(em_cfg_src *s, const char *key, bool nullable, int64_t *out, bool *present);
em_status em_cfg_num(em_cfg_src *s, const char *key, bool nullable, double *out, bool *present);
em_status em_cfg_bool(em_cfg_src *s, const char *key, bool nullable, bool *out, bool *present);
em_status em_cfg_str(em_cfg_src *s, const char *key, bool nullable, char *out, size_t n,
                     bool *present);
/* An int or a list of ints (eos_token_id); null allowed. */
em_status em_cfg_ids(em_cfg_src *s, const char *key, int64_t *ids, int *n, bool *present);
/* Calls fn(&sub, name, user) for each member `name` of the object at `key` (absent or null:
 * none, *present false), where sub reads that object (prefix "<prefix><key>."); stops at fn's
 * first error. A value that is not an object is EM_ERR_FORMAT. `present` may be NULL. Lets a family walk nested keys of its own
 * (Gemma 4's per_layer_config) without the JSON library. */
em_status em_cfg_each(em_cfg_src *s, const char *key,
                      em_status (*fn)(em_cfg_src *sub, const char *name, void *user), void *user,
                      bool *present);
/* A reader of a loaded model config's text part (text_config when nested, falling back to the
 * document, as em_model_config_get_* read), for the keys a family reads itself. `file` names
 * the file in messages. */
em_cfg_src em_model_config_src(em_ctx *c, const em_model_config *cfg, const char *file,
                               const char *op);
/* EM_ERR_FORMAT naming `key` unless v > 0 (or v == 0 when zero_ok). */
em_status em_cfg_positive(em_cfg_src *s, const char *key, int64_t v, bool zero_ok);
/* The JSON type's name, for messages. */
const char *em_cfg_kind(const json_t *v);

/* Loads JSON from `path`, or from `path`/`default_name` when `path` is a directory. *resolved
 * (malloc'd) gets the file actually read. */
em_status em_cfg_load_file(em_ctx *c, const char *op, const char *path, const char *default_name,
                           json_t **root, char **resolved);
em_status em_cfg_parse_text(em_ctx *c, const char *op, const char *text, size_t n,
                            const char *name, json_t **root);

em_status em_generation_config_from_json(em_ctx *c, json_t *root, const char *file,
                                         em_generation_config *out);

#endif

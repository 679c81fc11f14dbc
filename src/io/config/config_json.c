/* Typed reads of configuration keys, loading of JSON files, with messages that name the file
 * and the key. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/file_read.h"
#include "io/config/config_impl.h"

const char *em_cfg_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a float";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "a value";
}

static em_status wrong(em_cfg_src *s, const char *key, const json_t *v, const char *want) {
    return EM_FAIL(s->c, EM_ERR_FORMAT, s->op, "%s: \"%s%s\" is %s, expected %s", s->file,
                   s->prefix, key, em_cfg_kind(v), want);
}

/* The value of `key`, NULL when absent or (if nullable) null; *err set for a forbidden null. */
static json_t *get(em_cfg_src *s, const char *key, bool nullable, const char *want,
                   em_status *err) {
    *err = EM_OK;
    json_t *v = json_object_get(s->obj, key);
    if ((!v || json_is_null(v)) && s->fallback && json_object_get(s->fallback, key))
        v = json_object_get(s->fallback, key);
    if (!v) return NULL;
    if (json_is_null(v)) {
        if (!nullable) *err = wrong(s, key, v, want);
        return NULL;
    }
    return v;
}

em_status em_cfg_int(em_cfg_src *s, const char *key, bool nullable, int64_t *out, bool *present) {
    em_status e;
    json_t *v = get(s, key, nullable, "an integer", &e);
    if (present) *present = v != NULL;
    if (!v) return e;
    if (!json_is_integer(v)) return wrong(s, key, v, "an integer");
    *out = (int64_t)json_integer_value(v);
    return EM_OK;
}

em_status em_cfg_num(em_cfg_src *s, const char *key, bool nullable, double *out, bool *present) {
    em_status e;
    json_t *v = get(s, key, nullable, "a number", &e);
    if (present) *present = v != NULL;
    if (!v) return e;
    if (!json_is_number(v)) return wrong(s, key, v, "a number");
    *out = json_number_value(v);
    return EM_OK;
}

em_status em_cfg_bool(em_cfg_src *s, const char *key, bool nullable, bool *out, bool *present) {
    em_status e;
    json_t *v = get(s, key, nullable, "true or false", &e);
    if (present) *present = v != NULL;
    if (!v) return e;
    if (!json_is_boolean(v)) return wrong(s, key, v, "true or false");
    *out = json_is_true(v);
    return EM_OK;
}

em_status em_cfg_str(em_cfg_src *s, const char *key, bool nullable, char *out, size_t n,
                     bool *present) {
    em_status e;
    json_t *v = get(s, key, nullable, "a string", &e);
    if (present) *present = v != NULL;
    if (!v) return e;
    if (!json_is_string(v)) return wrong(s, key, v, "a string");
    if (json_string_length(v) >= n)
        return EM_FAIL(s->c, EM_ERR_FORMAT, s->op, "%s: \"%s%s\" is longer than %zu bytes",
                       s->file, s->prefix, key, n - 1);
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
    return EM_OK;
}

em_status em_cfg_ids(em_cfg_src *s, const char *key, int64_t *ids, int *n, bool *present) {
    em_status e;
    json_t *v = get(s, key, true, "an integer or a list of integers", &e);
    if (present) *present = v != NULL;
    if (!v) return e;
    if (json_is_integer(v)) {
        ids[0] = (int64_t)json_integer_value(v);
        *n = 1;
        return EM_OK;
    }
    if (!json_is_array(v)) return wrong(s, key, v, "an integer or a list of integers");
    size_t i;
    json_t *x;
    int k = 0;
    json_array_foreach(v, i, x) {
        if (!json_is_integer(x))
            return EM_FAIL(s->c, EM_ERR_FORMAT, s->op, "%s: \"%s%s\"[%zu] is %s, expected an integer",
                           s->file, s->prefix, key, i, em_cfg_kind(x));
        if (k == EM_CONFIG_MAX_TOKEN_IDS)
            return EM_FAIL(s->c, EM_ERR_FORMAT, s->op, "%s: \"%s%s\" lists more than %d token ids",
                           s->file, s->prefix, key, EM_CONFIG_MAX_TOKEN_IDS);
        ids[k++] = (int64_t)json_integer_value(x);
    }
    *n = k;
    return EM_OK;
}

em_status em_cfg_each(em_cfg_src *s, const char *key,
                      em_status (*fn)(em_cfg_src *sub, const char *name, void *user), void *user,
                      bool *present) {
    em_status e;
    json_t *v = get(s, key, true, "an object", &e);
    if (present) *present = v != NULL;
    if (!v) return e;
    if (!json_is_object(v)) return wrong(s, key, v, "an object");
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s%s.", s->prefix, key);
    em_cfg_src sub = {s->c, s->file, prefix, v, s->op, NULL};
    const char *name;
    json_t *x;
    json_object_foreach(v, name, x) {
        (void)x;
        if ((e = fn(&sub, name, user))) return e;
    }
    return EM_OK;
}

em_status em_cfg_parse_text(em_ctx *c, const char *op, const char *text, size_t n,
                            const char *name, json_t **root) {
    json_error_t je;
    *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
    if (!*root)
        return EM_FAIL(c, EM_ERR_FORMAT, op, "%s is not valid JSON: %s (line %d, column %d)", name,
                       je.text, je.line, je.column);
    if (!json_is_object(*root)) {
        em_status s = EM_FAIL(c, EM_ERR_FORMAT, op, "%s: the document is %s, not an object", name,
                              em_cfg_kind(*root));
        json_decref(*root);
        *root = NULL;
        return s;
    }
    return EM_OK;
}

em_status em_cfg_load_file(em_ctx *c, const char *op, const char *path, const char *default_name,
                           json_t **root, char **resolved) {
    *root = NULL;
    *resolved = NULL;
    if (!path || !*path) return EM_FAIL(c, EM_ERR_INVALID_ARG, op, "path is NULL or empty");
    struct stat sb;
    size_t n = strlen(path) + strlen(default_name) + 2;
    char *p = malloc(n);
    if (!p) return EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        snprintf(p, n, "%s%s%s", path, path[strlen(path) - 1] == '/' ? "" : "/", default_name);
    else
        snprintf(p, n, "%s", path);
    /* config files are small; a bound keeps a stray multi-GB path from being slurped */
    size_t len = 0;
    char *text = em_file_read(c, op, p, (size_t)64 << 20, &len, NULL);
    em_status s = text ? em_cfg_parse_text(c, op, text, len, p, root) : em_ctx_status(c);
    free(text);
    if (s) {
        free(p);
        return s;
    }
    *resolved = p;
    return EM_OK;
}

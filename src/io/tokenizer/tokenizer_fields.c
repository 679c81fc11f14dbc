/*
 * Reading tokenizer.json fields with jansson: type checks and defaults shared by the component
 * loaders. Every failure names the file, the JSON path of the component and what was expected.
 * Absent and null fields take the library's default.
 */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "io/tokenizer/tokenizer_impl.h"

bool tk_ld_fail(tk_ld *l, em_status s, const char *where, const char *fmt, ...) {
    char msg[560];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    em_ctx_fail(l->c, s, "tokenizer_load", "%s: %s%s%s", l->file, where ? where : "",
                where && *where ? ": " : "", msg);
    return false;
}

bool tk_ld_oom(tk_ld *l) { return tk_ld_fail(l, EM_ERR_OOM, NULL, "out of memory"); }

const char *tk_json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

bool tk_opt_bool(tk_ld *l, json_t *o, const char *key, bool dflt, bool *out, const char *where) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return true;
    }
    if (!json_is_boolean(v))
        return tk_ld_fail(l, EM_ERR_FORMAT, where, "\"%s\" must be a boolean, not %s", key,
                     tk_json_kind(v));
    *out = json_is_true(v);
    return true;
}

/* A string field copied into the arena; *out = NULL when absent or null (unless required). */
bool tk_opt_str(tk_ld *l, json_t *o, const char *key, bool required, const char **out,
                    size_t *len, const char *where) {
    json_t *v = json_object_get(o, key);
    *out = NULL;
    if (len) *len = 0;
    if (!v || json_is_null(v)) {
        if (required) return tk_ld_fail(l, EM_ERR_FORMAT, where, "missing the string \"%s\"", key);
        return true;
    }
    if (!json_is_string(v))
        return tk_ld_fail(l, EM_ERR_FORMAT, where, "\"%s\" must be a string, not %s", key,
                     tk_json_kind(v));
    size_t n = json_string_length(v);
    char *s = tk_arena_strndup(&l->t->arena, json_string_value(v), n);
    if (!s) return tk_ld_oom(l);
    *out = s;
    if (len) *len = n;
    return true;
}

bool tk_opt_uint(tk_ld *l, json_t *o, const char *key, size_t dflt, size_t *out,
                     const char *where) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return true;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return tk_ld_fail(l, EM_ERR_FORMAT, where, "\"%s\" must be a non-negative integer, not %s",
                     key, tk_json_kind(v));
    *out = (size_t)json_integer_value(v);
    return true;
}

/* A field holding one character (Rust `char`). */
bool tk_opt_char(tk_ld *l, json_t *o, const char *key, uint32_t dflt, uint32_t *out,
                     const char *where) {
    json_t *v = json_object_get(o, key);
    if (!v) {
        *out = dflt;
        return true;
    }
    size_t k;
    if (json_is_string(v) && json_string_length(v) > 0) {
        const char *s = json_string_value(v);
        uint32_t c = tk_utf8_next(s, &k);
        if (k == json_string_length(v)) {
            *out = c;
            return true;
        }
    }
    return tk_ld_fail(l, EM_ERR_FORMAT, where, "\"%s\" must be a string of exactly one character",
                 key);
}

bool tk_get_type(tk_ld *l, json_t *v, const char *where, const char **type) {
    if (!json_is_object(v))
        return tk_ld_fail(l, EM_ERR_FORMAT, where, "expected an object, found %s", tk_json_kind(v));
    json_t *ty = json_object_get(v, "type");
    if (!json_is_string(ty))
        return tk_ld_fail(l, EM_ERR_FORMAT, where, "missing the string \"type\"");
    *type = json_string_value(ty);
    return true;
}

/* {"String": "..."} or {"Regex": "..."} */
bool tk_get_pattern(tk_ld *l, json_t *o, const char *where, tk_regex *re) {
    json_t *p = json_object_get(o, "pattern");
    json_t *s = json_is_object(p) ? json_object_get(p, "String") : NULL;
    json_t *r = json_is_object(p) ? json_object_get(p, "Regex") : NULL;
    if (!json_is_object(p) || json_object_size(p) != 1 || !(json_is_string(s) || json_is_string(r)))
        return tk_ld_fail(l, EM_ERR_FORMAT, where,
                     "\"pattern\" must be {\"String\": \"...\"} or {\"Regex\": \"...\"}");
    json_t *v = s ? s : r;
    char err[400];
    if (!tk_regex_compile(re, json_string_value(v), json_string_length(v), s != NULL, err,
                          sizeof err))
        return tk_ld_fail(l, EM_ERR_FORMAT, where, "%s", err);
    return true;
}

bool tk_get_behavior(tk_ld *l, json_t *o, const char *where, bool required,
                         tk_split_behavior *b) {
    static const struct {
        const char *name;
        tk_split_behavior b;
    } names[] = {{"Removed", TK_SPLIT_REMOVED},
                 {"Isolated", TK_SPLIT_ISOLATED},
                 {"MergedWithPrevious", TK_SPLIT_MERGED_WITH_PREVIOUS},
                 {"MergedWithNext", TK_SPLIT_MERGED_WITH_NEXT},
                 {"Contiguous", TK_SPLIT_CONTIGUOUS}};
    json_t *v = json_object_get(o, "behavior");
    if (!v) {
        if (required) return tk_ld_fail(l, EM_ERR_FORMAT, where, "missing \"behavior\"");
        *b = TK_SPLIT_ISOLATED;
        return true;
    }
    if (json_is_string(v))
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (!strcmp(json_string_value(v), names[i].name)) {
                *b = names[i].b;
                return true;
            }
    return tk_ld_fail(l, EM_ERR_FORMAT, where,
                 "\"behavior\" must be one of Removed, Isolated, MergedWithPrevious, "
                 "MergedWithNext, Contiguous");
}

bool tk_get_prepend_scheme(tk_ld *l, json_t *o, const char *where, tk_prepend_scheme *out) {
    json_t *v = json_object_get(o, "prepend_scheme");
    *out = TK_PREPEND_ALWAYS;
    if (v) {
        const char *s = json_is_string(v) ? json_string_value(v) : "";
        if (!strcmp(s, "always")) *out = TK_PREPEND_ALWAYS;
        else if (!strcmp(s, "first")) *out = TK_PREPEND_FIRST;
        else if (!strcmp(s, "never")) *out = TK_PREPEND_NEVER;
        else
            return tk_ld_fail(l, EM_ERR_FORMAT, where,
                         "\"prepend_scheme\" must be \"always\", \"first\" or \"never\"");
    }
    /* the older add_prefix_space: false must agree with prepend_scheme (metaspace.rs) */
    json_t *aps = json_object_get(o, "add_prefix_space");
    if (json_is_false(aps)) {
        if (*out != TK_PREPEND_NEVER)
            return tk_ld_fail(l, EM_ERR_FORMAT, where,
                         "add_prefix_space does not match declared prepend_scheme");
        *out = TK_PREPEND_NEVER;
    }
    return true;
}

bool tk_get_array(tk_ld *l, json_t *o, const char *key, const char *where, json_t **out) {
    *out = json_object_get(o, key);
    if (!json_is_array(*out))
        return tk_ld_fail(l, EM_ERR_FORMAT, where, "\"%s\" must be an array", key);
    return true;
}


/* Chat templates: the public API (include/ember/chat.h). Compiling lexes, parses and checks the
 * template once; rendering prepares the variables the way transformers' apply_chat_template
 * does and runs the evaluator in an arena of its own. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "io/jinja/jinja.h"

struct em_chat_template {
    jarena arena;
    const char *src; /* normalized source (newlines, trailing newline) */
    size_t len;
    jnode *root;
    jinja_limits lim;
};

static const char *OP = "chat_template";

/* Offset of the first byte that is not well-formed UTF-8, or SIZE_MAX. */
static size_t utf8_invalid_at(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp, min;
        if (c >= 0xC2 && c <= 0xDF) {
            k = 2;
            cp = c & 0x1F;
            min = 0x80;
        } else if (c >= 0xE0 && c <= 0xEF) {
            k = 3;
            cp = c & 0x0F;
            min = 0x800;
        } else if (c >= 0xF0 && c <= 0xF4) {
            k = 4;
            cp = c & 0x07;
            min = 0x10000;
        } else {
            return i;
        }
        if (i + k > n) return i;
        for (size_t j = 1; j < k; j++) {
            if ((p[i + j] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (p[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return i;
        i += k;
    }
    return SIZE_MAX;
}

em_chat_template *em_chat_template_compile(em_ctx *c, const char *source) {
    if (em_ctx_status(c) != EM_OK) return NULL; /* the first error stays (DESIGN.md) */
    if (!source) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "the template source is NULL");
        return NULL;
    }
    jinja_limits lim = jinja_default_limits();
    size_t len = strlen(source);
    if (len > lim.max_source) {
        em_ctx_fail(c, EM_ERR_OVERFLOW, OP, "the template is %zu bytes (limit %zu)", len,
                    lim.max_source);
        return NULL;
    }
    size_t bad = utf8_invalid_at(source, len);
    if (bad != SIZE_MAX) {
        em_ctx_fail(c, EM_ERR_FORMAT, OP, "the template is not valid UTF-8 (byte %zu)", bad);
        return NULL;
    }
    em_chat_template *t = calloc(1, sizeof *t);
    if (!t) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    t->lim = lim;
    /* on the heap: what changes between setjmp and longjmp must not be a plain local */
    jfail *f = calloc(1, sizeof *f);
    if (!f) {
        free(t);
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    jmem_init(&t->arena, f, 0);
    if (setjmp(f->jb)) {
        em_ctx_fail(c, f->status, OP, "%s", f->msg);
        jmem_free(&t->arena);
        free(t);
        free(f);
        return NULL;
    }
    t->src = jinja_normalize_source(&t->arena, source, &len);
    t->len = len;
    f->src = t->src;
    f->src_len = t->len;
    size_t ntok;
    jtok *toks = jinja_lex(&t->arena, f, t->src, t->len, &ntok);
    t->root = jinja_parse(&t->arena, f, toks, ntok, lim.max_parse_depth, lim.max_height);
    jinja_check(f, t->root);
    t->arena.fail = NULL; /* the compile arena is not grown again */
    free(f);
    return t;
}

void em_chat_template_free(em_chat_template *t) {
    if (!t) return;
    jmem_free(&t->arena);
    free(t);
}

void jinja_template_set_limits(em_chat_template *t, const jinja_limits *lim) {
    if (t && lim) t->lim = *lim;
}

/* ---- inputs ---- */

static json_t *parse_json(em_ctx *c, const char *what, const char *text) {
    json_error_t je;
    json_t *j = json_loads(text, JSON_ALLOW_NUL, &je);
    if (!j)
        em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s: line %d, column %d: %s", what, je.line,
                    je.column, je.text);
    return j;
}

/* What apply_chat_template does to each message before rendering: drop keys whose value is
 * None (_normalize_chat_messages), then alias the reasoning fields (_alias_reasoning_fields). */
static jv prepare_message(jrt *rt, jdict *m) {
    jv clean = jv_dict_new(rt->a, m->n + 2);
    for (size_t k = 0; k < m->n; k++)
        if (m->vals[k].k != JV_NONE) jv_dict_set(rt, clean.d, m->keys[k], m->vals[k]);
    static const char *const fields[] = {"reasoning_content", "thinking", "reasoning"};
    jv *reasoning = NULL;
    for (int k = 0; k < 3 && !reasoning; k++)
        reasoning = jv_dict_get_str(clean.d, fields[k], strlen(fields[k]));
    if (!reasoning) return clean;
    jv r = *reasoning;
    jv out = jv_dict_new(rt->a, clean.d->n + 2);
    jv_dict_set(rt, out.d, jv_cstr(rt->a, "thinking"), r);
    for (size_t k = 0; k < clean.d->n; k++)
        jv_dict_set(rt, out.d, clean.d->keys[k], clean.d->vals[k]);
    jv_dict_set(rt, out.d, jv_cstr(rt->a, "reasoning_content"), r);
    return out;
}

char *em_chat_template_render(em_ctx *c, const em_chat_template *t, const char *messages_json,
                              bool add_generation_prompt, const char *extra_vars_json) {
    if (em_ctx_status(c) != EM_OK) return NULL;
    if (!t || !messages_json) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "%s is NULL", !t ? "the template" : "messages_json");
        return NULL;
    }
    json_t *msgs = parse_json(c, "messages_json", messages_json);
    if (!msgs) return NULL;
    json_t *extra = NULL;
    if (extra_vars_json) {
        extra = parse_json(c, "extra_vars_json", extra_vars_json);
        if (!extra) {
            json_decref(msgs);
            return NULL;
        }
    }
    const char *problem = NULL;
    if (!json_is_array(msgs))
        problem = "messages_json must be a JSON array of message objects";
    else if (json_array_size(msgs) == 0)
        problem = "Cannot apply chat template to an empty conversation. Provide at least one "
                  "message.";
    else if (extra && !json_is_object(extra))
        problem = "extra_vars_json must be a JSON object";
    else if (extra && (json_object_get(extra, "messages") ||
                       json_object_get(extra, "add_generation_prompt")))
        problem = "extra_vars_json may not set \"messages\" or \"add_generation_prompt\"";
    for (size_t k = 0; !problem && k < json_array_size(msgs); k++)
        if (!json_is_object(json_array_get(msgs, k)))
            problem = "every message must be a JSON object ({\"role\": ..., \"content\": ...})";
    if (problem) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "%s", problem);
        json_decref(msgs);
        json_decref(extra);
        return NULL;
    }

    /* on the heap: what changes between setjmp and longjmp must not be a plain local */
    struct {
        jfail f;
        jarena a;
    } *st = calloc(1, sizeof *st);
    if (!st) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        json_decref(msgs);
        json_decref(extra);
        return NULL;
    }
    jfail *f = &st->f;
    jarena *a = &st->a;
    f->src = t->src;
    f->src_len = t->len;
    jmem_init(a, f, t->lim.max_memory);
    jrt rt = {.fail = f, .a = a, .lim = &t->lim};
    if (setjmp(f->jb)) {
        em_ctx_fail(c, f->status, OP, "%s", f->msg);
        jmem_free(a);
        free(st);
        json_decref(msgs);
        json_decref(extra);
        return NULL;
    }
    jscope *globals = jrt_scope_new(&rt, NULL);
    jinja_install_globals(&rt, globals);
    jscope *top = jrt_scope_new(&rt, globals);
    rt.globals = globals;

    jv conv = jrt_json_import(&rt, msgs);
    jv prepared = jv_list_new(a, conv.l->n);
    for (size_t k = 0; k < conv.l->n; k++)
        jv_list_push(a, prepared.l, prepare_message(&rt, conv.l->v[k].d));
    jrt_set(&rt, top, "messages", prepared);
    jrt_set(&rt, top, "tools", jv_none());
    jrt_set(&rt, top, "documents", jv_none());
    jrt_set(&rt, top, "add_generation_prompt", jv_bool(add_generation_prompt));
    if (extra) {
        const char *key;
        json_t *val;
        json_object_foreach(extra, key, val) { jrt_set(&rt, top, key, jrt_json_import(&rt, val)); }
    }

    jbuf out;
    jmem_buf_init(&out, a, t->lim.max_output);
    rt.out = &out;
    jrt_exec_body(&rt, top, &t->root->l3);

    if (out.n && memchr(out.p, 0, out.n))
        jmem_fail_at(f, EM_ERR_INVALID_ARG, JPOS_NONE,
                 "the rendered text contains a U+0000 character, which a C string cannot hold");
    char *result = malloc(out.n + 1);
    if (!result) jmem_fail_at(f, EM_ERR_OOM, JPOS_NONE, "out of memory (%zu bytes)", out.n + 1);
    if (out.n) memcpy(result, out.p, out.n);
    result[out.n] = 0;
    jmem_free(a);
    free(st);
    json_decref(msgs);
    json_decref(extra);
    return result;
}

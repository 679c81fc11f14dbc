/*
 * Loading tokenizer.json and tokenizer_config.json (tokenizers/src/tokenizer/serialization.rs
 * and the Deserialize impls of each component).
 *
 * The document is read whole; the model's vocab and merges go through the fast scanner of
 * tokenizer_json.c, the rest through jansson. Every component is checked field by field and a
 * failure names the file, the JSON path of the component ("pre_tokenizer.pretokenizers[1]")
 * and what was expected. Component types that `tokenizers` has and Ember does not are
 * EM_ERR_UNSUPPORTED; types neither knows are EM_ERR_FORMAT.
 */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/file_read.h"
#include "ember/gguf.h"
#include "io/tokenizer/tokenizer_impl.h"

/* ---- tokenizer_config.json ---- */

static bool read_file(em_ctx *c, const char *path, bool optional, char **buf, size_t *len,
                      bool *found) {
    bool missing = false;
    *buf = em_file_read(c, "tokenizer_load", path, (size_t)1 << 31, len, optional ? &missing : NULL);
    if (found) *found = *buf != NULL;
    return *buf || missing;
}

static json_t *parse_json(tk_ld *l, const char *doc, size_t len, size_t flags) {
    json_error_t je;
    json_t *root = json_loadb(doc, len, JSON_ALLOW_NUL | flags, &je);
    if (!root) {
        tk_ld_fail(l, EM_ERR_FORMAT, NULL, "malformed JSON at line %d, column %d: %s", je.line,
              je.column, je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        tk_ld_fail(l, EM_ERR_FORMAT, NULL, "the top level must be an object, not %s", tk_json_kind(root));
        json_decref(root);
        return NULL;
    }
    return root;
}

bool tk_add_template(tk_ld *l, const char *name, const char *src, size_t len) {
    em_tokenizer *t = l->t;
    for (size_t i = 0; i < t->n_templates; i++)
        if (!strcmp(t->tpl_names[i], name)) {
            t->tpl_sources[i] = tk_arena_strndup(&t->arena, src, len);
            return t->tpl_sources[i] ? true : tk_ld_oom(l);
        }
    const char **nn = realloc(t->tpl_names, (t->n_templates + 1) * sizeof *nn);
    if (!nn) return tk_ld_oom(l);
    t->tpl_names = nn;
    const char **ns = realloc(t->tpl_sources, (t->n_templates + 1) * sizeof *ns);
    if (!ns) return tk_ld_oom(l);
    t->tpl_sources = ns;
    t->tpl_names[t->n_templates] = tk_arena_strndup(&t->arena, name, strlen(name));
    t->tpl_sources[t->n_templates] = tk_arena_strndup(&t->arena, src, len);
    if (!t->tpl_names[t->n_templates] || !t->tpl_sources[t->n_templates]) return tk_ld_oom(l);
    t->n_templates++;
    return true;
}

static bool load_config(em_ctx *c, em_tokenizer *t, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    char *buf;
    size_t len;
    bool found;
    if (!read_file(c, path, true, &buf, &len, &found)) return false;
    tk_ld l = {c, path, t};
    bool ok = true;
    if (found) {
        /* integers such as model_max_length = 1e30 are of no interest here */
        json_t *root = parse_json(&l, buf, len, JSON_DECODE_INT_AS_REAL);
        ok = root != NULL;
        static const char *const keys[EM_SPECIAL_COUNT] = {
            "bos_token", "eos_token", "pad_token", "unk_token",
            "sep_token", "cls_token", "mask_token"};
        for (int i = 0; ok && i < EM_SPECIAL_COUNT; i++) {
            json_t *v = json_object_get(root, keys[i]);
            if (json_is_object(v)) v = json_object_get(v, "content"); /* {"content": ...} form */
            if (!v || json_is_null(v)) continue;
            if (!json_is_string(v)) {
                ok = tk_ld_fail(&l, EM_ERR_FORMAT, keys[i], "must be a string, an object with a "
                                                       "\"content\" string, or null");
                break;
            }
            t->special[i] = tk_arena_strndup(&t->arena, json_string_value(v), json_string_length(v));
            if (!t->special[i]) ok = tk_ld_oom(&l);
        }
        if (ok) ok = tk_opt_bool(&l, root, "add_bos_token", false, &t->add_bos, NULL) &&
                     tk_opt_bool(&l, root, "add_eos_token", false, &t->add_eos, NULL);
        json_t *tpl = ok ? json_object_get(root, "chat_template") : NULL;
        if (json_is_string(tpl)) {
            ok = tk_add_template(&l, "default", json_string_value(tpl), json_string_length(tpl));
        } else if (json_is_array(tpl)) {
            for (size_t i = 0; ok && i < json_array_size(tpl); i++) {
                json_t *e = json_array_get(tpl, i);
                json_t *nm = json_object_get(e, "name"), *src = json_object_get(e, "template");
                if (!json_is_string(nm) || !json_is_string(src))
                    ok = tk_ld_fail(&l, EM_ERR_FORMAT, "chat_template",
                               "a list of templates must hold {\"name\", \"template\"} strings");
                else
                    ok = tk_add_template(&l, json_string_value(nm), json_string_value(src),
                                      json_string_length(src));
            }
        } else if (tpl && !json_is_null(tpl))
            ok = tk_ld_fail(&l, EM_ERR_FORMAT, "chat_template", "must be a string or a list");
        json_decref(root);
        free(buf);
    }
    /* chat_template.jinja (transformers >= 4.43 saves the template there) overrides */
    if (ok) {
        snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
        if (!read_file(c, path, true, &buf, &len, &found)) return false;
        if (found) {
            tk_ld lj = {c, path, t};
            ok = tk_add_template(&lj, "default", buf, len);
            free(buf);
        }
    }
    return ok;
}

/* ---- the document ---- */

em_tokenizer *tk_new(em_ctx *c, const char *name) {
    em_tokenizer *t = calloc(1, sizeof *t);
    if (t) {
        for (int i = 0; i < EM_SPECIAL_COUNT; i++) t->special_id[i] = -1;
        t->name = strdup(name);
        t->pretok = calloc(TK_MAX_PRETOK, sizeof *t->pretok);
    }
    if (!t || !t->name || !t->pretok) {
        em_tokenizer_free(t);
        em_ctx_fail(c, EM_ERR_OOM, "tokenizer_load", "out of memory");
        return NULL;
    }
    return t;
}

void tk_resolve_specials(em_tokenizer *t) {
    for (int i = 0; i < EM_SPECIAL_COUNT; i++)
        if (t->special[i])
            t->special_id[i] = em_tokenizer_token_to_id(t, t->special[i], strlen(t->special[i]));
    if (!t->special[EM_SPECIAL_UNK] && t->model.unk_token) {
        t->special[EM_SPECIAL_UNK] = t->model.unk_token;
        t->special_id[EM_SPECIAL_UNK] = t->model.unk_id;
    }
}

static em_tokenizer *load_doc(em_ctx *c, const char *doc, size_t len, const char *name,
                              const char *config_dir) {
    em_tokenizer *t = tk_new(c, name ? name : "tokenizer.json");
    if (!t) return NULL;
    tk_ld l = {c, t->name, t};
    json_t *root = NULL;
    char *stripped = NULL;
    size_t bad;
    if (!tk_utf8_valid(doc, len, &bad)) {
        int line, col;
        tk_json_line_col(doc, len, bad, &line, &col);
        tk_ld_fail(&l, EM_ERR_FORMAT, NULL, "not valid UTF-8 at line %d, column %d (byte %zu)", line,
              col, bad);
        goto fail;
    }
    /* fast path: cut model.vocab and model.merges out for jansson */
    tk_json_span vs = {0, 0}, ms = {0, 0};
    bool fast = tk_json_find_model_arrays(doc, len, &vs, &ms);
    if (fast) {
        tk_json_span cut[2] = {vs, ms};
        int ncut = ms.end > ms.start ? 2 : 1;
        if (ncut == 2 && cut[1].start < cut[0].start) {
            tk_json_span x = cut[0];
            cut[0] = cut[1];
            cut[1] = x;
        }
        stripped = malloc(len + 16); /* "null" may be longer than a cut "{}" */
        if (!stripped) {
            tk_ld_oom(&l);
            goto fail;
        }
        size_t o = 0, from = 0;
        for (int i = 0; i < ncut; i++) {
            memcpy(stripped + o, doc + from, cut[i].start - from);
            o += cut[i].start - from;
            memcpy(stripped + o, "null", 4);
            o += 4;
            from = cut[i].end;
        }
        memcpy(stripped + o, doc + from, len - from);
        o += len - from;
        json_error_t je;
        root = json_loadb(stripped, o, JSON_ALLOW_NUL, &je);
        if (!root) {
            /* report the position in the original document */
            size_t pos = je.position > 0 ? (size_t)je.position : 0, shift = 0;
            for (int i = 0; i < ncut; i++) {
                size_t st = cut[i].start - shift; /* where the cut starts in `stripped` */
                if (pos > st + 4) pos += cut[i].end - cut[i].start - 4;
                else break;
                shift += cut[i].end - cut[i].start - 4;
            }
            int line, col;
            tk_json_line_col(doc, len, pos, &line, &col);
            tk_ld_fail(&l, EM_ERR_FORMAT, NULL, "malformed JSON at line %d, column %d: %s", line, col,
                  je.text);
            goto fail;
        }
    } else {
        root = parse_json(&l, doc, len, 0);
        if (!root) goto fail;
    }
    if (!json_is_object(root)) {
        tk_ld_fail(&l, EM_ERR_FORMAT, NULL, "the top level must be an object");
        goto fail;
    }
    json_t *ver = json_object_get(root, "version");
    if (ver && (!json_is_string(ver) || strcmp(json_string_value(ver), "1.0"))) {
        tk_ld_fail(&l, EM_ERR_FORMAT, "version", "unknown tokenizer version (expected \"1.0\")");
        goto fail;
    }
    json_t *v = json_object_get(root, "normalizer");
    if (v && !json_is_null(v)) {
        t->normalizer = calloc(1, sizeof *t->normalizer);
        if (!t->normalizer) {
            tk_ld_oom(&l);
            goto fail;
        }
        if (!tk_parse_normalizer(&l, v, "normalizer", t->normalizer)) goto fail;
    }
    v = json_object_get(root, "pre_tokenizer");
    if (v && !json_is_null(v) && !tk_parse_pretok(&l, v, "pre_tokenizer", 0)) goto fail;
    if (!tk_parse_model(&l, json_object_get(root, "model"), doc, fast ? &vs : NULL,
                     fast ? &ms : NULL))
        goto fail;
    v = json_object_get(root, "post_processor");
    if (v && !json_is_null(v)) {
        t->post = calloc(1, sizeof *t->post);
        if (!t->post) {
            tk_ld_oom(&l);
            goto fail;
        }
        if (!tk_parse_post(&l, v, "post_processor", t->post, 0)) goto fail;
    }
    v = json_object_get(root, "decoder");
    if (v && !json_is_null(v)) {
        t->decoder = calloc(1, sizeof *t->decoder);
        if (!t->decoder) {
            tk_ld_oom(&l);
            goto fail;
        }
        if (!tk_parse_decoder(&l, v, "decoder", t->decoder, 0)) goto fail;
    }
    if (!tk_parse_added_tokens(&l, json_object_get(root, "added_tokens"))) goto fail;
    json_decref(root);
    root = NULL;
    free(stripped);
    stripped = NULL;
    if (config_dir && !load_config(c, t, config_dir)) goto fail;
    tk_resolve_specials(t);
    return t;
fail:
    json_decref(root);
    free(stripped);
    em_tokenizer_free(t);
    return NULL;
}

em_tokenizer *em_tokenizer_load_json(em_ctx *c, const char *json, size_t len, const char *name) {
    if (em_ctx_status(c) != EM_OK) return NULL;
    if (!json && len) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "tokenizer_load", "json is NULL");
        return NULL;
    }
    return load_doc(c, json ? json : "", len, name ? name : "tokenizer.json", NULL);
}

em_tokenizer *em_tokenizer_load(em_ctx *c, const char *path) {
    if (em_ctx_status(c) != EM_OK) return NULL;
    if (!path) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "tokenizer_load", "path is NULL");
        return NULL;
    }
    struct stat st;
    if (stat(path, &st)) {
        em_ctx_fail(c, errno == ENOENT ? EM_ERR_NOT_FOUND : EM_ERR_IO, "tokenizer_load",
                    "cannot find %s: %s (expected a tokenizer.json or a folder holding one)",
                    path, strerror(errno));
        return NULL;
    }
    char file[4096], dir[4096];
    const char *config_dir = NULL;
    size_t plen = strlen(path);
    if (!S_ISDIR(st.st_mode) && plen > 5 && !strcmp(path + plen - 5, ".gguf")) {
        em_gguf *g = em_gguf_open(c, path);
        em_tokenizer *t = g ? em_tokenizer_from_gguf(c, g) : NULL;
        em_gguf_free(g);
        return t;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(file, sizeof file, "%s/tokenizer.json", path);
        snprintf(dir, sizeof dir, "%s", path);
        config_dir = dir;
    } else {
        snprintf(file, sizeof file, "%s", path);
        const char *slash = strrchr(path, '/');
        const char *base = slash ? slash + 1 : path;
        if (!strcmp(base, "tokenizer.json")) {
            if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
            else snprintf(dir, sizeof dir, ".");
            config_dir = dir;
        }
    }
    char *buf;
    size_t len;
    if (!read_file(c, file, false, &buf, &len, NULL)) return NULL;
    em_tokenizer *t = load_doc(c, buf, len, file, config_dir);
    free(buf);
    return t;
}

void em_tokenizer_free(em_tokenizer *t) {
    if (!t) return;
    tk_model_free(&t->model);
    if (t->normalizer) tk_norm_free(t->normalizer);
    free(t->normalizer);
    if (t->pretok)
        for (size_t i = 0; i < t->n_pretok; i++) tk_regex_free(&t->pretok[i].re);
    free(t->pretok);
    if (t->post) tk_post_free(t->post);
    free(t->post);
    if (t->decoder) tk_decoder_free(t->decoder);
    free(t->decoder);
    tk_added_free(&t->added);
    free(t->tpl_names);
    free(t->tpl_sources);
    tk_arena_free(&t->arena);
    free(t->name);
    free(t);
}


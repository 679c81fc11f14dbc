/*
 * Post-processors (tokenizers/src/processors) for one sequence: they only add special
 * tokens around the ids, and only when add_special_tokens is set. ByteLevel's post-processor
 * trims offsets, which Ember does not track, so it changes no id.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer/tokenizer_impl.h"

static bool wrap(tk_ids *ids, int32_t first, int32_t last, tk_ids *tmp) {
    tmp->n = 0;
    if (!tk_ids_push(tmp, first) || !tk_ids_append(tmp, ids->v, ids->n) || !tk_ids_push(tmp, last))
        return false;
    tk_ids t = *ids;
    *ids = *tmp;
    *tmp = t;
    return true;
}

static bool apply(tk_enc *e, const tk_post *p, tk_ids *ids, bool add, tk_ids *tmp) {
    switch (p->type) {
    case TK_POST_BYTE_LEVEL: return true;
    case TK_POST_BERT:
    case TK_POST_ROBERTA:
        if (!add) return true;
        return wrap(ids, p->cls_id, p->sep_id, tmp)
                   ? true
                   : tk_enc_fail(e, EM_ERR_OOM, "out of memory in the post-processor");
    case TK_POST_TEMPLATE: {
        tmp->n = 0;
        for (size_t i = 0; i < p->n_single; i++) {
            const tk_tpl_piece *pc = &p->single[i];
            bool ok = true;
            if (pc->is_sequence) ok = tk_ids_append(tmp, ids->v, ids->n);
            else if (add) ok = tk_ids_append(tmp, pc->ids, pc->n_ids);
            if (!ok) return tk_enc_fail(e, EM_ERR_OOM, "out of memory in the post-processor");
        }
        tk_ids t = *ids;
        *ids = *tmp;
        *tmp = t;
        return true;
    }
    case TK_POST_SEQUENCE:
        for (size_t i = 0; i < p->n_children; i++)
            if (!apply(e, &p->children[i], ids, add, tmp)) return false;
        return true;
    }
    return tk_enc_fail(e, EM_ERR_INTERNAL, "unknown post-processor");
}

bool tk_post_process(tk_enc *e, const tk_post *p, tk_ids *ids, bool add_special) {
    tk_ids tmp = {0};
    bool ok = apply(e, p, ids, add_special, &tmp);
    free(tmp.v);
    return ok;
}

void tk_post_free(tk_post *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_single; i++) free(p->single[i].ids);
    for (size_t i = 0; i < p->n_pair; i++) free(p->pair[i].ids);
    free(p->single);
    free(p->pair);
    for (size_t i = 0; i < p->n_children; i++) tk_post_free(&p->children[i]);
    free(p->children);
}

/* ---- loading (tokenizer.json "post_processor") ---- */

static bool token_pair(tk_ld *l, json_t *o, const char *key, const char *where, int32_t *id) {
    json_t *v = json_object_get(o, key);
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_string(json_array_get(v, 0)) ||
        !json_is_integer(json_array_get(v, 1)) || json_integer_value(json_array_get(v, 1)) < 0 ||
        json_integer_value(json_array_get(v, 1)) > INT32_MAX)
        return tk_ld_fail(l, EM_ERR_FORMAT, where, "\"%s\" must be [\"token\", id]", key);
    *id = (int32_t)json_integer_value(json_array_get(v, 1));
    return true;
}

static bool parse_template(tk_ld *l, json_t *v, const char *key, const char *where, json_t *specials,
                           tk_tpl_piece **out, size_t *n_out, bool single) {
    json_t *arr;
    if (!tk_get_array(l, v, key, where, &arr)) return false;
    size_t n = json_array_size(arr);
    *out = calloc(n ? n : 1, sizeof **out);
    if (!*out) return tk_ld_oom(l);
    *n_out = n;
    for (size_t i = 0; i < n; i++) {
        json_t *p = json_array_get(arr, i);
        json_t *seq = json_object_get(p, "Sequence"), *sp = json_object_get(p, "SpecialToken");
        char w[220];
        snprintf(w, sizeof w, "%s.%s[%zu]", where, key, i);
        tk_tpl_piece *pc = &(*out)[i];
        if (json_is_object(seq)) {
            json_t *id = json_object_get(seq, "id");
            const char *s = json_is_string(id) ? json_string_value(id) : "";
            if (strcmp(s, "A") && strcmp(s, "B"))
                return tk_ld_fail(l, EM_ERR_FORMAT, w, "a Sequence id must be \"A\" or \"B\"");
            pc->is_sequence = true;
            pc->seq = s[0] == 'B';
            if (single && pc->seq)
                return tk_ld_fail(l, EM_ERR_FORMAT, w,
                             "the single-sequence template uses sequence B");
        } else if (json_is_object(sp)) {
            json_t *id = json_object_get(sp, "id");
            if (!json_is_string(id))
                return tk_ld_fail(l, EM_ERR_FORMAT, w, "a SpecialToken needs a string \"id\"");
            json_t *tok = json_object_get(specials, json_string_value(id));
            json_t *ids = json_object_get(tok, "ids");
            if (!json_is_array(ids))
                return tk_ld_fail(l, EM_ERR_FORMAT, w,
                             "the special token \"%s\" is not described in special_tokens",
                             json_string_value(id));
            size_t m = json_array_size(ids);
            pc->ids = malloc((m ? m : 1) * sizeof *pc->ids);
            if (!pc->ids) return tk_ld_oom(l);
            pc->n_ids = m;
            for (size_t j = 0; j < m; j++) {
                json_t *x = json_array_get(ids, j);
                if (!json_is_integer(x) || json_integer_value(x) < 0 ||
                    json_integer_value(x) > INT32_MAX)
                    return tk_ld_fail(l, EM_ERR_FORMAT, w,
                                 "special_tokens[\"%s\"].ids must be non-negative integers",
                                 json_string_value(id));
                pc->ids[j] = (int32_t)json_integer_value(x);
            }
        } else
            return tk_ld_fail(l, EM_ERR_FORMAT, w,
                         "a template piece must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
    return true;
}

bool tk_parse_post(tk_ld *l, json_t *v, const char *where, tk_post *p, int depth) {
    memset(p, 0, sizeof *p);
    const char *type;
    if (depth > 16) return tk_ld_fail(l, EM_ERR_FORMAT, where, "post-processors nested too deeply");
    if (!tk_get_type(l, v, where, &type)) return false;
    if (!strcmp(type, "TemplateProcessing")) {
        p->type = TK_POST_TEMPLATE;
        json_t *specials = json_object_get(v, "special_tokens");
        if (specials && !json_is_object(specials))
            return tk_ld_fail(l, EM_ERR_FORMAT, where, "\"special_tokens\" must be an object");
        return parse_template(l, v, "single", where, specials, &p->single, &p->n_single, true) &&
               parse_template(l, v, "pair", where, specials, &p->pair, &p->n_pair, false);
    }
    if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        p->type = type[0] == 'B' ? TK_POST_BERT : TK_POST_ROBERTA;
        return token_pair(l, v, "cls", where, &p->cls_id) &&
               token_pair(l, v, "sep", where, &p->sep_id);
    }
    if (!strcmp(type, "ByteLevel")) {
        p->type = TK_POST_BYTE_LEVEL;
        return true;
    }
    if (!strcmp(type, "Sequence")) {
        p->type = TK_POST_SEQUENCE;
        json_t *arr;
        if (!tk_get_array(l, v, "processors", where, &arr)) return false;
        p->n_children = json_array_size(arr);
        p->children = calloc(p->n_children ? p->n_children : 1, sizeof *p->children);
        if (!p->children) return tk_ld_oom(l);
        for (size_t i = 0; i < p->n_children; i++) {
            char w[200];
            snprintf(w, sizeof w, "%s.processors[%zu]", where, i);
            if (!tk_parse_post(l, json_array_get(arr, i), w, &p->children[i], depth + 1)) return false;
        }
        return true;
    }
    return tk_ld_fail(l, EM_ERR_FORMAT, where, "unknown post-processor type \"%s\"", type);
}

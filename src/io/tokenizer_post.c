/*
 * Post-processors (tokenizers/src/processors) for one sequence: they only add special
 * tokens around the ids, and only when add_special_tokens is set. ByteLevel's post-processor
 * trims offsets, which Ember does not track, so it changes no id.
 */
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer_impl.h"

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

/* BERT encoders (all-MiniLM-L6-v2 and kin): absolute position embeddings, post-norm layers with
 * biases, bidirectional attention over the real tokens, GELU (erf) MLP. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model_impl.h"

em_status em_bert_load(em_wload *w) {
    em_ctx *c = w->c;
    em_model *m = w->m;
    const char *p = w->prefix;
    em_device *d = m->dev_embed;
    m->act = EM_ACT_GELU;
    m->word_emb = em_wl_get(w, d, "%sembeddings.word_embeddings.weight", p);
    m->pos_emb = em_wl_get(w, d, "%sembeddings.position_embeddings.weight", p);
    m->type_emb = em_wl_opt(w, d, "%sembeddings.token_type_embeddings.weight", p);
    m->emb_ln = em_wl_get(w, d, "%sembeddings.LayerNorm.weight", p);
    m->emb_lnb = em_wl_get(w, d, "%sembeddings.LayerNorm.bias", p);
    m->bert = calloc((size_t)m->n_layers + 1, sizeof *m->bert);
    if (!m->bert) return em_ctx_fail(c, EM_ERR_OOM, "model_load", "out of memory");
    for (int64_t i = 0; i < m->n_layers && !em_ctx_status(c); i++) {
        em_bert_layer *b = &m->bert[i];
        em_device *ld = m->layers[i].dev;
        char lp[160];
        snprintf(lp, sizeof lp, "%sencoder.layer.%lld.", p, (long long)i);
        b->q = em_wl_get(w, ld, "%sattention.self.query.weight", lp);
        b->qb = em_wl_get(w, ld, "%sattention.self.query.bias", lp);
        b->k = em_wl_get(w, ld, "%sattention.self.key.weight", lp);
        b->kb = em_wl_get(w, ld, "%sattention.self.key.bias", lp);
        b->v = em_wl_get(w, ld, "%sattention.self.value.weight", lp);
        b->vb = em_wl_get(w, ld, "%sattention.self.value.bias", lp);
        b->ao = em_wl_get(w, ld, "%sattention.output.dense.weight", lp);
        b->aob = em_wl_get(w, ld, "%sattention.output.dense.bias", lp);
        b->ln1 = em_wl_get(w, ld, "%sattention.output.LayerNorm.weight", lp);
        b->ln1b = em_wl_get(w, ld, "%sattention.output.LayerNorm.bias", lp);
        b->inter = em_wl_get(w, ld, "%sintermediate.dense.weight", lp);
        b->interb = em_wl_get(w, ld, "%sintermediate.dense.bias", lp);
        b->out = em_wl_get(w, ld, "%soutput.dense.weight", lp);
        b->outb = em_wl_get(w, ld, "%soutput.dense.bias", lp);
        b->ln2 = em_wl_get(w, ld, "%soutput.LayerNorm.weight", lp);
        b->ln2b = em_wl_get(w, ld, "%soutput.LayerNorm.bias", lp);
    }
    return em_ctx_status(c);
}

/* BertConfig defaults */
static void bert_defaults(em_model_config *m) {
    m->vocab_size = 30522, m->hidden_size = 768, m->num_hidden_layers = 12;
    m->num_attention_heads = 12, m->intermediate_size = 3072;
    snprintf(m->hidden_act, sizeof m->hidden_act, "gelu");
    m->max_position_embeddings = 512, m->type_vocab_size = 2, m->layer_norm_eps = 1e-12;
    m->pad_token_id = 0, m->tie_word_embeddings = true, m->rms_norm_eps = 0;
}

const em_family em_family_bert = {
    .config = {.model_type = "bert", .defaults = bert_defaults},
    .load = em_bert_load,
};

static em_tensor *heads(em_ctx *c, em_tensor *x, int64_t b, int64_t t, int64_t h, int64_t d) {
    return em_transpose(c, em_reshape(c, x, 4, (int64_t[]){b, t, h, d}), 1, 2);
}

em_tensor *em_model_encode(em_ctx *c, const em_model *m, em_tensor *ids, em_tensor *mask,
                           em_tensor *token_types) {
    if (!c || em_ctx_status(c)) return NULL;
    char s[96];
    if (!m || !ids || m->fam->causal || em_tensor_ndim(ids) != 2) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "model_encode", "needs an encoder and ids [B, T], got %s",
                    ids ? em_tensor_sig(ids, s, sizeof s) : "none");
        return NULL;
    }
    const em_model_config *cfg = &m->cfg;
    int64_t b = em_tensor_dim(ids, 0), t = em_tensor_dim(ids, 1), hid = cfg->hidden_size;
    int64_t nh = cfg->num_attention_heads, hd = hid / nh;
    if (t > em_tensor_dim(m->pos_emb, 0)) {
        em_ctx_fail(c, EM_ERR_SHAPE, "model_encode", "%lld tokens exceed the %lld positions of "
                    "%s", (long long)t, (long long)em_tensor_dim(m->pos_emb, 0), m->dir);
        return NULL;
    }
    em_scope_push(c);
    em_device *d = m->dev_embed;
    em_tensor *pos = em_arange(c, 0, (double)t, 1, EM_I64);
    em_tensor *h = em_add(c, em_embedding(c, m->word_emb, em_to(c, ids, d)),
                          em_embedding(c, m->pos_emb, em_to(c, pos, d)));
    if (m->type_emb) {
        em_tensor *tt = token_types ? em_to(c, token_types, d)
                                    : em_zeros(c, EM_I64, 2, (int64_t[]){b, t});
        h = em_add(c, h, em_embedding(c, m->type_emb, tt));
    }
    double eps = cfg->layer_norm_eps > 0 ? cfg->layer_norm_eps : 1e-12;
    h = em_layer_norm(c, h, m->emb_ln, m->emb_lnb, eps);
    em_tensor *am = mask ? em_reshape(c, em_cast(c, mask, EM_BOOL), 4, (int64_t[]){b, 1, 1, t}) : NULL;
    em_sdpa_params sp = em_sdpa_default_params();
    for (int64_t i = 0; i < m->n_layers && !em_ctx_status(c); i++) {
        const em_bert_layer *L = &m->bert[i];
        em_device *ld = m->layers[i].dev;
        h = em_to(c, h, ld);
        em_tensor *lm = am ? em_to(c, am, ld) : NULL;
        em_scope_push(c);
        em_tensor *q = heads(c, em_linear(c, h, L->q, L->qb), b, t, nh, hd);
        em_tensor *k = heads(c, em_linear(c, h, L->k, L->kb), b, t, nh, hd);
        em_tensor *v = heads(c, em_linear(c, h, L->v, L->vb), b, t, nh, hd);
        em_tensor *a = em_sdpa(c, q, k, v, lm, &sp);
        a = em_reshape(c, em_transpose(c, a, 1, 2), 3, (int64_t[]){b, t, hid});
        a = em_layer_norm(c, em_add(c, em_linear(c, a, L->ao, L->aob), h), L->ln1, L->ln1b, eps);
        em_tensor *f = em_gelu(c, em_linear(c, a, L->inter, L->interb), false);
        em_tensor *o = em_layer_norm(c, em_add(c, em_linear(c, f, L->out, L->outb), a), L->ln2,
                                     L->ln2b, eps);
        em_tensor *next = em_keep(c, o);
        em_scope_pop(c);
        h = next;
    }
    em_tensor *r = em_keep(c, em_cast(c, h, EM_F32));
    em_scope_pop(c);
    return r;
}

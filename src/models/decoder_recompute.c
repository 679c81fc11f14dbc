/*
 * Gradient checkpointing of the decoder (transformers' gradient_checkpointing_enable): each
 * layer runs as an em_checkpoint region, so a training step keeps the layers' inputs only and
 * recomputes one layer's activations at a time in the backward.
 *
 * The backward runs after the forward returned and its scope closed, so the region keeps its
 * own copy of the step's state (em_fwd) with a reference to every tensor the layer reads from
 * it (positions, masks, rope tables). The router's load-balancing loss: the region returns the
 * layer's routing probabilities as a second output (so their gradient reaches the router
 * through the recomputation), and the top-k choices are counted by the first run only.
 *
 * Gemma 4: the layer's slice of the per-layer inputs is a region input; a layer whose keys and
 * values a later layer shares returns them as outputs (the caller stores them in f->keys/vals),
 * and the sharing layer takes them as inputs, so their gradients flow between the regions. The
 * region's own f->keys/vals hold them while the layer runs.
 */
#include <stdlib.h>

#include "ember/autograd.h"
#include "models/decoder_blocks.h"

typedef struct layer_region {
    em_fwd f;           /* the step's state; the tensors below retained */
    em_fwd *first;      /* the forward's own state during the first run (it takes the counts) */
    em_blk_layer_fn layer;
    int64_t li;
    bool pli;           /* in[1]: the layer's per-layer input slice */
    bool kv_in, kv_out; /* the source layer's keys and values as inputs; this layer's as outputs */
    em_tensor *kv[];    /* the region's f.keys then f.vals (n_layers each; borrowed per call) */
} layer_region;

/* Does a KV-sharing layer read layer li's keys/values? */
static bool kv_read_later(const em_model *m, int64_t li) {
    for (int64_t j = m->first_kv_shared; j < m->n_layers; j++)
        if (m->layers[j].kv_shared && m->layers[j].kv_src == li) return true;
    return false;
}

static em_tensor **held(layer_region *r, int i) {
    em_tensor **t[] = {&r->f.positions, &r->f.key_mask, &r->f.cos,  &r->f.sin,
                       &r->f.cos_l,     &r->f.sin_l,    &r->f.mask};
    return i < (int)(sizeof t / sizeof *t) ? t[i] : NULL;
}

static void region_free(void *p) {
    layer_region *r = p;
    for (int i = 0; held(r, i); i++) em_tensor_release(*held(r, i));
    free(r);
}

static em_status region_fn(em_ctx *c, void *user, em_tensor *const *in, int n_in,
                           em_tensor **out, int n_out) {
    (void)n_in;
    layer_region *r = user;
    em_fwd f = r->f;
    f.c = c;
    f.aux_prob_sum = NULL;
    int64_t nl = f.m->n_layers, src = f.m->layers[r->li].kv_src;
    int k = 1;
    if (r->pli) {
        f.pli = in[k++];
        f.pli_first = r->li;
    }
    if (r->kv_in || r->kv_out) {
        for (int64_t j = 0; j < 2 * nl; j++) r->kv[j] = NULL;
        f.keys = r->kv;
        f.vals = r->kv + nl;
    }
    if (r->kv_in) {
        f.keys[src] = in[k++];
        f.vals[src] = in[k++];
    }
    em_fwd *first = r->first;
    r->first = NULL; /* every later call is a recomputation */
    if (first) {
        f.aux_counts = first->aux_counts;
        f.aux_rows = first->aux_rows;
    } else {
        f.aux_skip_counts = true;
    }
    out[0] = r->layer(&f, &f.m->layers[r->li], in[0], r->li);
    if (first) { /* the counts, when this layer added to them, outlive the region's scope */
        first->aux_counts = f.aux_counts != first->aux_counts ? em_keep(c, f.aux_counts)
                                                              : f.aux_counts;
        first->aux_rows = f.aux_rows;
    }
    int o = 1;
    if (r->kv_out) {
        out[o++] = f.keys[r->li];
        out[o++] = f.vals[r->li];
        if ((!out[1] || !out[2]) && !em_ctx_status(c))
            return em_ctx_fail(c, EM_ERR_INTERNAL, "model_forward",
                               "layer %lld kept no keys and values to share", (long long)r->li);
    }
    if (n_out > o) {
        out[o] = f.aux_prob_sum;
        if (!out[o] && !em_ctx_status(c))
            return em_ctx_fail(c, EM_ERR_INTERNAL, "model_forward",
                               "layer %lld recorded no routing probabilities", (long long)r->li);
    }
    return em_ctx_status(c);
}

em_tensor *em_blk_layer_checkpointed(em_fwd *f, em_blk_layer_fn layer, const em_dec_layer *l,
                                     em_tensor *h, int64_t li) {
    em_ctx *c = f->c;
    const em_model *m = f->m;
    bool kv_in = l->kv_shared && f->keys, kv_out = f->keys && !l->kv_shared && kv_read_later(m, li);
    layer_region *r = calloc(1, sizeof *r + (kv_in || kv_out ? 2 * (size_t)m->n_layers : 0) *
                                                sizeof(em_tensor *));
    if (!r) {
        em_ctx_fail(c, EM_ERR_OOM, "model_forward", "out of memory (checkpointed layer)");
        return NULL;
    }
    r->f = *f;
    r->f.aux_prob_sum = NULL;
    r->f.aux_counts = NULL;
    r->f.aux_rows = 0;
    r->f.keys = r->f.vals = NULL; /* the region's own (kv[]) when it shares them */
    r->f.pli = NULL;              /* its slice comes as an input */
    r->first = f;
    r->layer = layer;
    r->li = li;
    r->pli = f->pli != NULL;
    r->kv_in = kv_in;
    r->kv_out = kv_out;
    for (int i = 0; held(r, i); i++) em_tensor_retain(*held(r, i));
    em_tensor *in[4] = {h}, *out[4] = {NULL};
    int n_in = 1, n_out = 1;
    if (r->pli) in[n_in++] = em_narrow(c, f->pli, 2, li - f->pli_first, 1);
    if (kv_in) {
        in[n_in++] = f->keys[l->kv_src];
        in[n_in++] = f->vals[l->kv_src];
    }
    n_out += kv_out ? 2 : 0;
    bool aux = f->want_aux && l->moe;
    n_out += aux;
    if (em_checkpoint(c, region_fn, r, region_free, in, n_in, out, n_out)) return NULL;
    if (kv_out) { /* outlive the layer's scope, as em_blk_attn keeps them */
        f->keys[li] = em_keep(c, out[1]);
        f->vals[li] = em_keep(c, out[2]);
    }
    if (aux)
        f->aux_prob_sum = f->aux_prob_sum ? em_add(c, f->aux_prob_sum, out[n_out - 1])
                                          : out[n_out - 1];
    return out[0];
}

em_status em_model_set_gradient_checkpointing(em_ctx *c, em_model *m, bool on) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!m)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, "gradient_checkpointing", "the model is NULL");
    const char *why = NULL;
    if (!m->fam->causal || !m->layers)
        why = "it is not a decoder language model";
    if (on && why)
        return em_ctx_fail(c, EM_ERR_UNSUPPORTED, "gradient_checkpointing",
                           "%s (%s) cannot recompute its layers: %s", m->dir, m->cfg.model_type,
                           why);
    m->grad_ckpt = on;
    return EM_OK;
}

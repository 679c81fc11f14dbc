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
 */
#include <stdlib.h>

#include "ember/autograd.h"
#include "models/decoder_blocks.h"

typedef struct layer_region {
    em_fwd f;           /* the step's state; the tensors below retained */
    em_fwd *first;      /* the forward's own state during the first run (it takes the counts) */
    em_blk_layer_fn layer;
    int64_t li;
} layer_region;

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
    if (n_out > 1) {
        out[1] = f.aux_prob_sum;
        if (!out[1] && !em_ctx_status(c))
            return em_ctx_fail(c, EM_ERR_INTERNAL, "model_forward",
                               "layer %lld recorded no routing probabilities", (long long)r->li);
    }
    return em_ctx_status(c);
}

em_tensor *em_blk_layer_checkpointed(em_fwd *f, em_blk_layer_fn layer, const em_dec_layer *l,
                                     em_tensor *h, int64_t li) {
    em_ctx *c = f->c;
    layer_region *r = calloc(1, sizeof *r);
    if (!r) {
        em_ctx_fail(c, EM_ERR_OOM, "model_forward", "out of memory (checkpointed layer)");
        return NULL;
    }
    r->f = *f;
    r->f.aux_prob_sum = NULL;
    r->f.aux_counts = NULL;
    r->f.aux_rows = 0;
    r->f.keys = r->f.vals = NULL; /* KV-sharing models are refused */
    r->first = f;
    r->layer = layer;
    r->li = li;
    for (int i = 0; held(r, i); i++) em_tensor_retain(*held(r, i));
    em_tensor *out[2] = {NULL, NULL};
    int n_out = f->want_aux && l->moe ? 2 : 1;
    if (em_checkpoint(c, region_fn, r, region_free, &h, 1, out, n_out)) return NULL;
    if (n_out == 2)
        f->aux_prob_sum = f->aux_prob_sum ? em_add(c, f->aux_prob_sum, out[1]) : out[1];
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
    else if (m->fam->layer || m->fam->after_embed)
        why = "its family has a layer of its own (per-layer inputs, KV sharing: gemma4)";
    else if (m->first_kv_shared < m->n_layers)
        why = "its layers read other layers' keys and values (KV sharing)";
    if (on && why)
        return em_ctx_fail(c, EM_ERR_UNSUPPORTED, "gradient_checkpointing",
                           "%s (%s) cannot recompute its layers: %s", m->dir, m->cfg.model_type,
                           why);
    m->grad_ckpt = on;
    return EM_OK;
}

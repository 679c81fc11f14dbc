/*
 * A decoder's parameters under the names transformers gives them (ember/model.h,
 * em_model_params): what model.named_parameters() lists, the LM head once when it is tied to
 * the embeddings, MoE experts in the v5 stacked layout the loader builds; Gemma 4's per-layer
 * input weights and its experts (router.proj/scale/per_expert_scale, experts.*, the norms beside
 * them). Its layer_scalar is a buffer there: em_model_buffers lists it, and
 * em_model_unlisted_weights counts what neither list names.
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "models/model_impl.h"

typedef struct lister {
    em_model_param *out;
    int max, n;
} lister;

static void add(lister *ls, em_tensor *t, const char *fmt, const char *a, long long li,
                const char *b) {
    if (!t) return;
    if (ls->n < ls->max) {
        em_model_param *p = &ls->out[ls->n];
        if (li >= 0) snprintf(p->name, sizeof p->name, fmt, a, li, b);
        else snprintf(p->name, sizeof p->name, fmt, a, b);
        p->tensor = t;
    }
    ls->n++;
}

/* Why the model's weights cannot be listed as trainable tensors (NULL: they can). */
static const char *refusal(const em_model *m) {
    if (!m->fam || !m->fam->causal) return "an encoder (only decoder language models)";
    if (m->tp_size > 1) return "split by tensor parallelism (each rank holds slices)";
    if (!m->embed || !em_dtype_is_float(em_tensor_dtype(m->embed))) return "quantized (GGUF)";
    for (int64_t l = 0; l < m->n_layers; l++) {
        const em_dec_layer *L = &m->layers[l];
        if (L->q && !em_dtype_is_float(em_tensor_dtype(L->q))) return "quantized (GGUF)";
        if (L->experts.gate_up && em_tensor_ndim(L->experts.gate_up) != 3)
            return "holding experts packed for ragged_dot (load with another moe_impl)";
    }
    return NULL;
}

int em_model_buffers(const em_model *m, em_model_param *out, int max) {
    if (!m || max < 0 || (max > 0 && !out)) return -1;
    lister ls = {out, max, 0};
    for (int64_t l = 0; l < m->n_layers; l++)
        add(&ls, m->layers[l].layer_scalar, "%slayers.%lld.%s", m->prefix, (long long)l,
            "layer_scalar");
    return ls.n;
}

static bool listed(const em_model_param *ps, int n, const em_tensor *t) {
    for (int i = 0; i < n; i++)
        if (ps[i].tensor == t) return true;
    return false;
}

int em_model_unlisted_weights(em_ctx *c, const em_model *m) {
    int np = em_model_params(c, m, NULL, 0), nb = em_model_buffers(m, NULL, 0);
    if (np < 0 || nb < 0) return -1;
    em_tensor **all = NULL;
    int na = em_model_weight_list(m, &all);
    em_model_param *ps = malloc((size_t)(np + nb + 1) * sizeof *ps);
    if (!ps || !all) {
        free(ps);
        free(all);
        em_ctx_fail(c, EM_ERR_OOM, "model_params", "out of memory");
        return -1;
    }
    em_model_params(c, m, ps, np);
    em_model_buffers(m, ps + np, nb);
    int n = 0;
    for (int i = 0; i < na; i++) n += !listed(ps, np + nb, all[i]);
    free(ps);
    free(all);
    return n;
}

int em_model_params(em_ctx *c, const em_model *m, em_model_param *out, int max) {
    if (!c || em_ctx_status(c)) return -1;
    if (!m || max < 0 || (max > 0 && !out)) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "model_params", "NULL model or output");
        return -1;
    }
    const char *why = refusal(m);
    if (why) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, "model_params",
                    "%s (%s) is %s: its parameters cannot be listed for training", m->dir,
                    m->cfg.model_type, why);
        return -1;
    }
    lister ls = {out, max, 0};
    const char *p = m->prefix;
    add(&ls, m->embed, "%sembed_tokens.weight%s", p, -1, "");
    for (int64_t l = 0; l < m->n_layers; l++) {
        const em_dec_layer *L = &m->layers[l];
        const char *f = "%slayers.%lld.%s";
        long long i = (long long)l;
        add(&ls, L->q, f, p, i, "self_attn.q_proj.weight");
        add(&ls, L->q_bias, f, p, i, "self_attn.q_proj.bias");
        add(&ls, L->k, f, p, i, "self_attn.k_proj.weight");
        add(&ls, L->k_bias, f, p, i, "self_attn.k_proj.bias");
        add(&ls, L->v, f, p, i, "self_attn.v_proj.weight");
        add(&ls, L->v_bias, f, p, i, "self_attn.v_proj.bias");
        add(&ls, L->o, f, p, i, "self_attn.o_proj.weight");
        add(&ls, L->o_bias, f, p, i, "self_attn.o_proj.bias");
        add(&ls, L->q_norm, f, p, i, "self_attn.q_norm.weight");
        add(&ls, L->k_norm, f, p, i, "self_attn.k_norm.weight");
        add(&ls, L->gate, f, p, i, "mlp.gate_proj.weight");
        add(&ls, L->up, f, p, i, "mlp.up_proj.weight");
        add(&ls, L->down, f, p, i, "mlp.down_proj.weight");
        if (L->router_scale) { /* Gemma 4: the experts beside the MLP, its own router */
            add(&ls, L->router_scale, f, p, i, "router.scale");
            add(&ls, L->experts.per_expert_scale, f, p, i, "router.per_expert_scale");
            add(&ls, L->router, f, p, i, "router.proj.weight");
            add(&ls, L->experts.gate_up, f, p, i, "experts.gate_up_proj");
            add(&ls, L->experts.down, f, p, i, "experts.down_proj");
            add(&ls, L->post_ffn_norm_1, f, p, i, "post_feedforward_layernorm_1.weight");
            add(&ls, L->post_ffn_norm_2, f, p, i, "post_feedforward_layernorm_2.weight");
            add(&ls, L->pre_ffn_norm_2, f, p, i, "pre_feedforward_layernorm_2.weight");
        } else {
            add(&ls, L->router, f, p, i, "mlp.gate.weight");
            add(&ls, L->experts.gate_up, f, p, i, "mlp.experts.gate_up_proj");
            add(&ls, L->experts.down, f, p, i, "mlp.experts.down_proj");
        }
        add(&ls, L->in_norm, f, p, i, "input_layernorm.weight");
        add(&ls, L->post_attn_norm, f, p, i, "post_attention_layernorm.weight");
        add(&ls, L->pre_ffn_norm, f, p, i, "pre_feedforward_layernorm.weight");
        add(&ls, L->post_ffn_norm, f, p, i, "post_feedforward_layernorm.weight");
        add(&ls, L->pl_gate, f, p, i, "per_layer_input_gate.weight");
        add(&ls, L->pl_proj, f, p, i, "per_layer_projection.weight");
        add(&ls, L->pl_norm, f, p, i, "post_per_layer_input_norm.weight");
    }
    add(&ls, m->final_norm, "%snorm.weight%s", p, -1, "");
    add(&ls, m->embed_pl, "%sembed_tokens_per_layer.weight%s", p, -1, "");
    add(&ls, m->pl_model_proj, "%sper_layer_model_projection.weight%s", p, -1, "");
    add(&ls, m->pl_proj_norm, "%sper_layer_projection_norm.weight%s", p, -1, "");
    if (m->lm_head && m->lm_head != m->embed) add(&ls, m->lm_head, "%slm_head.weight", "", -1, "");
    return ls.n;
}

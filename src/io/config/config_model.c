/* config.json → em_model_config with the defaults of transformers' config class for each
 * model_type (transformers 5.24, models/<type>/configuration_<type>.py), the derived values those
 * classes compute in __post_init__, and rope parameters standardised as
 * modeling_rope_utils.RotaryEmbeddingConfigMixin does. The reader is generic: what a family's
 * class adds comes from its em_cfg_family (config_family.h), filled by its family file in
 * src/models/; the public entry points are in src/models/model_config.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/config/config_family.h"

#define OP "config_load"

static void set_str(char *dst, size_t n, const char *s) { snprintf(dst, n, "%s", s); }

/* The defaults every class shares, then the family's. -1 in num_key_value_heads and 0 in
 * head_dim mean "derive". */
static void defaults(const em_cfg_family *f, em_model_config *m) {
    m->rms_norm_eps = 1e-6;
    m->num_key_value_heads = -1;
    m->bos_token_id = m->pad_token_id = -1;
    m->n_eos_token_ids = 0;
    m->decoder_sparse_step = 1;
    m->router_aux_loss_coef = 0.001;
    set_str(m->hidden_act, sizeof m->hidden_act, "silu");
    if (f->defaults) f->defaults(m);
}

static double default_theta(const em_cfg_family *f) {
    return f->default_theta > 0 ? f->default_theta : 10000.0;
}

/* ---- rope ---- */

static bool rope_type_of(const char *name, em_rope_type *t) {
    static const struct {
        const char *n;
        em_rope_type t;
    } map[] = {{"default", EM_ROPE_DEFAULT}, {"linear", EM_ROPE_LINEAR},
               {"dynamic", EM_ROPE_DYNAMIC}, {"llama3", EM_ROPE_LLAMA3}, {"yarn", EM_ROPE_YARN},
               {"proportional", EM_ROPE_PROPORTIONAL}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(map[i].n, name)) {
            *t = map[i].t;
            return true;
        }
    return false;
}

/* Inherited values a rope dict falls back on (setdefault in transformers). */
typedef struct rope_base {
    double theta;
    double partial; /* < 0: none */
    int64_t omp_override; /* top-level original_max_position_embeddings, -1: none */
    const char *type; /* default rope_type */
} rope_base;

/* Reads one rope parameter dict `d` (may be NULL: defaults only). */
static em_status read_rope(em_cfg_src *parent, json_t *d, const char *path, rope_base base,
                           const em_model_config *m, em_rope_config *r, char *type_name,
                           size_t tn, bool *known) {
    char prefix[160];
    snprintf(prefix, sizeof prefix, "%s%s.", parent->prefix, path);
    em_cfg_src s = {parent->c, parent->file, prefix, d ? d : json_object(), parent->op, NULL};
    em_status e = EM_OK;
    *r = em_rope_config_default();
    bool p1 = false, p2 = false;
    set_str(type_name, tn, base.type);
    if ((e = em_cfg_str(&s, "rope_type", true, type_name, tn, &p1))) goto out;
    if (!p1 && (e = em_cfg_str(&s, "type", true, type_name, tn, &p2))) goto out;
    em_rope_type t = EM_ROPE_DEFAULT;
    *known = rope_type_of(type_name, &t);
    r->type = *known ? t : EM_ROPE_DEFAULT;
    r->theta = base.theta;
    if ((e = em_cfg_num(&s, "rope_theta", true, &r->theta, NULL))) goto out;
    if (base.partial >= 0) r->partial_rotary_factor = base.partial;
    bool has_omp = false;
    if ((e = em_cfg_num(&s, "partial_rotary_factor", true, &r->partial_rotary_factor, NULL)) ||
        (e = em_cfg_num(&s, "factor", true, &r->factor, NULL)) ||
        (e = em_cfg_int(&s, "original_max_position_embeddings", true,
                        &r->original_max_position_embeddings, &has_omp)) ||
        (e = em_cfg_num(&s, "low_freq_factor", true, &r->low_freq_factor, NULL)) ||
        (e = em_cfg_num(&s, "high_freq_factor", true, &r->high_freq_factor, NULL)) ||
        (e = em_cfg_num(&s, "beta_fast", true, &r->beta_fast, NULL)) ||
        (e = em_cfg_num(&s, "beta_slow", true, &r->beta_slow, NULL)) ||
        (e = em_cfg_num(&s, "attention_factor", true, &r->attention_factor, NULL)) ||
        (e = em_cfg_num(&s, "mscale", true, &r->mscale, NULL)) ||
        (e = em_cfg_num(&s, "mscale_all_dim", true, &r->mscale_all_dim, NULL)) ||
        (e = em_cfg_bool(&s, "truncate", true, &r->truncate, NULL)))
        goto out;
    /* scaling types remember the pre-training length (standardize_rope_params) */
    if (!strcmp(type_name, "llama3") || !strcmp(type_name, "yarn") ||
        !strcmp(type_name, "longrope")) {
        if (base.omp_override >= 0)
            r->original_max_position_embeddings = base.omp_override;
        else if (!has_omp)
            r->original_max_position_embeddings = m->max_position_embeddings;
    }
    r->head_dim = m->head_dim;
    r->max_position_embeddings = m->max_position_embeddings;
out:
    if (!d) json_decref(s.obj);
    return e;
}

static json_t *object_or_null(em_cfg_src *s, const char *key, em_status *e) {
    *e = EM_OK;
    json_t *v = json_object_get(s->obj, key);
    if (!v || json_is_null(v)) return NULL;
    if (!json_is_object(v)) {
        *e = EM_FAIL(s->c, EM_ERR_FORMAT, s->op, "%s: \"%s%s\" is %s, expected an object", s->file,
                     s->prefix, key, em_cfg_kind(v));
        return NULL;
    }
    return v;
}

static em_status read_ropes(em_cfg_src *s, const em_cfg_family *f, em_model_config *m) {
    em_status e;
    json_t *scaling = object_or_null(s, "rope_scaling", &e);
    if (e) return e;
    json_t *params = object_or_null(s, "rope_parameters", &e);
    if (e) return e;
    rope_base base = {default_theta(f), -1.0, -1, "default"};
    bool has_theta = false;
    double top_theta = 0;
    if ((e = em_cfg_num(s, "rope_theta", true, &top_theta, &has_theta)) ||
        (e = em_cfg_num(s, "partial_rotary_factor", true, &base.partial, NULL)) ||
        (e = em_cfg_int(s, "original_max_position_embeddings", true, &base.omp_override, NULL)))
        return e;
    if (has_theta) base.theta = top_theta;

    json_t *full = NULL, *sliding = NULL;
    bool nested = f->nested_rope;
    if (params && (json_is_object(json_object_get(params, "full_attention")) ||
                   json_is_object(json_object_get(params, "sliding_attention"))))
        nested = true;
    if (!nested) {
        /* rope_parameters = rope_scaling or rope_parameters */
        json_t *d = scaling && json_object_size(scaling) ? scaling : params;
        const char *name = d == scaling ? "rope_scaling" : "rope_parameters";
        if ((e = read_rope(s, d, name, base, m, &m->rope, m->rope_type, sizeof m->rope_type,
                           &m->rope_known)))
            return e;
        m->rope_local = m->rope;
        memcpy(m->rope_local_type, m->rope_type, sizeof m->rope_type);
        m->rope_local_known = m->rope_known;
        return EM_OK;
    }
    if (params) {
        full = json_object_get(params, "full_attention");
        sliding = json_object_get(params, "sliding_attention");
        if (full && json_is_null(full)) full = NULL;
        if (sliding && json_is_null(sliding)) sliding = NULL;
        if ((full && !json_is_object(full)) || (sliding && !json_is_object(sliding)))
            return EM_FAIL(s->c, EM_ERR_FORMAT, s->op,
                           "%s: \"%srope_parameters\" entries must be objects", s->file, s->prefix);
    }
    /* Gemma 3 (convert_rope_params_to_dict): rope_scaling updates the full-attention entry;
     * rope_theta / rope_local_base_freq are the fallbacks of the two entries. */
    json_t *full_d = full ? json_deep_copy(full) : json_object();
    if (!full_d) return EM_FAIL(s->c, EM_ERR_OOM, s->op, "out of memory");
    if (f->rope_scaling_full && scaling) json_object_update(full_d, scaling);
    rope_base fb = base, sb = base;
    if (f->rope_full_type) fb.type = f->rope_full_type;
    if (f->rope_full_partial > 0 && !full)
        json_object_set_new(full_d, "partial_rotary_factor", json_real(f->rope_full_partial));
    if (f->rope_full_fixed || (!has_theta && f->rope_full_theta > 0)) fb.theta = f->rope_full_theta;
    if (f->rope_local_theta > 0) sb.theta = f->rope_local_theta;
    if (!f->rope_no_local_base_freq) {
        double local = 0;
        bool has_local = false;
        if ((e = em_cfg_num(s, "rope_local_base_freq", true, &local, &has_local))) {
            json_decref(full_d);
            return e;
        }
        if (has_local) sb.theta = local;
    }
    e = read_rope(s, full_d, "rope_parameters.full_attention", fb, m, &m->rope, m->rope_type,
                  sizeof m->rope_type, &m->rope_known);
    json_decref(full_d);
    if (e) return e;
    if (f->post_rope && (e = f->post_rope(s, m))) return e;
    return read_rope(s, sliding, "rope_parameters.sliding_attention", sb, m, &m->rope_local,
                     m->rope_local_type, sizeof m->rope_local_type, &m->rope_local_known);
}

/* ---- layer types ---- */

static em_status parse_layer_type(em_cfg_src *s, size_t i, json_t *v, em_layer_type *out) {
    /* ALLOWED_ATTN_LAYER_TYPES + ALLOWED_MLP_LAYER_TYPES of configuration_utils.py, and the
     * legacy names it remaps */
    static const char *const other[] = {
        "window_attention", "indexed_attention", "compressed_sparse_attention",
        "heavily_compressed_attention", "minimax_m3_sparse", "conv", "moe", "hybrid",
        "hybrid_sliding", "reference_sliding_attention", "sparse", "dense",
        "deepseek_sparse_attention", "qwen_sparse_attention"};
    if (!json_is_string(v))
        return EM_FAIL(s->c, EM_ERR_FORMAT, s->op, "%s: \"%slayer_types\"[%zu] is %s, expected a string",
                       s->file, s->prefix, i, em_cfg_kind(v));
    const char *n = json_string_value(v);
    if (!strcmp(n, "full_attention") || !strcmp(n, "attention"))
        *out = EM_LAYER_FULL_ATTENTION;
    else if (!strcmp(n, "sliding_attention"))
        *out = EM_LAYER_SLIDING_ATTENTION;
    else if (!strcmp(n, "chunked_attention"))
        *out = EM_LAYER_CHUNKED_ATTENTION;
    else if (!strcmp(n, "linear_attention") || !strcmp(n, "mamba"))
        *out = EM_LAYER_LINEAR_ATTENTION;
    else {
        for (size_t k = 0; k < sizeof other / sizeof other[0]; k++)
            if (!strcmp(n, other[k])) {
                *out = EM_LAYER_OTHER;
                return EM_OK;
            }
        return EM_FAIL(s->c, EM_ERR_FORMAT, s->op,
                       "%s: \"%slayer_types\"[%zu] is \"%s\", not a layer type transformers knows",
                       s->file, s->prefix, i, n);
    }
    return EM_OK;
}

static em_status read_layer_types(em_cfg_src *s, const em_cfg_family *f, int64_t pattern,
                                  em_model_config *m) {
    int64_t n = m->num_hidden_layers;
    m->layer_types = malloc((size_t)(n ? n : 1) * sizeof *m->layer_types);
    if (!m->layer_types) return EM_FAIL(s->c, EM_ERR_OOM, s->op, "out of memory");
    json_t *lt = f->has_layer_types ? json_object_get(s->obj, "layer_types") : NULL;
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt))
            return EM_FAIL(s->c, EM_ERR_FORMAT, s->op, "%s: \"%slayer_types\" is %s, expected a list",
                           s->file, s->prefix, em_cfg_kind(lt));
        if ((int64_t)json_array_size(lt) != n)
            return EM_FAIL(s->c, EM_ERR_FORMAT, s->op,
                           "%s: \"%slayer_types\" has %zu entries but num_hidden_layers is %lld",
                           s->file, s->prefix, json_array_size(lt), (long long)n);
        for (int64_t i = 0; i < n; i++) {
            em_status e = parse_layer_type(s, (size_t)i, json_array_get(lt, (size_t)i),
                                           &m->layer_types[i]);
            if (e) return e;
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            bool sl;
            if (f->sliding == EM_CFG_SLIDING_AFTER_MAX)
                sl = m->sliding_window && i >= m->max_window_layers;
            else if (f->sliding == EM_CFG_SLIDING_PATTERN)
                sl = (i + 1) % pattern != 0;
            else /* the class has no layer_types: every layer uses sliding_window if set */
                sl = m->sliding_window != 0;
            m->layer_types[i] = sl ? EM_LAYER_SLIDING_ATTENTION : EM_LAYER_FULL_ATTENTION;
        }
    }
    if (f->last_layer_full && n) m->layer_types[n - 1] = EM_LAYER_FULL_ATTENTION;
    return EM_OK;
}

/* ---- the whole config ---- */

em_status em_cfg_positive(em_cfg_src *s, const char *key, int64_t v, bool zero_ok) {
    if (v > 0 || (zero_ok && v == 0)) return EM_OK;
    return EM_FAIL(s->c, EM_ERR_FORMAT, s->op, "%s: \"%s%s\" is %lld, expected a %s integer",
                   s->file, s->prefix, key, (long long)v, zero_ok ? "non-negative" : "positive");
}

static em_status read_text(em_cfg_src *s, const em_cfg_family *f, em_model_config *m) {
    em_status e;
    bool p;
    if ((e = em_cfg_int(s, "vocab_size", false, &m->vocab_size, NULL)) ||
        (e = em_cfg_int(s, "hidden_size", false, &m->hidden_size, NULL)) ||
        (e = em_cfg_int(s, "intermediate_size", false, &m->intermediate_size, NULL)) ||
        (e = em_cfg_int(s, "num_hidden_layers", false, &m->num_hidden_layers, NULL)) ||
        (e = em_cfg_int(s, "num_attention_heads", false, &m->num_attention_heads, NULL)) ||
        (e = em_cfg_int(s, "max_position_embeddings", false, &m->max_position_embeddings, NULL)) ||
        (e = em_cfg_int(s, "type_vocab_size", false, &m->type_vocab_size, NULL)) ||
        (e = em_cfg_int(s, "max_window_layers", false, &m->max_window_layers, NULL)) ||
        (e = em_cfg_int(s, "decoder_sparse_step", false, &m->decoder_sparse_step, NULL)) ||
        (e = em_cfg_int(s, "num_experts_per_tok", false, &m->num_experts_per_tok, NULL)) ||
        (e = em_cfg_int(s, "top_k_experts", true, &m->num_experts_per_tok, NULL)) ||
        (e = em_cfg_int(s, "moe_intermediate_size", true, &m->moe_intermediate_size, NULL)) ||
        (e = em_cfg_int(s, "shared_expert_intermediate_size", true,
                        &m->shared_expert_intermediate_size, NULL)) ||
        (e = em_cfg_num(s, "rms_norm_eps", false, &m->rms_norm_eps, NULL)) ||
        (e = em_cfg_num(s, "layer_norm_eps", false, &m->layer_norm_eps, NULL)) ||
        (e = em_cfg_num(s, "query_pre_attn_scalar", false, &m->query_pre_attn_scalar, NULL)) ||
        (e = em_cfg_num(s, "final_logit_softcapping", true, &m->final_logit_softcapping, NULL)) ||
        (e = em_cfg_num(s, "attn_logit_softcapping", true, &m->attn_logit_softcapping, NULL)) ||
        (e = em_cfg_bool(s, "attention_bias", false, &m->attention_bias, NULL)) ||
        (e = em_cfg_bool(s, "mlp_bias", false, &m->mlp_bias, NULL)) ||
        (e = em_cfg_bool(s, "tie_word_embeddings", false, &m->tie_word_embeddings, NULL)) ||
        (e = em_cfg_bool(s, "norm_topk_prob", false, &m->norm_topk_prob, NULL)) ||
        (e = em_cfg_bool(s, "output_router_logits", false, &m->output_router_logits, NULL)) ||
        (e = em_cfg_num(s, "router_aux_loss_coef", false, &m->router_aux_loss_coef, NULL)))
        return e;
    /* num_experts (num_local_experts in Mixtral's attribute_map) */
    if ((e = em_cfg_int(s, "num_experts", true, &m->num_experts, &p))) return e;
    if ((e = em_cfg_int(s, "num_local_experts", true, &m->num_experts, &p))) return e;
    /* nullable sizes: None means "derive" */
    int64_t v = 0;
    if ((e = em_cfg_int(s, "num_key_value_heads", true, &v, &p))) return e;
    if (p) m->num_key_value_heads = v;
    if ((e = em_cfg_int(s, "head_dim", true, &v, &p))) return e;
    if (p)
        m->head_dim = v;
    else if (!f->head_dim_fixed || json_object_get(s->obj, "head_dim"))
        m->head_dim = 0;
    if ((e = em_cfg_int(s, "sliding_window", true, &v, &p))) return e;
    m->sliding_window = p ? v : json_object_get(s->obj, "sliding_window") ? 0 : m->sliding_window;
    /* activation */
    char act[32];
    if ((e = em_cfg_str(s, "hidden_act", false, act, sizeof act, &p))) return e;
    if (p && !f->gemma_activation) memcpy(m->hidden_act, act, sizeof act);
    if ((e = em_cfg_str(s, "hidden_activation", true, act, sizeof act, &p))) return e;
    if (p && f->gemma_activation) memcpy(m->hidden_act, act, sizeof act);
    /* special tokens */
    if ((e = em_cfg_int(s, "bos_token_id", true, &v, &p))) return e;
    m->bos_token_id = p ? v : json_object_get(s->obj, "bos_token_id") ? -1 : m->bos_token_id;
    if ((e = em_cfg_int(s, "pad_token_id", true, &v, &p))) return e;
    m->pad_token_id = p ? v : json_object_get(s->obj, "pad_token_id") ? -1 : m->pad_token_id;
    if ((e = em_cfg_ids(s, "eos_token_id", m->eos_token_ids, &m->n_eos_token_ids, &p))) return e;
    if (!p && json_object_get(s->obj, "eos_token_id")) m->n_eos_token_ids = 0;
    /* MoE layer list */
    json_t *mol = json_object_get(s->obj, "mlp_only_layers");
    if (mol && !json_is_null(mol)) {
        if (!json_is_array(mol))
            return EM_FAIL(s->c, EM_ERR_FORMAT, s->op,
                           "%s: \"%smlp_only_layers\" is %s, expected a list of integers", s->file,
                           s->prefix, em_cfg_kind(mol));
        size_t n = json_array_size(mol), i;
        json_t *x;
        m->mlp_only_layers = malloc((n ? n : 1) * sizeof *m->mlp_only_layers);
        if (!m->mlp_only_layers) return EM_FAIL(s->c, EM_ERR_OOM, s->op, "out of memory");
        json_array_foreach(mol, i, x) {
            if (!json_is_integer(x))
                return EM_FAIL(s->c, EM_ERR_FORMAT, s->op,
                               "%s: \"%smlp_only_layers\"[%zu] is %s, expected an integer",
                               s->file, s->prefix, i, em_cfg_kind(x));
            m->mlp_only_layers[i] = (int64_t)json_integer_value(x);
        }
        m->n_mlp_only_layers = (int)n;
    }

    /* __post_init__ rules */
    if (f->use_sliding_window) {
        bool use_sw = false;
        if ((e = em_cfg_bool(s, "use_sliding_window", false, &use_sw, NULL))) return e;
        if (!use_sw) m->sliding_window = 0;
    }
    int64_t pattern = f->sliding_pattern;
    if (f->post_init && (e = f->post_init(s, m, &pattern))) return e;
    if ((e = em_cfg_positive(s, "num_attention_heads", m->num_attention_heads, false)) ||
        (e = em_cfg_positive(s, "hidden_size", m->hidden_size, false)) ||
        (e = em_cfg_positive(s, "vocab_size", m->vocab_size, false)) ||
        (e = em_cfg_positive(s, "num_hidden_layers", m->num_hidden_layers, true)) ||
        (e = em_cfg_positive(s, "sliding_window", m->sliding_window, true)))
        return e;
    if (m->num_hidden_layers > (1 << 20))
        return EM_FAIL(s->c, EM_ERR_FORMAT, s->op, "%s: \"%snum_hidden_layers\" is %lld, implausibly large",
                       s->file, s->prefix, (long long)m->num_hidden_layers);
    if (m->num_key_value_heads < 0) m->num_key_value_heads = m->num_attention_heads;
    if (m->head_dim == 0) m->head_dim = m->hidden_size / m->num_attention_heads;
    if ((e = em_cfg_positive(s, "num_key_value_heads", m->num_key_value_heads, false)) ||
        (e = em_cfg_positive(s, "head_dim", m->head_dim, false)))
        return e;
    if (m->num_attention_heads % m->num_key_value_heads)
        return EM_FAIL(s->c, EM_ERR_FORMAT, s->op,
                       "%s: \"%snum_attention_heads\" (%lld) is not a multiple of "
                       "\"%snum_key_value_heads\" (%lld)",
                       s->file, s->prefix, (long long)m->num_attention_heads, s->prefix,
                       (long long)m->num_key_value_heads);
    for (int i = 0; i < m->n_mlp_only_layers; i++)
        if (m->mlp_only_layers[i] < 0 || m->mlp_only_layers[i] >= m->num_hidden_layers)
            return EM_FAIL(s->c, EM_ERR_FORMAT, s->op,
                           "%s: \"%smlp_only_layers\"[%d] is %lld, not a layer index (0 to %lld)",
                           s->file, s->prefix, i, (long long)m->mlp_only_layers[i],
                           (long long)m->num_hidden_layers - 1);
    if ((e = read_layer_types(s, f, pattern, m))) return e;
    return read_ropes(s, f, m);
}

static em_status read_dtype(em_cfg_src *s, em_model_config *m, bool *found) {
    em_status e;
    bool p = false;
    /* dtype wins over the older torch_dtype when both are given */
    if ((e = em_cfg_str(s, "dtype", true, m->dtype_name, sizeof m->dtype_name, &p))) return e;
    if (!p && (e = em_cfg_str(s, "torch_dtype", true, m->dtype_name, sizeof m->dtype_name, &p)))
        return e;
    if (p) m->has_dtype = em_dtype_parse(m->dtype_name, &m->dtype);
    *found = p;
    return EM_OK;
}

em_status em_model_config_read(em_ctx *c, json_t *root, const char *file,
                               const em_cfg_families *fams, em_model_config *out) {
    em_model_config m;
    memset(&m, 0, sizeof m);
    em_cfg_src top = {c, file, "", root, OP, NULL};
    em_status e;
    bool p;
    json_t *empty = NULL; /* stands for an absent text_config (declared before any goto) */
    if ((e = em_cfg_str(&top, "model_type", false, m.model_type, sizeof m.model_type, &p)))
        goto fail;
    if (!p) {
        e = EM_FAIL(c, EM_ERR_FORMAT, OP, "%s: no \"model_type\" (not a transformers config.json?)",
                    file);
        goto fail;
    }
    json_t *arch = json_object_get(root, "architectures");
    if (arch && !json_is_null(arch)) {
        if (!json_is_array(arch)) {
            e = EM_FAIL(c, EM_ERR_FORMAT, OP, "%s: \"architectures\" is %s, expected a list", file,
                        em_cfg_kind(arch));
            goto fail;
        }
        for (size_t i = 0; i < json_array_size(arch) && m.n_architectures < 4; i++) {
            json_t *a = json_array_get(arch, i);
            if (!json_is_string(a)) {
                e = EM_FAIL(c, EM_ERR_FORMAT, OP, "%s: \"architectures\"[%zu] is %s, expected a string",
                            file, i, em_cfg_kind(a));
                goto fail;
            }
            set_str(m.architectures[m.n_architectures++], sizeof m.architectures[0],
                    json_string_value(a));
        }
    }
    /* the text part: a nested text_config (multimodal checkpoints) or the document itself */
    em_cfg_src text = top;
    const char *text_type = m.model_type;
    json_t *tc = json_object_get(root, "text_config");
    const char *parent_text = NULL;
    const em_cfg_family *pf = fams->find(m.model_type);
    if (pf && pf->multimodal && !strcmp(pf->multimodal, m.model_type))
        parent_text = pf->model_type;
    if ((tc && !json_is_null(tc)) || parent_text) {
        if (tc && !json_is_null(tc) && !json_is_object(tc)) {
            e = EM_FAIL(c, EM_ERR_FORMAT, OP, "%s: \"text_config\" is %s, expected an object", file,
                        em_cfg_kind(tc));
            goto fail;
        }
        if (!tc || json_is_null(tc)) tc = empty = json_object(); /* the class's defaults */
        text.obj = tc;
        text.prefix = "text_config.";
        m.nested_text_config = true;
        const char *tt = json_string_value(json_object_get(tc, "model_type"));
        text_type = tt ? tt : parent_text ? parent_text : m.model_type;
    }
    set_str(m.text_model_type, sizeof m.text_model_type, text_type);
    const em_cfg_family *f = fams->find(m.text_model_type);
    if (f && strcmp(f->model_type, m.text_model_type)) f = NULL; /* a multimodal name */
    m.known_model_type = f != NULL;
    if (!f) f = fams->fallback;
    defaults(f, &m);
    if ((e = read_text(&text, f, &m))) goto fail;
    if ((e = read_dtype(&text, &m, &p))) goto fail;
    if (!p && text.obj != root && (e = read_dtype(&top, &m, &p))) goto fail;
    json_decref(empty);
    m.json_ = root;
    *out = m;
    return EM_OK;
fail:
    json_decref(empty);
    free(m.layer_types);
    free(m.mlp_only_layers);
    memset(out, 0, sizeof *out);
    return e;
}

void em_model_config_free(em_model_config *cfg) {
    if (!cfg) return;
    free(cfg->layer_types);
    free(cfg->mlp_only_layers);
    json_decref(cfg->json_);
    memset(cfg, 0, sizeof *cfg);
}

/* ---- raw access ---- */

em_cfg_src em_model_config_src(em_ctx *c, const em_model_config *cfg, const char *file,
                               const char *op) {
    json_t *root = cfg ? cfg->json_ : NULL, *tc = json_object_get(root, "text_config");
    em_cfg_src s = {c, file, "", root, op, NULL};
    if (cfg && cfg->nested_text_config && json_is_object(tc)) {
        s.obj = tc;
        s.prefix = "text_config.";
        s.fallback = root;
    }
    return s;
}

static json_t *raw_get(const em_model_config *cfg, const char *key) {
    if (!cfg || !cfg->json_ || !key) return NULL;
    json_t *root = cfg->json_, *v = NULL;
    json_t *tc = json_object_get(root, "text_config");
    if (cfg->nested_text_config && json_is_object(tc)) v = json_object_get(tc, key);
    if (!v || json_is_null(v)) v = json_object_get(root, key);
    return v && !json_is_null(v) ? v : NULL;
}

bool em_model_config_get_int(const em_model_config *cfg, const char *key, int64_t *out) {
    json_t *v = raw_get(cfg, key);
    if (!json_is_integer(v) || !out) return false;
    *out = (int64_t)json_integer_value(v);
    return true;
}

bool em_model_config_get_double(const em_model_config *cfg, const char *key, double *out) {
    json_t *v = raw_get(cfg, key);
    if (!json_is_number(v) || !out) return false;
    *out = json_number_value(v);
    return true;
}

bool em_model_config_get_bool(const em_model_config *cfg, const char *key, bool *out) {
    json_t *v = raw_get(cfg, key);
    if (!json_is_boolean(v) || !out) return false;
    *out = json_is_true(v);
    return true;
}

const char *em_model_config_get_string(const em_model_config *cfg, const char *key) {
    json_t *v = raw_get(cfg, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

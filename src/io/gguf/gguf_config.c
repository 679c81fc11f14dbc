/*
 * A model config from GGUF metadata. A GGUF file has no config.json: the metadata is the config,
 * under llama.cpp's key names (<arch>.block_count, <arch>.attention.head_count, ...). They are
 * written out as the config.json transformers builds for the same file
 * (integrations/ggml.py GGUF_CONFIG_MAPPING, modeling_gguf_pytorch_utils.load_gguf_checkpoint)
 * and read by the config.json reader (em_model_config_from_gguf, src/models/model_config.c), so
 * every default and derived value is the one of the family's config class.
 *
 * Where llama.cpp reads more than transformers does, Ember follows llama.cpp, which wrote the
 * file: rope scaling (<arch>.rope.scaling.type / factor / original_context_length), and
 * Gemma 3's attention scale (1/sqrt(hidden / heads) for the 62-layer 27B, the head size
 * otherwise; the file does not say).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf/gguf_impl.h"

#define OP "config_load"

/* "<arch>.<key>" */
static const em_gguf_value *akey(const em_gguf *g, const char *arch, const char *key) {
    char k[160];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return em_gguf_find(g, k);
}

/* Copies an integer / float value of the file into the config, when present. */
static bool put_int(json_t *o, const char *name, const em_gguf_value *v) {
    int64_t x;
    return !v || !em_gguf_value_int(v, &x) || !json_object_set_new(o, name, json_integer(x));
}

static bool put_float(json_t *o, const char *name, const em_gguf_value *v) {
    double x;
    return !v || !em_gguf_value_float(v, &x) || !json_object_set_new(o, name, json_real(x));
}

em_status em_gguf_config_text(em_ctx *c, const em_gguf *g, const em_gguf_arch *ar,
                              char **text_out, char *what, size_t what_n) {
    *text_out = NULL;
    const char *an = ar->gguf;
    const char *type = ar->model_type;
    int64_t experts = 0;
    em_gguf_value_int(akey(g, an, "expert_count"), &experts);
    if (!strcmp(an, "llama")) { /* transformers' rule: general.name "mistral" means Mistral */
        const char *name = em_gguf_get_str(g, "general.name", NULL);
        if (name && !strcmp(name, "mistral")) type = "mistral";
        if (experts > 0) type = "mixtral"; /* llama.cpp writes Mixtral as llama with experts */
    }
    json_t *o = json_object();
    bool ok = o && !json_object_set_new(o, "model_type", json_string(type));
    static const struct {
        const char *gguf, *hf;
    } ints[] = {{"context_length", "max_position_embeddings"},
                {"block_count", "num_hidden_layers"},
                {"feed_forward_length", "intermediate_size"},
                {"embedding_length", "hidden_size"},
                {"attention.head_count", "num_attention_heads"},
                {"attention.head_count_kv", "num_key_value_heads"},
                {"attention.sliding_window", "sliding_window"},
                {"vocab_size", "vocab_size"}};
    for (size_t i = 0; ok && i < sizeof ints / sizeof ints[0]; i++)
        ok = put_int(o, ints[i].hf, akey(g, an, ints[i].gguf));
    ok = ok && put_float(o, "rms_norm_eps", akey(g, an, "attention.layer_norm_rms_epsilon")) &&
         put_float(o, "rope_theta", akey(g, an, "rope.freq_base"));
    /* the head size: key_length where written, else (llama) the rotary width */
    const em_gguf_value *hd = akey(g, an, "attention.key_length");
    if (!hd && ar->permute_qk) hd = akey(g, an, "rope.dimension_count");
    ok = ok && put_int(o, "head_dim", hd);
    if (ok && !json_object_get(o, "vocab_size")) {
        uint64_t n = em_gguf_array_len(em_gguf_find(g, "tokenizer.ggml.tokens"));
        if (n) ok = !json_object_set_new(o, "vocab_size", json_integer((json_int_t)n));
    }
    ok = ok && !json_object_set_new(o, "tie_word_embeddings",
                                    json_boolean(!em_gguf_tensor_find(g, "output.weight")));
    ok = ok && put_int(o, "bos_token_id", em_gguf_find(g, "tokenizer.ggml.bos_token_id")) &&
         put_int(o, "eos_token_id", em_gguf_find(g, "tokenizer.ggml.eos_token_id")) &&
         put_int(o, "pad_token_id", em_gguf_find(g, "tokenizer.ggml.padding_token_id"));
    if (ok && experts > 0) {
        const char *ne = !strcmp(type, "mixtral") ? "num_local_experts" : "num_experts";
        ok = put_int(o, ne, akey(g, an, "expert_count")) &&
             put_int(o, "num_experts_per_tok", akey(g, an, "expert_used_count")) &&
             put_int(o, "moe_intermediate_size", akey(g, an, "expert_feed_forward_length"));
        /* llama.cpp renormalises Qwen3-MoE's top-k weights (transformers' GGUF default too) */
        if (ok && !strcmp(type, "qwen3_moe"))
            ok = !json_object_set_new(o, "norm_topk_prob", json_true());
    }
    if (ok && !strcmp(type, "gemma3_text")) {
        int64_t layers = 0, hidden = 0, heads = 1, hdim = 0;
        em_gguf_value_int(akey(g, an, "block_count"), &layers);
        em_gguf_value_int(akey(g, an, "embedding_length"), &hidden);
        em_gguf_value_int(akey(g, an, "attention.head_count"), &heads);
        em_gguf_value_int(hd, &hdim);
        int64_t scalar = layers == 62 && heads > 0 ? hidden / heads : hdim;
        if (scalar > 0)
            ok = !json_object_set_new(o, "query_pre_attn_scalar", json_integer(scalar));
    }
    char sk[96];
    snprintf(sk, sizeof sk, "%s.rope.scaling.type", an);
    const char *st = em_gguf_get_str(g, sk, NULL);
    if (ok && st && strcmp(st, "none")) {
        json_t *rs = json_pack("{s:s}", "rope_type", st);
        ok = rs && put_float(rs, "factor", akey(g, an, "rope.scaling.factor")) &&
             put_int(rs, "original_max_position_embeddings",
                     akey(g, an, "rope.scaling.original_context_length")) &&
             !json_object_set_new(o, "rope_scaling", rs);
    }
    char *text = ok ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text) return EM_FAIL(c, EM_ERR_OOM, OP, "out of memory");
    snprintf(what, what_n, "%s (metadata)", g->path);
    *text_out = text;
    return EM_OK;
}

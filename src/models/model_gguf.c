/*
 * GGUF files as a model's weight source: the tensors under the Hub's names, as transformers
 * renames them (blk.N.attn_q -> model.layers.N.self_attn.q_proj, token_embd ->
 * model.embed_tokens, output -> lm_head, ...), with llama.cpp's conversions undone:
 *
 *   - q and k rows of llama-architecture files were permuted (LlamaModel.permute in
 *     convert_hf_to_gguf.py) so that rotary pairs sit next to each other: undone row by row, on
 *     quantized rows too (a row is whole blocks);
 *   - Gemma norms were stored as 1 + w: 1 is taken off in f32;
 *   - stacked experts (ffn_{gate,up,down}_exps, [E, I, H]) become the transformers v5 layout,
 *     gate_up [E, 2I, H] and down [E, H, I].
 *
 * Quantized matrices of linear layers and the embedding table stay as they are in the file (a
 * view of the mapping) when the loader keeps quantized weights (w->keep_quant) and the tensor
 * goes to the CPU; everything else is converted to the model's dtype (dequantized).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf/gguf_impl.h"
#include "models/model_impl.h"

typedef enum src_kind {
    SRC_TENSOR = 0,  /* one tensor of the file */
    SRC_GATE_UP = 1, /* ffn_gate_exps and ffn_up_exps stacked on dim 1 */
} src_kind;

typedef struct src_entry {
    char *hub;
    src_kind kind;
    const em_gguf_tensor_info *ti, *ti2; /* ti2: the up half of SRC_GATE_UP */
    int permute_heads;                   /* undo llama.cpp's q/k permutation over this many
                                            heads (0: none) */
    bool norm_offset;                    /* stored as 1 + w */
    bool matrix;                         /* a linear layer's or the embedding's matrix */
} src_entry;

struct em_gguf_src {
    em_gguf *g;
    const em_gguf_arch *arch;
    src_entry *e;
    int64_t n;
};

/* GGUF leaf names -> Hub names inside a layer (gemma differs in its four norms). */
static const char *layer_leaf(const em_gguf_arch *a, const char *leaf, bool *matrix) {
    static const struct {
        const char *gguf, *hub;
        bool matrix;
    } leaves[] = {
        {"attn_norm", "input_layernorm", false},
        {"post_attention_norm", "post_attention_layernorm", false},
        {"post_ffw_norm", "post_feedforward_layernorm", false},
        {"attn_q", "self_attn.q_proj", true},
        {"attn_k", "self_attn.k_proj", true},
        {"attn_v", "self_attn.v_proj", true},
        {"attn_output", "self_attn.o_proj", true},
        {"attn_q_norm", "self_attn.q_norm", false},
        {"attn_k_norm", "self_attn.k_norm", false},
        {"ffn_gate", "mlp.gate_proj", true},
        {"ffn_up", "mlp.up_proj", true},
        {"ffn_down", "mlp.down_proj", true},
    };
    *matrix = false;
    if (!strcmp(leaf, "ffn_norm"))
        return a->norm_offset ? "pre_feedforward_layernorm" : "post_attention_layernorm";
    for (size_t i = 0; i < sizeof leaves / sizeof leaves[0]; i++)
        if (!strcmp(leaf, leaves[i].gguf)) {
            *matrix = leaves[i].matrix;
            return leaves[i].hub;
        }
    return NULL;
}

static int cmp_entry(const void *x, const void *y) {
    return strcmp(((const src_entry *)x)->hub, ((const src_entry *)y)->hub);
}

static bool add(em_gguf_src *s, const char *hub, src_entry e) {
    e.hub = strdup(hub);
    if (!e.hub) return false;
    s->e[s->n++] = e;
    return true;
}

void em_gguf_src_close(em_gguf_src *s) {
    if (!s) return;
    for (int64_t i = 0; i < s->n; i++) free(s->e[i].hub);
    free(s->e);
    em_gguf_free(s->g);
    free(s);
}

em_gguf_src *em_gguf_src_open(em_ctx *c, const char *path, const em_model_config *cfg) {
    em_gguf *g = em_gguf_open(c, path);
    if (!g) return NULL;
    em_gguf_src *s = calloc(1, sizeof *s);
    int64_t nt = em_gguf_tensor_count(g);
    if (s) s->e = calloc((size_t)nt + 1, sizeof *s->e);
    if (!s || !s->e) {
        free(s);
        em_gguf_free(g);
        em_ctx_fail(c, EM_ERR_OOM, "model_load", "out of memory");
        return NULL;
    }
    s->g = g;
    s->arch = em_family_gguf_arch(c, "model_load", g);
    if (!s->arch) {
        em_gguf_src_close(s);
        return NULL;
    }
    bool ok = true;
    for (int64_t i = 0; i < nt && ok; i++) {
        const em_gguf_tensor_info *ti = em_gguf_tensor_at(g, i);
        const char *n = ti->name;
        src_entry e = {.ti = ti, .norm_offset = s->arch->norm_offset && strstr(n, "norm.weight")};
        char hub[256];
        long long layer;
        int pos = 0;
        if (!strcmp(n, "token_embd.weight")) {
            e.matrix = true;
            ok = add(s, "model.embed_tokens.weight", e);
        } else if (!strcmp(n, "output_norm.weight")) {
            ok = add(s, "model.norm.weight", e);
        } else if (!strcmp(n, "output.weight")) {
            e.matrix = true;
            ok = add(s, "lm_head.weight", e);
        } else if (sscanf(n, "blk.%lld.%n", &layer, &pos) == 1 && pos > 0) {
            const char *leaf = n + pos, *dot = strrchr(leaf, '.');
            char base[64];
            if (!dot || (size_t)(dot - leaf) >= sizeof base) {
                ok = add(s, n, e);
                continue;
            }
            snprintf(base, sizeof base, "%.*s", (int)(dot - leaf), leaf);
            const char *suffix = dot + 1; /* "weight" or "bias" */
            const char *moe = s->arch->moe_prefix;
            bool matrix;
            const char *h = layer_leaf(s->arch, base, &matrix);
            if (h) {
                e.matrix = matrix && !strcmp(suffix, "weight");
                if (s->arch->permute_qk && (!strcmp(base, "attn_q") || !strcmp(base, "attn_k")))
                    e.permute_heads = (int)(base[5] == 'q' ? cfg->num_attention_heads
                                                            : cfg->num_key_value_heads);
                snprintf(hub, sizeof hub, "model.layers.%lld.%s.%s", layer, h, suffix);
            } else if (!strcmp(base, "ffn_gate_inp")) {
                e.matrix = true;
                snprintf(hub, sizeof hub, "model.layers.%lld.%sgate.%s", layer, moe, suffix);
            } else if (!strcmp(base, "ffn_down_exps")) {
                snprintf(hub, sizeof hub, "model.layers.%lld.%sexperts.down_proj", layer, moe);
            } else if (!strcmp(base, "ffn_gate_exps")) {
                char up[128];
                snprintf(up, sizeof up, "blk.%lld.ffn_up_exps.weight", layer);
                e.kind = SRC_GATE_UP;
                e.ti2 = em_gguf_tensor_find(g, up);
                snprintf(hub, sizeof hub, "model.layers.%lld.%sexperts.gate_up_proj", layer, moe);
                if (!e.ti2) snprintf(hub, sizeof hub, "%s", n); /* no pair: not usable */
            } else {
                snprintf(hub, sizeof hub, "%s", n); /* ffn_up_exps (paired above), others */
                if (!strcmp(base, "ffn_up_exps")) continue;
            }
            ok = add(s, hub, e);
        } else {
            ok = add(s, n, e); /* rope_freqs.weight and anything else keep their names */
        }
    }
    if (!ok) {
        em_ctx_fail(c, EM_ERR_OOM, "model_load", "out of memory");
        em_gguf_src_close(s);
        return NULL;
    }
    qsort(s->e, (size_t)s->n, sizeof *s->e, cmp_entry);
    return s;
}

static const src_entry *find(const em_gguf_src *s, const char *hub) {
    src_entry key = {.hub = (char *)hub};
    return bsearch(&key, s->e, (size_t)s->n, sizeof *s->e, cmp_entry);
}

bool em_gguf_src_has(const em_gguf_src *s, const char *hub) { return s && find(s, hub); }

static uint64_t entry_bytes(const src_entry *e) {
    return e->ti->nbytes + (e->ti2 ? e->ti2->nbytes : 0);
}

int64_t em_gguf_src_bytes(const em_gguf_src *s, const char *prefix) {
    size_t n = prefix ? strlen(prefix) : 0;
    int64_t total = 0;
    for (int64_t i = 0; s && i < s->n; i++)
        if (!prefix || (!strncmp(s->e[i].hub, prefix, n) && s->e[i].hub[n] == '.'))
            total += (int64_t)entry_bytes(&s->e[i]);
    return total;
}

const em_gguf *em_gguf_src_file(const em_gguf_src *s) { return s ? s->g : NULL; }

em_dtype em_gguf_src_float_dtype(const em_gguf_src *s) {
    uint64_t bf16 = 0, other = 0;
    for (int64_t i = 0; s && i < s->n; i++) {
        if (!s->e[i].matrix) continue;
        em_dtype own;
        bool known = em_ggml_type_dtype(s->e[i].ti->type, &own);
        if (known && own == EM_BF16) bf16 += entry_bytes(&s->e[i]);
        else other += entry_bytes(&s->e[i]);
    }
    return bf16 > other ? EM_BF16 : EM_F32;
}

/* Rows r of a [rows, ...] tensor (row_bytes each) put back in transformers' order: llama.cpp
 * stored head h's rows as (pair d, half t) -> row h*2D + 2d + t; transformers wants
 * h*2D + t*D + d. */
static void unpermute_rows(uint8_t *dst, const uint8_t *src, int64_t rows, size_t row_bytes,
                           int heads) {
    int64_t dim = rows / heads / 2;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t t = 0; t < 2; t++)
            for (int64_t d = 0; d < dim; d++)
                memcpy(dst + (size_t)(h * 2 * dim + t * dim + d) * row_bytes,
                       src + (size_t)(h * 2 * dim + 2 * d + t) * row_bytes, row_bytes);
}

/* A fresh CPU copy of t (any dtype), whose rows are unpermuted when heads > 0. */
static em_tensor *private_copy(em_ctx *c, em_tensor *t, int heads, const char *hub) {
    em_tensor *p = em_tensor_new(c, em_device_cpu(), em_tensor_dtype(t), em_tensor_ndim(t),
                                 em_tensor_shape(t));
    if (!p) return NULL;
    const uint8_t *src = em_tensor_data(c, t);
    int64_t rows = em_tensor_dim(t, 0);
    size_t nb = em_tensor_nbytes(t);
    if (heads > 0 && (rows % (2 * heads) || !src)) {
        em_tensor_release(p);
        em_ctx_fail(c, EM_ERR_FORMAT, "model_load", "%s: %lld rows cannot be %d heads of rotary "
                    "pairs", hub, (long long)rows, heads);
        return NULL;
    }
    if (heads > 0)
        unpermute_rows(em_tensor_ptr(p), src, rows, rows ? nb / (size_t)rows : 0, heads);
    else if (nb)
        memcpy(em_tensor_ptr(p), src, nb);
    return em_scope_add(c, p);
}

em_tensor *em_gguf_src_load(em_ctx *c, const em_gguf_src *s, const char *hub, em_dtype dtype,
                            bool keep_quant, em_device *dev) {
    const src_entry *e = find(s, hub);
    if (!e) {
        em_ctx_fail(c, EM_ERR_NOT_FOUND, "model_load", "tensor '%s' is not in %s", hub,
                    em_gguf_path(s->g));
        return NULL;
    }
    em_device *cpu = em_device_cpu();
    if (e->kind == SRC_GATE_UP) { /* [E, I, H] twice -> [E, 2I, H] */
        em_tensor *parts[2] = {em_gguf_load_as(c, s->g, e->ti->name, dtype, cpu),
                               em_gguf_load_as(c, s->g, e->ti2->name, dtype, cpu)};
        em_tensor *t = parts[0] && parts[1] ? em_cat(c, parts, 2, 1) : NULL;
        return em_model_to_dev(c, t, dev);
    }
    em_dtype own;
    if (!em_ggml_type_dtype(e->ti->type, &own)) /* refused by name */
        return em_gguf_load(c, s->g, e->ti->name, dev);
    if (em_is_quant(own) && keep_quant && e->matrix && e->ti->ndim == 2 &&
        dev->be->host_accessible) {
        em_tensor *q = em_gguf_load(c, s->g, e->ti->name, cpu);
        return e->permute_heads ? private_copy(c, q, e->permute_heads, hub) : q;
    }
    if (!e->permute_heads && !e->norm_offset)
        return em_gguf_load_as(c, s->g, e->ti->name, dtype, dev);
    /* conversions are done in f32, on a private copy, as transformers does them */
    em_tensor *f = em_gguf_load_as(c, s->g, e->ti->name, EM_F32, cpu);
    f = f ? private_copy(c, f, e->permute_heads, hub) : NULL;
    if (f && e->norm_offset) {
        float *v = em_tensor_ptr(f);
        for (int64_t i = 0; i < em_tensor_numel(f); i++) v[i] = v[i] - 1.0f;
    }
    if (f && dtype != EM_F32) f = em_cast(c, f, dtype);
    return em_model_to_dev(c, f, dev);
}

int em_gguf_src_rope_factors(em_ctx *c, const em_gguf_src *s, float *out, int n) {
    const src_entry *e = find(s, "rope_freqs.weight");
    if (!e) return 0;
    em_tensor *t = em_gguf_load_as(c, s->g, "rope_freqs.weight", EM_F32, em_device_cpu());
    if (!t) return -1;
    if (em_tensor_numel(t) != n) {
        em_ctx_fail(c, EM_ERR_FORMAT, "model_load", "%s: rope_freqs.weight has %lld factors for "
                    "%d rotary frequencies", em_gguf_path(s->g), (long long)em_tensor_numel(t), n);
        return -1;
    }
    memcpy(out, em_tensor_data(c, t), (size_t)n * sizeof *out);
    return n;
}

void em_gguf_src_drop(const em_gguf_src *s, const char *hub) {
    const src_entry *e = find(s, hub);
    if (e && e->kind == SRC_TENSOR) em_st_image_drop_range(s->g->image, e->ti->file_offset,
                                                           e->ti->nbytes);
}

uint64_t em_gguf_src_entry_bytes(const em_gguf_src *s, const char *hub) {
    const src_entry *e = find(s, hub);
    return e ? entry_bytes(e) : 0;
}

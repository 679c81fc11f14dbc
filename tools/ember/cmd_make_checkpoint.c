/*
 * `ember make-checkpoint`: writes a Hugging Face checkpoint with RANDOM weights (config.json,
 * generation_config.json, sharded model.safetensors + index, and a tokenizer when given), for
 * demos and benchmarks on machines with no Hub access. Presets give the real layer dimensions
 * of Qwen3-0.6B and Qwen3-30B-A3B; the weights are random, so the text they generate is noise.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "ember/ember.h"

typedef struct ckpt_cfg {
    const char *model_type;
    int64_t vocab, hidden, inter, layers, heads, kv_heads, head_dim, experts, top_k, moe_inter;
    bool tie;
    int64_t global_head_dim, global_kv_heads; /* Gemma 4's full-attention layers (K = V) */
} ckpt_cfg;

static const ckpt_cfg PRESETS[] = {
    /* name-free rows; the table below names them */
    {"qwen3_moe", 0, 512, 1024, 8, 8, 4, 64, 64, 8, 256, false, 0, 0},    /* demo */
    {"qwen3", 151936, 1024, 3072, 28, 16, 8, 128, 0, 0, 0, true, 0, 0},   /* Qwen3-0.6B */
    {"qwen3_moe", 151936, 2048, 6144, 12, 32, 4, 128, 128, 8, 768, false, 0, 0}, /* Qwen3-30B-A3B */
    {"qwen3", 0, 192, 576, 4, 4, 2, 48, 0, 0, 0, true, 0, 0}, /* scripts/train-demo.sh's model */
    /* Gemma 4 26B-A4B's text model (/work/shared/REFERENCES.md): 5 sliding layers then 1 full,
     * a dense MLP (intermediate 2112) beside 128 experts in every layer */
    {"gemma4_text", 262144, 2816, 2112, 30, 16, 8, 256, 128, 8, 704, true, 512, 2},
};
static const char *PRESET_NAMES[] = {"demo-moe", "qwen3-0.6b", "qwen3-30b-a3b", "tiny-qwen3",
                                     "gemma4-26b-a4b"};

/* Gemma 4's layer pattern as Gemma4TextConfig makes it: every 6th layer and the last full. */
static bool gemma4_full(const ckpt_cfg *cfg, int64_t l) {
    return (l + 1) % 6 == 0 || l == cfg->layers - 1;
}

/* Gemma 4's own config keys (the 26B-A4B layout: no per-layer inputs, no KV sharing). */
static void gemma4_config(json_t *j, const ckpt_cfg *cfg) {
    json_t *types = json_array();
    for (int64_t l = 0; l < cfg->layers; l++)
        json_array_append_new(types, json_string(gemma4_full(cfg, l) ? "full_attention"
                                                                     : "sliding_attention"));
    json_object_set_new(j, "layer_types", types);
    json_object_set_new(j, "global_head_dim", json_integer(cfg->global_head_dim));
    json_object_set_new(j, "num_global_key_value_heads", json_integer(cfg->global_kv_heads));
    json_object_set_new(j, "attention_k_eq_v", json_true());
    json_object_set_new(j, "enable_moe_block", json_true());
    json_object_set_new(j, "top_k_experts", json_integer(cfg->top_k));
    json_object_set_new(j, "hidden_size_per_layer_input", json_integer(0));
    json_object_set_new(j, "num_kv_shared_layers", json_integer(0));
    json_object_set_new(j, "sliding_window", json_integer(1024));
    json_object_set_new(j, "final_logit_softcapping", json_real(30.0));
    json_object_set_new(j, "hidden_activation", json_string("gelu_pytorch_tanh"));
    json_object_set_new(j, "rope_parameters",
                        json_pack("{s:{s:s, s:f}, s:{s:s, s:f, s:f}}", "sliding_attention",
                                  "rope_type", "default", "rope_theta", 10000.0, "full_attention",
                                  "rope_type", "proportional", "rope_theta", 1000000.0,
                                  "partial_rotary_factor", 0.25));
}

typedef struct writer {
    em_ctx *c;
    const char *dir;
    em_dtype dtype;
    uint64_t seed;
    em_safetensors_writer *w;
    int64_t bytes, shard_limit;
    int shard;
    json_t *weight_map;
    char shard_name[64];
    int64_t total;
    json_t *header; /* --shape-only: the one file's safetensors header, no data written */
} writer;

/* --shape-only: the header of one model.safetensors whose data section is a sparse hole of the
 * right length (ftruncate), so the file is valid and takes no disk; only a compile-only device
 * loads it (em_model_options.shape_only never reads the data). */
static void add_shape(writer *wr, const char *name, int nd, const int64_t *shape) {
    json_t *dims = json_array();
    int64_t n = (int64_t)em_dtype_size(wr->dtype);
    for (int i = 0; i < nd; i++) {
        json_array_append_new(dims, json_integer(shape[i]));
        n *= shape[i];
    }
    json_object_set_new(wr->header, name,
                        json_pack("{s:s, s:o, s:[I, I]}", "dtype",
                                  wr->dtype == EM_BF16 ? "BF16" : "F32", "shape", dims,
                                  "data_offsets", (json_int_t)wr->total,
                                  (json_int_t)(wr->total + n)));
    wr->total += n;
}

static bool write_shape_only(writer *wr) {
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", wr->dir);
    char *h = json_dumps(wr->header, JSON_COMPACT | JSON_PRESERVE_ORDER);
    FILE *f = h ? fopen(path, "wb") : NULL;
    bool ok = f != NULL;
    if (f) {
        size_t hl = strlen(h), padded = (hl + 7) / 8 * 8;
        unsigned char len[8];
        for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)padded >> (8 * i));
        ok = fwrite(len, 1, 8, f) == 8 && fwrite(h, 1, hl, f) == hl;
        for (size_t i = hl; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
        ok = ok && fflush(f) == 0 && ftruncate(fileno(f), (off_t)(8 + padded + wr->total)) == 0;
        ok = fclose(f) == 0 && ok;
    }
    free(h);
    if (!ok) em_ctx_fail(wr->c, EM_ERR_IO, "make-checkpoint", "cannot write %s", path);
    return ok;
}

static void flush_shard(writer *wr) {
    if (!wr->w) return;
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", wr->dir, wr->shard_name);
    em_safetensors_writer_save(wr->c, wr->w, path);
    em_safetensors_writer_free(wr->w);
    wr->w = NULL;
    wr->bytes = 0;
    em_scope_pop(wr->c);
}

/* Adds a random tensor (uniform, std `scale`; `ones` for norm weights). */
static void add(writer *wr, const char *name, int nd, const int64_t *shape, double scale, bool ones) {
    em_ctx *c = wr->c;
    if (em_ctx_status(c)) return;
    if (wr->header) {
        (void)scale, (void)ones;
        add_shape(wr, name, nd, shape);
        return;
    }
    if (!wr->w) {
        em_scope_push(c);
        wr->w = em_safetensors_writer_create(c);
        snprintf(wr->shard_name, sizeof wr->shard_name, "model-%05d.safetensors", ++wr->shard);
    }
    double a = scale * sqrt(3.0);
    em_tensor *t = ones ? em_ones(c, wr->dtype, nd, shape)
                        : em_rand(c, wr->dtype, nd, shape, wr->seed++, -a, a);
    em_safetensors_writer_add(c, wr->w, name, t);
    json_object_set_new(wr->weight_map, name, json_string(wr->shard_name));
    int64_t n = em_tensor_nbytes(t);
    wr->bytes += n;
    wr->total += n;
    if (wr->bytes >= wr->shard_limit) flush_shard(wr);
}

static void usage(void) {
    printf("usage: ember make-checkpoint --out DIR [--preset demo-moe|qwen3-0.6b|qwen3-30b-a3b|\n"
           "                                      tiny-qwen3|gemma4-26b-a4b]\n"
           "                             [--layers N] [--tokenizer FILE.json] [--dtype bf16|f32]\n"
           "                             [--seed S] [--tp-shard N] [--shape-only]\n\n"
           "Writes a checkpoint with RANDOM weights in the Hub's format (config.json,\n"
           "generation_config.json, sharded safetensors with an index, the tokenizer when\n"
           "given). The presets have the real dimensions of Qwen3-0.6B and Qwen3-30B-A3B (with\n"
           "--layers to bound the size); demo-moe is a small Qwen3-MoE, tiny-qwen3 a 4-layer Qwen3\n"
           "of width 192 (the vocabulary of --tokenizer) that scripts/train-demo.sh trains;\n"
           "gemma4-26b-a4b is Gemma 4 26B-A4B's text model (Gemma4ForCausalLM, 30 layers).\n"
           "Random weights produce random text: this is for timing and demos, not for reading the output.\n"
           "--tp-shard N writes what one rank of N holds under Ember's tensor-parallel plan as a\n"
           "model of its own (heads, intermediate sizes and the LM head's vocabulary rows / N; KV\n"
           "heads / N, or one when there are fewer than N, as the plan replicates them): compiled\n"
           "for one chip, its decode step is one rank's program without the collectives, which\n"
           "`ember project tp` adds (docs/tpu-aot.md). Its embedding keeps V / N rows too, as the\n"
           "plan's vocab-parallel embedding (embedding_rowwise) does.\n"
           "--shape-only writes the safetensors header and no weights (one model.safetensors\n"
           "whose data is a sparse hole: no disk used): only a compile-only device loads it\n"
           "(em_model_options.shape_only; `ember bench decode --device tpu-aot:...` does), so\n"
           "a whole 48-layer Qwen3-30B-A3B compiles for a TPU slice (docs/tpu-aot.md).\n");
}

int cmd_make_checkpoint(int argc, char **argv) {
    const char *out = NULL, *tokenizer = NULL, *preset = "demo-moe";
    int64_t layers = -1, shard = 1;
    bool shape_only = false;
    uint64_t seed = 1;
    em_dtype dtype = EM_BF16;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage();
            return 0;
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--preset") && i + 1 < argc) preset = argv[++i];
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc) {
            long long v;
            if (!cli_int("make-checkpoint", argv[i], argv[i + 1], 1, 1 << 16, &v)) return 2;
            layers = v;
            i++;
        }
        else if (!strcmp(argv[i], "--tp-shard") && i + 1 < argc) {
            long long v;
            if (!cli_int("make-checkpoint", argv[i], argv[i + 1], 1, 1 << 12, &v)) return 2;
            shard = v;
            i++;
        }
        else if (!strcmp(argv[i], "--shape-only")) shape_only = true;
        else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tokenizer = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            long long v;
            if (!cli_int("make-checkpoint", argv[i], argv[i + 1], 0, LLONG_MAX, &v)) return 2;
            seed = (uint64_t)v;
            i++;
        }
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            if (!em_dtype_parse(argv[++i], &dtype) || (dtype != EM_BF16 && dtype != EM_F32)) {
                fprintf(stderr, "ember make-checkpoint: --dtype is bf16 or f32\n");
                return 2;
            }
        } else {
            fprintf(stderr, "ember make-checkpoint: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    int pi = -1;
    for (int k = 0; k < (int)(sizeof PRESETS / sizeof PRESETS[0]); k++)
        if (!strcmp(preset, PRESET_NAMES[k])) pi = k;
    if (!out || pi < 0) {
        fprintf(stderr, "ember make-checkpoint: --out DIR and a known --preset are required\n");
        return 2;
    }
    ckpt_cfg cfg = PRESETS[pi];
    if (layers > 0) cfg.layers = layers;
    if (shard > 1) {
        if (tokenizer) {
            fprintf(stderr, "ember make-checkpoint: --tp-shard takes no --tokenizer (the shard's "
                            "vocabulary is a slice of the preset's)\n");
            return 2;
        }
        if (!cfg.vocab) cfg.vocab = 1024;
        /* the plan's divisibility rules (src/models/tp.c), refused by name */
        const struct {
            const char *name;
            int64_t *v;
        } dims[] = {{"num_attention_heads", &cfg.heads}, {"intermediate_size", &cfg.inter},
                    {"moe_intermediate_size", &cfg.moe_inter}, {"vocab_size", &cfg.vocab}};
        bool gemma4 = cfg.global_kv_heads > 0;
        for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
            if (*dims[k].v % shard) {
                fprintf(stderr, "ember make-checkpoint: --tp-shard %lld: %s (%lld) does not divide "
                        "by it\n", (long long)shard, dims[k].name, (long long)*dims[k].v);
                return 2;
            }
            *dims[k].v /= shard;
        }
        int64_t *kvs[2] = {&cfg.kv_heads, &cfg.global_kv_heads};
        for (int k = 0; k < (gemma4 ? 2 : 1); k++) {
            if (*kvs[k] % shard == 0) *kvs[k] /= shard;
            else if (shard % *kvs[k] == 0) *kvs[k] = 1;
            else {
                fprintf(stderr, "ember make-checkpoint: --tp-shard %lld: %s (%lld) and the "
                        "degree: neither divides the other\n", (long long)shard,
                        k ? "num_global_key_value_heads" : "num_key_value_heads",
                        (long long)*kvs[k]);
                return 2;
            }
        }
    }
    em_ctx *c = em_ctx_create();
    em_tokenizer *tok = NULL;
    if (tokenizer) {
        tok = em_tokenizer_load(c, tokenizer);
        if (!tok) {
            fprintf(stderr, "ember make-checkpoint: %s\n", em_ctx_error(c)->message);
            em_ctx_free(c);
            return 1;
        }
        if (!cfg.vocab) cfg.vocab = (int64_t)em_tokenizer_vocab_size(tok);
    }
    if (!cfg.vocab) cfg.vocab = 1024;
    mkdir(out, 0755);
    /* config.json */
    json_t *j = json_object();
    bool gemma4 = cfg.global_kv_heads > 0;
    const char *arch = gemma4                              ? "Gemma4ForCausalLM"
                       : !strcmp(cfg.model_type, "qwen3") ? "Qwen3ForCausalLM"
                                                          : "Qwen3MoeForCausalLM";
    json_object_set_new(j, "architectures", json_pack("[s]", arch));
    json_object_set_new(j, "model_type", json_string(cfg.model_type));
    json_object_set_new(j, "vocab_size", json_integer(cfg.vocab));
    json_object_set_new(j, "hidden_size", json_integer(cfg.hidden));
    json_object_set_new(j, "intermediate_size", json_integer(cfg.inter));
    json_object_set_new(j, "num_hidden_layers", json_integer(cfg.layers));
    json_object_set_new(j, "num_attention_heads", json_integer(cfg.heads));
    json_object_set_new(j, "num_key_value_heads", json_integer(cfg.kv_heads));
    json_object_set_new(j, "head_dim", json_integer(cfg.head_dim));
    json_object_set_new(j, "max_position_embeddings", json_integer(gemma4 ? 262144 : 40960));
    json_object_set_new(j, "rms_norm_eps", json_real(1e-6));
    if (gemma4) gemma4_config(j, &cfg);
    else {
        json_object_set_new(j, "rope_theta", json_real(1000000.0));
        json_object_set_new(j, "hidden_act", json_string("silu"));
    }
    json_object_set_new(j, "tie_word_embeddings", json_boolean(cfg.tie));
    json_object_set_new(j, "torch_dtype", json_string(dtype == EM_BF16 ? "bfloat16" : "float32"));
    json_object_set_new(j, "_comment", json_string(shape_only ? "SHAPES ONLY (no weights: for "
                        "compile-only devices) made by `ember make-checkpoint --shape-only`"
                        : "RANDOM WEIGHTS made by `ember make-checkpoint`"));
    if (shard > 1)
        json_object_set_new(j, "_tp_shard_of", json_integer(shard));
    if (cfg.experts) {
        json_object_set_new(j, "num_experts", json_integer(cfg.experts));
        json_object_set_new(j, "moe_intermediate_size", json_integer(cfg.moe_inter));
    }
    if (cfg.experts && !gemma4) {
        json_object_set_new(j, "num_experts_per_tok", json_integer(cfg.top_k));
        json_object_set_new(j, "norm_topk_prob", json_true());
        json_object_set_new(j, "decoder_sparse_step", json_integer(1));
    }
    int32_t eos = tok ? em_tokenizer_special_id(tok, EM_SPECIAL_EOS) : -1;
    if (eos < 0) eos = 0;
    json_object_set_new(j, "eos_token_id", json_integer(eos));
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", out);
    json_dump_file(j, path, JSON_INDENT(2));
    json_decref(j);
    snprintf(path, sizeof path, "%s/generation_config.json", out);
    j = json_pack("{s:i, s:b}", "eos_token_id", eos, "do_sample", 0);
    json_dump_file(j, path, JSON_INDENT(2));
    json_decref(j);
    /* weights, written shard by shard */
    writer wr = {c, out, dtype, seed, NULL, 0, (int64_t)1 << 30, 0, json_object(), "", 0,
                 shape_only ? json_object() : NULL};
    int64_t h = cfg.hidden;
    add(&wr, "model.embed_tokens.weight", 2, (int64_t[]){cfg.vocab, h}, 0.02, false);
    for (int64_t l = 0; l < cfg.layers && !em_ctx_status(c); l++) {
        char n[160];
        bool full = gemma4 && gemma4_full(&cfg, l); /* own head size and KV heads, K = V */
        int64_t hd = full ? cfg.global_head_dim : cfg.head_dim;
        int64_t kvh = full ? cfg.global_kv_heads : cfg.kv_heads;
#define NAME(fmt) (snprintf(n, sizeof n, "model.layers.%lld." fmt, (long long)l), n)
        add(&wr, NAME("input_layernorm.weight"), 1, (int64_t[]){h}, 0, true);
        add(&wr, NAME("post_attention_layernorm.weight"), 1, (int64_t[]){h}, 0, true);
        add(&wr, NAME("self_attn.q_proj.weight"), 2, (int64_t[]){cfg.heads * hd, h}, 0.02, false);
        add(&wr, NAME("self_attn.k_proj.weight"), 2, (int64_t[]){kvh * hd, h}, 0.02, false);
        if (!full)
            add(&wr, NAME("self_attn.v_proj.weight"), 2, (int64_t[]){kvh * hd, h}, 0.02, false);
        add(&wr, NAME("self_attn.o_proj.weight"), 2, (int64_t[]){h, cfg.heads * hd}, 0.02, false);
        add(&wr, NAME("self_attn.q_norm.weight"), 1, (int64_t[]){hd}, 0, true);
        add(&wr, NAME("self_attn.k_norm.weight"), 1, (int64_t[]){hd}, 0, true);
        if (gemma4) { /* the dense MLP and the routed experts side by side, each with norms */
            static const char *norms[] = {"pre_feedforward_layernorm", "post_feedforward_layernorm",
                                          "pre_feedforward_layernorm_2",
                                          "post_feedforward_layernorm_1",
                                          "post_feedforward_layernorm_2"};
            for (int k = 0; k < 5; k++) {
                snprintf(n, sizeof n, "model.layers.%lld.%s.weight", (long long)l, norms[k]);
                add(&wr, n, 1, (int64_t[]){h}, 0, true);
            }
            add(&wr, NAME("layer_scalar"), 1, (int64_t[]){1}, 0, true);
            add(&wr, NAME("mlp.gate_proj.weight"), 2, (int64_t[]){cfg.inter, h}, 0.02, false);
            add(&wr, NAME("mlp.up_proj.weight"), 2, (int64_t[]){cfg.inter, h}, 0.02, false);
            add(&wr, NAME("mlp.down_proj.weight"), 2, (int64_t[]){h, cfg.inter}, 0.02, false);
            add(&wr, NAME("router.proj.weight"), 2, (int64_t[]){cfg.experts, h}, 0.02, false);
            add(&wr, NAME("router.scale"), 1, (int64_t[]){h}, 0, true);
            add(&wr, NAME("router.per_expert_scale"), 1, (int64_t[]){cfg.experts}, 0, true);
            add(&wr, NAME("experts.gate_up_proj"), 3,
                (int64_t[]){cfg.experts, 2 * cfg.moe_inter, h}, 0.02, false);
            add(&wr, NAME("experts.down_proj"), 3, (int64_t[]){cfg.experts, h, cfg.moe_inter},
                0.02, false);
        } else if (cfg.experts) {
            add(&wr, NAME("mlp.gate.weight"), 2, (int64_t[]){cfg.experts, h}, 0.02, false);
            /* the transformers v5 fused layout (Ember also reads per-expert tensors) */
            add(&wr, NAME("mlp.experts.gate_up_proj"), 3,
                (int64_t[]){cfg.experts, 2 * cfg.moe_inter, h}, 0.02, false);
            add(&wr, NAME("mlp.experts.down_proj"), 3, (int64_t[]){cfg.experts, h, cfg.moe_inter},
                0.02, false);
        } else {
            add(&wr, NAME("mlp.gate_proj.weight"), 2, (int64_t[]){cfg.inter, h}, 0.02, false);
            add(&wr, NAME("mlp.up_proj.weight"), 2, (int64_t[]){cfg.inter, h}, 0.02, false);
            add(&wr, NAME("mlp.down_proj.weight"), 2, (int64_t[]){h, cfg.inter}, 0.02, false);
        }
#undef NAME
    }
    add(&wr, "model.norm.weight", 1, (int64_t[]){h}, 0, true);
    if (!cfg.tie) add(&wr, "lm_head.weight", 2, (int64_t[]){cfg.vocab, h}, 0.02, false);
    if (wr.header) { /* one file, no index */
        if (!em_ctx_status(c)) write_shape_only(&wr);
        json_decref(wr.header);
        json_decref(wr.weight_map);
    } else {
        flush_shard(&wr);
        json_t *index = json_pack("{s:{s:I}, s:o}", "metadata", "total_size",
                                  (json_int_t)wr.total, "weight_map", wr.weight_map);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", out);
        json_dump_file(index, path, JSON_INDENT(2));
        json_decref(index);
    }
    if (tokenizer) { /* the tokenizer travels with the checkpoint, byte for byte */
        FILE *in = fopen(tokenizer, "rb");
        snprintf(path, sizeof path, "%s/tokenizer.json", out);
        FILE *o = in ? fopen(path, "wb") : NULL;
        char buf[65536];
        size_t k;
        while (in && o && (k = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, k, o);
        if (in) fclose(in);
        if (o) fclose(o);
    }
    int rc = 0;
    if (em_ctx_status(c)) {
        fprintf(stderr, "ember make-checkpoint: %s\n", em_ctx_error(c)->message);
        rc = 1;
    } else {
        if (shape_only)
            fprintf(stderr, "wrote %s: %s preset%s, %lld layers, SHAPES ONLY: %.2f GB of %s "
                    "weights as a sparse hole (for compile-only devices)\n", out,
                    PRESET_NAMES[pi], shard > 1 ? " (one rank's shard)" : "",
                    (long long)cfg.layers, wr.total / 1e9, em_dtype_name(dtype));
        else
            fprintf(stderr, "wrote %s: %s preset%s, %lld layers, %.2f GB of RANDOM %s weights "
                    "in %d shards\n", out, PRESET_NAMES[pi], shard > 1 ? " (one rank's shard)" : "",
                    (long long)cfg.layers, wr.total / 1e9, em_dtype_name(dtype), wr.shard);
    }
    em_tokenizer_free(tok);
    em_ctx_free(c);
    return rc;
}

/*
 * `ember project tp`: tensor-parallel decode on paper. From a model's config (a checkpoint's
 * config.json or a built-in shape with a real model's dimensions) and the datasheet figures of
 * report_specs.c, the bytes each collective of a decode step moves, per token and per layer, and
 * the projected step time and tokens/s at each degree and batch: the larger of the HBM-bound and
 * FLOP-bound time of the rank's share, plus its collectives (a latency per call plus the ring
 * transfer over the chip's interconnect). The plan is Ember's (docs/parallel.md): colwise q/k/v
 * and gate/up, rowwise o_proj and down (an all_reduce of [B, 1, H] after each), moe_tp_experts
 * (every rank a slice of every expert), KV heads replicated below the degree, the LM head
 * colwise_gather_output (an all_gather of the logits). The collective bytes per rank are what
 * `ember bench decode --tp N` counts (tests/check_project_tp.py compares them).
 *
 * Why a separate command and not a bench: nothing here is measured. Every output says so.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "ember/config.h"
#include "ember/core.h"
#include "report.h"

#define MAX_LIST 16

/* Real models' dimensions (their Hub config.json values, transformers' defaults elsewhere), so a
 * projection needs no download; any config.json works through --model. */
static const struct {
    const char *name, *json;
} SHAPES[] = {
    {"qwen3-30b-a3b",
     "{\"model_type\":\"qwen3_moe\",\"vocab_size\":151936,\"hidden_size\":2048,"
     "\"intermediate_size\":6144,\"num_hidden_layers\":48,\"num_attention_heads\":32,"
     "\"num_key_value_heads\":4,\"head_dim\":128,\"num_experts\":128,\"num_experts_per_tok\":8,"
     "\"moe_intermediate_size\":768,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\"}"},
    {"qwen3-0.6b",
     "{\"model_type\":\"qwen3\",\"vocab_size\":151936,\"hidden_size\":1024,"
     "\"intermediate_size\":3072,\"num_hidden_layers\":28,\"num_attention_heads\":16,"
     "\"num_key_value_heads\":8,\"head_dim\":128,\"tie_word_embeddings\":true,"
     "\"torch_dtype\":\"bfloat16\"}"},
    {"llama-3.1-8b",
     "{\"model_type\":\"llama\",\"vocab_size\":128256,\"hidden_size\":4096,"
     "\"intermediate_size\":14336,\"num_hidden_layers\":32,\"num_attention_heads\":32,"
     "\"num_key_value_heads\":8,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\"}"},
    {"llama-3.1-70b",
     "{\"model_type\":\"llama\",\"vocab_size\":128256,\"hidden_size\":8192,"
     "\"intermediate_size\":28672,\"num_hidden_layers\":80,\"num_attention_heads\":64,"
     "\"num_key_value_heads\":8,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\"}"},
    /* Gemma 4 26B-A4B's text model as /work/shared/REFERENCES.md gives it (NVIDIA Megatron-Bridge's
     * gemma4_provider docs): 30 layers, 5 sliding (window 1024) then 1 full; the full layers with
     * head size 512, 2 KV heads and keys = values; a dense MLP beside 128 experts in every layer;
     * no per-layer inputs (hidden_size_per_layer_input 0), no KV sharing. */
    {"gemma4-26b-a4b",
     "{\"model_type\":\"gemma4_text\",\"vocab_size\":262144,\"hidden_size\":2816,"
     "\"intermediate_size\":2112,\"num_hidden_layers\":30,\"num_attention_heads\":16,"
     "\"num_key_value_heads\":8,\"head_dim\":256,\"global_head_dim\":512,"
     "\"num_global_key_value_heads\":2,\"attention_k_eq_v\":true,\"enable_moe_block\":true,"
     "\"num_experts\":128,\"top_k_experts\":8,\"moe_intermediate_size\":704,"
     "\"hidden_size_per_layer_input\":0,\"num_kv_shared_layers\":0,\"sliding_window\":1024,"
     "\"final_logit_softcapping\":30.0,\"hidden_activation\":\"gelu_pytorch_tanh\","
     "\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\"}"},
};
#define N_SHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

/* The families whose decoder layer is attention + a gated MLP or MoE block, as modelled below;
 * gemma4_text with its own layer sizes (proj_layers). */
static const char *FAMILIES[] = {"llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral",
                                 "gemma3_text", "gemma4_text"};

/* What differs per layer or per family beyond em_model_config. Gemma 4 (gemma4.c's layer_sizes):
 * full-attention layers with their own head size and KV heads, keys = values there (no v_proj;
 * the cache still holds both: the values are normed, the keys roped), a dense MLP beside the
 * experts, each reduced before its own post-norm (3 all_reduces per layer). */
typedef struct proj_layers {
    int64_t *head_dim, *kv_heads; /* per layer */
    bool *v_proj;                 /* per layer: has a value projection */
    bool gemma4;
    bool dense_and_moe; /* enable_moe_block: the dense MLP runs beside the routed experts */
    int reduces;        /* all_reduces per layer (o_proj, the MLP[, the experts]) */
} proj_layers;

typedef struct proj_opts {
    long long degrees[MAX_LIST], batches[MAX_LIST];
    int n_degrees, n_batches;
    long long context;
    double latency_us; /* < 0: not given */
    double elem_bytes; /* <= 0: the config's dtype */
    const report_spec *specs[MAX_LIST];
    int n_specs;
    bool json;
} proj_opts;

/* One degree and batch on one device. Bytes and flops are per rank and per decode step. */
typedef struct proj_point {
    bool legal;
    char why[200];
    double weight_bytes;   /* resident: the rank's share of every weight, all experts */
    double kv_bytes;       /* resident KV cache of the batch at the context length */
    double read_bytes;     /* what a step reads from memory: touched weights + KV */
    double flops;
    double t_mem, t_cmp, t_coll, t_step, tokens_per_s;
    int collectives;
    double all_reduce_bytes, all_gather_bytes; /* handed to the collectives, as em_dist_stats */
    double sent_bytes;                         /* over the link: the ring's share */
    double moe_read_bytes, moe_flops; /* of those, the routed blocks' (router + experts): what
                                         `ember bench moe` projects per layer */
    int moe_layers;
    bool fits;
} proj_point;

static bool is_moe_layer(const em_model_config *m, int64_t i) {
    if (m->num_experts <= 0) return false;
    for (int k = 0; k < m->n_mlp_only_layers; k++)
        if (m->mlp_only_layers[k] == i) return false;
    int64_t step = m->decoder_sparse_step > 0 ? m->decoder_sparse_step : 1;
    return (i + 1) % step == 0;
}

static bool divides(proj_point *p, const char *what, int64_t size, long long n) {
    if (size % n == 0) return true;
    p->legal = false;
    snprintf(p->why, sizeof p->why, "%s (%lld) does not divide by the degree %lld", what,
             (long long)size, n);
    return false;
}

static void project(const em_model_config *m, const proj_layers *pl, double w, long long n,
                    long long b, long long ctx, const report_spec *sp, double latency_us,
                    proj_point *p) {
    memset(p, 0, sizeof *p);
    p->legal = true;
    const double H = (double)m->hidden_size, V = (double)m->vocab_size;
    if (!divides(p, "num_attention_heads", m->num_attention_heads, n) ||
        !divides(p, "vocab_size", m->vocab_size, n))
        return;
    const double qd = (double)(m->num_attention_heads / n);
    const double E = (double)m->num_experts, k = (double)m->num_experts_per_tok;
    /* distinct experts a batch of b tokens hits with uniform routing (real routers are skewed:
     * fewer, so this bounds the bytes from above) */
    const double touched = E > 0 ? E * (1 - pow(1 - k / E, (double)b)) : 0;
    double weights = 0, reads = 0, flops = 0, kv_resident = 0, kv_read = 0;
    for (int64_t i = 0; i < m->num_hidden_layers; i++) {
        const double hd = (double)pl->head_dim[i];
        int64_t kv = pl->kv_heads[i];
        double kvd; /* KV heads per rank: replicated when there are fewer than ranks */
        if (kv % n == 0) kvd = (double)(kv / n);
        else if (n % kv == 0) kvd = 1;
        else {
            p->legal = false;
            snprintf(p->why, sizeof p->why,
                     "num_key_value_heads (%lld, layer %lld) and the degree %lld: neither divides "
                     "the other", (long long)kv, (long long)i, n);
            return;
        }
        /* q k v o + norms (input, post-attention; q and k); Gemma 4: pre/post-feedforward
         * norms, with the experts three more, and the layer scalar */
        double attn = H * hd * (2 * qd + (pl->v_proj[i] ? 2 : 1) * kvd) + 2 * H + 2 * hd;
        if (pl->gemma4) attn += (pl->dense_and_moe ? 5 : 2) * H + 1;
        double span = (double)ctx;
        if (m->layer_types && m->layer_types[i] == EM_LAYER_SLIDING_ATTENTION &&
            m->sliding_window > 0 && m->sliding_window < ctx)
            span = (double)m->sliding_window;
        weights += attn;
        reads += attn;
        flops += 2 * b * attn + 4.0 * b * qd * hd * span;
        kv_resident += 2 * kvd * hd * (double)ctx * b;
        kv_read += 2 * kvd * hd * span * b;
        if (is_moe_layer(m, i)) {
            if (!divides(p, "moe_intermediate_size", m->moe_intermediate_size, n)) return;
            double expert = 3 * H * (double)(m->moe_intermediate_size / n);
            /* Gemma 4's router: its scale [H] and per_expert_scale [E] beside the projection */
            double router = H * E + (pl->gemma4 ? H + E : 0);
            weights += router + E * expert;
            reads += router + touched * expert;
            flops += 2 * b * (H * E + k * expert);
            p->moe_read_bytes += (router + touched * expert) * w;
            p->moe_flops += 2 * b * (H * E + k * expert);
            p->moe_layers++;
            if (m->shared_expert_intermediate_size > 0) {
                if (!divides(p, "shared_expert_intermediate_size",
                             m->shared_expert_intermediate_size, n))
                    return;
                double shared = 3 * H * (double)(m->shared_expert_intermediate_size / n) + H;
                weights += shared;
                reads += shared;
                flops += 2 * b * shared;
            }
        }
        if (!is_moe_layer(m, i) || pl->dense_and_moe) {
            if (!divides(p, "intermediate_size", m->intermediate_size, n)) return;
            double mlp = 3 * H * (double)(m->intermediate_size / n);
            weights += mlp;
            reads += mlp;
            flops += 2 * b * mlp;
        }
    }
    /* the LM head's rows and the embedding's (embedding_rowwise: V/n rows too; a tied head is
     * the embedding's slice) */
    double head = V / (double)n * H;
    weights += head + H + (m->tie_word_embeddings ? 0 : head); /* final norm, embedding */
    reads += head + H + b * H;                                  /* b embedding rows */
    flops += 2 * b * head;
    p->weight_bytes = weights * w;
    p->kv_bytes = kv_resident * w;
    p->read_bytes = (reads + kv_read) * w;
    p->flops = flops;
    p->t_mem = p->read_bytes / (sp->hbm_gbs * 1e9);
    p->t_cmp = flops / (sp->bf16_tflops * 1e12);
    if (n > 1) {
        double msg = b * H * w, part = b * (V / (double)n) * w;
        /* the embedding's rows, o_proj and the MLP per layer (Gemma 4: the dense MLP and the
         * experts apart): all_reduce; the logits: gather */
        p->collectives = (int)(pl->reduces * m->num_hidden_layers + 2);
        p->all_reduce_bytes = ((double)pl->reduces * (double)m->num_hidden_layers + 1) * msg;
        p->all_gather_bytes = part;
        /* ring all_reduce: each rank sends 2 (n-1)/n of the message; ring all_gather: n-1 parts */
        p->sent_bytes = p->all_reduce_bytes * 2.0 * (double)(n - 1) / (double)n +
                        part * (double)(n - 1);
        p->t_coll = p->collectives * latency_us * 1e-6 + p->sent_bytes / (sp->link_gbs * 1e9);
    }
    p->t_step = fmax(p->t_mem, p->t_cmp) + p->t_coll;
    p->tokens_per_s = (double)b / p->t_step;
    p->fits = p->weight_bytes + p->kv_bytes <= sp->memory_gib * 1073741824.0;
}

static const report_spec *spec_named(const char *id) {
    for (int s = 0; s < report_n_specs; s++)
        if (!strcmp(report_specs[s].id, id)) return &report_specs[s];
    return NULL;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: ember project tp (--model DIR_OR_CONFIG | --shape NAME) [--devices IDS]\n"
            "                        [--degrees 1,2,4,8] [--batches 1,64] [--context 1024]\n"
            "                        [--latency-us US] [--dtype bf16|f32|int8] [--json]\n\n"
            "Tensor-parallel decode on paper: per degree and batch, the bytes the collectives\n"
            "of a decode step move (per rank, as `ember bench decode --tp N` counts them), and\n"
            "the projected step time and tokens/s on each device from its datasheet figures\n"
            "(HBM bandwidth, bf16 peak, memory, interconnect). Nothing is measured: every row is\n"
            "a projection. The best degree per device and batch is where tensor parallelism\n"
            "stops paying.\n\n"
            "  --model       a checkpoint folder or config.json (llama, mistral, qwen2, qwen3,\n"
            "                qwen3_moe, mixtral, gemma3, gemma4 without per-layer inputs)\n"
            "  --shape       a built-in shape with a real model's dimensions:");
    for (int i = 0; i < N_SHAPES; i++) fprintf(f, " %s", SHAPES[i].name);
    fprintf(f, "\n  --devices     spec ids (default tpu-v6e,h100,h200):");
    for (int s = 0; s < report_n_specs; s++) fprintf(f, " %s", report_specs[s].id);
    fprintf(f, "\n  --context     tokens already in the KV cache per sequence (default 1024)\n"
               "  --latency-us  seconds per collective call beyond the transfer, in us (default:\n"
               "                the device table's assumption: no datasheet gives it)\n"
               "  --dtype       bytes per weight and KV element (default: the config's dtype,\n"
               "                bf16 when it has none)\n");
}

static int parse(int argc, char **argv, proj_opts *o, const char **model, const char **shape) {
    const char *cmd = "project tp";
    o->degrees[0] = 1, o->degrees[1] = 2, o->degrees[2] = 4, o->degrees[3] = 8;
    o->n_degrees = 4;
    o->batches[0] = 1, o->batches[1] = 64;
    o->n_batches = 2;
    o->context = 1024;
    o->latency_us = -1;
    const char *devices = "tpu-v6e,h100,h200";
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "ember %s: unknown option or missing value: %s\n", cmd, a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--model")) *model = v;
        else if (!strcmp(a, "--shape")) *shape = v;
        else if (!strcmp(a, "--devices")) devices = v;
        else if (!strcmp(a, "--degrees")) {
            if ((o->n_degrees = cli_int_list(cmd, a, v, 1, 4096, o->degrees, MAX_LIST)) < 0)
                return 2;
        } else if (!strcmp(a, "--batches")) {
            if ((o->n_batches = cli_int_list(cmd, a, v, 1, 1 << 20, o->batches, MAX_LIST)) < 0)
                return 2;
        } else if (!strcmp(a, "--context")) {
            if (!cli_int(cmd, a, v, 1, 1 << 24, &o->context)) return 2;
        } else if (!strcmp(a, "--latency-us")) {
            if (!cli_real(cmd, a, v, 0, 1e6, &o->latency_us)) return 2;
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "bf16")) o->elem_bytes = 2;
            else if (!strcmp(v, "f32")) o->elem_bytes = 4;
            else if (!strcmp(v, "int8")) o->elem_bytes = 1;
            else {
                fprintf(stderr, "ember %s: --dtype %s: want bf16, f32 or int8\n", cmd, v);
                return 2;
            }
        } else {
            fprintf(stderr, "ember %s: unknown option: %s\n", cmd, a);
            return 2;
        }
    }
    if (!*model == !*shape) {
        fprintf(stderr, "ember %s: give one of --model or --shape\n", cmd);
        return 2;
    }
    char id[64];
    for (const char *s = devices; *s;) {
        size_t len = strcspn(s, ",");
        if (len == 0 || len >= sizeof id || o->n_specs == MAX_LIST) {
            fprintf(stderr, "ember %s: --devices %s: bad list\n", cmd, devices);
            return 2;
        }
        memcpy(id, s, len);
        id[len] = 0;
        if (!(o->specs[o->n_specs++] = spec_named(id))) {
            fprintf(stderr, "ember %s: --devices: no device spec named '%s' (known:", cmd, id);
            for (int k = 0; k < report_n_specs; k++) fprintf(stderr, " %s", report_specs[k].id);
            fprintf(stderr, ")\n");
            return 2;
        }
        s += len + (s[len] == ',');
    }
    return 0;
}

static int load_config(em_ctx *c, const char *model, const char *shape, em_model_config *m) {
    const char *cmd = "ember project tp";
    if (shape) {
        int i = 0;
        while (i < N_SHAPES && strcmp(SHAPES[i].name, shape)) i++;
        if (i == N_SHAPES) {
            fprintf(stderr, "%s: --shape %s: unknown (known:", cmd, shape);
            for (int k = 0; k < N_SHAPES; k++) fprintf(stderr, " %s", SHAPES[k].name);
            fprintf(stderr, ")\n");
            return 2;
        }
        if (em_model_config_parse(c, SHAPES[i].json, strlen(SHAPES[i].json), shape, m) != EM_OK) {
            fprintf(stderr, "%s: %s\n", cmd, em_ctx_error(c)->message);
            return 1;
        }
    } else if (em_model_config_load(c, model, m) != EM_OK) {
        fprintf(stderr, "%s: %s\n", cmd, em_ctx_error(c)->message);
        return 1;
    }
    for (size_t f = 0; f < sizeof FAMILIES / sizeof FAMILIES[0]; f++)
        if (!strcmp(m->text_model_type, FAMILIES[f])) return 0;
    fprintf(stderr,
            "%s: %s: model_type '%s' is not modelled (its layers differ from attention + a gated "
            "MLP or MoE block); modelled: llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, "
            "gemma3, gemma4 (the 26B-A4B layout)\n",
            cmd, model ? model : shape, m->text_model_type);
    em_model_config_free(m);
    return 1;
}

static void proj_layers_free(proj_layers *pl) {
    free(pl->head_dim);
    free(pl->kv_heads);
    free(pl->v_proj);
    memset(pl, 0, sizeof *pl);
}

/* per_layer_config of a file transformers writes ({"3": {"head_dim": 512, ...}}), from the
 * text part when the config nests one: applied on top of the defaults. Returns false (message
 * printed) on a key or value gemma4.c would refuse too. */
static bool gemma4_per_layer(json_t *root, const em_model_config *m, proj_layers *pl,
                             bool *found) {
    json_t *text = json_object_get(root, "text_config");
    json_t *plc = json_object_get(json_is_object(text) ? text : root, "per_layer_config");
    *found = json_is_object(plc);
    if (!*found) return true;
    const char *key;
    json_t *v;
    json_object_foreach(plc, key, v) {
        char *end;
        long long i = strtoll(key, &end, 10);
        if (!*key || *end || i < 0 || i >= m->num_hidden_layers || !json_is_object(v)) {
            fprintf(stderr, "ember project tp: per_layer_config key '%s' is not a layer index "
                            "below %lld with an object\n", key, (long long)m->num_hidden_layers);
            return false;
        }
        json_t *hd = json_object_get(v, "head_dim");
        json_t *kv = json_object_get(v, "num_key_value_heads");
        if (hd && (!json_is_integer(hd) || json_integer_value(hd) <= 0)) return false;
        if (kv && (!json_is_integer(kv) || json_integer_value(kv) <= 0)) return false;
        if (hd) pl->head_dim[i] = json_integer_value(hd);
        if (kv) pl->kv_heads[i] = json_integer_value(kv);
    }
    return true;
}

/* The per-layer sizes: the config's for every family; Gemma 4's as its loader resolves them
 * (per_layer_config when the file has one, else global_head_dim and, with attention_k_eq_v,
 * num_global_key_value_heads on the full layers). json: the config text, or NULL to read
 * `path` (a folder holding config.json or the file). Returns 0, or 1 after a message. */
static int proj_layers_make(const em_model_config *m, const char *json, const char *path,
                            const char *name, proj_layers *pl) {
    const char *cmd = "ember project tp";
    int64_t L = m->num_hidden_layers;
    memset(pl, 0, sizeof *pl);
    pl->head_dim = calloc((size_t)L + 1, sizeof *pl->head_dim);
    pl->kv_heads = calloc((size_t)L + 1, sizeof *pl->kv_heads);
    pl->v_proj = calloc((size_t)L + 1, sizeof *pl->v_proj);
    if (!pl->head_dim || !pl->kv_heads || !pl->v_proj) {
        fprintf(stderr, "%s: out of memory\n", cmd);
        proj_layers_free(pl);
        return 1;
    }
    for (int64_t i = 0; i < L; i++) {
        pl->head_dim[i] = m->head_dim;
        pl->kv_heads[i] = m->num_key_value_heads;
        pl->v_proj[i] = true;
    }
    pl->reduces = 2;
    if (strcmp(m->text_model_type, "gemma4_text")) return 0;
    pl->gemma4 = true;
    int64_t ple = 256, shared = 0, gd = 512, gkv = -1; /* Gemma4TextConfig's defaults */
    bool k_eq_v = false, moe = false;
    em_model_config_get_int(m, "hidden_size_per_layer_input", &ple);
    em_model_config_get_int(m, "num_kv_shared_layers", &shared);
    em_model_config_get_int(m, "global_head_dim", &gd);
    em_model_config_get_int(m, "num_global_key_value_heads", &gkv);
    em_model_config_get_bool(m, "attention_k_eq_v", &k_eq_v);
    em_model_config_get_bool(m, "enable_moe_block", &moe);
    if (ple > 0 || shared > 0) {
        fprintf(stderr, "%s: %s: Gemma 4 with %s is not modelled (only the 26B-A4B layout: no "
                        "per-layer inputs, no KV sharing)\n", cmd, name,
                ple > 0 ? "per-layer inputs (hidden_size_per_layer_input)"
                        : "KV sharing (num_kv_shared_layers)");
        proj_layers_free(pl);
        return 1;
    }
    pl->dense_and_moe = moe && m->num_experts > 0;
    if (pl->dense_and_moe) pl->reduces = 3;
    json_error_t err;
    json_t *root = NULL;
    if (json) root = json_loads(json, 0, &err);
    else {
        char file[4096];
        struct stat st;
        snprintf(file, sizeof file, stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? "%s/config.json"
                                                                                 : "%s", path);
        root = json_load_file(file, 0, &err);
    }
    bool found = false;
    if (!root || !gemma4_per_layer(root, m, pl, &found)) {
        fprintf(stderr, "%s: %s: per_layer_config unreadable%s%s\n", cmd, name,
                root ? "" : ": ", root ? "" : err.text);
        json_decref(root);
        proj_layers_free(pl);
        return 1;
    }
    json_decref(root);
    for (int64_t i = 0; i < L; i++) {
        bool full = !m->layer_types || m->layer_types[i] != EM_LAYER_SLIDING_ATTENTION;
        if (full && !found) {
            pl->head_dim[i] = gd;
            if (gkv > 0 && k_eq_v) pl->kv_heads[i] = gkv;
        }
        pl->v_proj[i] = !(full && k_eq_v);
    }
    return 0;
}

static void print_text(const char *name, const em_model_config *m, const proj_layers *pl,
                       const proj_opts *o, double w, const report_spec *sp, double lat) {
    printf("\n%s on %s (HBM %.0f GB/s, %.0f TFLOP/s bf16, %.0f GiB, link %.0f GB/s per "
           "direction, %.0f us per collective)\n",
           name, sp->name, sp->hbm_gbs, sp->bf16_tflops, sp->memory_gib, sp->link_gbs, lat);
    printf("%6s %6s %12s %10s %9s %9s %9s %9s %12s %5s\n", "degree", "batch", "weights/rank",
           "coll/step", "coll KiB", "mem us", "coll us", "step us", "tokens/s", "fits");
    for (int bi = 0; bi < o->n_batches; bi++) {
        double best = 0;
        long long best_n = 0;
        for (int di = 0; di < o->n_degrees; di++) {
            proj_point p;
            project(m, pl, w, o->degrees[di], o->batches[bi], o->context, sp, lat, &p);
            if (!p.legal) {
                printf("%6lld %6lld  refused: %s\n", o->degrees[di], o->batches[bi], p.why);
                continue;
            }
            printf("%6lld %6lld %10.2f GB %10d %9.1f %9.1f %9.1f %9.1f %12.1f %5s\n",
                   o->degrees[di], o->batches[bi], p.weight_bytes / 1e9, p.collectives,
                   (p.all_reduce_bytes + p.all_gather_bytes) / 1024.0,
                   1e6 * fmax(p.t_mem, p.t_cmp), 1e6 * p.t_coll, 1e6 * p.t_step, p.tokens_per_s,
                   p.fits ? "yes" : "no");
            if (p.fits && p.tokens_per_s > best) best = p.tokens_per_s, best_n = o->degrees[di];
        }
        if (best_n)
            printf("  batch %lld: best degree %lld (%.0f tokens/s, projected)\n",
                   o->batches[bi], best_n, best);
        else
            printf("  batch %lld: fits at none of the degrees\n", o->batches[bi]);
    }
}

static void print_json(const char *name, const em_model_config *m, const proj_layers *pl,
                       const proj_opts *o, double w, const report_spec *sp, double lat) {
    for (int bi = 0; bi < o->n_batches; bi++)
        for (int di = 0; di < o->n_degrees; di++) {
            proj_point p;
            project(m, pl, w, o->degrees[di], o->batches[bi], o->context, sp, lat, &p);
            printf("{\"projection\":\"tp_decode\",\"model\":\"%s\",\"device\":\"%s\","
                   "\"degree\":%lld,\"batch\":%lld,\"context\":%lld,\"elem_bytes\":%g,",
                   name, sp->id, o->degrees[di], o->batches[bi], o->context, w);
            if (!p.legal) {
                printf("\"legal\":false,\"why\":\"%s\"}\n", p.why);
                continue;
            }
            printf("\"legal\":true,\"weight_bytes_per_rank\":%.0f,\"kv_bytes_per_rank\":%.0f,"
                   "\"read_bytes_per_step\":%.0f,\"flops_per_step\":%.0f,"
                   "\"collectives_per_step\":%d,\"all_reduce_bytes_per_step\":%.0f,"
                   "\"all_gather_bytes_per_step\":%.0f,\"sent_bytes_per_step\":%.0f,"
                   "\"all_reduce_bytes_per_token_per_layer\":%.0f,"
                   "\"t_mem_s\":%.9g,\"t_compute_s\":%.9g,\"t_collectives_s\":%.9g,"
                   "\"t_step_s\":%.9g,\"tokens_per_s\":%.6g,\"fits\":%s,"
                   "\"moe_layers\":%d,\"moe_read_bytes_per_step\":%.0f,"
                   "\"moe_flops_per_step\":%.0f,"
                   "\"hbm_gbs\":%g,\"bf16_tflops\":%g,\"memory_gib\":%g,\"link_gbs\":%g,"
                   "\"latency_us\":%g}\n",
                   p.weight_bytes, p.kv_bytes, p.read_bytes, p.flops, p.collectives,
                   p.all_reduce_bytes, p.all_gather_bytes, p.sent_bytes,
                   o->degrees[di] > 1 ? pl->reduces * (double)m->hidden_size * w : 0.0,
                   p.t_mem, p.t_cmp, p.t_coll, p.t_step, p.tokens_per_s, p.fits ? "true" : "false", p.moe_layers,
                   p.moe_read_bytes, p.moe_flops, sp->hbm_gbs,
                   sp->bf16_tflops, sp->memory_gib, sp->link_gbs, lat);
        }
}

int cmd_project(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "tp")) {
        fprintf(stderr, "ember project: want `ember project tp ...` (the one projection so far)\n");
        usage(stderr);
        return 2;
    }
    proj_opts o;
    memset(&o, 0, sizeof o);
    const char *model = NULL, *shape = NULL;
    int rc = parse(argc, argv, &o, &model, &shape);
    if (rc) return rc;
    em_ctx *c = em_ctx_create();
    if (!c) {
        fprintf(stderr, "ember project tp: out of memory\n");
        return 1;
    }
    em_model_config m;
    if ((rc = load_config(c, model, shape, &m))) {
        em_ctx_free(c);
        return rc;
    }
    proj_layers pl;
    int si = 0;
    while (shape && strcmp(SHAPES[si].name, shape)) si++;
    if ((rc = proj_layers_make(&m, shape ? SHAPES[si].json : NULL, model, shape ? shape : model,
                               &pl))) {
        em_model_config_free(&m);
        em_ctx_free(c);
        return rc;
    }
    double w = o.elem_bytes > 0 ? o.elem_bytes
               : m.has_dtype && m.dtype == EM_F32 ? 4
                                                  : 2;
    const char *name = shape ? shape : model;
    if (!o.json)
        printf("Projection, not a measurement: %s (%lld layers, hidden %lld, %lld heads, %lld KV "
               "heads%s), %g bytes per element, %lld tokens of context; per rank per decode step "
               "%lld collectives (an all_reduce of [B, 1, %lld] after the vocab-parallel "
               "embedding and after o_proj and the MLP of each layer%s, the LM head's "
               "all_gather)\n",
               name, (long long)m.num_hidden_layers, (long long)m.hidden_size,
               (long long)m.num_attention_heads, (long long)m.num_key_value_heads,
               m.num_experts > 0 ? ", MoE" : "", w, o.context,
               (long long)(pl.reduces * m.num_hidden_layers + 2), (long long)m.hidden_size,
               pl.dense_and_moe ? " (the dense MLP and the experts each)" : "");
    for (int s = 0; s < o.n_specs; s++) {
        double lat = o.latency_us >= 0 ? o.latency_us : o.specs[s]->latency_us;
        if (o.json) print_json(name, &m, &pl, &o, w, o.specs[s], lat);
        else print_text(name, &m, &pl, &o, w, o.specs[s], lat);
    }
    if (!o.json) {
        printf("\nSources:\n");
        for (int s = 0; s < o.n_specs; s++)
            printf("  %s: %s; %s\n", o.specs[s]->id, o.specs[s]->source, o.specs[s]->link_source);
    }
    proj_layers_free(&pl);
    em_model_config_free(&m);
    em_ctx_free(c);
    return 0;
}

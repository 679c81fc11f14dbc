/* Loading a model: resolve the checkpoint, read its configs, pick the family, place the modules
 * on devices, and hand the weights to the family's loader. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/threadpool.h"
#include "ember/hub.h"
#include "ember/pjrt.h"
#include "io/safetensors/safetensors_impl.h"
#include "ember/dist.h"
#include "models/model_impl.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

em_model_options em_model_default_options(void) {
    em_model_options o;
    memset(&o, 0, sizeof o);
    o.dtype = EM_DTYPE_AUTO;
    o.moe_impl = EM_MOE_RAGGED;
    o.progress = true;
    return o;
}

/* ---- the weight loader ---- */

/* Decode streams every weight once per step. From the checkpoint's file mapping that means
 * 4 KiB pages: the hardware prefetcher stops at each page boundary and each page costs a TLB
 * walk. The same dot engine on a Qwen3-0.6B lm_head ran 34 GB/s on 4 KiB pages against 40 on
 * 2 MiB pages (interleaved A/B, this Zen 4 host), so large weights are copied into the CPU
 * allocator's memory (madvised MADV_HUGEPAGE) unless the kernel has huge pages off or the
 * caller asked for zero copy. */
#define HUGE_COPY_MIN ((size_t)2 << 20)

typedef struct copy_job {
    char *dst;
    const char *src;
    size_t n;
} copy_job;

static void copy_chunks(void *user, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const copy_job *j = user;
    size_t b = (size_t)begin * HUGE_COPY_MIN, e = (size_t)end * HUGE_COPY_MIN;
    if (e > j->n) e = j->n;
    memcpy(j->dst + b, j->src + b, e - b);
}

/* A copy of `view` in fresh CPU memory; on all threads, as half the time goes to the kernel
 * clearing the new pages. */
static em_tensor *huge_copy(em_ctx *c, em_tensor *view) {
    em_tensor *t = em_tensor_new(c, em_device_cpu(), em_tensor_dtype(view), em_tensor_ndim(view),
                                 em_tensor_shape(view));
    if (!t) return NULL;
    copy_job j = {em_tensor_ptr(t), em_tensor_data(c, view), em_tensor_nbytes(view)};
    em_parallel_for((int64_t)((j.n + HUGE_COPY_MIN - 1) / HUGE_COPY_MIN), 1, copy_chunks, &j);
    return em_scope_add(c, t);
}

static bool huge_pages_available(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return false;
    char buf[128] = {0};
    bool ok = fgets(buf, sizeof buf, f) && !strstr(buf, "[never]");
    fclose(f);
    return ok;
}

static void draw_progress(em_wload *w, bool final) {
    if (!w->progress || w->total_bytes <= 0) return;
    double t = now_s();
    if (!final && t - w->last_draw < 0.1) return;
    w->last_draw = t;
    int width = 40, fill = (int)(width * (double)w->done_bytes / (double)w->total_bytes);
    if (fill > width) fill = width;
    fprintf(stderr, "\rloading weights [%.*s%*s] %5.1f%% of %.2f GB", fill,
            "########################################", width - fill, "",
            100.0 * (double)w->done_bytes / (double)w->total_bytes, w->total_bytes / 1e9);
    if (final) fprintf(stderr, "\n");
}

/* em_model_options.shape_only: a tensor of the stored shape in the model's dtype on the
 * compile-only device, made without reading the file (its data may be a sparse hole). */
static em_tensor *shape_only_weight(em_wload *w, em_device *dev, const char *name,
                                    const em_safetensors_info *info) {
    em_ctx *c = w->c;
    if (info->ndim > EM_MAX_DIMS) {
        em_ctx_fail(c, EM_ERR_SHAPE, "model_load", "%s: tensor '%s' has %d dims (at most %d)",
                    w->m->dir, name, info->ndim, EM_MAX_DIMS);
        return NULL;
    }
    em_device *prev = em_ctx_device(c);
    em_ctx_set_device(c, dev);
    em_tensor *t = em_empty_(c, __FILE__, __LINE__, w->m->dtype, info->ndim, info->shape);
    em_ctx_set_device(c, prev);
    w->done_bytes += (int64_t)info->nbytes;
    return t ? em_detach(c, t) : NULL;
}

static em_tensor *fetch(em_wload *w, em_device *dev, bool required, const char *name) {
    const em_safetensors_info *info = w->gs ? NULL : em_safetensors_find(w->st, name);
    if (!info && !em_gguf_src_has(w->gs, name)) {
        if (required)
            em_ctx_fail(w->c, EM_ERR_NOT_FOUND, "model_load",
                        "tensor '%s' is missing from the checkpoint in %s (family %s)", name,
                        w->m->dir, w->m->cfg.model_type);
        return NULL;
    }
    if (w->shape_only) /* a compile-only device: the header's shape, nothing read */
        return shape_only_weight(w, dev, name, info);
    /* a rank on a device slices on the host and moves only its slice */
    em_device *to = dev;
    if (w->m->tp_size > 1 && dev != em_device_cpu()) dev = em_device_cpu();
    em_tensor *t = w->gs ? em_gguf_src_load(w->c, w->gs, name, w->m->dtype, w->keep_quant, dev)
                         : em_safetensors_load_as(w->c, w->st, name, w->m->dtype, dev);
    if (!t) return NULL;
    if (w->huge_copy && dev == em_device_cpu() && em_tensor_nbytes(t) >= HUGE_COPY_MIN &&
        t->storage->release) {
        /* a view of the mapping (borrowed storage): copy it into huge-page memory */
        em_tensor *view = em_detach(w->c, t);
        t = huge_copy(w->c, view);
        em_tensor_release(view);
        if (!t) return NULL;
        if (w->gs)
            em_gguf_src_drop(w->gs, name);
        else
            em_st_drop_pages(w->st, info);
    }
    w->done_bytes += w->gs ? (int64_t)em_gguf_src_entry_bytes(w->gs, name) : (int64_t)info->nbytes;
    draw_progress(w, false);
    t = em_tp_shard(w, name, em_detach(w->c, t));
    if (!t || to == dev) return t;
    em_tensor *moved = em_to(w->c, t, to);
    em_tensor_release(t);
    return moved ? em_detach(w->c, moved) : NULL;
}

em_tensor *em_wl_get(em_wload *w, em_device *dev, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return em_ctx_status(w->c) ? NULL : fetch(w, dev, true, name);
}

em_tensor *em_wl_opt(em_wload *w, em_device *dev, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return em_ctx_status(w->c) ? NULL : fetch(w, dev, false, name);
}

bool em_wl_has(em_wload *w, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return w->gs ? em_gguf_src_has(w->gs, name) : em_safetensors_has(w->st, name);
}

int64_t em_wl_bytes(em_wload *w, const char *prefix) {
    if (w->gs) return em_gguf_src_bytes(w->gs, prefix);
    size_t n = prefix ? strlen(prefix) : 0;
    int64_t total = 0;
    for (int64_t i = 0; i < em_safetensors_count(w->st); i++) {
        const em_safetensors_info *inf = em_safetensors_info_at(w->st, i);
        if (!prefix || (!strncmp(inf->name, prefix, n) && inf->name[n] == '.'))
            total += (int64_t)inf->nbytes;
    }
    return total;
}

/* Replaces *t [E, N, K] by its packed form when that pays on its device and the shape allows
 * (N a multiple of 32, K even: every MoE family's sizes are). Same bytes, one copy at load. */
static void maybe_pack(em_wload *w, em_tensor **t) {
    const int64_t *s = em_tensor_shape(*t);
    if (!w->pack_experts || !em_ragged_pack_pays(em_tensor_device(*t), em_tensor_dtype(*t)) ||
        em_tensor_ndim(*t) != 3 || s[1] % 32 || s[2] % 2)
        return;
    em_ctx *c = w->c;
    em_scope_push(c);
    em_tensor *p = em_ragged_pack(c, *t);
    if (p) {
        em_tensor_release(*t);
        *t = em_detach(c, p);
    }
    em_scope_pop(c);
}

static bool experts_packed(em_wload *w, em_tensor **gate_up, em_tensor **down) {
    if (*gate_up && *down) {
        maybe_pack(w, gate_up);
        maybe_pack(w, down);
    }
    return *gate_up && *down && !em_ctx_status(w->c);
}

bool em_wl_experts(em_wload *w, em_device *dev, const char *base, int64_t n_experts,
                   const char *gate, const char *up, const char *down, em_tensor **gate_up,
                   em_tensor **down_out) {
    em_ctx *c = w->c;
    *gate_up = *down_out = NULL;
    if (em_wl_has(w, "%sexperts.gate_up_proj", base)) { /* transformers v5 / Gemma 4 layout */
        *gate_up = em_wl_get(w, dev, "%sexperts.gate_up_proj", base);
        *down_out = em_wl_get(w, dev, "%sexperts.down_proj", base);
        return experts_packed(w, gate_up, down_out);
    }
    if (w->gs) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, "model_load",
                    "%s: the experts of '%s' are not stacked (ffn_gate_exps / ffn_up_exps / "
                    "ffn_down_exps); GGUF files with one tensor per expert are not supported",
                    w->m->dir, base);
        return false;
    }
    /* per-expert tensors: stack them once, at load */
    em_scope_push(c);
    char name[256];
    snprintf(name, sizeof name, "%sexperts.0.%s.weight", base, gate);
    const em_safetensors_info *gi = em_safetensors_find(w->st, name);
    snprintf(name, sizeof name, "%sexperts.0.%s.weight", base, down);
    const em_safetensors_info *di = em_safetensors_find(w->st, name);
    if (!gi || !di || gi->ndim != 2 || di->ndim != 2) {
        em_ctx_fail(c, EM_ERR_NOT_FOUND, "model_load",
                    "no experts for '%s' in %s (looked for %sexperts.gate_up_proj and "
                    "%sexperts.0.%s.weight)", base, w->m->dir, base, base, gate);
        em_scope_pop(c);
        return false;
    }
    /* tensor parallelism: this rank's experts (expert parallelism), or its slice of each one
     * (moe_tp_experts: the loaded matrices are already sliced) */
    int64_t first, held;
    em_tp_experts_held(w->m, n_experts, &first, &held);
    em_tensor *gu = NULL, *dn = NULL;
    bool huge_copy = w->huge_copy;
    w->huge_copy = false; /* the stacked tensors are the copies */
    for (int64_t e = 0; e < held && !em_ctx_status(c); e++) {
        em_scope_push(c);
        long long x = (long long)(first + e);
        em_tensor *g = em_wl_get(w, dev, "%sexperts.%lld.%s.weight", base, x, gate);
        em_tensor *u = em_wl_get(w, dev, "%sexperts.%lld.%s.weight", base, x, up);
        em_tensor *d = em_wl_get(w, dev, "%sexperts.%lld.%s.weight", base, x, down);
        if (g && u && d && !gu) { /* sized by the first expert as loaded */
            int64_t inter = em_tensor_dim(g, 0), hidden = em_tensor_dim(g, 1);
            em_device *prev = em_ctx_device(c);
            em_ctx_set_device(c, dev);
            gu = em_keep(c, em_empty_(c, __FILE__, __LINE__, w->m->dtype, 3,
                                      (int64_t[]){held, 2 * inter, hidden}));
            dn = em_keep(c, em_empty_(c, __FILE__, __LINE__, w->m->dtype, 3,
                                      (int64_t[]){held, hidden, inter}));
            em_ctx_set_device(c, prev);
        }
        if (g && u && d && gu && dn) {
            int64_t inter = em_tensor_dim(g, 0);
            em_tensor *slot = em_narrow(c, gu, 0, e, 1);
            em_assign(c, em_narrow(c, slot, 1, 0, inter), g);
            em_assign(c, em_narrow(c, slot, 1, inter, inter), u);
            em_assign(c, em_narrow(c, dn, 0, e, 1), d);
        }
        em_tensor_release(g);
        em_tensor_release(u);
        em_tensor_release(d);
        em_scope_pop(c);
    }
    w->huge_copy = huge_copy;
    if (!em_ctx_status(c)) {
        *gate_up = em_detach(c, gu);
        *down_out = em_detach(c, dn);
    }
    em_scope_pop(c);
    return !em_ctx_status(c) && experts_packed(w, gate_up, down_out);
}

/* ---- the model ---- */

static const char *prefixes[] = {"model.", "model.language_model.", "language_model.model.", "",
                                 NULL};

static bool find_prefix(em_safetensors *st, bool causal, char *out, size_t n) {
    for (int i = 0; prefixes[i]; i++) {
        char name[160];
        snprintf(name, sizeof name, "%s%s", prefixes[i],
                 causal ? "embed_tokens.weight" : "embeddings.word_embeddings.weight");
        if (em_safetensors_has(st, name)) {
            snprintf(out, n, "%s", prefixes[i]);
            return true;
        }
    }
    if (!causal) { /* sentence-transformers checkpoints may prefix BERT with "bert." */
        if (em_safetensors_has(st, "bert.embeddings.word_embeddings.weight")) {
            snprintf(out, n, "bert.");
            return true;
        }
    }
    return false;
}

static bool is_gguf_file(const char *p) {
    size_t n = strlen(p);
    return n > 5 && !strcmp(p + n - 5, ".gguf") && access(p, F_OK) == 0;
}

/* Llama 3's rope from a GGUF file: llama.cpp divides each frequency by rope_freqs.weight. */
static em_status apply_rope_factors(em_ctx *c, em_model *m, em_gguf_src *gs) {
    float f[EM_MAX_ROPE_FREQS];
    int k = m->n_freq > 0 ? em_gguf_src_rope_factors(c, gs, f, m->n_freq) : 0;
    if (k < 0) return em_ctx_status(c);
    for (int i = 0; i < k; i++) m->inv_freq[i] /= f[i];
    return EM_OK;
}

em_model *em_model_load(em_ctx *c, const char *id, const em_model_options *opts) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!id) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "model_load", "model id is NULL");
        return NULL;
    }
    double t0 = now_s();
    em_model_options o = opts ? *opts : em_model_default_options();
    bool gguf = is_gguf_file(id);
    char *dir = NULL;
    if (!gguf) {
        em_hub_options ho = em_hub_default_options();
        if (o.offline) ho.offline = 1;
        ho.progress = o.progress ? -1 : 0;
        if (em_hub_resolve(c, id, &ho, &dir) != EM_OK) return NULL;
    }
    em_model *m = calloc(1, sizeof *m);
    if (!m) {
        free(dir);
        em_ctx_fail(c, EM_ERR_OOM, "model_load", "out of memory");
        return NULL;
    }
    snprintf(m->dir, sizeof m->dir, "%s", gguf ? id : dir);
    free(dir);
    em_safetensors *st = NULL;
    em_gguf_src *gs = NULL;
    if (em_model_config_load(c, m->dir, &m->cfg) != EM_OK) goto fail;
    const char *type = m->cfg.text_model_type[0] ? m->cfg.text_model_type : m->cfg.model_type;
    m->fam = em_family_find(type);
    if (!m->fam) {
        char names[512];
        em_family_names(names, sizeof names);
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, "model_load",
                    "model_type '%s' (%s/config.json) is not supported; Ember knows %s", type,
                    m->dir, names);
        goto fail;
    }
    char gpath[1100];
    snprintf(gpath, sizeof gpath, "%s/generation_config.json", m->dir);
    if (!gguf && access(gpath, R_OK) == 0) {
        if (em_generation_config_load(c, gpath, &m->gen) != EM_OK) goto fail;
    } else {
        m->gen = em_generation_config_from_model(&m->cfg);
    }
    /* A GGUF file's weights are used as stored (quantized ones stay quantized, activations in
     * f32; a bf16 file runs in bf16, below) unless a dtype is asked for, which dequantizes
     * everything at load. */
    bool dtype_set = o.dtype != EM_DTYPE_AUTO;
    if (dtype_set) m->dtype = o.dtype;
    else if (gguf) m->dtype = EM_F32;
    else m->dtype = m->cfg.has_dtype && (m->cfg.dtype == EM_BF16 || m->cfg.dtype == EM_F32)
                        ? m->cfg.dtype : EM_F32;
    if (m->dtype != EM_F32 && m->dtype != EM_BF16 && m->dtype != EM_F16) {
        em_ctx_fail(c, EM_ERR_DTYPE, "model_load", "dtype %s is not supported for models "
                    "(f32, bf16, f16)", em_dtype_name(m->dtype));
        goto fail;
    }
    m->moe_impl = o.moe_impl;
    em_wload w;
    memset(&w, 0, sizeof w);
    w.c = c;
    w.m = m;
    if (gguf) {
        gs = em_gguf_src_open(c, m->dir, &m->cfg);
        if (!gs) goto fail;
        w.gs = gs;
        w.keep_quant = !dtype_set;
        if (!dtype_set) m->dtype = em_gguf_src_float_dtype(gs);
        snprintf(w.prefix, sizeof w.prefix, "model.");
    } else {
        st = em_safetensors_open(c, m->dir);
        if (!st) goto fail;
        w.st = st;
        if (!find_prefix(st, m->fam->causal, w.prefix, sizeof w.prefix)) {
            em_ctx_fail(c, EM_ERR_NOT_FOUND, "model_load",
                        "%s: no %s in the checkpoint (tried the prefixes model., "
                        "model.language_model., language_model.model. and none)", m->dir,
                        m->fam->causal ? "embed_tokens.weight"
                                       : "embeddings.word_embeddings.weight");
            goto fail;
        }
    }
    snprintf(m->prefix, sizeof m->prefix, "%s", w.prefix);
    w.total_bytes = em_wl_bytes(&w, NULL);
    w.progress = o.progress && isatty(2);
    const char *zc = getenv("EMBER_ZERO_COPY_WEIGHTS");
    bool views = o.zero_copy || (zc && !strcmp(zc, "1"));
    m->tp = o.tp;
    m->tp_size = o.tp ? em_dist_world_size(o.tp) : 1;
    m->tp_rank = o.tp ? em_dist_rank(o.tp) : 0;
    /* the experts spread over the tp group, or over SPMD's devices (as shardings) */
    int ep_degree = o.spmd > 1 && !o.tp ? o.spmd : m->tp_size;
    if (o.ep_size > 1 && o.ep_size != ep_degree) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "model_load", "expert parallelism: ep_size %d must "
                    "equal the %s degree %d (the experts are spread over %s)", o.ep_size,
                    ep_degree == m->tp_size ? "tensor-parallel" : "SPMD", ep_degree,
                    ep_degree == m->tp_size ? "the tp group" : "the devices");
        goto fail;
    }
    m->tp_ep = o.ep_size > 1;
    if (o.spmd > 1 && (o.tp || !m->fam->causal)) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "model_load", "SPMD over %d devices: %s", o.spmd,
                    o.tp ? "not with tensor parallelism over a group (tp); SPMD partitions the "
                           "whole model's compiled steps itself"
                         : "a decoder language model's compiled steps only");
        goto fail;
    }
    m->spmd_parts = o.spmd > 1 ? o.spmd : 0;
    m->spmd_split_gate_up = m->spmd_parts && o.spmd_split_gate_up;
    if (o.shape_only) { /* values never read: only where nothing runs */
        em_device *sd = o.device ? em_device_get(c, o.device) : em_ctx_device(c);
        if (!sd) goto fail;
        if (gguf || o.device_map || o.tp || !em_device_is_compile_only(sd)) {
            em_ctx_fail(c, EM_ERR_INVALID_ARG, "model_load",
                        "shape_only: %s (weights without their values only compile)",
                        gguf ? "safetensors checkpoints only, not a GGUF file"
                        : o.device_map || o.tp ? "one compile-only device (no device_map, no "
                                                 "tp group; --spmd partitions)"
                                               : "the device must be compile-only (tpu-aot:, "
                                                 "cuda-aot:)");
            goto fail;
        }
        w.shape_only = true;
    }
    if (em_tp_plan_apply(c, m, o.tp_plan)) goto fail;
    /* (a rank's slices are fresh copies already) */
    w.huge_copy = !views && huge_pages_available() && m->tp_size == 1;
    w.pack_experts = !views && o.moe_impl == EM_MOE_RAGGED;
    m->n_layers = m->cfg.num_hidden_layers;
    if (m->n_layers < 0 || m->n_layers > 100000) {
        em_ctx_fail(c, EM_ERR_FORMAT, "model_load", "%s/config.json: num_hidden_layers %lld",
                    m->dir, (long long)m->n_layers);
        goto fail;
    }
    m->layers = calloc((size_t)m->n_layers + 1, sizeof *m->layers);
    if (!m->layers) {
        em_ctx_fail(c, EM_ERR_OOM, "model_load", "out of memory");
        goto fail;
    }
    if (m->fam->config_hook && m->fam->config_hook(c, m) != EM_OK) goto fail;
    if (em_model_place(c, m, &o, &w) != EM_OK) goto fail;
    if (m->fam->load(&w) != EM_OK || em_ctx_status(c)) goto fail;
    if (gs && apply_rope_factors(c, m, gs) != EM_OK) goto fail;
    draw_progress(&w, true);
    em_safetensors_free(st);
    em_gguf_src_close(gs);
    m->load_s = now_s() - t0;
    return m;
fail:
    em_safetensors_free(st);
    em_gguf_src_close(gs);
    em_model_free(m);
    return NULL;
}

static void rel(em_tensor *t) { em_tensor_release(t); }

void em_model_free(em_model *m) {
    if (!m) return;
    rel(m->embed);
    rel(m->final_norm);
    if (m->lm_head != m->embed) rel(m->lm_head);
    for (int64_t i = 0; m->layers && i < m->n_layers; i++) {
        em_dec_layer *l = &m->layers[i];
        em_tensor *ts[] = {l->in_norm, l->post_attn_norm, l->pre_ffn_norm, l->post_ffn_norm, l->q,
                           l->k, l->v, l->o, l->q_bias, l->k_bias, l->v_bias, l->o_bias,
                           l->q_norm, l->k_norm, l->gate, l->up, l->down, l->router,
                           l->experts.gate_up, l->experts.down, l->experts.per_expert_scale,
                           l->pre_ffn_norm_2, l->post_ffn_norm_1, l->post_ffn_norm_2,
                           l->router_scale, l->pl_gate, l->pl_proj, l->pl_norm,
                           l->layer_scalar};
        for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) rel(ts[k]);
    }
    free(m->layers);
    rel(m->embed_pl);
    rel(m->pl_model_proj);
    rel(m->pl_proj_norm);
    rel(m->word_emb);
    rel(m->pos_emb);
    rel(m->type_emb);
    rel(m->emb_ln);
    rel(m->emb_lnb);
    for (int64_t i = 0; m->bert && i < m->n_layers; i++) {
        em_bert_layer *b = &m->bert[i];
        em_tensor *ts[] = {b->q, b->qb, b->k, b->kb, b->v, b->vb, b->ao, b->aob, b->ln1,
                           b->ln1b, b->inter, b->interb, b->out, b->outb, b->ln2, b->ln2b};
        for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) rel(ts[k]);
    }
    free(m->bert);
    free(m->map_text);
    free(m->tp_rules);
    em_tp_report_free(m);
    em_model_config_free(&m->cfg);
    free(m);
}

/* Every weight the model holds, each once (a tied head is the embedding). */
static int model_weights(const em_model *m, em_tensor **out, int cap) {
    int n = 0;
#define ADD(t)                                                                                     \
    do {                                                                                           \
        if ((t) && n < cap) out[n++] = (t);                                                        \
    } while (0)
    ADD(m->embed);
    ADD(m->final_norm);
    if (m->lm_head != m->embed) ADD(m->lm_head);
    for (int64_t i = 0; m->layers && i < m->n_layers; i++) {
        const em_dec_layer *l = &m->layers[i];
        em_tensor *ts[] = {l->in_norm, l->post_attn_norm, l->pre_ffn_norm, l->post_ffn_norm,
                           l->q, l->k, l->v, l->o, l->q_bias, l->k_bias, l->v_bias, l->o_bias,
                           l->q_norm, l->k_norm, l->gate, l->up, l->down, l->router,
                           l->experts.gate_up, l->experts.down, l->experts.per_expert_scale,
                           l->pre_ffn_norm_2, l->post_ffn_norm_1, l->post_ffn_norm_2,
                           l->router_scale, l->pl_gate, l->pl_proj, l->pl_norm, l->layer_scalar};
        for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) ADD(ts[k]);
    }
    ADD(m->embed_pl);
    ADD(m->pl_model_proj);
    ADD(m->pl_proj_norm);
#undef ADD
    return n;
}

int em_model_weight_list(const em_model *m, em_tensor ***out) {
    int cap = (int)(m->n_layers + 1) * 32 + 16;
    *out = malloc((size_t)cap * sizeof **out);
    return *out ? model_weights(m, *out, cap) : 0;
}

int64_t em_model_weight_bytes(const em_model *m, bool decode_step) {
    if (!m) return 0;
    em_tensor **ts;
    int n = em_model_weight_list(m, &ts);
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        if (!(decode_step && ts[i] == m->embed && m->lm_head != m->embed))
            total += (int64_t)em_tensor_nbytes(ts[i]);
    free(ts);
    return total;
}

int em_model_weight_dtypes(const em_model *m, char *buf, size_t cap) {
    if (!buf || !cap) return 0;
    buf[0] = 0;
    if (!m) return 0;
    em_tensor **ts;
    int n = em_model_weight_list(m, &ts);
    int64_t by[EM_DTYPE_COUNT] = {0}, total = 0;
    for (int i = 0; i < n; i++) {
        by[em_tensor_dtype(ts[i])] += (int64_t)em_tensor_nbytes(ts[i]);
        total += (int64_t)em_tensor_nbytes(ts[i]);
    }
    free(ts);
    size_t u = 0;
    for (int pass = 0; pass < EM_DTYPE_COUNT; pass++) { /* largest share first */
        int best = -1;
        for (int d = 0; d < EM_DTYPE_COUNT; d++)
            if (by[d] > 0 && (best < 0 || by[d] > by[best])) best = d;
        if (best < 0 || u >= cap) break;
        int k = snprintf(buf + u, cap - u, "%s%s %.0f%%", u ? ", " : "",
                         em_dtype_name((em_dtype)best), 100.0 * (double)by[best] / (double)total);
        u = k > 0 ? u + (size_t)k : u;
        by[best] = 0;
    }
    return (int)(u < cap ? u : cap - 1);
}

const em_model_config *em_model_config_get(const em_model *m) { return m ? &m->cfg : NULL; }
const em_generation_config *em_model_generation_config(const em_model *m) {
    return m ? &m->gen : NULL;
}
const char *em_model_dir(const em_model *m) { return m ? m->dir : NULL; }
em_dtype em_model_dtype(const em_model *m) { return m ? m->dtype : EM_F32; }
bool em_model_is_causal_lm(const em_model *m) { return m && m->fam->causal; }
double em_model_load_seconds(const em_model *m) { return m ? m->load_s : 0; }
void em_model_set_moe_impl(em_model *m, em_moe_impl impl) {
    if (m) m->moe_impl = impl;
}

int em_model_device_map(const em_model *m, char *buf, size_t n) {
    if (!m || !buf || !n) return 0;
    int k = snprintf(buf, n, "%s", m->map_text ? m->map_text : "");
    return k < 0 ? 0 : k;
}

/* The mixture-of-experts block: routing and three expert implementations (see ember/moe.h). */
#include <stdlib.h>
#include <string.h>

#include "core/tensor_impl.h"
#include "ember/moe.h"
#include "ember/pjrt.h"

bool em_moe_impl_parse(const char *s, em_moe_impl *out) {
    if (!s) return false;
    if (!strcmp(s, "ragged")) *out = EM_MOE_RAGGED;
    else if (!strcmp(s, "loop")) *out = EM_MOE_LOOP;
    else if (!strcmp(s, "dense")) *out = EM_MOE_DENSE;
    else return false;
    return true;
}

const char *em_moe_impl_name(em_moe_impl impl) {
    switch (impl) {
    case EM_MOE_RAGGED: return "ragged";
    case EM_MOE_LOOP: return "loop";
    case EM_MOE_DENSE: return "dense";
    }
    return "?";
}

em_moe_params em_moe_default_params(void) {
    em_moe_params p = {2, false, EM_MOE_ACT_SILU, EM_MOE_RAGGED, false, 0, 0};
    return p;
}

em_tensor *em_moe_route_(EM_OP_ARGS, em_tensor *logits, const em_moe_params *p,
                         em_tensor *per_expert_scale, em_dtype dtype, em_tensor **indices_out) {
    if (!c || c->err.status) return NULL;
    if (!logits || !p || !indices_out) {
        em_fail_at(c, EM_ERR_INVALID_ARG, "moe_route", file, line, "NULL argument");
        return NULL;
    }
    em_tensor *probs = em_softmax_(c, file, line, em_cast_(c, file, line, logits, EM_F32), -1);
    em_tensor *idx = NULL;
    em_tensor *top = em_topk_(c, file, line, probs, p->top_k, -1, true, true, &idx);
    if (p->norm_topk_prob) {
        int dim = -1;
        top = em_div_(c, file, line, top, em_sum_(c, file, line, top, &dim, 1, true));
    }
    if (per_expert_scale)
        top = em_mul_(c, file, line, top,
                      em_reshape_(c, file, line,
                                  em_index_select_(c, file, line,
                                                   em_cast_(c, file, line, per_expert_scale, EM_F32),
                                                   0, em_reshape_(c, file, line, idx, 1,
                                                                  (int64_t[]){-1})),
                                  2, em_tensor_shape(idx)));
    *indices_out = idx;
    return em_cast_(c, file, line, top, dtype);
}

static em_tensor *activate(EM_OP_ARGS, em_tensor *gate, em_tensor *up, em_moe_act act) {
    em_tensor *g = act == EM_MOE_ACT_GELU_TANH ? em_gelu_(c, file, line, gate, true)
                                               : em_silu_(c, file, line, gate);
    return em_mul_(c, file, line, g, up);
}

/* Reads the routing indices to the host; checks they name experts. */
static int64_t *host_indices(EM_OP_ARGS, em_tensor *indices, int64_t n_experts, int64_t *n) {
    *n = em_tensor_numel(indices);
    int64_t *v = malloc((size_t)(*n ? *n : 1) * sizeof *v);
    em_tensor *i64 = em_cast_(c, file, line, indices, EM_I64);
    if (!v || !i64 || em_to_host(c, i64, v, (size_t)*n * sizeof *v) != EM_OK) {
        if (!v) em_fail_at(c, EM_ERR_OOM, "moe_experts", file, line, "out of memory");
        free(v);
        return NULL;
    }
    for (int64_t i = 0; i < *n; i++)
        if (v[i] < 0 || v[i] >= n_experts) {
            em_fail_at(c, EM_ERR_INDEX, "moe_experts", file, line,
                       "routing index %lld at position %lld is not an expert (0..%lld)",
                       (long long)v[i], (long long)i, (long long)(n_experts - 1));
            free(v);
            return NULL;
        }
    return v;
}

/* The router's expert count: n_experts of the params, or the weights' own (0). */
static int64_t router_experts(const em_moe_params *p, int64_t held) {
    return p->n_experts > 0 ? p->n_experts : held;
}

/* Expert e's sort key on dev, [all] i64: (e - expert_first) mod all, so the held experts come
 * first as 0..E-1. */
static em_tensor *rotation(EM_OP_ARGS, em_device *dev, const em_moe_params *p, int64_t all) {
    int64_t *v = malloc((size_t)all * sizeof *v);
    if (!v) {
        em_fail_at(c, EM_ERR_OOM, "moe_experts", file, line, "out of memory");
        return NULL;
    }
    for (int64_t e = 0; e < all; e++) v[e] = (e - p->expert_first + all) % all;
    em_tensor *r = em_from_host_on_(c, file, line, dev, EM_I64, 1, &all, v);
    free(v);
    return r;
}

/* Helper tensors live on the device of the block's input (the CPU or a PJRT device). */
static em_tensor *i64_tensor(EM_OP_ARGS, em_device *dev, const int64_t *v, int64_t n) {
    return em_from_host_on_(c, file, line, dev, EM_I64, 1, &n, v);
}

/* Dim i of an expert matrix [E, N, K], also when it is packed ([E, N/32, K/2, 32, 2], from
 * em_ragged_pack); -1 for any other shape. */
static int64_t wdim(const em_tensor *w, int i) {
    const int64_t *s = em_tensor_shape(w);
    if (em_tensor_ndim(w) == 3) return s[i];
    if (em_tensor_ndim(w) != 5 || s[3] != 32 || s[4] != 2) return -1;
    return i == 0 ? s[0] : i == 1 ? s[1] * 32 : s[2] * 2;
}

/* One expert's weights as 2-D views: gate_up[e] [2I, H] and down[e] [H, I]. Packed weights
 * (made for ragged) are unpacked per call: correct for loop and dense, not fast. */
static em_tensor *expert(EM_OP_ARGS, em_tensor *w, int64_t e) {
    em_tensor *we = em_narrow_(c, file, line, w, 0, e, 1);
    if (em_tensor_ndim(w) == 5) we = em_ragged_unpack_(c, file, line, we);
    return em_reshape_(c, file, line, we, 2, (int64_t[]){wdim(w, 1), wdim(w, 2)});
}

/* The ragged expert pass, shared by both routings. token [T*k]: the token of each row sorted
 * by expert; inv [T*k]: the sorted row of each (token, slot) pair; gs [E] i32: group sizes. */
static em_tensor *ragged_ffn(EM_OP_ARGS, em_tensor *x, em_tensor *token, em_tensor *inv,
                             em_tensor *gs, int64_t k, em_tensor *weights,
                             const em_moe_weights *w, const em_moe_params *p) {
    int64_t t = em_tensor_dim(x, 0);
    int64_t inter = wdim(w->down, 2), hidden = em_tensor_dim(x, 1);
    em_tensor *xs = em_index_select_(c, file, line, x, 0, token);
    em_tensor *h = em_ragged_dot_(c, file, line, xs, w->gate_up, gs, true);
    em_tensor *a = activate(c, file, line, em_narrow_(c, file, line, h, 1, 0, inter),
                            em_narrow_(c, file, line, h, 1, inter, inter), p->act);
    em_tensor *y = em_ragged_dot_(c, file, line, a, w->down, gs, true);
    /* each token's k rows [t, k, hidden], weighted by its routing weights and summed over k */
    em_tensor *ys = em_reshape_(c, file, line, em_index_select_(c, file, line, y, 0, inv), 3,
                                (int64_t[]){t, k, hidden});
    em_tensor *sum;
    if (em_tensor_dtype(weights) == em_tensor_dtype(ys)) {
        /* one batched product [t, 1, k] x [t, k, hidden] (f32 accumulation, one rounding): 3-4x
         * faster on the CPU than a multiply and a sum over k (Qwen3's block at batch 64:
         * 0.42 -> 0.12 ms) */
        em_tensor *wk = em_reshape_(c, file, line, weights, 3, (int64_t[]){t, 1, k});
        sum = em_reshape_(c, file, line, em_matmul_(c, file, line, wk, ys), 2,
                          (int64_t[]){t, hidden});
    } else {
        /* weights of another dtype (Gemma 4 keeps them f32): the products promote, as in
         * transformers; a product in f32 would first widen every row (slower than this) */
        int dim = 1;
        sum = em_sum_(c, file, line,
                      em_mul_(c, file, line, ys,
                              em_reshape_(c, file, line, weights, 3, (int64_t[]){t, k, 1})),
                      &dim, 1, false);
    }
    return em_cast_(c, file, line, sum, em_tensor_dtype(x));
}

static em_tensor *experts_ragged(EM_OP_ARGS, em_tensor *x, const int64_t *idx, int64_t t,
                                 int64_t k, em_tensor *weights, const em_moe_weights *w,
                                 const em_moe_params *p, int64_t n_experts, int64_t *hit) {
    int64_t rows = t * k;
    int64_t *offset = calloc((size_t)n_experts + 1, sizeof *offset);
    int32_t *sizes = calloc((size_t)n_experts, sizeof *sizes);
    int64_t *token = malloc((size_t)(rows + 1) * sizeof *token);
    int64_t *inv = malloc((size_t)(rows ? rows : 1) * sizeof *inv);
    em_tensor *out = NULL;
    if (!offset || !sizes || !token || !inv) {
        em_fail_at(c, EM_ERR_OOM, "moe_experts", file, line, "out of memory");
        goto done;
    }
    /* counting sort of (token, slot) pairs by expert, stable in token order; pairs routed to
     * another rank's experts (idx -1, expert parallelism) all read one extra row past the
     * groups, which ragged_dot leaves zero */
    int64_t local = 0;
    for (int64_t i = 0; i < rows; i++)
        if (idx[i] >= 0) sizes[idx[i]]++, local++;
    for (int64_t e = 0; e < n_experts; e++) {
        offset[e + 1] = offset[e] + sizes[e];
        *hit += sizes[e] > 0;
    }
    for (int64_t i = 0; i < rows; i++) {
        if (idx[i] < 0) {
            inv[i] = local;
            continue;
        }
        int64_t pos = offset[idx[i]]++;
        token[pos] = i / k;
        inv[i] = pos;
    }
    token[local] = 0;
    em_device *dev = em_tensor_device(x);
    out = ragged_ffn(c, file, line, x,
                     i64_tensor(c, file, line, dev, token, local + (local < rows)),
                     i64_tensor(c, file, line, dev, inv, rows),
                     em_from_host_on_(c, file, line, dev, EM_I32, 1, &n_experts, sizes), k,
                     weights, w, p);
done:
    free(offset);
    free(sizes);
    free(token);
    free(inv);
    return out;
}

static em_tensor *experts_loop(EM_OP_ARGS, em_tensor *x, const int64_t *idx, int64_t t, int64_t k,
                               em_tensor *weights, const em_moe_weights *w,
                               const em_moe_params *p, int64_t n_experts, int64_t *hit) {
    int64_t inter = wdim(w->down, 2);
    em_tensor *out = em_zeros_(c, file, line, em_tensor_dtype(x), 2, em_tensor_shape(x));
    em_tensor *wflat = em_reshape_(c, file, line, weights, 1, (int64_t[]){t * k});
    int64_t *tok = malloc((size_t)(t * k + 1) * sizeof *tok);
    int64_t *slot = malloc((size_t)(t * k + 1) * sizeof *slot);
    if (!tok || !slot) {
        em_fail_at(c, EM_ERR_OOM, "moe_experts", file, line, "out of memory");
        free(tok);
        free(slot);
        return NULL;
    }
    for (int64_t e = 0; e < n_experts && out; e++) {
        /* (top_k position, token) pairs in the order torch.where(expert_mask[e]) gives them */
        int64_t n = 0;
        for (int64_t s = 0; s < k; s++)
            for (int64_t i = 0; i < t; i++)
                if (idx[i * k + s] == e) {
                    tok[n] = i;
                    slot[n++] = i * k + s;
                }
        if (!n) continue;
        (*hit)++;
        em_scope_push(c);
        em_tensor *ti = i64_tensor(c, file, line, em_tensor_device(x), tok, n);
        em_tensor *h = em_linear_(c, file, line, em_index_select_(c, file, line, x, 0, ti),
                                  expert(c, file, line, w->gate_up, e), NULL);
        em_tensor *a = activate(c, file, line, em_narrow_(c, file, line, h, 1, 0, inter),
                                em_narrow_(c, file, line, h, 1, inter, inter), p->act);
        em_tensor *y = em_linear_(c, file, line, a, expert(c, file, line, w->down, e), NULL);
        em_tensor *we = em_index_select_(c, file, line, wflat, 0, i64_tensor(c, file, line, em_tensor_device(x), slot, n));
        y = em_mul_(c, file, line, y, em_reshape_(c, file, line, we, 2, (int64_t[]){n, 1}));
        y = em_cast_(c, file, line, y, em_tensor_dtype(x)); /* as transformers: .to(out dtype) */
        em_tensor *next = em_keep(c, em_index_add_(c, file, line, out, 0, ti, y, 1.0));
        em_scope_pop(c);
        out = next;
    }
    free(tok);
    free(slot);
    return out;
}

/* The dense expert pass, shared by both routings: every expert on every token, scaled by its
 * column of the [T, E] routing-weight matrix wd. */
static em_tensor *dense_ffn(EM_OP_ARGS, em_tensor *x, em_tensor *wd, const em_moe_weights *w,
                            const em_moe_params *p, int64_t n_experts) {
    int64_t inter = wdim(w->down, 2);
    em_tensor *out = em_zeros_(c, file, line, em_tensor_dtype(x), 2, em_tensor_shape(x));
    for (int64_t e = 0; e < n_experts && out; e++) {
        em_scope_push(c);
        em_tensor *h = em_linear_(c, file, line, x, expert(c, file, line, w->gate_up, e), NULL);
        em_tensor *a = activate(c, file, line, em_narrow_(c, file, line, h, 1, 0, inter),
                                em_narrow_(c, file, line, h, 1, inter, inter), p->act);
        em_tensor *y = em_linear_(c, file, line, a, expert(c, file, line, w->down, e), NULL);
        y = em_mul_(c, file, line, y, em_narrow_(c, file, line, wd, 1, e, 1));
        em_tensor *next = em_keep(c, em_add_(c, file, line, out, em_cast_(c, file, line, y,
                                                                           em_tensor_dtype(x))));
        em_scope_pop(c);
        out = next;
    }
    return out;
}

static em_tensor *experts_dense(EM_OP_ARGS, em_tensor *x, const int64_t *idx, int64_t t, int64_t k,
                                em_tensor *weights, const em_moe_weights *w,
                                const em_moe_params *p, int64_t n_experts, int64_t *hit) {
    /* routing weights scattered to a dense [T, E] matrix (zero where not routed) */
    float *wh = malloc((size_t)(t * k + 1) * sizeof *wh);
    float *dense = calloc((size_t)(t * n_experts + 1), sizeof *dense);
    if (!wh || !dense || em_to_host_f32(c, weights, wh, t * k) != EM_OK) {
        if (!c->err.status) em_fail_at(c, EM_ERR_OOM, "moe_experts", file, line, "out of memory");
        free(wh);
        free(dense);
        return NULL;
    }
    for (int64_t i = 0; i < t * k; i++)
        if (idx[i] >= 0) dense[(i / k) * n_experts + idx[i]] = wh[i]; /* -1: another rank's */
    for (int64_t e = 0; e < n_experts; e++) {
        bool any = false;
        for (int64_t i = 0; i < t && !any; i++) any = dense[i * n_experts + e] != 0;
        *hit += any;
    }
    em_tensor *wd = em_cast_(c, file, line,
                             em_from_host_on_(c, file, line, em_tensor_device(x), EM_F32, 2,
                                              (int64_t[]){t, n_experts}, dense),
                             em_tensor_dtype(weights));
    free(wh);
    free(dense);
    return dense_ffn(c, file, line, x, wd, w, p, n_experts);
}

/* ---- device routing: only ops on tensors, so nothing is read back and no shape depends on
 * which experts were chosen (what compile mode needs) ---- */

/* 0..n-1 as i64 on dev: creation ops use the context's default device, which need not be x's. */
static em_tensor *arange_on(EM_OP_ARGS, em_device *dev, int64_t n) {
    em_device *prev = em_ctx_device(c);
    em_ctx_set_device(c, dev);
    em_tensor *r = em_arange_(c, file, line, 0, (double)n, 1, EM_I64);
    em_ctx_set_device(c, prev);
    return r;
}

/* The token of each flattened (token, slot) row, [T*k]: 0,..,0, 1,..,1, ... */
static em_tensor *row_tokens(EM_OP_ARGS, em_device *dev, int64_t t, int64_t k) {
    em_tensor *r = em_reshape_(c, file, line, arange_on(c, file, line, dev, t), 2,
                               (int64_t[]){t, 1});
    r = em_expand_(c, file, line, r, 2, (int64_t[]){t, k});
    return em_reshape_(c, file, line, r, 1, (int64_t[]){t * k});
}

static em_tensor *experts_ragged_device(EM_OP_ARGS, em_tensor *x, em_tensor *indices, int64_t k,
                                        em_tensor *weights, const em_moe_weights *w,
                                        const em_moe_params *p, int64_t n_experts) {
    int64_t t = em_tensor_dim(x, 0), rows = t * k, all = router_experts(p, n_experts);
    em_tensor *ids = em_cast_(c, file, line, indices, EM_I64);
    ids = em_reshape_(c, file, line, ids, 1, &rows);
    if (all != n_experts) /* this rank's experts first, as 0..E-1, the others after them */
        ids = em_index_select_(c, file, line, rotation(c, file, line, em_tensor_device(x), p, all),
                               0, ids);
    /* argsort is stable, so each expert's rows stay in token order, as in the host counting sort
     * (the same row order gives bit-identical ragged_dot results) */
    em_tensor *perm = em_argsort_(c, file, line, ids, 0, false);
    em_tensor *tok = row_tokens(c, file, line, em_tensor_device(x), t, k);
    /* perm holds each value once, so sorting it inverts it */
    em_tensor *inv = em_argsort_(c, file, line, perm, 0, false);
    int dim = 0;
    /* the other ranks' rows sort past the groups: ragged_dot leaves them zero */
    em_tensor *gs = em_cast_(c, file, line,
                             em_narrow_(c, file, line,
                                        em_sum_(c, file, line, em_one_hot_(c, file, line, ids, all),
                                                &dim, 1, false),
                                        0, 0, n_experts),
                             EM_I32);
    return ragged_ffn(c, file, line, x, em_index_select_(c, file, line, tok, 0, perm), inv, gs,
                      k, weights, w, p);
}

static em_tensor *experts_dense_device(EM_OP_ARGS, em_tensor *x, em_tensor *indices,
                                       em_tensor *weights, const em_moe_weights *w,
                                       const em_moe_params *p, int64_t n_experts) {
    /* [T, k, E] one-hot times the [T, k, 1] weights, summed over k: every (t, e) gets at most
     * one nonzero term, so this equals the host's scattered matrix exactly (a token naming an expert
     * twice gets the sum, as in the ragged path) */
    em_tensor *oh = em_cast_(c, file, line,
                             em_one_hot_(c, file, line, em_cast_(c, file, line, indices, EM_I64),
                                         router_experts(p, n_experts)),
                             em_tensor_dtype(weights));
    int dim = 1;
    em_tensor *wd = em_sum_(c, file, line,
                            em_mul_(c, file, line, oh, em_unsqueeze_(c, file, line, weights, 2)),
                            &dim, 1, false);
    wd = em_narrow_(c, file, line, wd, 1, p->expert_first, n_experts); /* this rank's columns */
    return dense_ffn(c, file, line, x, wd, w, p, n_experts);
}

static em_tensor *experts_device(EM_OP_ARGS, em_tensor *x, em_tensor *indices, int64_t k,
                                 em_tensor *weights, const em_moe_weights *w,
                                 const em_moe_params *p, int64_t n_experts) {
    switch (p->impl) {
    case EM_MOE_LOOP:
        em_fail_at(c, EM_ERR_UNSUPPORTED, "moe_experts", file, line,
                   "device_routing: the loop implementation needs the routing on the host; "
                   "use ragged or dense");
        return NULL;
    case EM_MOE_DENSE:
        return experts_dense_device(c, file, line, x, indices, weights, w, p, n_experts);
    default: return experts_ragged_device(c, file, line, x, indices, k, weights, w, p, n_experts);
    }
}

/* The host routing: indices read back (and checked), counts known. */
static em_tensor *experts_host(EM_OP_ARGS, em_tensor *x, em_tensor *indices, int64_t k,
                               em_tensor *weights, const em_moe_weights *w,
                               const em_moe_params *p, int64_t n_experts, int64_t *hit) {
    int64_t n, t = em_tensor_dim(x, 0);
    *hit = 0;
    int64_t *idx = host_indices(c, file, line, indices, router_experts(p, n_experts), &n);
    if (!idx) return NULL;
    for (int64_t i = 0; i < n; i++) { /* this rank's experts 0..E-1; -1: another rank's */
        idx[i] -= p->expert_first;
        if (idx[i] >= n_experts) idx[i] = -1;
    }
    em_tensor *out;
    switch (p->impl) {
    case EM_MOE_LOOP:
        out = experts_loop(c, file, line, x, idx, t, k, weights, w, p, n_experts, hit);
        break;
    case EM_MOE_DENSE:
        out = experts_dense(c, file, line, x, idx, t, k, weights, w, p, n_experts, hit);
        break;
    default: out = experts_ragged(c, file, line, x, idx, t, k, weights, w, p, n_experts, hit);
    }
    free(idx);
    return out;
}

em_tensor *em_moe_experts_(EM_OP_ARGS, em_tensor *x, em_tensor *indices, em_tensor *weights,
                           const em_moe_weights *w, const em_moe_params *p, em_moe_stats *stats) {
    if (!c || c->err.status) return NULL;
    if (!x || !indices || !weights || !w || !w->gate_up || !w->down || !p) {
        em_fail_at(c, EM_ERR_INVALID_ARG, "moe_experts", file, line, "NULL argument");
        return NULL;
    }
    char s1[96], s2[96], s3[96];
    int64_t t = em_tensor_dim(x, 0), k = em_tensor_dim(indices, -1);
    int64_t n_experts = wdim(w->gate_up, 0);
    if (em_tensor_ndim(x) != 2 || em_tensor_ndim(indices) != 2 || em_tensor_dim(indices, 0) != t ||
        n_experts < 0 || wdim(w->down, 0) < 0 || wdim(w->gate_up, 1) != 2 * wdim(w->down, 2) ||
        wdim(w->gate_up, 2) != em_tensor_dim(x, 1) || wdim(w->down, 1) != em_tensor_dim(x, 1) ||
        wdim(w->down, 0) != n_experts) {
        em_fail_at(c, EM_ERR_SHAPE, "moe_experts", file, line,
                   "x %s, gate_up %s and down %s do not form an MoE block (need x [T, H], "
                   "gate_up [E, 2I, H], down [E, H, I], or their ragged_pack forms)",
                   em_tensor_sig(x, s1, sizeof s1), em_tensor_sig(w->gate_up, s2, sizeof s2),
                   em_tensor_sig(w->down, s3, sizeof s3));
        return NULL;
    }
    if (p->expert_first < 0 || p->n_experts < 0 ||
        p->expert_first + n_experts > router_experts(p, n_experts)) {
        em_fail_at(c, EM_ERR_INVALID_ARG, "moe_experts", file, line,
                   "the weights' %lld experts from expert_first %lld do not fit the router's "
                   "n_experts %lld", (long long)n_experts, (long long)p->expert_first,
                   (long long)router_experts(p, n_experts));
        return NULL;
    }
    int64_t hit = -1; /* stays -1 with device routing: unknown without a host read */
    em_tensor *out;
    /* indices on a compile-only device (tpu-aot:...) have no values to read, nor have traced
     * ones (a compiled training step's forward): route there */
    if (p->device_routing || indices->sym || em_device_is_compile_only(em_tensor_device(indices)))
        out = experts_device(c, file, line, x, indices, k, weights, w, p, n_experts);
    else
        out = experts_host(c, file, line, x, indices, k, weights, w, p, n_experts, &hit);
    if (stats) {
        stats->experts_hit = hit;
        stats->rows = t * k;
    }
    return out;
}

/* Context parallelism's attention for the diffusion transformers (tp_impl.h): the all-gather
 * schedule (every rank's keys and values gathered, one em_sdpa), the ring (each rank keeps its
 * block; n steps of attention against the block at hand, merged by log-sum-exp as flash
 * attention does, then the blocks shifted one rank along the ring with em_ring_shift) and
 * Ulysses (em_all_to_all from a token split to a head split, one em_sdpa over every token of
 * the rank's heads, and back). */
#include <math.h>

#include "diffusion/tp_impl.h"

/* The running state of the ring: unnormalised output o [N, H, Sq, hd], the rows' maximum
 * logit m and their sum of exponentials l [N, H, Sq, 1], the key and value block at hand. Each
 * is a reference of its own (detached), so one step's temporaries go with its scope. */
typedef struct ring_state {
    em_tensor *o, *m, *l, *k, *v;
} ring_state;

static void state_release(ring_state *s) {
    em_tensor *t[5] = {s->o, s->m, s->l, s->k, s->v};
    for (int i = 0; i < 5; i++) em_tensor_release(t[i]);
    *s = (ring_state){0};
}

/* s merged with the attention of q against (k, v): logits in f32, scaled */
static void merge_block(em_ctx *c, ring_state *s, em_tensor *q, em_tensor *k, em_tensor *v,
                        double scale) {
    int last = 3;
    em_tensor *z = em_mul_scalar(c, em_matmul(c, q, em_transpose(c, k, 2, 3)), scale);
    em_tensor *mb = em_max(c, z, &last, 1, true);
    em_tensor *p = em_exp(c, em_sub(c, z, mb));
    em_tensor *lb = em_sum(c, p, &last, 1, true), *ob = em_matmul(c, p, v);
    if (!s->o) {
        s->o = ob, s->m = mb, s->l = lb;
        return;
    }
    em_tensor *mn = em_maximum(c, s->m, mb);
    em_tensor *a = em_exp(c, em_sub(c, s->m, mn)), *b = em_exp(c, em_sub(c, mb, mn));
    s->o = em_add(c, em_mul(c, s->o, a), em_mul(c, ob, b));
    s->l = em_add(c, em_mul(c, s->l, a), em_mul(c, lb, b));
    s->m = mn;
}

/* One step in a scope of its own: *s advanced by f (which sees the old state), the new state
 * detached and the old released. False with the error. */
static bool step(em_ctx *c, ring_state *s, const diff_cp *cp, em_tensor *q, em_tensor *kf,
                 em_tensor *vf, double scale, int i) {
    em_scope_push(c);
    ring_state n = *s;
    if (i == 0 && kf) merge_block(c, &n, q, kf, vf, scale); /* the fixed (text) keys, once */
    merge_block(c, &n, q, n.k, n.v, scale);
    if (i + 1 < cp->size) { /* the next block: rank r - 1's, r - 2's, ... */
        n.k = em_ring_shift(c, n.k, 1, cp->g);
        n.v = em_ring_shift(c, n.v, 1, cp->g);
    }
    bool ok = em_ctx_status(c) == EM_OK;
    em_tensor **nt[5] = {&n.o, &n.m, &n.l, &n.k, &n.v};
    for (int j = 0; j < 5; j++) {
        if (ok) em_tensor_retain(*nt[j]); /* the new state outlives the scope */
        else *nt[j] = NULL;
    }
    em_scope_pop(c);
    state_release(s);
    *s = n;
    return ok;
}

static em_tensor *ring(em_ctx *c, const diff_cp *cp, em_tensor *q, em_tensor *k, em_tensor *v,
                       em_tensor *kf, em_tensor *vf) {
    em_dtype dt = em_tensor_dtype(q);
    double scale = 1.0 / sqrt((double)em_tensor_dim(q, 3));
    if (dt != EM_F32) { /* logits, exponentials and sums in f32, one rounding at the end */
        q = em_cast(c, q, EM_F32), k = em_cast(c, k, EM_F32), v = em_cast(c, v, EM_F32);
        if (kf) kf = em_cast(c, kf, EM_F32), vf = em_cast(c, vf, EM_F32);
    }
    if (em_ctx_status(c)) return NULL;
    ring_state s = {0};
    em_tensor_retain(s.k = k);
    em_tensor_retain(s.v = v);
    for (int i = 0; i < cp->size; i++)
        if (!step(c, &s, cp, q, kf, vf, scale, i)) {
            state_release(&s);
            return NULL;
        }
    em_tensor *o = em_div(c, s.o, s.l);
    state_release(&s);
    return dt != EM_F32 ? em_cast(c, o, dt) : o;
}

/* [fixed; x] or [x; fixed] along the tokens (x alone without fixed tokens) */
static em_tensor *with_fixed(em_ctx *c, em_tensor *x, em_tensor *f, bool fixed_first) {
    if (!f) return x;
    em_tensor *p[2] = {fixed_first ? f : x, fixed_first ? x : f};
    return em_cat(c, p, 2, 2);
}

static em_tensor *ulysses(em_ctx *c, const diff_cp *cp, em_tensor *q, em_tensor *k,
                          em_tensor *v, em_tensor *kf, em_tensor *vf, bool fixed_first) {
    int64_t H = em_tensor_dim(q, 1);
    if (H % cp->size) {
        em_ctx_fail(c, EM_ERR_SHAPE, "context_parallel", "context parallelism (Ulysses): %lld "
                    "attention heads do not divide over %d ranks; use the ring or the "
                    "all-gather schedule", (long long)H, cp->size);
        return NULL;
    }
    int64_t L = kf ? em_tensor_dim(kf, 2) : 0, Ti = em_tensor_dim(q, 2) - L;
    int64_t T = em_tensor_dim(k, 2) * cp->size, img = fixed_first ? L : 0;
    /* the image tokens' heads: [N, H, T/R, hd] -> the rank's heads of every token [N, h, T, hd] */
    em_tensor *qi = em_all_to_all(c, em_contiguous(c, em_narrow(c, q, 2, img, Ti)), 1, 2, cp->g);
    em_tensor *ki = em_all_to_all(c, em_contiguous(c, k), 1, 2, cp->g);
    em_tensor *vi = em_all_to_all(c, em_contiguous(c, v), 1, 2, cp->g);
    /* the fixed tokens: whole and alike on every rank, so the rank's heads are its share */
    em_tensor *qf = L ? diff_cp_share(c, cp, em_narrow(c, q, 2, fixed_first ? 0 : Ti, L), 1,
                                      "context_parallel", "attention heads") : NULL;
    em_tensor *kh = L ? diff_cp_share(c, cp, kf, 1, "context_parallel", "attention heads") : NULL;
    em_tensor *vh = L ? diff_cp_share(c, cp, vf, 1, "context_parallel", "attention heads") : NULL;
    em_sdpa_params sp = em_sdpa_default_params();
    em_tensor *o = em_sdpa(c, with_fixed(c, qi, qf, fixed_first),
                           with_fixed(c, ki, kh, fixed_first), with_fixed(c, vi, vh, fixed_first),
                           NULL, &sp); /* [N, h, T + L, hd] */
    if (!o) return NULL;
    /* back: the image tokens' rows to their ranks with every head; the fixed rows' heads from
     * every rank */
    em_tensor *oi = em_all_to_all(c, em_contiguous(c, em_narrow(c, o, 2, img, T)), 2, 1, cp->g);
    em_tensor *of = L ? em_all_gather(c, em_contiguous(c, em_narrow(c, o, 2, fixed_first ? 0 : T,
                                                                      L)), 1, cp->g)
                      : NULL;
    return with_fixed(c, oi, of, fixed_first);
}

em_tensor *diff_cp_attention(em_ctx *c, const diff_cp *cp, em_tensor *q, em_tensor *k,
                             em_tensor *v, em_tensor *kf, em_tensor *vf, bool fixed_first) {
    if (!q || !k || !v || (kf && !vf)) return NULL;
    if (cp->g && cp->schedule == EM_CP_RING) return ring(c, cp, q, k, v, kf, vf);
    if (cp->g && cp->schedule == EM_CP_ULYSSES) return ulysses(c, cp, q, k, v, kf, vf, fixed_first);
    em_tensor *kk = with_fixed(c, diff_cp_gather(c, cp, k, 2), kf, fixed_first);
    em_tensor *vv = with_fixed(c, diff_cp_gather(c, cp, v, 2), vf, fixed_first);
    em_sdpa_params sp = em_sdpa_default_params();
    return em_sdpa(c, q, kk, vv, NULL, &sp);
}

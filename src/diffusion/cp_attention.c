/* Context parallelism's attention for the diffusion transformers (tp_impl.h): the all-gather
 * schedule (every rank's keys and values gathered, one em_sdpa), the ring (each rank keeps its
 * block; n steps of one em_sdpa_lse against the block at hand, merged by the rows' log-sum-exp
 * as diffusers' TemplatedRingAttention does, then the blocks shifted one rank along the ring
 * with em_ring_shift in their own dtype), Ulysses (em_all_to_all from a token split to a
 * head split, one em_sdpa over every token of the rank's heads, and back), and both at once
 * (ring_degree x ulysses_degree: Ulysses inside groups of consecutive ranks, the ring across
 * them on the rank's heads). */
#include "diffusion/tp_impl.h"

/* [fixed; x] or [x; fixed] along the tokens (x alone without fixed tokens) */
static em_tensor *with_fixed(em_ctx *c, em_tensor *x, em_tensor *f, bool fixed_first) {
    if (!f) return x;
    em_tensor *p[2] = {fixed_first ? f : x, fixed_first ? x : f};
    return em_cat(c, p, 2, 2);
}

/* The running state of the ring: the output so far o [N, H, Sq, hd] (f32, normalised) and its
 * rows' log-sum-exp lse [N, H, Sq, 1] (f32), the key and value block at hand (in the inputs'
 * dtype: a bf16 block travels as bf16). Each is a reference of its own (detached), so one
 * step's temporaries go with its scope. */
typedef struct ring_state {
    em_tensor *o, *lse, *k, *v;
} ring_state;

static void state_release(ring_state *s) {
    em_tensor *t[4] = {s->o, s->lse, s->k, s->v};
    for (int i = 0; i < 4; i++) em_tensor_release(t[i]);
    *s = (ring_state){0};
}

/* s merged with the attention of q against (k, v): one fused call (em_sdpa_lse, f32 output
 * and log-sum-exp), then o = o * exp(lse - lse') + o_b * exp(lse_b - lse') with
 * lse' = logaddexp(lse, lse_b), in f32. Every row sees keys in every block (no mask here), so
 * each lse is finite. */
static void merge_block(em_ctx *c, ring_state *s, em_tensor *q, em_tensor *k, em_tensor *v) {
    em_sdpa_params sp = em_sdpa_default_params();
    em_tensor *lb = NULL;
    em_tensor *ob = em_sdpa_lse(c, q, k, v, NULL, &sp, EM_F32, &lb);
    lb = em_unsqueeze(c, lb, 3);
    if (!s->o) {
        s->o = ob, s->lse = lb;
        return;
    }
    em_tensor *mx = em_maximum(c, s->lse, lb);
    em_tensor *ea = em_exp(c, em_sub(c, s->lse, mx)), *eb = em_exp(c, em_sub(c, lb, mx));
    em_tensor *sum = em_add(c, ea, eb); /* lse' = mx + log(sum) */
    s->o = em_add(c, em_mul(c, s->o, em_div(c, ea, sum)), em_mul(c, ob, em_div(c, eb, sum)));
    s->lse = em_add(c, mx, em_log(c, sum));
}

/* One step in a scope of its own: *s advanced (the fixed (text) keys joined to the rank's own
 * block on the first), the new state detached and the old released. False with the error. */
static bool step(em_ctx *c, ring_state *s, em_dist *g, int size, em_tensor *q, em_tensor *kf,
                 em_tensor *vf, int i) {
    em_scope_push(c);
    ring_state n = *s;
    if (i == 0 && kf)
        merge_block(c, &n, q, with_fixed(c, n.k, kf, true), with_fixed(c, n.v, vf, true));
    else
        merge_block(c, &n, q, n.k, n.v);
    if (i + 1 < size) { /* the next block: rank r - 1's, r - 2's, ... */
        n.k = em_ring_shift(c, n.k, 1, g);
        n.v = em_ring_shift(c, n.v, 1, g);
    }
    bool ok = em_ctx_status(c) == EM_OK;
    em_tensor **nt[4] = {&n.o, &n.lse, &n.k, &n.v};
    for (int j = 0; j < 4; j++) {
        if (ok) em_tensor_retain(*nt[j]); /* the new state outlives the scope */
        else *nt[j] = NULL;
    }
    em_scope_pop(c);
    state_release(s);
    *s = n;
    return ok;
}

/* The ring over group g of `size` ranks: q against every rank's (k, v) and the fixed keys. */
static em_tensor *ring(em_ctx *c, em_dist *g, int size, em_tensor *q, em_tensor *k, em_tensor *v,
                       em_tensor *kf, em_tensor *vf) {
    ring_state s = {0};
    em_tensor_retain(s.k = k);
    em_tensor_retain(s.v = v);
    for (int i = 0; i < size; i++)
        if (!step(c, &s, g, size, q, kf, vf, i)) {
            state_release(&s);
            return NULL;
        }
    em_tensor *o = em_adopt(c, s.o); /* the state's reference, now the caller's scope's */
    s.o = NULL;
    state_release(&s);
    em_dtype dt = em_tensor_dtype(q);
    return dt != EM_F32 ? em_cast(c, o, dt) : o; /* one rounding, at the end */
}

/* Ulysses' all-to-all over g: the image tokens' rows of q (Ti rows from img) and k, v, each
 * [N, H, T/n, hd], become the rank's H/n heads of all g's tokens [N, H/n, T, hd] */
static void to_heads(em_ctx *c, em_dist *g, em_tensor *q, em_tensor *k, em_tensor *v,
                     int64_t img, int64_t Ti, em_tensor **qi, em_tensor **ki, em_tensor **vi) {
    *qi = em_all_to_all(c, em_contiguous(c, em_narrow(c, q, 2, img, Ti)), 1, 2, g);
    *ki = em_all_to_all(c, em_contiguous(c, k), 1, 2, g);
    *vi = em_all_to_all(c, em_contiguous(c, v), 1, 2, g);
}

/* ... and back: o's T image rows (from img) to their ranks with every head, the L fixed rows'
 * heads gathered from every rank of g, joined as q's rows were */
static em_tensor *to_tokens(em_ctx *c, em_dist *g, em_tensor *o, int64_t img, int64_t T,
                            int64_t L, bool fixed_first) {
    em_tensor *oi = em_all_to_all(c, em_contiguous(c, em_narrow(c, o, 2, img, T)), 2, 1, g);
    em_tensor *of = L ? em_all_gather(c, em_contiguous(c, em_narrow(c, o, 2, fixed_first ? 0 : T,
                                                                      L)), 1, g)
                      : NULL;
    return with_fixed(c, oi, of, fixed_first);
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
    em_tensor *qi, *ki, *vi;
    to_heads(c, cp->g, q, k, v, img, Ti, &qi, &ki, &vi);
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
    return to_tokens(c, cp->g, o, img, T, L, fixed_first);
}

/* x's heads [u*H/U, +H/U) of the Ulysses group u (of U ranks), x whole and alike on every rank:
 * a narrow over a process group, a max-reduce-scatter of the identical copies on a device
 * group (the rank may not be a constant of a program every rank traces). */
static em_tensor *uly_heads(em_ctx *c, const diff_cp *cp, em_tensor *x) {
    if (em_dist_device(cp->uly))
        return em_reduce_scatter(c, em_contiguous(c, x), EM_REDUCE_MAX, 1, cp->uly);
    int64_t h = em_tensor_dim(x, 1) / cp->uly_deg;
    return em_contiguous(c, em_narrow(c, x, 1, em_dist_rank(cp->uly) * h, h));
}

/* diffusers' unified attention (ring_degree R x ulysses_degree U, _templated_unified_attention):
 * an all-to-all over the Ulysses group trades its U token blocks for a head split (the rank's
 * H/U heads of the ring block's tokens), the ring over the ring group on those heads, and an
 * all-to-all back; the fixed tokens' rows go with the rank's heads and their output heads are
 * gathered over the Ulysses group. */
static em_tensor *unified(em_ctx *c, const diff_cp *cp, em_tensor *q, em_tensor *k,
                          em_tensor *v, em_tensor *kf, em_tensor *vf, bool fixed_first) {
    int64_t H = em_tensor_dim(q, 1);
    if (H % cp->uly_deg) {
        em_ctx_fail(c, EM_ERR_SHAPE, "context_parallel", "context parallelism (ring %d x "
                    "Ulysses %d): %lld attention heads do not divide by the Ulysses degree %d",
                    cp->ring_deg, cp->uly_deg, (long long)H, cp->uly_deg);
        return NULL;
    }
    int64_t L = kf ? em_tensor_dim(kf, 2) : 0, Ti = em_tensor_dim(q, 2) - L;
    int64_t T = em_tensor_dim(k, 2) * cp->uly_deg, img = fixed_first ? L : 0;
    /* [N, H, T/(RU), hd] -> the rank's heads of its ring block's tokens [N, H/U, T/R, hd] */
    em_tensor *qi, *ki, *vi;
    to_heads(c, cp->uly, q, k, v, img, Ti, &qi, &ki, &vi);
    em_tensor *qf = L ? uly_heads(c, cp, em_narrow(c, q, 2, fixed_first ? 0 : Ti, L)) : NULL;
    em_tensor *kh = L ? uly_heads(c, cp, kf) : NULL, *vh = L ? uly_heads(c, cp, vf) : NULL;
    if (!qi || !ki || !vi || (L && (!qf || !kh || !vh))) return NULL;
    em_tensor *o = ring(c, cp->ring, cp->ring_deg, with_fixed(c, qi, qf, fixed_first), ki, vi,
                        kh, vh); /* [N, H/U, T/R + L, hd] */
    if (!o) return NULL;
    return to_tokens(c, cp->uly, o, img, T, L, fixed_first);
}

em_tensor *diff_cp_attention(em_ctx *c, const diff_cp *cp, em_tensor *q, em_tensor *k,
                             em_tensor *v, em_tensor *kf, em_tensor *vf, bool fixed_first) {
    if (!q || !k || !v || (kf && !vf)) return NULL;
    if (cp->g && cp->ring && cp->uly) return unified(c, cp, q, k, v, kf, vf, fixed_first);
    em_cp_schedule sched = diff_cp_schedule(cp);
    if (cp->g && sched == EM_CP_RING) return ring(c, cp->g, cp->size, q, k, v, kf, vf);
    if (cp->g && sched == EM_CP_ULYSSES) return ulysses(c, cp, q, k, v, kf, vf, fixed_first);
    em_tensor *kk = with_fixed(c, diff_cp_gather(c, cp, k, 2), kf, fixed_first);
    em_tensor *vv = with_fixed(c, diff_cp_gather(c, cp, v, 2), vf, fixed_first);
    em_sdpa_params sp = em_sdpa_default_params();
    return em_sdpa(c, q, kk, vv, NULL, &sp);
}

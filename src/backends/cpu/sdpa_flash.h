/*
 * Scaled dot-product attention on the CPU, shared by the built-in kernel (nn_attention.c) and the
 * attention kernel packages (kernels/sdpa/): one source, so a package gives the built-in's bits.
 * q[B, Hq, Tq, D], k[B, Hkv, Tk, D], v[B, Hkv, Tk, Dv] come as plain views (no em_tensor), and the
 * dtype conversions, micro-kernels (nn_kern.inc), thread pool and thread count as the caller's
 * (sdpa_env), so nothing here links against libember. Every function is static: the includer
 * compiles it with the built-in's flags (ISO C: no contraction of the f32 sums into FMAs).
 *
 * Semantics (what Hugging Face's eager_attention_forward computes, in f32):
 *   logits = (q . k) * scale; softcap: cap * tanh(logits / cap) (Gemma, before the mask);
 *   causal: query i sees keys j <= i + (Tk - Tq) (the KV-cache offset); window W: and keys
 *   j > i + (Tk - Tq) - W (masking_utils.sliding_window_overlay); mask: bool (false hides a key)
 *   or floating (added); softmax in f32; out = p . v, rounded once to the output's dtype (q's,
 *   or f32 for sdpa_lse); with an lse buffer also each row's log-sum-exp m + log(l) of its
 *   online-softmax state (sdpa_lse: torch's flash attention's logsumexp), which changes none
 *   of the output's bits.
 *   A row with no visible key gives zeros, as torch's scaled_dot_product_attention does (HF's
 *   eager path with a finite "min" float mask gives the mean of v; a float mask of that kind is
 *   added like any other and so reproduces it).
 *
 * Work is flash-attention style: an item is (batch, kv head, a block of the query heads that
 * share it, a block of queries, a range of keys). Its rows (heads x queries) are one small
 * matrix, so each K/V tile is read once for all the query heads of a group (GQA) and the memory
 * stays O(rows x tile), never O(Tq x Tk). Keys are visited in tiles with an online softmax.
 * Items with few rows (decode) compute logits as dot products; larger ones as a register-tiled
 * product with q transposed. When there are fewer items than threads (decode: B x Hkv), the key
 * range is split and the partial softmax states combined in a second pass (flash-decoding), so
 * a long KV cache is streamed once, by every core.
 *
 * bf16 q, k and v on a CPU with the bf16 pair dot product (nn->qk_dp, AVX-512 BF16) take a
 * faster route in the tiled items: logits from the bf16 values themselves (exact products, f32
 * sums) scaled in f32 afterwards, the same f32 online softmax, and P rounded to bf16 for its
 * product with V, as torch's CPU flash attention does for reduced dtypes. Softcap, masks,
 * causal and window apply to the f32 logits as on the other route. V is packed in key pairs
 * once per head (by the head's first item; plan->vpk) when several items read it, else per
 * tile; the words are the same, so which item packs never changes a bit.
 */
#ifndef EMBER_CPU_SDPA_FLASH_H
#define EMBER_CPU_SDPA_FLASH_H

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/ew_math.h"
#include "backends/cpu/nn.h"
#include "backends/cpu/sdpa_args.h"

#define ROWS_MAX 64      /* rows of an item (heads x queries) */
#define GEMM_MIN_ROWS 8  /* below this the logits are dot products */
#define KEY_TILE 64      /* keys per tile */
#define SPLIT_MIN 512    /* keys per split, at least */

typedef struct sdpa_plan {
    const sdpa_env *env;
    const em_nn_isa *nn;
    const sdpa_view *q, *k, *v, *mask;
    void *out;
    int out_dtype;
    float *lse; /* [B, Hq, Tq] or NULL */
    int64_t nb, hq, hkv, g, tq, tk, d, dv, off;
    float scale, softcap;
    bool causal;
    int64_t window;
    int64_t ms[4]; /* mask strides over [B, Hq, Tq, Tk] (0 where it broadcasts) */
    /* decomposition */
    int64_t gh, nhs, bq, nqb, nsplit, split_len, n_base;
    /* K and V are read in place (f32 or bf16 rows with unit inner stride, `ld` elements apart)
     * or converted tile by tile into f32 scratch */
    bool k_direct, v_direct;
    int k_src, v_src;
    bool dp;      /* the tiled items use the bf16 pair dot product (see above) */
    int64_t dvp;  /* dv rounded up to 8: the accumulator rows of that route */
    /* that route's V packed once per (batch, kv head) when several items read it (NULL: each
     * item packs its tiles): ((tk + 1) / 2) x dvp words a head, vpk_stride apart, packed by
     * the first item of the head to claim it (vpk_state: 0 not yet, 1 being packed, 2 ready);
     * an item that finds it being packed packs its own tiles, the same words */
    uint32_t *vpk;
    atomic_int *vpk_state;
    int64_t vpk_stride;
    float *part;             /* nsplit > 1: per item, rows x (dv + 2) partial states */
    int64_t part_stride;
    atomic_bool oom;
} sdpa_plan;

typedef struct item_geo {
    int64_t b, hkv, h0, nh, i0, nq, rows, split;
} item_geo;

static void item_decode(const sdpa_plan *p, int64_t it, item_geo *g) {
    g->split = it % p->nsplit;
    it /= p->nsplit;
    int64_t qb = it % p->nqb;
    it /= p->nqb;
    int64_t hs = it % p->nhs;
    it /= p->nhs;
    g->hkv = it % p->hkv;
    g->b = it / p->hkv;
    g->h0 = g->hkv * p->g + hs * p->gh;
    g->nh = p->g - hs * p->gh < p->gh ? p->g - hs * p->gh : p->gh;
    g->i0 = qb * p->bq;
    g->nq = p->tq - g->i0 < p->bq ? p->tq - g->i0 : p->bq;
    g->rows = g->nh * g->nq;
}

/* Per-thread scratch, sized for the largest item. */
typedef struct scratch {
    float *q, *qt, *k, *v, *st, *acc, *m, *l, *alpha, *tmp, *mrow, *rmax;
    uint32_t *qp, *vp, *pw; /* the pair-dot route's packed q, V tile and P (p->dp) */
    int ldq;
} scratch;

static float *scratch_alloc(const sdpa_plan *p, scratch *s) {
    int64_t rows = p->gh * p->bq, ldq = (rows + 15) / 16 * 16, d = p->d, dv = p->dv;
    int64_t dva = p->dp ? p->dvp : dv;
    int64_t qpn = p->dp ? ldq * ((d + 1) / 2) : 0, vpn = p->dp ? KEY_TILE / 2 * dva : 0;
    int64_t pwn = p->dp ? KEY_TILE / 2 * ldq : 0;
    int64_t n = rows * d + ldq * d + KEY_TILE * d + KEY_TILE * dv + KEY_TILE * ldq + rows * dva +
                4 * rows + KEY_TILE + ldq + qpn + vpn + pwn + 16 * 15;
    float *base = malloc((size_t)n * sizeof *base);
    if (!base) return NULL;
    float *c = base;
#define TAKE(field, cnt)                                                                           \
    do {                                                                                           \
        s->field = c;                                                                              \
        c += ((cnt) + 15) / 16 * 16;                                                               \
    } while (0)
    TAKE(q, rows * d);
    TAKE(qt, ldq * d);
    TAKE(k, KEY_TILE * d);
    TAKE(v, KEY_TILE * dv);
    TAKE(st, KEY_TILE * ldq);
    TAKE(acc, rows * dva);
    TAKE(m, rows);
    TAKE(l, rows);
    TAKE(alpha, rows);
    TAKE(tmp, rows);
    TAKE(mrow, KEY_TILE);
    TAKE(rmax, ldq);
    /* words, in memory only ever accessed as words */
    s->qp = (uint32_t *)c;
    c += (qpn + 15) / 16 * 16;
    s->vp = (uint32_t *)c;
    c += (vpn + 15) / 16 * 16;
    s->pw = (uint32_t *)c;
#undef TAKE
    s->ldq = (int)ldq;
    return base;
}

/* The `n` rows of keys j0.. of head (b, h) of t: in place when direct (rows t->strides[2]
 * apart), else converted into buf as f32 rows of `w` values. */
static const void *load_tile(const sdpa_plan *p, const sdpa_view *t, bool direct, int64_t b,
                             int64_t h, int64_t j0, int n, int64_t w, float *buf) {
    int64_t off = b * t->strides[0] + h * t->strides[1];
    if (direct) return sdpa_at(t->data, t->dtype, off + j0 * t->strides[2]);
    for (int jj = 0; jj < n; jj++)
        p->env->load[t->dtype](buf + jj * w,
                               sdpa_at(t->data, t->dtype, off + (j0 + jj) * t->strides[2]),
                               t->strides[3], w);
    return buf;
}

/* Asks for the rows of the next tile while the current one is computed: a decode step is a
 * stream through the KV cache, and the hardware prefetcher alone leaves it latency-bound. */
static void prefetch_tile(const sdpa_view *t, int64_t b, int64_t h, int64_t j0, int n, int64_t w) {
    if (t->strides[3] != 1) return;
    size_t es = sdpa_esize(t->dtype), row = (size_t)w * es;
    const char *base = (const char *)t->data + (size_t)(b * t->strides[0] + h * t->strides[1]) * es;
    for (int jj = 0; jj < n; jj++) {
        const char *r = base + (size_t)((j0 + jj) * t->strides[2]) * es;
        for (size_t o = 0; o < row; o += 64) __builtin_prefetch(r + o, 0, 3);
    }
}

/* Adds the mask tensor's values for rows x keys [j0, j0 + n) to the logits ((j, r) at
 * st[j * sj + r * sr]). */
static void apply_mask(const sdpa_plan *p, const item_geo *g, float *st, int64_t sj, int64_t sr,
                       int64_t j0, int n, float *mrow) {
    const sdpa_view *mk = p->mask;
    for (int64_t r = 0; r < g->rows; r++) {
        int64_t h = g->h0 + r / g->nq, i = g->i0 + r % g->nq;
        int64_t off = g->b * p->ms[0] + h * p->ms[1] + i * p->ms[2] + j0 * p->ms[3];
        if (mk->dtype == EM_BOOL) {
            const uint8_t *mb = (const uint8_t *)mk->data + off;
            for (int j = 0; j < n; j++)
                if (!mb[j * p->ms[3]]) st[j * sj + r * sr] = -INFINITY;
        } else {
            p->env->load[mk->dtype](mrow, sdpa_at(mk->data, mk->dtype, off), p->ms[3], n);
            for (int j = 0; j < n; j++) st[j * sj + r * sr] += mrow[j];
        }
    }
}

/* A row's log-sum-exp from its online-softmax state (maximum m, sum of exp(x - m) l). */
static float row_lse(float m, float l) { return l > 0 ? m + logf(l) : -INFINITY; }

/* The item's q rows packed in pairs of elements for qk_dp: s->qp[x2 * ldq + r] holds q[r, 2 x2]
 * in its low half and q[r, 2 x2 + 1] (zero past d) in its high half; padding rows zero. */
static void pack_q_pairs(const sdpa_plan *p, const item_geo *g, scratch *s) {
    const sdpa_view *q = p->q;
    int64_t d = p->d, d2 = (d + 1) / 2, ld = s->ldq, xs = q->strides[3];
    for (int64_t r = 0; r < g->rows; r++) {
        int64_t h = g->h0 + r / g->nq, i = g->i0 + r % g->nq;
        const uint16_t *qr = sdpa_at(q->data, q->dtype,
                                     g->b * q->strides[0] + h * q->strides[1] + i * q->strides[2]);
        for (int64_t x = 0; x < d2; x++) {
            uint32_t hi = 2 * x + 1 < d ? qr[(2 * x + 1) * xs] : 0;
            s->qp[x * ld + r] = qr[2 * x * xs] | hi << 16;
        }
    }
    for (int64_t x = 0; x < d2; x++)
        for (int64_t r = g->rows; r < ld; r++) s->qp[x * ld + r] = 0;
}

static void run_item(const sdpa_plan *p, int64_t it, scratch *s) {
    item_geo g;
    item_decode(p, it, &g);
    int rows = (int)g.rows, d = (int)p->d, dv = (int)p->dv;
    bool gemm = rows >= GEMM_MIN_ROWS;
    bool dp = gemm && p->dp;       /* the pair-dot route */
    int adv = dp ? (int)p->dvp : dv; /* accumulator row stride */
    /* logit (j, r) at st[j * sj + r * sr]: rows contiguous for the tiled product, keys
     * contiguous for the dot products */
    int64_t sj = gemm ? s->ldq : 1, sr = gemm ? 1 : KEY_TILE;
    int ld = s->ldq;
    const em_nn_isa *nn = p->nn;
    /* keys any row of the item may see, within this split */
    int64_t first = g.i0 + p->off, last = g.i0 + g.nq - 1 + p->off; /* query positions */
    int64_t jlo = p->window ? first - p->window + 1 : 0;
    int64_t jhi = p->causal ? last + 1 : p->tk;
    int64_t s0 = g.split * p->split_len, s1 = s0 + p->split_len;
    if (jlo < s0) jlo = s0;
    if (jhi > s1) jhi = s1;
    if (jlo < 0) jlo = 0;
    if (jhi > p->tk) jhi = p->tk;
    /* keys every row sees: tiles inside need no per-element visibility test */
    int64_t all_lo = p->window ? last - p->window + 1 : 0, all_hi = p->causal ? first : p->tk - 1;

    for (int r = 0; r < rows; r++) {
        s->m[r] = -INFINITY;
        s->l[r] = 0;
    }
    memset(s->acc, 0, (size_t)rows * (size_t)adv * sizeof *s->acc);
    const uint32_t *vhead = NULL; /* the head's packed V, once ready */
    if (jlo < jhi && dp && p->vpk) {
        int64_t bh = g.b * p->hkv + g.hkv;
        int st = atomic_load_explicit(&p->vpk_state[bh], memory_order_acquire), zero = 0;
        if (st == 0 && atomic_compare_exchange_strong(&p->vpk_state[bh], &zero, 1)) {
            nn->pack_v((int)p->tk, dv, adv,
                       load_tile(p, p->v, true, g.b, g.hkv, 0, (int)p->tk, dv, NULL),
                       p->v->strides[2], p->vpk + bh * p->vpk_stride);
            atomic_store_explicit(&p->vpk_state[bh], 2, memory_order_release);
            st = 2;
        }
        if (st == 2) vhead = p->vpk + bh * p->vpk_stride;
    }
    if (jlo < jhi && dp) {
        pack_q_pairs(p, &g, s);
    } else if (jlo < jhi) {
        const sdpa_view *q = p->q;
        for (int r = 0; r < rows; r++) {
            int64_t h = g.h0 + r / g.nq, i = g.i0 + r % g.nq;
            int64_t off = g.b * q->strides[0] + h * q->strides[1] + i * q->strides[2];
            float *qr = s->q + (int64_t)r * d;
            p->env->load[q->dtype](qr, sdpa_at(q->data, q->dtype, off), q->strides[3], d);
            nn->scale(qr, d, p->scale);
            if (!gemm && nn->perm_in[p->k_src]) nn->perm_in[p->k_src](qr, d);
        }
        if (gemm) {
            for (int x = 0; x < d; x++) {
                float *col = s->qt + (int64_t)x * ld;
                for (int r = 0; r < rows; r++) col[r] = s->q[(int64_t)r * d + x];
                for (int r = rows; r < ld; r++) col[r] = 0;
            }
        }
    }
    for (int64_t j0 = jlo; j0 < jhi; j0 += KEY_TILE) {
        int n = (int)(jhi - j0 < KEY_TILE ? jhi - j0 : KEY_TILE);
        if (j0 + n < jhi) {
            int next = (int)(jhi - j0 - n < KEY_TILE ? jhi - j0 - n : KEY_TILE);
            prefetch_tile(p->k, g.b, g.hkv, j0 + n, next, d);
            prefetch_tile(p->v, g.b, g.hkv, j0 + n, next, dv);
        }
        /* the f32 tiled product reads each key value once per 16 rows as a broadcast scalar, so
         * it wants f32 keys: a bf16 tile is converted once (vectorised) rather than per use;
         * the pair dot product reads bf16 keys in place */
        bool kdirect = p->k_direct && (!gemm || dp || p->k_src == NN_SRC_F32);
        const void *kt = load_tile(p, p->k, kdirect, g.b, g.hkv, j0, n, d, s->k);
        int64_t kld = kdirect ? p->k->strides[2] : d;
        if (dp)
            nn->qk_dp(ld, d, s->qp, n, kt, kld, p->scale, s->st, s->rmax);
        else if (gemm)
            nn->qk_gemm(ld, d, s->qt, n, kt, kld, s->st);
        else
            nn->qk_dot[kdirect ? p->k_src : NN_SRC_F32](rows, d, s->q, n, kt, kld, s->st, KEY_TILE);
        /* qk_dp's row maxima hold while nothing below changes the logits */
        bool rmax_ok = p->softcap <= 0 && !p->mask;
        if (p->softcap > 0) {
            if (gemm)
                nn->softcap(s->st, (int64_t)n * ld, p->softcap);
            else
                for (int r = 0; r < rows; r++) nn->softcap(s->st + r * sr, n, p->softcap);
        }
        if (p->mask) apply_mask(p, &g, s->st, sj, sr, j0, n, s->mrow);
        if (j0 < all_lo || j0 + n - 1 > all_hi) {
            rmax_ok = false;
            for (int r = 0; r < rows; r++) {
                int64_t pos = g.i0 + r % g.nq + p->off;
                int64_t lo = p->window ? pos - p->window + 1 : 0, hi = p->causal ? pos : p->tk - 1;
                for (int j = 0; j < n; j++)
                    if (j0 + j < lo || j0 + j > hi) s->st[j * sj + r * sr] = -INFINITY;
            }
        }
        if (dp) {
            nn->softmax_dp(rows, n, s->st, ld, rmax_ok ? s->rmax : NULL, s->m, s->l, s->alpha,
                           s->pw);
            /* the head's packed pairs are the tile's when the tile starts on a pair and ends on
             * one or at the last key (the same words, so the same bits either way) */
            const uint32_t *vp = s->vp;
            if (vhead && j0 % 2 == 0 && (n % 2 == 0 || j0 + n == p->tk))
                vp = vhead + j0 / 2 * adv;
            else
                nn->pack_v(n, dv, adv, load_tile(p, p->v, true, g.b, g.hkv, j0, n, dv, NULL),
                           p->v->strides[2], s->vp);
            nn->pv_dp(rows, adv, n, s->pw, ld, vp, s->alpha, s->acc);
            continue;
        }
        nn->softmax_step(rows, n, s->st, sj, sr, s->m, s->l, s->alpha, s->tmp);
        for (int r = 0; r < rows; r++)
            if (s->alpha[r] != 1.0f) nn->scale(s->acc + (int64_t)r * dv, dv, s->alpha[r]);
        const void *vt = load_tile(p, p->v, p->v_direct, g.b, g.hkv, j0, n, dv, s->v);
        nn->pv[p->v_src](rows, dv, n, s->st, sj, sr, vt, p->v_direct ? p->v->strides[2] : dv,
                         s->acc);
    }

    if (dp) {
        /* rows dv apart, as the other route leaves them; combine_chunk expects v's block order */
        for (int r = 1; r < rows; r++)
            memmove(s->acc + (int64_t)r * dv, s->acc + (int64_t)r * adv,
                    (size_t)dv * sizeof *s->acc);
        if (p->nsplit > 1 && nn->perm_in[p->v_src])
            for (int r = 0; r < rows; r++) nn->perm_in[p->v_src](s->acc + (int64_t)r * dv, dv);
    }
    if (p->nsplit > 1) {
        float *part = p->part + it * p->part_stride;
        memcpy(part, s->m, (size_t)rows * sizeof *part);
        memcpy(part + rows, s->l, (size_t)rows * sizeof *part);
        memcpy(part + 2 * rows, s->acc, (size_t)rows * (size_t)dv * sizeof *part);
        return;
    }
    int od = p->out_dtype;
    size_t es = sdpa_esize(od);
    char *ob = p->out;
    for (int r = 0; r < rows; r++) {
        int64_t h = g.h0 + r / g.nq, i = g.i0 + r % g.nq;
        float *ar = s->acc + (int64_t)r * dv;
        float inv = s->l[r] > 0 ? 1.0f / s->l[r] : 0.0f;
        if (p->lse) p->lse[(g.b * p->hq + h) * p->tq + i] = row_lse(s->m[r], s->l[r]);
        nn->scale(ar, dv, inv);
        if (!dp && nn->perm_out[p->v_src]) nn->perm_out[p->v_src](ar, dv);
        p->env->store[od](ob + (size_t)(((g.b * p->hq + h) * p->tq + i) * p->dv) * es, ar, dv);
    }
}

static void items_chunk(void *user, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    sdpa_plan *p = user;
    scratch s;
    float *mem = scratch_alloc(p, &s);
    if (!mem) {
        atomic_store(&p->oom, true);
        return;
    }
    for (int64_t it = i0; it < i1; it++) run_item(p, it, &s);
    free(mem);
}

/* Second pass of a split key range: merges the partial softmax states of each row. */
static void combine_chunk(void *user, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    sdpa_plan *p = user;
    int64_t dv = p->dv;
    float *buf = malloc((size_t)(dv ? dv : 1) * sizeof *buf);
    if (!buf) {
        atomic_store(&p->oom, true);
        return;
    }
    int od = p->out_dtype;
    size_t es = sdpa_esize(od);
    char *ob = p->out;
    for (int64_t base = i0; base < i1; base++) {
        item_geo g;
        item_decode(p, base * p->nsplit, &g);
        for (int64_t r = 0; r < g.rows; r++) {
            float mx = -INFINITY;
            for (int64_t sp = 0; sp < p->nsplit; sp++) {
                float m = p->part[(base * p->nsplit + sp) * p->part_stride + r];
                mx = m > mx ? m : mx;
            }
            float l = 0;
            memset(buf, 0, (size_t)dv * sizeof *buf);
            if (mx != -INFINITY) {
                for (int64_t sp = 0; sp < p->nsplit; sp++) {
                    const float *part = p->part + (base * p->nsplit + sp) * p->part_stride;
                    float w = em_expf(part[r] - mx);
                    if (part[r] == -INFINITY || w == 0) continue;
                    l += part[g.rows + r] * w;
                    const float *ar = part + 2 * g.rows + r * dv;
                    for (int64_t c = 0; c < dv; c++) buf[c] += ar[c] * w;
                }
            }
            float inv = l > 0 ? 1.0f / l : 0.0f;
            for (int64_t c = 0; c < dv; c++) buf[c] *= inv;
            if (p->nn->perm_out[p->v_src]) p->nn->perm_out[p->v_src](buf, (int)dv);
            int64_t h = g.h0 + r / g.nq, i = g.i0 + r % g.nq;
            if (p->lse) p->lse[(g.b * p->hq + h) * p->tq + i] = row_lse(mx, l);
            p->env->store[od](ob + (size_t)(((g.b * p->hq + h) * p->tq + i) * dv) * es, buf, dv);
        }
    }
    free(buf);
}

/* Whether the kernels can read t's rows in place, and as which source type. */
static bool readable_in_place(const sdpa_view *t, int *src) {
    *src = NN_SRC_F32;
    if (t->strides[3] != 1 && t->shape[3] > 1) return false;
    if (t->dtype == EM_BF16) *src = NN_SRC_BF16;
    return t->dtype == EM_F32 || t->dtype == EM_BF16;
}

/* Runs the call: 0, or 1 out of memory (*what says which allocation). */
static int sdpa_flash_run(const sdpa_env *env, const sdpa_args *a, const char **what) {
    const sdpa_view *q = &a->q, *k = &a->k, *v = &a->v;
    const sdpa_view *mask = a->mask.data ? &a->mask : NULL;
    sdpa_plan p = {.env = env, .nn = env->nn, .q = q, .k = k, .v = v, .mask = mask,
                   .out = a->out, .out_dtype = a->out_dtype, .lse = a->lse};
    atomic_init(&p.oom, false);
    p.nb = q->shape[0];
    p.hq = q->shape[1];
    p.tq = q->shape[2];
    p.d = q->shape[3];
    p.hkv = k->shape[1];
    p.tk = k->shape[2];
    p.dv = v->shape[3];
    p.g = p.hq / p.hkv;
    p.off = p.tk - p.tq;
    double scale = a->scale;
    p.scale = (float)(scale != 0 ? scale : 1.0 / sqrt((double)(p.d ? p.d : 1)));
    p.causal = a->causal;
    p.window = a->window;
    p.softcap = (float)a->softcap;
    if (mask)
        for (int i = 0; i < 4; i++) {
            int md = i - (4 - mask->ndim);
            p.ms[i] = md < 0 || mask->shape[md] == 1 ? 0 : mask->strides[md];
        }
    p.k_direct = readable_in_place(k, &p.k_src);
    p.v_direct = readable_in_place(v, &p.v_src);
    /* the pair-dot route rounds the weights P to bf16 (torch's reduced-precision flash
     * attention), so only for a bf16 result: a caller that asks for f32 out of bf16 inputs
     * (sdpa_lse, the ring's steps) keeps f32 weights */
    p.dp = env->nn->qk_dp && q->dtype == EM_BF16 && a->out_dtype == EM_BF16 && p.k_direct &&
           p.k_src == NN_SRC_BF16 && p.v_direct && p.v_src == NN_SRC_BF16;
    p.dvp = (p.dv + 7) / 8 * 8;
    if (p.nb * p.hq * p.tq == 0 || (p.dv == 0 && !p.lse)) return 0; /* Dv 0: lse still wanted */

    p.gh = p.g < ROWS_MAX ? p.g : ROWS_MAX;
    p.nhs = (p.g + p.gh - 1) / p.gh;
    p.bq = ROWS_MAX / p.gh;
    if (p.bq > p.tq) p.bq = p.tq;
    p.nqb = (p.tq + p.bq - 1) / p.bq;
    p.n_base = p.nb * p.hkv * p.nhs * p.nqb;
    p.nsplit = 1;
    int64_t threads = env->threads;
    if (p.n_base < 2 * threads && p.tk >= 2 * SPLIT_MIN) {
        int64_t want = (2 * threads + p.n_base - 1) / p.n_base, most = p.tk / SPLIT_MIN;
        p.nsplit = want < most ? want : most;
    }
    p.split_len = (p.tk + p.nsplit - 1) / p.nsplit;
    p.split_len = (p.split_len + KEY_TILE - 1) / KEY_TILE * KEY_TILE;
    if (p.nsplit > 1) {
        p.part_stride = p.gh * p.bq * (p.dv + 2);
        p.part = malloc((size_t)(p.n_base * p.nsplit * p.part_stride) * sizeof *p.part);
        if (!p.part) {
            *what = "cannot allocate split-key partials";
            return 1;
        }
    }
    /* V packed once per head rather than once per item when a head's V is read by several
     * items of GEMM_MIN_ROWS rows or more (those take the pair-dot route), by the first of
     * them to run (no pass of its own, so no extra wait for the threads); without the memory
     * each item packs its tiles, with the same words */
    if (p.dp && p.nhs * p.nqb >= 2 && p.gh * (p.bq < p.tq ? p.bq : p.tq) >= GEMM_MIN_ROWS &&
        p.tk <= INT32_MAX) {
        p.vpk_stride = (p.tk + 1) / 2 * p.dvp;
        p.vpk = malloc((size_t)(p.nb * p.hkv * p.vpk_stride) * sizeof *p.vpk);
        p.vpk_state = malloc((size_t)(p.nb * p.hkv) * sizeof *p.vpk_state);
        if (!p.vpk || !p.vpk_state) {
            free(p.vpk);
            free(p.vpk_state);
            p.vpk = NULL;
            p.vpk_state = NULL;
        } else {
            for (int64_t i = 0; i < p.nb * p.hkv; i++) atomic_init(&p.vpk_state[i], 0);
        }
    }
    env->parallel_for(p.n_base * p.nsplit, 1, items_chunk, &p);
    if (p.nsplit > 1 && !atomic_load(&p.oom)) env->parallel_for(p.n_base, 1, combine_chunk, &p);
    free(p.part);
    free(p.vpk);
    free(p.vpk_state);
    if (atomic_load(&p.oom)) {
        *what = "cannot allocate scratch";
        return 1;
    }
    return 0;
}

#endif

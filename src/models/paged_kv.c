/*
 * The paged KV cache (paged_kv.h): the block pool's accounting on the host (a free list and a
 * reference count per block, a block table per sequence) and the forward step that writes and
 * reads the pools through em_index_copy and em_paged_attention.
 */
#include "models/paged_kv.h"

#include <stdlib.h>
#include <string.h>

#include "core/tensor_impl.h"
#include "models/decoder_blocks.h"
#include "models/model_impl.h"

typedef struct pg_seq {
    bool used;
    int64_t len, n_blk, cap_blk;
    int32_t *blk;
} pg_seq;

struct em_paged_kv {
    const em_model *m;
    int64_t bs, n_blocks, n_free;
    em_tensor **k, **v; /* per layer [Hkv, (n_blocks + 1) * bs, D]: the last block takes the
                         * keys of left padding, never read */
    int32_t *refs;      /* per block */
    int32_t *free_ids;  /* a stack of n_free block ids */
    pg_seq *seqs;
    int max_seqs;
};

bool em_paged_kv_supported(const em_model *m) {
    if (!m || !m->fam->causal || !m->dev_embed || m->dev_embed->be->no_values) return false;
    bool ok = m->dev_head == m->dev_embed;
    for (int64_t i = 0; ok && i < m->n_layers; i++) ok = m->layers[i].dev == m->dev_embed;
    return ok;
}

em_paged_kv *em_paged_kv_create(em_ctx *c, const em_model *m, int64_t n_blocks,
                                int64_t block_size, int max_seqs) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!m || !m->fam->causal || n_blocks < 1 || n_blocks > INT32_MAX || block_size < 1 ||
        max_seqs < 1) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "paged_kv_create",
                    "needs a causal LM, n_blocks in [1, 2^31), block_size >= 1 and max_seqs >= 1 "
                    "(got %lld, %lld, %d)",
                    (long long)n_blocks, (long long)block_size, max_seqs);
        return NULL;
    }
    em_paged_kv *p = calloc(1, sizeof *p);
    if (p) {
        p->k = calloc((size_t)m->n_layers + 1, sizeof *p->k);
        p->v = calloc((size_t)m->n_layers + 1, sizeof *p->v);
        p->refs = calloc((size_t)n_blocks, sizeof *p->refs);
        p->free_ids = malloc((size_t)n_blocks * sizeof *p->free_ids);
        p->seqs = calloc((size_t)max_seqs, sizeof *p->seqs);
    }
    if (p) p->m = m;
    if (!p || !p->k || !p->v || !p->refs || !p->free_ids || !p->seqs) {
        em_paged_kv_free(p);
        em_ctx_fail(c, EM_ERR_OOM, "paged_kv_create", "out of memory");
        return NULL;
    }
    p->bs = block_size;
    p->n_blocks = p->n_free = n_blocks;
    p->max_seqs = max_seqs;
    /* the stack pops the lowest ids first */
    for (int64_t i = 0; i < n_blocks; i++) p->free_ids[i] = (int32_t)(n_blocks - 1 - i);
    em_device *prev = em_ctx_device(c);
    for (int64_t i = 0; i < m->n_layers; i++) {
        const em_dec_layer *l = &m->layers[i];
        if (l->kv_shared) continue; /* reads an earlier layer's pools: none of its own */
        int64_t shape[3] = {l->kv_heads ? l->kv_heads : m->cfg.num_key_value_heads,
                            (n_blocks + 1) * block_size, l->head_dim ? l->head_dim : m->cfg.head_dim};
        em_ctx_set_device(c, l->dev);
        /* not cleared: a slot is read only after its position was written, and pages of a
         * large pool that no block reached yet take no memory (on the CPU) */
        p->k[i] = em_detach(c, em_empty(c, m->dtype, 3, shape));
        p->v[i] = em_detach(c, em_empty(c, m->dtype, 3, shape));
    }
    em_ctx_set_device(c, prev);
    if (em_ctx_status(c)) {
        em_paged_kv_free(p);
        return NULL;
    }
    return p;
}

void em_paged_kv_free(em_paged_kv *p) {
    if (!p) return;
    for (int64_t i = 0; p->m && p->k && p->v && i < p->m->n_layers; i++) {
        em_tensor_release(p->k[i]);
        em_tensor_release(p->v[i]);
    }
    for (int s = 0; p->seqs && s < p->max_seqs; s++) free(p->seqs[s].blk);
    free(p->k);
    free(p->v);
    free(p->refs);
    free(p->free_ids);
    free(p->seqs);
    free(p);
}

static pg_seq *seq_get(const em_paged_kv *p, int seq) {
    return p && seq >= 0 && seq < p->max_seqs && p->seqs[seq].used ? &p->seqs[seq] : NULL;
}

int em_paged_seq_new(em_ctx *c, em_paged_kv *p) {
    for (int s = 0; p && s < p->max_seqs; s++)
        if (!p->seqs[s].used) {
            p->seqs[s].used = true;
            p->seqs[s].len = p->seqs[s].n_blk = 0;
            return s;
        }
    em_ctx_fail(c, EM_ERR_INVALID_ARG, "paged_kv", "all %d sequences are in use",
                p ? p->max_seqs : 0);
    return -1;
}

static void block_unref(em_paged_kv *p, int32_t b) {
    if (--p->refs[b] == 0) p->free_ids[p->n_free++] = b;
}

void em_paged_seq_truncate(em_paged_kv *p, int seq, int64_t n) {
    pg_seq *s = seq_get(p, seq);
    if (!s || n < 0 || n > s->len) return;
    int64_t keep = em_paged_kv_blocks_for(p, n);
    while (s->n_blk > keep) block_unref(p, s->blk[--s->n_blk]);
    s->len = n;
}

void em_paged_seq_free(em_paged_kv *p, int seq) {
    pg_seq *s = seq_get(p, seq);
    if (!s) return;
    em_paged_seq_truncate(p, seq, 0);
    s->used = false;
}

/* Room for n block ids in s's table. */
static bool seq_reserve(pg_seq *s, int64_t n) {
    if (n <= s->cap_blk) return true;
    int64_t cap = s->cap_blk ? s->cap_blk : 8;
    while (cap < n) cap *= 2;
    int32_t *b = realloc(s->blk, (size_t)cap * sizeof *b);
    if (!b) return false;
    s->blk = b;
    s->cap_blk = cap;
    return true;
}

/* Copies positions [0, n) of block `from` to block `to` in every layer's pools. */
static void block_copy(em_ctx *c, em_paged_kv *p, int32_t from, int32_t to, int64_t n) {
    em_scope_push(c);
    for (int64_t i = 0; i < p->m->n_layers; i++) {
        em_tensor *pools[2] = {p->k[i], p->v[i]};
        for (int k = 0; k < 2 && pools[0]; k++)
            em_assign(c, em_slice(c, pools[k], 1, (int64_t)to * p->bs, (int64_t)to * p->bs + n, 1),
                      em_slice(c, pools[k], 1, (int64_t)from * p->bs, (int64_t)from * p->bs + n, 1));
    }
    em_scope_pop(c);
}

int64_t em_paged_seq_share(em_ctx *c, em_paged_kv *p, int dst, int src, int64_t n) {
    pg_seq *d = seq_get(p, dst), *s = seq_get(p, src);
    if (!d || !s || dst == src || d->len || n < 0) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "paged_kv",
                    "share: sequences %d -> %d must both be in use, distinct, the target empty",
                    src, dst);
        return -1;
    }
    if (n > s->len) n = s->len;
    int64_t nb = n / p->bs, tail = n % p->bs;
    if (!seq_reserve(d, nb + 1)) {
        em_ctx_fail(c, EM_ERR_OOM, "paged_kv", "out of memory (block table)");
        return -1;
    }
    for (int64_t i = 0; i < nb; i++) {
        d->blk[i] = s->blk[i];
        p->refs[s->blk[i]]++;
    }
    d->n_blk = nb;
    d->len = nb * p->bs;
    if (tail && p->n_free > 0) { /* copy on write: dst appends into its own last block */
        int32_t id = p->free_ids[--p->n_free];
        p->refs[id] = 1;
        d->blk[d->n_blk++] = id;
        block_copy(c, p, s->blk[nb], id, tail);
        if (em_ctx_status(c)) {
            em_paged_seq_truncate(p, dst, d->len);
            return -1;
        }
        d->len = n;
    }
    return d->len;
}

int64_t em_paged_seq_len(const em_paged_kv *p, int seq) {
    const pg_seq *s = seq_get(p, seq);
    return s ? s->len : 0;
}

int64_t em_paged_kv_block_size(const em_paged_kv *p) { return p ? p->bs : 0; }
int64_t em_paged_kv_blocks_total(const em_paged_kv *p) { return p ? p->n_blocks : 0; }
int64_t em_paged_kv_blocks_used(const em_paged_kv *p) { return p ? p->n_blocks - p->n_free : 0; }
int64_t em_paged_kv_blocks_held(const em_paged_kv *p, const int *seqs, int n) {
    if (!p) return 0;
    uint8_t *seen = calloc((size_t)p->n_blocks, 1);
    if (!seen) return -1;
    int64_t k = 0;
    for (int i = 0; i < n; i++) {
        const pg_seq *s = seq_get(p, seqs[i]);
        for (int64_t b = 0; s && b < s->n_blk; b++)
            if (!seen[s->blk[b]]) seen[s->blk[b]] = 1, k++;
    }
    free(seen);
    return k;
}

int64_t em_paged_kv_blocks_for(const em_paged_kv *p, int64_t n) {
    return p && n > 0 ? (n + p->bs - 1) / p->bs : 0;
}

int64_t em_paged_kv_bytes(const em_paged_kv *p) {
    int64_t n = 0;
    for (int64_t i = 0; p && i < p->m->n_layers; i++)
        if (p->k[i]) n += (int64_t)(em_tensor_nbytes(p->k[i]) + em_tensor_nbytes(p->v[i]));
    return n;
}

/* Gives every row the blocks it needs for t more positions, all or none. A block a row shares
 * is never written: a shared prefix covers whole blocks, so appends land in new ones. */
static bool grow_rows(em_ctx *c, em_paged_kv *p, const int *seqs, int64_t b, int64_t t,
                      const int64_t *n_new) {
    int64_t need = 0;
    for (int64_t r = 0; r < b; r++) {
        pg_seq *s = &p->seqs[seqs[r]];
        int64_t nb = em_paged_kv_blocks_for(p, s->len + (n_new ? n_new[r] : t));
        if (!seq_reserve(s, nb)) {
            em_ctx_fail(c, EM_ERR_OOM, "paged_forward", "out of memory (block table)");
            return false;
        }
        need += nb - s->n_blk;
    }
    if (need > p->n_free) {
        em_ctx_fail(c, EM_ERR_OOM, "paged_forward",
                    "the KV pool has %lld free blocks of %lld; this step needs %lld",
                    (long long)p->n_free, (long long)p->n_blocks, (long long)need);
        return false;
    }
    for (int64_t r = 0; r < b; r++) {
        pg_seq *s = &p->seqs[seqs[r]];
        int64_t nb = em_paged_kv_blocks_for(p, s->len + (n_new ? n_new[r] : t));
        while (s->n_blk < nb) {
            int32_t id = p->free_ids[--p->n_free];
            p->refs[id] = 1;
            s->blk[s->n_blk++] = id;
        }
    }
    return true;
}

void em_paged_step_free(em_paged_step *s) {
    free(s->pos);
    free(s->slots);
    free(s->table);
    free(s->lens);
    memset(s, 0, sizeof *s);
}

bool em_paged_step_plan(em_ctx *c, em_paged_kv *p, em_tensor *ids, const int *seqs,
                        const int64_t *n_new, int64_t rows, int64_t mb_mult, int64_t mb_cap,
                        em_paged_step *st) {
    memset(st, 0, sizeof *st);
    if (!c || em_ctx_status(c)) return false;
    char s1[96];
    if (!p || !ids || !seqs || em_tensor_ndim(ids) != 2) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "paged_forward",
                    "needs the cache's model, ids [B, T] and B sequence ids, got %s",
                    ids ? em_tensor_sig(ids, s1, sizeof s1) : "no ids");
        return false;
    }
    int64_t b = em_tensor_dim(ids, 0), t = em_tensor_dim(ids, 1);
    for (int64_t r = 0; r < b; r++) {
        bool dup = false;
        for (int64_t q = 0; q < r; q++) dup |= seqs[q] == seqs[r];
        if (!seq_get(p, seqs[r]) || dup) {
            em_ctx_fail(c, EM_ERR_INVALID_ARG, "paged_forward",
                        "row %lld: sequence %d is not in use or repeats an earlier row",
                        (long long)r, seqs[r]);
            return false;
        }
    }
    if (b == 0 || t == 0) {
        em_ctx_fail(c, EM_ERR_SHAPE, "paged_forward", "ids %s are empty",
                    em_tensor_sig(ids, s1, sizeof s1));
        return false;
    }
    if (rows < b) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "paged_forward", "%lld rows run in a batch of %lld",
                    (long long)b, (long long)rows);
        return false;
    }
    for (int64_t r = 0; n_new && r < b; r++)
        if (n_new[r] < 1 || n_new[r] > t) {
            em_ctx_fail(c, EM_ERR_INVALID_ARG, "paged_forward",
                        "row %lld adds %lld tokens; 1 to %lld (the ids' width) can be added",
                        (long long)r, (long long)n_new[r], (long long)t);
            return false;
        }
    if (!grow_rows(c, p, seqs, b, t, n_new)) return false;
    int64_t mb = 1;
    for (int64_t r = 0; r < b; r++)
        if (p->seqs[seqs[r]].n_blk > mb) mb = p->seqs[seqs[r]].n_blk;
    if (mb_mult > 1) { /* a bucket of table widths (compiled steps), never below the need */
        int64_t w = (mb + mb_mult - 1) / mb_mult * mb_mult;
        mb = mb_cap > mb && w > mb_cap ? mb_cap : w;
    }
    st->b = b;
    st->t = t;
    st->rows = rows;
    st->mb = mb;
    st->pos = malloc((size_t)(rows * t) * sizeof *st->pos);
    st->slots = malloc((size_t)(rows * t) * sizeof *st->slots);
    st->table = calloc((size_t)(rows * mb), sizeof *st->table);
    st->lens = calloc((size_t)rows, sizeof *st->lens);
    if (!st->pos || !st->slots || !st->table || !st->lens) {
        em_paged_step_free(st);
        em_ctx_fail(c, EM_ERR_OOM, "paged_forward", "out of memory");
        return false;
    }
    int64_t pad_slot = p->n_blocks * p->bs; /* the padding block: written, never read */
    for (int64_t r = 0; r < rows; r++) {
        if (r >= b) { /* a padding row of a bucket: length 0, it attends to nothing */
            for (int64_t i = 0; i < t; i++) {
                st->pos[r * t + i] = 0;
                st->slots[r * t + i] = pad_slot + i % p->bs;
            }
            continue;
        }
        const pg_seq *s = &p->seqs[seqs[r]];
        for (int64_t i = 0; i < s->n_blk; i++) st->table[r * mb + i] = s->blk[i];
        int64_t pad = t - (n_new ? n_new[r] : t);
        for (int64_t i = 0; i < t; i++) {
            int64_t q = s->len + i - pad; /* padding: before the row's new positions */
            st->pos[r * t + i] = q < 0 ? 0 : q;
            st->slots[r * t + i] = i < pad ? pad_slot + i % p->bs
                                           : (int64_t)s->blk[q / p->bs] * p->bs + q % p->bs;
        }
        st->lens[r] = s->len + t - pad;
    }
    return true;
}

void em_paged_step_commit(em_paged_kv *p, const int *seqs, const int64_t *n_new,
                          const em_paged_step *st) {
    for (int64_t i = 0; i < st->b; i++) p->seqs[seqs[i]].len += n_new ? n_new[i] : st->t;
}

void em_paged_fwd_init(em_fwd *f, em_ctx *c, const em_model *m, const em_paged_kv *p,
                       const em_paged_step *st) {
    memset(f, 0, sizeof *f);
    f->c = c;
    f->m = m;
    f->b = st->rows;
    f->t = st->t;
    f->pg_k = p->k;
    f->pg_v = p->v;
    f->pg_block = p->bs;
}

em_tensor *em_paged_forward(em_ctx *c, const em_model *m, em_paged_kv *p, em_tensor *ids,
                            const int *seqs, const int64_t *n_new, bool last_only) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!m || !p || p->m != m) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "paged_forward", "needs the cache's model");
        return NULL;
    }
    em_paged_step st;
    if (!em_paged_step_plan(c, p, ids, seqs, n_new, ids ? em_tensor_dim(ids, 0) : 0, 1, 0, &st))
        return NULL; /* the blocks taken stay with their rows (freed with them) */
    int64_t b = st.b, t = st.t, mb = st.mb;
    em_scope_push(c);
    /* on the model's device (one device: em_paged_kv_supported), moved there at most once */
    em_device *d = m->dev_embed;
    em_fwd f;
    em_paged_fwd_init(&f, c, m, p, &st);
    f.positions = em_from_host_on(c, d, EM_I64, 2, (int64_t[]){b, t}, st.pos);
    f.pg_slots = em_from_host_on(c, d, EM_I64, 1, (int64_t[]){b * t}, st.slots);
    f.pg_table = em_from_host_on(c, d, EM_I64, 2, (int64_t[]){b, mb}, st.table);
    f.pg_lens = em_from_host_on(c, d, EM_I64, 1, (int64_t[]){b}, st.lens);
    em_tensor *r = em_keep(c, em_decoder_forward_body(&f, ids, last_only));
    em_scope_pop(c);
    if (!em_ctx_status(c)) em_paged_step_commit(p, seqs, n_new, &st);
    em_paged_step_free(&st);
    return em_ctx_status(c) ? NULL : r;
}

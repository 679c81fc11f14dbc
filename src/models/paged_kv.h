/*
 * A paged KV cache (vLLM's PagedAttention): per layer one pool of keys and one of values,
 * [Hkv, n_blocks * block_size, D], cut into fixed-size blocks; each sequence owns a block table
 * (its blocks in order) and a length, so memory follows the sequences' actual lengths and rows
 * of one step may have different lengths. Blocks are reference-counted: a sequence can share
 * another's full blocks (a reused prompt prefix) without copying them. A forward step
 * (em_paged_forward) appends T positions to each of its rows, writes their keys and values into
 * the rows' slots and attends with em_paged_attention.
 *
 * Not thread-safe: one owner (the server's worker). Library-internal (the server uses it).
 */
#ifndef EMBER_PAGED_KV_H
#define EMBER_PAGED_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "ember/ember.h"

typedef struct em_paged_kv em_paged_kv;

/* A pool of n_blocks blocks of block_size positions for model m (a causal decoder) and up to
 * max_seqs sequences: a key and a value pool per layer, none for a KV-sharing layer (it attends
 * over its source layer's blocks). NULL on error (in c: invalid arguments, out of memory). Free
 * with em_paged_kv_free. */
/* Whether m runs with a paged cache where it pays: a causal decoder whose layers sit on the
 * CPU, whose kernel em_paged_attention has (other devices run the op as a composition that
 * gathers each row's keys per call: correct, not worth it). */
bool em_paged_kv_supported(const em_model *m);

em_paged_kv *em_paged_kv_create(em_ctx *c, const em_model *m, int64_t n_blocks,
                                int64_t block_size, int max_seqs);
void em_paged_kv_free(em_paged_kv *p);

/* A new empty sequence: its id (>= 0), or -1 when max_seqs are in use (fails c). */
int em_paged_seq_new(em_ctx *c, em_paged_kv *p);
/* Ends a sequence: its blocks lose a reference, those left without one return to the pool.
 * Ids that are not in use are ignored. */
void em_paged_seq_free(em_paged_kv *p, int seq);
/* Sequence dst (empty) takes src's first n positions (at most its length): the whole blocks
 * are shared (reference counted, not copied); the positions of a last partial block are copied
 * into a block of dst's own (dst appends there; at most block_size - 1 positions), when the pool
 * has a free block, else left out. Returns the positions dst now holds; -1 on bad ids, a
 * non-empty dst or a failed copy (fails c). */
int64_t em_paged_seq_share(em_ctx *c, em_paged_kv *p, int dst, int src, int64_t n);
/* Drops sequence seq's positions from n on (n <= its length; blocks past them released). */
void em_paged_seq_truncate(em_paged_kv *p, int seq, int64_t n);
int64_t em_paged_seq_len(const em_paged_kv *p, int seq);

int64_t em_paged_kv_block_size(const em_paged_kv *p);
int64_t em_paged_kv_blocks_total(const em_paged_kv *p);
/* Blocks held by at least one sequence. */
int64_t em_paged_kv_blocks_used(const em_paged_kv *p);
/* Distinct blocks held by the n sequences seqs (ids not in use count nothing): what they use,
 * a block they share counted once. -1 when out of memory. */
int64_t em_paged_kv_blocks_held(const em_paged_kv *p, const int *seqs, int n);
/* Blocks a sequence of n positions would need (ceil(n / block_size)). */
int64_t em_paged_kv_blocks_for(const em_paged_kv *p, int64_t n);
/* Bytes of the pools (keys and values, every layer). */
int64_t em_paged_kv_bytes(const em_paged_kv *p);

/* One step: ids [B, T] continue sequences seqs[0..B) (distinct ids). Row b appends its last
 * n_new[b] ids (1 <= n_new[b] <= T; NULL: all T), written at its own length; its first
 * T - n_new[b] ids are left padding, computed but written nowhere (their keys go to a slot no
 * sequence reads) and their logits meaningless. So rows of one step may add different counts
 * of tokens (a prompt chunk beside decode rows). Returns f32 logits [B, T or 1, V] (last_only:
 * each row's last position) and advances the lengths. Blocks are taken from the pool first,
 * for every row, all or none: when the pool has too few free blocks this fails (EM_ERR_OOM,
 * "the KV pool ...") with nothing changed. */
em_tensor *em_paged_forward(em_ctx *c, const em_model *m, em_paged_kv *p, em_tensor *ids,
                            const int *seqs, const int64_t *n_new, bool last_only);

#endif

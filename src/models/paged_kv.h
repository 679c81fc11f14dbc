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

#include "ember/compile.h"
#include "ember/ember.h"
#include "models/model_impl.h"

typedef struct em_paged_kv em_paged_kv;

/* A pool of n_blocks blocks of block_size positions for model m (a causal decoder) and up to
 * max_seqs sequences: a key and a value pool per layer, none for a KV-sharing layer (it attends
 * over its source layer's blocks). NULL on error (in c: invalid arguments, out of memory). Free
 * with em_paged_kv_free. */
/* Whether m runs with a paged cache: a causal decoder wholly on one device that holds values,
 * the CPU (em_paged_attention's kernel) or a PJRT device (its StableHLO lowering,
 * backends/pjrt/stablehlo_paged.c). A model split over devices keeps the dense cache. */
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

/* ---- compile mode (paged_compile.c) ----
 * The step as a compiled function: positions, written slots, block tables and lengths are its
 * inputs (data), the pools are captured, so its shapes depend only on the batch, the tokens per
 * row and the table width, which is rounded up to a bucket: requests joining and leaving a
 * running batch of one bucket reuse one program. */
typedef struct em_paged_compiled em_paged_compiled;
/* Bound to p (which must outlive it); table widths are multiples of `bucket` positions (<= 0:
 * 128) capped at max_len positions. NULL with the error in c (EM_ERR_UNSUPPORTED for a model
 * compile mode does not take, or one the paged cache does not). */
em_paged_compiled *em_paged_compile(em_ctx *c, const em_model *m, em_paged_kv *p, int64_t bucket,
                                    int64_t max_len);
/* em_paged_forward through the program, the batch padded to `rows` (>= the ids' rows): padding
 * rows feed id 0 at length 0 (their keys go to the padding block) and their logits are
 * dropped. Same results and errors as em_paged_forward; logits [B, 1 or T, V] for the B real
 * rows. */
em_tensor *em_paged_forward_compiled(em_ctx *c, em_paged_compiled *pc, em_tensor *ids,
                                     const int *seqs, const int64_t *n_new, int64_t rows,
                                     bool last_only);
void em_paged_compiled_stats(const em_paged_compiled *pc, em_compile_stats *out);
void em_paged_compiled_free(em_paged_compiled *pc);

/* ---- the host side of one step, shared by the eager and compiled forwards ---- */
typedef struct em_paged_step {
    int64_t b, t, rows, mb;  /* real rows, tokens per row, rows run (padded), table width */
    int64_t *pos, *slots;    /* [rows, T]: positions, pool slots written */
    int64_t *table, *lens;   /* [rows, mb] block ids (0 past a row's blocks), [rows] lengths */
} em_paged_step;
/* Checks the step's arguments, takes the blocks the rows need (all or none) and fills *st for
 * `rows` rows (>= the ids' rows; the rest padding rows of length 0 writing the padding block).
 * The table is at least as wide as the widest row's blocks; with mb_mult > 1 its width is
 * rounded up to a multiple of mb_mult, capped at mb_cap (when that still holds the rows).
 * False with the error in c. */
bool em_paged_step_plan(em_ctx *c, em_paged_kv *p, em_tensor *ids, const int *seqs,
                        const int64_t *n_new, int64_t rows, int64_t mb_mult, int64_t mb_cap,
                        em_paged_step *st);
/* After the step ran: the rows' lengths advance. */
void em_paged_step_commit(em_paged_kv *p, const int *seqs, const int64_t *n_new,
                          const em_paged_step *st);
void em_paged_step_free(em_paged_step *st);
/* A forward over p's pools for st's rows (f's tensors left for the caller to set). */
void em_paged_fwd_init(em_fwd *f, em_ctx *c, const em_model *m, const em_paged_kv *p,
                       const em_paged_step *st);

#endif

/* `ember serve --compile`: the decode step over the dense or the paged KV cache as compiled
 * programs, one per (batch bucket, key-length bucket) pair (compiled_step.c says how rows are
 * padded). */
#ifndef EMBER_SERVE_COMPILED_STEP_H
#define EMBER_SERVE_COMPILED_STEP_H

#include <stdint.h>

#include "ember/model.h"
#include "models/paged_kv.h"

typedef struct srv_compiled srv_compiled;

/* Binds to the dense cache kv ([max_batch, ctx], which must outlive the result and keep its
 * tensors: a shift copies in place). Key lengths are rounded up to multiples of `bucket`
 * (<= 0: 128). NULL with the error in c: EM_ERR_UNSUPPORTED for a model compile mode does not
 * take (named), out of memory. */
srv_compiled *srv_compiled_create(em_ctx *c, const em_model *m, em_kv_cache *kv, int64_t bucket);
/* One decode step of the cache's first n rows at length len: row r feeds ids[r], attends where
 * mask[r * (len + 1) + k] is set, and its next-token logits go to logits[r * vocab ...]. The
 * cache's rows [0, n) get position len written (padding rows up to the batch bucket too). */
em_status srv_compiled_step(em_ctx *c, srv_compiled *sc, int n, int64_t len, const int64_t *ids,
                            const uint8_t *mask, float *logits);
/* Over the paged cache p (which must outlive the result): batch buckets up to max_batch, block
 * tables bucketed by `bucket` positions (<= 0: 128) up to ctx. NULL with the error in c, as
 * srv_compiled_create. */
srv_compiled *srv_compiled_create_paged(em_ctx *c, const em_model *m, em_paged_kv *p,
                                        int max_batch, int64_t ctx, int64_t bucket);
/* One decode step of the paged cache's sequences seqs[0..n): row r feeds ids[r] at its own
 * length (em_paged_forward's semantics and errors); its next-token logits go to
 * logits[r * vocab ...]. */
em_status srv_compiled_step_paged(em_ctx *c, srv_compiled *sc, int n, const int64_t *ids,
                                  const int *seqs, float *logits);
/* One prefill chunk of the paged cache's sequences seqs[0..n) (n <= max_batch) as a compiled
 * program: row r feeds ids[r * k ...], k columns of which its last add[r] are its new tokens
 * (em_paged_forward's n_new semantics and errors); its last token's next-token logits go to
 * logits[r * vocab ...]. Rows are padded to their batch bucket and the columns (left) to the
 * next power of two, so a program is reused per (rows, columns, table) bucket triple. */
em_status srv_compiled_prefill_paged(em_ctx *c, srv_compiled *sc, int n, int64_t k,
                                     const int64_t *ids, const int *seqs, const int64_t *add,
                                     float *logits);
/* Compiles so far and programs held, of the decode steps and (pf_) of the prefill chunks, summed
 * over the buckets, and the time spent compiling both. */
void srv_compiled_counts(const srv_compiled *sc, int64_t *compiles, int64_t *programs,
                         int64_t *pf_compiles, int64_t *pf_programs, double *compile_ms);
void srv_compiled_free(srv_compiled *sc);

#endif

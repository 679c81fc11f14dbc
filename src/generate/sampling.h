/* Choosing the next token from a row of logits, as transformers' logits processors do. */
#ifndef EMBER_SAMPLING_H
#define EMBER_SAMPLING_H

#include <stdbool.h>
#include <stdint.h>

#include "ember/generate.h"

/* A counter-based generator: reproducible for a seed, independent of batch layout. */
typedef struct em_rng {
    uint64_t state;
} em_rng;
void em_rng_seed(em_rng *r, uint64_t seed);
double em_rng_uniform(em_rng *r); /* [0, 1) */

/*
 * The next token: repetition penalty over `seen` (n_seen ids), then greedy argmax or, when
 * sampling, temperature, top-k, top-p, min-p and a draw from the softmax. `logits` (n) is
 * modified; `scratch` holds 2n floats and n ints.
 */
int64_t em_sample_next(float *logits, int64_t n, const int64_t *seen, int64_t n_seen,
                       const em_generate_params *p, em_rng *rng, float *scratch, int32_t *order);

#endif

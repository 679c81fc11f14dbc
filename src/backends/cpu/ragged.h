/*
 * Ragged-dot micro-kernels. A task computes out[r, n] for the R rows of one group and the weight
 * rows n in [0, nn) of that group's matrix: each weight row is read once per task, the group's
 * rows stay in L1. Accumulation is in f32; the caller rounds to the output dtype.
 */
#ifndef EMBER_RAGGED_H
#define EMBER_RAGGED_H

#include <stdbool.h>
#include <stdint.h>

/* [N, K] layout ("nk", the Hub's expert layout): out[r*ldo + n] = sum_k x[r*ldx + k] * w[n*ldw + k].
 * x and w are bf16 (uint16_t) or f32; out is f32. */
typedef void (*em_ragged_nk_bf16_fn)(const uint16_t *x, int64_t ldx, int64_t rows,
                                     const uint16_t *w, int64_t ldw, int64_t nn, int64_t k,
                                     float *out, int64_t ldo);
typedef void (*em_ragged_nk_f32_fn)(const float *x, int64_t ldx, int64_t rows, const float *w,
                                    int64_t ldw, int64_t nn, int64_t k, float *out, int64_t ldo);

/*
 * Packed layout ("nk packed", em_ragged_pack): a group's [N, K] matrix stored as N/32 panels of
 * K/2 steps of 32 columns x a (k, k+1) pair, [N/32, K/2, 32, 2] — vdpbf16ps's operand layout, so
 * a 16-column vector of the panel meets one broadcast pair of an x row. Computes
 * out[r*ldo + 32*p + c] (bf16, rounded once) for rows r < rows and the np panels at wp (panel
 * stride ks*64 elements); ks = K/2. Each panel is one sequential stream from DRAM and x is read
 * 32 columns at a time instead of 4. How a group's rows share the stream is the set's choice:
 * AVX-512 reads a panel once for up to 10 rows (larger groups in equal blocks of at most 10, the
 * panel again from L2 for each); AVX2 walks it in 8 KB chunks, every 2-row pass over a chunk
 * from L1 before the next (ragged_packed_avx2.inc).
 */
typedef void (*em_ragged_packed_bf16_fn)(const uint16_t *x, int64_t ldx, int64_t rows,
                                         const uint16_t *wp, int64_t np, int64_t ks,
                                         uint16_t *out, int64_t ldo);

/* The micro-kernels of one instruction set. packed_bf16 is NULL where the set has no kernel for
 * the packed layout (the caller then converts the panels on the fly, slowly). pack_pays: the
 * packed kernel beat the [N, K] path on this set (measured, see docs/performance-avx2.md), so
 * model loads pack bf16 experts (em_ragged_pack_pays). */
typedef struct em_ragged_isa {
    em_ragged_nk_bf16_fn nk_bf16;
    em_ragged_nk_f32_fn nk_f32;
    em_ragged_packed_bf16_fn packed_bf16;
    bool pack_pays;
} em_ragged_isa;

/* The table for the chosen instruction set (em_cpu_isa_fill). */
const em_ragged_isa *em_ragged_isa_get(void);
/* Per-ISA fills (t is an em_ragged_isa): ragged_generic.c, ragged_avx2.c, ragged_avx512.c,
 * ragged_neon.c (which calls ragged_neon_bf16.c's where em_cpu_bf16_dot()). */
void em_ragged_fill_generic(void *t);
void em_ragged_fill_avx2(void *t);
void em_ragged_fill_avx512(void *t);
void em_ragged_fill_neon(void *t);
void em_ragged_fill_neon_bf16(void *t);

#endif

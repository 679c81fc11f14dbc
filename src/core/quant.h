/*
 * Helpers shared by the code that reads ggml's quantized blocks (core/quant.c, the CPU's
 * quantized kernels). The layouts are described in core/quant.c.
 */
#ifndef EMBER_CORE_QUANT_H
#define EMBER_CORE_QUANT_H

#include <stdint.h>

/* Six-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block from its 12 scale bytes. */
void em_q4k_scale_min(const uint8_t *scales, int j, uint8_t *sc, uint8_t *m);

#endif

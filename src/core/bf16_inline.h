/*
 * bf16 <-> f32 conversions as inline functions, for the loops of the library itself. The
 * exported em_f32_to_bf16 / em_bf16_to_f32 are interposable symbols of the shared library, so a
 * call to them is never inlined and a loop of calls never vectorises; they wrap these.
 */
#ifndef EMBER_BF16_INLINE_H
#define EMBER_BF16_INLINE_H

#include <stdint.h>
#include <string.h>

/* Round to nearest even; a NaN stays a (quiet) NaN. */
static inline uint16_t em_bf16_from_f32_inline(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float em_bf16_to_f32_inline(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif

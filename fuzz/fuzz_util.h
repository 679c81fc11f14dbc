/* What every libFuzzer target here shares: the entry point's prototype (for -Wmissing-prototypes),
 * the invariant check that turns a broken promise into a crash libFuzzer reports, and a
 * NUL-terminated copy of the input for parsers that take C strings. */
#ifndef EMBER_FUZZ_UTIL_H
#define EMBER_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define INVARIANT(x)                                                                               \
    do {                                                                                           \
        if (!(x)) __builtin_trap();                                                                \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input as a C string (caller frees), or NULL when out of memory. */
static inline char *fuzz_text(const uint8_t *data, size_t size) {
    char *t = malloc(size + 1);
    if (!t) return NULL;
    memcpy(t, data, size);
    t[size] = 0;
    return t;
}

#endif

/*
 * Lookups in a list of names kept sorted through an order array (checkpoint readers: the
 * safetensors header, GGUF tensor infos). name_at(ctx, k) is the k-th name in sorted order.
 */
#ifndef EMBER_CORE_NAME_INDEX_H
#define EMBER_CORE_NAME_INDEX_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef const char *(*em_name_at_fn)(const void *ctx, int64_t k);

/* The first sorted position whose name is not less than name (n when none). */
static inline int64_t em_names_lower_bound(em_name_at_fn name_at, const void *ctx, int64_t n,
                                           const char *name) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (strcmp(name_at(ctx, mid), name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The neighbour in sorted order sharing the longest prefix with name, for "did you mean"
 * messages; NULL when none shares a character. */
static inline const char *em_names_nearest(em_name_at_fn name_at, const void *ctx, int64_t n,
                                           const char *name) {
    int64_t i = em_names_lower_bound(name_at, ctx, n, name);
    const char *best = NULL;
    size_t best_len = 0;
    for (int64_t k = i - 1; k <= i; k++) {
        if (k < 0 || k >= n) continue;
        const char *cand = name_at(ctx, k);
        size_t l = 0;
        while (cand[l] && cand[l] == name[l]) l++;
        if (!best || l > best_len) best = cand, best_len = l;
    }
    return best_len ? best : NULL;
}

#endif

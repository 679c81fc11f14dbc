/* Small helpers over ember/kernel_abi.h's plain structs, shared by the packages in kernels/. */
#ifndef EMBER_KERNELS_UTIL_H
#define EMBER_KERNELS_UTIL_H

#include "ember/kernel_abi.h"

static inline int64_t kabi_numel(const ember_kernel_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

/* Row-major contiguous (size-1 dimensions may have any stride). */
static inline int kabi_contiguous(const ember_kernel_tensor *t) {
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != s) return 0;
        s *= t->shape[d];
    }
    return 1;
}

#endif

/* Small helpers over ember/kernel_abi.h's plain structs, shared by the packages in kernels/. */
#ifndef EMBER_KERNELS_UTIL_H
#define EMBER_KERNELS_UTIL_H

#include <stddef.h>
#include <string.h>

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

/* The caller's CPU level (ember_kernel_call.cpu_level), or "" from a caller older than it. */
static inline const char *kabi_cpu_level(const ember_kernel_call *k) {
    size_t need = offsetof(ember_kernel_call, cpu_level) + sizeof k->cpu_level;
    return k->struct_size >= need && k->cpu_level ? k->cpu_level : "";
}

/* The attribute of that name (the op table's schema), or NULL. */
static inline const ember_kernel_attr *kabi_attr(const ember_kernel_call *k, const char *name) {
    for (int i = 0; i < k->n_attrs; i++)
        if (k->attrs[i].name && !strcmp(k->attrs[i].name, name)) return &k->attrs[i];
    return NULL;
}

/* One implementation entry of a package's table. */
#define KABI_IMPL(op_, name_, dtypes_, priority_, supports_, run_)                                 \
    {.struct_size = sizeof(ember_kernel_impl), .op = (op_), .name = (name_), .dtypes = (dtypes_),  \
     .modes = EMBER_KERNEL_MODE_ALL, .priority = (priority_), .supports = (supports_), .run = (run_)}

/* The two symbols the loader looks up, over a static impls[] array: every package ends with
 * KABI_EXPORT_LIBRARY("package-name", impls). */
#define KABI_EXPORT_LIBRARY(name_, impls_)                                                         \
    static const ember_kernel_library kabi_library_ = {                                            \
        EMBER_KERNEL_ABI_VERSION, sizeof(ember_kernel_library), (name_),                           \
        (int32_t)(sizeof(impls_) / sizeof((impls_)[0])), (impls_)};                                    \
    EMBER_KERNEL_EXPORT const uint32_t ember_kernel_abi_version = EMBER_KERNEL_ABI_VERSION;        \
    EMBER_KERNEL_EXPORT const ember_kernel_library *ember_kernel_library_get(void) {               \
        return &kabi_library_;                                                                     \
    }

#endif

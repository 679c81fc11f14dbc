/* For the kernel hub's tests: a package library's table, opened straight from the build. */
#ifndef EMBER_TEST_KERNEL_PKG_UTIL_H
#define EMBER_TEST_KERNEL_PKG_UTIL_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ember/kernel_abi.h"

/* The table of $EMBER_TEST_KERNELS/<pkg>/build/<variant>/<lib> (dlopen'ed, left open), or NULL
 * when it does not load. */
static inline const ember_kernel_library *test_pkg_library(const char *pkg, const char *variant,
                                                           const char *lib) {
    const char *root = getenv("EMBER_TEST_KERNELS");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/build/%s/%s", root ? root : ".", pkg, variant, lib);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ember_kernel_library_get_fn get =
        h ? (ember_kernel_library_get_fn)(uintptr_t)dlsym(h, "ember_kernel_library_get") : NULL;
    return get ? get() : NULL;
}

#endif

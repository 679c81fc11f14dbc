/*
 * The backends built into the library, one line each. Core's backend registry
 * (core/backend_registry.c) learns them here, before main runs, so core never names a backend:
 * a new backend is its folder under src/backends/ and its line below.
 */
#include "backends/cpu/cpu.h"
#include "backends/pjrt/pjrt.h"
#include "core/kernel_registry.h"
#include "ember/kernels.h"

static const em_backend_reg *const builtin[] = {
    &em_cpu_backend_reg, /* first: the host's device */
    &em_pjrt_backend_reg,
};

__attribute__((constructor)) static void register_builtin(void) {
    for (size_t i = 0; i < sizeof builtin / sizeof *builtin; i++) em_backend_register(builtin[i]);
    /* and the kernel hub, which loads $EMBER_KERNELS when the first context is created */
    em_kreg_set_autoload(em_kernels_autoload);
}

/* A static link keeps this file only when something names it: the library's CMake target and
 * ember.pc pass `-u em_backends_builtin` to the linker. */
const int em_backends_builtin = (int)(sizeof builtin / sizeof *builtin);

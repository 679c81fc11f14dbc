/*
 * ragged_dot for bf16 experts in the packed layout [G, N/32, K/2, 32, 2] (em_ragged_pack), on
 * AVX2 + FMA, as a kernel package (ember/kernel_abi.h). The micro-kernel is the built-in's own
 * (src/backends/cpu/ragged_packed_avx2.inc), so the package gives the built-in's bits; the work
 * is split as the built-in splits it (common/ragged_packed_run.h).
 * supports() takes contiguous bf16 calls with a packed rhs; everything else goes to the built-in,
 * and so does every call where Ember's kernels run AVX-512 (the built-in is the faster there).
 */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cvt_avx2.h"
#include "core/bf16_inline.h"
#include "ember/kernel_abi.h"
#include "kernel_util.h"

#define RAGGED_WIDEN_BF16(src, dst, n)                                                             \
    do {                                                                                           \
        for (int64_t i_ = 0; i_ < (n); i_++) (dst)[i_] = em_bf16_to_f32_inline((src)[i_]);       \
    } while (0)
#include "backends/cpu/ragged_packed_avx2.inc"
#include "ragged_packed_run.h"

static int supports(const ember_kernel_call *k) {
    /* where Ember's own kernels run AVX-512 (with or without BF16), its built-in ragged_dot is
     * wider than this package: leave the call to it */
    if (!strncmp(kabi_cpu_level(k), "avx512", 6)) return 0;
    return ragged_packed_takes(k);
}

static const ember_kernel_impl impls[] = {
    KABI_IMPL("ragged_dot", "ragged_packed_avx2", EMBER_KDT_BIT(EMBER_KDT_BF16), 10, supports,
              ragged_packed_run),
};

KABI_EXPORT_LIBRARY("ember-ragged-avx2", impls)

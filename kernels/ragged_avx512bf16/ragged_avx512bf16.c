/*
 * ragged_dot for bf16 experts in the packed layout [G, N/32, K/2, 32, 2] (em_ragged_pack), on
 * AVX-512 BF16 (vdpbf16ps), as a kernel package (ember/kernel_abi.h). The micro-kernel is the
 * built-in's own (src/backends/cpu/ragged_packed_avx512.inc), so the package gives the built-in's
 * bits; the work is split as the built-in splits it (common/ragged_packed_run.h).
 * supports() takes contiguous bf16 calls with a packed rhs where Ember's kernels run AVX-512
 * BF16; everything else goes to the built-in. The loader only picks this variant on a CPU with
 * AVX-512 BF16; the level check also leaves the calls of a process whose kernels were lowered
 * (EMBER_CPU_LEVEL=avx2) to the built-in it chose.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/cvt_avx512.h"
#include "ember/kernel_abi.h"
#include "kernel_util.h"

#include "backends/cpu/ragged_packed_avx512.inc"
#include "ragged_packed_run.h"

static int supports(const ember_kernel_call *k) {
    if (strcmp(kabi_cpu_level(k), "avx512bf16")) return 0;
    return ragged_packed_takes(k);
}

/* priority 20: above ember-ragged-avx2's 10, the narrower package, when both are loaded */
static const ember_kernel_impl impls[] = {
    KABI_IMPL("ragged_dot", "ragged_packed_avx512bf16", EMBER_KDT_BIT(EMBER_KDT_BF16), 20,
              supports, ragged_packed_run),
};

KABI_EXPORT_LIBRARY("ember-ragged-avx512bf16", impls)

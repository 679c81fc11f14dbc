/* Element-wise block functions compiled for the avx2 kernel level (see ew_funcs.inc). */
/* No FP trap semantics here (nothing reads the exception flags): GCC then if-converts the
 * clamps and selects of exp, tanh, sigmoid, silu and gelu and vectorises those loops, which it
 * left scalar for AVX2 (AVX-512 vectorises them with masks); the results are the same IEEE
 * operations per element. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#define EW_ISA avx2
/* exp, tanh, sigmoid, silu and gelu in f32: intrinsics (ew_trans_avx2.c; FMA but for erf) */
#define EW_FILL_MORE em_ew_fill_trans_avx2
#include "backends/cpu/ew_funcs.inc"

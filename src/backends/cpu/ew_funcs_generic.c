/* Element-wise block functions compiled for the generic kernel level (see ew_funcs.inc). */
/* As at the avx2 level (ew_funcs_avx2.c): no FP trap semantics, so that GCC if-converts the
 * selects of exp, tanh, sigmoid, silu, erf and gelu and vectorises those loops on SSE2; the
 * results are the same IEEE operations per element. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#define EW_ISA generic
#include "backends/cpu/ew_funcs.inc"

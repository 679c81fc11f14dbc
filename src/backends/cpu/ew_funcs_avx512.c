/* Element-wise block functions compiled for the avx512 kernel level (see ew_funcs.inc). */
#define EW_ISA avx512
#include "backends/cpu/ew_funcs.inc"

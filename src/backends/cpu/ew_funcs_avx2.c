/* Element-wise block functions compiled for the avx2 kernel level (see ew_funcs.inc). */
#define EW_ISA avx2
#include "backends/cpu/ew_funcs.inc"

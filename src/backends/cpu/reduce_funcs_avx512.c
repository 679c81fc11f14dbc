/* Reduction row kernels compiled for the avx512 kernel level (see reduce_funcs.inc). */
#define RF_ISA avx512
#include "backends/cpu/reduce_funcs.inc"

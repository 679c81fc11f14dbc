/* Reduction row kernels compiled for the avx2 kernel level (see reduce_funcs.inc). */
#define RF_ISA avx2
#include "backends/cpu/reduce_funcs.inc"

/* Reduction row kernels compiled for the generic kernel level (see reduce_funcs.inc). */
#define RF_ISA generic
#include "backends/cpu/reduce_funcs.inc"

/* nn micro-kernels compiled for the avx512 kernel level (see nn_kern.inc). */
#define NN_ISA avx512
#include "backends/cpu/nn_kern.inc"

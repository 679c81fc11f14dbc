/* nn micro-kernels compiled for the avx2 kernel level (see nn_kern.inc). */
#define NN_ISA avx2
#include "backends/cpu/nn_kern.inc"

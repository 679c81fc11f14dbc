/* nn micro-kernels compiled for the generic kernel level (see nn_kern.inc). */
#define NN_ISA generic
#include "backends/cpu/nn_kern.inc"

/* Direct convolution micro-kernels compiled for the generic kernel level (see conv_kern.inc). */
#define CK_ISA_NAME generic
#define CK_LEVEL 0
#include "backends/cpu/conv_kern.inc"

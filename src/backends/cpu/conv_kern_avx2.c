/* Direct convolution micro-kernels compiled for the avx2 kernel level (see conv_kern.inc). */
#define CK_ISA_NAME avx2
#define CK_LEVEL 1
#include "backends/cpu/conv_kern.inc"

/* Direct convolution micro-kernels compiled for the avx512 kernel level (see conv_kern.inc). */
#define CK_ISA_NAME avx512
#define CK_LEVEL 2
#include "backends/cpu/conv_kern.inc"

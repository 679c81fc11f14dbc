/* Portable GEMM kernels compiled for the avx2 kernel level (see gemm_kern.inc). */
#define GEMM_ISA avx2
#include "backends/cpu/gemm_kern.inc"

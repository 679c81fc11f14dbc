/* Portable GEMM kernels compiled for the generic kernel level (see gemm_kern.inc). */
#define GEMM_ISA generic
#include "backends/cpu/gemm_kern.inc"

/* Element-wise block functions compiled for the generic kernel level (see ew_funcs.inc). */
#define EW_ISA generic
#include "backends/cpu/ew_funcs.inc"

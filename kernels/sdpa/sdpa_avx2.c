/* ember-sdpa, AVX2 + FMA variant: see sdpa_isa.inc. */
#define SDPA_ISA avx2
#include "sdpa_isa.inc"

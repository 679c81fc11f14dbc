/* ember-sdpa, AVX-512 variant: see sdpa_isa.inc. */
#define SDPA_ISA avx512
#include "sdpa_isa.inc"

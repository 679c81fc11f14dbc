/* Row kernels of the reductions, compiled per instruction set (reduce_funcs.inc). */
#ifndef EMBER_REDUCE_FUNCS_H
#define EMBER_REDUCE_FUNCS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct em_red_isa {
    double (*sum_f32)(const float *v, int64_t n);
    /* best of n >= 1 values; *nan set when a NaN was seen */
    float (*max_f32)(const float *v, int64_t n, bool *nan);
    float (*min_f32)(const float *v, int64_t n, bool *nan);
    /* in place over a row: softmax, or log_softmax */
    void (*softmax_f32)(float *v, int64_t n);
    void (*log_softmax_f32)(float *v, int64_t n);
} em_red_isa;

/* Per-ISA fills (t is an em_red_isa), called only through em_cpu_isa_fill: reduce_funcs.inc per
 * x86 level, reduce_neon.c on aarch64. */
void em_red_fill_generic(void *t);
void em_red_fill_avx2(void *t);
void em_red_fill_avx512(void *t);
void em_red_fill_neon(void *t);
const em_red_isa *em_red_isa_get(void);

#endif

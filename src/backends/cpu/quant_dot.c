/* The activation quantizers shared by every level of the quantized dot kernels, and the choice
 * of level. */
#include <math.h>

#include "backends/cpu/quant_dot.h"

EM_CPU_ISA_TABLE(em_qdot_isa, em_qdot_isa_get, [EM_ISA_GENERIC] = em_qdot_fill_generic,
                 [EM_ISA_AVX2] = EM_ISA_X86(em_qdot_fill_avx2),
                 [EM_ISA_AVX512] = EM_ISA_X86(em_qdot_fill_avx512))

const em_qdot_kernel *em_qdot_kernel_for(em_dtype wt) {
    const em_qdot_kernel *k = &em_qdot_isa_get()->kern[wt];
    return k->dot ? k : NULL;
}

size_t em_qx_row_bytes_16(int64_t k) { return (size_t)(k / 32) * sizeof(em_qx16); }
size_t em_qx_row_bytes_16_k(int64_t k) { return (size_t)(k / 256) * sizeof(em_qx16_k); }

/* Symmetric 16-bit blocks of n values: q = round(x / d), d = max|x| / 32767; returns d and
 * the sum of the q. */
static float quant_block(const float *x, int n, int16_t *q, int32_t *sum) {
    float amax = 0;
    for (int i = 0; i < n; i++) {
        float a = x[i] < 0 ? -x[i] : x[i];
        amax = a > amax ? a : amax;
    }
    float d = amax / 32767.0f, id = d > 0 ? 1.0f / d : 0.0f;
    int32_t s = 0;
    for (int i = 0; i < n; i++) {
        q[i] = (int16_t)lrintf(x[i] * id);
        s += q[i];
    }
    *sum = s;
    return d;
}

void em_qx_quantize_16(const float *x, void *xq, int64_t k) {
    em_qx16 *b = xq;
    for (int64_t i = 0; i < k / 32; i++) {
        int32_t sum;
        b[i].d = quant_block(x + 32 * i, 32, b[i].q, &sum);
        b[i].s = b[i].d * (float)sum;
    }
}

void em_qx_quantize_16_k(const float *x, void *xq, int64_t k) {
    em_qx16_k *b = xq;
    for (int64_t i = 0; i < k / 256; i++) {
        int32_t total;
        b[i].d = quant_block(x + 256 * i, 256, b[i].q, &total);
        for (int g = 0; g < 8; g++) {
            int32_t s = 0;
            for (int j = 0; j < 32; j++) s += b[i].q[32 * g + j];
            b[i].sums[g] = s;
        }
    }
}

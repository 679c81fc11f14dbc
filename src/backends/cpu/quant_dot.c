/* The activation quantizers shared by every level of the quantized dot kernels, and the choice
 * of level. */
#include <math.h>
#include <string.h>

#include "backends/cpu/quant_dot.h"

EM_CPU_ISA_TABLE(em_qdot_isa, em_qdot_isa_get, [EM_ISA_GENERIC] = em_qdot_fill_generic,
                 [EM_ISA_AVX2] = EM_ISA_X86(em_qdot_fill_avx2))

const em_qdot_kernel *em_qdot_kernel_for(em_dtype wt) {
    const em_qdot_kernel *k = &em_qdot_isa_get()->kern[wt];
    return k->dot ? k : NULL;
}

size_t em_qx_row_bytes_8_0(int64_t k) { return (size_t)(k / 32) * sizeof(em_qx8_0); }
size_t em_qx_row_bytes_8_1(int64_t k) { return (size_t)(k / 32) * sizeof(em_qx8_1); }
size_t em_qx_row_bytes_8_k(int64_t k) { return (size_t)(k / 256) * sizeof(em_qx8_k); }

/* Symmetric 8-bit blocks of n values: q = round(x / d), d = max|x| / 127. Returns d. */
static float quant_block(const float *x, int n, int8_t *q) {
    float amax = 0;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    for (int i = 0; i < n; i++) q[i] = (int8_t)lrintf(x[i] * id);
    return d;
}

void em_qx_quantize_8_0(const float *x, void *xq, int64_t k) {
    em_qx8_0 *b = xq;
    for (int64_t i = 0; i < k / 32; i++) b[i].d = quant_block(x + 32 * i, 32, b[i].q);
}

void em_qx_quantize_8_1(const float *x, void *xq, int64_t k) {
    em_qx8_1 *b = xq;
    for (int64_t i = 0; i < k / 32; i++) {
        b[i].d = quant_block(x + 32 * i, 32, b[i].q);
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += b[i].q[j];
        b[i].s = b[i].d * (float)sum;
    }
}

void em_qx_quantize_8_k(const float *x, void *xq, int64_t k) {
    em_qx8_k *b = xq;
    for (int64_t i = 0; i < k / 256; i++) {
        b[i].d = quant_block(x + 256 * i, 256, b[i].q);
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += b[i].q[16 * g + j];
            b[i].bsums[g] = (int16_t)sum;
        }
    }
}

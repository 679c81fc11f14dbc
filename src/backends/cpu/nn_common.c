/* Shared pieces of the nn family's CPU kernels: the micro-kernel table for the CPU's kernel
 * level, strided loads into f32, and the family's registration. */
#include "backends/cpu/nn.h"

EM_CPU_ISA_TABLE(em_nn_isa, em_nn_isa_get, [EM_ISA_GENERIC] = em_nn_fill_generic,
                 [EM_ISA_AVX2] = EM_ISA_X86(em_nn_fill_avx2),
                 [EM_ISA_AVX512] = EM_ISA_X86(em_nn_fill_avx512))

void nn_load_f32(const em_ew_isa *isa, const void *base, em_dtype dt, int nd, const int64_t *shape,
                 const int64_t *strides, int64_t begin, int64_t count, float *dst) {
    if (count <= 0) return;
    if (nd == 0) {
        isa->load[dt](dst, base, 1, 1);
        return;
    }
    int64_t inner = shape[nd - 1], ist = strides[nd - 1];
    int64_t pos = begin;
    while (count > 0) {
        int64_t ii = pos % inner;
        int64_t off = nn_offset(nd - 1, shape, strides, pos / inner) + ii * ist;
        int64_t len = inner - ii < count ? inner - ii : count;
        isa->load[dt](dst, nn_at(base, dt, off), ist, len);
        dst += len;
        pos += len;
        count -= len;
    }
}

void em_cpu_register_nn(em_kernel_fn *k) {
    em_cpu_register_nn_norm(k);
    em_cpu_register_nn_rope(k);
    em_cpu_register_nn_attention(k);
    em_cpu_register_nn_paged_attention(k);
    em_cpu_register_nn_embedding(k);
}

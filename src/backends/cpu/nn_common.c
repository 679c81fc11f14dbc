/* Shared pieces of the nn family's CPU kernels: the micro-kernel table for the CPU's kernel
 * level, strided loads into f32, and the family's registration. */
#include "backends/cpu/nn.h"

static em_nn_isa nn_tables[3];
static pthread_once_t nn_once = PTHREAD_ONCE_INIT;

static void nn_init(void) {
    em_nn_fill_generic(&nn_tables[0]);
#if defined(__x86_64__)
    em_nn_fill_avx2(&nn_tables[1]);
    em_nn_fill_avx512(&nn_tables[2]);
#endif
}

const em_nn_isa *em_nn_isa_get(void) {
    pthread_once(&nn_once, nn_init);
#if defined(__x86_64__)
    return &nn_tables[em_cpu_level()];
#else
    return &nn_tables[0];
#endif
}

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
    em_cpu_register_nn_embedding(k);
}

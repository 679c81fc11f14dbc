/*
 * The native CPU backend: private interfaces shared by its files (feature detection, kernel
 * registration, element-wise engine). The thread pool its kernels run on is core's.
 */
#ifndef EMBER_CPU_H
#define EMBER_CPU_H

#include "core/tensor_impl.h"
#include "core/threadpool.h"

/* The CPU backend's entry in core's backend registry (src/backends/registry.c registers it). */
extern const em_backend_reg em_cpu_backend_reg;

/* ---- CPU features (detected once) ---- */
typedef struct em_cpu_features {
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512bf16, avx512vnni;
    bool amx_bf16;        /* AMX-TILE + AMX-BF16, with the OS's permission for tile state */
    bool neon, neon_bf16; /* aarch64: Advanced SIMD; FEAT_BF16 (BFDOT/BFMMLA) */
    int physical_cores;
} em_cpu_features;
const em_cpu_features *em_cpu_features_get(void);
void em_cpu_features_str(char *buf, size_t n);

/*
 * The instruction set the kernels use, chosen once per process: the best one the CPU and the OS
 * support, lowered by EMBER_CPU_LEVEL=generic|avx2|avx512|neon (for tests of the portable twins
 * and to reproduce the AVX2 path on an AVX-512 CPU). Code compiled for any other instruction
 * set (files *_avx2.c, *_avx512.c, *_neon.c) must never run: every kernel family reaches its
 * per-ISA code only through this choice, so nothing built with wider flags executes before it.
 */
typedef enum em_cpu_isa {
    EM_ISA_GENERIC = 0, /* portable C, built for the architecture's baseline */
    EM_ISA_AVX2 = 1,    /* x86-64: AVX2 + FMA + F16C */
    EM_ISA_AVX512 = 2,  /* x86-64: AVX-512 F/BW/VL/DQ (+BF16/VNNI where present) */
    EM_ISA_NEON = 3,    /* aarch64: Advanced SIMD (+BF16 where present) */
    EM_ISA_COUNT
} em_cpu_isa;
em_cpu_isa em_cpu_isa_get(void);
const char *em_cpu_isa_name(em_cpu_isa isa);
/* Whether the chosen instruction set has a native bf16 dot product (AVX-512 BF16 vdpbf16ps, or
 * NEON BFDOT): the kernels that use one, and the layouts packed for them, depend on it. */
bool em_cpu_bf16_dot(void);
/* Whether bf16 matrix products may use AMX tiles: the kernel level is avx512, the CPU has AMX
 * BF16 and Linux granted the tile state, and EMBER_CPU_AMX is not 0. */
bool em_cpu_amx(void);

/*
 * The one way a kernel family sets up its per-ISA table: fills[EM_ISA_GENERIC] (required, fills
 * every entry) runs first, then the fill of the chosen instruction set, or of the nearest one
 * below it that the family has (AVX-512 -> AVX2 -> generic; NEON -> generic); NULL entries are
 * sets the family has no variant for. Only fills the CPU can run are ever called.
 */
typedef void (*em_isa_fill_fn)(void *table);
void em_cpu_isa_fill(void *table, const em_isa_fill_fn fills[EM_ISA_COUNT]);
/* A per-ISA function for designated initialisers of `fills`: NULL on other architectures, where
 * the file defining it is not built. */
#if defined(__x86_64__)
#define EM_ISA_X86(fn) (fn)
#else
#define EM_ISA_X86(fn) NULL
#endif
#if defined(__aarch64__)
#define EM_ISA_ARM(fn) (fn)
#else
#define EM_ISA_ARM(fn) NULL
#endif
/*
 * Defines `const TYPE *GETTER(void)`, the family's table for the chosen instruction set, filled
 * once (thread-safe) by em_cpu_isa_fill from the designated initialisers given, e.g.
 *   EM_CPU_ISA_TABLE(em_ew_isa, em_ew_isa_get, [EM_ISA_GENERIC] = em_ew_fill_generic,
 *                    [EM_ISA_AVX2] = EM_ISA_X86(em_ew_fill_avx2))
 */
#define EM_CPU_ISA_TABLE(TYPE, GETTER, ...)                                                        \
    static TYPE GETTER##_table;                                                                    \
    static pthread_once_t GETTER##_once = PTHREAD_ONCE_INIT;                                       \
    static void GETTER##_init(void) {                                                              \
        static const em_isa_fill_fn fills[EM_ISA_COUNT] = {__VA_ARGS__};                           \
        em_cpu_isa_fill(&GETTER##_table, fills);                                                   \
    }                                                                                              \
    const TYPE *GETTER(void) {                                                                     \
        pthread_once(&GETTER##_once, GETTER##_init);                                               \
        return &GETTER##_table;                                                                    \
    }

/* ---- kernel registration (one function per op family) ---- */
void em_cpu_register_ew(em_kernel_fn *k);
void em_cpu_register_create(em_kernel_fn *k);
void em_cpu_register_reduce(em_kernel_fn *k);
void em_cpu_register_linalg(em_kernel_fn *k);
void em_cpu_register_nn(em_kernel_fn *k);
void em_cpu_register_index(em_kernel_fn *k);
void em_cpu_register_conv(em_kernel_fn *k);
void em_cpu_register_moe(em_kernel_fn *k);
/* adamw_step: the optimizer's update in one pass (adamw.c) */
void em_cpu_register_adamw(em_kernel_fn *k);
/* all_reduce, all_gather, reduce_scatter, all_to_all, ring_shift over MPI (collective.c) */
void em_cpu_register_collective(em_kernel_fn *k);
/* quantized weights (quant_ops.c): wraps linear, embedding and cast, so it registers last */
void em_cpu_register_quant(em_kernel_fn *k);

/*
 * Calls of one op that read the same input and can run as one parallel pass (compile mode's
 * plan groups them): `joins` says whether a call can be part of a group, `run` runs a group of
 * up to EM_CPU_GROUP_MAX joining calls with one output dtype, each output written exactly as
 * the op's kernel writes it. Registered per op by the kernel families, like the kernels.
 */
#define EM_CPU_GROUP_MAX 8
typedef struct em_cpu_group_fns {
    bool (*joins)(const em_kernel_args *a);
    em_status (*run)(const em_kernel_args *const *a, int n);
} em_cpu_group_fns;
/* The op's group functions, NULL when its calls do not group. */
const em_cpu_group_fns *em_cpu_group_get(em_op_id op);
void em_cpu_register_linalg_groups(em_cpu_group_fns *g);

/* Compile mode (plan.c): the backend table's program entries (em_backend.program_build). */
void *em_cpu_program_build(em_ctx *c, em_graph *g, em_device *dev, em_program_info *info);
em_status em_cpu_program_run(em_ctx *c, void *prog, em_tensor *const *in, em_tensor **out);
void em_cpu_program_free(void *prog);

/* Fused-mode evaluation of a lazy tensor (ew_engine.c). */
em_status em_cpu_eval_lazy(em_ctx *c, em_tensor *t);

/* ---- strided iteration helper for kernels ---- */
/* Offset (in elements) of linear index `i` of a tensor's logical order. */
static inline int64_t em_offset_of(const em_tensor *t, int64_t i) {
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t s = t->shape[d];
        off += (i % s) * t->strides[d];
        i /= s;
    }
    return off;
}

/* Reads element `i` (logical order) of any CPU tensor as double / int64. */
double em_cpu_get_f64(const em_tensor *t, int64_t i);
int64_t em_cpu_get_i64(const em_tensor *t, int64_t i);

/* A contiguous f32 copy of any tensor (caller frees), NULL on OOM. */
float *em_cpu_to_f32(const em_tensor *t);
/* Writes contiguous f32 values into a contiguous tensor of any floating dtype. */
void em_cpu_from_f32(em_tensor *t, const float *v);

#endif

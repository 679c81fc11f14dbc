/*
 * ember/kernel_abi.h — the C ABI of a kernel package: all a kernel author needs.
 *
 * A CPU kernel package is a shared library that exports two symbols:
 *
 *     const uint32_t ember_kernel_abi_version = EMBER_KERNEL_ABI_VERSION;
 *     const ember_kernel_library *ember_kernel_library_get(void);
 *
 * The library describes one or more implementations, each of one op of Ember's op table (named
 * as there: "add", "silu", "ragged_dot"), for a set of dtypes and modes, with a priority (the
 * built-in kernel has priority 0; higher wins), an optional `supports` predicate asked on every
 * call (declining a call is cheap and makes Ember use the next implementation, in the end the
 * built-in) and `run`. Everything crosses the boundary as the plain structs below; a package
 * never links against libember and never sees its internals.
 *
 *     static int my_silu(const ember_kernel_call *k, char *err, size_t err_n) { ... return 0; }
 *     static const ember_kernel_impl impls[] = {{
 *         .struct_size = sizeof(ember_kernel_impl), .op = "silu", .name = "silu_avx2",
 *         .dtypes = EMBER_KDT_BIT(EMBER_KDT_F32), .modes = EMBER_KERNEL_MODE_ALL,
 *         .priority = 10, .supports = NULL, .run = my_silu}};
 *     static const ember_kernel_library lib = {EMBER_KERNEL_ABI_VERSION,
 *         sizeof(ember_kernel_library), "my-kernels", 1, impls};
 *     EMBER_KERNEL_EXPORT const uint32_t ember_kernel_abi_version = EMBER_KERNEL_ABI_VERSION;
 *     EMBER_KERNEL_EXPORT const ember_kernel_library *ember_kernel_library_get(void) {
 *         return &lib;
 *     }
 *
 * Calls: inputs are in the op table's order (an absent optional input has data == NULL), as
 * the caller passed them: strides are in elements and may be anything a view produces (0 for
 * an expanded dimension), and an element-wise op's inputs broadcast NumPy-style to the output
 * (fewer or size-1 dimensions); decline in supports() what the kernel does not handle. Outputs
 * are freshly allocated, contiguous, and must be written entirely. Attributes come by
 * name, as in the op table's schema. `run` may be called from several threads at once (each
 * call with its own buffers); it returns 0, or nonzero after writing a message into err.
 *
 * Versioning: a change that breaks the layout of these structs raises EMBER_KERNEL_ABI_VERSION;
 * Ember refuses a library of another version, saying both numbers. Fields are only appended and
 * every struct starts with struct_size (or the version), so additions stay compatible.
 */
#ifndef EMBER_KERNEL_ABI_H
#define EMBER_KERNEL_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EMBER_KERNEL_ABI_VERSION 1u

#if defined(__GNUC__)
#define EMBER_KERNEL_EXPORT __attribute__((visibility("default")))
#else
#define EMBER_KERNEL_EXPORT
#endif

/** Element types, the same values as Ember's public em_dtype. Append-only. */
typedef enum ember_kernel_dtype {
    EMBER_KDT_F32 = 0,
    EMBER_KDT_BF16 = 1,
    EMBER_KDT_F16 = 2,
    EMBER_KDT_I64 = 3,
    EMBER_KDT_I32 = 4,
    EMBER_KDT_U8 = 5,
    EMBER_KDT_BOOL = 6,
    EMBER_KDT_F64 = 7,
    EMBER_KDT_I16 = 8,
    EMBER_KDT_I8 = 9
} ember_kernel_dtype;

#define EMBER_KDT_BIT(d) (1u << (unsigned)(d))

/** When an implementation may be used (bit set). */
enum {
    EMBER_KERNEL_MODE_INFERENCE = 1, /* eager calls without autodiff recording */
    EMBER_KERNEL_MODE_TRAINING = 2,  /* eager calls while autodiff records (forward and backward) */
    EMBER_KERNEL_MODE_COMPILE = 4,   /* steps of a compiled program */
    EMBER_KERNEL_MODE_ALL = 7
};

#define EMBER_KERNEL_MAX_DIMS 8

/** A tensor argument. */
typedef struct ember_kernel_tensor {
    void *data;                             /* the first element (offset applied); NULL: absent */
    int32_t dtype;                          /* ember_kernel_dtype */
    int32_t ndim;                           /* 0..EMBER_KERNEL_MAX_DIMS */
    int64_t shape[EMBER_KERNEL_MAX_DIMS];   /* elements per dimension */
    int64_t strides[EMBER_KERNEL_MAX_DIMS]; /* in elements, not bytes */
} ember_kernel_tensor;

enum { EMBER_KATTR_INT = 0, EMBER_KATTR_FLOAT = 1, EMBER_KATTR_BOOL = 2, EMBER_KATTR_INTS = 3,
       EMBER_KATTR_DTYPE = 4 };

/** An attribute, named as in the op table's schema. */
typedef struct ember_kernel_attr {
    const char *name;
    int32_t type;        /* EMBER_KATTR_* */
    int32_t n;           /* ints: number of values */
    int64_t i;           /* int, bool (0/1), dtype */
    double f;            /* float */
    const int64_t *ints; /* ints: n values */
} ember_kernel_attr;

/** One call. Valid only during supports() or run(). */
typedef struct ember_kernel_call {
    uint32_t struct_size; /* sizeof(ember_kernel_call) of the caller */
    const char *op;       /* the op's name */
    int32_t mode;         /* one EMBER_KERNEL_MODE_* bit */
    int32_t n_in, n_out, n_attrs;
    const ember_kernel_tensor *in;
    const ember_kernel_tensor *out; /* during supports(): shapes and dtypes, data NULL */
    const ember_kernel_attr *attrs;
    int32_t n_threads; /* threads the caller would use for this op; the kernel may use fewer */
    /* Ember's thread pool: runs fn(user, begin, end, thread) over [0, n) in chunks of at least
     * `grain` and returns when all are done (inline when small, or when called from a pool
     * thread). Set during run() only; NULL during supports(). */
    void (*parallel_for)(int64_t n, int64_t grain,
                         void (*fn)(void *user, int64_t begin, int64_t end, int thread),
                         void *user);
    /* The instruction set Ember's own CPU kernels run at in this process, as the hub's variant
     * names spell it: "generic", "avx2", "avx512", "avx512bf16", "neon", "neonbf16"
     * (EMBER_CPU_LEVEL may have lowered it). A package built for a narrower set than this can
     * decline in supports() when the built-in kernel at this level is the faster one. Present
     * when struct_size covers it (appended after ABI 1's first release); a static string. */
    const char *cpu_level;
} ember_kernel_call;

/** One implementation of one op. */
typedef struct ember_kernel_impl {
    uint32_t struct_size; /* sizeof(ember_kernel_impl) */
    const char *op;       /* op-table name */
    const char *name;     /* unique in the library, for listings: "silu_avx2" */
    uint32_t dtypes;      /* EMBER_KDT_BIT of each dtype of the first input it handles */
    uint32_t modes;       /* EMBER_KERNEL_MODE_* bits */
    int32_t priority;     /* > 0 to win over the built-in (0) */
    /* Nonzero when this implementation will run the call; NULL: every call of its dtypes. */
    int (*supports)(const ember_kernel_call *call);
    /* Runs the call: 0, or nonzero with a message in err[0..err_n). */
    int (*run)(const ember_kernel_call *call, char *err, size_t err_n);
} ember_kernel_impl;

/** What ember_kernel_library_get returns; static data of the library. */
typedef struct ember_kernel_library {
    uint32_t abi_version; /* EMBER_KERNEL_ABI_VERSION the library was built with */
    uint32_t struct_size; /* sizeof(ember_kernel_library) */
    const char *name;     /* the package's name */
    int32_t n_impls;
    const ember_kernel_impl *impls;
} ember_kernel_library;

typedef const ember_kernel_library *(*ember_kernel_library_get_fn)(void);

#ifdef __cplusplus
}
#endif
#endif

/*
 * Private layout of tensors, storages, devices, backends and the context.
 */
#ifndef EMBER_TENSOR_IMPL_H
#define EMBER_TENSOR_IMPL_H

#include <stdatomic.h>
#include <pthread.h>

#include "ember/core.h"
#include "ember/tensor.h"
#include "core/op_table.h"

/* ---- dtype traits ---- */
typedef struct em_dtype_traits {
    const char *name;
    size_t size;  /* bytes per element; per block for quantized dtypes */
    bool is_float;
    bool is_signed;
    int block;    /* elements per block: 1, or 32 / 256 for the quantized dtypes */
} em_dtype_traits;
extern const em_dtype_traits em_dtype_table[EM_DTYPE_COUNT];

static inline size_t em_esize(em_dtype t) { return em_dtype_table[t].size; }
static inline bool em_is_quant(em_dtype t) { return em_dtype_table[t].block > 1; }
/* Bytes of n consecutive elements (n a multiple of the block size for quantized dtypes). */
static inline size_t em_dtype_nbytes(em_dtype t, int64_t n) {
    return (size_t)(n / em_dtype_table[t].block) * em_dtype_table[t].size;
}

/* ---- storage ---- */
typedef struct em_storage em_storage;
#define EM_STORAGE_INLINE_BYTES 64

struct em_storage {
    atomic_int refcount;
    atomic_uint version; /* bumped by in-place writes (assign); fused chains check it */
    em_device *dev;
    void *data;     /* host pointer (CPU) or backend handle */
    size_t nbytes;  /* bytes usable at data */
    size_t alloc_nbytes; /* bytes obtained from the allocator (0: not from the allocator) */
    void (*release)(void *user_data); /* borrowed memory: called at the last reference */
    void *release_ud;
    _Alignas(64) unsigned char inline_buf[EM_STORAGE_INLINE_BYTES];
};

/* A pending fused-mode expression (see backends/cpu/fused.c). */
typedef struct em_lazy {
    em_op_id op;
    int n_in;
    em_tensor *in[3];
    unsigned in_version[3]; /* storage versions of non-lazy inputs when the node was made */
    em_attr attrs[EM_MAX_ATTRS];
    int depth; /* nodes in the expression tree below and including this one */
} em_lazy;

struct em_tensor {
    atomic_int refcount;
    em_dtype dtype;
    int ndim;
    int64_t numel;
    int64_t shape[EM_MAX_DIMS];
    int64_t strides[EM_MAX_DIMS]; /* elements */
    int64_t offset;               /* elements */
    em_device *dev;
    em_storage *storage; /* NULL while lazy or symbolic */
    em_lazy *lazy;
    int sym; /* compile mode: 1 + the graph value this tensor stands for while tracing; 0 else */
    /* autodiff (ops/autodiff.c): a leaf whose gradient is wanted; the gradient (owned); the tape
     * node that produced this tensor while grad was enabled (owned by the context's tape, which
     * holds a reference to the tensor, and cleared when the tape is) */
    bool requires_grad;
    em_tensor *grad;
    struct em_grad_node *node;
};

/* ---- backends and devices ---- */
typedef struct em_graph em_graph; /* compile mode's graph IR (core/graph.h) */

/* What a backend's program made of a graph, for em_compile_stats. */
typedef struct em_program_info {
    char kind[16];      /* "cpu-plan", "pjrt" */
    int kernels;        /* kernel calls per run (0: one executable) */
    int grouped;        /* calls that run in groups sharing their input (one pass each group) */
    int fused_groups;   /* element-wise expressions evaluated in one pass */
    int fused_nodes;    /* nodes computed inside those expressions (no buffer of their own) */
    int64_t arena_bytes, unplanned_bytes; /* intermediate memory with and without reuse */
} em_program_info;

typedef struct em_backend {
    size_t struct_size;
    const char *platform;
    bool host_accessible; /* storage->data is a host pointer */
    /* raw memory; the caching allocator sits on top */
    void *(*raw_alloc)(em_device *d, size_t nbytes);
    void (*raw_free)(em_device *d, void *p, size_t nbytes);
    /* copies between host memory and a storage (byte offsets) */
    em_status (*write)(em_ctx *c, em_storage *s, size_t off, const void *src, size_t n);
    em_status (*read)(em_ctx *c, em_storage *s, size_t off, void *dst, size_t n);
    em_status (*sync)(em_ctx *c, em_device *d);
    em_status (*query)(const em_device *d, em_device_info *out);
    /* fused mode: evaluates a lazy tensor into its (already allocated) storage; NULL = no fusion */
    em_status (*eval_lazy)(em_ctx *c, em_tensor *t);
    /* the built-in kernels, indexed by op id; NULL = unsupported on this backend. The backend
     * fills them and attaches them to the kernel registry (core/kernel_registry.h), which
     * publishes in kset[op] every implementation of the op, built-in and hub, best first:
     * callers pick from kset, never from this table. */
    em_kernel_fn kernels[EM_OP_COUNT];
    const struct em_kset *_Atomic kset[EM_OP_COUNT];
    /* Optional, for devices whose storages are not host memory (PJRT); NULL = use write/read.
     * upload: fills fresh contiguous t from contiguous host data of t's dtype and shape.
     * download: copies any tensor of the device (views included) to contiguous host memory.
     * copy: copies x into dst, a fresh contiguous tensor on another device of the same backend;
     *       returns EM_ERR_UNSUPPORTED without recording an error when it cannot. */
    em_status (*upload)(em_ctx *c, em_tensor *t, const void *src);
    em_status (*download)(em_ctx *c, em_tensor *t, void *dst);
    em_status (*copy)(em_ctx *c, em_tensor *x, em_tensor *dst);
    /* Compile mode, optional (NULL: functions traced on this backend's devices cannot run).
     * program_build lowers a traced graph whose values live on `dev` (passes done, n_uses
     * counted, constant nodes marked) into a program and describes it in *info; NULL with an
     * error naming the node that cannot be lowered. The graph outlives the program; the build
     * may annotate its nodes. program_run reads in[] (the graph inputs, any layout) and hands
     * the caller n_outputs new tensors in out[]; captured tensors the graph writes see the
     * writes afterwards, as in eager mode. */
    void *(*program_build)(em_ctx *c, em_graph *g, em_device *dev, em_program_info *info);
    em_status (*program_run)(em_ctx *c, void *prog, em_tensor *const *in, em_tensor **out);
    void (*program_free)(void *prog);
    /* a compile-only device (tpu-aot:): tensors have shapes, no values; programs compile,
     * nothing runs, so nothing can be read back or checked by value */
    bool no_values;
} em_backend;

#define EM_ALLOC_CLASSES 256
typedef struct em_alloc_block {
    struct em_alloc_block *next;
    void *ptr;
} em_alloc_block;

typedef struct em_allocator {
    pthread_mutex_t lock;
    em_alloc_block *free_lists[EM_ALLOC_CLASSES];
    em_alloc_block *spare_blocks; /* recycled list nodes */
    int64_t in_use, cached, cache_limit;
} em_allocator;

struct em_device {
    const em_backend *be;
    char name[64];
    int index;
    void *impl;
    em_allocator alloc;
};

/* ---- context ---- */
typedef struct em_scope {
    em_tensor **items;
    int len, cap;
} em_scope;

/* What is being dispatched right now, for error messages. */
typedef struct em_call_info {
    const char *op;
    const char *file;
    int line;
    em_tensor *const *in;
    int n_in;
    const em_device *dev;
} em_call_info;

/*
 * Compile mode: while a function is traced, the context holds the tracer's hooks and its state
 * (compile/trace.c installs both). Core and the dispatcher reach the tracer only through them.
 */
typedef struct em_tracer {
    /* Records an op call into the trace instead of running it; outs receive symbolic tensors
     * (caller-owned). Returns the number of outputs or -1 with an error. */
    int (*record)(em_ctx *c, const em_op_def *op, em_tensor *const *in, int n_in,
                  const em_attr *attrs, const em_meta *metas, int n_out, em_tensor **outs);
    /* Reports that `what` needs the values of a symbolic tensor of the trace (a host read or a
     * device copy inside the traced function). Returns the recorded status. */
    em_status (*value_needed)(em_ctx *c, const em_tensor *t, const char *what);
} em_tracer;

struct em_ctx {
    em_error err;
    em_eager_mode mode;
    em_device *device;
    em_scope *scopes;
    int depth, scope_cap;
    em_call_info cur;
    const em_tracer *tracer; /* compile mode: the hooks of the trace being recorded, or NULL */
    void *trace;             /* ... and the trace itself (the tracer's own state) */
    /* autodiff: whether op calls are recorded (one branch in the dispatcher when off), the tape
     * (ops/autodiff.c's state) and how to free it (core does not know its type) */
    bool grad_on;
    void *tape;
    void (*tape_free)(em_ctx *c);
    /* collective ops issued through ember/dist.h (src/dist counts them): em_checkpoint learns
     * from it whether its region joins other ranks, whose backward every rank must then run */
    uint64_t collectives;
};

/* Reports that `what` needs the values of symbolic tensor t: the tracer says why it cannot
 * while a function is traced; otherwise t escaped its compiled function. Returns the status. */
em_status em_sym_value_needed(em_ctx *c, const em_tensor *t, const char *what);

/* ---- internal API ---- */
/* tensors */
em_tensor *em_tensor_alloc_meta(em_dtype dtype, int ndim, const int64_t *shape); /* no storage */
void em_tensor_set_contiguous_strides(em_tensor *t);
em_storage *em_storage_new(em_ctx *c, em_device *d, size_t nbytes);
void em_storage_retain(em_storage *s);
void em_storage_release(em_storage *s);
/* Allocates storage for a contiguous tensor created by em_tensor_alloc_meta. */
em_status em_tensor_alloc_storage(em_ctx *c, em_tensor *t, em_device *d);
/* New tensor with storage: the full creation path. Records an error and returns NULL on failure.
 * The result is owned by the caller (not in a scope). */
em_tensor *em_tensor_new(em_ctx *c, em_device *d, em_dtype dtype, int ndim, const int64_t *shape);
/* A view of `base` with the given geometry, sharing its storage (caller-owned). */
em_tensor *em_tensor_view_of(em_tensor *base, int ndim, const int64_t *shape,
                             const int64_t *strides, int64_t offset);
/* Host pointer to element 0 (CPU storages only). */
static inline void *em_tensor_ptr(const em_tensor *t) {
    return (char *)t->storage->data + em_dtype_nbytes(t->dtype, t->offset);
}
bool em_is_contiguous(const em_tensor *t);
/* Copies the elements of a host-accessible tensor in logical order into contiguous dst. */
void em_gather_strided(const em_tensor *t, void *dst);
/* Makes sure the tensor holds values (evaluates pending fused work). */
em_status em_tensor_materialize(em_ctx *c, em_tensor *t);
/* Checked size arithmetic: numel of a shape and its byte size; false on overflow. */
bool em_shape_numel(const int64_t *shape, int ndim, int64_t *out);

/* scopes */
em_tensor *em_scope_add(em_ctx *c, em_tensor *t); /* hands a caller-owned ref to the scope */

/* errors: record without an op context (library code outside the dispatcher) */
em_status em_fail_at(em_ctx *c, em_status s, const char *op, const char *file, int line,
                     const char *fmt, ...) __attribute__((format(printf, 6, 7)));
#define EM_FAIL(c, s, op, ...) em_fail_at((c), (s), (op), __FILE__, __LINE__, __VA_ARGS__)

/* allocator */
void em_allocator_init(em_allocator *a, int64_t cache_limit);
void *em_allocator_alloc(em_device *d, size_t nbytes, size_t *got);
void em_allocator_free(em_device *d, void *p, size_t got);
void em_allocator_empty(em_device *d);

/* devices */
em_device *em_device_register(em_device *d); /* takes ownership; returns d or NULL if full */

/* ---- the backend registry (core/backend_registry.c) ---- */
/* What a backend tells core about itself. Core knows backends only through these entries:
 * src/backends/registry.c registers the built-in ones before main runs. */
typedef struct em_backend_reg {
    size_t struct_size; /* sizeof(em_backend_reg): an entry of another layout is refused */
    const char *name;   /* "cpu", "pjrt", ... */
    /* Device-name prefixes the backend opens, NULL-terminated: "xla" matches "xla" and "xla:N";
     * a prefix that ends in ':' ("pjrt:") matches every name that starts with it. */
    const char *const *prefixes;
    /* Finds or opens device `name`: NULL without an error when the backend has no such device,
     * NULL with an error in c when it should have one but cannot open it. `tried` collects the
     * places looked at for the caller's message. Also asked, in registration order, for names
     * no prefix claims (a backend may learn prefixes at run time, e.g. em_pjrt_open's). */
    em_device *(*open)(em_ctx *c, const char *name, char *tried, size_t tried_n);
    /* The backend's device whose storages are host memory, created on the first call; NULL
     * when it has none. The first registered backend with one provides em_device_host(). */
    em_device *(*host_device)(void);
} em_backend_reg;
/* Adds a backend (kept by pointer, never removed). Returns false, saying why on stderr, when
 * the registry is full or the entry has another layout. */
bool em_backend_register(const em_backend_reg *r);
/* The host's device (the CPU backend's): every context's default device, and where borrowed
 * host memory lives. Never NULL once a backend with a host device is registered. */
em_device *em_device_host(void);
/* Asks the registered backends for device `name` (as em_backend_reg.open). */
em_device *em_backend_open(em_ctx *c, const char *name, char *tried, size_t tried_n);

/* dtype conversion of n contiguous elements between any two dtypes, from a quantized dtype too
 * (n then a multiple of its block size); never to a quantized one */
void em_convert(const void *src, em_dtype st, void *dst, em_dtype dt, int64_t n);
/* Dequantization (core/quant.c), exactly as gguf.quants.dequantize computes it in f32: n
 * elements (a multiple of the block size) of quantized dtype t at src (any alignment). */
void em_dequantize(em_dtype t, const void *src, float *dst, int64_t n);
/* The same, rounded to dt (f32, bf16, f16, f64) */
void em_dequantize_to(em_dtype t, const void *src, void *dst, em_dtype dt, int64_t n);
/* Reads element i of a contiguous array of dtype t as double / writes it. */
double em_load_f64(const void *p, em_dtype t, int64_t i);
void em_store_f64(void *p, em_dtype t, int64_t i, double v);

#endif

/*
 * The op vocabulary: the op table (see op_list.h), attributes, output metas, shape rules and
 * the kernel signature. Core owns it so that every layer above (the dispatcher, the backends,
 * compile mode) speaks of ops in the same terms; running an op is the dispatcher's business
 * (ops/dispatch.h).
 */
#ifndef EMBER_OP_TABLE_H
#define EMBER_OP_TABLE_H

#include "ember/core.h"
#include "ember/tensor.h"
#include "core/op_list.h"

typedef enum em_op_id {
#define EM_X_ENUM(id, name, kind, min_in, max_in, nout, schema, rule) EM_OP_##id,
    EM_OP_LIST(EM_X_ENUM)
#undef EM_X_ENUM
        EM_OP_COUNT
} em_op_id;

typedef enum em_op_kind {
    EM_OPK_CREATE,
    EM_OPK_VIEW,
    EM_OPK_EW,
    EM_OPK_REDUCE,
    EM_OPK_OTHER
} em_op_kind;

typedef enum em_attr_type {
    EM_ATTR_INT,
    EM_ATTR_FLOAT,
    EM_ATTR_BOOL,
    EM_ATTR_INTS,
    EM_ATTR_DTYPE
} em_attr_type;

#define EM_MAX_ATTRS 8
#define EM_MAX_INPUTS 64
#define EM_MAX_OUTPUTS 64
#define EM_ATTR_INTS_MAX 16

/* One attribute value. int, bool and dtype live in `i`; float in `f`; ints in `v[0..n)`. */
typedef struct em_attr {
    int64_t i;
    double f;
    int n;
    int64_t v[EM_ATTR_INTS_MAX];
} em_attr;

/* Output description produced by a shape rule. */
typedef struct em_meta {
    em_dtype dtype;
    int ndim;
    int64_t shape[EM_MAX_DIMS];
} em_meta;

typedef struct em_op_def em_op_def;

/* Checks the call and fills out[0..*n_out). Reports problems with em_op_fail and returns it. */
typedef em_status (*em_rule_fn)(em_ctx *c, const em_op_def *op, em_tensor *const *in, int n_in,
                                const em_attr *attrs, em_meta *out, int *n_out);

struct em_op_def {
    em_op_id id;
    const char *name;
    em_op_kind kind;
    int min_in, max_in, n_out;
    const char *schema;
    em_rule_fn rule;
    /* parsed schema */
    int n_attrs;
    char attr_names[EM_MAX_ATTRS][24];
    em_attr_type attr_types[EM_MAX_ATTRS];
};

/* Arguments of a kernel call. Outputs are allocated, contiguous, on the inputs' device. */
typedef struct em_kernel_args {
    em_ctx *ctx;
    const em_op_def *op;
    em_tensor *const *in; /* n_in entries; optional ones may be NULL */
    int n_in;
    em_tensor **out;
    int n_out;
    const em_attr *attrs;
} em_kernel_args;

typedef em_status (*em_kernel_fn)(const em_kernel_args *a);

/* The table. */
const em_op_def *em_op_get(em_op_id id);
/* Lookup by name; NULL if unknown. */
const em_op_def *em_op_find(const char *name);
/* Index of attribute `name` in the op's schema, -1 if absent. */
int em_op_attr_index(const em_op_def *op, const char *name);

/*
 * Records an error for the op being dispatched (used by rules and kernels). The message names
 * the op, its inputs' signatures, the device and the caller's source position. Returns s.
 */
em_status em_op_fail(em_ctx *c, em_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- helpers for rules ---- */
/* Normalises a possibly negative dim against ndim; reports an error (naming `what`) if out of
 * range. Returns false on error. */
bool em_rule_dim(em_ctx *c, int64_t dim, int ndim, const char *what, int *out);
/* Formats a shape "[2,3]" into buf. */
char *em_shape_str(const int64_t *shape, int ndim, char *buf, size_t n);
/* NumPy broadcasting of n shapes; false with an error naming the shapes if they do not fit. */
bool em_broadcast_shapes(em_ctx *c, em_tensor *const *in, int n, em_meta *out);
/* torch's result_type for a set of tensors (0-d tensors count less than dimensioned ones). */
em_dtype em_promote_types(em_tensor *const *in, int n);

/* The geometry of a VIEW op's outputs over x's memory (core/views.c): strides and offset per
 * output. *copy: the op is a reshape the layout does not allow, which eager does as a
 * contiguous copy followed by a view of it (st/off then unset). Errors through em_op_fail. */
em_status em_view_geometry(em_ctx *c, const em_op_def *op, const em_tensor *x,
                           const em_attr *attrs, const em_meta *m, int n_out,
                           int64_t (*st)[EM_MAX_DIMS], int64_t *off, bool *copy);
/* Strides that view x's memory with `shape` without copying (torch's computeStride); false
 * when the layout does not allow it. */
bool em_view_strides(const em_tensor *x, int ndim, const int64_t *shape, int64_t *st);

#endif

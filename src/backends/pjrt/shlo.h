/*
 * A small StableHLO text builder: every statement is printed in MLIR's generic op form
 * (`%v3 = "stablehlo.add"(%v1, %v2) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>`), which
 * every StableHLO version parses the same way. Values carry their types; the builder infers
 * result types for the ops it offers, so emitters never spell a type twice.
 *
 * Errors (out of memory, a shape that cannot be right) are sticky: after one, every call returns
 * an invalid value and sh_finish returns NULL with the reason in b->err.
 */
#ifndef EMBER_PJRT_SHLO_H
#define EMBER_PJRT_SHLO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/core.h"

/* Element types: Ember's dtypes plus the unsigned types that bit tricks need. */
typedef enum sh_elem {
    SH_F32,
    SH_BF16,
    SH_F16,
    SH_F64,
    SH_I64,
    SH_I32,
    SH_I16,
    SH_I8,
    SH_U8,
    SH_I1,
    SH_U32,
    SH_U64,
    SH_ELEM_COUNT
} sh_elem;

sh_elem sh_elem_of(em_dtype t);
const char *sh_elem_name(sh_elem e);
bool sh_elem_is_float(sh_elem e);
bool sh_elem_is_int(sh_elem e); /* signed or unsigned integers, not i1 */
bool sh_elem_is_unsigned(sh_elem e);

typedef struct sh_type {
    sh_elem e;
    int nd;
    int64_t d[EM_MAX_DIMS];
} sh_type;

/* A value: %v<id> or, for multi-result ops, %v<id>#<sub>. id < 0: invalid (after an error). */
typedef struct sh_val {
    int id, sub;
    sh_type t;
} sh_val;

#define SH_MAX_PARAMS 64
#define SH_MAX_RESULTS 64

typedef struct sh_b {
    char *body;
    size_t len, cap;
    int next;
    int n_params;
    sh_type params[SH_MAX_PARAMS];
    char err[256];
    char *funcs; /* functions the module defines after @main (kernel-hub snippets), or NULL */
    int n_funcs;
} sh_b;

void sh_init(sh_b *b);
void sh_free(sh_b *b);
bool sh_ok(const sh_b *b);
/* Records an error (first one wins). */
void sh_fail(sh_b *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

sh_type sh_ty(sh_elem e, int nd, const int64_t *d);
sh_type sh_ty_with(sh_type t, sh_elem e); /* same shape, other element type */
sh_type sh_scalar_ty(sh_elem e);
int64_t sh_numel(const sh_type *t);
bool sh_same_shape(const sh_type *a, const sh_type *b);

/* A function parameter (in order of creation). */
sh_val sh_param(sh_b *b, sh_type t);
/* The module text with `results` returned from @main; malloc'd, caller frees. */
char *sh_finish(sh_b *b, const sh_val *results, int n);

/* Adds a function definition (MLIR text of one func.func) to the module after @main; returns
 * its number in this module (for unique symbol names), -1 after an error. */
int sh_add_func(sh_b *b, const char *text);
/* The functions added so far ("" for none). */
const char *sh_funcs(const sh_b *b);
/* %r = func.call @callee(ops) : one result of type rt. */
sh_val sh_call(sh_b *b, const char *callee, const sh_val *ops, int n, sh_type rt);

/* ---- generic statements ---- */
/* `name`(ops) {attrs} : (types) -> rt ; attrs may be NULL. */
sh_val sh_op(sh_b *b, const char *name, const sh_val *ops, int n, const char *attrs, sh_type rt);

/* ---- constants ---- */
/* A splat constant of type t (value converted to the element type; hex bit patterns for floats,
 * so infinities and NaN are exact). */
sh_val sh_const(sh_b *b, sh_type t, double v);
sh_val sh_const_i(sh_b *b, sh_type t, int64_t v); /* exact for 64-bit integers */
sh_val sh_const_u(sh_b *b, sh_type t, uint64_t v);
/* Constant 1-D tensor of int64 values. */
sh_val sh_const_vec_i64(sh_b *b, const int64_t *v, int n);
sh_val sh_zeros_like(sh_b *b, sh_val x);
/* A constant of shape d from n row-major values (floats as exact hex, integers in decimal). */
sh_val sh_const_vec(sh_b *b, sh_elem e, const double *v, int nd, const int64_t *d);

/* ---- element-wise ---- */
sh_val sh_un(sh_b *b, const char *op, sh_val x);            /* "exponential", "negate", ... */
sh_val sh_bin(sh_b *b, const char *op, sh_val x, sh_val y); /* "add", "maximum", ... */
/* dir: EQ NE LT LE GT GE; type chosen from the element type (FLOAT / SIGNED / UNSIGNED). */
sh_val sh_cmp(sh_b *b, const char *dir, sh_val x, sh_val y);
sh_val sh_select(sh_b *b, sh_val pred, sh_val on_true, sh_val on_false);
sh_val sh_convert(sh_b *b, sh_val x, sh_elem e); /* no-op when already e */
sh_val sh_bitcast(sh_b *b, sh_val x, sh_elem e); /* same width */
/* "max_nan" / "min_nan": maximum / minimum where a NaN on either side wins (XLA's own
 * maximum may drop NaN on some backends); any other op name: sh_bin. */
sh_val sh_nan_aware(sh_b *b, const char *op, sh_val x, sh_val y);
/* x op scalar constant */
sh_val sh_bin_c(sh_b *b, const char *op, sh_val x, double v);

/* ---- shapes ---- */
sh_val sh_reshape(sh_b *b, sh_val x, int nd, const int64_t *d);
sh_val sh_transpose(sh_b *b, sh_val x, const int *perm);
/* broadcast_in_dim: operand dim i goes to result dim map[i]. */
sh_val sh_bcast_in_dim(sh_b *b, sh_val x, const int *map, int nd, const int64_t *d);
/* NumPy broadcast (right-aligned) to shape d. */
sh_val sh_bcast_to(sh_b *b, sh_val x, int nd, const int64_t *d);
sh_val sh_slice(sh_b *b, sh_val x, const int64_t *start, const int64_t *limit,
                const int64_t *stride);
/* Slice of dim `dim` only. */
sh_val sh_slice_dim(sh_b *b, sh_val x, int dim, int64_t start, int64_t limit, int64_t stride);
sh_val sh_concat(sh_b *b, const sh_val *xs, int n, int dim);
sh_val sh_pad(sh_b *b, sh_val x, sh_val pad_value, const int64_t *lo, const int64_t *hi,
              const int64_t *interior);
sh_val sh_iota(sh_b *b, sh_type t, int dim);
sh_val sh_dynamic_update_slice(sh_b *b, sh_val x, sh_val upd, const sh_val *idx);
/* x[idx[0]:+sizes[0], ...] (idx: one rank-0 integer per dim, clamped into range). */
sh_val sh_dynamic_slice(sh_b *b, sh_val x, const sh_val *idx, const int64_t *sizes);

/* A counted loop: for (i = 0; i < n; i++) body(i, vals) with the nv values carried (updated in
 * place by body). The body sees only i, the carried values and constants it makes. */
typedef void (*sh_body_fn)(sh_b *b, sh_val i, sh_val *vals, int nv, void *user);
void sh_for(sh_b *b, int64_t n, sh_val *vals, int nv, sh_body_fn body, void *user);

/* ---- reductions ---- */
/* reduce over dims with a body that applies `body_op` ("add", "maximum", "multiply", "and",
 * "or", "minimum", "max_nan", "min_nan") to the accumulated and the new value. */
sh_val sh_reduce(sh_b *b, sh_val x, sh_val init, const int *dims, int ndims, const char *body_op);
/* reduce_window without padding (pad first with sh_pad). */
sh_val sh_reduce_window(sh_b *b, sh_val x, sh_val init, const int64_t *win, const int64_t *stride,
                        const char *body_op);
/* Arg-reduction along one dim: returns the (value, index) pair with the best value (largest for
 * max, smallest otherwise); NaN counts as best, ties and NaNs go to the first index. idx_e is
 * the index element type. Writes both results. */
void sh_argreduce(sh_b *b, sh_val x, int dim, bool max, sh_elem idx_e, sh_val *val, sh_val *idx);

/* A cross-replica collective `name` ("stablehlo.all_reduce", ...) of x with result type rt:
 * with a reduction body applying body_op ("add", "maximum") when body_op is set, and the
 * attributes (replica_groups, dims) as given. */
sh_val sh_collective(sh_b *b, const char *name, sh_val x, const char *body_op,
                     const char *attrs, sh_type rt);

/* ---- linear algebra ---- */
/* dot_general with the given batching and contracting dims; the result element type is `re`
 * (accumulation type on the way: XLA takes it as the output type). */
sh_val sh_dot(sh_b *b, sh_val x, sh_val y, const int *lb, const int *rb, int nb, const int *lc,
              const int *rc, int nc, sh_elem re);

/* ---- indexing ---- */
/* gather with explicit dimension numbers (lists of ints). */
typedef struct sh_gather_dims {
    int offset_dims[EM_MAX_DIMS], n_offset;
    int collapsed[EM_MAX_DIMS], n_collapsed;
    int operand_batching[EM_MAX_DIMS], n_operand_batching;
    int start_batching[EM_MAX_DIMS], n_start_batching;
    int start_index_map[EM_MAX_DIMS], n_start_index_map;
    int index_vector_dim;
    int64_t slice_sizes[EM_MAX_DIMS];
} sh_gather_dims;
sh_val sh_gather(sh_b *b, sh_val x, sh_val idx, const sh_gather_dims *g, sh_type rt);

typedef struct sh_scatter_dims {
    int update_window[EM_MAX_DIMS], n_update_window;
    int inserted_window[EM_MAX_DIMS], n_inserted_window;
    int input_batching[EM_MAX_DIMS], n_input_batching;
    int indices_batching[EM_MAX_DIMS], n_indices_batching;
    int to_operand[EM_MAX_DIMS], n_to_operand;
    int index_vector_dim;
} sh_scatter_dims;
/* scatter; body_op NULL: replace (the update wins), else "add" etc. */
sh_val sh_scatter(sh_b *b, sh_val x, sh_val idx, sh_val upd, const sh_scatter_dims *s,
                  const char *body_op);

/* The slices of x at `idx` along dim (np.take(x, idx, axis=dim); torch's index_select and
 * embedding): the result has x's dims with `dim` replaced by idx's dims. idx holds integers,
 * any rank; out-of-range values clamp (XLA gather semantics). */
sh_val sh_take_along(sh_b *b, sh_val x, sh_val idx, int dim);
/* The inverse (torch's index_copy_ / index_add_): x with its slice idx[i] along dim replaced
 * (body_op NULL) or combined by body_op ("add") with slice i of upd along dim. idx holds n
 * integers (0-d or 1-d); upd has x's dims but n at dim. Out-of-range indices are dropped; with
 * duplicates, which replacement wins is unspecified. */
sh_val sh_scatter_along(sh_b *b, sh_val x, sh_val idx, sh_val upd, int dim, const char *body_op);

/* Stable sort of `n` operands along dim, ordered by operand 0 (descending or not; NaN sorts as
 * the largest value, as torch). Results written to out[0..n). */
void sh_sort(sh_b *b, const sh_val *ops, int n, int dim, bool descending, sh_val *out);

/* Writes a comma-separated int list into buf ("1, 2"); returns buf. */
char *sh_ints(char *buf, size_t n, const int64_t *v, int k);
char *sh_dims(char *buf, size_t n, const int *v, int k);

#endif

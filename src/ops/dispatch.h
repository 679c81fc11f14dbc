/* Internal dispatcher entry points and helpers for the public op wrappers (ops/api_*.c). */
#ifndef EMBER_DISPATCH_H
#define EMBER_DISPATCH_H

#include <string.h>

#include "core/tensor_impl.h"

/*
 * Runs an op like em_op_run but hands the outputs to the caller (not to a scope). Returns the
 * number of outputs, or -1 with an error recorded.
 */
int em_op_exec(em_ctx *c, const char *file, int line, em_op_id id, em_tensor *const *in, int n_in,
               const em_attr *attrs, em_tensor **outs, int max_out);

/*
 * The eager dispatcher: validates, infers, allocates, runs (or defers, in fused mode) and puts
 * the outputs into the context's scope. Returns the first output (others in outs[1..]) or NULL.
 * `outs` may be NULL for single-output ops; otherwise it must hold max_out entries.
 * `n_out_actual` (may be NULL) receives the number of outputs.
 */
em_tensor *em_op_run(em_ctx *c, const char *file, int line, em_op_id op, em_tensor *const *in,
                     int n_in, const em_attr *attrs, em_tensor **outs, int max_out,
                     int *n_out_actual);

/* A composition of other ops computing op `id` on inputs `in` (ops/decomp.c), for devices
 * without a kernel for it, for inputs the kernel does not cover, and under tracing for ops
 * whose kernel writes more than its first input (the graph passes know only that kind of
 * write): writes the result, if the op has one, to *out in the current scope. NULL: none. */
typedef em_status (*em_decomp_fn)(em_ctx *c, const char *file, int line, em_tensor *const *in,
                                  const em_attr *attrs, em_tensor **out);
em_decomp_fn em_decomp_get(em_op_id id, em_tensor *const *in, bool has_kernel, bool tracing);

/* Builds the outputs of a VIEW op over their input's storage (the geometry of core/views.c; a
 * reshape the layout does not allow copies first). Outputs are caller-owned. */
em_status em_view_build(em_ctx *c, const em_op_def *op, em_tensor *const *in,
                        const em_attr *attrs, const em_meta *metas, int n_out, em_tensor **outs);

/* attribute constructors */
static inline em_attr em_attr_int(int64_t v) {
    em_attr a;
    a.i = v;
    a.f = 0;
    a.n = 0;
    return a;
}
static inline em_attr em_attr_float(double v) {
    em_attr a;
    a.i = 0;
    a.f = v;
    a.n = 0;
    return a;
}
/* Copies up to EM_ATTR_INTS_MAX values; returns false (leaving n = -1) if there are more. */
static inline em_attr em_attr_ints(const int64_t *v, int n) {
    em_attr a;
    a.i = 0;
    a.f = 0;
    a.n = n < 0 || n > EM_ATTR_INTS_MAX ? -1 : n;
    if (a.n > 0) memcpy(a.v, v, (size_t)n * sizeof *v);
    return a;
}
static inline em_attr em_attr_dims(const int *v, int n) {
    em_attr a;
    a.i = 0;
    a.f = 0;
    a.n = n < 0 || n > EM_ATTR_INTS_MAX ? -1 : n;
    for (int i = 0; i < a.n; i++) a.v[i] = v[i];
    return a;
}

/* Shorthand for single-output wrappers. */
#define EM_RUN(id, ins, nin, attrs) em_op_run(c, file, line, (id), (ins), (nin), (attrs), NULL, 0, NULL)

#endif

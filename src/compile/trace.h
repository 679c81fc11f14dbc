/* Compile mode internals: the trace being recorded and the passes over its graph. */
#ifndef EMBER_COMPILE_TRACE_H
#define EMBER_COMPILE_TRACE_H

#include "core/graph.h"

typedef struct em_trace {
    em_graph g;
    /* captured tensors: open addressing, pointer -> value id */
    em_tensor **cap_keys;
    int *cap_vals;
    size_t cap_cap, cap_len;
} em_trace;

/* Starts recording into tr: the context's op calls become nodes of tr's graph until
 * em_trace_end (installs the tracer's hooks in the context). */
void em_trace_begin(em_ctx *c, em_trace *tr);
void em_trace_end(em_ctx *c);
/* A symbolic tensor for input `index` shaped like `like` (caller-owned). */
em_tensor *em_trace_input(em_ctx *c, const em_tensor *like, int index);
/* The value a tensor stands for in the active trace (capturing concrete tensors); -1 on error. */
int em_trace_value_of(em_ctx *c, em_tensor *t);
/* Records a CONTIGUOUS copy of value v; returns the copy's value, -1 on error. */
int em_trace_copy(em_ctx *c, int v);
/* Frees the capture table (not the graph). */
void em_trace_free(em_trace *tr);

/* ---- passes (compile/passes.c) ---- */
typedef struct em_pass_stats {
    int dead, common, folded;
} em_pass_stats;
/* Dead-code elimination: nodes whose outputs nothing reads (writes are kept). */
int em_pass_dce(em_graph *g);
/* Common-subexpression elimination: the same op on the same values with the same attributes,
 * with no write in between, is computed once. */
int em_pass_cse(em_ctx *c, em_graph *g);
/* Marks the nodes that only depend on creation ops (em_gnode.constant: a program may compute
 * them once, when it is built); returns how many. */
int em_pass_constants(em_graph *g);

#endif

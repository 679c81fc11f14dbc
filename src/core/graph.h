/*
 * Compile mode's graph IR: what a trace records (compile/trace.c), what the passes rewrite
 * (compile/passes.c) and what the backends lower into programs (em_backend.program_build: the
 * CPU plan in backends/cpu/plan.c, one StableHLO module in backends/pjrt/graph_lower.c).
 *
 * The IR is the op table itself: a node is one call of a table op with its attributes, exactly
 * as the eager dispatcher saw it (the shape rule ran at trace time, so every value has a static
 * dtype and shape). Values are numbered; a value is a graph input (given per call), a captured
 * tensor (a concrete tensor the function touched: weights, a KV cache; bound at trace time) or
 * an output of a node. Nodes are kept in program order, which is a valid topological order and
 * also the order of side effects: ASSIGN and INDEX_COPY write into their first input's storage
 * and are never removed or reordered.
 */
#ifndef EMBER_CORE_GRAPH_H
#define EMBER_CORE_GRAPH_H

#include "core/tensor_impl.h"

typedef enum em_gval_kind {
    EM_GV_INPUT,    /* the function's input `index` */
    EM_GV_CAPTURED, /* a concrete tensor (`t`, retained by the graph) */
    EM_GV_NODE      /* output `index` of node `node` */
} em_gval_kind;

typedef struct em_gval {
    em_gval_kind kind;
    int node;  /* EM_GV_NODE: producing node */
    int index; /* EM_GV_INPUT: input position; EM_GV_NODE: output position */
    em_tensor *t; /* EM_GV_CAPTURED: the tensor (a view or not) */
    em_dtype dtype;
    int ndim;
    int64_t shape[EM_MAX_DIMS];
    em_device *dev;
    int n_uses; /* node inputs + graph outputs reading it (filled by em_graph_count_uses) */
} em_gval;

typedef struct em_gnode {
    em_op_id op;
    int n_in;
    int in[EM_MAX_INPUTS]; /* value ids; -1 for an absent optional input */
    em_attr attrs[EM_MAX_ATTRS];
    int n_out;
    int out0;  /* outputs are values out0 .. out0 + n_out - 1 */
    const char *file; /* where the function called the op (for errors and logs) */
    int line;
    bool dead;     /* removed by a pass */
    bool constant; /* depends only on creation ops and nothing writes it (em_pass_constants) */
    int fused_into; /* CPU fusion: the element-wise node that computes this one inline, or -1 */
} em_gnode;

struct em_graph {
    em_gval *vals;
    int n_vals, cap_vals;
    em_gnode *nodes;
    int n_nodes, cap_nodes;
    int n_inputs;
    int *outputs; /* value ids the function returned */
    int n_outputs;
    em_device *dev; /* the device of the inputs (or the context's default) */
    /* SPMD (em_compiled_set_spmd; PJRT only): the program is partitioned over spmd_parts
     * devices; shard_dim[v], for a captured value v, is the dim of its storage's buffer split in
     * spmd_parts equal tiles, -1 to replicate it. 0 parts: not partitioned (shard_dim NULL). */
    int spmd_parts;
    signed char *shard_dim;
};

/* True when the node writes into its first input (ASSIGN, INDEX_COPY). */
static inline bool em_gnode_writes(const em_gnode *n) {
    return n->op == EM_OP_ASSIGN || n->op == EM_OP_INDEX_COPY;
}

/* Releases the captured tensors and frees the arrays (core/graph.c). */
void em_graph_free(em_graph *g);
/* Recomputes n_uses of every value from the live nodes and the outputs. */
void em_graph_count_uses(em_graph *g);

#endif

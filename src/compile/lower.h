/*
 * The lowerings of a traced graph (compile/graph.h): a CPU execution plan (compile/plan_cpu.c)
 * and one PJRT program for a whole graph (backends/pjrt/graph_lower.c).
 */
#ifndef EMBER_COMPILE_LOWER_H
#define EMBER_COMPILE_LOWER_H

#include "compile/graph.h"

/* ---- CPU plan ---- */
typedef struct em_cpu_plan em_cpu_plan;
/* Builds the plan of a graph whose nodes all run on host-accessible devices. NULL with an error
 * in c (naming the node's op and source position) when a node cannot be planned. */
em_cpu_plan *em_cpu_plan_build(em_ctx *c, const em_graph *g);
/* Runs the plan: copies in[] into the plan's input buffers, runs every kernel, and hands the
 * caller n_outputs new tensors (caller-owned references) in out[]. */
em_status em_cpu_plan_run(em_ctx *c, em_cpu_plan *p, em_tensor *const *in, em_tensor **out);
void em_cpu_plan_free(em_cpu_plan *p);
/* What the plan did with the graph (for logs and stats). */
typedef struct em_cpu_plan_info {
    int kernels;       /* kernel calls per run */
    int grouped;       /* linears run in groups that share their input (one pass each group) */
    int folded;        /* nodes that only depend on creation ops: run once, when built */
    int fused_groups;  /* element-wise expressions evaluated in one pass */
    int fused_nodes;   /* nodes computed inside those expressions (no buffer of their own) */
    int buffers;       /* intermediate values placed in the arena */
    int64_t arena_bytes;    /* the arena (after reuse) */
    int64_t unplanned_bytes; /* the same values without reuse */
} em_cpu_plan_info;
void em_cpu_plan_get_info(const em_cpu_plan *p, em_cpu_plan_info *out);

/* ---- one PJRT program for the whole graph ---- */
typedef struct em_pjrt_program em_pjrt_program;
/* Lowers a graph whose nodes all run on the PJRT device `dev` into one StableHLO module and
 * compiles it with the device's plugin. NULL with an error in c (the op and source position of
 * the node that cannot be lowered). */
em_pjrt_program *em_pjrt_graph_compile(em_ctx *c, const em_graph *g, em_device *dev);
/* Runs the program: in[] are the graph inputs (tensors on dev, any layout), out[] receives
 * n_outputs new caller-owned tensors on dev. Captured tensors the graph writes (ASSIGN,
 * INDEX_COPY) see the writes afterwards, as in eager mode. */
em_status em_pjrt_program_run(em_ctx *c, em_pjrt_program *p, em_tensor *const *in,
                              em_tensor **out);
void em_pjrt_program_free(em_pjrt_program *p);

#endif

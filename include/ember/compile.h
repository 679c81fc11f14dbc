/*
 * ember/compile.h — compile mode: a function written with the eager API, traced once per input
 * signature into a graph of table ops, optimised, lowered and cached.
 *
 *     static int step(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *statics,
 *                     int n_statics, em_tensor **out, int max_out, void *user) {
 *         out[0] = em_silu(c, em_linear(c, in[0], ((my_model *)user)->w, NULL));
 *         return 1;
 *     }
 *     em_compiled *f = em_compile(c, "step", step, model);
 *     em_tensor *y;
 *     em_compiled_call(c, f, &x, 1, NULL, 0, &y, 1);   // traces, compiles, runs
 *     em_compiled_call(c, f, &x2, 1, NULL, 0, &y, 1);  // same signature: runs the program
 *
 * What a program is specialised on (its guards): the number of inputs and each input's dtype,
 * shape and device; the values of the `statics` (host integers the function may branch on); the
 * attribute values the function passed to ops, which can only come from those two. A call that
 * breaks a guard traces again; with EMBER_LOG_COMPILES=1 every (re)compile is logged to stderr
 * with the guard that failed ("input 3 dim 3: 128 -> 256"). Keep shapes stable with buckets:
 * pad to a bucket and pass a mask (em_model_forward_compiled does this for the KV length).
 *
 * Inside the function:
 *   - the inputs are symbolic: their values cannot be read on the host (em_to_host, em_item,
 *     em_tensor_data fail at the call with the function's source position) and cannot move to
 *     another device; data-dependent control flow must be expressed with ops;
 *   - other tensors the function touches (weights, a KV cache) are captured by reference: the
 *     program reads their contents at each call and in-place writes (em_assign, em_index_copy)
 *     reach them, as in eager mode. Capturing a different tensor needs a new em_compiled;
 *   - an op error (a shape mismatch, say) is reported when tracing, at the op's call;
 *   - grad starts disabled; a function that enables it records its ops on the tape and may call
 *     em_backward, whose rules are traced like any op (ember/autograd.h): forward, backward
 *     and an optimizer's in-place updates of captured tensors become one program.
 *
 * Passes: dead-code and common-subexpression elimination, folding of constant subgraphs
 * (creation ops and what only depends on them), element-wise fusion and buffer planning with
 * reuse (CPU). Lowering: the CPU backend runs a plan of preplanned buffers and direct kernel
 * calls (no dispatch, no allocation, no shape rules per call); a PJRT device gets the whole
 * function as one StableHLO module compiled by the plugin.
 *
 * Compiled and eager results agree within rounding (the op conformance suite and the model
 * tests run in both modes). An em_compiled is not thread-safe; use one per thread.
 */
#ifndef EMBER_COMPILE_H
#define EMBER_COMPILE_H

#include "ember/core.h"
#include "ember/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_compiled em_compiled;

/**
 * The function to compile. Reads in[0..n_in) and statics[0..n_statics), writes up to max_out
 * output tensors to out[] (tensors returned by ops, which live in the caller's scope) and returns
 * how many, or -1 after an error was recorded in c.
 */
typedef int (*em_compiled_fn)(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *statics,
                              int n_statics, em_tensor **out, int max_out, void *user);

/**
 * Wraps `fn` (user is passed through; the caller keeps it alive). `name` labels logs (copied).
 * Nothing is traced yet. Returns NULL with an error in c on a NULL fn or out of memory.
 */
EM_API em_compiled *em_compile(em_ctx *c, const char *name, em_compiled_fn fn, void *user);

/**
 * Calls the compiled function: finds the program whose guards the arguments satisfy, or traces
 * and compiles a new one, then runs it. Outputs go to out[0..) in the current scope. Returns
 * the number of outputs, or -1 with the error in c (a tracing error names the op and the
 * function's source line). Inputs must be on one device; so must every op the function runs.
 */
EM_API int em_compiled_call(em_ctx *c, em_compiled *f, em_tensor *const *in, int n_in,
                            const int64_t *statics, int n_statics, em_tensor **out, int max_out);

/** For em_compiled_set_spmd: the dim of captured tensor t's storage that an SPMD program splits
 *  over its devices, or -1 to replicate it. */
typedef int (*em_shard_fn)(void *user, const em_tensor *t);

/**
 * Partitions f's programs over `parts` devices (SPMD; PJRT devices only), as jax.jit does with
 * shardings: a program is written at the global shapes the function traces, each tensor it
 * captures (weights, caches) is split along the dim fn(user, t) names into `parts` equal tiles,
 * tile d on device d of the partitions (devices k..k+parts-1 of the plugin, k the index of the
 * inputs' device), or replicated for -1; inputs and outputs are replicated. XLA's SPMD
 * partitioner inserts the collectives (num_partitions = parts, use_spmd_partitioning). The
 * program keeps each captured storage's tiles on their devices between calls and writes
 * written storages (KV caches) back whole, so eager code sees every write. Call before the
 * first em_compiled_call; parts 1 (or 0) turns it off. Errors (EM_ERR_INVALID_ARG): a NULL f,
 * parts < 0 or above 64, a NULL fn with parts > 1, programs already built. The call that
 * builds a program fails on a non-PJRT device or a dim that does not divide.
 */
EM_API em_status em_compiled_set_spmd(em_ctx *c, em_compiled *f, int parts, em_shard_fn fn,
                                      void *user);

/** Counters of an em_compiled. */
typedef struct em_compile_stats {
    int64_t calls;        /* em_compiled_call calls that ran a program */
    int64_t compiles;     /* traces + compilations (each logged with its reason) */
    int64_t programs;     /* programs held (one per signature seen, up to the cap) */
    double compile_ms;    /* total time spent tracing, optimising and compiling */
    /* the most recent program */
    int nodes_traced;     /* ops recorded */
    int nodes;            /* ops left after the passes */
    int removed_dead, removed_common, folded; /* what the passes did */
    int fused_groups, fused_nodes; /* CPU: element-wise expressions, ops computed inside them */
    int kernels;          /* CPU: kernel calls per run */
    int grouped_linears;  /* CPU: linears sharing an input that run as one parallel pass */
    int64_t arena_bytes, unplanned_bytes; /* CPU: intermediate memory with and without reuse */
    char last_reason[160]; /* why the most recent compile happened ("first call", a guard) */
    char backend[16];      /* "cpu-plan" or "pjrt" */
} em_compile_stats;

/** Fills *out (zeros for a NULL f). */
EM_API void em_compiled_stats(const em_compiled *f, em_compile_stats *out);

/** The guards of the most recent program as text ("input 0: i64[1,1] on cpu; ..."), in buf. */
EM_API const char *em_compiled_guards(const em_compiled *f, char *buf, size_t n);

/** Frees the programs and the handle (NULL is fine). Captured tensors are released. */
EM_API void em_compiled_free(em_compiled *f);

#ifdef __cplusplus
}
#endif

#endif

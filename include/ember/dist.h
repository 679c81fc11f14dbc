/*
 * ember/dist.h — many processes as one: a process group, its key-value store, and the
 * collective ops (all_reduce, all_gather, reduce_scatter, all_to_all, ring_shift) over it.
 *
 *   em_dist *g;
 *   if (em_dist_init(c, NULL, &g)) ...            // rank and world from mpirun or EMBER_* vars
 *   em_tensor *s = em_all_reduce(c, x, EM_REDUCE_SUM, g);   // every rank gets the sum
 *   em_dist_free(g);
 *
 * Bootstrap. Launched by mpirun (Open MPI), the group is MPI_COMM_WORLD and the collectives are
 * MPI calls. Otherwise the environment names the group: EMBER_RANK (0..N-1), EMBER_WORLD_SIZE (N)
 * and EMBER_COORDINATOR=host:port, where rank 0 listens and every rank connects (a TCP
 * rendezvous); such a group has the key-value store but no tensor transport, so collectives on
 * the CPU refuse it (EM_ERR_UNSUPPORTED). With neither, the group is this process alone.
 *
 * The store. Rank 0 keeps a key-value map that every rank reaches over TCP (also under mpirun,
 * where MPI only tells the ranks rank 0's address). It is what a multi-host PJRT plugin gets as
 * its kv_get/kv_put callbacks. Every blocking call is bounded: a get waits at most its timeout
 * and then fails naming the key; a rank that exits without em_dist_free makes every other rank's
 * next (or current) store call fail naming it, so callers exit non-zero instead of hanging.
 *
 * Collectives. Every rank of the group calls the op in the same order with the same shape and
 * dtype (f32 or bf16). Sums and maxima are computed in f32 and rounded once to the tensor's dtype.
 * Results belong to the context's scope like any op's; errors as for every op (ops.h). They are
 * differentiable (ember/autograd.h: torch.distributed.nn's convention, every rank calls
 * em_backward).
 */
#ifndef EMBER_DIST_H
#define EMBER_DIST_H

#include "ember/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_dist em_dist;

typedef enum em_reduce_op { EM_REDUCE_SUM = 0, EM_REDUCE_MAX = 1 } em_reduce_op;

typedef enum em_dist_bootstrap {
    EM_DIST_AUTO = 0, /* MPI when launched by mpirun, else the EMBER_* variables, else alone */
    EM_DIST_MPI = 1,  /* MPI (fails when this build has none) */
    EM_DIST_ENV = 2   /* EMBER_RANK, EMBER_WORLD_SIZE, EMBER_COORDINATOR (all required) */
} em_dist_bootstrap;

typedef struct em_dist_params {
    em_dist_bootstrap bootstrap;
    /* seconds the rendezvous may take and a store call waits for a peer by default (> 0);
     * the default is $EMBER_DIST_TIMEOUT or 60 */
    double timeout_s;
} em_dist_params;

EM_API em_dist_params em_dist_default_params(void);

/*
 * Joins the process group: blocks until every rank has reached the coordinator (or the timeout
 * passes). p may be NULL (defaults). On success *out is a group the caller frees with
 * em_dist_free; on failure *out is NULL and the context holds the error (what was missing or
 * unreachable: the variable, the address, the timeout).
 */
EM_API em_status em_dist_init(em_ctx *c, const em_dist_params *p, em_dist **out);
/*
 * Leaves the group: waits (bounded by the timeout) until every rank leaves, so no rank's store
 * disappears while another still needs it, then closes the connections (and finalises MPI when
 * em_dist_init started it). NULL is ignored.
 */
EM_API void em_dist_free(em_dist *g);
EM_API int em_dist_rank(const em_dist *g);
EM_API int em_dist_world_size(const em_dist *g);
/* Whether the group's collectives run over MPI (else it has a store only). */
EM_API bool em_dist_has_mpi(const em_dist *g);

/*
 * One process, n devices (issue 18's replica mode): n handles, ranks 0..n-1 of one group whose
 * rank r lives on device "<kind>:r" (kind "xla" with EMBER_PJRT_OPTIONS=cpu_device_count=n gives
 * XLA's CPU plugin n devices; any PJRT kind with n devices works the same way). Each rank is
 * driven by its own thread with its own em_ctx, as each rank of mpirun is a process: every rank
 * calls the same collectives in the same order, with its tensor on its device (em_dist_device).
 * A collective runs once all ranks have called it: one program with stablehlo.all_reduce (etc.)
 * compiled for n replicas, executed on the n devices at once. A rank that does not come within
 * the timeout (p's, or $EMBER_DIST_TIMEOUT, or 60 s) breaks the group: the others' calls fail
 * naming it, instead of hanging. Such a group has no key-value store (put/get refuse it);
 * em_dist_barrier works. p may be NULL; its bootstrap is ignored. On success ranks[0..n) are
 * handles the caller frees, each with em_dist_free (in any order, from any thread, once no
 * rank uses the group); on failure they are NULL and c holds the error (a device that does not
 * exist is named).
 */
EM_API em_status em_dist_local(em_ctx *c, const char *kind, int n, const em_dist_params *p,
                               em_dist **ranks);
/* The device of a device group's rank; NULL for a process group (mpirun or the TCP bootstrap),
 * whose ranks place their tensors where they like (the CPU for the collectives). */
EM_API em_device *em_dist_device(const em_dist *g);

/*
 * Sub-groups (MPI_Comm_split's semantics): every rank of g calls this, in the same order as its
 * other collectives; the ranks that pass the same color (>= 0) form one new group, ranked by
 * key, ties by their rank in g. On success *out is a group of its own, which the caller frees
 * with em_dist_free, before or after g (they share nothing the caller sees; under mpirun MPI is
 * finalised once the last of them is freed). Its collectives run over the new group only; its
 * em_dist_stats start at zero and count its own calls; it has no key-value store (put/get
 * refuse it with EM_ERR_UNSUPPORTED; use g's), em_dist_barrier works.
 * Kinds of g: a group over MPI (MPI_Comm_split: the sub-group has its own communicator); a
 * device group (em_dist_local: each rank's thread calls it; the new groups are device groups
 * over their members' devices, rank r of a sub-group on its member's device); a group of one
 * (the sub-group is one rank too). A compiled program (ember/compile.h) whose collectives use
 * several sub-groups of one device group (or it and its sub-groups) runs as one program over
 * the parent's devices, each collective's replica groups the partition its split made.
 * Errors: c, g or out NULL (EM_ERR_INVALID_ARG); a negative
 * color (EM_ERR_INVALID_ARG on every rank of g, naming the rank that passed it: the ranks
 * still meet, so none waits forever); a group of more than one rank bootstrapped without MPI
 * (the TCP store of EMBER_COORDINATOR only; EM_ERR_UNSUPPORTED: it has no transport for tensors,
 * nor would its sub-groups). On failure *out is NULL.
 */
EM_API em_status em_dist_split(em_ctx *c, em_dist *g, int color, int key, em_dist **out);
/*
 * A 2-D mesh of g's ranks (outer x inner == world size, both >= 1), rank r at (r / inner,
 * r % inner), as a torch DeviceMesh of that shape: *inner_group holds the ranks with r's row
 * (r / inner), `inner` consecutive ranks ranked by r % inner; *outer_group those with r's
 * column (r % inner), ranked by r / inner. diffusers' ContextParallelConfig(ring_degree=R,
 * ulysses_degree=U) is outer R (the ring) by inner U (Ulysses). Two em_dist_split calls: the
 * errors are theirs, and a product that is not the world size (EM_ERR_INVALID_ARG, before any
 * rank meets). Both groups are the caller's to free; on failure both are NULL.
 */
EM_API em_status em_dist_mesh2d(em_ctx *c, em_dist *g, int outer, int inner,
                                em_dist **outer_group, em_dist **inner_group);

/* Stores value[0..n) under key (a NUL-terminated string of at most 1024 bytes), replacing any
 * earlier value; visible to every rank once this returns. */
EM_API em_status em_dist_put(em_ctx *c, em_dist *g, const char *key, const void *value, size_t n);
/*
 * Waits up to timeout_s (< 0: the group's timeout) for key to exist, then copies its value into
 * a buffer the caller frees with free(): *value (NUL-terminated, for convenience) and *n (bytes,
 * without the NUL). Fails with EM_ERR_NOT_FOUND naming the key when the time runs out, with
 * EM_ERR_IO naming the rank when a peer died or the coordinator went away.
 */
EM_API em_status em_dist_get(em_ctx *c, em_dist *g, const char *key, double timeout_s,
                             void **value, size_t *n);
/* Returns when every rank has called it (as many times), or fails as em_dist_get does. */
EM_API em_status em_dist_barrier(em_ctx *c, em_dist *g);

/* ---- collective ops (run on the tensor's device: the CPU over MPI; PJRT devices of a device
 * group (em_dist_local) as one multi-device program) ---- */
/* Every rank gets the element-wise sum or maximum of all ranks' x. */
#define em_all_reduce(c, ...) em_all_reduce_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_all_reduce_(EM_OP_ARGS, em_tensor *x, em_reduce_op op, em_dist *g);
/* The ranks' x concatenated along dim in rank order (dim grows world-fold). */
#define em_all_gather(c, ...) em_all_gather_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_all_gather_(EM_OP_ARGS, em_tensor *x, int dim, em_dist *g);
/* The reduction of all ranks' x, split along dim into world equal chunks; rank r gets chunk r.
 * dim's size must divide by the world size. */
#define em_reduce_scatter(c, ...) em_reduce_scatter_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_reduce_scatter_(EM_OP_ARGS, em_tensor *x, em_reduce_op op, int dim,
                                     em_dist *g);
/* x split along split_dim into world chunks, chunk j sent to rank j; the chunks received are
 * concatenated along concat_dim in rank order (jax.lax.all_to_all). */
#define em_all_to_all(c, ...) em_all_to_all_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_all_to_all_(EM_OP_ARGS, em_tensor *x, int split_dim, int concat_dim,
                                 em_dist *g);
/* A collective permute around the ring of ranks (jax.lax.ppermute with the pairs
 * r -> r + offset, StableHLO's collective_permute): rank r gets rank ((r - offset) mod N)'s x
 * and hands its own x to rank ((r + offset) mod N). Same shape and dtype as x; any offset
 * (negative: the other way round; a multiple of N: x itself, copied). Point to point: each rank
 * sends and receives one tensor (MPI_Sendrecv over MPI; one collective_permute program over a
 * device group). The result is a new tensor in c's scope; x is not changed. Errors as the
 * other collectives': a group that is not live (EM_ERR_INVALID_ARG), a dtype other than f32 or
 * bf16 (EM_ERR_DTYPE), ranks that disagree on the shape, dtype or offset (a device group
 * names them; over MPI the shapes must agree, as for every collective). */
#define em_ring_shift(c, ...) em_ring_shift_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_ring_shift_(EM_OP_ARGS, em_tensor *x, int offset, em_dist *g);

/* How context parallelism (em_dit_set_context_parallel, em_sd3_set_context_parallel,
 * em_flux_set_context_parallel) runs an attention whose queries, keys and values are split over
 * the ranks by tokens, as diffusers' ContextParallelConfig. EM_CP_RING (the default, its
 * ring_degree): each rank keeps its key and value block; N steps of attention against the block
 * at hand, merged by log-sum-exp (flash attention's running maximum and sum, in f32), the blocks
 * passed one rank along the ring (em_ring_shift) between steps: a rank holds one block at a
 * time. EM_CP_ALL_GATHER: every rank's keys and values gathered (em_all_gather), one attention
 * over the whole sequence: fewer, larger transfers (faster in one process at small sizes), a
 * rank holds every key and value of a block. EM_CP_ULYSSES (its ulysses_degree): an
 * em_all_to_all of Q, K and V trades the token split for a head split (rank r: heads
 * [r*H/N, (r+1)*H/N) of every token), one attention, and an all-to-all back; the heads must
 * divide by N (else the forward fails with EM_ERR_SHAPE naming both). All give the one-device
 * result within f32 rounding. */
typedef enum em_cp_schedule {
    EM_CP_RING = 0,
    EM_CP_ALL_GATHER = 1,
    EM_CP_ULYSSES = 2
} em_cp_schedule;

/* What a rank's collective calls cost: counted on each handle by the calls made through it (its
 * own thread's; not shared between ranks). bytes are the input tensors' bytes (what this rank
 * hands to the collective); seconds the wall time inside the calls, waiting for the other ranks
 * included. Eager calls only: a compiled plan's collectives are not counted. */
typedef struct em_dist_stats {
    int64_t calls;
    int64_t bytes;
    double seconds;
    int64_t calls_by_op[5]; /* all_reduce, all_gather, reduce_scatter, all_to_all, ring_shift */
    int64_t bytes_by_op[5];
} em_dist_stats;
/* Copies g's counters into *out (zeros for a NULL g). */
EM_API void em_dist_stats_get(const em_dist *g, em_dist_stats *out);
/* Zeroes g's counters (NULL is a no-op). */
EM_API void em_dist_stats_reset(em_dist *g);

#ifdef __cplusplus
}
#endif

#endif

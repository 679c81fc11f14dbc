/*
 * Process groups as the op table sees them: a collective op (all_reduce, ...) carries its group
 * as an integer attribute, an id in this registry, so its shape rule can ask the group's size and
 * a backend's kernel how to reach the other members. The registry is filled by the process-group
 * layer (src/dist/) when a group is made and emptied when it is freed; core names no transport.
 */
#ifndef EMBER_CORE_GROUP_H
#define EMBER_CORE_GROUP_H

#include <stdbool.h>
#include <stddef.h>

#include "ember/core.h"

/* How the members of a group exchange tensors. */
typedef enum em_group_transport {
    EM_GROUP_STORE_ONLY = 0, /* a key-value store only (TCP bootstrap without MPI): no collectives */
    EM_GROUP_MPI = 1,        /* an MPI communicator of this process: MPI_COMM_WORLD, or a
                                sub-group's (em_dist_split), named by `comm` */
    EM_GROUP_LOCAL = 2       /* ranks in this process, one thread and one device each
                                (local_group.c): a backend's kernel meets the others there */
} em_group_transport;

typedef struct em_local_group em_local_group;

typedef struct em_group_info {
    int rank, size;
    em_group_transport transport;
    em_local_group *local; /* EM_GROUP_LOCAL: the ranks' meeting point (borrowed) */
    /* EM_GROUP_MPI: the communicator, an MPI_Comm the process-group layer owns, as an opaque
     * pointer (core names no transport); NULL means MPI_COMM_WORLD (borrowed) */
    void *comm;
} em_group_info;

/* Registers a group; returns its id (> 0), or 0 when the registry is full (EM_GROUP_MAX). */
#define EM_GROUP_MAX 64
int em_group_register(const em_group_info *g);
/* Removes a group; unknown ids are ignored. */
void em_group_unregister(int id);
/* Copies the group's description into *out; false when id names no live group. */
bool em_group_lookup(int id, em_group_info *out);

/*
 * The process's key-value store, for PJRT plugins (the kv_get/kv_put callbacks of
 * PJRT_Client_Create, with node_id/num_nodes, as jax.distributed.initialize hands its store to
 * the CUDA and TPU plugins). The process-group layer offers its store here while a group
 * exists; the PJRT backend takes it when it creates a client. The functions return EM_OK, or
 * the status with a message in err[0..err_n). get's *val is malloc'd (the caller frees it).
 */
typedef struct em_group_kv {
    void *user;
    int node_id, num_nodes;
    em_status (*get)(void *user, const char *key, double timeout_s, void **val, size_t *n,
                     char *err, size_t err_n);
    em_status (*put)(void *user, const char *key, const void *val, size_t n, char *err,
                     size_t err_n);
} em_group_kv;
/* Offers kv (copied); NULL withdraws whatever is offered. */
void em_group_kv_offer(const em_group_kv *kv);
/* Withdraws the store of `user` if it is the one offered. */
void em_group_kv_withdraw(void *user);
/* The store on offer into *out; false when none. */
bool em_group_kv_current(em_group_kv *out);


/*
 * In-process groups (local_group.c): `size` ranks of one process, each run by its own thread on
 * its own device (devices[rank]). A collective's kernel on rank r hands its part to
 * em_local_meet; the last rank to arrive runs the whole collective once for everyone (one
 * multi-device program), then every rank returns. A rank that does not arrive within the
 * timeout breaks the group: the waiting ranks and every later call fail, naming the ranks
 * that did not come, instead of hanging.
 */
em_local_group *em_local_group_new(int size, em_device *const *devices, double timeout_s);
void em_local_group_ref(em_local_group *g);
void em_local_group_unref(em_local_group *g); /* frees at the last reference; NULL ignored */
int em_local_group_size(const em_local_group *g);
em_device *em_local_group_device(const em_local_group *g, int rank);
/* A sub-group's place in the group it was split from (em_dist_split of a device group), so a
 * compiled program whose collectives use several sub-groups of one split, or of several splits
 * of one group, runs as one program over the parent's ranks (the PJRT backend's replica
 * programs). The split's partition of the parent's ranks: group_of[p] is the index of parent
 * rank p's sub-group (0..n_groups-1), rank_in[p] its rank there; `index` is g's own. Set once,
 * by the split's leader, before any rank gets g; g references the parent until it is freed. */
typedef struct em_local_split {
    em_local_group *parent; /* NULL: g was not split from a device group */
    int parent_size, n_groups, index;
    int group_of[EM_GROUP_MAX], rank_in[EM_GROUP_MAX];
} em_local_split;
void em_local_group_set_split(em_local_group *g, const em_local_split *sp);
/* g's split (parent NULL when it has none); the parent is borrowed from g. */
const em_local_split *em_local_group_split(const em_local_group *g);
/* leader(slots, size, user): every rank's `mine`, in rank order; runs on the last rank's thread
 * while the others wait. Returns EM_OK, or an error with its message in err[0..err_n) (a broken
 * group, a timeout, a rank arriving twice). */
typedef void (*em_local_leader_fn)(void **slots, int size, void *user);
/* Rank `rank` cannot take part (its call failed before the meeting): breaks the group with
 * `why`, so the ranks waiting fail at once instead of at the timeout. */
void em_local_break(em_local_group *g, int rank, const char *why);
em_status em_local_meet(em_local_group *g, int rank, void *mine, em_local_leader_fn leader,
                        void *user, char *err, size_t err_n);

#endif

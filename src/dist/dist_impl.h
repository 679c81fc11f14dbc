/* The process group's private state (ember/dist.h), shared by the files of src/dist/. */
#ifndef EMBER_DIST_IMPL_H
#define EMBER_DIST_IMPL_H

#include "ember/dist.h"
#include "core/group.h"
#include "dist/store.h"

struct em_dist {
    int rank, world;
    int group_id;   /* the group's id in core's registry (core/group.h), which ops carry */
    bool mpi;       /* collectives over MPI: MPI_COMM_WORLD, or comm */
    bool mpi_owned; /* em_dist_init called MPI_Init_thread, so MPI is finalised once this group
                     * and every group split from it are freed (mpi_comm.c) */
    void *comm;     /* a sub-group over MPI (em_dist_split): its MPI_Comm, malloc'd; else NULL */
    bool sub;       /* made by em_dist_split: no key-value store of its own */
    double timeout_s;
    em_store *store;
    em_store_server *server; /* rank 0 only */
    /* a device group of this process (em_dist_local): the ranks' meeting point (one reference
     * per handle) and this rank's device; no store, no MPI */
    em_local_group *local;
    em_device *dev;
    em_dist_stats stats; /* this handle's collective calls (dist_ops.c) */
};

/* em_dist_barrier on a device group: the ranks meet with nothing to run (local.c). */
em_status em_dist_local_barrier(em_ctx *c, em_dist *g);

/* ---- MPI's communicators (mpi_comm.c; refusals without MPI) ---- */
/* A group over MPI begins (hold) and ends (drop, which frees g's communicator): MPI is
 * finalised at the last drop once the group that initialised it is gone, so groups and their
 * sub-groups are freed in any order. */
void em_dist_mpi_hold(void);
void em_dist_mpi_drop(em_dist *g);
/* MPI_Comm_split of g (color >= 0 checked on every rank first, so a bad color fails every rank
 * naming it instead of leaving the others waiting): sets sub's rank, world and comm. */
em_status em_dist_mpi_split(em_ctx *c, em_dist *g, int color, int key, em_dist *sub);
/* MPI_Barrier over a sub-group's communicator. */
em_status em_dist_mpi_barrier(em_ctx *c, em_dist *g);
/* A device group's sub-groups (local.c): every rank of g meets; the last builds the new
 * groups over the devices of their members. */
em_status em_dist_local_split(em_ctx *c, em_dist *g, int color, int key, em_dist **out);

#endif

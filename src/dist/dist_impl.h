/* The process group's private state (ember/dist.h), shared by the files of src/dist/. */
#ifndef EMBER_DIST_IMPL_H
#define EMBER_DIST_IMPL_H

#include "ember/dist.h"
#include "core/group.h"
#include "dist/store.h"

struct em_dist {
    int rank, world;
    int group_id;   /* the group's id in core's registry (core/group.h), which ops carry */
    bool mpi;       /* collectives over MPI_COMM_WORLD */
    bool mpi_owned; /* em_dist_init called MPI_Init_thread, so em_dist_free finalises */
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

#endif

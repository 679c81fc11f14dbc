/*
 * The MPI communicators of the process groups (dist/dist_impl.h): MPI_COMM_WORLD for the group
 * em_dist_init makes under mpirun, one of MPI_Comm_split for each sub-group (em_dist_split).
 * MPI is finalised once every group over it is freed, in whatever order the caller frees them.
 * Built without MPI, only a group of one can be split (split.c), so these are never reached but
 * to refuse.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef EMBER_HAVE_MPI
#include <mpi.h>
#endif

#include "core/tensor_impl.h"
#include "dist/dist_impl.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int live;          /* groups over MPI not yet freed */
static bool finalize_due; /* the group that initialised MPI was freed */

void em_dist_mpi_hold(void) {
    pthread_mutex_lock(&lock);
    live++;
    pthread_mutex_unlock(&lock);
}

void em_dist_mpi_drop(em_dist *g) {
#ifdef EMBER_HAVE_MPI
    if (g->comm) {
        MPI_Comm_free(g->comm);
        free(g->comm);
        g->comm = NULL;
    }
#endif
    pthread_mutex_lock(&lock);
    live--;
    if (g->mpi_owned) finalize_due = true;
    bool fin = finalize_due && live == 0;
    if (fin) finalize_due = false;
    pthread_mutex_unlock(&lock);
#ifdef EMBER_HAVE_MPI
    if (fin) MPI_Finalize();
#else
    (void)fin;
#endif
}

#ifdef EMBER_HAVE_MPI
static MPI_Comm comm_of(const em_dist *g) {
    return g->comm ? *(MPI_Comm *)g->comm : MPI_COMM_WORLD;
}

static em_status mpi_fail(em_ctx *c, int rc, const char *call) {
    char msg[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, msg, &n) != MPI_SUCCESS) snprintf(msg, sizeof msg, "code %d", rc);
    return EM_FAIL(c, EM_ERR_BACKEND, "dist_split", "%s failed: %s", call, msg);
}

em_status em_dist_mpi_split(em_ctx *c, em_dist *g, int color, int key, em_dist *sub) {
    MPI_Comm parent = comm_of(g);
    /* the lowest rank with a bad color, or the world: every rank learns it */
    int bad = color < 0 ? g->rank : g->world, first_bad = g->world;
    int rc = MPI_Allreduce(&bad, &first_bad, 1, MPI_INT, MPI_MIN, parent);
    if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Allreduce");
    if (first_bad < g->world) {
        rc = MPI_Bcast(&color, 1, MPI_INT, first_bad, parent); /* its color, for the message */
        if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Bcast");
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "dist_split", "rank %d's color is %d; need >= 0 "
                       "(every rank of the group fails)", first_bad, color);
    }
    MPI_Comm *comm = malloc(sizeof *comm);
    /* the ranks must all call MPI_Comm_split; one that could not allocate still takes part */
    MPI_Comm tmp;
    rc = MPI_Comm_split(parent, color, key, &tmp);
    if (rc != MPI_SUCCESS) {
        free(comm);
        return mpi_fail(c, rc, "MPI_Comm_split");
    }
    if (!comm) {
        MPI_Comm_free(&tmp);
        return EM_FAIL(c, EM_ERR_OOM, "dist_split", "out of memory");
    }
    *comm = tmp;
    MPI_Comm_rank(tmp, &sub->rank);
    MPI_Comm_size(tmp, &sub->world);
    sub->comm = comm;
    sub->mpi = true;
    em_dist_mpi_hold();
    return EM_OK;
}

em_status em_dist_mpi_barrier(em_ctx *c, em_dist *g) {
    int rc = MPI_Barrier(comm_of(g));
    if (rc == MPI_SUCCESS) return EM_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, msg, &n) != MPI_SUCCESS) snprintf(msg, sizeof msg, "code %d", rc);
    return EM_FAIL(c, EM_ERR_BACKEND, "dist_barrier", "MPI_Barrier failed: %s", msg);
}
#else
em_status em_dist_mpi_split(em_ctx *c, em_dist *g, int color, int key, em_dist *sub) {
    (void)g, (void)color, (void)key, (void)sub;
    return EM_FAIL(c, EM_ERR_UNSUPPORTED, "dist_split", "this build of Ember has no MPI");
}

em_status em_dist_mpi_barrier(em_ctx *c, em_dist *g) {
    (void)g;
    return EM_FAIL(c, EM_ERR_UNSUPPORTED, "dist_barrier", "this build of Ember has no MPI");
}
#endif

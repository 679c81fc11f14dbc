/*
 * Sub-groups of a process group (em_dist_split, em_dist_mesh2d in ember/dist.h): the checks
 * every kind shares, then the kind's own way: MPI_Comm_split (mpi_comm.c), a meeting of a
 * device group's threads (local.c), or nothing to exchange for a group of one.
 */
#include <stdlib.h>

#include "core/tensor_impl.h"
#include "dist/dist_impl.h"

/* Registers sub (rank, world and transport set) in core's registry. */
static em_status register_sub(em_ctx *c, em_dist *sub) {
    em_group_info gi = {sub->rank, sub->world, sub->mpi ? EM_GROUP_MPI : EM_GROUP_STORE_ONLY,
                        NULL, sub->comm};
    sub->group_id = em_group_register(&gi);
    if (!sub->group_id)
        return EM_FAIL(c, EM_ERR_UNSUPPORTED, "dist_split", "more than %d groups at once",
                       EM_GROUP_MAX);
    return EM_OK;
}

em_status em_dist_split(em_ctx *c, em_dist *g, int color, int key, em_dist **out) {
    if (!c || c->err.status) return c ? c->err.status : EM_ERR_INVALID_ARG;
    if (!out) return EM_FAIL(c, EM_ERR_INVALID_ARG, "dist_split", "out is NULL");
    *out = NULL;
    if (!g) return EM_FAIL(c, EM_ERR_INVALID_ARG, "dist_split", "group is NULL");
    if (g->local) return em_dist_local_split(c, g, color, key, out);
    if (g->world > 1 && !g->mpi)
        return EM_FAIL(c, EM_ERR_UNSUPPORTED, "dist_split",
                       "the group of %d ranks was bootstrapped without MPI (EMBER_COORDINATOR): "
                       "it has a key-value store but no transport for tensors, nor would its "
                       "sub-groups; launch with mpirun", g->world);
    if (g->world == 1 && color < 0)
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "dist_split", "rank 0's color is %d; need >= 0",
                       color);
    em_dist *sub = calloc(1, sizeof *sub);
    if (!sub) return EM_FAIL(c, EM_ERR_OOM, "dist_split", "out of memory");
    sub->sub = true;
    sub->timeout_s = g->timeout_s;
    sub->world = 1; /* a group of one splits into itself */
    em_status st = g->world > 1 ? em_dist_mpi_split(c, g, color, key, sub) : EM_OK;
    if (!st) st = register_sub(c, sub);
    if (st) {
        em_dist_free(sub);
        return st;
    }
    *out = sub;
    return EM_OK;
}

em_status em_dist_mesh2d(em_ctx *c, em_dist *g, int outer, int inner, em_dist **outer_group,
                         em_dist **inner_group) {
    if (!c || c->err.status) return c ? c->err.status : EM_ERR_INVALID_ARG;
    if (!outer_group || !inner_group)
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "dist_mesh2d", "outer_group or inner_group is NULL");
    *outer_group = *inner_group = NULL;
    if (!g) return EM_FAIL(c, EM_ERR_INVALID_ARG, "dist_mesh2d", "group is NULL");
    if (outer < 1 || inner < 1 || (int64_t)outer * inner != g->world)
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "dist_mesh2d", "a mesh of %d x %d is not the "
                       "group's %d ranks", outer, inner, g->world);
    int r = g->rank;
    if (em_dist_split(c, g, r / inner, r % inner, inner_group)) return c->err.status;
    if (em_dist_split(c, g, r % inner, r / inner, outer_group)) {
        em_dist_free(*inner_group);
        *inner_group = NULL;
        return c->err.status;
    }
    return EM_OK;
}

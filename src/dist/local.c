/* Device groups of one process (em_dist_local): one handle per rank, each registered in core's
 * group registry with the shared meeting point, so a collective op carries its rank's group id
 * as it does under mpirun and the device's backend finds the other ranks through it. */
#include <stdio.h>
#include <stdlib.h>

#include "core/tensor_impl.h"
#include "dist/dist_impl.h"

em_device *em_dist_device(const em_dist *g) { return g ? g->dev : NULL; }

em_status em_dist_local(em_ctx *c, const char *kind, int n, const em_dist_params *p,
                        em_dist **ranks) {
    if (!c || c->err.status) return c ? c->err.status : EM_ERR_INVALID_ARG;
    if (!ranks) return EM_FAIL(c, EM_ERR_INVALID_ARG, "dist_local", "ranks is NULL");
    if (!kind || !*kind) return EM_FAIL(c, EM_ERR_INVALID_ARG, "dist_local", "kind is empty");
    if (n < 1 || n > EM_GROUP_MAX)
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "dist_local", "n is %d; need 1..%d", n,
                       EM_GROUP_MAX);
    for (int r = 0; r < n; r++) ranks[r] = NULL;
    em_dist_params d = p ? *p : em_dist_default_params();
    if (!(d.timeout_s > 0))
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "dist_local", "timeout_s is %g; need > 0",
                       d.timeout_s);
    em_device *devs[EM_GROUP_MAX];
    for (int r = 0; r < n; r++) {
        char name[96];
        snprintf(name, sizeof name, "%.80s:%d", kind, r);
        if (!(devs[r] = em_device_get(c, name))) return c->err.status;
        for (int q = 0; q < r; q++)
            if (devs[q] == devs[r])
                return EM_FAIL(c, EM_ERR_DEVICE, "dist_local", "%s is the same device as "
                               "rank %d's: a device group needs %d distinct devices", name, q, n);
    }
    em_local_group *lg = em_local_group_new(n, devs, d.timeout_s);
    if (!lg) return EM_FAIL(c, EM_ERR_OOM, "dist_local", "out of memory");
    em_status st = EM_OK;
    for (int r = 0; r < n && !st; r++) {
        em_dist *g = calloc(1, sizeof *g);
        if (!g) {
            st = EM_FAIL(c, EM_ERR_OOM, "dist_local", "out of memory");
            break;
        }
        g->rank = r;
        g->world = n;
        g->dev = devs[r];
        em_local_group_ref(lg);
        g->local = lg;
        ranks[r] = g;
        em_group_info gi = {r, n, EM_GROUP_LOCAL, lg};
        g->group_id = em_group_register(&gi);
        if (!g->group_id)
            st = EM_FAIL(c, EM_ERR_UNSUPPORTED, "dist_local", "more than %d groups (a device "
                         "group takes one per rank) at once", EM_GROUP_MAX);
    }
    em_local_group_unref(lg); /* the handles hold it now */
    if (st)
        for (int r = 0; r < n; r++) {
            em_dist_free(ranks[r]);
            ranks[r] = NULL;
        }
    return st;
}

static void nothing(void **slots, int size, void *user) { (void)slots, (void)size, (void)user; }

em_status em_dist_local_barrier(em_ctx *c, em_dist *g) {
    char err[256];
    em_status s = em_local_meet(g->local, g->rank, NULL, nothing, NULL, err, sizeof err);
    return s ? EM_FAIL(c, s, "dist_barrier", "%s", err) : EM_OK;
}

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
        em_group_info gi = {r, n, EM_GROUP_LOCAL, lg, NULL};
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

/* ---- sub-groups of a device group (em_dist_split) ---- */

#define SPLIT_MAGIC 0x53504c54u

/* One rank's part of a split: what it asks, and what it gets. */
typedef struct split_part {
    unsigned magic; /* SPLIT_MAGIC: a rank that called something else is caught */
    int color, key;
    em_dist *out;
    em_status st;
    char msg[256];
} split_part;

static void split_fail(split_part **p, int n, em_status st, const char *msg) {
    for (int r = 0; r < n; r++) {
        if (!p[r] || p[r]->magic != SPLIT_MAGIC) continue;
        em_dist_free(p[r]->out);
        p[r]->out = NULL;
        p[r]->st = st;
        snprintf(p[r]->msg, sizeof p[r]->msg, "%s", msg);
    }
}

typedef struct split_ctx {
    em_local_group *parent;
    double timeout_s;
} split_ctx;

/* Runs on the last rank's thread: one new device group per color, its members ranked by
 * (key, parent rank), each on its device of the parent; each new group remembers the parent
 * and the whole partition (compile mode runs a program over several of them on the parent). */
static void split_lead(void **slots, int n, void *user) {
    split_part **p = (split_part **)slots;
    const split_ctx *sc = user;
    char msg[256];
    for (int r = 0; r < n; r++) {
        if (!p[r] || p[r]->magic != SPLIT_MAGIC) {
            snprintf(msg, sizeof msg, "rank %d called another collective (or a barrier) while "
                     "others split the group: every rank calls the same ones in the same order", r);
            split_fail(p, n, EM_ERR_INVALID_ARG, msg);
            return;
        }
        if (p[r]->color < 0) {
            snprintf(msg, sizeof msg, "rank %d's color is %d; need >= 0 (every rank of the "
                     "group fails)", r, p[r]->color);
            split_fail(p, n, EM_ERR_INVALID_ARG, msg);
            return;
        }
    }
    /* the partition: the colors numbered by their lowest rank, members by (key, rank) */
    em_local_split sp = {sc->parent, n, 0, 0, {0}, {0}};
    int mem[EM_GROUP_MAX][EM_GROUP_MAX], m[EM_GROUP_MAX];
    bool done[EM_GROUP_MAX] = {false};
    for (int r0 = 0; r0 < n; r0++) {
        if (done[r0]) continue;
        int k = sp.n_groups++, *mk = mem[k];
        m[k] = 0;
        for (int r = r0; r < n; r++) /* insertion by (key, rank) */
            if (p[r]->color == p[r0]->color) {
                int i = m[k]++;
                while (i > 0 && p[mk[i - 1]]->key > p[r]->key) {
                    mk[i] = mk[i - 1];
                    i--;
                }
                mk[i] = r;
                done[r] = true;
            }
        for (int i = 0; i < m[k]; i++) {
            sp.group_of[mk[i]] = k;
            sp.rank_in[mk[i]] = i;
        }
    }
    for (int k = 0; k < sp.n_groups; k++) {
        em_device *devs[EM_GROUP_MAX];
        for (int i = 0; i < m[k]; i++) devs[i] = em_local_group_device(sc->parent, mem[k][i]);
        em_local_group *lg = em_local_group_new(m[k], devs, sc->timeout_s);
        if (!lg) {
            split_fail(p, n, EM_ERR_OOM, "out of memory");
            return;
        }
        sp.index = k;
        em_local_group_set_split(lg, &sp);
        for (int i = 0; i < m[k]; i++) {
            em_dist *g = calloc(1, sizeof *g);
            if (g) {
                *g = (em_dist){.rank = i, .world = m[k], .dev = devs[i], .sub = true,
                               .timeout_s = sc->timeout_s, .local = lg};
                em_local_group_ref(lg);
                em_group_info gi = {i, m[k], EM_GROUP_LOCAL, lg, NULL};
                g->group_id = em_group_register(&gi);
            }
            p[mem[k][i]]->out = g;
            if (!g || !g->group_id) {
                em_local_group_unref(lg);
                snprintf(msg, sizeof msg, g ? "more than %d groups at once (a device group takes "
                         "one per rank)" : "out of memory", EM_GROUP_MAX);
                split_fail(p, n, g ? EM_ERR_UNSUPPORTED : EM_ERR_OOM, msg);
                return;
            }
        }
        em_local_group_unref(lg); /* the handles hold it now */
    }
}

em_status em_dist_local_split(em_ctx *c, em_dist *g, int color, int key, em_dist **out) {
    split_part me = {SPLIT_MAGIC, color, key, NULL, EM_OK, ""};
    split_ctx sc = {g->local, g->timeout_s};
    char err[256];
    em_status s = em_local_meet(g->local, g->rank, &me, split_lead, &sc, err, sizeof err);
    if (s) {
        em_dist_free(me.out);
        return EM_FAIL(c, s, "dist_split", "%s", err);
    }
    if (me.st) return EM_FAIL(c, me.st, "dist_split", "%s", me.msg);
    *out = me.out;
    return EM_OK;
}

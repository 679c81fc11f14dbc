/*
 * The process group (ember/dist.h): who am I, how many are we, and the key-value store every
 * rank reaches. MPI, when the process was launched by mpirun, only answers the first two and
 * tells the ranks where rank 0's store listens; the store itself is always dist/store_*.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef EMBER_HAVE_MPI
#include <mpi.h>
#endif

#include "core/group.h"
#include "core/tensor_impl.h"
#include "dist/dist_impl.h"
#include "dist/store.h"

em_dist_params em_dist_default_params(void) {
    em_dist_params p = {EM_DIST_AUTO, 60};
    const char *e = getenv("EMBER_DIST_TIMEOUT");
    if (e && atof(e) > 0) p.timeout_s = atof(e);
    return p;
}

/* The store as core offers it to PJRT plugins (core/group.h): a context per call, since a
 * plugin calls from threads of its own. */
static em_status kv_get(void *user, const char *key, double timeout_s, void **val, size_t *n,
                        char *err, size_t err_n) {
    em_ctx *c = em_ctx_create();
    if (!c) return EM_ERR_OOM;
    em_status s = em_dist_get(c, user, key, timeout_s, val, n);
    if (s) snprintf(err, err_n, "%s", em_ctx_error(c)->message);
    em_ctx_free(c);
    return s;
}

static em_status kv_put(void *user, const char *key, const void *val, size_t n, char *err,
                        size_t err_n) {
    em_ctx *c = em_ctx_create();
    if (!c) return EM_ERR_OOM;
    em_status s = em_dist_put(c, user, key, val, n);
    if (s) snprintf(err, err_n, "%s", em_ctx_error(c)->message);
    em_ctx_free(c);
    return s;
}

static bool launched_by_mpirun(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

/* "host:port" -> host, port; false when malformed. */
static bool split_addr(const char *s, char *host, size_t n, int *port) {
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || (size_t)(colon - s) >= n) return false;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p < 0 || p > 65535 || end == colon + 1) return false;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = 0;
    *port = (int)p;
    return true;
}

static bool env_int(em_ctx *c, const char *name, int lo, int hi, int *out) {
    const char *e = getenv(name);
    char *end;
    long v = e ? strtol(e, &end, 10) : 0;
    if (!e || !*e || *end || v < lo || v > hi) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, "dist_init", "%s is %s%s%s; need an integer in [%d, %d]",
                name, e ? "'" : "not set", e ? e : "", e ? "'" : "", lo, hi);
        return false;
    }
    *out = (int)v;
    return true;
}

/* Rank 0 serves the store on host:port (port 0: any), everyone connects; `addr` is what the
 * others were told (rank 0 learns the bound port). */
static em_status join_store(em_ctx *c, em_dist *g, const char *host, int port) {
    if (g->rank == 0 &&
        em_store_server_start(c, host, port, g->world, &g->server, &port) != EM_OK)
        return c->err.status;
    const char *to = !strcmp(host, "*") ? "127.0.0.1" : host;
    return em_store_connect(c, to, port, g->rank, g->world, g->timeout_s, &g->store);
}

static em_status init_env(em_ctx *c, em_dist *g) {
    char host[256];
    int port;
    const char *co = getenv("EMBER_COORDINATOR");
    if (!env_int(c, "EMBER_WORLD_SIZE", 1, 1 << 20, &g->world) ||
        !env_int(c, "EMBER_RANK", 0, g->world - 1, &g->rank))
        return c->err.status;
    if (!co || !split_addr(co, host, sizeof host, &port) || port == 0)
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "dist_init",
                       "EMBER_COORDINATOR is %s%s%s; need host:port (rank 0 listens there)",
                       co ? "'" : "not set", co ? co : "", co ? "'" : "");
    return join_store(c, g, host, port);
}

static em_status init_mpi(em_ctx *c, em_dist *g) {
#ifdef EMBER_HAVE_MPI
    int inited = 0, prov;
    MPI_Initialized(&inited);
    if (!inited) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &prov) != MPI_SUCCESS)
            return EM_FAIL(c, EM_ERR_BACKEND, "dist_init", "MPI_Init_thread failed");
        g->mpi_owned = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &g->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g->world);
    g->mpi = true;
    em_dist_mpi_hold();
    /* rank 0 listens on every interface and tells the others its host name and port */
    char addr[320] = "";
    em_status st = EM_OK;
    if (g->rank == 0) {
        char host[256] = "127.0.0.1";
        int port = 0;
        const char *co = getenv("EMBER_COORDINATOR");
        if (co && !split_addr(co, host, sizeof host, &port)) port = 0;
        else if (!co && gethostname(host, sizeof host)) snprintf(host, sizeof host, "127.0.0.1");
        st = em_store_server_start(c, "*", port, g->world, &g->server, &port);
        if (st == EM_OK) snprintf(addr, sizeof addr, "%s:%d", host, port);
    }
    MPI_Bcast(addr, (int)sizeof addr, MPI_CHAR, 0, MPI_COMM_WORLD);
    char host[256];
    int port;
    if (!addr[0] || !split_addr(addr, host, sizeof host, &port))
        return st ? st : EM_FAIL(c, EM_ERR_IO, "dist_init", "rank 0 could not start the store");
    return em_store_connect(c, host, port, g->rank, g->world, g->timeout_s, &g->store);
#else
    (void)g;
    return EM_FAIL(c, EM_ERR_UNSUPPORTED, "dist_init",
                   "launched by mpirun (or MPI asked for), but this build of Ember has no MPI: "
                   "install libopenmpi-dev (scripts/deps.sh) and configure with -DEMBER_MPI=ON");
#endif
}

em_status em_dist_init(em_ctx *c, const em_dist_params *p, em_dist **out) {
    if (!c || c->err.status) return c ? c->err.status : EM_ERR_INVALID_ARG;
    if (!out) return EM_FAIL(c, EM_ERR_INVALID_ARG, "dist_init", "out is NULL");
    *out = NULL;
    em_dist_params d = p ? *p : em_dist_default_params();
    if (!(d.timeout_s > 0))
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "dist_init", "timeout_s is %g; need > 0",
                       d.timeout_s);
    em_dist *g = calloc(1, sizeof *g);
    if (!g) return EM_FAIL(c, EM_ERR_OOM, "dist_init", "out of memory");
    g->timeout_s = d.timeout_s;
    em_dist_bootstrap b = d.bootstrap;
    if (b == EM_DIST_AUTO) b = launched_by_mpirun() ? EM_DIST_MPI : getenv("EMBER_RANK") ? EM_DIST_ENV : EM_DIST_AUTO;
    em_status st;
    if (b == EM_DIST_MPI) {
        st = init_mpi(c, g);
    } else if (b == EM_DIST_ENV) {
        st = init_env(c, g);
    } else { /* alone: a world of one, with a store all the same */
        g->world = 1;
        st = join_store(c, g, "127.0.0.1", 0);
    }
    if (st == EM_OK) {
        em_group_info gi = {g->rank, g->world, g->mpi ? EM_GROUP_MPI : EM_GROUP_STORE_ONLY,
                           NULL, NULL};
        g->group_id = em_group_register(&gi);
        if (!g->group_id)
            st = EM_FAIL(c, EM_ERR_UNSUPPORTED, "dist_init", "more than %d process groups at once",
                         EM_GROUP_MAX);
    }
    if (st == EM_OK) {
        em_group_kv kv = {g, g->rank, g->world, kv_get, kv_put};
        em_group_kv_offer(&kv);
    }
    if (st) {
        g->timeout_s = 0; /* nobody waits on a group that never formed */
        em_dist_free(g);
        return st;
    }
    *out = g;
    return EM_OK;
}

void em_dist_free(em_dist *g) {
    if (!g) return;
    em_group_kv_withdraw(g);
    if (g->store && g->timeout_s > 0) {
        em_ctx *c = em_ctx_create();
        if (c) em_store_barrier(c, g->store, g->timeout_s); /* a failure here changes nothing */
        em_ctx_free(c);
    }
    em_store_close(g->store);
    em_store_server_stop(g->server, g->timeout_s);
    em_group_unregister(g->group_id);
    em_local_group_unref(g->local);
    if (g->mpi) em_dist_mpi_drop(g);
    free(g);
}

int em_dist_rank(const em_dist *g) { return g ? g->rank : 0; }
int em_dist_world_size(const em_dist *g) { return g ? g->world : 1; }
bool em_dist_has_mpi(const em_dist *g) { return g && g->mpi; }

static em_status usable(em_ctx *c, em_dist *g, const char *key, const char *op) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (c->err.status) return c->err.status;
    if (g && g->local)
        return EM_FAIL(c, EM_ERR_UNSUPPORTED, op, "a device group (em_dist_local) has no "
                       "key-value store");
    if (g && g->sub)
        return EM_FAIL(c, EM_ERR_UNSUPPORTED, op, "a sub-group (em_dist_split) has no key-value "
                       "store: use the store of the group it was split from");
    if (!g || !g->store) return EM_FAIL(c, EM_ERR_INVALID_ARG, op, "group is NULL");
    if (key && !*key) return EM_FAIL(c, EM_ERR_INVALID_ARG, op, "empty key");
    return EM_OK;
}

em_status em_dist_put(em_ctx *c, em_dist *g, const char *key, const void *value, size_t n) {
    if (usable(c, g, key ? key : "", "dist_put")) return c ? c->err.status : EM_ERR_INVALID_ARG;
    if (!value && n) return EM_FAIL(c, EM_ERR_INVALID_ARG, "dist_put", "value is NULL");
    return em_store_put(c, g->store, key, value, n);
}

em_status em_dist_get(em_ctx *c, em_dist *g, const char *key, double timeout_s, void **value,
                      size_t *n) {
    if (usable(c, g, key ? key : "", "dist_get")) return c ? c->err.status : EM_ERR_INVALID_ARG;
    if (!value || !n) return EM_FAIL(c, EM_ERR_INVALID_ARG, "dist_get", "value or n is NULL");
    return em_store_get(c, g->store, key, timeout_s < 0 ? g->timeout_s : timeout_s, value, n);
}

em_status em_dist_barrier(em_ctx *c, em_dist *g) {
    if (c && !c->err.status && g && g->local) return em_dist_local_barrier(c, g);
    if (c && !c->err.status && g && g->sub) /* over MPI, or a group of one */
        return g->comm ? em_dist_mpi_barrier(c, g) : EM_OK;
    if (usable(c, g, NULL, "dist_barrier")) return c ? c->err.status : EM_ERR_INVALID_ARG;
    return em_store_barrier(c, g->store, g->timeout_s);
}

/* In-process groups (core/group.h): the meeting point where the ranks' threads hand over their
 * parts of a collective and the last one to arrive runs it for all. Only the wait is bounded:
 * once the last rank has arrived, the others wait for the leader without a deadline (a compile
 * may take long; it always ends). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/group.h"

struct em_local_group {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    _Atomic int refs;
    int size;
    double timeout_s;
    em_device **devices;
    void **slots;
    bool *here;       /* which ranks have arrived in the current round */
    int arrived;
    bool leading;     /* the last rank is running the collective */
    unsigned long round;
    bool broken;
    char why[200];    /* what broke the group */
    em_local_split split; /* the partition it belongs to (a sub-group); parent referenced */
};

em_local_group *em_local_group_new(int size, em_device *const *devices, double timeout_s) {
    if (size < 1) return NULL;
    em_local_group *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->devices = calloc((size_t)size, sizeof *g->devices);
    g->slots = calloc((size_t)size, sizeof *g->slots);
    g->here = calloc((size_t)size, sizeof *g->here);
    if (!g->devices || !g->slots || !g->here) {
        free(g->devices), free(g->slots), free(g->here), free(g);
        return NULL;
    }
    memcpy(g->devices, devices, (size_t)size * sizeof *devices);
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
    g->refs = 1;
    g->size = size;
    g->timeout_s = timeout_s > 0 ? timeout_s : 60;
    return g;
}

void em_local_group_ref(em_local_group *g) {
    if (g) atomic_fetch_add(&g->refs, 1);
}

void em_local_group_unref(em_local_group *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    em_local_group_unref(g->split.parent);
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->cond);
    free(g->devices), free(g->slots), free(g->here), free(g);
}

void em_local_group_set_split(em_local_group *g, const em_local_split *sp) {
    if (!g || !sp || g->split.parent) return;
    em_local_group_ref(sp->parent);
    g->split = *sp;
}

const em_local_split *em_local_group_split(const em_local_group *g) {
    return g ? &g->split : NULL;
}

int em_local_group_size(const em_local_group *g) { return g ? g->size : 0; }

em_device *em_local_group_device(const em_local_group *g, int rank) {
    return g && rank >= 0 && rank < g->size ? g->devices[rank] : NULL;
}

void em_local_break(em_local_group *g, int rank, const char *why) {
    if (!g) return;
    pthread_mutex_lock(&g->lock);
    if (!g->broken) {
        snprintf(g->why, sizeof g->why, "rank %d failed before the collective: %s", rank,
                 why ? why : "");
        g->broken = true;
        pthread_cond_broadcast(&g->cond);
    }
    pthread_mutex_unlock(&g->lock);
}

/* The ranks missing from this round, "1, 3" (lock held). */
static void missing(const em_local_group *g, char *buf, size_t n) {
    size_t u = 0;
    buf[0] = 0;
    for (int r = 0; r < g->size && u + 12 < n; r++)
        if (!g->here[r]) u += (size_t)snprintf(buf + u, n - u, "%s%d", u ? ", " : "", r);
}

em_status em_local_meet(em_local_group *g, int rank, void *mine, em_local_leader_fn leader,
                        void *user, char *err, size_t err_n) {
    if (!g || rank < 0 || rank >= g->size) {
        snprintf(err, err_n, "rank %d is not a rank of this device group", rank);
        return EM_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&g->lock);
    em_status st = EM_OK;
    if (g->broken) {
        snprintf(err, err_n, "the device group is broken: %s", g->why);
        st = EM_ERR_DEVICE;
    } else if (g->here[rank]) {
        snprintf(err, err_n, "rank %d called a collective again before the others joined its "
                 "last one (one thread per rank)", rank);
        st = EM_ERR_INVALID_ARG;
    }
    if (st) {
        pthread_mutex_unlock(&g->lock);
        return st;
    }
    g->slots[rank] = mine;
    g->here[rank] = true;
    if (++g->arrived == g->size) { /* the last one: run it for everyone */
        g->leading = true;
        pthread_mutex_unlock(&g->lock);
        leader(g->slots, g->size, user);
        pthread_mutex_lock(&g->lock);
        g->leading = false;
        g->arrived = 0;
        memset(g->here, 0, (size_t)g->size * sizeof *g->here);
        g->round++;
        pthread_cond_broadcast(&g->cond);
        pthread_mutex_unlock(&g->lock);
        return EM_OK;
    }
    unsigned long round = g->round;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    double t = (double)dl.tv_sec + (double)dl.tv_nsec * 1e-9 + g->timeout_s;
    dl.tv_sec = (time_t)t;
    dl.tv_nsec = (long)((t - (double)dl.tv_sec) * 1e9);
    while (g->round == round && !g->broken) {
        int rc = g->leading ? pthread_cond_wait(&g->cond, &g->lock)
                            : pthread_cond_timedwait(&g->cond, &g->lock, &dl);
        if (rc == ETIMEDOUT && !g->leading && g->round == round && !g->broken) {
            char who[96];
            missing(g, who, sizeof who);
            snprintf(g->why, sizeof g->why, "rank(s) %s of %d did not reach the collective "
                     "within %.3g s (EMBER_DIST_TIMEOUT)", who, g->size, g->timeout_s);
            g->broken = true;
            pthread_cond_broadcast(&g->cond);
        }
    }
    if (g->round == round) { /* broken while waiting */
        snprintf(err, err_n, "%s", g->why);
        st = EM_ERR_DEVICE;
    }
    pthread_mutex_unlock(&g->lock);
    return st;
}

/* A rank's side of the store (dist/store.h): one connection, one request at a time under a
 * lock (a PJRT plugin may call from its own threads), every wait bounded by a deadline. */
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tensor_impl.h"
#include "dist/store.h"
#include "dist/store_wire.h"

struct em_store {
    int fd, rank, world;
    char where[300]; /* "host:port" of the coordinator, for messages */
    pthread_mutex_t mu;
    int dead;  /* the rank the coordinator said died, or -1 */
    bool lost;  /* the coordinator went away */
    bool stale; /* a call timed out: its answer may still come, so the stream is out of step */
};

/* The sticky failure of a store whose group is broken. */
static em_status broken(em_ctx *c, em_store *s) {
    if (s->stale)
        return EM_FAIL(c, EM_ERR_IO, "dist", "an earlier store call of rank %d timed out; the "
                       "group is unusable", s->rank);
    if (s->dead >= 0)
        return EM_FAIL(c, EM_ERR_IO, "dist",
                       "rank %d of %d left the group without em_dist_free (it died or exited); "
                       "rank %d gives up", s->dead, s->world, s->rank);
    return EM_FAIL(c, EM_ERR_IO, "dist",
                   "the coordinator (rank 0 at %s) closed the connection: rank 0 died or left; "
                   "rank %d gives up", s->where, s->rank);
}

/*
 * Sends a request and reads its answer by the deadline: *h and, when the answer has a value,
 * *val (malloc'd, NUL-terminated) — or fails (the store's lock held by the caller).
 */
static em_status call(em_ctx *c, em_store *s, uint32_t type, uint32_t arg, const char *key,
                      const void *v, size_t n, double deadline, const char *what, em_kv_hdr *h,
                      char **val) {
    if (val) *val = NULL;
    if (s->dead >= 0 || s->lost || s->stale) return broken(c, s);
    uint32_t kl = key ? (uint32_t)strlen(key) : 0;
    if (kl > EM_KV_KEY_MAX)
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "dist", "key of %u bytes (at most %d)", kl,
                       EM_KV_KEY_MAX);
    if (n > EM_KV_VALUE_MAX)
        return EM_FAIL(c, EM_ERR_INVALID_ARG, "dist", "value of %zu bytes for key '%s' (at most "
                       "%u)", n, key, EM_KV_VALUE_MAX);
    if (!em_kv_send(s->fd, type, arg, key, kl, v, (uint32_t)n)) {
        s->lost = true;
        return broken(c, s);
    }
    int r = em_kv_read_hdr(s->fd, h, deadline);
    char *b = r == 1 ? malloc(h->klen + h->vlen + 1) : NULL;
    if (r == 1 && (!b || em_kv_read(s->fd, b, h->klen + h->vlen, em_kv_now() + 10) != 1)) r = -2;
    if (r == 0 || r == -2) {
        free(b);
        s->lost = true;
        return broken(c, s);
    }
    if (r < 0) {
        s->stale = true;
        return EM_FAIL(c, EM_ERR_IO, "dist", "%s: no answer from the coordinator (%s) in time "
                       "(rank %d)", what, s->where, s->rank);
    }
    if (h->type == EM_KV_FAIL) {
        free(b);
        s->dead = (int)h->arg;
        return broken(c, s);
    }
    b[h->klen + h->vlen] = 0;
    if (val) {
        memmove(b, b + h->klen, h->vlen + 1);
        *val = b;
    } else {
        free(b);
    }
    return EM_OK;
}

static int try_connect(const char *host, int port) {
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    if (getaddrinfo(host, ps, &hints, &ai) || !ai) return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen)) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

em_status em_store_connect(em_ctx *c, const char *host, int port, int rank, int world,
                           double timeout_s, em_store **out) {
    *out = NULL;
    double deadline = em_kv_now() + timeout_s;
    int fd = -1, err = 0;
    while ((fd = try_connect(host, port)) < 0) {
        err = errno;
        if (em_kv_now() >= deadline)
            return EM_FAIL(c, EM_ERR_IO, "dist",
                           "rank %d could not reach the coordinator %s:%d within %.1f s: %s", rank,
                           host, port, timeout_s, err ? strerror(err) : "cannot resolve the host");
        usleep(50000);
    }
    em_store *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        return EM_FAIL(c, EM_ERR_OOM, "dist", "out of memory");
    }
    s->fd = fd, s->rank = rank, s->world = world, s->dead = -1;
    snprintf(s->where, sizeof s->where, "%s:%d", host, port);
    pthread_mutex_init(&s->mu, NULL);
    em_kv_hdr h;
    char *why = NULL;
    em_status st = call(c, s, EM_KV_HELLO, (uint32_t)rank, NULL, NULL, 0, deadline, "rendezvous",
                        &h, &why);
    if (st == EM_OK && h.type == EM_KV_REJECT)
        st = EM_FAIL(c, EM_ERR_INVALID_ARG, "dist", "the coordinator %s refused rank %d of %d: %s",
                     s->where, rank, world, why);
    else if (st == EM_OK && h.type != EM_KV_READY)
        st = EM_FAIL(c, EM_ERR_IO, "dist", "rendezvous: unexpected answer %u", h.type);
    else if (st && c->err.status == EM_ERR_IO && s->dead < 0 && !s->lost) {
        em_ctx_clear_error(c);
        st = EM_FAIL(c, EM_ERR_IO, "dist",
                     "rendezvous: not all %d ranks reached the coordinator %s within %.1f s "
                     "(rank %d waited; a rank not started, or a wrong EMBER_WORLD_SIZE?)", world,
                     s->where, timeout_s, rank);
    }
    free(why);
    if (st) {
        em_store_close(s);
        return st;
    }
    *out = s;
    return EM_OK;
}

em_status em_store_put(em_ctx *c, em_store *s, const char *key, const void *v, size_t n) {
    em_kv_hdr h;
    pthread_mutex_lock(&s->mu);
    em_status st = call(c, s, EM_KV_PUT, 0, key, v, n, em_kv_now() + 60, "put", &h, NULL);
    pthread_mutex_unlock(&s->mu);
    return st;
}

em_status em_store_get(em_ctx *c, em_store *s, const char *key, double timeout_s, void **v,
                       size_t *n) {
    *v = NULL;
    *n = 0;
    em_kv_hdr h;
    char *val = NULL;
    double ms = timeout_s * 1000;
    uint32_t wait_ms = ms < 0 ? 0 : ms > 4e9 ? 4000000000u : (uint32_t)ms;
    pthread_mutex_lock(&s->mu);
    /* the server answers MISSING at the deadline; the grace covers a slow server, not a lost one */
    em_status st = call(c, s, EM_KV_GET, wait_ms, key, NULL, 0, em_kv_now() + timeout_s + 10,
                        "get", &h, &val);
    pthread_mutex_unlock(&s->mu);
    if (st) return st;
    if (h.type == EM_KV_MISSING) {
        free(val);
        return EM_FAIL(c, EM_ERR_NOT_FOUND, "dist",
                       "key '%s' not found in the store after waiting %.1f s (rank %d of %d)",
                       key, timeout_s, s->rank, s->world);
    }
    *v = val;
    *n = h.vlen;
    return EM_OK;
}

em_status em_store_barrier(em_ctx *c, em_store *s, double timeout_s) {
    em_kv_hdr h;
    pthread_mutex_lock(&s->mu);
    em_status st = call(c, s, EM_KV_BARRIER, 0, NULL, NULL, 0, em_kv_now() + timeout_s,
                        "barrier", &h, NULL);
    pthread_mutex_unlock(&s->mu);
    return st;
}

void em_store_close(em_store *s) {
    if (!s) return;
    if (s->dead < 0 && !s->lost && !s->stale) em_kv_send(s->fd, EM_KV_BYE, 0, NULL, 0, NULL, 0);
    close(s->fd);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

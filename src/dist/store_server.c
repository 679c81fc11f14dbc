/*
 * Rank 0's store server: one thread polling the listening socket and one connection per rank.
 * It keeps the map, answers gets when their key arrives (or MISSING at their deadline), counts
 * barriers, and when a rank's connection closes without BYE tells every other rank (FAIL) and
 * refuses every later request: a dead peer turns into errors everywhere, never into a wait.
 */
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

enum { R_NONE, R_ALIVE, R_LEFT, R_DEAD }; /* a rank's state */

typedef struct kv_item {
    char *key;
    void *val;
    uint32_t n;
} kv_item;

typedef struct kv_wait {
    int rank;
    char *key;
    double deadline;
} kv_wait;

#define MAX_NEW 64 /* connections that have not said HELLO yet */

struct em_store_server {
    int lfd, wake[2], world;
    pthread_t th;
    int *fd, *state;
    bool *in_barrier;
    int n_barrier, n_hello, dead;
    int new_fd[MAX_NEW], n_new;
    kv_item *items;
    int n_items, cap_items;
    kv_wait *waits;
    int n_waits, cap_waits;
    pthread_mutex_t mu; /* guards stop and stop_at */
    bool stop;
    double stop_at;
};

static kv_item *find(em_store_server *s, const char *key) {
    for (int i = 0; i < s->n_items; i++)
        if (!strcmp(s->items[i].key, key)) return &s->items[i];
    return NULL;
}

static void drop(em_store_server *s, int r, int state) {
    if (s->fd[r] >= 0) close(s->fd[r]);
    s->fd[r] = -1;
    s->state[r] = state;
}

static void died(em_store_server *s, int r);

static void send_to(em_store_server *s, int r, uint32_t type, uint32_t arg, const char *key,
                    const void *val, uint32_t n) {
    if (s->fd[r] >= 0 && !em_kv_send(s->fd[r], type, arg, key, key ? (uint32_t)strlen(key) : 0,
                                     val, n))
        died(s, r);
}

/* A rank closed without BYE: tell everyone once; later requests get FAIL too. Before the
 * rendezvous completes a rank that gives up only frees its place (each rank's own timeout
 * reports the incomplete rendezvous). */
static void died(em_store_server *s, int r) {
    if (s->n_hello < s->world && s->state[r] == R_ALIVE) {
        drop(s, r, R_NONE);
        s->n_hello--;
        return;
    }
    drop(s, r, R_DEAD);
    if (s->dead >= 0) return;
    s->dead = r;
    for (int i = 0; i < s->world; i++)
        if (s->state[i] == R_ALIVE) send_to(s, i, EM_KV_FAIL, (uint32_t)r, NULL, NULL, 0);
}

static void put(em_store_server *s, char *key, void *val, uint32_t n) {
    kv_item *it = find(s, key);
    if (it) {
        free(it->val);
        free(key);
    } else {
        if (s->n_items == s->cap_items) {
            int cap = s->cap_items ? 2 * s->cap_items : 16;
            kv_item *g = realloc(s->items, (size_t)cap * sizeof *g);
            if (!g) {
                free(key), free(val);
                return; /* the get then times out naming the key */
            }
            s->items = g;
            s->cap_items = cap;
        }
        it = &s->items[s->n_items++];
        it->key = key;
    }
    it->val = val;
    it->n = n;
    for (int i = 0; i < s->n_waits;) /* answer the gets that waited for it */
        if (!strcmp(s->waits[i].key, it->key)) {
            send_to(s, s->waits[i].rank, EM_KV_VALUE, 0, it->key, it->val, it->n);
            free(s->waits[i].key);
            s->waits[i] = s->waits[--s->n_waits];
        } else {
            i++;
        }
}

static void wait_for(em_store_server *s, int r, char *key, uint32_t ms) {
    if (s->n_waits == s->cap_waits) {
        int cap = s->cap_waits ? 2 * s->cap_waits : 16;
        kv_wait *g = realloc(s->waits, (size_t)cap * sizeof *g);
        if (!g) {
            send_to(s, r, EM_KV_MISSING, 0, key, NULL, 0);
            free(key);
            return;
        }
        s->waits = g;
        s->cap_waits = cap;
    }
    s->waits[s->n_waits++] = (kv_wait){r, key, em_kv_now() + ms / 1000.0};
}

/* One request from rank r (its header already read). */
static void request(em_store_server *s, int r, const em_kv_hdr *h) {
    char *key = malloc(h->klen + 1);
    char *val = malloc(h->vlen + 1);
    double dl = em_kv_now() + 10; /* the rest of a message follows its header at once */
    if (!key || !val || em_kv_read(s->fd[r], key, h->klen, dl) != 1 ||
        em_kv_read(s->fd[r], val, h->vlen, dl) != 1) {
        free(key), free(val);
        died(s, r);
        return;
    }
    key[h->klen] = 0;
    if (s->dead >= 0 && h->type != EM_KV_BYE) {
        send_to(s, r, EM_KV_FAIL, (uint32_t)s->dead, NULL, NULL, 0);
        free(key), free(val);
        return;
    }
    switch (h->type) {
    case EM_KV_PUT:
        send_to(s, r, EM_KV_OK, 0, NULL, NULL, 0);
        put(s, key, val, h->vlen);
        return;
    case EM_KV_GET: {
        kv_item *it = find(s, key);
        if (it) {
            send_to(s, r, EM_KV_VALUE, 0, key, it->val, it->n);
            free(key);
        } else {
            wait_for(s, r, key, h->arg);
        }
        break;
    }
    case EM_KV_BARRIER:
        free(key);
        if (!s->in_barrier[r]) s->in_barrier[r] = true, s->n_barrier++;
        if (s->n_barrier == s->world) {
            for (int i = 0; i < s->world; i++) {
                s->in_barrier[i] = false;
                send_to(s, i, EM_KV_OK, 0, NULL, NULL, 0);
            }
            s->n_barrier = 0;
        }
        break;
    case EM_KV_BYE:
        free(key);
        drop(s, r, R_LEFT);
        break;
    default:
        free(key);
        died(s, r); /* a client speaking nonsense is as good as gone */
    }
    free(val);
}

/* A new connection's HELLO: which rank it is. */
static void hello(em_store_server *s, int k) {
    int fd = s->new_fd[k];
    s->new_fd[k] = s->new_fd[--s->n_new];
    em_kv_hdr h;
    if (em_kv_read_hdr(fd, &h, em_kv_now() + 10) != 1 || h.type != EM_KV_HELLO || h.klen ||
        h.vlen) {
        close(fd);
        return;
    }
    int r = (int)h.arg;
    if (r < 0 || r >= s->world || s->state[r] != R_NONE) {
        const char *why = r < 0 || r >= s->world ? "rank out of range" : "rank already joined";
        em_kv_send(fd, EM_KV_REJECT, h.arg, NULL, 0, why, (uint32_t)strlen(why));
        close(fd);
        return;
    }
    s->fd[r] = fd;
    s->state[r] = R_ALIVE;
    if (s->dead >= 0) {
        send_to(s, r, EM_KV_FAIL, (uint32_t)s->dead, NULL, NULL, 0);
        return;
    }
    if (++s->n_hello == s->world)
        for (int i = 0; i < s->world; i++) send_to(s, i, EM_KV_READY, 0, NULL, NULL, 0);
}

static bool finished(em_store_server *s) {
    bool all_gone = true;
    for (int i = 0; i < s->world; i++)
        if (s->state[i] == R_NONE || s->state[i] == R_ALIVE) all_gone = false;
    pthread_mutex_lock(&s->mu);
    bool late = s->stop && em_kv_now() >= s->stop_at;
    pthread_mutex_unlock(&s->mu);
    return all_gone || late;
}

static void *serve(void *arg) {
    em_store_server *s = arg;
    struct pollfd *p = malloc((size_t)(2 + MAX_NEW + s->world) * sizeof *p);
    int *who = malloc((size_t)(2 + MAX_NEW + s->world) * sizeof *who);
    while (p && who && !finished(s)) {
        int n = 0;
        p[n] = (struct pollfd){s->lfd, POLLIN, 0}, who[n++] = -1;
        p[n] = (struct pollfd){s->wake[0], POLLIN, 0}, who[n++] = -2;
        for (int k = 0; k < s->n_new; k++)
            p[n] = (struct pollfd){s->new_fd[k], POLLIN, 0}, who[n++] = -3 - k;
        for (int r = 0; r < s->world; r++)
            if (s->fd[r] >= 0) p[n] = (struct pollfd){s->fd[r], POLLIN, 0}, who[n++] = r;
        double next = em_kv_now() + 1; /* re-check stop at least every second */
        for (int i = 0; i < s->n_waits; i++)
            if (s->waits[i].deadline < next) next = s->waits[i].deadline;
        int ms = (int)((next - em_kv_now()) * 1000) + 1;
        int got = poll(p, (nfds_t)n, ms < 0 ? 0 : ms);
        for (int i = 0; got > 0 && i < n; i++) {
            if (!p[i].revents) continue;
            if (who[i] == -1) {
                int fd = accept(s->lfd, NULL, NULL);
                if (fd >= 0 && s->n_new < MAX_NEW) s->new_fd[s->n_new++] = fd;
                else if (fd >= 0) close(fd);
            } else if (who[i] == -2) {
                char b[16];
                if (read(s->wake[0], b, sizeof b) < 0) { /* only wakes the poll */ }
            } else if (who[i] <= -3) {
                /* index shifts as hellos are taken: find this fd again */
                for (int k = 0; k < s->n_new; k++)
                    if (s->new_fd[k] == p[i].fd) {
                        hello(s, k);
                        break;
                    }
            } else if (s->fd[who[i]] == p[i].fd) {
                em_kv_hdr h;
                int r = em_kv_read_hdr(p[i].fd, &h, em_kv_now() + 10);
                if (r == 1) request(s, who[i], &h);
                else died(s, who[i]);
            }
        }
        double now = em_kv_now();
        for (int i = 0; i < s->n_waits;)
            if (s->waits[i].deadline <= now) {
                send_to(s, s->waits[i].rank, EM_KV_MISSING, 0, s->waits[i].key, NULL, 0);
                free(s->waits[i].key);
                s->waits[i] = s->waits[--s->n_waits];
            } else {
                i++;
            }
    }
    free(p);
    free(who);
    return NULL;
}

static void server_free(em_store_server *s) {
    if (s->lfd >= 0) close(s->lfd);
    for (int k = 0; k < s->n_new; k++) close(s->new_fd[k]);
    for (int r = 0; s->fd && r < s->world; r++)
        if (s->fd[r] >= 0) close(s->fd[r]);
    for (int i = 0; i < s->n_items; i++) free(s->items[i].key), free(s->items[i].val);
    for (int i = 0; i < s->n_waits; i++) free(s->waits[i].key);
    if (s->wake[0] >= 0) close(s->wake[0]), close(s->wake[1]);
    pthread_mutex_destroy(&s->mu);
    free(s->items), free(s->waits), free(s->fd), free(s->state), free(s->in_barrier);
    free(s);
}

em_status em_store_server_start(em_ctx *c, const char *host, int port, int world,
                                em_store_server **out, int *bound) {
    *out = NULL;
    em_store_server *s = calloc(1, sizeof *s);
    if (!s) return EM_FAIL(c, EM_ERR_OOM, "dist", "out of memory");
    s->lfd = s->wake[0] = s->wake[1] = -1;
    s->world = world;
    s->dead = -1;
    pthread_mutex_init(&s->mu, NULL);
    s->fd = malloc((size_t)world * sizeof *s->fd);
    s->state = calloc((size_t)world, sizeof *s->state);
    s->in_barrier = calloc((size_t)world, sizeof *s->in_barrier);
    if (!s->fd || !s->state || !s->in_barrier || pipe(s->wake)) {
        server_free(s);
        return EM_FAIL(c, EM_ERR_OOM, "dist", "out of memory (or pipes)");
    }
    for (int r = 0; r < world; r++) s->fd[r] = -1;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_INET;
    if (!host || !*host || !strcmp(host, "*")) {
        a.sin_addr.s_addr = htonl(INADDR_ANY);
    } else if (getaddrinfo(host, NULL, &hints, &ai) || !ai) {
        server_free(s);
        return EM_FAIL(c, EM_ERR_IO, "dist", "cannot resolve the coordinator host '%s'", host);
    } else {
        a.sin_addr = ((struct sockaddr_in *)ai->ai_addr)->sin_addr;
        freeaddrinfo(ai);
    }
    int one = 1;
    socklen_t len = sizeof a;
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->lfd < 0 || setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(s->lfd, (struct sockaddr *)&a, sizeof a) || listen(s->lfd, 128) ||
        getsockname(s->lfd, (struct sockaddr *)&a, &len)) {
        int e = errno;
        server_free(s);
        return EM_FAIL(c, EM_ERR_IO, "dist", "rank 0 cannot listen on %s:%d: %s",
                       host && *host ? host : "*", port, strerror(e));
    }
    *bound = ntohs(a.sin_port);
    if (pthread_create(&s->th, NULL, serve, s)) {
        server_free(s);
        return EM_FAIL(c, EM_ERR_INTERNAL, "dist", "cannot start the store's thread");
    }
    *out = s;
    return EM_OK;
}

void em_store_server_stop(em_store_server *s, double linger_s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    s->stop_at = em_kv_now() + linger_s;
    pthread_mutex_unlock(&s->mu);
    if (write(s->wake[1], "x", 1) < 0) { /* the poll wakes within a second anyway */ }
    pthread_join(s->th, NULL);
    server_free(s);
}

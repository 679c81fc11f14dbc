/*
 * The store's wire format: a header of four big-endian u32 (type, arg, key bytes, value bytes)
 * followed by the key and the value. Requests: HELLO (arg: rank), PUT, GET (arg: timeout in ms),
 * BARRIER, BYE. Answers: READY, OK, VALUE, MISSING, FAIL (arg: the rank that died), REJECT.
 * Sends never raise SIGPIPE (MSG_NOSIGNAL): a peer gone is an error, not a signal.
 */
#ifndef EMBER_DIST_STORE_WIRE_H
#define EMBER_DIST_STORE_WIRE_H

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

enum {
    EM_KV_HELLO = 1,
    EM_KV_PUT = 2,
    EM_KV_GET = 3,
    EM_KV_BARRIER = 4,
    EM_KV_BYE = 5,
    EM_KV_READY = 16,
    EM_KV_OK = 17,
    EM_KV_VALUE = 18,
    EM_KV_MISSING = 19,
    EM_KV_FAIL = 20,
    EM_KV_REJECT = 21
};

#define EM_KV_KEY_MAX 1024
#define EM_KV_VALUE_MAX ((uint32_t)64 << 20)

typedef struct em_kv_hdr {
    uint32_t type, arg, klen, vlen;
} em_kv_hdr;

static inline double em_kv_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Waits until fd is readable or the deadline (em_kv_now() seconds; < 0: none) passes. */
static inline bool em_kv_wait(int fd, double deadline) {
    for (;;) {
        int ms = -1;
        if (deadline >= 0) {
            double left = deadline - em_kv_now();
            if (left <= 0) return false;
            ms = (int)(left * 1000) + 1;
        }
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, ms);
        if (r > 0) return true;
        if (r < 0 && errno != EINTR) return true; /* let the read report it */
    }
}

/* Reads n bytes by the deadline: 1 done, 0 the peer closed, -1 error or time out. */
static inline int em_kv_read(int fd, void *buf, size_t n, double deadline) {
    char *p = buf;
    while (n) {
        if (!em_kv_wait(fd, deadline)) return -1;
        ssize_t r = recv(fd, p, n, 0);
        if (r == 0) return 0;
        if (r < 0) {
            if (errno == EINTR) continue;
            return errno == ECONNRESET ? 0 : -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 1;
}

static inline bool em_kv_write(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

static inline bool em_kv_send(int fd, uint32_t type, uint32_t arg, const void *key, uint32_t klen,
                              const void *val, uint32_t vlen) {
    uint32_t h[4] = {htonl(type), htonl(arg), htonl(klen), htonl(vlen)};
    return em_kv_write(fd, h, sizeof h) && em_kv_write(fd, key, klen) &&
           em_kv_write(fd, val, vlen);
}

/* Reads a header: 1, 0 (closed) or -1 (error, time out, or sizes beyond the limits). */
static inline int em_kv_read_hdr(int fd, em_kv_hdr *h, double deadline) {
    uint32_t w[4];
    int r = em_kv_read(fd, w, sizeof w, deadline);
    if (r != 1) return r;
    h->type = ntohl(w[0]);
    h->arg = ntohl(w[1]);
    h->klen = ntohl(w[2]);
    h->vlen = ntohl(w[3]);
    return h->klen > EM_KV_KEY_MAX || h->vlen > EM_KV_VALUE_MAX ? -1 : 1;
}

#endif

/*
 * The process group's TCP bootstrap and key-value store with 2-4 real processes (forked here,
 * each given EMBER_RANK / EMBER_WORLD_SIZE / EMBER_COORDINATOR as a launcher would): values
 * cross ranks, a missing key fails naming it, a rank that dies makes the others fail naming it,
 * a rank that never comes makes the rendezvous fail. Every run is bounded: a child still alive
 * after 60 s is killed and the test fails as hung.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ember/ember.h"
#include "harness.h"

#define EXPECTED 42 /* a child that saw the failure it was meant to see */

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) ||
        getsockname(fd, (struct sockaddr *)&a, &n)) {
        if (fd >= 0) close(fd);
        return 29500;
    }
    close(fd);
    return ntohs(a.sin_port);
}

static em_dist *join(em_ctx *c, double timeout_s) {
    em_dist_params p = em_dist_default_params();
    p.bootstrap = EM_DIST_ENV;
    p.timeout_s = timeout_s;
    em_dist *g = NULL;
    em_dist_init(c, &p, &g);
    return g;
}

static int fail(em_ctx *c, const char *what) {
    fprintf(stderr, "rank %s: %s: %s\n", getenv("EMBER_RANK"), what,
            em_ctx_status(c) ? em_ctx_error(c)->message : "(no error recorded)");
    return 1;
}

static bool has(em_ctx *c, const char *s) {
    return em_ctx_status(c) && strstr(em_ctx_error(c)->message, s);
}

/* ---- the children ---- */

static int child_kv(em_ctx *c) {
    em_dist *g = join(c, 20);
    if (!g) return fail(c, "init");
    int rank = em_dist_rank(g), world = em_dist_world_size(g);
    char key[32], val[64];
    snprintf(key, sizeof key, "k%d", rank);
    snprintf(val, sizeof val, "value of rank %d", rank);
    if (em_dist_put(c, g, key, val, strlen(val))) return fail(c, "put");
    for (int r = world - 1; r >= 0; r--) { /* gets that wait for puts not made yet, too */
        void *v;
        size_t n;
        snprintf(key, sizeof key, "k%d", r);
        snprintf(val, sizeof val, "value of rank %d", r);
        if (em_dist_get(c, g, key, 20, &v, &n)) return fail(c, "get");
        bool same = n == strlen(val) && !memcmp(v, val, n);
        free(v);
        if (!same) return fail(c, "wrong value");
    }
    void *v = NULL;
    size_t n;
    if (em_dist_get(c, g, "missing/key", 0.3, &v, &n) != EM_ERR_NOT_FOUND ||
        !has(c, "key 'missing/key' not found"))
        return fail(c, "missing key");
    em_ctx_clear_error(c);
    if (em_dist_barrier(c, g)) return fail(c, "barrier");
    em_dist_free(g);
    return 0;
}

/* The last rank exits without em_dist_free; the others wait on a key that never comes. */
static int child_dead(em_ctx *c) {
    em_dist *g = join(c, 20);
    if (!g) return fail(c, "init");
    int rank = em_dist_rank(g), world = em_dist_world_size(g);
    if (rank == world - 1) _exit(3);
    void *v;
    size_t n;
    char who[64];
    snprintf(who, sizeof who, "rank %d of %d left", world - 1, world);
    if (em_dist_get(c, g, "never", 50, &v, &n) != EM_ERR_IO || !has(c, who))
        return fail(c, "dead peer not reported");
    fprintf(stderr, "rank %d saw: %s\n", rank, em_ctx_error(c)->message);
    em_ctx_clear_error(c);
    em_dist_free(g);
    return EXPECTED;
}

/* Not every rank comes: the rendezvous fails by its timeout. */
static int child_short(em_ctx *c) {
    em_dist *g = join(c, 1);
    if (g) return fail(c, "init succeeded without every rank");
    /* its own rendezvous timeout, or rank 0 (the coordinator) giving up first */
    if (!has(c, "rendezvous") && !has(c, "could not reach") && !has(c, "coordinator"))
        return fail(c, "wrong message");
    return EXPECTED;
}

static int child_bad_env(em_ctx *c) {
    em_dist *g = join(c, 1);
    if (g || !has(c, "EMBER_RANK is '5'")) return fail(c, "bad EMBER_RANK accepted");
    return EXPECTED;
}

/* ---- the launcher ---- */

typedef int (*child_fn)(em_ctx *c);

/* Forks one child per rank in ranks[0..n) of a world of `world`, waits (60 s at most) and
 * stores their exit codes (-1: killed as hung or by a signal). */
static void launch(child_fn fn, int world, const int *ranks, int n, int *codes) {
    char port[16], ws[16];
    snprintf(port, sizeof port, "127.0.0.1:%d", free_port());
    snprintf(ws, sizeof ws, "%d", world);
    pid_t pid[8];
    for (int i = 0; i < n; i++) {
        pid[i] = fork();
        if (pid[i] == 0) {
            char rs[16];
            snprintf(rs, sizeof rs, "%d", ranks[i]);
            setenv("EMBER_RANK", rs, 1);
            setenv("EMBER_WORLD_SIZE", ws, 1);
            setenv("EMBER_COORDINATOR", port, 1);
            em_ctx *c = em_ctx_create();
            int rc = fn(c);
            em_ctx_free(c);
            fflush(NULL);
            _exit(rc);
        }
        codes[i] = -1;
    }
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int left = n;
    while (left) {
        for (int i = 0; i < n; i++) {
            int st;
            if (pid[i] > 0 && waitpid(pid[i], &st, WNOHANG) == pid[i]) {
                codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
                pid[i] = 0;
                left--;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (left && t.tv_sec - t0.tv_sec > 60) {
            for (int i = 0; i < n; i++)
                if (pid[i] > 0) {
                    fprintf(stderr, "rank %d hung: killed\n", ranks[i]);
                    kill(pid[i], SIGKILL);
                    waitpid(pid[i], NULL, 0);
                }
            break;
        }
        usleep(10000);
    }
}

static void test_kv(void) {
    for (int world = 2; world <= 4; world++) {
        int ranks[4] = {0, 1, 2, 3}, codes[4];
        launch(child_kv, world, ranks, world, codes);
        for (int i = 0; i < world; i++)
            CHECK_MSG(codes[i] == 0, "world %d rank %d exit %d", world, i, codes[i]);
    }
}

static void test_dead_peer(void) {
    for (int world = 2; world <= 4; world += 2) {
        int ranks[4] = {0, 1, 2, 3}, codes[4];
        launch(child_dead, world, ranks, world, codes);
        for (int i = 0; i < world - 1; i++)
            CHECK_MSG(codes[i] == EXPECTED, "world %d rank %d exit %d", world, i, codes[i]);
        CHECK(codes[world - 1] == 3);
    }
}

static void test_rank_missing(void) {
    int codes[2];
    launch(child_short, 3, (int[]){0, 1}, 2, codes); /* rank 2 never comes */
    CHECK_MSG(codes[0] == EXPECTED && codes[1] == EXPECTED, "exits %d %d", codes[0], codes[1]);
    launch(child_short, 2, (int[]){1}, 1, codes); /* no rank 0: nobody listens */
    CHECK_MSG(codes[0] == EXPECTED, "exit %d", codes[0]);
}

static void test_bad_env(void) {
    int codes[1];
    launch(child_bad_env, 2, (int[]){5}, 1, codes);
    CHECK_MSG(codes[0] == EXPECTED, "exit %d", codes[0]);
}

EM_TEST_MAIN(T(test_kv), T(test_dead_peer), T(test_rank_missing), T(test_bad_env))

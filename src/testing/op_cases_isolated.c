/*
 * Op cases run in child processes (see em_opcases_run_isolated in op_cases.h). A compiler that
 * crashes on one program (libtpu 0.0.51 did, with SIGSEGV, on a softmax) would otherwise end the
 * whole conformance report; here it ends one child, the case it was compiling is reported as
 * failed with the signal, and a new child goes on with the next case.
 *
 * A child is forked from a parent that has run nothing on the device (the report's parent only
 * loads fixtures), so no thread of the plugin or of Ember's pool is lost across the fork.
 */

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testing/op_cases.h"

enum { REC_START = 1, REC_RESULT, REC_DONE };

typedef struct rec {
    int kind, i;
    em_opcase_result r;
    em_pjrt_cache_stats st;
} rec;

static bool write_all(int fd, const void *p, size_t n) {
    const char *b = p;
    while (n) {
        ssize_t k = write(fd, b, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        b += k, n -= (size_t)k;
    }
    return true;
}

/* 1: a whole record; 0: end of file; -1: an error or a partial record (the writer died). */
static int read_rec(int fd, rec *r) {
    char *b = (char *)r;
    size_t got = 0;
    while (got < sizeof *r) {
        ssize_t k = read(fd, b + got, sizeof *r - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return got == 0 && k == 0 ? 0 : -1;
        got += (size_t)k;
    }
    return 1;
}

static void stats_delta(em_pjrt_cache_stats *d, const em_pjrt_cache_stats *a,
                        const em_pjrt_cache_stats *b) {
    memset(d, 0, sizeof *d);
    d->hits = b->hits - a->hits, d->misses = b->misses - a->misses;
    d->compiles = b->compiles - a->compiles, d->disk_hits = b->disk_hits - a->disk_hits;
    d->disk_writes = b->disk_writes - a->disk_writes, d->failures = b->failures - a->failures;
    d->compile_seconds = b->compile_seconds - a->compile_seconds;
}

static void stats_add(em_pjrt_cache_stats *t, const em_pjrt_cache_stats *d) {
    t->hits += d->hits, t->misses += d->misses, t->compiles += d->compiles;
    t->disk_hits += d->disk_hits, t->disk_writes += d->disk_writes, t->failures += d->failures;
    t->compile_seconds += d->compile_seconds;
}

static _Noreturn void child(em_ctx *c, const em_opcase_set *s, const int *idx, int n, int from,
                            em_device *dev, int fd) {
    em_pjrt_cache_stats st0, st1;
    bool have_stats = em_pjrt_cache_stats_get(dev, &st0) == EM_OK;
    rec r;
    for (int k = from; k < n; k++) {
        memset(&r, 0, sizeof r);
        r.kind = REC_START, r.i = k;
        if (!write_all(fd, &r, sizeof r)) _exit(3);
        r.kind = REC_RESULT;
        em_opcases_run(c, s, idx[k], dev, &r.r);
        if (!write_all(fd, &r, sizeof r)) _exit(3);
    }
    memset(&r, 0, sizeof r);
    if (have_stats && em_pjrt_cache_stats_get(dev, &st1) == EM_OK) stats_delta(&r.st, &st0, &st1);
    r.kind = REC_DONE;
    write_all(fd, &r, sizeof r);
    /* no exit handlers: they belong to the parent (and the plugin's may not expect a fork) */
    _exit(0);
}

em_status em_opcases_run_isolated(em_ctx *c, const em_opcase_set *s, const int *idx, int n,
                                  em_device *dev, em_opcase_sink sink, void *user,
                                  em_pjrt_cache_stats *stats, int *crashes) {
    rec r; /* one record at a time */
    int from = 0;
    if (crashes) *crashes = 0;
    while (from < n) {
        int fds[2];
        if (pipe(fds) != 0) return EM_ERR_IO;
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0) {
            close(fds[0]), close(fds[1]);
            return EM_ERR_IO;
        }
        if (pid == 0) {
            close(fds[0]);
            child(c, s, idx, n, from, dev, fds[1]);
        }
        close(fds[1]);
        int started = -1, got;
        bool done = false;
        while ((got = read_rec(fds[0], &r)) == 1) {
            if (r.kind == REC_START) {
                started = r.i;
            } else if (r.kind == REC_RESULT) {
                sink(user, idx[r.i], &r.r);
                started = -1;
                from = r.i + 1;
            } else if (r.kind == REC_DONE) {
                if (stats) stats_add(stats, &r.st);
                done = true;
            }
        }
        close(fds[0]);
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (done) break;
        /* the child died: the case it had started is the one that killed it */
        em_opcase_result fail;
        memset(&fail, 0, sizeof fail);
        fail.compile_only = true;
        if (WIFSIGNALED(status))
            snprintf(fail.msg, sizeof fail.msg,
                     "the process running this case died of signal %d (%s), most likely in "
                     "the plugin's compiler; the report went on in a new process",
                     WTERMSIG(status), strsignal(WTERMSIG(status)));
        else
            snprintf(fail.msg, sizeof fail.msg,
                     "the process running this case exited with status %d before reporting it",
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        if (crashes) (*crashes)++;
        int k = started >= 0 ? started : from;
        if (k >= n) break;
        sink(user, idx[k], &fail);
        from = k + 1;
    }
    return EM_OK;
}

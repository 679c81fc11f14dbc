/* The ranks of a device group of this process, one thread each (tools/ember/cli.h). */
#include <pthread.h>
#include <stdio.h>

#include "cli.h"

typedef struct rank_job {
    cli_rank_fn fn;
    void *arg;
    em_dist *g;
    int rc;
} rank_job;

/* A rank other than 0: the same work on its own context, silently. */
static void *rank_main(void *p) {
    rank_job *j = p;
    em_ctx *c = em_ctx_create();
    j->rc = c ? j->fn(j->arg, c, j->g, false) : 1;
    em_ctx_free(c);
    return NULL;
}

int cli_device_group(em_ctx *c, const char *what, const char *kind, int n, cli_rank_fn fn,
                     void *arg) {
    em_dist *g[64];
    if (n > 64 || em_dist_local(c, kind, n, NULL, g) != EM_OK) {
        fprintf(stderr, "ember %s %d on %s: %s\n", what, n, kind,
                n > 64 ? "at most 64 devices" : em_ctx_error(c)->message);
        return 1;
    }
    rank_job jobs[64];
    pthread_t t[64];
    int started = 1;
    for (int r = 1; r < n; r++, started++) {
        jobs[r] = (rank_job){fn, arg, g[r], 1};
        if (pthread_create(&t[r], NULL, rank_main, &jobs[r])) break;
    }
    int rc = 1;
    if (started == n) rc = fn(arg, c, g[0], true);
    else fprintf(stderr, "ember %s: cannot start a thread per rank\n", what);
    for (int r = 1; r < started; r++) {
        pthread_join(t[r], NULL);
        if (jobs[r].rc) rc = rc ? rc : jobs[r].rc;
    }
    for (int r = 0; r < n; r++) em_dist_free(g[r]);
    return rc;
}

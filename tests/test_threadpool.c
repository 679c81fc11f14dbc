/* The CPU thread pool under back-to-back tiny jobs, more threads than cores (so that workers are
 * preempted at every point of the job protocol), parallel_for and parallel_each interleaved.
 * A worker that joins a job late must never take part in the next one: a watchdog turns a
 * hang into a failure. The test counts jobs, never time: how fast the pool is on a busy machine
 * is `ember bench pool`'s question. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "backends/cpu/cpu.h"
#include "ember/ember.h"
#include "harness.h"

#define ITEMS 64

typedef struct job {
    atomic_int hits[ITEMS];
    atomic_int each_calls;
    int round;
    atomic_int wrong_round;
} job;

static void count_items(void *user, int64_t b, int64_t e, int tid) {
    (void)tid;
    job *j = user;
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&j->hits[i], 1);
}

static void count_each(void *user, int tid, int n) {
    (void)tid, (void)n;
    atomic_fetch_add(&((job *)user)->each_calls, 1);
}

static atomic_int progress;

static void *watchdog(void *arg) {
    (void)arg;
    int last = -1;
    for (;;) {
        sleep(20);
        int now = atomic_load(&progress);
        if (now < 0) return NULL;
        if (now == last) {
            fprintf(stderr, "thread pool hung: no job finished in 20 s (after %d jobs)\n", now);
            abort();
        }
        last = now;
    }
}

/* Enough back-to-back jobs to hit the protocol's windows many times over (each job opens and
 * closes once; with more threads than cores workers are preempted inside them). */
#define JOBS 2000

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void stress(int threads) {
    em_set_num_threads(threads);
    job *j = calloc(1, sizeof *j);
    int bad = 0, jobs = 0;
    double t0 = seconds(); /* printed for information only */
    for (; jobs < JOBS; jobs++) {
        for (int i = 0; i < ITEMS; i++) atomic_store(&j->hits[i], 0);
        atomic_store(&j->each_calls, 0);
        int64_t n = 2 + jobs % (ITEMS - 1); /* 2..64 items, one per chunk at small n */
        em_parallel_for(n, 1, count_items, j);
        for (int64_t i = 0; i < ITEMS; i++)
            bad += atomic_load(&j->hits[i]) != (i < n ? 1 : 0);
        if (jobs % 7 == 0) {
            em_parallel_each(count_each, j);
            bad += atomic_load(&j->each_calls) != em_num_threads();
        }
        atomic_fetch_add(&progress, 1);
    }
    CHECK(bad == 0);
    printf("  %d threads: %d jobs, %d wrong counts (%.2f s)\n", threads, jobs, bad, seconds() - t0);
    free(j);
}

static void test_back_to_back_jobs(void) {
    pthread_t wd;
    pthread_create(&wd, NULL, watchdog, NULL);
    int saved = em_num_threads();
    stress(2);
    stress(3);
    stress(5);
    em_set_num_threads(saved);
    atomic_store(&progress, -1000000000);
    pthread_cancel(wd);
    pthread_join(wd, NULL);
}

EM_TEST_MAIN(T(test_back_to_back_jobs))

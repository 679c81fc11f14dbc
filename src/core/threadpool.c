/*
 * A persistent thread pool. One job runs at a time; a job submitted from inside a worker runs
 * inline on that worker.
 *
 * The job protocol: `generation` is odd while a job is open and even while the submitter sets
 * up the next one. A worker registers in `active` before it reads any field of the job and then
 * checks that the generation is still the odd one it saw; the submitter closes the job (makes
 * the generation even) and then waits for `active` to drain before it touches the fields again
 * (both sides sequentially consistent, so one of them sees the other). Without the closing step
 * a worker that woke late for one job could see the next job's fields before its generation
 * was published, run its chunks and have its counts reset under it: items done twice or never,
 * or a submitter waiting forever (tests/test_threadpool.c caught both).
 *
 * Waiting (a worker for the next job; the submitter for the job's last items and for registered
 * workers to leave): spin briefly, then yield a few times, then sleep on a futex. Decode submits
 * jobs a few microseconds apart and waking a sleeping thread costs 5-50 us, so on an idle
 * machine a short spin pays. With more runnable threads than cores (a neighbour, `ctest -j`, a
 * CPU quota, more threads than cores) a spinning thread holds a core that the thread it waits
 * for may need, and a thread that yields to a busy neighbour loses the core for a whole time
 * slice, whereas a thread woken from sleep preempts it at once. So a waiter that notices it lost
 * its core (the clock jumps while it spins or yields) marks the pool contended, and for a while
 * every wait goes to sleep after a few hundred nanoseconds of spinning.
 *
 * No lost wake-ups: a sleeper announces itself (`sleepers`, `sub_sleeping`) before it checks its
 * condition a last time, and sleeps only while the futex word still holds the value it read
 * before that check; a waker changes the word after changing the condition and then looks for
 * sleepers (all sequentially consistent, so either the sleeper sees the condition or the waker
 * sees the sleeper).
 */
#include "core/threadpool.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "core/cpu_count.h"
#include "ember/core.h" /* em_num_threads, em_set_num_threads (EM_API: exported) */

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

/* How long a waiter spins before it yields: long enough to bridge the serial code between the
 * parallel ops of a decode step on an idle machine (the 2.7 ms the pool used to spin decoded no
 * faster: docs/threadpool.md), short enough that a waiter soon stops holding a core. */
#define SPIN_NS 50000
/* Yields before sleeping (each returns at once when no other thread wants this core). */
#define YIELDS 4
/* A gap this long in a spin or a yield means another thread had this core. */
#define PREEMPTED_NS 100000
/* How long the pool stays in sleep-first mode after a waiter lost its core. */
#define CONTENDED_NS 20000000

typedef struct pool {
    int nthreads; /* including the submitting thread */
    pthread_t *threads;
    atomic_uint generation; /* odd: a job is open; the futex workers sleep on */
    atomic_int sleepers;    /* workers asleep (or about to be) on `generation` */
    atomic_uint wake;       /* bumped when the submitter's condition may have changed */
    atomic_int sub_sleeping; /* the submitter is asleep (or about to be) on `wake` */
    atomic_llong contended_until; /* CLOCK_MONOTONIC ns */
    atomic_int pending;   /* parallel_each: workers still running the current job */
    atomic_int active;    /* workers registered in the job right now */
    atomic_llong done;    /* parallel_for: items finished */
    atomic_bool stop;
    /* the job */
    em_par_fn fn;
    em_par_each_fn each;
    void *user;
    int64_t n, chunk;
    atomic_llong next;
} pool;

static pthread_mutex_t submit_lock = PTHREAD_MUTEX_INITIALIZER;
static pool *the_pool;          /* guarded by submit_lock */
static atomic_int configured_threads;
static _Thread_local int in_worker;

/* ---- sleeping and waking ---- */

_Static_assert(sizeof(atomic_uint) == sizeof(unsigned), "a futex word is a plain 32-bit int");

static void sleep_on(atomic_uint *word, unsigned expected) {
#if defined(__linux__)
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
#else /* no futex: a short nap, after which the caller checks its condition again */
    (void)word, (void)expected;
    usleep(50);
#endif
}

static void wake_on(atomic_uint *word, int n) {
#if defined(__linux__)
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
#else
    (void)word, (void)n;
#endif
}

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static bool contended(pool *p) {
    long long until = atomic_load_explicit(&p->contended_until, memory_order_relaxed);
    return until && now_ns() < until;
}

/* The condition a waiter waits for; arg is the generation a worker last saw. */
typedef bool (*ready_fn)(pool *p, unsigned arg);

/*
 * Spins, then yields, until ready(p, arg): true when it is, false when the waiter should sleep
 * (its budget is spent, or it lost its core: then the pool is marked contended). When the pool
 * is already contended it spins only ~100 pause instructions: enough for a worker that is
 * finishing its last item, short of taking a core that someone else needs.
 */
static bool spin_then_yield(pool *p, ready_fn ready, unsigned arg) {
    if (contended(p)) {
        for (int i = 0; i < 128; i++) {
            if (ready(p, arg)) return true;
            CPU_RELAX();
        }
        return ready(p, arg);
    }
    long long t0 = now_ns(), last = t0, t;
    for (unsigned i = 1;; i++) {
        if (ready(p, arg)) return true;
        CPU_RELAX();
        if (i % 16) continue;
        t = now_ns();
        if (t - last > PREEMPTED_NS) goto lost_core;
        if (t - t0 > SPIN_NS) break;
        last = t;
    }
    for (int k = 0; k < YIELDS; k++) {
        if (ready(p, arg)) return true;
        sched_yield();
        t = now_ns();
        if (t - last > PREEMPTED_NS) goto lost_core;
        last = t;
    }
    return ready(p, arg);
lost_core:
    atomic_store_explicit(&p->contended_until, t + CONTENDED_NS, memory_order_relaxed);
    return ready(p, arg);
}

static bool job_changed(pool *p, unsigned seen) {
    return atomic_load_explicit(&p->generation, memory_order_acquire) != seen ||
           atomic_load_explicit(&p->stop, memory_order_relaxed);
}

/* A worker's wait for the generation to move on from `seen` (or for the pool to stop). */
static void wait_job(pool *p, unsigned seen) {
    if (spin_then_yield(p, job_changed, seen)) return;
    atomic_fetch_add(&p->sleepers, 1);
    while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop))
        sleep_on(&p->generation, seen);
    atomic_fetch_sub(&p->sleepers, 1);
}

/* The submitter's wait for ready(p, 0), which workers announce with notify_submitter. */
static void wait_submitter(pool *p, ready_fn ready) {
    if (spin_then_yield(p, ready, 0)) return;
    for (;;) {
        atomic_store(&p->sub_sleeping, 1);
        unsigned w = atomic_load(&p->wake);
        if (ready(p, 0)) break;
        sleep_on(&p->wake, w);
    }
    atomic_store(&p->sub_sleeping, 0);
}

/* Called by a worker after a change that may satisfy the submitter's condition. */
static void notify_submitter(pool *p) {
    atomic_fetch_add(&p->wake, 1);
    if (atomic_load(&p->sub_sleeping)) wake_on(&p->wake, 1);
}

static bool each_done(pool *p, unsigned arg) { return atomic_load(&p->pending) <= 0; }
static bool items_done(pool *p, unsigned arg) { return atomic_load(&p->done) >= p->n; }
static bool none_active(pool *p, unsigned arg) { return atomic_load(&p->active) <= 0; }

/* ---- workers ---- */

static void run_chunks(pool *p, int tid) {
    for (;;) {
        int64_t b = atomic_fetch_add_explicit(&p->next, p->chunk, memory_order_relaxed);
        if (b >= p->n) break;
        int64_t e = b + p->chunk < p->n ? b + p->chunk : p->n;
        p->fn(p->user, b, e, tid);
        if (atomic_fetch_add(&p->done, e - b) + (e - b) >= p->n && tid) notify_submitter(p);
    }
}

typedef struct worker_arg {
    pool *p;
    int tid;
} worker_arg;

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    pool *p = wa->p;
    int tid = wa->tid;
    free(wa);
    in_worker = 1;
    unsigned seen = 0; /* the generation at creation (closed): a job may already be open */
    for (;;) {
        wait_job(p, seen);
        if (atomic_load(&p->stop)) break;
        seen = atomic_load(&p->generation);
        if (!(seen & 1u)) continue; /* a job closed: wait for the next one to open */
        /* register, then check that the job is still the one seen (see the top of the file);
         * a worker that wakes after the others finished finds no chunk left */
        atomic_fetch_add(&p->active, 1);
        if (atomic_load(&p->generation) == seen) {
            if (p->each) {
                p->each(p->user, tid, p->nthreads);
                if (atomic_fetch_sub(&p->pending, 1) == 1) notify_submitter(p);
            } else {
                run_chunks(p, tid);
            }
        }
        if (atomic_fetch_sub(&p->active, 1) == 1) notify_submitter(p);
    }
    return NULL;
}

/* ---- the pool ---- */

static void pool_destroy(pool *p) {
    if (!p) return;
    atomic_store(&p->stop, true);
    atomic_fetch_add(&p->generation, 2); /* wakes every wait; the parity stays even */
    wake_on(&p->generation, INT_MAX);
    for (int i = 0; i < p->nthreads - 1; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    free(p);
}

static pool *pool_create(int n) {
    pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->nthreads = n;
    atomic_init(&p->generation, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->wake, 0);
    atomic_init(&p->sub_sleeping, 0);
    atomic_init(&p->contended_until, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->active, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->stop, false);
    p->threads = calloc((size_t)(n > 1 ? n - 1 : 1), sizeof *p->threads);
    if (!p->threads) {
        free(p);
        return NULL;
    }
    for (int i = 0; i < n - 1; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) {
            p->nthreads = i + 1;
            break;
        }
        wa->p = p;
        wa->tid = i + 1;
        if (pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            p->nthreads = i + 1;
            break;
        }
    }
    return p;
}

static void shutdown_pool(void) {
    pthread_mutex_lock(&submit_lock);
    pool_destroy(the_pool);
    the_pool = NULL;
    pthread_mutex_unlock(&submit_lock);
}

/* Returns the pool with submit_lock held, or NULL (lock released) for single-threaded runs. */
static pool *acquire(void) {
    if (in_worker) return NULL;
    pthread_mutex_lock(&submit_lock);
    if (!the_pool) {
        int n = em_num_threads();
        if (n > 1) {
            the_pool = pool_create(n);
            static bool registered;
            if (!registered) {
                registered = true;
                atexit(shutdown_pool);
            }
        }
    }
    if (!the_pool || the_pool->nthreads <= 1) {
        pthread_mutex_unlock(&submit_lock);
        return NULL;
    }
    return the_pool;
}

/* Opens the job whose fields are set, takes part as thread 0, waits for it and closes it. `wake`
 * is how many sleeping workers the job can use. */
static void run_job(pool *p, int tid0_each, int wake) {
    atomic_store_explicit(&p->pending, tid0_each ? p->nthreads - 1 : 0, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_fetch_add(&p->generation, 1); /* open (odd) */
    if (atomic_load(&p->sleepers) > 0) wake_on(&p->generation, wake);
    in_worker = 1;
    if (tid0_each)
        p->each(p->user, 0, p->nthreads);
    else
        run_chunks(p, 0);
    in_worker = 0;
    /* every worker runs an each-job, so it stays open until all have */
    wait_submitter(p, tid0_each ? each_done : items_done);
    /* close (even): no worker joins from now on; wait for those registered */
    atomic_fetch_add(&p->generation, 1);
    wait_submitter(p, none_active);
}

void em_parallel_for(int64_t n, int64_t grain, em_par_fn fn, void *user) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n <= grain) {
        fn(user, 0, n, 0);
        return;
    }
    pool *p = acquire();
    if (!p) {
        fn(user, 0, n, 0);
        return;
    }
    int64_t chunk = (n + p->nthreads * 4 - 1) / (p->nthreads * 4);
    if (chunk < grain) chunk = grain;
    p->fn = fn;
    p->each = NULL;
    p->user = user;
    p->n = n;
    p->chunk = chunk;
    atomic_store(&p->next, 0);
    int64_t chunks = (n + chunk - 1) / chunk;
    run_job(p, 0, chunks - 1 < p->nthreads - 1 ? (int)(chunks - 1) : p->nthreads - 1);
    pthread_mutex_unlock(&submit_lock);
}

void em_parallel_each(em_par_each_fn fn, void *user) {
    pool *p = acquire();
    if (!p) {
        fn(user, 0, 1);
        return;
    }
    p->fn = NULL;
    p->each = fn;
    p->user = user;
    run_job(p, 1, INT_MAX);
    pthread_mutex_unlock(&submit_lock);
}

int em_num_threads(void) {
    int n = atomic_load(&configured_threads);
    if (n <= 0) {
        /* the first value stored wins, should two first calls race */
        int want = em_cpu_default_threads(), none = 0;
        n = atomic_compare_exchange_strong(&configured_threads, &none, want) ? want : none;
    }
    return n;
}

void em_set_num_threads(int n) {
    if (n < 1) n = 1;
    pthread_mutex_lock(&submit_lock);
    if (!the_pool || the_pool->nthreads != n) {
        pool_destroy(the_pool);
        the_pool = NULL;
    }
    atomic_store(&configured_threads, n);
    pthread_mutex_unlock(&submit_lock);
}

/*
 * A persistent thread pool. Workers spin briefly after each job (decode loops submit many small
 * jobs back to back) and then sleep on a condition variable. One job runs at a time; a job
 * submitted from inside a worker runs inline on that worker.
 *
 * The job protocol: `generation` is odd while a job is open and even while the submitter sets
 * up the next one. A worker registers in `active` before it reads any field of the job and then
 * checks that the generation is still the odd one it saw; the submitter closes the job (makes
 * the generation even) and then waits for `active` to drain before it touches the fields again
 * (both sides sequentially consistent, so one of them sees the other). Without the closing step
 * a worker that woke late for one job could see the next job's fields before its generation
 * was published, run its chunks and have its counts reset under it: items done twice or never,
 * or a submitter waiting forever (tests/test_threadpool.c caught both).
 */
#include "core/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "core/cpu_count.h"
#include "ember/core.h" /* em_num_threads, em_set_num_threads (EM_API: exported) */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* ~1-2 ms of spinning before a worker sleeps: decode issues parallel jobs every few hundred
 * microseconds, and waking a sleeping thread costs tens of microseconds on a VM */
#define SPIN_ITERS 100000

typedef struct pool {
    int nthreads; /* including the submitting thread */
    pthread_t *threads;
    pthread_mutex_t m;
    pthread_cond_t cv;
    atomic_uint generation; /* odd: a job is open */
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

static void run_chunks(pool *p, int tid) {
    for (;;) {
        int64_t b = atomic_fetch_add_explicit(&p->next, p->chunk, memory_order_relaxed);
        if (b >= p->n) break;
        int64_t e = b + p->chunk < p->n ? b + p->chunk : p->n;
        p->fn(p->user, b, e, tid);
        atomic_fetch_add_explicit(&p->done, e - b, memory_order_release);
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
        int spins = 0;
        while (atomic_load_explicit(&p->generation, memory_order_acquire) == seen &&
               !atomic_load(&p->stop)) {
            if (++spins < SPIN_ITERS) {
                CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&p->m);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->m);
            pthread_mutex_unlock(&p->m);
        }
        if (atomic_load(&p->stop)) break;
        seen = atomic_load(&p->generation);
        if (!(seen & 1u)) continue; /* a job closed: wait for the next one to open */
        /* register, then check that the job is still the one seen (see the top of the file);
         * a worker that wakes after the others finished finds no chunk left */
        atomic_fetch_add(&p->active, 1);
        if (atomic_load(&p->generation) == seen) {
            if (p->each) {
                p->each(p->user, tid, p->nthreads);
                atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
            } else {
                run_chunks(p, tid);
            }
        }
        atomic_fetch_sub(&p->active, 1);
    }
    return NULL;
}

static void pool_destroy(pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->m);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->m);
    for (int i = 0; i < p->nthreads - 1; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->m);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
}

static pool *pool_create(int n) {
    pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->nthreads = n;
    pthread_mutex_init(&p->m, NULL);
    pthread_cond_init(&p->cv, NULL);
    atomic_init(&p->generation, 0);
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
        int n = atomic_load(&configured_threads);
        if (n <= 0) {
            n = em_cpu_default_threads();
            atomic_store(&configured_threads, n);
        }
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

static void run_job(pool *p, int tid0_each) {
    atomic_store_explicit(&p->pending, tid0_each ? p->nthreads - 1 : 0, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    pthread_mutex_lock(&p->m);
    atomic_fetch_add(&p->generation, 1); /* open (odd) */
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->m);
    in_worker = 1;
    if (tid0_each)
        p->each(p->user, 0, p->nthreads);
    else
        run_chunks(p, 0);
    in_worker = 0;
    if (tid0_each) {
        /* every worker runs an each-job, so it stays open until all have */
        while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) CPU_RELAX();
    } else {
        while (atomic_load_explicit(&p->done, memory_order_acquire) < p->n) CPU_RELAX();
    }
    /* close (even): no worker joins from now on; wait for those registered */
    atomic_fetch_add(&p->generation, 1);
    while (atomic_load(&p->active) > 0) CPU_RELAX();
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
    run_job(p, 0);
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
    run_job(p, 1);
    pthread_mutex_unlock(&submit_lock);
}

int em_num_threads(void) {
    int n = atomic_load(&configured_threads);
    if (n <= 0) {
        n = em_cpu_default_threads();
        atomic_store(&configured_threads, n);
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

/*
 * The thread pool every layer shares: CPU kernels, weight conversion at load, benchmarks. One
 * persistent pool per process, sized by em_num_threads() (include/ember/core.h); jobs run one at
 * a time, a job submitted from inside a job runs inline.
 *
 *   static void scale(void *user, int64_t begin, int64_t end, int tid) { ... }
 *   em_parallel_for(n, 4096, scale, &args);   // returns when every item is done
 */
#ifndef EMBER_CORE_THREADPOOL_H
#define EMBER_CORE_THREADPOOL_H

#include <stdint.h>

/* fn(user, begin, end, tid) over [0, n) split into chunks of at least `grain`; runs inline when
 * the work is small, a single thread is configured, or the caller is itself a pool worker. */
typedef void (*em_par_fn)(void *user, int64_t begin, int64_t end, int tid);
void em_parallel_for(int64_t n, int64_t grain, em_par_fn fn, void *user);
/* Runs fn(user, tid, nthreads) once on each of the pool's threads (tid 0 is the caller). */
typedef void (*em_par_each_fn)(void *user, int tid, int nthreads);
void em_parallel_each(em_par_each_fn fn, void *user);

#endif

/* The OpenMP peer of `ember bench pool`: the same jobs through libgomp's parallel regions (with
 * its default schedule and wait policy, as torch's CPU ops use them). Built with OpenMP when the
 * compiler has it; otherwise the peer is reported as absent. */
#include <stdbool.h>
#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#endif

bool bench_omp_available(void);
void bench_omp_for(int threads, int64_t n, void (*fn)(void *, int64_t, int64_t, int), void *user);
void bench_omp_each(int threads, void (*fn)(void *, int, int), void *user);

#ifdef _OPENMP
bool bench_omp_available(void) { return true; }

void bench_omp_for(int threads, int64_t n, void (*fn)(void *, int64_t, int64_t, int), void *user) {
#pragma omp parallel for num_threads(threads)
    for (int64_t i = 0; i < n; i++) fn(user, i, i + 1, omp_get_thread_num());
}

void bench_omp_each(int threads, void (*fn)(void *, int, int), void *user) {
#pragma omp parallel num_threads(threads)
    fn(user, omp_get_thread_num(), omp_get_num_threads());
}
#else
bool bench_omp_available(void) { return false; }

void bench_omp_for(int threads, int64_t n, void (*fn)(void *, int64_t, int64_t, int), void *user) {
    (void)threads;
    if (n > 0) fn(user, 0, n, 0);
}

void bench_omp_each(int threads, void (*fn)(void *, int, int), void *user) {
    (void)threads;
    fn(user, 0, 1);
}
#endif

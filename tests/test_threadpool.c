/* The thread pool under back-to-back tiny jobs, more threads than cores (so that workers are
 * preempted at every point of the job protocol), parallel_for and parallel_each interleaved.
 * A worker that joins a job late must never take part in the next one: a watchdog turns a
 * hang into a failure. The test counts jobs, never time: how fast the pool is on a busy machine
 * is `ember bench pool`'s question. Then the default thread count: the affinity mask, the
 * cgroup quota (files in the kernel's formats, cgroup v1 and v2) and EMBER_NUM_THREADS. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cpu_count.h"
#include "core/threadpool.h"
#include "ember/ember.h"
#include "harness.h"

#define ITEMS 64

typedef struct job {
    atomic_int hits[ITEMS];
    atomic_int each_calls;
    int round;
    atomic_llong by_workers; /* items run by threads other than the caller */
} job;

static void count_items(void *user, int64_t b, int64_t e, int tid) {
    job *j = user;
    for (int64_t i = b; i < e; i++) {
        /* every third job's items take a little while, so that workers join it too */
        for (volatile int k = 0; k < (j->round % 3 == 0 ? 300 : 0); k++) {
        }
        atomic_fetch_add(&j->hits[i], 1);
    }
    if (tid) atomic_fetch_add(&j->by_workers, e - b);
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
#define JOBS 20000

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
        j->round = jobs;
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
    printf("  %d threads: %d jobs, %d wrong counts, %lld items run by workers (%.2f s)\n", threads,
           jobs, bad, (long long)atomic_load(&j->by_workers), seconds() - t0);
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

/* ---- the default thread count ---- */

static char tmp_root[256];

/* Writes tmp_root/rel (making its directories). */
static void put(const char *rel, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmp_root, rel);
    for (char *p = path + strlen(tmp_root) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* A fresh tree for one case: proc/ holds mountinfo and cgroup, the rest is the file system. */
static const char *fresh_tree(const char *name) {
    if (tmp_root[0]) nftw(tmp_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    const char *base = getenv("TMPDIR");
    snprintf(tmp_root, sizeof tmp_root, "%s/ember-test-cpus-%s-XXXXXX", base && *base ? base : "/tmp",
             name);
    CHECK(mkdtemp(tmp_root) != NULL);
    return tmp_root;
}

static double quota_of_tree(void) {
    char proc[300];
    snprintf(proc, sizeof proc, "%s/proc", tmp_root);
    return em_cpu_quota_at(proc, tmp_root);
}

static void test_cgroup_quota(void) {
    /* cgroup v2, nested: the parent's limit (1.5 CPUs) binds, the process's own says max */
    fresh_tree("v2");
    put("proc/mountinfo", "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n"
                          "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - "
                          "cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n");
    put("proc/cgroup", "0::/user.slice/app.scope\n");
    put("sys/fs/cgroup/cpu.max", "max 100000\n");
    put("sys/fs/cgroup/user.slice/cpu.max", "150000 100000\n");
    put("sys/fs/cgroup/user.slice/app.scope/cpu.max", "max 100000\n");
    CHECK(quota_of_tree() == 1.5);

    /* v2 in a container without a cgroup namespace: the mount shows the container's own cgroup
     * (root field), which the process's path starts with */
    fresh_tree("v2ctr");
    put("proc/mountinfo", "40 30 0:26 /kubepods/pod1/c1 /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n");
    put("proc/cgroup", "0::/kubepods/pod1/c1\n");
    put("sys/fs/cgroup/cpu.max", "50000 100000\n");
    CHECK(quota_of_tree() == 0.5);

    /* v1 with cpu and cpuacct mounted apart (as on this CI host): only the "cpu" hierarchy
     * counts; -1 is no limit; the ancestor's 3 CPUs bind */
    fresh_tree("v1");
    put("proc/mountinfo",
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
        "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n");
    put("proc/cgroup", "4:memory:/docker/abc\n2:cpuacct:/docker/abc\n1:cpu:/docker/abc\n0::/\n");
    put("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n");
    put("sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
    put("sys/fs/cgroup/cpu/docker/cpu.cfs_quota_us", "300000\n");
    put("sys/fs/cgroup/cpu/docker/cpu.cfs_period_us", "100000\n");
    put("sys/fs/cgroup/cpu/docker/abc/cpu.cfs_quota_us", "-1\n");
    put("sys/fs/cgroup/cpu/docker/abc/cpu.cfs_period_us", "100000\n");
    put("sys/fs/cgroup/cpuacct/docker/abc/cpu.cfs_quota_us", "10000\n"); /* not the cpu controller */
    put("sys/fs/cgroup/cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    CHECK(quota_of_tree() == 3.0);

    /* v1 with the controllers mounted together */
    fresh_tree("v1joint");
    put("proc/mountinfo", "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup "
                          "cgroup rw,cpu,cpuacct\n");
    put("proc/cgroup", "3:cpu,cpuacct:/\n");
    put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "250000\n");
    put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    CHECK(quota_of_tree() == 2.5);

    /* no cgroup mounts, or no procfs at all: no limit */
    fresh_tree("none");
    put("proc/mountinfo", "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n");
    put("proc/cgroup", "0::/\n");
    CHECK(quota_of_tree() == 0);
    fresh_tree("noproc");
    CHECK(quota_of_tree() == 0);
    nftw(tmp_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);

    /* this machine's: whatever it is, a sane number */
    double q = em_cpu_quota_at("/proc/self", "");
    CHECK(q >= 0);
    printf("  this process's cgroup quota: %g CPUs (0: none)\n", q);
}

static void test_default_threads(void) {
    const char *env = getenv("EMBER_NUM_THREADS");
    char saved_env[64] = "";
    if (env) snprintf(saved_env, sizeof saved_env, "%s", env);
    unsetenv("EMBER_NUM_THREADS");

    em_cpu_budget b;
    em_cpu_budget_get(&b);
    printf("  online %d, affinity %d CPUs on %d cores, quota %g: %d threads\n", b.online,
           b.affinity, b.affinity_cores, b.quota, b.threads);
    CHECK(b.affinity >= 1 && b.affinity <= b.online);
    CHECK(b.affinity_cores >= 1 && b.affinity_cores <= b.affinity);
    CHECK(b.threads >= 1 && b.threads <= b.affinity_cores);
    CHECK(b.affinity_cores <= em_cpu_physical_cores());
    CHECK(em_cpu_default_threads() == b.threads);

    /* pinned to one CPU, the default is one thread (the affinity is the calling thread's) */
    cpu_set_t all, one;
    CHECK(sched_getaffinity(0, sizeof all, &all) == 0);
    CPU_ZERO(&one);
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &all)) {
            CPU_SET(i, &one);
            break;
        }
    CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
    em_cpu_budget_get(&b);
    CHECK(b.affinity == 1 && b.affinity_cores == 1 && b.threads == 1);
    CHECK(em_cpu_default_threads() == 1);
    /* EMBER_NUM_THREADS overrides it; nonsense is ignored */
    setenv("EMBER_NUM_THREADS", "3", 1);
    CHECK(em_cpu_default_threads() == 3);
    setenv("EMBER_NUM_THREADS", "3x", 1);
    CHECK(em_cpu_default_threads() == 1);
    setenv("EMBER_NUM_THREADS", "0", 1);
    CHECK(em_cpu_default_threads() == 1);
    CHECK(sched_setaffinity(0, sizeof all, &all) == 0);

    if (saved_env[0]) setenv("EMBER_NUM_THREADS", saved_env, 1);
    else unsetenv("EMBER_NUM_THREADS");
}

EM_TEST_MAIN(T(test_back_to_back_jobs), T(test_cgroup_quota), T(test_default_threads))

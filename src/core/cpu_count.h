/*
 * How many CPUs there are to run on, read from sysfs, procfs and the scheduler by core itself,
 * so that the thread pool needs nothing from a backend. Linux; elsewhere the counts fall back to
 * the online CPUs.
 *
 * The default thread count is the number of physical cores among the CPUs this process may run
 * on (its affinity mask), capped by its cgroup's CPU quota rounded up; EMBER_NUM_THREADS
 * overrides it. Physical cores rather than logical CPUs because the kernels are bound by the FMA
 * units or by memory bandwidth, which SMT siblings share: a second thread per core adds
 * synchronisation and halves each thread's cache without adding either.
 */
#ifndef EMBER_CORE_CPU_COUNT_H
#define EMBER_CORE_CPU_COUNT_H

/* Physical cores of the machine (every online CPU), whatever the affinity. Counted once. */
int em_cpu_physical_cores(void);

/* What the default thread count was made from, read now (not cached). */
typedef struct em_cpu_budget {
    int online;         /* online logical CPUs */
    int affinity;       /* logical CPUs in this process's affinity mask */
    int affinity_cores; /* physical cores those CPUs belong to */
    double quota;       /* CPUs' worth of time the cgroup allows (quota / period); 0: no limit */
    int threads;        /* the default: min(affinity_cores, ceil(quota)), >= 1 */
} em_cpu_budget;
void em_cpu_budget_get(em_cpu_budget *out);

/* The default thread count: EMBER_NUM_THREADS (1..1024) when set, else em_cpu_budget's. An
 * invalid EMBER_NUM_THREADS is named on stderr and ignored. */
int em_cpu_default_threads(void);

/*
 * The cgroup CPU quota, as em_cpu_budget's `quota`, from the files under `proc_self` (its
 * `mountinfo` and `cgroup`) with every mount point read below `root` ("" for this system): the
 * smallest limit of the process's cgroup and its ancestors, cgroup v2 (cpu.max) or v1
 * (cpu.cfs_quota_us / cpu.cfs_period_us). Split out so that tests can feed it files.
 */
double em_cpu_quota_at(const char *proc_self, const char *root);

#endif

/* CPU counts from sysfs, procfs and the scheduler (see cpu_count.h). */
#include "core/cpu_count.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Physical cores among the CPUs of `set`: CPUs that share a core list the same siblings in
 * sysfs (thread_siblings_list), so each core is counted once by its lowest-numbered sibling.
 * Without sysfs topology every CPU counts as a core. */
static int cores_in(const cpu_set_t *set) {
    int cores = 0, cpus = 0;
    bool seen[CPU_SETSIZE] = {false};
    for (int i = 0; i < CPU_SETSIZE; i++) {
        if (!CPU_ISSET(i, set)) continue;
        cpus++;
        char path[128];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list",
                 i);
        FILE *f = fopen(path, "r");
        int lowest = i;
        if (f) {
            if (fscanf(f, "%d", &lowest) != 1 || lowest < 0 || lowest >= CPU_SETSIZE) lowest = i;
            fclose(f);
        }
        if (!seen[lowest]) {
            seen[lowest] = true;
            cores++;
        }
    }
    return cores > 0 ? cores : cpus;
}

static int online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? (n < CPU_SETSIZE ? (int)n : CPU_SETSIZE) : 1;
}

static int physical_cores;
static pthread_once_t physical_once = PTHREAD_ONCE_INIT;

static void count_physical_cores(void) {
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int i = 0, n = online_cpus(); i < n; i++) CPU_SET(i, &all);
    physical_cores = cores_in(&all);
}

int em_cpu_physical_cores(void) {
    pthread_once(&physical_once, count_physical_cores);
    return physical_cores;
}

/* ---- cgroup CPU quota ---- */

/* The limit in one cgroup directory, in CPUs; 0 when none is set or readable. */
static double dir_quota(const char *dir, bool v2) {
    char path[PATH_MAX * 2 + 64]; /* dir is at most PATH_MAX * 2 + 16 */
    double quota = 0, period = 0;
    if (v2) {
        snprintf(path, sizeof path, "%s/cpu.max", dir);
        FILE *f = fopen(path, "r");
        if (!f) return 0;
        char q[32] = "";
        if (fscanf(f, "%31s %lf", q, &period) != 2 || !strcmp(q, "max")) period = 0;
        else quota = strtod(q, NULL);
        fclose(f);
    } else {
        snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
        FILE *f = fopen(path, "r");
        if (!f) return 0;
        if (fscanf(f, "%lf", &quota) != 1) quota = 0; /* -1: no limit */
        fclose(f);
        snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
        f = fopen(path, "r");
        if (!f) return 0;
        if (fscanf(f, "%lf", &period) != 1) period = 0;
        fclose(f);
    }
    return quota > 0 && period > 0 ? quota / period : 0;
}

/* Whether the comma-separated list `opts` holds `word`. */
static bool has_word(const char *opts, const char *word) {
    size_t n = strlen(word);
    for (const char *p = opts; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, word, n) && (p[n] == ',' || p[n] == '\0')) return true;
    return false;
}

/* The process's path in the hierarchy: cgroup v2's "0::" line, or the v1 line whose controller
 * list names "cpu". */
static bool cgroup_path(const char *proc_self, bool v2, char *out, size_t n) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/cgroup", proc_self);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char *line = NULL;
    size_t cap = 0;
    bool found = false;
    while (!found && getline(&line, &cap, f) > 0) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = '\0';
        const char *ctrl = c1 + 1;
        if (v2 ? (!strncmp(line, "0:", 2) && !*ctrl) : has_word(ctrl, "cpu")) {
            snprintf(out, n, "%s", c2 + 1);
            found = true;
        }
    }
    free(line);
    fclose(f);
    return found;
}

/* The smallest limit from `dir` up to the mount point `top` (a prefix of dir). */
static double walk_up(char *dir, size_t top_len, bool v2) {
    double best = 0;
    for (;;) {
        double q = dir_quota(dir, v2);
        if (q > 0 && (best == 0 || q < best)) best = q;
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= top_len || !slash || (size_t)(slash - dir) < top_len) break;
        *slash = '\0';
    }
    return best;
}

double em_cpu_quota_at(const char *proc_self, const char *root) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/mountinfo", proc_self);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char *line = NULL;
    size_t cap = 0;
    double best = 0;
    while (getline(&line, &cap, f) > 0) {
        /* id parent maj:min root mount-point options [optional...] - fstype source superopts */
        char mroot[PATH_MAX], mpoint[PATH_MAX], fstype[64], source[256], sopts[1024];
        const char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %4095s %4095s", mroot, mpoint) != 2 ||
            sscanf(dash + 3, "%63s %255s %1023s", fstype, source, sopts) != 3)
            continue;
        bool v2 = !strcmp(fstype, "cgroup2");
        if (!v2 && !(!strcmp(fstype, "cgroup") && has_word(sopts, "cpu"))) continue;
        char cg[PATH_MAX];
        if (!cgroup_path(proc_self, v2, cg, sizeof cg)) continue;
        /* the path is relative to the hierarchy's root; the mount shows `mroot` of it (a
         * container's own cgroup, say). A path outside it (another cgroup namespace) is read
         * at the mount point itself. */
        size_t rl = strcmp(mroot, "/") ? strlen(mroot) : 0;
        const char *rel = "";
        if (!strncmp(cg, mroot, rl) && (cg[rl] == '/' || cg[rl] == '\0')) rel = cg + rl;
        char dir[PATH_MAX * 2 + 16];
        int top = snprintf(dir, sizeof dir, "%s%s", root, mpoint);
        if (top < 0 || (size_t)top >= sizeof dir) continue;
        snprintf(dir + top, sizeof dir - (size_t)top, "%s", strcmp(rel, "/") ? rel : "");
        double q = walk_up(dir, (size_t)top, v2);
        if (q > 0 && (best == 0 || q < best)) best = q;
    }
    free(line);
    fclose(f);
    return best;
}

/* ---- the default ---- */

void em_cpu_budget_get(em_cpu_budget *out) {
    memset(out, 0, sizeof *out);
    out->online = online_cpus();
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        CPU_ZERO(&set);
        for (int i = 0; i < out->online; i++) CPU_SET(i, &set);
    }
    out->affinity = CPU_COUNT(&set);
    out->affinity_cores = cores_in(&set);
    out->quota = em_cpu_quota_at("/proc/self", "");
    int n = out->affinity_cores;
    if (out->quota > 0 && ceil(out->quota) < n) n = (int)ceil(out->quota);
    out->threads = n >= 1 ? n : 1;
}

int em_cpu_default_threads(void) {
    const char *e = getenv("EMBER_NUM_THREADS");
    if (e && *e) {
        char *end;
        errno = 0;
        long n = strtol(e, &end, 10);
        if (!errno && !*end && n >= 1 && n <= 1024) return (int)n;
        fprintf(stderr, "ember: EMBER_NUM_THREADS=%s is not a number from 1 to 1024; using the "
                        "default\n", e);
    }
    em_cpu_budget b;
    em_cpu_budget_get(&b);
    return b.threads;
}

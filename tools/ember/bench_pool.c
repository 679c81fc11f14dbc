/*
 * `ember bench pool`: the CPU thread pool when it does not have the machine to itself.
 *
 * Job round trip: back-to-back parallel jobs timed one by one — an empty em_parallel_each (every
 * thread must take part: the pure round trip), and em_parallel_for jobs of ~10 us and ~200 us of
 * arithmetic in 64 items (a small op and a decode-sized one) — quiet
 * and with busy processes that this command starts (and kills), at the default thread count and
 * at twice it. A job's limit is the same items run inline on one thread (measured in the same
 * blocks); the peer is OpenMP (libgomp, the runtime behind torch's CPU ops) running the same
 * jobs on as many threads.
 *
 * Decode: batch-1 decode steps of a Qwen3-0.6B-shaped checkpoint (random weights, the one
 * `ember bench decode` uses), quiet and with busy processes, next to the slowdown a perfectly fair
 * scheduler would give a CPU-bound job with the same competitors.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/cpu/cpu.h"
#include "bench_util.h"
#include "core/cpu_count.h"
#include "core/threadpool.h"
#include "cli.h"
#include "ember/ember.h"

/* OpenMP twins of the pool's two entry points (bench_pool_omp.c); unavailable without OpenMP. */
bool bench_omp_available(void);
void bench_omp_for(int threads, int64_t n, void (*fn)(void *, int64_t, int64_t, int), void *user);
void bench_omp_each(int threads, void (*fn)(void *, int, int), void *user);

/* ---- competitors: processes that spin until killed ---- */

#define MAX_BUSY 512

typedef struct busy {
    int n;
    pid_t pid[MAX_BUSY];
} busy;

static void busy_start(busy *b, int n) {
    b->n = 0;
    pid_t parent = getpid();
    for (int i = 0; i < n && b->n < MAX_BUSY; i++) {
        pid_t p = fork();
        if (p == 0) {
            /* never outlive this command, however it ends */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(0);
            volatile unsigned long x = 0;
            for (;;) x++;
        }
        if (p > 0) b->pid[b->n++] = p;
    }
    if (b->n) usleep(20000); /* let the scheduler spread them */
}

static void busy_stop(busy *b) {
    for (int i = 0; i < b->n; i++) kill(b->pid[i], SIGKILL);
    for (int i = 0; i < b->n; i++) waitpid(b->pid[i], NULL, 0);
    b->n = 0;
}

/* ---- the jobs ---- */

enum { JOB_EACH, JOB_SMALL, JOB_WORK, JOB_KINDS };
static const char *JOB_NAMES[JOB_KINDS] = {"each", "10us", "200us"};
enum { IMPL_POOL, IMPL_SERIAL, IMPL_OMP, IMPLS };
#define WORK_ITEMS 64

typedef struct jobdata {
    int64_t iters;              /* multiply-adds per item of the 200 us job */
    int64_t run_iters;          /* ... of the job running now */
    double slot[WORK_ITEMS * 8]; /* one cache line per item: no false sharing */
} jobdata;

static void each_empty(void *u, int tid, int n) {
    jobdata *j = u;
    j->slot[(tid % WORK_ITEMS) * 8] += 1;
}

static void item_work(void *u, int64_t b, int64_t e, int tid) {
    jobdata *j = u;
    for (int64_t i = b; i < e; i++) {
        double x = (double)i;
        for (int64_t k = 0; k < j->run_iters; k++) x = x * 0.999999 + 1e-7; /* a dependent chain */
        j->slot[(i % WORK_ITEMS) * 8] = x;
    }
}

static void run_job(int kind, int impl, jobdata *j, int threads) {
    j->run_iters = kind == JOB_SMALL ? j->iters / 20 : j->iters;
    if (impl == IMPL_SERIAL) {
        if (kind == JOB_EACH)
            for (int t = 0; t < threads; t++) each_empty(j, t, threads);
        else
            item_work(j, 0, WORK_ITEMS, 0);
    } else if (impl == IMPL_OMP) {
        if (kind == JOB_EACH) bench_omp_each(threads, each_empty, j);
        else bench_omp_for(threads, WORK_ITEMS, item_work, j);
    } else {
        if (kind == JOB_EACH) em_parallel_each(each_empty, j);
        else em_parallel_for(WORK_ITEMS, 1, item_work, j);
    }
}

/* ---- statistics ---- */

typedef struct samples {
    double *v; /* microseconds */
    int n, cap;
} samples;

static void add_sample(samples *s, double us) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 4096;
        double *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v) return;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = us;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct stats {
    double median, mean, p99;
} stats;

static stats summarise(samples *s) {
    stats r = {-1, -1, -1};
    if (!s->n) return r;
    qsort(s->v, (size_t)s->n, sizeof *s->v, cmp_d);
    double sum = 0;
    for (int i = 0; i < s->n; i++) sum += s->v[i];
    r.median = s->v[s->n / 2];
    r.mean = sum / s->n;
    r.p99 = s->v[(int)((double)(s->n - 1) * 0.99)];
    return r;
}

/*
 * Times jobs of one kind for about `seconds`, in blocks that alternate the implementations so
 * that each sees the same moments of the machine. A pause between blocks lets the previous
 * runtime's workers stop spinning: libgomp's keep a core busy for 10-50 ms after a parallel
 * region (GOMP_SPINCOUNT), and a pool measured in that time runs on the cores left.
 */
static void measure_jobs(int kind, int threads, double seconds, jobdata *j, samples out[IMPLS]) {
    bool impl_on[IMPLS] = {true, kind != JOB_EACH, bench_omp_available()};
    const int rounds = 4;
    for (int r = 0; r < rounds; r++) {
        for (int impl = 0; impl < IMPLS; impl++) {
            if (!impl_on[impl]) continue;
            usleep(60000);
            run_job(kind, impl, j, threads); /* warm: wakes the workers */
            double end = bench_now() + seconds / rounds / 3;
            for (int i = 0; i < 200000 && bench_now() < end; i++) {
                double t0 = bench_now();
                run_job(kind, impl, j, threads);
                add_sample(&out[impl], (bench_now() - t0) * 1e6);
            }
        }
    }
}

/* ---- decode ---- */

/* The slowdown a perfectly fair scheduler gives a CPU-bound job of t threads that shares
 * `cpus` CPUs with b busy processes. */
static double fair_slowdown(int t, int b, int cpus) {
    double quiet = t < cpus ? t : cpus;
    double share = (double)cpus * t / (t + b);
    if (share > quiet) share = quiet;
    return quiet / share;
}

typedef struct decode_opts {
    const char *model, *cache, *dtype; /* dtype NULL: the checkpoint's */
    int steps, reps;
    int busy[8], n_busy;
    bool json;
} decode_opts;

/* One decode step from *next; returns its seconds. *next becomes the new token (kept in the
 * caller's scope). */
static double decode_step(em_ctx *c, const em_model *m, em_kv_cache *kv, em_tensor **next) {
    em_scope_push(c);
    double t0 = bench_now();
    em_tensor *lg = em_model_forward(c, m, *next, NULL, kv, true);
    em_tensor *nx = em_keep(c, em_argmax(c, lg, -1, false));
    int64_t tok = 0;
    em_to_host(c, em_cast(c, nx, EM_I64), &tok, sizeof tok);
    double dt = bench_now() - t0;
    em_scope_pop(c);
    *next = nx;
    return dt;
}

/* Prefills 16 tokens into a fresh cache, then times `steps` decode steps into s (ms). */
static void decode_block(em_ctx *c, const em_model *m, em_kv_cache *kv, int steps, samples *s) {
    int64_t ids[16];
    int64_t vocab = em_model_config_get(m)->vocab_size;
    for (int i = 0; i < 16; i++) ids[i] = 10 + (i * 7919) % (vocab - 10);
    em_kv_cache_reset(kv);
    em_scope_push(c);
    em_tensor *lg = em_model_forward(c, m, em_from_host(c, EM_I64, EM_SHAPE(1, 16), ids), NULL,
                                     kv, true);
    em_tensor *next = em_argmax(c, lg, -1, false);
    for (int i = 0; i < steps && !em_ctx_status(c); i++) {
        double dt = decode_step(c, m, kv, &next);
        if (s) add_sample(s, dt * 1e3);
    }
    em_scope_pop(c);
}

static int bench_decode_busy(const decode_opts *o, int cpus) {
    char dir[1024];
    if (o->model) {
        snprintf(dir, sizeof dir, "%s", o->model);
    } else {
        snprintf(dir, sizeof dir, "%s/qwen3-0.6b", o->cache);
        char cfg[1100];
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        struct stat st;
        if (stat(cfg, &st) != 0) {
            mkdir("build", 0755);
            mkdir(o->cache, 0755);
            char *av[] = {"make-checkpoint", "--preset", "qwen3-0.6b", "--out", dir, NULL};
            if (cmd_make_checkpoint(5, av) != 0) return 1;
        }
    }
    em_ctx *c = em_ctx_create();
    em_model_options mo = em_model_default_options();
    mo.progress = false;
    mo.offline = true;
    if (o->dtype) {
        if (!em_dtype_parse(o->dtype, &mo.dtype)) {
            fprintf(stderr, "ember bench pool: unknown dtype '%s'\n", o->dtype);
            em_ctx_free(c);
            return 2;
        }
    }
    em_model *m = em_model_load(c, dir, &mo);
    em_kv_cache *kv = m ? em_kv_cache_create(c, m, 1, 16 + o->steps + 1) : NULL;
    if (!kv) {
        fprintf(stderr, "ember bench pool: %s\n", em_ctx_error(c)->message);
        em_model_free(m);
        em_ctx_free(c);
        return 1;
    }
    decode_block(c, m, kv, 2, NULL); /* first touch of the mapped weights */
    samples s[8] = {{0}};
    busy b = {0};
    for (int r = 0; r < o->reps; r++)
        for (int k = 0; k < o->n_busy; k++) {
            busy_start(&b, o->busy[k]);
            decode_block(c, m, kv, o->steps, &s[k]);
            busy_stop(&b);
        }
    int threads = em_num_threads();
    if (!o->json)
        printf("\ndecode, batch 1, %s (%s): ms per step, %d steps x %d blocks per row\n"
               "%6s %10s %10s %10s %10s %12s\n",
               dir, em_dtype_name(em_model_dtype(m)), o->steps, o->reps, "busy", "median",
               "mean", "vs quiet", "fair", "of fair");
    double quiet = -1;
    for (int k = 0; k < o->n_busy; k++) {
        stats st = summarise(&s[k]);
        if (o->busy[k] == 0) quiet = st.median;
        double slow = quiet > 0 ? st.median / quiet : -1;
        double fair = fair_slowdown(threads, o->busy[k], cpus);
        if (o->json) {
            printf("{\"bench\": \"pool_decode\", \"model\": \"%s\", \"threads\": %d, \"busy\": %d, "
                   "\"median_ms\": %.3f, \"mean_ms\": %.3f, \"slowdown\": %.4f, "
                   "\"fair_slowdown\": %.4f}\n",
                   dir, threads, o->busy[k], st.median, st.mean, slow, fair);
        } else {
            char sl[16], of[16];
            bench_cell(sl, sizeof sl, "%.2fx", slow);
            bench_cell(of, sizeof of, "%.0f%%", slow > 0 ? 100 * fair / slow : -1);
            printf("%6d %10.2f %10.2f %10s %9.2fx %12s\n", o->busy[k], st.median, st.mean, sl,
                   fair, of);
        }
        free(s[k].v);
    }
    em_kv_cache_free(kv);
    em_model_free(m);
    em_ctx_free(c);
    return 0;
}

/* ---- the command ---- */

static int parse_list(const char *opt, const char *s, int *out, int max) {
    long long v[8];
    int n = cli_int_list("bench pool", opt, s, 0, MAX_BUSY, v, max < 8 ? max : 8);
    for (int k = 0; k < n; k++) out[k] = (int)v[k];
    return n;
}

static void usage(void) {
    printf("usage: ember bench pool [--json] [--seconds S] [--threads N,M] [--busy 0,1,2]\n"
           "                        [--skip-jobs] [--skip-decode] [--model DIR | --cache-dir DIR]\n"
           "                        [--decode-busy 0,1,2] [--steps N] [--reps N] [--dtype f32]\n\n"
           "Round-trip latency of parallel jobs (an empty parallel_each; parallel_for jobs of\n"
           "~10 us and ~200 us in 64 items) quiet and with --busy spinning processes PER AVAILABLE CPU that this\n"
           "command starts, at --threads pool sizes (default: the default count and twice it),\n"
           "next to the job run inline and to OpenMP in the same blocks; then batch-1 decode of a\n"
           "Qwen3-0.6B-shaped checkpoint with --decode-busy busy processes (total), next to a\n"
           "fair scheduler's slowdown. --seconds is the time per row (default 1.5).\n");
}

int bench_pool(int argc, char **argv) {
    bool json = false, decode = true, jobs = true;
    double seconds = 1.5;
    int threads[8], n_threads = 0, loads[8] = {0, 1, 2}, n_loads = 3;
    decode_opts d = {NULL, "build/bench-models", NULL, 8, 2, {0, 1, 2}, 3, false};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--skip-decode")) decode = false;
        else if (!strcmp(a, "--skip-jobs")) jobs = false;
        else if (!strcmp(a, "--seconds") && v) {
            if (!cli_real("bench pool", a, argv[++i], 1e-3, 3600, &seconds)) return 2;
        } else if (!strcmp(a, "--threads") && v) {
            if ((n_threads = parse_list(a, argv[++i], threads, 8)) < 0) return 2;
        } else if (!strcmp(a, "--busy") && v) {
            if ((n_loads = parse_list(a, argv[++i], loads, 8)) < 0) return 2;
        } else if (!strcmp(a, "--decode-busy") && v) {
            if ((d.n_busy = parse_list(a, argv[++i], d.busy, 8)) < 0) return 2;
        }
        else if (!strcmp(a, "--model") && v) d.model = argv[++i];
        else if (!strcmp(a, "--cache-dir") && v) d.cache = argv[++i];
        else if (!strcmp(a, "--dtype") && v) d.dtype = argv[++i];
        else if ((!strcmp(a, "--steps") || !strcmp(a, "--reps")) && v) {
            long long x;
            if (!cli_int("bench pool", a, argv[++i], 1, a[2] == 's' ? 4096 : INT32_MAX, &x))
                return 2;
            *(a[2] == 's' ? &d.steps : &d.reps) = (int)x;
        }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "ember bench pool: unknown option or missing value '%s'\n", a);
            return 2;
        }
    }
    if (n_threads < 0 || n_loads <= 0 || d.n_busy <= 0 || seconds <= 0 || d.steps < 1 ||
        d.steps > 4096 || d.reps < 1) {
        fprintf(stderr, "ember bench pool: bad --threads, --busy, --decode-busy, --seconds, "
                        "--steps or --reps (lists are like 0,1,2)\n");
        return 2;
    }
    d.json = json;
    int def = em_num_threads();
    if (!n_threads) {
        threads[n_threads++] = def;
        threads[n_threads++] = 2 * def;
    }
    /* the CPUs this process may use: what "per available CPU" and "fair" count */
    em_cpu_budget cb;
    em_cpu_budget_get(&cb);
    int cpus = cb.affinity;
    if (cb.quota > 0 && ceil(cb.quota) < cpus) cpus = (int)ceil(cb.quota);
    if (!json) {
        char quota[32] = "none";
        if (cb.quota > 0) snprintf(quota, sizeof quota, "%.2f CPUs", cb.quota);
        printf("ember bench pool [kernels: %s]: %d CPUs online, affinity %d CPUs on %d cores, "
               "cgroup quota %s; pool default %d threads; OpenMP peer %s\n",
               em_cpu_isa_name(em_cpu_isa_get()), cb.online, cb.affinity, cb.affinity_cores, quota,
               def, bench_omp_available() ? "on" : "not built");
    }

    jobdata *j = calloc(1, sizeof *j);
    if (!j) return 1;
    /* the work job: ~200 us of dependent multiply-adds on one thread, calibrated quiet */
    j->iters = j->run_iters = 1000;
    double best = 1e30;
    for (int r = 0; r < 20; r++) {
        double t0 = bench_now();
        item_work(j, 0, WORK_ITEMS, 0);
        double t = bench_now() - t0;
        if (t < best) best = t;
    }
    j->iters = (int64_t)(1000 * 200e-6 / best);
    if (j->iters < 1) j->iters = 1;

    if (!json && jobs)
        printf("\njob round trip, us per job; busy = spinning processes per available CPU\n"
               "%7s %4s %-5s %9s %9s %9s %9s %8s %9s %9s\n",
               "threads", "busy", "job", "median", "mean", "p99", "serial", "speedup", "omp med",
               "omp mean");
    busy b = {0};
    for (int ti = 0; jobs && ti < n_threads; ti++) {
        em_set_num_threads(threads[ti]);
        for (int li = 0; li < n_loads; li++) {
            busy_start(&b, loads[li] * cpus);
            samples s[JOB_KINDS][IMPLS];
            memset(s, 0, sizeof s);
            for (int k = 0; k < JOB_KINDS; k++) measure_jobs(k, threads[ti], seconds, j, s[k]);
            busy_stop(&b);
            for (int k = 0; k < JOB_KINDS; k++) {
                stats p = summarise(&s[k][IMPL_POOL]), ser = summarise(&s[k][IMPL_SERIAL]),
                      omp = summarise(&s[k][IMPL_OMP]);
                double speedup = ser.mean > 0 ? ser.mean / p.mean : -1;
                if (json) {
                    printf("{\"bench\": \"pool\", \"threads\": %d, \"busy_per_cpu\": %d, "
                           "\"job\": \"%s\", \"median_us\": %.3f, \"mean_us\": %.3f, "
                           "\"p99_us\": %.3f, \"serial_mean_us\": %.3f, \"peer\": %s, "
                           "\"peer_median_us\": %.3f, \"peer_mean_us\": %.3f}\n",
                           threads[ti], loads[li], JOB_NAMES[k], p.median, p.mean, p.p99,
                           ser.mean, bench_omp_available() ? "\"openmp\"" : "null", omp.median,
                           omp.mean);
                } else {
                    char se[16], sp[16], om[16], oa[16];
                    bench_cell(se, sizeof se, "%.1f", ser.mean);
                    bench_cell(sp, sizeof sp, "%.2fx", speedup);
                    bench_cell(om, sizeof om, "%.1f", omp.median);
                    bench_cell(oa, sizeof oa, "%.1f", omp.mean);
                    printf("%7d %4d %-5s %9.1f %9.1f %9.1f %9s %8s %9s %9s\n", threads[ti],
                           loads[li], JOB_NAMES[k], p.median, p.mean, p.p99, se, sp, om, oa);
                }
                for (int impl = 0; impl < IMPLS; impl++) free(s[k][impl].v);
            }
            fflush(stdout);
        }
    }
    free(j);
    em_set_num_threads(def);
    return decode ? bench_decode_busy(&d, cpus) : 0;
}

/*
 * `ember test-devices`: the cross-device conformance report. Every op case of the committed
 * fixtures (tests/fixtures/ops/FAMILY.json, made with torch) runs on each device and is compared with
 * the torch reference; where the CPU backend can run the case too, the device's outputs are also
 * compared with the CPU's. Prints per device the cases passed, the pass rate and every failure.
 *
 * On a compile-only device (tpu-aot:v6e:2x4) a case passes when its programs compile and its
 * outputs have the reference's shapes and dtypes; execution is counted apart as not applicable.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "ember/ember.h"
#include "testing/op_cases.h"

#ifndef EMBER_SOURCE_FIXTURES_DIR
#define EMBER_SOURCE_FIXTURES_DIR "tests/fixtures"
#endif

static void usage(void) {
    printf("usage: ember test-devices [--device DEV ...] [--json] [--fixtures DIR] [--filter S]\n"
           "                          [--mode sync|async|fused] [--compile] [--no-cpu]\n"
           "                          [--modes async,fused,compiled]\n\n"
           "Runs every op case of the core test suite on each device and compares it with the\n"
           "committed torch reference and with the CPU backend's output. Devices default to\n"
           "every PJRT device that can be found (xla:0, cuda:0, tpu:0).\n"
           "  --device DEV   a device to test (repeatable): xla:0, cuda:0, tpu:0, pjrt:/path.so\n"
           "  --fixtures DIR folder of <family>.json/.bin fixtures (default: $EMBER_FIXTURES/ops\n"
           "                 or the source tree's tests/fixtures/ops)\n"
           "  --filter S     only cases whose name contains S\n"
           "  --mode M       eager mode for the run (default: $EMBER_EAGER or async)\n"
           "  --compile      run each case as a compiled function (one program per case: the\n"
           "                 whole-program lowering on PJRT devices, the plan on the CPU)\n"
           "  --modes LIST   run the cases once per mode of LIST (sync, async, fused, compiled)\n"
           "                 in one process, sharing the executable cache; a summary per mode\n"
           "  --no-cpu       do not compare with the CPU backend\n"
           "  --in-process   on a compile-only device, run the cases in this process (by\n"
           "                 default each family runs in a child process, and a case whose\n"
           "                 compile crashes it is reported failed with the signal)\n"
           "  --allow-missing  a --device that cannot be found is skipped, not an error (exit 77,\n"
           "                 ctest's skip code, when none of them is found)\n"
           "  --json         failures and summaries as JSON lines; the last lines are\n"
           "                 {\"device\": ..., \"passed\": N, \"total\": N, \"pass_rate\": R}\n"
           "A compile-only device (tpu-aot:TOPOLOGY[:N], e.g. tpu-aot:v6e:2x4) compiles every\n"
           "case's programs against the topology and checks the outputs' shapes and dtypes;\n"
           "it runs nothing, so it reports compiled / total and counts execution apart.\n");
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The fixture families of dir, sorted. */
static int families(const char *dir, char names[][256], int max) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    char *list[128];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max && n < 128) {
        size_t l = strlen(e->d_name);
        if (l > 5 && !strcmp(e->d_name + l - 5, ".json")) list[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(list, (size_t)n, sizeof *list, cmp_str);
    for (int i = 0; i < n; i++) {
        snprintf(names[i], 256, "%.*s", (int)strlen(list[i]) - 5, list[i]);
        free(list[i]);
    }
    return n;
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
        else putchar(*s);
    }
    putchar('"');
}

typedef struct dev_result {
    char name[64];
    char mode[16];
    bool compile_only;
    int passed, total, cpu_compared, cpu_agree, not_applicable;
    int crashes; /* child processes that died (compile-only devices run cases in children) */
    double seconds;
} dev_result;

/* One family's cases in one mode on one device. */
typedef struct fam_run {
    dev_result *R;
    const em_opcase_set *s;
    const char *fam;
    bool json;
    int pass, total;
} fam_run;

/* Counts case i's result (r: against torch; rc2: against the CPU) and prints a failure. */
static void tally(fam_run *fr, int i, const em_opcase_result *r, const em_opcase_result *rc2) {
    dev_result *R = fr->R;
    if (r->not_applicable) {
        R->not_applicable++;
        return;
    }
    fr->total++;
    R->total++;
    if (r->pass && rc2->pass) {
        fr->pass++;
        R->passed++;
        return;
    }
    const em_opcase_set *s = fr->s;
    const char *why = r->pass ? rc2->msg : r->msg;
    if (fr->json) {
        printf("{\"device\": ");
        json_str(R->name);
        printf(", \"mode\": ");
        json_str(R->mode);
        printf(", \"family\": ");
        json_str(fr->fam);
        printf(", \"case\": ");
        json_str(em_opcases_name(s, i));
        printf(", \"op\": ");
        json_str(em_opcases_op(s, i));
        printf(", \"dtype\": ");
        json_str(em_opcases_dtype(s, i));
        printf(", \"message\": ");
        json_str(why);
        printf("}\n");
    } else {
        printf("  FAIL %s/%s (op %s, dtype %s)%s: %s\n", fr->fam, em_opcases_name(s, i),
               em_opcases_op(s, i), em_opcases_dtype(s, i), r->pass ? " vs cpu" : "", why);
    }
    fflush(stdout);
}

/* em_opcases_run_isolated's sink: compile-only devices compare with nothing but torch. */
static void sink(void *user, int i, const em_opcase_result *r) {
    em_opcase_result none;
    memset(&none, 0, sizeof none);
    none.pass = true;
    tally(user, i, r, &none);
}

/* One mode of a --modes list: an eager mode, compiled or not. */
typedef struct run_mode {
    char name[16];
    em_eager_mode eager;
    bool compiled;
} run_mode;

static int parse_modes(const char *list, run_mode *out, int max) {
    int n = 0;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", list);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save)) {
        run_mode *m = &out[n];
        memset(m, 0, sizeof *m);
        snprintf(m->name, sizeof m->name, "%s", t);
        if (!strcmp(t, "compiled")) {
            m->eager = EM_EAGER_ASYNC;
            m->compiled = true;
        } else if (!em_eager_mode_parse(t, &m->eager)) {
            return -1;
        }
        n++;
    }
    return n;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The Python package a plugin was installed by ("libtpu 0.0.51"), from the dist-info folder
 * whose RECORD lists the plugin's file; "" when the plugin is not in a site-packages folder. */
static void plugin_package(const char *path, char *out, size_t cap) {
    out[0] = 0;
    const char *sp = strstr(path, "/site-packages/");
    if (!sp) return;
    char dir[1024], rel[512];
    snprintf(dir, sizeof dir, "%.*s", (int)(sp - path) + 14, path);
    snprintf(rel, sizeof rel, "%s,", sp + 15);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) && !out[0]) {
        size_t l = strlen(e->d_name);
        if (l < 11 || strcmp(e->d_name + l - 10, ".dist-info")) continue;
        char rec[1400];
        snprintf(rec, sizeof rec, "%s/%s/RECORD", dir, e->d_name);
        FILE *f = fopen(rec, "r");
        char line[1024];
        while (f && fgets(line, sizeof line, f))
            if (!strncmp(line, rel, strlen(rel))) {
                /* NAME-VERSION.dist-info: the version follows the last '-' */
                char nv[256];
                snprintf(nv, sizeof nv, "%.*s", (int)(l - 10), e->d_name);
                char *dash = strrchr(nv, '-');
                if (dash) *dash = ' ';
                snprintf(out, cap, "%s", nv);
                break;
            }
        if (f) fclose(f);
    }
    closedir(d);
}

/* What a device is: the plugin, its versions and, for a compile-only device, the topology and
 * the options programs are compiled with. */
static void describe_device(em_ctx *c, em_device *d, bool json) {
    em_pjrt_plugin_info pi;
    em_pjrt_topology tp;
    bool is_pjrt = em_pjrt_plugin_info_get(d, &pi) == EM_OK;
    bool aot = em_pjrt_topology_get(d, &tp) == EM_OK;
    const char *opts = "num_replicas 1, num_partitions 1, portable (single-device programs)";
    char pkg[300] = "";
    if (is_pjrt) plugin_package(pi.path, pkg, sizeof pkg);
    if (json) {
        printf("{\"device\": ");
        json_str(em_device_name(d));
        if (is_pjrt) {
            printf(", \"platform\": ");
            json_str(pi.platform);
            printf(", \"pjrt_api\": \"%d.%d\", \"plugin\": ", pi.api_major, pi.api_minor);
            json_str(pi.path);
            printf(", \"stablehlo\": \"%s..%s\"", pi.stablehlo_minimum, pi.stablehlo_current);
            if (pkg[0]) {
                printf(", \"package\": ");
                json_str(pkg);
            }
        }
        if (aot) {
            printf(", \"compile_only\": true, \"topology\": ");
            json_str(tp.name);
            printf(", \"topology_devices\": %d, \"device_kind\": ", tp.n_devices);
            json_str(tp.device_kind);
            printf(", \"device_memory_limit\": %lld, \"platform_version\": ",
                   (long long)tp.device_memory_limit);
            json_str(tp.platform_version);
            printf(", \"compile_options\": ");
            json_str(opts);
        }
        printf("}\n");
        return;
    }
    if (is_pjrt)
        printf("== %s: platform %s, PJRT API %d.%d, StableHLO %s..%s, %s%s%s%s\n",
               em_device_name(d), pi.platform, pi.api_major, pi.api_minor, pi.stablehlo_minimum,
               pi.stablehlo_current, pi.path, pkg[0] ? " (package " : "", pkg, pkg[0] ? ")" : "");
    else
        printf("== %s\n", em_device_name(d));
    if (aot)
        printf("   compile-only: topology %s (%d devices, %s, %.3g GB per device), %s\n"
               "   compile options: %s\n",
               tp.name, tp.n_devices, tp.device_kind, (double)tp.device_memory_limit / 1e9,
               tp.platform_version, opts);
    (void)c;
}

int cmd_test_devices(int argc, char **argv) {
    const char *devs[16];
    int n_devs = 0;
    bool json = false, use_cpu = true, allow_missing = false, compile = false, in_process = false;
    const char *fixtures = NULL, *filter = NULL, *mode = NULL, *modes = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage();
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--no-cpu")) {
            use_cpu = false;
        } else if (!strcmp(argv[i], "--allow-missing")) {
            allow_missing = true;
        } else if (!strcmp(argv[i], "--in-process")) {
            in_process = true;
        } else if (!strcmp(argv[i], "--compile")) {
            compile = true;
        } else if (i + 1 < argc && !strcmp(argv[i], "--device")) {
            if (n_devs < 16) devs[n_devs++] = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--fixtures")) {
            fixtures = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--filter")) {
            filter = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--mode")) {
            mode = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--modes")) {
            modes = argv[++i];
        } else {
            fprintf(stderr, "ember test-devices: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    char dir[1024];
    const char *env = getenv("EMBER_FIXTURES");
    if (fixtures)
        snprintf(dir, sizeof dir, "%s", fixtures);
    else if (env && *env)
        snprintf(dir, sizeof dir, "%s/ops", env);
    else
        snprintf(dir, sizeof dir, "%s/ops", EMBER_SOURCE_FIXTURES_DIR);
    static char fams[64][256];
    int n_fams = families(dir, fams, 64);
    if (n_fams <= 0) {
        fprintf(stderr, "ember test-devices: no fixtures (*.json) in %s\n", dir);
        return 1;
    }
    em_ctx *c = em_ctx_create();
    if (mode) {
        em_eager_mode m;
        if (!em_eager_mode_parse(mode, &m)) {
            fprintf(stderr, "ember test-devices: unknown mode '%s'\n", mode);
            em_ctx_free(c);
            return 2;
        }
        em_ctx_set_eager_mode(c, m);
    }
    bool explicit_devs = n_devs > 0;
    if (!explicit_devs) {
        devs[n_devs++] = "xla:0";
        devs[n_devs++] = "cuda:0";
        devs[n_devs++] = "tpu:0";
    }
    em_device *dv[16];
    int n_ok = 0, rc = 0;
    for (int i = 0; i < n_devs; i++) {
        em_device *d = em_device_get(c, devs[i]);
        if (!d) {
            const char *m = em_ctx_error(c)->message;
            if (json) {
                printf("{\"device\": ");
                json_str(devs[i]);
                printf(", \"skipped\": ");
                json_str(m);
                printf("}\n");
            } else {
                printf("skip %s: %s\n", devs[i], m);
            }
            if (explicit_devs && !allow_missing) rc = 1;
            em_ctx_clear_error(c);
            continue;
        }
        dv[n_ok++] = d;
    }
    run_mode rm[4];
    int n_rm = 1;
    if (modes) {
        n_rm = parse_modes(modes, rm, 4);
        if (n_rm <= 0) {
            fprintf(stderr, "ember test-devices: bad --modes '%s' (sync, async, fused, compiled)\n",
                    modes);
            em_ctx_free(c);
            return 2;
        }
    } else {
        memset(&rm[0], 0, sizeof rm[0]);
        rm[0].eager = em_ctx_eager_mode(c);
        rm[0].compiled = compile;
        snprintf(rm[0].name, sizeof rm[0].name, "%s", compile ? "compiled" : em_eager_mode_name(rm[0].eager));
    }
    static dev_result res[64];
    int n_res = 0;
    em_device *cpu = em_device_cpu();
    for (int di = 0; di < n_ok; di++) {
        em_device *d = dv[di];
        /* a compiler crash on a compile-only device costs one case, not the report */
        bool isolate = em_device_is_compile_only(d) && !in_process;
        em_pjrt_cache_stats iso_stats;
        memset(&iso_stats, 0, sizeof iso_stats);
        describe_device(c, d, json);
        for (int mi = 0; mi < n_rm && n_res < 64; mi++) {
            dev_result *R = &res[n_res++];
            memset(R, 0, sizeof *R);
            snprintf(R->name, sizeof R->name, "%s", em_device_name(d));
            memcpy(R->mode, rm[mi].name, sizeof R->mode);
            R->compile_only = em_device_is_compile_only(d);
            em_ctx_set_eager_mode(c, rm[mi].eager);
            if (!json) printf("-- %s, mode %s\n", R->name, R->mode);
            double t0 = now_s();
            for (int f = 0; f < n_fams; f++) {
                char path[1400];
                if (strlen(dir) + strlen(fams[f]) + 8 > sizeof path) continue;
                snprintf(path, sizeof path, "%.1024s/%.255s.json", dir, fams[f]);
                em_opcase_set *s = em_opcases_load(c, path);
                if (!s) {
                    fprintf(stderr, "%s\n", em_ctx_error(c)->message);
                    em_ctx_clear_error(c);
                    rc = 1;
                    continue;
                }
                em_opcases_set_tie_tolerant(s, true);
                em_opcases_set_ulp_tolerant(s, d != cpu);
                em_opcases_set_compiled(s, rm[mi].compiled);
                fam_run fr = {R, s, fams[f], json, 0, 0};
                int n_case = 0, *idx = malloc(sizeof(int) * (size_t)(em_opcases_count(s) + 1));
                for (int i = 0; idx && i < em_opcases_count(s); i++)
                    if (!filter || strstr(em_opcases_name(s, i), filter)) idx[n_case++] = i;
                if (!idx) {
                    rc = 1;
                } else if (isolate) {
                    int crashed = 0;
                    if (em_opcases_run_isolated(c, s, idx, n_case, d, sink, &fr, &iso_stats,
                                                &crashed) != EM_OK) {
                        fprintf(stderr, "ember test-devices: cannot start a child process\n");
                        rc = 1;
                    }
                    R->crashes += crashed;
                } else {
                    for (int k = 0; k < n_case; k++) {
                        int i = idx[k];
                        em_opcase_result r;
                        em_opcases_run(c, s, i, d, &r);
                        bool ref_ran = false;
                        em_opcase_result rc2 = {0};
                        rc2.pass = true;
                        if (r.pass && use_cpu && d != cpu && !R->compile_only) {
                            em_opcases_compare(c, s, i, d, cpu, &rc2, &ref_ran);
                            if (ref_ran) {
                                R->cpu_compared++;
                                if (rc2.pass) R->cpu_agree++;
                            }
                        }
                        tally(&fr, i, &r, &rc2);
                    }
                }
                free(idx);
                if (!json) printf("  %-12s %4d / %4d\n", fams[f], fr.pass, fr.total);
                fflush(stdout);
                em_opcases_free(s);
            }
            R->seconds = now_s() - t0;
            if (R->passed != R->total) rc = 1;
            if (json) continue;
            if (R->compile_only) {
                printf("%s [%s]: %d / %d cases compiled (%.2f %%) in %.0f s; execution not "
                       "applicable (compile-only device)\n",
                       R->name, R->mode, R->passed, R->total,
                       R->total ? 100.0 * R->passed / R->total : 0.0, R->seconds);
                if (R->not_applicable)
                    printf("%s [%s]: %d error cases about index values not applicable: nothing "
                           "runs, so no value is checked\n", R->name, R->mode, R->not_applicable);
            } else {
                printf("%s [%s]: %d / %d cases passed (%.2f %%); agrees with cpu on %d / %d cases "
                       "run there\n",
                       R->name, R->mode, R->passed, R->total,
                       R->total ? 100.0 * R->passed / R->total : 0.0, R->cpu_agree,
                       R->cpu_compared);
                if (R->not_applicable)
                    printf("%s [%s]: %d error cases about index values not applicable: a "
                           "compiled program on the device does not check data\n",
                           R->name, R->mode, R->not_applicable);
            }
            if (R->crashes)
                printf("%s [%s]: %d cases killed the process running them (signals above)\n",
                       R->name, R->mode, R->crashes);
            em_pjrt_cache_stats st;
            if (isolate ? (st = iso_stats, true) : em_pjrt_cache_stats_get(d, &st) == EM_OK)
                printf("%s: executables%s: %lld compiled, %lld from disk, %lld cache hits, "
                       "%lld failed compiles, %.1f s compiling\n",
                       R->name, isolate ? " (in the child processes)" : "", (long long)st.compiles, (long long)st.disk_hits,
                       (long long)st.hits, (long long)st.failures, st.compile_seconds);
        }
    }
    for (int k = 0; json && k < n_res; k++) {
        const dev_result *R = &res[k];
        printf("{\"device\": ");
        json_str(R->name);
        printf(", \"mode\": ");
        json_str(R->mode);
        printf(", \"passed\": %d, \"total\": %d, \"pass_rate\": %.4f, \"not_applicable\": %d",
               R->passed, R->total, R->total ? (double)R->passed / R->total : 0.0,
               R->not_applicable);
        if (R->compile_only)
            printf(", \"compile_only\": true, \"compiled\": %d, \"executed\": "
                   "\"not applicable\"", R->passed);
        if (R->crashes) printf(", \"crashes\": %d", R->crashes);
        printf(", \"seconds\": %.1f}\n", R->seconds);
    }
    if (n_ok == 0 && !json)
        printf("SKIP: no device to test (install a plugin, e.g. pip install xla-cpu-pjrt)\n");
    em_ctx_free(c);
    if (rc == 0 && allow_missing && explicit_devs && n_ok == 0) rc = 77;
    return rc;
}

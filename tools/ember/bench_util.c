#include "bench_util.h"

#include "backends/cpu/cpu.h"
#include "cli.h"
#include "ember/ember.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double bench_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_median_ms(void (*fn)(void *), void *user, double min_s) {
    fn(user);
    double times[4096];
    int n = 0;
    double start = bench_now();
    while (n < 4096) {
        double t0 = bench_now();
        fn(user);
        times[n++] = (bench_now() - t0) * 1e3;
        if (bench_now() - start >= min_s && n >= 3) break;
    }
    qsort(times, (size_t)n, sizeof *times, cmp_d);
    return times[n / 2];
}

/* Where the peer scripts are: $EMBER_PEERS_DIR, the source tree, or the install prefix. */
static const char *peers_dir(char *buf, size_t n) {
    const char *e = getenv("EMBER_PEERS_DIR");
    if (e && *e) return e;
    struct stat st;
    if (stat(EMBER_SOURCE_PEERS_DIR, &st) == 0) return EMBER_SOURCE_PEERS_DIR;
    snprintf(buf, n, "%s", EMBER_INSTALL_PEERS_DIR);
    return buf;
}

void bench_peer_run(const char *script, const char *tasks_json, bench_peer *out) {
    memset(out, 0, sizeof *out);
    char dirbuf[512], path[1024], inpath[] = "/tmp/ember-peer-XXXXXX";
    snprintf(path, sizeof path, "%s/%s", peers_dir(dirbuf, sizeof dirbuf), script);
    if (access(path, R_OK) != 0) {
        snprintf(out->why, sizeof out->why, "peer script %s not found", path);
        return;
    }
    int fd = mkstemp(inpath);
    if (fd < 0) {
        snprintf(out->why, sizeof out->why, "cannot create a temporary file");
        return;
    }
    size_t len = strlen(tasks_json);
    if (write(fd, tasks_json, len) != (ssize_t)len) {
        close(fd);
        unlink(inpath);
        snprintf(out->why, sizeof out->why, "cannot write the peer's tasks");
        return;
    }
    close(fd);
    const char *py = getenv("EMBER_PYTHON");
    if (!py || !*py) py = "python3";
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' '%s' < '%s' 2>/dev/null", py, path, inpath);
    FILE *f = popen(cmd, "r");
    if (!f) {
        unlink(inpath);
        snprintf(out->why, sizeof out->why, "cannot run %s", py);
        return;
    }
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        json_t *j = json_loads(line, 0, NULL);
        if (!j) continue;
        json_t *un = json_object_get(j, "unavailable");
        if (un) {
            snprintf(out->why, sizeof out->why, "%s", json_string_value(un));
        } else if (out->n < 128) {
            const char *name = json_string_value(json_object_get(j, "name"));
            json_t *ms = json_object_get(j, "ms");
            snprintf(out->names[out->n], sizeof out->names[0], "%s", name ? name : "?");
            out->ms[out->n] = ms ? json_number_value(ms) : -1;
            out->n++;
            out->available = true;
        }
        json_decref(j);
    }
    int rc = pclose(f);
    unlink(inpath);
    if (!out->available && !out->why[0])
        snprintf(out->why, sizeof out->why, "%s exited with status %d (torch not importable?)", py,
                 rc);
}

double bench_peer_ms(const bench_peer *p, const char *name) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->names[i], name)) return p->ms[i];
    return -1;
}

void bench_print_header(bool json) {
    if (json) return;
    printf("%-16s %-22s %-5s %10s %10s %7s  %-18s %10s %7s\n", "bench", "shape", "dtype",
           "ember ms", "limit ms", "of lim", "peer", "peer ms", "speedup");
}

const char *bench_cell(char *buf, size_t n, const char *fmt, double v) {
    if (v > 0) snprintf(buf, n, fmt, v);
    else snprintf(buf, n, "-");
    return buf;
}

void bench_print_row(const bench_row *r, bool json) {
    bool has_lim = r->limit_ms > 0 && r->ms > 0;
    bool has_peer = r->peer && r->peer_ms > 0;
    if (json) {
        printf("{\"bench\": \"%s\", \"shape\": \"%s\", \"dtype\": \"%s\", \"ms\": %.6g, ", r->bench,
               r->shape, r->dtype, r->ms);
        if (has_lim)
            printf("\"limit_ms\": %.6g, \"fraction_of_limit\": %.4f, \"limit\": \"%s\", ",
                   r->limit_ms, r->limit_ms / r->ms, r->limit_what ? r->limit_what : "");
        else
            printf("\"limit_ms\": null, \"fraction_of_limit\": null, ");
        if (r->flops > 0 && r->bytes > 0)
            printf("\"flops\": %.6g, \"bytes\": %.6g, ", r->flops, r->bytes);
        if (has_peer)
            printf("\"peer\": \"%s\", \"peer_ms\": %.6g, \"speedup_vs_peer\": %.3f}\n", r->peer,
                   r->peer_ms, r->peer_ms / r->ms);
        else
            printf("\"peer\": null, \"peer_ms\": null}\n");
        fflush(stdout);
        return;
    }
    char lim[32], frac[16], pms[32], sp[16];
    bench_cell(lim, sizeof lim, "%.4g", has_lim ? r->limit_ms : -1);
    bench_cell(frac, sizeof frac, "%.0f%%", has_lim ? 100 * r->limit_ms / r->ms : -1);
    bench_cell(pms, sizeof pms, "%.4g", has_peer ? r->peer_ms : -1);
    bench_cell(sp, sizeof sp, "%.2fx", has_peer ? r->peer_ms / r->ms : -1);
    printf("%-16s %-22s %-5s %10.4g %10s %7s  %-18s %10s %7s\n", r->bench, r->shape, r->dtype,
           r->ms, lim, frac, r->peer ? r->peer : "-", pms, sp);
    fflush(stdout);
}

void bench_print_machine(bool json) {
    char feats[256];
    em_cpu_features_str(feats, sizeof feats);
    em_device_info info;
    const char *kind = em_device_info_get(em_device_cpu(), &info) == EM_OK ? info.kind : "?";
    const char *level = em_cpu_isa_name(em_cpu_isa_get());
    if (json)
        printf("{\"bench\": \"machine\", \"kernels\": \"%s\", \"cpu\": \"%s\", "
               "\"features\": \"%s\", \"threads\": %d}\n",
               level, kind, feats, em_num_threads());
    else
        printf("cpu kernels: %s (%s; %s), %d threads\n", level, kind, feats, em_num_threads());
    fflush(stdout);
}

/*
 * With EMBER_CPU_LEVEL below what the CPU has, Ember's figures are those of the lower level; the
 * peers are capped to the same instruction set through their own switches, so that the ratios
 * compare kernels of one level (OpenBLAS's Haswell kernels for avx2; torch's ATen kernels and
 * MKL's sgemm). A switch the user set is left alone. Not capped: oneDNN, torch's bf16 matmul
 * (ONEDNN_MAX_CPU_ISA=AVX2 sent a 2048^3 bf16 matmul to a reference path: 71 s instead of 16 ms
 * on AMX), and llama.cpp, whose binary is built for one level: their figures stay those of the
 * CPU and of the build.
 */
void bench_match_peers_to_level(bool json) {
    const char *want = getenv("EMBER_CPU_LEVEL");
    em_cpu_isa isa = em_cpu_isa_get();
    if (!want || !*want || (isa != EM_ISA_AVX2 && isa != EM_ISA_GENERIC)) return;
#if defined(__x86_64__)
    const bool avx2 = isa == EM_ISA_AVX2;
    const char *vars[3][2] = {
        {"OPENBLAS_CORETYPE", avx2 ? "Haswell" : "Nehalem"},
        {"ATEN_CPU_CAPABILITY", avx2 ? "avx2" : "default"},
        {"MKL_ENABLE_INSTRUCTIONS", avx2 ? "AVX2" : "SSE4_2"},
    };
    char set[256] = "";
    size_t used = 0;
    for (int i = 0; i < 3; i++) {
        if (getenv(vars[i][0])) continue;
        setenv(vars[i][0], vars[i][1], 0);
        int w = snprintf(set + used, sizeof set - used, "%s%s=%s", used ? " " : "", vars[i][0],
                         vars[i][1]);
        if (w > 0 && (size_t)w < sizeof set - used) used += (size_t)w;
    }
    if (!used) return;
    if (json)
        printf("{\"bench\": \"peer_level\", \"kernels\": \"%s\", \"set\": \"%s\"}\n",
               em_cpu_isa_name(isa), set);
    else
        printf("peers capped to the %s level: %s\n", em_cpu_isa_name(isa), set);
    fflush(stdout);
#else
    (void)json;
#endif
}

int bench_preset_dir(const char *who, const char *cache, const char *prefix, const char *preset,
                     long long layers, char *dir, size_t n) {
    bool moe = preset && !strcmp(preset, "qwen3-30b-a3b");
    if (!preset || (!moe && strcmp(preset, "qwen3-0.6b"))) {
        fprintf(stderr, "%s: unknown preset '%s' (qwen3-0.6b, qwen3-30b-a3b)\n", who,
                preset ? preset : "");
        return 2;
    }
    mkdir("build", 0755);
    mkdir(cache, 0755);
    snprintf(dir, n, "%s/%s%s", cache, prefix, preset);
    return bench_checkpoint(dir, preset, layers > 0 ? layers : moe ? 12 : 28, NULL);
}

int bench_checkpoint(const char *dir, const char *preset, long long layers, const char *dtype) {
    char probe[1200], lay[32];
    snprintf(probe, sizeof probe, "%s/config.json", dir);
    struct stat st;
    if (stat(probe, &st) == 0) return 0;
    char *av[12] = {"make-checkpoint", "--preset", (char *)preset, "--out", (char *)dir};
    int ac = 5;
    if (layers > 0) {
        snprintf(lay, sizeof lay, "%lld", layers);
        av[ac++] = "--layers";
        av[ac++] = lay;
    }
    if (dtype) {
        av[ac++] = "--dtype";
        av[ac++] = (char *)dtype;
    }
    av[ac] = NULL;
    return cmd_make_checkpoint(ac, av) != 0 ? 1 : 0;
}

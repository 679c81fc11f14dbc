/* `ember report`: runs the existing benchmarks (`ember bench ... --json`, each in a child
 * process so that one device's failure or crash costs only its rows) on every device given,
 * gathers their rows into results.json, adds costs and projections, and renders the report. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "cli.h"
#include "ember/ember.h"
#include "ember/pjrt.h"
#include "report.h"

#include "git_commit.h" /* generated at build time: EMBER_GIT_COMMIT */

enum { MAX_ITEMS = 32, MAX_ARGS = 32 };

typedef struct job {
    const char *suite; /* ops, decode, moe, tokenize */
    char device[64];
    char model[512];   /* decode: the preset or path */
    double estimate_s; /* expected duration, for the time left */
} job;

typedef struct report_opts {
    char *devices[MAX_ITEMS], *models[MAX_ITEMS];
    int n_devices, n_models;
    char *from[MAX_ITEMS];
    int n_from;
    bool quick, skip_peers, want[4];
    const char *prices, *out, *text, *tokenizer, *headline;
} report_opts;

static const char *const suites[4] = {"ops", "decode", "moe", "tokenize"};

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: ember report --out DIR [--devices cpu,xla:0,...] [--models PRESETS_OR_DIRS]\n"
        "                    [--benches ops,decode,moe,tokenize] [--prices FILE] [--quick]\n"
        "                    [--skip-peers] [--tokenizer DIR_OR_FILE] [--text FILE]\n"
        "       ember report --out DIR --from RESULTS.json[,RESULTS.json...] [--prices FILE]\n"
        "       (either form takes [--headline FILE])\n\n"
        "Runs the benchmarks (`ember bench ops|decode|moe|tokenize --json`) on each device\n"
        "(default: every device `ember devices` finds) and writes DIR/results.json (every row,\n"
        "the machine, Ember's version and commit, the date, the limits measured, the peers),\n"
        "DIR/report.md, DIR/report.html (one self-contained file) and the plots as SVG: a\n"
        "roofline per device, tokens/s against batch size, the fraction of the bound per\n"
        "benchmark and Ember against its peers.\n"
        "  --models     decode models: presets (qwen3-0.6b, qwen3-30b-a3b) or checkpoint\n"
        "               folders/GGUF files (default qwen3-0.6b)\n"
        "  --prices     JSON: {\"cpu\": {\"price_per_hour\": 0.10, \"watts\": 60}, ...}; keys are\n"
        "               device names (xla:0), kinds (cpu, xla, cuda, tpu) or the ids of the\n"
        "               projected devices (tpu-v5e, tpu-v5p, tpu-v6e, a100, h100, h200, l4).\n"
        "               Gives $ per 1M generated and prompt tokens and tokens per joule.\n"
        "  --quick      short runs (fewer batches, layers and repetitions)\n"
        "  --from       no benchmarks: renders the results.json of earlier runs again (the\n"
        "               rows and runs of several files combined; machine, date and limits from\n"
        "               the first), e.g. to add a run that failed or new prices\n"
        "  --skip-peers do not run torch, OpenBLAS or llama.cpp next to Ember\n"
        "  --headline   the TPU headline projected by XLA's cost model (the JSON that\n"
        "               scripts/project_tpu_headline.py --json FILE writes): ragged against\n"
        "               the per-expert loop on a v6e-8, beside the announcement's ratios\n"
        "Projections onto devices not present use datasheet figures (see the report) and\n"
        "are marked as such. Progress and the time left go to stderr; each benchmark's own\n"
        "messages to DIR/logs/.\n");
}

static int split_list(char *s, char **out, int max) {
    int n = 0;
    for (char *t = strtok(s, ","); t && n < max; t = strtok(NULL, ","))
        if (*t) out[n++] = t;
    return n;
}

static int parse(int argc, char **argv, report_opts *o) {
    static char dev_buf[1024], model_buf[4096], bench_buf[256], from_buf[4096];
    memset(o, 0, sizeof *o);
    bool benches_given = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "--quick"))
            o->quick = true;
        else if (!strcmp(a, "--skip-peers"))
            o->skip_peers = true;
        else if (!strcmp(a, "--out") && has)
            o->out = argv[++i];
        else if (!strcmp(a, "--prices") && has)
            o->prices = argv[++i];
        else if (!strcmp(a, "--text") && has)
            o->text = argv[++i];
        else if (!strcmp(a, "--tokenizer") && has)
            o->tokenizer = argv[++i];
        else if (!strcmp(a, "--headline") && has)
            o->headline = argv[++i];
        else if (!strcmp(a, "--from") && has) {
            snprintf(from_buf, sizeof from_buf, "%s", argv[++i]);
            o->n_from = split_list(from_buf, o->from, MAX_ITEMS);
        } else if (!strcmp(a, "--devices") && has) {
            snprintf(dev_buf, sizeof dev_buf, "%s", argv[++i]);
            o->n_devices = split_list(dev_buf, o->devices, MAX_ITEMS);
        } else if (!strcmp(a, "--models") && has) {
            snprintf(model_buf, sizeof model_buf, "%s", argv[++i]);
            o->n_models = split_list(model_buf, o->models, MAX_ITEMS);
        } else if (!strcmp(a, "--benches") && has) {
            snprintf(bench_buf, sizeof bench_buf, "%s", argv[++i]);
            char *items[8];
            int n = split_list(bench_buf, items, 8);
            benches_given = true;
            for (int k = 0; k < n; k++) {
                int s = 0;
                while (s < 4 && strcmp(items[k], suites[s])) s++;
                if (s == 4) {
                    fprintf(stderr,
                            "ember report: --benches: unknown benchmark '%s' (known: ops, "
                            "decode, moe, tokenize)\n",
                            items[k]);
                    return 2;
                }
                o->want[s] = true;
            }
        } else {
            fprintf(stderr, "ember report: %s '%s'\n",
                    a[0] == '-' && !has ? "option needs a value:" : "unknown option", a);
            return 2;
        }
    }
    if (!o->out) {
        fprintf(stderr, "ember report: --out DIR is required\n");
        return 2;
    }
    if (!benches_given)
        for (int s = 0; s < 4; s++) o->want[s] = true;
    return 0;
}

/* Every device that opens here (PJRT kinds whose plugins are found, then the list). */
static int default_devices(char names[][64], int max) {
    static const char *const kinds[] = {"xla:0", "cuda:0", "tpu:0"};
    em_ctx *c = em_ctx_create();
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        em_device_get(c, kinds[i]);
        em_ctx_clear_error(c);
    }
    em_ctx_free(c);
    int n = 0;
    for (int i = 0; i < em_device_count() && n < max; i++) {
        em_device *d = em_device_at(i);
        if (em_device_is_compile_only(d)) continue;
        snprintf(names[n++], 64, "%s", em_device_name(d));
    }
    return n;
}

static bool is_preset(const char *m) {
    return !strcmp(m, "qwen3-0.6b") || !strcmp(m, "qwen3-30b-a3b");
}

/* The child's argv for one job. */
static int job_argv(const report_opts *o, const job *j, const char *exe, char **av, char *buf,
                    size_t n) {
    int k = 0;
    av[k++] = (char *)exe;
    av[k++] = "bench";
    av[k++] = (char *)j->suite;
    av[k++] = "--json";
    bool cpu = !strcmp(j->device, "cpu");
    if (!cpu && strcmp(j->suite, "tokenize")) {
        av[k++] = "--device";
        av[k++] = (char *)j->device;
    }
    if (o->skip_peers && strcmp(j->suite, "tokenize")) av[k++] = "--skip-peers";
    if (!strcmp(j->suite, "ops") && o->quick) av[k++] = "--quick";
    if (!strcmp(j->suite, "decode")) {
        av[k++] = is_preset(j->model) ? "--preset" : "--model";
        av[k++] = (char *)j->model;
        av[k++] = "--batches";
        av[k++] = o->quick ? "1,16" : "1,16,64";
        if (o->quick) {
            av[k++] = "--steps";
            av[k++] = "4";
            if (is_preset(j->model)) {
                av[k++] = "--layers";
                av[k++] = "2";
            }
        }
    }
    if (!strcmp(j->suite, "moe")) {
        av[k++] = "--model";
        av[k++] = "qwen3";
        av[k++] = "--batches";
        av[k++] = o->quick ? "1,16" : "1,4,16,64";
        if (o->quick) {
            av[k++] = "--quick";
            av[k++] = "--impls";
            av[k++] = "loop,ragged";
        }
    }
    if (!strcmp(j->suite, "tokenize")) {
        av[k++] = "--seconds";
        av[k++] = o->quick ? "0.2" : "1";
        if (o->tokenizer) {
            av[k++] = "--tokenizer";
            av[k++] = (char *)o->tokenizer;
        }
        if (o->text) {
            av[k++] = "--text";
            av[k++] = (char *)o->text;
        }
    }
    av[k] = NULL;
    /* the command line, for results.json */
    size_t len = 0;
    buf[0] = 0;
    for (int i = 1; i < k && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", i > 1 ? " " : "ember ", av[i]);
    return k;
}

/* Runs one job; its JSON lines go to `rows` (tagged), its stderr to `log`. Returns the exit
 * status (or -1 when it could not start), with the last line of the log in `why`. */
static int run_job(const job *j, char **av, const char *log, json_t *results, char *why,
                   size_t wn) {
    int fd[2];
    if (pipe(fd)) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        int e = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (e >= 0) dup2(e, 2);
        execv(av[0], av);
        fprintf(stderr, "cannot run %s: %s\n", av[0], strerror(errno));
        _exit(127);
    }
    close(fd[1]);
    FILE *f = fdopen(fd[0], "r");
    char *line = NULL;
    size_t cap = 0;
    json_t *rows = json_object_get(results, "rows"), *limits = json_object_get(results, "limits");
    while (f && getline(&line, &cap, f) > 0) {
        json_t *r = json_loads(line, 0, NULL);
        if (!json_is_object(r)) {
            json_decref(r);
            continue;
        }
        const char *bench = json_string_value(json_object_get(r, "bench"));
        if (!bench && json_object_get(r, "impl"))
            json_object_set_new(r, "bench", json_string("moe"));
        bench = json_string_value(json_object_get(r, "bench"));
        if (bench && !strcmp(bench, "machine")) {
            if (!json_object_get(results, "machine")) json_object_set(results, "machine", r);
        } else if (bench && !strcmp(bench, "limits")) {
            json_object_set(limits, j->device, r);
        } else {
            if (!json_object_get(r, "device") || !strcmp(j->suite, "tokenize"))
                json_object_set_new(r, "device",
                                    json_string(strcmp(j->suite, "tokenize") ? j->device : "host"));
            json_object_set_new(r, "suite", json_string(j->suite));
            json_array_append(rows, r);
        }
        json_decref(r);
    }
    free(line);
    if (f) fclose(f);
    int st = 0;
    waitpid(pid, &st, 0);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    why[0] = 0;
    FILE *l = fopen(log, "r");
    if (l) {
        char buf[1024];
        while (fgets(buf, sizeof buf, l))
            if (buf[0] != '\n') snprintf(why, wn, "%s", buf);
        fclose(l);
        size_t n = strlen(why);
        if (n && why[n - 1] == '\n') why[n - 1] = 0;
    }
    return rc;
}

/* --from: the first file's results with the rows and runs of the others appended, their limits
 * and devices added where the first lacks them. NULL with a message on a bad file. */
static json_t *load_results(char *const *files, int n) {
    json_t *out = NULL;
    for (int i = 0; i < n; i++) {
        json_error_t e;
        json_t *r = json_load_file(files[i], 0, &e);
        if (!json_is_object(r) || !json_is_array(json_object_get(r, "rows"))) {
            fprintf(stderr, "ember report: --from %s: %s\n", files[i],
                    r ? "not an `ember report` results.json (no \"rows\" array)" : e.text);
            json_decref(r);
            json_decref(out);
            return NULL;
        }
        if (!out) {
            out = r;
            continue;
        }
        json_array_extend(json_object_get(out, "rows"), json_object_get(r, "rows"));
        json_t *runs = json_object_get(r, "runs"), *mine = json_object_get(out, "runs");
        if (json_is_array(runs) && json_is_array(mine)) json_array_extend(mine, runs);
        json_t *lim = json_object_get(r, "limits"), *ml = json_object_get(out, "limits");
        if (json_is_object(lim) && json_is_object(ml)) json_object_update_missing(ml, lim);
        json_t *devs = json_object_get(r, "devices"), *md = json_object_get(out, "devices");
        size_t k;
        json_t *d;
        json_array_foreach(devs, k, d) {
            bool seen = false;
            size_t q;
            json_t *x;
            json_array_foreach(md, q, x) seen |= json_equal(x, d);
            if (!seen && json_is_array(md)) json_array_append(md, d);
        }
        json_decref(r);
    }
    return out;
}

/* --headline FILE: a JSON array of project_tpu_headline.py's rows, each an object with the
 * model (string) and its batch, ragged_ms, loop_ms, ratio, ragged_tps and loop_tps (numbers).
 * Put into results as "headline". false with a message naming the file and what is wrong. */
static bool add_headline(json_t *results, const char *file) {
    json_error_t e;
    json_t *h = json_load_file(file, 0, &e);
    if (!json_is_array(h)) {
        fprintf(stderr, "ember report: --headline %s: %s\n", file,
                h ? "not a JSON array of rows (scripts/project_tpu_headline.py --json FILE)"
                  : e.text);
        json_decref(h);
        return false;
    }
    static const char *const nums[] = {"batch", "ragged_ms", "loop_ms", "ratio",
                                       "ragged_tps", "loop_tps"};
    size_t i;
    json_t *r;
    json_array_foreach(h, i, r) {
        const char *bad = !json_is_object(r) ? "is not an object"
                          : !json_is_string(json_object_get(r, "model")) ? "has no \"model\" string"
                                                                          : NULL;
        for (int k = 0; k < 6 && !bad; k++)
            if (!json_is_number(json_object_get(r, nums[k]))) bad = nums[k];
        if (bad) {
            fprintf(stderr, "ember report: --headline %s: row %zu %s%s\n", file, i,
                    json_is_object(r) && strchr(bad, ' ') == NULL ? "has no number " : "", bad);
            json_decref(h);
            return false;
        }
    }
    json_object_set_new(results, "headline", h);
    return true;
}

static void fmt_secs(char *buf, size_t n, double s) {
    if (s < 90)
        snprintf(buf, n, "%.0f s", s);
    else
        snprintf(buf, n, "%.0f min", s / 60);
}

/* Writes results.json, the plots, report.md and report.html into o->out; takes results. */
static bool write_all(const report_opts *o, json_t *results) {
    char path[4200];
    snprintf(path, sizeof path, "%s/results.json", o->out);
    if (json_dump_file(results, path, JSON_INDENT(1) | JSON_SORT_KEYS)) {
        fprintf(stderr, "ember report: cannot write %s\n", path);
        json_decref(results);
        return false;
    }
    report_plot plots[MAX_ITEMS + 8];
    int np = report_plots(results, plots, MAX_ITEMS + 8);
    bool ok = np >= 0 && report_write(o->out, results, plots, np);
    for (int i = 0; i < np; i++) free(plots[i].svg);
    json_decref(results);
    if (ok) {
        fprintf(stderr, "wrote %s/report.md, report.html, results.json and %d plots\n", o->out,
                np);
        printf("%s/report.html\n", o->out);
    }
    return ok;
}

int cmd_report(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    report_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) {
        usage(stderr);
        return rc;
    }
    json_t *prices = NULL;
    if (o.prices) {
        char err[512];
        prices = report_prices_load(o.prices, err, sizeof err);
        if (!prices) {
            fprintf(stderr, "ember report: --prices: %s\n", err);
            return 2;
        }
    }
    if (o.headline) { /* a bad file fails now, not after the benchmarks */
        json_t *probe = json_object();
        bool ok = probe && add_headline(probe, o.headline);
        json_decref(probe);
        if (!ok) {
            json_decref(prices);
            return 2;
        }
    }
    if (o.n_from) {
        json_t *results = load_results(o.from, o.n_from);
        if (!results) {
            json_decref(prices);
            return 1;
        }
        if (mkdir(o.out, 0755) && errno != EEXIST) {
            fprintf(stderr, "ember report: cannot create %s: %s\n", o.out, strerror(errno));
            json_decref(prices);
            json_decref(results);
            return 1;
        }
        if (o.headline && !add_headline(results, o.headline)) {
            json_decref(prices);
            json_decref(results);
            return 1;
        }
        report_costs_add(results, prices);
        json_decref(prices);
        return write_all(&o, results) ? 0 : 1;
    }
    char exe[4096];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (el <= 0) {
        fprintf(stderr, "ember report: cannot find the ember executable (/proc/self/exe)\n");
        json_decref(prices);
        return 1;
    }
    exe[el] = 0;
    char logs[4096];
    snprintf(logs, sizeof logs, "%s/logs", o.out);
    if ((mkdir(o.out, 0755) && errno != EEXIST) || (mkdir(logs, 0755) && errno != EEXIST)) {
        fprintf(stderr, "ember report: cannot create %s: %s\n", logs, strerror(errno));
        json_decref(prices);
        return 1;
    }
    char devs[MAX_ITEMS][64];
    int nd = 0;
    if (o.n_devices)
        for (int i = 0; i < o.n_devices; i++) snprintf(devs[nd++], 64, "%s", o.devices[i]);
    else
        nd = default_devices(devs, MAX_ITEMS);
    static char default_model[] = "qwen3-0.6b";
    if (!o.n_models) o.models[o.n_models++] = default_model;

    /* the plan: per device ops, decode per model, moe; tokenize once (a host benchmark) */
    job jobs[4 * MAX_ITEMS + MAX_ITEMS * MAX_ITEMS];
    int nj = 0;
    for (int d = 0; d < nd; d++) {
        if (o.want[0]) jobs[nj++] = (job){"ops", "", "", o.quick ? 60 : 300};
        for (int m = 0; o.want[1] && m < o.n_models; m++) {
            jobs[nj] = (job){"decode", "", "", o.quick ? 30 : 300};
            snprintf(jobs[nj++].model, sizeof jobs[0].model, "%s", o.models[m]);
        }
        if (o.want[2]) jobs[nj++] = (job){"moe", "", "", o.quick ? 60 : 300};
        for (int k = nj; k > 0 && !jobs[k - 1].device[0]; k--)
            snprintf(jobs[k - 1].device, sizeof jobs[0].device, "%.63s", devs[d]);
    }
    if (o.want[3]) {
        jobs[nj] = (job){"tokenize", "", "", o.quick ? 5 : 20};
        snprintf(jobs[nj++].device, sizeof jobs[0].device, "host");
    }

    json_t *results = json_object();
    char date[32], cmdline[2048] = "ember";
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    for (int i = 0, len = 5; i < argc && len < (int)sizeof cmdline; i++)
        len += snprintf(cmdline + len, sizeof cmdline - (size_t)len, " %s", argv[i]);
    json_object_set_new(results, "ember_version", json_string(em_version()));
    json_object_set_new(results, "commit", json_string(EMBER_GIT_COMMIT));
    json_object_set_new(results, "date", json_string(date));
    json_object_set_new(results, "command", json_string(cmdline));
    json_object_set_new(results, "quick", json_boolean(o.quick));
    json_t *jd = json_array();
    for (int d = 0; d < nd; d++) json_array_append_new(jd, json_string(devs[d]));
    json_object_set_new(results, "devices", jd);
    json_object_set_new(results, "limits", json_object());
    json_object_set_new(results, "rows", json_array());
    json_t *runs = json_array();
    json_object_set_new(results, "runs", runs);

    double t0 = bench_now(), est_done = 0, est_all = 0;
    for (int i = 0; i < nj; i++) est_all += jobs[i].estimate_s;
    int failed = 0;
    for (int i = 0; i < nj; i++) {
        const job *j = &jobs[i];
        double spent = bench_now() - t0, scale = est_done > 0 ? spent / est_done : 1;
        char left[32];
        fmt_secs(left, sizeof left, (est_all - est_done) * scale);
        fprintf(stderr, "[%d/%d] %s on %s%s%s (about %s left)\n", i + 1, nj, j->suite, j->device,
                j->model[0] ? ", " : "", j->model, left);
        char *av[MAX_ARGS], line[2048], log[4200], why[1024];
        job_argv(&o, j, exe, av, line, sizeof line);
        snprintf(log, sizeof log, "%s/%02d-%s-%s.log", logs, i + 1, j->suite, j->device);
        for (char *c = strrchr(log, '/'); c && *c; c++)
            if (*c == ':') *c = '-';
        double ts = bench_now();
        int st = run_job(j, av, log, results, why, sizeof why);
        double took = bench_now() - ts;
        json_t *run = json_pack("{s:s, s:s, s:s, s:i, s:f}", "suite", j->suite, "device", j->device,
                                "command", line, "exit", st, "seconds", took);
        if (st) {
            failed++;
            json_object_set_new(run, "why", json_string(why[0] ? why : "no output"));
            fprintf(stderr, "      %s on %s failed (exit %d): %s\n", j->suite, j->device, st,
                    why[0] ? why : "no output");
        }
        json_array_append_new(runs, run);
        est_done += j->estimate_s;
    }
    if (o.headline && !add_headline(results, o.headline)) { /* (checked before the runs) */
        json_decref(prices);
        json_decref(results);
        return 1;
    }
    report_costs_add(results, prices);
    json_decref(prices);
    if (!write_all(&o, results)) return 1;
    fprintf(stderr, "took %.0f s (%d of %d benchmarks failed; see results.json \"runs\")\n",
            bench_now() - t0, failed, nj);
    return 0;
}

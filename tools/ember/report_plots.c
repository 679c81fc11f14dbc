/* The report's plots, built from the rows of results.json: a roofline per device, tokens/s
 * against batch size, fraction of the bound per benchmark, and Ember against its peers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

/* "cpu add [16777216] f32", "xla:0 decode qwen3 b16 eager", "cpu moe qwen3-30b-a3b ragged b64" */
void report_row_label(json_t *r, char *buf, size_t n) {
    const char *bench = report_str(r, "bench");
    if (!strcmp(bench, "decode"))
        snprintf(buf, n, "%s decode %s b%.0f %s", report_str(r, "device"), report_str(r, "model"),
                 report_num(r, "batch"), report_str(r, "mode"));
    else if (!strcmp(bench, "moe") && !strcmp(report_str(r, "impl"), "torch"))
        snprintf(buf, n, "%s moe %s torch-%s b%.0f", report_str(r, "device"),
                 report_str(r, "model"), report_str(r, "torch_impl"), report_num(r, "batch"));
    else if (!strcmp(bench, "moe"))
        snprintf(buf, n, "%s moe %s %s b%.0f", report_str(r, "device"), report_str(r, "model"),
                 report_str(r, "impl"), report_num(r, "batch"));
    else if (!strcmp(bench, "tokenize"))
        snprintf(buf, n, "tokenize %s", report_str(r, "case"));
    else if (!strcmp(bench, "prefill"))
        snprintf(buf, n, "%s prefill %s", report_str(r, "device"), report_str(r, "model"));
    else
        snprintf(buf, n, "%s %s %s %s", report_str(r, "device"), bench, report_str(r, "shape"),
                 report_str(r, "dtype"));
}

static double row_fraction(json_t *r) {
    double f = report_num(r, "fraction_of_limit");
    return f > 0 ? f : report_num(r, "fraction_of_bound");
}

static double row_speedup(json_t *r) {
    double s = report_num(r, "speedup_vs_peer");
    if (s > 0) return s;
    s = report_num(r, "speedup"); /* the tokenizer's rows: against the tokenizers library */
    if (s > 0) return s;
    double p = report_num(r, "peer_ms"), ms = report_num(r, "ms");
    return p > 0 && ms > 0 ? p / ms : -1;
}

static bool add(report_plot *out, int *n, int max, const char *file, const char *title, char *svg) {
    if (!svg) return false;
    if (*n == max) {
        free(svg);
        return true;
    }
    report_plot *p = &out[(*n)++];
    snprintf(p->file, sizeof p->file, "%s", file);
    snprintf(p->title, sizeof p->title, "%s", title);
    p->svg = svg;
    return true;
}

static bool roofline(json_t *results, const char *device, report_plot *out, int *n, int max) {
    char title[160], file[96];
    snprintf(title, sizeof title, "Roofline: %s", device);
    snprintf(file, sizeof file, "roofline-%s.svg", device);
    for (char *c = file; *c; c++)
        if (*c == ':') *c = '-';
    svg_plot *p =
        svg_plot_new(title, "arithmetic intensity (flop/byte)", "GFLOP/s achieved", true, true);
    if (!p) return false;
    size_t i;
    json_t *r;
    double xlo = INFINITY, xhi = -INFINITY;
    json_array_foreach(json_object_get(results, "rows"), i, r) {
        double f = report_num(r, "flops"), b = report_num(r, "bytes"), ms = report_num(r, "ms");
        if (strcmp(report_str(r, "device"), device) || f <= 0 || b <= 0 || ms <= 0) continue;
        char name[64];
        const char *bench = report_str(r, "bench");
        if (!strcmp(bench, "moe"))
            snprintf(name, sizeof name, "moe %s", report_str(r, "impl"));
        else if (!strcmp(bench, "decode"))
            snprintf(name, sizeof name, "decode step");
        else
            snprintf(name, sizeof name, "%s %s", bench, report_str(r, "dtype"));
        svg_point(p, svg_series(p, name, false, false), f / b, f / (ms * 1e6));
        xlo = fmin(xlo, f / b);
        xhi = fmax(xhi, f / b);
    }
    /* the ceilings: the device's measured limits, or the host's for a device without them */
    json_t *lim = json_object_get(json_object_get(results, "limits"), device);
    const char *whose = "";
    if (!lim) {
        lim = json_object_get(json_object_get(results, "limits"), "cpu");
        whose = " (host)";
    }
    if (lim && xlo <= xhi) {
        double bw = report_num(lim, "read_gbs");
        const char *peaks[2] = {"fp32_gflops", "bf16_gflops"};
        for (int k = 0; k < 2; k++) {
            double peak = report_num(lim, peaks[k]);
            if (bw <= 0 || peak <= 0) continue;
            char name[64];
            snprintf(name, sizeof name, "roof %s: %.0f GB/s, %.0f GF/s%s", k ? "bf16" : "fp32", bw,
                     peak, whose);
            int s = svg_series(p, name, true, true);
            double lo = fmin(xlo / 2, peak / bw / 4), hi = fmax(xhi * 2, peak / bw * 4);
            svg_point(p, s, lo, fmin(peak, bw * lo));
            svg_point(p, s, peak / bw, peak);
            svg_point(p, s, hi, peak);
        }
    }
    char *svg = svg_plot_render(p);
    svg_plot_free(p);
    return add(out, n, max, file, title, svg);
}

static bool tokens_vs_batch(json_t *results, report_plot *out, int *n, int max) {
    svg_plot *p = svg_plot_new("Tokens/s against batch size", "batch", "tokens/s", true, true);
    if (!p) return false;
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(results, "rows"), i, r) {
        const char *bench = report_str(r, "bench");
        double b = report_num(r, "batch"), ms = report_num(r, "ms");
        if (b <= 0 || ms <= 0) continue;
        char name[96];
        bool torch = !strcmp(report_str(r, "impl"), "torch");
        /* the torch peer runs on the host CPU whatever device the row is for: once, as cpu */
        if (!strcmp(bench, "moe") && torch && strcmp(report_str(r, "device"), "cpu")) continue;
        if (!strcmp(bench, "moe") && torch)
            snprintf(name, sizeof name, "cpu moe layer torch-%s", report_str(r, "torch_impl"));
        else if (!strcmp(bench, "moe"))
            snprintf(name, sizeof name, "%s moe layer %s", report_str(r, "device"),
                     report_str(r, "impl"));
        else if (!strcmp(bench, "decode"))
            snprintf(name, sizeof name, "%s %s %s", report_str(r, "device"), report_str(r, "model"),
                     report_str(r, "mode"));
        else
            continue;
        svg_point(p, svg_series(p, name, true, false), b, b * 1e3 / ms);
    }
    char *svg = svg_plot_render(p);
    svg_plot_free(p);
    return add(out, n, max, "tokens-vs-batch.svg", "Tokens/s against batch size", svg);
}

/* Bars of one per-row measure over every row that has it. */
static bool bars(json_t *results, double (*measure)(json_t *), const char *file, const char *title,
                 const char *xlabel, double ref, report_plot *out, int *n, int max) {
    json_t *rows = json_object_get(results, "rows");
    size_t cap = json_array_size(rows) + 1;
    char **labels = calloc(cap, sizeof *labels);
    double *vals = calloc(cap, sizeof *vals);
    int k = 0;
    bool ok = labels && vals;
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        if (!ok) break;
        double v = measure(r);
        if (!(v > 0)) continue;
        /* the torch MoE peer runs on the host whatever the device: plotted once, under cpu */
        if (!strcmp(report_str(r, "impl"), "torch") && strcmp(report_str(r, "device"), "cpu"))
            continue;
        labels[k] = malloc(128);
        if (!labels[k]) {
            ok = false;
            break;
        }
        report_row_label(r, labels[k], 128);
        vals[k++] = v;
    }
    char *svg = ok ? svg_bars(title, xlabel, k, (const char *const *)labels, vals, ref) : NULL;
    for (int j = 0; labels && j < k; j++) free(labels[j]);
    free(labels);
    free(vals);
    return add(out, n, max, file, title, svg);
}

int report_plots(json_t *results, report_plot *out, int max) {
    int n = 0;
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(results, "devices"), i,
                       d) if (json_is_string(d) &&
                              !roofline(results, json_string_value(d), out, &n, max)) goto oom;
    if (!tokens_vs_batch(results, out, &n, max)) goto oom;
    if (!bars(results, row_fraction, "fraction-of-bound.svg",
              "Fraction of the machine's bound per benchmark",
              "fraction of the bound (1 = at the limit)", 1.0, out, &n, max))
        goto oom;
    if (!bars(results, row_speedup, "ember-vs-peers.svg", "Ember against its peers",
              "speedup over the peer (peer time / Ember time)", 1.0, out, &n, max))
        goto oom;
    return n;
oom:
    for (int k = 0; k < n; k++) free(out[k].svg);
    return -1;
}

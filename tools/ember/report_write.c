/* report.md and report.html from one pass over results.json: every heading, paragraph and
 * table is emitted to both documents, so they cannot drift apart. The HTML inlines the SVG
 * plots (one self-contained file); the Markdown links the .svg files next to it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "report.h"

typedef struct doc {
    sbuf md, html;
    int cols;
} doc;

static void h2(doc *d, const char *t) {
    sbuf_printf(&d->md, "\n## %s\n\n", t);
    sbuf_printf(&d->html, "<h2>");
    sbuf_xml(&d->html, t);
    sbuf_printf(&d->html, "</h2>\n");
}

static void para(doc *d, const char *t) {
    sbuf_printf(&d->md, "%s\n\n", t);
    sbuf_printf(&d->html, "<p>");
    sbuf_xml(&d->html, t);
    sbuf_printf(&d->html, "</p>\n");
}

static void thead(doc *d, int n, const char *const *cols) {
    d->cols = n;
    sbuf_printf(&d->html, "<table>\n<tr>");
    for (int i = 0; i < n; i++) {
        sbuf_printf(&d->md, "| %s ", cols[i]);
        sbuf_printf(&d->html, "<th>");
        sbuf_xml(&d->html, cols[i]);
        sbuf_printf(&d->html, "</th>");
    }
    sbuf_printf(&d->md, "|\n");
    for (int i = 0; i < n; i++) sbuf_printf(&d->md, "|%s", i ? "---:" : "---");
    sbuf_printf(&d->md, "|\n");
    sbuf_printf(&d->html, "</tr>\n");
}

/* One row; `strong` highlights it (the cheapest device). */
static void trow(doc *d, const char *const *cells, bool strong) {
    sbuf_printf(&d->html, "<tr%s>", strong ? " class=\"best\"" : "");
    for (int i = 0; i < d->cols; i++) {
        const char *c = cells[i] && cells[i][0] ? cells[i] : "-";
        sbuf_printf(&d->md, strong ? "| **%s** " : "| %s ", c);
        sbuf_printf(&d->html, "<td>");
        sbuf_xml(&d->html, c);
        sbuf_printf(&d->html, "</td>");
    }
    sbuf_printf(&d->md, "|\n");
    sbuf_printf(&d->html, "</tr>\n");
}

static void tend(doc *d) {
    sbuf_printf(&d->md, "\n");
    sbuf_printf(&d->html, "</table>\n");
}

static const char *fmt(char *buf, size_t n, const char *f, double v) {
    if (v < 0 || !isfinite(v))
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, f, v);
    return buf;
}

static void header(doc *d, json_t *res) {
    json_t *m = json_object_get(res, "machine");
    char line[1024];
    sbuf_printf(&d->md, "# Ember report\n\n");
    sbuf_printf(&d->html, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Ember "
                          "report</title>\n<style>body{font-family:sans-serif;max-width:1000px;"
                          "margin:2em auto}table{border-collapse:collapse;margin:1em 0}td,th{"
                          "border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child,"
                          "th:first-child{text-align:left}tr.best{font-weight:bold;background:"
                          "#e8f5e9}figure{margin:1.5em 0}</style></head><body>\n"
                          "<h1>Ember report</h1>\n");
    snprintf(line, sizeof line, "Ember %s (commit %s), %s. Command: `%s`.",
             report_str(res, "ember_version"), report_str(res, "commit"), report_str(res, "date"),
             report_str(res, "command"));
    para(d, line);
    snprintf(line, sizeof line, "Machine: %s (%s), CPU kernels %s, %.0f threads.%s",
             report_str(m, "cpu"), report_str(m, "features"), report_str(m, "kernels"),
             report_num(m, "threads"),
             json_is_true(json_object_get(res, "quick"))
                 ? " Quick mode: short runs, fewer batches and layers; figures are indicative."
                 : "");
    para(d, line);
}

static void limits(doc *d, json_t *res) {
    json_t *lim = json_object_get(res, "limits");
    if (!json_object_size(lim)) return;
    h2(d, "Limits measured in the same run");
    static const char *const cols[] = {"device",       "read GB/s",    "triad GB/s",
                                       "fp32 GFLOP/s", "bf16 GFLOP/s", "threads"};
    thead(d, 6, cols);
    const char *dev;
    json_t *l;
    json_object_foreach(lim, dev, l) {
        char a[32], b[32], c[32], e[32], f[32];
        const char *cells[] = {dev,
                               fmt(a, 32, "%.2f", report_num(l, "read_gbs")),
                               fmt(b, 32, "%.2f", report_num(l, "triad_gbs")),
                               fmt(c, 32, "%.1f", report_num(l, "fp32_gflops")),
                               fmt(e, 32, "%.1f", report_num(l, "bf16_gflops")),
                               fmt(f, 32, "%.0f", report_num(l, "threads"))};
        trow(d, cells, false);
    }
    tend(d);
}

static void plots(doc *d, const report_plot *p, int n) {
    h2(d, "Plots");
    for (int i = 0; i < n; i++) {
        sbuf_printf(&d->md, "![%s](%s)\n\n", p[i].title, p[i].file);
        sbuf_printf(&d->html, "<figure>\n%s</figure>\n", p[i].svg);
    }
}

/* The rows of one benchmark kind as a table. */
static void rows_table(doc *d, json_t *res, const char *bench, const char *title) {
    json_t *rows = json_object_get(res, "rows");
    size_t i;
    json_t *r;
    bool any = false;
    json_array_foreach(rows, i, r) any |=
        !strcmp(report_str(r, "bench"), bench) ||
        (!strcmp(bench, "ops") && !strcmp(report_str(r, "suite"), "ops"));
    if (!any) return;
    h2(d, title);
    static const char *const cols[] = {"benchmark", "ms",   "tokens/s", "of the bound",
                                       "bound",     "peer", "peer ms",  "speedup"};
    thead(d, 8, cols);
    json_array_foreach(rows, i, r) {
        bool mine = !strcmp(bench, "ops") ? !strcmp(report_str(r, "suite"), "ops")
                                          : !strcmp(report_str(r, "bench"), bench);
        if (!mine) continue;
        char label[256], ms[32], tps[32], fr[32], pms[32], sp[32];
        report_row_label(r, label, sizeof label);
        double frac = report_num(r, "fraction_of_limit");
        if (frac < 0) frac = report_num(r, "fraction_of_bound");
        double p = report_num(r, "peer_ms"), m = report_num(r, "ms");
        if (m < 0) m = report_num(r, "whole_ms");
        if (m < 0 && frac < 0 && p < 0) continue; /* a row of other figures (results.json) */
        const char *cells[] = {label,
                               fmt(ms, 32, "%.4g", m),
                               fmt(tps, 32, "%.1f", report_num(r, "tokens_per_s")),
                               fmt(fr, 32, "%.0f%%", frac >= 0 ? 100 * frac : -1),
                               report_str(r, "limit"),
                               report_str(r, "peer"),
                               fmt(pms, 32, "%.4g", p),
                               fmt(sp, 32, "%.2fx", p > 0 && m > 0 ? p / m : -1)};
        trow(d, cells, false);
    }
    tend(d);
}

/* The tokenizer rows: load time in ms, encode throughput in MB/s, against `tokenizers`. */
static void tokenizer_table(doc *d, json_t *res) {
    json_t *rows = json_object_get(res, "rows");
    size_t i;
    json_t *r;
    bool any = false;
    json_array_foreach(rows, i, r) any |= !strcmp(report_str(r, "bench"), "tokenize");
    if (!any) return;
    h2(d, "Tokenizer");
    static const char *const cols[] = {"case", "Ember", "tokenizers", "speedup", "ids match"};
    thead(d, 5, cols);
    json_array_foreach(rows, i, r) {
        if (strcmp(report_str(r, "bench"), "tokenize")) continue;
        char ours[48], peer[48], sp[32];
        bool load = report_num(r, "ember_ms") >= 0;
        const char *unit = load ? "%.1f ms" : "%.2f MB/s";
        fmt(ours, sizeof ours, unit, report_num(r, load ? "ember_ms" : "ember_mb_s"));
        fmt(peer, sizeof peer, unit, report_num(r, load ? "tokenizers_ms" : "tokenizers_mb_s"));
        json_t *match = json_object_get(r, "ids_match");
        const char *cells[] = {report_str(r, "case"), ours, peer,
                               fmt(sp, sizeof sp, "%.2fx", report_num(r, "speedup")),
                               json_is_boolean(match) ? (json_is_true(match) ? "yes" : "NO") : "-"};
        trow(d, cells, false);
    }
    tend(d);
}

static void costs(doc *d, json_t *res) {
    h2(d, "Cost per million tokens");
    json_t *c = json_object_get(res, "costs");
    if (!json_array_size(c)) {
        para(d, "No prices were given (--prices FILE: {\"cpu\": {\"price_per_hour\": 0.10, "
                "\"watts\": 60}, ...}); Ember ships none, they would go stale.");
        return;
    }
    para(d, "From the price file given; the cheapest device per model, workload and batch is in "
            "bold. Projected rows come from datasheet limits, not measurements.");
    static const char *const cols[] = {
        "device",           "model",    "tokens", "batch", "tokens/s", "price per 1M tokens",
        "tokens per joule", "projected"};
    thead(d, 8, cols);
    size_t i;
    json_t *r;
    json_array_foreach(c, i, r) {
        char b[32], t[32], p[32], j[32];
        const char *cells[] = {report_str(r, "device"),
                               report_str(r, "model"),
                               report_str(r, "workload"),
                               fmt(b, 32, "%.0f", report_num(r, "batch")),
                               fmt(t, 32, "%.1f", report_num(r, "tokens_per_s")),
                               fmt(p, 32, "%.4g", report_num(r, "price_per_1m_tokens")),
                               fmt(j, 32, "%.3g", report_num(r, "tokens_per_joule")),
                               json_is_true(json_object_get(r, "projected")) ? "projected"
                                                                             : "measured"};
        trow(d, cells, json_is_true(json_object_get(r, "cheapest")));
    }
    tend(d);
}

static void projections(doc *d, json_t *res) {
    json_t *p = json_object_get(res, "projections");
    if (!json_array_size(p)) return;
    h2(d, "Projections onto devices not present (datasheet limits, not measured)");
    para(d, "Each decode step measured here (its bytes read and its flops at that batch) at the "
            "memory bandwidth and dense bf16 peak of each device: an upper bound that ignores "
            "launch overheads, collectives and kernel efficiency.");
    static const char *const cols[] = {"device",           "model",    "batch",
                                       "tokens/s (bound)", "bound by", "weights fit"};
    thead(d, 6, cols);
    size_t i;
    json_t *r;
    json_array_foreach(p, i, r) {
        char b[32], t[32];
        const char *cells[] = {report_str(r, "device"),
                               report_str(r, "model"),
                               fmt(b, 32, "%.0f", report_num(r, "batch")),
                               fmt(t, 32, "%.0f", report_num(r, "tokens_per_s")),
                               report_str(r, "bound"),
                               json_is_true(json_object_get(r, "fits")) ? "yes" : "no"};
        trow(d, cells, false);
    }
    tend(d);
    sbuf_printf(&d->md, "Sources:\n\n");
    sbuf_printf(&d->html, "<p>Sources:</p><ul>\n");
    for (int s = 0; s < report_n_specs; s++) {
        sbuf_printf(&d->md, "- %s: %s\n", report_specs[s].name, report_specs[s].source);
        sbuf_printf(&d->html, "<li>");
        sbuf_xml(&d->html, report_specs[s].name);
        sbuf_printf(&d->html, ": ");
        sbuf_xml(&d->html, report_specs[s].source);
        sbuf_printf(&d->html, "</li>\n");
    }
    sbuf_printf(&d->md, "\n");
    sbuf_printf(&d->html, "</ul>\n");
}

/* The TPU headline (ember report --headline): projected by XLA's cost model, never measured. */
static void headline(doc *d, json_t *res) {
    json_t *h = json_object_get(res, "headline");
    if (!json_array_size(h)) return;
    h2(d, "The headline on a TPU v6e-8, projected (XLA's cost model, not measured)");
    json_t *r0 = json_array_get(h, 0);
    char intro[700];
    snprintf(intro, sizeof intro,
             "Decode of the whole model over the %.0f chips of a TPU %s slice, per chip, from "
             "libtpu's compile of Ember's programs (scripts/project_tpu_headline.py): ragged "
             "(the compiled step) against the per-expert loop as transformers runs it eagerly, "
             "at %g us per program launched and %g us per routing sync (assumptions, as the "
             "collectives' %g us per call). The announcement's ratios: 21.5x (Qwen3-30B-A3B, "
             "batch 64) and 12.8x (Gemma 4 26B-A4B).",
             report_num(r0, "degree"), report_str(r0, "topology"), report_num(r0, "launch_us"),
             report_num(r0, "sync_us"), report_num(r0, "latency_us"));
    para(d, intro);
    static const char *const cols[] = {"model",         "batch",     "ragged ms",
                                       "loop ms",       "loop / ragged", "announced",
                                       "ragged tokens/s", "loop tokens/s"};
    thead(d, 8, cols);
    size_t i;
    json_t *r;
    json_array_foreach(h, i, r) {
        char b[32], rm[32], lm[32], ra[32], an[32] = "", rt[32], lt[32];
        if (json_is_number(json_object_get(r, "announced")))
            fmt(an, 32, "%.1fx", report_num(r, "announced"));
        const char *cells[] = {report_str(r, "model"),
                               fmt(b, 32, "%.0f", report_num(r, "batch")),
                               fmt(rm, 32, "%.2f", report_num(r, "ragged_ms")),
                               fmt(lm, 32, "%.1f", report_num(r, "loop_ms")),
                               fmt(ra, 32, "%.1fx", report_num(r, "ratio")),
                               an,
                               fmt(rt, 32, "%.0f", report_num(r, "ragged_tps")),
                               fmt(lt, 32, "%.0f", report_num(r, "loop_tps"))};
        trow(d, cells, false);
    }
    tend(d);
}

static void runs(doc *d, json_t *res) {
    h2(d, "Benchmarks run");
    static const char *const cols[] = {"command", "device", "seconds", "result"};
    thead(d, 4, cols);
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(res, "runs"), i, r) {
        char s[32], why[1100];
        if (report_num(r, "exit") == 0)
            snprintf(why, sizeof why, "ok");
        else
            snprintf(why, sizeof why, "failed (exit %.0f): %s", report_num(r, "exit"),
                     report_str(r, "why"));
        const char *cells[] = {report_str(r, "command"), report_str(r, "device"),
                               fmt(s, 32, "%.1f", report_num(r, "seconds")), why};
        trow(d, cells, false);
    }
    tend(d);
}

static bool write_file(const char *dir, const char *name, const char *text) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    bool ok = f && fputs(text, f) >= 0;
    if (f && fclose(f)) ok = false;
    if (!ok) fprintf(stderr, "ember report: cannot write %s\n", path);
    return ok;
}

bool report_write(const char *dir, json_t *res, const report_plot *p, int n) {
    doc d = {0};
    header(&d, res);
    limits(&d, res);
    plots(&d, p, n);
    rows_table(&d, res, "decode", "Decode");
    rows_table(&d, res, "prefill", "Prefill");
    rows_table(&d, res, "moe", "MoE layer");
    rows_table(&d, res, "ops", "Op kernels");
    tokenizer_table(&d, res);
    costs(&d, res);
    projections(&d, res);
    headline(&d, res);
    runs(&d, res);
    sbuf_printf(&d.html, "</body></html>\n");
    bool ok = !d.md.oom && !d.html.oom;
    if (!ok) fprintf(stderr, "ember report: out of memory\n");
    ok = ok && write_file(dir, "report.md", d.md.s) && write_file(dir, "report.html", d.html.s);
    for (int i = 0; ok && i < n; i++) ok = write_file(dir, p[i].file, p[i].svg);
    sbuf_free(&d.md);
    sbuf_free(&d.html);
    return ok;
}

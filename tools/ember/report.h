/* `ember report`: runs the benchmarks on each device, keeps every row in one JSON document
 * (results.json) and renders it as Markdown, one self-contained HTML file and SVG plots.
 *   cmd_report.c      options, the benchmark children, results.json
 *   report_cost.c     the price file, $ per 1M tokens, projections from the device spec table
 *   report_specs.c    datasheet figures of devices that may not be present (sourced)
 *   report_plots.c    the four plots, from the rows
 *   report_svg.c      a small SVG plotter (axes, log scales, points, lines, bars)
 *   report_write.c    report.md and report.html */
#ifndef EMBER_REPORT_H
#define EMBER_REPORT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* A growing string; every append keeps it NUL-terminated. On allocation failure `oom` is set
 * and later appends do nothing (the caller checks once at the end). */
typedef struct sbuf {
    char *s;
    size_t len, cap;
    bool oom;
} sbuf;
void sbuf_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends text with &, <, >, " escaped for XML/HTML. */
void sbuf_xml(sbuf *b, const char *text);
void sbuf_free(sbuf *b);

/* A number field of a row (-1 when absent or not a number), a string field ("" when absent). */
static inline double report_num(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : -1;
}
static inline const char *report_str(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* ---- SVG plots (report_svg.c) ---- */
typedef struct svg_plot svg_plot;
/* A scatter/line plot; log axes take only positive values (others are left out). */
svg_plot *svg_plot_new(const char *title, const char *xlabel, const char *ylabel, bool logx,
                       bool logy);
/* A named series (legend entry); `lines` joins its points in x order; `dashed` for ceilings. */
int svg_series(svg_plot *p, const char *name, bool lines, bool dashed);
void svg_point(svg_plot *p, int series, double x, double y);
/* The SVG document (malloc'd), or NULL when out of memory. Frees nothing. */
char *svg_plot_render(const svg_plot *p);
void svg_plot_free(svg_plot *p);
/* Horizontal bars, one per label, with a reference line at `ref` (<= 0: none). */
char *svg_bars(const char *title, const char *xlabel, int n, const char *const *labels,
               const double *values, double ref);

/* ---- plots of a results document (report_plots.c) ---- */
typedef struct report_plot {
    char file[96]; /* e.g. "roofline-cpu.svg" */
    char title[160];
    char *svg; /* malloc'd */
} report_plot;
/* A row's name in tables and bars: "cpu decode qwen3 b16 eager", "cpu add [..] f32". */
void report_row_label(json_t *r, char *buf, size_t n);
/* Every plot of the report; returns the count (<= max), -1 when out of memory. */
int report_plots(json_t *results, report_plot *out, int max);

/* ---- cost and projections (report_cost.c, report_specs.c) ---- */
/* Reads a price file: {"KIND": {"price_per_hour": X, "watts": W}, ...}. On error returns NULL
 * and writes what and where into err. */
json_t *report_prices_load(const char *path, char *err, size_t n);
/* Adds "costs" (from the decode/prefill rows and the prices, may be NULL) and "projections"
 * (the measured decode shapes at the datasheet limits of every device in the spec table). */
void report_costs_add(json_t *results, json_t *prices);

typedef struct report_spec {
    const char *id;     /* "tpu-v6e": a price-file key */
    const char *name;   /* "TPU v6e Trillium (1 chip)" */
    const char *kind;   /* price-file kind: "tpu", "cuda" */
    double hbm_gbs;     /* memory bandwidth, GB/s */
    double bf16_tflops; /* dense bf16 peak */
    double memory_gib;
    const char *source; /* where the figures come from */
    double link_gbs;    /* interconnect to the other chips of a node/slice, GB/s per direction */
    double latency_us;  /* per collective call beyond its transfer: an assumption (no datasheet
                           gives it), `ember project tp --latency-us` replaces it */
    const char *link_source;
} report_spec;
extern const report_spec report_specs[];
extern const int report_n_specs;

/* ---- rendering (report_write.c) ---- */
/* Writes DIR/report.md and DIR/report.html (and each plot as an .svg file in DIR); false on error
 * (printed on stderr). */
bool report_write(const char *dir, json_t *results, const report_plot *plots, int n_plots);

#endif

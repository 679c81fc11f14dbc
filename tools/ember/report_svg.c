/* A small SVG plotter for the report: no fonts or scripts fetched, sans-serif text, fixed size,
 * so the HTML report is one self-contained file. Written here rather than through gnuplot: the
 * plots are four simple kinds, and a Debian plotting tool would be a run-time dependency of a
 * command that must work on any machine Ember builds on. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

void sbuf_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    va_list ap;
    for (;;) {
        size_t room = b->cap - b->len;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? room : 0, fmt, ap);
        va_end(ap);
        if (k < 0) return;
        if (b->s && (size_t)k < room) {
            b->len += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap : 1024;
        while (cap - b->len <= (size_t)k) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

void sbuf_xml(sbuf *b, const char *t) {
    for (; t && *t; t++) {
        switch (*t) {
        case '&':
            sbuf_printf(b, "&amp;");
            break;
        case '<':
            sbuf_printf(b, "&lt;");
            break;
        case '>':
            sbuf_printf(b, "&gt;");
            break;
        case '"':
            sbuf_printf(b, "&quot;");
            break;
        default:
            sbuf_printf(b, "%c", *t);
        }
    }
}

void sbuf_free(sbuf *b) {
    free(b->s);
    *b = (sbuf){0};
}

enum { W = 800, H = 440, ML = 78, MR = 250, MT = 40, MB = 56, MAX_SERIES = 16 };

static const char *const colors[MAX_SERIES] = {
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"};

typedef struct series {
    char name[64];
    bool lines, dashed;
    int n, cap;
    double *x, *y;
} series;

struct svg_plot {
    char title[160], xlabel[96], ylabel[96];
    bool logx, logy;
    int n;
    series s[MAX_SERIES];
};

svg_plot *svg_plot_new(const char *title, const char *xlabel, const char *ylabel, bool logx,
                       bool logy) {
    svg_plot *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    snprintf(p->title, sizeof p->title, "%s", title);
    snprintf(p->xlabel, sizeof p->xlabel, "%s", xlabel);
    snprintf(p->ylabel, sizeof p->ylabel, "%s", ylabel);
    p->logx = logx;
    p->logy = logy;
    return p;
}

int svg_series(svg_plot *p, const char *name, bool lines, bool dashed) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->s[i].name, name)) return i;
    if (p->n == MAX_SERIES) return MAX_SERIES - 1; /* more go into the last one */
    series *s = &p->s[p->n];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->lines = lines;
    s->dashed = dashed;
    return p->n++;
}

void svg_point(svg_plot *p, int i, double x, double y) {
    if (i < 0 || i >= p->n || !isfinite(x) || !isfinite(y)) return;
    if ((p->logx && x <= 0) || (p->logy && y <= 0)) return;
    series *s = &p->s[i];
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        double *x2 = realloc(s->x, (size_t)cap * sizeof *x2);
        if (!x2) return;
        s->x = x2;
        double *y2 = realloc(s->y, (size_t)cap * sizeof *y2);
        if (!y2) return;
        s->y = y2;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
}

void svg_plot_free(svg_plot *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) {
        free(p->s[i].x);
        free(p->s[i].y);
    }
    free(p);
}

typedef struct axis {
    bool log;
    double lo, hi; /* in data units (log axes: powers of ten around the data) */
} axis;

static void axis_fit(axis *a, double lo, double hi) {
    if (!(lo <= hi)) lo = hi = a->log ? 1 : 0;
    if (a->log) {
        a->lo = pow(10, floor(log10(lo)));
        a->hi = pow(10, ceil(log10(hi)));
        if (a->hi <= a->lo) a->hi = a->lo * 10;
    } else {
        if (lo > 0) lo = 0;
        double span = hi - lo > 0 ? hi - lo : fabs(hi) > 0 ? fabs(hi) : 1;
        double step = pow(10, floor(log10(span)));
        a->lo = floor(lo / step) * step;
        a->hi = ceil(hi / step) * step;
        if (a->hi <= a->lo) a->hi = a->lo + step;
    }
}

static double axis_frac(const axis *a, double v) {
    if (a->log) return (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo));
    return (v - a->lo) / (a->hi - a->lo);
}

/* 0.01, 1, 100, 10k, 1M, 1G: SI suffixes from a thousand up */
static void tick_label(char *buf, size_t n, double v) {
    static const char *const si[] = {"k", "M", "G", "T", "P"};
    double a = fabs(v);
    if (a >= 1e3 && a < 1e18) {
        int k = 0;
        while (a >= 1e3 * 1000 && k < 4) {
            a /= 1000;
            v /= 1000;
            k++;
        }
        snprintf(buf, n, "%g%s", v / 1000, si[k]);
    } else if (v != 0 && a < 1e-3)
        snprintf(buf, n, "%.0e", v);
    else
        snprintf(buf, n, "%g", v);
}

static void header(sbuf *b, int w, int h, const char *title) {
    sbuf_printf(b,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
                "<title>",
                w, h, w, h);
    sbuf_xml(b, title);
    sbuf_printf(b,
                "</title>\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n"
                "<text x=\"%d\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">",
                w, h, w / 2);
    sbuf_xml(b, title);
    sbuf_printf(b, "</text>\n");
}

static void ticks(sbuf *b, const axis *a, bool x, int x0, int y0, int pw, int ph) {
    double vals[64];
    int n = 0;
    if (a->log) {
        for (double v = a->lo; v <= a->hi * 1.0001 && n < 64; v *= 10) vals[n++] = v;
    } else {
        double step = (a->hi - a->lo) / 5;
        for (int i = 0; i <= 5; i++) vals[n++] = a->lo + step * i;
    }
    for (int i = 0; i < n; i++) {
        double f = axis_frac(a, vals[i]);
        char t[32];
        tick_label(t, sizeof t, vals[i]);
        if (x) {
            double px = x0 + f * pw;
            sbuf_printf(b,
                        "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>\n"
                        "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                        px, y0, px, y0 + ph, px, y0 + ph + 16, t);
        } else {
            double py = y0 + ph - f * ph;
            sbuf_printf(b,
                        "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
                        "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                        x0, py, x0 + pw, py, x0 - 6, py + 4, t);
        }
    }
}

static int cmp_by_x(const void *a, const void *b) {
    const double *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

char *svg_plot_render(const svg_plot *p) {
    axis ax = {p->logx, 0, 0}, ay = {p->logy, 0, 0};
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    int total = 0;
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->s[i].n; k++, total++) {
            xlo = fmin(xlo, p->s[i].x[k]);
            xhi = fmax(xhi, p->s[i].x[k]);
            ylo = fmin(ylo, p->s[i].y[k]);
            yhi = fmax(yhi, p->s[i].y[k]);
        }
    axis_fit(&ax, xlo, xhi);
    axis_fit(&ay, ylo, yhi);
    int x0 = ML, y0 = MT, pw = W - ML - MR, ph = H - MT - MB;
    sbuf b = {0};
    header(&b, W, H, p->title);
    sbuf_printf(&b,
                "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
                "stroke=\"#888\"/>\n",
                x0, y0, pw, ph);
    if (!total) {
        sbuf_printf(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">no rows to plot</text>\n",
                    x0 + pw / 2, y0 + ph / 2);
    } else {
        ticks(&b, &ax, true, x0, y0, pw, ph);
        ticks(&b, &ay, false, x0, y0, pw, ph);
    }
    sbuf_printf(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", x0 + pw / 2, H - 14);
    sbuf_xml(&b, p->xlabel);
    sbuf_printf(&b,
                "</text>\n<text transform=\"translate(18,%d) rotate(-90)\" "
                "text-anchor=\"middle\">",
                y0 + ph / 2);
    sbuf_xml(&b, p->ylabel);
    sbuf_printf(&b, "</text>\n");
    for (int i = 0; i < p->n; i++) {
        const series *s = &p->s[i];
        const char *col = colors[i % MAX_SERIES];
        double *xy = malloc((size_t)(s->n ? s->n : 1) * 2 * sizeof *xy);
        if (!xy) {
            b.oom = true;
            break;
        }
        for (int k = 0; k < s->n; k++) {
            xy[2 * k] = s->x[k];
            xy[2 * k + 1] = s->y[k];
        }
        if (s->lines) qsort(xy, (size_t)s->n, 2 * sizeof *xy, cmp_by_x);
        if (s->lines && s->n > 1) {
            sbuf_printf(&b,
                        "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\"%s "
                        "points=\"",
                        col, s->dashed ? " stroke-dasharray=\"6,4\"" : "");
            for (int k = 0; k < s->n; k++)
                sbuf_printf(&b, "%.1f,%.1f ", x0 + axis_frac(&ax, xy[2 * k]) * pw,
                            y0 + ph - axis_frac(&ay, xy[2 * k + 1]) * ph);
            sbuf_printf(&b, "\"/>\n");
        }
        if (!s->dashed)
            for (int k = 0; k < s->n; k++)
                sbuf_printf(&b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n",
                            x0 + axis_frac(&ax, xy[2 * k]) * pw,
                            y0 + ph - axis_frac(&ay, xy[2 * k + 1]) * ph, col);
        free(xy);
        int ly = y0 + 10 + 18 * i;
        sbuf_printf(&b,
                    "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
                    "stroke-width=\"3\"%s/>\n<text x=\"%d\" y=\"%d\">",
                    W - MR + 12, ly, W - MR + 32, ly, col,
                    s->dashed ? " stroke-dasharray=\"4,3\"" : "", W - MR + 38, ly + 4);
        sbuf_xml(&b, s->name);
        sbuf_printf(&b, "</text>\n");
    }
    sbuf_printf(&b, "</svg>\n");
    if (b.oom) {
        sbuf_free(&b);
        return NULL;
    }
    return b.s;
}

char *svg_bars(const char *title, const char *xlabel, int n, const char *const *labels,
               const double *values, double ref) {
    int lw = 350, bh = 18, h = MT + MB + (n ? n : 1) * (bh + 4), pw = W - lw - 40;
    double hi = ref > 0 ? ref : 0, lo = ref > 0 ? ref : INFINITY;
    for (int i = 0; i < n; i++)
        if (isfinite(values[i]) && values[i] > 0) {
            if (values[i] > hi) hi = values[i];
            if (values[i] < lo) lo = values[i];
        }
    /* one outlier (a 400x speedup) would flatten every other bar: log scale past 50x spread */
    axis a = {isfinite(lo) && hi / lo > 50, 0, 0};
    axis_fit(&a, a.log ? lo : 0, hi > 0 ? hi : 1);
    sbuf b = {0};
    header(&b, W, h, title);
    int y0 = MT, ph = h - MT - MB;
    if (!n)
        sbuf_printf(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">no rows to plot</text>\n",
                    W / 2, y0 + ph / 2);
    else
        ticks(&b, &a, true, lw, y0, pw, ph);
    for (int i = 0; i < n; i++) {
        int y = y0 + i * (bh + 4) + 2;
        double v = isfinite(values[i]) && values[i] > 0 ? values[i] : 0;
        double f = v > 0 ? axis_frac(&a, v) : 0;
        if (f < 0) f = 0;
        sbuf_printf(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", lw - 6, y + 13);
        sbuf_xml(&b, labels[i]);
        sbuf_printf(&b,
                    "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" "
                    "fill=\"%s\"/>\n<text x=\"%.1f\" y=\"%d\">%.2f</text>\n",
                    lw, y, f * pw, bh, ref > 0 && v < ref ? "#d62728" : "#1f77b4",
                    lw + f * pw + 4, y + 13, v);
    }
    if (ref > 0 && n) {
        double x = lw + axis_frac(&a, ref) * pw;
        sbuf_printf(&b,
                    "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"black\" "
                    "stroke-dasharray=\"5,3\"/>\n",
                    x, y0, x, y0 + ph);
    }
    sbuf_printf(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", lw + pw / 2, h - 14);
    sbuf_xml(&b, xlabel);
    sbuf_printf(&b, "</text>\n</svg>\n");
    if (b.oom) {
        sbuf_free(&b);
        return NULL;
    }
    return b.s;
}

/* What a million tokens costs on each device (from the user's price file: no prices are built
 * in, they would go stale), tokens per joule where watts are given, and projections of the
 * measured decode shapes onto devices that are not present, from their datasheet limits. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "report.h"

static const char *const price_fields[] = {"price_per_hour", "watts", "note"};

json_t *report_prices_load(const char *path, char *err, size_t n) {
    json_error_t je;
    json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!doc) {
        snprintf(err, n, "%s:%d:%d: %s", path, je.line, je.column, je.text);
        return NULL;
    }
    if (!json_is_object(doc) || !json_object_size(doc)) {
        snprintf(err, n,
                 "%s: want an object of device kind -> {\"price_per_hour\": X, "
                 "\"watts\": W}, e.g. {\"cpu\": {\"price_per_hour\": 0.10}}",
                 path);
        json_decref(doc);
        return NULL;
    }
    const char *key;
    json_t *v;
    json_object_foreach(doc, key, v) {
        if (!json_is_object(v)) {
            snprintf(err, n, "%s: \"%s\" is not an object with price_per_hour", path, key);
            goto bad;
        }
        const char *f;
        json_t *fv;
        json_object_foreach(v, f, fv) {
            bool known = false;
            for (size_t i = 0; i < sizeof price_fields / sizeof *price_fields; i++)
                known |= !strcmp(f, price_fields[i]);
            if (!known) {
                snprintf(err, n,
                         "%s: \"%s\": unknown field \"%s\" (known: price_per_hour, "
                         "watts, note)",
                         path, key, f);
                goto bad;
            }
        }
        json_t *p = json_object_get(v, "price_per_hour"), *w = json_object_get(v, "watts");
        if (!json_is_number(p) || json_number_value(p) < 0 || !isfinite(json_number_value(p))) {
            snprintf(err, n, "%s: \"%s\": price_per_hour must be a number >= 0", path, key);
            goto bad;
        }
        if (w && (!json_is_number(w) || !(json_number_value(w) > 0))) {
            snprintf(err, n, "%s: \"%s\": watts must be a number > 0", path, key);
            goto bad;
        }
    }
    return doc;
bad:
    json_decref(doc);
    return NULL;
}

/* The price entry of a device: its full name ("xla:0"), else its kind ("xla"). */
static json_t *price_of(json_t *prices, const char *device) {
    if (!prices || !device) return NULL;
    json_t *p = json_object_get(prices, device);
    if (p) return p;
    char kind[64];
    snprintf(kind, sizeof kind, "%s", device);
    char *colon = strchr(kind, ':');
    if (colon) *colon = 0;
    return json_object_get(prices, kind);
}

/* One cost row from a device's price entry p (NULL: no price, nothing added). */
static void add_cost(json_t *costs, json_t *p, const char *device, const char *model,
                     const char *workload, long long batch, double tps, bool projected) {
    if (!p || !(tps > 0)) return;
    double per_hour = report_num(p, "price_per_hour"), watts = report_num(p, "watts");
    json_t *c =
        json_pack("{s:s, s:s, s:s, s:I, s:f, s:f, s:b}", "device", device, "model", model,
                  "workload", workload, "batch", (json_int_t)batch, "tokens_per_s", tps,
                  "price_per_1m_tokens", per_hour / 3600.0 / tps * 1e6, "projected", projected);
    if (watts > 0) json_object_set_new(c, "tokens_per_joule", json_real(tps / watts));
    json_array_append_new(costs, c);
}

/* Marks the cheapest device per (model, workload, batch). */
static void mark_cheapest(json_t *costs) {
    size_t i, k;
    json_t *c, *d;
    json_array_foreach(costs, i, c) {
        bool best = true;
        json_array_foreach(costs, k, d) {
            if (k == i || strcmp(report_str(c, "model"), report_str(d, "model")) ||
                strcmp(report_str(c, "workload"), report_str(d, "workload")) ||
                report_num(c, "batch") != report_num(d, "batch"))
                continue;
            double a = report_num(c, "price_per_1m_tokens"),
                   b = report_num(d, "price_per_1m_tokens");
            if (b < a || (b == a && k < i)) best = false;
        }
        json_object_set_new(c, "cheapest", json_boolean(best));
    }
}

void report_costs_add(json_t *results, json_t *prices) {
    json_t *rows = json_object_get(results, "rows");
    json_t *costs = json_array(), *proj = json_array();
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        const char *bench = report_str(r, "bench");
        /* a compile-only device's rows are XLA's cost model at the chip's figures */
        bool projected = json_object_get(r, "projected_ms") != NULL;
        if (!strcmp(bench, "decode") && report_num(r, "tokens_per_s") > 0)
            add_cost(costs, price_of(prices, report_str(r, "device")), report_str(r, "device"),
                     report_str(r, "model"), "generated", (long long)report_num(r, "batch"),
                     report_num(r, "tokens_per_s"), projected);
        if (!strcmp(bench, "prefill") && report_num(r, "tokens_per_s") > 0)
            add_cost(costs, price_of(prices, report_str(r, "device")), report_str(r, "device"),
                     report_str(r, "model"), "prompt", 1, report_num(r, "tokens_per_s"), false);
        /* projections: one per measured decode shape (eager rows of the first device that has
         * the step's bytes and flops) */
        if (strcmp(bench, "decode") || strcmp(report_str(r, "mode"), "eager") ||
            report_num(r, "bytes") <= 0 || report_num(r, "flops") <= 0)
            continue;
        bool seen = false;
        size_t k;
        json_t *q;
        json_array_foreach(proj, k, q) seen |=
            !strcmp(report_str(q, "model"), report_str(r, "model")) &&
            report_num(q, "batch") == report_num(r, "batch");
        if (seen) continue;
        double bytes = report_num(r, "bytes"), flops = report_num(r, "flops"),
               wb = report_num(r, "weight_bytes");
        double batch = report_num(r, "batch");
        for (int s = 0; s < report_n_specs; s++) {
            const report_spec *sp = &report_specs[s];
            double mem_s = bytes / (sp->hbm_gbs * 1e9), comp_s = flops / (sp->bf16_tflops * 1e12);
            double step = mem_s > comp_s ? mem_s : comp_s, tps = batch / step;
            json_t *o =
                json_pack("{s:s, s:s, s:s, s:I, s:f, s:f, s:f, s:s, s:b}", "spec", sp->id, "device",
                          sp->name, "model", report_str(r, "model"), "batch", (json_int_t)batch,
                          "step_bytes", bytes, "step_flops", flops, "tokens_per_s", tps, "bound",
                          mem_s >= comp_s ? "memory" : "compute", "fits",
                          wb <= 0 || wb <= sp->memory_gib * 1073741824.0);
            json_array_append_new(proj, o);
            json_t *p = json_object_get(prices, sp->id);
            if (!p) p = price_of(prices, sp->kind);
            add_cost(costs, p, sp->id, report_str(r, "model"), "generated", (long long)batch, tps,
                     true);
        }
    }
    mark_cheapest(costs);
    json_object_set_new(results, "costs", costs);
    json_object_set_new(results, "projections", proj);
}

/* Compile-only devices in `ember bench`: projections from XLA's cost analysis (bench_aot.h). */
#include "bench_aot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

void bench_aot_overhead_get(double launch_us, double sync_us, bench_aot_overhead *o) {
    memset(o, 0, sizeof *o);
    o->launch_us = launch_us;
    o->sync_us = sync_us;
    if (launch_us >= 0 && sync_us >= 0) {
        snprintf(o->source, sizeof o->source, "given (--launch-us, --sync-us)");
        return;
    }
    em_ctx *c = em_ctx_create();
    em_device *x = em_device_get(c, "xla:0");
    if (!x) {
        if (o->launch_us < 0) o->launch_us = 0;
        if (o->sync_us < 0) o->sync_us = 0;
        snprintf(o->source, sizeof o->source,
                 "none measured (no xla:0 here; pass --launch-us and --sync-us)");
        em_ctx_free(c);
        return;
    }
    em_ctx_set_device(c, x);
    em_ctx_set_eager_mode(c, EM_EAGER_ASYNC);
    float one = 1;
    em_scope_push(c);
    em_tensor *a = em_from_host(c, EM_F32, EM_SHAPE(1), &one);
    em_tensor *y = em_add(c, a, a); /* compiles the program */
    em_device_sync(c, x);
    /* launches: a chain of tiny programs, waited for once (min of 3 rounds) */
    double launch = 1e9, trip = 1e9;
    for (int round = 0; round < 3; round++) {
        em_scope_push(c);
        double t0 = bench_now();
        em_tensor *z = y;
        for (int i = 0; i < 400; i++) z = em_add(c, z, a);
        em_device_sync(c, x);
        double us = (bench_now() - t0) * 1e6 / 400;
        if (us < launch) launch = us;
        /* round trips: a launch whose result is read at once */
        float v;
        t0 = bench_now();
        for (int i = 0; i < 100; i++) em_to_host(c, em_add(c, a, a), &v, sizeof v);
        us = (bench_now() - t0) * 1e6 / 100;
        if (us < trip) trip = us;
        em_scope_pop(c);
    }
    em_scope_pop(c);
    if (o->launch_us < 0) o->launch_us = launch;
    if (o->sync_us < 0) o->sync_us = trip > launch ? trip - launch : 0;
    snprintf(o->source, sizeof o->source,
             "measured on xla:0 (XLA's CPU plugin) in this run: a chain of 400 tiny programs; "
             "a read after each of 100");
    if (em_ctx_status(c)) {
        o->launch_us = o->sync_us = 0;
        snprintf(o->source, sizeof o->source, "measurement failed: %.120s",
                 em_ctx_error(c)->message);
    }
    em_ctx_free(c);
}

void bench_aot_header(em_device *d, const bench_aot_overhead *o, bool json) {
    em_pjrt_topology t;
    em_pjrt_plugin_info pi;
    if (em_pjrt_topology_get(d, &t) != EM_OK || em_pjrt_plugin_info_get(d, &pi) != EM_OK) return;
    if (json) {
        printf("{\"device\": \"%s\", \"compile_only\": true, \"topology\": \"%s\", "
               "\"devices\": %d, \"kind\": \"%s\", \"generation\": \"%s\", \"hbm_bytes\": %.0f, "
               "\"hbm_gbs\": %.0f, \"bf16_tflops\": %.0f, \"compiler_memory_limit\": %lld, "
               "\"launch_us\": %.2f, \"sync_us\": %.2f}\n",
               em_device_name(d), t.name, t.n_devices, t.device_kind, t.generation, t.hbm_bytes,
               t.hbm_gbs, t.bf16_tflops, (long long)t.device_memory_limit, o->launch_us,
               o->sync_us);
        return;
    }
    printf("device %s: compile-only, topology %s (%d x %s), libtpu %s\n", em_device_name(d),
           t.name, t.n_devices, t.device_kind, pi.path);
    printf("  per chip: %.1f GB HBM at %.0f GB/s, %.0f TFLOP/s bf16 (%s); the compiler's limit "
           "%.2f GB\n",
           t.hbm_bytes / 1e9, t.hbm_gbs, t.bf16_tflops, t.source,
           (double)t.device_memory_limit / 1e9);
    printf("  nothing runs: times are rooflines of XLA's flops and bytes accessed at those "
           "figures, plus %.1f us per program launched and %.1f us per device-to-host sync (%s)\n",
           o->launch_us, o->sync_us, o->source);
}

void bench_aot_begin(em_device *d) { em_pjrt_projection_reset(d); }

void bench_aot_end(em_device *d, const bench_aot_overhead *o, int syncs, bench_aot_sample *s) {
    memset(s, 0, sizeof *s);
    em_pjrt_projection_get(d, &s->p);
    s->projected_s = s->p.roofline_seconds + (double)s->p.launches * o->launch_us * 1e-6 +
                     (double)syncs * o->sync_us * 1e-6;
}

/* The collectives of the step's program (the largest one launched), -1 when unknown. */
typedef struct step_coll {
    const char *what;
    int ar, ag, rs, a2a, cp;
} step_coll;

static int coll_cb(const em_pjrt_program_report *r, void *user) {
    step_coll *k = user;
    if (strcmp(r->what, k->what)) return 0;
    k->ar = r->all_reduces, k->ag = r->all_gathers, k->rs = r->reduce_scatters;
    k->a2a = r->all_to_alls, k->cp = r->collective_permutes;
    return 1;
}

int bench_aot_decode(em_ctx *c, em_model *m, em_device *d, const int64_t *batches, int n,
                     const bench_aot_overhead *o, bool json) {
    const em_model_config *cfg = em_model_config_get(m);
    em_pjrt_topology t;
    em_pjrt_topology_get(d, &t);
    if (!em_model_compile_supported(m)) {
        fprintf(stderr, "ember bench decode: %s is not one decoder on one device; it has no "
                        "compiled step, so there is nothing to project\n", cfg->model_type);
        return 1;
    }
    if (!json)
        printf("%-8s %9s %11s %11s %10s %10s %11s %11s %9s %s\n", "batch", "programs",
               "GFLOP", "GB accessed", "roofline", "projected", "tokens/s", "peak GB",
               "resident", "fits HBM");
    for (int i = 0; i < n; i++) {
        int64_t b = batches[i];
        em_scope_push(c);
        em_kv_cache *kv = em_kv_cache_create(c, m, b, 256);
        em_model_compiled *mc = kv ? em_model_compile(c, m, kv, 128) : NULL;
        int64_t *ids = calloc((size_t)b, sizeof *ids);
        for (int64_t k = 0; ids && k < b; k++) ids[k] = 10 + k;
        em_tensor *it = ids ? em_from_host_on(c, d, EM_I64, EM_SHAPE(b, 1), ids) : NULL;
        free(ids);
        em_model_forward_compiled(c, mc, it, NULL, true); /* compiles */
        bench_aot_begin(d);
        em_model_forward_compiled(c, mc, it, NULL, true); /* one step, projected */
        bench_aot_sample s;
        bench_aot_end(d, o, 0, &s);
        if (em_ctx_status(c)) {
            fprintf(stderr, "ember bench decode: batch %lld: %s\n", (long long)b,
                    em_ctx_error(c)->message);
            em_model_compiled_free(mc);
            em_kv_cache_free(kv);
            em_scope_pop(c);
            return 1;
        }
        /* the step's program holds the weights and the cache as arguments: its peak is what
         * the chip must hold */
        double peak = (double)s.p.max_peak_bytes;
        bool fits = t.hbm_bytes > 0 && peak <= t.hbm_bytes &&
                    (t.device_memory_limit <= 0 || peak <= (double)t.device_memory_limit);
        double tps = s.projected_s > 0 ? (double)b / s.projected_s : 0;
        step_coll k = {s.p.max_peak_what, -1, -1, -1, -1, -1};
        em_pjrt_reports(d, coll_cb, &k);
        if (json)
            printf("{\"bench\": \"decode\", \"device\": \"%s\", \"model\": \"%s\", \"layers\": "
                   "%lld, \"batch\": %lld, \"programs\": %lld, \"flops\": %.6g, "
                   "\"bytes_accessed\": %.6g, \"roofline_ms\": %.5f, \"xla_estimate_ms\": %.5f, "
                   "\"projected_ms\": %.5f, \"tokens_per_s\": %.2f, \"peak_bytes\": %.0f, "
                   "\"resident_bytes\": %lld, \"fits_hbm\": %s, \"all_reduces\": %d, "
                   "\"all_gathers\": %d, \"reduce_scatters\": %d, \"all_to_alls\": %d, "
                   "\"collective_permutes\": %d}\n",
                   em_device_name(d), cfg->model_type, (long long)cfg->num_hidden_layers,
                   (long long)b, (long long)s.p.launches, s.p.flops, s.p.bytes_accessed,
                   s.p.roofline_seconds * 1e3,
                   s.p.no_estimate ? -1.0 : s.p.optimal_seconds * 1e3, s.projected_s * 1e3, tps,
                   peak, (long long)s.p.resident_bytes, fits ? "true" : "false", k.ar, k.ag,
                   k.rs, k.a2a, k.cp);
        else
            printf("decode b%-3lld %6lld %11.3f %11.4f %8.4f ms %7.4f ms %11.1f %11.3f %8.2f GB "
                   "%s\n",
                   (long long)b, (long long)s.p.launches, s.p.flops / 1e9,
                   s.p.bytes_accessed / 1e9, s.p.roofline_seconds * 1e3, s.projected_s * 1e3,
                   tps, peak / 1e9, (double)s.p.resident_bytes / 1e9,
                   fits ? "yes" : "NO");
        fflush(stdout);
        em_model_compiled_free(mc);
        em_kv_cache_free(kv);
        em_scope_pop(c);
    }
    return 0;
}

/*
 * What XLA says about a compiled program: its cost analysis (flops, bytes accessed, the cost
 * model's time) and its compiled memory statistics, read through PJRT_Executable_GetCostAnalysis
 * and PJRT_Executable_GetCompiledMemoryStats; the EMBER_LOG_COMPILES line that prints them; the
 * projection a compile-only device keeps of the launches it did not run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"

static double nv_number(const PJRT_NamedValue *v) {
    switch (v->type) {
    case PJ_NV_FLOAT: return (double)v->float_value;
    case PJ_NV_INT64: return (double)v->int64_value;
    default: return -1;
    }
}

static bool nv_is(const PJRT_NamedValue *v, const char *name) {
    size_t n = strlen(name);
    return v->name_size == n && !memcmp(v->name, name, n);
}

/* Instructions with opcode `op` in a serialized HloModuleProto: the opcode is field 2 of an
 * HloInstructionProto, a string, so each one is the bytes 0x12, its length, the name (names
 * such as "all-reduce.3" are field 1 and longer: they do not match). Async forms ("-start")
 * count as their op. */
static int count_opcode(const unsigned char *p, size_t n, const char *op) {
    char start[48];
    snprintf(start, sizeof start, "%s-start", op);
    const char *ops[2] = {op, start};
    int k = 0;
    for (int j = 0; j < 2; j++) {
        size_t l = strlen(ops[j]);
        for (size_t i = 0; i + 2 + l <= n; i++)
            if (p[i] == 0x12 && p[i + 1] == l && !memcmp(p + i + 2, ops[j], l)) k++;
    }
    return k;
}

/* The collectives of x's optimised program (left at -1 when the plugin gives no program). */
static void count_collectives(const pj_plugin *pl, PJRT_Executable *x,
                              em_pjrt_program_report *r) {
    if (!PJ_HAS(pl, PJRT_Executable_OptimizedProgram)) return;
    PJRT_Program prog;
    memset(&prog, 0, sizeof prog);
    prog.struct_size = PJ_SIZE(PJRT_Program, format_size);
    PJ_ARGS(PJRT_Executable_OptimizedProgram_Args, a, program);
    a.executable = x;
    a.program = &prog;
    PJRT_Error *e = pl->api->PJRT_Executable_OptimizedProgram(&a);
    if (e || !prog.code_size || prog.code_size > ((size_t)1 << 30)) {
        pj_error_free(pl, e);
        return;
    }
    size_t n = prog.code_size;
    prog.code = malloc(n);
    if (!prog.code) return;
    if ((e = pl->api->PJRT_Executable_OptimizedProgram(&a))) {
        pj_error_free(pl, e);
        free(prog.code);
        return;
    }
    const unsigned char *p = (const unsigned char *)prog.code;
    r->all_reduces = count_opcode(p, n, "all-reduce");
    r->all_gathers = count_opcode(p, n, "all-gather");
    r->reduce_scatters = count_opcode(p, n, "reduce-scatter");
    r->all_to_alls = count_opcode(p, n, "all-to-all");
    r->collective_permutes = count_opcode(p, n, "collective-permute");
    free(prog.code);
}

void pj_report_fill(const pj_plugin *pl, PJRT_Executable *x, em_pjrt_program_report *r) {
    char what[sizeof r->what];
    memcpy(what, r->what, sizeof what);
    memset(r, 0, sizeof *r);
    memcpy(r->what, what, sizeof what);
    r->flops = r->transcendentals = r->bytes_accessed = r->optimal_seconds = -1;
    r->roofline_seconds = -1;
    r->argument_bytes = r->output_bytes = r->alias_bytes = r->temp_bytes = r->code_bytes = -1;
    r->peak_bytes = -1;
    r->n_outputs = -1;
    r->all_reduces = r->all_gathers = r->reduce_scatters = r->all_to_alls = -1;
    r->collective_permutes = -1;
    count_collectives(pl, x, r);
    PJRT_Error *e;
    if (PJ_HAS(pl, PJRT_Executable_NumOutputs)) {
        PJ_ARGS(PJRT_Executable_NumOutputs_Args, n, num_outputs);
        n.executable = x;
        if (!(e = pl->api->PJRT_Executable_NumOutputs(&n))) r->n_outputs = (int)n.num_outputs;
        pj_error_free(pl, e);
    }
    /* the total figures; per-operand ones ("bytes accessed0{}") are left out */
    if (PJ_HAS(pl, PJRT_Executable_GetCostAnalysis)) {
        PJ_ARGS(PJRT_Executable_GetCostAnalysis_Args, ca, properties);
        ca.executable = x;
        if (!(e = pl->api->PJRT_Executable_GetCostAnalysis(&ca))) {
            bool dump = getenv("EMBER_PJRT_DUMP_COST") != NULL;
            for (size_t i = 0; i < ca.num_properties; i++) {
                const PJRT_NamedValue *v = &ca.properties[i];
                if (dump)
                    fprintf(stderr, "[ember] cost %s: %.*s = %g\n", r->what, (int)v->name_size,
                            v->name, nv_number(v));
                if (nv_is(v, "flops")) r->flops = nv_number(v);
                else if (nv_is(v, "transcendentals")) r->transcendentals = nv_number(v);
                else if (nv_is(v, "bytes accessed")) r->bytes_accessed = nv_number(v);
                else if (nv_is(v, "optimal_seconds")) r->optimal_seconds = nv_number(v);
            }
            /* libtpu marks what its model cannot time with negative codes (-1 for a program
             * with a gather, ...), summed into the total: no estimate */
            if (r->optimal_seconds < 0) r->optimal_seconds = -1;
        }
        pj_error_free(pl, e);
    }
    r->roofline_seconds = pj_aot_roofline(pl, r->flops, r->bytes_accessed);
    if (PJ_HAS(pl, PJRT_Executable_GetCompiledMemoryStats)) {
        /* our declaration ends with peak_memory_in_bytes; a plugin older than that field reads
         * (and checks) no more than the size it knows, so the full size is always passed */
        PJ_ARGS(PJRT_Executable_GetCompiledMemoryStats_Args, m, peak_memory_in_bytes);
        m.executable = x;
        m.peak_memory_in_bytes = -1;
        if (!(e = pl->api->PJRT_Executable_GetCompiledMemoryStats(&m))) {
            r->argument_bytes = m.argument_size_in_bytes;
            r->output_bytes = m.output_size_in_bytes;
            r->alias_bytes = m.alias_size_in_bytes;
            r->temp_bytes = m.temp_size_in_bytes;
            r->code_bytes = m.generated_code_size_in_bytes;
            r->peak_bytes = m.peak_memory_in_bytes > 0
                                ? m.peak_memory_in_bytes
                                : m.argument_size_in_bytes + m.output_size_in_bytes -
                                      m.alias_size_in_bytes + m.temp_size_in_bytes +
                                      m.generated_code_size_in_bytes;
        }
        pj_error_free(pl, e);
    }
}

const em_pjrt_program_report *pj_exec_report(pj_plugin *pl, pj_exec *x) {
    pthread_mutex_lock(&pl->cache.lock);
    bool ready = x->report_ready;
    pthread_mutex_unlock(&pl->cache.lock);
    if (ready) return &x->report;
    em_pjrt_program_report r;
    memcpy(r.what, x->report.what, sizeof r.what);
    r.n_outputs = x->n_out;
    bool got = false;
    if (x->exe && PJ_HAS(pl, PJRT_LoadedExecutable_GetExecutable)) {
        PJ_ARGS(PJRT_LoadedExecutable_GetExecutable_Args, g, executable);
        g.loaded_executable = x->exe;
        PJRT_Error *e = pl->api->PJRT_LoadedExecutable_GetExecutable(&g);
        if (!e) {
            pj_report_fill(pl, g.executable, &r);
            got = true;
            PJ_ARGS(PJRT_Executable_Destroy_Args, d, executable);
            d.executable = g.executable;
            if (PJ_HAS(pl, PJRT_Executable_Destroy))
                pj_error_free(pl, pl->api->PJRT_Executable_Destroy(&d));
        }
        pj_error_free(pl, e);
    }
    if (!got) { /* nothing known: every figure -1 */
        r.flops = r.transcendentals = r.bytes_accessed = r.optimal_seconds = -1;
        r.roofline_seconds = -1;
        r.argument_bytes = r.output_bytes = r.alias_bytes = r.temp_bytes = r.code_bytes = -1;
        r.peak_bytes = -1;
        r.all_reduces = r.all_gathers = r.reduce_scatters = r.all_to_alls = -1;
        r.collective_permutes = -1;
    }
    pthread_mutex_lock(&pl->cache.lock);
    if (!x->report_ready) {
        x->report = r;
        x->report_ready = true;
    }
    pthread_mutex_unlock(&pl->cache.lock);
    return &x->report;
}

/* "1.23 GB" style, or "?" for an unknown (-1) figure. */
static const char *human(double v, const char *unit, char *buf, size_t n) {
    if (v < 0) {
        snprintf(buf, n, "?");
        return buf;
    }
    static const char *const pre[] = {"", "k", "M", "G", "T", "P"};
    int i = 0;
    while (v >= 1000 && i < 5) {
        v /= 1000;
        i++;
    }
    snprintf(buf, n, "%.3g %s%s", v, pre[i], unit);
    return buf;
}

void pj_report_log(const pj_plugin *pl, const em_pjrt_program_report *r) {
    char f[32], b[32], a[32], o[32], t[32], p[32], cap[32] = "", est[64] = "no estimate",
                                                             roof[64] = "";
    if (pl->device_memory_limit > 0)
        snprintf(cap, sizeof cap, " of %.3g GB", (double)pl->device_memory_limit / 1e9);
    if (r->optimal_seconds >= 0)
        snprintf(est, sizeof est, "estimated %.3g us", r->optimal_seconds * 1e6);
    if (r->roofline_seconds >= 0)
        snprintf(roof, sizeof roof, ", roofline %.3g us", r->roofline_seconds * 1e6);
    fprintf(stderr,
            "[ember]   XLA cost: %s, %s accessed, %s%s; memory: arguments %s, outputs %s, "
            "temporaries %s, peak %s%s\n",
            human(r->flops, "FLOP", f, sizeof f), human(r->bytes_accessed, "B", b, sizeof b),
            est, roof,
            human((double)r->argument_bytes, "B", a, sizeof a),
            human((double)r->output_bytes, "B", o, sizeof o),
            human((double)r->temp_bytes, "B", t, sizeof t),
            human((double)r->peak_bytes, "B", p, sizeof p), cap);
    if (r->all_reduces + r->all_gathers + r->reduce_scatters + r->all_to_alls +
            r->collective_permutes > 0)
        fprintf(stderr, "[ember]   collectives in the optimised program: %d all-reduce, %d "
                "all-gather, %d reduce-scatter, %d all-to-all, %d collective-permute\n",
                r->all_reduces, r->all_gathers, r->reduce_scatters, r->all_to_alls,
                r->collective_permutes);
}

void pj_project(pj_plugin *pl, pj_exec *x) {
    const em_pjrt_program_report *r = &x->report; /* made at compile time on these plugins */
    pthread_mutex_lock(&pl->cache.lock);
    em_pjrt_projection *p = &pl->proj;
    p->launches++;
    if (r->optimal_seconds < 0 && r->flops < 0) p->no_cost++;
    if (r->flops > 0) p->flops += r->flops;
    if (r->bytes_accessed > 0) p->bytes_accessed += r->bytes_accessed;
    if (r->optimal_seconds >= 0) p->optimal_seconds += r->optimal_seconds;
    else p->no_estimate++;
    if (r->roofline_seconds > 0) p->roofline_seconds += r->roofline_seconds;
    if (r->peak_bytes > p->max_peak_bytes) {
        p->max_peak_bytes = r->peak_bytes;
        memcpy(p->max_peak_what, r->what, sizeof p->max_peak_what);
    }
    if (r->temp_bytes > p->max_temp_bytes) p->max_temp_bytes = r->temp_bytes;
    pthread_mutex_unlock(&pl->cache.lock);
}

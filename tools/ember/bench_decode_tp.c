/*
 * `ember bench decode --tp N`: a tensor-parallel decode step and what its collectives cost.
 * Issue 18 asks for this figure rather than a speedup: on a 2-core machine the ranks (threads
 * of one process on the devices of a PJRT plugin, or mpirun's processes) share the same cores,
 * so the honest measure is, per decode step, the collectives called, the bytes each rank hands
 * them and the share of the step spent inside them (em_dist_stats).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "ember/ember.h"

typedef struct tp_opts {
    const char *model, *device;
    int tp, ep;
    int64_t batches[8];
    int n_batches;
    long long steps, prompt;
    bool json;
} tp_opts;

typedef struct tp_row {
    int64_t batch;
    double step_ms;
    em_dist_stats st; /* over the timed steps */
} tp_row;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The greedy next ids [B, 1] from the last logits [B, 1, V] (identical on every rank). */
static em_tensor *next_ids(em_ctx *c, em_tensor *logits, int64_t b) {
    return em_reshape(c, em_argmax(c, logits, -1, false), 2, (int64_t[]){b, 1});
}

/* One batch: a prompt prefill, then `steps` timed greedy decode steps with the group's
 * counters reset after the prefill. */
static em_status run_batch(em_ctx *c, const em_model *m, em_dist *g, const tp_opts *o, int64_t b,
                           tp_row *row) {
    int64_t p = o->prompt, v = em_model_config_get(m)->vocab_size;
    em_kv_cache *kv = em_kv_cache_create(c, m, b, p + o->steps + 1);
    if (!kv) return em_ctx_status(c);
    int64_t *ids = malloc((size_t)(b * p) * sizeof *ids);
    if (!ids) {
        em_kv_cache_free(kv);
        return em_ctx_fail(c, EM_ERR_OOM, "bench_decode_tp", "out of memory");
    }
    for (int64_t i = 0; i < b * p; i++) ids[i] = 3 + (i * 7919) % (v - 3); /* fixed, not special */
    em_scope_push(c);
    em_tensor *logits = em_model_forward(c, m, em_from_host(c, EM_I64, 2, (int64_t[]){b, p}, ids),
                                         NULL, kv, true);
    int64_t sink[1];
    if (logits) /* wait for the prefill: one id read back */
        em_to_host(c, em_narrow(c, em_reshape(c, next_ids(c, logits, b), 1, &b), 0, 0, 1), sink,
                   sizeof sink);
    em_scope_pop(c);
    free(ids);
    double t0 = now_s();
    em_dist_stats_reset(g);
    for (long long s = 0; s < o->steps && !em_ctx_status(c); s++) {
        em_scope_push(c);
        /* fixed ids per step and row (every rank the same): as good as greedy ones for timing */
        int64_t one[1024];
        for (int64_t i = 0; i < b; i++) one[i] = 3 + (s * 31 + i) % (v - 3);
        em_tensor *lg = em_model_forward(c, m, em_from_host(c, EM_I64, 2, (int64_t[]){b, 1}, one),
                                         NULL, kv, true);
        /* wait for the step: one id read back */
        if (lg) em_to_host(c, em_narrow(c, em_reshape(c, next_ids(c, lg, b), 1, &b), 0, 0, 1),
                           sink, sizeof sink);
        em_scope_pop(c);
    }
    row->batch = b;
    row->step_ms = (now_s() - t0) * 1000.0 / (double)o->steps;
    em_dist_stats_get(g, &row->st);
    em_kv_cache_free(kv);
    return em_ctx_status(c);
}

/* One rank: load its shard and run every batch; rank 0 prints. */
static int rank_run(const tp_opts *o, em_ctx *c, em_dist *g, bool speak) {
    em_model_options mo = em_model_default_options();
    mo.progress = false;
    mo.tp = g;
    mo.ep_size = o->ep ? o->tp : 0;
    em_device *dev = em_dist_device(g);
    mo.device = dev ? em_device_name(dev) : o->device;
    if (dev) em_ctx_set_device(c, dev);
    em_model *m = em_model_load(c, o->model, &mo);
    if (!m) return 1;
    if (speak && !o->json) {
        char buf[4096];
        em_model_tp_placement(m, buf, sizeof buf);
        fprintf(stderr, "%s", buf);
        printf("tensor parallel decode: %s, degree %d%s, ranks on %s, prompt %lld, %lld steps\n",
               o->model, o->tp, o->ep ? " (experts: expert parallelism)" : "",
               dev ? "the devices of one process" : "mpirun's processes (the CPU)", o->prompt,
               o->steps);
        printf("%6s %10s %10s %12s %14s %14s %8s\n", "batch", "step ms", "tokens/s",
               "coll./step", "KiB/step/rank", "coll. ms/step", "share");
    }
    int rc = 0;
    for (int k = 0; k < o->n_batches && !rc; k++) {
        tp_row r;
        if (run_batch(c, m, g, o, o->batches[k], &r)) {
            rc = 1;
            break;
        }
        if (!speak) continue;
        double n = (double)o->steps, calls = (double)r.st.calls / n;
        double kib = (double)r.st.bytes / n / 1024.0, cms = r.st.seconds * 1000.0 / n;
        double share = r.step_ms > 0 ? cms / r.step_ms : NAN;
        if (o->json)
            printf("{\"bench\": \"decode_tp\", \"tp\": %d, \"ep\": %s, \"batch\": %lld, "
                   "\"step_ms\": %.4f, \"tokens_per_s\": %.2f, \"collectives_per_step\": %.2f, "
                   "\"collective_bytes_per_step\": %.1f, \"all_reduce_bytes_per_step\": %.1f, "
                   "\"all_gather_bytes_per_step\": %.1f, \"collective_ms_per_step\": %.4f, "
                   "\"collective_share\": %.4f}\n",
                   o->tp, o->ep ? "true" : "false", (long long)r.batch, r.step_ms,
                   r.step_ms > 0 ? 1000.0 * (double)r.batch / r.step_ms : 0.0, calls,
                   (double)r.st.bytes / n, (double)r.st.bytes_by_op[0] / n,
                   (double)r.st.bytes_by_op[1] / n, cms, share);
        else
            printf("%6lld %10.3f %10.1f %12.1f %14.1f %14.3f %7.1f%%\n", (long long)r.batch,
                   r.step_ms, r.step_ms > 0 ? 1000.0 * (double)r.batch / r.step_ms : 0.0, calls,
                   kib, cms, 100.0 * share);
        fflush(stdout);
    }
    if (rc && em_ctx_error(c))
        fprintf(stderr, "ember bench decode --tp: %s%s\n", speak ? "" : "(another rank) ",
                em_ctx_error(c)->message);
    em_model_free(m);
    return rc;
}

static int group_rank(void *arg, em_ctx *c, em_dist *g, bool speak) {
    return rank_run(arg, c, g, speak);
}

static void usage(void) {
    printf("usage: ember bench decode --tp N --model DIR [--device xla|cuda|tpu|cpu] [--ep]\n"
           "                          [--batches 1,16] [--steps 16] [--prompt 8] [--json]\n\n"
           "A tensor-parallel decode step over N ranks and its collectives: per step, the\n"
           "collective calls, the bytes each rank hands them and the time inside them (waiting\n"
           "for the other ranks included), as a share of the step. With a device kind the ranks\n"
           "are devices 0..N-1 of this process (EMBER_PJRT_OPTIONS=cpu_device_count=N for XLA's\n"
           "CPU plugin); with --device cpu (the default) they are the processes of\n"
           "mpirun -np N. --ep: the MoE layers by expert parallelism. Decode steps feed fixed\n"
           "ids (every rank the same), timing the step, not the text.\n");
}

int bench_decode_tp(int argc, char **argv) {
    tp_opts o = {.device = "cpu", .batches = {1, 16}, .n_batches = 2, .steps = 16, .prompt = 8};
    for (int i = 1; i < argc; i++) {
        long long v;
        if (!strcmp(argv[i], "--json")) o.json = true;
        else if (!strcmp(argv[i], "--ep")) o.ep = 1;
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) o.model = argv[++i];
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) o.device = argv[++i];
        else if (!strcmp(argv[i], "--tp") && i + 1 < argc) {
            if (!cli_int("bench decode", argv[i], argv[i + 1], 2, 64, &v)) return 2;
            o.tp = (int)v;
            i++;
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            if (!cli_int("bench decode", argv[i], argv[i + 1], 1, 1 << 20, &o.steps)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) {
            if (!cli_int("bench decode", argv[i], argv[i + 1], 1, 1 << 20, &o.prompt)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--batches") && i + 1 < argc) {
            long long b[8];
            o.n_batches = cli_int_list("bench decode", argv[i], argv[i + 1], 1, 1024, b, 8);
            if (o.n_batches < 0) return 2;
            for (int k = 0; k < o.n_batches; k++) o.batches[k] = b[k];
            i++;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "ember bench decode --tp: unknown or incomplete option '%s'\n",
                    argv[i]);
            return 2;
        }
    }
    if (!o.model || !o.tp) {
        fprintf(stderr, "ember bench decode --tp: --model DIR and --tp N are required\n");
        return 2;
    }
    em_ctx *c = em_ctx_create();
    int rc = 1;
    bool group_of_devices = strcmp(o.device, "cpu") && !strchr(o.device, ':');
    if (group_of_devices) {
        rc = cli_device_group(c, "bench decode --tp", o.device, o.tp, group_rank, &o);
    } else if (strcmp(o.device, "cpu")) {
        fprintf(stderr, "ember bench decode --tp: --device is a device kind (xla, cuda, tpu: N "
                "devices of this process) or cpu (mpirun's processes), not '%s'\n", o.device);
        rc = 2;
    } else {
        em_dist *g = NULL;
        if (em_dist_init(c, NULL, &g) != EM_OK) {
            fprintf(stderr, "ember bench decode --tp: %s\n", em_ctx_error(c)->message);
        } else if (em_dist_world_size(g) != o.tp || !em_dist_has_mpi(g)) {
            fprintf(stderr, "ember bench decode --tp %d on the CPU: launch with mpirun -np %d "
                    "(this is one of %d process(es)%s)\n", o.tp, o.tp, em_dist_world_size(g),
                    em_dist_has_mpi(g) ? "" : ", without MPI");
            rc = 2;
        } else {
            rc = rank_run(&o, c, g, em_dist_rank(g) == 0);
        }
        em_dist_free(g);
    }
    em_ctx_free(c);
    return rc;
}

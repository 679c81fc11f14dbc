/*
 * ember/pjrt.h — accelerators through PJRT plugins: TPUs (libtpu), NVIDIA GPUs (XLA's CUDA
 * plugin) and XLA's own CPU runtime, each as "one more device".
 *
 * Most programs need nothing from this header: em_device_get(c, "xla:0") (or "cuda:0", "tpu:0",
 * "pjrt:/path/to/plugin.so") finds the plugin, creates its client and registers its devices on
 * first use. Where the plugin is looked for, in order:
 *   1. an explicit path ("pjrt:/path/plugin.so", or em_pjrt_open's `path`);
 *   2. an environment variable per name: EMBER_PJRT_XLA_PLUGIN, EMBER_PJRT_CUDA_PLUGIN,
 *      EMBER_PJRT_TPU_PLUGIN (also TPU_LIBRARY_PATH);
 *   3. the Python packages that carry the plugins (xla-cpu-pjrt; xla-cuda13-pjrt or
 *      jax-cuda13-pjrt; libtpu) in the site-packages of $VIRTUAL_ENV, $CONDA_PREFIX, ~/.local,
 *      each ~/.pyenv/versions/V, /usr/local and /usr.
 * When nothing is found the error lists every place that was tried.
 *
 * Client options: EMBER_PJRT_OPTIONS="name=value,..." (integers, floats, true/false or strings)
 * applies to every plugin, e.g. "cpu_device_count=4" for XLA's CPU plugin; em_pjrt_open takes
 * them explicitly.
 *
 * Ops on a PJRT device are lowered to StableHLO, compiled once per (op, attributes, shapes,
 * dtypes, plugin) and cached in memory and on disk (EMBER_PJRT_CACHE_DIR, default
 * ~/.cache/ember/pjrt; "off" disables it). EMBER_LOG_COMPILES=1 logs every compile with its
 * reason and time to stderr, and XLA's cost analysis and memory statistics of the program.
 *
 * Compile-only devices ("tpu-aot:v6e:2x4", "tpu-aot:v5e:2x2:3", "tpu-aot:v5p:2x2x1"): the TPU
 * compiler of libtpu, reached without a TPU. The name is tpu-aot:TOPOLOGY[:N], TOPOLOGY as
 * libtpu names slices (GENERATION:AxB[xC]) and N a device of the slice (default 0). Programs
 * are compiled against the topology (PJRT_Compile); nothing runs and no device memory exists.
 * Tensors there are shape-only: ops validate their arguments, infer shapes, compile their
 * program (cached like any other) and return tensors that have a shape, a dtype and a device but
 * no values. Reading values (em_to_host, em_item, em_to to another device) fails with
 * EM_ERR_UNSUPPORTED naming the device as compile-only; so does an op that needs index values
 * on the host. Creating a tensor from host data there keeps only its shape. Each launch adds
 * the program's XLA cost analysis to the device's projection (em_pjrt_projection_get).
 * "cuda-aot:NAME[:N]" does the same with XLA's CUDA plugin for a GPU described by a target
 * configuration (EMBER_CUDA_TARGET_CONFIG=FILE, or EMBER_CUDA_TARGET_CONFIG_DIR/NAME.txtpb);
 * that plugin gives memory statistics but no cost analysis. docs/tpu-aot.md has the details.
 */
#ifndef EMBER_PJRT_H_PUBLIC
#define EMBER_PJRT_H_PUBLIC

#include "ember/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** One client creation option (plain data). */
typedef enum em_pjrt_option_type {
    EM_PJRT_OPT_INT = 0,
    EM_PJRT_OPT_FLOAT = 1,
    EM_PJRT_OPT_BOOL = 2,
    EM_PJRT_OPT_STRING = 3
} em_pjrt_option_type;

typedef struct em_pjrt_option {
    const char *name;         /* e.g. "cpu_device_count" */
    em_pjrt_option_type type;
    int64_t i;                /* INT */
    double f;                 /* FLOAT */
    bool b;                   /* BOOL */
    const char *s;            /* STRING */
} em_pjrt_option;

/**
 * Loads the plugin for device name prefix `name` ("xla", "cuda", "tpu", or any other prefix for
 * a plugin given by `path`), creates its client with `opts` (may be NULL) and registers its
 * devices as "<name>:0", "<name>:1", ... `path` may be NULL (the search above). Opening a name
 * that is already open is a no-op (options are then ignored). Returns the number of devices, or
 * -1 with the error in c (naming every place tried, or the plugin's message).
 */
EM_API int em_pjrt_open(em_ctx *c, const char *name, const char *path, const em_pjrt_option *opts,
                        int n_opts);

/** Executable cache counters of the plugin behind a PJRT device. */
typedef struct em_pjrt_cache_stats {
    int64_t hits;            /* executions that found their executable in memory */
    int64_t misses;          /* executions that needed a new executable */
    int64_t compiles;        /* executables compiled by the plugin */
    int64_t disk_hits;       /* executables loaded from the on-disk cache */
    int64_t disk_writes;     /* executables written to the on-disk cache */
    int64_t failures;        /* compiles that failed */
    int64_t entries;         /* executables held in memory */
    double compile_seconds;  /* total time in compiles and disk loads */
    int64_t executions;      /* programs launched */
    double execute_seconds;  /* time spent inside the plugin's execute call (launching) */
    double wait_seconds;     /* time spent waiting for earlier executions (bounded queue) */
} em_pjrt_cache_stats;

/** Fills `out` for the plugin of device `d`. EM_ERR_INVALID_ARG if d is not a PJRT device. */
EM_API em_status em_pjrt_cache_stats_get(const em_device *d, em_pjrt_cache_stats *out);

/** Versions of the plugin behind a PJRT device (plain data). */
typedef struct em_pjrt_plugin_info {
    char path[1024];
    int api_major, api_minor;        /* PJRT C API version the plugin was built with */
    char platform[32];               /* "cpu", "cuda", "tpu" */
    char platform_version[256];
    char xla_version[64];            /* from the plugin's attributes, "" if absent */
    char stablehlo_current[32], stablehlo_minimum[32];
    int n_devices;
} em_pjrt_plugin_info;

EM_API em_status em_pjrt_plugin_info_get(const em_device *d, em_pjrt_plugin_info *out);

/** True if `d` is a PJRT device. */
EM_API bool em_device_is_pjrt(const em_device *d);

/** True if `d` is a compile-only PJRT device (tpu-aot:...): programs compile, nothing runs. */
EM_API bool em_device_is_compile_only(const em_device *d);

/**
 * What XLA's compiler says about one compiled program (plain data). Cost figures are XLA's cost
 * analysis of the optimised program (per run, per device); memory figures are its compiled
 * memory statistics in bytes of device memory. -1 where the plugin does not give a figure.
 */
typedef struct em_pjrt_program_report {
    double flops;            /* floating-point operations ("flops") */
    double transcendentals;  /* transcendental operations */
    double bytes_accessed;   /* bytes read and written in device memory ("bytes accessed") */
    double optimal_seconds;  /* the cost model's time for one run ("optimal_seconds"; TPU). XLA
                                gives none (-1) for a program with a gather or other ops its
                                model does not time: see roofline_seconds */
    double roofline_seconds; /* compile-only devices: max(flops / peak, bytes accessed /
                                bandwidth) at the chip's figures (em_pjrt_topology); else -1 */
    int64_t argument_bytes;  /* parameters (weights, caches, inputs) */
    int64_t output_bytes;    /* results */
    int64_t alias_bytes;     /* parameter bytes reused as results (donated caches) */
    int64_t temp_bytes;      /* scratch the program allocates */
    int64_t code_bytes;      /* the generated code */
    int64_t peak_bytes;      /* the plugin's peak, else arguments + outputs - aliases + temps
                                + code */
    int n_outputs;
    /* collective instructions in the optimised program XLA made (-1: the plugin does not give
     * it): what a multi-device program really exchanges, SPMD's partitioner included */
    int all_reduces, all_gathers, reduce_scatters, all_to_alls, collective_permutes;
    char what[160];          /* what the program computes: "matmul(bf16[8,16], bf16[16,4])",
                                "compile graph: 812 nodes, ...", "fused chain of 3 ..." */
} em_pjrt_program_report;

/**
 * Calls fn(report, user) for every program the executable cache of d's plugin holds (reports of
 * a client plugin's programs are computed on this first request). Stops early when fn returns
 * non-zero. Returns the number of programs visited, or -1 if d is not a PJRT device.
 */
EM_API int em_pjrt_reports(const em_device *d,
                           int (*fn)(const em_pjrt_program_report *r, void *user), void *user);

/** What the launches on a compile-only device would have cost, by XLA's cost model. */
typedef struct em_pjrt_projection {
    int64_t launches;         /* programs launched (compiled or from the cache, never run) */
    int64_t no_cost;          /* launches whose program had no cost analysis */
    int64_t no_estimate;      /* launches whose program had no optimal_seconds from XLA */
    double flops;             /* sums over the launches */
    double bytes_accessed;
    double optimal_seconds;   /* XLA's estimates, where it gave one */
    double roofline_seconds;  /* every launch: XLA's flops and bytes at the chip's peak and
                                 bandwidth (the figure projections use) */
    int64_t max_peak_bytes;   /* the largest program's peak device memory (arguments included) */
    int64_t max_temp_bytes;   /* the largest scratch of a launched program */
    int64_t resident_bytes;   /* bytes the device's live tensors would occupy now */
    char max_peak_what[160];  /* the program with that peak */
} em_pjrt_projection;

/** Fills `out` for compile-only device d (zeros since the last reset). EM_ERR_INVALID_ARG if d
 * is not a compile-only device. resident_bytes is d's own; the rest is its plugin's (the slice). */
EM_API em_status em_pjrt_projection_get(const em_device *d, em_pjrt_projection *out);
/** Zeroes the launch sums of d's plugin (resident_bytes is not a sum and stays). */
EM_API em_status em_pjrt_projection_reset(const em_device *d);

/**
 * The topology of a compile-only device (plain data): the slice libtpu compiles for, and the
 * chip generation's public figures from Ember's table (src/backends/pjrt/tpu_chips.c, each
 * with its source). Figures the table does not have are 0.
 */
typedef struct em_pjrt_topology {
    char name[48];               /* "v6e:2x4" */
    char platform_version[256];  /* libtpu's version string */
    int n_devices;               /* devices of the slice */
    char device_kind[64];        /* "TPU v6 lite" */
    int64_t device_memory_limit; /* the compiler's limit per device, bytes (libtpu's attribute) */
    char generation[16];         /* "v6e", "v5e", "v5p", "v4" */
    double hbm_bytes;            /* HBM per chip, bytes (the vendor's figure) */
    double hbm_gbs;              /* HBM bandwidth per chip, GB/s */
    double bf16_tflops;          /* peak bf16 dense TFLOP/s per chip */
    char source[200];            /* where the table's figures come from */
} em_pjrt_topology;

/** Fills `out` for compile-only device d; EM_ERR_INVALID_ARG for any other device. */
EM_API em_status em_pjrt_topology_get(const em_device *d, em_pjrt_topology *out);

#ifdef __cplusplus
}
#endif
#endif

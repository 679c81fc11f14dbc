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
 * reason and time to stderr.
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

#ifdef __cplusplus
}
#endif
#endif

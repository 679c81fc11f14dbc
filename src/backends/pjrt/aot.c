/*
 * Compile-only PJRT devices: "tpu-aot:TOPOLOGY[:N]" opens libtpu without a client, creates the
 * topology of a TPU slice (PJRT_TopologyDescription_Create) and registers one Ember device per
 * device of the slice. Programs for these devices are compiled with PJRT_Compile against the
 * topology (compile_cache.c); nothing runs, so the storages are shape-only (buffer.c) and a
 * launch adds the program's cost analysis to the plugin's projection (report.c).
 *
 * libtpu asks the cloud metadata server about the host it runs on when it is loaded (30 tries
 * per key, minutes in all off Google Cloud) unless told not to; a compile-only device needs
 * none of that, so the variables that skip it are set here when the caller has not set them.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backends/pjrt/pjrt.h"

/* Names and kinds are formatted into fixed buffers; a longer one is cut, which is harmless. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

/* ---- the chip table ---- */

/* Per-chip figures of each TPU generation libtpu compiles for, from Google Cloud's system
 * architecture pages (docs.cloud.google.com/tpu/docs/<generation>, read 2026-12-01). HBM in
 * bytes as the page states it (GB or GiB), bandwidth in GB/s, peak dense bf16 in TFLOP/s. */
typedef struct tpu_chip {
    const char *generation, *kind; /* the topology's prefix, libtpu's device kind */
    double hbm_bytes, hbm_gbs, bf16_tflops;
    const char *source;
} tpu_chip;

#define GIB (1024.0 * 1024.0 * 1024.0)
static const tpu_chip chips[] = {
    {"v4", "TPU v4", 32 * GIB, 1200, 275, "docs.cloud.google.com/tpu/docs/v4: 32 GiB HBM2, 1200 GBps, 275 TFLOPs bf16"},
    {"v5e", "TPU v5 lite", 16e9, 819, 197, "docs.cloud.google.com/tpu/docs/v6e (v5e column): 16 GB, 819 GBps, 197 TFLOPs bf16"},
    {"v5p", "TPU v5", 95 * GIB, 2765, 459, "docs.cloud.google.com/tpu/docs/v5p: 95 GiB HBM2e, 2765 GBps, 459 TFLOPs bf16"},
    {"v6e", "TPU v6 lite", 32e9, 1640, 918, "docs.cloud.google.com/tpu/docs/v6e: 32 GB, 1640 GBps, 918 TFLOPs bf16"},
};

static const tpu_chip *chip_of(const char *topology) {
    for (size_t i = 0; i < sizeof chips / sizeof chips[0]; i++) {
        size_t n = strlen(chips[i].generation);
        if (!strncmp(topology, chips[i].generation, n) && topology[n] == ':') return &chips[i];
    }
    return NULL;
}

double pj_aot_roofline(const pj_plugin *pl, double flops, double bytes) {
    const tpu_chip *ch = pl->aot ? chip_of(pl->topology_name) : NULL;
    if (!ch || flops < 0 || bytes < 0) return -1;
    double tc = flops / (ch->bf16_tflops * 1e12), tm = bytes / (ch->hbm_gbs * 1e9);
    return tc > tm ? tc : tm;
}

/* ---- names ---- */

/* "tpu-aot:v6e:2x4", "tpu-aot:v6e:2x4:3", "tpu-aot:v5p:2x2x1": the topology is GEN:DIMS with
 * DIMS digits and 'x' (libtpu checks the rest and names its own rule when it refuses one).
 * "cuda-aot:h100_sxm[:N]": the name of a GPU target configuration (letters, digits, _ . -). */
bool pj_aot_parse(const char *name, char *prefix_out, size_t n, const char **topology,
                  size_t *topology_len, int *index) {
    const char *rest = NULL, *p;
    if (!strncmp(name, "tpu-aot:", 8)) {
        rest = name + 8;
        const char *gen_end = strchr(rest, ':');
        if (!gen_end || gen_end == rest) return false;
        const char *dims = gen_end + 1;
        p = dims;
        while (isdigit((unsigned char)*p) || *p == 'x') p++;
        if (p == dims) return false;
    } else if (!strncmp(name, "cuda-aot:", 9)) {
        rest = name + 9;
        p = rest;
        while (isalnum((unsigned char)*p) || *p == '_' || *p == '.' || *p == '-') p++;
        if (p == rest) return false;
    } else {
        return false;
    }
    *index = 0;
    if (*p == ':') {
        char *end;
        long v = strtol(p + 1, &end, 10);
        if (!p[1] || *end || v < 0 || v > 1 << 20) return false;
        *index = (int)v;
    } else if (*p) {
        return false;
    }
    *topology = rest;
    *topology_len = (size_t)(p - rest);
    snprintf(prefix_out, n, "%.*s", (int)(p - name), name);
    return true;
}

/* ---- the devices ---- */

static void str_out(char *dst, size_t n, const char *s, size_t len) {
    snprintf(dst, n, "%.*s", (int)(len < n ? len : n - 1), s ? s : "");
}

static em_status query(const em_device *d, em_device_info *out) {
    const pj_dev *pd = d->impl;
    const pj_plugin *pl = pd->pl;
    snprintf(out->platform, sizeof out->platform, "%s", pl->platform);
    snprintf(out->kind, sizeof out->kind, "%s (compile-only, topology %s)", pd->kind,
             pl->topology_name);
    snprintf(out->features, sizeof out->features, "PJRT %d.%d, compile-only", pl->major,
             pl->minor);
    out->memory_bytes = pl->device_memory_limit;
    out->memory_free = pl->device_memory_limit
                           ? pl->device_memory_limit - atomic_load(&pd->resident)
                           : -1;
    return EM_OK;
}

static void env_default(const char *name, const char *value) {
    const char *v = getenv(name);
    if (!v || !*v) setenv(name, value, 0);
}

static em_status topo_fail(em_ctx *c, pj_plugin *pl, PJRT_Error *e) {
    char msg[640];
    pj_error_text(pl, e, msg, sizeof msg);
    pj_error_free(pl, e);
    return EM_FAIL(c, EM_ERR_DEVICE, "device_get", "%s cannot describe topology '%s': %s",
                   pl->path, pl->topology_name, msg);
}

void pj_aot_env(const char *lib) {
    if (strcmp(lib, "tpu")) return;
    env_default("TPU_SKIP_MDS_QUERY", "1");
    env_default("TPU_WORKER_ID", "0");
    env_default("TPU_WORKER_HOSTNAMES", "localhost");
    env_default("TPU_HOST_BOUNDS", "1,1,1"); /* else it warns that it cannot find the host's */
    /* libtpu takes a lock file so that one process owns the chips; without chips, any number
     * of processes may compile (ctest -j, a bench next to a test run) */
    env_default("ALLOW_MULTIPLE_LIBTPU_LOAD", "1");
}

/* A GPU target configuration (GpuTargetConfigProto in text form) for "cuda-aot:NAME": the file
 * $EMBER_CUDA_TARGET_CONFIG, else NAME.txtpb in $EMBER_CUDA_TARGET_CONFIG_DIR. XLA keeps one per
 * GPU model in xla/backends/gpu/target_config/specs/ (h100_sxm.txtpb, h200.txtpb, ...). */
static char *gpu_target_config(em_ctx *c, const pj_plugin *pl, size_t *len) {
    char path[1200] = "";
    const char *f = getenv("EMBER_CUDA_TARGET_CONFIG"), *dir = getenv("EMBER_CUDA_TARGET_CONFIG_DIR");
    if (f && *f) snprintf(path, sizeof path, "%s", f);
    else if (dir && *dir) snprintf(path, sizeof path, "%s/%s.txtpb", dir, pl->topology_name);
    FILE *fp = path[0] ? fopen(path, "rb") : NULL;
    char *buf = NULL;
    if (fp) {
        buf = malloc(1 << 20);
        *len = buf ? fread(buf, 1, (1 << 20) - 1, fp) : 0;
        if (buf) buf[*len] = 0;
        fclose(fp);
    }
    if (!buf)
        EM_FAIL(c, EM_ERR_NOT_FOUND, "device_get",
                "cuda-aot:%s needs a GPU target configuration, a GpuTargetConfigProto in text "
                "form such as XLA's xla/backends/gpu/target_config/specs/%s.txtpb: set "
                "EMBER_CUDA_TARGET_CONFIG=FILE or EMBER_CUDA_TARGET_CONFIG_DIR=DIR (%s%s)",
                pl->topology_name, pl->topology_name, path[0] ? "cannot read " : "neither is set",
                path);
    return buf;
}

em_status pj_aot_create(em_ctx *c, pj_plugin *pl) {
    static const char *const need[] = {"PJRT_TopologyDescription_Create", "PJRT_Compile",
                                       "PJRT_TopologyDescription_GetDeviceDescriptions"};
    size_t offs[] = {offsetof(PJRT_Api, PJRT_TopologyDescription_Create),
                     offsetof(PJRT_Api, PJRT_Compile),
                     offsetof(PJRT_Api, PJRT_TopologyDescription_GetDeviceDescriptions)};
    for (int i = 0; i < 3; i++) {
        const void *const *slot = (const void *const *)((const char *)pl->api + offs[i]);
        if (offs[i] + sizeof(void *) > pl->api->struct_size || !*slot)
            return EM_FAIL(c, EM_ERR_DEVICE, "device_get",
                           "%s (PJRT API %d.%d) lacks %s: it cannot compile without a device",
                           pl->path, pl->major, pl->minor, need[i]);
    }
    PJ_ARGS(PJRT_TopologyDescription_Create_Args, tc, topology);
    tc.topology_name = pl->topology_name;
    tc.topology_name_size = strlen(pl->topology_name);
    /* XLA's GPU plugin describes a GPU it does not have from a target configuration; one
     * device ("1x1x1": partitions x hosts x devices per host) */
    PJRT_NamedValue nv[2];
    size_t cfg_len = 0;
    char *cfg = NULL;
    if (!strncmp(pl->name, "cuda-", 5)) {
        if (!(cfg = gpu_target_config(c, pl, &cfg_len))) return c->err.status;
        memset(nv, 0, sizeof nv);
        nv[0].struct_size = nv[1].struct_size = PJ_SIZE(PJRT_NamedValue, value_size);
        nv[0].name = "target_config";
        nv[0].name_size = 13;
        nv[0].type = PJ_NV_STRING;
        nv[0].string_value = cfg;
        nv[0].value_size = cfg_len;
        nv[1].name = "topology";
        nv[1].name_size = 8;
        nv[1].type = PJ_NV_STRING;
        nv[1].string_value = "1x1x1";
        nv[1].value_size = 5;
        tc.create_options = nv;
        tc.num_options = 2;
        const char *m = strstr(cfg, "device_memory_size:");
        if (m) pl->device_memory_limit = strtoll(m + 19, NULL, 10);
    }
    PJRT_Error *e = pl->api->PJRT_TopologyDescription_Create(&tc);
    free(cfg);
    if (e) return topo_fail(c, pl, e);
    pl->topology = tc.topology;
    PJ_ARGS(PJRT_TopologyDescription_String_Args, ts, str_size);
    ts.topology = pl->topology;
    if (PJ_HAS(pl, PJRT_TopologyDescription_PlatformName)) {
        if ((e = pl->api->PJRT_TopologyDescription_PlatformName(&ts))) return topo_fail(c, pl, e);
        str_out(pl->platform, sizeof pl->platform, ts.str, ts.str_size);
    }
    if (PJ_HAS(pl, PJRT_TopologyDescription_PlatformVersion)) {
        if ((e = pl->api->PJRT_TopologyDescription_PlatformVersion(&ts)))
            return topo_fail(c, pl, e);
        str_out(pl->platform_version, sizeof pl->platform_version, ts.str, ts.str_size);
        for (char *s = pl->platform_version; *s; s++)
            if (*s == '\n') *s = ' ';
    }
    if (!pl->platform[0]) snprintf(pl->platform, sizeof pl->platform, "tpu");
    if (PJ_HAS(pl, PJRT_TopologyDescription_Attributes)) {
        PJ_ARGS(PJRT_TopologyDescription_Attributes_Args, ta, num_attributes);
        ta.topology = pl->topology;
        if ((e = pl->api->PJRT_TopologyDescription_Attributes(&ta))) {
            pj_error_free(pl, e);
        } else {
            for (size_t i = 0; i < ta.num_attributes; i++) {
                const PJRT_NamedValue *v = &ta.attributes[i];
                if (v->name_size == 25 && !memcmp(v->name, "device_memory_bytes_limit", 25) &&
                    v->type == PJ_NV_INT64)
                    pl->device_memory_limit = v->int64_value;
            }
        }
    }
    PJ_ARGS(PJRT_TopologyDescription_GetDeviceDescriptions_Args, gd, num_descriptions);
    gd.topology = pl->topology;
    if ((e = pl->api->PJRT_TopologyDescription_GetDeviceDescriptions(&gd)))
        return topo_fail(c, pl, e);
    if (gd.num_descriptions == 0)
        return EM_FAIL(c, EM_ERR_DEVICE, "device_get", "topology %s has no devices",
                       pl->topology_name);
    /* what makes a program compiled here reusable: the library, its version, the slice */
    struct stat st;
    long long fsize = 0, fmtime = 0;
    if (stat(pl->path, &st) == 0) {
        fsize = (long long)st.st_size;
        fmtime = (long long)st.st_mtime;
    }
    snprintf(pl->version_key, sizeof pl->version_key, "%s|%lld|%lld|%d.%d|%s|%s|%s|%s|aot:%s",
             pl->path, fsize, fmtime, pl->major, pl->minor, pl->xla_version, pl->platform,
             pl->platform_version, pl->shlo_current, pl->topology_name);
    pj_backend_init(pl);
    pl->be.query = query;
    pl->be.no_values = true;
    pj_cache_init(pl);
    pl->devices = calloc(gd.num_descriptions, sizeof *pl->devices);
    if (!pl->devices) return EM_FAIL(c, EM_ERR_OOM, "pjrt", "out of memory");
    for (size_t i = 0; i < gd.num_descriptions; i++) {
        em_device *d = calloc(1, sizeof *d);
        pj_dev *pd = calloc(1, sizeof *pd);
        if (!d || !pd) {
            free(d);
            free(pd);
            return EM_FAIL(c, EM_ERR_OOM, "pjrt", "out of memory");
        }
        pd->pl = pl;
        pd->desc = gd.descriptions[i];
        pd->local_index = (int)i;
        pd->device_id = (int)i;
        atomic_init(&pd->resident, 0);
        pthread_mutex_init(&pd->lock, NULL);
        PJ_ARGS(PJRT_DeviceDescription_Id_Args, id, id);
        id.device_description = pd->desc;
        if (!(e = pl->api->PJRT_DeviceDescription_Id(&id))) pd->device_id = id.id;
        pj_error_free(pl, e);
        PJ_ARGS(PJRT_DeviceDescription_String_Args, k, str_size);
        k.device_description = pd->desc;
        if (!(e = pl->api->PJRT_DeviceDescription_Kind(&k)))
            str_out(pd->kind, sizeof pd->kind, k.str, k.str_size);
        pj_error_free(pl, e);
        d->be = &pl->be;
        snprintf(d->name, sizeof d->name, "%s:%d", pl->name, (int)i);
        d->index = (int)i;
        d->impl = pd;
        em_allocator_init(&d->alloc, 0);
        pl->devices[i] = d;
        pl->n_devices = (int)i + 1;
        if (!em_device_register(d))
            return EM_FAIL(c, EM_ERR_DEVICE, "pjrt", "too many devices registered");
    }
    return EM_OK;
}

em_status pj_aot_refuse(em_ctx *c, const em_device *d, const char *what, bool in_op) {
    const pj_plugin *pl = ((const pj_dev *)d->impl)->pl;
    if (in_op)
        return em_op_fail(c, EM_ERR_UNSUPPORTED,
                          "%s is a compile-only device (%s %s, no chip): %s needs tensor "
                          "values, and tensors there have shapes only",
                          d->name, pl->platform[0] == 't' ? "TPU topology" : "GPU target",
                          pl->topology_name, what);
    return EM_FAIL(c, EM_ERR_UNSUPPORTED, what,
                   "%s is a compile-only device (%s %s, no chip): its tensors have "
                   "shapes but no values; programs compile there, nothing runs",
                   d->name, pl->platform[0] == 't' ? "TPU topology" : "GPU target",
                   pl->topology_name);
}

em_status em_pjrt_topology_get(const em_device *d, em_pjrt_topology *out) {
    if (!out || !em_device_is_compile_only(d)) return EM_ERR_INVALID_ARG;
    const pj_dev *pd = d->impl;
    const pj_plugin *pl = pd->pl;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", pl->topology_name);
    snprintf(out->platform_version, sizeof out->platform_version, "%s", pl->platform_version);
    out->n_devices = pl->n_devices;
    snprintf(out->device_kind, sizeof out->device_kind, "%s", pd->kind);
    out->device_memory_limit = pl->device_memory_limit;
    const tpu_chip *ch = chip_of(pl->topology_name);
    if (ch) {
        snprintf(out->generation, sizeof out->generation, "%s", ch->generation);
        out->hbm_bytes = ch->hbm_bytes;
        out->hbm_gbs = ch->hbm_gbs;
        out->bf16_tflops = ch->bf16_tflops;
        snprintf(out->source, sizeof out->source, "%s", ch->source);
    }
    return EM_OK;
}

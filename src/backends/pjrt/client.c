/* A plugin's client: creation with options, its devices registered as Ember devices. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backends/pjrt/pjrt.h"

static void str_out(char *dst, size_t n, const char *s, size_t len) {
    snprintf(dst, n, "%.*s", (int)(len < n ? len : n - 1), s ? s : "");
}

static em_status query(const em_device *d, em_device_info *out) {
    const pj_dev *pd = d->impl;
    const pj_plugin *pl = pd->pl;
    snprintf(out->platform, sizeof out->platform, "%s", pl->platform);
    snprintf(out->kind, sizeof out->kind, "%s", pd->kind);
    snprintf(out->features, sizeof out->features, "PJRT %d.%d%s%s", pl->major, pl->minor,
             pl->xla_version[0] ? ", XLA " : "", pl->xla_version);
    out->memory_bytes = 0;
    out->memory_free = -1;
    if (PJ_HAS(pl, PJRT_Device_MemoryStats)) {
        PJRT_Device_MemoryStats_Args a;
        memset(&a, 0, sizeof a);
        a.struct_size = PJ_SIZE(PJRT_Device_MemoryStats_Args, peak_pool_bytes_is_set);
        a.device = pd->dev;
        PJRT_Error *e = pl->api->PJRT_Device_MemoryStats(&a);
        if (e) {
            pj_error_free(pl, e); /* the CPU plugin does not keep statistics */
        } else if (a.bytes_limit_is_set) {
            out->memory_bytes = a.bytes_limit;
            out->memory_free = a.bytes_limit - a.bytes_in_use;
        }
    }
    if (!out->memory_bytes && !strcmp(pl->platform, "cpu")) {
        /* XLA's CPU devices use host memory */
        em_device_info host;
        if (em_device_info_get(em_device_host(), &host) == EM_OK) {
            out->memory_bytes = host.memory_bytes;
            out->memory_free = host.memory_free;
        }
    }
    return EM_OK;
}

static em_status add_device(em_ctx *c, pj_plugin *pl, PJRT_Device *dev, int index) {
    em_device *d = calloc(1, sizeof *d);
    pj_dev *pd = calloc(1, sizeof *pd);
    if (!d || !pd) {
        free(d);
        free(pd);
        return EM_FAIL(c, EM_ERR_OOM, "pjrt", "out of memory");
    }
    pd->pl = pl;
    pd->dev = dev;
    pd->local_index = index;
    pthread_mutex_init(&pd->lock, NULL);
    PJRT_Device_GetDescription_Args g;
    memset(&g, 0, sizeof g);
    g.struct_size = PJ_SIZE(PJRT_Device_GetDescription_Args, device_description);
    g.device = dev;
    if (!pj_check(c, pl, pl->api->PJRT_Device_GetDescription(&g), false, "pjrt_device")) {
        PJRT_DeviceDescription_String_Args k;
        memset(&k, 0, sizeof k);
        k.struct_size = PJ_SIZE(PJRT_DeviceDescription_String_Args, str_size);
        k.device_description = g.device_description;
        if (!pj_check(c, pl, pl->api->PJRT_DeviceDescription_Kind(&k), false, "pjrt_device"))
            str_out(pd->kind, sizeof pd->kind, k.str, k.str_size);
    }
    if (c->err.status) {
        free(d);
        free(pd);
        return c->err.status;
    }
    d->be = &pl->be;
    snprintf(d->name, sizeof d->name, "%.40s:%d", pl->name, index);
    d->index = index;
    d->impl = pd;
    /* PJRT buffers are immutable results of executions: a storage record is cheap and must not
     * be recycled with a stale buffer, so the allocator keeps no cache for these devices */
    em_allocator_init(&d->alloc, 0);
    pl->devices[index] = d;
    if (!em_device_register(d))
        return EM_FAIL(c, EM_ERR_DEVICE, "pjrt", "too many devices registered");
    return EM_OK;
}

em_status pj_client_create(em_ctx *c, pj_plugin *pl, const em_pjrt_option *opts, int n_opts) {
    PJRT_NamedValue nv[32];
    if (n_opts > 32) n_opts = 32;
    for (int i = 0; i < n_opts; i++) {
        PJRT_NamedValue *v = &nv[i];
        memset(v, 0, sizeof *v);
        v->struct_size = PJ_SIZE(PJRT_NamedValue, value_size);
        v->name = opts[i].name;
        v->name_size = strlen(opts[i].name);
        v->value_size = 1;
        switch (opts[i].type) {
        case EM_PJRT_OPT_INT:
            v->type = PJ_NV_INT64;
            v->int64_value = opts[i].i;
            break;
        case EM_PJRT_OPT_FLOAT:
            v->type = PJ_NV_FLOAT;
            v->float_value = (float)opts[i].f;
            break;
        case EM_PJRT_OPT_BOOL:
            v->type = PJ_NV_BOOL;
            v->bool_value = opts[i].b;
            break;
        default:
            v->type = PJ_NV_STRING;
            v->string_value = opts[i].s ? opts[i].s : "";
            v->value_size = strlen(v->string_value);
        }
    }
    PJRT_Client_Create_Args a;
    memset(&a, 0, sizeof a);
    a.struct_size = PJ_SIZE(PJRT_Client_Create_Args, kv_try_get_user_arg);
    /* in a process group of several processes (em_dist_init): the group's store, and which
     * node this is, as jax.distributed.initialize gives a multi-process plugin (options the
     * caller set win) */
    if (em_group_kv_current(&pl->kv) && pl->kv.num_nodes > 1) {
        a.kv_get_callback = pj_kv_get;
        a.kv_get_user_arg = &pl->kv;
        a.kv_put_callback = pj_kv_put;
        a.kv_put_user_arg = &pl->kv;
        const char *names[2] = {"node_id", "num_nodes"};
        int64_t vals[2] = {pl->kv.node_id, pl->kv.num_nodes};
        for (int k = 0; k < 2 && n_opts < 32; k++) {
            bool given = false;
            for (int i = 0; i < n_opts; i++) given |= !strcmp(nv[i].name, names[k]);
            if (given) continue;
            PJRT_NamedValue *v = &nv[n_opts++];
            memset(v, 0, sizeof *v);
            v->struct_size = PJ_SIZE(PJRT_NamedValue, value_size);
            v->name = names[k];
            v->name_size = strlen(names[k]);
            v->type = PJ_NV_INT64;
            v->int64_value = vals[k];
            v->value_size = 1;
        }
    }
    a.create_options = n_opts ? nv : NULL;
    a.num_options = (size_t)n_opts;
    if (pj_check(c, pl, pl->api->PJRT_Client_Create(&a), false, "pjrt_client_create"))
        return EM_ERR_BACKEND;
    pl->client = a.client;

    PJRT_Client_String_Args s;
    memset(&s, 0, sizeof s);
    s.struct_size = PJ_SIZE(PJRT_Client_String_Args, str_size);
    s.client = pl->client;
    if (pj_check(c, pl, pl->api->PJRT_Client_PlatformName(&s), false, "pjrt_client"))
        return EM_ERR_BACKEND;
    str_out(pl->platform, sizeof pl->platform, s.str, s.str_size);
    if (PJ_HAS(pl, PJRT_Client_PlatformVersion)) {
        memset(&s, 0, sizeof s);
        s.struct_size = PJ_SIZE(PJRT_Client_String_Args, str_size);
        s.client = pl->client;
        if (!pj_check(c, pl, pl->api->PJRT_Client_PlatformVersion(&s), false, "pjrt_client"))
            str_out(pl->platform_version, sizeof pl->platform_version, s.str, s.str_size);
        if (c->err.status) return c->err.status;
    }
    PJRT_Client_Devices_Args dv;
    memset(&dv, 0, sizeof dv);
    dv.struct_size = PJ_SIZE(PJRT_Client_Devices_Args, num_devices);
    dv.client = pl->client;
    if (pj_check(c, pl, pl->api->PJRT_Client_AddressableDevices(&dv), false, "pjrt_client"))
        return EM_ERR_BACKEND;
    if (dv.num_devices == 0)
        return EM_FAIL(c, EM_ERR_DEVICE, "pjrt", "plugin %s has no addressable devices",
                       pl->path);
    /* the key under which executables of this plugin may be reused (memory and disk) */
    struct stat st;
    long long fsize = 0, fmtime = 0;
    if (stat(pl->path, &st) == 0) {
        fsize = (long long)st.st_size;
        fmtime = (long long)st.st_mtime;
    }
    snprintf(pl->version_key, sizeof pl->version_key, "%s|%lld|%lld|%d.%d|%s|%s|%s|%s", pl->path,
             fsize, fmtime, pl->major, pl->minor, pl->xla_version, pl->platform,
             pl->platform_version, pl->shlo_current);
    pj_backend_init(pl);
    pj_cache_init(pl);
    pl->devices = calloc(dv.num_devices, sizeof *pl->devices);
    if (!pl->devices) return EM_FAIL(c, EM_ERR_OOM, "pjrt", "out of memory");
    for (size_t i = 0; i < dv.num_devices; i++) {
        if (add_device(c, pl, dv.devices[i], (int)i)) return c->err.status;
        pl->n_devices = (int)i + 1;
    }
    return EM_OK;
}

/* Wires the query into a backend table (the rest is in pjrt_backend.c and buffer.c). */
void pj_backend_query(em_backend *be);
void pj_backend_query(em_backend *be) { be->query = query; }

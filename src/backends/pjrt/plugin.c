/*
 * Finding and loading PJRT plugins: the search order of ember/pjrt.h, dlopen, the API version
 * check and the plugin's attributes; converting PJRT errors into Ember's.
 *
 * Plugins are opened with RTLD_LOCAL so that several (CPU, CUDA, TPU) can live in one process,
 * and never closed: their devices live until the process exits.
 */
#include <dlfcn.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backends/pjrt/pjrt.h"
#include "core/kernel_registry.h"
#include "core/op_table.h"

/* Paths are formatted into fixed buffers; one that does not fit is truncated and then simply
 * not found (and reported as tried), which is the right outcome. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

static pthread_mutex_t plugins_lock = PTHREAD_MUTEX_INITIALIZER;
#define PJ_MAX_PLUGINS 8
static pj_plugin *plugins[PJ_MAX_PLUGINS];
static int n_plugins;

/* ---- errors ---- */

void pj_error_text(const pj_plugin *pl, PJRT_Error *e, char *buf, size_t n) {
    PJRT_Error_Message_Args m;
    memset(&m, 0, sizeof m);
    m.struct_size = PJ_SIZE(PJRT_Error_Message_Args, message_size);
    m.error = e;
    pl->api->PJRT_Error_Message(&m);
    int code = 0;
    if (PJ_HAS(pl, PJRT_Error_GetCode)) {
        PJRT_Error_GetCode_Args g;
        memset(&g, 0, sizeof g);
        g.struct_size = PJ_SIZE(PJRT_Error_GetCode_Args, code);
        g.error = e;
        PJRT_Error *e2 = pl->api->PJRT_Error_GetCode(&g);
        if (e2)
            pj_error_free(pl, e2);
        else
            code = g.code;
    }
    size_t len = m.message ? m.message_size : 0;
    /* keep the message on one line */
    int k = snprintf(buf, n, "%.*s", (int)(len < n ? len : n - 1), m.message ? m.message : "");
    for (int i = 0; i < k && (size_t)i < n; i++)
        if (buf[i] == '\n') buf[i] = ' ';
    if (code && (size_t)k + 16 < n) snprintf(buf + k, n - (size_t)k, " (code %d)", code);
}

void pj_error_free(const pj_plugin *pl, PJRT_Error *e) {
    if (!e) return;
    PJRT_Error_Destroy_Args d;
    memset(&d, 0, sizeof d);
    d.struct_size = PJ_SIZE(PJRT_Error_Destroy_Args, error);
    d.error = e;
    pl->api->PJRT_Error_Destroy(&d);
}

em_status pj_check(em_ctx *c, const pj_plugin *pl, PJRT_Error *e, bool in_op, const char *what) {
    if (!e) return EM_OK;
    char msg[640];
    pj_error_text(pl, e, msg, sizeof msg);
    pj_error_free(pl, e);
    if (in_op) return em_op_fail(c, EM_ERR_BACKEND, "%s (plugin %s): %s", what, pl->name, msg);
    return EM_FAIL(c, EM_ERR_BACKEND, what, "plugin %s: %s", pl->name, msg);
}

em_status pj_missing(em_ctx *c, const pj_plugin *pl, const char *fn, bool in_op) {
    if (in_op)
        return em_op_fail(c, EM_ERR_UNSUPPORTED, "plugin %s (PJRT API %d.%d) has no %s", pl->name,
                          pl->major, pl->minor, fn);
    return EM_FAIL(c, EM_ERR_UNSUPPORTED, "pjrt", "plugin %s (PJRT API %d.%d) has no %s",
                   pl->name, pl->major, pl->minor, fn);
}

/* ---- search ---- */

static bool is_file(const char *p) {
    struct stat st;
    return p && *p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static void note_tried(char *tried, size_t n, const char *what) {
    size_t u = strlen(tried);
    if (u + 4 < n) snprintf(tried + u, n - u, "%s%s", u ? "; " : "", what);
}

/* Package-relative locations of a name's plugin, most specific first. */
static const char *const *package_paths(const char *name) {
    static const char *const xla[] = {"xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so",
                                      "lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so", NULL};
    static const char *const cuda[] = {"xla_plugins/xla_cuda13_pjrt/xla_cuda13_pjrt.so",
                                       "xla_plugins/xla_cuda_pjrt/xla_cuda_pjrt.so",
                                       "jax_plugins/xla_cuda13/xla_cuda_plugin.so",
                                       "jax_plugins/xla_cuda12/xla_cuda_plugin.so", NULL};
    static const char *const tpu[] = {"libtpu/libtpu.so", NULL};
    static const char *const none[] = {NULL};
    if (!strcmp(name, "xla")) return xla;
    if (!strcmp(name, "cuda")) return cuda;
    if (!strcmp(name, "tpu")) return tpu;
    return none;
}

/* Site-packages folders, glob patterns over the usual Python prefixes. */
static int site_dirs(char dirs[][1024], int max) {
    const char *home = getenv("HOME");
    const char *venv = getenv("VIRTUAL_ENV"), *conda = getenv("CONDA_PREFIX");
    char pats[8][1024];
    int np = 0;
    if (venv && *venv) snprintf(pats[np++], 1024, "%s/lib/python3*/site-packages", venv);
    if (conda && *conda) snprintf(pats[np++], 1024, "%s/lib/python3*/site-packages", conda);
    if (home && *home) {
        snprintf(pats[np++], 1024, "%s/.local/lib/python3*/site-packages", home);
        snprintf(pats[np++], 1024, "%s/.pyenv/versions/*/lib/python3*/site-packages", home);
    }
    snprintf(pats[np++], 1024, "/usr/local/lib/python3*/site-packages");
    snprintf(pats[np++], 1024, "/usr/local/lib/python3*/dist-packages");
    snprintf(pats[np++], 1024, "/usr/lib/python3/dist-packages");
    int n = 0;
    for (int i = 0; i < np && n < max; i++) {
        glob_t g;
        if (glob(pats[i], 0, NULL, &g) == 0) {
            for (size_t k = 0; k < g.gl_pathc && n < max; k++)
                snprintf(dirs[n++], 1024, "%s", g.gl_pathv[k]);
        } else if (n < max) {
            snprintf(dirs[n++], 1024, "%s", pats[i]); /* reported as tried */
        }
        globfree(&g);
    }
    return n;
}

/* Finds the plugin file for `name`; writes it to out. Every candidate goes into `tried`. */
static bool find_plugin(const char *name, char *out, size_t out_n, char *tried, size_t tried_n) {
    char var[64];
    snprintf(var, sizeof var, "EMBER_PJRT_%s_PLUGIN", name);
    for (char *p = var + 11; *p; p++)
        if (*p >= 'a' && *p <= 'z') *p = (char)(*p - 'a' + 'A');
    const char *env = getenv(var);
    char note[1200];
    if (env && *env) {
        if (is_file(env)) {
            snprintf(out, out_n, "%s", env);
            return true;
        }
        snprintf(note, sizeof note, "$%s=%s (not a file)", var, env);
        note_tried(tried, tried_n, note);
    } else {
        snprintf(note, sizeof note, "$%s (unset)", var);
        note_tried(tried, tried_n, note);
    }
    if (!strcmp(name, "tpu")) {
        const char *t = getenv("TPU_LIBRARY_PATH");
        if (t && *t && is_file(t)) {
            snprintf(out, out_n, "%s", t);
            return true;
        }
        note_tried(tried, tried_n, "$TPU_LIBRARY_PATH");
    }
    const char *const *rel = package_paths(name);
    if (!rel[0]) return false;
    static char dirs[32][1024];
    static pthread_mutex_t dirs_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&dirs_lock);
    int nd = site_dirs(dirs, 32);
    bool found = false;
    for (int i = 0; i < nd && !found; i++)
        for (int k = 0; rel[k] && !found; k++) {
            snprintf(note, sizeof note, "%s/%s", dirs[i], rel[k]);
            if (is_file(note)) {
                snprintf(out, out_n, "%s", note);
                found = true;
            }
        }
    if (!found) {
        size_t u = strlen(tried);
        if (u + 4 < tried_n) {
            int k = snprintf(tried + u, tried_n - u, "%s", u ? "; " : "");
            for (int r = 0; rel[r] && k > 0; r++)
                k += snprintf(tried + u + k, tried_n - u - (size_t)k, "%s%s", r ? " or " : "", rel[r]);
            k += snprintf(tried + u + k, tried_n - u - (size_t)k, " in");
            for (int i = 0; i < nd; i++)
                k += snprintf(tried + u + k, tried_n - u - (size_t)k, "%s %s", i ? "," : "",
                              dirs[i]);
        }
    }
    pthread_mutex_unlock(&dirs_lock);
    return found;
}

/* ---- loading ---- */

static void attr_copy(const PJRT_NamedValue *v, char *out, size_t n) {
    if (v->type == PJ_NV_STRING)
        snprintf(out, n, "%.*s", (int)v->value_size, v->string_value);
    else if (v->type == PJ_NV_INT64)
        snprintf(out, n, "%lld", (long long)v->int64_value);
    else if (v->type == PJ_NV_INT64_LIST) {
        size_t u = 0;
        out[0] = 0;
        for (size_t i = 0; i < v->value_size && u < n; i++) {
            int k = snprintf(out + u, n - u, "%s%lld", i ? "." : "",
                             (long long)v->int64_array_value[i]);
            if (k < 0) break;
            u += (size_t)k;
        }
    }
}

em_status pj_plugin_load(em_ctx *c, pj_plugin *pl) {
    /* a library already open under another name (tpu:0 and tpu-aot:v6e:2x4 share libtpu):
     * one dlopen, one PJRT_Plugin_Initialize */
    for (int i = 0; i < n_plugins; i++)
        if (!strcmp(plugins[i]->path, pl->path) && plugins[i]->api) {
            const pj_plugin *o = plugins[i];
            pl->dl = o->dl;
            pl->api = o->api;
            pl->major = o->major;
            pl->minor = o->minor;
            memcpy(pl->xla_version, o->xla_version, sizeof pl->xla_version);
            memcpy(pl->shlo_current, o->shlo_current, sizeof pl->shlo_current);
            memcpy(pl->shlo_minimum, o->shlo_minimum, sizeof pl->shlo_minimum);
            return EM_OK;
        }
    dlerror();
    pl->dl = dlopen(pl->path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!pl->dl) {
        const char *e = dlerror();
        return EM_FAIL(c, EM_ERR_DEVICE, "pjrt", "cannot load %s: %s", pl->path, e ? e : "?");
    }
    const PJRT_Api *(*get)(void) = (const PJRT_Api *(*)(void))dlsym(pl->dl, "GetPjrtApi");
    if (!get)
        return EM_FAIL(c, EM_ERR_DEVICE, "pjrt", "%s has no GetPjrtApi: not a PJRT plugin",
                       pl->path);
    const PJRT_Api *api = get();
    if (!api || api->struct_size < offsetof(PJRT_Api, PJRT_Plugin_Attributes))
        return EM_FAIL(c, EM_ERR_DEVICE, "pjrt", "%s returned no usable PJRT_Api (size %zu)",
                       pl->path, api ? api->struct_size : (size_t)0);
    pl->api = api;
    pl->major = api->pjrt_api_version.major_version;
    pl->minor = api->pjrt_api_version.minor_version;
    if (pl->major != PJ_API_MAJOR)
        return EM_FAIL(c, EM_ERR_DEVICE, "pjrt",
                       "%s implements PJRT C API %d.%d; Ember speaks major version %d",
                       pl->path, pl->major, pl->minor, PJ_API_MAJOR);
    /* everything Ember calls must exist in this plugin's table */
    struct {
        size_t off;
        const char *name;
    } need[] = {
#define NEED(f) {offsetof(PJRT_Api, f), #f}
        NEED(PJRT_Error_Destroy),          NEED(PJRT_Error_Message),
        NEED(PJRT_Plugin_Initialize),      NEED(PJRT_Event_Destroy),
        NEED(PJRT_Event_Await),            NEED(PJRT_Client_Create),
        NEED(PJRT_Client_PlatformName),    NEED(PJRT_Client_AddressableDevices),
        NEED(PJRT_Client_Compile),         NEED(PJRT_Client_BufferFromHostBuffer),
        NEED(PJRT_Device_GetDescription),  NEED(PJRT_DeviceDescription_Kind),
        NEED(PJRT_LoadedExecutable_Destroy), NEED(PJRT_LoadedExecutable_Execute),
        NEED(PJRT_Buffer_Destroy),         NEED(PJRT_Buffer_ToHostBuffer),
#undef NEED
    };
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
        const void *const *slot = (const void *const *)((const char *)api + need[i].off);
        if (need[i].off + sizeof(void *) > api->struct_size || !*slot)
            return EM_FAIL(c, EM_ERR_DEVICE, "pjrt",
                           "%s (PJRT API %d.%d, table of %zu bytes) lacks %s", pl->path,
                           pl->major, pl->minor, api->struct_size, need[i].name);
    }
    PJRT_Plugin_Initialize_Args ia;
    memset(&ia, 0, sizeof ia);
    ia.struct_size = PJ_SIZE(PJRT_Plugin_Initialize_Args, extension_start);
    if (pj_check(c, pl, api->PJRT_Plugin_Initialize(&ia), false, "pjrt_plugin_initialize"))
        return EM_ERR_BACKEND;
    if (PJ_HAS(pl, PJRT_Plugin_Attributes)) {
        PJRT_Plugin_Attributes_Args aa;
        memset(&aa, 0, sizeof aa);
        aa.struct_size = PJ_SIZE(PJRT_Plugin_Attributes_Args, num_attributes);
        PJRT_Error *e = api->PJRT_Plugin_Attributes(&aa);
        if (e) {
            pj_error_free(pl, e);
        } else {
            for (size_t i = 0; i < aa.num_attributes; i++) {
                const PJRT_NamedValue *v = &aa.attributes[i];
                char key[64];
                snprintf(key, sizeof key, "%.*s", (int)v->name_size, v->name);
                if (!strcmp(key, "xla_version"))
                    attr_copy(v, pl->xla_version, sizeof pl->xla_version);
                else if (!strcmp(key, "stablehlo_current_version"))
                    attr_copy(v, pl->shlo_current, sizeof pl->shlo_current);
                else if (!strcmp(key, "stablehlo_minimum_version"))
                    attr_copy(v, pl->shlo_minimum, sizeof pl->shlo_minimum);
            }
        }
    }
    return EM_OK;
}

/* Parses EMBER_PJRT_OPTIONS ("a=1,b=true,c=x") into opts (strings point into buf). */
static int env_options(char *buf, size_t n, em_pjrt_option *opts, int max) {
    const char *e = getenv("EMBER_PJRT_OPTIONS");
    if (!e || !*e) return 0;
    snprintf(buf, n, "%s", e);
    int k = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok && k < max; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        *eq = 0;
        em_pjrt_option *o = &opts[k++];
        memset(o, 0, sizeof *o);
        o->name = tok;
        const char *v = eq + 1;
        char *end;
        long long iv = strtoll(v, &end, 10);
        if (*v && !*end) {
            o->type = EM_PJRT_OPT_INT;
            o->i = iv;
            continue;
        }
        double fv = strtod(v, &end);
        if (*v && !*end) {
            o->type = EM_PJRT_OPT_FLOAT;
            o->f = fv;
        } else if (!strcmp(v, "true") || !strcmp(v, "false")) {
            o->type = EM_PJRT_OPT_BOOL;
            o->b = v[0] == 't';
        } else {
            o->type = EM_PJRT_OPT_STRING;
            o->s = v;
        }
    }
    return k;
}

/* name: the plugin's device name prefix; lib: the name its library is searched under ("tpu"
 * for "tpu-aot:v6e:2x4"); topology: a compile-only plugin's slice, or NULL for a client. */
static pj_plugin *open_locked(em_ctx *c, const char *name, const char *lib, const char *topology,
                              const char *path, const em_pjrt_option *opts, int n_opts,
                              char *tried, size_t tried_n) {
    for (int i = 0; i < n_plugins; i++)
        if (!strcmp(plugins[i]->name, name)) return plugins[i];
    if (n_plugins == PJ_MAX_PLUGINS) {
        EM_FAIL(c, EM_ERR_DEVICE, "pjrt", "too many PJRT plugins open (%d)", PJ_MAX_PLUGINS);
        return NULL;
    }
    char file[1024];
    if (path && *path) {
        if (!is_file(path)) {
            EM_FAIL(c, EM_ERR_NOT_FOUND, "pjrt", "PJRT plugin %s does not exist", path);
            return NULL;
        }
        snprintf(file, sizeof file, "%s", path);
    } else if (!find_plugin(lib, file, sizeof file, tried, tried_n)) {
        return NULL; /* the caller reports what was tried */
    }
    pj_plugin *pl = calloc(1, sizeof *pl);
    if (!pl) {
        EM_FAIL(c, EM_ERR_OOM, "pjrt", "out of memory");
        return NULL;
    }
    snprintf(pl->name, sizeof pl->name, "%s", name);
    snprintf(pl->path, sizeof pl->path, "%s", file);
    const char *lc = getenv("EMBER_LOG_COMPILES");
    pl->log_compiles = lc && *lc && strcmp(lc, "0");
    char optbuf[1024];
    em_pjrt_option envo[16];
    if (!opts) {
        n_opts = env_options(optbuf, sizeof optbuf, envo, 16);
        opts = envo;
    }
    if (topology) {
        pl->aot = true;
        snprintf(pl->topology_name, sizeof pl->topology_name, "%s", topology);
        pj_aot_env(lib);
    }
    if (pj_plugin_load(c, pl) ||
        (topology ? pj_aot_create(c, pl) : pj_client_create(c, pl, opts, n_opts))) {
        /* the library stays mapped (RTLD_NODELETE); the record goes */
        free(pl->devices);
        free(pl);
        return NULL;
    }
    /* its kernels join the registry once the plugin is kept (the registry keeps the backend) */
    char kind[32];
    snprintf(kind, sizeof kind, "pjrt:%s", pl->platform);
    em_kreg_attach(&pl->be, kind);
    plugins[n_plugins++] = pl;
    return pl;
}

pj_plugin *pj_plugin_get(em_ctx *c, const char *name, const char *path, char *tried,
                         size_t tried_n) {
    pthread_mutex_lock(&plugins_lock);
    pj_plugin *pl = open_locked(c, name, name, NULL, path, NULL, 0, tried, tried_n);
    pthread_mutex_unlock(&plugins_lock);
    return pl;
}

int em_pjrt_open(em_ctx *c, const char *name, const char *path, const em_pjrt_option *opts,
                 int n_opts) {
    if (!c) return -1;
    if (c->err.status) return -1;
    if (!name || !*name || strchr(name, ':')) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, "pjrt_open", "invalid device name prefix '%s'",
                name ? name : "(null)");
        return -1;
    }
    char tried[2048] = "";
    pthread_mutex_lock(&plugins_lock);
    pj_plugin *pl = open_locked(c, name, name, NULL, path, opts, n_opts, tried, sizeof tried);
    pthread_mutex_unlock(&plugins_lock);
    if (!pl && !c->err.status)
        EM_FAIL(c, EM_ERR_NOT_FOUND, "pjrt_open", "no PJRT plugin for '%s'; tried: %s", name,
                tried);
    return pl ? pl->n_devices : -1;
}

/* Whether this host has a TPU: a PCI device of Google's vendor id, as JAX checks before it
 * loads libtpu. Without one, creating libtpu's client asks the cloud metadata server about the
 * host for minutes before it fails; a clear error at once is better. */
static bool tpu_present(void) {
    glob_t g;
    bool found = false;
    if (glob("/sys/bus/pci/devices/*/vendor", 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc && !found; i++) {
            FILE *f = fopen(g.gl_pathv[i], "r");
            char v[16] = "";
            if (f) {
                if (!fgets(v, sizeof v, f)) v[0] = 0;
                fclose(f);
            }
            found = !strncmp(v, "0x1ae0", 6);
        }
    }
    globfree(&g);
    const char *force = getenv("EMBER_TPU_ASSUME_PRESENT");
    return found || (force && !strcmp(force, "1"));
}

/* The plugins found by their name (package_paths, the EMBER_PJRT_* variables). */
static const char *const named_plugins[] = {"xla", "cuda", "tpu", NULL};
/* Every device-name prefix this backend opens without em_pjrt_open (core's registry asks it for
 * them): the named plugins, the compile-only topologies (aot.c) and the explicit-path form. */
static const char *const pjrt_prefixes[] = {"xla", "cuda", "tpu", "tpu-aot", "cuda-aot", "pjrt:",
                                            NULL};

/* "xla", "xla:1", "cuda", "tpu:0", "tpu-aot:v6e:2x4[:N]", "pjrt:/path/x.so" (devices
 * "pjrtN:0..") */
static em_device *pjrt_open(em_ctx *c, const char *name, char *tried, size_t tried_n) {
    char prefix[64];
    int index = 0;
    const char *path = NULL;
    const char *topo = NULL;
    size_t topo_len = 0;
    if (pj_aot_parse(name, prefix, sizeof prefix, &topo, &topo_len, &index)) {
        char t[48], lib[16];
        if (topo_len >= sizeof t) {
            EM_FAIL(c, EM_ERR_DEVICE, "device_get", "topology name of '%s' is too long", name);
            return NULL;
        }
        memcpy(t, topo, topo_len);
        t[topo_len] = 0;
        snprintf(lib, sizeof lib, "%.*s", (int)(strchr(prefix, '-') - prefix), prefix);
        pthread_mutex_lock(&plugins_lock);
        pj_plugin *pl = open_locked(c, prefix, lib, t, NULL, NULL, 0, tried, tried_n);
        pthread_mutex_unlock(&plugins_lock);
        if (!pl) {
            if (!c->err.status)
                EM_FAIL(c, EM_ERR_NOT_FOUND, "device_get",
                        "%s needs the %s PJRT plugin (pip install %s); tried: %s", name, lib,
                        strcmp(lib, "tpu") ? "jax-cuda13-pjrt" : "libtpu", tried);
            return NULL;
        }
        if (index >= pl->n_devices) {
            EM_FAIL(c, EM_ERR_DEVICE, "device_get",
                    "topology %s has %d device(s); there is no device %d", t, pl->n_devices,
                    index);
            return NULL;
        }
        return pl->devices[index];
    }
    if (!strncmp(name, "pjrt:", 5)) {
        path = name + 5;
        /* one prefix per distinct path */
        pthread_mutex_lock(&plugins_lock);
        int found = -1;
        for (int i = 0; i < n_plugins; i++)
            if (!strcmp(plugins[i]->path, path)) found = i;
        snprintf(prefix, sizeof prefix, "pjrt%d", found >= 0 ? found : n_plugins);
        if (found >= 0) snprintf(prefix, sizeof prefix, "%s", plugins[found]->name);
        pthread_mutex_unlock(&plugins_lock);
    } else {
        const char *colon = strchr(name, ':');
        size_t plen = colon ? (size_t)(colon - name) : strlen(name);
        if (plen == 0 || plen >= sizeof prefix) return NULL;
        memcpy(prefix, name, plen);
        prefix[plen] = 0;
        if (colon) {
            char *end;
            long v = strtol(colon + 1, &end, 10);
            if (!colon[1] || *end || v < 0) return NULL;
            index = (int)v;
        }
        if (!strcmp(prefix, "tpu") && !tpu_present()) {
            bool open = false;
            pthread_mutex_lock(&plugins_lock);
            for (int i = 0; i < n_plugins; i++) open |= !strcmp(plugins[i]->name, "tpu");
            pthread_mutex_unlock(&plugins_lock);
            if (!open) {
                EM_FAIL(c, EM_ERR_DEVICE, "device_get",
                        "no device named '%s': this host has no TPU (no PCI device of vendor "
                        "0x1ae0; EMBER_TPU_ASSUME_PRESENT=1 skips the check); to compile for one "
                        "without it use a compile-only device such as tpu-aot:v6e:2x4",
                        name);
                return NULL;
            }
        }
        bool known = false;
        for (const char *const *p = named_plugins; *p; p++) known |= !strcmp(*p, prefix);
        if (!known) {
            /* a prefix opened before through em_pjrt_open */
            pthread_mutex_lock(&plugins_lock);
            for (int i = 0; i < n_plugins; i++) known |= !strcmp(plugins[i]->name, prefix);
            pthread_mutex_unlock(&plugins_lock);
            if (!known) return NULL;
        }
    }
    pj_plugin *pl = pj_plugin_get(c, prefix, path, tried, tried_n);
    if (!pl) return NULL;
    if (index >= pl->n_devices) {
        EM_FAIL(c, EM_ERR_DEVICE, "device_get", "%s has %d device(s); there is no %s:%d",
                pl->path, pl->n_devices, prefix, index);
        return NULL;
    }
    return pl->devices[index];
}

const em_backend_reg em_pjrt_backend_reg = {
    .struct_size = sizeof(em_backend_reg),
    .name = "pjrt",
    .prefixes = pjrt_prefixes,
    .open = pjrt_open,
};

/* ---- public queries ---- */

static const pj_plugin *plugin_of(const em_device *d) {
    if (!d || !d->be || !d->be->platform) return NULL;
    pthread_mutex_lock(&plugins_lock);
    const pj_plugin *r = NULL;
    for (int i = 0; i < n_plugins; i++)
        if (d->be == &plugins[i]->be) r = plugins[i];
    pthread_mutex_unlock(&plugins_lock);
    return r;
}

bool em_device_is_pjrt(const em_device *d) { return plugin_of(d) != NULL; }

bool em_device_is_compile_only(const em_device *d) {
    const pj_plugin *pl = plugin_of(d);
    return pl && pl->aot;
}

int em_pjrt_reports(const em_device *d, int (*fn)(const em_pjrt_program_report *r, void *user),
                    void *user) {
    pj_plugin *pl = (pj_plugin *)plugin_of(d);
    if (!pl || !fn) return -1;
    /* a snapshot of the entries (they live as long as the plugin), visited without the lock */
    pthread_mutex_lock(&pl->cache.lock);
    size_t n = 0, cap = pl->cache.cap;
    pj_exec **list = malloc((pl->cache.len ? pl->cache.len : 1) * sizeof *list);
    for (size_t i = 0; list && i < cap; i++)
        if (pl->cache.slots[i]) list[n++] = pl->cache.slots[i];
    pthread_mutex_unlock(&pl->cache.lock);
    if (!list) return -1;
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        k++;
        if (fn(pj_exec_report(pl, list[i]), user)) break;
    }
    free(list);
    return k;
}

em_status em_pjrt_projection_get(const em_device *d, em_pjrt_projection *out) {
    pj_plugin *pl = (pj_plugin *)plugin_of(d);
    if (!pl || !pl->aot || !out) return EM_ERR_INVALID_ARG;
    pthread_mutex_lock(&pl->cache.lock);
    *out = pl->proj;
    pthread_mutex_unlock(&pl->cache.lock);
    out->resident_bytes = atomic_load(&((pj_dev *)d->impl)->resident);
    return EM_OK;
}

em_status em_pjrt_projection_reset(const em_device *d) {
    pj_plugin *pl = (pj_plugin *)plugin_of(d);
    if (!pl || !pl->aot) return EM_ERR_INVALID_ARG;
    pthread_mutex_lock(&pl->cache.lock);
    memset(&pl->proj, 0, sizeof pl->proj);
    pthread_mutex_unlock(&pl->cache.lock);
    return EM_OK;
}

em_status em_pjrt_cache_stats_get(const em_device *d, em_pjrt_cache_stats *out) {
    pj_plugin *pl = (pj_plugin *)plugin_of(d);
    if (!pl || !out) return EM_ERR_INVALID_ARG;
    pthread_mutex_lock(&pl->cache.lock);
    *out = pl->cache.stats;
    out->entries = (int64_t)pl->cache.len;
    pthread_mutex_unlock(&pl->cache.lock);
    return EM_OK;
}

em_status em_pjrt_plugin_info_get(const em_device *d, em_pjrt_plugin_info *out) {
    const pj_plugin *pl = plugin_of(d);
    if (!pl || !out) return EM_ERR_INVALID_ARG;
    memset(out, 0, sizeof *out);
    snprintf(out->path, sizeof out->path, "%s", pl->path);
    out->api_major = pl->major;
    out->api_minor = pl->minor;
    snprintf(out->platform, sizeof out->platform, "%s", pl->platform);
    snprintf(out->platform_version, sizeof out->platform_version, "%s", pl->platform_version);
    snprintf(out->xla_version, sizeof out->xla_version, "%s", pl->xla_version);
    snprintf(out->stablehlo_current, sizeof out->stablehlo_current, "%s", pl->shlo_current);
    snprintf(out->stablehlo_minimum, sizeof out->stablehlo_minimum, "%s", pl->shlo_minimum);
    out->n_devices = pl->n_devices;
    return EM_OK;
}

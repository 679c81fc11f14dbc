/* The device registry: devices are created once and live until process exit. */
#include <stdio.h>
#include <string.h>

#include "core/tensor_impl.h"

#define EM_MAX_DEVICES 64

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static em_device *registry[EM_MAX_DEVICES];
static int registry_len;

em_device *em_device_register(em_device *d) {
    pthread_mutex_lock(&registry_lock);
    em_device *r = NULL;
    if (registry_len < EM_MAX_DEVICES) {
        registry[registry_len++] = d;
        r = d;
    }
    pthread_mutex_unlock(&registry_lock);
    return r;
}

int em_device_count(void) {
    em_device_host(); /* the host is always there */
    pthread_mutex_lock(&registry_lock);
    int n = registry_len;
    pthread_mutex_unlock(&registry_lock);
    return n;
}

em_device *em_device_at(int i) {
    em_device_host();
    pthread_mutex_lock(&registry_lock);
    em_device *d = i >= 0 && i < registry_len ? registry[i] : NULL;
    pthread_mutex_unlock(&registry_lock);
    return d;
}

em_device *em_device_get(em_ctx *c, const char *name) {
    if (!c || c->err.status) return NULL;
    if (!name || !*name) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, "device_get", "empty device name");
        return NULL;
    }
    pthread_mutex_lock(&registry_lock);
    for (int i = 0; i < registry_len; i++)
        if (!strcmp(registry[i]->name, name)) {
            em_device *d = registry[i];
            pthread_mutex_unlock(&registry_lock);
            return d;
        }
    pthread_mutex_unlock(&registry_lock);
    /* not open yet: the backend whose prefix the name has opens it (core/backend_registry.c) */
    char tried[1024] = "";
    em_device *d = em_backend_open(c, name, tried, sizeof tried);
    if (d || c->err.status) return d;
    EM_FAIL(c, EM_ERR_DEVICE, "device_get",
            "no device named '%s' (available: %s%s%s)", name, em_device_host()->name,
            *tried ? "; tried: " : "", tried);
    return NULL;
}

const char *em_device_name(const em_device *d) { return d ? d->name : "none"; }

em_status em_device_info_get(const em_device *d, em_device_info *out) {
    if (!d || !out) return EM_ERR_INVALID_ARG;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", d->name);
    snprintf(out->platform, sizeof out->platform, "%s", d->be->platform);
    out->index = d->index;
    out->memory_free = -1;
    return d->be->query ? d->be->query(d, out) : EM_OK;
}

em_status em_device_sync(em_ctx *c, em_device *d) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (c->err.status) return c->err.status;
    if (!d) return EM_FAIL(c, EM_ERR_INVALID_ARG, "device_sync", "device is NULL");
    return d->be->sync ? d->be->sync(c, d) : EM_OK;
}

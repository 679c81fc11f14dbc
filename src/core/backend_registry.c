/*
 * The backend registry: which backends exist, which device names each one opens, and which one
 * provides the host's device. Backends register here (src/backends/registry.c lists the
 * built-in ones), so core asks for devices by name without naming a backend.
 */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "core/tensor_impl.h"

#define EM_MAX_BACKENDS 16

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const em_backend_reg *backends[EM_MAX_BACKENDS];
static int n_backends;

bool em_backend_register(const em_backend_reg *r) {
    if (r->struct_size != sizeof *r) {
        fprintf(stderr, "ember: backend %s not registered: its entry has %zu bytes, not %zu\n",
                r->name, r->struct_size, sizeof *r);
        return false;
    }
    pthread_mutex_lock(&lock);
    bool ok = n_backends < EM_MAX_BACKENDS;
    if (ok) backends[n_backends++] = r;
    pthread_mutex_unlock(&lock);
    if (!ok) fprintf(stderr, "ember: backend %s not registered: the registry is full\n", r->name);
    return ok;
}

/* A snapshot of the entries (they are never removed, so the pointers stay valid). */
static int snapshot(const em_backend_reg **out) {
    pthread_mutex_lock(&lock);
    int n = n_backends;
    memcpy(out, backends, (size_t)n * sizeof *out);
    pthread_mutex_unlock(&lock);
    return n;
}

em_device *em_device_host(void) {
    const em_backend_reg *regs[EM_MAX_BACKENDS];
    int n = snapshot(regs);
    for (int i = 0; i < n; i++)
        if (regs[i]->host_device) return regs[i]->host_device();
    /* the library was linked without its backends (a static link that dropped
     * backends/registry.c: link with -u em_backends_builtin, as ember.pc and CMake do) */
    assert(!"no backend with a host device is registered");
    return NULL;
}

static bool prefix_matches(const char *prefix, const char *name) {
    size_t n = strlen(prefix);
    if (strncmp(prefix, name, n)) return false;
    return (n && prefix[n - 1] == ':') || name[n] == 0 || name[n] == ':';
}

em_device *em_backend_open(em_ctx *c, const char *name, char *tried, size_t tried_n) {
    const em_backend_reg *regs[EM_MAX_BACKENDS];
    int n = snapshot(regs);
    for (int i = 0; i < n; i++)
        for (const char *const *p = regs[i]->prefixes; p && *p; p++)
            if (prefix_matches(*p, name))
                return regs[i]->open ? regs[i]->open(c, name, tried, tried_n) : NULL;
    for (int i = 0; i < n; i++) {
        if (!regs[i]->open) continue;
        em_device *d = regs[i]->open(c, name, tried, tried_n);
        if (d || c->err.status) return d;
    }
    return NULL;
}

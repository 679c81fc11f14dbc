/*
 * Loading a resolved variant (khub.h): dlopen its library, check the ABI, register every
 * implementation the metadata declares in the kernel registry, self-test each. Libraries stay
 * loaded until the process exits (the registry keeps their function pointers).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_hub/khub.h"

#define OP "kernels"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char loaded[64][96]; /* names of loaded packages */
static int n_loaded;

static bool is_loaded(const char *name) {
    for (int i = 0; i < n_loaded; i++)
        if (!strcmp(loaded[i], name)) return true;
    return false;
}

static const khub_op_decl *declared(const khub_meta *m, em_op_id op) {
    for (int i = 0; i < m->n_ops; i++)
        if (m->ops[i].op == op) return &m->ops[i];
    return NULL;
}

/* Marks a package loaded; false when it already was (another thread was faster) or the table is
 * full (nothing new is registered then). */
static bool mark_loaded(const char *name) {
    pthread_mutex_lock(&lock);
    bool ok = !is_loaded(name) && n_loaded < 64;
    if (ok) snprintf(loaded[n_loaded++], sizeof loaded[0], "%s", name);
    pthread_mutex_unlock(&lock);
    return ok;
}

/* An ember-stablehlo variant: its snippets join the registry for PJRT kinds. They are not
 * self-tested here (no PJRT device needs to be open); one that does not compile is disabled at
 * its first call (pj_snippet_run). */
static em_status load_stablehlo(em_ctx *c, const khub_resolution *r) {
    em_kimpl *ks;
    int n;
    em_status st = khub_shlo_impls(c, r, &ks, &n);
    if (st != EM_OK) return st;
    if (!mark_loaded(r->c[r->chosen].meta.name)) return EM_OK; /* ks stays: the snippets too */
    for (int i = 0; i < n; i++) em_kreg_register(&ks[i]);
    return EM_OK;
}

em_status khub_load(em_ctx *c, const khub_resolution *r, bool self_test) {
    const khub_candidate *k = &r->c[r->chosen];
    const khub_meta *m = &k->meta;
    pthread_mutex_lock(&lock);
    bool already = is_loaded(m->name);
    pthread_mutex_unlock(&lock);
    if (already) return EM_OK;
    if (!strcmp(k->v.backend, "stablehlo")) return load_stablehlo(c, r);
    char path[2048];
    snprintf(path, sizeof path, "%s/build/%s/%s", r->root, k->v.name, m->library);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return em_ctx_fail(c, EM_ERR_IO, OP, "cannot load %s: %s", path, dlerror());
    const uint32_t *abi = dlsym(h, "ember_kernel_abi_version");
    ember_kernel_library_get_fn get =
        (ember_kernel_library_get_fn)(uintptr_t)dlsym(h, "ember_kernel_library_get");
    em_status st = EM_OK;
    const ember_kernel_library *lib = NULL;
    if (!abi || !get) {
        st = em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s does not export %s (see ember/kernel_abi.h)",
                         path, !abi ? "ember_kernel_abi_version" : "ember_kernel_library_get");
    } else if (*abi != EMBER_KERNEL_ABI_VERSION) {
        st = em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP, "%s: ABI %u, Ember speaks %u", path, *abi,
                         EMBER_KERNEL_ABI_VERSION);
    } else if (!(lib = get()) || lib->abi_version != EMBER_KERNEL_ABI_VERSION ||
               lib->struct_size < sizeof *lib || lib->n_impls < 0 ||
               (lib->n_impls && !lib->impls)) {
        st = em_ctx_fail(c, EM_ERR_FORMAT, OP,
                         "%s: ember_kernel_library_get returned no valid library (ABI %u)", path,
                         lib ? lib->abi_version : 0);
    }
    /* check every implementation before registering any: all or nothing */
    for (int i = 0; st == EM_OK && i < lib->n_impls; i++) {
        const ember_kernel_impl *im = &lib->impls[i];
        const em_op_def *def = im->op ? em_op_find(im->op) : NULL;
        if (im->struct_size < sizeof *im || !def || !im->run || !im->name)
            st = em_ctx_fail(c, EM_ERR_FORMAT, OP,
                             "%s: implementation %d (%s) is malformed or names an op Ember "
                             "does not have", path, i, im->name ? im->name : "?");
        else if (!declared(m, def->id))
            st = em_ctx_fail(c, EM_ERR_FORMAT, OP,
                             "%s: implementation %s is for op %s, which metadata.json does not "
                             "declare", path, im->name, def->name);
    }
    if (st != EM_OK) {
        dlclose(h);
        return st;
    }
    em_kimpl *ks = calloc((size_t)lib->n_impls + 1, sizeof *ks);
    if (!ks) {
        dlclose(h);
        return em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    }
    if (!mark_loaded(m->name)) {
        free(ks);
        return EM_OK;
    }
    for (int i = 0; i < lib->n_impls; i++) {
        const ember_kernel_impl *im = &lib->impls[i];
        const khub_op_decl *d = declared(m, em_op_find(im->op)->id);
        em_kimpl *e = &ks[i];
        snprintf(e->name, sizeof e->name, "%s", im->name);
        snprintf(e->source, sizeof e->source, "%s v%d (%s)", m->name, m->version, k->v.name);
        snprintf(e->kind, sizeof e->kind, "cpu");
        e->op = d->op;
        e->priority = im->priority;
        /* what both the library and metadata.json promise */
        e->dtypes = d->dtypes & im->dtypes;
        e->modes = d->modes & im->modes;
        atomic_init(&e->disabled, false);
        khub_adapter_init(e, im);
        char why[512];
        if (self_test && !khub_self_test(e, why, sizeof why)) {
            atomic_store(&e->disabled, true);
            fprintf(stderr, "ember: kernel %s for %s from %s disabled: %s; the built-in is "
                            "used\n", e->name, em_op_get(e->op)->name, e->source, why);
        }
        em_kreg_register(e);
    }
    return EM_OK;
}

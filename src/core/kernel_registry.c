/* The kernel registry (kernel_registry.h): registration under a lock, immutable snapshots. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernel_registry.h"

#define MAX_IMPLS 1024
#define MAX_ATTACHED 16

typedef struct attached {
    em_backend *be;
    char kind[32];
    em_kimpl *builtin; /* EM_OP_COUNT entries, owned */
} attached;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static em_kimpl *impls[MAX_IMPLS]; /* hub implementations, in registration order */
static int n_impls;
static attached backends[MAX_ATTACHED];
static int n_backends;
static bool packages_off; /* em_kreg_suspend_packages */
/* Replaced snapshots, kept so that a reader holding one never sees it freed (and reachable, so
 * leak checkers do not count them). */
static em_kset **retired;
static int n_retired, cap_retired;

static void (*_Atomic autoload_fn)(void);

void em_kreg_set_autoload(void (*fn)(void)) { atomic_store(&autoload_fn, fn); }

void em_kreg_autoload(void) {
    void (*fn)(void) = atomic_load(&autoload_fn);
    if (fn) fn();
}

bool em_kernel_kind_matches(const char *pkg_kind, const char *be_kind) {
    if (!strcmp(pkg_kind, be_kind)) return true;
    /* "pjrt" applies to every plugin ("pjrt:tpu", "pjrt:cuda", ...) */
    size_t n = strlen(pkg_kind);
    return !strncmp(pkg_kind, be_kind, n) && be_kind[n] == ':';
}

/* Best first: priority, then built-ins before packages of the same priority, then registration
 * order (a stable insertion sort keeps the last rule). */
static int collect(const attached *b, em_op_id op, const em_kimpl **out) {
    int n = 0;
    for (int i = 0; i < n_impls; i++)
        if (impls[i]->op == op && em_kernel_kind_matches(impls[i]->kind, b->kind))
            out[n++] = impls[i];
    if (b->builtin[op].fn) out[n++] = &b->builtin[op];
    for (int i = 1; i < n; i++) {
        const em_kimpl *k = out[i];
        bool k_builtin = k->fn != NULL;
        int j = i;
        while (j > 0 && (out[j - 1]->priority < k->priority ||
                         (out[j - 1]->priority == k->priority && k_builtin && !out[j - 1]->fn))) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = k;
    }
    return n;
}

/* Publishes the snapshot of (b, op), without the disabled implementations (nor the packages'
 * while they are suspended); called with the lock held. */
static void publish(attached *b, em_op_id op) {
    const em_kimpl *v[MAX_IMPLS + 1];
    int all = collect(b, op, v), n = 0;
    for (int i = 0; i < all; i++)
        if (!atomic_load(&v[i]->disabled) && (!packages_off || v[i] == &b->builtin[op]))
            v[n++] = v[i];
    em_kset *ks = NULL;
    if (n) {
        ks = malloc(sizeof *ks + (size_t)n * sizeof *v);
        if (!ks) {
            fprintf(stderr, "ember: out of memory updating the kernels of %s\n",
                    em_op_get(op)->name);
            return;
        }
        ks->n = n;
        memcpy(ks->v, v, (size_t)n * sizeof *v);
        const em_kimpl *k = v[0];
        ks->trivial = n == 1 && !k->supports && k->dtypes == ~(uint64_t)0 &&
                      k->modes == EM_KMODE_ALL;
    }
    const em_kset *old = atomic_exchange_explicit(&b->be->kset[op], ks, memory_order_acq_rel);
    if (!old) return;
    if (n_retired == cap_retired) {
        int cap = cap_retired ? 2 * cap_retired : 64;
        em_kset **r = realloc(retired, (size_t)cap * sizeof *r);
        if (!r) return; /* the old snapshot stays allocated, unreachable: a leak, not a crash */
        retired = r;
        cap_retired = cap;
    }
    retired[n_retired++] = (em_kset *)old;
}

void em_kreg_attach(em_backend *be, const char *kind) {
    pthread_mutex_lock(&lock);
    bool known = false;
    for (int i = 0; i < n_backends; i++) known |= backends[i].be == be;
    em_kimpl *bi = known || n_backends == MAX_ATTACHED ? NULL : calloc(EM_OP_COUNT, sizeof *bi);
    if (bi) {
        attached *b = &backends[n_backends++];
        b->be = be;
        snprintf(b->kind, sizeof b->kind, "%s", kind);
        b->builtin = bi;
        for (int op = 0; op < EM_OP_COUNT; op++) {
            em_kimpl *k = &bi[op];
            snprintf(k->name, sizeof k->name, "built-in");
            snprintf(k->source, sizeof k->source, "built-in");
            snprintf(k->kind, sizeof k->kind, "%s", kind);
            k->op = (em_op_id)op;
            k->dtypes = ~(uint64_t)0;
            k->modes = EM_KMODE_ALL;
            k->fn = be->kernels[op];
            atomic_init(&k->disabled, false);
            publish(b, (em_op_id)op);
        }
    } else if (!known) {
        fprintf(stderr, "ember: backend %s not attached to the kernel registry: out of room\n",
                kind);
    }
    pthread_mutex_unlock(&lock);
}

bool em_kreg_register(em_kimpl *impl) {
    pthread_mutex_lock(&lock);
    bool ok = n_impls < MAX_IMPLS;
    if (ok) {
        impls[n_impls++] = impl;
        for (int i = 0; i < n_backends; i++)
            if (em_kernel_kind_matches(impl->kind, backends[i].kind))
                publish(&backends[i], impl->op);
    }
    pthread_mutex_unlock(&lock);
    if (!ok) fprintf(stderr, "ember: kernel %s not registered: the registry is full\n", impl->name);
    return ok;
}

void em_kimpl_disable(em_kimpl *impl, const char *why) {
    if (atomic_exchange(&impl->disabled, true)) return;
    fprintf(stderr, "ember: kernel %s for %s from %s disabled (%s); using the next one\n",
            impl->name, em_op_get(impl->op)->name, impl->source, why);
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_backends; i++)
        if (em_kernel_kind_matches(impl->kind, backends[i].kind)) publish(&backends[i], impl->op);
    pthread_mutex_unlock(&lock);
}

void em_kreg_suspend_packages(bool off) {
    pthread_mutex_lock(&lock);
    if (packages_off != off) {
        packages_off = off;
        /* only the ops that have package implementations change (once per implementation:
         * republishing an op twice is harmless) */
        for (int i = 0; i < n_impls; i++)
            for (int k = 0; k < n_backends; k++)
                if (em_kernel_kind_matches(impls[i]->kind, backends[k].kind))
                    publish(&backends[k], impls[i]->op);
    }
    pthread_mutex_unlock(&lock);
}

int em_kreg_list(em_op_id op, const char *kind, const em_kimpl **out, int max) {
    pthread_mutex_lock(&lock);
    const em_kimpl *v[MAX_IMPLS + 1];
    int n = 0;
    for (int i = 0; i < n_backends && !n; i++)
        if (!strcmp(backends[i].kind, kind)) n = collect(&backends[i], op, v);
    if (!n) /* no such backend attached: the packages' implementations alone */
        for (int i = 0; i < n_impls; i++)
            if (impls[i]->op == op && em_kernel_kind_matches(impls[i]->kind, kind))
                v[n++] = impls[i];
    if (n > max) n = max;
    memcpy(out, v, (size_t)n * sizeof *v);
    pthread_mutex_unlock(&lock);
    return n;
}

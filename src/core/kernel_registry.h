/*
 * The kernel registry: every implementation of an op on a kind of device, the built-in ones
 * and those of kernel-hub packages (src/kernels_hub/), registered through one mechanism.
 *
 * An implementation serves one (op, device kind) for a set of dtypes (of the first input, or
 * of the first output for ops without inputs) and modes, with a priority (built-ins: 0; higher
 * wins) and an optional `supports` predicate asked on every call. A backend attaches its table
 * of built-in kernels (em_backend.kernels, filled by the backend) with em_kreg_attach: each
 * entry becomes a priority-0 implementation, then the registry publishes per op an immutable,
 * priority-sorted snapshot in em_backend.kset[op]. The eager dispatcher, the CPU program plan
 * and every other caller pick with em_kset_pick from that snapshot, so eager and compiled code
 * make the same choice.
 *
 * Thread safety: registration and attachment hold a lock and publish new snapshots with an
 * atomic store; picking reads a snapshot without a lock. Snapshots are never freed while the
 * process runs (an implementation is disabled, not removed), so a reader never sees a dangling
 * one; registrations are rare (package loads), so the memory kept is small.
 */
#ifndef EMBER_KERNEL_REGISTRY_H
#define EMBER_KERNEL_REGISTRY_H

#include <stdatomic.h>

#include "core/tensor_impl.h"

enum { EM_KMODE_INFERENCE = 1, EM_KMODE_TRAINING = 2, EM_KMODE_COMPILE = 4, EM_KMODE_ALL = 7 };

typedef struct em_kimpl em_kimpl;
struct em_kimpl {
    char name[64];    /* "built-in" or the package's implementation name */
    char source[96];  /* "built-in" or "<package> v<major> (<variant>)" */
    char kind[32];    /* device kind: "cpu", "pjrt:<platform>" or "pjrt" (any plugin) */
    em_op_id op;
    int priority;
    uint64_t dtypes; /* bit per em_dtype; ~0: all */
    unsigned modes;  /* EM_KMODE_* */
    em_kernel_fn fn; /* a built-in kernel; else run */
    em_status (*run)(const em_kimpl *self, const em_kernel_args *a);
    bool (*supports)(const em_kimpl *self, const em_kernel_args *a, unsigned mode); /* NULL: all */
    void *user;           /* for run/supports (a package's ember_kernel_impl) */
    atomic_bool disabled; /* a failed self-test or run: skipped from then on */
};

/* The implementations of one op on one backend, highest priority first. */
typedef struct em_kset {
    int n;
    bool trivial; /* one implementation that takes every call: the built-in alone */
    const em_kimpl *v[];
} em_kset;

/* Attaches a backend whose kernels[] are filled: registers them as its built-ins and publishes
 * the snapshots. `kind` names the device kind packages target ("cpu", "pjrt:tpu"). Idempotent. */
void em_kreg_attach(em_backend *be, const char *kind);

/* Registers an implementation (the registry keeps the pointer; it must live until exit) and
 * republishes the snapshots of the op on every attached backend of its kind. False when full. */
bool em_kreg_register(em_kimpl *impl);

/* Disables an implementation (its calls go to the next one) and says why on stderr. */
void em_kimpl_disable(em_kimpl *impl, const char *why);

/* Suspends (off = true) or resumes every package implementation: while suspended, every call
 * goes to the built-ins, as without the packages. For benchmarks that compare a package with
 * the built-in in one process (`ember bench moe --kernels`); not a way to unload (libraries
 * stay loaded, em_kreg_list still lists them). Each switch keeps a snapshot per op of the
 * packages (snapshots are never freed), so switch tens of times, not millions. */
void em_kreg_suspend_packages(bool off);

/* Every registered implementation of `op` for `kind` (attached built-ins included), best first,
 * as the dispatcher would order them; returns the count written (at most max). */
int em_kreg_list(em_op_id op, const char *kind, const em_kimpl **out, int max);

/* The kernel hub's loading of $EMBER_KERNELS (kernels_hub/, above core): set once before main
 * by src/backends/registry.c, run by em_ctx_create (em_kreg_autoload does nothing unset). */
void em_kreg_set_autoload(void (*fn)(void));
void em_kreg_autoload(void);

/* Whether a package's kind ("cpu", "pjrt", "pjrt:tpu") applies to a backend's kind. */
bool em_kernel_kind_matches(const char *pkg_kind, const char *be_kind);

static inline const em_kset *em_kset_get(const em_backend *be, em_op_id op) {
    return atomic_load_explicit(&be->kset[op], memory_order_acquire);
}

/* The dtype an implementation is chosen by: the first present input's, else the first output's. */
static inline em_dtype em_kargs_dtype(const em_kernel_args *a) {
    for (int i = 0; i < a->n_in; i++)
        if (a->in[i]) return a->in[i]->dtype;
    return a->n_out ? a->out[0]->dtype : EM_F32;
}

/* The best implementation that takes this call, or NULL when none does. */
static inline const em_kimpl *em_kset_pick(const em_kset *ks, const em_kernel_args *a,
                                           unsigned mode) {
    if (ks->trivial) return ks->v[0];
    uint64_t dbit = (uint64_t)1 << (unsigned)em_kargs_dtype(a);
    for (int i = 0; i < ks->n; i++) {
        const em_kimpl *k = ks->v[i];
        if (!(k->modes & mode) || !(k->dtypes & dbit) ||
            atomic_load_explicit(&k->disabled, memory_order_relaxed))
            continue;
        if (!k->supports || k->supports(k, a, mode)) return k;
    }
    return NULL;
}

static inline em_status em_kimpl_run(const em_kimpl *k, const em_kernel_args *a) {
    return k->fn ? k->fn(a) : k->run(k, a);
}

#endif

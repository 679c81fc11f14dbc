/*
 * ember/kernels.h — the kernel hub: kernels from versioned packages, chosen for this machine,
 * verified, loaded at run time, with a fallback that explains itself. (Writing a kernel:
 * ember/kernel_abi.h. Background and the package layout: docs/kernels.md.)
 *
 * A package is a folder, or a Hub repository in the Hub cache (ember/hub.h), holding
 *
 *     build/<variant>/metadata.json      name, major version, license, backend, ops, sha256s
 *     build/<variant>/lib<name>.so       the library (ember/kernel_abi.h)
 *
 * with variants named ember-abi<N>-<backend>[-<feature>]-<arch>-<os> (ember-abi1-cpu-avx2-x86_64-
 * linux, ember-abi1-cpu-avx512bf16-x86_64-linux, ember-abi1-cpu-neon-aarch64-linux, ember-abi1-
 * cuda13-sm90-x86_64-linux) or ember-stablehlo. Resolving a package accepts or rejects every
 * variant with a reason in plain words and prefers the widest instruction set accepted; loading
 * checks every file's digest (and the lock's, when a lock names the package), dlopens the
 * library, checks its ABI version, registers its implementations in the kernel registry next to
 * the built-in kernels, and self-tests each against the built-in (a failing one is disabled with
 * a message). From then on every call of an op picks the highest-priority implementation whose
 * dtypes, modes and `supports` predicate take it, the built-in last, in eager and compiled code.
 *
 * An ember-stablehlo variant holds StableHLO snippets instead of a library (a file per snippet,
 * digested like every other file): they register for PJRT devices (kind "pjrt" or
 * "pjrt:<platform>") and the op's programs on those devices, eager and compiled, call the one
 * that wins (docs/kernels.md, "StableHLO packages").
 *
 * Loading never touches the network: a Hub id resolves from the cache only (at the commit the
 * lock names, else the revision's cached ref); `em_kernels_download` fetches.
 *
 * A package spec is a folder path, or "org/name" / "org/name@<branch|tag|commit>" (default
 * branch "v1"). $EMBER_KERNELS holds specs separated by commas, loaded when the first context
 * is created; "none" turns the hub off for the process (the `--kernels none` of the CLI).
 * $EMBER_KERNELS_LOCK names the lock file (default: ./ember-kernels.lock when it exists).
 *
 * Thread safety: loading may run while other threads run ops (they see the new kernels from
 * their next call); the functions below may be called from several threads, each with its own
 * context.
 */
#ifndef EMBER_KERNELS_H
#define EMBER_KERNELS_H

#include "ember/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** How to load. Plain data; start from em_kernels_default_options(). */
typedef struct em_kernels_options {
    const char *lock_path; /* NULL: $EMBER_KERNELS_LOCK, else ./ember-kernels.lock if present;
                              "": no lock */
    int self_test;         /* 1: self-test each implementation at load (default); 0: skip */
    const char *target;    /* the kind of device to load for: "cpu" (CPU variants only), "pjrt"
                              or "pjrt:<platform>" (ember-stablehlo only); NULL: any, a CPU
                              variant before an ember-stablehlo one */
} em_kernels_options;

/** Defaults: lock from the environment, self-test on, any target. */
EM_API em_kernels_options em_kernels_default_options(void);

/**
 * Resolves and loads one package spec (see above). EM_OK when a variant was loaded (or the
 * package was already loaded). Errors, recorded in c: EM_ERR_NOT_FOUND when the spec names no
 * folder and no cached repo; EM_ERR_UNSUPPORTED when every variant was rejected (the message
 * lists each with its reason); EM_ERR_FORMAT / EM_ERR_IO for a malformed lock. Nothing is
 * registered on failure. `opts` may be NULL.
 */
EM_API em_status em_kernels_load(em_ctx *c, const char *spec, const em_kernels_options *opts);

/**
 * The resolution trace of a spec without loading it: one line per variant, "Accepted ..." or
 * "Rejected ...: <reason>", then the choice. *text is malloc'd (free with em_free) even when the
 * status says nothing was accepted; NULL only when the spec names nothing (error recorded).
 */
EM_API em_status em_kernels_explain(em_ctx *c, const char *spec, const em_kernels_options *opts,
                                    char **text);

/**
 * Per op, every implementation registered for device kind `kind` ("cpu"; NULL: "cpu"), best
 * first, marking the one that wins a plain call. Only ops with more than the built-in are
 * listed unless `all`. malloc'd text (free with em_free), NULL when out of memory.
 */
EM_API char *em_kernels_list(const char *kind, bool all);

/**
 * Resolves each spec (as loading would, without a lock) and writes the lock file: per package
 * its repo, commit and the sha256 of every file of its chosen variant. EM_OK, or the first
 * error (nothing written).
 */
EM_API em_status em_kernels_lock(em_ctx *c, const char *const *specs, int n_specs,
                                 const char *lock_path);

/**
 * Fetches a Hub package into the Hub cache (the metadata of every variant this host can run,
 * then every file of the present ones, checked against their digests) using the Hub client
 * (ember/hub.h: endpoint, token, offline from the environment). *dir (may be NULL) gets the
 * snapshot folder (free with em_free).
 */
EM_API em_status em_kernels_download(em_ctx *c, const char *spec, char **dir);

/** Loads $EMBER_KERNELS (done once by the first em_ctx_create; later calls do nothing). */
EM_API void em_kernels_autoload(void);

#ifdef __cplusplus
}
#endif
#endif

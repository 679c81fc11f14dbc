/*
 * The kernel hub's private interfaces: variant names and what this host accepts (variant.c),
 * package metadata, digests and resolution (resolve.c), loading a variant's library into the
 * kernel registry with its self-test (load.c, adapter.c), the lock file (lock.c). The public
 * face is include/ember/kernels.h (api.c).
 */
#ifndef EMBER_KHUB_H
#define EMBER_KHUB_H

#include <jansson.h>

#include "backends/pjrt/snippet.h"
#include "core/kernel_registry.h"
#include "ember/kernel_abi.h"
#include "ember/kernels.h"

/* ---- variant names (variant.c) ---------------------------------------------------------------
 * ember-abi<N>-<backend>[-<feature>]-<arch>-<os>   e.g. ember-abi1-cpu-avx2-x86_64-linux,
 *                                                       ember-abi1-cuda13-sm90-x86_64-linux
 * ember-stablehlo                                  StableHLO text any PJRT device compiles */
typedef struct khub_variant {
    char name[128];
    int abi;           /* 0 for ember-stablehlo */
    char backend[16];  /* "cpu", "cuda13", "stablehlo" */
    char feature[24];  /* "avx2", "avx512bf16", "sm90", "" */
    char arch[16];     /* "x86_64", "aarch64", "" for noarch */
    char os[16];       /* "linux", "" for noarch */
} khub_variant;

/* Parses a variant name; false (with the reason in why) when it is not of the grammar. */
bool khub_variant_parse(const char *name, khub_variant *v, char *why, size_t why_n);
/* Whether this process can run the variant; false with the reason in plain words. *rank gets
 * the preference of an accepted variant (higher first: the widest instruction set). */
/* The feature name of the CPU level this process's kernels run at ("avx2", "avx512bf16", ...):
 * ember_kernel_call.cpu_level. A static string. */
const char *khub_host_level(void);
bool khub_variant_host_ok(const khub_variant *v, int *rank, char *why, size_t why_n);
/* Whether a variant's kind of device is the target's ("": any; CPU variants rank above
 * StableHLO ones, rank 0); false with the reason. */
bool khub_variant_target_ok(const khub_variant *v, const char *target, char *why, size_t why_n);
/* The CPU variant names this host can run, best first, then ember-stablehlo (what a download
 * asks the Hub for), and their metadata files as a NULL-terminated list for em_hub_ensure. */
typedef struct khub_host_files {
    int n;
    char names[8][128];
    char files[8][160]; /* "build/<name>/metadata.json" */
    const char *opt[9];
} khub_host_files;
void khub_host_files_init(khub_host_files *h);

/* ---- resolution (resolve.c) ------------------------------------------------------------------ */
#define KHUB_MAX_FILES 32
#define KHUB_MAX_OPS 32

typedef struct khub_op_decl {
    em_op_id op;
    uint64_t dtypes;
    unsigned modes;
} khub_op_decl;

/* A StableHLO snippet of an ember-stablehlo variant (stablehlo.c): ops[op]'s function for the
 * PJRT platforms named (none: every plugin), when its `when` holds. */
#define KHUB_MAX_SNIPPETS 8
typedef struct khub_snippet {
    int op; /* index into khub_meta.ops */
    char file[128];
    int n_platforms;
    char platforms[4][24];
    int priority;
    pj_snippet_when when;
} khub_snippet;

typedef struct khub_meta {
    char name[96];
    int version; /* major */
    char license[64];
    char backend[16];
    char library[128]; /* the shared library, relative to the variant folder */
    int n_ops;
    khub_op_decl ops[KHUB_MAX_OPS];
    int n_files;
    char files[KHUB_MAX_FILES][128];   /* relative to the variant folder */
    char digests[KHUB_MAX_FILES][65];  /* sha256, lower-case hex */
    int n_snippets; /* ember-stablehlo variants: per op, "stablehlo": [...] */
    khub_snippet snippets[KHUB_MAX_SNIPPETS];
} khub_meta;

typedef struct khub_candidate {
    khub_variant v;
    bool accepted;
    int rank;
    char reason[512];
    khub_meta meta;
} khub_candidate;

#define KHUB_MAX_VARIANTS 32

/* Reads build/<variant>/metadata.json; false with the reason in why. */
bool khub_meta_read(const char *path, khub_meta *m, char *why, size_t why_n);

/* The outcome of resolving one package spec. */
typedef struct khub_resolution {
    char spec[512];
    char repo[256];   /* the Hub id, or the folder's absolute path */
    char commit[64];  /* the snapshot's commit, "local" for a folder */
    char root[1024];  /* the package folder (holding build/) */
    char target[32];  /* the device kind loaded for: "cpu", "pjrt", "pjrt:<platform>"; "": any */
    int n;
    khub_candidate c[KHUB_MAX_VARIANTS];
    int chosen; /* index into c, -1 when nothing is accepted */
} khub_resolution;

/* A lock entry: what a package must resolve to. */
typedef struct khub_lock_entry {
    char repo[256];
    char commit[64];
    int n_files;
    char files[64][192]; /* "build/<variant>/<file>" */
    char digests[64][65];
} khub_lock_entry;

typedef struct khub_lock {
    int n;
    khub_lock_entry *e;
} khub_lock;

/* Resolves a spec (a package folder, or a Hub id "org/name[@rev]" from the cache only): lists
 * its variants and accepts or rejects each (grammar, host, metadata, digests, the lock's entry
 * when `lock` names the repo). Returns EM_OK with r->chosen >= 0, or an error naming why
 * nothing was accepted (the trace stays in r). Never touches the network. */
em_status khub_resolve(em_ctx *c, const char *spec, const khub_lock *lock, khub_resolution *r);
/* The same for a target device kind (em_kernels_options.target; NULL or "": any). */
em_status khub_resolve_for(em_ctx *c, const char *spec, const char *target, const khub_lock *lock,
                           khub_resolution *r);
/* The resolution as text, one line per variant. malloc'd. */
char *khub_explain_text(const khub_resolution *r);
/* sha256 of a file as hex; false when it cannot be read. */
bool khub_file_sha256(const char *path, char hex[65]);

/* ---- StableHLO variants (stablehlo.c) ------------------------------------------------------ */
/* Reads an op's "stablehlo" list of metadata.json into m (op: the op's index in m->ops). */
bool khub_shlo_meta(json_t *list, khub_meta *m, int op, char *why, size_t why_n);
/* Checks an ember-stablehlo variant's metadata: snippets for every op, each file digested. */
bool khub_shlo_check(const khub_meta *m, char *why, size_t why_n);
/* Appends a line per snippet of m (none for a CPU variant) to *s; false when out of memory. */
bool khub_shlo_explain(const khub_meta *m, char **s);
/* Reads and verifies the snippets of the chosen ember-stablehlo variant and makes their
 * implementations (*out: calloc'd, n_out of them; registered by the caller). */
em_status khub_shlo_impls(em_ctx *c, const khub_resolution *r, em_kimpl **out, int *n_out);

/* ---- the lock file (lock.c) ---------------------------------------------------------------- */
em_status khub_lock_read(em_ctx *c, const char *path, khub_lock *out);
void khub_lock_free(khub_lock *l);
const khub_lock_entry *khub_lock_find(const khub_lock *l, const char *repo);
em_status khub_lock_write(em_ctx *c, const char *path, const khub_resolution *r, int n);

/* ---- loading (load.c, adapter.c) ------------------------------------------------------------ */
/* Loads the chosen variant of r into the registry, self-testing each implementation (a failing
 * one is disabled with a message). Appends what happened to *log (malloc'd text, may be NULL). */
em_status khub_load(em_ctx *c, const khub_resolution *r, bool self_test);
/* Fills an em_kimpl that calls a package's implementation through the ABI. */
void khub_adapter_init(em_kimpl *k, const ember_kernel_impl *impl);
/* Runs the built-in and k on a few small inputs and compares; false with the reason. */
bool khub_self_test(em_kimpl *k, char *why, size_t why_n);

/* Appends printf text to a growing malloc'd string (*s may be NULL); false when out of memory. */
bool khub_appendf(char **s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

/*
 * The PJRT backend's private interfaces: plugins (plugin.c), clients and devices (client.c),
 * buffers (buffer.c), executables and their caches (compile_cache.c), the per-op StableHLO
 * emitters (stablehlo_*.c), the kernels (pjrt_backend.c) and fused chains (fused.c).
 *
 * A PJRT device is an em_device whose storages hold a pj_buf (the PJRT buffer and its shape)
 * instead of host memory. Kernels emit a small StableHLO module per (op, attributes, input
 * geometry, dtypes), compile it once per plugin, and execute it on the device's buffers; the
 * outputs are new PJRT buffers that stay on the device.
 *
 * A compile-only plugin (aot.c: "tpu-aot:v6e:2x4") has a topology instead of a client: its
 * devices are the topology's device descriptions, programs are compiled with PJRT_Compile
 * against the topology, nothing is executed and no device memory exists. Its storages are
 * shape-only (a pj_buf with dims and no buffer); a "launch" adds the program's cost analysis to
 * the device's projection instead of running it.
 */
#ifndef EMBER_PJRT_H
#define EMBER_PJRT_H

#include <pthread.h>

#include "backends/pjrt/pjrt_api.h"
#include "backends/pjrt/shlo.h"
#include "core/graph.h"
#include "core/group.h"
#include "core/tensor_impl.h"
#include "ember/pjrt.h"

/* ---- plugins and clients ---- */

typedef struct pj_exec pj_exec;

typedef struct pj_cache {
    pthread_mutex_t lock;
    pj_exec **slots; /* open addressing on the key hash */
    size_t cap, len;
    em_pjrt_cache_stats stats;
    char dir[1024]; /* on-disk cache folder, "" when disabled */
} pj_cache;

typedef struct pj_plugin {
    char name[64];      /* device name prefix: "xla", "cuda", "tpu", "pjrt0", "tpu-aot:v6e:2x4" */
    char path[1024];    /* the shared object */
    void *dl;
    const PJRT_Api *api;
    int major, minor;   /* the plugin's PJRT API version */
    char xla_version[64], shlo_current[32], shlo_minimum[32];
    char platform[32], platform_version[256];
    PJRT_Client *client;
    int n_devices;
    em_device **devices;
    em_backend be;      /* this plugin's backend table (platform name, kernels) */
    pj_cache cache;
    char version_key[1600]; /* what makes an executable from this plugin reusable */
    bool log_compiles;
    /* compile-only plugins (aot.c); client == NULL */
    bool aot;
    PJRT_TopologyDescription *topology;
    char topology_name[48];     /* "v6e:2x4" */
    int64_t device_memory_limit; /* the topology's per-device limit in bytes, 0 if unknown */
    em_pjrt_projection proj;     /* launches counted instead of run (under cache.lock) */
    em_group_kv kv;              /* the process group's store given to the client (kv.c) */
} pj_plugin;

/* The kv_get / kv_put callbacks of PJRT_Client_Create over core's offered store (kv.c);
 * user_arg is an em_group_kv. A missing key is NOT_FOUND, a broken group UNAVAILABLE. */
PJRT_Error *pj_kv_get(PJRT_KeyValueGetCallback_Args *a);
PJRT_Error *pj_kv_put(PJRT_KeyValuePutCallback_Args *a);

#define PJ_PENDING 64

typedef struct pj_dev {
    pj_plugin *pl;
    PJRT_Device *dev;                  /* NULL on a compile-only device */
    PJRT_DeviceDescription *desc;      /* compile-only devices: the topology's description */
    int device_id;                     /* compile-only devices: the description's id */
    _Atomic int64_t resident;          /* compile-only devices: bytes of the shape-only storages */
    int local_index;
    char kind[128];
    pthread_mutex_t lock;
    PJRT_Event *pending[PJ_PENDING]; /* completion events of executions not yet awaited */
    int n_pending;
} pj_dev;

/* What a PJRT storage's `data` points to. */
typedef struct pj_buf {
    PJRT_Buffer *buf; /* NULL until the storage is first written */
    bool shape_only;  /* compile-only device: dims are set, there is no buffer and no value */
    int64_t counted;  /* compile-only device: bytes counted in the device's resident total */
    em_dtype dtype;
    int ndim;
    int64_t dims[EM_MAX_DIMS];
} pj_buf;

/* True when the plugin's table has the function slot `fn` (and it is set). */
#define PJ_HAS(pl, fn)                                                                             \
    (offsetof(PJRT_Api, fn) + sizeof(void *) <= (pl)->api->struct_size && (pl)->api->fn != NULL)

/* Converts a PJRT error into an Ember error (in_op: through em_op_fail, naming the op being
 * dispatched; else in the name of `what`), destroys it and returns EM_ERR_BACKEND. NULL: EM_OK. */
em_status pj_check(em_ctx *c, const pj_plugin *pl, PJRT_Error *e, bool in_op, const char *what);
/* The message of a PJRT error into buf (the error stays alive). */
void pj_error_text(const pj_plugin *pl, PJRT_Error *e, char *buf, size_t n);
void pj_error_free(const pj_plugin *pl, PJRT_Error *e);
/* Reports a function the plugin lacks. */
em_status pj_missing(em_ctx *c, const pj_plugin *pl, const char *fn, bool in_op);

/* Loads, dlopens and initialises the plugin library of pl->path (shared with any plugin record
 * already open on the same file: PJRT_Plugin_Initialize runs once per library). */
em_status pj_plugin_load(em_ctx *c, pj_plugin *pl);
/* Loads (once) the plugin behind a device name prefix ("xla", "cuda", "tpu") or an explicit
 * path; `tried` collects the places looked at. NULL with an error in c when none is found. */
pj_plugin *pj_plugin_get(em_ctx *c, const char *name, const char *path, char *tried,
                         size_t tried_n);
/* The PJRT backend's entry in core's backend registry: the device-name prefixes of the plugins
 * it finds by itself, and the function that opens their devices (src/backends/registry.c
 * registers it). */
extern const em_backend_reg em_pjrt_backend_reg;
/* Creates the plugin's client with options and registers its devices (client.c). */
em_status pj_client_create(em_ctx *c, pj_plugin *pl, const em_pjrt_option *opts, int n_opts);
/* Fills the backend table of a plugin (pjrt_backend.c). */
void pj_backend_init(pj_plugin *pl);
/* Compile-only plugins (aot.c): "tpu-aot:TOPOLOGY[:N]" and "cuda-aot:..." names. prefix_out gets
 * the plugin name ("tpu-aot:v6e:2x4"), *index the device; false if `name` is not such a name. */
bool pj_aot_parse(const char *name, char *prefix_out, size_t n, const char **topology,
                  size_t *topology_len, int *index);
/* Before a compile-only plugin's library is loaded: libtpu reads its host's description when
 * it loads; the variables that tell it there is no TPU host to ask about are set (if unset). */
void pj_aot_env(const char *lib);
/* max(flops / peak, bytes / bandwidth) at the chip's table figures for a compile-only plugin
 * whose generation the table knows; -1 otherwise or for unknown (negative) counts. */
double pj_aot_roofline(const pj_plugin *pl, double flops, double bytes);
/* Creates the topology of pl->topology_name and registers its devices (compile-only). */
em_status pj_aot_create(em_ctx *c, pj_plugin *pl);
/* The compile-only device error: "<device> is compile-only (...): <what> needs values". */
em_status pj_aot_refuse(em_ctx *c, const em_device *d, const char *what, bool in_op);

/* ---- events and buffers (buffer.c) ---- */

em_status pj_event_await(em_ctx *c, const pj_plugin *pl, PJRT_Event *ev, bool in_op,
                         const char *what);
void pj_event_free(const pj_plugin *pl, PJRT_Event *ev);
/* Keeps an execution's completion event (awaits the oldest when the list is full). */
em_status pj_dev_track(em_ctx *c, em_device *d, PJRT_Event *ev);
/* Awaits every tracked execution of d (the backend's sync); the first failure is reported. */
em_status pj_dev_drain(em_ctx *c, em_device *d);
void pj_buffer_free(const pj_plugin *pl, PJRT_Buffer *b);
/* A device buffer on d from contiguous host data of the given shape (copied during the call). */
em_status pj_buffer_from_host(em_ctx *c, em_device *d, const void *src, em_dtype dt, int nd,
                              const int64_t *dims, PJRT_Buffer **out);
/* A copy of buffer b on device dst (PJRT_Buffer_CopyToDevice); EM_ERR_UNSUPPORTED, with no
 * error recorded, when the plugin lacks it. */
em_status pj_buffer_copy_to(em_ctx *c, const pj_plugin *pl, PJRT_Buffer *b, em_device *dst,
                            PJRT_Buffer **out);
/* Copies a whole buffer into host memory dst (dst_n bytes), waiting for it. */
em_status pj_buffer_to_host(em_ctx *c, const pj_plugin *pl, PJRT_Buffer *b, void *dst,
                            size_t dst_n);
/* Replaces a storage's buffer (the old one is destroyed; PJRT keeps it alive while queued
 * work still reads it). */
void pj_storage_set(em_storage *s, PJRT_Buffer *b, em_dtype dt, int nd, const int64_t *dims);
int pj_buffer_type(em_dtype t);
/* Gives a never-written storage a buffer of zeros (as a fresh tensor reads); errors through
 * em_op_fail when in_op, else in the name of compile mode. */
em_status pj_ensure_buffer(em_ctx *c, em_tensor *t, bool in_op);
void pj_backend_memory(em_backend *be);

/* ---- executables (compile_cache.c) ---- */

struct pj_exec {
    uint64_t hash;
    unsigned char *key;
    size_t key_len;
    PJRT_LoadedExecutable *exe; /* NULL for a compile-only plugin's program */
    int n_out;
    /* XLA's cost analysis and memory statistics: made at compile time on compile-only plugins
     * and when compiles are logged, else on the first request (report_ready under cache.lock) */
    bool report_ready;
    em_pjrt_program_report report;
};

/* A cache key: bytes appended by the caller, then hashed. */
typedef struct pj_key {
    unsigned char *p;
    size_t len, cap;
    bool oom;
    unsigned char inline_buf[512];
} pj_key;
void pj_key_init(pj_key *k);
void pj_key_free(pj_key *k);
void pj_key_add(pj_key *k, const void *p, size_t n);
void pj_key_i64(pj_key *k, int64_t v);
uint64_t pj_hash(const void *p, size_t n);

/* Finds the executable for key k; NULL if not cached. */
pj_exec *pj_cache_find(pj_plugin *pl, const pj_key *k, uint64_t h);
/* Compiles `text` (or loads it from the disk cache), stores it under k. `what` names the op for
 * the compile log; in_op selects how errors are reported. */
pj_exec *pj_compile(em_ctx *c, pj_plugin *pl, const pj_key *k, uint64_t h, const char *text,
                    const char *what, bool in_op);
/* Runs an executable on one device; outs receives n_out new buffers. */
em_status pj_execute(em_ctx *c, em_device *d, pj_exec *e, PJRT_Buffer *const *args, int n_args,
                     PJRT_Buffer **outs, bool in_op);
/* Runs an executable compiled for n_devices (replicas or partitions, in its device
 * assignment's order) once: arg_lists[d] holds device d's n_args buffers, out_lists[d] receives
 * its outputs, events[d] its completion event (the caller tracks or frees them). */
em_status pj_execute_multi(em_ctx *c, pj_plugin *pl, pj_exec *x, int n_devices, int n_args,
                           PJRT_Buffer *const *const *arg_lists, PJRT_Buffer **const *out_lists,
                           PJRT_Event **events, bool in_op);
/* The canonical CompileOptionsProto bytes for single-device programs (n written). */
size_t pj_compile_options(unsigned char *out, size_t cap);

/* What a multi-device program is compiled for (issue 18 plugs in here): replicas x partitions
 * over device ids (a row-major [replicas][partitions] assignment; ids of the plugin's devices
 * or, compile-only, of the topology's), SPMD partitioning for sharded programs. The options'
 * bytes are canonical, so they are part of the executable's cache key. */
typedef struct pj_compile_spec {
    int num_replicas, num_partitions;
    bool spmd;
    const int64_t *device_ids; /* num_replicas * num_partitions ids, or NULL: portable */
    bool shardy; /* use_shardy_partitioner (the module's shardings in the sdy dialect) */
} pj_compile_spec;
/* pj_compile for a multi-device spec (NULL: pj_compile); the option bytes, at most
 * PJ_OPTS_MAX, are part of the on-disk key. */
#define PJ_OPTS_MAX 512
pj_exec *pj_compile_for(em_ctx *c, pj_plugin *pl, const pj_key *k, uint64_t h, const char *text,
                        const char *what, bool in_op, const pj_compile_spec *sp);
/* CompileOptionsProto for a spec (n written, 0 if it does not fit in cap). A NULL spec or
 * 1 x 1 without ids gives pj_compile_options' portable single-device bytes. */
size_t pj_compile_options_for(const pj_compile_spec *sp, unsigned char *out, size_t cap);

/* ---- reports (report.c) ---- */

/* Fills r from a compiled (not loaded) executable: cost analysis and memory statistics, -1
 * for what the plugin does not give. */
void pj_report_fill(const pj_plugin *pl, PJRT_Executable *x, em_pjrt_program_report *r);
/* The report of a cached program (computed on first use for a client plugin's executable). */
const em_pjrt_program_report *pj_exec_report(pj_plugin *pl, pj_exec *x);
/* One line for EMBER_LOG_COMPILES after "[ember] compiled on ...". */
void pj_report_log(const pj_plugin *pl, const em_pjrt_program_report *r);
/* A compile-only launch: adds x's report to the plugin's projection. */
void pj_project(pj_plugin *pl, pj_exec *x);
void pj_cache_init(pj_plugin *pl);

/* ---- emitters (stablehlo_*.c) ---- */

/* What an op emitter gets: the builder, its inputs as values of their logical shapes (views
 * already materialised), the attributes and the output metas it must produce. */
typedef struct pj_emit {
    sh_b *b;
    const em_op_def *op;
    int n_in;
    sh_val in[EM_MAX_INPUTS];
    bool present[EM_MAX_INPUTS]; /* optional inputs may be absent */
    em_dtype in_dt[EM_MAX_INPUTS];
    const em_attr *attrs;
    int n_out;
    em_meta out_meta[EM_MAX_OUTPUTS];
    sh_val out[EM_MAX_OUTPUTS];
    em_tensor *const *tin; /* the input tensors (dtypes, ranks; never their data) */
    const pj_plugin *pl;   /* whose program this is (some lowerings depend on the platform) */
    /* host-made extra inputs (ragged_dot's grouping plan), after the op's inputs */
    int n_extra;
    sh_val extra[4];
    int64_t variant[2]; /* what the extra inputs' shapes depend on (part of the cache key) */
    const void *user;   /* a replacing emitter's data (pj_alt) */
    /* a whole-graph program over a device group (compile mode): the group the program runs over,
     * which a collective's replica groups are numbered in; NULL otherwise */
    const struct pj_group_spot *grp;
} pj_emit;

typedef em_status (*pj_emit_fn)(pj_emit *e);

/* Extra inputs a call's program takes after the op's own, made on the host before it runs
 * (ragged_dot's grouping plan): i32 vectors on the device, and what their shapes depend on. */
typedef struct pj_extra {
    int n;
    em_tensor *t[4];
    int64_t variant[2]; /* part of the executable's key */
    bool checks_only;   /* set by the caller: check the inputs, add no extra input (a snippet
                           that replaces the op's emitter takes none) */
} pj_extra;
/* Uploads n values as the next extra input (an i32 vector on d). */
em_status pj_extra_add(em_ctx *c, em_device *d, pj_extra *x, const int32_t *v, int64_t n);
void pj_extra_free(pj_extra *x);

/* Index values the host checks before an op's program runs, as the CPU backend checks them:
 * input `input` must hold values in [lo, size). The error reads "<noun> <v> at position <p><of>
 * is out of range for <range>". */
typedef struct pj_index_rule {
    int input;
    int64_t lo, size;
    const char *noun, *of;
    char range[96];
} pj_index_rule;
/* Fills *r, the range text formatted by fmt; returns true (for the hooks' tail calls). */
bool pj_index_rule_set(pj_index_rule *r, int input, int64_t lo, int64_t size, const char *noun,
                       const char *of, const char *fmt, ...) __attribute__((format(printf, 7, 8)));

/*
 * What the PJRT backend knows about one op: its emitter, and the hooks of the ops that need
 * more than one. The families fill the table (pj_register_*); the eager kernel
 * (pjrt_backend.c) and the whole-graph lowering (graph_lower.c) read it.
 */
typedef struct pj_op {
    pj_emit_fn emit; /* the op's StableHLO over its inputs' logical values; NULL: unsupported
                        unless `update` is set */
    /* In-place ops (assign, index_copy) write into their first input's storage: `update` returns
     * the destination view's new value (of its dtype and shape; e->tin[0] is the destination)
     * from the other inputs and, when update_reads_dst, from its current value `dst`. The
     * kernel or the lowering writes it back into the storage (pj_write_view). */
    sh_val (*update)(pj_emit *e, sh_val dst);
    bool update_reads_dst;
    /* Index values to check on the host (fills *r; false: nothing to check for this call). */
    bool (*indices)(const em_kernel_args *a, pj_index_rule *r);
    /* Host work before the program runs: may check inputs' values and add extra inputs. */
    em_status (*prepare)(em_ctx *c, const em_kernel_args *a, em_device *d, pj_extra *x);
    /* Whole-graph programs only (optional): the emitter used there instead of `emit`, for forms
     * that pay off once the compiler sees the whole program. */
    pj_emit_fn emit_program;
} pj_op;
/* An emitter that replaces the op's own for one call (a kernel-hub snippet, snippet.h): the
 * op's host checks run as usual, its extra inputs are not made; `key` (the snippet's digest)
 * keeps the program's cache entry apart from the built-in's. `failed` is set when the program
 * could not be emitted or compiled (the error is in the context). */
typedef struct pj_alt {
    pj_emit_fn emit;
    const void *user; /* pj_emit.user */
    const char *key;
    bool failed;
} pj_alt;
/* The PJRT kernel (every op's built-in) with alt's emitter. */
em_status pj_kernel_alt(const em_kernel_args *a, pj_alt *alt);

/* The op's entry (never NULL; every field NULL for an op the backend does not run). */
const pj_op *pj_op_get(em_op_id op);
/* Its emitter, NULL when the op has none. */
pj_emit_fn pj_emitter(em_op_id op);
/* The values of an index tensor on the host (caller frees *out), for checks and host plans.
 * *out stays NULL when idx is empty, or, unless `need`, when EMBER_PJRT_INDEX_CHECK turns the
 * read off for its size (more elements than the limit, default 2^20; 0: never). Waits for idx. */
em_status pj_read_indices(em_ctx *c, em_tensor *idx, bool need, void **out);
/* Result type of an output meta. */
sh_type pj_meta_type(const em_meta *m);

/* Element-wise: one op applied to values (broadcast to out's shape), as the CPU computes it.
 * Used by the unfused kernels and by fused chains; `tin` are the input tensors (their dtypes
 * and ranks decide type promotion). */
sh_val pj_emit_ew(sh_b *b, em_op_id op, const sh_val *in, em_tensor *const *tin, int n_in,
                  const em_attr *attrs, const em_meta *out);
/* Converts a value of dtype `from` to `to` as Ember's cast does (saturating float -> int, bool as
 * x != 0). */
sh_val pj_cast(sh_b *b, sh_val x, em_dtype from, em_dtype to);
/* The compute element type Ember's CPU uses for a dtype (f32 for bf16/f16, i64 for integers). */
sh_elem pj_ct(em_dtype t);

/* Emitter and hook registration per family. */
void pj_register_ew(pj_op *t);
void pj_register_create(pj_op *t);
void pj_register_layout(pj_op *t);
void pj_register_reduce(pj_op *t);
void pj_register_linalg(pj_op *t);
void pj_register_nn(pj_op *t);
void pj_register_index(pj_op *t);
void pj_register_conv(pj_op *t);
void pj_register_moe(pj_op *t);
void pj_register_paged(pj_op *t); /* stablehlo_paged.c */
/* The collectives' kernels (collective.c): ranks of a device group (em_dist_local) on this
 * plugin's devices meet, and one replicated program runs on all of them. */
void pj_backend_collectives(em_backend *be);
/* The collectives' whole-program emitters (compile mode over a device group). */
void pj_register_collective(pj_op *t);

/* Compile mode over a device group (collective.c): a graph whose collectives name a device group
 * of this process is compiled once for all its ranks (num_replicas = the group's size, replica r
 * on rank r's device) and every run of it is one multi-device launch: each rank's thread hands
 * its arguments to the group's meeting point and the last to arrive launches for all. */
typedef struct pj_group_spot {
    em_local_group *local; /* referenced while a program holds the spot */
    int rank, size;
    int64_t ids[EM_GROUP_MAX]; /* the ranks' device ids, the program's device assignment */
} pj_group_spot;
/* Finds the device group of g's collectives: *found false when g has none. The program runs
 * over that group; or, when the collectives use several groups, over the device group they were
 * split from (em_dist_split), each collective's replica groups the partition its split made
 * (gs->rank: this rank's rank there). Fails (naming the nodes) for a group that is not a device
 * group of this process, groups not split from one device group (or that one and its
 * sub-groups), a split into groups of unequal sizes, handles of different ranks, or a rank
 * whose device is not dev. On success with *found, gs->local is referenced
 * (pj_group_release). */
em_status pj_graph_group(em_ctx *c, const em_graph *g, em_device *dev, pj_group_spot *gs,
                         bool *found);
void pj_group_release(pj_group_spot *gs);
/* Every rank's text must be the same; the last rank compiles it once (or finds it in the
 * cache under k plus the group's degree and devices). NULL with the error in c on every rank. */
pj_exec *pj_group_compile(em_ctx *c, pj_plugin *pl, const pj_group_spot *gs, const char *text,
                          const pj_key *k, const char *what);
/* One launch of x for all ranks: this rank's n_args arguments in, its outputs into outs. */
em_status pj_group_execute(em_ctx *c, const pj_group_spot *gs, em_device *dev, pj_exec *x,
                           PJRT_Buffer *const *args, int n_args, PJRT_Buffer **outs);
/* The id of a device of pl (a compile-only device: its description's), for device
 * assignments; false when the plugin gives none. */
bool pj_device_id(const pj_plugin *pl, const em_device *d, int64_t *id);

/* SPMD programs (spmd.c): the tiles of captured storages on the partitions' devices, kept
 * between runs, and the written storages gathered back whole. */
#define PJ_SPMD_MAX 64
typedef struct pj_spmd pj_spmd;
/* Partitions over `parts` devices from dev (devices k..k+parts-1 of its plugin, k = dev's
 * index) with n_caps captured storages, all replicated until pj_spmd_set_dim. NULL with the
 * error in c (too few devices, no device id, no memory). */
pj_spmd *pj_spmd_new(em_ctx *c, em_device *dev, int parts, int n_caps);
void pj_spmd_set_dim(pj_spmd *sp, int cap, int dim);
int pj_spmd_parts(const pj_spmd *sp);
const int64_t *pj_spmd_ids(const pj_spmd *sp); /* the partitions' device ids */
void pj_spmd_free(pj_spmd *sp);
/* Captured storage `cap` (tensor t, on the first partition's device) as one buffer per
 * device: its tiles, made again when the storage's version changed (borrowed: the program
 * keeps them). */
em_status pj_spmd_cap_args(em_ctx *c, pj_spmd *sp, int cap, const em_tensor *t,
                           PJRT_Buffer **per_dev);
/* A replicated input: b0 (on the first device) and copies on the others (caller-owned, from
 * per_dev[1]). */
em_status pj_spmd_replicate(em_ctx *c, pj_spmd *sp, PJRT_Buffer *b0, em_dtype dt, int nd,
                            const int64_t *dims, PJRT_Buffer **per_dev);
/* After a run that wrote captured storage `cap`: per_dev's new tiles become its tiles (taken,
 * set to NULL) and the storage gets the whole value (its version bumped). */
em_status pj_spmd_take(em_ctx *c, pj_spmd *sp, int cap, em_tensor *t, PJRT_Buffer **per_dev);

/* A rank that cannot reach the meeting (its call failed first) breaks the group, so the others
 * fail at once rather than at the timeout. */
void pj_group_break(const pj_group_spot *gs, const char *why);

/* A view of a device buffer as the logical tensor t (reshape / slice / transpose / broadcast,
 * or a gather for any other strides). `base` is the parameter holding the storage's buffer. */
sh_val pj_view_value(sh_b *b, sh_val base, const em_tensor *t);
/* Appends what pj_view_value depends on to a key. */
void pj_key_tensor(pj_key *k, const em_tensor *t);

/* The storage buffer value `base` with the view dst (a tensor of that storage; only its
 * geometry and storage->data's pj_buf are read) replaced by v, a value of dst's logical shape
 * and dtype: a reshape when dst is the whole buffer, a dynamic_update_slice when it is a box
 * of it, an element scatter otherwise. */
sh_val pj_write_view(sh_b *b, sh_val base, const em_tensor *dst, sh_val v);
/* Runs op `id` on the device of in[0] with this backend's kernel, as the dispatcher would
 * (inputs materialised, errors naming the op; the caller has checked the arguments and
 * allocated out[]), for the backend's own needs: it never re-enters the dispatcher. */
em_status pj_run(em_ctx *c, em_op_id id, em_tensor *const *in, int n_in, em_tensor **out,
                 int n_out);
/* A contiguous copy of t (the CONTIGUOUS kernel; caller-owned; NULL with an error). */
em_tensor *pj_make_contiguous(em_ctx *c, em_tensor *t);

/* XLA's CPU plugin (its compiler has habits the lowerings work around, graph_lower.c). */
bool pj_xla_cpu(const pj_plugin *pl);
/* A float max (mx) or min reduction that propagates NaN, as torch's: a reduce whose body is the
 * NaN-aware select everywhere but on TPU, where libtpu 0.0.51's fusion pass crashes (SIGSEGV in
 * TpuPriorityFusionQueue) on such a reduce of a rank-3+ tensor once its broadcast result meets
 * the input again (softmax); there a plain maximum/minimum reduce plus a sum of the input's NaNs
 * (stablehlo_reduce.c; docs/notes/2026-12-01-tpu-conformance.md). */
sh_val pj_reduce_nan(const pj_plugin *pl, sh_b *b, sh_val x, sh_val init, const int *dims, int n,
                     bool mx);
/* x computed once where XLA's CPU compiler would recompute it inside every user: an identity
 * reduce_window its fusion pass does not see through (graph_lower.c). */
sh_val pj_materialize(sh_b *b, sh_val x);

/* Fused mode (fused.c). */
em_status pj_eval_lazy(em_ctx *c, em_tensor *t);

/* ---- compile mode: one PJRT program for a whole graph (graph_lower.c) ---- */
typedef struct em_pjrt_program em_pjrt_program;
/* Lowers a graph whose nodes all run on the PJRT device `dev` into one StableHLO module and
 * compiles it with the device's plugin. NULL with an error in c (the op and source position of
 * the node that cannot be lowered). */
em_pjrt_program *em_pjrt_graph_compile(em_ctx *c, const em_graph *g, em_device *dev);
/* Runs the program: in[] are the graph inputs (tensors on dev, any layout), out[] receives
 * n_outputs new caller-owned tensors on dev. Captured tensors the graph writes (ASSIGN,
 * INDEX_COPY) see the writes afterwards, as in eager mode. */
em_status em_pjrt_program_run(em_ctx *c, em_pjrt_program *p, em_tensor *const *in,
                              em_tensor **out);
void em_pjrt_program_free(em_pjrt_program *p);
/* The backend table's program entries over the three above. */
void pj_backend_programs(em_backend *be);

#endif

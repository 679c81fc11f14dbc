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
} pj_plugin;

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
/* The device name hook (core/device.c). */
em_device *em_pjrt_device_open(em_ctx *c, const char *name, char *tried, size_t tried_n);
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
void pj_buffer_free(const pj_plugin *pl, PJRT_Buffer *b);
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
} pj_compile_spec;
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
} pj_emit;

/* ragged_dot's grouping plan, made on the host from the (checked) group sizes: the non-empty
 * groups, padded to a power of two, and for each of their slots the lhs row it takes (or M).
 * NULL plan arrays when the lowering needs none (native, or forced dense/gather). */
typedef struct pj_ragged_plan {
    int64_t hb, cb; /* groups used (padded), rows per group (padded) */
    int32_t *experts; /* [hb] */
    int32_t *rows;    /* [hb * cb], M for an empty slot */
} pj_ragged_plan;
bool pj_ragged_wants_plan(const pj_plugin *pl);
em_status pj_ragged_plan_make(em_ctx *c, const int32_t *gs, int64_t g, int64_t m,
                              pj_ragged_plan *p);

typedef em_status (*pj_emit_fn)(pj_emit *e);
/* The emitter of an op id, NULL when the op has none. */
pj_emit_fn pj_emitter(em_op_id op);
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

/* torch's index_copy_ as a value: dst (a value of the destination's logical shape) with
 * dst[.., index[i], ..] = src[.., i, ..] along dim (0 <= dim < rank; 0 for a 0-d dst). index is
 * an integer value, 0-d or 1-d; src has dst's element type and dst's shape except at dim, where
 * it has the index's length. Returns the updated destination (same type as dst); the eager
 * kernel writes it back into the destination's storage, a whole-graph lowering uses it as the
 * new value of the written tensor. Out-of-range index values are not checked here: their
 * updates are dropped (XLA scatter semantics). With duplicate indices which update wins is
 * unspecified. */
sh_val pj_emit_index_copy(sh_b *b, sh_val dst, sh_val index, sh_val src, int dim);

/* Emitter registration per family. */
void pj_register_ew(pj_emit_fn *t);
void pj_register_create(pj_emit_fn *t);
void pj_register_layout(pj_emit_fn *t);
void pj_register_reduce(pj_emit_fn *t);
void pj_register_linalg(pj_emit_fn *t);
void pj_register_nn(pj_emit_fn *t);
void pj_register_index(pj_emit_fn *t);
void pj_register_conv(pj_emit_fn *t);
void pj_register_moe(pj_emit_fn *t);

/* A view of a device buffer as the logical tensor t (reshape / slice / transpose / broadcast,
 * or a gather for any other strides). `base` is the parameter holding the storage's buffer. */
sh_val pj_view_value(sh_b *b, sh_val base, const em_tensor *t);
/* Appends what pj_view_value depends on to a key. */
void pj_key_tensor(pj_key *k, const em_tensor *t);

/* ASSIGN as a value (for whole-graph lowerings): the storage buffer value `base` with the view
 * dst (a tensor of that storage; only its geometry and storage->data's pj_buf are read)
 * replaced by src (of dtype src_dt, cast and broadcast to dst as eager assign does). */
sh_val pj_assign_value(sh_b *b, sh_val base, const em_tensor *dst, sh_val src, em_dtype src_dt);
/* A contiguous copy of t (the eager CONTIGUOUS op; caller-owned; NULL with an error). */
em_tensor *pj_make_contiguous(em_ctx *c, em_tensor *t);

/* Fused mode (fused.c). */
em_status pj_eval_lazy(em_ctx *c, em_tensor *t);

#endif

/*
 * Executables: compile options, compiling StableHLO text through the plugin, the in-memory cache
 * (per plugin, keyed by the bytes that determine the program) and the on-disk cache (keyed by
 * the plugin's version key, the program's hash and the compile-option bytes), and execution.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backends/pjrt/pjrt.h"
#include "core/make_dirs.h"

/* ---- keys ---- */

void pj_key_init(pj_key *k) {
    k->p = k->inline_buf;
    k->len = 0;
    k->cap = sizeof k->inline_buf;
    k->oom = false;
}

void pj_key_free(pj_key *k) {
    if (k->p != k->inline_buf) free(k->p);
    pj_key_init(k);
}

void pj_key_add(pj_key *k, const void *p, size_t n) {
    if (k->oom) return;
    if (k->len + n > k->cap) {
        size_t nc = k->cap * 2;
        while (nc < k->len + n) nc *= 2;
        unsigned char *np = k->p == k->inline_buf ? malloc(nc) : realloc(k->p, nc);
        if (!np) {
            k->oom = true;
            return;
        }
        if (k->p == k->inline_buf) memcpy(np, k->inline_buf, k->len);
        k->p = np;
        k->cap = nc;
    }
    memcpy(k->p + k->len, p, n);
    k->len += n;
}

void pj_key_i64(pj_key *k, int64_t v) { pj_key_add(k, &v, sizeof v); }

/* 64-bit FNV-1a with a final avalanche (keys are short; speed matters more than strength). */
uint64_t pj_hash(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

/* ---- compile options ---- */

static size_t put_varint(unsigned char *o, uint64_t v) {
    size_t n = 0;
    do {
        unsigned char b = v & 0x7f;
        v >>= 7;
        o[n++] = (unsigned char)(b | (v ? 0x80 : 0));
    } while (v);
    return n;
}

/* CompileOptionsProto, fields in ascending order so the bytes are canonical:
 *   executable_build_options (3) { num_replicas (4) = 1, num_partitions (5) = 1 }
 *   compile_portable_executable (4) = true: a single-device program that runs on whichever
 *   device PJRT_LoadedExecutable_Execute's execute_device names. */
size_t pj_compile_options(unsigned char *out, size_t cap) {
    unsigned char inner[16];
    size_t ni = 0;
    ni += put_varint(inner + ni, (4 << 3) | 0);
    ni += put_varint(inner + ni, 1);
    ni += put_varint(inner + ni, (5 << 3) | 0);
    ni += put_varint(inner + ni, 1);
    unsigned char buf[64];
    size_t n = 0;
    n += put_varint(buf + n, (3 << 3) | 2);
    n += put_varint(buf + n, ni);
    memcpy(buf + n, inner, ni);
    n += ni;
    n += put_varint(buf + n, (4 << 3) | 0);
    n += put_varint(buf + n, 1);
    if (n > cap) return 0;
    memcpy(out, buf, n);
    return n;
}

/* A length-delimited field: tag, length, bytes. */
static size_t put_bytes(unsigned char *o, int field, const unsigned char *b, size_t n) {
    size_t k = put_varint(o, ((uint64_t)field << 3) | 2);
    k += put_varint(o + k, n);
    memcpy(o + k, b, n);
    return k + n;
}

/* DeviceAssignmentProto {replica_count (1), computation_count (2), computation_devices (3)
 * {replica_device_ids (1)}} inside ExecutableBuildOptionsProto's device_assignment (9);
 * use_spmd_partitioning is field 6, use_shardy_partitioner 19. Worst case per id: 10 bytes + framing. */
size_t pj_compile_options_for(const pj_compile_spec *sp, unsigned char *out, size_t cap) {
    if (!sp || (sp->num_replicas <= 1 && sp->num_partitions <= 1 && !sp->device_ids && !sp->spmd))
        return pj_compile_options(out, cap);
    int64_t r = sp->num_replicas > 0 ? sp->num_replicas : 1;
    int64_t p = sp->num_partitions > 0 ? sp->num_partitions : 1;
    if (r * p > 4096) return 0;
    size_t need = 64 + (size_t)(r * p) * 24;
    unsigned char *inner = malloc(need), *da = malloc(need), *cd = malloc(need);
    size_t ni = 0, nd = 0, n = 0;
    if (!inner || !da || !cd || cap < 16) {
        free(inner), free(da), free(cd);
        return 0;
    }
    ni += put_varint(inner + ni, 4 << 3);
    ni += put_varint(inner + ni, (uint64_t)r);
    ni += put_varint(inner + ni, 5 << 3);
    ni += put_varint(inner + ni, (uint64_t)p);
    if (sp->spmd) {
        ni += put_varint(inner + ni, 6 << 3);
        ni += put_varint(inner + ni, 1);
    }
    if (sp->device_ids) {
        nd += put_varint(da + nd, 1 << 3);
        nd += put_varint(da + nd, (uint64_t)r);
        nd += put_varint(da + nd, 2 << 3);
        nd += put_varint(da + nd, (uint64_t)p);
        /* one ComputationDevice per partition, listing that partition's device per replica */
        for (int64_t j = 0; j < p; j++) {
            size_t nc = 0;
            for (int64_t i = 0; i < r; i++) {
                nc += put_varint(cd + nc, 1 << 3);
                nc += put_varint(cd + nc, (uint64_t)sp->device_ids[i * p + j]);
            }
            nd += put_bytes(da + nd, 3, cd, nc);
        }
        ni += put_bytes(inner + ni, 9, da, nd);
    }
    if (sp->shardy) { /* use_shardy_partitioner (19), after device_assignment */
        ni += put_varint(inner + ni, 19 << 3);
        ni += put_varint(inner + ni, 1);
    }
    if (ni + 16 <= cap) {
        n = put_bytes(out, 3, inner, ni);
        if (!sp->device_ids) { /* no assignment: portable across devices */
            n += put_varint(out + n, 4 << 3);
            n += put_varint(out + n, 1);
        }
    }
    free(inner), free(da), free(cd);
    return n;
}

/* ---- the in-memory cache ---- */

void pj_cache_init(pj_plugin *pl) {
    pj_cache *cc = &pl->cache;
    pthread_mutex_init(&cc->lock, NULL);
    cc->cap = 0;
    cc->len = 0;
    cc->slots = NULL;
    memset(&cc->stats, 0, sizeof cc->stats);
    const char *d = getenv("EMBER_PJRT_CACHE_DIR");
    const char *home = getenv("HOME");
    if (d && !strcmp(d, "off"))
        cc->dir[0] = 0;
    else if (d && *d)
        snprintf(cc->dir, sizeof cc->dir, "%s", d);
    else if (home && *home)
        snprintf(cc->dir, sizeof cc->dir, "%s/.cache/ember/pjrt", home);
}

static bool key_eq(const pj_exec *e, const pj_key *k, uint64_t h) {
    return e->hash == h && e->key_len == k->len && !memcmp(e->key, k->p, k->len);
}

pj_exec *pj_cache_find(pj_plugin *pl, const pj_key *k, uint64_t h) {
    pj_cache *cc = &pl->cache;
    pj_exec *r = NULL;
    pthread_mutex_lock(&cc->lock);
    if (cc->cap) {
        for (size_t i = h & (cc->cap - 1);; i = (i + 1) & (cc->cap - 1)) {
            pj_exec *e = cc->slots[i];
            if (!e) break;
            if (key_eq(e, k, h)) {
                r = e;
                break;
            }
        }
    }
    if (r)
        cc->stats.hits++;
    pthread_mutex_unlock(&cc->lock);
    return r;
}

/* Inserts e unless an equal key is there; returns the entry that stays. Lock held. */
static pj_exec *insert_locked(pj_cache *cc, pj_exec *e) {
    if ((cc->len + 1) * 2 > cc->cap) {
        size_t nc = cc->cap ? cc->cap * 2 : 256;
        pj_exec **ns = calloc(nc, sizeof *ns);
        if (!ns) return NULL;
        for (size_t i = 0; i < cc->cap; i++) {
            pj_exec *x = cc->slots[i];
            if (!x) continue;
            size_t j = x->hash & (nc - 1);
            while (ns[j]) j = (j + 1) & (nc - 1);
            ns[j] = x;
        }
        free(cc->slots);
        cc->slots = ns;
        cc->cap = nc;
    }
    size_t i = e->hash & (cc->cap - 1);
    for (; cc->slots[i]; i = (i + 1) & (cc->cap - 1)) {
        pj_exec *x = cc->slots[i];
        if (x->hash == e->hash && x->key_len == e->key_len && !memcmp(x->key, e->key, e->key_len))
            return x;
    }
    cc->slots[i] = e;
    cc->len++;
    return e;
}

/* ---- the on-disk cache ---- */

static const char disk_magic[8] = {'E', 'M', 'B', 'P', 'J', 'X', '1', '\n'};

static void disk_path(const pj_plugin *pl, uint64_t prog_hash, const unsigned char *opts,
                      size_t no, char *out, size_t n) {
    uint64_t vh = pj_hash(pl->version_key, strlen(pl->version_key));
    uint64_t oh = pj_hash(opts, no);
    snprintf(out, n, "%s/%016llx-%016llx-%016llx.pjx", pl->cache.dir, (unsigned long long)vh,
             (unsigned long long)prog_hash, (unsigned long long)oh);
}

/* Header: magic, version key (length-prefixed), program hash, option bytes; then the payload. */
static void disk_store(pj_plugin *pl, PJRT_LoadedExecutable *le, uint64_t ph,
                       const unsigned char *opts, size_t no) {
    const PJRT_Api *api = pl->api;
    if (!pl->cache.dir[0] || !PJ_HAS(pl, PJRT_LoadedExecutable_GetExecutable) ||
        !PJ_HAS(pl, PJRT_Executable_Serialize))
        return;
    PJRT_LoadedExecutable_GetExecutable_Args g;
    memset(&g, 0, sizeof g);
    g.struct_size = PJ_SIZE(PJRT_LoadedExecutable_GetExecutable_Args, executable);
    g.loaded_executable = le;
    PJRT_Error *e = api->PJRT_LoadedExecutable_GetExecutable(&g);
    if (e) {
        pj_error_free(pl, e);
        return;
    }
    PJRT_Executable_Serialize_Args s;
    memset(&s, 0, sizeof s);
    s.struct_size = PJ_SIZE(PJRT_Executable_Serialize_Args, serialized_executable_deleter);
    s.executable = g.executable;
    e = api->PJRT_Executable_Serialize(&s);
    if (!e && s.serialized_bytes && s.serialized_bytes_size) {
        char path[1200], tmp[1300];
        disk_path(pl, ph, opts, no, path, sizeof path);
        snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
        em_make_dirs(NULL, "compile_cache", pl->cache.dir); /* best effort */
        FILE *f = fopen(tmp, "wb");
        if (f) {
            uint32_t vl = (uint32_t)strlen(pl->version_key);
            uint64_t ol = no, pl_len = s.serialized_bytes_size;
            bool ok = fwrite(disk_magic, 1, 8, f) == 8 && fwrite(&vl, 4, 1, f) == 1 &&
                      fwrite(pl->version_key, 1, vl, f) == vl && fwrite(&ph, 8, 1, f) == 1 &&
                      fwrite(&ol, 8, 1, f) == 1 && fwrite(opts, 1, no, f) == no &&
                      fwrite(&pl_len, 8, 1, f) == 1 &&
                      fwrite(s.serialized_bytes, 1, pl_len, f) == pl_len;
            ok = fclose(f) == 0 && ok;
            if (ok && rename(tmp, path) == 0) {
                pthread_mutex_lock(&pl->cache.lock);
                pl->cache.stats.disk_writes++;
                pthread_mutex_unlock(&pl->cache.lock);
            } else {
                remove(tmp);
            }
        }
    }
    if (e) pj_error_free(pl, e);
    if (s.serialized_executable_deleter && s.serialized_executable)
        s.serialized_executable_deleter(s.serialized_executable);
    PJRT_Executable_Destroy_Args d;
    memset(&d, 0, sizeof d);
    d.struct_size = PJ_SIZE(PJRT_Executable_Destroy_Args, executable);
    d.executable = g.executable;
    if (PJ_HAS(pl, PJRT_Executable_Destroy)) pj_error_free(pl, api->PJRT_Executable_Destroy(&d));
}

static PJRT_LoadedExecutable *disk_load(pj_plugin *pl, uint64_t ph, const unsigned char *opts,
                                        size_t no) {
    if (!pl->cache.dir[0] || !PJ_HAS(pl, PJRT_Executable_DeserializeAndLoad)) return NULL;
    char path[1200];
    disk_path(pl, ph, opts, no, path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char magic[8], vk[1600];
    uint32_t vl = 0;
    uint64_t fph = 0, ol = 0, len = 0;
    unsigned char ob[PJ_OPTS_MAX];
    PJRT_LoadedExecutable *r = NULL;
    bool ok = fread(magic, 1, 8, f) == 8 && !memcmp(magic, disk_magic, 8) &&
              fread(&vl, 4, 1, f) == 1 && vl < sizeof vk && fread(vk, 1, vl, f) == vl;
    if (ok) {
        vk[vl] = 0;
        ok = !strcmp(vk, pl->version_key) && fread(&fph, 8, 1, f) == 1 && fph == ph &&
             fread(&ol, 8, 1, f) == 1 && ol == no && ol <= sizeof ob &&
             fread(ob, 1, ol, f) == ol && !memcmp(ob, opts, no) && fread(&len, 8, 1, f) == 1 &&
             len > 0 && len < ((uint64_t)1 << 34);
    }
    char *payload = ok ? malloc(len) : NULL;
    if (payload && fread(payload, 1, len, f) == len) {
        PJRT_Executable_DeserializeAndLoad_Args a;
        memset(&a, 0, sizeof a);
        a.struct_size =
            PJ_SIZE(PJRT_Executable_DeserializeAndLoad_Args, overridden_serialized_compile_options_size);
        a.client = pl->client;
        a.serialized_executable = payload;
        a.serialized_executable_size = len;
        PJRT_Error *e = pl->api->PJRT_Executable_DeserializeAndLoad(&a);
        if (e)
            pj_error_free(pl, e);
        else
            r = a.loaded_executable;
    }
    free(payload);
    fclose(f);
    return r;
}

/* Compile-only plugins keep no executable (nothing could load it without a client): their disk
 * entries hold what a program is needed for there, its output count and its report. */
/* (2: the collectives of the optimised program too; a version-1 entry is compiled again) */
static const char report_magic[8] = {'E', 'M', 'B', 'P', 'J', 'R', '2', '\n'};

static void report_path(const pj_plugin *pl, uint64_t ph, const unsigned char *opts, size_t no,
                        char *out, size_t n) {
    disk_path(pl, ph, opts, no, out, n);
    size_t l = strlen(out);
    if (l > 4) snprintf(out + l - 4, n - (l - 4), ".pjr"); /* next to the .pjx files */
}

static void report_store(pj_plugin *pl, uint64_t ph, const unsigned char *opts, size_t no,
                         int n_out, const em_pjrt_program_report *r) {
    if (!pl->cache.dir[0]) return;
    char path[1200], tmp[1300];
    report_path(pl, ph, opts, no, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    em_make_dirs(NULL, "compile_cache", pl->cache.dir); /* best effort */
    FILE *f = fopen(tmp, "wb");
    if (!f) return;
    uint32_t vl = (uint32_t)strlen(pl->version_key);
    int32_t no32 = n_out;
    double d[4] = {r->flops, r->transcendentals, r->bytes_accessed, r->optimal_seconds};
    int64_t m[6] = {r->argument_bytes, r->output_bytes, r->alias_bytes,
                    r->temp_bytes,     r->code_bytes,   r->peak_bytes};
    int32_t k[5] = {r->all_reduces, r->all_gathers, r->reduce_scatters, r->all_to_alls,
                    r->collective_permutes};
    bool ok = fwrite(report_magic, 1, 8, f) == 8 && fwrite(&vl, 4, 1, f) == 1 &&
              fwrite(pl->version_key, 1, vl, f) == vl && fwrite(&ph, 8, 1, f) == 1 &&
              fwrite(&no32, 4, 1, f) == 1 && fwrite(d, sizeof d, 1, f) == 1 &&
              fwrite(m, sizeof m, 1, f) == 1 && fwrite(k, sizeof k, 1, f) == 1;
    ok = fclose(f) == 0 && ok;
    if (ok && rename(tmp, path) == 0) {
        pthread_mutex_lock(&pl->cache.lock);
        pl->cache.stats.disk_writes++;
        pthread_mutex_unlock(&pl->cache.lock);
    } else {
        remove(tmp);
    }
}

static bool report_load(pj_plugin *pl, uint64_t ph, const unsigned char *opts, size_t no,
                        int *n_out, em_pjrt_program_report *r) {
    if (!pl->cache.dir[0]) return false;
    char path[1200], magic[8], vk[1600];
    report_path(pl, ph, opts, no, path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    uint32_t vl = 0;
    uint64_t fph = 0;
    int32_t no32 = 0;
    double d[4];
    int64_t m[6];
    int32_t k[5];
    bool ok = fread(magic, 1, 8, f) == 8 && !memcmp(magic, report_magic, 8) &&
              fread(&vl, 4, 1, f) == 1 && vl < sizeof vk && fread(vk, 1, vl, f) == vl;
    if (ok) {
        vk[vl] = 0;
        ok = !strcmp(vk, pl->version_key) && fread(&fph, 8, 1, f) == 1 && fph == ph &&
             fread(&no32, 4, 1, f) == 1 && fread(d, sizeof d, 1, f) == 1 &&
             fread(m, sizeof m, 1, f) == 1 && fread(k, sizeof k, 1, f) == 1;
    }
    fclose(f);
    if (!ok) return false;
    *n_out = no32;
    r->flops = d[0], r->transcendentals = d[1], r->bytes_accessed = d[2], r->optimal_seconds = d[3];
    r->argument_bytes = m[0], r->output_bytes = m[1], r->alias_bytes = m[2];
    r->temp_bytes = m[3], r->code_bytes = m[4], r->peak_bytes = m[5];
    r->all_reduces = k[0], r->all_gathers = k[1], r->reduce_scatters = k[2];
    r->all_to_alls = k[3], r->collective_permutes = k[4];
    r->n_outputs = no32;
    return true;
}

/* ---- compile ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int num_outputs(const pj_plugin *pl, PJRT_LoadedExecutable *le) {
    if (!PJ_HAS(pl, PJRT_LoadedExecutable_GetExecutable) ||
        !PJ_HAS(pl, PJRT_Executable_NumOutputs))
        return -1;
    PJRT_LoadedExecutable_GetExecutable_Args g;
    memset(&g, 0, sizeof g);
    g.struct_size = PJ_SIZE(PJRT_LoadedExecutable_GetExecutable_Args, executable);
    g.loaded_executable = le;
    PJRT_Error *e = pl->api->PJRT_LoadedExecutable_GetExecutable(&g);
    if (e) {
        pj_error_free(pl, e);
        return -1;
    }
    PJRT_Executable_NumOutputs_Args n;
    memset(&n, 0, sizeof n);
    n.struct_size = PJ_SIZE(PJRT_Executable_NumOutputs_Args, num_outputs);
    n.executable = g.executable;
    e = pl->api->PJRT_Executable_NumOutputs(&n);
    int r = e ? -1 : (int)n.num_outputs;
    pj_error_free(pl, e);
    PJRT_Executable_Destroy_Args d;
    memset(&d, 0, sizeof d);
    d.struct_size = PJ_SIZE(PJRT_Executable_Destroy_Args, executable);
    d.executable = g.executable;
    if (PJ_HAS(pl, PJRT_Executable_Destroy)) pj_error_free(pl, pl->api->PJRT_Executable_Destroy(&d));
    return r;
}

static void destroy_loaded(const pj_plugin *pl, PJRT_LoadedExecutable *le) {
    PJRT_LoadedExecutable_Destroy_Args d;
    memset(&d, 0, sizeof d);
    d.struct_size = PJ_SIZE(PJRT_LoadedExecutable_Destroy_Args, executable);
    d.executable = le;
    pj_error_free(pl, pl->api->PJRT_LoadedExecutable_Destroy(&d));
}

static void compile_failed(em_ctx *c, pj_plugin *pl, PJRT_Error *e, const char *text,
                           const char *what, bool in_op) {
    pthread_mutex_lock(&pl->cache.lock);
    pl->cache.stats.failures++;
    pthread_mutex_unlock(&pl->cache.lock);
    if (getenv("EMBER_PJRT_DUMP_FAILED")) fprintf(stderr, "%s\n", text);
    char msg[700];
    pj_error_text(pl, e, msg, sizeof msg);
    pj_error_free(pl, e);
    if (pl->log_compiles)
        fprintf(stderr, "[ember] compile FAILED on %s: %s: %s\n", pl->name, what, msg);
    if (in_op)
        em_op_fail(c, EM_ERR_BACKEND, "compiling the StableHLO program failed (plugin %s): %s",
                   pl->name, msg);
    else
        EM_FAIL(c, EM_ERR_BACKEND, what, "compile failed (plugin %s): %s", pl->name, msg);
}

/* A compile-only plugin's compile: PJRT_Compile against the topology, then the report and the
 * output count; the executable itself is not kept. false after an error (recorded). */
static bool compile_aot(em_ctx *c, pj_plugin *pl, const PJRT_Program *prog,
                        const unsigned char *opts, size_t no, const char *text, const char *what,
                        bool in_op, int *n_out, em_pjrt_program_report *rep) {
    PJ_ARGS(PJRT_Compile_Args, a, executable);
    a.topology = pl->topology;
    a.program = prog;
    a.compile_options = (const char *)opts;
    a.compile_options_size = no;
    PJRT_Error *e = pl->api->PJRT_Compile(&a);
    if (e) {
        compile_failed(c, pl, e, text, what, in_op);
        return false;
    }
    pj_report_fill(pl, a.executable, rep);
    *n_out = rep->n_outputs;
    PJ_ARGS(PJRT_Executable_Destroy_Args, d, executable);
    d.executable = a.executable;
    pj_error_free(pl, pl->api->PJRT_Executable_Destroy(&d));
    return true;
}

pj_exec *pj_compile(em_ctx *c, pj_plugin *pl, const pj_key *k, uint64_t h, const char *text,
                    const char *what, bool in_op) {
    return pj_compile_for(c, pl, k, h, text, what, in_op, NULL);
}

pj_exec *pj_compile_for(em_ctx *c, pj_plugin *pl, const pj_key *k, uint64_t h, const char *text,
                        const char *what, bool in_op, const pj_compile_spec *sp) {
    unsigned char opts[PJ_OPTS_MAX];
    size_t no = pj_compile_options_for(sp, opts, sizeof opts);
    if (!no) {
        if (in_op) em_op_fail(c, EM_ERR_UNSUPPORTED, "compile options for this many devices "
                              "do not fit in %d bytes", PJ_OPTS_MAX);
        else EM_FAIL(c, EM_ERR_UNSUPPORTED, what, "compile options too long");
        return NULL;
    }
    size_t tl = strlen(text);
    uint64_t ph = pj_hash(text, tl);
    double t0 = now_s();
    bool from_disk = false;
    PJRT_LoadedExecutable *le = NULL;
    em_pjrt_program_report rep;
    memset(&rep, 0, sizeof rep);
    snprintf(rep.what, sizeof rep.what, "%s", what);
    int n_out = -1;
    PJRT_Program prog;
    memset(&prog, 0, sizeof prog);
    prog.struct_size = PJ_SIZE(PJRT_Program, format_size);
    prog.code = (char *)text;
    prog.code_size = tl;
    prog.format = "mlir";
    prog.format_size = 4;
    if (getenv("EMBER_PJRT_DUMP"))
        fprintf(stderr, "[ember] program for %s on %s:\n%s\n", what, pl->name, text);
    if (pl->aot) {
        from_disk = report_load(pl, ph, opts, no, &n_out, &rep);
        if (!from_disk && !compile_aot(c, pl, &prog, opts, no, text, what, in_op, &n_out, &rep))
            return NULL;
        if (!from_disk) report_store(pl, ph, opts, no, n_out, &rep);
        rep.roofline_seconds = pj_aot_roofline(pl, rep.flops, rep.bytes_accessed);
    } else if ((le = disk_load(pl, ph, opts, no))) {
        from_disk = true;
    } else {
        PJRT_Client_Compile_Args a;
        memset(&a, 0, sizeof a);
        a.struct_size = PJ_SIZE(PJRT_Client_Compile_Args, executable);
        a.client = pl->client;
        a.program = &prog;
        a.compile_options = (const char *)opts;
        a.compile_options_size = no;
        PJRT_Error *e = pl->api->PJRT_Client_Compile(&a);
        if (e) {
            compile_failed(c, pl, e, text, what, in_op);
            return NULL;
        }
        le = a.executable;
    }
    double dt = now_s() - t0;
    if (le) n_out = num_outputs(pl, le);
    pj_exec *x = calloc(1, sizeof *x);
    unsigned char *kb = x ? malloc(k->len ? k->len : 1) : NULL;
    if (!kb) {
        free(x);
        if (le) destroy_loaded(pl, le);
        if (in_op) em_op_fail(c, EM_ERR_OOM, "out of memory");
        else EM_FAIL(c, EM_ERR_OOM, what, "out of memory");
        return NULL;
    }
    memcpy(kb, k->p, k->len);
    x->hash = h;
    x->key = kb;
    x->key_len = k->len;
    x->exe = le;
    x->n_out = n_out;
    snprintf(rep.what, sizeof rep.what, "%s", what); /* not what the disk entry had */
    x->report = rep; /* a client plugin's report is made on request (pj_exec_report) */
    x->report_ready = pl->aot;
    if (pl->log_compiles) {
        fprintf(stderr, "[ember] %s on %s: %s (%s) %.1f ms\n", from_disk ? "loaded" : "compiled",
                pl->name, what,
                from_disk ? "found in the disk cache" : "first call with this signature",
                dt * 1e3);
        pj_report_log(pl, pj_exec_report(pl, x));
    }
    if (!from_disk && le) disk_store(pl, le, ph, opts, no);
    pthread_mutex_lock(&pl->cache.lock);
    pl->cache.stats.misses++;
    if (from_disk)
        pl->cache.stats.disk_hits++;
    else
        pl->cache.stats.compiles++;
    pl->cache.stats.compile_seconds += dt;
    pj_exec *kept = insert_locked(&pl->cache, x);
    pthread_mutex_unlock(&pl->cache.lock);
    if (kept != x) { /* another thread compiled it meanwhile (or no memory for the table) */
        if (le) destroy_loaded(pl, le);
        free(x->key);
        free(x);
        if (!kept) {
            if (in_op) em_op_fail(c, EM_ERR_OOM, "out of memory");
            else EM_FAIL(c, EM_ERR_OOM, what, "out of memory");
        }
    }
    return kept;
}

/* ---- execute ---- */

/* One PJRT_LoadedExecutable_Execute (counted in the plugin's statistics); execute_device: the
 * device of a single-device portable program, NULL for the executable's own assignment. */
static em_status launch(em_ctx *c, pj_plugin *pl, pj_exec *x, int n_devices, int n_args,
                        PJRT_Buffer *const *const *arg_lists, PJRT_Buffer **const *out_lists,
                        PJRT_Event **events, PJRT_Device *execute_device, bool in_op) {
    PJRT_ExecuteOptions o;
    memset(&o, 0, sizeof o);
    o.struct_size = PJ_SIZE(PJRT_ExecuteOptions, incarnation_ids);
    PJRT_LoadedExecutable_Execute_Args a;
    memset(&a, 0, sizeof a);
    a.struct_size = PJ_SIZE(PJRT_LoadedExecutable_Execute_Args, execute_device);
    a.executable = x->exe;
    a.options = &o;
    a.argument_lists = arg_lists;
    a.num_devices = (size_t)n_devices;
    a.num_args = (size_t)n_args;
    a.output_lists = out_lists;
    a.device_complete_events = events;
    a.execute_device = execute_device;
    double t0 = now_s();
    PJRT_Error *err = pl->api->PJRT_LoadedExecutable_Execute(&a);
    double dt = now_s() - t0;
    pthread_mutex_lock(&pl->cache.lock);
    pl->cache.stats.executions++;
    pl->cache.stats.execute_seconds += dt;
    pthread_mutex_unlock(&pl->cache.lock);
    return pj_check(c, pl, err, in_op, "execute") ? EM_ERR_BACKEND : EM_OK;
}

em_status pj_execute_multi(em_ctx *c, pj_plugin *pl, pj_exec *x, int n_devices, int n_args,
                           PJRT_Buffer *const *const *arg_lists, PJRT_Buffer **const *out_lists,
                           PJRT_Event **events, bool in_op) {
    return launch(c, pl, x, n_devices, n_args, arg_lists, out_lists, events, NULL, in_op);
}

em_status pj_execute(em_ctx *c, em_device *d, pj_exec *x, PJRT_Buffer *const *args, int n_args,
                     PJRT_Buffer **outs, bool in_op) {
    pj_dev *pd = d->impl;
    pj_plugin *pl = pd->pl;
    if (pl->aot) { /* nothing runs: the outputs stay shape-only, the cost is counted */
        for (int i = 0; i < x->n_out; i++) outs[i] = NULL;
        pj_project(pl, x);
        return EM_OK;
    }
    PJRT_Event *ev = NULL;
    PJRT_Buffer *const *arg_lists[1] = {args};
    PJRT_Buffer **out_lists[1] = {outs};
    if (launch(c, pl, x, 1, n_args, arg_lists, out_lists, &ev, pd->dev, in_op))
        return EM_ERR_BACKEND;
    return ev ? pj_dev_track(c, d, ev) : EM_OK;
}

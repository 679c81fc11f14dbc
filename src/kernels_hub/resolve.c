/*
 * Resolution (khub.h): a package spec to its variants, each accepted or rejected with a reason,
 * and the preferred one. Offline: a Hub id is read from the Hub cache only.
 */
#include <dirent.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ember/hub.h"
#include "io/hub/hub_internal.h"
#include "kernels_hub/khub.h"

#define OP "kernels"

bool khub_appendf(char **s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    size_t old = *s ? strlen(*s) : 0;
    char *p = n < 0 ? NULL : realloc(*s, old + (size_t)n + 1);
    if (!p) return false;
    va_start(ap, fmt);
    vsnprintf(p + old, (size_t)n + 1, fmt, ap);
    va_end(ap);
    *s = p;
    return true;
}

bool khub_file_sha256(const char *path, char hex[65]) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    hub_sha256 s;
    hub_sha256_init(&s);
    unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) hub_sha256_update(&s, buf, n);
    bool ok = !ferror(f);
    fclose(f);
    if (ok) hub_sha256_final_hex(&s, hex);
    return ok;
}

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* ---- metadata.json ----------------------------------------------------------------------- */

static unsigned mode_bit(const char *s) {
    if (!strcmp(s, "inference")) return EM_KMODE_INFERENCE;
    if (!strcmp(s, "training")) return EM_KMODE_TRAINING;
    if (!strcmp(s, "compile")) return EM_KMODE_COMPILE;
    return 0;
}

/* Safe relative file names only: no "..", no absolute paths. */
static bool safe_name(const char *s) {
    return *s && *s != '/' && !strstr(s, "..") && !strchr(s, '\\') && strlen(s) < 128;
}

/* Reads build/<variant>/metadata.json; false with the reason. */
bool khub_meta_read(const char *path, khub_meta *m, char *why, size_t why_n) {
    memset(m, 0, sizeof *m);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        snprintf(why, why_n, "metadata.json is not valid JSON: %s (line %d)", jerr.text,
                 jerr.line);
        return false;
    }
    bool ok = false;
    json_t *name = json_object_get(root, "name"), *ver = json_object_get(root, "version"),
           *lic = json_object_get(root, "license"), *be = json_object_get(root, "backend"),
           *lib = json_object_get(root, "library"), *ops = json_object_get(root, "ops"),
           *files = json_object_get(root, "files");
    if (!json_is_string(name) || !json_is_integer(ver) || !json_is_string(lic) ||
        !json_is_string(be) || !json_is_array(ops) || !json_is_object(files)) {
        snprintf(why, why_n, "metadata.json lacks one of name (string), version (integer), "
                             "license, backend, ops (list), files (object of sha256 digests)");
        goto out;
    }
    snprintf(m->name, sizeof m->name, "%s", json_string_value(name));
    m->version = (int)json_integer_value(ver);
    snprintf(m->license, sizeof m->license, "%s", json_string_value(lic));
    snprintf(m->backend, sizeof m->backend, "%s", json_string_value(be));
    if (json_is_string(lib)) snprintf(m->library, sizeof m->library, "%s", json_string_value(lib));
    size_t i;
    json_t *o;
    json_array_foreach(ops, i, o) {
        if (m->n_ops == KHUB_MAX_OPS) {
            snprintf(why, why_n, "metadata.json lists more than %d ops", KHUB_MAX_OPS);
            goto out;
        }
        json_t *opn = json_object_get(o, "op"), *dts = json_object_get(o, "dtypes"),
               *modes = json_object_get(o, "modes");
        const em_op_def *def = json_is_string(opn) ? em_op_find(json_string_value(opn)) : NULL;
        if (!def) {
            snprintf(why, why_n, "metadata.json provides op '%s', which is not in Ember's op table",
                     json_is_string(opn) ? json_string_value(opn) : "?");
            goto out;
        }
        khub_op_decl *d = &m->ops[m->n_ops++];
        d->op = def->id;
        size_t j;
        json_t *x;
        json_array_foreach(dts, j, x) {
            em_dtype dt;
            if (!json_is_string(x) || !em_dtype_parse(json_string_value(x), &dt)) {
                snprintf(why, why_n, "metadata.json: op %s names an unknown dtype", def->name);
                goto out;
            }
            d->dtypes |= (uint64_t)1 << (unsigned)dt;
        }
        json_array_foreach(modes, j, x) {
            unsigned b = json_is_string(x) ? mode_bit(json_string_value(x)) : 0;
            if (!b) {
                snprintf(why, why_n, "metadata.json: op %s names a mode other than inference, "
                                     "training, compile", def->name);
                goto out;
            }
            d->modes |= b;
        }
        json_t *shlo = json_object_get(o, "stablehlo");
        if (shlo && !khub_shlo_meta(shlo, m, m->n_ops - 1, why, why_n)) goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(files, key, val) {
        const char *hex = json_is_string(val) ? json_string_value(val) : "";
        if (m->n_files == KHUB_MAX_FILES || !safe_name(key) || !hub_is_sha256(hex)) {
            snprintf(why, why_n, "metadata.json: files[\"%.100s\"] is not a safe relative name "
                                 "with a sha256 digest (64 hex digits)", key);
            goto out;
        }
        snprintf(m->files[m->n_files], sizeof m->files[0], "%s", key);
        snprintf(m->digests[m->n_files++], 65, "%s", hex);
    }
    if (!m->library[0])
        for (int f = 0; f < m->n_files && !m->library[0]; f++) {
            size_t l = strlen(m->files[f]);
            if (l > 3 && !strcmp(m->files[f] + l - 3, ".so"))
                snprintf(m->library, sizeof m->library, "%s", m->files[f]);
        }
    ok = true;
out:
    json_decref(root);
    return ok;
}

/* ---- one variant ------------------------------------------------------------------------- */

static int wanted_major(const char *spec) {
    const char *at = strrchr(spec, '@');
    if (!at || at[1] != 'v' || !at[2] || strspn(at + 2, "0123456789") != strlen(at + 2)) return 0;
    return atoi(at + 2);
}

static bool lock_digest(const khub_lock_entry *e, const char *file, const char **out) {
    for (int i = 0; i < e->n_files; i++)
        if (!strcmp(e->files[i], file)) {
            *out = e->digests[i];
            return true;
        }
    return false;
}

/* Checks the files of an accepted variant; false with the reason. */
static bool check_files(const khub_resolution *r, khub_candidate *k, const khub_lock_entry *le) {
    /* root < 1024, a variant name < 128, a file name < 128: these hold any of them */
    char dir[1200], path[1700], rel[300], hex[65];
    snprintf(dir, sizeof dir, "%s/build/%s", r->root, k->v.name);
    const khub_meta *m = &k->meta;
    for (int f = 0; f < m->n_files; f++) {
        snprintf(path, sizeof path, "%s/%s", dir, m->files[f]);
        snprintf(rel, sizeof rel, "build/%.127s/%.127s", k->v.name, m->files[f]);
        if (!khub_file_sha256(path, hex)) {
            snprintf(k->reason, sizeof k->reason, "%s is missing or unreadable", rel);
            return false;
        }
        if (strcmp(hex, m->digests[f])) {
            snprintf(k->reason, sizeof k->reason,
                     "digest mismatch in %s: metadata.json says %s, the file has %s", rel,
                     m->digests[f], hex);
            return false;
        }
    }
    /* every file in the folder must be covered (a planted library is refused too) */
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "metadata.json")) continue;
        bool listed = false;
        for (int f = 0; f < m->n_files; f++) listed |= !strcmp(m->files[f], e->d_name);
        if (!listed) {
            snprintf(k->reason, sizeof k->reason,
                     "build/%s/%s has no digest in metadata.json", k->v.name, e->d_name);
            closedir(d);
            return false;
        }
    }
    if (d) closedir(d);
    if (!le) return true;
    /* the lock pins the metadata and every file */
    snprintf(rel, sizeof rel, "build/%.127s/metadata.json", k->v.name);
    const char *want;
    if (!lock_digest(le, rel, &want)) {
        snprintf(k->reason, sizeof k->reason,
                 "not in the lock file (it pins another variant; run `ember kernels lock` "
                 "again to change that)");
        return false;
    }
    for (int f = -1; f < m->n_files; f++) {
        if (f >= 0) snprintf(rel, sizeof rel, "build/%.127s/%.127s", k->v.name, m->files[f]);
        snprintf(path, sizeof path, "%s/%s", r->root, rel);
        if (!lock_digest(le, rel, &want)) {
            snprintf(k->reason, sizeof k->reason, "%s is not in the lock file", rel);
            return false;
        }
        if (!khub_file_sha256(path, hex) || strcmp(hex, want)) {
            snprintf(k->reason, sizeof k->reason,
                     "digest mismatch in %s: the lock says %s, the file has %s", rel, want,
                     hex);
            return false;
        }
    }
    return true;
}

static void judge(const khub_resolution *r, khub_candidate *k, const khub_lock_entry *le) {
    char why[400];
    k->accepted = false;
    if (!khub_variant_parse(k->v.name, &k->v, why, sizeof why) ||
        !khub_variant_host_ok(&k->v, &k->rank, why, sizeof why) ||
        !khub_variant_target_ok(&k->v, r->target, why, sizeof why)) {
        snprintf(k->reason, sizeof k->reason, "%s", why);
        return;
    }
    char path[1300];
    snprintf(path, sizeof path, "%s/build/%s/metadata.json", r->root, k->v.name);
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(k->reason, sizeof k->reason, "no metadata.json in build/%s", k->v.name);
        return;
    }
    if (!khub_meta_read(path, &k->meta, why, sizeof why)) {
        snprintf(k->reason, sizeof k->reason, "%s", why);
        return;
    }
    int major = wanted_major(r->spec);
    if (major && k->meta.version != major) {
        snprintf(k->reason, sizeof k->reason, "version %d, the spec asks for v%d",
                 k->meta.version, major);
        return;
    }
    if (strcmp(k->meta.backend, k->v.backend)) {
        snprintf(k->reason, sizeof k->reason, "metadata.json says backend %s, the variant name %s",
                 k->meta.backend, k->v.backend);
        return;
    }
    bool shlo = !strcmp(k->v.backend, "stablehlo");
    if (shlo && !khub_shlo_check(&k->meta, why, sizeof why)) {
        snprintf(k->reason, sizeof k->reason, "%s", why);
        return;
    }
    if (!shlo && !k->meta.library[0]) {
        snprintf(k->reason, sizeof k->reason, "metadata.json names no library (.so)");
        return;
    }
    if (!check_files(r, k, le)) return;
    k->accepted = true;
}

/* ---- a spec ------------------------------------------------------------------------------ */

/* The snapshot folder of a Hub id, from the cache alone. */
static em_status hub_root(em_ctx *c, const char *spec, const khub_lock *lock, khub_resolution *r) {
    char id[512];
    snprintf(id, sizeof id, "%s", spec);
    char *at = strrchr(id, '@');
    if (at) *at = 0;
    snprintf(r->repo, sizeof r->repo, "%.255s", id);
    const khub_lock_entry *le = khub_lock_find(lock, id);
    char full[600];
    snprintf(full, sizeof full, "%s@%s", id, le ? le->commit : at ? at + 1 : "v1");
    khub_host_files h;
    khub_host_files_init(&h);
    em_hub_options o = em_hub_default_options();
    o.offline = 1; /* loading never touches the network */
    o.progress = 0;
    char *dir = NULL;
    em_status st = em_hub_ensure(c, full, NULL, h.opt, &o, &dir);
    if (st != EM_OK) return st;
    snprintf(r->root, sizeof r->root, "%s", dir);
    const char *slash = strrchr(dir, '/');
    snprintf(r->commit, sizeof r->commit, "%s", slash ? slash + 1 : dir);
    free(dir);
    return EM_OK;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const khub_candidate *)a)->v.name, ((const khub_candidate *)b)->v.name);
}

em_status khub_resolve(em_ctx *c, const char *spec, const khub_lock *lock, khub_resolution *r) {
    return khub_resolve_for(c, spec, NULL, lock, r);
}

em_status khub_resolve_for(em_ctx *c, const char *spec, const char *target, const khub_lock *lock,
                           khub_resolution *r) {
    memset(r, 0, sizeof *r);
    r->chosen = -1;
    snprintf(r->spec, sizeof r->spec, "%s", spec);
    snprintf(r->target, sizeof r->target, "%s", target ? target : "");
    if (is_dir(spec)) {
        char real[PATH_MAX];
        if (!realpath(spec, real)) return em_ctx_fail(c, EM_ERR_IO, OP, "cannot resolve %s", spec);
        if (strlen(real) >= sizeof r->root)
            return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "%s: the path is too long", spec);
        snprintf(r->root, sizeof r->root, "%.1023s", real);
        snprintf(r->repo, sizeof r->repo, "%.255s", real);
        snprintf(r->commit, sizeof r->commit, "local");
    } else if (strchr(spec, '/') && spec[0] != '.' && spec[0] != '/') {
        em_status st = hub_root(c, spec, lock, r);
        if (st != EM_OK) return st;
    } else {
        return em_ctx_fail(c, EM_ERR_NOT_FOUND, OP,
                           "kernel package '%s' is neither a folder nor a Hub id (org/name)", spec);
    }
    const khub_lock_entry *le = khub_lock_find(lock, r->repo);
    char build[PATH_MAX + 8];
    snprintf(build, sizeof build, "%s/build", r->root);
    DIR *d = opendir(build);
    if (!d)
        return em_ctx_fail(c, EM_ERR_NOT_FOUND, OP, "%s has no build/ folder of variants",
                           r->root);
    struct dirent *e;
    while ((e = readdir(d)) && r->n < KHUB_MAX_VARIANTS) {
        if (e->d_name[0] == '.') continue;
        snprintf(r->c[r->n++].v.name, sizeof r->c[0].v.name, "%.127s", e->d_name);
    }
    closedir(d);
    qsort(r->c, (size_t)r->n, sizeof *r->c, cmp_name);
    for (int i = 0; i < r->n; i++) {
        khub_candidate *k = &r->c[i];
        if (le && strcmp(le->commit, r->commit)) {
            snprintf(k->reason, sizeof k->reason, "the lock pins commit %s, this is %s",
                     le->commit, r->commit);
            continue;
        }
        judge(r, k, le);
        if (k->accepted && (r->chosen < 0 || k->rank > r->c[r->chosen].rank)) r->chosen = i;
    }
    if (r->chosen >= 0) return EM_OK;
    char *text = khub_explain_text(r);
    em_status st = em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP, "no variant of %s can load here:\n%s",
                               spec, text ? text : "(out of memory)");
    free(text);
    return st;
}

char *khub_explain_text(const khub_resolution *r) {
    char *s = NULL;
    bool ok = khub_appendf(&s, "%s: %s at %s%s%s%s\n", r->spec, r->repo, r->commit,
                           r->target[0] ? " (for " : "", r->target, r->target[0] ? ")" : "");
    if (!r->n) ok = ok && khub_appendf(&s, "  (no variants in build/)\n");
    for (int i = 0; i < r->n && ok; i++) {
        const khub_candidate *k = &r->c[i];
        if (!k->accepted)
            ok = khub_appendf(&s, "  Rejected %s: %s\n", k->v.name, k->reason);
        else if (i == r->chosen)
            ok = khub_appendf(&s, "  Accepted %s: %s v%d (%s), chosen\n", k->v.name,
                              k->meta.name, k->meta.version, k->meta.license) &&
                 khub_shlo_explain(&k->meta, &s);
        else
            ok = khub_appendf(&s, "  Accepted %s: ranks below %s\n", k->v.name,
                              r->c[r->chosen].v.name);
    }
    if (ok && r->chosen < 0)
        ok = khub_appendf(&s, "  nothing accepted: the built-in kernels stay\n");
    if (!ok) {
        free(s);
        return NULL;
    }
    return s;
}

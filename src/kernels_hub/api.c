/* The public face of the kernel hub (ember/kernels.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ember/hub.h"
#include "kernels_hub/khub.h"

#define OP "kernels"

em_kernels_options em_kernels_default_options(void) {
    em_kernels_options o = {NULL, 1, NULL};
    return o;
}

/* The lock to honour: explicit, $EMBER_KERNELS_LOCK, or ./ember-kernels.lock when present. */
static em_status lock_open(em_ctx *c, const em_kernels_options *o, khub_lock *l) {
    memset(l, 0, sizeof *l);
    const char *p = o ? o->lock_path : NULL;
    if (!p) p = getenv("EMBER_KERNELS_LOCK");
    if (!p && access("ember-kernels.lock", R_OK) == 0) p = "ember-kernels.lock";
    if (!p || !*p) return EM_OK;
    return khub_lock_read(c, p, l);
}

em_status em_kernels_load(em_ctx *c, const char *spec, const em_kernels_options *opts) {
    if (!c || c->err.status) return c ? c->err.status : EM_ERR_INVALID_ARG;
    if (!spec) return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "no package spec given");
    em_kernels_options o = opts ? *opts : em_kernels_default_options();
    em_device_cpu(); /* the built-ins are attached before a package joins them */
    khub_lock l;
    em_status st = lock_open(c, &o, &l);
    if (st != EM_OK) return st;
    khub_resolution *r = malloc(sizeof *r);
    if (!r) st = em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    if (st == EM_OK) st = khub_resolve_for(c, spec, o.target, &l, r);
    if (st == EM_OK) st = khub_load(c, r, o.self_test != 0);
    free(r);
    khub_lock_free(&l);
    return st;
}

em_status em_kernels_explain(em_ctx *c, const char *spec, const em_kernels_options *opts,
                             char **text) {
    if (!text) return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "text is NULL");
    *text = NULL;
    if (!c || c->err.status) return c ? c->err.status : EM_ERR_INVALID_ARG;
    khub_lock l;
    em_status st = lock_open(c, opts, &l);
    if (st != EM_OK) return st;
    khub_resolution *r = malloc(sizeof *r);
    if (!r) {
        khub_lock_free(&l);
        return em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    }
    st = khub_resolve_for(c, spec, opts ? opts->target : NULL, &l, r);
    if (st == EM_OK || st == EM_ERR_UNSUPPORTED) *text = khub_explain_text(r);
    free(r);
    khub_lock_free(&l);
    return st;
}

static void dtypes_str(uint64_t d, char *buf, size_t n) {
    if (d == ~(uint64_t)0) {
        snprintf(buf, n, "all");
        return;
    }
    buf[0] = 0;
    for (int t = 0; t < 64; t++)
        if (d & ((uint64_t)1 << t)) {
            size_t l = strlen(buf);
            snprintf(buf + l, n - l, "%s%s", l ? "," : "", em_dtype_name((em_dtype)t));
        }
}

static void modes_str(unsigned m, char *buf, size_t n) {
    snprintf(buf, n, "%s%s%s%s", m == EM_KMODE_ALL ? "all" : "",
             m != EM_KMODE_ALL && (m & EM_KMODE_INFERENCE) ? "inference " : "",
             m != EM_KMODE_ALL && (m & EM_KMODE_TRAINING) ? "training " : "",
             m != EM_KMODE_ALL && (m & EM_KMODE_COMPILE) ? "compile" : "");
}

char *em_kernels_list(const char *kind, bool all) {
    if (!kind) kind = "cpu";
    if (!strcmp(kind, "cpu")) em_device_cpu();
    char *s = NULL;
    bool ok = khub_appendf(&s, "%-16s %-22s %-58s %4s  %-12s %s\n", "op", "implementation",
                           "source", "prio", "dtypes", "modes");
    int shown = 0;
    for (int op = 0; op < EM_OP_COUNT && ok; op++) {
        const em_kimpl *v[64];
        int n = em_kreg_list((em_op_id)op, kind, v, 64);
        if (!n || (n == 1 && !all && v[0]->fn)) continue;
        shown++;
        bool won = false;
        for (int i = 0; i < n && ok; i++) {
            char d[128], m[40], name[80];
            dtypes_str(v[i]->dtypes, d, sizeof d);
            modes_str(v[i]->modes, m, sizeof m);
            bool off = atomic_load(&v[i]->disabled);
            snprintf(name, sizeof name, "%s%s", v[i]->name,
                     off ? " (disabled)" : !won ? " *" : "");
            won |= !off;
            ok = khub_appendf(&s, "%-16s %-22s %-58s %4d  %-12s %s\n",
                              i ? "" : em_op_get((em_op_id)op)->name, name, v[i]->source,
                              v[i]->priority, d, m);
        }
    }
    if (ok && !shown)
        ok = khub_appendf(&s, "(only the built-in kernels; `ember kernels list --all` shows "
                              "them)\n");
    if (ok)
        ok = khub_appendf(&s, "* the first choice for a call of its dtypes and modes that its "
                              "supports() accepts; otherwise the next one, the built-in last\n");
    if (!ok) {
        free(s);
        return NULL;
    }
    return s;
}

em_status em_kernels_lock(em_ctx *c, const char *const *specs, int n, const char *path) {
    if (!c || c->err.status) return c ? c->err.status : EM_ERR_INVALID_ARG;
    if (!specs || n <= 0 || !path)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "no packages or no lock path given");
    khub_resolution *r = calloc((size_t)n, sizeof *r);
    if (!r) return em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    em_status st = EM_OK;
    for (int i = 0; i < n && st == EM_OK; i++) st = khub_resolve(c, specs[i], NULL, &r[i]);
    if (st == EM_OK) st = khub_lock_write(c, path, r, n);
    free(r);
    return st;
}

em_status em_kernels_download(em_ctx *c, const char *spec, char **dir) {
    if (dir) *dir = NULL;
    if (!c || c->err.status) return c ? c->err.status : EM_ERR_INVALID_ARG;
    khub_host_files h;
    khub_host_files_init(&h);
    char id[600];
    snprintf(id, sizeof id, "%s%s", spec, strchr(spec, '@') ? "" : "@v1");
    char *snap = NULL;
    em_status st = em_hub_ensure(c, id, NULL, h.opt, NULL, &snap);
    /* the files at the commit the metadata came from (snapshots/<commit>), even if the branch
     * moves meanwhile */
    if (st == EM_OK) {
        char *at = strrchr(id, '@'), *slash = strrchr(snap, '/');
        if (at && slash) snprintf(at + 1, sizeof id - (size_t)(at + 1 - id), "%s", slash + 1);
    }
    /* then every file of each variant present */
    for (int i = 0; i < h.n && st == EM_OK; i++) {
        char mp[1400], why[400];
        snprintf(mp, sizeof mp, "%s/%s", snap, h.files[i]);
        khub_meta *m = malloc(sizeof *m);
        if (!m) {
            st = em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
            break;
        }
        if (access(mp, R_OK) == 0 && !khub_meta_read(mp, m, why, sizeof why))
            st = em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s: %s", mp, why);
        else if (access(mp, R_OK) == 0) {
            char rel[KHUB_MAX_FILES][300];
            const char *req[KHUB_MAX_FILES + 1];
            for (int f = 0; f < m->n_files; f++) {
                snprintf(rel[f], sizeof rel[f], "build/%.127s/%.127s", h.names[i], m->files[f]);
                req[f] = rel[f];
            }
            req[m->n_files] = NULL;
            char *d2 = NULL;
            st = em_hub_ensure(c, id, req, NULL, NULL, &d2);
            free(d2);
        }
        free(m);
    }
    /* what was fetched must verify as loading would */
    khub_resolution *r = st == EM_OK ? malloc(sizeof *r) : NULL;
    if (st == EM_OK && !r) st = em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    if (st == EM_OK) st = khub_resolve(c, snap, NULL, r);
    free(r);
    if (st == EM_OK && dir)
        *dir = snap;
    else
        free(snap);
    return st;
}

/* ---- $EMBER_KERNELS ---------------------------------------------------------------------- */

static pthread_once_t auto_once = PTHREAD_ONCE_INIT;
static _Thread_local bool in_autoload; /* its own contexts must not wait for it */

static void autoload(void) {
    const char *env = getenv("EMBER_KERNELS");
    if (!env || !*env || !strcmp(env, "none")) return;
    char *list = strdup(env);
    em_ctx *c = em_ctx_create();
    for (char *save = NULL, *s = list ? strtok_r(list, ",", &save) : NULL; s && c;
         s = strtok_r(NULL, ",", &save)) {
        if (em_kernels_load(c, s, NULL) != EM_OK)
            fprintf(stderr, "ember: EMBER_KERNELS: %s; the built-in kernels are used\n",
                    em_ctx_error(c)->message);
        em_ctx_clear_error(c);
    }
    em_ctx_free(c);
    free(list);
}

void em_kernels_autoload(void) {
    if (in_autoload) return;
    in_autoload = true;
    pthread_once(&auto_once, autoload);
    in_autoload = false;
}

/* Settings of a Hub call: the id and revision asked for, and where the cache, the endpoint and
 * the token are, read from the options and the environment the way huggingface_hub's
 * constants.py reads them (so both find the same cache and token). */
#include <ctype.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/tensor_impl.h"
#include "io/hub/hub_internal.h"

bool hub_env_true(const char *v) {
    return v && (!strcmp(v, "1") || !strcasecmp(v, "ON") || !strcasecmp(v, "YES") ||
                 !strcasecmp(v, "TRUE"));
}

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* os.path.expanduser: a leading "~" or "~user". The _r look-ups: no static buffers shared
 * between threads. */
static char *expand_user(const char *p) {
    if (p[0] != '~') return strdup(p);
    const char *rest = p + 1 + strcspn(p + 1, "/");
    const char *home = NULL;
    char buf[4096];
    struct passwd pw, *found = NULL;
    if (rest == p + 1) {
        home = getenv("HOME");
        if (!home && getpwuid_r(getuid(), &pw, buf, sizeof buf, &found) == 0 && found)
            home = found->pw_dir;
    } else {
        char user[256];
        size_t n = (size_t)(rest - p - 1);
        if (n >= sizeof user) return strdup(p);
        memcpy(user, p + 1, n);
        user[n] = '\0';
        if (getpwnam_r(user, &pw, buf, sizeof buf, &found) == 0 && found) home = found->pw_dir;
    }
    if (!home) return strdup(p);
    size_t hn = strlen(home);
    while (hn > 1 && home[hn - 1] == '/') hn--; /* Python strips a trailing '/' from HOME */
    return hub_strf("%.*s%s", (int)hn, home, rest);
}

/* os.path.expandvars: $NAME and ${NAME} of variables that are set; others stay as written. */
static char *expand_vars(const char *p) {
    size_t cap = strlen(p) + 64, o = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    for (const char *s = p; *s;) {
        const char *val = NULL;
        size_t used = 1;
        if (*s == '$') {
            bool brace = s[1] == '{';
            const char *n0 = s + 1 + brace, *n1 = n0;
            while (isalnum((unsigned char)*n1) || *n1 == '_') n1++;
            if (n1 > n0 && (!brace || *n1 == '}')) {
                char name[256];
                size_t nl = (size_t)(n1 - n0);
                if (nl < sizeof name) {
                    memcpy(name, n0, nl);
                    name[nl] = '\0';
                    val = getenv(name);
                    used = (size_t)(n1 - s) + brace;
                }
            }
        }
        size_t add = val ? strlen(val) : 1;
        if (o + add + 1 > cap) {
            cap = (o + add + 1) * 2;
            char *bigger = realloc(out, cap);
            if (!bigger) {
                free(out);
                return NULL;
            }
            out = bigger;
        }
        if (val) {
            memcpy(out + o, val, add);
            o += add;
            s += used;
        } else {
            out[o++] = *s++;
        }
    }
    out[o] = '\0';
    return out;
}

char *hub_expand_path(const char *p) {
    /* constants.py: os.path.expandvars(os.path.expanduser(value)) */
    char *u = expand_user(p);
    if (!u) return NULL;
    char *v = expand_vars(u);
    free(u);
    return v;
}

/* HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface. */
static char *hf_home(void) {
    const char *h = env("HF_HOME");
    if (h) return hub_expand_path(h);
    const char *xdg = env("XDG_CACHE_HOME");
    char *raw = xdg ? hub_join(xdg, "huggingface") : strdup("~/.cache/huggingface");
    if (!raw) return NULL;
    char *out = hub_expand_path(raw);
    free(raw);
    return out;
}

char *em_hub_cache_dir(const em_hub_options *opts) {
    if (opts && opts->cache_dir && *opts->cache_dir) return hub_expand_path(opts->cache_dir);
    const char *v = env("HF_HUB_CACHE");
    if (!v) v = env("HUGGINGFACE_HUB_CACHE"); /* the legacy name, still honoured */
    if (v) return hub_expand_path(v);
    char *home = hf_home();
    char *out = home ? hub_join(home, "hub") : NULL;
    free(home);
    return out;
}

/* Strips leading and trailing white space in place (huggingface_hub's _clean_token). */
static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    return s;
}

/* The token: options, else HF_TOKEN (or the legacy HUGGING_FACE_HUB_TOKEN), else the token
 * file. An empty value means none. */
static em_status find_token(em_ctx *c, const char *op, const em_hub_options *o, hub_repo *r) {
    const char *t = o->token;
    const char *src = "the options";
    if (!t) {
        if ((t = env("HF_TOKEN"))) src = "HF_TOKEN";
        else if ((t = env("HUGGING_FACE_HUB_TOKEN"))) src = "HUGGING_FACE_HUB_TOKEN";
    }
    if (t) {
        char *dup = strdup(t);
        if (!dup) return EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
        char *clean = trim(dup);
        if (*clean) {
            memmove(dup, clean, strlen(clean) + 1);
            r->token = dup;
            snprintf(r->token_source, sizeof r->token_source, "%s", src);
        } else {
            free(dup);
        }
        return EM_OK;
    }
    char *path = NULL;
    const char *tp = env("HF_TOKEN_PATH");
    if (tp) {
        path = hub_expand_path(tp);
    } else {
        char *home = hf_home();
        path = home ? hub_join(home, "token") : NULL;
        free(home);
    }
    if (!path) return EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
    FILE *f = fopen(path, "r");
    if (f) {
        char buf[1024];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        char *clean = trim(buf);
        if (*clean) {
            r->token = strdup(clean);
            snprintf(r->token_source, sizeof r->token_source, "the token file %.70s", path);
        }
    }
    free(path);
    return EM_OK;
}

static long env_seconds(const char *name, long fallback) {
    const char *v = env(name);
    if (!v) return fallback;
    char *end;
    long s = strtol(v, &end, 10);
    return *end == '\0' && s > 0 ? s : fallback;
}

em_status hub_repo_init(em_ctx *c, const char *op, const char *id, const em_hub_options *opts,
                        hub_repo *r) {
    memset(r, 0, sizeof *r);
    em_hub_options o = opts ? *opts : em_hub_default_options();
    if (!id || !*id) return EM_FAIL(c, EM_ERR_INVALID_ARG, op, "the model id is NULL or empty");

    /* A directory of that name wins, as in transformers' from_pretrained. */
    struct stat st;
    if (stat(id, &st) == 0 && S_ISDIR(st.st_mode)) {
        r->local_dir = strdup(id);
        size_t n = r->local_dir ? strlen(r->local_dir) : 0;
        while (n > 1 && r->local_dir[n - 1] == '/') r->local_dir[--n] = '\0';
        return r->local_dir ? EM_OK : EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
    }

    const char *at = strchr(id, '@');
    size_t idlen = at ? (size_t)(at - id) : strlen(id);
    if (idlen >= sizeof r->repo_id)
        return EM_FAIL(c, EM_ERR_INVALID_ARG, op, "'%.100s...' is neither a directory nor a Hub "
                                                  "id (ids have at most 193 characters)", id);
    memcpy(r->repo_id, id, idlen);
    r->repo_id[idlen] = '\0';
    char why[160];
    if (!hub_valid_repo_id(r->repo_id, why, sizeof why)) {
        bool pathlike = id[0] == '/' || id[0] == '.' || id[0] == '~' || strchr(r->repo_id, '\\') ||
                        (strchr(id, '/') && strchr(strchr(id, '/') + 1, '/'));
        if (pathlike)
            return EM_FAIL(c, EM_ERR_NOT_FOUND, op,
                           "no directory '%.300s' (and it is not a Hub id such as 'org/name')", id);
        return EM_FAIL(c, EM_ERR_INVALID_ARG, op, "'%.300s' is not a directory, nor a valid Hub "
                                                  "id: %s", id, why);
    }
    const char *rev = at ? at + 1 : "main";
    if (strlen(rev) >= sizeof r->revision || !hub_valid_rel_path(rev, why, sizeof why))
        return EM_FAIL(c, EM_ERR_INVALID_ARG, op,
                       "revision '%.300s' of %s would not stay inside the cache: it %s", rev,
                       r->repo_id, strlen(rev) >= sizeof r->revision ? "is too long" : why);
    snprintf(r->revision, sizeof r->revision, "%s", rev);

    r->cache_dir = em_hub_cache_dir(&o);
    char folder[sizeof r->repo_id + 16];
    snprintf(folder, sizeof folder, "models--%s", r->repo_id);
    for (char *p = folder; *p; p++)
        if (*p == '/') {
            /* repo_folder_name: the '/' becomes "--" */
            memmove(p + 2, p + 1, strlen(p + 1) + 1);
            p[0] = p[1] = '-';
        }
    r->storage = r->cache_dir ? hub_join(r->cache_dir, folder) : NULL;
    const char *ep = o.endpoint ? o.endpoint : env("HF_ENDPOINT");
    r->endpoint = strdup(ep ? ep : "https://huggingface.co");
    if (!r->cache_dir || !r->storage || !r->endpoint) {
        hub_repo_free(r);
        return EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
    }
    size_t n = strlen(r->endpoint);
    while (n && r->endpoint[n - 1] == '/') r->endpoint[--n] = '\0';
    if (find_token(c, op, &o, r) != EM_OK) {
        hub_repo_free(r);
        return em_ctx_status(c);
    }
    if (o.offline >= 0) {
        r->offline = o.offline != 0;
        snprintf(r->offline_why, sizeof r->offline_why, "the offline option");
    } else {
        /* constants.py: _is_true(HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE); a set HF_HUB_OFFLINE
         * decides even when it says no */
        const char *name = env("HF_HUB_OFFLINE") ? "HF_HUB_OFFLINE" : "TRANSFORMERS_OFFLINE";
        const char *v = env(name);
        r->offline = hub_env_true(v);
        if (r->offline) snprintf(r->offline_why, sizeof r->offline_why, "%s=%.20s", name, v);
    }
    r->progress = o.progress < 0 ? isatty(STDERR_FILENO) : o.progress != 0;
    r->timeout_s = o.timeout_s > 0 ? o.timeout_s
                                   : env_seconds("HF_HUB_ETAG_TIMEOUT",
                                                 env_seconds("HF_HUB_DOWNLOAD_TIMEOUT", 10));
    return EM_OK;
}

void hub_repo_free(hub_repo *r) {
    free(r->local_dir);
    free(r->cache_dir);
    free(r->storage);
    free(r->endpoint);
    if (r->token) {
        /* the token is a credential: do not leave it in freed memory */
        volatile char *p = r->token;
        while (*p) *p++ = '\0';
        free(r->token);
    }
    memset(r, 0, sizeof *r);
}

em_hub_options em_hub_default_options(void) {
    em_hub_options o = {0};
    o.offline = -1;
    o.progress = -1;
    return o;
}

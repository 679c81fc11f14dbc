/* The Hub cache on disk, as huggingface_hub's file_download.py lays it out: refs/<revision> hold
 * commits, snapshots/<commit>/<file> are relative symlinks into blobs/<etag>, .no_exist/<commit>/
 * <file> marks absent files, .locks/<repo folder>/<etag>.lock serialises downloads of a blob. */
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/make_dirs.h"
#include "core/tensor_impl.h"
#include "io/hub/hub_internal.h"

char *hub_strf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

char *hub_join(const char *a, const char *b) { return hub_strf("%s/%s", a, b); }

bool hub_exists(const char *path) { return access(path, F_OK) == 0; }

void hub_unique_suffix(char *buf, size_t size) {
    /* unique across processes (pid), threads (the counter) and runs (the clock) */
    static atomic_ulong counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long n = atomic_fetch_add(&counter, 1);
    snprintf(buf, size, "%lx%lx%lx", (unsigned long)getpid(), n,
             (unsigned long)ts.tv_nsec ^ (unsigned long)ts.tv_sec);
}

char *hub_pointer_path(const hub_repo *r, const char *commit, const char *filename) {
    return hub_strf("%s/snapshots/%s/%s", r->storage, commit, filename);
}

em_status hub_read_ref(em_ctx *c, const char *op, const hub_repo *r, const char *revision,
                       char commit[129]) {
    char *path = hub_strf("%s/refs/%s", r->storage, revision);
    if (!path) return EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
    FILE *f = fopen(path, "r");
    if (!f) {
        free(path);
        return EM_ERR_NOT_FOUND;
    }
    char buf[130];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* huggingface_hub writes the bare commit; tolerate a newline added by hand */
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = '\0';
    if (!hub_valid_segment(buf)) {
        em_status st = EM_FAIL(c, EM_ERR_FORMAT, op, "the ref file %s does not hold a commit "
                                                     "hash (%zu bytes)", path, n);
        free(path);
        return st;
    }
    memcpy(commit, buf, n + 1);
    free(path);
    return EM_OK;
}

em_status hub_write_ref(em_ctx *c, const char *op, const hub_repo *r, const char *revision,
                        const char *commit) {
    if (!strcmp(revision, commit)) return EM_OK;
    char have[129];
    em_ctx *quiet = NULL; /* a malformed ref is simply rewritten */
    if (hub_read_ref(quiet, op, r, revision, have) == EM_OK && !strcmp(have, commit)) return EM_OK;
    char *path = hub_strf("%s/refs/%s", r->storage, revision);
    char suffix[64];
    hub_unique_suffix(suffix, sizeof suffix);
    char *tmp = path ? hub_strf("%s.%s.tmp", path, suffix) : NULL;
    char *dir = path ? strdup(path) : NULL;
    em_status st = EM_OK;
    if (!path || !tmp || !dir) {
        st = EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
        goto out;
    }
    *strrchr(dir, '/') = '\0';
    if ((st = em_make_dirs(c, op, dir)) != EM_OK) goto out;
    /* written to a temporary name and renamed, so concurrent readers never see half a ref */
    FILE *f = fopen(tmp, "w");
    bool ok = f && fputs(commit, f) >= 0;
    if (f && fclose(f) != 0) ok = false;
    if (!ok || rename(tmp, path) != 0) {
        st = EM_FAIL(c, EM_ERR_IO, op, "cannot write the ref %s: %s", path, strerror(errno));
        unlink(tmp);
    }
out:
    free(path);
    free(tmp);
    free(dir);
    return st;
}

bool hub_cached_commit(const hub_repo *r, const char *revision, char commit[129]) {
    if (hub_is_commit(revision)) {
        snprintf(commit, 129, "%s", revision);
        return true;
    }
    return hub_read_ref(NULL, "hub", r, revision, commit) == EM_OK;
}

bool hub_no_exist_marked(const hub_repo *r, const char *commit, const char *filename) {
    char *p = hub_strf("%s/.no_exist/%s/%s", r->storage, commit, filename);
    bool yes = p && hub_exists(p);
    free(p);
    return yes;
}

void hub_no_exist_mark(const hub_repo *r, const char *commit, const char *filename) {
    char *p = hub_strf("%s/.no_exist/%s/%s", r->storage, commit, filename);
    if (!p) return;
    char *slash = strrchr(p, '/');
    *slash = '\0';
    /* best effort, as in huggingface_hub: failing to remember an absence is not an error */
    if (em_make_dirs(NULL, "hub", p) == EM_OK) {
        *slash = '/';
        int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
        if (fd >= 0) close(fd);
    }
    free(p);
}

void hub_cachedir_tag(const hub_repo *r) {
    static const char tag[] =
        "Signature: 8a477f597d28d172789f06886806bc55\n"
        "# This file is a cache directory tag created by huggingface_hub.\n"
        "# For information about cache directory tags, see:\n"
        "#\thttps://bford.info/cachedir/\n";
    char *p = hub_join(r->cache_dir, "CACHEDIR.TAG");
    if (p && !hub_exists(p)) {
        FILE *f = fopen(p, "w");
        if (f) {
            fputs(tag, f);
            fclose(f);
        }
    }
    free(p);
}

static em_status copy_file(em_ctx *c, const char *op, const char *src, const char *dst) {
    int in = open(src, O_RDONLY | O_CLOEXEC);
    int out = in < 0 ? -1 : open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    em_status st = EM_OK;
    if (in < 0 || out < 0) {
        st = EM_FAIL(c, EM_ERR_IO, op, "cannot copy %s to %s: %s", src, dst, strerror(errno));
    } else {
        char buf[1 << 16];
        ssize_t n;
        while ((n = read(in, buf, sizeof buf)) > 0)
            if (write(out, buf, (size_t)n) != n) {
                n = -1;
                break;
            }
        if (n < 0) st = EM_FAIL(c, EM_ERR_IO, op, "cannot copy %s to %s: %s", src, dst,
                                strerror(errno));
    }
    if (in >= 0) close(in);
    if (out >= 0 && close(out) != 0 && st == EM_OK)
        st = EM_FAIL(c, EM_ERR_IO, op, "cannot copy %s to %s: %s", src, dst, strerror(errno));
    return st;
}

em_status hub_link_pointer(em_ctx *c, const char *op, const hub_repo *r, const char *etag,
                           const char *pointer, const char *filename) {
    /* os.path.relpath(blob, dirname(pointer)): up from snapshots/<commit>/<dirs of filename> */
    size_t ups = 2;
    for (const char *p = filename; *p; p++) ups += *p == '/';
    size_t need = ups * 3 + sizeof "blobs/" + strlen(etag);
    char *target = malloc(need);
    char *blob = hub_strf("%s/blobs/%s", r->storage, etag);
    char *dir = strdup(pointer);
    em_status st = EM_OK;
    if (!target || !blob || !dir) {
        st = EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
        goto out;
    }
    target[0] = '\0';
    for (size_t i = 0; i < ups; i++) strcat(target, "../");
    strcat(target, "blobs/");
    strcat(target, etag);
    *strrchr(dir, '/') = '\0';
    if ((st = em_make_dirs(c, op, dir)) != EM_OK) goto out;
    char have[512];
    ssize_t n = readlink(pointer, have, sizeof have - 1);
    if (n >= 0 && (have[n] = '\0', !strcmp(have, target))) goto out; /* made by another thread */
    /* made under a temporary name and renamed over the pointer, so that a reader never finds it
     * missing (huggingface_hub removes, then links) */
    char suffix[64];
    hub_unique_suffix(suffix, sizeof suffix);
    char *tmp = hub_strf("%s.%s.tmp", pointer, suffix);
    if (!tmp) {
        st = EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
        goto out;
    }
    int err = 0;
    if (symlink(target, tmp) != 0) err = errno;
    else if (rename(tmp, pointer) != 0) err = errno, unlink(tmp);
    free(tmp);
    if (!err) goto out;
    if (err == EPERM || err == EOPNOTSUPP || err == ENOSYS) {
        /* no symlinks on this file system: a copy, as huggingface_hub makes */
        unlink(pointer);
        st = copy_file(c, op, blob, pointer);
        goto out;
    }
    st = EM_FAIL(c, EM_ERR_IO, op, "cannot link %s -> %s: %s", pointer, target, strerror(err));
out:
    free(target);
    free(blob);
    free(dir);
    return st;
}

int hub_lock_blob(em_ctx *c, const char *op, const hub_repo *r, const char *etag) {
    const char *folder = strrchr(r->storage, '/') + 1;
    char *dir = hub_strf("%s/.locks/%s", r->cache_dir, folder);
    char *path = dir ? hub_strf("%s/%s.lock", dir, etag) : NULL;
    int fd = -1;
    if (!dir || !path) {
        EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
    } else if (em_make_dirs(c, op, dir) == EM_OK) {
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        /* flock, as the filelock package under huggingface_hub: the two exclude each other, and
         * two threads of one process do too since each opens its own description */
        int rc = -1;
        if (fd >= 0)
            while ((rc = flock(fd, LOCK_EX)) != 0 && errno == EINTR) {}
        if (fd < 0 || rc != 0) {
            EM_FAIL(c, EM_ERR_IO, op, "cannot lock %s: %s", path, strerror(errno));
            if (fd >= 0) close(fd);
            fd = -1;
        }
    }
    free(dir);
    free(path);
    return fd;
}

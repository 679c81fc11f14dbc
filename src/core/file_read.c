/* Whole-file reads with errors that name the file (see file_read.h). */
#include "core/file_read.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/tensor_impl.h"

char *em_file_read_stream(em_ctx *c, const char *op, FILE *f, const char *name, size_t max_bytes,
                          size_t *len) {
    *len = 0;
    struct stat st;
    bool regular = false;
    if (fstat(fileno(f), &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            EM_FAIL(c, EM_ERR_IO, op, "%s is a directory, not a file", name);
            return NULL;
        }
        regular = S_ISREG(st.st_mode);
    }
    /* a regular file is read in one go; pipes and devices grow the buffer as they go */
    size_t cap = regular && (uint64_t)st.st_size < SIZE_MAX / 2 ? (size_t)st.st_size + 1 : 65536;
    if (cap > max_bytes + 1) cap = max_bytes + 1;
    char *buf = malloc(cap);
    size_t n = 0;
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n > max_bytes) {
            free(buf);
            EM_FAIL(c, EM_ERR_FORMAT, op, "%s is larger than %zu bytes", name, max_bytes);
            return NULL;
        }
        if (got == 0) break;
        if (n == cap) {
            size_t ncap = cap * 2 > max_bytes + 1 ? max_bytes + 1 : cap * 2;
            char *nb = realloc(buf, ncap);
            if (!nb) free(buf);
            buf = nb;
            cap = ncap;
        }
    }
    if (!buf) {
        EM_FAIL(c, EM_ERR_OOM, op, "cannot allocate memory to read %s", name);
        return NULL;
    }
    if (ferror(f)) {
        free(buf);
        EM_FAIL(c, EM_ERR_IO, op, "cannot read %s: %s", name, strerror(errno));
        return NULL;
    }
    if (n == cap) { /* room for the NUL */
        char *nb = realloc(buf, cap + 1);
        if (!nb) {
            free(buf);
            EM_FAIL(c, EM_ERR_OOM, op, "cannot allocate memory to read %s", name);
            return NULL;
        }
        buf = nb;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

char *em_file_read(em_ctx *c, const char *op, const char *path, size_t max_bytes, size_t *len,
                   bool *missing) {
    *len = 0;
    if (missing) *missing = false;
    if (!path || !*path) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, op, "file path is NULL or empty");
        return NULL;
    }
    if (!strcmp(path, "-"))
        return em_file_read_stream(c, op, stdin, "standard input", max_bytes, len);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (missing && errno == ENOENT) {
            *missing = true;
            return NULL;
        }
        EM_FAIL(c, errno == ENOENT ? EM_ERR_NOT_FOUND : EM_ERR_IO, op, "cannot open %s: %s", path,
                strerror(errno));
        return NULL;
    }
    char *buf = em_file_read_stream(c, op, f, path, max_bytes, len);
    fclose(f);
    return buf;
}

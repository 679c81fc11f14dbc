/* .npy arrays: numpy's format spec (magic "\x93NUMPY", a version byte pair, the header length,
 * then a Python dict literal with 'descr', 'fortran_order' and 'shape', padded to 64 bytes). */
#include "io/npy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file_read.h"

/* The value text after 'key': in the header dict (NULL when absent). */
static const char *dict_value(const char *h, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(h, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

/* "(2, 3)", "(5,)", "()": the dims, or -1 when the text is not such a tuple. */
static int parse_shape(const char *s, int64_t *shape) {
    if (*s++ != '(') return -1;
    int n = 0;
    for (;;) {
        s += strspn(s, " ");
        if (*s == ')') return n;
        if (*s < '0' || *s > '9' || n == EM_NPY_MAX_DIMS) return -1;
        char *end;
        long long v = strtoll(s, &end, 10);
        if (v < 0 || end - s > 15) return -1;
        shape[n++] = v;
        s = end + strspn(end, " ");
        if (*s == ',') s++;
        else if (*s != ')') return -1;
    }
}

em_status em_npy_parse_header(em_ctx *c, const char *op, const char *path,
                              const unsigned char *b, size_t len, em_npy_header *out) {
#define BAD(...) em_ctx_fail(c, EM_ERR_FORMAT, op, __VA_ARGS__)
    memset(out, 0, sizeof *out);
    if (len < 10 || memcmp(b, "\x93NUMPY", 6)) return BAD("%s: not a .npy file", path);
    size_t hlen, off;
    if (b[6] == 1) {
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
        off = 10;
    } else if ((b[6] == 2 || b[6] == 3) && len >= 12) {
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        off = 12;
    } else {
        return BAD("%s: .npy format version %d is not 1, 2 or 3", path, b[6]);
    }
    if (hlen > len - off || hlen > 65536) return BAD("%s: truncated .npy header", path);
    char *h = malloc(hlen + 1);
    if (!h) return em_ctx_fail(c, EM_ERR_OOM, op, "%s: out of memory", path);
    memcpy(h, b + off, hlen);
    h[hlen] = '\0';
    const char *descr = dict_value(h, "descr"), *fo = dict_value(h, "fortran_order"),
               *shape = dict_value(h, "shape");
    if (!descr || !fo || !shape || *descr != '\'' || *shape != '(') {
        BAD("%s: .npy header without descr, fortran_order or shape: %.200s", path, h);
        free(h);
        return em_ctx_status(c);
    }
    for (int i = 0; i < 15 && descr[1 + i] && descr[1 + i] != '\''; i++)
        out->descr[i] = descr[1 + i];
    out->order = out->descr[0];
    out->kind = out->order ? out->descr[1] : 0;
    out->size = out->kind ? atoi(out->descr + 2) : 0;
    out->fortran = !strncmp(fo, "True", 4);
    snprintf(out->shape_text, sizeof out->shape_text, "%s", shape);
    out->ndim = parse_shape(shape, out->shape);
    out->data = off + hlen;
    free(h);
    return EM_OK;
#undef BAD
}

int64_t em_npy_numel(const em_npy_header *h) {
    if (h->ndim < 0) return -1;
    int64_t n = 1;
    for (int i = 0; i < h->ndim; i++) {
        if (h->shape[i] && n > INT64_MAX / h->shape[i]) return -1;
        n *= h->shape[i];
    }
    return n;
}

em_tensor *em_npy_parse_f32(em_ctx *c, const char *op, const char *path, const unsigned char *b,
                            size_t len) {
    em_npy_header h;
    if (em_npy_parse_header(c, op, path, b, len, &h) != EM_OK) return NULL;
    if (strcmp(h.descr, "<f4") && strcmp(h.descr, "=f4")) {
        em_ctx_fail(c, EM_ERR_DTYPE, op, "%s: the array's dtype is '%s': float32 ('<f4') expected",
                    path, h.descr);
        return NULL;
    }
    if (h.fortran) {
        em_ctx_fail(c, EM_ERR_FORMAT, op, "%s: a Fortran-order .npy array (C order expected)",
                    path);
        return NULL;
    }
    int64_t n = em_npy_numel(&h);
    if (n < 0) {
        em_ctx_fail(c, EM_ERR_FORMAT, op,
                    "%s: the .npy shape %.40s is not a tuple of up to %d sizes", path,
                    h.shape_text, EM_NPY_MAX_DIMS);
        return NULL;
    }
    if ((uint64_t)n > (len - h.data) / 4) {
        em_ctx_fail(c, EM_ERR_FORMAT, op, "%s: the .npy file holds %zu bytes of data, its header "
                    "says %lld float32 values", path, len - h.data, (long long)n);
        return NULL;
    }
    /* the data may sit at any offset: copied, never read in place */
    em_device *cpu = em_device_get(c, "cpu");
    return cpu ? em_from_host_on(c, cpu, EM_F32, h.ndim, h.shape, n ? b + h.data : NULL) : NULL;
}

em_tensor *em_npy_load_f32(em_ctx *c, const char *op, const char *path) {
    if (!c || em_ctx_status(c)) return NULL;
    size_t len = 0;
    char *buf = em_file_read(c, op, path, (size_t)1 << 30, &len, NULL);
    if (!buf) return NULL;
    em_tensor *t = em_npy_parse_f32(c, op, path, (const unsigned char *)buf, len);
    free(buf);
    return t;
}

em_status em_npy_save_f32(em_ctx *c, const char *op, const char *path, em_tensor *t) {
    if (!c || em_ctx_status(c)) return c ? em_ctx_status(c) : EM_ERR_INVALID_ARG;
    if (!path || !t) return em_ctx_fail(c, EM_ERR_INVALID_ARG, op, "path or tensor is NULL");
    int nd = em_tensor_ndim(t);
    const int64_t *s = em_tensor_shape(t);
    int64_t n = em_tensor_numel(t);
    if (nd > EM_NPY_MAX_DIMS)
        return em_ctx_fail(c, EM_ERR_SHAPE, op, "%s: %d dims (at most %d)", path, nd,
                           EM_NPY_MAX_DIMS);
    char hdr[256];
    int o = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    for (int i = 0; i < nd; i++)
        o += snprintf(hdr + o, sizeof hdr - (size_t)o, "%lld%s", (long long)s[i],
                      nd == 1 ? "," : i + 1 < nd ? ", " : "");
    o += snprintf(hdr + o, sizeof hdr - (size_t)o, "), }");
    /* pad with spaces so that magic + 4 + header (ending in '\n') is a multiple of 64 */
    while ((10 + o + 1) % 64) hdr[o++] = ' ';
    hdr[o++] = '\n';
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) return em_ctx_fail(c, EM_ERR_OOM, op, "%s: out of memory", path);
    if (em_to_host_f32(c, t, v, n) != EM_OK) {
        free(v);
        return em_ctx_status(c);
    }
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 8);
    FILE *f = tmp ? (snprintf(tmp, pl + 8, "%s.tmp", path), fopen(tmp, "wb")) : NULL;
    if (!f) {
        em_ctx_fail(c, EM_ERR_IO, op, "%s: cannot write the file: %s", path,
                    tmp ? strerror(errno) : "out of memory");
        free(v);
        free(tmp);
        return em_ctx_status(c);
    }
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(o & 0xff),
                             (unsigned char)(o >> 8)};
    bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, (size_t)o, f) == (size_t)o;
    /* '<f4': the bytes of each value least significant first, whatever the host's order */
    for (int64_t i = 0; ok && i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        unsigned char *le = (unsigned char *)&v[i];
        for (int k = 0; k < 4; k++) le[k] = (unsigned char)(u >> (8 * k));
    }
    ok = ok && fwrite(v, 4, (size_t)n, f) == (size_t)n;
    ok = (fclose(f) == 0) && ok;
    if (ok && rename(tmp, path) != 0) ok = false;
    if (!ok) {
        remove(tmp);
        em_ctx_fail(c, EM_ERR_IO, op, "%s: writing the file failed", path);
    }
    free(v);
    free(tmp);
    return em_ctx_status(c);
}

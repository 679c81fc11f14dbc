/* Writing safetensors files byte for byte as the `safetensors` library (0.8.0) does:
 * safetensors/src/tensor.rs `prepare` sorts by dtype (descending enum order) then name, lays
 * the data out in that order, serialises the header with serde_json (compact; `__metadata__`
 * first; strings escaped as serde_json escapes them) and pads it with spaces to a multiple of 8. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors/safetensors_impl.h"

#define OP "safetensors_save"

typedef struct wentry {
    char *name;
    em_st_dtype dtype;
    int ndim;
    int64_t *shape;
    uint64_t nbytes;
    em_tensor *tensor;   /* owned reference, or NULL for raw bytes */
    const void *raw;     /* borrowed */
} wentry;

struct em_safetensors_writer {
    wentry *e;
    int n, cap;
    bool has_meta;
    char **mk, **mv;
    int n_meta, cap_meta;
};

em_safetensors_writer *em_safetensors_writer_create(em_ctx *c) {
    if (!c || c->err.status) return NULL;
    em_safetensors_writer *w = calloc(1, sizeof *w);
    if (!w) EM_FAIL(c, EM_ERR_OOM, OP, "out of memory");
    return w;
}

void em_safetensors_writer_free(em_safetensors_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) {
        free(w->e[i].name);
        free(w->e[i].shape);
        em_tensor_release(w->e[i].tensor);
    }
    free(w->e);
    for (int i = 0; i < w->n_meta; i++) {
        free(w->mk[i]);
        free(w->mv[i]);
    }
    free(w->mk);
    free(w->mv);
    free(w);
}

static em_status add_entry(em_ctx *c, em_safetensors_writer *w, const char *name, em_st_dtype dt,
                           int ndim, const int64_t *shape, uint64_t nbytes, em_tensor *t,
                           const void *raw) {
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->e[i].name, name))
            return EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "tensor \"%s\" was added twice", name);
    if (!strcmp(name, "__metadata__"))
        return EM_FAIL(c, EM_ERR_INVALID_ARG, OP,
                       "\"__metadata__\" is reserved by the format and cannot name a tensor");
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        wentry *ne = realloc(w->e, (size_t)cap * sizeof *ne);
        if (!ne) return EM_FAIL(c, EM_ERR_OOM, OP, "out of memory");
        w->e = ne;
        w->cap = cap;
    }
    wentry *e = &w->e[w->n];
    e->name = strdup(name);
    e->shape = malloc((size_t)(ndim ? ndim : 1) * sizeof *e->shape);
    if (!e->name || !e->shape) {
        free(e->name);
        free(e->shape);
        return EM_FAIL(c, EM_ERR_OOM, OP, "out of memory");
    }
    if (ndim) memcpy(e->shape, shape, (size_t)ndim * sizeof *shape);
    e->dtype = dt;
    e->ndim = ndim;
    e->nbytes = nbytes;
    e->tensor = t ? em_tensor_retain(t) : NULL;
    e->raw = raw;
    w->n++;
    return EM_OK;
}

em_status em_safetensors_writer_add(em_ctx *c, em_safetensors_writer *w, const char *name,
                                    em_tensor *t) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (c->err.status) return c->err.status;
    if (!w || !name || !t)
        return EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "writer, name or tensor is NULL");
    if (em_is_quant(t->dtype))
        return EM_FAIL(c, EM_ERR_DTYPE, OP,
                       "tensor \"%s\" is %s: safetensors has no quantized dtypes; dequantize it "
                       "with em_cast first", name, em_dtype_name(t->dtype));
    return add_entry(c, w, name, em_st_dtype_of(t->dtype), t->ndim, t->shape,
                     (uint64_t)em_tensor_nbytes(t), t, NULL);
}

em_status em_safetensors_writer_add_raw(em_ctx *c, em_safetensors_writer *w, const char *name,
                                        em_st_dtype dtype, int ndim, const int64_t *shape,
                                        const void *data, size_t nbytes) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (c->err.status) return c->err.status;
    if (!w || !name || (ndim > 0 && !shape) || ndim < 0 || (!data && nbytes))
        return EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "NULL argument or negative ndim");
    if ((unsigned)dtype >= EM_ST_DTYPE_COUNT)
        return EM_FAIL(c, EM_ERR_DTYPE, OP, "tensor \"%s\": invalid dtype %d", name, (int)dtype);
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return EM_FAIL(c, EM_ERR_SHAPE, OP, "tensor \"%s\": shape[%d] is negative", name, i);
        if (shape[i] && numel > UINT64_MAX / 64 / (uint64_t)shape[i])
            return EM_FAIL(c, EM_ERR_OVERFLOW, OP, "tensor \"%s\": shape overflows", name);
        numel *= (uint64_t)shape[i];
    }
    uint64_t bits = numel * (uint64_t)em_st_dtype_bits(dtype);
    if (bits % 8 || bits / 8 != nbytes)
        return EM_FAIL(c, EM_ERR_SHAPE, OP,
                       "tensor \"%s\": %llu elements of %s need %llu bits, %zu bytes were given",
                       name, (unsigned long long)numel, em_st_dtype_name(dtype),
                       (unsigned long long)bits, nbytes);
    return add_entry(c, w, name, dtype, ndim, shape, nbytes, NULL, data);
}

em_status em_safetensors_writer_set_metadata(em_ctx *c, em_safetensors_writer *w,
                                             const char *key, const char *value) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (c->err.status) return c->err.status;
    if (!w || (key && !value))
        return EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "writer or metadata value is NULL");
    w->has_meta = true;
    if (!key) return EM_OK;
    char *v = strdup(value);
    if (!v) return EM_FAIL(c, EM_ERR_OOM, OP, "out of memory");
    for (int i = 0; i < w->n_meta; i++)
        if (!strcmp(w->mk[i], key)) {
            free(w->mv[i]);
            w->mv[i] = v;
            return EM_OK;
        }
    if (w->n_meta == w->cap_meta) {
        int cap = w->cap_meta ? 2 * w->cap_meta : 8;
        char **nk = realloc(w->mk, (size_t)cap * sizeof *nk);
        if (nk) w->mk = nk;
        char **nv = nk ? realloc(w->mv, (size_t)cap * sizeof *nv) : NULL;
        if (nv) w->mv = nv;
        if (!nk || !nv) {
            free(v);
            return EM_FAIL(c, EM_ERR_OOM, OP, "out of memory");
        }
        w->cap_meta = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(v);
        return EM_FAIL(c, EM_ERR_OOM, OP, "out of memory");
    }
    w->mk[w->n_meta] = k;
    w->mv[w->n_meta++] = v;
    return EM_OK;
}

/* ---- header ---- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static void put_u64(sbuf *b, uint64_t v) {
    char t[24];
    int k = snprintf(t, sizeof t, "%llu", (unsigned long long)v);
    put(b, t, (size_t)k);
}

/* A JSON string as serde_json writes it: `"` and `\` escaped, \b \t \n \f \r short, other
 * control characters as \u00xx (lower-case hex), everything else (UTF-8, DEL, `/`) as is. */
static void put_json_string(sbuf *b, const char *s) {
    static const char hex[] = "0123456789abcdef";
    put(b, "\"", 1);
    const char *run = s;
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        const char *esc = NULL;
        char u[7];
        switch (ch) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\t': esc = "\\t"; break;
        case '\n': esc = "\\n"; break;
        case '\f': esc = "\\f"; break;
        case '\r': esc = "\\r"; break;
        default:
            if (ch < 0x20) {
                memcpy(u, "\\u00", 4);
                u[4] = hex[ch >> 4];
                u[5] = hex[ch & 15];
                u[6] = 0;
                esc = u;
            }
        }
        if (!esc) continue;
        put(b, run, (size_t)(s - run));
        puts_(b, esc);
        run = s + 1;
    }
    put(b, run, (size_t)(s - run));
    put(b, "\"", 1);
}

static int cmp_wentry(const void *a, const void *b) {
    const wentry *x = a, *y = b;
    int rx = em_st_dtype_table[x->dtype].rank, ry = em_st_dtype_table[y->dtype].rank;
    if (rx != ry) return ry - rx; /* larger alignment first */
    return strcmp(x->name, y->name);
}

/* Sorts the entries and builds the padded header; *data_len gets the data section's size. */
static em_status build_header(em_ctx *c, em_safetensors_writer *w, sbuf *h, uint64_t *data_len) {
    if (w->n > 1) qsort(w->e, (size_t)w->n, sizeof *w->e, cmp_wentry);
    puts_(h, "{");
    bool first = true;
    if (w->has_meta) {
        puts_(h, "\"__metadata__\":{");
        for (int i = 0; i < w->n_meta; i++) {
            if (i) puts_(h, ",");
            put_json_string(h, w->mk[i]);
            puts_(h, ":");
            put_json_string(h, w->mv[i]);
        }
        puts_(h, "}");
        first = false;
    }
    uint64_t off = 0;
    for (int i = 0; i < w->n; i++) {
        wentry *e = &w->e[i];
        if (!first) puts_(h, ",");
        first = false;
        put_json_string(h, e->name);
        puts_(h, ":{\"dtype\":\"");
        puts_(h, em_st_dtype_name(e->dtype));
        puts_(h, "\",\"shape\":[");
        for (int d = 0; d < e->ndim; d++) {
            if (d) puts_(h, ",");
            put_u64(h, (uint64_t)e->shape[d]);
        }
        puts_(h, "],\"data_offsets\":[");
        put_u64(h, off);
        puts_(h, ",");
        if (e->nbytes > UINT64_MAX - off)
            return EM_FAIL(c, EM_ERR_OVERFLOW, OP, "the data section overflows 64 bits");
        off += e->nbytes;
        put_u64(h, off);
        puts_(h, "]}");
    }
    puts_(h, "}");
    while (!h->oom && h->n % 8) puts_(h, " ");
    if (h->oom) return EM_FAIL(c, EM_ERR_OOM, OP, "out of memory building the header");
    if (h->n > EM_ST_MAX_HEADER)
        return EM_FAIL(c, EM_ERR_INVALID_ARG, OP,
                       "the header would have %zu bytes, more than the %llu readers accept", h->n,
                       EM_ST_MAX_HEADER);
    *data_len = off;
    return EM_OK;
}

/* ---- data ---- */

typedef em_status (*sink_fn)(em_ctx *c, void *user, const void *p, size_t n);

/* Streams every tensor's bytes, in header order, to `sink`. */
static em_status emit_data(em_ctx *c, em_safetensors_writer *w, sink_fn sink, void *user) {
    for (int i = 0; i < w->n; i++) {
        wentry *e = &w->e[i];
        if (!e->nbytes) continue;
        if (!e->tensor) {
            em_status s = sink(c, user, e->raw, (size_t)e->nbytes);
            if (s) return s;
            continue;
        }
        em_tensor *t = e->tensor;
        if (t->dev->be->host_accessible && em_is_contiguous(t)) {
            const void *p = em_tensor_data(c, t);
            if (!p) return c->err.status;
            em_status s = sink(c, user, p, (size_t)e->nbytes);
            if (s) return s;
            continue;
        }
        void *tmp = malloc((size_t)e->nbytes);
        if (!tmp)
            return EM_FAIL(c, EM_ERR_OOM, OP, "tensor \"%s\": cannot stage %llu bytes", e->name,
                           (unsigned long long)e->nbytes);
        em_status s = em_to_host(c, t, tmp, (size_t)e->nbytes);
        if (!s) s = sink(c, user, tmp, (size_t)e->nbytes);
        free(tmp);
        if (s) return s;
    }
    return EM_OK;
}

typedef struct mem_sink {
    uint8_t *p;
    size_t n;
} mem_sink;

static em_status to_mem(em_ctx *c, void *user, const void *p, size_t n) {
    (void)c;
    mem_sink *m = user;
    memcpy(m->p + m->n, p, n);
    m->n += n;
    return EM_OK;
}

typedef struct fd_sink {
    int fd;
    const char *path;
} fd_sink;

static em_status to_fd(em_ctx *c, void *user, const void *p, size_t n) {
    fd_sink *f = user;
    const char *q = p;
    while (n) {
        ssize_t k = write(f->fd, q, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return EM_FAIL(c, EM_ERR_IO, OP, "cannot write %s: %s", f->path,
                           k < 0 ? strerror(errno) : "no progress");
        q += k;
        n -= (size_t)k;
    }
    return EM_OK;
}

static void le64(uint8_t *o, uint64_t v) {
    for (int i = 0; i < 8; i++) o[i] = (uint8_t)(v >> (8 * i));
}

em_status em_safetensors_writer_serialize(em_ctx *c, em_safetensors_writer *w, void **out,
                                          size_t *out_nbytes) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (c->err.status) return c->err.status;
    if (!w || !out || !out_nbytes)
        return EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "writer or output is NULL");
    *out = NULL;
    *out_nbytes = 0;
    sbuf h = {0};
    uint64_t dlen;
    em_status s = build_header(c, w, &h, &dlen);
    if (s) {
        free(h.p);
        return s;
    }
    if (dlen > SIZE_MAX - 8 - h.n) {
        free(h.p);
        return EM_FAIL(c, EM_ERR_OVERFLOW, OP, "%llu bytes of data do not fit memory",
                       (unsigned long long)dlen);
    }
    size_t total = 8 + h.n + (size_t)dlen;
    mem_sink m = {malloc(total), 0};
    if (!m.p) {
        free(h.p);
        return EM_FAIL(c, EM_ERR_OOM, OP, "cannot allocate %zu bytes", total);
    }
    le64(m.p, h.n);
    memcpy(m.p + 8, h.p, h.n);
    m.n = 8 + h.n;
    free(h.p);
    s = emit_data(c, w, to_mem, &m);
    if (s) {
        free(m.p);
        return s;
    }
    *out = m.p;
    *out_nbytes = total;
    return EM_OK;
}

em_status em_safetensors_writer_save(em_ctx *c, em_safetensors_writer *w, const char *path) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (c->err.status) return c->err.status;
    if (!w || !path || !*path) return EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "writer or path is NULL");
    sbuf h = {0};
    uint64_t dlen;
    em_status s = build_header(c, w, &h, &dlen);
    if (s) {
        free(h.p);
        return s;
    }
    size_t pn = strlen(path) + 16;
    char *tmp = malloc(pn);
    if (!tmp) {
        free(h.p);
        return EM_FAIL(c, EM_ERR_OOM, OP, "out of memory");
    }
    snprintf(tmp, pn, "%s.tmpXXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        s = EM_FAIL(c, EM_ERR_IO, OP, "cannot create a temporary file next to %s: %s", path,
                    strerror(errno));
        free(tmp);
        free(h.p);
        return s;
    }
    fd_sink f = {fd, path};
    uint8_t len8[8];
    le64(len8, h.n);
    s = to_fd(c, &f, len8, 8);
    if (!s) s = to_fd(c, &f, h.p, h.n);
    free(h.p);
    if (!s) s = emit_data(c, w, to_fd, &f);
    /* mkstemp makes the file 0600; give it the permissions a plain create would. */
    if (!s) {
        mode_t um = umask(0);
        umask(um);
        fchmod(fd, 0666 & ~um);
    }
    if (close(fd) != 0 && !s)
        s = EM_FAIL(c, EM_ERR_IO, OP, "cannot write %s: %s", path, strerror(errno));
    if (!s && rename(tmp, path) != 0)
        s = EM_FAIL(c, EM_ERR_IO, OP, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (s) unlink(tmp);
    free(tmp);
    return s;
}

em_status em_safetensors_save(em_ctx *c, const char *path, int n, const char *const *names,
                              em_tensor *const *tensors, const char *const *metadata) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (c->err.status) return c->err.status;
    if (n < 0 || (n > 0 && (!names || !tensors)))
        return EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "names or tensors is NULL");
    em_safetensors_writer *w = em_safetensors_writer_create(c);
    if (!w) return c->err.status;
    em_status s = EM_OK;
    for (int i = 0; i < n && !s; i++) s = em_safetensors_writer_add(c, w, names[i], tensors[i]);
    if (!s && metadata) {
        s = em_safetensors_writer_set_metadata(c, w, NULL, NULL);
        for (int i = 0; !s && metadata[i]; i += 2)
            s = em_safetensors_writer_set_metadata(c, w, metadata[i], metadata[i + 1]);
    }
    if (!s) s = em_safetensors_writer_save(c, w, path);
    em_safetensors_writer_free(w);
    return s;
}

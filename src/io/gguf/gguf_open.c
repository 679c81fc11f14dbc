/*
 * Opening GGUF files: the header, the metadata (every value type, arrays of arrays), the tensor
 * infos and the data section, validated as strictly as llama.cpp's gguf.cpp reader does (and
 * more: tensor bytes may not overlap), with a distinct message per failure naming the file,
 * the byte offset and the key or tensor. Nothing is read past what a count or length has been
 * checked to fit in.
 *
 * Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64 key/value count; the
 * key/value pairs (string key, u32 type, value); the tensor infos (string name, u32 n_dims,
 * u64 dims[n_dims] innermost first, u32 ggml type, u64 offset into the data section); padding
 * to the alignment; the data section. A string is a u64 length and its bytes; an array a u32
 * element type, a u64 count and the elements.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/name_index.h"
#include "io/gguf/gguf_impl.h"

#define OP "gguf_open"

typedef struct cursor {
    em_ctx *c;
    const char *path;
    const uint8_t *b;
    size_t len, pos;
    em_gguf *g;
} cursor;

static em_status fail(cursor *k, em_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static em_status fail(cursor *k, em_status s, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return EM_FAIL(k->c, s, OP, "%s: %s", k->path, msg);
}

static size_t left(const cursor *k) { return k->len - k->pos; }

static bool need(cursor *k, size_t n, const char *what) {
    if (left(k) >= n) return true;
    fail(k, EM_ERR_FORMAT,
         "%s at byte %zu needs %zu bytes but the file ends after %zu (truncated?)", what, k->pos,
         n, left(k));
    return false;
}

static uint64_t rd_le(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static bool u32(cursor *k, const char *what, uint32_t *out) {
    if (!need(k, 4, what)) return false;
    *out = (uint32_t)rd_le(k->b + k->pos, 4);
    k->pos += 4;
    return true;
}

static bool u64(cursor *k, const char *what, uint64_t *out) {
    if (!need(k, 8, what)) return false;
    *out = rd_le(k->b + k->pos, 8);
    k->pos += 8;
    return true;
}

/* A string copied into the arena with a NUL terminator. */
static bool str(cursor *k, const char *what, em_gguf_str *out) {
    uint64_t n;
    size_t at = k->pos;
    if (!u64(k, what, &n)) return false;
    if (n > left(k)) {
        fail(k, EM_ERR_FORMAT,
             "%s at byte %zu has length %llu, more than the %zu bytes left in the file", what, at,
             (unsigned long long)n, left(k));
        return false;
    }
    char *s = em_gguf_arena_alloc(&k->g->arena, (size_t)n + 1);
    if (!s) {
        fail(k, EM_ERR_OOM, "out of memory reading %s", what);
        return false;
    }
    memcpy(s, k->b + k->pos, (size_t)n);
    s[n] = 0;
    k->pos += (size_t)n;
    out->s = s;
    out->len = (size_t)n;
    return true;
}

/* Smallest number of bytes one element of type t takes (for checking counts). */
static size_t min_size(em_gguf_type t) {
    if (t == EM_GGUF_STRING) return 8;
    if (t == EM_GGUF_ARRAY) return 12;
    return em_gguf_scalar_size(t);
}

static bool value(cursor *k, const char *key, em_gguf_type t, em_gguf_value *v, int depth);

static bool array(cursor *k, const char *key, em_gguf_value *v, int depth) {
    uint32_t et;
    uint64_t n;
    size_t at = k->pos;
    if (depth >= EM_GGUF_MAX_DEPTH) {
        fail(k, EM_ERR_FORMAT, "key \"%s\": arrays nested deeper than %d at byte %zu", key,
             EM_GGUF_MAX_DEPTH, at);
        return false;
    }
    if (!u32(k, "an array's element type", &et) || !u64(k, "an array's length", &n)) return false;
    if (et >= EM_GGUF_TYPE_COUNT) {
        fail(k, EM_ERR_FORMAT, "key \"%s\": array at byte %zu has element type %u, which is not a "
             "GGUF value type (0 to 12)", key, at, et);
        return false;
    }
    size_t ms = min_size((em_gguf_type)et);
    if (n > left(k) / ms) {
        fail(k, EM_ERR_FORMAT,
             "key \"%s\": array at byte %zu claims %llu elements of %s, more than the %zu bytes "
             "left in the file can hold", key, at, (unsigned long long)n,
             em_gguf_type_name((em_gguf_type)et), left(k));
        return false;
    }
    v->etype = (em_gguf_type)et;
    v->n = n;
    if (em_gguf_scalar_size(v->etype)) { /* numbers stay in the file */
        v->raw = k->b + k->pos;
        k->pos += (size_t)n * ms;
        if (v->etype == EM_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (v->raw[i] > 1) {
                    fail(k, EM_ERR_FORMAT, "key \"%s\": bool element %llu is %u, not 0 or 1",
                         key, (unsigned long long)i, v->raw[i]);
                    return false;
                }
        return true;
    }
    if (v->etype == EM_GGUF_STRING) {
        v->strs = em_gguf_arena_alloc(&k->g->arena, (size_t)(n ? n : 1) * sizeof *v->strs);
        if (!v->strs) return fail(k, EM_ERR_OOM, "out of memory reading key \"%s\"", key), false;
        for (uint64_t i = 0; i < n; i++)
            if (!str(k, "a string in an array", &v->strs[i])) return false;
        return true;
    }
    v->items = em_gguf_arena_alloc(&k->g->arena, (size_t)(n ? n : 1) * sizeof *v->items);
    if (!v->items) return fail(k, EM_ERR_OOM, "out of memory reading key \"%s\"", key), false;
    for (uint64_t i = 0; i < n; i++)
        if (!value(k, key, EM_GGUF_ARRAY, &v->items[i], depth + 1)) return false;
    return true;
}

static bool value(cursor *k, const char *key, em_gguf_type t, em_gguf_value *v, int depth) {
    memset(v, 0, sizeof *v);
    v->type = t;
    if (t == EM_GGUF_STRING) return str(k, "a string value", &v->str);
    if (t == EM_GGUF_ARRAY) return array(k, key, v, depth);
    size_t sz = em_gguf_scalar_size(t);
    if (!need(k, sz, "a value")) return false;
    uint64_t u = rd_le(k->b + k->pos, sz);
    switch (t) {
    case EM_GGUF_INT8: v->num.i = (int8_t)u; break;
    case EM_GGUF_INT16: v->num.i = (int16_t)u; break;
    case EM_GGUF_INT32: v->num.i = (int32_t)u; break;
    case EM_GGUF_INT64: v->num.i = (int64_t)u; break;
    case EM_GGUF_BOOL:
        if (u > 1) {
            fail(k, EM_ERR_FORMAT, "key \"%s\": bool at byte %zu is %llu, not 0 or 1", key, k->pos,
                 (unsigned long long)u);
            return false;
        }
        v->num.b = u != 0;
        break;
    case EM_GGUF_FLOAT32: {
        uint32_t w = (uint32_t)u;
        float f;
        memcpy(&f, &w, 4);
        v->num.f = f;
        break;
    }
    case EM_GGUF_FLOAT64: memcpy(&v->num.f, &u, 8); break;
    default: v->num.u = u; break;
    }
    k->pos += sz;
    return true;
}

/* ---- sorting and duplicate detection ---- */

typedef struct name_ref {
    const char *s;
    int64_t i;
} name_ref;

static int cmp_ref(const void *a, const void *b) {
    const name_ref *x = a, *y = b;
    int r = strcmp(x->s, y->s);
    return r ? r : (x->i > y->i) - (x->i < y->i);
}

/* Sorts n names into idx; returns the index of a duplicate's second occurrence or -1. */
static int64_t sort_names(const char *(*name)(const em_gguf *, int64_t), const em_gguf *g,
                          int64_t n, int64_t *idx, name_ref *tmp) {
    for (int64_t i = 0; i < n; i++) tmp[i] = (name_ref){name(g, i), i};
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_ref);
    int64_t dup = -1;
    for (int64_t i = 0; i < n; i++) {
        idx[i] = tmp[i].i;
        if (i && dup < 0 && !strcmp(tmp[i].s, tmp[i - 1].s)) dup = tmp[i].i;
    }
    return dup;
}

static const char *kv_name(const em_gguf *g, int64_t i) { return g->kv[i].key.s; }
static const char *tensor_name(const em_gguf *g, int64_t i) { return g->tensors[i].name; }

/* ---- the parts of the file ---- */

static bool header(cursor *k, uint64_t *n_tensors, uint64_t *n_kv) {
    em_gguf *g = k->g;
    if (k->len < 4 || memcmp(k->b, "GGUF", 4) != 0) {
        fail(k, EM_ERR_FORMAT, "not a GGUF file: it %s", k->len < 4 ? "has fewer than 4 bytes"
                                                              : "does not start with \"GGUF\"");
        return false;
    }
    k->pos = 4;
    if (!u32(k, "the version", &g->version)) return false;
    if ((g->version & 0xffff) == 0 && (g->version >> 16)) {
        fail(k, EM_ERR_UNSUPPORTED, "a big-endian GGUF file (version field 0x%08x); Ember reads "
             "little-endian files", g->version);
        return false;
    }
    if (g->version != 2 && g->version != 3) {
        fail(k, g->version == 1 || g->version > 3 ? EM_ERR_UNSUPPORTED : EM_ERR_FORMAT,
             "GGUF version %u; Ember reads versions 2 and 3", g->version);
        return false;
    }
    if (!u64(k, "the tensor count", n_tensors) || !u64(k, "the key/value count", n_kv))
        return false;
    /* each pair is at least a key length, a type and a 1-byte value; each tensor info a name
     * length, n_dims, one dim, a type and an offset */
    if (*n_kv > left(k) / 13)
        return fail(k, EM_ERR_FORMAT, "%llu key/value pairs cannot fit in the %zu bytes that "
                    "follow the header", (unsigned long long)*n_kv, left(k)), false;
    if (*n_tensors > left(k) / 32)
        return fail(k, EM_ERR_FORMAT, "%llu tensors cannot fit in the %zu bytes that follow the "
                    "header", (unsigned long long)*n_tensors, left(k)), false;
    return true;
}

static bool metadata(cursor *k, uint64_t n) {
    em_gguf *g = k->g;
    g->kv = calloc((size_t)(n ? n : 1), sizeof *g->kv);
    if (!g->kv) return fail(k, EM_ERR_OOM, "out of memory for %llu keys", (unsigned long long)n),
                       false;
    for (uint64_t i = 0; i < n; i++) {
        em_gguf_kv *kv = &g->kv[i];
        uint32_t t;
        size_t at = k->pos;
        if (!str(k, "a key", &kv->key)) return false;
        g->n_kv = (int64_t)i + 1;
        if (!u32(k, "a value type", &t)) return false;
        if (t >= EM_GGUF_TYPE_COUNT)
            return fail(k, EM_ERR_FORMAT, "key \"%s\" (byte %zu) has value type %u, which is not "
                        "a GGUF value type (0 to 12)", kv->key.s, at, t), false;
        if (!value(k, kv->key.s, (em_gguf_type)t, &kv->value, 0)) return false;
    }
    g->kv_by_key = malloc((size_t)(n ? n : 1) * sizeof *g->kv_by_key);
    name_ref *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    if (!g->kv_by_key || !tmp) {
        free(tmp);
        return fail(k, EM_ERR_OOM, "out of memory indexing keys"), false;
    }
    int64_t dup = sort_names(kv_name, g, g->n_kv, g->kv_by_key, tmp);
    free(tmp);
    if (dup >= 0)
        return fail(k, EM_ERR_FORMAT, "key \"%s\" is defined twice", g->kv[dup].key.s), false;
    g->alignment = EM_GGUF_DEFAULT_ALIGNMENT;
    const em_gguf_value *al = em_gguf_find(g, "general.alignment");
    if (al) {
        if (al->type != EM_GGUF_UINT32)
            return fail(k, EM_ERR_FORMAT, "general.alignment is a %s; the format says uint32",
                        em_gguf_type_name(al->type)), false;
        if (al->num.u == 0 || (al->num.u & (al->num.u - 1)))
            return fail(k, EM_ERR_FORMAT, "general.alignment %llu is not a power of two",
                        (unsigned long long)al->num.u), false;
        g->alignment = (uint32_t)al->num.u;
    }
    return true;
}

static bool tensor_infos(cursor *k, uint64_t n) {
    em_gguf *g = k->g;
    g->tensors = calloc((size_t)(n ? n : 1), sizeof *g->tensors);
    if (!g->tensors)
        return fail(k, EM_ERR_OOM, "out of memory for %llu tensors", (unsigned long long)n), false;
    for (uint64_t i = 0; i < n; i++) {
        em_gguf_tensor_info *ti = &g->tensors[i];
        em_gguf_str name;
        uint32_t nd, type;
        size_t at = k->pos;
        if (!str(k, "a tensor name", &name)) return false;
        ti->name = name.s;
        g->n_tensors = (int64_t)i + 1;
        if (!u32(k, "a tensor's dimension count", &nd)) return false;
        if (nd < 1 || nd > EM_GGUF_MAX_DIMS)
            return fail(k, EM_ERR_FORMAT, "tensor \"%s\" (byte %zu) has %u dimensions; GGUF "
                        "tensors have 1 to %d", ti->name, at, nd, EM_GGUF_MAX_DIMS), false;
        int64_t *shape = em_gguf_arena_alloc(&g->arena, nd * sizeof *shape);
        if (!shape) return fail(k, EM_ERR_OOM, "out of memory"), false;
        int64_t numel = 1;
        uint64_t dims[EM_GGUF_MAX_DIMS];
        for (uint32_t d = 0; d < nd; d++) {
            if (!u64(k, "a tensor dimension", &dims[d])) return false;
            if (dims[d] > (uint64_t)INT64_MAX)
                return fail(k, EM_ERR_FORMAT, "tensor \"%s\": dimension %u is %llu (negative as "
                            "ggml's int64)", ti->name, d, (unsigned long long)dims[d]), false;
            if (dims[d] && numel > INT64_MAX / (int64_t)dims[d])
                return fail(k, EM_ERR_OVERFLOW, "tensor \"%s\": the element count overflows",
                            ti->name), false;
            numel *= (int64_t)dims[d];
            shape[nd - 1 - d] = (int64_t)dims[d]; /* Ember's order: outermost first */
        }
        if (!u32(k, "a tensor type", &type)) return false;
        const em_ggml_traits *tr = em_ggml_traits_of(type);
        if (!tr)
            return fail(k, EM_ERR_FORMAT, "tensor \"%s\" has type %u, which is not a ggml tensor "
                        "type Ember knows (F32, F16, BF16, Q4_0 ... Q6_K, IQ*, TQ*, MXFP4)",
                        ti->name, type), false;
        if (dims[0] % (uint64_t)tr->block)
            return fail(k, EM_ERR_FORMAT, "tensor \"%s\" of type %s has rows of %llu elements, not "
                        "a multiple of the block size %d", ti->name, tr->name,
                        (unsigned long long)dims[0], tr->block), false;
        if (!u64(k, "a tensor offset", &ti->offset)) return false;
        uint64_t blocks = (uint64_t)numel / (uint64_t)tr->block;
        if (blocks > UINT64_MAX / (uint64_t)tr->bytes)
            return fail(k, EM_ERR_OVERFLOW, "tensor \"%s\": the byte size overflows", ti->name),
                   false;
        ti->type = (em_ggml_type)type;
        ti->ndim = (int)nd;
        ti->shape = shape;
        ti->numel = numel;
        ti->nbytes = blocks * (uint64_t)tr->bytes;
    }
    return true;
}

typedef struct range_ref {
    uint64_t begin, end;
    int64_t i;
} range_ref;

static int cmp_range(const void *a, const void *b) {
    const range_ref *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* Where the data section starts, and every tensor inside it, aligned, and alone. */
static bool data_section(cursor *k) {
    em_gguf *g = k->g;
    uint64_t a = g->alignment, start = ((uint64_t)k->pos + a - 1) / a * a;
    g->data_start = start;
    if (!g->n_tensors) return true;
    /* even a file of zero-byte tensors must hold its padding: every tensor's absolute offset
     * then lies inside the file, as the header promises */
    if (start > k->len)
        return fail(k, EM_ERR_FORMAT, "the data section would start at byte %llu (after "
                    "padding to %u), past the end of the file (%zu bytes; truncated?)",
                    (unsigned long long)start, g->alignment, k->len), false;
    uint64_t size = k->len - start;
    range_ref *r = malloc((size_t)g->n_tensors * sizeof *r);
    if (!r) return fail(k, EM_ERR_OOM, "out of memory"), false;
    int64_t n = 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        em_gguf_tensor_info *ti = &g->tensors[i];
        if (ti->offset % a) {
            free(r);
            return fail(k, EM_ERR_FORMAT, "tensor \"%s\": data offset %llu is not a multiple of "
                        "the alignment %u", ti->name, (unsigned long long)ti->offset, g->alignment),
                   false;
        }
        if (ti->offset > size || ti->nbytes > size - ti->offset) {
            free(r);
            return fail(k, EM_ERR_FORMAT, "tensor \"%s\": bytes [%llu, %llu) of the data section "
                        "run past its end (%llu bytes from file offset %llu; truncated?)", ti->name,
                        (unsigned long long)ti->offset,
                        (unsigned long long)(ti->offset + (ti->nbytes < size ? ti->nbytes : size)),
                        (unsigned long long)size, (unsigned long long)start), false;
        }
        ti->file_offset = start + ti->offset;
        if (ti->nbytes) r[n++] = (range_ref){ti->offset, ti->offset + ti->nbytes, i};
    }
    qsort(r, (size_t)n, sizeof *r, cmp_range);
    for (int64_t i = 1; i < n; i++)
        if (r[i].begin < r[i - 1].end) {
            const char *x = g->tensors[r[i - 1].i].name, *y = g->tensors[r[i].i].name;
            uint64_t b = r[i].begin, e = r[i - 1].end;
            free(r);
            return fail(k, EM_ERR_FORMAT, "tensors \"%s\" and \"%s\" overlap (data bytes %llu to "
                        "%llu)", x, y, (unsigned long long)b, (unsigned long long)e), false;
        }
    free(r);
    return true;
}

em_gguf *em_gguf_parse(em_ctx *c, const char *name, em_st_image *im) {
    em_gguf *g = calloc(1, sizeof *g);
    if (g) g->path = strdup(name);
    if (!g || !g->path) {
        free(g);
        em_st_image_release(im);
        EM_FAIL(c, EM_ERR_OOM, OP, "out of memory opening %s", name);
        return NULL;
    }
    g->image = im;
    cursor k = {c, g->path, im->base, im->len, 0, g};
    uint64_t n_tensors, n_kv;
    bool ok = header(&k, &n_tensors, &n_kv) && metadata(&k, n_kv) && tensor_infos(&k, n_tensors);
    if (ok) {
        size_t nt = (size_t)(g->n_tensors ? g->n_tensors : 1);
        g->by_name = malloc(nt * sizeof *g->by_name);
        name_ref *tmp = malloc(nt * sizeof *tmp);
        if (!g->by_name || !tmp) {
            fail(&k, EM_ERR_OOM, "out of memory indexing tensors");
            ok = false;
        } else {
            int64_t dup = sort_names(tensor_name, g, g->n_tensors, g->by_name, tmp);
            if (dup >= 0) {
                fail(&k, EM_ERR_FORMAT, "two tensors are called \"%s\"", g->tensors[dup].name);
                ok = false;
            }
        }
        free(tmp);
    }
    ok = ok && data_section(&k);
    if (!ok) {
        em_gguf_free(g);
        return NULL;
    }
    return g;
}

em_gguf *em_gguf_open(em_ctx *c, const char *path) {
    if (!c || c->err.status) return NULL;
    if (!path || !*path) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "path is NULL or empty");
        return NULL;
    }
    em_st_image *im = em_st_image_map(c, path, OP);
    return im ? em_gguf_parse(c, path, im) : NULL;
}

em_gguf *em_gguf_open_memory(em_ctx *c, const void *data, size_t n, const char *name) {
    if (!c || c->err.status) return NULL;
    if (!data && n) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "data is NULL");
        return NULL;
    }
    em_st_image *im = em_st_image_new(EM_ST_IMAGE_BORROWED, (uint8_t *)data, n);
    if (!im) {
        EM_FAIL(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    return em_gguf_parse(c, name ? name : "<memory>", im);
}

void em_gguf_free(em_gguf *g) {
    if (!g) return;
    em_st_image_release(g->image);
    em_gguf_arena_free(&g->arena);
    free(g->kv);
    free(g->kv_by_key);
    free(g->tensors);
    free(g->by_name);
    free(g->path);
    free(g);
}

/* ---- tensor lookup ---- */

int64_t em_gguf_tensor_count(const em_gguf *g) { return g ? g->n_tensors : 0; }

const em_gguf_tensor_info *em_gguf_tensor_at(const em_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

static const char *sorted_name(const void *ctx, int64_t k) {
    const em_gguf *g = ctx;
    return g->tensors[g->by_name[k]].name;
}

static int64_t lower_bound(const em_gguf *g, const char *name) {
    return em_names_lower_bound(sorted_name, g, g->n_tensors, name);
}

const em_gguf_tensor_info *em_gguf_tensor_find(const em_gguf *g, const char *name) {
    if (!g || !name || !g->by_name) return NULL;
    int64_t i = lower_bound(g, name);
    if (i < g->n_tensors && !strcmp(g->tensors[g->by_name[i]].name, name))
        return &g->tensors[g->by_name[i]];
    return NULL;
}

const char *em_gguf_nearest_name(const em_gguf *g, const char *name) {
    if (!g || !g->n_tensors || !g->by_name) return NULL;
    return em_names_nearest(sorted_name, g, g->n_tensors, name);
}

/* The safetensors header of one file: parsed with jansson and validated field by field, with
 * the checks of the safetensors library (safetensors/src/tensor.rs `read_metadata`,
 * `Metadata::validate`) and a distinct message for each failure. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors/safetensors_impl.h"

#define OP "safetensors_open"

bool em_st_utf8_valid(const uint8_t *s, size_t n, size_t *bad) {
    size_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        size_t len;
        uint32_t cp, min;
        if (b < 0x80) {
            i++;
            continue;
        } else if ((b & 0xe0) == 0xc0) {
            len = 2, cp = b & 0x1f, min = 0x80;
        } else if ((b & 0xf0) == 0xe0) {
            len = 3, cp = b & 0x0f, min = 0x800;
        } else if ((b & 0xf8) == 0xf0) {
            len = 4, cp = b & 0x07, min = 0x10000;
        } else {
            *bad = i;
            return false;
        }
        if (n - i < len) {
            *bad = i;
            return false;
        }
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) {
                *bad = i;
                return false;
            }
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        /* overlong forms, surrogates and values past U+10FFFF are not UTF-8 */
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
            *bad = i;
            return false;
        }
        i += len;
    }
    return true;
}

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    case JSON_NULL: return "null";
    }
    return "value";
}

/* Writes "[a,b,...]" of a shape, abbreviated when long. */
static const char *shape_str(const int64_t *shape, int ndim, char *buf, size_t n) {
    if (ndim <= EM_MAX_DIMS) return em_shape_str(shape, ndim, buf, n);
    char head[96];
    em_shape_str(shape, 4, head, sizeof head);
    head[strlen(head) - 1] = 0;
    snprintf(buf, n, "%s,... (%d dims)]", head, ndim);
    return buf;
}

static em_status push_meta(em_ctx *c, em_safetensors *st, const char *k, const char *v) {
    for (int i = 0; i < st->n_meta; i++)
        if (!strcmp(st->meta_keys[i], k)) return EM_OK; /* first file wins */
    if (st->n_meta == st->cap_meta) {
        int cap = st->cap_meta ? 2 * st->cap_meta : 8;
        char **nk = realloc(st->meta_keys, (size_t)cap * sizeof *nk);
        if (nk) st->meta_keys = nk;
        char **nv = realloc(st->meta_values, (size_t)cap * sizeof *nv);
        if (nv) st->meta_values = nv;
        if (!nk || !nv) return EM_FAIL(c, EM_ERR_OOM, OP, "out of memory for metadata");
        st->cap_meta = cap;
    }
    char *kk = strdup(k), *vv = strdup(v);
    if (!kk || !vv) {
        free(kk);
        free(vv);
        return EM_FAIL(c, EM_ERR_OOM, OP, "out of memory for metadata");
    }
    st->meta_keys[st->n_meta] = kk;
    st->meta_values[st->n_meta++] = vv;
    return EM_OK;
}

static em_status parse_metadata(em_ctx *c, em_safetensors *st, const char *path, json_t *m) {
    if (json_is_null(m)) return EM_OK; /* serde reads null as an absent map */
    if (!json_is_object(m))
        return EM_FAIL(c, EM_ERR_FORMAT, OP, "%s: \"__metadata__\" is a JSON %s, not an object",
                       path, json_kind(m));
    st->has_meta = true;
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v) {
        if (!json_is_string(v))
            return EM_FAIL(c, EM_ERR_FORMAT, OP,
                           "%s: \"__metadata__\" entry \"%s\" is a JSON %s; metadata values must be "
                           "strings",
                           path, k, json_kind(v));
        em_status s = push_meta(c, st, k, json_string_value(v));
        if (s) return s;
    }
    return EM_OK;
}

/* A non-negative JSON integer, or an error naming `field` of tensor `name`. */
static em_status get_u64(em_ctx *c, const char *path, const char *name, const char *field,
                         json_t *v, uint64_t *out) {
    if (!json_is_integer(v))
        return EM_FAIL(c, EM_ERR_FORMAT, OP, "%s: tensor \"%s\": %s is a JSON %s, not an integer",
                       path, name, field, json_kind(v));
    json_int_t x = json_integer_value(v);
    if (x < 0)
        return EM_FAIL(c, EM_ERR_FORMAT, OP, "%s: tensor \"%s\": %s is negative (%lld)", path,
                       name, field, (long long)x);
    *out = (uint64_t)x;
    return EM_OK;
}

static em_status add_entry(em_ctx *c, em_safetensors *st, em_st_entry **out) {
    if (st->n_entries == st->cap_entries) {
        int64_t cap = st->cap_entries ? 2 * st->cap_entries : 64;
        em_st_entry *e = realloc(st->entries, (size_t)cap * sizeof *e);
        if (!e) return EM_FAIL(c, EM_ERR_OOM, OP, "out of memory for %lld tensors", (long long)cap);
        st->entries = e;
        st->cap_entries = cap;
    }
    *out = &st->entries[st->n_entries++];
    memset(*out, 0, sizeof **out);
    return EM_OK;
}

static em_status parse_tensor(em_ctx *c, em_safetensors *st, int file, const char *path,
                              const char *name, json_t *v, int64_t order) {
    if (!json_is_object(v))
        return EM_FAIL(c, EM_ERR_FORMAT, OP,
                       "%s: tensor \"%s\": its header entry is a JSON %s, not an object "
                       "{dtype, shape, data_offsets}",
                       path, name, json_kind(v));
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    const char *missing = !jd ? "dtype" : !js ? "shape" : !jo ? "data_offsets" : NULL;
    if (missing)
        return EM_FAIL(c, EM_ERR_FORMAT, OP, "%s: tensor \"%s\": no \"%s\" field", path, name,
                       missing);
    if (!json_is_string(jd))
        return EM_FAIL(c, EM_ERR_FORMAT, OP, "%s: tensor \"%s\": dtype is a JSON %s, not a string",
                       path, name, json_kind(jd));
    em_st_dtype dt;
    if (!em_st_dtype_parse(json_string_value(jd), &dt)) {
        char known[256] = "";
        for (int i = 0; i < EM_ST_DTYPE_COUNT; i++) {
            size_t u = strlen(known);
            snprintf(known + u, sizeof known - u, "%s%s", i ? " " : "", em_st_dtype_name(i));
        }
        return EM_FAIL(c, EM_ERR_FORMAT, OP, "%s: tensor \"%s\": unknown dtype \"%s\" (known: %s)",
                       path, name, json_string_value(jd), known);
    }
    if (!json_is_array(js))
        return EM_FAIL(c, EM_ERR_FORMAT, OP, "%s: tensor \"%s\": shape is a JSON %s, not an array",
                       path, name, json_kind(js));
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return EM_FAIL(c, EM_ERR_FORMAT, OP,
                       "%s: tensor \"%s\": data_offsets must be an array [begin, end] of two "
                       "integers",
                       path, name);
    uint64_t begin, end;
    em_status s;
    if ((s = get_u64(c, path, name, "data_offsets[0]", json_array_get(jo, 0), &begin)) ||
        (s = get_u64(c, path, name, "data_offsets[1]", json_array_get(jo, 1), &end)))
        return s;
    size_t nd = json_array_size(js);
    int64_t *shape = malloc((nd ? nd : 1) * sizeof *shape);
    char *nm = strdup(name);
    em_st_entry *e = NULL;
    if (!shape || !nm || add_entry(c, st, &e)) {
        free(shape);
        free(nm);
        return EM_FAIL(c, EM_ERR_OOM, OP, "%s: out of memory reading tensor \"%s\"", path, name);
    }
    e->info.name = nm;
    e->info.shape = shape;
    e->info.ndim = (int)nd;
    e->info.dtype = dt;
    e->info.data_begin = begin;
    e->info.data_end = end;
    e->info.file = st->files[file].path;
    e->file = file;
    e->order = order;
    for (size_t i = 0; i < nd; i++) {
        uint64_t d;
        char field[32];
        snprintf(field, sizeof field, "shape[%zu]", i);
        if ((s = get_u64(c, path, name, field, json_array_get(js, i), &d))) return s;
        shape[i] = (int64_t)d; /* jansson integers are at most INT64_MAX */
    }
    return EM_OK;
}

static int cmp_offsets(const void *a, const void *b) {
    const em_st_entry *x = a, *y = b;
    if (x->info.data_begin != y->info.data_begin)
        return x->info.data_begin < y->info.data_begin ? -1 : 1;
    if (x->info.data_end != y->info.data_end) return x->info.data_end < y->info.data_end ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Checks the tensors of one file (entries [first, n)) in offset order: contiguous, sizes that
 * match their shape and dtype without overflow, inside the data section, covering it fully. */
static em_status validate(em_ctx *c, em_safetensors *st, int64_t first, const char *path,
                          uint64_t data_len) {
    int64_t n = st->n_entries - first;
    em_st_entry *t = n ? st->entries + first : NULL;
    if (n > 1) qsort(t, (size_t)n, sizeof *t, cmp_offsets);
    uint64_t start = 0;
    char sb[192];
    for (int64_t i = 0; i < n; i++) {
        em_safetensors_info *ti = &t[i].info;
        const char *nm = ti->name;
        uint64_t b = ti->data_begin, e = ti->data_end;
        if (e < b)
            return EM_FAIL(c, EM_ERR_FORMAT, OP,
                           "%s: tensor \"%s\": data_offsets [%llu, %llu] end before they begin",
                           path, nm, (unsigned long long)b, (unsigned long long)e);
        if (b < start)
            return EM_FAIL(c, EM_ERR_FORMAT, OP,
                           "%s: tensor \"%s\": data_offsets [%llu, %llu] overlap tensor \"%s\" "
                           "[%llu, %llu]",
                           path, nm, (unsigned long long)b, (unsigned long long)e,
                           t[i - 1].info.name, (unsigned long long)t[i - 1].info.data_begin,
                           (unsigned long long)t[i - 1].info.data_end);
        if (b > start) {
            if (i == 0)
                return EM_FAIL(c, EM_ERR_FORMAT, OP,
                               "%s: tensor \"%s\": data_offsets [%llu, %llu] leave a gap: the "
                               "first tensor must start at offset 0 of the data section",
                               path, nm, (unsigned long long)b, (unsigned long long)e);
            return EM_FAIL(c, EM_ERR_FORMAT, OP,
                           "%s: tensor \"%s\": data_offsets [%llu, %llu] leave a gap of %llu "
                           "bytes after tensor \"%s\", which ends at %llu (tensors must be "
                           "contiguous)",
                           path, nm, (unsigned long long)b, (unsigned long long)e,
                           (unsigned long long)(b - start), t[i - 1].info.name,
                           (unsigned long long)start);
        }
        int64_t numel = 1;
        bool over = false;
        for (int d = 0; d < ti->ndim; d++) {
            if (ti->shape[d] && numel > INT64_MAX / ti->shape[d]) over = true;
            if (!over) numel *= ti->shape[d];
        }
        if (over)
            return EM_FAIL(c, EM_ERR_OVERFLOW, OP,
                           "%s: tensor \"%s\": the element count of shape %s overflows 64 bits",
                           path, nm, shape_str(ti->shape, ti->ndim, sb, sizeof sb));
        int bits = em_st_dtype_bits(ti->dtype);
        if ((uint64_t)numel > UINT64_MAX / (uint64_t)bits)
            return EM_FAIL(c, EM_ERR_OVERFLOW, OP,
                           "%s: tensor \"%s\": the byte size of shape %s of %s overflows 64 bits",
                           path, nm, shape_str(ti->shape, ti->ndim, sb, sizeof sb),
                           em_st_dtype_name(ti->dtype));
        uint64_t nbits = (uint64_t)numel * (uint64_t)bits;
        if (nbits % 8)
            return EM_FAIL(c, EM_ERR_FORMAT, OP,
                           "%s: tensor \"%s\": %lld elements of %s do not fill a whole number of "
                           "bytes",
                           path, nm, (long long)numel, em_st_dtype_name(ti->dtype));
        if (nbits / 8 != e - b)
            return EM_FAIL(c, EM_ERR_FORMAT, OP,
                           "%s: tensor \"%s\": shape %s of %s needs %llu bytes but data_offsets "
                           "[%llu, %llu] hold %llu",
                           path, nm, shape_str(ti->shape, ti->ndim, sb, sizeof sb),
                           em_st_dtype_name(ti->dtype), (unsigned long long)(nbits / 8),
                           (unsigned long long)b, (unsigned long long)e,
                           (unsigned long long)(e - b));
        if (e > data_len)
            return EM_FAIL(c, EM_ERR_FORMAT, OP,
                           "%s: tensor \"%s\": data_offsets [%llu, %llu] run past the end of the "
                           "data section, which holds %llu bytes (file truncated?)",
                           path, nm, (unsigned long long)b, (unsigned long long)e,
                           (unsigned long long)data_len);
        ti->numel = numel;
        ti->nbytes = e - b;
        start = e;
    }
    if (start != data_len)
        return EM_FAIL(c, EM_ERR_FORMAT, OP,
                       "%s: the tensors cover %llu bytes of the data section but it holds %llu: "
                       "%llu trailing bytes belong to no tensor (the format requires the data "
                       "to be fully covered)",
                       path, (unsigned long long)start, (unsigned long long)data_len,
                       (unsigned long long)(data_len - start));
    return EM_OK;
}

em_status em_st_add_file(em_ctx *c, em_safetensors *st, const char *path, em_st_image *im) {
    em_st_file *nf = realloc(st->files, (size_t)(st->n_files + 1) * sizeof *nf);
    char *p = strdup(path);
    if (!nf || !p) {
        if (nf) st->files = nf;
        free(p);
        em_st_image_release(im);
        return EM_FAIL(c, EM_ERR_OOM, OP, "out of memory opening %s", path);
    }
    st->files = nf;
    int fi = st->n_files++;
    st->files[fi] = (em_st_file){.path = p, .image = im, .data_start = 0};
    path = p;

    const uint8_t *b = im->base;
    size_t len = im->len;
    if (len < 8)
        return EM_FAIL(c, EM_ERR_FORMAT, OP,
                       "%s: the file has %zu bytes, fewer than the 8-byte header length that "
                       "starts a safetensors file (truncated?)",
                       path, len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | b[i];
    if (n > EM_ST_MAX_HEADER)
        return EM_FAIL(c, EM_ERR_FORMAT, OP,
                       "%s: header length %llu is larger than the %llu bytes the safetensors "
                       "library accepts (MAX_HEADER_SIZE); not a safetensors file?",
                       path, (unsigned long long)n, EM_ST_MAX_HEADER);
    if (n > len - 8)
        return EM_FAIL(c, EM_ERR_FORMAT, OP,
                       "%s: header length %llu runs past the end of the file, which has %zu "
                       "bytes (truncated?)",
                       path, (unsigned long long)n, len);
    const uint8_t *h = b + 8;
    size_t bad;
    if (!em_st_utf8_valid(h, (size_t)n, &bad))
        return EM_FAIL(c, EM_ERR_FORMAT, OP, "%s: the header is not valid UTF-8 (byte %zu)", path,
                       bad + 8);
    json_error_t jerr;
    json_t *root = json_loadb((const char *)h, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return EM_FAIL(c, EM_ERR_FORMAT, OP,
                       "%s: the header is not valid JSON: %s (header line %d, column %d)", path,
                       jerr.text, jerr.line, jerr.column);
    em_status s = EM_OK;
    if (!json_is_object(root)) {
        s = EM_FAIL(c, EM_ERR_FORMAT, OP, "%s: the header is a JSON %s, not an object", path,
                    json_kind(root));
        json_decref(root);
        return s;
    }
    st->files[fi].data_start = 8 + n;
    int64_t first = st->n_entries, order = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__"))
            s = parse_metadata(c, st, path, v);
        else
            s = parse_tensor(c, st, fi, path, key, v, order++);
        if (s) break;
    }
    json_decref(root);
    if (s) return s;
    if ((s = validate(c, st, first, path, (uint64_t)(len - 8 - n)))) return s;
    for (int64_t i = first; i < st->n_entries; i++)
        st->entries[i].info.file_offset = 8 + n + st->entries[i].info.data_begin;
    return EM_OK;
}

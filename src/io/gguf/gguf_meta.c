/* GGUF type tables and metadata queries. */
#include <stdlib.h>
#include <string.h>

#include "io/gguf/gguf_impl.h"

/* ---- type tables ---- */

static const char *const value_type_names[EM_GGUF_TYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool",  "string", "array", "uint64", "int64", "float64",
};

const char *em_gguf_type_name(em_gguf_type t) {
    return (unsigned)t < EM_GGUF_TYPE_COUNT ? value_type_names[t] : "?";
}

size_t em_gguf_scalar_size(em_gguf_type t) {
    switch (t) {
    case EM_GGUF_UINT8: case EM_GGUF_INT8: case EM_GGUF_BOOL: return 1;
    case EM_GGUF_UINT16: case EM_GGUF_INT16: return 2;
    case EM_GGUF_UINT32: case EM_GGUF_INT32: case EM_GGUF_FLOAT32: return 4;
    case EM_GGUF_UINT64: case EM_GGUF_INT64: case EM_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* Block sizes and bytes per block: gguf-py's GGML_QUANT_SIZES (QK_K = 256). */
static const em_ggml_traits ggml_types[EM_GGML_TYPE_COUNT] = {
    [EM_GGML_F32] = {"F32", 1, 4, true, EM_F32},
    [EM_GGML_F16] = {"F16", 1, 2, true, EM_F16},
    [EM_GGML_Q4_0] = {"Q4_0", 32, 18, true, EM_Q4_0},
    [EM_GGML_Q4_1] = {"Q4_1", 32, 20, true, EM_Q4_1},
    [EM_GGML_Q5_0] = {"Q5_0", 32, 22, true, EM_Q5_0},
    [EM_GGML_Q5_1] = {"Q5_1", 32, 24, true, EM_Q5_1},
    [EM_GGML_Q8_0] = {"Q8_0", 32, 34, true, EM_Q8_0},
    [EM_GGML_Q8_1] = {"Q8_1", 32, 40, false, EM_F32},
    [EM_GGML_Q2_K] = {"Q2_K", 256, 84, false, EM_F32},
    [EM_GGML_Q3_K] = {"Q3_K", 256, 110, false, EM_F32},
    [EM_GGML_Q4_K] = {"Q4_K", 256, 144, true, EM_Q4_K},
    [EM_GGML_Q5_K] = {"Q5_K", 256, 176, true, EM_Q5_K},
    [EM_GGML_Q6_K] = {"Q6_K", 256, 210, true, EM_Q6_K},
    [EM_GGML_Q8_K] = {"Q8_K", 256, 292, false, EM_F32},
    [EM_GGML_IQ2_XXS] = {"IQ2_XXS", 256, 66, false, EM_F32},
    [EM_GGML_IQ2_XS] = {"IQ2_XS", 256, 74, false, EM_F32},
    [EM_GGML_IQ3_XXS] = {"IQ3_XXS", 256, 98, false, EM_F32},
    [EM_GGML_IQ1_S] = {"IQ1_S", 256, 50, false, EM_F32},
    [EM_GGML_IQ4_NL] = {"IQ4_NL", 32, 18, false, EM_F32},
    [EM_GGML_IQ3_S] = {"IQ3_S", 256, 110, false, EM_F32},
    [EM_GGML_IQ2_S] = {"IQ2_S", 256, 82, false, EM_F32},
    [EM_GGML_IQ4_XS] = {"IQ4_XS", 256, 136, false, EM_F32},
    [EM_GGML_I8] = {"I8", 1, 1, false, EM_F32},
    [EM_GGML_I16] = {"I16", 1, 2, false, EM_F32},
    [EM_GGML_I32] = {"I32", 1, 4, false, EM_F32},
    [EM_GGML_I64] = {"I64", 1, 8, false, EM_F32},
    [EM_GGML_F64] = {"F64", 1, 8, false, EM_F32},
    [EM_GGML_IQ1_M] = {"IQ1_M", 256, 56, false, EM_F32},
    [EM_GGML_BF16] = {"BF16", 1, 2, true, EM_BF16},
    [EM_GGML_TQ1_0] = {"TQ1_0", 256, 54, false, EM_F32},
    [EM_GGML_TQ2_0] = {"TQ2_0", 256, 66, false, EM_F32},
    [EM_GGML_MXFP4] = {"MXFP4", 32, 17, false, EM_F32},
};

const em_ggml_traits *em_ggml_traits_of(uint32_t type) {
    return type < EM_GGML_TYPE_COUNT && ggml_types[type].name ? &ggml_types[type] : NULL;
}

const char *em_ggml_type_name(em_ggml_type t) {
    const em_ggml_traits *tr = em_ggml_traits_of((uint32_t)t);
    return tr ? tr->name : NULL;
}

int em_ggml_type_block_size(em_ggml_type t) {
    const em_ggml_traits *tr = em_ggml_traits_of((uint32_t)t);
    return tr ? tr->block : 0;
}

int em_ggml_type_block_bytes(em_ggml_type t) {
    const em_ggml_traits *tr = em_ggml_traits_of((uint32_t)t);
    return tr ? tr->bytes : 0;
}

bool em_ggml_type_dtype(em_ggml_type t, em_dtype *out) {
    const em_ggml_traits *tr = em_ggml_traits_of((uint32_t)t);
    if (!tr || !tr->loadable) return false;
    if (out) *out = tr->dtype;
    return true;
}

/* ---- arena ---- */

struct em_gguf_chunk {
    struct em_gguf_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *em_gguf_arena_alloc(em_gguf_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    struct em_gguf_chunk *h = a->head;
    if (!h || h->cap - h->used < n) {
        size_t cap = n > ((size_t)1 << 20) ? n : ((size_t)1 << 20);
        h = malloc(sizeof *h + cap);
        if (!h) return NULL;
        h->next = a->head;
        h->used = 0;
        h->cap = cap;
        a->head = h;
    }
    void *p = h->data + h->used;
    h->used += n;
    return p;
}

void em_gguf_arena_free(em_gguf_arena *a) {
    while (a->head) {
        struct em_gguf_chunk *n = a->head->next;
        free(a->head);
        a->head = n;
    }
}

/* ---- handle queries ---- */

const char *em_gguf_path(const em_gguf *g) { return g ? g->path : NULL; }
uint32_t em_gguf_version(const em_gguf *g) { return g ? g->version : 0; }
uint32_t em_gguf_alignment(const em_gguf *g) { return g ? g->alignment : 0; }
uint64_t em_gguf_data_offset(const em_gguf *g) { return g ? g->data_start : 0; }

int64_t em_gguf_kv_count(const em_gguf *g) { return g ? g->n_kv : 0; }

const char *em_gguf_kv_key(const em_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_kv ? g->kv[i].key.s : NULL;
}

const em_gguf_value *em_gguf_kv_value(const em_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_kv ? &g->kv[i].value : NULL;
}

const em_gguf_value *em_gguf_find(const em_gguf *g, const char *key) {
    if (!g || !key || !g->kv_by_key) return NULL;
    int64_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int r = strcmp(g->kv[g->kv_by_key[mid]].key.s, key);
        if (r == 0) return &g->kv[g->kv_by_key[mid]].value;
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ---- values ---- */

em_gguf_type em_gguf_value_type(const em_gguf_value *v) {
    return v ? v->type : EM_GGUF_TYPE_COUNT;
}

static bool is_signed_int(em_gguf_type t) {
    return t == EM_GGUF_INT8 || t == EM_GGUF_INT16 || t == EM_GGUF_INT32 || t == EM_GGUF_INT64;
}

static bool is_unsigned_int(em_gguf_type t) {
    return t == EM_GGUF_UINT8 || t == EM_GGUF_UINT16 || t == EM_GGUF_UINT32 ||
           t == EM_GGUF_UINT64;
}

bool em_gguf_value_int(const em_gguf_value *v, int64_t *out) {
    if (!v) return false;
    if (is_signed_int(v->type)) {
        *out = v->num.i;
        return true;
    }
    if (is_unsigned_int(v->type)) {
        if (v->num.u > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)v->num.u;
        return true;
    }
    if (v->type == EM_GGUF_BOOL) {
        *out = v->num.b;
        return true;
    }
    return false;
}

bool em_gguf_value_float(const em_gguf_value *v, double *out) {
    if (!v) return false;
    if (v->type == EM_GGUF_FLOAT32 || v->type == EM_GGUF_FLOAT64) {
        *out = v->num.f;
        return true;
    }
    if (is_signed_int(v->type)) {
        *out = (double)v->num.i;
        return true;
    }
    if (is_unsigned_int(v->type)) {
        *out = (double)v->num.u;
        return true;
    }
    return false;
}

bool em_gguf_value_bool(const em_gguf_value *v, bool *out) {
    if (!v || v->type != EM_GGUF_BOOL) return false;
    *out = v->num.b;
    return true;
}

const char *em_gguf_value_str(const em_gguf_value *v, size_t *len) {
    if (!v || v->type != EM_GGUF_STRING) return NULL;
    if (len) *len = v->str.len;
    return v->str.s;
}

em_gguf_type em_gguf_array_type(const em_gguf_value *v) {
    return v && v->type == EM_GGUF_ARRAY ? v->etype : EM_GGUF_TYPE_COUNT;
}

uint64_t em_gguf_array_len(const em_gguf_value *v) {
    return v && v->type == EM_GGUF_ARRAY ? v->n : 0;
}

/* Element i of a numeric array as a scalar value. */
static bool array_elem(const em_gguf_value *v, uint64_t i, em_gguf_value *e) {
    if (!v || v->type != EM_GGUF_ARRAY || i >= v->n) return false;
    size_t sz = em_gguf_scalar_size(v->etype);
    if (!sz) return false;
    const uint8_t *p = v->raw + i * sz;
    memset(e, 0, sizeof *e);
    e->type = v->etype;
    uint64_t u = 0;
    for (size_t k = 0; k < sz; k++) u |= (uint64_t)p[k] << (8 * k);
    switch (v->etype) {
    case EM_GGUF_INT8: e->num.i = (int8_t)u; break;
    case EM_GGUF_INT16: e->num.i = (int16_t)u; break;
    case EM_GGUF_INT32: e->num.i = (int32_t)u; break;
    case EM_GGUF_INT64: e->num.i = (int64_t)u; break;
    case EM_GGUF_BOOL: e->num.b = u != 0; break;
    case EM_GGUF_FLOAT32: {
        uint32_t w = (uint32_t)u;
        float f;
        memcpy(&f, &w, 4);
        e->num.f = f;
        break;
    }
    case EM_GGUF_FLOAT64: memcpy(&e->num.f, &u, 8); break;
    default: e->num.u = u; break;
    }
    return true;
}

bool em_gguf_array_int(const em_gguf_value *v, uint64_t i, int64_t *out) {
    em_gguf_value e;
    return array_elem(v, i, &e) && em_gguf_value_int(&e, out);
}

bool em_gguf_array_float(const em_gguf_value *v, uint64_t i, double *out) {
    em_gguf_value e;
    return array_elem(v, i, &e) && em_gguf_value_float(&e, out);
}

const char *em_gguf_array_str(const em_gguf_value *v, uint64_t i, size_t *len) {
    if (!v || v->type != EM_GGUF_ARRAY || v->etype != EM_GGUF_STRING || i >= v->n) return NULL;
    if (len) *len = v->strs[i].len;
    return v->strs[i].s;
}

const em_gguf_value *em_gguf_array_array(const em_gguf_value *v, uint64_t i) {
    if (!v || v->type != EM_GGUF_ARRAY || v->etype != EM_GGUF_ARRAY || i >= v->n) return NULL;
    return &v->items[i];
}

int64_t em_gguf_get_int(const em_gguf *g, const char *key, int64_t dflt) {
    int64_t v;
    return em_gguf_value_int(em_gguf_find(g, key), &v) ? v : dflt;
}

double em_gguf_get_float(const em_gguf *g, const char *key, double dflt) {
    double v;
    return em_gguf_value_float(em_gguf_find(g, key), &v) ? v : dflt;
}

bool em_gguf_get_bool(const em_gguf *g, const char *key, bool dflt) {
    bool v;
    return em_gguf_value_bool(em_gguf_find(g, key), &v) ? v : dflt;
}

const char *em_gguf_get_str(const em_gguf *g, const char *key, size_t *len) {
    return em_gguf_value_str(em_gguf_find(g, key), len);
}

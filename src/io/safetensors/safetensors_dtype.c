/* safetensors dtypes: names, sizes, the library's sort order, and exact conversion of stored
 * bytes into Ember dtypes (float8 decoding included). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/threadpool.h"
#include "io/safetensors/safetensors_impl.h"

/* rank = declaration order of `enum Dtype` in safetensors/src/tensor.rs (0.8.0), which the
 * library's writer sorts by (descending) before the names. */
const em_st_dtype_traits em_st_dtype_table[EM_ST_DTYPE_COUNT] = {
    [EM_ST_BOOL] = {"BOOL", 8, 0, true, EM_BOOL, true, EM_BOOL},
    [EM_ST_F4] = {"F4", 4, 1, false, EM_F32, false, EM_F32},
    [EM_ST_F6_E2M3] = {"F6_E2M3", 6, 2, false, EM_F32, false, EM_F32},
    [EM_ST_F6_E3M2] = {"F6_E3M2", 6, 3, false, EM_F32, false, EM_F32},
    [EM_ST_U8] = {"U8", 8, 4, true, EM_U8, true, EM_U8},
    [EM_ST_I8] = {"I8", 8, 5, true, EM_I8, true, EM_I8},
    [EM_ST_F8_E5M2] = {"F8_E5M2", 8, 6, false, EM_F32, true, EM_BF16},
    [EM_ST_F8_E4M3] = {"F8_E4M3", 8, 7, false, EM_F32, true, EM_BF16},
    [EM_ST_F8_E8M0] = {"F8_E8M0", 8, 8, false, EM_F32, true, EM_BF16},
    [EM_ST_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8, 9, false, EM_F32, true, EM_BF16},
    [EM_ST_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8, 10, false, EM_F32, true, EM_BF16},
    [EM_ST_I16] = {"I16", 16, 11, true, EM_I16, true, EM_I16},
    [EM_ST_U16] = {"U16", 16, 12, false, EM_F32, true, EM_I32},
    [EM_ST_F16] = {"F16", 16, 13, true, EM_F16, true, EM_F16},
    [EM_ST_BF16] = {"BF16", 16, 14, true, EM_BF16, true, EM_BF16},
    [EM_ST_I32] = {"I32", 32, 15, true, EM_I32, true, EM_I32},
    [EM_ST_U32] = {"U32", 32, 16, false, EM_F32, true, EM_I64},
    [EM_ST_F32] = {"F32", 32, 17, true, EM_F32, true, EM_F32},
    [EM_ST_C64] = {"C64", 64, 18, false, EM_F32, false, EM_F32},
    [EM_ST_F64] = {"F64", 64, 19, true, EM_F64, true, EM_F64},
    [EM_ST_I64] = {"I64", 64, 20, true, EM_I64, true, EM_I64},
    [EM_ST_U64] = {"U64", 64, 21, false, EM_F32, true, EM_I64},
};
_Static_assert(EM_ST_DTYPE_COUNT == 22, "update em_st_dtype_table");
_Static_assert(EM_DTYPE_COUNT == 18, "update em_st_dtype_of (quantized dtypes have no file dtype)");

const char *em_st_dtype_name(em_st_dtype t) {
    return (unsigned)t < EM_ST_DTYPE_COUNT ? em_st_dtype_table[t].name : "?";
}

bool em_st_dtype_parse(const char *name, em_st_dtype *out) {
    if (!name) return false;
    for (int i = 0; i < EM_ST_DTYPE_COUNT; i++)
        if (!strcmp(name, em_st_dtype_table[i].name)) {
            *out = (em_st_dtype)i;
            return true;
        }
    return false;
}

int em_st_dtype_bits(em_st_dtype t) {
    return (unsigned)t < EM_ST_DTYPE_COUNT ? em_st_dtype_table[t].bits : 0;
}

bool em_st_dtype_natural(em_st_dtype t, em_dtype *out) {
    if ((unsigned)t >= EM_ST_DTYPE_COUNT || !em_st_dtype_table[t].loadable) return false;
    *out = em_st_dtype_table[t].natural;
    return true;
}

em_st_dtype em_st_dtype_of(em_dtype t) {
    switch (t) {
    case EM_F32: return EM_ST_F32;
    case EM_BF16: return EM_ST_BF16;
    case EM_F16: return EM_ST_F16;
    case EM_I64: return EM_ST_I64;
    case EM_I32: return EM_ST_I32;
    case EM_U8: return EM_ST_U8;
    case EM_BOOL: return EM_ST_BOOL;
    case EM_F64: return EM_ST_F64;
    case EM_I16: return EM_ST_I16;
    case EM_I8: return EM_ST_I8;
    default: return EM_ST_F32;
    }
}

/* ---- float8 ---- */

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Values are exact (ldexpf of small integers); the NaN bit patterns are the ones torch 2.x
 * produces on the CPU for .to(float32), so that decoded tensors compare bit for bit:
 * e4m3fn keeps the sign (0x7ff00000 / 0xfff00000), e5m2 goes through f16 with the quiet bit
 * set, and the fnuz / e8m0 types give 0x7f800001. */
float em_st_f8_to_f32(em_st_dtype t, uint8_t b) {
    float sign = (b & 0x80) ? -1.0f : 1.0f;
    switch (t) {
    case EM_ST_F8_E4M3: {
        int e = (b >> 3) & 0xf, m = b & 7;
        if (e == 15 && m == 7) return bits_f32((b & 0x80 ? 0x80000000u : 0) | 0x7ff00000u);
        return e ? sign * ldexpf((float)(8 + m), e - 10) : sign * ldexpf((float)m, -9);
    }
    case EM_ST_F8_E5M2: {
        uint32_t u;
        float f = em_f16_to_f32((uint16_t)(b << 8));
        memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x00400000u; /* quieted, as F16C does */
        return bits_f32(u);
    }
    case EM_ST_F8_E4M3FNUZ: {
        if (b == 0x80) return bits_f32(0x7f800001u);
        int e = (b >> 3) & 0xf, m = b & 7;
        return e ? sign * ldexpf((float)(8 + m), e - 11) : sign * ldexpf((float)m, -10);
    }
    case EM_ST_F8_E5M2FNUZ: {
        if (b == 0x80) return bits_f32(0x7f800001u);
        int e = (b >> 2) & 0x1f, m = b & 3;
        return e ? sign * ldexpf((float)(4 + m), e - 18) : sign * ldexpf((float)m, -17);
    }
    case EM_ST_F8_E8M0:
        return b == 0xff ? bits_f32(0x7f800001u) : ldexpf(1.0f, (int)b - 127);
    default: return 0.0f;
    }
}

/* ---- conversion ---- */

#define CHUNK 2048            /* elements converted per step through an aligned buffer */
#define PAR_GRAIN (1 << 20)   /* elements per parallel task: big tensors use every core */

static bool is_f8(em_st_dtype t) {
    return t == EM_ST_F8_E4M3 || t == EM_ST_F8_E5M2 || t == EM_ST_F8_E4M3FNUZ ||
           t == EM_ST_F8_E5M2FNUZ || t == EM_ST_F8_E8M0;
}

/* f32 → bf16 the way torch casts: NaN becomes 0x7fc0 whatever its sign and payload. */
static void f32_to_bf16_torch(const float *s, uint16_t *d, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = s[i] != s[i] ? 0x7fc0 : em_f32_to_bf16(s[i]);
}

/* Aligned chunk of a float source as f32 (exact for f16 / bf16). */
static bool float_to_f32(const void *src, em_dtype st, float *out, int64_t k) {
    if (st == EM_BF16) {
        const uint16_t *s = src;
        for (int64_t j = 0; j < k; j++) {
            uint32_t u = (uint32_t)s[j] << 16;
            memcpy(&out[j], &u, 4);
        }
        return true;
    }
    if (st == EM_F16) {
        const uint16_t *s = src;
        for (int64_t j = 0; j < k; j++) out[j] = em_f16_to_f32(s[j]);
        return true;
    }
    return false;
}

/* f32 chunk → f16 / bf16 / f32 targets; false for other targets. */
static bool f32_to_float(const float *v, void *dst, em_dtype dt, int64_t k) {
    if (dt == EM_F32) {
        memcpy(dst, v, (size_t)k * 4);
    } else if (dt == EM_BF16) {
        uint16_t *d = dst;
        for (int64_t j = 0; j < k; j++) d[j] = em_f32_to_bf16(v[j]);
    } else if (dt == EM_F16) {
        uint16_t *d = dst;
        for (int64_t j = 0; j < k; j++) d[j] = em_f32_to_f16(v[j]);
    } else {
        return false;
    }
    return true;
}

typedef struct conv_job {
    const uint8_t *src;
    em_st_dtype st;
    uint8_t *dst;
    em_dtype dt;
    float lut[256]; /* float8 codes → f32 */
} conv_job;

/* Converts elements [b, e): cannot fail (U64 ranges are checked before). */
static void convert_range(void *user, int64_t b, int64_t e, int tid) {
    (void)tid;
    const conv_job *j = user;
    const em_st_dtype_traits *tr = &em_st_dtype_table[j->st];
    size_t ssz = (size_t)tr->bits / 8, dsz = em_esize(j->dt);
    _Alignas(64) uint8_t abuf[CHUNK * 8]; /* the source chunk, aligned */
    _Alignas(64) float fbuf[CHUNK];
    _Alignas(64) int64_t ibuf[CHUNK];
    for (int64_t i = b; i < e; i += CHUNK) {
        int64_t k = e - i < CHUNK ? e - i : CHUNK;
        const uint8_t *s = j->src + (size_t)i * ssz;
        uint8_t *d = j->dst + (size_t)i * dsz;
        if (is_f8(j->st)) {
            if (j->dt == EM_F32) {
                float *o = (float *)(void *)d;
                for (int64_t q = 0; q < k; q++) o[q] = j->lut[s[q]];
                continue;
            }
            for (int64_t q = 0; q < k; q++) fbuf[q] = j->lut[s[q]];
            if (j->dt == EM_BF16)
                f32_to_bf16_torch(fbuf, (uint16_t *)(void *)d, k);
            else
                em_convert(fbuf, EM_F32, d, j->dt, k);
            continue;
        }
        if (tr->has_native) {
            /* typed reads need alignment: the mapping may not give it */
            const void *a = s;
            if ((uintptr_t)s % ssz) {
                memcpy(abuf, s, (size_t)k * ssz);
                a = abuf;
            }
            if (float_to_f32(a, tr->native, fbuf, k) && f32_to_float(fbuf, d, j->dt, k))
                continue;
            if (tr->native == EM_F32 && f32_to_float(a, d, j->dt, k)) continue;
            em_convert(a, tr->native, d, j->dt, k);
            continue;
        }
        /* U16, U32, U64: exact through int64, or U64 → double for float targets */
        if (j->st == EM_ST_U64 && em_dtype_is_float(j->dt)) {
            _Alignas(64) double dbl[CHUNK];
            for (int64_t q = 0; q < k; q++) {
                uint64_t v;
                memcpy(&v, s + (size_t)q * 8, 8);
                dbl[q] = (double)v;
            }
            em_convert(dbl, EM_F64, d, j->dt, k);
            continue;
        }
        for (int64_t q = 0; q < k; q++) {
            if (j->st == EM_ST_U16) {
                uint16_t v;
                memcpy(&v, s + (size_t)q * 2, 2);
                ibuf[q] = v;
            } else if (j->st == EM_ST_U32) {
                uint32_t v;
                memcpy(&v, s + (size_t)q * 4, 4);
                ibuf[q] = v;
            } else {
                uint64_t v;
                memcpy(&v, s + (size_t)q * 8, 8);
                ibuf[q] = (int64_t)v; /* range checked by em_st_convert */
            }
        }
        em_convert(ibuf, EM_I64, d, j->dt, k);
    }
}

em_status em_st_convert(em_ctx *c, const char *what, const void *src, em_st_dtype st, void *dst,
                        em_dtype dt, int64_t n) {
    const em_st_dtype_traits *tr = &em_st_dtype_table[st];
    if (!tr->loadable)
        return EM_FAIL(c, EM_ERR_UNSUPPORTED, "safetensors_load",
                       "%s: dtype %s cannot be converted to an Ember dtype", what, tr->name);
    if (tr->has_native && tr->native == dt) {
        memcpy(dst, src, (size_t)n * em_esize(dt));
        return EM_OK;
    }
    if (st == EM_ST_U64 && !em_dtype_is_float(dt)) {
        const uint8_t *s = src;
        for (int64_t i = 0; i < n; i++) {
            uint64_t v;
            memcpy(&v, s + (size_t)i * 8, 8);
            if (v > (uint64_t)INT64_MAX)
                return EM_FAIL(c, EM_ERR_OVERFLOW, "safetensors_load",
                               "%s: U64 element %lld is %llu, which does not fit %s", what,
                               (long long)i, (unsigned long long)v, em_dtype_name(dt));
        }
    }
    conv_job *j = malloc(sizeof *j);
    if (!j) return EM_FAIL(c, EM_ERR_OOM, "safetensors_load", "%s: out of memory", what);
    j->src = src;
    j->st = st;
    j->dst = dst;
    j->dt = dt;
    if (is_f8(st))
        for (int i = 0; i < 256; i++) j->lut[i] = em_st_f8_to_f32(st, (uint8_t)i);
    /* Chunks start at multiples of the grain, so every task's output is aligned. */
    em_parallel_for(n, PAR_GRAIN, convert_range, j);
    free(j);
    return EM_OK;
}

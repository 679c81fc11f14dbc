/* dtype traits and scalar conversions (round-to-nearest-even for bf16 and f16). */
#include <math.h>
#include <string.h>
#include <strings.h>

#include "core/bf16_inline.h"
#include "core/tensor_impl.h"

/* Quantized dtypes: ggml's block sizes and bytes per block (gguf-py GGML_QUANT_SIZES). They are
 * not "float" dtypes: no op computes in them, they only feed linear and embedding. */
const em_dtype_traits em_dtype_table[EM_DTYPE_COUNT] = {
    [EM_F32] = {"f32", 4, true, true, 1},     [EM_BF16] = {"bf16", 2, true, true, 1},
    [EM_F16] = {"f16", 2, true, true, 1},     [EM_I64] = {"i64", 8, false, true, 1},
    [EM_I32] = {"i32", 4, false, true, 1},    [EM_U8] = {"u8", 1, false, false, 1},
    [EM_BOOL] = {"bool", 1, false, false, 1}, [EM_F64] = {"f64", 8, true, true, 1},
    [EM_I16] = {"i16", 2, false, true, 1},    [EM_I8] = {"i8", 1, false, true, 1},
    [EM_Q8_0] = {"q8_0", 34, false, true, 32},  [EM_Q4_0] = {"q4_0", 18, false, true, 32},
    [EM_Q4_1] = {"q4_1", 20, false, true, 32},  [EM_Q5_0] = {"q5_0", 22, false, true, 32},
    [EM_Q5_1] = {"q5_1", 24, false, true, 32},  [EM_Q4_K] = {"q4_k", 144, false, true, 256},
    [EM_Q5_K] = {"q5_k", 176, false, true, 256}, [EM_Q6_K] = {"q6_k", 210, false, true, 256},
};
_Static_assert(EM_DTYPE_COUNT == 18, "update em_dtype_table");

const char *em_dtype_name(em_dtype t) {
    if (t == EM_DTYPE_AUTO) return "auto";
    return (unsigned)t < EM_DTYPE_COUNT ? em_dtype_table[t].name : "?";
}

size_t em_dtype_size(em_dtype t) {
    return (unsigned)t < EM_DTYPE_COUNT && em_dtype_table[t].block == 1 ? em_dtype_table[t].size
                                                                         : 0;
}

bool em_dtype_is_float(em_dtype t) {
    return (unsigned)t < EM_DTYPE_COUNT && em_dtype_table[t].is_float;
}

bool em_dtype_is_quantized(em_dtype t) {
    return (unsigned)t < EM_DTYPE_COUNT && em_dtype_table[t].block > 1;
}

int em_dtype_block_size(em_dtype t) {
    return (unsigned)t < EM_DTYPE_COUNT ? em_dtype_table[t].block : 0;
}

size_t em_dtype_block_bytes(em_dtype t) {
    return (unsigned)t < EM_DTYPE_COUNT ? em_dtype_table[t].size : 0;
}

bool em_dtype_parse(const char *s, em_dtype *out) {
    static const struct {
        const char *name;
        em_dtype t;
    } names[] = {
        {"f32", EM_F32},    {"float32", EM_F32},  {"float", EM_F32},   {"bf16", EM_BF16},
        {"bfloat16", EM_BF16}, {"f16", EM_F16},   {"float16", EM_F16}, {"half", EM_F16},
        {"i64", EM_I64},    {"int64", EM_I64},    {"long", EM_I64},    {"i32", EM_I32},
        {"int32", EM_I32},  {"int", EM_I32},      {"u8", EM_U8},       {"uint8", EM_U8},
        {"bool", EM_BOOL},  {"f64", EM_F64},      {"float64", EM_F64}, {"double", EM_F64},
        {"i16", EM_I16},    {"int16", EM_I16},    {"i8", EM_I8},       {"int8", EM_I8},
        {"q8_0", EM_Q8_0},  {"q4_0", EM_Q4_0},    {"q4_1", EM_Q4_1},   {"q5_0", EM_Q5_0},
        {"q5_1", EM_Q5_1},  {"q4_k", EM_Q4_K},    {"q5_k", EM_Q5_K},   {"q6_k", EM_Q6_K},
    };
    if (!s) return false;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(s, names[i].name) == 0) {
            *out = names[i].t;
            return true;
        }
    return false;
}

uint16_t em_f32_to_bf16(float f) { return em_bf16_from_f32_inline(f); }

float em_bf16_to_f32(uint16_t h) { return em_bf16_to_f32_inline(h); }

uint16_t em_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) {                                    /* result is subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign;           /* < half the smallest subnormal */
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        /* value = m * 2^(e-150) and the subnormal unit is 2^-24, so q = m >> (126 - e) */
        uint32_t sh = 126 - e;
        uint32_t r = m >> sh;
        uint32_t rem = m & ((1u << sh) - 1u);
        uint32_t half = 1u << (sh - 1);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((ax >> 13) - (112u << 10)); /* rebias exponent 127 → 15 */
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
    return (uint16_t)(sign | r);
}

float em_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0) {
        if (m == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int s = 0;
            while (!(m & 0x400u)) {
                m <<= 1;
                s++;
            }
            m &= 0x3ffu;
            u = sign | ((uint32_t)(113 - s) << 23) | (m << 13);
        }
    } else if (e == 31) {
        u = sign | 0x7f800000u | (m << 13);
    } else {
        u = sign | ((e + 112u) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

double em_load_f64(const void *p, em_dtype t, int64_t i) {
    switch (t) {
    case EM_F32: return ((const float *)p)[i];
    case EM_BF16: return em_bf16_to_f32(((const uint16_t *)p)[i]);
    case EM_F16: return em_f16_to_f32(((const uint16_t *)p)[i]);
    case EM_F64: return ((const double *)p)[i];
    case EM_I64: return (double)((const int64_t *)p)[i];
    case EM_I32: return ((const int32_t *)p)[i];
    case EM_I16: return ((const int16_t *)p)[i];
    case EM_I8: return ((const int8_t *)p)[i];
    case EM_U8: return ((const uint8_t *)p)[i];
    case EM_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return 0;
    }
}

/* Float → integer conversion that never invokes undefined behaviour (NaN and out-of-range
 * values saturate; torch leaves them unspecified). */
static int64_t f64_to_i64(double v) {
    if (v != v) return 0;
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v;
}

void em_store_f64(void *p, em_dtype t, int64_t i, double v) {
    switch (t) {
    case EM_F32: ((float *)p)[i] = (float)v; break;
    case EM_BF16: ((uint16_t *)p)[i] = em_f32_to_bf16((float)v); break;
    case EM_F16: ((uint16_t *)p)[i] = em_f32_to_f16((float)v); break;
    case EM_F64: ((double *)p)[i] = v; break;
    case EM_I64: ((int64_t *)p)[i] = f64_to_i64(v); break;
    case EM_I32: ((int32_t *)p)[i] = (int32_t)f64_to_i64(v); break;
    case EM_I16: ((int16_t *)p)[i] = (int16_t)f64_to_i64(v); break;
    case EM_I8: ((int8_t *)p)[i] = (int8_t)f64_to_i64(v); break;
    case EM_U8: ((uint8_t *)p)[i] = (uint8_t)f64_to_i64(v); break;
    case EM_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
    }
}

/* Integer → integer conversions go through int64 so that large values stay exact. */
static int64_t load_i64(const void *p, em_dtype t, int64_t i) {
    switch (t) {
    case EM_I64: return ((const int64_t *)p)[i];
    case EM_I32: return ((const int32_t *)p)[i];
    case EM_I16: return ((const int16_t *)p)[i];
    case EM_I8: return ((const int8_t *)p)[i];
    case EM_U8: return ((const uint8_t *)p)[i];
    case EM_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return 0;
    }
}

static void store_i64(void *p, em_dtype t, int64_t i, int64_t v) {
    switch (t) {
    case EM_I64: ((int64_t *)p)[i] = v; break;
    case EM_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case EM_I16: ((int16_t *)p)[i] = (int16_t)v; break;
    case EM_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    case EM_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case EM_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
    }
}

void em_convert(const void *src, em_dtype st, void *dst, em_dtype dt, int64_t n) {
    if (st == dt) {
        memmove(dst, src, em_dtype_nbytes(st, n));
        return;
    }
    if (em_is_quant(st)) { /* dequantize: n is a multiple of the block size */
        em_dequantize_to(st, src, dst, dt, n);
        return;
    }
    if (st == EM_F32 && dt == EM_BF16) {
        const float *s = src;
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = em_bf16_from_f32_inline(s[i]);
        return;
    }
    if (st == EM_BF16 && dt == EM_F32) {
        const uint16_t *s = src;
        float *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = em_bf16_to_f32_inline(s[i]);
        return;
    }
    bool sf = em_dtype_table[st].is_float, df = em_dtype_table[dt].is_float;
    if (!sf && !df) {
        for (int64_t i = 0; i < n; i++) store_i64(dst, dt, i, load_i64(src, st, i));
        return;
    }
    if (!sf && df) {
        for (int64_t i = 0; i < n; i++) {
            int64_t v = load_i64(src, st, i);
            em_store_f64(dst, dt, i, (double)v);
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) em_store_f64(dst, dt, i, em_load_f64(src, st, i));
}

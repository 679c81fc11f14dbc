/*
 * torch's CPU generator (ember/torch_rng.h): MT19937, its uniform conversions and the two
 * Box-Muller paths of torch.randn for float32, reproduced bit for bit. The vectorised AVX2
 * variant is emulated one lane at a time in portable C: the float polynomial log and sincos torch
 * takes from avx_mathfun.h (Cephes), with fmaf exactly where torch's compiler fused a multiply
 * into the following add (its build contracts floating-point expressions; this file is built
 * without contraction, -std=c11, so every fmaf here is deliberate).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor_impl.h"
#include "ember/ops.h"
#include "ember/torch_rng.h"

#define MT_N 624
#define MT_M 397

struct em_torch_generator {
    uint32_t state[MT_N];
    int left, next;
    uint64_t seed;
    bool has_next_normal; /* the second value of the scalar path's last Box-Muller pair */
    double next_normal;
    em_torch_rng_kind kind;
    /* a list (em_torch_generator_create_list): row i of a draw comes from rows[i] */
    em_torch_generator **rows;
    int nrows;
};

/* ---- MT19937 (std::mt19937's recurrence and tempering) ---- */

static void mt_seed(em_torch_generator *g, uint64_t seed) {
    g->seed = seed;
    g->state[0] = (uint32_t)(seed & 0xffffffffu);
    for (uint32_t j = 1; j < MT_N; j++)
        g->state[j] = 1812433253u * (g->state[j - 1] ^ (g->state[j - 1] >> 30)) + j;
    g->left = 1;
    g->next = 0;
    g->has_next_normal = false;
    g->next_normal = 0.0;
}

static uint32_t mix_bits(uint32_t u, uint32_t v) { return (u & 0x80000000u) | (v & 0x7fffffffu); }
static uint32_t twist(uint32_t u, uint32_t v) {
    return (mix_bits(u, v) >> 1) ^ ((v & 1u) ? 0x9908b0dfu : 0u);
}

static void mt_next_state(em_torch_generator *g) {
    uint32_t *p = g->state;
    g->left = MT_N;
    g->next = 0;
    int j;
    for (j = MT_N - MT_M + 1; --j; p++) *p = p[MT_M] ^ twist(p[0], p[1]);
    for (j = MT_M; --j; p++) *p = p[MT_M - MT_N] ^ twist(p[0], p[1]);
    *p = p[MT_M - MT_N] ^ twist(p[0], g->state[0]);
}

uint32_t em_torch_generator_random(em_torch_generator *g) {
    if (g->nrows) g = g->rows[0];
    if (--g->left == 0) mt_next_state(g);
    uint32_t y = g->state[g->next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

/* torch's random64: two outputs, the first in the high half */
static uint64_t random64(em_torch_generator *g) {
    uint32_t hi = em_torch_generator_random(g);
    uint32_t lo = em_torch_generator_random(g);
    return ((uint64_t)hi << 32) | lo;
}

/* uniform_real_distribution<float>(0, 1): 24 random bits scaled (exact in float) */
static float uniform_f32(em_torch_generator *g) {
    return (float)(em_torch_generator_random(g) & 0xffffffu) * (1.0f / 16777216.0f);
}

/* uniform_real_distribution<double>(0, 1): 53 random bits */
static double uniform_f64(em_torch_generator *g) {
    return (double)(random64(g) & ((UINT64_C(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}

/* ---- the scalar path: normal_distribution<double>, one value per element ---- */

static double normal_f64(em_torch_generator *g) {
    if (g->has_next_normal) {
        g->has_next_normal = false;
        return g->next_normal;
    }
    double u1 = uniform_f64(g);
    double u2 = uniform_f64(g);
    double r = sqrt(-2.0 * log1p(-u2));
    double theta = 2.0 * 3.14159265358979323846 * u1;
    g->next_normal = r * sin(theta);
    g->has_next_normal = true;
    return r * cos(theta);
}

/* ---- torch's AVX2 path, one lane: Cephes logf and sincosf as avx_mathfun.h computes them ---- */

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* x in (0, 1] (1 - a 24-bit uniform) */
static float cephes_logf(float x) {
    if (!(x >= 1.17549435e-38f)) x = 1.17549435e-38f; /* max(x, smallest normal) */
    uint32_t u = f32_bits(x);
    int32_t ei = (int32_t)(u >> 23) - 0x7f;
    x = bits_f32((u & ~0x7f800000u) | 0x3f000000u); /* mantissa in [0.5, 1) */
    float e = (float)ei + 1.0f;
    bool small = x < (float)0.707106781186547524;
    float tmp = small ? x : 0.0f;
    x = x - 1.0f;
    e = e - (small ? 1.0f : 0.0f);
    x = x + tmp;
    float z = x * x;
    float y = fmaf((float)7.0376836292E-2, x, (float)-1.1514610310E-1);
    y = fmaf(y, x, (float)1.1676998740E-1);
    y = fmaf(y, x, (float)-1.2420140846E-1);
    y = fmaf(y, x, (float)1.4249322787E-1);
    y = fmaf(y, x, (float)-1.6668057665E-1);
    y = fmaf(y, x, (float)2.0000714765E-1);
    y = fmaf(y, x, (float)-2.4999993993E-1);
    y = fmaf(y, x, (float)3.3333331174E-1);
    y = y * x;
    y = fmaf(y, z, e * (float)-2.12194440e-4);
    y = y - z * 0.5f;
    x = x + y;
    x = x + e * 0.693359375f;
    return x;
}

/* x >= 0 (an angle in [0, 2 pi)) */
static void cephes_sincosf(float x, float *s, float *c) {
    float y = x * (float)1.27323954473516; /* 4 / pi */
    int32_t j = (int32_t)y;
    j = (j + 1) & ~1;
    y = (float)j;
    uint32_t sign_sin = ((uint32_t)j & 4u) << 29;
    bool poly_cos = (j & 2) == 0; /* the first polynomial gives the cosine near 0 */
    uint32_t sign_cos = (~(uint32_t)(j - 2) & 4u) << 29;
    x = fmaf(y, -0.78515625f, x);
    x = fmaf(y, (float)-2.4187564849853515625e-4, x);
    x = fmaf(y, (float)-3.77489497744594108e-8, x);
    float z = x * x;
    float yc = fmaf((float)2.443315711809948E-005, z, (float)-1.388731625493765E-003);
    yc = fmaf(yc, z, (float)4.166664568298827E-002);
    yc = yc * z;
    yc = fmaf(yc, z, -(z * 0.5f));
    yc = yc + 1.0f;
    float ys = fmaf((float)-1.9515295891E-4, z, (float)8.3321608736E-3);
    ys = fmaf(ys, z, (float)-1.6666654611E-1);
    ys = ys * z;
    ys = fmaf(ys, x, x);
    /* the selection as avx_mathfun does it, with its additions of zero */
    float ysin2 = poly_cos ? ys : 0.0f, ysin1 = poly_cos ? 0.0f : yc;
    float ys_rest = ys - ysin2, yc_rest = yc - ysin1;
    *s = bits_f32(f32_bits(ysin1 + ysin2) ^ sign_sin);
    *c = bits_f32(f32_bits(yc_rest + ys_rest) ^ sign_cos);
}

/* data[0..16) holds uniforms; becomes 16 normals (mean 0, std 1) */
static void fill16_avx2(float *data) {
    const float two_pi = (float)(2.0f * 3.14159265358979323846);
    for (int j = 0; j < 8; j++) {
        float u1 = 1.0f - data[j];
        float u2 = data[j + 8];
        float radius = sqrtf(-2.0f * cephes_logf(u1));
        float s, c;
        cephes_sincosf(two_pi * u2, &s, &c);
        data[j] = fmaf(radius * c, 1.0f, 0.0f);
        data[j + 8] = fmaf(radius * s, 1.0f, 0.0f);
    }
}

/* torch's portable normal_fill_16 (float): the C library's logf, cosf, sinf */
static void fill16_default(float *data) {
    for (int j = 0; j < 8; j++) {
        float u1 = 1.0f - data[j];
        float u2 = data[j + 8];
        float radius = sqrtf(-2.0f * logf(u1));
        float theta = (float)(2.0f * 3.14159265358979323846 * (double)u2);
        data[j] = radius * cosf(theta) * 1.0f + 0.0f;
        data[j + 8] = radius * sinf(theta) * 1.0f + 0.0f;
    }
}

/* ---- public ---- */

em_torch_generator *em_torch_generator_create(uint64_t seed) {
    em_torch_generator *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    mt_seed(g, seed);
    const char *k = getenv("EMBER_TORCH_RNG");
    if (!k || !em_torch_rng_kind_parse(k, &g->kind)) g->kind = EM_TORCH_RNG_AVX2;
    return g;
}

em_torch_generator *em_torch_generator_create_list(const uint64_t *seeds, int n) {
    if (!seeds || n < 1) return NULL;
    em_torch_generator *g = em_torch_generator_create(seeds[0]);
    if (!g) return NULL;
    g->rows = calloc((size_t)n, sizeof *g->rows);
    g->nrows = g->rows ? n : 0;
    for (int i = 0; g->rows && i < n; i++)
        if (!(g->rows[i] = em_torch_generator_create(seeds[i]))) {
            em_torch_generator_free(g);
            return NULL;
        }
    if (!g->rows) {
        free(g);
        return NULL;
    }
    return g;
}

int em_torch_generator_count(const em_torch_generator *g) {
    return !g ? 0 : g->nrows ? g->nrows : 1;
}

void em_torch_generator_free(em_torch_generator *g) {
    if (!g) return;
    for (int i = 0; i < g->nrows; i++) free(g->rows[i]);
    free(g->rows);
    free(g);
}

void em_torch_generator_manual_seed(em_torch_generator *g, uint64_t seed) {
    if (!g) return;
    mt_seed(g, seed);
    for (int i = 0; i < g->nrows; i++) mt_seed(g->rows[i], seed);
}

uint64_t em_torch_generator_initial_seed(const em_torch_generator *g) { return g ? g->seed : 0; }

void em_torch_generator_set_kind(em_torch_generator *g, em_torch_rng_kind kind) {
    if (!g || (unsigned)kind >= EM_TORCH_RNG_KIND_COUNT) return;
    g->kind = kind;
    for (int i = 0; i < g->nrows; i++) g->rows[i]->kind = kind;
}

em_torch_rng_kind em_torch_generator_kind(const em_torch_generator *g) {
    return g ? g->kind : EM_TORCH_RNG_AVX2;
}

bool em_torch_rng_kind_parse(const char *s, em_torch_rng_kind *out) {
    if (!s || !out) return false;
    if (!strcmp(s, "avx2")) *out = EM_TORCH_RNG_AVX2;
    else if (!strcmp(s, "default")) *out = EM_TORCH_RNG_DEFAULT;
    else return false;
    return true;
}

em_status em_torch_randn_fill(em_torch_generator *g, float *out, int64_t n) {
    if (!g || (!out && n > 0) || n < 0) return EM_ERR_INVALID_ARG;
    if (g->nrows) { /* one row per generator: n must split evenly */
        if (n % g->nrows) return EM_ERR_INVALID_ARG;
        for (int i = 0; i < g->nrows; i++)
            em_torch_randn_fill(g->rows[i], out + i * (n / g->nrows), n / g->nrows);
        return EM_OK;
    }
    if (n < 16) {
        for (int64_t i = 0; i < n; i++) out[i] = (float)normal_f64(g);
        return EM_OK;
    }
    void (*fill16)(float *) = g->kind == EM_TORCH_RNG_DEFAULT ? fill16_default : fill16_avx2;
    for (int64_t i = 0; i < n; i++) out[i] = uniform_f32(g);
    for (int64_t i = 0; i + 16 <= n; i += 16) fill16(out + i);
    if (n % 16) {
        /* torch redraws the last 16 values and recomputes them as one block */
        float *tail = out + n - 16;
        for (int i = 0; i < 16; i++) tail[i] = uniform_f32(g);
        fill16(tail);
    }
    return EM_OK;
}

em_tensor *em_torch_randn_(em_ctx *c, const char *file, int line, em_torch_generator *g, int ndim,
                           const int64_t *shape, em_device *dev) {
    if (!c || c->err.status) return NULL;
    if (!g || ndim < 0 || ndim > EM_MAX_DIMS || (ndim > 0 && !shape)) {
        em_fail_at(c, EM_ERR_INVALID_ARG, "torch_randn", file, line,
                   "needs a generator and 0..%d dims with a shape", EM_MAX_DIMS);
        return NULL;
    }
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] > 0 && n > INT64_MAX / 4 / shape[i])) {
            em_fail_at(c, EM_ERR_SHAPE, "torch_randn", file, line,
                       "dimension %d is %lld: negative or too large", i, (long long)shape[i]);
            return NULL;
        }
        n *= shape[i];
    }
    float *buf = malloc((size_t)(n ? n : 1) * sizeof *buf);
    if (!buf) {
        em_fail_at(c, EM_ERR_OOM, "torch_randn", file, line, "cannot allocate %lld floats",
                   (long long)n);
        return NULL;
    }
    if (g->nrows) { /* row i from generator i, as diffusers' randn_tensor with a list */
        int64_t rows = ndim > 0 ? shape[0] : 1, per = rows ? n / rows : 0;
        if (rows > g->nrows) {
            free(buf);
            em_fail_at(c, EM_ERR_SHAPE, "torch_randn", file, line,
                       "a draw of %lld rows from a list of %d generators (one per row)",
                       (long long)rows, g->nrows);
            return NULL;
        }
        for (int64_t i = 0; i < rows; i++) em_torch_randn_fill(g->rows[i], buf + i * per, per);
    } else {
        em_torch_randn_fill(g, buf, n);
    }
    em_tensor *t = em_from_host_on_(c, file, line, dev ? dev : em_ctx_device(c), EM_F32, ndim,
                                    shape, buf);
    free(buf);
    return t;
}

/*
 * GEMM engines on large shapes, against a double-precision product of the same (rounded) inputs
 * computed here. This is an additional check: the primary references are the torch fixtures in
 * tests/fixtures/ops/linalg.* (run by test_ops). Covers what fixtures cannot hold cheaply: big
 * and odd shapes (several k, m and n blocks), every packing layout, both engines, and the C
 * twins called directly whatever the CPU.
 *
 * EMBER_TEST_QUICK=1 (the suites under an emulated CPU, where this runs 10-50x slower) keeps every
 * engine, layout, dtype and block crossing on smaller shapes.
 *
 * Bound: |got - ref| <= 2^-8 |ref| (one bf16/f16 rounding; 0 for f32) + 1e-5 * sum_k |a||b|
 * (f32 accumulation over K terms with any summation order).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/gemm.h"
#include "ember/ember.h"
#include "harness.h"

static uint64_t rng = 88172645463325252ull;

static bool quick(void) {
    const char *q = getenv("EMBER_TEST_QUICK");
    return q && *q && strcmp(q, "0");
}

static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static double get(const void *p, em_dtype dt, int64_t i) {
    switch (dt) {
    case EM_F32: return ((const float *)p)[i];
    case EM_BF16: return em_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return em_f16_to_f32(((const uint16_t *)p)[i]);
    }
}

static void *rand_buf(em_dtype dt, int64_t n) {
    size_t es = em_dtype_size(dt);
    void *p = malloc((size_t)(n > 0 ? n : 1) * es);
    for (int64_t i = 0; i < n; i++) {
        float v = frand();
        if (dt == EM_F32)
            ((float *)p)[i] = v;
        else if (dt == EM_BF16)
            ((uint16_t *)p)[i] = em_f32_to_bf16(v);
        else
            ((uint16_t *)p)[i] = em_f32_to_f16(v);
    }
    return p;
}

/* Compares g's C (already computed) with the double reference; returns the worst error / bound. */
static double check(const em_gemm_args *g, const char *what) {
    double worst = 0;
    int64_t bad = 0;
    double out_rel = g->dtype == EM_F32 ? 0 : g->dtype == EM_BF16 ? 1.0 / 256 : 1.0 / 2048;
    /* A row-major and B^T row-major in double, so the reference loop is contiguous */
    double *a = malloc((size_t)(g->m * g->k + 1) * sizeof *a);
    double *bt = malloc((size_t)(g->n * g->k + 1) * sizeof *bt);
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t k = 0; k < g->k; k++)
            a[i * g->k + k] = get(g->a, g->dtype, i * g->a_rs + k * g->a_cs);
    for (int64_t j = 0; j < g->n; j++)
        for (int64_t k = 0; k < g->k; k++)
            bt[j * g->k + k] = get(g->b, g->dtype, k * g->b_rs + j * g->b_cs);
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            const double *ar = a + i * g->k, *br = bt + j * g->k;
            double s = 0, sa = 0;
            for (int64_t k = 0; k < g->k; k++) {
                double p = ar[k] * br[k];
                s += p;
                sa += fabs(p);
            }
            if (g->bias) {
                s += g->bias[j];
                sa += fabs(g->bias[j]);
            }
            double got = get(g->c, g->dtype, i * g->ldc + j);
            double bound = out_rel * fabs(s) + 1e-5 * sa + 1e-30;
            double r = fabs(got - s) / bound;
            if (!(r <= 1.0) && bad++ < 3)
                fprintf(stderr, "  %s: C[%lld,%lld] = %.8g, expected %.8g (bound %.3g)\n", what,
                        (long long)i, (long long)j, got, s, bound);
            if (!(r <= worst)) worst = r;
        }
    free(a), free(bt);
    CHECK_MSG(bad == 0, "%s: %lld elements out of bound", what, (long long)bad);
    return worst;
}

/* layout bits: 1 = A stored transposed (column-major), 2 = B stored as [N, K] (k contiguous). */
static void run_case(int64_t m, int64_t n, int64_t k, em_dtype dt, int layout, int engine,
                     bool bias) {
    em_gemm_args g = {0};
    g.m = m, g.n = n, g.k = k, g.dtype = dt;
    void *a = rand_buf(dt, m * k), *b = rand_buf(dt, k * n);
    void *c = calloc((size_t)(m * n > 0 ? m * n : 1), 4);
    float *bs = NULL;
    g.a = a;
    g.a_rs = layout & 1 ? 1 : k;
    g.a_cs = layout & 1 ? m : 1;
    g.b = b;
    g.b_rs = layout & 2 ? 1 : n;
    g.b_cs = layout & 2 ? k : 1;
    g.c = c;
    g.ldc = n;
    if (bias) {
        bs = malloc((size_t)n * sizeof *bs);
        for (int64_t j = 0; j < n; j++) bs[j] = frand();
        g.bias = bs;
    }
    g.force_engine = engine;
    CHECK(em_gemm(&g) == EM_OK);
    char what[160];
    snprintf(what, sizeof what, "m%lld n%lld k%lld %s layout %d engine %d%s", (long long)m,
             (long long)n, (long long)k, em_dtype_name(dt), layout, engine, bias ? " bias" : "");
    double w = check(&g, what);
    if (dt == EM_F32 && w > 0.5) fprintf(stderr, "  note: %s uses %.2f of its bound\n", what, w);
    /* the per-ISA kernels called directly on the same problem: the portable twins everywhere,
     * the avx2 ones where the CPU has AVX2, the NEON ones (with and without the bf16 dot) on
     * aarch64 */
    const em_cpu_features *f = em_cpu_features_get();
    const char *tw_name[3] = {"generic"};
    const em_gemm_kernel *tw_kern[3] = {em_gemm_kernel_generic(dt)};
    em_gemm_dot_fn tw_dot[3] = {em_gemm_dot_generic(dt)};
    int ntw = 1;
#if defined(__x86_64__)
    if (f->avx2 && f->fma && f->f16c) {
        tw_name[ntw] = "avx2", tw_kern[ntw] = em_gemm_kernel_avx2(dt);
        tw_dot[ntw++] = em_gemm_dot_avx2(dt);
    }
#elif defined(__aarch64__)
    tw_name[ntw] = "neon", tw_kern[ntw] = em_gemm_kernel_neon(dt);
    tw_dot[ntw++] = em_gemm_dot_neon(dt, false);
    if (f->neon_bf16) {
        tw_name[ntw] = "neon bf16", tw_kern[ntw] = em_gemm_kernel_neon(dt);
        tw_dot[ntw++] = em_gemm_dot_neon(dt, true);
    }
#endif
    (void)f;
    for (int isa = 0; isa < ntw && m * n * k <= 64 * 300 * 257; isa++) {
        const em_gemm_kernel *gk = tw_kern[isa];
        char name[200];
        void *ws = aligned_alloc(64, em_gemm_block_ws(gk, dt, m, n, k));
        memset(c, 0, (size_t)(m * n) * 4);
        em_gemm_block(&g, gk, g.a, g.b, g.c, 0, m, 0, n, ws);
        free(ws);
        snprintf(name, sizeof name, "%s %s", what, gk->name);
        check(&g, name);
        if (layout & 2 && (layout & 1) == 0) {
            memset(c, 0, (size_t)(m * n) * 4);
            tw_dot[isa](m, n, k, a, k, b, k, c, n, dt, g.bias);
            snprintf(name, sizeof name, "%s %s dot", what, tw_name[isa]);
            check(&g, name);
        }
    }
    free(a), free(b), free(c), free(bs);
}

static void test_big_shapes(void) {
    if (quick()) { /* still several k, m and n blocks of every kernel */
        run_case(150, 530, 300, EM_F32, 0, 0, false);
        run_case(150, 530, 300, EM_BF16, 0, 0, false);
        run_case(100, 97, 2100, EM_BF16, 2, 0, true);
        run_case(129, 50, 1100, EM_F32, 3, 0, false);
        run_case(77, 60, 1537, EM_F16, 1, 0, true);
        return;
    }
    run_case(512, 700, 1000, EM_F32, 0, 0, false);
    run_case(512, 700, 1000, EM_BF16, 0, 0, false);
    run_case(300, 257, 4096, EM_BF16, 2, 0, true);
    run_case(129, 200, 4096, EM_F32, 3, 0, false);
    run_case(77, 515, 1537, EM_F16, 1, 0, true);
}

static void test_layouts_and_edges(void) {
    em_dtype dts[] = {EM_F32, EM_BF16, EM_F16};
    int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {14, 32, 2}, {15, 33, 513}, {29, 65, 257},
                           {64, 300, 257}, {2, 97, 1031}};
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int layout = 0; layout < 4; layout++)
                if (!quick() || shapes[s][0] * shapes[s][1] * shapes[s][2] < 1000000)
                    run_case(shapes[s][0], shapes[s][1], shapes[s][2], dts[d], layout, 1,
                         (s + layout) % 2 == 0);
}

static void test_dot_engine(void) {
    em_dtype dts[] = {EM_F32, EM_BF16, EM_F16};
    int64_t shapes[][3] = {{1, 1, 1}, {1, 768, 2048}, {4, 37, 1000}, {5, 9, 31}, {16, 130, 33},
                           {64, 70, 4096}, {3, 2048, 65}, {2, 19, 300}, {6, 37, 300},
                           {7, 11, 2048}, {8, 130, 97}, {33, 10, 47}, {1, 5, 15}, {2, 3, 17},
                           {20, 7, 1}, {48, 13, 18}, {32, 6, 2}};
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            if (!quick() || shapes[s][0] * shapes[s][1] * shapes[s][2] < 1000000)
                run_case(shapes[s][0], shapes[s][1], shapes[s][2], dts[d], 2, 2, s % 2 == 1);
}

/*
 * The AVX2 dot engine with f32 results (ragged_dot's [N, K] kernels): within the f32 bound of the
 * double reference, and equal bit for bit to the bf16 engine's output once rounded (the same sums
 * in the same order). Row counts past the 32-row blocks and odd k and n included.
 */
static void test_dot_f32out_avx2(void) {
#if defined(__x86_64__)
    const em_cpu_features *f = em_cpu_features_get();
    if (!(f->avx2 && f->fma && f->f16c)) {
        em_test_skip("this CPU has no AVX2/FMA/F16C");
        return;
    }
    int64_t shapes[][3] = {{1, 7, 33}, {3, 300, 2048}, {4, 5, 17}, {5, 64, 1000}, {16, 33, 2049},
                           {37, 9, 300}, {70, 20, 96}};
    em_dtype dts[] = {EM_F32, EM_BF16};
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            em_dtype dt = dts[d];
            void *x = rand_buf(dt, m * k), *w = rand_buf(dt, n * k);
            float *c = malloc((size_t)(m * n) * sizeof *c);
            uint16_t *cb = malloc((size_t)(m * n) * 2);
            CHECK(em_gemm_dot_f32out_avx2(dt, m, n, k, x, k, w, k, c, n));
            if (dt == EM_BF16) em_gemm_dot_avx2(dt)(m, n, k, x, k, w, k, cb, n, dt, NULL);
            int64_t bad = 0, diff = 0;
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double ref = 0, sa = 0;
                    for (int64_t q = 0; q < k; q++) {
                        double p = get(x, dt, i * k + q) * get(w, dt, j * k + q);
                        ref += p;
                        sa += fabs(p);
                    }
                    bad += !(fabs(c[i * n + j] - ref) <= 1e-5 * sa + 1e-30);
                    if (dt == EM_BF16) diff += em_f32_to_bf16(c[i * n + j]) != cb[i * n + j];
                }
            CHECK_MSG(bad == 0 && diff == 0,
                      "avx2 f32-out dot m%lld n%lld k%lld %s: %lld out of bound, %lld differ "
                      "from the bf16 engine", (long long)m, (long long)n, (long long)k,
                      em_dtype_name(dt), (long long)bad, (long long)diff);
            free(x), free(w), free(c), free(cb);
        }
#else
    em_test_skip("the AVX2 engine is built on x86-64 only");
#endif
}

/*
 * em_gemm_block with workspace sized for a taller block than it computes: a bf16 C with several
 * k blocks keeps f32 partial sums, and a shorter block gets a wider column block (ASan watches
 * the buffers). A kernel copy with small blocks makes this cheap to reach.
 */
static void test_block_workspace(void) {
    const em_gemm_kernel *base = em_gemm_kernel_for(EM_BF16);
    em_gemm_kernel kern = *base;
    kern.kc = 64;
    kern.mc = 2 * kern.mr;
    kern.nc = 8192;
    /* m * n > 1M f32 partial sums: the taller block's column block is the narrower one */
    int64_t m = quick() ? 1100 : 1500, n = 1000, k = quick() ? 70 : 100, split = m * 2 / 3;
    em_gemm_args g = {0};
    g.m = m, g.n = n, g.k = k, g.dtype = EM_BF16;
    void *a = rand_buf(EM_BF16, m * k), *b = rand_buf(EM_BF16, k * n);
    g.a = a, g.a_rs = k, g.a_cs = 1;
    g.b = b, g.b_rs = n, g.b_cs = 1;
    g.c = calloc((size_t)(m * n), 2);
    g.ldc = n;
    size_t bytes = em_gemm_block_ws(&kern, EM_BF16, m, n, k);
    void *ws = aligned_alloc(64, (bytes + 63) / 64 * 64);
    em_gemm_block(&g, &kern, a, b, g.c, 0, split, 0, n, ws); /* shorter than sized for */
    em_gemm_block(&g, &kern, a, b, g.c, split, m, 0, n, ws);
    check(&g, "bf16 blocks with f32 partial sums");
    free(ws), free(a), free(b), free(g.c);
}

/* Every element is summed in one order whatever the thread count (tiles and chunks differ). */
static void test_thread_invariance(void) {
    int64_t shapes[][3] = {{300, 257, 700}, {5, 1000, 333}, {64, 900, 2048}, {2, 1000, 777},
                           {7, 1000, 333}, {100, 200, 300}};
    em_dtype dts[] = {EM_F32, EM_BF16};
    int saved = em_num_threads();
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int d = 0; d < 2; d++) {
            int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            if (quick() && m * n * k > 10000000) continue;
            em_dtype dt = dts[d];
            size_t es = em_dtype_size(dt), cb = (size_t)(m * n) * es;
            void *a = rand_buf(dt, m * k), *b = rand_buf(dt, k * n);
            void *c1 = malloc(cb), *c2 = malloc(cb);
            em_gemm_args g = {0};
            g.m = m, g.n = n, g.k = k, g.dtype = dt;
            g.a = a, g.a_rs = k, g.a_cs = 1;
            g.b = b, g.b_rs = 1, g.b_cs = k; /* linear layout: both engines can take it */
            g.ldc = n;
            for (int engine = 1; engine <= 2; engine++) {
                g.force_engine = engine;
                em_set_num_threads(1);
                g.c = c1;
                CHECK(em_gemm(&g) == EM_OK);
                int counts[] = {2, 3, 5};
                for (int t = 0; t < 3; t++) {
                    em_set_num_threads(counts[t]);
                    g.c = c2;
                    memset(c2, 0xff, cb);
                    CHECK(em_gemm(&g) == EM_OK);
                    CHECK_MSG(!memcmp(c1, c2, cb), "m%lld n%lld k%lld %s engine %d: %d threads",
                              (long long)m, (long long)n, (long long)k, em_dtype_name(dt),
                              engine, counts[t]);
                }
            }
            free(a), free(b), free(c1), free(c2);
        }
    em_set_num_threads(saved);
}

/* em_gemm_args.b_panel: B's panels from the caller (here packed from a B it keeps [k, n]
 * row-major, reached through the batch entry's pointer) and nc_max give bit for bit the plain
 * packed engine's C, whatever the thread count. */
typedef struct panel_ctx {
    int64_t n; /* B's row stride */
    em_dtype dt;
} panel_ctx;

static void pack_from_b(const void *ctx, const em_gemm_kernel *kern, void *dst, const void *b,
                        int64_t k0, int64_t kc, int64_t j0, int width) {
    const panel_ctx *p = ctx;
    size_t es = em_dtype_size(p->dt);
    kern->pack(dst, kern->nr, width, kc, (const char *)b + (size_t)(k0 * p->n + j0) * es, p->dt,
               1, p->n);
}

static void test_b_panel(void) {
    const int64_t m = 70, n = 300, k = quick() ? 300 : 1100, batch = 2;
    em_dtype dts[] = {EM_F32, EM_BF16};
    int saved = em_num_threads();
    for (int d = 0; d < 2; d++) {
        em_dtype dt = dts[d];
        size_t es = em_dtype_size(dt), cb = (size_t)(batch * m * n) * es;
        void *a = rand_buf(dt, m * k), *b = rand_buf(dt, batch * k * n);
        void *c1 = malloc(cb), *c2 = malloc(cb);
        float *bias = malloc((size_t)n * sizeof *bias);
        for (int64_t j = 0; j < n; j++) bias[j] = frand();
        em_gemm_args g = {0};
        g.m = m, g.n = n, g.k = k, g.dtype = dt;
        g.a = a, g.a_rs = k, g.a_cs = 1;
        g.b = b, g.b_rs = n, g.b_cs = 1;
        g.ldc = n;
        g.bias = bias;
        g.batch_ndim = 1;
        g.batch_shape[0] = batch;
        g.a_bs[0] = 0, g.b_bs[0] = k * n, g.c_bs[0] = m * n;
        g.force_engine = 1;
        g.c = c1;
        CHECK(em_gemm(&g) == EM_OK);
        panel_ctx pc = {n, dt};
        g.b_panel = pack_from_b;
        g.b_ctx = &pc;
        g.force_engine = 2; /* the dot engine cannot take a b_panel: packed all the same */
        g.c = c2;
        int counts[] = {1, 3};
        int64_t caps[] = {0, 64, 100};
        for (int t = 0; t < 2; t++)
            for (int cap = 0; cap < 3; cap++) {
                em_set_num_threads(counts[t]);
                g.nc_max = caps[cap];
                memset(c2, 0xff, cb);
                CHECK(em_gemm(&g) == EM_OK);
                CHECK_MSG(!memcmp(c1, c2, cb), "b_panel %s, %d threads, nc_max %lld",
                          em_dtype_name(dt), counts[t], (long long)caps[cap]);
            }
        free(a), free(b), free(c1), free(c2), free(bias);
    }
    em_set_num_threads(saved);
}

/* The public ops on big strided views: matmul of a transposed A, linear with 3-D x. */
static void test_public_ops(void) {
    em_ctx *c = em_ctx_create();
    const int64_t K = quick() ? 300 : 700, M = quick() ? 130 : 512, N = quick() ? 120 : 300;
    const int64_t KX = quick() ? 400 : 1000, MX = quick() ? 20 : 50, NX = quick() ? 100 : 260;
    int64_t sa[2] = {K, M}, sb[2] = {K, N}, sx[3] = {3, MX, KX}, sw[2] = {NX, KX};
    em_tensor *a = em_randn(c, EM_BF16, 2, sa, 1, 0.0, 1.0);
    em_tensor *b = em_randn(c, EM_BF16, 2, sb, 2, 0.0, 1.0);
    em_tensor *at = em_transpose(c, a, 0, 1);
    em_tensor *y = em_matmul(c, at, b);
    em_tensor *x = em_randn(c, EM_F32, 3, sx, 3, 0.0, 1.0);
    em_tensor *w = em_randn(c, EM_F32, 2, sw, 4, 0.0, 1.0);
    em_tensor *z = em_linear(c, x, w, NULL);
    CHECK(em_ctx_status(c) == EM_OK);
    if (em_ctx_status(c) == EM_OK) {
        em_gemm_args g = {0};
        g.m = M, g.n = N, g.k = K, g.dtype = EM_BF16;
        g.a = em_tensor_data(c, a), g.a_rs = 1, g.a_cs = M;
        g.b = em_tensor_data(c, b), g.b_rs = N, g.b_cs = 1;
        g.c = em_tensor_data(c, y), g.ldc = N;
        check(&g, "em_matmul(a^T, b) bf16");
        g.m = 3 * MX, g.n = NX, g.k = KX, g.dtype = EM_F32;
        g.a = em_tensor_data(c, x), g.a_rs = KX, g.a_cs = 1;
        g.b = em_tensor_data(c, w), g.b_rs = 1, g.b_cs = KX;
        g.c = em_tensor_data(c, z), g.ldc = NX;
        check(&g, "em_linear(x[3,MX,KX], w) f32");
    }
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_big_shapes), T(test_layouts_and_edges), T(test_dot_engine),
             T(test_dot_f32out_avx2),
             T(test_block_workspace), T(test_thread_invariance), T(test_b_panel),
             T(test_public_ops))

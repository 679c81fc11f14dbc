/*
 * The GEMM driver (see gemm.h): kernel choice, the portable packer, the serial block loop nest
 * (BLIS order: column block jc -> k block pc -> row block ic -> nr panel -> mr panel) and the
 * parallel schedule over batch entries and 2-D tiles of C.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/gemm.h"

/* The dot engine reads each weight row once and packs nothing; it wins while x is a few rows,
 * and keeps up while x stays in L2 (bench/lab_gemm, K = 2048: equal to the packed engine, which
 * must pack the weights, at 64 to 96 rows of bf16; behind it at 128). */
#define DOT_ALWAYS_M 16
#define DOT_MAX_M 96
#define DOT_MAX_X_BYTES (512 << 10)
/* AVX2 has no f16 dot: its dot engine widens every f16 weight vector for every tile, where the
 * packed engine widens each weight once per call, and the packed engine is ahead from ~48 rows
 * (one thread, K = 2048, bf16 as it was: 68 against 70-75 GFLOP/s at 48-64 rows, 82 against
 * 68 at 96). bf16 from 16 rows takes the broadcast tiles (a shift per weight for 16 rows):
 * 1.19x the packed engine at 64 rows, level at 96 (Zen 4, 2 threads, weights from DRAM). */
#define DOT_MAX_M_AVX2_WIDENED 40

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- kernel choice ---- */

/* The chosen instruction set's kernel for dt, else the nearest set below it that has one. */
const em_gemm_kernel *em_gemm_kernel_for(em_dtype dt) {
    const em_gemm_kernel *k = NULL;
    switch (em_cpu_isa_get()) {
#if defined(__x86_64__)
    case EM_ISA_AVX512:
        k = dt == EM_BF16 && em_cpu_amx() ? em_gemm_kernel_amx()
                                          : em_gemm_kernel_avx512(dt, em_cpu_bf16_dot());
        if (k) break;
        /* fall through */
    case EM_ISA_AVX2: k = em_gemm_kernel_avx2(dt); break;
#elif defined(__aarch64__)
    case EM_ISA_NEON: k = em_gemm_kernel_neon(dt); break;
#endif
    default: break;
    }
    return k ? k : em_gemm_kernel_generic(dt);
}

em_gemm_dot_fn em_gemm_dot_for(em_dtype dt) {
    em_gemm_dot_fn f = NULL;
    switch (em_cpu_isa_get()) {
#if defined(__x86_64__)
    case EM_ISA_AVX512:
        f = em_gemm_dot_avx512(dt, em_cpu_bf16_dot());
        if (f) break;
        /* fall through */
    case EM_ISA_AVX2: f = em_gemm_dot_avx2(dt); break;
#elif defined(__aarch64__)
    case EM_ISA_NEON: f = em_gemm_dot_neon(dt, em_cpu_bf16_dot()); break;
#endif
    default: break;
    }
    return f ? f : em_gemm_dot_generic(dt);
}

/* ---- the portable packer ---- */

static inline float load_f32(const void *p, em_dtype dt, int64_t i) {
    switch (dt) {
    case EM_F32: return ((const float *)p)[i];
    case EM_BF16: return em_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return em_f16_to_f32(((const uint16_t *)p)[i]);
    }
}

void em_gemm_pack_generic(void *dst, em_gemm_fmt fmt, int W, int width, int64_t kc,
                          const void *src, em_dtype dt, int64_t sw, int64_t sk) {
    if (fmt == EM_GEMM_FMT_F32) {
        float *d = dst;
        for (int64_t k = 0; k < kc; k++, d += W) {
            for (int w = 0; w < width; w++) d[w] = load_f32(src, dt, w * sw + k * sk);
            for (int w = width; w < W; w++) d[w] = 0.0f;
        }
        return;
    }
    uint16_t *d = dst;
    const uint16_t *s = src;
    int64_t ks = em_gemm_ksteps(fmt, kc);
    for (int64_t p = 0; p < ks; p++, d += 2 * W) {
        int64_t k0 = 2 * p;
        for (int w = 0; w < width; w++) {
            d[2 * w] = s[w * sw + k0 * sk];
            d[2 * w + 1] = k0 + 1 < kc ? s[w * sw + (k0 + 1) * sk] : 0;
        }
        for (int w = width; w < W; w++) d[2 * w] = d[2 * w + 1] = 0;
    }
}

/* ---- the serial block driver ---- */

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static bool needs_scratch(const em_gemm_kernel *kern, em_dtype dt, int64_t k) {
    return dt != EM_F32 && k > kern->kc;
}

/* Column block: the kernel's nc, narrowed when f32 partial sums of a bf16/f16 C must be kept
 * between k blocks (m x nc of them), so that scratch stays a few MB. */
#define SCRATCH_BYTES ((int64_t)4 << 20)
static int64_t col_block(const em_gemm_kernel *kern, em_dtype dt, int64_t m, int64_t k) {
    if (!needs_scratch(kern, dt, k)) return kern->nc;
    int64_t nc = SCRATCH_BYTES / (4 * (m > 0 ? m : 1)) / kern->nr * kern->nr;
    return nc < kern->nr ? kern->nr : nc > kern->nc ? kern->nc : nc;
}

size_t em_gemm_block_ws(const em_gemm_kernel *kern, em_dtype dt, int64_t m, int64_t n,
                        int64_t k) {
    /* Sized for any block of at most m x n: a shorter block may get a wider column block (see
     * col_block), so B is sized for the widest and scratch for the largest m' x nc(m'). */
    int64_t ks = em_gemm_ksteps(kern->fmt, min64(kern->kc, k));
    size_t a = align64((size_t)(round_up(min64(kern->mc, m), kern->mr) * ks * 4) + 64);
    size_t b = align64((size_t)(round_up(min64(kern->nc, n), kern->nr) * ks * 4) + 64);
    size_t s = 0;
    if (needs_scratch(kern, dt, k)) {
        int64_t most = SCRATCH_BYTES / 4 > m * kern->nr ? SCRATCH_BYTES / 4 : m * kern->nr;
        s = align64((size_t)min64(most, m * n) * 4);
    }
    return a + b + s;
}

/* C's dtype: A's and B's, or f32 (c_f32). */
static em_dtype c_dtype(const em_gemm_args *g) { return g->c_f32 ? EM_F32 : g->dtype; }

/* C = bias (or 0) where there is nothing to sum. */
static void fill_empty(const em_gemm_args *g, void *c, int64_t i0, int64_t i1, int64_t j0,
                       int64_t j1) {
    const em_dtype cdt = c_dtype(g);
    size_t es = em_esize(cdt);
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j1; j++)
            em_store_f64((char *)c + (size_t)(i * g->ldc) * es, cdt, j,
                         g->bias ? g->bias[j] : 0.0);
}

/*
 * Packs the kc x ncur block of B at (pc, col) into its nr-wide panels. When B's rows are
 * contiguous along j, a panel's rows lie a whole row of B apart (4 KB and more): packed panel by
 * panel, every k step of every panel touches a new page, which the hardware prefetchers do not
 * follow (B packing took 9 % of a one-thread 1024^3 f32 matmul). Packed PACK_B_ROWS rows at a
 * time across all panels instead, each row of B is read front to back.
 */
#define PACK_B_ROWS 16
static void pack_b_block(const em_gemm_args *g, const em_gemm_kernel *kern, char *bbuf,
                         size_t bpanel, const char *bb, int64_t pc, int64_t kcur, int64_t col,
                         int64_t ncur) {
    const size_t es = em_esize(g->dtype);
    const int nr = kern->nr;
    /* (a format padded per panel to whole tiles cannot be packed in pieces) */
    if (g->b_panel) {
        for (int64_t jr = 0; jr < ncur; jr += nr)
            g->b_panel(g->b_ctx, kern, bbuf + (size_t)(jr / nr) * bpanel, bb, pc, kcur, col + jr,
                       (int)min64(nr, ncur - jr));
        return;
    }
    const int64_t step = g->b_cs == 1 && g->b_rs != 1 && kern->fmt != EM_GEMM_FMT_BF16X2_T16
                             ? PACK_B_ROWS
                             : kcur;
    for (int64_t k0 = 0; k0 < kcur; k0 += step) {
        const int64_t kn = min64(step, kcur - k0);
        /* k0 is a multiple of PACK_B_ROWS (even): a BF16X2 panel's pairs do not straddle */
        const size_t off = (size_t)(em_gemm_ksteps(kern->fmt, k0) * nr * 4);
        for (int64_t jr = 0; jr < ncur; jr += nr)
            kern->pack(bbuf + (size_t)(jr / nr) * bpanel + off, nr, (int)min64(nr, ncur - jr), kn,
                       bb + (size_t)((pc + k0) * g->b_rs + (col + jr) * g->b_cs) * es, g->dtype,
                       g->b_cs, g->b_rs);
    }
}

void em_gemm_block(const em_gemm_args *g, const em_gemm_kernel *kern, const void *a,
                   const void *b, void *c, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                   void *ws) {
    const int64_t m = i1 - i0, n = j1 - j0, k = g->k;
    if (m <= 0 || n <= 0) return;
    if (k == 0) {
        fill_empty(g, c, i0, i1, j0, j1);
        return;
    }
    const em_dtype dt = g->dtype, cdt = c_dtype(g);
    const size_t es = em_esize(dt), ces = em_esize(cdt);
    const int mr = kern->mr, nr = kern->nr;
    int64_t nc = col_block(kern, cdt, m, k);
    if (g->nc_max > 0 && round_up(g->nc_max, kern->nr) < nc) nc = round_up(g->nc_max, kern->nr);
    const int64_t kc = kern->kc, mc = kern->mc;
    const int64_t ks_max = em_gemm_ksteps(kern->fmt, min64(kc, k));
    char *abuf = ws;
    char *bbuf = abuf + align64((size_t)(round_up(min64(mc, m), mr) * ks_max * 4) + 64);
    float *scratch = NULL;
    int64_t ld_scr = min64(nc, n);
    if (needs_scratch(kern, cdt, k))
        scratch = (float *)(bbuf +
                            align64((size_t)(round_up(min64(kern->nc, n), nr) * ks_max * 4) + 64));
    const char *ab = a, *bb = b;
    if (kern->begin) kern->begin();

    for (int64_t jc = 0; jc < n; jc += nc) {
        const int64_t ncur = min64(nc, n - jc);
        for (int64_t pc = 0; pc < k; pc += kc) {
            const int64_t kcur = min64(kc, k - pc);
            const int64_t ks = em_gemm_ksteps(kern->fmt, kcur);
            const size_t bpanel = (size_t)(ks * nr * 4), apanel = (size_t)(ks * mr * 4);
            pack_b_block(g, kern, bbuf, bpanel, bb, pc, kcur, j0 + jc, ncur);
            em_gemm_tile t;
            t.load_acc = pc > 0;
            t.final = pc + kcur >= k;
            t.out_dt = cdt;
            t.ld_out = g->ldc;
            t.ld_acc = scratch ? ld_scr : g->ldc;
            for (int64_t ic = 0; ic < m; ic += mc) {
                const int64_t mcur = min64(mc, m - ic);
                for (int64_t ir = 0; ir < mcur; ir += mr)
                    kern->pack(abuf + (size_t)(ir / mr) * apanel, mr, (int)min64(mr, mcur - ir),
                               kcur, ab + (size_t)((i0 + ic + ir) * g->a_rs + pc * g->a_cs) * es,
                               dt, g->a_rs, g->a_cs);
                for (int64_t jr = 0; jr < ncur; jr += nr) {
                    const int64_t col = j0 + jc + jr;
                    t.bias = g->bias ? g->bias + col : NULL;
                    for (int64_t ir = 0; ir < mcur; ir += mr) {
                        const int64_t row = i0 + ic + ir;
                        t.out = (char *)c + (size_t)(row * g->ldc + col) * ces;
                        t.acc = scratch ? scratch + (ic + ir) * ld_scr + jr
                                        : (cdt == EM_F32 ? (float *)t.out : NULL);
                        kern->ukr(ks, abuf + (size_t)(ir / mr) * apanel,
                                  bbuf + (size_t)(jr / nr) * bpanel, (int)min64(mr, mcur - ir),
                                  (int)min64(nr, ncur - jr), &t);
                    }
                }
            }
        }
    }
}

/* ---- the parallel schedule ---- */

/* Offsets (elements) of batch entry idx in A, B and C. */
static void batch_offsets(const em_gemm_args *g, int64_t idx, int64_t *oa, int64_t *ob,
                          int64_t *oc) {
    *oa = *ob = *oc = 0;
    for (int d = g->batch_ndim - 1; d >= 0; d--) {
        int64_t s = g->batch_shape[d], i = idx % s;
        idx /= s;
        *oa += i * g->a_bs[d];
        *ob += i * g->b_bs[d];
        *oc += i * g->c_bs[d];
    }
}

typedef struct packed_job {
    const em_gemm_args *g;
    const em_gemm_kernel *kern;
    int64_t tm, tn, mt, nt; /* tiles per batch entry and their size */
    char *ws; /* one workspace per pool thread, by thread index */
    size_t ws_per_thread;
    int nws;
    atomic_bool oom;
} packed_job;

static void packed_body(void *user, int64_t begin, int64_t end, int tid) {
    packed_job *j = user;
    const em_gemm_args *g = j->g;
    size_t es = em_esize(g->dtype), ces = em_esize(c_dtype(g));
    void *own = NULL, *ws = j->ws + (size_t)tid * j->ws_per_thread;
    if (tid >= j->nws) { /* the pool grew since the job was sized (em_set_num_threads) */
        ws = own = aligned_alloc(64, j->ws_per_thread);
        if (!own) {
            atomic_store(&j->oom, true);
            return;
        }
    }
    for (int64_t t = begin; t < end; t++) {
        int64_t per = j->tm * j->tn, e = t / per, r = t % per;
        int64_t ti = r / j->tn, tj = r % j->tn;
        int64_t oa, ob, oc;
        batch_offsets(g, e, &oa, &ob, &oc);
        int64_t i0 = ti * j->mt, j0 = tj * j->nt;
        em_gemm_block(g, j->kern, (const char *)g->a + (size_t)oa * es,
                      (const char *)g->b + (size_t)ob * es, (char *)g->c + (size_t)oc * ces, i0,
                      min64(i0 + j->mt, g->m), j0, min64(j0 + j->nt, g->n), ws);
    }
    free(own);
}

/* Splits one batch entry's C into tm x tn tiles: at least `want` tiles (when the tile grid
 * allows), choosing the grid that packs the least (A is packed once per column tile, B once per
 * row tile). */
static void choose_grid(const em_gemm_args *g, const em_gemm_kernel *kern, int64_t want,
                        int64_t *tm, int64_t *tn) {
    int64_t max_m = ceil_div(g->m, kern->mr), max_n = ceil_div(g->n, kern->nr);
    if (want > max_m * max_n) want = max_m * max_n;
    int64_t best_m = 1, best_n = 1;
    double best = -1;
    for (int64_t a = 1; a <= max_m && a <= want; a++) {
        int64_t b = ceil_div(want, a);
        if (b > max_n) continue;
        double cost = (double)a * (double)g->n + (double)b * (double)g->m;
        if (best < 0 || cost < best) {
            best = cost;
            best_m = a;
            best_n = b;
        }
    }
    *tm = best_m;
    *tn = best_n;
}

static em_status run_packed(const em_gemm_args *g, int64_t nbatch) {
    const em_gemm_kernel *kern = em_gemm_kernel_for(g->dtype);
    int nthr = em_num_threads();
    double flops = 2.0 * (double)g->m * (double)g->n * (double)g->k * (double)nbatch;
    /* One tile per thread: bigger tiles pack less (more tiles per thread balanced no better in
     * lab_gemm); a small product runs on one thread (a job costs microseconds). */
    int64_t want = flops < 1e6 ? 1 : nthr;
    int64_t tm = 1, tn = 1;
    if (want > nbatch) choose_grid(g, kern, ceil_div(want, nbatch), &tm, &tn);
    int64_t mt = round_up(ceil_div(g->m, tm), kern->mr);
    int64_t nt = round_up(ceil_div(g->n, tn), kern->nr);
    if (mt > g->m) mt = g->m;
    if (nt > g->n) nt = g->n;
    tm = ceil_div(g->m, mt);
    tn = ceil_div(g->n, nt);
    int64_t ntasks = nbatch * tm * tn;
    /* Any pool thread may take a task, so every one has a workspace. It comes from the CPU
     * device's caching allocator: a loop of same-sized products reuses one block (no page faults
     * for megabytes of panels on every call; huge pages when large). */
    packed_job j = {g, kern, tm, tn, mt, nt, NULL, em_gemm_block_ws(kern, c_dtype(g), mt, nt, g->k),
                    ntasks == 1 ? 1 : nthr, false};
    em_device *dev = em_device_cpu();
    size_t got = 0;
    j.ws = em_allocator_alloc(dev, j.ws_per_thread * (size_t)j.nws, &got);
    if (!j.ws) return EM_ERR_OOM;
    if (ntasks == 1)
        packed_body(&j, 0, 1, 0);
    else
        em_parallel_for(ntasks, 1, packed_body, &j);
    em_allocator_free(dev, j.ws, got);
    return atomic_load(&j.oom) ? EM_ERR_OOM : EM_OK;
}

typedef struct dot_job {
    const em_gemm_args *g;
    em_gemm_dot_fn fn;
} dot_job;

/* Tasks are (batch entry, row of B^T) pairs; a chunk may span batch entries. */
static void dot_body(void *user, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const dot_job *j = user;
    const em_gemm_args *g = j->g;
    size_t es = em_esize(g->dtype);
    while (begin < end) {
        int64_t e = begin / g->n, r0 = begin % g->n;
        int64_t r1 = min64(g->n, r0 + (end - begin));
        int64_t oa, ob, oc;
        batch_offsets(g, e, &oa, &ob, &oc);
        j->fn(g->m, r1 - r0, g->k, (const char *)g->a + (size_t)oa * es, g->a_rs,
              (const char *)g->b + (size_t)(ob + r0 * g->b_cs) * es, g->b_cs,
              (char *)g->c + (size_t)(oc + r0) * es, g->ldc, g->dtype,
              g->bias ? g->bias + r0 : NULL);
        begin += r1 - r0;
    }
}

/* Whether the dot engine takes a product of m rows of x (k values each, dtype dt). */
static bool dot_small(int64_t m, int64_t k, em_dtype dt) {
    double xbytes = (double)m * (double)k * (double)em_esize(dt);
    int64_t max_m = dt == EM_F16 && em_cpu_isa_get() == EM_ISA_AVX2 ? DOT_MAX_M_AVX2_WIDENED
                                                                    : DOT_MAX_M;
    /* AMX tiles: the packed engine from 17 rows (K = 2048, N = 768, weights from DRAM: 290-310
     * against 320-340 us at 16 rows, 340-400 against 470-900 at 24, 330 against 2190 at 64) */
    if (dt == EM_BF16 && em_cpu_amx()) max_m = DOT_ALWAYS_M;
    return m <= DOT_ALWAYS_M || (m <= max_m && xbytes <= DOT_MAX_X_BYTES);
}

/* Rows of A and columns of B contiguous along k (they may overlap: they are only read). */
static bool dot_fits(const em_gemm_args *g) {
    if (g->b_panel || g->c_f32) return false;
    return (g->a_cs == 1 && g->b_rs == 1) || g->k == 1;
}

em_status em_gemm(const em_gemm_args *g) {
    int64_t nbatch = 1;
    for (int d = 0; d < g->batch_ndim; d++) nbatch *= g->batch_shape[d];
    if (g->m <= 0 || g->n <= 0 || nbatch <= 0) return EM_OK;
    if (g->k == 0) {
        for (int64_t e = 0; e < nbatch; e++) {
            int64_t oa, ob, oc;
            batch_offsets(g, e, &oa, &ob, &oc);
            fill_empty(g, (char *)g->c + (size_t)oc * em_esize(c_dtype(g)), 0, g->m, 0, g->n);
        }
        return EM_OK;
    }
    bool small = dot_small(g->m, g->k, g->dtype);
    bool dot = g->force_engine == 2 || (g->force_engine == 0 && small);
    if (dot && dot_fits(g)) {
        dot_job j = {g, em_gemm_dot_for(g->dtype)};
        double bytes = (double)g->n * (double)g->k * (double)em_esize(g->dtype) * (double)nbatch;
        /* ~64 KB of weights per task at least; the pool makes ~4 chunks per thread */
        int64_t grain = 1 + (int64_t)(65536.0 / ((double)g->k * (double)em_esize(g->dtype)));
        if (bytes < 65536.0)
            dot_body(&j, 0, g->n * nbatch, 0);
        else
            em_parallel_for(g->n * nbatch, grain, dot_body, &j);
        return EM_OK;
    }
    return run_packed(g, nbatch);
}

/* ---- several products in one parallel pass (compile mode: linears that share their input) ---- */

typedef struct dot_group {
    const em_gemm_args *const *g;
    int n;
    int64_t start[EM_GEMM_GROUP_MAX + 1]; /* first task of product i */
    em_gemm_dot_fn fn;
} dot_group;

static void group_body(void *user, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const dot_group *j = user;
    int i = 0;
    while (begin < end) {
        while (j->start[i + 1] <= begin) i++;
        const em_gemm_args *g = j->g[i];
        int64_t r0 = begin - j->start[i], r1 = min64(g->n, r0 + (end - begin));
        size_t es = em_esize(g->dtype);
        j->fn(g->m, r1 - r0, g->k, g->a, g->a_rs, (const char *)g->b + (size_t)(r0 * g->b_cs) * es,
              g->b_cs, (char *)g->c + (size_t)r0 * es, g->ldc, g->dtype,
              g->bias ? g->bias + r0 : NULL);
        begin += r1 - r0;
    }
}

bool em_gemm_group_fits(const em_gemm_args *g) {
    bool small = dot_small(g->m, g->k, g->dtype);
    return g->batch_ndim == 0 && g->m > 0 && g->n > 0 && g->k > 0 && g->force_engine == 0 &&
           small && dot_fits(g);
}

void em_gemm_dot_group(const em_gemm_args *const *g, int n) {
    dot_group j;
    j.g = g;
    j.n = n;
    j.fn = em_gemm_dot_for(g[0]->dtype);
    j.start[0] = 0;
    int64_t kmin = g[0]->k;
    for (int i = 0; i < n; i++) {
        j.start[i + 1] = j.start[i] + g[i]->n;
        if (g[i]->k < kmin) kmin = g[i]->k;
    }
    int64_t grain = 1 + (int64_t)(65536.0 / ((double)kmin * (double)em_esize(g[0]->dtype)));
    em_parallel_for(j.start[n], grain, group_body, &j);
}

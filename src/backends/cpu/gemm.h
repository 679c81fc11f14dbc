/*
 * Matrix-multiply primitives of the CPU backend: C = A @ B (+ bias) over strided operands in
 * f32, bf16 or f16, accumulating in f32 and rounding once to C's dtype.
 *
 * Two engines, chosen per call by em_gemm():
 *  - packed (BLIS-style): panels of A (mr x kc) and B (kc x nr) are copied from any strides into
 *    the microkernel's format, the microkernel computes an mr x nr tile in registers. Formats:
 *    F32 (one float per k step) and BF16X2 (a pair of bf16 for k and k+1 in each 32-bit word, the
 *    operand layout of vdpbf16ps). f16 and bf16-without-hardware-support are widened to f32
 *    while packing.
 *  - dot: small M (up to 16 rows, or 96 while x fits in L2) with rows of A and columns of B
 *    contiguous along k (x @ w^T for a weight w [N, K], the decode step of a linear layer). Every
 *    weight row is streamed once (prefetched a block ahead) and dotted with all rows of x;
 *    threads split N. Nothing is packed. bf16 with vdpbf16ps and at most four rows of x (decode)
 *    reads each weight row front to back, one sequential stream per thread, with its own
 *    summation order (four accumulators along k); more rows use 4 x 4 tiles.
 *
 * Both run on the thread pool; each output element is summed in one order whatever the thread
 * count. The pieces (kernels, packers, the serial block driver) are exposed so that grouped
 * GEMMs (MoE ragged_dot) can schedule their own tiles. Kernel levels: AVX-512 (+BF16) in
 * gemm_avx512.c, AVX2 + FMA in gemm_avx2.c (bf16 and f16 widened to f32), NEON (+BF16) in
 * gemm_neon.c and gemm_neon_bf16.c, the portable twins of gemm_kern.inc for the baseline.
 *
 * Units: all strides and offsets are in elements of the operand's dtype.
 */
#ifndef EMBER_GEMM_H
#define EMBER_GEMM_H

#include "backends/cpu/cpu.h"

#define EM_GEMM_MAX_BATCH_DIMS 4

typedef enum em_gemm_fmt {
    EM_GEMM_FMT_F32 = 0,   /* one f32 per k step */
    EM_GEMM_FMT_BF16X2 = 1, /* bf16 (k, k+1) pairs: one 32-bit word per two k steps */
    EM_GEMM_FMT_BF16X2_T16 = 2 /* BF16X2 in whole AMX tiles: steps rounded up to 16, zeros */
} em_gemm_fmt;

/* Number of 32-bit k steps a packed panel of depth kc holds in a format. */
static inline int64_t em_gemm_ksteps(em_gemm_fmt f, int64_t kc) {
    if (f == EM_GEMM_FMT_BF16X2_T16) return ((kc + 1) / 2 + 15) / 16 * 16;
    return f == EM_GEMM_FMT_BF16X2 ? (kc + 1) / 2 : kc;
}

/* Where a microkernel puts its mr x nr tile. */
typedef struct em_gemm_tile {
    float *acc;        /* f32 partial sums, row stride ld_acc: read when load_acc, written when
                          !final. For an f32 C it is C itself. */
    int64_t ld_acc;
    void *out;         /* final destination (dtype out_dt, row stride ld_out, unit column stride) */
    int64_t ld_out;
    em_dtype out_dt;
    const float *bias; /* [nr] added before the final rounding, or NULL */
    bool load_acc;     /* add acc to the product (k blocks after the first) */
    bool final;        /* last k block: round and store to out; otherwise store f32 to acc */
} em_gemm_tile;

/*
 * Packs a panel: `width` (<= W) lines of depth kc, line w's element k at src + w*sw + k*sk, into
 * dst as ksteps(kc) groups of W 32-bit words (lines width..W-1 and an odd k tail are zeros).
 * F32 accepts f32, bf16 and f16 sources; BF16X2 accepts bf16 only. dst is 64-byte aligned and
 * may be overwritten up to 64 bytes past the panel.
 */
typedef void (*em_gemm_pack_fn)(void *dst, int W, int width, int64_t kc, const void *src,
                                em_dtype dt, int64_t sw, int64_t sk);
/* The microkernel: A panel (ksteps x mr_max words), B panel (ksteps x nr_max words); computes the
 * tile's top-left mr x nr block into t. */
typedef void (*em_gemm_ukr_fn)(int64_t ksteps, const void *pa, const void *pb, int mr, int nr,
                               const em_gemm_tile *t);

typedef struct em_gemm_kernel {
    const char *name;
    em_gemm_fmt fmt;
    int mr, nr;         /* register tile */
    int64_t kc, mc, nc; /* cache blocks: k depth (even), rows of A, columns of B */
    em_gemm_pack_fn pack;
    em_gemm_ukr_fn ukr;
    void (*begin)(void); /* or NULL: prepares the calling thread before a block's ukr calls
                            (AMX: loads the tile configuration once, not per tile) */
    /* or NULL (a portable loop then): BF16X2 words of two bf16 lines, dst[e] = a[e] | b[e] << 16
     * for e < n (b NULL: high halves zero). Implicit GEMMs that write panels directly (conv2d's
     * ig_lines). */
    void (*pair)(uint32_t *dst, const uint16_t *a, const uint16_t *b, int n);
} em_gemm_kernel;

/*
 * Dot engine: c[i, j] = sum_k x[i, k] * w[j, k] (+ bias[j]) for i < m, j < n, with x and w rows
 * contiguous (row strides ldx, ldw), c of dtype dt (row stride ldc). x and w have dtype dt.
 * Serial; callers split n.
 */
typedef void (*em_gemm_dot_fn)(int64_t m, int64_t n, int64_t k, const void *x, int64_t ldx,
                               const void *w, int64_t ldw, void *c, int64_t ldc, em_dtype dt,
                               const float *bias);

/* The best kernels for operands of dtype dt on this CPU (honours EMBER_CPU_LEVEL). */
const em_gemm_kernel *em_gemm_kernel_for(em_dtype dt);
em_gemm_dot_fn em_gemm_dot_for(em_dtype dt);

/* Per-ISA tables (gemm_avx512.c, gemm_avx2.c; gemm_kern.inc compiled as gemm_generic.c).
 * NULL: not available for that dtype. */
const em_gemm_kernel *em_gemm_kernel_avx512(em_dtype dt, bool bf16_hw);
em_gemm_dot_fn em_gemm_dot_avx512(em_dtype dt, bool bf16_hw);
const em_gemm_kernel *em_gemm_kernel_avx2(em_dtype dt);
/* bf16 on AMX tiles (gemm_amx.c; call only where em_cpu_amx()). */
const em_gemm_kernel *em_gemm_kernel_amx(void);
em_gemm_dot_fn em_gemm_dot_avx2(em_dtype dt);
/* The AVX2 dot engine with f32 results (ragged_dot's partial sums), for dt bf16 or f32: c[i, j]
 * at c + i*ldc + j. false (nothing written) when its x buffer cannot be allocated. */
bool em_gemm_dot_f32out_avx2(em_dtype dt, int64_t m, int64_t n, int64_t k, const void *x,
                             int64_t ldx, const void *w, int64_t ldw, float *c, int64_t ldc);
const em_gemm_kernel *em_gemm_kernel_generic(em_dtype dt);
em_gemm_dot_fn em_gemm_dot_generic(em_dtype dt);
/* aarch64 (gemm_neon.c): the f32 microkernel (bf16/f16 widened while packing) and the dot
 * engine; bf16_hw picks the BFDOT engine of gemm_neon_bf16.c (call only where em_cpu_bf16_dot). */
const em_gemm_kernel *em_gemm_kernel_neon(em_dtype dt);
em_gemm_dot_fn em_gemm_dot_neon(em_dtype dt, bool bf16_hw);
em_gemm_dot_fn em_gemm_dot_neon_bf16(void);
/* The portable packer: any strides, any supported dtype/format pair. */
void em_gemm_pack_generic(void *dst, em_gemm_fmt fmt, int W, int width, int64_t kc,
                          const void *src, em_dtype dt, int64_t sw, int64_t sk);

/* ---- the driver ---- */

/*
 * Fills one B panel of the packed engine in place of kern->pack (implicit GEMMs: conv2d packs
 * its im2col panels straight from the image, never materialising B). Writes B[k0 + k, j0 + w]
 * for k < kc, w < width (<= kern->nr) to dst in kern's format with W = kern->nr, lines
 * width..nr-1 and padding zeros, exactly as kern->pack would from a materialised B. b is the
 * batch entry's B (g->b advanced by its batch offset), ctx the caller's.
 */
typedef void (*em_gemm_b_panel_fn)(const void *ctx, const em_gemm_kernel *kern, void *dst,
                                   const void *b, int64_t k0, int64_t kc, int64_t j0, int width);

/* One (batched) product. C is written, never read. */
typedef struct em_gemm_args {
    int64_t m, n, k;
    em_dtype dtype;                     /* of A, B and C */
    const void *a;                      /* A[i, k] at a + i*a_rs + k*a_cs */
    int64_t a_rs, a_cs;
    const void *b;                      /* B[k, j] at b + k*b_rs + j*b_cs */
    int64_t b_rs, b_cs;
    void *c;                            /* C[i, j] at c + i*ldc + j */
    int64_t ldc;
    const float *bias;                  /* [n] f32, or NULL */
    int batch_ndim;                     /* 0..EM_GEMM_MAX_BATCH_DIMS */
    int64_t batch_shape[EM_GEMM_MAX_BATCH_DIMS];
    int64_t a_bs[EM_GEMM_MAX_BATCH_DIMS]; /* batch strides (0: broadcast) */
    int64_t b_bs[EM_GEMM_MAX_BATCH_DIMS];
    int64_t c_bs[EM_GEMM_MAX_BATCH_DIMS];
    int force_engine;                   /* 0 auto, 1 packed, 2 dot (lab benchmarks; 2 falls back
                                           to packed where the operands do not fit it) */
    em_gemm_b_panel_fn b_panel;         /* or NULL: B's panels come from this function (b_rs and
                                           b_cs unused; the packed engine always) */
    const void *b_ctx;                  /* b_panel's context */
    int64_t nc_max;                     /* 0, or at most this many columns (rounded up to nr)
                                           in a column block: B blocks that stay in L2 */
    bool c_f32;                         /* C is f32 whatever dtype (the f32 sums, not rounded:
                                           callers that add a per-row bias before rounding
                                           themselves, conv2d); the packed engine always */
} em_gemm_args;

/* Runs the product on the thread pool. EM_ERR_OOM if the packing buffers cannot be had. */
em_status em_gemm(const em_gemm_args *g);

/* Grouped products: several dot-engine products (no batch dims, same dtype) computed by one
 * parallel pass over all their output columns, so the threads meet once instead of once per
 * product. em_gemm_group_fits says whether a product qualifies. */
#define EM_GEMM_GROUP_MAX 8
bool em_gemm_group_fits(const em_gemm_args *g);
void em_gemm_dot_group(const em_gemm_args *const *g, int n);

/* Bytes of workspace em_gemm_block needs for a block of at most m x n with this kernel. */
size_t em_gemm_block_ws(const em_gemm_kernel *kern, em_dtype dt, int64_t m, int64_t n,
                        int64_t k);
/*
 * Serial: computes C[i0:i1, j0:j1] of the batch entry whose operands start at a, b, c (the
 * strides of g; g's batch fields are ignored) with kernel kern. ws: em_gemm_block_ws bytes,
 * 64-byte aligned.
 */
void em_gemm_block(const em_gemm_args *g, const em_gemm_kernel *kern, const void *a,
                   const void *b, void *c, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                   void *ws);

#endif

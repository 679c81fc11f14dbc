/*
 * Gathers and scatters on the CPU: index_select, gather, take_along_dim, scatter, scatter_add,
 * index_add, index_copy (in place) and one_hot.
 *
 * gather, take_along_dim, scatter and scatter_add share one plan (gs_plan): a walk over the
 * positions of the index, split into tasks of (outer position, block of the innermost dim). A
 * scatter task visits the indexed dim in order inside itself, so no two tasks ever write the same
 * output element and duplicate indices accumulate in index order, as torch's CPU kernels do.
 * index_select and repeat_interleave are gathers whose index is broadcast over the other dims: a
 * run then has one index value and is copied with memcpy (embedding-like row gathers). index_add
 * groups the index by destination slice first and adds whole slices.
 *
 * Index values are checked where they are read; a task that meets a bad one flags it, and the
 * first bad value in the index's own order is reported once the loop is over.
 */
#include <assert.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "backends/cpu/index.h"
#include "core/bf16_inline.h"

#define RUN_BLOCK 4096   /* innermost elements per task */
#define TASK_ELEMS 16384 /* elements a pool task handles at least */

static int norm_dim(int64_t dim, int ndim) {
    int n = ndim ? ndim : 1;
    return (int)(dim < 0 ? dim + n : dim);
}

/* ---- bf16 / f16 helpers ---- */

static inline float ld16(em_dtype t, const uint16_t *p, int64_t i) {
    return t == EM_BF16 ? em_bf16_to_f32_inline(p[i]) : em_f16_to_f32(p[i]);
}

static inline uint16_t st16(em_dtype t, float v) {
    return t == EM_BF16 ? em_bf16_from_f32_inline(v) : em_f32_to_f16(v);
}

/* n contiguous bf16/f16 values to f32 and back (inline: em_convert's calls cost more than the
 * adds they surround) */
static void half_to_f32(float *dst, const uint16_t *src, em_dtype t, int64_t n) {
    if (t == EM_BF16)
        for (int64_t i = 0; i < n; i++) dst[i] = em_bf16_to_f32_inline(src[i]);
    else
        for (int64_t i = 0; i < n; i++) dst[i] = em_f16_to_f32(src[i]);
}

static void f32_to_half(uint16_t *dst, const float *src, em_dtype t, int64_t n) {
    if (t == EM_BF16)
        for (int64_t i = 0; i < n; i++) dst[i] = em_bf16_from_f32_inline(src[i]);
    else
        for (int64_t i = 0; i < n; i++) dst[i] = em_f32_to_f16(src[i]);
}

/* ---- the gather/scatter walk ---- */

typedef enum gs_mode { GS_GATHER, GS_SCATTER, GS_ADD } gs_mode;

typedef struct gs_plan {
    gs_mode mode;
    em_dtype dt; /* data dtype */
    size_t es;   /* its size */
    em_dtype it; /* index dtype (i64 or i32) */
    bool wrap;   /* negative index values count from the end (take_along_dim) */
    int nd, d;   /* iteration dims, the indexed one */
    int64_t shape[EM_MAX_DIMS];
    /* strides over the iteration space: 0 the index, 1 the dense operand (gather: out, scatter:
     * src), 2 the indexed operand (gather: x, scatter: out), 0 along d */
    int64_t st[3][EM_MAX_DIMS];
    int64_t base[3];
    const char *pi;
    char *pd, *px;
    float *acc;              /* scatter_add of bf16/f16: f32 sums laid out like out */
    int64_t xstride, xsize;  /* the indexed operand along d */
    int nu;                  /* task units: iteration dims but the innermost (and d, scatters) */
    int64_t ushape[EM_MAX_DIMS];
    int64_t ust[3][EM_MAX_DIMS];
    int64_t n_blk, blk;      /* blocks of the innermost dim per unit, elements per block */
    atomic_bool bad;
} gs_plan;

static void gs_init(gs_plan *p, gs_mode mode, em_dtype dt, const em_tensor *index, int nd) {
    memset(p, 0, sizeof *p);
    p->mode = mode;
    p->dt = dt;
    p->es = em_esize(dt);
    p->it = index ? index->dtype : EM_I64;
    p->nd = nd ? nd : 1; /* a 0-d iteration is one position */
    for (int i = 0; i < p->nd; i++) p->shape[i] = 1;
    atomic_init(&p->bad, false);
}

/* torch's accumulation for scatter_add: reduced floats add into f32 sums, rounded once. */
static inline void add1(const gs_plan *p, int64_t xo, int64_t so) {
    switch (p->dt) {
    case EM_F32: ((float *)p->px)[xo] += ((const float *)p->pd)[so]; break;
    case EM_F64: ((double *)p->px)[xo] += ((const double *)p->pd)[so]; break;
    case EM_BF16: p->acc[xo] += em_bf16_to_f32_inline(((const uint16_t *)p->pd)[so]); break;
    case EM_F16: p->acc[xo] += em_f16_to_f32(((const uint16_t *)p->pd)[so]); break;
    case EM_I64: ((uint64_t *)p->px)[xo] += ((const uint64_t *)p->pd)[so]; break;
    case EM_I32: ((uint32_t *)p->px)[xo] += ((const uint32_t *)p->pd)[so]; break;
    case EM_I16: {
        uint16_t *o = (uint16_t *)p->px;
        o[xo] = (uint16_t)(o[xo] + ((const uint16_t *)p->pd)[so]);
        break;
    }
    case EM_I8:
    case EM_U8: {
        uint8_t *o = (uint8_t *)p->px;
        o[xo] = (uint8_t)(o[xo] + ((const uint8_t *)p->pd)[so]);
        break;
    }
    case EM_BOOL: {
        uint8_t *o = (uint8_t *)p->px;
        o[xo] = (uint8_t)(o[xo] || ((const uint8_t *)p->pd)[so]);
        break;
    }
    default: break;
    }
}

/* One run of n positions: index at element offset oi (stride sti), dense operand at od (sd),
 * indexed operand at ox (sx, plus value * xstride). */
static void gs_run(gs_plan *p, int64_t oi, int64_t sti, int64_t od, int64_t sd, int64_t ox,
                   int64_t sx, int64_t n) {
    const char *pi = p->pi;
    char *pd = p->pd, *px = p->px;
    em_dtype it = p->it;
    int64_t size = p->xsize, xs = p->xstride, es = (int64_t)p->es;
    bool wrap = p->wrap, bad = false;
    if (sti == 0) { /* one index value for the whole run: index_select's rows */
        int64_t v = ix_load_index(pi, it, oi);
        if (v < 0 && wrap) v += size;
        if (v < 0 || v >= size) {
            atomic_store_explicit(&p->bad, true, memory_order_relaxed);
            return;
        }
        ox += v * xs;
        if (p->mode == GS_GATHER) {
            ix_copy_run(pd + od * es, sd, px + ox * es, sx, n, p->es);
        } else if (p->mode == GS_SCATTER) {
            ix_copy_run(px + ox * es, sx, pd + od * es, sd, n, p->es);
        } else {
            for (int64_t k = 0; k < n; k++) add1(p, ox + k * sx, od + k * sd);
        }
        return;
    }
#define GS_LOOP(STMT)                                                                              \
    for (int64_t k = 0; k < n; k++) {                                                              \
        int64_t v = ix_load_index(pi, it, oi + k * sti);                                           \
        if (v < 0 && wrap) v += size;                                                              \
        if (v < 0 || v >= size) {                                                                  \
            bad = true;                                                                            \
            continue;                                                                              \
        }                                                                                          \
        int64_t xo = ox + k * sx + v * xs, dof = od + k * sd;                                      \
        STMT;                                                                                      \
    }
    switch (p->mode) {
    case GS_GATHER:
        switch (es) {
        case 1: GS_LOOP(pd[dof] = px[xo]); break;
        case 2: GS_LOOP(memcpy(pd + dof * 2, px + xo * 2, 2)); break;
        case 4: GS_LOOP(memcpy(pd + dof * 4, px + xo * 4, 4)); break;
        default: GS_LOOP(memcpy(pd + dof * 8, px + xo * 8, 8)); break;
        }
        break;
    case GS_SCATTER:
        switch (es) {
        case 1: GS_LOOP(px[xo] = pd[dof]); break;
        case 2: GS_LOOP(memcpy(px + xo * 2, pd + dof * 2, 2)); break;
        case 4: GS_LOOP(memcpy(px + xo * 4, pd + dof * 4, 4)); break;
        default: GS_LOOP(memcpy(px + xo * 8, pd + dof * 8, 8)); break;
        }
        break;
    case GS_ADD: GS_LOOP(add1(p, xo, dof)); break;
    }
#undef GS_LOOP
    if (bad) atomic_store_explicit(&p->bad, true, memory_order_relaxed);
}

static void gs_tasks(void *user, int64_t begin, int64_t end, int tid) {
    (void)tid;
    gs_plan *p = user;
    int last = p->nd - 1, d = p->d;
    bool jloop = p->mode != GS_GATHER && d != last;
    int64_t J = jloop ? p->shape[d] : 1, K = p->shape[last];
    int64_t sti = p->st[0][last], sd = p->st[1][last], sx = p->st[2][last];
    const int64_t *ust[3] = {p->ust[0], p->ust[1], p->ust[2]};
    ix_walk w;
    ix_walk_init(&w, p->nu, p->ushape, 3, ust, p->base);
    int64_t unit = begin / p->n_blk;
    ix_walk_seek(&w, unit);
    for (int64_t t = begin; t < end; t++) {
        if (t / p->n_blk != unit) {
            ix_walk_next(&w);
            unit++;
        }
        int64_t k0 = (t % p->n_blk) * p->blk, n = K - k0 < p->blk ? K - k0 : p->blk;
        for (int64_t j = 0; j < J; j++) {
            int64_t oi = w.off[0] + k0 * sti, od = w.off[1] + k0 * sd, ox = w.off[2] + k0 * sx;
            if (jloop) {
                oi += j * p->st[0][d];
                od += j * p->st[1][d];
            }
            gs_run(p, oi, sti, od, sd, ox, sx, n);
        }
    }
}

/* Collapses the iteration space, splits it into tasks and runs them. Returns false when an index
 * value was out of range. */
static bool gs_exec(gs_plan *p) {
    p->nd = ix_collapse(p->nd, p->shape, 3, p->st, &p->d);
    int last = p->nd - 1, d = p->d;
    bool jloop = p->mode != GS_GATHER && d != last;
    p->nu = 0;
    for (int i = 0; i < last; i++) {
        if (jloop && i == d) continue;
        p->ushape[p->nu] = p->shape[i];
        for (int t = 0; t < 3; t++) p->ust[t][p->nu] = p->st[t][i];
        p->nu++;
    }
    int64_t units = 1;
    for (int i = 0; i < p->nu; i++) units *= p->ushape[i];
    int64_t K = p->shape[last];
    /* a scatter along the innermost dim keeps each row in one task: its writes may collide */
    if ((p->mode != GS_GATHER && d == last) || K <= RUN_BLOCK) {
        p->n_blk = 1;
        p->blk = K;
    } else {
        p->blk = RUN_BLOCK;
        p->n_blk = (K + RUN_BLOCK - 1) / RUN_BLOCK;
    }
    int64_t work = (jloop ? p->shape[d] : 1) * p->blk;
    int64_t grain = TASK_ELEMS / (work ? work : 1);
    em_parallel_for(units * p->n_blk, grain < 1 ? 1 : grain, gs_tasks, p);
    return !atomic_load(&p->bad);
}

/* ---- gather, take_along_dim ---- */

static em_status gather_kernel(const em_kernel_args *a) {
    const em_tensor *x = a->in[0], *idx = a->in[1];
    em_tensor *out = a->out[0];
    if (out->numel == 0) return EM_OK;
    bool along = a->op->id == EM_OP_TAKE_ALONG_DIM;
    int d = norm_dim(a->attrs[0].i, x->ndim);
    gs_plan p;
    gs_init(&p, GS_GATHER, x->dtype, idx, out->ndim);
    p.wrap = along;
    p.d = d;
    int64_t ost[EM_MAX_DIMS];
    ix_contiguous_strides(out->shape, out->ndim, ost);
    for (int i = 0; i < out->ndim; i++) {
        p.shape[i] = out->shape[i];
        /* take_along_dim broadcasts x and index outside d (size-1 dims get stride 0) */
        p.st[0][i] = idx->shape[i] == 1 ? 0 : idx->strides[i];
        p.st[1][i] = ost[i];
        p.st[2][i] = i == d || x->shape[i] == 1 ? 0 : x->strides[i];
    }
    p.xsize = x->ndim ? x->shape[d] : 1;
    p.xstride = x->ndim ? x->strides[d] : 0;
    p.base[0] = idx->offset;
    p.base[2] = x->offset;
    p.pi = (const char *)idx->storage->data;
    p.pd = em_tensor_ptr(out);
    p.px = (char *)x->storage->data;
    if (gs_exec(&p)) return EM_OK;
    if (ix_check_index(a->ctx, idx, p.xsize, along, d)) return EM_ERR_INDEX;
    return em_op_fail(a->ctx, EM_ERR_INTERNAL, "an index was out of range but none was found");
}

/* ---- scatter, scatter_add ---- */

static em_status scatter_kernel(const em_kernel_args *a) {
    const em_tensor *x = a->in[0], *idx = a->in[1], *src = a->in[2];
    em_tensor *out = a->out[0];
    if (out->numel == 0) return EM_OK;
    char *po = em_tensor_ptr(out);
    ix_copy_to_contiguous(po, x);
    if (idx->numel == 0) return EM_OK;
    bool add = a->op->id == EM_OP_SCATTER_ADD;
    int d = norm_dim(a->attrs[0].i, x->ndim);
    gs_plan p;
    gs_init(&p, add ? GS_ADD : GS_SCATTER, x->dtype, idx, idx->ndim);
    p.d = d;
    int64_t ost[EM_MAX_DIMS];
    ix_contiguous_strides(out->shape, out->ndim, ost);
    for (int i = 0; i < idx->ndim; i++) {
        p.shape[i] = idx->shape[i];
        p.st[0][i] = idx->strides[i];
        p.st[1][i] = src->strides[i];
        p.st[2][i] = i == d ? 0 : ost[i];
    }
    p.xsize = out->ndim ? out->shape[d] : 1;
    p.xstride = out->ndim ? ost[d] : 0;
    p.base[0] = idx->offset;
    p.base[1] = src->offset;
    p.pi = (const char *)idx->storage->data;
    p.pd = (char *)src->storage->data;
    p.px = po;
    if (add && (x->dtype == EM_BF16 || x->dtype == EM_F16)) {
        p.acc = malloc((size_t)out->numel * sizeof(float));
        if (!p.acc)
            return em_op_fail(a->ctx, EM_ERR_OOM, "cannot allocate %lld f32 sums",
                              (long long)out->numel);
        half_to_f32(p.acc, (const uint16_t *)po, x->dtype, out->numel);
    }
    bool ok = gs_exec(&p);
    if (p.acc) {
        if (ok) f32_to_half((uint16_t *)po, p.acc, x->dtype, out->numel);
        free(p.acc);
    }
    if (ok) return EM_OK;
    if (ix_check_index(a->ctx, idx, p.xsize, false, d)) return EM_ERR_INDEX;
    return em_op_fail(a->ctx, EM_ERR_INTERNAL, "an index was out of range but none was found");
}

/* ---- index_select (and repeat_interleave) ---- */

void ix_select_slices(em_tensor *out, const em_tensor *x, int d, const int64_t *idx, int64_t n) {
    if (out->numel == 0) return;
    gs_plan p;
    gs_init(&p, GS_GATHER, x->dtype, NULL, out->ndim);
    p.d = d;
    int64_t ost[EM_MAX_DIMS];
    ix_contiguous_strides(out->shape, out->ndim, ost);
    for (int i = 0; i < out->ndim; i++) {
        p.shape[i] = out->shape[i];
        p.st[0][i] = i == d ? 1 : 0; /* the index, broadcast over every other dim */
        p.st[1][i] = ost[i];
        p.st[2][i] = i == d ? 0 : x->strides[i];
    }
    if (out->ndim == 0) p.shape[0] = n; /* a 0-d x takes one value */
    p.xsize = x->ndim ? x->shape[d] : 1;
    p.xstride = x->ndim ? x->strides[d] : 0;
    p.base[2] = x->offset;
    p.pi = (const char *)idx;
    p.pd = em_tensor_ptr(out);
    p.px = (char *)x->storage->data;
    bool ok = gs_exec(&p);
    (void)ok;
    assert(ok); /* callers check the values first */
}

/* The index values as i64, in order (NULL on OOM). */
static int64_t *load_indices(const em_tensor *idx) {
    int64_t n = idx->numel;
    int64_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) return NULL;
    for (int64_t i = 0; i < n; i++) v[i] = em_cpu_get_i64(idx, i);
    return v;
}

static em_status index_select_kernel(const em_kernel_args *a) {
    const em_tensor *x = a->in[0], *idx = a->in[1];
    int d = norm_dim(a->attrs[0].i, x->ndim);
    int64_t size = x->ndim ? x->shape[d] : 1;
    if (ix_check_index(a->ctx, idx, size, false, d)) return EM_ERR_INDEX;
    if (a->out[0]->numel == 0) return EM_OK;
    int64_t *v = load_indices(idx);
    if (!v) return em_op_fail(a->ctx, EM_ERR_OOM, "cannot copy %lld indices", (long long)idx->numel);
    ix_select_slices(a->out[0], x, d, v, idx->numel);
    free(v);
    return EM_OK;
}

/* ---- index_add ---- */

/*
 * How torch 2.x's CPU index_add rounds bf16/f16 (it has three paths):
 *   ACC16    ndim > 1, dim first or last, alpha 1, i64 index: it runs scatter_add, which sums in
 *            f32 and rounds once;
 *   STEP16   other ndim > 1 calls: one add kernel per index, rounding every time. Its alpha is
 *            rounded to the dtype; the vectorised body computes round(x + src * alpha) and the
 *            scalar tail (slice elements past a multiple of the SIMD width) rounds the product
 *            too. We do the former: with alpha != 1 results may differ from torch's by an ulp.
 *   SCALAR16 ndim <= 1: x += src * alpha in the dtype's own arithmetic (alpha and the product
 *            rounded too).
 * f32 and f64 add in their own precision in index order; integers wrap.
 */
typedef enum ia_mode { IA_PLAIN, IA_ACC16, IA_STEP16, IA_SCALAR16 } ia_mode;

typedef struct ia_plan {
    em_dtype dt;
    size_t es;
    ia_mode mode;
    double alpha;
    char *out;
    const char *src;
    int64_t D, I, U;      /* out as [O, D, I]; U destinations that receive something */
    const int64_t *head;  /* [D + 1]: contributions to destination v are order[head[v]..) */
    const int64_t *order; /* positions along src's dim, grouped by destination, in order */
    const int64_t *uniq;  /* [U] the destinations that receive something */
    int no;               /* src's outer dims (before d) */
    int64_t oshape[EM_MAX_DIMS], ost[EM_MAX_DIMS];
    int ni;               /* the slice's dims after collapsing: 0 out (dense), 1 src */
    int64_t ishape[EM_MAX_DIMS], ist[2][EM_MAX_DIMS];
    int64_t src_base, src_dstride;
    atomic_bool oom;
} ia_plan;

static inline float round_to(em_dtype t, float v) { return ld16(t, &(uint16_t){st16(t, v)}, 0); }

/* The reduced-float modes for one dtype (T: EM_BF16 or EM_F16, a constant per expansion). */
#define IA_HALF(T)                                                                                 \
    do {                                                                                           \
        if (mode == IA_ACC16)                                                                      \
            for (int64_t k = 0; k < n; k++) tmp[k] += ld16(T, s, k * ss);                          \
        else if (mode == IA_STEP16)                                                                \
            for (int64_t k = 0; k < n; k++) o[k] = st16(T, ld16(T, o, k) + ra * ld16(T, s, k * ss)); \
        else                                                                                       \
            for (int64_t k = 0; k < n; k++)                                                        \
                o[k] = st16(T, ld16(T, o, k) + round_to(T, ld16(T, s, k * ss) * ra));             \
    } while (0)

/* dst[0..n) (dense, the slice's elements e0..) += alpha * src run. */
static void ia_run(const ia_plan *p, ia_mode mode, char *dst, float *tmp, const char *src,
                   int64_t ss, int64_t n) {
    double al = p->alpha;
    switch (p->dt) {
    case EM_F32: {
        float *o = (float *)dst, fa = (float)al;
        const float *s = (const float *)src;
        if (al == 1.0)
            for (int64_t k = 0; k < n; k++) o[k] += s[k * ss];
        else
            for (int64_t k = 0; k < n; k++) o[k] += fa * s[k * ss];
        break;
    }
    case EM_F64: {
        double *o = (double *)dst;
        const double *s = (const double *)src;
        for (int64_t k = 0; k < n; k++) o[k] += al * s[k * ss];
        break;
    }
    case EM_BF16:
    case EM_F16: {
        uint16_t *o = (uint16_t *)dst;
        const uint16_t *s = (const uint16_t *)src;
        float ra = round_to(p->dt, (float)al);
        if (p->dt == EM_BF16) IA_HALF(EM_BF16);
        else IA_HALF(EM_F16);
        break;
    }
    case EM_BOOL: {
        uint8_t *o = (uint8_t *)dst;
        const uint8_t *s = (const uint8_t *)src;
        if (al != 0)
            for (int64_t k = 0; k < n; k++) o[k] = (uint8_t)(o[k] || s[k * ss]);
        break;
    }
    default: { /* integers wrap; alpha is truncated to an integer as torch does */
        uint64_t ia = (uint64_t)(int64_t)al;
#define IA_INT(U, S)                                                                               \
    for (int64_t k = 0; k < n; k++)                                                                \
        ((U *)dst)[k] = (U)(((U *)dst)[k] + (U)((uint64_t)(int64_t)((const S *)src)[k * ss] * ia));
        switch (p->dt) {
        case EM_I64: IA_INT(uint64_t, int64_t); break;
        case EM_I32: IA_INT(uint32_t, int32_t); break;
        case EM_I16: IA_INT(uint16_t, int16_t); break;
        case EM_I8: IA_INT(uint8_t, int8_t); break;
        default: IA_INT(uint8_t, uint8_t); break;
        }
#undef IA_INT
        break;
    }
    }
}

/* Adds the src slice at element offset soff into the dense slice dst. */
static void ia_slice(const ia_plan *p, ia_mode mode, char *dst, float *tmp, int64_t soff) {
    int64_t es = (int64_t)p->es;
    if (p->ni == 0) {
        ia_run(p, mode, dst, tmp, p->src + soff * es, 0, 1);
        return;
    }
    int last = p->ni - 1;
    const int64_t *st[2] = {p->ist[0], p->ist[1]};
    int64_t base[2] = {0, soff};
    ix_walk w;
    ix_walk_init(&w, last, p->ishape, 2, st, base);
    int64_t rows = p->I / p->ishape[last], n = p->ishape[last], ss = p->ist[1][last];
    for (int64_t r = 0; r < rows; r++) {
        ia_run(p, mode, dst + w.off[0] * es, tmp ? tmp + w.off[0] : NULL, p->src + w.off[1] * es,
               ss, n);
        ix_walk_next(&w);
    }
}

static void ia_tasks(void *user, int64_t begin, int64_t end, int tid) {
    (void)tid;
    ia_plan *p = user;
    float *tmp = NULL;
    if (p->mode == IA_ACC16) {
        tmp = malloc((size_t)p->I * sizeof *tmp);
        if (!tmp) {
            atomic_store(&p->oom, true);
            return;
        }
    }
    const int64_t *ost[1] = {p->ost};
    ix_walk w;
    ix_walk_init(&w, p->no, p->oshape, 1, ost, &p->src_base);
    for (int64_t t = begin; t < end; t++) {
        int64_t o = t / p->U, v = p->uniq[t % p->U];
        ix_walk_seek(&w, o);
        char *dst = p->out + (o * p->D + v) * p->I * (int64_t)p->es;
        int64_t c0 = p->head[v], c1 = p->head[v + 1];
        if (tmp && c1 - c0 == 1) { /* one f32 addition rounded once: a direct add is the same */
            ia_slice(p, IA_STEP16, dst, NULL, w.off[0] + p->order[c0] * p->src_dstride);
            continue;
        }
        if (tmp) half_to_f32(tmp, (const uint16_t *)dst, p->dt, p->I);
        for (int64_t c = c0; c < c1; c++)
            ia_slice(p, p->mode, dst, tmp, w.off[0] + p->order[c] * p->src_dstride);
        if (tmp) f32_to_half((uint16_t *)dst, tmp, p->dt, p->I);
    }
    free(tmp);
}

static em_status index_add_kernel(const em_kernel_args *a) {
    const em_tensor *x = a->in[0], *idx = a->in[1], *src = a->in[2];
    em_tensor *out = a->out[0];
    int nd = x->ndim, d = norm_dim(a->attrs[0].i, nd);
    int64_t D = nd ? x->shape[d] : 1, N = idx->numel;
    if (ix_check_index(a->ctx, idx, D, false, d)) return EM_ERR_INDEX;
    if (out->numel == 0) return EM_OK;
    char *po = em_tensor_ptr(out);
    ix_copy_to_contiguous(po, x);
    if (N == 0) return EM_OK;

    ia_plan p;
    memset(&p, 0, sizeof p);
    p.dt = x->dtype;
    p.es = em_esize(x->dtype);
    p.alpha = a->attrs[1].f;
    p.out = po;
    p.src = (const char *)src->storage->data;
    p.D = D;
    p.I = 1;
    for (int i = d + 1; i < nd; i++) p.I *= x->shape[i];
    int64_t O = nd ? out->numel / (D * p.I) : 1;
    bool half = p.dt == EM_BF16 || p.dt == EM_F16;
    if (!half) p.mode = IA_PLAIN;
    else if (nd <= 1) p.mode = IA_SCALAR16;
    else if ((d == 0 || d == nd - 1) && p.alpha == 1.0 && idx->dtype == EM_I64) p.mode = IA_ACC16;
    else p.mode = IA_STEP16;
    /* src geometry: outer dims, the indexed dim, the slice (collapsed against out's dense one) */
    p.src_base = src->offset;
    p.src_dstride = src->ndim ? src->strides[d] : 0;
    p.no = nd ? d : 0;
    for (int i = 0; i < p.no; i++) {
        p.oshape[i] = src->shape[i];
        p.ost[i] = src->strides[i];
    }
    p.ni = 0;
    for (int i = d + 1; i < nd; i++, p.ni++) {
        p.ishape[p.ni] = src->shape[i];
        p.ist[1][p.ni] = src->strides[i];
    }
    ix_contiguous_strides(p.ishape, p.ni, p.ist[0]);
    p.ni = ix_collapse(p.ni, p.ishape, 2, p.ist, NULL);

    /* group the index by destination, keeping index order within a destination */
    int64_t *vals = load_indices(idx);
    int64_t *head = calloc((size_t)D + 1, sizeof *head);
    int64_t *order = malloc((size_t)N * sizeof *order);
    int64_t *uniq = malloc((size_t)(N < D ? N : D) * sizeof *uniq);
    em_status s = EM_OK;
    if (!vals || !head || !order || !uniq) {
        s = em_op_fail(a->ctx, EM_ERR_OOM, "cannot group %lld indices", (long long)N);
        goto done;
    }
    for (int64_t j = 0; j < N; j++) head[vals[j] + 1]++;
    for (int64_t v = 0; v < D; v++) {
        if (head[v + 1]) uniq[p.U++] = v;
        head[v + 1] += head[v];
    }
    {
        int64_t *fill = malloc((size_t)D * sizeof *fill);
        if (!fill) {
            s = em_op_fail(a->ctx, EM_ERR_OOM, "cannot group %lld indices", (long long)N);
            goto done;
        }
        memcpy(fill, head, (size_t)D * sizeof *fill);
        for (int64_t j = 0; j < N; j++) order[fill[vals[j]]++] = j;
        free(fill);
    }
    p.head = head;
    p.order = order;
    p.uniq = uniq;
    atomic_init(&p.oom, false);
    int64_t per = (head[D] / p.U) * p.I; /* elements added per task, roughly */
    int64_t grain = TASK_ELEMS / (per ? per : 1);
    em_parallel_for(O * p.U, grain < 1 ? 1 : grain, ia_tasks, &p);
    if (atomic_load(&p.oom))
        s = em_op_fail(a->ctx, EM_ERR_OOM, "cannot allocate %lld f32 sums", (long long)p.I);
done:
    free(vals);
    free(head);
    free(order);
    free(uniq);
    return s;
}

/* ---- index_copy (in place) ---- */

/*
 * dst[.., index[i], ..] = src[.., i, ..] along dim, into dst's own (possibly strided) memory.
 * Every index value is checked before anything is written. The index is walked in order and cut
 * into runs of consecutive destinations (v, v+1, ...); each run is one strided block copy
 * (ix_copy_nd merges dims, so a run into a contiguous KV cache [B,H,L,D] at dim 2 is B*H memcpys
 * of run*D elements, and on the thread pool when large). Runs are copied one after another, so
 * with duplicate indices the last write wins.
 */
static em_status index_copy_kernel(const em_kernel_args *a) {
    em_tensor *dst = a->in[0];
    const em_tensor *idx = a->in[1], *src = a->in[2];
    int nd = dst->ndim, d = norm_dim(a->attrs[0].i, nd);
    int64_t D = nd ? dst->shape[d] : 1, N = idx->numel;
    if (ix_check_index(a->ctx, idx, D, false, d)) return EM_ERR_INDEX;
    if (N == 0 || dst->numel == 0) return EM_OK;
    size_t es = em_esize(dst->dtype);
    if (nd == 0) { /* one value, index 0 */
        ix_copy1(ix_at(dst, dst->offset), ix_at(src, src->offset), es);
    } else {
        int64_t shape[EM_MAX_DIMS], dst_st[EM_MAX_DIMS], src_st[EM_MAX_DIMS];
        for (int i = 0; i < nd; i++) {
            shape[i] = dst->shape[i];
            dst_st[i] = dst->strides[i];
            src_st[i] = src->strides[i];
        }
        int64_t dsd = dst->strides[d], ssd = src->strides[d];
        for (int64_t i = 0; i < N;) {
            int64_t v = em_cpu_get_i64(idx, i), run = 1;
            while (i + run < N && em_cpu_get_i64(idx, i + run) == v + run) run++;
            shape[d] = run;
            ix_copy_nd(ix_at(dst, dst->offset + v * dsd), dst_st,
                       ix_at(src, src->offset + i * ssd), src_st, shape, nd, es);
            i += run;
        }
    }
    atomic_fetch_add_explicit(&dst->storage->version, 1, memory_order_relaxed);
    return EM_OK;
}

/* ---- one_hot ---- */

static em_status one_hot_kernel(const em_kernel_args *a) {
    const em_tensor *idx = a->in[0];
    em_tensor *out = a->out[0];
    int64_t C = a->attrs[0].i, v;
    int64_t pos = ix_find_bad(idx, C, false, &v);
    if (pos >= 0) {
        char where[128];
        ix_pos_str(idx, pos, where, sizeof where);
        return em_op_fail(a->ctx, EM_ERR_INDEX,
                          "class %lld at position %s is out of range for num_classes %lld", (long long)v,
                          where, (long long)C);
    }
    int64_t *o = em_tensor_ptr(out);
    memset(o, 0, (size_t)out->numel * sizeof *o);
    for (int64_t i = 0; i < idx->numel; i++) o[i * C + em_cpu_get_i64(idx, i)] = 1;
    return EM_OK;
}

void em_cpu_register_index(em_kernel_fn *k) {
    k[EM_OP_INDEX_SELECT] = index_select_kernel;
    k[EM_OP_GATHER] = gather_kernel;
    k[EM_OP_TAKE_ALONG_DIM] = gather_kernel;
    k[EM_OP_SCATTER] = scatter_kernel;
    k[EM_OP_SCATTER_ADD] = scatter_kernel;
    k[EM_OP_INDEX_ADD] = index_add_kernel;
    k[EM_OP_INDEX_COPY] = index_copy_kernel;
    k[EM_OP_ONE_HOT] = one_hot_kernel;
    em_cpu_register_index_sort(k);
    em_cpu_register_index_concat(k);
}

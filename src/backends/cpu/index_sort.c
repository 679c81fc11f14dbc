/*
 * topk, sort and argsort on the CPU.
 *
 * Each element becomes a 64-bit key whose unsigned order is torch's order for its dtype: NaN
 * above +inf (all NaNs equal), -0.0 equal to 0.0, integers by value. Descending orders (and
 * topk's largest) invert the keys, so one ascending algorithm serves both. Values are copied from
 * the input by the chosen index, bit for bit.
 *
 * sort and argsort are stable (torch.sort(stable=True)): equal keys keep their input order in
 * both directions. Rows are sorted with an LSD radix sort over only the key bytes that vary
 * along the row (sorting a few thousand MoE expert ids is one pass), short rows by insertion.
 *
 * topk reproduces torch's CPU algorithm, ties included. torch picks the k best with libstdc++'s
 * std::partial_sort (a heap of k) when k * 64 <= n, otherwise with std::nth_element followed by
 * std::sort of the first k - 1. Neither is stable, so equal values come out in whatever order
 * those algorithms leave them; the functions below are step-by-step ports of libstdc++'s
 * (bits/stl_heap.h, bits/stl_algo.h) making the same comparisons in the same order. The heap
 * path reads the row once and holds only k candidates (sampling from a 150k vocabulary row).
 * sorted=false returns the sorted order as well (torch's unsorted order is an artefact of
 * nth_element).
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "backends/cpu/index.h"

#define ROW_ELEMS 32768 /* elements a pool task handles at least */
#define KEY_CHUNK 256   /* keys converted at a time on topk's heap path */

typedef struct kv {
    uint64_t k; /* ordering key */
    int64_t i;  /* position along the row */
} kv;

#define LESS(a, b) ((a).k < (b).k)

/* ---- keys ---- */

#define SIGN64 0x8000000000000000ull

static inline uint64_t key_f32(uint32_t u) {
    uint32_t m = u & 0x7fffffffu;
    if (m > 0x7f800000u) return UINT64_MAX;
    if (!m) return 0x80000000u;
    return (u & 0x80000000u) ? (uint32_t)~u : (u | 0x80000000u);
}

static inline uint64_t key_f64(uint64_t u) {
    uint64_t m = u & ~SIGN64;
    if (m > 0x7ff0000000000000ull) return UINT64_MAX;
    if (!m) return SIGN64;
    return (u & SIGN64) ? ~u : (u | SIGN64);
}

/* bf16 and f16 are both sign-magnitude; they differ only in where NaN starts */
static inline uint64_t key_half(uint16_t h, uint16_t inf) {
    uint16_t m = h & 0x7fffu;
    if (m > inf) return UINT64_MAX;
    if (!m) return 0x8000u;
    return (h & 0x8000u) ? (uint16_t)~h : (uint16_t)(h | 0x8000u);
}

/* dst[k] = {key of x[off + k*st] ^ flip, i0 + k} for k < n */
static void load_keys(kv *dst, const char *base, em_dtype t, int64_t off, int64_t st, int64_t n,
                      int64_t i0, uint64_t flip) {
#define KEYS(T, EXPR)                                                                              \
    do {                                                                                           \
        const T *s = (const T *)base + off;                                                        \
        for (int64_t k = 0; k < n; k++) {                                                          \
            T v = s[k * st];                                                                       \
            dst[k].k = (EXPR) ^ flip;                                                              \
            dst[k].i = i0 + k;                                                                     \
        }                                                                                          \
    } while (0)
    switch (t) {
    case EM_F32: KEYS(uint32_t, key_f32(v)); break;
    case EM_F64: KEYS(uint64_t, key_f64(v)); break;
    case EM_BF16: KEYS(uint16_t, key_half(v, 0x7f80u)); break;
    case EM_F16: KEYS(uint16_t, key_half(v, 0x7c00u)); break;
    case EM_I64: KEYS(int64_t, (uint64_t)v ^ SIGN64); break;
    case EM_I32: KEYS(int32_t, (uint64_t)(int64_t)v ^ SIGN64); break;
    case EM_I16: KEYS(int16_t, (uint64_t)(int64_t)v ^ SIGN64); break;
    case EM_I8: KEYS(int8_t, (uint64_t)(int64_t)v ^ SIGN64); break;
    default: KEYS(uint8_t, (uint64_t)v); break; /* u8, bool */
    }
#undef KEYS
}

/* ---- libstdc++'s heap, introsort and introselect (same comparisons, same moves) ---- */

static void push_heap(kv *f, int64_t hole, int64_t top, kv v) {
    int64_t parent = (hole - 1) / 2;
    while (hole > top && LESS(f[parent], v)) {
        f[hole] = f[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    f[hole] = v;
}

static void adjust_heap(kv *f, int64_t hole, int64_t len, kv v) {
    const int64_t top = hole;
    int64_t child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (LESS(f[child], f[child - 1])) child--;
        f[hole] = f[child];
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        f[hole] = f[child - 1];
        hole = child - 1;
    }
    push_heap(f, hole, top, v);
}

static void make_heap(kv *f, int64_t len) {
    if (len < 2) return;
    for (int64_t parent = (len - 2) / 2;; parent--) {
        adjust_heap(f, parent, len, f[parent]);
        if (parent == 0) return;
    }
}

/* __pop_heap(first, first + len, result) */
static void pop_heap(kv *f, int64_t len, kv *result) {
    kv v = *result;
    *result = f[0];
    adjust_heap(f, 0, len, v);
}

static void sort_heap(kv *f, int64_t len) {
    while (len > 1) {
        len--;
        pop_heap(f, len, &f[len]);
    }
}

static void heap_select(kv *first, kv *middle, kv *last) {
    make_heap(first, middle - first);
    for (kv *i = middle; i < last; i++)
        if (LESS(*i, *first)) pop_heap(first, middle - first, i);
}

static inline void swap_kv(kv *a, kv *b) {
    kv t = *a;
    *a = *b;
    *b = t;
}

static void move_median_to_first(kv *result, kv *a, kv *b, kv *c) {
    if (LESS(*a, *b)) {
        if (LESS(*b, *c)) swap_kv(result, b);
        else if (LESS(*a, *c)) swap_kv(result, c);
        else swap_kv(result, a);
    } else if (LESS(*a, *c)) {
        swap_kv(result, a);
    } else if (LESS(*b, *c)) {
        swap_kv(result, c);
    } else {
        swap_kv(result, b);
    }
}

static kv *unguarded_partition(kv *first, kv *last, const kv *pivot) {
    for (;;) {
        while (LESS(*first, *pivot)) first++;
        last--;
        while (LESS(*pivot, *last)) last--;
        if (!(first < last)) return first;
        swap_kv(first, last);
        first++;
    }
}

static kv *unguarded_partition_pivot(kv *first, kv *last) {
    kv *mid = first + (last - first) / 2;
    move_median_to_first(first, first + 1, mid, last - 1);
    return unguarded_partition(first + 1, last, first);
}

static void unguarded_linear_insert(kv *last) {
    kv v = *last;
    kv *next = last - 1;
    while (LESS(v, *next)) {
        *last = *next;
        last = next;
        next--;
    }
    *last = v;
}

static void insertion_sort(kv *first, kv *last) {
    if (first == last) return;
    for (kv *i = first + 1; i != last; i++) {
        if (LESS(*i, *first)) {
            kv v = *i;
            memmove(first + 1, first, (size_t)(i - first) * sizeof *first);
            *first = v;
        } else {
            unguarded_linear_insert(i);
        }
    }
}

static int lg(int64_t n) { return 63 - __builtin_clzll((unsigned long long)n); }

#define S_THRESHOLD 16

static void introsort_loop(kv *first, kv *last, int64_t depth) {
    while (last - first > S_THRESHOLD) {
        if (depth == 0) { /* __partial_sort(first, last, last) */
            heap_select(first, last, last);
            sort_heap(first, last - first);
            return;
        }
        depth--;
        kv *cut = unguarded_partition_pivot(first, last);
        introsort_loop(cut, last, depth);
        last = cut;
    }
}

/* std::sort */
static void std_sort(kv *first, kv *last) {
    if (first == last) return;
    introsort_loop(first, last, (int64_t)lg(last - first) * 2);
    if (last - first > S_THRESHOLD) {
        insertion_sort(first, first + S_THRESHOLD);
        for (kv *i = first + S_THRESHOLD; i != last; i++) unguarded_linear_insert(i);
    } else {
        insertion_sort(first, last);
    }
}

/* std::nth_element */
static void nth_element(kv *first, kv *nth, kv *last) {
    if (first == last || nth == last) return;
    int64_t depth = (int64_t)lg(last - first) * 2;
    while (last - first > 3) {
        if (depth == 0) {
            heap_select(first, nth + 1, last);
            swap_kv(first, nth); /* the nth element into its final place */
            return;
        }
        depth--;
        kv *cut = unguarded_partition_pivot(first, last);
        if (cut <= nth) first = cut;
        else last = cut;
    }
    insertion_sort(first, last);
}

/* ---- stable sort ---- */

/* Sorts a[0..n) by key, stably, using b[0..n) as room; returns the array holding the result. */
static kv *stable_sort(kv *a, kv *b, int64_t n) {
    if (n <= 64) {
        for (int64_t i = 1; i < n; i++) {
            kv v = a[i];
            int64_t j = i;
            for (; j > 0 && LESS(v, a[j - 1]); j--) a[j] = a[j - 1];
            a[j] = v;
        }
        return a;
    }
    uint64_t diff = 0;
    for (int64_t i = 1; i < n; i++) diff |= a[i].k ^ a[0].k;
    int bytes[8], nb = 0;
    for (int s = 0; s < 8; s++)
        if ((diff >> (8 * s)) & 0xffu) bytes[nb++] = s;
    int64_t cnt[8][256];
    memset(cnt, 0, (size_t)nb * sizeof cnt[0]);
    for (int64_t i = 0; i < n; i++)
        for (int t = 0; t < nb; t++) cnt[t][(a[i].k >> (8 * bytes[t])) & 0xffu]++;
    for (int t = 0; t < nb; t++) {
        int64_t sum = 0;
        for (int v = 0; v < 256; v++) {
            int64_t c = cnt[t][v];
            cnt[t][v] = sum;
            sum += c;
        }
        int sh = 8 * bytes[t];
        for (int64_t i = 0; i < n; i++) b[cnt[t][(a[i].k >> sh) & 0xffu]++] = a[i];
        kv *tmp = a;
        a = b;
        b = tmp;
    }
    return a;
}

/* ---- kernels ---- */

typedef struct sort_plan {
    bool topk, with_values;
    const em_tensor *x;
    em_dtype dt;
    size_t es;
    int64_t n, k;  /* row length; topk's kept count */
    uint64_t flip; /* key inversion for descending / largest */
    int nr;        /* row dims (x's dims but d) */
    int64_t rshape[EM_MAX_DIMS], rst[2][EM_MAX_DIMS]; /* 0: x, 1: outputs */
    int64_t xbase, xs, os; /* x's start; strides along d of x and of the outputs */
    char *vals;            /* NULL for argsort */
    int64_t *idx;
    atomic_bool oom;
} sort_plan;

static void write_row(const sort_plan *p, const kv *r, int64_t m, int64_t xo, int64_t oo) {
    const char *xb = (const char *)p->x->storage->data;
    int64_t es = (int64_t)p->es;
    for (int64_t j = 0; j < m; j++) p->idx[oo + j * p->os] = r[j].i;
    if (p->vals)
        for (int64_t j = 0; j < m; j++)
            ix_copy1(p->vals + (oo + j * p->os) * es, xb + (xo + r[j].i * p->xs) * es, p->es);
}

static void topk_row(const sort_plan *p, kv *buf, int64_t xo, int64_t oo) {
    const char *xb = (const char *)p->x->storage->data;
    int64_t n = p->n, k = p->k;
    if (k * 64 <= n) { /* std::partial_sort, streaming the tail through the heap */
        kv *heap = buf, *chunk = buf + k;
        load_keys(heap, xb, p->dt, xo, p->xs, k, 0, p->flip);
        make_heap(heap, k);
        for (int64_t c = k; c < n; c += KEY_CHUNK) {
            int64_t m = n - c < KEY_CHUNK ? n - c : KEY_CHUNK;
            load_keys(chunk, xb, p->dt, xo + c * p->xs, p->xs, m, c, p->flip);
            for (int64_t j = 0; j < m; j++)
                if (LESS(chunk[j], heap[0])) adjust_heap(heap, 0, k, chunk[j]);
        }
        sort_heap(heap, k);
    } else {
        load_keys(buf, xb, p->dt, xo, p->xs, n, 0, p->flip);
        nth_element(buf, buf + k - 1, buf + n);
        std_sort(buf, buf + k - 1);
    }
    write_row(p, buf, k, xo, oo);
}

static void sort_rows(void *user, int64_t begin, int64_t end, int tid) {
    (void)tid;
    sort_plan *p = user;
    int64_t room = !p->topk ? 2 * p->n : p->k * 64 <= p->n ? p->k + KEY_CHUNK : p->n;
    kv *buf = malloc((size_t)room * sizeof *buf);
    if (!buf) {
        atomic_store(&p->oom, true);
        return;
    }
    const int64_t *st[2] = {p->rst[0], p->rst[1]};
    int64_t base[2] = {p->xbase, 0};
    ix_walk w;
    ix_walk_init(&w, p->nr, p->rshape, 2, st, base);
    ix_walk_seek(&w, begin);
    for (int64_t r = begin; r < end; r++) {
        if (p->topk) {
            topk_row(p, buf, w.off[0], w.off[1]);
        } else {
            load_keys(buf, (const char *)p->x->storage->data, p->dt, w.off[0], p->xs, p->n, 0,
                      p->flip);
            const kv *s = stable_sort(buf, buf + p->n, p->n);
            write_row(p, s, p->n, w.off[0], w.off[1]);
        }
        ix_walk_next(&w);
    }
    free(buf);
}

static em_status sort_kernel(const em_kernel_args *a) {
    const em_tensor *x = a->in[0];
    em_op_id op = a->op->id;
    bool topk = op == EM_OP_TOPK;
    int64_t dim = topk ? a->attrs[1].i : a->attrs[0].i;
    bool invert = topk ? a->attrs[2].i != 0 : a->attrs[1].i != 0;
    em_tensor *vals = op == EM_OP_ARGSORT ? NULL : a->out[0];
    em_tensor *idx = op == EM_OP_ARGSORT ? a->out[0] : a->out[1];
    if (x->ndim == 0) { /* one element; torch returns it even for k = 0 */
        *(int64_t *)em_tensor_ptr(idx) = 0;
        if (vals) ix_copy1(em_tensor_ptr(vals), ix_at(x, x->offset), em_esize(x->dtype));
        return EM_OK;
    }
    if (idx->numel == 0) return EM_OK;
    int d = (int)(dim < 0 ? dim + x->ndim : dim);
    sort_plan p;
    memset(&p, 0, sizeof p);
    p.topk = topk;
    p.x = x;
    p.dt = x->dtype;
    p.es = em_esize(x->dtype);
    p.n = x->shape[d];
    p.k = topk ? a->attrs[0].i : p.n;
    p.flip = invert ? UINT64_MAX : 0;
    p.xbase = x->offset;
    p.xs = x->strides[d];
    p.vals = vals ? em_tensor_ptr(vals) : NULL;
    p.idx = em_tensor_ptr(idx);
    int64_t ost[EM_MAX_DIMS];
    ix_contiguous_strides(idx->shape, idx->ndim, ost);
    p.os = ost[d];
    for (int i = 0; i < x->ndim; i++) {
        if (i == d) continue;
        p.rshape[p.nr] = x->shape[i];
        p.rst[0][p.nr] = x->strides[i];
        p.rst[1][p.nr] = ost[i];
        p.nr++;
    }
    atomic_init(&p.oom, false);
    int64_t rows = x->numel / p.n, grain = ROW_ELEMS / p.n;
    em_parallel_for(rows, grain < 1 ? 1 : grain, sort_rows, &p);
    if (atomic_load(&p.oom))
        return em_op_fail(a->ctx, EM_ERR_OOM, "cannot allocate room to sort rows of %lld",
                          (long long)p.n);
    return EM_OK;
}

void em_cpu_register_index_sort(em_kernel_fn *k) {
    k[EM_OP_TOPK] = sort_kernel;
    k[EM_OP_SORT] = sort_kernel;
    k[EM_OP_ARGSORT] = sort_kernel;
}

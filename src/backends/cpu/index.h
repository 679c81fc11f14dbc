/*
 * Private helpers of the CPU indexing kernels (index_gather.c, index_sort.c, index_concat.c):
 * element copies by size, a walk over the rows of strided operands, dimension collapsing, strided
 * block copies, and the scan that finds (and reports) an out-of-range index value.
 *
 * These ops move data: they copy elements as bytes of their size and never convert them, so one
 * code path serves every dtype and keeps NaN payloads and -0.0 as they are.
 */
#ifndef EMBER_CPU_INDEX_H
#define EMBER_CPU_INDEX_H

#include <string.h>

#include "backends/cpu/cpu.h"

/* Sub-family registration (em_cpu_register_index, in index_gather.c, calls both). */
void em_cpu_register_index_sort(em_kernel_fn *k);
void em_cpu_register_index_concat(em_kernel_fn *k);

/* Byte address of element `off` (elements from the storage's start). */
static inline char *ix_at(const em_tensor *t, int64_t off) {
    return (char *)t->storage->data + off * (int64_t)em_esize(t->dtype);
}

/* Index value at element offset `off` of an i64 or i32 array. */
static inline int64_t ix_load_index(const char *base, em_dtype t, int64_t off) {
    if (t == EM_I64) return ((const int64_t *)base)[off];
    return ((const int32_t *)base)[off];
}

/* One element of `es` bytes (1, 2, 4 or 8). Fixed-size memcpy compiles to a single move. */
static inline void ix_copy1(char *dst, const char *src, size_t es) {
    switch (es) {
    case 1: *dst = *src; break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    default: memcpy(dst, src, 8); break;
    }
}

/*
 * memcpy for the row-sized blocks these kernels move. glibc's memmove copies backwards when
 * destination and source are congruent modulo 4 KiB (to dodge 4K aliasing), which is exactly
 * the case of rows of big page-aligned tensors (cat along the last dim ran 3x slower); a plain
 * forward loop of 64-byte blocks keeps the hardware prefetchers streaming.
 */
static inline void ix_copy_bytes(char *dst, const char *src, size_t n) {
    if (n < 256 || n > (1u << 20)) {
        memcpy(dst, src, n);
        return;
    }
    size_t i = 0;
    for (; i + 64 <= n; i += 64) memcpy(dst + i, src + i, 64);
    memcpy(dst + i, src + i, n - i);
}

/* n elements of `es` bytes between strided runs (strides in elements); memcpy when both are
 * dense. */
void ix_copy_run(char *dst, int64_t dst_stride, const char *src, int64_t src_stride, int64_t n,
                 size_t es);

/* ---- walking the rows of strided operands ---- */
#define IX_MAXT 3

/* Visits the positions of shape[0..nd) in row-major order and keeps, for each of nt operands,
 * the element offset of the current position. nd == 0 is one position. */
typedef struct ix_walk {
    int nd, nt;
    int64_t shape[EM_MAX_DIMS];
    int64_t st[IX_MAXT][EM_MAX_DIMS];
    int64_t coord[EM_MAX_DIMS];
    int64_t base[IX_MAXT];
    int64_t off[IX_MAXT];
} ix_walk;

/* Sets up a walk; st[t] are the operands' strides over `shape`, base[t] their start offsets. */
void ix_walk_init(ix_walk *w, int nd, const int64_t *shape, int nt, const int64_t *const *st,
                  const int64_t *base);
/* Moves to position `pos` (linear, row-major). */
void ix_walk_seek(ix_walk *w, int64_t pos);

/* Moves to the next position. */
static inline void ix_walk_next(ix_walk *w) {
    for (int d = w->nd - 1; d >= 0; d--) {
        for (int t = 0; t < w->nt; t++) w->off[t] += w->st[t][d];
        if (++w->coord[d] < w->shape[d]) return;
        for (int t = 0; t < w->nt; t++) w->off[t] -= w->st[t][d] * w->shape[d];
        w->coord[d] = 0;
    }
}

/*
 * Drops dims of size 1 and merges neighbours that are contiguous with each other in every one of
 * the nt stride sets, so that the innermost run is as long as possible. Dim *keep (when keep is
 * not NULL and *keep >= 0) is never dropped or merged; *keep receives its new position. Returns
 * the new number of dims (0 when every dim had size 1 and none is kept).
 */
int ix_collapse(int nd, int64_t *shape, int nt, int64_t (*st)[EM_MAX_DIMS], int *keep);

/* Contiguous (row-major) strides of a shape. */
void ix_contiguous_strides(const int64_t *shape, int nd, int64_t *st);

/*
 * dst[pos] = src[pos] for every position of `shape`: both sides strided (elements), `es` bytes
 * per element, whole rows by memcpy when they are dense. Runs on the thread pool when large.
 */
void ix_copy_nd(char *dst, const int64_t *dst_st, const char *src, const int64_t *src_st,
                const int64_t *shape, int nd, size_t es);
/* Copies any CPU tensor into `dst` in row-major order. */
void ix_copy_to_contiguous(char *dst, const em_tensor *src);

/* ---- index values ---- */
/*
 * Finds the first value of `index` (row-major order) outside [0, size) — or outside [-size, size)
 * when `wrap` (negative values count from the end). Returns its linear position and stores the
 * value in *value; returns -1 when every value is in range.
 */
int64_t ix_find_bad(const em_tensor *index, int64_t size, bool wrap, int64_t *value);
/* "[i,j,k]": coordinates of linear position `pos` of a tensor of shape `t->shape`. */
char *ix_pos_str(const em_tensor *t, int64_t pos, char *buf, size_t n);
/*
 * Checks every value of `index` against a dim of `size` elements (dim `dim` of the indexed
 * tensor) and records EM_ERR_INDEX naming the first bad value, its position and the dim's size.
 */
em_status ix_check_index(em_ctx *c, const em_tensor *index, int64_t size, bool wrap, int dim);

/* Gathers whole slices of x along `dim` in the order given by idx[0..n) (each value already in
 * range) into the contiguous `out`: index_select and repeat_interleave. */
void ix_select_slices(em_tensor *out, const em_tensor *x, int dim, const int64_t *idx, int64_t n);

#endif

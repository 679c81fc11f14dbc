/* Helpers shared by the CPU indexing kernels (see index.h). */
#include <stdio.h>

#include "backends/cpu/index.h"

/* Copies below this many bytes stay on the calling thread. */
#define PAR_COPY_BYTES (256 << 10)
/* Bytes one pool task copies at least. */
#define PAR_GRAIN_BYTES (64 << 10)

void ix_copy_run(char *dst, int64_t ds, const char *src, int64_t ss, int64_t n, size_t es) {
    if (ds == 1 && ss == 1) {
        ix_copy_bytes(dst, src, (size_t)n * es);
        return;
    }
    if (ds == 1 && ss == 0) { /* a broadcast value (an expanded scalar): a fill */
        bool zero = true;
        for (size_t b = 0; b < es; b++) zero = zero && src[b] == 0;
        if (zero) {
            memset(dst, 0, (size_t)n * es);
            return;
        }
    }
    int64_t db = ds * (int64_t)es, sb = ss * (int64_t)es;
    switch (es) {
    case 1:
        for (int64_t k = 0; k < n; k++) dst[k * db] = src[k * sb];
        break;
    case 2:
        for (int64_t k = 0; k < n; k++) memcpy(dst + k * db, src + k * sb, 2);
        break;
    case 4:
        for (int64_t k = 0; k < n; k++) memcpy(dst + k * db, src + k * sb, 4);
        break;
    default:
        for (int64_t k = 0; k < n; k++) memcpy(dst + k * db, src + k * sb, 8);
        break;
    }
}

void ix_walk_init(ix_walk *w, int nd, const int64_t *shape, int nt, const int64_t *const *st,
                  const int64_t *base) {
    w->nd = nd;
    w->nt = nt;
    for (int d = 0; d < nd; d++) {
        w->shape[d] = shape[d];
        w->coord[d] = 0;
        for (int t = 0; t < nt; t++) w->st[t][d] = st[t][d];
    }
    for (int t = 0; t < nt; t++) w->off[t] = w->base[t] = base ? base[t] : 0;
}

void ix_walk_seek(ix_walk *w, int64_t pos) {
    for (int t = 0; t < w->nt; t++) w->off[t] = w->base[t];
    for (int d = w->nd - 1; d >= 0; d--) {
        int64_t c = pos % w->shape[d];
        pos /= w->shape[d];
        w->coord[d] = c;
        for (int t = 0; t < w->nt; t++) w->off[t] += c * w->st[t][d];
    }
}

int ix_collapse(int nd, int64_t *shape, int nt, int64_t (*st)[EM_MAX_DIMS], int *keep) {
    int k = keep ? *keep : -1, kept = -1, n = 0;
    for (int i = 0; i < nd; i++) {
        if (i != k && shape[i] == 1) continue;
        bool merge = n > 0 && i != k && n - 1 != kept;
        for (int t = 0; merge && t < nt; t++) merge = st[t][n - 1] == st[t][i] * shape[i];
        if (merge) {
            shape[n - 1] *= shape[i];
            for (int t = 0; t < nt; t++) st[t][n - 1] = st[t][i];
            continue;
        }
        shape[n] = shape[i];
        for (int t = 0; t < nt; t++) st[t][n] = st[t][i];
        if (i == k) kept = n;
        n++;
    }
    if (keep) *keep = kept;
    return n;
}

void ix_contiguous_strides(const int64_t *shape, int nd, int64_t *st) {
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        st[d] = s;
        s *= shape[d];
    }
}

typedef struct copy_job {
    int nd;
    int64_t shape[EM_MAX_DIMS];
    int64_t st[2][EM_MAX_DIMS]; /* 0: dst, 1: src */
    char *dst;
    const char *src;
    size_t es;
    int tj;      /* transposed copies: the dim dense in src, copied in tiles with the last one */
    int64_t nbj; /* tiles along tj */
} copy_job;

#define TILE 32

/* A transposed copy (src dense along dim tj, dst dense along the last dim) in TILE x TILE tiles
 * so that the lines read and written stay in L1; a task is one row of tiles. */
static void copy_tiles(void *user, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const copy_job *j = user;
    int last = j->nd - 1, tj = j->tj, nw = 0;
    int64_t wshape[EM_MAX_DIMS], wst[2][EM_MAX_DIMS];
    for (int i = 0; i < last; i++) {
        if (i == tj) continue;
        wshape[nw] = j->shape[i];
        wst[0][nw] = j->st[0][i];
        wst[1][nw] = j->st[1][i];
        nw++;
    }
    const int64_t *st[2] = {wst[0], wst[1]};
    ix_walk w;
    ix_walk_init(&w, nw, wshape, 2, st, NULL);
    int64_t row = begin / j->nbj, es = (int64_t)j->es;
    ix_walk_seek(&w, row);
    int64_t nj = j->shape[tj], nl = j->shape[last];
    int64_t dj = j->st[0][tj], sj = j->st[1][tj], dl = j->st[0][last], sl = j->st[1][last];
    for (int64_t t = begin; t < end; t++) {
        if (t / j->nbj != row) {
            ix_walk_next(&w);
            row++;
        }
        int64_t j0 = (t % j->nbj) * TILE, j1 = j0 + TILE < nj ? j0 + TILE : nj;
        for (int64_t l0 = 0; l0 < nl; l0 += TILE) {
            int64_t n = nl - l0 < TILE ? nl - l0 : TILE;
            for (int64_t k = j0; k < j1; k++)
                ix_copy_run(j->dst + (w.off[0] + k * dj + l0 * dl) * es, dl,
                            j->src + (w.off[1] + k * sj + l0 * sl) * es, sl, n, j->es);
        }
    }
}

static void copy_rows(void *user, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const copy_job *j = user;
    int last = j->nd - 1;
    const int64_t *st[2] = {j->st[0], j->st[1]};
    ix_walk w;
    ix_walk_init(&w, last, j->shape, 2, st, NULL);
    ix_walk_seek(&w, begin);
    int64_t n = j->shape[last], ds = j->st[0][last], ss = j->st[1][last];
    int64_t es = (int64_t)j->es;
    for (int64_t r = begin; r < end; r++) {
        ix_copy_run(j->dst + w.off[0] * es, ds, j->src + w.off[1] * es, ss, n, j->es);
        ix_walk_next(&w);
    }
}

void ix_copy_nd(char *dst, const int64_t *dst_st, const char *src, const int64_t *src_st,
                const int64_t *shape, int nd, size_t es) {
    copy_job j;
    int64_t numel = 1;
    for (int d = 0; d < nd; d++) {
        j.shape[d] = shape[d];
        j.st[0][d] = dst_st[d];
        j.st[1][d] = src_st[d];
        numel *= shape[d];
    }
    if (numel == 0) return;
    j.nd = ix_collapse(nd, j.shape, 2, j.st, NULL);
    if (j.nd == 0) {
        ix_copy1(dst, src, es);
        return;
    }
    j.dst = dst;
    j.src = src;
    j.es = es;
    int last = j.nd - 1;
    j.tj = -1;
    if (j.st[0][last] == 1 && j.st[1][last] != 1 && j.shape[last] >= 8)
        for (int i = 0; i < last; i++)
            if (j.st[1][i] == 1 && j.shape[i] >= 8) j.tj = i;
    if (j.tj >= 0) {
        j.nbj = (j.shape[j.tj] + TILE - 1) / TILE;
        int64_t tasks = numel / (j.shape[j.tj] * j.shape[last]) * j.nbj;
        int64_t per = TILE * j.shape[last] * (int64_t)es; /* bytes per task */
        int64_t grain = PAR_GRAIN_BYTES / per;
        if (numel * (int64_t)es < PAR_COPY_BYTES) copy_tiles(&j, 0, tasks, 0);
        else em_parallel_for(tasks, grain < 1 ? 1 : grain, copy_tiles, &j);
        return;
    }
    int64_t rows = numel / j.shape[j.nd - 1];
    int64_t row_bytes = j.shape[j.nd - 1] * (int64_t)es;
    if (numel * (int64_t)es < PAR_COPY_BYTES) {
        copy_rows(&j, 0, rows, 0);
        return;
    }
    int64_t grain = PAR_GRAIN_BYTES / row_bytes;
    em_parallel_for(rows, grain < 1 ? 1 : grain, copy_rows, &j);
}

void ix_copy_to_contiguous(char *dst, const em_tensor *src) {
    int64_t st[EM_MAX_DIMS];
    ix_contiguous_strides(src->shape, src->ndim, st);
    ix_copy_nd(dst, st, ix_at(src, src->offset), src->strides, src->shape, src->ndim,
               em_esize(src->dtype));
}

int64_t ix_find_bad(const em_tensor *index, int64_t size, bool wrap, int64_t *value) {
    if (index->numel == 0) return -1;
    int nd = index->ndim;
    int last = nd - 1;
    int64_t n = nd ? index->shape[last] : 1, s = nd ? index->strides[last] : 0;
    int64_t lo = wrap ? -size : 0;
    const char *base = (const char *)index->storage->data;
    const int64_t *st[1] = {index->strides};
    int64_t off0 = index->offset;
    ix_walk w;
    ix_walk_init(&w, nd ? last : 0, index->shape, 1, st, &off0);
    for (int64_t r = 0, pos = 0; pos < index->numel; r++) {
        for (int64_t k = 0; k < n; k++, pos++) {
            int64_t v = ix_load_index(base, index->dtype, w.off[0] + k * s);
            if (v < lo || v >= size) {
                *value = v;
                return pos;
            }
        }
        ix_walk_next(&w);
    }
    return -1;
}

char *ix_pos_str(const em_tensor *t, int64_t pos, char *buf, size_t n) {
    int64_t coord[EM_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        coord[d] = t->shape[d] ? pos % t->shape[d] : 0;
        pos = t->shape[d] ? pos / t->shape[d] : 0;
    }
    return em_shape_str(coord, t->ndim, buf, n);
}

em_status ix_check_index(em_ctx *c, const em_tensor *index, int64_t size, bool wrap, int dim) {
    int64_t v;
    int64_t pos = ix_find_bad(index, size, wrap, &v);
    if (pos < 0) return EM_OK;
    char where[128];
    ix_pos_str(index, pos, where, sizeof where);
    return em_op_fail(c, EM_ERR_INDEX,
                      "index %lld at position %s of the index is out of range for dim %d of "
                      "size %lld%s",
                      (long long)v, where, dim, (long long)size,
                      wrap ? " (negative values count from the end)" : "");
}

/* Tiled AutoencoderKL decoding and encoding as diffusers 0.42 does it (autoencoder_kl.py:
 * tiled_decode, _tiled_encode, blend_v, blend_h). The order matters and is kept: diffusers
 * blends in place, so a tile is blended with its upper neighbour and then with its left one,
 * and each neighbour is the already blended tile; the crop comes last. */
#include <stdlib.h>

#include "diffusion/vae_impl.h"

#define OP "AutoencoderKL tiling"

/* blend_v (dim 2) / blend_h (dim 3): the first e rows (columns) of b become
 * a[-e + y] * (1 - y / e) + b[y] * (y / e), e = min(a's size, b's size, extent). The two
 * weights are computed in double and rounded to the tensor's dtype each, as torch multiplies by
 * Python floats. */
static em_tensor *blend(em_ctx *c, em_tensor *a, em_tensor *b, int64_t extent, int dim) {
    int64_t na = em_tensor_dim(a, dim), nb = em_tensor_dim(b, dim);
    int64_t e = extent < na ? extent : na;
    if (nb < e) e = nb;
    if (e <= 0) return b;
    float *w = malloc(2 * (size_t)e * sizeof *w);
    if (!w) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "no memory for %lld blend weights", (long long)e);
        return NULL;
    }
    for (int64_t y = 0; y < e; y++) {
        w[y] = (float)(1.0 - (double)y / (double)e);
        w[e + y] = (float)((double)y / (double)e);
    }
    int64_t shape[4] = {1, 1, 1, 1};
    shape[dim] = e;
    em_device *dev = em_tensor_device(b);
    em_dtype dt = em_tensor_dtype(b);
    em_tensor *wa = em_cast(c, em_from_host_on(c, dev, EM_F32, 4, shape, w), dt);
    em_tensor *wb = em_cast(c, em_from_host_on(c, dev, EM_F32, 4, shape, w + e), dt);
    free(w);
    em_tensor *mixed = em_add(c, em_mul(c, em_narrow(c, a, dim, na - e, e), wa),
                              em_mul(c, em_narrow(c, b, dim, 0, e), wb));
    if (e == nb) return mixed;
    em_tensor *parts[2] = {mixed, em_narrow(c, b, dim, e, nb - e)};
    return em_cat(c, parts, 2, dim);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

em_tensor *vae_tiled(em_ctx *c, const em_vae *v, em_tensor *x, int64_t in_tile, int64_t out_tile,
                     double overlap, vae_tile_fn fn) {
    /* Python's int() of the products: truncation */
    int64_t stride = (int64_t)((double)in_tile * (1 - overlap));
    int64_t extent = (int64_t)((double)out_tile * overlap);
    int64_t limit = out_tile - extent;
    int64_t h = em_tensor_dim(x, 2), w = em_tensor_dim(x, 3);
    int64_t rows = (h + stride - 1) / stride, cols = (w + stride - 1) / stride;
    em_tensor **t = calloc((size_t)(rows * cols), sizeof *t);
    em_tensor **row = calloc((size_t)cols, sizeof *row); /* one row's cropped tiles */
    if (!t || !row) {
        free(t);
        free(row);
        em_ctx_fail(c, EM_ERR_OOM, OP, "no memory for %lld x %lld tiles", (long long)rows,
                    (long long)cols);
        return NULL;
    }
    for (int64_t i = 0; i < rows && !em_ctx_status(c); i++)
        for (int64_t j = 0; j < cols && !em_ctx_status(c); j++) {
            int64_t y = i * stride, xo = j * stride;
            em_tensor *tile = em_narrow(c, em_narrow(c, x, 2, y, min64(in_tile, h - y)), 3, xo,
                                        min64(in_tile, w - xo));
            t[i * cols + j] = fn(c, v, tile);
        }
    em_tensor *out = NULL;
    em_tensor **result_rows = calloc((size_t)rows, sizeof *result_rows);
    if (!result_rows) em_ctx_fail(c, EM_ERR_OOM, OP, "no memory for %lld rows", (long long)rows);
    for (int64_t i = 0; i < rows && !em_ctx_status(c); i++) {
        for (int64_t j = 0; j < cols && !em_ctx_status(c); j++) {
            em_tensor *tile = t[i * cols + j];
            if (i > 0) tile = blend(c, t[(i - 1) * cols + j], tile, extent, 2);
            if (j > 0) tile = blend(c, t[i * cols + j - 1], tile, extent, 3);
            t[i * cols + j] = tile; /* diffusers blends in place: neighbours see this one */
            if (!tile) break;
            row[j] = em_narrow(c, em_narrow(c, tile, 2, 0, min64(limit, em_tensor_dim(tile, 2))),
                               3, 0, min64(limit, em_tensor_dim(tile, 3)));
        }
        if (!em_ctx_status(c)) result_rows[i] = cols > 1 ? em_cat(c, row, (int)cols, 3) : row[0];
    }
    if (!em_ctx_status(c)) out = rows > 1 ? em_cat(c, result_rows, (int)rows, 2) : result_rows[0];
    free(result_rows);
    free(row);
    free(t);
    return em_ctx_status(c) ? NULL : out;
}

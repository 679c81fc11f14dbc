/* ember/png.h: checks, float-to-byte conversion as diffusers' numpy_to_pil, grids of images; the
 * reader's bytes to floats as diffusers' pil_to_numpy. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor_impl.h"
#include "io/png_impl.h"

#define OP "png_write"

static em_status check(em_ctx *c, const char *path, em_dtype dtype, int64_t h, int64_t w,
                       int ch) {
    if (!path || !*path) return EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "path is NULL or empty");
    if (dtype != EM_U8 && dtype != EM_F32)
        return EM_FAIL(c, EM_ERR_DTYPE, OP, "%s: pixels are %s: u8, or f32 in [0, 1]", path,
                       em_dtype_name(dtype));
    if (ch != 1 && ch != 3 && ch != 4)
        return EM_FAIL(c, EM_ERR_SHAPE, OP, "%s: %d channels: 1 (gray), 3 (RGB) or 4 (RGBA)",
                       path, ch);
    if (h < 1 || w < 1 || h > 65535 || w > 65535)
        return EM_FAIL(c, EM_ERR_SHAPE, OP, "%s: %lld x %lld pixels: 1..65535 a side", path,
                       (long long)h, (long long)w);
    return EM_OK;
}

/* f32 [0, 1] -> u8: clamp, then round(v * 255) half to even (numpy's round) */
static em_status to_u8(em_ctx *c, const char *path, const float *src, uint8_t *dst, int64_t n,
                       int64_t w, int ch) {
    for (int64_t i = 0; i < n; i++) {
        float v = src[i];
        if (isnan(v))
            return EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "%s: NaN at row %lld, column %lld, channel %d",
                           path, (long long)(i / ch / w), (long long)(i / ch % w), (int)(i % ch));
        v = v < 0 ? 0 : v > 1 ? 1 : v;
        dst[i] = (uint8_t)rintf(v * 255.0f);
    }
    return EM_OK;
}

em_status em_png_write(em_ctx *c, const char *path, const void *data, em_dtype dtype,
                       int64_t height, int64_t width, int channels) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (c->err.status) return c->err.status;
    em_status st = check(c, path, dtype, height, width, channels);
    if (st) return st;
    if (!data) return EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "%s: pixel data is NULL", path);
    int64_t n = height * width * channels;
    if (dtype == EM_U8) return em_png_save_u8(c, path, data, height, width, channels);
    uint8_t *px = malloc((size_t)n);
    if (!px) return EM_FAIL(c, EM_ERR_OOM, OP, "%s: cannot allocate %lld bytes", path, (long long)n);
    st = to_u8(c, path, data, px, n, width, channels);
    if (!st) st = em_png_save_u8(c, path, px, height, width, channels);
    free(px);
    return st;
}

em_status em_png_write_tensor(em_ctx *c, const char *path, em_tensor *t, int cols) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (c->err.status) return c->err.status;
    if (!t) return EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "the image tensor is NULL");
    int nd = em_tensor_ndim(t);
    char sig[96];
    if (nd != 3 && nd != 4)
        return EM_FAIL(c, EM_ERR_SHAPE, OP, "%s: images are %s: [H, W, C] or [N, H, W, C]",
                       path ? path : "?", em_tensor_sig(t, sig, sizeof sig));
    const int64_t *sh = em_tensor_shape(t);
    int64_t N = nd == 4 ? sh[0] : 1, H = sh[nd - 3], W = sh[nd - 2], C = sh[nd - 1];
    em_dtype dt = em_tensor_dtype(t);
    if (N < 1) return EM_FAIL(c, EM_ERR_SHAPE, OP, "%s: no images (%s)", path ? path : "?",
                              em_tensor_sig(t, sig, sizeof sig));
    int64_t gc = cols > 0 ? cols : (int64_t)ceil(sqrt((double)N));
    if (gc > N) gc = N;
    int64_t gr = (N + gc - 1) / gc;
    em_status st = check(c, path, dt, H * gr, W * gc, C > 4 ? 5 : (int)C);
    if (st) return st;
    size_t es = em_dtype_size(dt);
    size_t nb = (size_t)(N * H * W * C) * es;
    unsigned char *host = malloc(nb);
    unsigned char *grid = calloc((size_t)(gr * H * gc * W * C), es);
    if (!host || !grid) {
        free(host);
        free(grid);
        return EM_FAIL(c, EM_ERR_OOM, OP, "%s: cannot allocate the image", path);
    }
    st = em_to_host(c, t, host, nb);
    if (!st) {
        size_t row = (size_t)(W * C) * es;
        for (int64_t i = 0; i < N; i++) {
            int64_t gy = i / gc, gx = i % gc;
            for (int64_t y = 0; y < H; y++)
                memcpy(grid + ((size_t)((gy * H + y) * gc * W + gx * W) * (size_t)C) * es,
                       host + ((size_t)((i * H + y) * W * C)) * es, row);
        }
        st = em_png_write(c, path, grid, dt, H * gr, W * gc, (int)C);
    }
    free(host);
    free(grid);
    return st;
}

em_tensor *em_png_read(em_ctx *c, const char *path) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!path || !*path) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, "png_read", "path is NULL or empty");
        return NULL;
    }
    uint8_t *px;
    int64_t h, w;
    if (em_png_load_rgb8(c, path, &px, &h, &w) != EM_OK) return NULL;
    float *f = malloc((size_t)(h * w * 3) * sizeof *f);
    em_tensor *t = NULL;
    if (!f) {
        EM_FAIL(c, EM_ERR_OOM, "png_read", "%s: out of memory", path);
    } else {
        for (int64_t i = 0; i < h * w * 3; i++) f[i] = (float)px[i] / 255.0f;
        em_device *cpu = em_device_get(c, "cpu");
        t = cpu ? em_from_host_on(c, cpu, EM_F32, 3, (const int64_t[]){h, w, 3}, f) : NULL;
        free(f);
    }
    free(px);
    return t;
}

/* PNG through libpng's simplified API (png_image), which reports errors in its message field
 * rather than through longjmp. Encoding: in memory, written to a temporary file next to the
 * target, renamed into place. Decoding: every colour type read as 8-bit RGBA, the alpha then
 * dropped. */
#include <errno.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tensor_impl.h"
#include "io/png_impl.h"

bool em_png_available(void) { return true; }

em_status em_png_save_u8(em_ctx *c, const char *path, const uint8_t *px, int64_t height,
                         int64_t width, int channels) {
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)width;
    img.height = (png_uint_32)height;
    img.format = channels == 1 ? PNG_FORMAT_GRAY : channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_RGBA;
    png_alloc_size_t size = 0;
    png_int_32 stride = (png_int_32)(width * channels);
    if (!png_image_write_to_memory(&img, NULL, &size, 0, px, stride, NULL))
        return EM_FAIL(c, EM_ERR_INTERNAL, "png_write", "%s: libpng: %s", path, img.message);
    void *buf = malloc(size);
    if (!buf) return EM_FAIL(c, EM_ERR_OOM, "png_write", "%s: cannot allocate %zu bytes", path,
                             (size_t)size);
    if (!png_image_write_to_memory(&img, buf, &size, 0, px, stride, NULL)) {
        free(buf);
        return EM_FAIL(c, EM_ERR_INTERNAL, "png_write", "%s: libpng: %s", path, img.message);
    }
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp) {
        free(buf);
        return EM_FAIL(c, EM_ERR_OOM, "png_write", "out of memory");
    }
    snprintf(tmp, n, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    em_status st = EM_OK;
    if (!f) {
        st = EM_FAIL(c, EM_ERR_IO, "png_write", "cannot create %s: %s", path, strerror(errno));
    } else {
        size_t w = fwrite(buf, 1, size, f);
        int e1 = w == size ? 0 : errno;
        int e2 = fclose(f) ? errno : 0;
        if (w != size || e2)
            st = EM_FAIL(c, EM_ERR_IO, "png_write", "writing %s: %s (%zu of %zu bytes)", path,
                         strerror(w != size ? e1 : e2), w, (size_t)size);
        else if (rename(tmp, path))
            st = EM_FAIL(c, EM_ERR_IO, "png_write", "cannot create %s: %s", path, strerror(errno));
        if (st) remove(tmp);
    }
    free(tmp);
    free(buf);
    return st;
}

em_status em_png_load_rgb8(em_ctx *c, const char *path, uint8_t **px, int64_t *height,
                           int64_t *width) {
    *px = NULL;
    *height = *width = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return EM_FAIL(c, errno == ENOENT ? EM_ERR_NOT_FOUND : EM_ERR_IO, "png_read",
                       "cannot open %s: %s", path, strerror(errno));
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_stdio(&img, f)) {
        fclose(f);
        return EM_FAIL(c, EM_ERR_FORMAT, "png_read", "%s: not a PNG libpng can read: %s", path,
                       img.message);
    }
    /* RGBA, not RGB: without an alpha channel in the output libpng would composite the
     * image's alpha onto a background, where PIL's convert("RGB") keeps the colours */
    img.format = PNG_FORMAT_RGBA;
    size_t n = (size_t)img.width * img.height;
    uint8_t *rgba = n && n <= ((size_t)1 << 32) ? malloc(n * 4) : NULL;
    if (!rgba) {
        png_image_free(&img);
        fclose(f);
        return EM_FAIL(c, n ? EM_ERR_OOM : EM_ERR_FORMAT, "png_read", "%s: %u x %u pixels: %s",
                       path, img.width, img.height, n ? "out of memory" : "an empty image");
    }
    int ok = png_image_finish_read(&img, NULL, rgba, 0, NULL);
    fclose(f);
    if (!ok) {
        free(rgba);
        return EM_FAIL(c, EM_ERR_FORMAT, "png_read", "%s: libpng: %s", path, img.message);
    }
    for (size_t i = 0; i < n; i++) memmove(rgba + 3 * i, rgba + 4 * i, 3);
    *px = rgba;
    *height = img.height;
    *width = img.width;
    return EM_OK;
}

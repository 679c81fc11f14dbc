/* PNG encoding with libpng's simplified API (png_image), which reports errors in its message
 * field rather than through longjmp: encoded in memory, written to a temporary file next to the
 * target, renamed into place. */
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

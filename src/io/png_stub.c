/* A build without libpng (the aarch64 cross build): PNG input and output say so. */
#include "core/tensor_impl.h"
#include "io/png_impl.h"

bool em_png_available(void) { return false; }

em_status em_png_save_u8(em_ctx *c, const char *path, const uint8_t *px, int64_t height,
                         int64_t width, int channels) {
    (void)px;
    (void)height;
    (void)width;
    (void)channels;
    return EM_FAIL(c, EM_ERR_UNSUPPORTED, "png_write",
                   "%s: this build has no PNG support (install libpng-dev: scripts/deps.sh, and "
                   "rebuild)", path);
}

em_status em_png_load_rgb8(em_ctx *c, const char *path, uint8_t **px, int64_t *height,
                           int64_t *width) {
    *px = NULL;
    *height = *width = 0;
    return EM_FAIL(c, EM_ERR_UNSUPPORTED, "png_read",
                   "%s: this build has no PNG support (install libpng-dev: scripts/deps.sh, and "
                   "rebuild)", path);
}

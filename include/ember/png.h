/*
 * ember/png.h — images out as PNG, and in (through libpng).
 *
 * An image is row-major HWC: height rows of width pixels of 1 (gray), 3 (RGB) or 4 (RGBA)
 * channels, as u8 or as f32 in [0, 1] (what a diffusers pipeline returns with
 * output_type="np"). f32 values are clamped to [0, 1] and converted as diffusers' numpy_to_pil
 * does: round(v * 255) to the nearest, ties to even. A batch [N, H, W, C] is written as one grid
 * image, `cols` images per row (diffusers' make_image_grid), the empty cells black.
 *
 *     em_png_write(c, "out.png", pixels, EM_F32, 512, 512, 3);
 *     em_png_write_tensor(c, "grid.png", images, 4);   // images: f32 [16, 8, 8, 1]
 *
 * A build without libpng (the aarch64 cross build) refuses with EM_ERR_UNSUPPORTED.
 */
#ifndef EMBER_PNG_H
#define EMBER_PNG_H

#include "ember/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Writes `data` (height * width * channels elements of dtype EM_U8 or EM_F32, HWC) to `path`
 * as an 8-bit PNG. Errors (recorded in c and returned): a NULL argument, a dtype other than u8
 * or f32, channels not 1, 3 or 4, a size of zero or above 65535 pixels a side, a NaN value
 * (naming its position), and the file that cannot be written (naming the path and why). A
 * failed write leaves no partial file.
 */
EM_API em_status em_png_write(em_ctx *c, const char *path, const void *data, em_dtype dtype,
                              int64_t height, int64_t width, int channels);
/**
 * Writes a tensor (on any device: it is copied to the host) of shape [H, W, C], or [N, H, W, C]
 * as a grid of `cols` columns (cols <= 0: ceil(sqrt(N))), dtype u8 or f32. Same errors.
 */
EM_API em_status em_png_write_tensor(em_ctx *c, const char *path, em_tensor *images, int cols);
/**
 * Reads the PNG at `path` as f32 RGB [H, W, 3] in [0, 1] on the CPU, in c's current scope: the
 * values diffusers' image processor makes of a PIL image (`np.array(img.convert("RGB")) /
 * 255`): palette and gray images expanded to RGB, an alpha channel dropped, 16-bit samples
 * reduced to 8 bits by libpng. NULL with the error in c: the file missing or unreadable
 * (EM_ERR_NOT_FOUND / EM_ERR_IO), not a PNG or corrupt (EM_ERR_FORMAT, libpng's reason), a
 * build without libpng (EM_ERR_UNSUPPORTED).
 */
EM_API em_tensor *em_png_read(em_ctx *c, const char *path);
/** True when this build reads and writes PNG (it was built with libpng). */
EM_API bool em_png_available(void);

#ifdef __cplusplus
}
#endif
#endif

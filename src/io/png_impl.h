/* The PNG encoder behind ember/png.h: png_libpng.c with libpng, png_stub.c without. */
#ifndef EMBER_PNG_IMPL_H
#define EMBER_PNG_IMPL_H

#include "ember/png.h"

/* Writes 8-bit HWC pixels (validated by the caller) to path, atomically (a temporary file
 * renamed into place); the error, naming the path, is recorded in c. */
em_status em_png_save_u8(em_ctx *c, const char *path, const uint8_t *px, int64_t height,
                         int64_t width, int channels);

/* Reads an 8-bit RGB copy of the PNG at path (any colour type and bit depth: palette and gray
 * expanded, alpha dropped as PIL's convert("RGB") drops it) into *px (malloc'd, height * width
 * * 3 bytes, the caller frees); the error, naming the path, is recorded in c. */
em_status em_png_load_rgb8(em_ctx *c, const char *path, uint8_t **px, int64_t *height,
                           int64_t *width);

#endif

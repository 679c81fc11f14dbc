/*
 * PNG output (ember/png.h) read back through libpng's own reader: u8 pixels exactly, f32 pixels
 * as round(v * 255) (ties to even, clamped), a grid of images, and the refusals. PNG input:
 * Pillow's files in four colour types read as the values diffusers' image processor makes of
 * them (scripts/gen_png_fixtures.py), exactly; a round trip; missing, foreign and cut files.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ember/ember.h"
#include "ember/png.h"
#include "harness.h"

#ifdef EMBER_HAVE_PNG
#include <png.h>

/* the file through libpng's reader, as 8-bit pixels of its own format; NULL on failure */
static uint8_t *read_png(const char *path, int *w, int *h, int *ch) {
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&img, path)) {
        fprintf(stderr, "libpng cannot read %s: %s\n", path, img.message);
        return NULL;
    }
    *ch = PNG_IMAGE_SAMPLE_CHANNELS(img.format);
    *w = (int)img.width;
    *h = (int)img.height;
    uint8_t *px = malloc(PNG_IMAGE_SIZE(img));
    if (!px || !png_image_finish_read(&img, NULL, px, 0, NULL)) {
        fprintf(stderr, "libpng cannot decode %s: %s\n", path, img.message);
        free(px);
        png_image_free(&img);
        return NULL;
    }
    return px;
}

static const char *tmp_path(const char *name) {
    static char buf[256];
    snprintf(buf, sizeof buf, "%s/ember_test_png_%ld_%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (long)getpid(), name);
    return buf;
}

static void test_u8_roundtrip(void) {
    em_ctx *c = em_ctx_create();
    for (int ch = 1; ch <= 4; ch++) {
        if (ch == 2) continue;
        int W = 7, H = 5;
        uint8_t px[7 * 5 * 4];
        for (int i = 0; i < W * H * ch; i++) px[i] = (uint8_t)(i * 37 + ch);
        const char *p = tmp_path("u8.png");
        CHECK(em_png_write(c, p, px, EM_U8, H, W, ch) == EM_OK);
        int w, h, rc;
        uint8_t *got = read_png(p, &w, &h, &rc);
        CHECK(got && w == W && h == H && rc == ch);
        CHECK(got && !memcmp(got, px, (size_t)(W * H * ch)));
        free(got);
        remove(p);
    }
    em_ctx_free(c);
}

static void test_f32_and_grid(void) {
    em_ctx *c = em_ctx_create();
    /* values around the rounding points, out of range, and the two ends */
    float v[6] = {0.0f, 1.0f, 0.5f / 255.0f, 1.5f / 255.0f, -0.25f, 2.0f};
    uint8_t want[6];
    for (int i = 0; i < 6; i++) {
        float x = v[i] < 0 ? 0 : v[i] > 1 ? 1 : v[i];
        want[i] = (uint8_t)rintf(x * 255.0f);
    }
    const char *p = tmp_path("f32.png");
    CHECK(em_png_write(c, p, v, EM_F32, 2, 1, 3) == EM_OK);
    int w, h, ch;
    uint8_t *got = read_png(p, &w, &h, &ch);
    CHECK(got && w == 1 && h == 2 && ch == 3 && !memcmp(got, want, 6));
    free(got);
    remove(p);
    /* a grid: 5 gray 2x3 images, 3 per row, image i filled with i * 40 */
    uint8_t imgs[5 * 2 * 3];
    for (int i = 0; i < 5; i++) memset(imgs + i * 6, i * 40, 6);
    em_tensor *t = em_from_host(c, EM_U8, 4, (const int64_t[]){5, 2, 3, 1}, imgs);
    p = tmp_path("grid.png");
    CHECK(em_png_write_tensor(c, p, t, 3) == EM_OK);
    got = read_png(p, &w, &h, &ch);
    CHECK(got && w == 9 && h == 4 && ch == 1);
    if (got && w == 9 && h == 4) {
        CHECK(got[0] == 0 && got[3] == 40 && got[6 + 9] == 80); /* row 0: images 0, 1, 2 */
        CHECK(got[2 * 9] == 120 && got[2 * 9 + 3] == 160);       /* row 1: images 3, 4 */
        CHECK(got[3 * 9 + 8] == 0);                              /* the empty cell */
    }
    free(got);
    remove(p);
    em_ctx_free(c);
}

static void test_read_matches_pil(void) {
    em_ctx *c = em_ctx_create();
    em_test_bundle *b = em_test_bundle_load("png_ref");
    CHECK(b != NULL);
    const char *names[] = {"rgb", "rgba", "gray", "palette"};
    for (int i = 0; b && i < 4; i++) {
        char file[32];
        snprintf(file, sizeof file, "%s.png", names[i]);
        em_scope_push(c);
        em_tensor *t = em_png_read(c, em_test_fixture_path("png", file));
        CHECK_MSG(t != NULL, "%s: %s", file, em_ctx_error(c) ? em_ctx_error(c)->message : "");
        if (t) CHECK(em_tensor_device(t) == em_device_cpu() && em_tensor_dim(t, 2) == 3);
        em_test_allclose(c, t, em_test_bundle_get(b, c, names[i]), 0, 0, file);
        em_ctx_clear_error(c);
        em_scope_pop(c);
    }
    /* a round trip: what em_png_write writes, em_png_read reads */
    em_scope_push(c);
    float px[2 * 3 * 3];
    for (int i = 0; i < 18; i++) px[i] = (float)(i * 14) / 255.0f;
    const char *p = "/tmp/ember_png_read.png";
    CHECK(em_png_write(c, p, px, EM_F32, 2, 3, 3) == EM_OK);
    em_tensor *t = em_png_read(c, p);
    float back[18] = {0};
    CHECK(t && em_to_host_f32(c, t, back, 18) == EM_OK && !memcmp(back, px, sizeof px));
    /* a file cut short, a file that is not a PNG, a missing one */
    FILE *src = fopen(em_test_fixture_path("png", "rgb.png"), "rb");
    char head[60];
    size_t n = src ? fread(head, 1, sizeof head, src) : 0;
    if (src) fclose(src);
    FILE *f = fopen(p, "wb");
    if (f) {
        fwrite(head, 1, n, f);
        fclose(f);
    }
    CHECK(em_png_read(c, p) == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, p);
    CHECK(em_png_read(c, em_test_fixture_path("png", "../png_ref.json")) == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "not a PNG");
    CHECK(em_png_read(c, "/nonexistent-dir/x.png") == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "/nonexistent-dir/x.png");
    remove(p);
    em_scope_pop(c);
    em_test_bundle_free(b);
    em_ctx_free(c);
}
#endif

static void test_refusals(void) {
    em_ctx *c = em_ctx_create();
    float px[12] = {0};
    if (!em_png_available()) {
        CHECK(em_png_write(c, "/tmp/x.png", px, EM_F32, 2, 2, 3) == EM_ERR_UNSUPPORTED);
        CHECK_ERR(c, EM_ERR_UNSUPPORTED, "no PNG support");
        CHECK(em_png_read(c, "/tmp/x.png") == NULL);
        CHECK_ERR(c, EM_ERR_UNSUPPORTED, "no PNG support");
        em_ctx_free(c);
        return;
    }
    CHECK(em_png_write(c, "/nonexistent-dir/x.png", px, EM_F32, 2, 2, 3) == EM_ERR_IO);
    CHECK_ERR(c, EM_ERR_IO, "/nonexistent-dir/x.png");
    CHECK(em_png_write(c, "/tmp/x.png", px, EM_F32, 2, 2, 2) == EM_ERR_SHAPE);
    CHECK_ERR(c, EM_ERR_SHAPE, "2 channels");
    CHECK(em_png_write(c, "/tmp/x.png", px, EM_I32, 2, 2, 3) == EM_ERR_DTYPE);
    CHECK_ERR(c, EM_ERR_DTYPE, "i32");
    CHECK(em_png_write(c, "/tmp/x.png", px, EM_F32, 0, 2, 3) == EM_ERR_SHAPE);
    CHECK_ERR(c, EM_ERR_SHAPE, "0 x 2");
    px[7] = NAN;
    CHECK(em_png_write(c, "/tmp/x.png", px, EM_F32, 2, 2, 3) == EM_ERR_INVALID_ARG);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "NaN at row 1, column 0, channel 1");
    em_tensor *t = em_zeros(c, EM_F32, EM_SHAPE(4, 4));
    CHECK(em_png_write_tensor(c, "/tmp/x.png", t, 0) == EM_ERR_SHAPE);
    CHECK_ERR(c, EM_ERR_SHAPE, "[H, W, C]");
    em_ctx_free(c);
}

#ifdef EMBER_HAVE_PNG
EM_TEST_MAIN(T(test_u8_roundtrip), T(test_f32_and_grid), T(test_read_matches_pil),
             T(test_refusals))
#else
EM_TEST_MAIN(T(test_refusals))
#endif

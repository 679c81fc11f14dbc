/* Fuzzes the digits CSV reader of `ember train-ddpm` (src/train/digits_csv.c, gzip through zlib
 * or plain text): any file must give images or an error in the context naming the file and
 * line, never a crash, an out-of-bounds read or a leak. The bytes are a memfd read by path, so
 * the reader's own file and gzip handling run as they do on disk. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ember/ddpm.h"
#include "ember/ember.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static em_ctx *c;
    if (!c) c = em_ctx_create();
    if (size > 1 << 20 || size < 1) return 0;
    /* the first byte picks the side (1..8: digits are 8x8), the rest is the file */
    int64_t side = 1 + data[0] % 8;
    int fd = memfd_create("digits", 0);
    if (fd < 0) return 0;
    if (write(fd, data + 1, size - 1) != (ssize_t)(size - 1)) {
        close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    em_scope_push(c);
    int64_t *labels = NULL;
    em_tensor *x = em_digits_csv_load(c, path, side, &labels);
    if (x) { /* [N, 1, side, side] with N labels in 0..9 */
        const int64_t *sh = em_tensor_shape(x);
        INVARIANT(em_tensor_ndim(x) == 4 && sh[0] >= 1 && sh[1] == 1 && sh[2] == side &&
                  sh[3] == side && labels);
        for (int64_t i = 0; i < sh[0]; i++) INVARIANT(labels[i] >= 0 && labels[i] <= 9);
    }
    free(labels);
    em_scope_pop(c);
    em_ctx_clear_error(c);
    close(fd);
    return 0;
}

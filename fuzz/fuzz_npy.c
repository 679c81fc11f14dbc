/* Fuzzes the .npy readers (src/io/npy.c's header parser through the training data reader of
 * src/train/data.c, and the f32 reader of `ember image --latents`): any bytes must give ids /
 * a tensor or an error in the context, never a crash, an out-of-bounds read or a leak. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "io/npy.h"
#include "train/data_impl.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static em_ctx *c;
    if (!c) c = em_ctx_create();
    if (size > 1 << 20) return 0;
    /* a copy of exactly `size` bytes: reads past the end are ASan errors */
    unsigned char *b = malloc(size ? size : 1);
    if (!b) return 0;
    memcpy(b, data, size);
    em_train_data *d = em_train_data_from_npy(c, "fuzz.npy", b, size, 1000);
    em_train_data_free(d);
    em_ctx_clear_error(c);
    em_scope_push(c);
    em_npy_parse_f32(c, "fuzz", "fuzz.npy", b, size);
    em_scope_pop(c);
    em_ctx_clear_error(c);
    free(b);
    return 0;
}

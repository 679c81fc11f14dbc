/* libFuzzer target: arbitrary bytes as a .gguf file. Opens them in memory; when the file is
 * accepted, walks every metadata value (arrays of arrays included), checks each tensor info
 * against the bytes, and loads every tensor in its own type and as f32. Any crash, sanitizer
 * report or broken invariant is a bug; a rejected file must say why. */
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "ember/gguf.h"
#include "fuzz_util.h"


static void walk(const em_gguf_value *v) {
    int64_t i;
    double d;
    bool b;
    size_t len;
    switch (em_gguf_value_type(v)) {
    case EM_GGUF_STRING: {
        const char *s = em_gguf_value_str(v, &len);
        INVARIANT(s && s[len] == 0);
        break;
    }
    case EM_GGUF_ARRAY: {
        em_gguf_type et = em_gguf_array_type(v);
        for (uint64_t k = 0; k < em_gguf_array_len(v); k++) {
            if (et == EM_GGUF_ARRAY)
                walk(em_gguf_array_array(v, k));
            else if (et == EM_GGUF_STRING)
                INVARIANT(em_gguf_array_str(v, k, &len) != NULL);
            else
                (void)(em_gguf_array_int(v, k, &i) + em_gguf_array_float(v, k, &d));
        }
        INVARIANT(!em_gguf_array_str(v, em_gguf_array_len(v), &len));
        break;
    }
    default:
        (void)(em_gguf_value_int(v, &i) + em_gguf_value_float(v, &d) + em_gguf_value_bool(v, &b));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    em_ctx *c = em_ctx_create();
    if (!c) return 0;
    /* a private copy: zero-copy tensors may be written to, the fuzzer's input may not */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) goto out;
    memcpy(copy, data, size);
    em_gguf *g = em_gguf_open_memory(c, copy, size, "fuzz");
    if (!g) {
        INVARIANT(em_ctx_status(c) != EM_OK && em_ctx_error(c)->message[0]);
        goto out;
    }
    for (int64_t i = 0; i < em_gguf_kv_count(g); i++) {
        const char *key = em_gguf_kv_key(g, i);
        INVARIANT(key && em_gguf_find(g, key) == em_gguf_kv_value(g, i));
        walk(em_gguf_kv_value(g, i));
    }
    em_scope_push(c);
    for (int64_t i = 0; i < em_gguf_tensor_count(g); i++) {
        const em_gguf_tensor_info *ti = em_gguf_tensor_at(g, i);
        INVARIANT(ti && em_gguf_tensor_find(g, ti->name) == ti);
        INVARIANT(ti->file_offset <= size && ti->nbytes <= size - ti->file_offset);
        INVARIANT(ti->file_offset % em_gguf_alignment(g) == 0);
        em_tensor *t = em_gguf_load(c, g, ti->name, NULL);
        em_tensor *f = em_gguf_load_as(c, g, ti->name, EM_F32, NULL);
        if (t) INVARIANT(f && em_tensor_numel(t) == ti->numel && em_tensor_nbytes(t) == ti->nbytes);
        em_ctx_clear_error(c); /* types Ember refuses by name */
    }
    em_scope_pop(c); /* releases the loaded tensors before the bytes they point into */
    em_gguf_free(g);
out:
    em_ctx_free(c);
    free(copy);
    return 0;
}

/* libFuzzer target: arbitrary bytes as a .safetensors file. Opens them in memory, and when the
 * header is accepted loads every tensor (natural dtype and f32), then writes the checkpoint
 * back and checks that Ember reads its own output to the same bytes. Any crash, sanitizer
 * report or broken invariant is a bug.
 *
 * An input starting with '{' is also tried as "header JSON, NUL, data" with a correct length
 * prefix, so that mutations of the JSON reach the validation instead of the length check. */
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "ember/safetensors.h"
#include "io/safetensors/safetensors_impl.h"
#include "fuzz_util.h"


static void check(const uint8_t *data, size_t size) {
    em_ctx *c = em_ctx_create();
    if (!c) return;
    /* a private copy: zero-copy tensors may be written to, the fuzzer's input may not */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) goto out;
    memcpy(copy, data, size);
    em_safetensors *st = em_safetensors_open_memory(c, copy, size, "fuzz");
    if (!st) {
        /* a rejected file always says why */
        INVARIANT(em_ctx_status(c) != EM_OK && em_ctx_error(c)->message[0]);
        goto out;
    }
    em_safetensors_writer *w = em_safetensors_writer_create(c);
    em_scope_push(c);
    int64_t n = em_safetensors_count(st);
    for (int64_t i = 0; i < n; i++) {
        const em_safetensors_info *ti = em_safetensors_info_at(st, i);
        INVARIANT(ti && em_safetensors_find(st, ti->name) == ti);
        INVARIANT(ti->file_offset + ti->nbytes <= size);
        em_tensor *t = em_safetensors_load(c, st, ti->name, NULL);
        em_tensor *f = em_safetensors_load_as(c, st, ti->name, EM_F32, NULL);
        if (t) INVARIANT(em_tensor_numel(t) == ti->numel && f);
        em_ctx_clear_error(c); /* unloadable dtypes, U64 overflow, > 8 dims */
        size_t nb;
        const void *p = em_safetensors_data(c, st, ti->name, &nb);
        INVARIANT(p || !nb);
        em_safetensors_writer_add_raw(c, w, ti->name, ti->dtype, ti->ndim, ti->shape, p, nb);
        em_ctx_clear_error(c); /* e.g. a tensor named like the reserved __metadata__ */
    }
    for (int i = 0; i < em_safetensors_metadata_count(st); i++)
        em_safetensors_writer_set_metadata(c, w, em_safetensors_metadata_key(st, i),
                                           em_safetensors_metadata_value(st, i));
    void *out = NULL;
    size_t out_n = 0;
    if (em_safetensors_writer_serialize(c, w, &out, &out_n) == EM_OK) {
        em_safetensors *back = em_safetensors_open_memory(c, out, out_n, "rewritten");
        INVARIANT(back != NULL);
        for (int64_t i = 0; back && i < em_safetensors_count(back); i++) {
            const em_safetensors_info *b = em_safetensors_info_at(back, i);
            const em_safetensors_info *a = em_safetensors_find(st, b->name);
            INVARIANT(a && a->dtype == b->dtype && a->nbytes == b->nbytes);
            size_t na, nbb;
            const void *pa = em_safetensors_data(c, st, a->name, &na);
            const void *pb = em_safetensors_data(c, back, b->name, &nbb);
            INVARIANT(na == nbb && (!na || !memcmp(pa, pb, na)));
        }
        em_safetensors_free(back);
    }
    em_ctx_clear_error(c);
    em_free(out);
    em_scope_pop(c); /* releases the loaded tensors before the bytes they point into */
    em_safetensors_writer_free(w);
    em_safetensors_free(st);
out:
    em_ctx_free(c);
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    check(data, size);
    if (size && data[0] == '{') {
        const uint8_t *nul = memchr(data, 0, size);
        size_t hn = nul ? (size_t)(nul - data) : size;
        size_t rest = nul ? size - hn - 1 : 0;
        uint8_t *buf = malloc(8 + hn + rest);
        if (!buf) return 0;
        for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hn >> (8 * i));
        memcpy(buf + 8, data, hn);
        if (rest) memcpy(buf + 8 + hn, nul + 1, rest);
        check(buf, 8 + hn + rest);
        free(buf);
    }
    return 0;
}

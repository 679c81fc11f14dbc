/*
 * Training data (ember/train.h): token ids from a .npy array of integers or from text tokenized
 * with the model's tokenizer. The .npy reader follows numpy's format spec (magic, version 1-3
 * header, a Python dict literal with descr / fortran_order / shape).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/npy.h"
#include "train/data_impl.h"

struct em_train_data {
    int64_t n;
    int64_t *ids;
};

static em_train_data *data_new(em_ctx *c, int64_t n, const char *name) {
    em_train_data *d = calloc(1, sizeof *d);
    if (d) d->ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *d->ids);
    if (!d || !d->ids) {
        em_train_data_free(d);
        em_ctx_fail(c, EM_ERR_OOM, "train_data", "%s: %lld ids: out of memory", name, (long long)n);
        return NULL;
    }
    d->n = n;
    return d;
}

/* Checks every id against the vocabulary (vocab <= 0: none). */
static bool check_vocab(em_ctx *c, const em_train_data *d, int64_t vocab, const char *name) {
    for (int64_t i = 0; vocab > 0 && i < d->n; i++)
        if (d->ids[i] < 0 || d->ids[i] >= vocab) {
            em_ctx_fail(c, EM_ERR_INDEX, "train_data",
                        "%s: id %lld at position %lld is outside the model's vocabulary [0, %lld)",
                        name, (long long)d->ids[i], (long long)i, (long long)vocab);
            return false;
        }
    return true;
}

em_train_data *em_train_data_from_ids(em_ctx *c, const int64_t *ids, int64_t n, int64_t vocab,
                                      const char *name) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!name) name = "ids";
    if (n < 0 || (n && !ids)) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "train_data", "%s: %lld ids", name, (long long)n);
        return NULL;
    }
    em_train_data *d = data_new(c, n, name);
    if (!d) return NULL;
    if (n) memcpy(d->ids, ids, (size_t)n * sizeof *ids);
    if (!check_vocab(c, d, vocab, name)) {
        em_train_data_free(d);
        return NULL;
    }
    return d;
}

static char *read_file(em_ctx *c, const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        em_ctx_fail(c, EM_ERR_IO, "train_data", "%s: cannot open the data file", path);
        return NULL;
    }
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                em_ctx_fail(c, EM_ERR_OOM, "train_data", "%s: out of memory", path);
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        em_ctx_fail(c, EM_ERR_IO, "train_data", "%s: read error", path);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

em_train_data *em_train_data_from_npy(em_ctx *c, const char *path, const unsigned char *b,
                                      size_t len, int64_t vocab) {
#define BAD(...) (em_ctx_fail(c, EM_ERR_FORMAT, "train_data", __VA_ARGS__), (em_train_data *)NULL)
    em_npy_header h;
    if (em_npy_parse_header(c, "train_data", path, b, len, &h) != EM_OK) return NULL;
    char order = h.order, kind = h.kind;
    int size = h.size;
    bool sizes_ok = size == 1 || size == 2 || size == 4 || size == 8;
    if ((kind != 'i' && kind != 'u') || !sizes_ok || !order || !strchr("<>|=", order)) {
        em_ctx_fail(c, EM_ERR_DTYPE, "train_data",
                    "%s: the .npy array's dtype is '%s': token ids must be integers "
                    "(int8 .. int64, uint8 .. uint64)", path, h.descr);
        return NULL;
    }
    if (h.fortran) return BAD("%s: a Fortran-order .npy array", path);
    if (h.ndim != 1) {
        em_ctx_fail(c, EM_ERR_SHAPE, "train_data",
                    "%s: the .npy array's shape is %.40s: a 1-D array of ids expected", path,
                    h.shape_text);
        return NULL;
    }
    long long n = h.shape[0];
    size_t data = h.data;
    if ((size_t)n > (len - data) / (size_t)size)
        return BAD("%s: the .npy file holds %zu bytes of data, its header says %lld x %d", path,
                   len - data, n, size);
    em_train_data *d = data_new(c, n, path);
    if (!d) return NULL;
    bool big = order == '>';
    for (long long i = 0; i < n; i++) {
        const unsigned char *p = b + data + (size_t)i * (size_t)size;
        uint64_t u = 0;
        for (int k = 0; k < size; k++) u |= (uint64_t)p[big ? size - 1 - k : k] << (8 * k);
        int64_t v;
        if (kind == 'i' && size < 8 && (u >> (8 * size - 1)) & 1) /* sign-extend */
            v = (int64_t)(u | ~((UINT64_C(1) << (8 * size)) - 1));
        else if (kind == 'u' && u > (uint64_t)INT64_MAX)
            v = -1; /* outside any vocabulary: reported below */
        else
            v = (int64_t)u;
        d->ids[i] = v;
    }
    if (!check_vocab(c, d, vocab, path)) {
        em_train_data_free(d);
        return NULL;
    }
    return d;
#undef BAD
}

em_train_data *em_train_data_load(em_ctx *c, const char *path, const em_tokenizer *tok,
                                  int64_t vocab) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!path) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "train_data", "NULL path");
        return NULL;
    }
    size_t len = 0;
    char *buf = read_file(c, path, &len);
    if (!buf) return NULL;
    size_t pl = strlen(path);
    bool npy = (pl > 4 && !strcmp(path + pl - 4, ".npy")) ||
               (len >= 6 && !memcmp(buf, "\x93NUMPY", 6));
    em_train_data *d = NULL;
    if (npy) {
        d = em_train_data_from_npy(c, path, (const unsigned char *)buf, len, vocab);
    } else if (!tok) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "train_data",
                    "%s is text and the model has no tokenizer: give a .npy array of ids", path);
    } else {
        em_token *ids = NULL;
        size_t n = 0;
        if (em_tokenizer_encode(c, tok, buf, len, false, &ids, &n) == EM_OK) {
            d = data_new(c, (int64_t)n, path);
            for (size_t i = 0; d && i < n; i++) d->ids[i] = (int64_t)ids[i];
            if (d && !check_vocab(c, d, vocab, path)) {
                em_train_data_free(d);
                d = NULL;
            }
        } else if (em_ctx_error(c)) {
            em_ctx_fail(c, em_ctx_status(c), "train_data", "%s: tokenizing failed", path);
        }
        em_free(ids);
    }
    free(buf);
    return d;
}

void em_train_data_free(em_train_data *d) {
    if (!d) return;
    free(d->ids);
    free(d);
}

int64_t em_train_data_len(const em_train_data *d) { return d ? d->n : 0; }
const int64_t *em_train_data_ids(const em_train_data *d) { return d ? d->ids : NULL; }

/* .npy arrays (numpy's format, versions 1-3): the header parser every reader shares (training
 * ids, initial latents), an f32 reader and an f32 writer. Little-endian float32 in C order is
 * what numpy writes by default and what diffusers' images are. */
#ifndef EMBER_IO_NPY_H
#define EMBER_IO_NPY_H

#include <stdbool.h>
#include <stddef.h>

#include "ember/tensor.h"

#define EM_NPY_MAX_DIMS 8

typedef struct em_npy_header {
    char descr[16];   /* "<f4" */
    char order;       /* '<', '>', '|' or '=' */
    char kind;        /* 'f', 'i', 'u', ... */
    int size;         /* bytes per element (atoi of the descr's digits) */
    bool fortran;     /* fortran_order True */
    int ndim;         /* -1: a shape this parser does not read (shape_text says what it was) */
    int64_t shape[EM_NPY_MAX_DIMS];
    char shape_text[48]; /* the start of the header's shape value, for messages */
    size_t data;      /* offset of the first element */
} em_npy_header;

/* Parses the header of the .npy bytes b[0..len) (`path` names them in errors, recorded under
 * `op` as EM_ERR_FORMAT: not a .npy file, an unknown version, a truncated header, a header
 * without descr / fortran_order / shape). The dtype, the order and the data size are the
 * caller's to check (em_npy_data_fits). */
em_status em_npy_parse_header(em_ctx *c, const char *op, const char *path,
                              const unsigned char *b, size_t len, em_npy_header *h);
/* Elements of the header's shape (-1 for an unread shape or an overflow). */
int64_t em_npy_numel(const em_npy_header *h);

/* A CPU f32 tensor of the array in b[0..len): the array must be '<f4' (or '=f4' here), C order.
 * NULL with the error (EM_ERR_FORMAT / EM_ERR_DTYPE, naming the path) in c. */
em_tensor *em_npy_parse_f32(em_ctx *c, const char *op, const char *path, const unsigned char *b,
                            size_t len);
/* em_npy_parse_f32 of a file (at most 1 GiB). */
em_tensor *em_npy_load_f32(em_ctx *c, const char *op, const char *path);
/* Writes t (any device, converted to f32) to `path` as a version 1.0 '<f4' C-order .npy, via a
 * temporary file renamed into place (no partial file on failure). The status is returned. */
em_status em_npy_save_f32(em_ctx *c, const char *op, const char *path, em_tensor *t);

#endif

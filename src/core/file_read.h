/* Reading a whole file into memory: the one helper every reader of small files uses (configs,
 * tokenizers, fixtures, prompt files). Large checkpoints are mapped instead (safetensors). */
#ifndef EMBER_CORE_FILE_READ_H
#define EMBER_CORE_FILE_READ_H

#include <stdbool.h>
#include <stdio.h>

#include "ember/core.h"

/*
 * Reads `path` ("-" is standard input) whole into a malloc'd buffer with a terminating NUL (not
 * counted in *len), refusing anything larger than max_bytes. On failure returns NULL and
 * records, under `op`, EM_ERR_NOT_FOUND (no such file), EM_ERR_IO (cannot open or read, or a
 * directory), EM_ERR_FORMAT (larger than max_bytes) or EM_ERR_OOM, naming the path. When
 * `missing` is not NULL a file that does not exist is not an error: *missing is set, NULL is
 * returned and nothing is recorded. The caller frees the buffer.
 */
char *em_file_read(em_ctx *c, const char *op, const char *path, size_t max_bytes, size_t *len,
                   bool *missing);
/* The same for an open stream, read to its end (the stream stays open). */
char *em_file_read_stream(em_ctx *c, const char *op, FILE *f, const char *name, size_t max_bytes,
                          size_t *len);

#endif

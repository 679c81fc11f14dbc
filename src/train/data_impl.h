/* The .npy reader of training data (data.c), on bytes in memory: for the fuzz target. */
#ifndef EMBER_TRAIN_DATA_IMPL_H
#define EMBER_TRAIN_DATA_IMPL_H

#include "ember/train.h"

/* The ids of a .npy file's bytes b[0..len) (`path` names it in errors); the errors of
 * em_train_data_load. */
em_train_data *em_train_data_from_npy(em_ctx *c, const char *path, const unsigned char *b,
                                      size_t len, int64_t vocab);

#endif

/* Creating a folder and its missing parents (mkdir -p): the one helper every writer of folders
 * uses (checkpoints, diffusers folders, the Hub cache, the compile cache). */
#ifndef EMBER_CORE_MAKE_DIRS_H
#define EMBER_CORE_MAKE_DIRS_H

#include "ember/core.h"

/*
 * Creates `dir` and each missing parent with mode 0777 (less the umask); folders that exist are
 * fine. On failure records, under `op`, EM_ERR_IO naming the first path that could not be
 * created and why, or EM_ERR_INVALID_ARG for an empty dir. c may be NULL (best effort: the
 * status is still returned).
 */
em_status em_make_dirs(em_ctx *c, const char *op, const char *dir);

#endif

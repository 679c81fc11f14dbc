/* model_index.json from bytes in memory: for the fuzz target (fuzz/fuzz_model_index.c). */
#ifndef EMBER_DIFFUSION_PIPELINE_IMPL_H
#define EMBER_DIFFUSION_PIPELINE_IMPL_H

#include "ember/diffusion.h"

/* em_pipeline_index_load on the text[0..len) of a model_index.json: `file` names it in errors,
 * `dir` is the folder whose component sub-folders are checked. out is zeroed on failure. */
em_status em_pipeline_index_parse(em_ctx *c, const char *text, size_t len, const char *file,
                                  const char *dir, em_pipeline_index *out);

#endif

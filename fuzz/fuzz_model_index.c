/* libFuzzer target: arbitrary bytes as a pipeline folder's model_index.json, checked against
 * the committed folder tests/fixtures/diffusion/ddpm_attn (the fuzzer runs from the repository
 * root). Either they are rejected with a message and the index is zeroed, or every component
 * the pipeline class needs is resolved. */
#include "diffusion/pipeline_impl.h"
#include "ember/ember.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    em_ctx *c = em_ctx_create();
    if (!c) return 0;
    em_pipeline_index idx;
    memset(&idx, 0, sizeof idx);
    if (em_pipeline_index_parse(c, (const char *)data, size, "fuzz/model_index.json",
                                "tests/fixtures/diffusion/ddpm_attn", &idx) == EM_OK) {
        INVARIANT(idx.pipeline == EM_PIPELINE_DDPM || idx.pipeline == EM_PIPELINE_DDIM);
        INVARIANT(idx.dir && idx.unet_dir && idx.scheduler_dir && idx.scheduler_config);
        INVARIANT(!strcmp(idx.unet_class, "UNet2DModel") && idx.scheduler_class[0]);
        em_pipeline_index_free(&idx);
    } else {
        INVARIANT(em_ctx_error(c) && em_ctx_error(c)->message[0]);
        INVARIANT(idx.dir == NULL && idx.unet_dir == NULL);
        em_ctx_clear_error(c);
    }
    em_ctx_free(c);
    return 0;
}

/* libFuzzer target: arbitrary bytes as an SD3Transformer2DModel config.json. Either they are
 * rejected with a message and a zeroed struct, or the sizes the loader and the forward divide
 * and allocate by are positive, the context stream is the inner width, and the sin-cos table
 * splits in four. */
#include <stdlib.h>

#include "ember/ember.h"
#include "ember/sd3.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    em_ctx *c = em_ctx_create();
    if (!c) return 0;
    em_sd3_config cfg;
    if (em_sd3_config_parse(c, (const char *)data, size, "fuzz.json", &cfg) == EM_OK) {
        int64_t inner = cfg.num_attention_heads * cfg.attention_head_dim;
        INVARIANT(cfg.num_attention_heads > 0 && cfg.attention_head_dim > 0);
        INVARIANT(cfg.in_channels > 0 && cfg.out_channels > 0 && cfg.num_layers > 0);
        INVARIANT(cfg.sample_size > 0 && cfg.patch_size > 0 && cfg.pos_embed_max_size > 0);
        INVARIANT(cfg.joint_attention_dim > 0 && cfg.pooled_projection_dim > 0);
        INVARIANT(cfg.caption_projection_dim == inner && inner % 4 == 0);
    } else {
        INVARIANT(em_ctx_error(c) && em_ctx_error(c)->message[0]);
        INVARIANT(cfg.num_layers == 0 && cfg.in_channels == 0);
        em_ctx_clear_error(c);
    }
    em_ctx_free(c);
    return 0;
}
